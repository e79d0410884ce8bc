"""The report's matrix sections: a table per group of cells, and the
tables that go with some of them."""

from math import nan as NAN

from ..resources import LOAD_PAYLOAD
from ..systems import family, long, of_family, short
from .text import cell_table, num, ratio, shape_of

GROUP_TITLES = {
    "peak": "Peak throughput (closed loop)",
    "latency": "Latency vs offered load (open loop, 8x16, rate relative to {reference}'s median 8x16 peak; latency counted from the scheduled start)",
    "clients": "Throughput vs synchronous clients",
    "read-ratio": "Read-ratio sweep (get/set, 8x8)",
    "payload": "Throughput vs payload (8x8)",
    "scenario": "Scenarios from the papers (`stoa bench --scenario NAME`)",
}


def group_tables(L, cells, med, ctx, systems):
    """A section per group of cells, in GROUP_TITLES' order."""
    reference = long(ctx.get("reference", "zookeeper"))
    for group, title in GROUP_TITLES.items():
        group_cells = [c for c in cells if c.group == group]
        if not group_cells:
            continue
        L.append("## %s\n" % title.format(reference=reference))
        cell_table(L, group_cells, med, systems)
        L.append("")
        if group == "peak":
            peak_runs_report(L, group_cells, med, systems, ctx)
            etcd_reads_report(L, cells, med, systems)
        if group == "clients":
            floor_report(L, ctx.get("fsync_floor"), med, systems)
        if group == "scenario":
            L.append("create-sync: 1 session, 1 call in flight, creates; create-async: 1 session, "
                     "100 in flight (timed here like every cell; by hand, `stoa bench --scenario "
                     "create-sync` makes Bagai et al.'s 100,000 creates); ephemeral-300b: 10,000 ephemeral creates of 300 B over 4x16 "
                     "(timed by op count; on etcd, puts with the session's lease); "
                     "producer-consumer: 4 synchronous sessions, create/delete pairs. Each run "
                     "deletes what its creates left once it is measured (`--clean-up`; not "
                     "counted), so every cell after it finds the tree as the first did.\n")


def peak_runs_report(L, cells, med, systems, ctx):
    """Every run's throughput in the peak cells, in the order they ran: the
    medians above hide how far one slow phase of the machine moved them."""
    rows = []
    for c in cells:
        runs = {k: (med.get((c.name, k)) or {}).get("runs") for k in systems}
        if not all(runs.values()):
            continue
        rows.append("| %s | %s |" % (c.name, " | ".join(
            " / ".join("%.0fk" % (r["throughput_ops_s"] / 1000.0) for r in runs[k])
            for k in systems)))
    if not rows:
        return
    L.append("Every run of the peak cells, ops/s in the order run%s:\n" % (
        " (the first half in the matrix's first pass, the rest in its second)"
        if ctx.get("peak_revisit") else ""))
    L.append("| cell | " + " | ".join(long(k) for k in systems) + " |")
    L.append("|---|" + "---|" * len(systems))
    L.extend(rows)
    L.append("")


def etcd_reads_report(L, cells, med, systems):
    """The read peak sweep again with etcd's serializable reads: etcd answers
    them from the member's local state, as ZooKeeper and Stoa answer every
    read, so this is the like-for-like read figure for etcd."""
    etcds = of_family("etcd", systems)
    ser = [c for c in cells if c.group == "etcd-reads" and any((c.name, e) in med for e in etcds)]
    if not ser:
        return
    others = [k for k in systems if k not in etcds]
    L.append("### etcd's reads, serializable\n")
    L.append("etcd reads linearizably by default: before answering, the member confirms "
             "its commit index with raft's ReadIndex. ZooKeeper and Stoa answer reads from "
             "the local tree; etcd does so with `serializable=true` (`stoa bench --target etcd "
             "--serializable`). The read peak sweep again on etcd, with such reads:\n")
    cols = ["shape"] + ["%s get ops/s" % short(k) for k in others]
    for e in etcds:
        cols += ["%s linearizable" % short(e), "%s serializable" % short(e),
                 "Stoa/%s serializable" % short(e), "%s serializable p99 ms" % short(e),
                 "%s serializable cpu µs/op" % short(e)]
    L.append("| " + " | ".join(cols) + " |")
    L.append("|---|" + "---:|" * (len(cols) - 1))
    for c in ser:
        shape = shape_of(c.name)
        plain = "read peak (get, %s)" % shape
        tput = lambda k: (med.get((plain, k)) or {}).get("throughput_ops_s", NAN)  # noqa: E731
        row = [shape] + [num(tput(k), "%.0f") for k in others]
        for k in etcds:
            e = med.get((c.name, k)) or {}
            ser_tput = e.get("throughput_ops_s", NAN)
            row += [num(tput(k), "%.0f"), num(ser_tput, "%.0f"),
                    num(ratio(tput("stoa"), ser_tput), "%.2f"),
                    num(e.get("p99", NAN) * 1e-3, "%.2f"), num(e.get("cpu_us_per_op"), "%.1f")]
        L.append("| " + " | ".join(row) + " |")
    L.append("")


def floor_report(L, floor, med, systems):
    """A synchronous write next to the raw fsynced write under it."""
    if not floor:
        return
    L.append("The floor under a synchronous write (Bagai et al.'s lower bound): one writer "
             "writing %d B into a preallocated file on the same disk and fdatasyncing it, with "
             "no server (`stoa bench --target file --dir DIR --payload %d`), against each "
             "server's `write, 1 sessions x1` above.\n" % (LOAD_PAYLOAD, LOAD_PAYLOAD))
    L.append("| | ops/s | p50 ms | p99 ms | p50 / floor's |")
    L.append("|---|---:|---:|---:|---:|")
    L.append("| raw write + fdatasync | %s | %s | %s | 1.00 |" % (
        num(floor["throughput_ops_s"], "%.0f"), num(floor["p50"] / 1000.0, "%.3f"),
        num(floor["p99"] / 1000.0, "%.3f")))
    for k in systems:
        m = med.get(("write, 1 sessions x1", k))
        if m is None:
            continue
        L.append("| %s %s | %s | %s | %s | %s |" % (
            long(k), "put" if family(k) == "etcd" else "setData",
            num(m["throughput_ops_s"], "%.0f"), num(m["p50"] / 1000.0, "%.3f"),
            num(m["p99"] / 1000.0, "%.3f"), num(ratio(m["p50"], floor["p50"]), "%.2f")))
    L.append("")
