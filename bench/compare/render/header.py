"""The report's head (title, how to read it) and, at its end, how to run
the benchmarks and how this run was made."""

from ..anchors.gobuild import ETCD_MODULE
from ..anchors.maven import ZOOKEEPER_ARTIFACTS
from ..launch import ZK_HEAP_FLAG
from ..matrix import QUICK_CELLS
from ..systems import DEBIAN, QUICK_EVERY_CELL, long, of_family, short, version
from .text import client_cpu, num

NUMBER_WORDS = {2: "both", 3: "all three", 4: "all four", 5: "all five"}


def anchor_lines(L, ctx, systems):
    """A line per ZooKeeper and etcd: which, from where, how it runs."""
    for k in of_family("zookeeper", systems):
        where = ("Debian package zookeeper" if k in DEBIAN else
                 "Apache's jars from Maven Central (`org.apache.zookeeper:zookeeper:%s` and the "
                 "%d jars it needs at run time, checked against their .sha1, cached under "
                 "target/anchors/)" % (version(k) or "?", len(ZOOKEEPER_ARTIFACTS) - 1))
        L.append("- %s: %s, %s, JVM flags `%s` (default JIT and GC), no AdminServer"
                 % (long(k), where, ctx["java"], ZK_HEAP_FLAG))
    for k in of_family("etcd", systems):
        where = ("Debian package etcd-server" if k in DEBIAN else
                 "built from the Go module proxy (`%s` v%s, its etcdmain in a wrapper module; "
                 "cached under target/anchors/)" % (ETCD_MODULE, version(k) or "?"))
        L.append("- %s: %s, %s, one member (three in the ensemble section), etcd's defaults "
                 "(no flag but the name, URLs and data dir; the resource runs also state "
                 "`--snapshot-count`: 100,000, 3.4's default, where 3.6's is 10,000)"
                 % (long(k), where, (ctx.get("go_versions") or {}).get(k, "?")))


def header(L, cells, med, ctx, systems, ens_cells):
    etcds = of_family("etcd", systems)
    etcd = bool(etcds)
    L.append("# Benchmarks: Stoa vs Apache ZooKeeper%s (standalone%s)\n" % (
        " and etcd" if etcd else "", " and 3-member ensembles" if ens_cells else ""))
    L.append("Written by `scripts/bench-compare`; do not edit by hand, re-run it. "
             "Absolute numbers on this machine are noise; read the **ratios** "
             "(Stoa / ZooKeeper%s).\n" % (", Stoa / etcd" if etcd else ""))
    L.append("The targets table below is the summary; every section after it has the "
             "figures behind it. `SxK`: S sessions with K calls in flight each (K = 1: "
             "synchronous). How to run the benchmarks, the machine, the versions and how each "
             "figure was measured: **Method**, at the end (run of %s).\n" % ctx["date"])


