#!/usr/bin/env python3
"""docs/primitives.md's "Measured under delay and contention" section and
its figures (docs/bench/primitives_*.png), from bench/primitives/run.py's
results.json:

    .venv/bin/python bench/primitives/report.py RESULTS.json [ZOOKEEPER_RESULTS.json]

The second, from `run.py --zookeeper` over the same grid, adds a table of
the client-side recipes on Stoa and on Apache ZooKeeper, cell by cell.

The models are computed again here from each cell's parameters (model.py),
so a change to the model needs no new measurement. Only the section
between its markers is rewritten; the rest of docs/primitives.md is kept.
"""

import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import model  # noqa: E402

BEGIN = "<!-- BEGIN measured-under-delay (bench/primitives/report.py) -->"
END = "<!-- END measured-under-delay -->"
COLORS = {"tas": "#d62728", "tas-async": "#ff7f0e", "queue": "#1f77b4",
          "queue-async": "#17becf", "server": "#2ca02c"}
NAMES = {"tas": "TAS (sync)", "tas-async": "TAS (async, polling)", "queue": "queue (sync)",
         "queue-async": "queue (pipelined)", "server": "server-side FIFO (fifo_lock.lua)"}


def remodel(doc):
    cal = doc["calibration"]
    for c in doc["cells"]:
        m = model.predict(c["primitive"], c["clients"], c["think_ms"], c["hold_ms"],
                          c["client_rtt_ms"], c["q_ms"], cal["w0_ms"], cal["r0_ms"],
                          doc.get("poll_ms", 5.0))
        c["model"], c["model_ms"], c["finite_ms"] = m, m["latency_ms"], m["finite_ms"]
        meas = c.get("measured_ms")
        c["ratio"] = meas / m["latency_ms"] if meas else None
        c["finite_ratio"] = meas / m["finite_ms"] if meas else None
    return doc["cells"]


def f2(x):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else "%.2f" % x


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def find(cells, **kw):
    return [c for c in cells if all(c.get(k) == v for k, v in kw.items())]


