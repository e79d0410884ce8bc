"""scripts/bench-compare's options and the order of a run's sections."""

import argparse
import datetime
import os
import shutil
import sys
import tempfile
import time

from . import REPO, __doc__ as OVERVIEW, etcd_http
from .context import etcd_versions, machine, sh, workspace_version
from .ensemble import run_ensembles
from .ezk import ezk_matrix, run_ezk
from .floor import run_fsync_floor
from .install import ensure_plotting_venv, ensure_servers, stoa_binary
from .launch import start_servers, stop_servers
from .log import log
from .matrix import PEAK_MEASURED_S, matrix, run_matrix
from .publish import write_outputs
from .resources import LOAD_PAYLOAD, run_resources
from .results import load as load_results
from .runner import run_bench
from .systems import SYSTEMS

SECTIONS = ("matrix", "ezk", "resources", "ensemble")
# Context keys that describe the standalone matrix and EZK runs (taken from
# results.json when --sections reuses them).
MATRIX_CTX = ("repeats", "duration", "peak_duration", "peak_revisit", "warmup", "global_warmup",
              "etcd_db_size",
              "fsync_floor",
              "queue_depth",
              "backoff_ms", "load_before", "load_after", "zk_version", "etcd_version", "etcd_go")


def report_only(opts):
    ensure_plotting_venv(not opts.no_install)
    out_dir = opts.out_dir or os.path.join(REPO, "docs")
    r = load_results(os.path.join(out_dir, "bench", "results.json"))
    # results.json is what is read here, so it is left as it is.
    report = write_outputs(out_dir, r["cells"], r["med"], r["ctx"], r["ezk_points"],
                           r["ezk_med"], r["resources"], r["ensemble"], save=False)
    log("re-rendered %s" % report)


