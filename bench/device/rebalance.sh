#!/bin/bash
# Time to rebalance after a skew (issue 23, AGORA Fig. 10): a standalone
# stoa of PARTS partitions with groups /g1../g<2(PARTS-1)> spread round robin
# over partitions 1.. (so /g1 and /g<PARTS> share partition 1) and the load
# balancer on (partition.balanceIntervalMs=WINDOW_MS). Two load generators
# write to /g1 and /g<PARTS>, both on partition 1, the rest idle; the
# script polls mntr every 50 ms and prints when the balancer's first move
# applied, counted from the start of the load, and the moves made in all.
# ROUNDS runs. Bash only (the device machine has nothing installed); every
# server is stopped by PID; every run is bounded.
set -u
DIR=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$DIR/stoa}
PARTS=${PARTS:-4}
WINDOW_MS=${WINDOW_MS:-1000}
ROUNDS=${ROUNDS:-3}
DUR=${DUR:-6}
SESSIONS=${SESSIONS:-4}
OUTSTANDING=${OUTSTANDING:-32}
WORK=$(mktemp -d /tmp/stoa-rebalance.XXXXXX)
# shellcheck source=lib.sh
. "$DIR/lib.sh"
trap 'cleanup; rm -rf "$WORK"' EXIT

mntr_value() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1 && printf mntr >&3 && cat <&3" 2>/dev/null |
  awk -v k="$2" '$1 == k {print $2}'; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

echo "cores: $(nproc); $PARTS partitions, window $WINDOW_MS ms; 2 generators x $SESSIONS sessions x $OUTSTANDING in flight on /g1 and /g$PARTS (both on partition 1); ${DUR}s each, $ROUNDS rounds"
hot2=$PARTS
for ((round = 0; round < ROUNDS; round++)); do
  d=$(mktemp -d "$WORK/run.XXXX")
  groups=""
  for ((k = 1; k <= 2 * (PARTS - 1); k++)); do groups+="${groups:+,}/g$k"; done
  base_cfg "$d" >"$d/zoo.cfg"
  {
    echo "partitions=$PARTS"; echo "partition.groups=$groups"
    echo "partition.balanceIntervalMs=$WINDOW_MS"
  } >>"$d/zoo.cfg"
  start_server "$d" "the server" || exit 1
  gens=()
  t0=$(now_ms)
  for g in 1 $hot2; do
    timeout 60 "$BIN" bench --servers "127.0.0.1:$PORT" --root "/g$g" --sessions "$SESSIONS" \
      --outstanding "$OUTSTANDING" --mix set=100 --keys 100 --duration "$DUR" --warmup 0 \
      --json "$WORK/g$g.json" --quiet >/dev/null 2>&1 &
    gens+=($!)
  done
  first=""
  while kill -0 "${gens[0]}" 2>/dev/null; do
    if [ -z "$first" ] && [ "$(mntr_value "$PORT" stoa_group_moves)" -gt 0 ] 2>/dev/null; then
      first=$(($(now_ms) - t0))
    fi
    sleep 0.05
  done
  for pid in "${gens[@]}"; do wait "$pid"; done
  moves=$(mntr_value "$PORT" stoa_group_moves)
  total=0
  for g in 1 $hot2; do
    total=$(awk -v a="$total" -v b="$(field throughput_ops_s "$WORK/g$g.json")" 'BEGIN {print a + b}')
  done
  decided=$(grep -o 'load balancer: [^"]*' "$d/log" | head -1)
  echo "round $round: first move applied ${first:-none} ms after the load began (keys created meanwhile); moves $moves; $total ops/s; ${decided:-no decision logged}"
  cleanup
done