def method(L, cells, med, ctx, systems):
    """How to run, and how this run was made: the report's last section."""
    etcds = of_family("etcd", systems)
    etcd = bool(etcds)
    L.append("## Method\n")
    L.append("How to run: `scripts/bench-compare` (everything, about an hour with the five "
             "systems; `--quick` for a smoke run of a few minutes that writes under target/, "
             "with the systems but Debian's ZooKeeper and Stoa on a few cells only, 20,000 "
             "znodes for the resource figures and two ensemble cells; `--systems LIST` picks "
             "the systems, of zookeeper (Debian's), zookeeper-3.9, stoa, etcd (Debian's), "
             "etcd-3.6; `--no-etcd` leaves etcd out; `--sections resources,ensemble` runs only "
             "those sections and keeps the others from the last bench/results.json; `--znodes "
             "N` sizes the resource tree; `--sections primitives` runs only the coordination "
             "primitives' grid under delay and contention, also part of a full run but not of "
             "`--quick`, into docs/primitives.md). One load by hand: "
             "`stoa bench --servers 127.0.0.1:2181 --sessions 8 --outstanding 16 --mix set=100 "
             "--duration 5`, the same against etcd: `stoa bench --target etcd --endpoints "
             "127.0.0.1:2379 --sessions 8 --outstanding 16 --mix set=100 --duration 5` "
             "(`stoa bench --help` lists every option; `--scenario NAME` runs "
             "create-sync, create-async, ephemeral-300b, producer-consumer, read-ratio-sweep, "
             "payload-sweep, or the EZK experiments pq-extension, pq-recipe, quota-extension, "
             "quota-recipe (ZooKeeper protocol only); `--target file --dir DIR` writes and fdatasyncs a "
             "file with no server, the floor under a durable write; `--json FILE`, `--csv FILE` "
             "for scripts). Where a server's CPU goes: `scripts/profile` (perf and a flame "
             "graph, see docs/performance.md).\n")
    L.append("- date: %s" % ctx["date"])
    L.append("- machine: %s" % ctx["machine"])
    L.append("- Stoa: %s" % ctx["stoa_version"])
    anchor_lines(L, ctx, systems)
    L.append("- command: `%s`" % ctx["command"])
    if ctx.get("reused"):
        L.append("- reused: %s" % ctx["reused"])
    L.append("- method: the same load generator (`stoa bench`, on one current-thread tokio "
             "runtime, so it takes about one of the two cores) drives %s: the project's "
             "ZooKeeper client for ZooKeeper and Stoa%s. %s standalone, fsync on every commit "
             "(ZooKeeper's default forceSync=yes; Stoa's WAL group commit%s), fresh data dirs "
             "under one temp dir (same disk), the load generator on the same 2 cores as the "
             "server. Each cell runs %d times per server, interleaved with the order rotating "
             "per repeat (%s; ...), %.1f s measured after %.1f s warm-up%s; figures are medians "
             "of the repeats. Before each run every dirty page is written back (`sync`) and "
             "the runner waits (up to 5 s) until all servers together use under 10%% of a "
             "core, so a run does not pay for the garbage collection or snapshot the one "
             "before it left behind. Setup (the 1000-key keyspace, 100 B values unless the payload "
             "says otherwise) is not measured. Every server got a %.0f s mixed warm-up first "
             "(JIT)." % (
                 "%s servers" % NUMBER_WORDS.get(len(systems), "the"),
                 ", `stoa bench --target etcd` (etcd's v3 gRPC API through tonic) for etcd"
                 if etcd else "",
                 "All" if len(systems) > 2 else "Both",
                 "; etcd's default: a write is acknowledged after its raft entry is fsynced to "
                 "the WAL, one fsync per raft batch, the bbolt backend committed every 100 ms"
                 if etcd else "",
                 ctx["repeats"], ", ".join(short(k) for k in systems), ctx["duration"],
                 ctx["warmup"],
                 " (%.1f s in the peak cells, which the targets are read from: in 1 s "
                 "windows one garbage collection more or less moved ZooKeeper's write peak "
                 "between 22k and 66k ops/s across the repeats of one run)"
                 % ctx["peak_duration"] if ctx.get("peak_duration") else "",
                 ctx["global_warmup"]))
    if ctx.get("peak_revisit"):
        L.append("- the peak cells (the throughput targets' sweep, and etcd's serializable read "
                 "sweep) run their %d repeats twice: "
                 "in their place in the matrix and again after every other cell, %d runs per "
                 "server in all, and their figures are medians of both passes. The machine's "
                 "speed drifts over minutes (one half-hour gave Stoa 400-460k writes/s in the "
                 "32x16 cell, the next 330-390k), so repeats run back to back can all fall in "
                 "one slow phase; the table under the peak table lists every run. Both passes "
                 "write beside the same tree: the scenario cells delete what they create once "
                 "measured (before they did, Stoa's second pass met the 250k znodes its own "
                 "faster creates had left, against ZooKeeper's 60k, and a snapshot of them "
                 "every 100,000 writes; the resource section measures writes beside a big tree "
                 "for every server alike)."
                 % (ctx["repeats"], 2 * ctx["repeats"]))
    if etcd:
        L.append("- etcd mapping (`stoa bench --target etcd`): a session is one etcd client "
                 "with its own HTTP/2 connection, its K calls in flight multiplexed on it; the "
                 "keys are the ZooKeeper paths. create and set are puts, get a range of the key "
                 "and exists the same keys-only, both **linearizable** (`serializable=false`, "
                 "etcd's default: the member confirms its commit index with raft's ReadIndex "
                 "before answering, where ZooKeeper and Stoa answer reads from the local tree; "
                 "the read peak sweep is also run with etcd's serializable reads, in a table "
                 "of its own), "
                 "children a keys-only prefix range over the keyspace, delete a delete, multi a "
                 "txn of two puts, ephemeral creates puts attached to a lease per session "
                 "(revoked at the end as a session close removes ephemerals). A check by hand "
                 "against etcd's own Go client (`go.etcd.io/etcd/client/v3`, gets and puts at "
                 "8x16) gave the same etcd throughput and server CPU per call within noise. "
                 "etcd keeps every "
                 "revision (no auto-compaction by default); its database at the end: %s "
                 "(quota 2 GiB)." % ", ".join("%s %s" % (long(k), (ctx.get("etcd_db_sizes") or {})
                                                         .get(k, "?")) for k in etcds))
    if cells and ctx.get("quick"):
        rest = [k for k in systems if k not in QUICK_EVERY_CELL]
        if rest:
            L.append("- `--quick`: %s run only %s; the other cells show a dash for them."
                     % (", ".join(long(k) for k in rest), ", ".join(QUICK_CELLS)))
    L.append("- cpu µs/op: the server process's CPU time (user + system, from /proc) over the "
             "measured window divided by the calls answered; it counts every thread (ZooKeeper's "
             "JIT and GC included) and is less blurred by the shared cores than throughput. The "
             "load generator itself spends CPU per call on these same 2 cores (median over the "
             "cells: %s µs/call), so throughput ratios understate the faster server%s." % (
                 ", ".join("%s %s" % (short(k), num(client_cpu(cells, med, k), "%.1f"))
                           for k in systems),
                 "; the gRPC client costs more per call than the ZooKeeper one, which caps "
                 "etcd's figures more than the others'" if etcd else ""))
    L.append("- load average (1 min) before / after the matrix: %s / %s (other work on the "
             "machine shows up as noise)." % (ctx.get("load_before", "?"), ctx.get("load_after", "?")))
    L.append("- `SxK`: S sessions with K calls in flight each (K = 1: synchronous). "
             "Latency percentiles in ms; Stoa/X = Stoa's figure divided by X's (throughput: "
             "higher is better for Stoa; latency and cpu: lower is better for Stoa).\n")
