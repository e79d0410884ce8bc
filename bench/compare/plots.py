"""The PNG plots under bench/ (none without matplotlib)."""

import os

from .ezk import ezk_key, ezk_variants, ezk_zookeepers
from .failover import median_bins
from .resources import LOAD_PAYLOAD, MIB
from .systems import COLORS, SYSTEMS, long, short


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend, or None without
    matplotlib (then no plots are made)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def matrix_plots(cells, med, out_dir):
    plt = pyplot()
    if plt is None:
        return []
    made = []
    styles = {"write": "-", "read": "--", "mixed": "-"}

    def series_plot(group, fname, title, xlabel, ylabel, value, logx=False, logy=False):
        group_cells = [c for c in cells if c.group == group and c.x is not None]
        if not group_cells:
            return
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=80)
        for series in sorted({c.series for c in group_cells}):
            pts = sorted((c.x, c.name) for c in group_cells if c.series == series)
            for kind in SYSTEMS:
                have = [(x, name) for x, name in pts if (name, kind) in med]
                if not have:
                    continue
                xs = [x for x, _ in have]
                ys = [value(med[(name, kind)], x) for x, name in have]
                ax.plot(xs, ys, styles.get(series, "-"), marker="o", color=COLORS[kind],
                        label="%s %s" % (long(kind), series))
        if logx:
            ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, fname))
        plt.close(fig)
        made.append((fname, title))

    tput = lambda m, x: m["throughput_ops_s"]  # noqa: E731
    series_plot("peak", "throughput_vs_in_flight.png", "Closed-loop throughput vs calls in flight",
                "calls in flight (8x16, 8x32, 32x16)", "ops/s (log)", tput, logx=True, logy=True)
    series_plot("clients", "throughput_vs_clients.png", "Throughput vs synchronous sessions",
                "sessions (1 call in flight each)", "ops/s", tput, logx=True)
    series_plot("latency", "latency_vs_load.png", "p99 latency vs offered load (8x16)",
                "offered load / ZooKeeper's peak", "p99 ms (log)", lambda m, x: m["p99"] / 1000.0,
                logy=True)
    series_plot("payload", "throughput_vs_payload.png", "Throughput vs payload (8x8)",
                "payload bytes", "ops/s", tput, logx=True)
    series_plot("read-ratio", "read_ratio_sweep.png", "Read-ratio sweep (8x8)",
                "% reads", "ops/s", tput)
    return made


def ezk_plots(points, med, out_dir):
    plt = pyplot()
    if plt is None:
        return []
    if not points:
        return []
    made = []
    variants = ezk_variants(ezk_zookeepers(med))

    def lines(ax, experiment, value):
        ns = sorted({n for e, n, _ in points if e == experiment})
        for approach, system in variants:
            ax.plot(ns, [value(med[ezk_key(experiment, n, approach, system)]) for n in ns],
                    "-" if approach == "extension" else "--", marker="o", color=COLORS[system],
                    label="%s on %s" % (approach, long(system)))
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns)
        ax.set_xticklabels([str(n) for n in ns])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=80)
    lines(ax, "pq", lambda m: m["throughput_ops_s"])
    ax.set_title("EZK priority queue: successful dequeues/s (paper fig. 4)", fontsize=10)
    ax.set_xlabel("consumers (synchronous sessions)")
    ax.set_ylabel("dequeues/s")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "ezk_priority_queue.png"))
    plt.close(fig)
    made.append(("ezk_priority_queue.png", "EZK priority queue: dequeues/s vs consumers"))

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6), dpi=80)
    lines(a1, "quota", lambda m: m["throughput_ops_s"])
    a1.set_title("(a) allocations + releases/s", fontsize=10)
    a1.set_xlabel("clients")
    a1.set_ylabel("ops/s")
    lines(a2, "quota", lambda m: m["calls_per_op"])
    a2.set_yscale("log")
    a2.set_title("(b) remote calls per allocation (log)", fontsize=10)
    a2.set_xlabel("clients")
    a2.set_ylabel("calls / allocation")
    fig.suptitle("EZK quota service, total 1500, requests of 100 (paper fig. 7)", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "ezk_quota.png"))
    plt.close(fig)
    made.append(("ezk_quota.png", "EZK quota: throughput and calls per allocation vs clients"))
    return made


