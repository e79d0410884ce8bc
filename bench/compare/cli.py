"""scripts/bench-compare's options and the order of a run's sections."""

import argparse
import datetime
import os
import shutil
import sys
import tempfile
import time

from . import REPO, __doc__ as OVERVIEW, etcd_http
from .anchors import AnchorUnavailable
from .anchors.resolve import resolve
from .context import etcd_versions, machine, sh, workspace_version
from .ensemble import run_ensembles
from .ezk import ezk_matrix, run_ezk
from .failover import run_failover
from .floor import run_fsync_floor
from .install import ensure_plotting_venv, stoa_binary
from .launch import start_servers, stop_servers, use
from .log import log
from .matrix import PEAK_MEASURED_S, matrix, run_matrix
from .publish import write_outputs
from .resources import LOAD_PAYLOAD, run_resources
from .results import load as load_results
from .runner import run_bench
from .systems import SYSTEMS, family, note_versions, of_family

# The sections whose results bench/results.json keeps (and a partial run
# reuses), then the Cost of Consensus grid, which keeps its own
# (docs/bench/primitives*.json) and writes docs/primitives.md.
RESULT_SECTIONS = ("matrix", "ezk", "resources", "ensemble", "failover")
SECTIONS = RESULT_SECTIONS + ("primitives",)
# Context keys that describe the standalone matrix and EZK runs (taken from
# results.json when --sections reuses them).
MATRIX_CTX = ("repeats", "duration", "peak_duration", "peak_revisit", "warmup", "global_warmup",
              "etcd_db_sizes", "fsync_floor", "queue_depth", "backoff_ms", "load_before",
              "load_after")


def parse_args():
    ap = argparse.ArgumentParser(description=OVERVIEW.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few minutes (CI), every system on a few cells")
    ap.add_argument("--repeats", type=int, help="runs per cell and server (default 3; quick 1)")
    ap.add_argument("--duration", type=float, help="measured seconds per run (default 1.0)")
    ap.add_argument("--warmup", type=float, help="warm-up seconds per run (default 0.3)")
    ap.add_argument("--out-dir", help="where benchmarks.md and bench/ go "
                    "(default docs/, with --quick target/bench-quick/)")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--no-install", action="store_true",
                    help="install nothing: no apt-get, no venv, no download or build of an "
                    "anchor (those cached under target/anchors/ are used)")
    ap.add_argument("--no-etcd", action="store_true", help="ZooKeeper and Stoa only")
    ap.add_argument("--systems",
                    help="the systems to run, of %s (default all; one named here that cannot "
                    "be installed stops the run, where otherwise it is left out)"
                    % ", ".join(SYSTEMS))
    ap.add_argument("--sections", default=None,
                    help="what to run, of %s (default all; --quick leaves primitives out, "
                    "a grid of some 20 minutes per system); the others are taken from the "
                    "out dir's bench/results.json" % ", ".join(SECTIONS))
    ap.add_argument("--rounds", type=int,
                    help="failover: leader kills per system (default 3; quick 1)")
    ap.add_argument("--znodes", type=int,
                    help="resource use: znodes to load (default 1000000; quick 20000)")
    ap.add_argument("--report-only", action="store_true",
                    help="re-render benchmarks.md and the plots from bench/results.json")
    return ap.parse_args()


def report_only(opts):
    ensure_plotting_venv(not opts.no_install)
    out_dir = opts.out_dir or os.path.join(REPO, "docs")
    r = load_results(os.path.join(out_dir, "bench", "results.json"))
    # results.json is what is read here, so it is left as it is.
    report = write_outputs(out_dir, r["cells"], r["med"], r["ctx"], r["ezk_points"],
                           r["ezk_med"], r["resources"], r["ensemble"], r["failover"],
                           save=False)
    log("re-rendered %s" % report)


def listed(text, allowed, option):
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items or any(x not in allowed for x in items):
        sys.exit("bench-compare: %s takes a list of %s" % (option, ", ".join(allowed)))
    return items


