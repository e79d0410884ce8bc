"""The Extendable ZooKeeper experiments: server-side extensions on Stoa
against the client-side recipes on Stoa and on ZooKeeper."""

import statistics
from math import nan as NAN

from .log import log
from .runner import combine_runs, ratio, rotated, run_bench
from .systems import of_family, short


EZK_FIGURES = ("throughput_ops_s", "calls_per_op", "calls_per_release", "conflicts", "short",
               "empty", "p50", "p99", "cpu_us_per_op")


def ezk_variants(systems):
    """(approach, system) pairs: the recipe on every ZooKeeper and on
    Stoa, the extension on Stoa only."""
    return tuple([("recipe", z) for z in of_family("zookeeper", systems)]
                 + [("recipe", "stoa"), ("extension", "stoa")])


def ezk_zookeepers(med):
    """The ZooKeepers whose recipe results are in `med` (saved medians)."""
    have = {key.split("/")[3] for key in med if key.split("/")[2] == "recipe"}
    return [z for z in of_family("zookeeper", have)]


def ezk_matrix(quick):
    """(experiment, clients, extra args) points; each runs every variant."""
    pq = (1, 16) if quick else (1, 2, 4, 8, 16, 32)
    quota = (1, 40) if quick else (1, 2, 4, 8, 16, 32, 40)
    points = [("pq", n, []) for n in pq] + [("quota", n, []) for n in quota]
    if not quick:
        # The queue's length matters: both the extension and the recipe list
        # every element on each dequeue.
        points.append(("pq-deep", 16, ["--queue-depth", "1000"]))
    return points


def ezk_key(experiment, n, approach, system):
    return "%s/%d/%s/%s" % (experiment, n, approach, system)


def ezk_figures(result):
    e = result["ezk"]
    nan = lambda x: NAN if x is None else x  # noqa: E731
    if "calls_per_dequeue" in e:
        t = e["dequeue"]
        cpo, cpr = nan(e["calls_per_dequeue"]), NAN
        conflicts, short, empty = t["conflicts"], t["short"], t["empty"]
    else:
        a, r = e["allocation"], e["release"]
        cpo, cpr = nan(e["calls_per_allocation"]), nan(e["calls_per_release"])
        conflicts, short, empty = a["conflicts"] + r["conflicts"], a["short"], 0
    lat = result["latency_us"]
    return {"throughput_ops_s": result["throughput_ops_s"], "calls_per_op": cpo,
            "calls_per_release": cpr, "conflicts": conflicts, "short": short, "empty": empty,
            "p50": lat["p50"], "p99": lat["p99"],
            "cpu_us_per_op": result.get("server_cpu_us_per_op") or NAN,
            "errors": result["error_count"], "error_codes": result["errors"]}


def ezk_median(runs):
    def median_of_numbers(vals):
        # A figure a run could not measure (NaN) does not count.
        vals = [v for v in vals if v == v]
        return statistics.median(vals) if vals else NAN
    return combine_runs(runs, EZK_FIGURES, median_of_numbers)


def run_ezk(stoa_bin, servers, points, repeats, timing, work):
    """Every variant of a point, interleaved (the order rotates each repeat),
    on the ZooKeepers among `servers`."""
    variants = ezk_variants(servers)
    med = {}
    timing_args = ["--duration", str(timing[0]), "--warmup", str(timing[1])]
    for i, (experiment, n, extra) in enumerate(points):
        base = "pq" if experiment.startswith("pq") else "quota"
        runs = {v: [] for v in variants}
        for rep in range(repeats):
            order = rotated(variants, rep)
            if rep % 2:
                order = tuple(reversed(order))
            for approach, system in order:
                args = ["--scenario", "%s-%s" % (base, approach), "--sessions", str(n)] + extra
                runs[(approach, system)].append(
                    ezk_figures(run_bench(stoa_bin, servers[system], args, timing_args, work)))
        for (approach, system), rs in runs.items():
            med[ezk_key(experiment, n, approach, system)] = ezk_median(rs)
        g = lambda a, s: med[ezk_key(experiment, n, a, s)]  # noqa: E731
        ext = g("extension", "stoa")
        log("[ezk %d/%d] %-8s %2d clients: ext/Stoa %7.0f ops/s %.2f calls | %s"
            % (i + 1, len(points), experiment, n, ext["throughput_ops_s"], ext["calls_per_op"],
               " | ".join("recipe/%s %7.0f %.2f (ext x%.2f)"
                          % (short(s), g(a, s)["throughput_ops_s"], g(a, s)["calls_per_op"],
                             ratio(ext["throughput_ops_s"], g(a, s)["throughput_ops_s"]))
                          for a, s in variants if a == "recipe")))
    return med
