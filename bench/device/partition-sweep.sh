#!/bin/bash
# The partition sweep (issue 23): a standalone stoa with P partitions
# (partition.groups=/g1,../g<P-1>) driven by P load generators, generator k
# on its own subtree /g<k> (/g0 stays on partition 0), against the same P
# generators on a server of one partition (the same load, one partition).
# Writes (set=100) and reads (get=100), 100-byte values. Prints one line per
# run, then medians and ratios. Bash only: the device machine has nothing
# installed. Every server is stopped by PID; every run is bounded by
# `timeout`. THREADS=N sets partition.threads=N on every server (unset:
# the default, auto), so a second run with THREADS=0 shows what the lent
# partitions return; OWNED=yes sets partition.owned=yes (each core on a
# thread of its own between turns), and POLL=N with it partition.pollMicros=N
# (each such thread looks for its next job N µs before it parks, so the
# engine's sends wake nobody). IO=N sets io.threads=N (unset: the
# default, 0: every client socket on the engine's thread). Each run's line
# splits the server's CPU by thread (the engine's, the WAL writer's, the
# I/O threads' together, the partition workers' and owned threads'
# together): a thread near
# 1.00 core is what bounds that run (docs/partitions.md expects the
# engine's, not the WAL's).
set -u
DIR=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$DIR/stoa}
PARTS=${PARTS:-1 2 4 8 12}
ROUNDS=${ROUNDS:-2}
DUR=${DUR:-3}
WARM=${WARM:-1}
SESSIONS=${SESSIONS:-4}
OUTSTANDING=${OUTSTANDING:-32}
MIXES=${MIXES:-set=100 get=100}
WORK=$(mktemp -d /tmp/stoa-sweep.XXXXXX)
OUT=${OUT:-$WORK}
# shellcheck source=lib.sh
. "$DIR/lib.sh"
trap cleanup EXIT


start() { # partitions -> PORT, SERVER_PID
  local parts=$1 d groups="" k
  d=$(mktemp -d "$WORK/run.XXXX")
  for ((k = 1; k < parts; k++)); do groups+="${groups:+,}/g$k"; done
  base_cfg "$d" >"$d/zoo.cfg"
  {
    echo "partitions=$parts"
    [ -n "$groups" ] && echo "partition.groups=$groups"
    [ -n "${THREADS:-}" ] && echo "partition.threads=$THREADS"
    [ -n "${OWNED:-}" ] && echo "partition.owned=$OWNED"
    [ -n "${POLL:-}" ] && echo "partition.pollMicros=$POLL"
    [ -n "${IO:-}" ] && echo "io.threads=$IO"
  } >>"$d/zoo.cfg"
  start_server "$d" "server of $parts partitions"
}


