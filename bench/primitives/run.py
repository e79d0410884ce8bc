#!/usr/bin/env python3
"""The Cost of Consensus, on Stoa: lock primitives under client-server and
server-server delay and contention, measured and modelled side by side.

    sudo .venv/bin/python bench/primitives/run.py            # default grid, ~12 min
    sudo .venv/bin/python bench/primitives/run.py --full     # the paper's grid (hours)
    sudo .venv/bin/python bench/primitives/run.py --tiny     # smoke: a minute
    ... --zookeeper      the client-side primitives on Apache ZooKeeper instead
    ... --doc            also write docs/primitives.md's section and its figures

Each topology (quorum size n, server RTT s, client RTT c; topology.py)
gets fresh servers; on it the load generator runs, from the client's
namespace, one `stoa bench --scenario prim-lock-<primitive>` per primitive
and contention level (crates/bench/src/prim.rs), each timed. Every cell's
measured mean acquire latency is printed beside the model's (model.py)
with their ratio; results.json in --out keeps everything.

Bounded: every command has a timeout, --max-minutes stops starting cells
once spent, and servers (by PID), relays (by PID), namespaces and links are
removed when it ends, however it ends (SIGINT, SIGTERM, an error); after a
kill -9, the next run sweeps what is left (netns.sweep_stale).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(2, ROOT)

import model  # noqa: E402
import netns  # noqa: E402
import regions  # noqa: E402
import servers  # noqa: E402
from bench.compare.launch import ZK_HEAP_FLAG  # noqa: E402
from topology import PrimTopology  # noqa: E402

import harness as h  # noqa: E402

# Contention levels: (name, clients, total arrival rate per s, mean hold ms).
# low: the paper's Fig. 15 (interarrival 500 ms, critical section 1 ms)
# at twice the rate, for samples; high: its Fig. 16 (200 ms, 150 ms).
LEVELS = {
    "low": (4, 4.0, 1.0),
    "high": (4, 5.0, 150.0),
}
# The paper's Figs. 13/14: contention swept by the critical section at a
# fixed interarrival of 200 ms.
HOLD_SWEEP_MS = [1, 25, 50, 100, 150, 200]

POLL_MS = 5.0


def level_params(name):
    if name in LEVELS:
        return LEVELS[name]
    if name.startswith("hold"):  # holdN: the sweep's points
        return (4, 5.0, float(name[4:]))
    raise ValueError(name)


def default_grid():
    """(n, s, c, levels): ~12 minutes on 2 cores."""
    g = [(1, 0, c, ["low", "high"]) for c in (0, 25, 50, 100)]
    g += [(3, s, c, ["low", "high"]) for s in (0, 50) for c in (0, 50)]
    g += [(5, 50, 0, ["low", "high"])]
    return g


def full_grid():
    """The paper's Figs. 8-16: RTTs 0..250 ms, quorums of 1, 3, 5."""
    rtts = [0, 25, 50, 100, 250]
    g = [(1, 0, c, ["low", "high"]) for c in rtts]
    g += [(n, s, c, ["low", "high"]) for n in (3, 5) for s in rtts for c in rtts]
    sweep = ["hold%d" % ms for ms in HOLD_SWEEP_MS]
    g += [(1, 0, 0, sweep), (1, 0, 100, sweep)]
    return g


def tiny_grid():
    return [(1, 0, 0, ["low"]), (3, 20, 20, ["high"])]


class Interrupted(Exception):
    pass


def _on_signal(signum, frame):
    raise Interrupted("signal %d" % signum)


def stoa_bin():
    path = os.environ.get("STOA_BIN") or servers.stoa_bin()
    if not os.path.exists(path):
        sys.exit("no stoa binary at %s: cargo build --release (or set STOA_BIN)" % path)
    return path


def bench(topo, hosts, scenario, duration_s, extra, timeout_s):
    """One `stoa bench` from the client's namespace; its JSON results."""
    out = os.path.join(topo.workdir, "bench-%d.json" % time.monotonic_ns())
    argv = topo.client_prefix() + [stoa_bin(), "bench", "--servers", hosts, "--quiet",
                                   "--scenario", scenario, "--duration", str(duration_s),
                                   "--json", out] + extra
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       stdin=subprocess.DEVNULL, timeout=timeout_s)
    if p.returncode != 0:
        raise RuntimeError("stoa bench %s: exit %d: %s" % (scenario, p.returncode,
                                                           p.stderr.strip()[-400:]))
    with open(out) as f:
        results = json.load(f)["results"]
    os.unlink(out)
    return results


