"""The report's targets table (the issue's goals) and what bounds them."""

from math import nan as NAN

from ..resources import LOAD_PAYLOAD, MIB
from ..systems import SHORT
from .text import num, ratio, shape_of

# The memory goal: Stoa's RSS with the resource tree at most this
# share of ZooKeeper's.
RSS_GOAL = 0.2


def targets(L, cells, med, systems, ens_med, resources):
    """The goals against ZooKeeper, read off the peak, latency and
    resource figures, and the notes on what bounds them."""
    etcd = "etcd" in systems
    get = lambda name, kind: med.get((name, kind))  # noqa: E731
    wp, rp = "write peak (set, 8x16)", "read peak (get, 8x16)"
    L.append("## Targets (issue)\n")
    if etcd:
        L.append("The goals are against ZooKeeper; the last column gives the same ratio "
                 "against etcd.\n")
    L.append("| target | ZooKeeper | Stoa |%s ratio | goal | met |%s" % (
        " etcd |" if etcd else "", " same ratio vs etcd |" if etcd else ""))
    L.append("|---|---:|---:|%s---:|---:|:-:|%s" % ("---:|" if etcd else "", "---:|" if etcd else ""))

    def target_row(what, values, goal, higher, unit, inverse=False):
        """values: system -> figure; ratio = Stoa/other (other/Stoa if inverse)."""
        zv, sv = values.get("zookeeper", NAN), values.get("stoa", NAN)
        if zv != zv and sv != sv:  # not measured in this report
            return
        r = ratio(zv, sv) if inverse else ratio(sv, zv)
        met = (r >= goal) if higher else (r <= goal)
        fmt = "%.0f" if unit in ("ops/s", "MiB") else ("%.1f" if unit == "µs/op" else "%.2f")
        row = "| %s | %s %s | %s %s |" % (what, num(zv, fmt), unit, num(sv, fmt), unit)
        if etcd:
            row += " %s %s |" % (num(values.get("etcd"), fmt), unit)
        row += " %.2f | %s %.2f | %s |" % (r, ">=" if higher else "<=", goal,
                                           "yes" if met else "**no**")
        if etcd:
            ev = values.get("etcd", NAN)
            row += " %s |" % num(ratio(ev, sv) if inverse else ratio(sv, ev), "%.2f")
        L.append(row)

    def fig(name, key, scale=1.0):
        out = {}
        for k in systems:
            m = get(name, k)
            if m is not None:
                out[k] = m.get(key, NAN) * scale
        return out

    def best_peak(what):
        """system -> its best median over the peak sweep's `what` cells, and the shapes
        that gave it."""
        names = [c.name for c in cells if c.group == "peak" and c.series == what]
        best, shapes = {}, {}
        for k in systems:
            for name in names:
                v = (get(name, k) or {}).get("throughput_ops_s", NAN)
                if v == v and v > best.get(k, -1.0):
                    best[k], shapes[k] = v, shape_of(name)
        return best, shapes, names

    def peak_rows(what, op, goal):
        best, shapes, names = best_peak(what)
        if len(names) < 2:
            target_row("%s throughput (%s, 8x16, 100 B)" % (what, op),
                       fig(names[0] if names else wp, "throughput_ops_s"), goal, True, "ops/s")
            return
        target_row("%s throughput (%s, 100 B), each server's best of %s: %s" % (
            what, op, " / ".join(shape_of(n) for n in names),
            ", ".join("%s %s" % (SHORT[k], shapes[k]) for k in systems if k in shapes)),
            best, goal, True, "ops/s")
        target_row("(%s throughput at 8x16 alone, for reference)" % what,
                   fig(names[0], "throughput_ops_s"), goal, True, "ops/s")

    peak_rows("write", "set", 4.0)
    ens_wp = "write peak (set, 9x16)"
    if (ens_wp, "stoa") in ens_med:
        target_row("3-member ensemble write throughput (set, 9x16, 100 B)",
                   {k: ens_med[(ens_wp, k)]["throughput_ops_s"] for k in systems
                    if (ens_wp, k) in ens_med}, 4.0, True, "ops/s")
    peak_rows("read", "get", 3.0)
    for what, name, goal in (("write", wp, 4.0), ("read", rp, 3.0)):
        target_row("(%s efficiency: ZooKeeper's server CPU per op / Stoa's, for reference)" % what,
                   fig(name, "cpu_us_per_op"), goal, True, "µs/op", inverse=True)
    for what in ("write", "read"):
        name = "%s at 100%% of ZK peak" % what
        if (name, "stoa") in med:
            target_row("p99 %s latency at ZooKeeper's peak %s rate" % (what, what),
                       fig(name, "p99", 1 / 1000.0), 1 / 3.0, False, "ms")
    if "stoa" in resources and "zookeeper" in resources:
        n = "{:,}".format(resources["stoa"]["n"])
        target_row("resident memory (VmRSS) with %s znodes of %d B" % (n, LOAD_PAYLOAD),
                   {k: r["rss"] / MIB for k, r in resources.items() if k in systems},
                   RSS_GOAL, False, "MiB")
        target_row("restart to serving with that tree (first restart after the load)",
                   {k: r["restart_s"][0] for k, r in resources.items()
                    if k in systems and r["restart_s"]}, 1 / 3.0, False, "s")
    L.append("")
    if len(best_peak("write")[2]) > 1:
        L.append("Peak throughput is each server's best median over the closed-loop sweep "
                 "(8 sessions x 16 calls in flight, 8x32, 32x16): a server is at its peak only "
                 "when the calls in flight saturate it, and where that happens differs between "
                 "servers. Every shape and its ratio is in the peak table below; the 8x16 rows "
                 "give the single shape the earlier reports used. The latency targets use "
                 "ZooKeeper's 8x16 rate, which the open loop's 8x16 workers offer.\n")
    L.append("At ZooKeeper's peak rate ZooKeeper itself is saturated, so its p99 there "
             "includes queueing; the latency-vs-load table shows the lower loads too.%s\n" % (
                 " etcd gets the same offered rates; where they exceed what it sustains, its "
                 "latency is mostly queueing." if etcd else ""))
    L.extend(bound_notes(systems, get, wp, resources))