def main():
    ap = argparse.ArgumentParser(description=OVERVIEW.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="seconds-long smoke run")
    ap.add_argument("--repeats", type=int, help="runs per cell and server (default 3; quick 1)")
    ap.add_argument("--duration", type=float, help="measured seconds per run (default 1.0)")
    ap.add_argument("--warmup", type=float, help="warm-up seconds per run (default 0.3)")
    ap.add_argument("--out-dir", help="where benchmarks.md and bench/ go "
                    "(default docs/, with --quick target/bench-quick/)")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--no-install", action="store_true")
    ap.add_argument("--no-etcd", action="store_true", help="ZooKeeper and Stoa only")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help="what to run, of %s (default all); the others are taken from the "
                    "out dir's bench/results.json" % ", ".join(SECTIONS))
    ap.add_argument("--znodes", type=int,
                    help="resource use: znodes to load (default 1000000; quick 20000)")
    ap.add_argument("--report-only", action="store_true",
                    help="re-render benchmarks.md and the plots from bench/results.json")
    opts = ap.parse_args()
    if opts.report_only:
        return report_only(opts)
    sections = [x.strip() for x in opts.sections.split(",") if x.strip()]
    if not sections or any(x not in SECTIONS for x in sections):
        sys.exit("bench-compare: --sections takes a list of %s" % ", ".join(SECTIONS))
    command = "scripts/bench-compare " + " ".join(sys.argv[1:])
    systems = [k for k in SYSTEMS if k != "etcd" or not opts.no_etcd]

    ensure_servers(not opts.no_install, "etcd" in systems)
    ensure_plotting_venv(not opts.no_install)
    stoa_bin = stoa_binary(not opts.no_build)
    if not os.access(stoa_bin, os.X_OK):
        sys.exit("bench-compare: no stoa binary at %s" % stoa_bin)
    os.environ["STOA_BIN"] = stoa_bin

    repeats = opts.repeats or (1 if opts.quick else 3)
    duration = opts.duration or (0.3 if opts.quick else 1.0)
    warmup = opts.warmup if opts.warmup is not None else (0.2 if opts.quick else 0.3)
    global_warmup = 1.0 if opts.quick else 10.0
    out_dir = opts.out_dir or os.path.join(REPO, "target/bench-quick" if opts.quick else "docs")
    plot_dir = os.path.join(out_dir, "bench")
    os.makedirs(plot_dir, exist_ok=True)

    # The sections not run now come from the last results, if any.
    prev = None
    saved_path = os.path.join(plot_dir, "results.json")
    if set(sections) != set(SECTIONS) and os.path.exists(saved_path):
        prev = load_results(saved_path)
    cells, med, ezk_points, ezk_med, resources, ensemble = [], {}, [], {}, {}, None
    ctx = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "stoa_version": "%s (git %s%s)" % (
            workspace_version(),
            sh(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]),
            " + uncommitted changes" if sh(["git", "-C", REPO, "status", "--porcelain"]) else ""),
        "java": (sh("java -version 2>&1 | head -1") or "?").replace('"', ""),
        "command": command.strip(),
        "repeats": repeats, "duration": duration, "warmup": warmup,
        # As run_matrix applies it: only a window longer than the others.
        "peak_duration": (PEAK_MEASURED_S if not opts.quick and PEAK_MEASURED_S > duration
                          else None),
        # As run_matrix applies it: the peak cells' second pass.
        "peak_revisit": not opts.quick,
        "global_warmup": global_warmup, "quick": opts.quick, "systems": systems,
        "sections": sections,
    }
    if "etcd" in systems:
        ctx["etcd_version"], ctx["etcd_go"] = etcd_versions()
    if prev:
        reused = [x for x in SECTIONS if x not in sections]
        if "matrix" not in sections:
            cells, med = prev["cells"], prev["med"]
            ctx.update({k: prev["ctx"][k] for k in MATRIX_CTX if k in prev["ctx"]})
            # Runs from before the peak cells had their own window, or
            # their second pass.
            ctx["peak_duration"] = prev["ctx"].get("peak_duration")
            ctx["peak_revisit"] = prev["ctx"].get("peak_revisit", False)
        if "ezk" not in sections:
            ezk_points, ezk_med = prev["ezk_points"], prev["ezk_med"]
        if "resources" not in sections:
            resources = prev["resources"]
            ctx.update({k: prev["ctx"][k] for k in ("big_write_s", "big_write_warmup")
                        if k in prev["ctx"]})
        if "ensemble" not in sections:
            ensemble = prev["ensemble"]
        ctx["reused"] = "%s from the run of %s (`%s`)" % (
            ", ".join(reused), prev["ctx"].get("date", "?"), prev["ctx"].get("command", "?"))

    base = tempfile.mkdtemp(prefix="stoa-bench-compare-")
    work = os.path.join(base, "work")
    os.makedirs(work)
    servers = {}
    started = time.monotonic()
    try:
        if "matrix" in sections or "ezk" in sections:
            servers = start_servers(stoa_bin, base, systems)
            ctx["zk_version"] = ".".join(map(str, servers["zookeeper"].version() or ("?",)))
            if "etcd" in servers:
                running = servers["etcd"].version()
                if running:
                    ctx["etcd_version"] = ".".join(map(str, running))
            ctx["load_before"] = "%.2f" % os.getloadavg()[0]
            log("warming up every server (%.0f s each)" % global_warmup)
            for kind in systems:
                run_bench(stoa_bin, servers[kind], ["--sessions", "8", "--outstanding", "8",
                                                    "--mix", "create=10,set=30,get=60"],
                          ["--duration", str(global_warmup), "--warmup", "0"], work)
            if "matrix" in sections:
                cells = matrix(opts.quick)
                med = run_matrix(stoa_bin, servers, cells, repeats, (duration, warmup), work,
                                 revisit=ctx["peak_revisit"])
                ctx["fsync_floor"] = run_fsync_floor(stoa_bin, servers, repeats,
                                                     (duration, warmup), base)
                if "etcd" in servers:
                    size = etcd_http.db_size(servers["etcd"])
                    ctx["etcd_db_size"] = "?" if size is None else "%.0f MiB" % (size / 1048576.0)
            if "ezk" in sections:
                # Last, so the extensions the EZK runs register cannot touch the
                # matrix above (each run also unregisters its own).
                ezk_points = ezk_matrix(opts.quick)
                ctx["queue_depth"], ctx["backoff_ms"] = 100, 1
                ezk_med = run_ezk(stoa_bin, servers, ezk_points, repeats, (duration, warmup),
                                  work)
            ctx["load_after"] = "%.2f" % os.getloadavg()[0]
            stop_servers(servers)
            servers = {}
        if "resources" in sections:
            n = opts.znodes or (20000 if opts.quick else 1000000)
            log("resource use: %d znodes of %d B per server" % (n, LOAD_PAYLOAD))
            write_timing = (duration if opts.quick else PEAK_MEASURED_S, warmup)
            ctx["big_write_s"], ctx["big_write_warmup"] = write_timing
            resources = run_resources(stoa_bin, base, systems, n, repeats, repeats,
                                      120.0 if opts.quick else 900.0, work, write_timing)
            if "zk_version" not in ctx:
                ctx["zk_version"] = resources["zookeeper"].get("version", "?")
        if "ensemble" in sections:
            log("3-member ensembles")
            ensemble = run_ensembles(stoa_bin, base, systems, opts.quick, repeats,
                                     (duration, warmup), 1.0 if opts.quick else 30.0, work)
            if "zk_version" not in ctx:
                ctx["zk_version"] = ensemble[2].get("zk_version", "?")
    finally:
        stop_servers(servers)
        if not os.environ.get("STOA_BENCH_KEEP"):
            shutil.rmtree(base, ignore_errors=True)

    report = write_outputs(out_dir, cells, med, ctx, ezk_points, ezk_med, resources, ensemble)
    log("wrote %s and %s (%.0f s)" % (report, plot_dir, time.monotonic() - started))
