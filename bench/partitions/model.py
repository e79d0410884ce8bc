"""A model of the partitioned engine's scaling (issue 23): throughput with P
partitions on a machine of many cores, predicted from what a 2-core machine
can measure.

Inputs, all measured by agora.py on the machine it runs on (setData and
getData of 100 B, 8 sessions x 16 in flight):

- the per-partition cost: the server's CPU per operation at P=1, split by
  thread (the engine's thread, the WAL thread, the rest), from
  /proc/PID/task/*/stat;
- the cross-partition overhead: the server's CPU per operation at P=2
  over P=1's, less one (`o`); nothing else in a 2-core machine's figures
  says how it grows with P, so the model takes it as a constant (what
  routing and the merge cost per operation whatever P is) and, as the
  pessimistic bound, as growing linearly, o x (P - 1) (one more raft group
  ticking, one more tree to route over, per partition);
- the worst-case switching cost: 1 - (throughput with every call on
  another partition / every call on one), at P=2.

And one input taken from docs/performance.md: where the engine thread's
share of the write peak goes (`scripts/profile`, setData 8x16 100 B; of the
server's CPU: WAL thread 31%, prep 19%, apply 17%, socket writes 13%,
parking and waking 8%, raft, frame decode, socket reads and the rest 12%).

What the model computes is a *capacity*: the throughput at which the
busiest thread of the server is saturated, as a ratio to the same at P=1.
A load that saturates the server at every P would see these ratios; the
2-core machine's own runs are bound by the round trip of the group commit
as much as by CPU (docs/performance.md), so its figures are not
capacities, and the model says nothing about that part.

Stages, each a thread (or a set of threads) that every operation passes:

- the engine's thread, whose CPU per operation is split into what stays
  on it (serial) and what is lent to the P partitions' threads
  (parallel: divided by min(P, cores left));
- the WAL thread, one per server. Its CPU is mostly a cost per group
  (the write and flush syscalls) and a small one per write (encoding,
  copying): agora.py's WAL figure fits both from loads of 16 to 1,024
  writes in flight. Under group commit a group gathers what arrives while
  the one before syncs, so at a growing load the groups grow and the cost
  per group spreads over more writes: what bounds the thread is the cost
  per write, 1 / that many writes per second. Without the fit (a run
  without the WAL figure) the model takes the CPU per write measured at
  P=1 as the bound, the pessimistic one.

The variants (what is serial):

- one thread: everything on the engine's thread (partition.threads=0,
  what the 16-core sweep measured);
- apply lent: the apply of committed writes lent (partition.threads=P-1,
  built: docs/partitions.md, "Lent partitions");
- prep + apply lent, sockets on io.threads: the next phases of slice 5b,
  with slice 5a's I/O threads (at most 4) taking the socket writes;
- owned partitions: each partition's whole pipeline on its own thread
  (AGORA's design), only the cross-partition overhead added per
  operation, with and without the one WAL thread as a bound.
"""

# docs/performance.md, "Where the partition thread's and the WAL thread's
# CPU goes at the write peak": shares of the server's CPU (percent).
PROFILE = {"wal": 31, "prep": 19, "apply": 17, "sockets": 13, "parking": 8, "other": 12}
ENGINE_POINTS = sum(v for k, v in PROFILE.items() if k != "wal")  # 69
IO_THREADS_MAX = 4  # io.threads=auto takes at most 4

# The 16-core device machine's sweep before partition threads
# (docs/partitions.md, "The 16-core sweep, before threads"; bench/device/
# partition-sweep.sh, 2 interleaved rounds of 3 s, medians): P ->
# (setData ops/s, server cores, / one partition at the same load,
#  getData ops/s, server cores, / one partition at the same load).
DEVICE_SWEEP = {
    1: (272710, 1.15, None, 709018, 0.83, None),
    2: (265617, 1.13, 1.18, 818994, 0.98, 0.78),
    4: (284164, 1.11, 0.99, 736465, 0.98, 0.68),
    8: (331922, 1.11, 1.42, 941704, 0.98, 0.82),
    12: (295262, 1.09, 0.96, 835438, 0.98, 0.94),
}


