"""3-member ensembles of each server, the clients spread over the members,
a few cells interleaved."""

import os

from .launch import new_ensemble, stop_servers
from .log import log
from .matrix import Cell, run_matrix
from .runner import run_bench


def ensemble_matrix(quick, reference="zookeeper"):
    """Cells against the 3-member ensembles: 9 sessions, 3 per member; the
    open-loop rates are fractions of the `reference` ZooKeeper's peak."""
    peak = ["--sessions", "9", "--outstanding", "16"]
    cells = [Cell("ensemble", "write peak (set, 9x16)", peak + ["--mix", "set=100"]),
             Cell("ensemble", "read peak (get, 9x16)", peak + ["--mix", "get=100"])]
    if quick:
        return cells
    cells.append(Cell("ensemble", "90% reads (9x8)",
                      ["--sessions", "9", "--outstanding", "8", "--read-ratio", "90"]))
    cells.append(Cell("ensemble", "write, 3 sessions x1",
                      ["--sessions", "3", "--outstanding", "1", "--mix", "set=100"]))
    for f in (0.5, 1.0):
        def args(med, f=f):
            rate = f * med[("write peak (set, 9x16)", reference)]["throughput_ops_s"]
            return peak + ["--mix", "set=100", "--rate", "%.0f" % max(rate, 1.0)]
        cells.append(Cell("ensemble", "write at %d%% of ZK peak (9x16, open loop)" % (f * 100),
                          args))
    return cells


def start_ensembles(base, systems):
    ensembles = {}
    try:
        for system in systems:
            d = os.path.join(base, "ensemble-" + system)
            os.makedirs(d)
            ensembles[system] = new_ensemble(system, d).start()
            log("%s ensemble on %s (pids %s, leader m%s)"
                % (system, ensembles[system].hosts, ",".join(map(str, ensembles[system].pids)),
                   ensembles[system].leader()))
    except BaseException:
        stop_servers(ensembles)
        raise
    return ensembles


def run_ensembles(stoa_bin, base, systems, quick, repeats, timing, global_warmup, work,
                  reference="zookeeper"):
    """(cells, medians, context) of the ensemble section."""
    ensembles = {}
    try:
        ensembles = start_ensembles(base, systems)
        ectx = {"leaders": {k: e.leader() for k, e in ensembles.items()},
                "versions": {k: ".".join(map(str, e.version() or ("?",)))
                             for k, e in ensembles.items() if k != "stoa"},
                "repeats": repeats, "duration": timing[0], "warmup": timing[1],
                "global_warmup": global_warmup, "systems": list(systems)}
        for system in systems:
            run_bench(stoa_bin, ensembles[system],
                      ["--sessions", "9", "--outstanding", "8", "--mix", "create=10,set=30,get=60"],
                      ["--duration", str(global_warmup), "--warmup", "0"], work)
        cells = ensemble_matrix(quick, reference)
        med = run_matrix(stoa_bin, ensembles, cells, repeats, timing, work)
        # The leaders after the load (an election during it would show here).
        ectx["leaders_after"] = {k: e.leader() for k, e in ensembles.items()}
    finally:
        stop_servers(ensembles)
    return cells, med, ectx
