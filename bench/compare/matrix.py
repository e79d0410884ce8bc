"""The standalone matrix: every cell (a `stoa bench` load) on every server,
interleaved with the order rotating per repeat, medians of the repeats."""

from .log import log
from .runner import figures, median_of, ratio, rotated, run_bench, settle
from .systems import QUICK_EVERY_CELL, SYSTEMS, family, short


# Closed-loop shapes (sessions, calls in flight each) of the peak sweep.
PEAK_SHAPES = ((8, 16), (8, 32), (32, 16))
# Measured seconds of the peak cells (the targets) in a full run.
PEAK_MEASURED_S = 5.0
# --quick runs the systems but ZooKeeper (Debian's) and Stoa on these cells
# only (a smoke test of each one's path that keeps the CI run short); the
# full matrix runs every cell on every system.
QUICK_CELLS = ("write peak (set, 8x16)", "read peak (get, 8x16)", "50% reads (8x8)",
               "create-sync", "etcd serializable read peak (get, 8x16)")


class Cell:
    """One benchmark point; `args` are stoa bench flags, or a function of
    the medians measured so far (for loads relative to ZooKeeper's peak).
    `only`: the families it runs on, when not all."""

    def __init__(self, group, name, args, x=None, series=None, duration=None, only=None):
        self.group, self.name, self.args = group, name, args
        self.x, self.series = x, series
        # Measured seconds when longer than the run's default (see matrix).
        self.duration = duration
        # Run on every system, not only QUICK_EVERY_CELL (all cells but a
        # few in --quick).
        self.everywhere = True
        # The systems this cell runs on, when not all of them.
        self.only = only


def matrix(quick, reference="zookeeper"):
    """The cells; the open-loop rates are fractions of the peak of the
    `reference` system (a ZooKeeper)."""
    cells = []
    peak = ["--sessions", "8", "--outstanding", "16"]
    # The targets are read off these two cells. In a one-second window one
    # ZooKeeper garbage collection (or none) moved its peak between 22k and
    # 66k writes/s across the repeats of one run; longer windows average
    # over them, for every server alike.
    peak_s = None if quick else PEAK_MEASURED_S
    # A closed loop at one concurrency measures a server's peak only if
    # that many calls in flight saturate it; the sweep finds each server's
    # own peak (the targets take the best median), 8x16 first and alone in
    # --quick.
    for s, k in PEAK_SHAPES[:1] if quick else PEAK_SHAPES:
        for what, op, mix in (("write", "set", "set=100"), ("read", "get", "get=100")):
            cells.append(Cell("peak", "%s peak (%s, %dx%d)" % (what, op, s, k),
                              ["--sessions", str(s), "--outstanding", str(k), "--mix", mix],
                              x=s * k, series=what, duration=peak_s))
    # etcd's reads are linearizable by default (a ReadIndex round through
    # raft); ZooKeeper and Stoa answer from the local tree, as etcd does
    # with serializable=true. The same sweep with those reads, on etcd only.
    for s, k in PEAK_SHAPES[:1] if quick else PEAK_SHAPES:
        cells.append(Cell("etcd-reads", "etcd serializable read peak (get, %dx%d)" % (s, k),
                          ["--sessions", str(s), "--outstanding", str(k), "--mix", "get=100",
                           "--serializable"],
                          x=s * k, series="read", duration=peak_s, only=("etcd",)))
    # Latency at fractions of ZooKeeper's measured peak (open loop).
    fractions = (0.5, 1.0) if quick else (0.25, 0.5, 0.75, 1.0)
    for what, mix, peak_cell in (("write", "set=100", "write peak (set, 8x16)"),
                                 ("read", "get=100", "read peak (get, 8x16)")):
        for f in (fractions if what == "write" else (0.5, 1.0)):
            def args(med, mix=mix, f=f, peak_cell=peak_cell):
                rate = f * med[(peak_cell, reference)]["throughput_ops_s"]
                return peak + ["--mix", mix, "--rate", "%.0f" % max(rate, 1.0)]
            cells.append(Cell("latency", "%s at %d%% of ZK peak" % (what, f * 100), args,
                              x=f, series=what))
    clients = (1, 8) if quick else (1, 4, 16, 64)
    for what, mix in (("write", "set=100"), ("read", "get=100")):
        for n in clients:
            cells.append(Cell("clients", "%s, %d sessions x1" % (what, n),
                              ["--sessions", str(n), "--outstanding", "1", "--mix", mix],
                              x=n, series=what))
    for r in ((0, 50, 100) if quick else (0, 25, 50, 75, 90, 100)):
        cells.append(Cell("read-ratio", "%d%% reads (8x8)" % r,
                          ["--sessions", "8", "--outstanding", "8", "--read-ratio", str(r)],
                          x=r, series="mixed"))
    for what, mix in (("write", "set=100"), ("read", "get=100")):
        for p in ((8, 1024) if quick else (8, 256, 1024)):
            cells.append(Cell("payload", "%s, %d B (8x8)" % (what, p),
                              ["--sessions", "8", "--outstanding", "8", "--mix", mix,
                               "--payload", str(p)], x=p, series=what))
    scen = ("create-sync", "create-async") if quick else (
        "create-sync", "create-async", "ephemeral-300b", "producer-consumer")
    for s in scen:
        extra = ["--ops", "2000"] if (quick and s == "ephemeral-300b") else []
        # Leave the tree as found: timed creates grow it in proportion to
        # the server's speed, so a faster server's later cells (the peak
        # cells' second pass) would write beside a larger tree.
        cells.append(Cell("scenario", s, ["--scenario", s, "--clean-up"] + extra))
    if quick:
        for c in cells:
            c.everywhere = c.name in QUICK_CELLS
    return cells


