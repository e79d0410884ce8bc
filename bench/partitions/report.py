"""agora.py's figures: medians and per-round ratios, the targets, the
markdown section (docs/bench/agora.md, which scripts/bench-compare copies
into docs/benchmarks.md) and the plots."""

import json
import math
import os
import statistics

import model

OP_NAMES = {"set": "setData", "get": "getData"}
P1, P2, T1, ZK = "P=1", "P=2", "P=2, partition.threads=1", "ZK 3.9.5"
O1 = "P=2, partition.owned=yes"
WAY_NAMES = {"none": "no switch (all under /g1)", "burst10": "bursts of 10",
             "burst1": "bursts of 1 (a switch every call)"}
CPU_TARGET = 1.10
SWITCH_TARGET = 0.30
REBALANCE_TARGET_S = 5.0
# A throughput ratio moves by up to ±15% between runs on this machine
# (docs/partitions.md, docs/performance.md): what "holds" allows.
HOLD_TOLERANCE = 0.85


def med(xs):
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(xs) if xs else None


def spread(xs):
    """{"median", "low", "high", "n"} of the values, or None."""
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not xs:
        return None
    return {"median": statistics.median(xs), "low": min(xs), "high": max(xs), "n": len(xs)}


def _select(results, **kw):
    return [r for r in results if all(r.get(k) == v for k, v in kw.items())]


def _cell(rs):
    out = {"n": len(rs)}
    for k in ("throughput", "cpu_us_per_op", "p50_ms", "p99_ms", "client_cpu_us_per_op"):
        out[k] = med([r.get(k) for r in rs])
    out["errors"] = sum(r.get("errors", 0) for r in rs)
    threads = [r["threads_us_per_op"] for r in rs if r.get("threads_us_per_op")]
    if threads:
        out["threads_us_per_op"] = {k: med([t[k] for t in threads]) for k in threads[0]}
    return out


def _paired(results, key, a, b, value, **kw):
    """Per-round value(a) / value(b) for the rows of `key` a and b with
    the same round and kw: their spread."""
    out = []
    rows_a = _select(results, **dict(kw, **{key: a}))
    for ra in rows_a:
        rb = _select(results, **dict(kw, **{key: b, "round": ra["round"]}))
        if rb and ra.get(value) and rb[0].get(value):
            out.append(ra[value] / rb[0][value])
    return spread(out)


def summarize(results, peaks):
    s = {"throughput": [], "latency": [], "switching": [], "rebalance": None,
         "latency_peaks": peaks}
    tr = _select(results, figure="throughput")
    for config in [c for c in (P1, P2, T1, O1, ZK) if _select(tr, config=c)]:
        for op in ("set", "get"):
            for payload in sorted({r["payload"] for r in tr}):
                rs = _select(tr, config=config, op=op, payload=payload)
                if not rs:
                    continue
                row = _cell(rs)
                row.update({"config": config, "op": op, "payload": payload})
                if config != P1:
                    row["vs_p1_throughput"] = _paired(tr, "config", config, P1, "throughput",
                                                      op=op, payload=payload)
                    row["vs_p1_cpu"] = _paired(tr, "config", config, P1, "cpu_us_per_op",
                                               op=op, payload=payload)
                if config == P1 and _select(tr, config=ZK, op=op, payload=payload):
                    row["vs_zk_throughput"] = _paired(tr, "config", P1, ZK, "throughput",
                                                      op=op, payload=payload)
                    # ZooKeeper's CPU per op over Stoa's: the efficiency ratio.
                    inv = _paired(tr, "config", ZK, P1, "cpu_us_per_op", op=op, payload=payload)
                    row["zk_cpu_over_p1"] = inv
                s["throughput"].append(row)
    # Every round's P=2 / P=1 CPU per op, over all payloads: the figure the
    # CPU target is read from (one cell's three rounds are too few here).
    s["cpu_ratio_pooled"] = {}
    for op in ("set", "get"):
        xs = []
        for r2 in _select(tr, config=P2, op=op):
            r1 = _select(tr, config=P1, op=op, payload=r2["payload"], round=r2["round"])
            if r1 and r1[0].get("cpu_us_per_op") and r2.get("cpu_us_per_op"):
                xs.append(r2["cpu_us_per_op"] / r1[0]["cpu_us_per_op"])
        s["cpu_ratio_pooled"][op] = spread(xs)
    la = _select(results, figure="latency")
    for config in (P1, P2):
        for op in ("set", "get"):
            for frac in sorted({r["fraction"] for r in la}):
                rs = _select(la, config=config, op=op, fraction=frac)
                if rs:
                    row = _cell(rs)
                    row.update({"config": config, "op": op, "fraction": frac,
                                "offered": med([r["offered"] for r in rs])})
                    s["latency"].append(row)
    sw = _select(results, figure="switching")
    for config in (P2, P1):
        for op in ("set", "get"):
            for way in ("none", "burst10", "burst1"):
                rs = _select(sw, config=config, op=op, way=way)
                if not rs:
                    continue
                row = _cell(rs)
                row.update({"config": config, "op": op, "way": way})
                if way != "none":
                    row["vs_none_throughput"] = _paired(sw, "way", way, "none", "throughput",
                                                        config=config, op=op)
                    row["vs_none_cpu"] = _paired(sw, "way", way, "none", "cpu_us_per_op",
                                                 config=config, op=op)
                s["switching"].append(row)
    rb = _select(results, figure="rebalance")
    if rb:
        moves = [r["move_s"] for r in rb]
        s["rebalance"] = {
            "rounds": len(rb),
            "moved": sum(1 for m in moves if m is not None),
            "move_s": spread([m for m in moves if m is not None]),
            "moved_before_skew": sum(1 for r in rb if r.get("moved_before_skew")),
            "moves": [r["moves"] for r in rb],
            "balanced_ops_s": med([r.get("balanced_ops_s") for r in rb]),
            "skewed_ops_s": med([r.get("skewed_ops_s") for r in rb]),
            "after_ops_s": med([r.get("after_ops_s") for r in rb]),
            "window_ms": rb[0]["window_ms"],
        }
    fa = _select(results, figure="fast")
    s["fast"] = []
    for way in ("plain", "fast"):
        rs = _select(fa, way=way)
        if not rs:
            continue
        row = _cell(rs)
        row["way"] = way
        row["reads_fast"] = med([r.get("counters", {}).get("stoa_reads_fast") for r in rs])
        row["reads_off_cut"] = med([r.get("counters", {}).get("stoa_reads_off_cut")
                                    for r in rs])
        if way == "fast":
            row["vs_plain_throughput"] = _paired(fa, "way", "fast", "plain", "throughput")
            row["vs_plain_cpu"] = _paired(fa, "way", "fast", "plain", "cpu_us_per_op")
        s["fast"].append(row)
    s["wal"], s["wal_fit"] = wal_summary(_select(results, figure="wal"))
    return s


def wal_groups(r):
    """(writes, groups the WAL thread synced, its CPU seconds) of a WAL
    figure's run."""
    c = r.get("counters") or {}
    groups = c.get("stoa_wal_fsyncs", 0) - c.get("stoa_wal_fsyncs_inline", 0)
    return c.get("stoa_txns_applied", 0), groups, (r.get("thread_s") or {}).get("wal", 0)


