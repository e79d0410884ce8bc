#!/bin/bash
# The cost of switching partitions (issue 23, AGORA Figs. 8-9): a standalone
# stoa of 3 partitions, groups /g1 and /g2 on partitions 1 and 2, driven by
# SESSIONS synchronous sessions (one call in flight each, so a session's
# calls follow its bursts exactly). Each mix runs three ways: every call
# under /g1 (no switch), bursts of 10 calls per group, bursts of 1 (a switch
# every call, the worst case). Rounds rotate the order. Prints each run, then
# medians and each way against no switch. Bash only; every server is
# stopped by PID; every run is bounded.
set -u
DIR=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$DIR/stoa}
ROUNDS=${ROUNDS:-3}
DUR=${DUR:-3}
WARM=${WARM:-1}
SESSIONS=${SESSIONS:-32}
MIXES=${MIXES:-get=100 set=100}
WORK=$(mktemp -d /tmp/stoa-switch.XXXXXX)
# shellcheck source=lib.sh
. "$DIR/lib.sh"
trap 'cleanup; rm -rf "$WORK"' EXIT

d=$(mktemp -d "$WORK/run.XXXX")
base_cfg "$d" >"$d/zoo.cfg"
{ echo partitions=3; echo partition.groups=/g1,/g2; } >>"$d/zoo.cfg"
start_server "$d" "the server" || exit 1

ways=("none:--root /g1" "burst10:--root /g1,/g2 --burst 10" "burst1:--root /g1,/g2 --burst 1")
echo "cores: $(nproc); 3 partitions (/g1 on 1, /g2 on 2); $SESSIONS sessions x 1 in flight; $ROUNDS rounds of ${DUR}s after ${WARM}s"
for ((round = 0; round < ROUNDS; round++)); do
  k=$((round % ${#ways[@]})); order=("${ways[@]:k}" "${ways[@]:0:k}")
  for mix in $MIXES; do
    line="round $round $mix:"
    for way in "${order[@]}"; do
      name=${way%%:*}; flags=${way#*:}
      # shellcheck disable=SC2086 # flags are words
      timeout 60 "$BIN" bench --servers "127.0.0.1:$PORT" $flags --sessions "$SESSIONS" \
        --outstanding 1 --mix "$mix" --keys 1000 --duration "$DUR" --warmup "$WARM" \
        --server-pid "$SERVER_PID" --json "$WORK/r.json" --quiet >/dev/null 2>&1
      ops=$(field throughput_ops_s "$WORK/r.json"); cpu=$(field server_cpu_us_per_op "$WORK/r.json")
      echo "$ops" >>"$WORK/$mix.$name.ops"; echo "$cpu" >>"$WORK/$mix.$name.cpu"
      line+=" $name $ops ops/s ($cpu us/op)"
    done
    echo "$line"
  done
done
echo
echo "medians, and each way against no switch (ops/s; server CPU per op)"
for mix in $MIXES; do
  base=$(median <"$WORK/$mix.none.ops"); base_cpu=$(median <"$WORK/$mix.none.cpu")
  for way in "${ways[@]}"; do
    name=${way%%:*}
    s=$(median <"$WORK/$mix.$name.ops"); c=$(median <"$WORK/$mix.$name.cpu")
    awk -v mix="$mix" -v n="$name" -v s="$s" -v c="$c" -v b="$base" -v bc="$base_cpu" 'BEGIN {
      printf "%s %s: %.0f ops/s (%.2fx), %.2f us/op (%.2fx)\n", mix, n, s, s / b, c, (bc > 0 ? c / bc : 0) }'
  done
done
