"""The report's small pieces: numbers, ratios, the table of a group of cells."""

import statistics
from math import nan as NAN

from ..runner import ratio  # noqa: F401 - the report's too
from ..systems import SYSTEMS, short


def num(x, spec):
    """spec % x, or a dash for a missing or NaN figure."""
    return "–" if x is None or x != x else spec % x


def shape_of(name):
    """`8x16` of `write peak (set, 8x16)`."""
    return name.split(", ")[-1].rstrip(")")


def present_systems(cells, med):
    """The systems with at least one measured cell, in SYSTEMS order."""
    return [k for k in SYSTEMS if any((c.name, k) in med for c in cells)]


def cell_table(L, cells, med, systems):
    """The table of one group of cells: figures, ratios, errors."""
    others = [k for k in systems if k != "stoa"]
    get = lambda name, kind: med.get((name, kind))  # noqa: E731
    cols = ["cell"]
    cols += ["%s ops/s" % short(k) for k in systems] + ["Stoa/%s" % short(k) for k in others]
    cols += ["%s p50" % short(k) for k in systems]
    cols += ["%s p99" % short(k) for k in systems] + ["p99 Stoa/%s" % short(k) for k in others]
    cols += ["%s p99.9" % short(k) for k in systems]
    cols += ["%s cpu µs/op" % short(k) for k in systems] + ["cpu Stoa/%s" % short(k) for k in others]
    cols += ["errors " + "/".join(short(k) for k in systems)]
    L.append("| " + " | ".join(cols) + " |")
    L.append("|---|" + "---:|" * (len(cols) - 2) + "---|")
    for c in cells:
        m = {k: get(c.name, k) for k in systems}
        val = lambda k, key, scale=1.0: (NAN if m[k] is None  # noqa: E731
                                         else m[k].get(key, NAN) * scale)
        row = [c.name]
        row += [num(val(k, "throughput_ops_s"), "%.0f") for k in systems]
        row += [num(ratio(val("stoa", "throughput_ops_s"), val(k, "throughput_ops_s")), "%.2f")
                for k in others]
        row += [num(val(k, "p50", 1e-3), "%.2f") for k in systems]
        row += [num(val(k, "p99", 1e-3), "%.2f") for k in systems]
        row += [num(ratio(val("stoa", "p99"), val(k, "p99")), "%.2f") for k in others]
        row += [num(val(k, "p999", 1e-3), "%.2f") for k in systems]
        row += [num(val(k, "cpu_us_per_op"), "%.1f") for k in systems]
        row += [num(ratio(val("stoa", "cpu_us_per_op"), val(k, "cpu_us_per_op")), "%.2f")
                for k in others]
        errs = " / ".join("–" if m[k] is None else "%d" % m[k]["errors"] for k in systems)
        codes = ["%s: %s" % (short(k), ", ".join("%s %d" % kv
                                                for kv in sorted(m[k]["error_codes"].items())))
                 for k in systems if m[k] is not None and m[k]["error_codes"]]
        if codes:
            errs += " (" + "; ".join(codes) + ")"
        row.append(errs)
        L.append("| " + " | ".join(row) + " |")


def client_cpu(cells, med, kind):
    """Median load-generator CPU per call against `kind` over the cells."""
    vals = [med[(c.name, kind)].get("client_cpu_us_per_op", NAN) for c in cells
            if (c.name, kind) in med]
    vals = [v for v in vals if v == v]
    return statistics.median(vals) if vals else NAN


def have_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        return False