def fit_wal(runs):
    """Least squares, over every run, of the WAL thread's CPU as a cost per
    group plus a cost per write (no constant): {"group_us", "write_us",
    "runs"}, or None when the runs cannot tell the two apart."""
    pts = [wal_groups(r) for r in runs]
    pts = [(w, g, t) for w, g, t in pts if w > 0 and g > 0]
    sgg = sum(g * g for w, g, t in pts)
    sww = sum(w * w for w, g, t in pts)
    sgw = sum(g * w for w, g, t in pts)
    sgt = sum(g * t for w, g, t in pts)
    swt = sum(w * t for w, g, t in pts)
    det = sgg * sww - sgw * sgw
    if len(pts) < 2 or det <= 1e-9 * sgg * sww:
        return None
    group_s = (sgt * sww - swt * sgw) / det
    write_s = (swt * sgg - sgt * sgw) / det
    return {"group_us": group_s * 1e6, "write_us": write_s * 1e6, "runs": len(pts)}


def wal_summary(runs):
    """The WAL figure's rows (one per load: medians over its rounds) and
    the fit over all its runs."""
    rows = []
    for load in sorted({r["load"] for r in runs}, key=lambda l: _select(
            runs, load=l)[0]["in_flight"]):
        rs = _select(runs, load=load)
        per = [wal_groups(r) for r in rs]
        rows.append({
            "load": load, "in_flight": rs[0]["in_flight"], "n": len(rs),
            "throughput": med([r["throughput"] for r in rs]),
            "writes_per_group": med([w / g for w, g, t in per if g > 0]),
            "wal_us_per_write": med([1e6 * t / w for w, g, t in per if w > 0]),
            "wal_us_per_group": med([1e6 * t / g for w, g, t in per if g > 0]),
            "fsync_avg_ms": med([r.get("fsync_avg_ms") for r in rs]),
        })
    fit = fit_wal(runs)
    if fit is not None:
        fit["sync_ms"] = med([r.get("fsync_avg_ms") for r in runs])
    return rows, fit


def _row(rows, **kw):
    got = [r for r in rows if all(r.get(k) == v for k, v in kw.items())]
    return got[0] if got else None


def model_inputs(summary):
    """The model's inputs (model.py) from this run's 100 B cells."""
    out = {}
    for kind, op in (("write", "set"), ("read", "get")):
        p1 = _row(summary["throughput"], config=P1, op=op, payload=100)
        p2 = _row(summary["throughput"], config=P2, op=op, payload=100)
        if not p1 or not p1.get("cpu_us_per_op") or not p1.get("threads_us_per_op"):
            continue
        th = p1["threads_us_per_op"]
        ratio = (p2 or {}).get("vs_p1_cpu")
        o_raw = ratio["median"] - 1 if ratio else 0.0
        inp = {"cpu": p1["cpu_us_per_op"], "engine": th["engine"],
               "wal": th["wal"], "other": th["other"] + th["workers"],
               "o_measured": o_raw, "o": max(0.0, o_raw),
               "throughput_p1": p1["throughput"],
               "wal_busy_cores_p1": th["wal"] * p1["throughput"] / 1e6,
               "engine_busy_cores_p1": th["engine"] * p1["throughput"] / 1e6}
        fit = summary.get("wal_fit")
        if kind == "write" and fit and fit.get("sync_ms"):
            inp.update({"wal_group_us": fit["group_us"], "wal_write_us": fit["write_us"],
                        "wal_sync_us": 1000 * fit["sync_ms"]})
        sw = _row(summary["switching"], config=P2, op=op, way="burst1")
        if sw and sw.get("vs_none_throughput"):
            inp["switch_loss"] = max(0.0, 1 - sw["vs_none_throughput"]["median"])
        out[kind] = inp
    return out


def _earlier(root):
    """Stoa and ZooKeeper 3.9.5 at 8x16, 100 B, from docs/bench/results.json
    (the run docs/benchmarks.md was written from): {op: (thr ratio, cpu
    ratio ZK/Stoa, date)}."""
    path = os.path.join(root, "docs", "bench", "results.json")
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}, None
    out = {}
    for c in doc.get("cells", []):
        if c.get("group") != "peak":
            continue
        args = c.get("args", [])
        if "--outstanding" not in args or args[args.index("--outstanding") + 1] != "16" or \
                args[args.index("--sessions") + 1] != "8":
            continue
        op = "set" if "set=100" in args else "get" if "get=100" in args else None
        s, z = c.get("stoa"), c.get("zookeeper-3.9")
        if op and s and z and z.get("throughput_ops_s") and s.get("cpu_us_per_op"):
            out[op] = (s["throughput_ops_s"] / z["throughput_ops_s"],
                       z["cpu_us_per_op"] / s["cpu_us_per_op"])
    return out, (doc.get("context") or {}).get("date")