def bound_notes(systems, get, write_peak, resources):
    """What bounds the write peak and the memory figure, from this run's numbers: the
    cores a server and the load generator keep busy at the write peak, and the share of
    ZooKeeper's RSS the payload alone takes."""
    lines = []
    busy = []
    for k in systems:
        m = get(write_peak, k)
        if m is None:
            continue
        per_op = m.get("cpu_us_per_op", NAN) + m.get("client_cpu_us_per_op", NAN)
        cores = per_op * m.get("throughput_ops_s", NAN) / 1e6
        if cores == cores:
            busy.append("%s %.2f" % (SHORT[k], cores))
    if busy:
        lines.append("Cores busy at the write peak (server + load generator, CPU per call times "
                     "calls per second): %s. A server that leaves cores idle there is bounded "
                     "by the round trip of its group commit with the 128 calls in flight, not "
                     "by CPU; one that uses them all, by CPU.\n" % ", ".join(busy))
    zk, stoa = resources.get("zookeeper"), resources.get("stoa")
    if zk and stoa and zk.get("rss") == zk.get("rss") and stoa.get("n"):
        n = stoa["n"]
        payload = n * LOAD_PAYLOAD
        rest = {k: (r["rss"] - payload) / n for k, r in resources.items()
                if k in systems and r.get("rss") == r.get("rss")}
        lines.append(
            "The payload alone (%s x %d B = %.0f MiB) is %.2f of ZooKeeper's RSS. The memory "
            "goal of %.2f leaves %.0f B per znode for everything else: its name, stat, ACL, "
            "the index over the children and the process itself. Beyond the payload, per "
            "znode: %s.\n" % (
                "{:,}".format(n), LOAD_PAYLOAD, payload / MIB, payload / zk["rss"], RSS_GOAL,
                (RSS_GOAL * zk["rss"] - payload) / n,
                ", ".join("%s %.0f B" % (SHORT[k], rest[k]) for k in systems if k in rest)))
    return lines