def calibrate(kind, args, workdir):
    """w0, r0: a synchronous create's and get's median round trip (ms) with no
    delay, one server: what the model adds to the emulated round trips."""
    topo = PrimTopology(1, 0, 0)
    topo.workdir = workdir
    srv = None
    try:
        topo.setup()
        srv = netns.NsServer(topo.topo, 0, kind=kind, tick_time=200, jvm_flags=(ZK_HEAP_FLAG,))
        srv.start(timeout=60)
        out = {}
        # Creates of fresh paths (create-sync); a keyspace's creates find
        # their keys taken and are not the locks' writes.
        for what, load in (("w0_ms", ["--scenario", "create-sync"]),
                           ("r0_ms", ["--mix", "get=1", "--keys", "100"])):
            argv = topo.client_prefix() + [stoa_bin(), "bench", "--servers", srv.hosts,
                                           "--quiet", "--duration", "2", "--warmup", "0.5",
                                           "--json", os.path.join(workdir, "cal.json")] + load
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL, timeout=60)
            if p.returncode != 0:
                raise RuntimeError("calibration: %s" % p.stderr.strip()[-400:])
            with open(os.path.join(workdir, "cal.json")) as f:
                r = json.load(f)["results"][0]
            # The median: a busy moment of a shared machine moves the mean.
            out[what] = r["latency_us"]["p50"] / 1e3
            out[what.replace("_ms", "_mean_ms")] = r["latency_us"]["mean"] / 1e3
        return out
    finally:
        if srv is not None:
            srv.cleanup()
        topo.destroy()