def targets(doc, root):
    s = doc["summary"]
    out = []
    here = "this machine (%s)" % doc["context"]["machine"].split(" (")[0]
    # 1. CPU per op, P=2 over P=1: each kind's pooled median (every round
    # and payload), the cells' own medians beside it.
    pooled = s.get("cpu_ratio_pooled") or {}
    parts, met = [], True
    for op in ("set", "get"):
        sp = pooled.get(op)
        cells = [r for r in s["throughput"] if r["config"] == P2 and r["op"] == op
                 and r.get("vs_p1_cpu")]
        if not sp or not cells:
            continue
        met = met and sp["median"] <= CPU_TARGET
        parts.append("%s %.2f (%d round pairs, %.2f-%.2f; by value: %s)" % (
            OP_NAMES[op], sp["median"], sp["n"], sp["low"], sp["high"], ", ".join(
                "%d B %.2f" % (r["payload"], r["vs_p1_cpu"]["median"]) for r in cells)))
    if parts:
        out.append({
            "target": "server CPU per operation, P=2 over P=1 (the median over every round "
                      "and value size, writes and reads each)",
            "measured": "; ".join(parts),
            "goal": "<= %.2f" % CPU_TARGET,
            "met": met,
            "machine": here})
    # 2. The 16-core sweep.
    pr = doc.get("model") or {}
    owned = (pr.get("writes") or {}).get("owned (o const)")
    lent = (pr.get("writes") or {}).get("apply lent (o const)")
    best = model.threads_scaling(0)
    meas = ", ".join("P=%d %.2f (%s)" % (p, best[p][0], best[p][1])
                     for p in sorted(best) if 1 < p <= 8)
    model_txt = ""
    if owned and lent:
        model_txt = ("; the model: %.2f with apply lent, %.2f with owned partitions at P=8 "
                     "(target 5.6)" % (lent[8], owned[8]))
    out.append({
        "target": "16 cores: writes at P partitions >= 0.7 x P x P=1's, up to P=8",
        "measured": "after partition threads, setData at P over the best one partition did "
                    "in the same sweep, the best of four settings: %s%s" % (meas, model_txt),
        "goal": ">= 0.7 x P",
        "met": False,
        "machine": "the 16-core device machine, 2026-11-29 (docs/partitions.md, \"The "
                   "16-core sweep, after threads\")"})
    # 3. Switching.
    sw = [r for r in s["switching"] if r["config"] == P2 and r.get("vs_none_throughput")]
    if sw:
        worst = min(sw, key=lambda r: r["vs_none_throughput"]["median"])
        loss = 1 - worst["vs_none_throughput"]["median"]
        ctl = _row(s["switching"], config=P1, op=worst["op"], way=worst["way"])
        ctl_txt = ""
        if ctl and ctl.get("vs_none_throughput"):
            ctl_txt = "; at P=1, the same paths: %.2fx" % ctl["vs_none_throughput"]["median"]
        out.append({
            "target": "worst-case cost of switching partitions (throughput lost, P=2)",
            "measured": "%.0f%% (%s, %s: %.2fx no switch; rounds %.2f-%.2f)%s" % (
                100 * max(0.0, loss), OP_NAMES[worst["op"]], WAY_NAMES[worst["way"]],
                worst["vs_none_throughput"]["median"], worst["vs_none_throughput"]["low"],
                worst["vs_none_throughput"]["high"], ctl_txt),
            "goal": "<= %.0f%%" % (100 * SWITCH_TARGET),
            "met": loss <= SWITCH_TARGET,
            "machine": here})
    # 4. Rebalance.
    rb = s.get("rebalance")
    if rb:
        ms = rb["move_s"]
        ok = ms is not None and rb["moved"] == rb["rounds"] and ms["high"] <= REBALANCE_TARGET_S
        out.append({
            "target": "a skew rebalanced (the balancer's first move applied after the skew)",
            "measured": ("%.2f s median, %.2f s worst, in %d of %d rounds (window %d ms)" % (
                ms["median"], ms["high"], rb["moved"], rb["rounds"], rb["window_ms"])
                if ms else "no move in %d rounds" % rb["rounds"]),
            "goal": "<= %.0f s" % REBALANCE_TARGET_S,
            "met": ok,
            "machine": here})
    # 5. partitions=1 keeps the earlier figures.
    earlier, date = _earlier(root)
    checks = []
    for op in ("set", "get"):
        p1 = _row(s["throughput"], config=P1, op=op, payload=100)
        if not p1 or op not in earlier or not p1.get("vs_zk_throughput"):
            continue
        now_t, now_c = p1["vs_zk_throughput"]["median"], p1["zk_cpu_over_p1"]["median"]
        then_t, then_c = earlier[op]
        checks.append((op, now_t, then_t, now_c, then_c))
    if checks:
        holds = all(nt >= HOLD_TOLERANCE * tt and nc >= HOLD_TOLERANCE * tc
                    for _, nt, tt, nc, tc in checks)
        out.append({
            "target": "partitions=1: the earlier figures of docs/benchmarks.md hold "
                      "(Stoa / ZooKeeper 3.9.5 at 8x16, 100 B)",
            "measured": "; ".join(
                "%s %.2fx throughput (earlier %.2fx), %.2fx less CPU per op (earlier %.2fx)"
                % (OP_NAMES[op], nt, tt, nc, tc) for op, nt, tt, nc, tc in checks)
            + " (earlier: the run of %s)" % date,
            "goal": "each >= %.2f x the earlier" % HOLD_TOLERANCE,
            "met": holds,
            "machine": here})
    else:
        out.append({
            "target": "partitions=1: the earlier figures of docs/benchmarks.md hold",
            "measured": "not checked in this run (no ZooKeeper 3.9.5 line, or no "
                        "docs/bench/results.json)",
            "goal": "", "met": None, "machine": here})
    return out


def jsonable(x):
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else round(x, 6)
    return x


# ------------------------------------------------------------ markdown

def _n(x, fmt="{:,.0f}"):
    return "" if x is None else fmt.format(x)


def _r(sp, fmt="%.2f"):
    """A ratio spread as 'median (low-high)'."""
    if not sp:
        return ""
    if sp["n"] == 1:
        return fmt % sp["median"]
    return (fmt + " (" + fmt + "-" + fmt + ")") % (sp["median"], sp["low"], sp["high"])


def _met(m):
    return "" if m is None else ("yes" if m else "**no**")