def available_systems(opts):
    """{system: Anchor} of the systems this run measures: those asked for
    (--systems, --no-etcd) that could be installed."""
    explicit = listed(opts.systems, SYSTEMS, "--systems") if opts.systems else []
    wanted = [k for k in SYSTEMS if (k in explicit or not explicit)
              and not (opts.no_etcd and family(k) == "etcd")]
    try:
        anchors = resolve(wanted, explicit, not opts.no_install)
    except AnchorUnavailable as e:
        sys.exit("bench-compare: %s" % e)
    if "stoa" not in anchors or not of_family("zookeeper", anchors):
        sys.exit("bench-compare: a run needs Stoa and a ZooKeeper; it has %s"
                 % ", ".join(anchors))
    return anchors


def run_context(opts, systems, anchors, sections):
    quick = opts.quick
    duration = opts.duration or (0.3 if quick else 1.0)
    ctx = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "stoa_version": "%s (git %s%s)" % (
            workspace_version(),
            sh(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]),
            " + uncommitted changes" if sh(["git", "-C", REPO, "status", "--porcelain"]) else ""),
        "java": (sh("java -version 2>&1 | head -1") or "?").replace('"', ""),
        "command": ("scripts/bench-compare " + " ".join(sys.argv[1:])).strip(),
        "repeats": opts.repeats or (1 if quick else 3), "duration": duration,
        "warmup": opts.warmup if opts.warmup is not None else (0.2 if quick else 0.3),
        # As run_matrix applies it: only a window longer than the others.
        "peak_duration": PEAK_MEASURED_S if not quick and PEAK_MEASURED_S > duration else None,
        # As run_matrix applies it: the peak cells' second pass.
        "peak_revisit": not quick,
        "global_warmup": 1.0 if quick else 10.0, "quick": quick, "systems": systems,
        "sections": sections,
        # The open-loop rates are fractions of this ZooKeeper's peak.
        "reference": "zookeeper" if "zookeeper" in systems else of_family("zookeeper",
                                                                          systems)[0],
        "versions": {k: a.version for k, a in anchors.items() if a.version},
        "go_versions": {},
    }
    for k in of_family("etcd", systems):
        ctx["versions"][k], ctx["go_versions"][k] = etcd_versions(anchors[k].etcd_binary)
    note_versions(ctx["versions"])
    return ctx


def reuse_previous(prev, sections, ctx, run):
    """Takes the sections not run now from `prev` (a loaded results.json)."""
    if "matrix" not in sections:
        run["cells"], run["med"] = prev["cells"], prev["med"]
        ctx.update({k: prev["ctx"][k] for k in MATRIX_CTX if k in prev["ctx"]})
        # Runs from before the peak cells had their own window, or their
        # second pass.
        ctx["peak_duration"] = prev["ctx"].get("peak_duration")
        ctx["peak_revisit"] = prev["ctx"].get("peak_revisit", False)
    if "ezk" not in sections:
        run["ezk_points"], run["ezk_med"] = prev["ezk_points"], prev["ezk_med"]
    if "resources" not in sections:
        run["resources"] = prev["resources"]
        ctx.update({k: prev["ctx"][k] for k in ("big_write_s", "big_write_warmup")
                    if k in prev["ctx"]})
    if "ensemble" not in sections:
        run["ensemble"] = prev["ensemble"]
    if "failover" not in sections:
        run["failover"] = prev["failover"]
    if "matrix" not in sections and "ensemble" not in sections:
        # The reused open-loop rates follow the ZooKeeper they were run
        # against, whichever this run's --systems has.
        ctx["reference"] = prev["ctx"].get("reference", ctx["reference"])
    # The reused sections' servers keep the versions they were measured at.
    for key in ("versions", "go_versions"):
        ctx[key] = dict(prev["ctx"].get(key) or {}, **ctx[key])
    # The reused sections' Stoa is the one they were measured at.
    if prev["ctx"].get("stoa_version") not in (None, ctx["stoa_version"]):
        ctx["stoa_version"] = "%s (%s); the reused sections: %s" % (
            ctx["stoa_version"], ", ".join(sections), prev["ctx"]["stoa_version"])
    # A results.json from before the failover section has none to reuse.
    reused = [x for x in RESULT_SECTIONS if x not in sections and (x != "failover" or prev["failover"])]
    if reused:
        ctx["reused"] = "%s from the run of %s (`%s`)" % (
            ", ".join(reused), prev["ctx"].get("date", "?"), prev["ctx"].get("command", "?"))


