"""The report's resource-use section."""

import statistics
from math import nan as NAN

from ..launch import ZK_HEAP_FLAG
from ..procstat import IDLE_CPU, IDLE_WINDOW_S
from ..resources import (BIG_TREE_WRITE, LOAD_OUTSTANDING, LOAD_PAYLOAD, MIB, RESTART_POLL_S,
                         SNAP_COUNT)
from ..systems import SYSTEMS, long, of_family, short
from .text import num, ratio


def resource_report(L, res, ctx):
    if not res or "stoa" not in res:
        return
    systems = [k for k in SYSTEMS if k in res]
    others = [k for k in systems if k != "stoa"]
    etcd = bool(of_family("etcd", res))
    n = res["stoa"]["n"]
    restarts = len(res["stoa"]["restart_s"])
    runs = len(res["stoa"].get("runs") or [None])
    L.append("## Resource use (%s znodes of %d B, standalone)\n" % ("{:,}".format(n),
                                                                    LOAD_PAYLOAD))
    L.append("Each server, on its own and fresh (one after the other, after the matrix), gets "
             "%s creates of %d B under one parent (`stoa bench --scenario create-async --ops %d "
             "--warmup 0 --sessions 1 --outstanding %d --keys 1`; on etcd, puts) and a marker "
             "znode; then: resident memory (`VmRSS` from /proc, read once the server is idle: "
             "under %d%% of a core for %.1f s, after its snapshots and GC); the data dir on "
             "disk (allocated blocks); stop (SIGTERM, time to exit); restart, timed from just "
             "before the exec until a client's read of the marker succeeds (a fresh "
             "connection and getData every %d ms; etcd: a linearizable range over HTTP), %d "
             "time(s), the first right after the load. Same snapshot cadence for all: "
             "snapCount=%d (ZooKeeper, Stoa), `--snapshot-count %d` (etcd); ZooKeeper "
             "snapshots after a random %d..%d of them (its spread), Stoa every %d applied "
             "entries. ZooKeeper: JVM flag `%s` (upstream zkServer.sh's 1000 MB heap; "
             "Debian's script sets none, so the JVM would take up to 1/4 of RAM), default "
             "GC (G1); it keeps every snapshot and log (autopurge off by default), Stoa the "
             "newest %s. %s%s\n" % (
                 "{:,}".format(n), LOAD_PAYLOAD, n, LOAD_OUTSTANDING, int(IDLE_CPU * 100),
                 IDLE_WINDOW_S, int(RESTART_POLL_S * 1000), restarts, SNAP_COUNT, SNAP_COUNT,
                 SNAP_COUNT // 2, SNAP_COUNT, SNAP_COUNT, ZK_HEAP_FLAG,
                 "two and the WAL back to the older one",
                 "%d runs per server, each on a fresh server, in rounds with the order "
                 "rotating (%s; ...); every figure is the median of the runs, and the runs' "
                 "own RSS and first restart are listed under the table." % (
                     runs, ", ".join(short(k) for k in systems))
                 if runs > 1 else "One run per server (not repeated, unlike the matrix).",
                 " etcd: its bbolt backend is its snapshot (`member/snap/db`: the raft `.snap` "
                 "files hold only membership and the v2 store), keys are not a tree, and its "
                 "RSS includes the pages of the memory-mapped db it touched (`RssFile`)."
                 if etcd else ""))
    if ctx.get("quick"):
        L.append("(`--quick`: %s znodes only, so the figures are a smoke test, not the "
                 "issue's 1M.)\n" % "{:,}".format(n))
    g = lambda k, key: res[k].get(key, NAN) if res[k].get(key) is not None else NAN  # noqa: E731

    def med_rest(k):
        rest = res[k]["restart_s"][1:]
        return statistics.median(rest) if rest else NAN

    def per_node(k):
        nodes = res[k].get("snap_nodes")
        return res[k]["snap_bytes"] / nodes if nodes else NAN

    rows = [
        ("load: creates per second (1 session, %d in flight)" % LOAD_OUTSTANDING,
         lambda k: g(k, "load_ops_s"), "%.0f", True),
        ("load: wall time, s", lambda k: g(k, "load_s"), "%.1f", False),
        ("load: server CPU per create, µs", lambda k: g(k, "load_cpu_us_per_op"), "%.1f", False),
        ("**RSS after the load** (VmRSS), MiB", lambda k: g(k, "rss") / MIB, "%.0f", False),
        ("  anonymous part (RssAnon), MiB", lambda k: g(k, "rss_anon") / MIB, "%.0f", False),
        ("  peak during the load (VmHWM), MiB", lambda k: g(k, "rss_peak") / MIB, "%.0f", False),
        ("RSS after the first restart, MiB", lambda k: g(k, "rss_restart") / MIB, "%.0f", False),
        ("RSS per znode after the load, B", lambda k: g(k, "rss") / n, "%.0f", False),
        ("data dir on disk after the load, MiB", lambda k: g(k, "disk") / MIB, "%.0f", False),
        ("newest snapshot after the load, MiB", lambda k: g(k, "snap_bytes_loaded") / MIB,
         "%.1f", False),
        ("newest snapshot at the end, MiB", lambda k: g(k, "snap_bytes") / MIB, "%.1f", False),
        ("  znodes (keys) it holds", lambda k: g(k, "snap_nodes"), "%.0f", None),
        ("  snapshot bytes per znode", per_node, "%.0f", False),
        ("stop (SIGTERM to exit), s", lambda k: g(k, "stop_s"), "%.2f", False),
        ("**restart to serving**, first restart after the load, s",
         lambda k: res[k]["restart_s"][0] if res[k]["restart_s"] else NAN, "%.2f", False),
    ]
    if restarts > 1:
        rows.append(("restart to serving, median of restarts 2..%d, s" % restarts, med_rest,
                     "%.2f", False))
    # Runs from before the write beside the tree have none of its figures.
    big_write = all(res[k].get("big_write_ops_s") is not None for k in systems)
    if big_write:
        rows += [
            ("**writes beside the tree** (after the restarts): setData of %d B per second, "
             "%s closed loop" % (LOAD_PAYLOAD, "x".join(BIG_TREE_WRITE[1:4:2])),
             lambda k: g(k, "big_write_ops_s"), "%.0f", True),
            ("  server CPU per setData, µs", lambda k: g(k, "big_write_cpu_us_per_op"), "%.1f",
             False),
            ("  p99, ms", lambda k: g(k, "big_write_p99") / 1000.0, "%.2f", False),
        ]
    L.append("| figure | " + " | ".join(long(k) for k in systems) + " | "
             + " | ".join("Stoa/%s" % short(k) for k in others) + " |")
    L.append("|---|" + "---:|" * (len(systems) + len(others)))
    for what, f, spec, _ in rows:
        vals = {k: f(k) for k in systems}
        L.append("| %s | %s | %s |" % (
            what, " | ".join(num(vals[k], spec) for k in systems),
            " | ".join(num(ratio(vals["stoa"], vals[k]), "%.2f") for k in others)))
    L.append("")
    if runs > 1:
        each = lambda k, f: " / ".join(f(r) for r in res[k]["runs"])  # noqa: E731
        L.append("Each run, in the order run: RSS after the load %s MiB; first restart %s s.\n" % (
            "; ".join("%s %s" % (short(k), each(k, lambda r: "%.0f" % (r["rss"] / MIB)))
                      for k in systems),
            "; ".join("%s %s" % (short(k), each(k, lambda r: "%.2f" % r["restart_s"][0]))
                      for k in systems)))
    for k in of_family("zookeeper", res):
        z = res[k]
        if z.get("jvm_live_heap") is None or z["jvm_live_heap"] != z["jvm_live_heap"]:
            continue
        L.append("%s's JVM after the load: %.0f MiB of heap live after a full GC (`jcmd "
                 "GC.run`, then `GC.heap_info`), %.0f MiB committed; Stoa's RSS is %.2fx "
                 "that live heap.\n" % (long(k), z["jvm_live_heap"] / MIB,
                                        z["jvm_heap_committed"] / MIB,
                                        ratio(res["stoa"]["rss"], z["jvm_live_heap"])))
    errs = ", ".join("%s %d" % (short(k), res[k].get("load_errors", 0)) for k in systems)
    L.append("Errors during the loads: %s.\n" % errs)
    if big_write:
        L.append("Writes beside the tree: last, on the server restarted over it and idle "
                 "again, setData of %d B to the matrix's 1000-key keyspace (created first, "
                 "not measured), %.1f s measured after %s s warm-up, snapshots at snapCount "
                 "as above: the tree's size is what differs from the matrix's write peak "
                 "cells. Errors: %s.\n" % (
                     LOAD_PAYLOAD, ctx.get("big_write_s", NAN),
                     ctx.get("big_write_warmup", "?"),
                     ", ".join("%s %d" % (short(k), res[k].get("big_write_errors", 0))
                               for k in systems)))
    if any(res[k].get("snap_bytes") != res[k].get("snap_bytes") for k in systems):
        L.append("A dash for a snapshot: that server had written none yet (fewer than "
                 "snapCount transactions; ZooKeeper also writes one at every start).\n")
    L.append("The data dirs include preallocated log segments: Stoa's WAL and etcd's WAL "
             "allocate 64 MiB files up front; ZooKeeper's 64 MiB log files are sparse.\n")
    L.append("The issue's targets for RSS and restart are in the Targets table at the top.\n")
    for png, title in ctx.get("resource_plots", []):
        L.append("![%s](bench/%s)\n" % (title, png))
