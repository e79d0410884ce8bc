"""One `stoa bench` run against a server, and the figures taken from it:
medians over repeats, the settling between runs, the rotating order."""

import json
import os
import statistics
import subprocess
from math import nan as NAN

from .procstat import wait_idle


# Per run: the bench's own bound on top of its duration (setup, connects).
RUN_SLACK_S = 90


def run_bench(stoa_bin, srv, cell_args, timing, work, bound=None):
    """One `stoa bench` run against srv (a server, or an ensemble: its hosts
    list every member and its pids every process); its first result."""
    out = os.path.join(work, "run.json")
    if os.path.exists(out):
        os.remove(out)
    if srv.kind == "etcd":
        where = ["--target", "etcd", "--endpoints", srv.hosts]
    else:
        where = ["--servers", srv.hosts]
    pids = getattr(srv, "pids", None) or [srv.pid]
    argv = ([stoa_bin, "bench"] + where + ["--server-pid", ",".join(map(str, pids)), "--quiet",
                                           "--json", out] + timing + cell_args)
    if bound is None:
        bound = RUN_SLACK_S + 2 * sum(float(timing[i + 1]) for i in range(0, len(timing), 2))
    p = subprocess.run(argv, capture_output=True, text=True, timeout=bound)
    if p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), p.returncode, p.stderr.strip()))
    with open(out) as f:
        return json.load(f)["results"][0]


FIGURES = ("throughput_ops_s", "p50", "p99", "p999", "cpu_us_per_op", "client_cpu_us_per_op")


def figures(result):
    lat = result["latency_us"]
    return {"throughput_ops_s": result["throughput_ops_s"], "p50": lat["p50"],
            "p99": lat["p99"], "p999": lat["p999"],
            "cpu_us_per_op": result.get("server_cpu_us_per_op") or float("nan"),
            "client_cpu_us_per_op": result.get("client_cpu_us_per_op") or float("nan"),
            "errors": result["error_count"],
            "error_codes": result["errors"]}


def combine_runs(runs, keys, median=statistics.median):
    """One cell's repeats as one result: `median` of each figure in `keys`,
    errors and error codes summed, and every run's figures kept."""
    med = {k: median([r[k] for r in runs]) for k in keys}
    med["errors"] = sum(r["errors"] for r in runs)
    codes = {}
    for r in runs:
        for k, v in r["error_codes"].items():
            codes[k] = codes.get(k, 0) + v
    med["error_codes"] = codes
    med["runs"] = [{k: r[k] for k in keys} for r in runs]
    return med


def median_of(runs):
    return combine_runs(runs, FIGURES)


# Before each matrix run: wait (at most this long, in windows of this
# length) for the servers' processes together to go idle (IDLE_CPU).
SETTLE_WAIT_MAX_S = 5.0
SETTLE_WINDOW_S = 0.3


def settle(servers):
    """Writes back every dirty page and waits, within SETTLE_WAIT_MAX_S,
    until the servers are nearly idle, so that a run does not pay for the
    run before it: a ZooKeeper that just took 40k writes/s goes on with
    garbage collection and a snapshot for a while, and its disk writes
    lengthen the next server's fsyncs."""
    os.sync()
    pids = [p for srv in servers.values() for p in (getattr(srv, "pids", None) or [srv.pid])]
    wait_idle(pids, SETTLE_WAIT_MAX_S, SETTLE_WINDOW_S)


def rotated(items, rep):
    """`items` in the order of repeat `rep`: each goes first, second, ... in
    turn, so no server always runs right after the same one."""
    k = rep % len(items)
    return items[k:] + items[:k]


def ratio(a, b):
    return a / b if b and b == b else NAN
