#!/bin/bash
# The synchronous-write tail (issue 27 item 3), new vs old stoa interleaved
# (alternating order): the fsync floor (no server), standalone setData with
# 1x1, 8x1 and 8x16 sessions x in flight, and a 3-member ensemble with 1x1
# (client on a follower) and 9x16. Prints one line per run and the medians. Bash only: the device
# machine has nothing installed. Every server is stopped by PID; each run is
# bounded by `timeout`.
set -u
DIR=$(cd "$(dirname "$0")" && pwd)
# Binaries $DIR/stoa-NAME; the first is the baseline (ratios against it).
# EXTRA_CFG_<NAME>: zoo.cfg lines (separated by ;) for that name's servers,
# so two names may be one binary under two configurations. ENSEMBLE_ONLY=1
# skips the standalone cells.
NAMES=${NAMES:-old new}
ENSEMBLE_ONLY=${ENSEMBLE_ONLY:-0}
# The load generator: the first binary's `bench`.
NEW=$DIR/stoa-${NAMES%% *}
PAIRS=${PAIRS:-6}
DUR=${DUR:-4}
WARM=${WARM:-1}
CLIENT_THREADS=${CLIENT_THREADS:-1}
# e.g. SERVER_PIN="taskset -c 0-7" CLIENT_PIN="taskset -c 8-15"
SERVER_PIN=${SERVER_PIN:-}
CLIENT_PIN=${CLIENT_PIN:-}
WORK=$(mktemp -d /tmp/stoa-cmp.XXXXXX)
OUT=${OUT:-$WORK}
PIDS=()

cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  PIDS=()
}
trap cleanup EXIT