# The same sweep after partition threads (docs/partitions.md, "The 16-core
# sweep, after threads"; 2026-11-29, the engine of 57f144e, before owned
# partitions served batched reads; 2 interleaved rounds of 3 s, medians),
# one per setting, each row as in DEVICE_SWEEP, and the best one partition
# did under any of that sweep's loads (setData, getData): what its scaling
# is taken against.
DEVICE_SWEEPS_THREADS = {
    "partition.threads=auto": {
        "best_one": (364644, 1039245),
        "rows": {
            1: (294806, 1.11, None, 811673, 0.90, None),
            2: (287404, 1.15, 0.99, 819516, 1.19, 0.79),
            4: (275326, 1.52, 0.85, 767286, 1.39, 0.77),
            8: (340374, 2.15, 0.93, 979380, 1.86, 0.97),
            12: (338468, 2.56, 1.24, 926396, 2.27, 1.15),
        },
    },
    "partition.owned=yes": {
        "best_one": (344530, 986051),
        "rows": {
            1: (246508, 1.02, None, 902250, 0.84, None),
            2: (246354, 1.51, 0.89, 582687, 0.97, 0.67),
            4: (357524, 2.17, 1.26, 574924, 0.98, 0.58),
            8: (323526, 2.26, 1.38, 649692, 0.98, 0.71),
            12: (267260, 2.17, 0.78, 712642, 0.98, 0.99),
        },
    },
    "partition.threads=auto, io.threads=4": {
        "best_one": (326276, 988078),
        "rows": {
            1: (176245, 0.94, None, 705812, 1.33, None),
            2: (250160, 1.45, 0.97, 784800, 1.68, 0.88),
            4: (304992, 1.94, 0.93, 824951, 1.96, 0.83),
            8: (351523, 2.71, 1.24, 1118300, 2.63, 1.28),
            12: (393307, 3.10, 1.27, 1294320, 3.03, 1.50),
        },
    },
    "partition.owned=yes, io.threads=4": {
        "best_one": (317046, 1033820),
        "rows": {
            1: (184162, 0.91, None, 749967, 1.35, None),
            2: (225628, 1.54, 0.85, 686961, 1.38, 0.73),
            4: (393571, 2.60, 1.55, 680481, 1.34, 0.66),
            8: (354310, 2.65, 1.12, 658650, 1.29, 0.81),
            12: (275974, 2.45, 1.04, 569050, 1.32, 0.72),
        },
    },
}


def threads_scaling(op):
    """{P: (the best scaling over the after-threads settings, its setting)}
    for op 0 (setData) or 1 (getData): throughput at P over the best one
    partition did in the same setting's sweep."""
    column = 0 if op == 0 else 3
    best = {}
    for name, sweep in DEVICE_SWEEPS_THREADS.items():
        for p, row in sweep["rows"].items():
            ratio = row[column] / sweep["best_one"][op]
            if p not in best or ratio > best[p][0]:
                best[p] = (ratio, name)
    return best


def device_ratios(column):
    """{P: the device sweep's throughput at P over its P=1 row} for
    column 0 (setData) or 3 (getData)."""
    base = DEVICE_SWEEP[1][column]
    return {p: row[column] / base for p, row in DEVICE_SWEEP.items()}


def overhead(o, p, growth):
    """The cross-partition overhead at p partitions, as a share of P=1's
    CPU per operation: none at one partition, `o` from two on ("const"),
    or o x (p - 1) ("linear")."""
    if p <= 1:
        return 0.0
    return o if growth == "const" else o * (p - 1)