def cell_systems(cell, servers):
    return [k for k in SYSTEMS if k in servers and (k in QUICK_EVERY_CELL or cell.everywhere)
            and (cell.only is None or family(k) in cell.only)]


# The cells the throughput targets are read from run their repeats twice:
# once in their place in the matrix and again after every other cell, and
# their medians take both passes. The machine's speed drifts over minutes
# (one half-hour gave Stoa 400-460k writes/s in the same cell, the next
# 330-390k), so repeats run back to back can all fall in one slow phase.
REVISITED_GROUPS = ("peak", "etcd-reads")


def run_matrix(stoa_bin, servers, cells, repeats, timing, work, revisit=False):
    med = {}
    runs = {}
    timing_args = ["--duration", str(timing[0]), "--warmup", str(timing[1])]

    def run_cell(i, cell, first_rotation):
        systems = cell_systems(cell, servers)
        if not systems:
            return
        cell_timing = timing_args
        if cell.duration and cell.duration > timing[0]:
            cell_timing = ["--duration", str(cell.duration), "--warmup", str(timing[1])]
        # Scenarios with a fixed op count ignore --duration.
        for rep in range(first_rotation, first_rotation + repeats):
            for kind in rotated(systems, rep):
                settle(servers)
                runs.setdefault((cell.name, kind), []).append(
                    figures(run_bench(stoa_bin, servers[kind], cell.resolved, cell_timing, work)))
        for kind in systems:
            med[(cell.name, kind)] = median_of(runs[(cell.name, kind)])
        log_cell(i, len(cells), cell.name, systems, med)

    for i, cell in enumerate(cells):
        cell.resolved = cell.args(med) if callable(cell.args) else cell.args
        run_cell(i, cell, 0)
    if revisit:
        # Cells computed from the first pass (the open-loop rates) keep it.
        for i, cell in enumerate(cells):
            if cell.group in REVISITED_GROUPS:
                run_cell(i, cell, repeats)
    return med


def log_cell(i, n, name, systems, med):
    """One line per cell: each system's throughput and p99, and Stoa's
    throughput over each other's."""
    parts = []
    stoa = med.get((name, "stoa"))
    for k in systems:
        m = med[(name, k)]
        part = "%s %9.0f ops/s p99 %7.2f ms" % (short(k), m["throughput_ops_s"], m["p99"] / 1000.0)
        if stoa is not None and k != "stoa":
            part += " (Stoa x%.2f)" % ratio(stoa["throughput_ops_s"], m["throughput_ops_s"])
        parts.append(part)
    log("[%d/%d] %-32s %s" % (i + 1, n, name, " | ".join(parts)))