def markdown(doc, plots):
    ctx, s, opts = doc["context"], doc["summary"], doc["context"]["options"]
    L = []
    a = L.append
    a("## The partitioned engine (AGORA Figs. 6-10)\n")
    a("Issue 23's benchmarks: the partitioned engine (`docs/partitions.md`) at one and two "
      "partitions, against the figures of the AGORA paper (Ramos et al., DSN 2021, "
      "section V: Figs. 6/7 throughput vs partitions, 8 latency vs load, 9 the cost of "
      "switching partitions, 10 rebalancing a skew), and a model of the scaling on many "
      "cores. Written by `bench/partitions/agora.py` into `docs/bench/agora.md`, which "
      "`scripts/bench-compare` copies into this file as it is.\n")
    a("    target/bench-venv/bin/python bench/partitions/agora.py --out docs/bench   "
      "# about 10 min here")
    a("    .venv/bin/python bench/partitions/agora.py --quick                         "
      "# under a minute, what the smoke test runs\n")
    a("(`STOA_BIN` or `cargo build --release` for the server; for the plots a Python with "
      "matplotlib, such as `target/bench-venv`, which `scripts/bench-compare` makes from "
      "`bench/requirements.txt`; `--figures`, `--rounds`, `--duration`, "
      "`--payloads`, `--fractions`, `--window-ms` change the grid, `--max-seconds` bounds "
      "the whole run; ZooKeeper 3.9.5's jars come from `scripts/bench-compare`'s cache, "
      "`target/anchors/`, or `--zookeeper-jars`.)\n")
    src = ctx.get("server_sources")
    a("**The machine**: %s. Stoa at %s%s, `cargo build --release`. Run of %s, %d s; load "
      "average %s before, %s after. Every figure below was measured on this machine, "
      "except the 16-core sweeps, which are quoted from `docs/partitions.md` as they were "
      "taken on the 16-core device machine, before partition threads and after them (no "
      "device machine was lent to this run).\n" % (
          ctx["machine"], ctx["commit"],
          " (the server's sources as at %s)" % src if src and not ctx["commit"].startswith(src)
          else "", ctx["date"], ctx["seconds"], ctx["load_before"], ctx["load_after"]))
    a("**The configurations**: standalone servers, fresh data directories, `io.threads=0`; "
      "**P=1** is `partitions=1`; **P=2** is `partitions=2`, `partition.groups=/g1` (`/g0` "
      "stays on partition 0, `/g1` is partition 1's), `partition.threads=0` (the default "
      "`auto` on 2 cores); **%s** lends partition 1 to a worker thread (labelled: `auto` "
      "takes none below 4 cores); **%s** sends each partition's core to a thread of its "
      "own between turns (labelled: off by default). The load is one `stoa bench` process (one core) beside "
      "the server on the same cores: its keyspace of 1,000 keys is spread over `/g0` and "
      "`/g1` (key i under root i mod 2), each call on a key at random, so at P=2 half the "
      "calls go to each partition and a session switches partitions at random. Each run: "
      "%.1f s measured after %.1f s of warm-up; the configurations alternate in every round, "
      "their order rotating; figures are **medians of the rounds**, ratios are per round (a "
      "configuration over P=1 of the same round), then their median (low-high). Server CPU "
      "per op is the server process's user + system time over the measured window "
      "(`stoa bench --server-pid`), split by thread from `/proc/PID/task` over the run.\n"
      % (T1, O1, opts["duration"], opts["warmup"]))
    runs = [r for r in doc["results"] if "foreign_cores" in r]
    if runs:
        fc = sorted(r["foreign_cores"] for r in runs)
        again = sum(1 for r in runs if r.get("attempts", 1) > 1)
        still = sum(1 for r in runs if r["foreign_cores"] > opts["max_foreign"])
        if opts.get("retries"):
            policy = ("A run during which it passed %.2f cores was taken again (at most %d "
                      "times), after waiting for a quiet machine (%.0f s of waiting in all), "
                      "and the least disturbed one kept: %d of %d runs were; %d stayed "
                      "above it (no quiet came, or no time was left)." % (
                          opts["max_foreign"], opts["retries"], ctx.get("quiet_waited_s", 0),
                          again, len(runs), still))
        else:
            policy = "No run was taken again (`--retries 0`)."
        a("**Other work on the machine** during the runs (all its busy CPU less the server's "
          "and the load generator's, from `/proc/stat`; it includes the kernel's softirq "
          "work for loopback traffic, charged to no process): median %.2f cores, 90th "
          "percentile %.2f, most %.2f. %s\n" % (
              statistics.median(fc), fc[int(0.9 * (len(fc) - 1))], fc[-1], policy))
    if doc.get("notes"):
        for n in doc["notes"]:
            a("*Note:* %s\n" % n)

    a("### Targets (issue 23)\n")
    a("| target | measured | goal | met | machine |")
    a("|---|---|---|:-:|---|")
    for t in doc["targets"]:
        a("| %s | %s | %s | %s | %s |" % (t["target"], t["measured"], t["goal"],
                                         _met(t["met"]), t["machine"]))
    a("")

    # Figs. 6/7
    rows = s["throughput"]
    if rows:
        a("### Figs. 6/7: throughput and server CPU per operation vs partitions "
          "(8 sessions x 16 in flight)\n")
        a("| op | value | config | ops/s | server µs/op | engine thread µs/op | WAL thread "
          "µs/op | workers µs/op | ops/s / P=1 | µs/op / P=1 |")
        a("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for op in ("set", "get"):
            for payload in sorted({r["payload"] for r in rows}):
                for config in (P1, P2, T1, O1, ZK):
                    r = _row(rows, config=config, op=op, payload=payload)
                    if not r:
                        continue
                    th = r.get("threads_us_per_op") or {}
                    if config == ZK:
                        th = {}
                    a("| %s | %d B | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                        OP_NAMES[op], payload, config, _n(r["throughput"]),
                        _n(r["cpu_us_per_op"], "{:.2f}"), _n(th.get("engine"), "{:.2f}"),
                        _n(th.get("wal"), "{:.2f}") if op == "set" else "",
                        _n(th.get("workers"), "{:.2f}") if config in (T1, O1) else "",
                        _r(r.get("vs_p1_throughput")), _r(r.get("vs_p1_cpu"))))
        a("")
        zk = [r for r in rows if r.get("vs_zk_throughput")]
        if zk:
            a("P=1 against ZooKeeper 3.9.5 in the same rounds (Stoa / ZooKeeper throughput; "
              "ZooKeeper's CPU per op / Stoa's): " + "; ".join(
                  "%s %d B %s, %s" % (OP_NAMES[r["op"]], r["payload"],
                                      _r(r["vs_zk_throughput"]), _r(r["zk_cpu_over_p1"]))
                  for r in zk) + ".\n")
        if "agora_throughput.png" in [p for p, _ in plots]:
            a("![Throughput and server CPU per op vs partitions](bench/agora_throughput.png)\n")

    # Fig. 8
    rows = s["latency"]
    if rows:
        peaks = s.get("latency_peaks") or {}
        a("### Fig. 8: latency vs offered load (open loop, 8 x 16, 100 B; the rate a "
          "fraction of P=1's closed-loop peak: %s; latency from the scheduled start)\n"
          % ", ".join("%s %s ops/s" % (OP_NAMES[op], _n(v)) for op, v in peaks.items() if v))
        a("| op | offered | config | ops/s | p50 ms | p99 ms | server µs/op |")
        a("|---|---:|---|---:|---:|---:|---:|")
        for op in ("set", "get"):
            for frac in sorted({r["fraction"] for r in rows}):
                for config in (P1, P2):
                    r = _row(rows, config=config, op=op, fraction=frac)
                    if r:
                        a("| %s | %.0f%% (%s/s) | %s | %s | %.2f | %.2f | %s |" % (
                            OP_NAMES[op], 100 * frac, _n(r["offered"]), config,
                            _n(r["throughput"]), r["p50_ms"], r["p99_ms"],
                            _n(r["cpu_us_per_op"], "{:.2f}")))
        a("")
        if "agora_latency.png" in [p for p, _ in plots]:
            a("![p50 and p99 latency vs offered load, P=1 and P=2](bench/agora_latency.png)\n")

    # Fig. 9
    rows = s["switching"]
    if rows:
        a("### Fig. 9: the cost of switching partitions (%d sessions x 1 in flight, 8 B)\n"
          % opts["switch_sessions"])
        a("Each session's calls follow its bursts exactly (one call in flight): *no switch* "
          "puts every call under `/g1` (partition 1 at P=2), *bursts of N* make N calls "
          "under `/g0` (partition 0), then N under `/g1`, and so on. At P=1 the same paths "
          "are all on one partition: the control, which shows what the key pattern costs "
          "without any partition to switch.\n")
        a("| op | config | way | ops/s | server µs/op | ops/s / no switch | µs/op / no switch |")
        a("|---|---|---|---:|---:|---:|---:|")
        for op in ("get", "set"):
            for config in (P2, P1):
                for way in ("none", "burst10", "burst1"):
                    r = _row(rows, config=config, op=op, way=way)
                    if r:
                        a("| %s | %s | %s | %s | %s | %s | %s |" % (
                            OP_NAMES[op], config, WAY_NAMES[way], _n(r["throughput"]),
                            _n(r["cpu_us_per_op"], "{:.2f}"), _r(r.get("vs_none_throughput")),
                            _r(r.get("vs_none_cpu"))))
        a("")
        if "agora_switching.png" in [p for p, _ in plots]:
            a("![Throughput with switches against no switch](bench/agora_switching.png)\n")

    # Fig. 10
    rb = s.get("rebalance")
    if rb:
        rounds = [r for r in doc["results"] if r["figure"] == "rebalance"]
        a("### Fig. 10: time to rebalance a skew (P=3, the balancer's window %d ms)\n"
          % rb["window_ms"])
        a("Groups `/g1`-`/g4` spread round robin over partitions 1 and 2 (`/g1`, `/g3` on 1; "
          "`/g2`, `/g4` on 2), partition 0 keeps `/`. Two writers (`stoa bench`, 4 sessions x "
          "16 in flight, setData of 8 B, 100 keys each): on `/g1` and `/g2` for %.1f s "
          "(balanced; round k a further k/%d of the window, so the skew falls at another "
          "phase of the balancer's window each round), then the second moves to `/g3` (the "
          "skew: both on partition 1) for %.1f s. `mntr`, polled every 100 ms, gives each "
          "partition's applied index (writes/s) and `stoa_group_moves`; the time is from the "
          "skew's start (the new writer's launch, its 100 key creates included) to the first "
          "poll that sees the move applied.\n" % (
              opts["balanced_s"], opts["rebalance_rounds"], opts["skew_s"]))
        a("| round | first move after the skew | moves | placement before | after | writes/s "
          "balanced | skewed, before the move | after the move |")
        a("|---:|---:|---:|---|---|---:|---:|---:|")
        for r in rounds:
            a("| %d | %s | %d | %s | %s | %s | %s | %s |" % (
                r["round"], "%.2f s" % r["move_s"] if r["move_s"] is not None else "none",
                r["moves"], _placement(r.get("placement_before")),
                _placement(r.get("placement_after")), _n(r.get("balanced_ops_s")),
                _n(r.get("skewed_ops_s")), _n(r.get("after_ops_s"))))
        a("")
        dec = next((r["decisions"][0] for r in rounds if r.get("decisions")), None)
        if dec:
            a("The balancer's log, first round: `%s`\n" % dec.replace("|", "/"))
        if "agora_rebalance.png" in [p for p, _ in plots]:
            a("![Writes/s per partition through a skew and the balancer's move]"
              "(bench/agora_rebalance.png)\n")

    _fast_section(L, doc)
    _wal_section(L, doc)
    _model_section(L, doc, plots)
    _sweep_section(L)
    _machines_section(L, doc)
    _reading(L, doc)
    return "\n".join(L).rstrip() + "\n"