def run_topology(kind, n, s, c, levels, args, cal, deadline, results):
    topo = PrimTopology(n, s, c)
    topo.workdir = args.out
    members = []
    try:
        topo.setup()
        quorum = {}
        if n > 1:
            quorum = {"server.%d" % (i + 1): "%s:%d:%d" % (topo.topo.quorum_ip(i),
                                                         netns.QUORUM_PORT, netns.ELECTION_PORT)
                      for i in range(n)}
            if kind == "zookeeper":
                quorum.update(initLimit=20, syncLimit=10)
        tick = max(200 if kind == "stoa" else 500, int(4 * s))
        for i in range(n):
            members.append(netns.NsServer(topo.topo, i, kind=kind, tick_time=tick,
                                          extra_cfg=quorum, jvm_flags=(ZK_HEAP_FLAG,)))
        servers.run_parallel(lambda m: m.start(timeout=90), members)
        h.wait_until(lambda: n == 1 or netns.leader_of(members) is not None, timeout=60,
                     what="one leader")
        leader = 0 if n == 1 else members.index(netns.leader_of(members))
        q = model.consensus_ms(topo.rtts(), leader)
        hosts = members[leader].hosts  # writes go to the leader: no forwarding hop
        print("== %s: %s, leader %d, consensus q = %g ms (server pids %s)"
              % (kind, topo.describe(), leader + 1, q, ",".join(str(m.pid) for m in members)),
              flush=True)
        prims = model.CLIENT_SIDE if kind == "zookeeper" else \
            [p for p in model.PRIMITIVES if p in args.primitives]
        prims = [p for p in prims if p in args.primitives]
        for level in levels:
            clients, rate, hold = level_params(level)
            think_ms = clients / rate * 1e3
            for prim in prims:
                if time.monotonic() >= deadline:
                    print("   --max-minutes spent: skipping the rest", flush=True)
                    return
                extra = ["--sessions", str(clients), "--think-ms", "%g" % think_ms,
                         "--hold-ms", "%g" % hold, "--poll-ms", "%g" % POLL_MS,
                         "--warmup", str(args.warmup),
                         "--server-pid", ",".join(str(m.pid) for m in members)]
                cell = {"system": kind, "n": n, "server_rtt_ms": s, "client_rtt_ms": c,
                        "leader": leader + 1, "q_ms": q, "level": level, "primitive": prim,
                        "clients": clients, "think_ms": think_ms, "hold_ms": hold,
                        "rate_per_s": rate}
                try:
                    r = bench(topo, hosts, "prim-lock-" + prim, args.duration, extra,
                              timeout_s=args.duration + args.warmup + 120 + 10 * c / 1e3 * 60)[0]
                    cell["measured_ms"] = r["latency_us"]["mean"] / 1e3 if r["ops"] else None
                    cell["p50_ms"] = r["latency_us"]["p50"] / 1e3
                    cell["p99_ms"] = r["latency_us"]["p99"] / 1e3
                    cell["acquisitions"] = r["ops"]
                    cell["acquisitions_per_s"] = r["throughput_ops_s"]
                    cell["errors"] = r["errors"]
                    cell["timeouts"] = r["prim"]["timeouts"]
                    # The lock's own cost, apart from queueing (prim.rs, Handoffs).
                    cell["handoffs"] = r["prim"].get("handoffs")
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    cell["error"] = str(e)[-300:]
                    cell["measured_ms"] = None
                m = model.predict(prim, clients, think_ms, hold, c, q, cal["w0_ms"],
                                  cal["r0_ms"], POLL_MS)
                cell["model"] = m
                cell["model_ms"] = m["latency_ms"]
                meas = cell["measured_ms"]
                cell["ratio"] = meas / m["latency_ms"] if meas else None
                results.append(cell)
                print("   %-5s %-12s measured %9s ms  model %8.2f ms  ratio %5s  (%s acq, rho %.2f)%s"
                      % (level, prim, "%.2f" % meas if meas else "-", m["latency_ms"],
                         "%.2f" % cell["ratio"] if cell["ratio"] else "-",
                         cell.get("acquisitions", 0), m["rho"],
                         "  ERROR " + cell["error"] if "error" in cell else ""), flush=True)
    finally:
        for m in members:
            try:
                m.cleanup()
            except Exception as e:
                print("teardown: %s" % e, file=sys.stderr)
        topo.destroy()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--full", action="store_true", help="the paper's grid (hours)")
    g.add_argument("--tiny", action="store_true", help="two cells (the smoke test's)")
    p.add_argument("--zookeeper", action="store_true",
                   help="Apache ZooKeeper instead of Stoa (client-side primitives only)")
    p.add_argument("--primitives", default=",".join(model.PRIMITIVES),
                   help="comma-separated subset of %s" % ",".join(model.PRIMITIVES))
    p.add_argument("--duration", type=float, default=None, help="seconds per cell")
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--max-minutes", type=float, default=None,
                   help="start no cell after this (default 20, --full 600, --tiny 3)")
    p.add_argument("--out", default=None, help="directory for results.json")
    p.add_argument("--calibrate-only", action="store_true",
                   help="print the model's no-delay write and read round trips, run nothing else")
    p.add_argument("--doc", action="store_true",
                   help="write docs/primitives.md's measured section and docs/bench/primitives_*.png")
    args = p.parse_args(argv)
    args.primitives = [x for x in args.primitives.split(",") if x]
    bad = set(args.primitives) - set(model.PRIMITIVES)
    if bad:
        p.error("unknown primitives %s" % sorted(bad))
    grid = full_grid() if args.full else tiny_grid() if args.tiny else default_grid()
    if args.duration is None:
        args.duration = 20.0 if args.full else 2.0 if args.tiny else 6.0
    if args.max_minutes is None:
        args.max_minutes = 600.0 if args.full else 3.0 if args.tiny else 20.0
    why = regions.unavailable_reason()
    if why:
        print("network namespaces unavailable: %s" % why, file=sys.stderr)
        return 77
    kind = "zookeeper" if args.zookeeper else "stoa"
    os.environ.setdefault("STOA_BIN", stoa_bin())
    args.out = args.out or "/tmp/stoa-primitives-%d" % os.getpid()
    os.makedirs(args.out, exist_ok=True)
    signal.signal(signal.SIGTERM, _on_signal)
    started = time.monotonic()
    deadline = started + args.max_minutes * 60
    results = []
    doc = {"system": kind, "grid": "full" if args.full else "tiny" if args.tiny else "default",
           "duration_s": args.duration, "levels": LEVELS, "poll_ms": POLL_MS,
           "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cells": results}
    status = 0
    try:
        cal = calibrate(kind, args, args.out)
        doc["calibration"] = cal
        if args.calibrate_only:
            print(json.dumps(cal))
            return 0
        print("calibration (no delay, 1 server): write %.3f ms, read %.3f ms"
              % (cal["w0_ms"], cal["r0_ms"]), flush=True)
        for n, s, c, levels in grid:
            if time.monotonic() >= deadline:
                print("--max-minutes spent: the rest of the grid not run", flush=True)
                break
            run_topology(kind, n, s, c, levels, args, cal, deadline, results)
    except (KeyboardInterrupt, Interrupted) as e:
        print("interrupted (%s): tearing down" % (e or "SIGINT"), file=sys.stderr)
        status = 130
    finally:
        doc["wall_s"] = time.monotonic() - started
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(doc, f, indent=1)
        print("results: %s (%d cells, %.0f s)" % (os.path.join(args.out, "results.json"),
                                                   len(results), doc["wall_s"]), flush=True)
    if status == 0 and args.doc:
        import report
        report.write(doc, ROOT)
    return status


if __name__ == "__main__":
    sys.exit(main())