def note_running_versions(ctx, running):
    """The versions the running servers report, for those not known yet."""
    for k, srv in running.items():
        if k != "stoa" and k not in ctx["versions"]:
            v = srv.version()
            if v:
                ctx["versions"][k] = ".".join(map(str, v))
    note_versions(ctx["versions"])


def run_standalone(opts, stoa_bin, systems, sections, ctx, run, base, work):
    """The matrix, the fsync floor and the EZK experiments, on one
    standalone server of each system."""
    timing = (ctx["duration"], ctx["warmup"])
    servers = {}
    try:
        servers = start_servers(stoa_bin, base, systems)
        note_running_versions(ctx, servers)
        ctx["load_before"] = "%.2f" % os.getloadavg()[0]
        log("warming up every server (%.0f s each)" % ctx["global_warmup"])
        for system in systems:
            run_bench(stoa_bin, servers[system], ["--sessions", "8", "--outstanding", "8",
                                                  "--mix", "create=10,set=30,get=60"],
                      ["--duration", str(ctx["global_warmup"]), "--warmup", "0"], work)
        if "matrix" in sections:
            run["cells"] = matrix(opts.quick, ctx["reference"])
            run["med"] = run_matrix(stoa_bin, servers, run["cells"], ctx["repeats"], timing,
                                    work, revisit=ctx["peak_revisit"])
            ctx["fsync_floor"] = run_fsync_floor(stoa_bin, servers, ctx["repeats"], timing, base)
            ctx["etcd_db_sizes"] = {}
            for k in of_family("etcd", servers):
                size = etcd_http.db_size(servers[k])
                ctx["etcd_db_sizes"][k] = "?" if size is None else "%.0f MiB" % (size / 1048576.0)
        if "ezk" in sections:
            # Last, so the extensions the EZK runs register cannot touch the
            # matrix above (each run also unregisters its own).
            run["ezk_points"] = ezk_matrix(opts.quick)
            ctx["queue_depth"], ctx["backoff_ms"] = 100, 1
            run["ezk_med"] = run_ezk(stoa_bin, servers, run["ezk_points"], ctx["repeats"],
                                     timing, work)
        ctx["load_after"] = "%.2f" % os.getloadavg()[0]
    finally:
        stop_servers(servers)


def run_sections(opts, stoa_bin, systems, sections, ctx, run):
    base = tempfile.mkdtemp(prefix="stoa-bench-compare-")
    work = os.path.join(base, "work")
    os.makedirs(work)
    timing = (ctx["duration"], ctx["warmup"])
    try:
        if "matrix" in sections or "ezk" in sections:
            run_standalone(opts, stoa_bin, systems, sections, ctx, run, base, work)
        if "resources" in sections:
            n = opts.znodes or (20000 if opts.quick else 1000000)
            log("resource use: %d znodes of %d B per server" % (n, LOAD_PAYLOAD))
            write_timing = (ctx["duration"] if opts.quick else PEAK_MEASURED_S, ctx["warmup"])
            ctx["big_write_s"], ctx["big_write_warmup"] = write_timing
            run["resources"] = run_resources(stoa_bin, base, systems, n, ctx["repeats"],
                                             ctx["repeats"], 120.0 if opts.quick else 900.0,
                                             work, write_timing)
            for k, r in run["resources"].items():
                ctx["versions"].setdefault(k, r.get("version"))
        if "ensemble" in sections:
            log("3-member ensembles")
            run["ensemble"] = run_ensembles(stoa_bin, base, systems, opts.quick, ctx["repeats"],
                                            timing, 1.0 if opts.quick else 30.0, work,
                                            ctx["reference"])
            for k, v in run["ensemble"][2]["versions"].items():
                ctx["versions"].setdefault(k, v)
        if "failover" in sections:
            # Quick: one round of each system, about 10 s a system here.
            rounds = opts.rounds or (1 if opts.quick else 3)
            log("failover: %d round(s) of a leader kill -9 per system" % rounds)
            run["failover"] = run_failover(base, systems, rounds)
            for k, v in run["failover"]["context"]["versions"].items():
                ctx["versions"].setdefault(k, v)
    finally:
        if not os.environ.get("STOA_BENCH_KEEP"):
            shutil.rmtree(base, ignore_errors=True)


