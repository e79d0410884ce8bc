#!/usr/bin/env python3
"""The priority queue of the Extendable ZooKeeper paper, driven by Apache
ZooKeeper's own Java client (issue 25's target): the extension on Stoa
against the client-side recipe on ZooKeeper 3.9.5 (and on Stoa), with 16
consumer sessions.

    python3 bench/ezk-java/run.py [--consumers 16] [--rounds 3] [--seconds 3]

Each run starts a fresh server (Stoa standalone, or ZooKeeper 3.9.5 from
Maven Central's jars), keeps about 100 elements queued with four producer
sessions, and counts the dequeues of the measured window (PqBench.java).
Runs of the three variants interleave; the figures are medians. Bounded:
every step has a timeout and every server is stopped by PID."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))

import harness  # noqa: E402
from bench.compare.anchors import maven  # noqa: E402
from bench.compare.launch import ZK_HEAP_FLAG  # noqa: E402

VARIANTS = (("extension", "stoa"), ("recipe", "zookeeper"), ("recipe", "stoa"))


def compile_bench(jars, out):
    subprocess.run(["javac", "-cp", ":".join(jars.classpath), "-d", out,
                    os.path.join(HERE, "PqBench.java")], check=True, timeout=120)


def register_queue(hosts):
    from kazoo.client import KazooClient
    with open(os.path.join(REPO, "examples", "extensions", "priority_queue.lua")) as f:
        source = f.read()
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=10)
    try:
        zk.ensure_path("/extensions")
        zk.create("/extensions/pq", json.dumps(
            {"kind": "node", "path": "/queue", "source": source}).encode())
    finally:
        zk.stop()
        zk.close()


def one_run(mode, system, jars, classes, args):
    srv = (harness.Server(kind="zookeeper", zookeeper=jars, jvm_flags=(ZK_HEAP_FLAG,))
           if system == "zookeeper"
           else harness.Server(kind="stoa"))
    try:
        srv.start()
        if mode == "extension":
            register_queue(srv.hosts)
        out = subprocess.run(
            ["java", "-Xmx512m", "-cp", ":".join(jars.classpath + [classes]),
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "PqBench", mode, srv.hosts,
             str(args.consumers), str(args.warmup), str(args.seconds)],
            capture_output=True, text=True, timeout=60 + args.warmup + args.seconds)
        lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
        if out.returncode != 0 or not lines:
            raise RuntimeError("PqBench %s on %s: %s" % (mode, system, out.stderr[-2000:]))
        return json.loads(lines[-1])
    finally:
        srv.cleanup()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--consumers", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    args = ap.parse_args()
    jars, version = maven.zookeeper()
    with tempfile.TemporaryDirectory(prefix="stoa-pq-java-") as classes:
        compile_bench(jars, classes)
        runs = {v: [] for v in VARIANTS}
        for r in range(args.rounds):
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            for mode, system in order:
                res = one_run(mode, system, jars, classes, args)
                runs[(mode, system)].append(res)
                print("round %d: %-9s on %-9s %8.0f dequeues/s, %.2f calls each, %d empty"
                      % (r + 1, mode, system, res["dequeues_per_s"], res["calls_per_dequeue"],
                         res["empty"]), flush=True)
    med = {v: statistics.median(x["dequeues_per_s"] for x in runs[v]) for v in VARIANTS}
    calls = {v: statistics.median(x["calls_per_dequeue"] for x in runs[v]) for v in VARIANTS}
    names = {"stoa": "Stoa", "zookeeper": "ZooKeeper %s" % version}
    print("\n| variant (%d consumers, Java client) | dequeues/s | calls per dequeue |"
          % args.consumers)
    print("|---|--:|--:|")
    for v in VARIANTS:
        print("| %s on %s | %.0f | %.2f |" % (v[0], names[v[1]], med[v], calls[v]))
    ext = med[("extension", "stoa")]
    print("\nextension on Stoa / recipe on %s: x%.2f; / recipe on Stoa: x%.2f"
          % (names["zookeeper"], ext / med[("recipe", "zookeeper")],
             ext / med[("recipe", "stoa")]))


if __name__ == "__main__":
    main()