def write_capacity(p, inp, variant, growth="const", cores=16):
    """Ops per second of server capacity for writes at p partitions, from
    inp (the measured P=1 figures, µs per op: engine, wal, cpu; o)."""
    engine, cpu, o = inp["engine"], inp["cpu"], inp["o"]
    extra = overhead(o, p, growth) * cpu
    # Cores for the partitions' threads: one is the WAL thread's.
    lanes = max(1, min(p, cores - 1))
    shares = {k: v / ENGINE_POINTS for k, v in PROFILE.items() if k != "wal"}
    if variant == "one thread":
        stage = engine + extra
    elif variant == "apply lent":
        lent = shares["apply"]
        stage = engine * (1 - lent) + extra + engine * lent / lanes
    elif variant == "prep+apply lent, io.threads":
        lent = shares["apply"] + shares["prep"]
        io = shares["sockets"]
        stage = max(engine * (1 - lent - io) + extra + engine * lent / lanes,
                    engine * io / min(IO_THREADS_MAX, max(1, cores - lanes - 1)))
    elif variant in ("owned", "owned, no WAL bound"):
        # Each partition's thread carries its 1/p of the operations, each
        # at the engine's cost plus the overhead.
        stage = (engine + extra) / lanes
    else:
        raise ValueError(variant)
    bound = stage
    if variant != "owned, no WAL bound":
        bound = max(stage, wal_bound_us(inp))
    return 1e6 / bound


def wal_bound_us(inp):
    """The WAL thread's CPU per write at saturation (module docstring):
    the fitted cost per write when the WAL figure ran, else the CPU per
    write measured at P=1."""
    if "wal_write_us" in inp:
        return max(0.0, inp["wal_write_us"])
    return inp["wal"]


def read_capacity(p, inp, variant, growth="const", cores=16):
    """The same for reads (no WAL; served on the engine's thread today)."""
    engine, cpu, o = inp["engine"], inp["cpu"], inp["o"]
    extra = overhead(o, p, growth) * cpu
    lanes = max(1, min(p, cores))
    if variant == "one thread":
        stage = engine + extra
    elif variant == "owned":
        stage = (engine + extra) / lanes
    else:
        raise ValueError(variant)
    return 1e6 / stage


WRITE_VARIANTS = ("one thread", "apply lent", "prep+apply lent, io.threads", "owned",
                  "owned, no WAL bound")
READ_VARIANTS = ("one thread", "owned")


def predict(write_inp, read_inp, parts=range(1, 17), cores=16):
    """{"writes": {variant/growth: {P: ratio}}, "reads": ...,
    "writes_capacity_p1": ops/s, ...}: each variant's capacity at P over
    its own at P=1 (I/O threads, for one, would speed P=1 too: the ratio
    is what more partitions add)."""
    out = {"writes": {}, "reads": {}, "cores": cores}
    for kind, inp, capacity, variants in (("writes", write_inp, write_capacity, WRITE_VARIANTS),
                                          ("reads", read_inp, read_capacity, READ_VARIANTS)):
        if not inp:
            continue
        out[kind + "_capacity_p1"] = capacity(1, inp, "one thread", cores=cores)
        for v in variants:
            base = capacity(1, inp, v, cores=cores)
            for growth in ("const", "linear"):
                out[kind]["%s (o %s)" % (v, growth)] = {
                    p: capacity(p, inp, v, growth, cores) / base for p in parts}
    return out


def self_check():
    """A few properties any version of the model must keep (run by the
    smoke test through agora.py --quick): P=1 is 1.0 for the bounded
    variants, one thread never scales, owned partitions scale at most
    linearly."""
    inp = {"engine": 2.5, "wal": 1.0, "cpu": 3.6, "o": 0.05}
    pr = predict(inp, {"engine": 1.0, "cpu": 1.1, "o": 0.05})
    for name, series in list(pr["writes"].items()) + list(pr["reads"].items()):
        assert abs(series[1] - 1.0) < 1e-9, (name, series[1])
        for p, r in series.items():
            assert 0 < r <= p + 1e-9, (name, p, r)
    assert all(r <= 1.0 + 1e-9 for r in pr["writes"]["one thread (o const)"].values())
    assert pr["writes"]["owned (o const)"][16] <= 2.5 / 1.0 + 1e-9  # the WAL bound
    # With the fit, the bound is its cost per write, not P=1's per write.
    fitted = dict(inp, wal_group_us=40.0, wal_write_us=0.1, wal_sync_us=100.0)
    pr = predict(fitted, None)
    assert pr["writes"]["owned (o const)"][16] > 2.5 / 1.0
    assert pr["writes"]["owned (o const)"][16] <= 16 + 1e-9
    return True
