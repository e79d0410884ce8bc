"""A run's outputs: the plots, bench/results.json and benchmarks.md."""

import os

from . import results
from .plots import ensemble_plot, ezk_plots, failover_plot, matrix_plots, resource_plot
from .render import write_report
from .systems import note_versions

# Context keys that only the report needs (the plots made, and the
# sections, passed to the renderer in the context): not saved.
TRANSIENT = ("plots", "ezk_plots", "ezk_points", "ezk_med", "resources", "ensemble",
             "resource_plots", "failover", "failover_plots")


def write_outputs(out_dir, cells, med, ctx, ezk_points=(), ezk_med=None, resources=None,
                  ensemble=None, failover=None, save=True):
    """ensemble: (cells, medians, context) of the 3-member section;
    failover: the failover section's figures (failover.run_failover) or
    None; save: whether to write results.json too."""
    plot_dir = os.path.join(out_dir, "bench")
    os.makedirs(plot_dir, exist_ok=True)
    # The plots' legends name the versions too.
    note_versions(ctx.get("versions"))
    ctx["plots"] = matrix_plots(cells, med, plot_dir)
    ctx["ezk_plots"] = ezk_plots(list(ezk_points), ezk_med or {}, plot_dir)
    ens_cells, ens_med, ens_ctx = ensemble or ([], {}, {})
    ens_ctx["plots"] = ensemble_plot(ens_cells, ens_med, plot_dir)
    ctx["resource_plots"] = resource_plot(resources or {}, plot_dir)
    ctx["failover_plots"] = failover_plot(failover, plot_dir)
    if save:
        results.save(os.path.join(plot_dir, "results.json"),
                     {k: v for k, v in ctx.items() if k not in TRANSIENT}, cells, med,
                     ezk_points, ezk_med or {}, resources or {},
                     (ens_cells, ens_med, {k: v for k, v in ens_ctx.items() if k != "plots"}),
                     failover)
    ctx["ezk_points"], ctx["ezk_med"] = list(ezk_points), ezk_med or {}
    ctx["resources"] = resources or {}
    ctx["ensemble"] = (ens_cells, ens_med, ens_ctx)
    ctx["failover"] = failover
    report = os.path.join(out_dir, "benchmarks.md")
    write_report(report, cells, med, ctx)
    return report
