#!/bin/bash
# I/O threads (issue 23, slice 5a): one standalone stoa per run, its
# client connections on `io.threads` = each of IOS in turn (0: on the
# engine's thread), driven by GENS load generators at once (each SESSIONS
# sessions x OUTSTANDING in flight, 100-byte values), writes (set=100) and
# reads (get=100). With PARTS > 1 the server runs that many partitions with
# generator k on its own group /g<k>, as in partition-sweep.sh. Rounds
# rotate the order of IOS. Prints one line per run, then medians and each
# setting against io.threads=0. Bash only (the device machine has nothing
# installed); every server is stopped by PID; every run is bounded.
set -u
DIR=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$DIR/stoa}
IOS=${IOS:-0 1 2 4}
PARTS=${PARTS:-1}
GENS=${GENS:-4}
ROUNDS=${ROUNDS:-2}
DUR=${DUR:-3}
WARM=${WARM:-1}
SESSIONS=${SESSIONS:-4}
OUTSTANDING=${OUTSTANDING:-32}
MIXES=${MIXES:-set=100 get=100}
WORK=$(mktemp -d /tmp/stoa-io.XXXXXX)
# shellcheck source=lib.sh
. "$DIR/lib.sh"
trap 'cleanup; rm -rf "$WORK"' EXIT


start() { # io threads -> PORT, SERVER_PID
  local io=$1 d groups="" k
  d=$(mktemp -d "$WORK/run.XXXX")
  for ((k = 1; k < PARTS; k++)); do groups+="${groups:+,}/g$k"; done
  base_cfg "$d" >"$d/zoo.cfg"
  {
    echo "partitions=$PARTS"; echo "io.threads=$io"
    [ -n "$groups" ] && echo "partition.groups=$groups"
  } >>"$d/zoo.cfg"
  start_server "$d" "server with io.threads=$io"
}


# mix -> "ops/s server-cores errors"
drive() {
  local mix=$1 k pid before after t0 t1 total=0 errors=0 root gen_pids=()
  before=$(cpu_ticks "$SERVER_PID"); t0=$(date +%s%N)
  for ((k = 0; k < GENS; k++)); do
    root=/g$k; [ "$PARTS" = 1 ] && root=/b$k
    timeout 60 "$BIN" bench --servers "127.0.0.1:$PORT" --root "$root" --sessions "$SESSIONS" \
      --outstanding "$OUTSTANDING" --mix "$mix" --keys 1000 --duration "$DUR" --warmup "$WARM" \
      --json "$WORK/g$k.json" --quiet >/dev/null 2>&1 &
    gen_pids+=($!)
  done
  for pid in "${gen_pids[@]}"; do wait "$pid"; done
  after=$(cpu_ticks "$SERVER_PID"); t1=$(date +%s%N)
  for ((k = 0; k < GENS; k++)); do
    total=$(awk -v a="$total" -v b="$(field throughput_ops_s "$WORK/g$k.json")" 'BEGIN {print a + b}')
    errors=$((errors + $(field error_count "$WORK/g$k.json" | cut -d. -f1)))
    rm -f "$WORK/g$k.json"
  done
  echo "$total $(awk -v c=$((after - before)) -v hz="$(getconf CLK_TCK)" -v ns=$((t1 - t0)) \
    'BEGIN {printf "%.2f", c / hz / (ns / 1e9)}') $errors"
}


echo "cores: $(nproc); io.threads: $IOS; partitions: $PARTS; $GENS generators x $SESSIONS sessions x $OUTSTANDING in flight; $ROUNDS rounds of ${DUR}s after ${WARM}s"
read -ra io_list <<<"$IOS"
for ((round = 0; round < ROUNDS; round++)); do
  k=$((round % ${#io_list[@]})); order="${io_list[*]:k} ${io_list[*]:0:k}"
  for io in $order; do
    start "$io" || exit 1
    line="round $round io.threads=$io:"
    for mix in $MIXES; do
      r=$(drive "$mix"); set -- $r
      echo "$1" >>"$WORK/$io.$mix.ops"; echo "$2" >>"$WORK/$io.$mix.cores"
      line+=" $mix $1 ops/s ($2 cores, $3 errors)"
    done
    cleanup
    echo "$line"
  done
done
echo
echo "medians, and each against io.threads=${io_list[0]}"
for mix in $MIXES; do
  base=$(median <"$WORK/${io_list[0]}.$mix.ops")
  for io in $IOS; do
    s=$(median <"$WORK/$io.$mix.ops"); c=$(median <"$WORK/$io.$mix.cores")
    awk -v mix="$mix" -v io="$io" -v s="$s" -v c="$c" -v b="$base" 'BEGIN {
      printf "%s io.threads=%s: %.0f ops/s, server %.2f cores, %.2fx\n", mix, io, s, c, s / b }'
  done
done