def plot_client_rtt(plt, cells, path):
    one = find(cells, n=1)
    levels = [lv for lv in ("low", "high") if find(one, level=lv)]
    if not levels:
        return False
    fig, axes = plt.subplots(1, len(levels), figsize=(5.2 * len(levels), 3.8), dpi=80,
                             squeeze=False)
    for ax, lv in zip(axes[0], levels):
        for p in model.PRIMITIVES:
            pts = sorted((c["client_rtt_ms"], c) for c in find(one, level=lv, primitive=p))
            pts = [(x, c) for x, c in pts if c.get("measured_ms")]
            if not pts:
                continue
            xs = [x for x, _ in pts]
            ax.plot(xs, [c["measured_ms"] for _, c in pts], "o-", color=COLORS[p], label=NAMES[p])
            ax.plot(xs, [c["model_ms"] for _, c in pts], "--", color=COLORS[p], alpha=0.6)
            ax.plot(xs, [c["finite_ms"] for _, c in pts], ":", color=COLORS[p], alpha=0.6)
        cl = find(one, level=lv)[0]
        ax.set_title("%s contention: %d clients, %.0f req/s, hold %.0f ms"
                     % (lv, cl["clients"], cl["rate_per_s"], cl["hold_ms"]), fontsize=9)
        ax.set_xlabel("client-server RTT (ms), 1 server")
        ax.set_ylabel("mean acquire latency (ms)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, title="solid: measured; dashed: M/M/1; dotted: finite",
                      title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_heatmaps(plt, cells, path, n=3):
    grid = find(cells, n=n)
    cs = sorted({c["client_rtt_ms"] for c in grid})
    ss = sorted({c["server_rtt_ms"] for c in grid})
    levels = [lv for lv in ("low", "high") if find(grid, level=lv)]
    if len(cs) < 2 or len(ss) < 2 or not levels:
        return False
    fig, axes = plt.subplots(2 * len(levels), len(model.PRIMITIVES),
                             figsize=(2.3 * len(model.PRIMITIVES), 2.2 * 2 * len(levels)),
                             dpi=80, squeeze=False)
    for li, lv in enumerate(levels):
        vals = [c["measured_ms"] for c in find(grid, level=lv) if c.get("measured_ms")]
        vals += [c["model_ms"] for c in find(grid, level=lv)]
        vmax = max(vals) if vals else 1.0
        for pi, p in enumerate(model.PRIMITIVES):
            for row, (key, what) in enumerate((("measured_ms", "measured"),
                                               ("model_ms", "model (M/M/1)"))):
                ax = axes[2 * li + row][pi]
                m = [[math.nan] * len(cs) for _ in ss]
                for c in find(grid, level=lv, primitive=p):
                    v = c.get(key)
                    if v:
                        m[ss.index(c["server_rtt_ms"])][cs.index(c["client_rtt_ms"])] = v
                ax.imshow(m, origin="lower", cmap="viridis", vmin=0, vmax=vmax, aspect="auto")
                for yi in range(len(ss)):
                    for xi in range(len(cs)):
                        if not math.isnan(m[yi][xi]):
                            ax.text(xi, yi, "%.0f" % m[yi][xi], ha="center", va="center",
                                    color="w" if m[yi][xi] < 0.6 * vmax else "k", fontsize=8)
                ax.set_xticks(range(len(cs)), ["%g" % x for x in cs], fontsize=7)
                ax.set_yticks(range(len(ss)), ["%g" % x for x in ss], fontsize=7)
                ax.set_title("%s\n%s, %s" % (p, what, lv), fontsize=8)
                if pi == 0:
                    ax.set_ylabel("server RTT (ms)", fontsize=7)
                ax.set_xlabel("client RTT (ms)", fontsize=7)
    fig.suptitle("Mean acquire latency (ms), %d servers" % n, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_quorum(plt, cells, path):
    sets = sorted({(c["n"], c["server_rtt_ms"], c["client_rtt_ms"]) for c in cells
                   if c["client_rtt_ms"] == 0})
    if len(sets) < 2:
        return False
    levels = [lv for lv in ("low", "high") if find(cells, level=lv)]
    fig, axes = plt.subplots(1, len(levels), figsize=(5.6 * len(levels), 3.6), dpi=80,
                             squeeze=False)
    width = 0.8 / len(model.PRIMITIVES)
    for ax, lv in zip(axes[0], levels):
        for pi, p in enumerate(model.PRIMITIVES):
            xs, ys, ms = [], [], []
            for si, (n, s, c) in enumerate(sets):
                cell = find(cells, n=n, server_rtt_ms=s, client_rtt_ms=c, level=lv, primitive=p)
                if cell and cell[0].get("measured_ms"):
                    xs.append(si + (pi - 2) * width)
                    ys.append(cell[0]["measured_ms"])
                    ms.append(cell[0]["model_ms"])
            ax.bar(xs, ys, width, color=COLORS[p], label=NAMES[p])
            ax.plot(xs, ms, "_", color="k", markersize=9)
        ax.set_xticks(range(len(sets)), ["n=%d\ns=%g" % (n, s) for n, s, _ in sets], fontsize=8)
        ax.set_ylabel("mean acquire latency (ms)")
        ax.set_title("%s contention, client RTT 0 (bars: measured; -: M/M/1 model)" % lv,
                     fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_hold(plt, cells, path):
    sweep = [c for c in cells if c["level"].startswith("hold")]
    if not sweep:
        return False
    rtts = sorted({c["client_rtt_ms"] for c in sweep})
    fig, axes = plt.subplots(1, len(rtts), figsize=(5.2 * len(rtts), 3.6), dpi=80, squeeze=False)
    for ax, c_rtt in zip(axes[0], rtts):
        for p in model.PRIMITIVES:
            pts = sorted((c["hold_ms"], c) for c in sweep
                         if c["primitive"] == p and c["client_rtt_ms"] == c_rtt
                         and c.get("measured_ms"))
            if pts:
                ax.plot([x for x, _ in pts], [c["measured_ms"] for _, c in pts], "o-",
                        color=COLORS[p], label=NAMES[p])
                ax.plot([x for x, _ in pts], [c["model_ms"] for _, c in pts], "--",
                        color=COLORS[p], alpha=0.6)
        ax.set_title("client RTT %g ms, interarrival 200 ms" % c_rtt, fontsize=9)
        ax.set_xlabel("mean critical section (ms)")
        ax.set_ylabel("mean acquire latency (ms)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def recommendations(cells):
    """Per (RTT, contention) region: primitives ranked by their mean over
    the region's cells of latency / the cell's best (1.00 = always best)."""
    regions = [
        ("low RTT (no delay added)",
         lambda c: c["client_rtt_ms"] == 0 and c["server_rtt_ms"] == 0),
        ("high client RTT (client >= 50 ms)", lambda c: c["client_rtt_ms"] >= 50),
        ("high server RTT (servers >= 50 ms apart, client 0 ms)",
         lambda c: c["n"] > 1 and c["server_rtt_ms"] >= 50 and c["client_rtt_ms"] == 0),
    ]
    rows = []
    for rname, pred in regions:
        for lv in ("low", "high"):
            sel = [c for c in cells if pred(c) and c["level"] == lv and c.get("measured_ms")]
            keys = sorted({(c["n"], c["server_rtt_ms"], c["client_rtt_ms"]) for c in sel})
            rel = {p: [] for p in model.PRIMITIVES}
            for k in keys:
                group = [c for c in sel if (c["n"], c["server_rtt_ms"], c["client_rtt_ms"]) == k]
                if len(group) < 2:
                    continue
                best = min(c["measured_ms"] for c in group)
                for c in group:
                    rel[c["primitive"]].append(c["measured_ms"] / best)
            ranked = sorted(((sum(v) / len(v), p) for p, v in rel.items() if v))
            if ranked:
                rows.append((rname, lv, len(keys), ranked))
    return rows


def zookeeper_table(cells, zk_doc):
    zk = {(c["n"], c["server_rtt_ms"], c["client_rtt_ms"], c["level"], c["primitive"]): c
          for c in zk_doc["cells"] if c.get("measured_ms")}
    rows, ratios = [], {}
    for c in cells:
        key = (c["n"], c["server_rtt_ms"], c["client_rtt_ms"], c["level"], c["primitive"])
        z = zk.get(key)
        if z is None or not c.get("measured_ms"):
            continue
        r = c["measured_ms"] / z["measured_ms"]
        ratios.setdefault(c["level"], []).append(r)
        rows.append("| %d | %g | %g | %s | %s | %s | %s | %.2f | %s | %s | %.2f |" % (
            c["n"], c["server_rtt_ms"], c["client_rtt_ms"], c["level"], c["primitive"],
            f2(c["measured_ms"]), f2(z["measured_ms"]), r, f2(c["p50_ms"]), f2(z["p50_ms"]),
            c["p50_ms"] / z["p50_ms"] if z["p50_ms"] else float("nan")))
    if not rows:
        return []
    lines = ["### Stoa and Apache ZooKeeper: the client-side recipes", "",
             "The same grid with ZooKeeper's servers (`run.py --zookeeper`, run of %s; "
             "Debian's ZooKeeper, `/usr/share/java/zookeeper.jar`) in the namespaces, the same "
             "Rust recipes and load generator. Mean and median acquire latency in ms; the "
             "ratios are Stoa / ZooKeeper (below 1: Stoa faster)." % zk_doc["started"], "",
             "| n | s | c | contention | primitive | Stoa mean | ZooKeeper mean | mean ratio "
             "| Stoa p50 | ZooKeeper p50 | p50 ratio |",
             "|--:|--:|--:|---|---|--:|--:|--:|--:|--:|--:|"] + rows
    for lv, v in sorted(ratios.items()):
        g = math.exp(sum(math.log(x) for x in v) / len(v))
        lines.append("")
        lines.append("%s contention: Stoa / ZooKeeper mean latency %.2f in geometric mean "
                     "(%.2f..%.2f, %d cells)." % (lv.capitalize(), g, min(v), max(v), len(v)))
    return lines + [""]


def section(doc, cells, figures, zk_doc=None):
    cal = doc["calibration"]
    lines = [BEGIN, "", "## Measured under delay and contention", ""]
    lines += [
        "Written by `bench/primitives/report.py` from `bench/primitives/run.py`'s results (run "
        "of %s, %s grid, %s; `run.py --doc` does both); do not edit by hand, re-run it. The machine has 2 cores shared by the servers, the delaying relays "
        "and the load generator, and every cell is a few seconds: read the **ratios** (model "
        "vs measured, one primitive vs another in the same cell) more than the milliseconds."
        % (doc["started"], doc["grid"], "Stoa" if doc["system"] == "stoa" else "Apache ZooKeeper"),
        "",
        "### Method",
        "",
        "The experiments of *The Cost of Consensus* (Figs. 10-16) on one machine "
        "(`bench/primitives/`):",
        "",
        "- **Topology.** Each server and the client in a network namespace of its own "
        "(`tests/e2e/netns.py`). This kernel has no `sch_netem`, so delays are made by "
        "`tests/e2e/wanlink.py`, the user-space relay of `docs/regions.md`: one between the "
        "client's namespace and the client LAN (client-server RTT *c*), and, with a server RTT "
        "*s*, each server a region of its own on a star of WAN links (`tests/e2e/regions.py`): "
        "member 1 is *s* from each other member, the others *2s* from each other. Fresh "
        "servers per topology; the client connects to the leader.",
        "- **Workload.** `stoa bench --scenario prim-lock-<primitive>` (`crates/bench/src/prim.rs`):"
        " %d clients each think an exponential time (mean N/lambda: Poisson arrivals of lock "
        "requests at lambda per second in all), acquire, hold the lock an exponential time, "
        "release. The figure is the mean acquire latency, request to grant, of the requests "
        "made in the %g s window (after %g s of warm-up)."
        % (cells[0]["clients"] if cells else 4, doc["duration_s"], 0.5),
        "- **Contention.** " + "; ".join(
            "*%s*: lambda = %g/s, mean critical section %g ms" % (k, v[1], v[2])
            for k, v in doc["levels"].items()) +
        " (the paper's Fig. 15 at twice its rate, for samples, and its Fig. 16).",
        "- **Primitives.** " + "; ".join("`%s`: %s" % (p, NAMES[p]) for p in model.PRIMITIVES) +
        ". The client-side four are the Rust recipes (`docs/recipes.md`) and run on Apache "
        "ZooKeeper too (`run.py --zookeeper`); the server-side lock is the Lua extension "
        "`examples/extensions/fifo_lock.lua`, registered by the run. More server-side "
        "primitives are added by name in `prim.rs` and `model.py`.",
        "- **Model** (`bench/primitives/model.py`, the paper's section III): a write costs "
        "W = c + q + w0, with q the largest RTT of the leader's fastest majority (eq. 3, over "
        "the star above) and w0 = %.2f ms, a synchronous create's median with no delay "
        "(measured at the start of the run; a read's: r0 = %.3f ms, R = c + r0). Each "
        "primitive needs its round trips when free (T0) and a hand-off H from release to the "
        "next grant (tas 2W; tas-async 2W + q + w0 + poll/2, its recipe waiting for the creates "
        "still in flight, each a write too; queue, queue-async, server W + R; T0: W, except "
        "the synchronous queue's W + R and tas-async's 2W). The lock serves hold + H per grant; the "
        "prediction is T0 plus the M/M/1 wait in queue rho/(mu - lambda) (eq. 5), lambda "
        "solved for the closed loop of clients. Beside it, the finite-source M/M/1//N queue "
        "(the clients are %d, not an infinite Poisson source)."
        % (cal["w0_ms"], cal["r0_ms"], cells[0]["clients"] if cells else 4),
        "",
    ]
    if cal.get("note"):
        lines += ["Calibration: %s." % cal["note"], ""]
    if figures:
        lines += ["### Figures", ""]
        for fname, title in figures:
            lines += ["![%s](bench/%s)" % (title, fname), ""]
    lines += ["### Model vs measurement", "",
              "Mean acquire latency in ms; *ratio* is measured / model (1.00: the model is "
              "exact). n: servers, s: server RTT, c: client RTT (ms); q: the consensus "
              "round of eq. 3 for the leader elected; rho: the model's lock utilisation; T0: "
              "the model's acquire of a free lock (its round trips).", "",
              "| n | s | c | q | contention | primitive | acquisitions/s | measured mean "
              "| p50 | p99 | model M/M/1 | ratio | model M/M/1//N | ratio | rho | T0 | p50 / T0 |",
              "|--:|--:|--:|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for c in cells:
        t0 = c["model"]["t0_ms"]
        lines.append("| %d | %g | %g | %g | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f "
                     "| %s | %s |"
                     % (c["n"], c["server_rtt_ms"], c["client_rtt_ms"], c["q_ms"], c["level"],
                        c["primitive"], f2(c.get("acquisitions_per_s")), f2(c.get("measured_ms")),
                        f2(c.get("p50_ms")), f2(c.get("p99_ms")), f2(c["model_ms"]),
                        f2(c.get("ratio")), f2(c["finite_ms"]), f2(c.get("finite_ratio")),
                        c["model"]["rho"], f2(t0),
                        f2(c["p50_ms"] / t0 if c.get("p50_ms") and t0 > 0 else None)))
    ratios = [c["ratio"] for c in cells if c.get("ratio")]
    fratios = [c["finite_ratio"] for c in cells if c.get("finite_ratio")]
    if ratios:
        def gmean(v):
            return math.exp(sum(math.log(x) for x in v) / len(v))
        lines += ["", "Geometric mean of measured / model over the %d cells: M/M/1 %.2f "
                  "(%.2f..%.2f), finite source %.2f (%.2f..%.2f)."
                  % (len(ratios), gmean(ratios), min(ratios), max(ratios), gmean(fratios),
                     min(fratios), max(fratios))]
        for lv in ("low", "high"):
            r = [c["ratio"] for c in cells if c.get("ratio") and c["level"] == lv]
            fr = [c["finite_ratio"] for c in cells if c.get("finite_ratio") and c["level"] == lv]
            if r:
                lines.append("%s contention: M/M/1 %.2f, finite source %.2f." % (
                    lv.capitalize(), gmean(r), gmean(fr)))
        # The round trips alone: the median acquire against T0 where a delay
        # dominates the fixed costs (c or s at least 25 ms) and contention is low.
        far = [c["p50_ms"] / c["model"]["t0_ms"] for c in cells
               if c["level"] == "low" and c.get("p50_ms")
               and max(c["client_rtt_ms"], c["server_rtt_ms"]) >= 25]
        if far:
            lines.append("The round trips alone: at low contention with a delay of 25 ms or "
                         "more, the median acquire is %.2f of T0, the model's round trips for a "
                         "free lock (%.2f..%.2f, %d cells)."
                         % (gmean(far), min(far), max(far), len(far)))
    errs = [c for c in cells if c.get("error") or c.get("errors") or c.get("timeouts")]
    if errs:
        lines += ["", "Cells with errors or timeouts: " + "; ".join(
            "n=%d s=%g c=%g %s %s: %s" % (c["n"], c["server_rtt_ms"], c["client_rtt_ms"],
                                           c["level"], c["primitive"],
                                           c.get("error") or c.get("errors") or
                                           "%d timed out" % c["timeouts"]) for c in errs)]
    if zk_doc is not None:
        lines += [""] + zookeeper_table(cells, zk_doc)
    lines += ["", "### Which primitive where", "",
              "Measured: for each region of the grid, the primitives ranked by their mean "
              "latency relative to the best primitive of the same cell (1.00: the fastest in "
              "every cell of the region).", "",
              "| RTT | contention | cells | fastest | runner-up | slowest |",
              "|---|---|--:|---|---|---|"]
    for rname, lv, k, ranked in recommendations(cells):
        lines.append("| %s | %s | %d | %s | %s | %s |" % (
            rname, lv, k, "`%s` %.2f" % (ranked[0][1], ranked[0][0]),
            "`%s` %.2f" % (ranked[1][1], ranked[1][0]) if len(ranked) > 1 else "-",
            "`%s` %.2f" % (ranked[-1][1], ranked[-1][0])))
    lines += ["", END, ""]
    return "\n".join(lines)


def write(doc, root, zk_doc=None):
    cells = remodel(doc)
    out_dir = os.path.join(root, "docs", "bench")
    os.makedirs(out_dir, exist_ok=True)
    figures = []
    plt = pyplot()
    if plt is not None:
        for fname, title, fn in (
                ("primitives_vs_client_rtt.png",
                 "Acquire latency vs client-server RTT, measured and modelled",
                 plot_client_rtt),
                ("primitives_heatmap.png",
                 "Acquire latency over client and server RTT, 3 servers (heatmaps)",
                 plot_heatmaps),
                ("primitives_vs_quorum.png", "Acquire latency vs quorum size", plot_quorum),
                ("primitives_vs_hold.png", "Acquire latency vs critical section", plot_hold)):
            if fn(plt, cells, os.path.join(out_dir, fname)):
                figures.append((fname, title))
    with open(os.path.join(out_dir, "primitives.json"), "w") as f:
        json.dump(doc, f, indent=1)
    if zk_doc is not None:
        with open(os.path.join(out_dir, "primitives-zookeeper.json"), "w") as f:
            json.dump(zk_doc, f, indent=1)
    text = section(doc, cells, figures, zk_doc)
    path = os.path.join(root, "docs", "primitives.md")
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
        if BEGIN in old and END in old:
            new = old[:old.index(BEGIN)] + text.rstrip("\n") + old[old.index(END) + len(END):]
        else:
            new = old.rstrip("\n") + "\n\n" + text
    else:
        new = ("# Primitives\n\nLocks, queues and the rest of the coordination primitives: "
               "client-side recipes (`docs/recipes.md`) and server-side extensions "
               "(`examples/extensions/`), measured.\n\n" + text)
    with open(path, "w") as f:
        f.write(new)
    print("wrote %s and %d figure(s) under %s" % (path, len(figures), out_dir))


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    docs = []
    for path in sys.argv[1:]:
        with open(path) as f:
            docs.append(json.load(f))
    if len(docs) == 2:
        if docs[1].get("system") != "zookeeper":
            sys.exit("%s is not a --zookeeper run" % sys.argv[2])
        remodel(docs[1])
    write(docs[0], os.path.abspath(os.path.join(HERE, "..", "..")),
          docs[1] if len(docs) == 2 else None)


if __name__ == "__main__":
    main()