# generators mix -> "ops/s server-cores engine-cores wal-cores workers-cores io-cores":
# `generators` load generators at once, generator k on /g<k>; the server's
# CPU over the whole window, and its engine thread's, WAL thread's and
# partition workers' (which thread bounds the run: one near 1.00 core).
drive() {
  local gens=$1 mix=$2 k pid before after t0 t1 total=0 gen_pids=() eng0 wal0 wrk0 io0
  eng0=$(engine_ticks "$SERVER_PID"); wal0=$(thread_ticks "$SERVER_PID" stoa-wal)
  io0=$(thread_ticks "$SERVER_PID" stoa-io)
  wrk0=$(($(thread_ticks "$SERVER_PID" 'stoa-part-*') + $(thread_ticks "$SERVER_PID" 'stoa-own-*')))
  before=$(cpu_ticks "$SERVER_PID"); t0=$(date +%s%N)
  for ((k = 0; k < gens; k++)); do
    timeout 60 "$BIN" bench --servers "127.0.0.1:$PORT" --root "/g$k" --sessions "$SESSIONS" \
      --outstanding "$OUTSTANDING" --mix "$mix" --keys 1000 --duration "$DUR" --warmup "$WARM" \
      --json "$WORK/g$k.json" --quiet >/dev/null 2>&1 &
    gen_pids+=($!)
  done
  for pid in "${gen_pids[@]}"; do wait "$pid"; done
  after=$(cpu_ticks "$SERVER_PID"); t1=$(date +%s%N)
  local eng wal wrk io
  eng=$(($(engine_ticks "$SERVER_PID") - eng0)); wal=$(($(thread_ticks "$SERVER_PID" stoa-wal) - wal0))
  io=$(($(thread_ticks "$SERVER_PID" stoa-io) - io0))
  wrk=$(($(thread_ticks "$SERVER_PID" 'stoa-part-*') + $(thread_ticks "$SERVER_PID" 'stoa-own-*') - wrk0))
  for ((k = 0; k < gens; k++)); do
    total=$(awk -v a="$total" -v b="$(field throughput_ops_s "$WORK/g$k.json")" 'BEGIN {print a + b}')
    rm -f "$WORK/g$k.json"
  done
  local ticks_per_s; ticks_per_s=$(getconf CLK_TCK)
  echo "$total $(awk -v c=$((after - before)) -v e="$eng" -v w="$wal" -v k="$wrk" \
    -v i="$io" -v hz="$ticks_per_s" -v ns=$((t1 - t0)) \
    'BEGIN {s = hz * ns / 1e9; printf "%.2f %.2f %.2f %.2f %.2f", c / s, e / s, w / s, k / s, i / s}')"
}


echo "cores: $(nproc); partitions: $PARTS; $ROUNDS rounds; per generator $SESSIONS sessions x $OUTSTANDING in flight; ${DUR}s after ${WARM}s"
read -ra parts_list <<<"$PARTS"
for ((round = 0; round < ROUNDS; round++)); do
  # Rotated each round, so no count always runs first.
  k=$((round % ${#parts_list[@]})); order="${parts_list[*]:k} ${parts_list[*]:0:k}"
  for p in $order; do
    for layout in spread one; do
      servers_parts=$p; [ $layout = one ] && servers_parts=1
      [ $layout = one ] && [ "$p" = 1 ] && continue # the same run as spread
      start "$servers_parts" || exit 1
      line="round $round P=$p $layout:"
      for mix in $MIXES; do
        r=$(drive "$p" "$mix"); set -- $r
        echo "$1" >>"$OUT/$layout.$p.$mix.ops"; echo "$2" >>"$OUT/$layout.$p.$mix.cores"
        line+=" $mix $1 ops/s ($2 cores: engine thread $3, WAL $4, workers $5, I/O $6)"
      done
      cleanup
      echo "$line"
    done
  done
done
echo
echo "medians; spread: P partitions, generator k on /g<k>; one: the same P generators on one partition"
echo "scaling: spread against the best one partition did under any of these loads (target: 0.7 x P up to P=8)"
for mix in $MIXES; do
  best=0
  for p in $PARTS; do
    layout=one; [ "$p" = 1 ] && layout=spread
    best=$(awk -v a="$best" -v b="$(median <"$OUT/$layout.$p.$mix.ops")" 'BEGIN {print (b > a ? b : a)}')
  done
  for p in $PARTS; do
    s=$(median <"$OUT/spread.$p.$mix.ops"); sc=$(median <"$OUT/spread.$p.$mix.cores")
    if [ "$p" = 1 ]; then o=$s; oc=$sc; else o=$(median <"$OUT/one.$p.$mix.ops"); oc=$(median <"$OUT/one.$p.$mix.cores"); fi
    awk -v mix="$mix" -v p="$p" -v s="$s" -v o="$o" -v b="$best" -v sc="$sc" -v oc="$oc" 'BEGIN {
      printf "%s P=%s: spread %.0f ops/s (server %.2f cores), one %.0f (%.2f cores); spread/one %.2f; scaling %.2f",
        mix, p, s, sc, o, oc, s / o, s / b
      if (p <= 8) printf " (target %.1f)", 0.7 * p
      printf "\n" }'
  done
done
rm -rf "$WORK/run."*
[ "$OUT" = "$WORK" ] && rm -rf "$WORK"
