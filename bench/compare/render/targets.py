"""The report's targets table (the issue's goals) and what bounds them."""

from math import nan as NAN

from ..resources import LOAD_PAYLOAD, MIB
from ..systems import long, of_family, short
from .text import num, ratio, shape_of

# The memory goal: Stoa's RSS with the resource tree at most this
# share of ZooKeeper's.
RSS_GOAL = 0.2


def targets(L, cells, med, systems, ens_med, resources, reference):
    """The goals against ZooKeeper, read off the peak, latency and
    resource figures, and the notes on what bounds them; `reference`: the
    ZooKeeper whose peak rates the latency cells offered."""
    zks, etcds = of_family("zookeeper", systems), of_family("etcd", systems)
    get = lambda name, kind: med.get((name, kind))  # noqa: E731
    wp, rp = "write peak (set, 8x16)", "read peak (get, 8x16)"
    L.append("## Targets (issue)\n")
    L.append("The goals are against ZooKeeper: each ratio column names the server it is "
             "against, and each ZooKeeper's has its own \"met\"%s.\n"
             % ("; the etcd columns give the same ratio against etcd" if etcds else ""))
    L.append("| target | " + " | ".join(long(k) for k in systems) + " | goal | "
             + " | ".join("Stoa / %s | met" % long(z) for z in zks)
             + "".join(" | Stoa / %s" % long(e) for e in etcds) + " |")
    L.append("|---|" + "---:|" * (len(systems) + 1) + "---:|:-:|" * len(zks)
             + "---:|" * len(etcds))

    def target_row(what, values, goal, higher, unit, inverse=False):
        """values: system -> figure; ratio = Stoa/other (other/Stoa if inverse)."""
        sv = values.get("stoa", NAN)
        if sv != sv and all(values.get(z, NAN) != values.get(z, NAN) for z in zks):
            return  # not measured in this report
        fmt = "%.0f" if unit in ("ops/s", "MiB") else ("%.1f" if unit == "µs/op" else "%.2f")
        row = "| %s | %s | %s %.2f |" % (
            what, " | ".join(num(values.get(k), fmt + " " + unit) for k in systems),
            ">=" if higher else "<=", goal)
        for k in zks + etcds:
            v = values.get(k, NAN)
            r = ratio(v, sv) if inverse else ratio(sv, v)
            row += " %s |" % num(r, "%.2f")
            if k in zks:
                met = (r >= goal) if higher else (r <= goal)
                row += " %s |" % ("–" if r != r else "yes" if met else "**no**")
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
            ", ".join("%s %s" % (short(k), shapes[k]) for k in systems if k in shapes)),
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
            target_row("p99 %s latency at %s's peak %s rate" % (what, long(reference), what),
                       fig(name, "p99", 1 / 1000.0), 1 / 3.0, False, "ms")
    if "stoa" in resources and of_family("zookeeper", resources):
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
                 "%s's 8x16 rate, which the open loop's 8x16 workers offer.\n" % long(reference))
    L.append("At %s's peak rate that ZooKeeper itself is saturated, so its p99 there "
             "includes queueing; the latency-vs-load table shows the lower loads too. %s\n" % (
                 long(reference),
                 "Every other server gets the same offered rates; where they exceed what it "
                 "sustains, its latency is mostly queueing."))
    L.extend(bound_notes(systems, get, wp, resources, reference))


def bound_notes(systems, get, write_peak, resources, reference):
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
            busy.append("%s %.2f" % (short(k), cores))
    if busy:
        lines.append("Cores busy at the write peak (server + load generator, CPU per call times "
                     "calls per second): %s. A server that leaves cores idle there is bounded "
                     "by the round trip of its group commit with the 128 calls in flight, not "
                     "by CPU; one that uses them all, by CPU.\n" % ", ".join(busy))
    zk, stoa = resources.get(reference), resources.get("stoa")
    if zk and stoa and zk.get("rss") == zk.get("rss") and stoa.get("n"):
        n = stoa["n"]
        payload = n * LOAD_PAYLOAD
        rest = {k: (r["rss"] - payload) / n for k, r in resources.items()
                if k in systems and r.get("rss") == r.get("rss")}
        lines.append(
            "The payload alone (%s x %d B = %.0f MiB) is %.2f of %s's RSS. The memory "
            "goal of %.2f leaves %.0f B per znode for everything else: its name, stat, ACL, "
            "the index over the children and the process itself. Beyond the payload, per "
            "znode: %s.\n" % (
                "{:,}".format(n), LOAD_PAYLOAD, payload / MIB, payload / zk["rss"],
                long(reference), RSS_GOAL,
                (RSS_GOAL * zk["rss"] - payload) / n,
                ", ".join("%s %.0f B" % (short(k), rest[k]) for k in systems if k in rest)))
    return lines
