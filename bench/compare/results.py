"""bench/results.json: what a run measured, saved so that a later run can
reuse some of its sections (--sections) and the report can be rendered
again (--report-only).

The file's layout, version RESULTS_VERSION:
  {"version": 2,
   "context": {...},                  the run: date, machine, options, and
                                      "versions" {system: "3.8.0"}, "go_versions"
                                      {etcd system: "Go 1.19.8"}, "etcd_db_sizes"
                                      {etcd system: "424 MiB"}, "reference" (the
                                      ZooKeeper the open-loop rates follow)
   "cells": [{"group", "name", "args", <system>: medians or null, ...}],
   "ezk": {"points": [[experiment, clients, extra args]], "medians": {key: ...}},
   "resources": {<system>: figures},
   "ensemble": {"context": {... "versions"}, "cells": [as "cells"]},
   "failover": {"context": {"rounds", "bin_s", "window_s", ... "versions"},
                "systems": {<system>: {"rounds": [{"leader", "leader_after",
                  "clients": [{"member", "write_s", "read_s", "expiries"}],
                  "bins": [writes/s]}], "errors": [text]}}}
                                      (optional: files from before the failover
                                      section have none, which reads as None)
A <system> is a key of systems.SYSTEMS. Version 1 (written by the one-file
scripts/bench-compare, without "version") had the systems zookeeper, stoa
and etcd (Debian's ZooKeeper and etcd) and in the contexts zk_version,
etcd_version, etcd_go and etcd_db_size for the one ZooKeeper and etcd.
load() brings every older version up to this one.
"""

import json

from .matrix import Cell, matrix
from .systems import SYSTEMS

RESULTS_VERSION = 2


def save(path, ctx, cells, med, ezk_points, ezk_med, resources, ensemble, failover=None):
    """ctx: the run's context without what only the report needs;
    ensemble: (cells, medians, context); failover: failover.run_failover's
    figures, or None (then not written)."""
    ens_cells, ens_med, ens_ctx = ensemble
    saved = {"version": RESULTS_VERSION,
             "context": ctx,
             "cells": saved_cells(cells, med),
             "ezk": {"points": [list(p) for p in ezk_points], "medians": ezk_med},
             "resources": resources,
             "ensemble": {"context": ens_ctx, "cells": saved_cells(ens_cells, ens_med)}}
    if failover:
        saved["failover"] = failover
    with open(path, "w") as f:
        json.dump(saved, f, indent=1)
        f.write("\n")


def saved_cells(cells, med):
    return [dict({"group": c.group, "name": c.name, "args": c.resolved},
                 **{k: med.get((c.name, k)) for k in SYSTEMS}) for c in cells]


def upgraded(saved):
    """saved (a parsed results.json of any version) in this version's layout."""
    version = saved.get("version", 1)
    if version > RESULTS_VERSION:
        raise ValueError("results.json is of version %d; this bench-compare reads up to %d"
                         % (version, RESULTS_VERSION))
    if version == 1:
        saved = _upgraded_from_1(saved)
    return saved


def _upgraded_from_1(saved):
    """Version 1's one ZooKeeper and one etcd were Debian's: their figures
    keep their keys, their versions go under the new context keys."""
    ctx = dict(saved["context"])
    ctx["versions"] = {k: ctx.pop(old) for k, old in (("zookeeper", "zk_version"),
                                                      ("etcd", "etcd_version")) if old in ctx}
    ctx["go_versions"] = {"etcd": ctx.pop("etcd_go")} if "etcd_go" in ctx else {}
    if "etcd_db_size" in ctx:
        ctx["etcd_db_sizes"] = {"etcd": ctx.pop("etcd_db_size")}
    ctx["reference"] = "zookeeper"
    ens = dict(saved.get("ensemble") or {})
    ens_ctx = dict(ens.get("context") or {})
    if "zk_version" in ens_ctx:
        ens_ctx["versions"] = {"zookeeper": ens_ctx.pop("zk_version")}
    ens["context"] = ens_ctx
    return dict(saved, version=2, context=ctx, ensemble=ens)


def load(path):
    """What save() wrote in results.json (of any version), as
    publish.write_outputs' arguments."""
    with open(path) as f:
        saved = upgraded(json.load(f))
    by_name = {c["name"]: c for c in saved["cells"]}
    cells, med = [], {}
    reference = saved["context"].get("reference", "zookeeper")
    for quick in (False, True):
        for c in matrix(quick, reference):
            if c.name in by_name and all(c.name != d.name for d in cells):
                c.resolved = by_name[c.name]["args"]
                cells.append(c)
                for kind in SYSTEMS:
                    if by_name[c.name].get(kind):
                        med[(c.name, kind)] = by_name[c.name][kind]
    ezk = saved.get("ezk", {})
    ens = saved.get("ensemble") or {}
    ens_cells, ens_med = [], {}
    for c in ens.get("cells", []):
        cell = Cell(c["group"], c["name"], c["args"])
        cell.resolved = c["args"]
        ens_cells.append(cell)
        for kind in SYSTEMS:
            if c.get(kind):
                ens_med[(c["name"], kind)] = c[kind]
    return {"cells": cells, "med": med, "ctx": dict(saved["context"]),
            "ezk_points": [tuple(p) for p in ezk.get("points", [])],
            "ezk_med": ezk.get("medians", {}), "resources": saved.get("resources") or {},
            "ensemble": (ens_cells, ens_med, dict(ens.get("context") or {})),
            "failover": saved.get("failover")}