def _fast_section(L, doc):
    a = L.append
    rows = doc["summary"].get("fast") or []
    if not rows:
        return
    a("### Fast reads and fast watches (P=2, partition.owned=yes; getData/setData 50/50, "
      "8 x 16, bursts of 1)\n")
    a("Every session switches partitions at every call; *fast* sessions opted into fast "
      "reads and watches (`stoa bench --fast reads,watches`: an ephemeral "
      "`/zookeeper/fast/<session id>`), *plain* ones did not, on the same server each round. "
      "*Reads fast* are those answered where a plain session's would have waited "
      "(`stoa_reads_fast`), *off the cut* those answered while the partitions stood apart "
      "(docs/partitions.md, \"Fast reads and fast watches\").\n")
    a("| sessions | ops/s | server µs/op | reads fast | reads off the cut | ops/s / plain "
      "| µs/op / plain |")
    a("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        a("| %s | %s | %s | %s | %s | %s | %s |" % (
            r["way"], _n(r["throughput"]), _n(r["cpu_us_per_op"], "{:.2f}"),
            _n(r.get("reads_fast")), _n(r.get("reads_off_cut")),
            _r(r.get("vs_plain_throughput")), _r(r.get("vs_plain_cpu"))))
    a("")


def _wal_section(L, doc):
    a = L.append
    rows, fit = doc["summary"].get("wal") or [], doc["summary"].get("wal_fit")
    if not rows:
        return
    a("### The WAL thread's CPU per write as the load grows (P=1, setData of 100 B)\n")
    a("One server per round, every load on it in turn (%d round(s)). `mntr` counts the "
      "writes applied and the groups the WAL thread wrote and synced "
      "(`stoa_wal_fsyncs` less `stoa_wal_fsyncs_inline`, which the engine's thread syncs "
      "itself when nothing else waits); `/proc` gives the WAL thread's CPU over the same "
      "window, warm-up included.\n" % max(r["n"] for r in rows))
    a("| sessions x in flight | ops/s | writes per group | WAL thread µs per write | "
      "WAL thread µs per group | sync ms (write + fdatasync) |")
    a("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        a("| %s | %s | %s | %s | %s | %s |" % (
            r["load"], _n(r["throughput"]), _n(r["writes_per_group"], "{:.1f}"),
            _n(r["wal_us_per_write"], "{:.2f}"), _n(r["wal_us_per_group"], "{:.1f}"),
            _n(r["fsync_avg_ms"], "{:.3f}")))
    a("")
    if fit:
        a("Fitted over all %d runs (least squares, WAL CPU = a x groups + b x writes): "
          "**a = %.1f µs per group, b = %.3f µs per write**. The cost per group is the "
          "kernel's write and flush path; a group gathers what arrives while the one "
          "before syncs, so the groups grow with the load and a write's share of it "
          "falls. What bounds one WAL thread is b: about %s writes/s. The model below "
          "takes b as the WAL's bound.\n" % (
              fit["runs"], fit["group_us"], fit["write_us"],
              _n(1e6 / fit["write_us"]) if fit["write_us"] > 0 else "no bound measurable"))


def _placement(p):
    if not p:
        return ""
    return " ".join("%s:%d" % (k, v) for k, v in sorted(p.items()))