port_free() { ! (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }
pick_ports() { # n -> PORTS array of free ports
  PORTS=(); local p=$((20000 + RANDOM % 20000))
  while [ ${#PORTS[@]} -lt "$1" ]; do
    p=$((p + 1)); port_free $p && PORTS+=($p)
  done
}
srvr() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1 && printf srvr >&3 && cat <&3" 2>/dev/null; }

start() { # binary members [extra cfg] -> CLIENTS, PIDS
  local bin=$1 n=$2 extra=${3:-} base i j
  base=$(mktemp -d "$WORK/run.XXXX")
  pick_ports $((3 * n)); CLIENTS=()
  for ((i = 0; i < n; i++)); do
    local d=$base/m$((i + 1)); mkdir -p "$d"
    CLIENTS+=(${PORTS[$i]})
    {
      echo tickTime=2000; echo "dataDir=$d"; echo "clientPort=${PORTS[$i]}"
      echo clientPortAddress=127.0.0.1; echo '4lw.commands.whitelist=*'
      echo admin.enableServer=false
      [ -n "$extra" ] && tr ';' '\n' <<<"$extra"
      if [ "$n" -gt 1 ]; then
        for ((j = 0; j < n; j++)); do
          echo "server.$((j + 1))=127.0.0.1:${PORTS[$((n + j))]}:${PORTS[$((2 * n + j))]}"
        done
      fi
    } >"$d/zoo.cfg"
    [ "$n" -gt 1 ] && echo $((i + 1)) >"$d/myid"
    $SERVER_PIN "$bin" server --config "$d/zoo.cfg" >"$d/log" 2>&1 &
    PIDS+=($!)
  done
  local deadline=$((SECONDS + 30)) ready
  while [ $SECONDS -lt $deadline ]; do
    ready=0; local leader=0
    for p in "${CLIENTS[@]}"; do
      s=$(srvr "$p"); [[ $s == *Mode:* ]] && ready=$((ready + 1))
      [[ $s == *"Mode: leader"* || $s == *"Mode: standalone"* ]] && leader=1
    done
    [ $ready -eq "$n" ] && [ $leader -eq 1 ] && return 0
    sleep 0.2
  done
  echo "servers did not come up" >&2; return 1
}

field() { grep -o "\"$1\": *[0-9.]*" "$2" 2>/dev/null | head -1 | grep -o '[0-9.]*$' || echo nan; }

# sessions outstanding [servers] -> "ops/s p50us p99us cpu-us/op"
bench() {
  local servers=${3:-} pids="" p json=$WORK/b.json
  if [ -z "$servers" ]; then
    for p in "${CLIENTS[@]}"; do servers+="${servers:+,}127.0.0.1:$p"; done
  fi
  for p in "${PIDS[@]}"; do pids+="${pids:+,}$p"; done
  rm -f "$json"
  timeout 60 "$NEW" bench --servers "$servers" --sessions "$1" --outstanding "$2" \
    --mix set=100 --duration "$DUR" --warmup "$WARM" --json "$json" --quiet --server-pid "$pids" \
    >/dev/null 2>&1
  echo "$(field throughput_ops_s "$json") $(field p50 "$json") $(field p99 "$json") $(field server_cpu_us_per_op "$json")"
}

floor() {
  local json=$WORK/f.json d=$WORK/floor; mkdir -p "$d"; rm -f "$json"
  timeout 60 "$NEW" bench --target file --dir "$d" --duration "$DUR" --warmup "$WARM" \
    --json "$json" --quiet >/dev/null 2>&1
  echo "$(field throughput_ops_s "$json") $(field p50 "$json") $(field p99 "$json") 0"
}

follower_first() { # -> servers string with a follower first
  local p lead="" rest=""
  for p in "${CLIENTS[@]}"; do
    if [[ $(srvr "$p") == *"Mode: leader"* ]]; then lead=127.0.0.1:$p; else rest+="${rest:+,}127.0.0.1:$p"; fi
  done
  echo "$rest,$lead"
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

CELLS="s1x1 s8x1 s8x16 e1x1 e9x16"
echo "cores: $(nproc); pairs $PAIRS, ${DUR}s measured after ${WARM}s"
record() { # name cell "ops p50 p99 cpu"
  set -- "$1" "$2" $3
  echo "$3" >>"$OUT/$1.$2.ops"; echo "$4" >>"$OUT/$1.$2.p50"; echo "$5" >>"$OUT/$1.$2.p99"; echo "$6" >>"$OUT/$1.$2.cpu"
}
for ((rep = 0; rep < PAIRS; rep++)); do
  f=$(floor); record floor fsync "$f"; echo "rep $rep floor: $f (ops/s p50us p99us)"
  # Rotated each rep, so no binary always runs first.
  read -ra names <<<"$NAMES"; k=$((rep % ${#names[@]})); order="${names[*]:k} ${names[*]:0:k}"
  for name in $order; do
    bin=$DIR/stoa-$name
    extra_var=EXTRA_CFG_$name; extra=${!extra_var:-}
    a="nan nan nan nan"; b=$a; c=$a
    if [ "$ENSEMBLE_ONLY" != 1 ]; then
      start "$bin" 1 "$extra" || exit 1
      a=$(bench 1 1); b=$(bench 8 1); c=$(bench 8 16)
      cleanup
    fi
    start "$bin" 3 "$extra" || exit 1
    sleep 1
    d=$(bench 1 1 "$(follower_first)"); e=$(bench 9 16)
    cleanup
    record $name s1x1 "$a"; record $name s8x1 "$b"; record $name s8x16 "$c"
    record $name e1x1 "$d"; record $name e9x16 "$e"
    echo "rep $rep $name: s1x1 [$a] s8x1 [$b] s8x16 [$c] e1x1 [$d] e9x16 [$e] (ops/s p50us p99us cpu-us/op)"
  done
done
echo
[ "$ENSEMBLE_ONLY" = 1 ] && CELLS="e1x1 e9x16"
echo "floor fsync: ops $(median <"$OUT/floor.fsync.ops") p50 $(median <"$OUT/floor.fsync.p50") p99 $(median <"$OUT/floor.fsync.p99")"
for cell in $CELLS; do for m in ops p50 p99 cpu; do
  line="$cell $m:"; o=$(median <"$OUT/${NAMES%% *}.$cell.$m")
  for name in $NAMES; do
    n=$(median <"$OUT/$name.$cell.$m")
    line+=" $name $n ($(awk -v a="$n" -v b="$o" 'BEGIN {printf "%.3f", a / b}'))"
  done
  echo "$line"
done; done
rm -rf "$WORK/run."*
[ "$OUT" = "$WORK" ] && rm -rf "$WORK"