def main():
    opts = parse_args()
    if opts.report_only:
        return report_only(opts)
    default = RESULT_SECTIONS if opts.quick else SECTIONS
    sections = listed(opts.sections or ",".join(default), SECTIONS, "--sections")
    ensure_plotting_venv(not opts.no_install)
    anchors = available_systems(opts)
    use(anchors)
    systems = [k for k in SYSTEMS if k in anchors]
    log("systems: %s" % ", ".join(systems))
    stoa_bin = stoa_binary(not opts.no_build)
    if not os.access(stoa_bin, os.X_OK):
        sys.exit("bench-compare: no stoa binary at %s" % stoa_bin)
    os.environ["STOA_BIN"] = stoa_bin

    out_dir = opts.out_dir or os.path.join(REPO, "target/bench-quick" if opts.quick else "docs")
    plot_dir = os.path.join(out_dir, "bench")
    os.makedirs(plot_dir, exist_ok=True)
    ctx = run_context(opts, systems, anchors, sections)
    run = {"cells": [], "med": {}, "ezk_points": [], "ezk_med": {}, "resources": {},
           "ensemble": None, "failover": None}
    # The sections not run now come from the last results, if any.
    saved_path = os.path.join(plot_dir, "results.json")
    if not set(RESULT_SECTIONS) <= set(sections) and os.path.exists(saved_path):
        reuse_previous(load_results(saved_path), sections, ctx, run)
        note_versions(ctx["versions"])

    started = time.monotonic()
    run_sections(opts, stoa_bin, systems, sections, ctx, run)
    report = write_outputs(out_dir, run["cells"], run["med"], ctx, run["ezk_points"],
                           run["ezk_med"], run["resources"], run["ensemble"], run["failover"])
    log("wrote %s and %s (%.0f s)" % (report, plot_dir, time.monotonic() - started))
    if "primitives" in sections:
        run_primitives(systems, out_dir)


def run_primitives(systems, out_dir):
    """The Cost of Consensus grid (bench/primitives/run.py, its default):
    Stoa's run, then ZooKeeper's client-side recipes when Debian's
    ZooKeeper is among the systems; docs/primitives.md's measured section
    and figures from both (into the repository's docs only)."""
    import subprocess
    here = os.path.join(REPO, "bench", "primitives")
    work = tempfile.mkdtemp(prefix="stoa-bench-primitives-")
    runs = [("stoa", [])] + ([("zookeeper", ["--zookeeper"])] if "zookeeper" in systems else [])
    results = []
    for name, extra in runs:
        log("primitives: the default grid on %s (bench/primitives/run.py)" % name)
        out = os.path.join(work, name)
        subprocess.run([sys.executable, os.path.join(here, "run.py"), "--out", out] + extra,
                       check=True)
        results.append(os.path.join(out, "results.json"))
    if os.path.realpath(out_dir) == os.path.realpath(os.path.join(REPO, "docs")):
        # It writes docs/bench/primitives*.json and the figures too.
        subprocess.run([sys.executable, os.path.join(here, "report.py")] + results, check=True)
        log("primitives: wrote docs/primitives.md")
    else:
        log("primitives: results in %s (docs/primitives.md is written only for docs/)"
            % ", ".join(results))