def _model_section(L, doc, plots):
    a = L.append
    inp, pr = doc.get("model_inputs") or {}, doc.get("model") or {}
    w, rd = inp.get("write"), inp.get("read")
    if not w:
        return
    a("### A model of the scaling (P=1..16 on 16 cores)\n")
    a("From what this machine measures (`bench/partitions/model.py`; setData and getData "
      "of 100 B at 8 x 16):\n")
    a("- **per-partition cost**: P=1's server CPU per write %.2f µs, of which the engine's "
      "thread %.2f, the WAL thread %.2f, the rest %.2f (a read: %.2f µs, the engine's "
      "thread %.2f). At P=1's measured rate the WAL thread is %.2f of a core busy, the "
      "engine's %.2f." % (w["cpu"], w["engine"], w["wal"], w["other"],
                          rd["cpu"] if rd else float("nan"),
                          rd["engine"] if rd else float("nan"),
                          w["wal_busy_cores_p1"], w["engine_busy_cores_p1"]))
    a("- **cross-partition overhead** `o`: P=2's CPU per op over P=1's, less one: writes "
      "%+.3f, reads %+.3f (taken as %.3f and %.3f: a negative one is noise);" % (
          w["o_measured"], rd["o_measured"] if rd else float("nan"), w["o"],
          rd["o"] if rd else float("nan")))
    if "switch_loss" in w:
        a("- **switching**: a switch every call cost %.0f%% of writes' and %.0f%% of reads' "
          "throughput at P=2 (Fig. 9, one thread: no hand-off between threads yet, so a "
          "lower bound for threads of their own; AGORA's own worst case, 92-106 kOps/s, "
          "is some 0.5-0.65x its bursts of 10)." % (
              100 * w["switch_loss"], 100 * (rd or {}).get("switch_loss", float("nan"))))
    a("")
    a("Assumptions, stated plainly:\n")
    a("1. What the model gives is a **capacity**: the throughput at which the server's "
      "busiest thread is saturated, as a ratio to the same at P=1. The load generators "
      "are not counted (the device sweep ran P of them on the same 16 cores), nor the "
      "network, nor a round trip of the group commit (which bounds a 2-core machine's "
      "writes as much as CPU does, `docs/performance.md`).")
    a("2. The engine thread's CPU per write splits as the write peak's profile in "
      "`docs/performance.md` does (of the server's CPU: prep 19%, apply 17%, socket "
      "writes 13%, parking 8%, raft, decode and the rest 12%; the WAL thread 31%). What a "
      "variant lends divides by min(P, 15); the rest stays serial on the engine's thread.")
    if "wal_write_us" in w:
        a("3. The WAL stays one thread per server (as built). Its CPU is a cost per group "
          "and a cost per write (the WAL figure above); the groups grow with the load, so "
          "what bounds it is the cost per write, %.3f µs: (engine + overhead) / that = "
          "%.0fx P=1's engine-bound rate. At P=1's rate it costs %.2f µs per write, "
          "mostly per group. \"no WAL bound\" drops even that." % (
              w["wal_write_us"], w["engine"] / w["wal_write_us"] if w["wal_write_us"] > 0
              else float("inf"), w["wal"]))
    else:
        a("3. The WAL stays one thread per server (as built) at its P=1 CPU per write; it "
          "bounds writes at (engine + overhead) / WAL = %.1fx. Larger groups under more "
          "load would lower its CPU per write (it is mostly the kernel's write and flush "
          "path, per group: the WAL figure measures it), so the bound is the pessimistic "
          "one; \"no WAL bound\" is the other end." % (
              w["engine"] / w["wal"] if w["wal"] else float("nan")))
    a("4. The overhead `o` is added to every operation on the serial thread; it is taken "
      "as constant from P=2 on (routing and the merge cost the same whatever P is), and, "
      "as the pessimistic bound, as o x (P - 1) (one more raft group and tree per "
      "partition). A 2-core machine cannot tell them apart.")
    a("5. Reads have no WAL; today they are served on the engine's thread, so they scale "
      "only once partitions own their threads.")
    a("")
    W = pr.get("writes") or {}
    R = pr.get("reads") or {}
    cols = [("one thread (o const)", W), ("apply lent (o const)", W),
            ("prep+apply lent, io.threads (o const)", W), ("owned (o const)", W),
            ("owned (o linear)", W), ("owned, no WAL bound (o const)", W),
            ("one thread (o const)", R), ("owned (o const)", R), ("owned (o linear)", R)]
    a("| P | 0.7 x P (target) | device sweep setData, before threads | writes: one thread "
      "(built, threads=0) | apply lent (built) | + prep lent (built), io.threads (built) | owned partitions "
      "| owned, o x (P-1) | owned, no WAL bound | device sweep getData | reads: one thread "
      "| owned partitions | owned, o x (P-1) |")
    a("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    dev_w, dev_r = model.device_ratios(0), model.device_ratios(3)
    for p in (1, 2, 3, 4, 6, 8, 12, 16):
        vals = []
        for name, series in cols:
            v = series.get(name, {}).get(p, series.get(name, {}).get(str(p)))
            vals.append("%.2f" % v if v is not None else "")
        a("| %d | %s | %s | %s | %s | %s |" % (
            p, "%.1f" % (0.7 * p) if p <= 8 else "", "%.2f" % dev_w[p] if p in dev_w else "",
            " | ".join(vals[:6]), "%.2f" % dev_r[p] if p in dev_r else "",
            " | ".join(vals[6:])))
    a("")
    a("(The device sweep's columns: its throughput at P over its P=1 row, P generators at "
      "P, one at P=1; \"/ one partition at the same load\" is in the sweep's own table "
      "below.)\n")
    if "agora_model.png" in [p for p, _ in plots]:
        a("![The model: throughput vs partitions on 16 cores, beside the device sweep]"
          "(bench/agora_model.png)\n")


def _sweep_section(L):
    a = L.append
    a("### The 16-core sweep, before partition threads (quoted)\n")
    a("Taken on the 16-core device machine, before partition threads "
      "(`bench/device/partition-sweep.sh`, from `docs/partitions.md`, \"The 16-core sweep, "
      "before threads\"; a sandboxed kernel, 2 interleaved rounds of 3 s, medians; P "
      "generators of 4 sessions x 32 in flight, generator k on `/g<k>`, 100 B; \"/ one "
      "partition\" is the same P generators on a server of one partition). Not run again: "
      "no device machine was lent to this run.\n")
    _sweep_table(a, model.DEVICE_SWEEP)
    a("### The 16-core sweep, after partition threads (quoted)\n")
    a("The same script on the 16-core device machine on 2026-11-29 (from `docs/partitions.md`, "
      "\"The 16-core sweep, after threads\"; not run by this benchmark), once per setting, "
      "each with its own one-partition runs; \"scaling\" is the throughput at P over the "
      "best one partition did under any of that setting's loads. The target is 0.7 x P.\n")
    for name, sweep in model.DEVICE_SWEEPS_THREADS.items():
        a("`%s`:\n" % name)
        _sweep_table(a, sweep["rows"], sweep["best_one"])


def _sweep_table(a, rows, best_one=None):
    scaling = " scaling |" if best_one else ""
    align = "---:|" if best_one else ""
    a("| P | setData ops/s | server cores | / one partition, same load |%s getData ops/s | "
      "server cores | / one partition, same load |%s" % (scaling, scaling))
    a("|---:|---:|---:|---:|%s---:|---:|---:|%s" % (align, align))
    for p, row in sorted(rows.items()):
        set_scaling = get_scaling = ""
        if best_one:
            set_scaling = " %.2f |" % (row[0] / best_one[0])
            get_scaling = " %.2f |" % (row[3] / best_one[1])
        a("| %d | %s | %.2f | %s |%s %s | %.2f | %s |%s" % (
            p, _n(row[0]), row[1], "%.2f" % row[2] if row[2] else "", set_scaling,
            _n(row[3]), row[4], "%.2f" % row[5] if row[5] else "", get_scaling))
    a("")


def _machines_section(L, doc):
    a = L.append
    a("### Which machine gave which figure\n")
    a("- Figs. 6/7, 8, 9, 10, the WAL figure, the model's inputs and the targets' measured "
      "ratios (but the 16-core one): **this machine**, %s, in this run (%s; a note above "
      "says when a figure was taken later and merged)." % (
          doc["context"]["machine"], doc["context"]["date"]))
    a("- The 16-core sweeps and the 16-core target: **the 16-core device machine**, before "
      "partition threads and after them (`docs/partitions.md`).")
    a("- The model's profile shares: `scripts/profile` at the write peak on the 2-core "
      "development machine (`docs/performance.md`).")
    a("- Earlier figures beside these in `docs/partitions.md` (switching 0.96-1.04x, a "
      "rebalance in 0.80-0.85 s with a 1 s window) came from the device scripts run on "
      "the 2-core development machine.\n")


def _reading(L, doc):
    """What the figures say, from the figures (so a re-run says what it
    measured)."""
    a = L.append
    s = doc["summary"]
    out = []
    p2 = [r for r in s["throughput"] if r["config"] == P2 and r.get("vs_p1_cpu")]
    if p2:
        cpu = [r["vs_p1_cpu"]["median"] for r in p2]
        thr = [r["vs_p1_throughput"]["median"] for r in p2 if r.get("vs_p1_throughput")]
        w = [r["vs_p1_cpu"]["median"] for r in p2 if r["op"] == "set"]
        g = [r["vs_p1_cpu"]["median"] for r in p2 if r["op"] == "get"]
        out.append("**A second partition on one thread** costs %.2f-%.2fx P=1's server CPU "
                   "per op (writes %.2f-%.2f, reads %.2f-%.2f) and moves throughput by "
                   "%.2f-%.2fx: the routing by placement, the merge of the order and a "
                   "second raft group, with nothing run beside them to pay them back." % (
                       min(cpu), max(cpu), min(w or [0]), max(w or [0]), min(g or [0]),
                       max(g or [0]), min(thr or [0]), max(thr or [0])))
    t1 = [r for r in s["throughput"] if r["config"] == T1 and r.get("vs_p1_cpu")]
    if t1:
        out.append("**partition.threads=1 on 2 cores** (labelled, not a default): %s. The "
                   "worker shares two cores with the engine's thread, the WAL thread and "
                   "the load generator; this is why `auto` takes no worker below 4 cores." %
                   "; ".join("%s %s ops/s, %s CPU per op vs P=1" % (
                       OP_NAMES[r["op"]], _r(r.get("vs_p1_throughput")),
                       _r(r.get("vs_p1_cpu"))) for r in t1))
    o1 = [r for r in s["throughput"] if r["config"] == O1 and r.get("vs_p1_cpu")]
    if o1:
        out.append("**partition.owned=yes on 2 cores** (labelled, not a default): %s. Each "
                   "partition's core goes to a thread of its own between turns (step 3's "
                   "first slice, docs/partitions.md); the two threads share the two cores "
                   "with the engine's thread, the WAL thread and the load generator." %
                   "; ".join("%s %s ops/s, %s CPU per op vs P=1" % (
                       OP_NAMES[r["op"]], _r(r.get("vs_p1_throughput")),
                       _r(r.get("vs_p1_cpu"))) for r in o1))
    sw = [r for r in s["switching"] if r["config"] == P2 and r.get("vs_none_throughput")]
    ctl = [r for r in s["switching"] if r["config"] == P1 and r.get("vs_none_throughput")]
    if sw:
        out.append("**Switching** at P=2: %s against no switch; at P=1 with the same paths "
                   "%s. Where the two agree, what a switch costs is the key pattern's (a "
                   "second subtree's keys), not the partitions': on one thread a switch is "
                   "a different tree in the same loop. Threads of their own will make it a "
                   "hand-off; this figure is the one to re-take then." % (
                       ", ".join("%s %s %.2fx" % (OP_NAMES[r["op"]], r["way"].replace(
                           "burst", "bursts of "), r["vs_none_throughput"]["median"])
                           for r in sw),
                       ", ".join("%.2fx" % r["vs_none_throughput"]["median"] for r in ctl)))
    rb = s.get("rebalance")
    if rb and rb["move_s"]:
        moved = {}
        for r in doc["results"]:
            if r["figure"] != "rebalance":
                continue
            before, after = r.get("placement_before") or {}, r.get("placement_after") or {}
            for g in sorted(after):
                if before.get(g) != after[g]:
                    key = "%s from partition %s to %s" % (g, before.get(g), after[g])
                    moved[key] = moved.get(key, 0) + 1
        where = "; ".join("%s (%d of %d rounds)" % (k, n, rb["rounds"])
                          for k, n in sorted(moved.items()))
        to_zero = any(k.endswith(" to 0") for k in moved)
        out.append("**Rebalancing**: the balancer's first move applied %.2f-%.2f s after "
                   "the skew began, with a window of %d ms: it decides at each window's end "
                   "on that window's counts, so a skew is acted on at the first window "
                   "boundary after it starts, at most a window later (plus the 100 ms "
                   "poll), as the rounds' phases show. It moved %s%s. Writes/s before and after the move are the "
                   "same within the noise (%s vs %s): with every partition on one thread a "
                   "move evens nothing that costs CPU; it is the mechanism threads will need."
                   % (rb["move_s"]["low"], rb["move_s"]["high"], rb["window_ms"], where,
                      ": partition 0 was the least busy at that window's end (partition 2 "
                      "still counted the writes to /g2 from before the skew), and it takes "
                      "partition 0 last only on a tie" if to_zero else "",
                      _n(rb["skewed_ops_s"]), _n(rb["after_ops_s"])))
    pr = doc.get("model") or {}
    W = pr.get("writes") or {}
    if W:
        own, lent = W.get("owned (o const)", {}), W.get("apply lent (o const)", {})
        nowal = W.get("owned, no WAL bound (o const)", {})
        inp = (doc.get("model_inputs") or {}).get("write") or {}
        if "wal_write_us" in inp:
            wal_said = ("owned partitions %.2fx with the one WAL thread (bound by its cost "
                        "per write, %.3f µs, since its groups grow with the load), %.2fx "
                        "without it. The target, 5.6x at P=8, needs owned partitions; one "
                        "WAL thread does not stand in its way" % (
                            own.get(8, 0), inp["wal_write_us"], nowal.get(8, 0)))
        else:
            wal_said = ("owned partitions %.2fx, bounded by the one WAL thread at its CPU "
                        "per write at P=1 (%.2f µs), %.2fx without that bound. The target, "
                        "5.6x at P=8, needs owned partitions" % (
                            own.get(8, 0), inp.get("wal", 0), nowal.get(8, 0)))
        out.append("**The model**: the lent apply (built) can reach %.2fx at P=8, prep "
                   "lent with I/O threads (both built) %.2fx; %s; the device sweep before "
                   "threads (about 1x at every P) is what the one-thread line predicts, "
                   "and after threads the best setting reaches 1.1-1.2x at P=4-12 (its "
                   "server busy on 2-3 of 16 cores, the engine's thread on 0.7-0.95 of "
                   "one): what the engine's thread keeps bounds it, as the model says of "
                   "everything short of owned partitions with a gate per I/O thread." % (
                       lent.get(8, 0), W.get("prep+apply lent, io.threads (o const)",
                                             {}).get(8, 0), wal_said))
    if out:
        a("### What the figures say\n")
        for o in out:
            a("- " + o)
        a("")
    a("Raw figures, every round: [bench/agora.json](bench/agora.json).\n")


# ------------------------------------------------------------ plots

def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


COLORS = {P1: "tab:orange", P2: "tab:green", T1: "tab:olive", O1: "tab:cyan",
          ZK: "tab:purple"}


def plots(doc, out_dir):
    """[(png, title)] written into out_dir; none without matplotlib."""
    plt = _pyplot()
    if plt is None:
        return []
    made = []
    s = doc["summary"]

    def save(fig, name, title):
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, name))
        plt.close(fig)
        made.append((name, title))

    rows = s["throughput"]
    if rows:
        fig, axes = plt.subplots(2, 2, figsize=(9, 6.2), dpi=80)
        payloads = sorted({r["payload"] for r in rows})
        configs = [c for c in (P1, P2, T1, O1, ZK) if any(r["config"] == c for r in rows)]
        for col, op in enumerate(("set", "get")):
            # Top: ops/s of every configuration. Bottom: server CPU per op
            # over P=1's, per round (median and low-high), for the
            # partitioned configurations (ZooKeeper's is in the table).
            for row_i, shown in enumerate((configs,
                                           [c for c in configs if c in (P2, T1, O1)])):
                ax = axes[row_i][col]
                width = 0.8 / max(1, len(shown))
                for i, c in enumerate(shown):
                    xs, ys, err = [], [], [[], []]
                    for j, p in enumerate(payloads):
                        r = _row(rows, config=c, op=op, payload=p)
                        v = r and (r.get("throughput") if row_i == 0 else r.get("vs_p1_cpu"))
                        if not v:
                            continue
                        xs.append(j + (i - (len(shown) - 1) / 2) * width)
                        if row_i == 0:
                            ys.append(v)
                        else:
                            ys.append(v["median"])
                            err[0].append(v["median"] - v["low"])
                            err[1].append(v["high"] - v["median"])
                    ax.bar(xs, ys, width, color=COLORS[c], label=c,
                           yerr=err if row_i == 1 and ys else None)
                ax.set_xticks(range(len(payloads)))
                ax.set_xticklabels(["%d B" % p for p in payloads])
                if row_i == 0:
                    ax.set_title("%s: ops/s (8 x 16)" % OP_NAMES[op], fontsize=10)
                else:
                    ax.axhline(1.0, color="grey", lw=0.8)
                    ax.axhline(CPU_TARGET, color="tab:red", ls=":", label="target 1.10")
                    ax.set_ylim(0.6, 1.6)
                    ax.set_title("%s: server CPU per op / P=1's" % OP_NAMES[op], fontsize=10)
                ax.grid(True, axis="y", alpha=0.3)
        handles, labels = [], []
        for ax in (axes[0][0], axes[1][0]):
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        fig.savefig(os.path.join(out_dir, "agora_throughput.png"))
        plt.close(fig)
        made.append(("agora_throughput.png", "Throughput and server CPU per op vs partitions"))

    rows = s["latency"]
    if rows:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), dpi=80)
        for ax, op in zip(axes, ("set", "get")):
            for c in (P1, P2):
                pts = sorted((r["offered"], r["p50_ms"], r["p99_ms"]) for r in rows
                             if r["config"] == c and r["op"] == op)
                if not pts:
                    continue
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "--o", color=COLORS[c],
                        label="%s p50" % c)
                ax.plot([p[0] for p in pts], [p[2] for p in pts], "-o", color=COLORS[c],
                        label="%s p99" % c)
            ax.set_title("%s, 100 B, open loop" % OP_NAMES[op], fontsize=10)
            ax.set_xlabel("offered ops/s")
            ax.set_ylabel("latency ms")
            ax.set_yscale("log")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        save(fig, "agora_latency.png", "Latency vs offered load, P=1 and P=2")

    rows = [r for r in s["switching"] if r.get("vs_none_throughput")]
    if rows:
        fig, ax = plt.subplots(figsize=(6.5, 3.6), dpi=80)
        labels, i, top = [], 0, 1.3
        for op in ("get", "set"):
            for way in ("burst10", "burst1"):
                for k, c in enumerate((P2, P1)):
                    r = _row(rows, config=c, op=op, way=way)
                    if not r:
                        continue
                    sp = r["vs_none_throughput"]
                    top = max(top, 1.1 * sp["high"])
                    ax.bar(i + 0.38 * k, sp["median"], 0.36, color=COLORS[c],
                           yerr=[[sp["median"] - sp["low"]], [sp["high"] - sp["median"]]],
                           label=c if i == 0 else None)
                labels.append((i + 0.19, "%s\n%s" % (OP_NAMES[op], way.replace("burst",
                                                                             "bursts of "))))
                i += 1
        ax.axhline(1 - SWITCH_TARGET, color="tab:red", ls=":", label="target (-30%)")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks([x for x, _ in labels])
        ax.set_xticklabels([t for _, t in labels], fontsize=8)
        ax.set_ylabel("ops/s / no switch")
        ax.set_ylim(0, top)
        ax.set_title("Switching partitions: %s sessions x 1 in flight, 8 B" %
                     doc["context"]["options"]["switch_sessions"], fontsize=10)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3)
        save(fig, "agora_switching.png", "The cost of switching partitions")

    rounds = [r for r in doc["results"] if r["figure"] == "rebalance" and r.get("samples")]
    if rounds:
        r = rounds[0]
        smp = r["samples"]
        fig, ax = plt.subplots(figsize=(7, 3.6), dpi=80)
        parts = len(smp[0]["applied"])
        for k in range(parts):
            ts, ys = [], []
            for a_, b_ in zip(smp, smp[1:]):
                dt = b_["t"] - a_["t"]
                if dt > 0:
                    ts.append(b_["t"])
                    ys.append((b_["applied"][k] - a_["applied"][k]) / dt)
            ax.plot(ts, ys, label="partition %d" % k)
        skew = r.get("move_t", None)
        opts = doc["context"]["options"]
        ax.axvline(r.get("skew_at") or opts["balanced_s"], color="tab:red", ls=":",
                   label="skew")
        if skew is not None:
            ax.axvline(skew, color="black", ls="--", label="move applied")
        ax.set_xlabel("s since the load began")
        ax.set_ylabel("entries applied / s")
        ax.set_title("Rebalancing a skew: P=3, window %d ms (round 0)" % r["window_ms"],
                     fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "agora_rebalance.png", "Rebalancing a skew")

    pr = doc.get("model") or {}
    if pr.get("writes"):
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
        ps = list(range(1, 17))
        for ax, kind, col in ((axes[0], "writes", 0), (axes[1], "reads", 3)):
            series = pr.get(kind) or {}
            for name, style in (("one thread (o const)", "-"), ("apply lent (o const)", "-"),
                                ("prep+apply lent, io.threads (o const)", "-"),
                                ("owned (o const)", "-"), ("owned (o linear)", "--"),
                                ("owned, no WAL bound (o const)", ":")):
                if name in series:
                    ax.plot(ps, [series[name][p] for p in ps], style, label=name)
            ax.plot(ps[:8], [0.7 * p for p in ps[:8]], color="tab:red", ls=":",
                    label="target 0.7 x P")
            dev = model.device_ratios(col)
            ax.plot(sorted(dev), [dev[p] for p in sorted(dev)], "ks",
                    label="device sweep, before threads")
            after = model.threads_scaling(0 if col == 0 else 1)
            ax.plot(sorted(after), [after[p][0] for p in sorted(after)], "k^",
                    label="device sweep, after threads (best setting)")
            ax.set_title("%s: capacity vs P=1, 16 cores (model)" % kind, fontsize=10)
            ax.set_xlabel("partitions")
            ax.set_ylabel("x P=1")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        save(fig, "agora_model.png", "The model of the scaling, beside the device sweep")
    return made
