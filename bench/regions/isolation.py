#!/usr/bin/env python3
"""Per-client isolation across regions, with and without contention.

Three participants in region 0 and their observer in region 1, a WAN round
trip apart (tests/e2e/regions.py: network namespaces, netem or wanlink.py).
Session B reads on the observer one call at a time, first alone, then while
session A keeps many 1 KiB writes in flight on the same observer (each one
a WAN round trip to the leader). Prints B's read latency p50/p99 for both,
and A's write latency, for Stoa and, with --zookeeper, Debian's ZooKeeper.

    sudo .venv/bin/python bench/regions/isolation.py [--zookeeper] [--rtt-ms 50]

Root only (namespaces). Every server and relay is stopped by PID when it
ends, however it ends; a run takes about 15 s for Stoa, 40 s with ZooKeeper.
"""

import argparse
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(1, ROOT)

import isolation  # noqa: E402
import regions  # noqa: E402
import servers  # noqa: E402
from bench.compare.launch import ZK_HEAP_FLAG  # noqa: E402

LAYOUT = [["participant"] * 3, ["observer"]]


def run_one(kind, args):
    request = regions.standalone_request()
    try:
        d = regions.start_deployment(request, LAYOUT, kind=kind, wan_rtt_ms=args.rtt_ms,
                                     wan_jitter_ms=args.jitter_ms, jvm_flags=(ZK_HEAP_FLAG,))
        observer = d.observers()[0]
        r = isolation.measure(observer.hosts, reads=args.reads, outstanding=args.outstanding,
                              size=args.size)
        r["setup"] = d.topo.describe()
        return r
    finally:
        request.close()


def row(name, kind, s):
    return "| %-9s | %-28s | %5d | %8.2f | %8.2f | %8.2f |" % (
        name, kind, s["n"], s["p50_ms"], s["p99_ms"], s["max_ms"])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--zookeeper", action="store_true", help="also Debian's ZooKeeper 3.8")
    p.add_argument("--rtt-ms", type=float, default=50.0)
    p.add_argument("--jitter-ms", type=float, default=2.0)
    p.add_argument("--reads", type=int, default=300)
    p.add_argument("--outstanding", type=int, default=100, help="A's writes in flight")
    p.add_argument("--size", type=int, default=1024, help="bytes per znode")
    args = p.parse_args()
    why = regions.unavailable_reason()
    if why:
        sys.exit("regions unavailable: %s" % why)
    os.environ.setdefault("STOA_BIN", servers.stoa_bin())
    kinds = ["stoa"] + (["zookeeper"] if args.zookeeper else [])
    results = {}
    for kind in kinds:
        results[kind] = run_one(kind, args)
        print("%s: %s" % (kind, results[kind]["setup"]), flush=True)
    print()
    print("| server    | B's reads on the observer    |     n | p50 (ms) | p99 (ms) | max (ms) |")
    print("|-----------|------------------------------|------:|---------:|---------:|---------:|")
    for kind in kinds:
        r = results[kind]
        print(row(kind, "alone", r["alone"]))
        print(row(kind, "A: %d writes in flight" % args.outstanding, r["contended"]))
        print(row(kind, "(A's writes)", r["writes"]))
    print()
    for kind in kinds:
        r = results[kind]
        print("%s: contended/alone p50 %.1fx, p99 %.1fx; contended p99 / WAN RTT %.2f"
              % (kind, r["contended"]["p50_ms"] / r["alone"]["p50_ms"],
                 r["contended"]["p99_ms"] / r["alone"]["p99_ms"],
                 r["contended"]["p99_ms"] / args.rtt_ms))


if __name__ == "__main__":
    main()