def resource_plot(res, out_dir):
    plt = pyplot()
    if plt is None:
        return []
    systems = [k for k in SYSTEMS if k in res]
    if "stoa" not in systems:
        return []
    n = res["stoa"]["n"]
    panels = (("(a) RSS after the load, MiB", lambda r: r["rss"] / MIB),
              ("(b) restart to serving, s", lambda r: r["restart_s"][0] if r["restart_s"] else 0),
              ("(c) stop (SIGTERM to exit), s", lambda r: r["stop_s"]),
              ("(d) data dir after the load, MiB", lambda r: r["disk"] / MIB))
    fig, axes = plt.subplots(1, len(panels), figsize=(12, 3.2), dpi=80)
    for ax, (title, value) in zip(axes, panels):
        vals = [value(res[k]) for k in systems]
        ax.bar([short(k) for k in systems], [v if v == v else 0 for v in vals],
               color=[COLORS[k] for k in systems])
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        # Five names side by side would overlap.
        ax.tick_params(axis="x", labelsize=8, labelrotation=30 if len(systems) > 3 else 0)
    fig.suptitle("Resource use with %s znodes of %d B (standalone)" % ("{:,}".format(n),
                                                                     LOAD_PAYLOAD), fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "resources.png"))
    plt.close(fig)
    return [("resources.png", "Resource use: RSS, restart and stop times, disk")]


def ensemble_plot(cells, med, out_dir):
    plt = pyplot()
    if plt is None:
        return []
    if not cells:
        return []
    systems = [k for k in SYSTEMS if any((c.name, k) in med for c in cells)]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=80)
    width = 0.8 / max(len(systems), 1)
    xs = range(len(cells))
    for j, kind in enumerate(systems):
        get = lambda c, key, scale=1.0: (med[(c.name, kind)][key] * scale  # noqa: E731
                                         if (c.name, kind) in med else 0)
        pos = [x + (j - (len(systems) - 1) / 2.0) * width for x in xs]
        a1.bar(pos, [get(c, "throughput_ops_s") for c in cells], width, color=COLORS[kind],
               label=long(kind))
        a2.bar(pos, [get(c, "p99", 1e-3) for c in cells], width, color=COLORS[kind],
               label=long(kind))
    for ax, title, ylabel in ((a1, "(a) throughput", "ops/s (log)"),
                              (a2, "(b) p99 latency", "p99 ms (log)")):
        ax.set_yscale("log")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([c.name.replace(" (", "\n(") for c in cells], fontsize=7,
                           rotation=30, ha="right")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("3-member ensembles, clients spread over the members", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "ensemble.png"))
    plt.close(fig)
    return [("ensemble.png", "3-member ensembles: throughput and p99 latency per cell")]


def failover_plot(failover, out_dir):
    """Acknowledged writes/s of all clients through the leader's kill, a line
    per system (each bin's median over the rounds)."""
    plt = pyplot()
    if plt is None or not failover:
        return []
    fctx, res = failover["context"], failover["systems"]
    systems = [k for k in SYSTEMS if res.get(k, {}).get("rounds")]
    if not systems:
        return []
    start, bin_s = fctx["window_s"][0], fctx["bin_s"]
    fig, ax = plt.subplots(figsize=(8.5, 3.6), dpi=80)
    for kind in systems:
        ys = median_bins(res[kind]["rounds"])
        ax.step([start + i * bin_s for i in range(len(ys))], ys, where="post",
                color=COLORS[kind], label=long(kind))
    ax.axvline(0.0, color="black", linewidth=0.8, linestyle=":")
    ax.set_xlim(fctx["window_s"][0], fctx["window_s"][1])
    ax.set_title("Writes acknowledged, leader killed at 0 (%d clients, %.0f ms bins, "
                 "median of %d round%s)" % (3 * fctx["clients_per_member"], bin_s * 1000,
                                            fctx["rounds"], "s" if fctx["rounds"] > 1 else ""),
                 fontsize=9)
    ax.set_xlabel("seconds from the kill")
    ax.set_ylabel("acknowledged writes/s")
    ax.grid(True, alpha=0.3)
    # Outside the axes: the lines fill them before and after the kill.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "failover.png"))
    plt.close(fig)
    return [("failover.png", "Failover: acknowledged writes/s through a leader kill -9")]
