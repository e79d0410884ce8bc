"""docs/benchmarks.md from a run's figures: the head, the targets (the
summary), then a section per part of the run (render/*.py, one each), the
sections other benchmarks keep beside it (EXTRA_SECTIONS, copied as they
are), the plots, the method, the TODO."""

import os

from ..systems import SYSTEMS, note_versions, of_family
from .ensemble import ensemble_report
from .ezk import ezk_report
from .failover import failover_report
from .header import header, method
from .matrix import group_tables
from .resources import resource_report
from .targets import targets
from .text import have_matplotlib, present_systems


# Sections written by other benchmarks (by hand from their output), kept in
# files of their own under bench/ next to the report so that a re-run of
# this one does not drop them: copied verbatim where present.
EXTRA_SECTIONS = [
    "zoonet.md",  # bench/regions/zoonet.py: composition across regions (issue 24)
    "agora.md",  # bench/partitions/agora.py: the partitioned engine (issue 23)
]

# Plots those benchmarks leave under bench/, listed under "Plots" where present.
EXTRA_PLOTS = [
    ("agora_throughput.png", "Partitions: throughput and server CPU per op, P=1 vs P=2 "
     "(AGORA Figs. 6/7)"),
    ("agora_latency.png", "Partitions: latency vs offered load, P=1 vs P=2 (AGORA Fig. 8)"),
    ("agora_switching.png", "Partitions: the cost of switching partitions (AGORA Fig. 9)"),
    ("agora_rebalance.png", "Partitions: rebalancing a skew (AGORA Fig. 10)"),
    ("agora_model.png", "Partitions: the model of the scaling on 16 cores, beside the "
     "device sweep"),
]


def extra_sections(L, path):
    for name in EXTRA_SECTIONS:
        section = os.path.join(os.path.dirname(os.path.abspath(path)), "bench", name)
        if os.path.exists(section):
            with open(section) as f:
                L.append(f.read().strip() + "\n")


def extra_plots(path):
    bench = os.path.join(os.path.dirname(os.path.abspath(path)), "bench")
    return [(png, title) for png, title in EXTRA_PLOTS
            if os.path.exists(os.path.join(bench, png))]


def write_report(path, cells, med, ctx):
    resources = ctx.get("resources") or {}
    ens_cells, ens_med, ens_ctx = ctx.get("ensemble") or ([], {}, {})
    failover = ctx.get("failover") or {}
    systems = present_systems(cells, med) or [k for k in SYSTEMS if k in resources] or \
        present_systems(ens_cells, ens_med) or \
        [k for k in SYSTEMS if k in (failover.get("systems") or {})]
    etcd = bool(of_family("etcd", systems))
    note_versions(ctx.get("versions"))
    L = []
    header(L, cells, med, ctx, systems, ens_cells)
    targets(L, cells, med, systems, ens_med, resources, ctx.get("reference", "zookeeper"))
    group_tables(L, cells, med, ctx, systems)
    resource_report(L, resources, ctx)
    ensemble_report(L, ens_cells, ens_med, ens_ctx)
    failover_report(L, failover, ctx)
    if etcd and ctx.get("ezk_points"):
        L.append("The EZK experiments below are ZooKeeper-protocol recipes and server-side "
                 "extensions; they do not run on etcd.\n")
    ezk_report(L, ctx.get("ezk_points", []), ctx.get("ezk_med", {}), ctx)
    extra_sections(L, path)
    plots = list(ctx["plots"]) + extra_plots(path)
    if plots:
        L.append("## Plots\n")
        for png, title in plots:
            L.append("![%s](bench/%s)\n" % (title, png))
    elif not have_matplotlib():
        L.append("(No plots: matplotlib was not available.)\n")
    method(L, cells, med, ctx, systems)
    L.append("Raw medians and every repeat: [bench/results.json](bench/results.json).\n")
    L.append("## Not measured yet (TODO)\n")
    if not etcd:
        L.append("- etcd (`etcd-server`) as a third column (`scripts/bench-compare` without "
                 "`--no-etcd`).")
    else:
        L.append("- etcd with auto-compaction; etcd's serializable reads beyond the peak sweep "
                 "(the latency, read-ratio and payload cells read linearizably).")
    L.append("- Ensembles: 5 members, observers/learners, members on separate machines (here "
             "the three members of each ensemble share the 2 cores and one disk), %s"
             "session moves under load, reads after sync." % (
                 "a follower's kill and a partitioned leader (the failover section kills the "
                 "leader only), " if failover else "failover and "))
    L.append("- Resource use with other tree shapes (here one parent of all N znodes), larger "
             "values, each ensemble member's memory, restart after kill -9 (here SIGTERM) and "
             "a follower catching up from a snapshot of that tree.")
    L.append("- Partitions P > 1 on many cores (AGORA's multicore scaling; P=1 against P=2 "
             "on 2 cores is in the partitioned engine's section), watch fan-out, session "
             "churn, large (>1 KiB) values, the `raft-engine` baseline for the WAL.")
    L.append("- The load generator shares the 2 cores with the server; a second machine "
             "would remove that bias.")
    L.append("- EZK experiments on a replicated cell (the paper used 5 replicas on EC2; here "
             "both servers are standalone), the quota figures with other backoffs than 1 ms, "
             "and several producers for the queue.")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
