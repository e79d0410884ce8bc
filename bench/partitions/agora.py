#!/usr/bin/env python3
"""The partitioned engine's benchmarks (issue 23): AGORA's Figures 6-10 on
the machine it runs on, with a model of the scaling.

Ramos et al., "AGORA: A Dependable High-Performance Coordination Service
for Multi-Cores" (DSN 2021), section V (../shared/papers/
agora-multicore-coordination.txt), mirrored with real `stoa server`
processes driven by `stoa bench`:

  throughput  (Figs. 6/7) throughput and the server's CPU per operation
              at P=1 and P=2 (and P=2 with partition.threads=1 and with
              partition.owned=yes, labelled),
              getData and setData of 8 B, 100 B and 1 KiB, 8 sessions x 16
              in flight over /g0 and /g1 (one keyspace spread over both;
              with P=2 /g1 is a group on partition 1); ZooKeeper 3.9.5 as
              the reference line where its jars are cached.
  latency     (Fig. 8) p50 and p99 latency vs offered load (open loop,
              --rate at fractions of P=1's closed-loop peak measured in the
              same run), P=1 and P=2.
  switching   (Fig. 9) the cost of switching partitions: 32 synchronous
              sessions with every call under /g1 (no switch), or under /g0
              and /g1 in bursts of 10 and of 1 (a switch every call), at
              P=2 and, as the control, at P=1 (same paths, one partition).
  rebalance   (Fig. 10) time to rebalance a skew: P=3 with groups /g1-/g4
              (/g1, /g3 on partition 1; /g2, /g4 on 2) and the load
              balancer's window at 1 s; two writers on /g1 and /g2
              (balanced), then the second moves to /g3 (both on partition
              1); mntr polled every 100 ms gives each partition's writes/s
              and the moment stoa_group_moves counts the balancer's move.
  fast        fast reads and fast watches (AGORA §IV-F): P=2 with
              partition.owned=yes, getData/setData 50/50 over /g0 and /g1
              in bursts of 1 (a switch every call), 8 sessions x 16 in
              flight, plain sessions against sessions opted in with
              `stoa bench --fast reads,watches`, on the same server each
              round; mntr's stoa_reads_fast counts the reads that skipped
              a wait.
  wal         the WAL thread's CPU per write as the load grows: P=1, setData
              of 100 B at 2x8 up to 32x32 in flight; `mntr`'s counts of
              writes and of the groups the WAL thread synced give the
              writes per group, /proc its CPU; a fit splits that CPU into a
              part per group (the write and flush syscalls) and a part per
              write (encoding, copying), which the model's WAL bound uses.

Then the model (model.py): throughput vs P for P=1..16 on 16 cores from
the measured per-partition cost (CPU per op at P=1, per thread) and the
cross-partition overhead (P=2's extra CPU per op, the switching cost),
beside the 16-core device sweep measured before partition threads.

    target/bench-venv/bin/python bench/partitions/agora.py --out docs/bench   # about 10 min on 2 cores
    .venv/bin/python bench/partitions/agora.py --quick     # under a minute: the smoke test's

(matplotlib for the plots: target/bench-venv is the one scripts/bench-compare
makes from bench/requirements.txt; without it, tables only.)

Rounds alternate the configurations compared (the order rotating each
round); figures are medians of the rounds, ratios per round (a
configuration over the other of the same round), then their median: read
the ratios, not the absolute figures, on a shared 2-core machine. With
--out DIR it writes agora.json, agora_*.png (with matplotlib) and
agora.md there. Bounded: every run has a fixed duration and a timeout, the
whole program stops scheduling runs at --max-seconds, and every server it
started is stopped by PID however it ends.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, HERE)

import servers  # noqa: E402  (tests/e2e/servers.py: start and stop by PID)

import model  # noqa: E402
import report  # noqa: E402

PAYLOADS = (8, 100, 1024)
OPS = ("set", "get")
OP_NAMES = {"set": "setData", "get": "getData"}
ZK = "ZK 3.9.5"
ZK_JVM_FLAGS = ("-Xmx1g",)  # as bench/compare runs it (launch.ZK_HEAP_FLAG)


def stoa_cfg(partitions, groups=(), threads=0, balance_ms=None, owned="no"):
    """zoo.cfg entries of a Stoa configuration. Every key the e2e
    environment could set (STOA_PARTITIONS, STOA_IO_THREADS,
    STOA_PARTITION_THREADS, STOA_PARTITION_OWNED) is named, so the figures
    are the ones asked."""
    cfg = {"partitions": partitions, "io.threads": 0, "partition.threads": threads,
           "partition.owned": owned}
    if groups:
        cfg["partition.groups"] = ",".join(groups)
    if balance_ms is not None:
        cfg["partition.balanceIntervalMs"] = balance_ms
    return cfg


CONFIGS = {
    "P=1": stoa_cfg(1),
    "P=2": stoa_cfg(2, ["/g1"]),
    "P=2, partition.threads=1": stoa_cfg(2, ["/g1"], threads=1),
    "P=2, partition.owned=yes": stoa_cfg(2, ["/g1"], owned="yes"),
}
T1 = "P=2, partition.threads=1"
O1 = "P=2, partition.owned=yes"


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


class OutOfTime(Exception):
    pass


class Run:
    """What a whole run shares: options, the servers it started, the work
    directory, the deadline."""

    def __init__(self, args):
        self.args = args
        self.bin = servers.stoa_bin()
        self.work = tempfile.mkdtemp(prefix="stoa-agora-")
        self.started = []
        self.t0 = time.monotonic()
        self.results = []
        self.notes = []
        self.truncated = []
        self.quiet_budget = args.quiet_budget
        self.quiet_waited = 0.0
        self.reserve = 0.0  # seconds the figures after the current one need

    def left(self):
        return self.args.max_seconds - (time.monotonic() - self.t0)

    def check_time(self, what, need=5):
        if self.left() < need:
            self.truncated.append(what)
            raise OutOfTime(what)

    # -- servers
    def start_stoa(self, name, cfg):
        d = tempfile.mkdtemp(prefix="srv-", dir=self.work)
        srv = servers.Server(kind="stoa", max_client_cnxns=0, super_digest=False,
                             base_dir=d, extra_cfg=cfg)
        self.started.append(srv)
        srv.start(timeout=30)
        log("%s on %s (pid %d)" % (name, srv.hosts, srv.pid))
        return srv

    def start_zk(self, jars):
        d = tempfile.mkdtemp(prefix="zk-", dir=self.work)
        srv = servers.Server(kind="zookeeper", max_client_cnxns=0, super_digest=False,
                             base_dir=d, zookeeper=jars, jvm_flags=ZK_JVM_FLAGS)
        self.started.append(srv)
        srv.start(timeout=60)
        log("%s on %s (pid %d)" % (ZK, srv.hosts, srv.pid))
        return srv

    def stop(self, srv):
        try:
            srv.stop()
        finally:
            if srv in self.started:
                self.started.remove(srv)
            shutil.rmtree(srv.base_dir, ignore_errors=True)

    def each_server(self, label, rounds, configs, need=10, start=None):
        """Each round, each configuration in that round's rotated order:
        yields (round, name, server), a fresh server of that configuration
        (`start(name)`, by default a Stoa server), stopped once the caller's
        loop body is done with it."""
        for rnd in range(rounds):
            for name in rotated(configs, rnd):
                self.check_time("%s round %d %s" % (label, rnd, name), need=need)
                srv = start(name) if start else self.start_stoa(name, CONFIGS[name])
                try:
                    yield rnd, name, srv
                finally:
                    self.stop(srv)

    def stop_all(self):
        for srv in list(self.started):
            try:
                self.stop(srv)
            except Exception as e:  # keep stopping the others
                log("stopping %r: %s" % (srv, e))

    # -- load
    def bench(self, srv, args, timeout_extra=30, record=None, counters=False):
        """One measured `stoa bench` run against srv (see _bench_once),
        recorded with `record`'s keys. A run during which other work on
        the machine took more than --max-foreign cores is taken again
        (--retries times at most, after waiting for a quiet machine), and
        the run with the least of it kept: on 2 cores another process's
        build moves a run's throughput by several times."""
        best = None
        for attempt in range(1 + (self.args.retries if record else 0)):
            if attempt:
                # A re-run may not take the time the figures still to
                # come need.
                if self.left() - self.reserve < 30:
                    log("no time to take it again")
                    break
                self.wait_quiet()
                self.settle(srv)
            fig = self._bench_once(srv, args, timeout_extra, counters)
            if fig is None:
                continue
            fig["attempts"] = attempt + 1
            if best is None or fig["foreign_cores"] < best["foreign_cores"]:
                best = fig
            if fig["foreign_cores"] <= self.args.max_foreign:
                break
            log("other work took %.2f cores during the run; taking it again"
                % fig["foreign_cores"])
        if best is not None and record:
            best.update(record)
            self.results.append(best)
        return best

    def wait_quiet(self, bound_s=30.0):
        """Waits until the machine's other work takes under --max-foreign
        cores over half a second: at most bound_s each time, and
        --quiet-budget seconds over the whole run."""
        t0 = time.monotonic()
        bound_s = min(bound_s, self.quiet_budget)
        while time.monotonic() - t0 < bound_s:
            a = machine_busy_ticks()
            time.sleep(0.5)
            b = machine_busy_ticks()
            if a is None or b is None or (b - a) / HZ / 0.5 <= self.args.max_foreign:
                break
        self.quiet_budget -= time.monotonic() - t0
        self.quiet_waited += time.monotonic() - t0

    def _bench_once(self, srv, args, timeout_extra, counters=False):
        """One `stoa bench` run against srv: its JSON result (first
        result), with the server's CPU per op split by thread and the
        cores other work on the machine took meanwhile (all busy CPU less
        the server's and the load generator's); None when the run failed
        (said in the log). With `counters`, also each thread group's CPU
        seconds and the growth of `MNTR_COUNTERS` over the same window
        (warm-up included, as the threads' CPU is)."""
        out = os.path.join(self.work, "bench.json")
        if os.path.exists(out):
            os.remove(out)
        dur = float(args[args.index("--duration") + 1]) if "--duration" in args else 5
        warm = float(args[args.index("--warmup") + 1]) if "--warmup" in args else 1
        argv = [self.bin, "bench", "--servers", srv.hosts, "--server-pid", str(srv.pid),
                "--json", out, "--quiet"] + [str(a) for a in args]
        m0 = mntr(srv) if counters else None
        before = thread_ticks(srv.pid)
        busy0, srv0, kids0, t0 = (machine_busy_ticks(), proc_ticks(srv.pid), children_cpu_s(),
                                  time.monotonic())
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=dur + warm + timeout_extra,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            log("bench timed out: %s" % " ".join(argv))
            return None
        after = thread_ticks(srv.pid)
        m1 = mntr(srv) if counters else None
        busy1, srv1, kids1, t1 = (machine_busy_ticks(), proc_ticks(srv.pid), children_cpu_s(),
                                  time.monotonic())
        foreign = None
        if None not in (busy0, busy1, srv0, srv1):
            foreign = max(0.0, ((busy1 - busy0) - (srv1 - srv0)) / HZ - (kids1 - kids0)) / (t1 - t0)
        if p.returncode != 0 or not os.path.exists(out):
            log("bench failed (%s): %s\n%s" % (p.returncode, " ".join(argv), p.stdout[-2000:]))
            return None
        with open(out) as f:
            r = json.load(f)["results"][0]
        fig = {
            "throughput": r["throughput_ops_s"],
            "ops": r["ops"],
            "errors": r["error_count"],
            "p50_ms": r["latency_us"]["p50"] / 1000.0,
            "p99_ms": r["latency_us"]["p99"] / 1000.0,
            "cpu_us_per_op": r.get("server_cpu_us_per_op"),
            "client_cpu_us_per_op": r.get("client_cpu_us_per_op"),
            "args": [str(a) for a in args],
            "foreign_cores": foreign if foreign is not None else 0.0,
        }
        split = thread_split(before, after)
        if counters:
            fig["thread_s"] = {k: v / HZ for k, v in split.items()}
            fig["counters"] = {k: m1.get(k, 0) - m0.get(k, 0) for k in MNTR_COUNTERS
                               if isinstance(m1.get(k, 0), float)}
            fig["fsync_avg_ms"] = m1.get("stoa_wal_fsync_avg_ms")
        total = sum(split.values())
        if total > 0 and fig["cpu_us_per_op"]:
            fig["threads_us_per_op"] = {k: fig["cpu_us_per_op"] * v / total
                                       for k, v in split.items()}
        return fig

    def settle(self, srv, bound_s=3.0):
        """Waits (bound_s at most) until the server uses under a tenth of a
        core, so a run does not pay for the one before (a snapshot, the
        WAL's tail)."""
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            a = proc_ticks(srv.pid)
            time.sleep(0.2)
            b = proc_ticks(srv.pid)
            if a is None or b is None or (b - a) / HZ < 0.02:
                return


# ------------------------------------------------------------ /proc

HZ = os.sysconf("SC_CLK_TCK")
# What the WAL figure counts: writes applied, groups synced (by the WAL
# thread, or inline by the engine's: `WalWriter::write_now`).
MNTR_COUNTERS = ("stoa_txns_applied", "stoa_wal_fsyncs", "stoa_wal_fsyncs_inline",
                 "stoa_reads_fast", "stoa_reads_off_cut")


def machine_busy_ticks():
    """Ticks the machine's CPUs spent busy (user, nice, system, irq,
    softirq, steal: all but idle and iowait), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(fields[:3]) + sum(fields[5:8])


def children_cpu_s():
    """User + system seconds of this process's waited-for children (the
    load generators)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime

def proc_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def thread_ticks(pid):
    """{tid: (name, user + system ticks)} of the process's threads."""
    out = {}
    base = "/proc/%d/task" % pid
    try:
        tids = os.listdir(base)
    except OSError:
        return out
    for tid in tids:
        try:
            with open(os.path.join(base, tid, "comm")) as f:
                name = f.read().strip()
            with open(os.path.join(base, tid, "stat")) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[tid] = (name, int(fields[11]) + int(fields[12]))
        except (OSError, IndexError, ValueError):
            continue
    return out


def thread_group(name):
    """Stoa's threads: the engine's (the main thread, named as the
    binary), the WAL writer, the partition workers and owned partitions'
    threads, the rest (snapshot writer, I/O threads; for ZooKeeper, every
    thread is "other")."""
    if name == "stoa":
        return "engine"
    if name == "stoa-wal":
        return "wal"
    if name.startswith("stoa-part") or name.startswith("stoa-own"):
        return "workers"
    return "other"


def thread_split(before, after):
    split = {"engine": 0, "wal": 0, "workers": 0, "other": 0}
    for tid, (name, ticks) in after.items():
        prev = before.get(tid, (name, 0))[1]
        split[thread_group(name)] += max(0, ticks - prev)
    return split


def four_letter(srv, cmd):
    try:
        return servers.four_letter("127.0.0.1", srv.port, cmd, timeout=2.0)
    except OSError:
        return ""


def mntr(srv):
    out = {}
    for line in four_letter(srv, "mntr").splitlines():
        parts = line.split("\t")
        if len(parts) == 2:
            try:
                out[parts[0]] = float(parts[1])
            except ValueError:
                out[parts[0]] = parts[1]
    return out


def rotated(items, k):
    items = list(items)
    if not items:
        return items
    k %= len(items)
    return items[k:] + items[:k]


def zookeeper_jars(args):
    """(ZooKeeperJars, where) of ZooKeeper 3.9.5 from --zookeeper-jars or
    bench/compare's cache (target/anchors/, filled by scripts/bench-compare);
    (None, why) when they are not there. Nothing is downloaded."""
    if args.no_zookeeper:
        return None, "left out (--no-zookeeper)"
    sys.path.insert(0, ROOT)
    try:
        from bench.compare.anchors import CACHE
        from bench.compare.anchors.maven import ZOOKEEPER_ARTIFACTS, ZOOKEEPER_VERSION
    except ImportError as e:
        return None, "bench/compare not importable: %s" % e
    d = args.zookeeper_jars or os.path.join(CACHE, "zookeeper-" + ZOOKEEPER_VERSION)
    jars = [os.path.join(d, "%s-%s.jar" % (a, v)) for _, a, v in ZOOKEEPER_ARTIFACTS]
    missing = [j for j in jars if not os.path.exists(j)]
    if missing:
        return None, ("not cached in %s (scripts/bench-compare fetches them; or "
                      "--zookeeper-jars DIR)" % d)
    if not shutil.which("java"):
        return None, "no java"
    return servers.ZooKeeperJars(jars, "logback"), d


# ------------------------------------------------------------ the figures

def closed_args(args, op, payload, sessions=8, outstanding=16, roots="/g0,/g1"):
    return ["--root", roots, "--sessions", sessions, "--outstanding", outstanding,
            "--mix", "%s=100" % op, "--payload", payload, "--keys", 1000,
            "--duration", args.duration, "--warmup", args.warmup]


def fig_throughput(run):
    """Figs. 6/7: every configuration in every round (rotated), each
    running its cells (op x payload) on one server."""
    a = run.args
    configs = list(CONFIGS)
    if a.quick:
        configs = ["P=1", "P=2"]
    jars, where = zookeeper_jars(a)
    run.zookeeper = where
    if jars is not None and not a.quick:
        configs.append(ZK)
    elif jars is None:
        run.notes.append("ZooKeeper 3.9.5: %s." % where)
    cells = [(op, p) for op in OPS for p in a.payloads]
    def start(name):
        return run.start_zk(jars) if name == ZK else run.start_stoa(name, CONFIGS[name])

    for rnd, name, srv in run.each_server("throughput", a.rounds, configs, need=15, start=start):
        if name == ZK:
            # The JIT's warm-up, not measured (bench/compare gives 10 s).
            run.bench(srv, ["--root", "/g0,/g1", "--sessions", 8, "--outstanding", 16,
                            "--read-ratio", 50, "--keys", 1000,
                            "--duration", a.zk_warmup, "--warmup", 0])
        mine = cells if name not in (T1, O1) else [(op, p) for op, p in cells if p == 100]
        for op, payload in (mine if rnd % 2 == 0 else mine[::-1]):
            run.check_time("throughput %s %s %d" % (name, op, payload))
            run.settle(srv)
            f = run.bench(srv, closed_args(a, op, payload),
                          record={"figure": "throughput", "config": name, "op": op,
                                  "payload": payload, "round": rnd})
            if f:
                log("round %d %-26s %s %4d B: %9.0f ops/s  %.2f us/op" % (
                    rnd, name, op, payload, f["throughput"], f["cpu_us_per_op"] or 0))


def peak_of(run, config, op, payload=100):
    xs = [r["throughput"] for r in run.results if r["figure"] == "throughput"
          and r["config"] == config and r["op"] == op and r["payload"] == payload]
    return statistics.median(xs) if xs else None


def fig_latency(run):
    """Fig. 8: open loop at fractions of P=1's closed-loop peak (100 B,
    8x16) from the throughput figure, or from a short run first."""
    a = run.args
    peaks = {op: peak_of(run, "P=1", op) for op in OPS}
    configs = ["P=1", "P=2"]
    for rnd, name, srv in run.each_server("latency", a.latency_rounds, configs):
        for op in OPS:
            if not peaks[op]:
                f = run.bench(srv, closed_args(a, op, 100))
                peaks[op] = f and f["throughput"]
                if not peaks[op]:
                    continue
            fracs = a.fractions if rnd % 2 == 0 else a.fractions[::-1]
            for frac in fracs:
                run.check_time("latency %s %s %.2f" % (name, op, frac))
                run.settle(srv)
                rate = int(peaks[op] * frac)
                f = run.bench(srv, closed_args(a, op, 100) + ["--rate", rate],
                              record={"figure": "latency", "config": name, "op": op,
                                      "payload": 100, "fraction": frac,
                                      "offered": rate, "round": rnd})
                if f:
                    log("round %d %s %s at %.0f%% (%d/s): %.0f ops/s p50 %.2f p99 %.2f ms"
                        % (rnd, name, op, 100 * frac, rate, f["throughput"],
                           f["p50_ms"], f["p99_ms"]))
    run.latency_peaks = peaks


SWITCH_WAYS = (("none", ["--root", "/g1"]),
               ("burst10", ["--root", "/g0,/g1", "--burst", 10]),
               ("burst1", ["--root", "/g0,/g1", "--burst", 1]))


def fig_switching(run):
    """Figs. 9: 32 sessions x 1 in flight, 8 B values (the paper's), each
    way in every round (rotated), at P=2 and at P=1 (the control)."""
    a = run.args
    configs = ["P=2", "P=1"]
    for rnd, name, srv in run.each_server("switching", a.rounds, configs):
        for op in OPS:
            for way, flags in rotated(SWITCH_WAYS, rnd):
                run.check_time("switching %s %s %s" % (name, op, way))
                run.settle(srv)
                f = run.bench(srv, flags + [
                    "--sessions", a.switch_sessions, "--outstanding", 1,
                    "--mix", "%s=100" % op, "--payload", 8, "--keys", 1000,
                    "--duration", a.duration, "--warmup", a.warmup],
                    record={"figure": "switching", "config": name, "op": op,
                            "way": way, "payload": 8, "round": rnd})
                if f:
                    log("round %d %s %s %-7s %9.0f ops/s  %.2f us/op" % (
                        rnd, name, op, way, f["throughput"], f["cpu_us_per_op"] or 0))


def placement(run, srv):
    """{group root: partition} from /zookeeper/partitions (stoa shell)."""
    try:
        p = subprocess.run([run.bin, "shell", "-server", srv.hosts, "get",
                            "/zookeeper/partitions"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=10,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {}
    out = {}
    for line in p.stdout.splitlines():
        if line.startswith("group="):
            part, root = line[len("group="):].split(None, 1)
            out[root.strip()] = int(part)
    return out


def fig_rebalance(run):
    """Fig. 10: P=3, window 1 s; balanced load, then a skew; each round a
    fresh server."""
    a = run.args
    parts, groups = 3, ["/g1", "/g2", "/g3", "/g4"]
    cfg = stoa_cfg(parts, groups, balance_ms=a.window_ms)
    for rnd in range(a.rebalance_rounds):
        run.check_time("rebalance round %d" % rnd, need=a.balanced_s + a.skew_s + 16)
        srv = run.start_stoa("P=3, window %d ms" % a.window_ms, cfg)
        gens = []
        try:
            before = placement(run, srv)
            gen_args = ["--sessions", 4, "--outstanding", 16, "--mix", "set=100",
                        "--payload", 8, "--keys", 100, "--warmup", 0]

            def gen(root, seconds):
                argv = [run.bin, "bench", "--servers", srv.hosts, "--root", root,
                        "--duration", seconds, "--quiet"] + gen_args
                p = subprocess.Popen([str(x) for x in argv], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
                gens.append(p)
                return p

            samples = []
            t0 = time.monotonic()
            # The skew falls at another phase of the balancer's window each
            # round (a fraction rnd/rounds of it later), so the rounds show
            # the spread of the time to a move, not one point of it.
            balanced = a.balanced_s + a.window_ms / 1000.0 * rnd / a.rebalance_rounds
            first = gen("/g1", balanced + a.skew_s)
            gen("/g2", balanced)
            skew_at = None
            end = t0 + balanced + a.skew_s + 10  # bound: the generators' setup
            while time.monotonic() < end:
                now = time.monotonic() - t0
                if skew_at is None and now >= balanced:
                    gen("/g3", a.skew_s)
                    skew_at = time.monotonic() - t0
                m = mntr(srv)
                if m:
                    samples.append({
                        "t": time.monotonic() - t0,
                        "applied": [m.get("stoa_partition_%d_applied_index" % k, 0)
                                    for k in range(parts)],
                        "txns": m.get("stoa_txns_applied", 0),
                        "moves": m.get("stoa_group_moves", 0)})
                if skew_at is not None and first.poll() is not None:
                    break
                time.sleep(0.1)
            for p in gens:
                try:
                    p.wait(timeout=max(1, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            after = placement(run, srv)
            decided = [ln.split('msg="', 1)[-1].rstrip('"') for ln in srv.log_tail(400).splitlines()
                       if "load balancer" in ln]
            res = rebalance_figures(samples, skew_at, parts)
            res.update({"figure": "rebalance", "round": rnd, "window_ms": a.window_ms,
                        "skew_at": skew_at,
                        "placement_before": before, "placement_after": after,
                        "decisions": decided[:4], "samples": samples})
            run.results.append(res)
            log("round %d: skew at %.2f s, first move %s s after it; %s moves; %s -> %s" % (
                rnd, skew_at or -1, "%.2f" % res["move_s"] if res["move_s"] is not None
                else "none", res["moves"], before, after))
        finally:
            for p in gens:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            run.stop(srv)


def rebalance_figures(samples, skew_at, parts):
    """Time from the skew to the first move, moves before it, and the
    writes/s (all partitions) while balanced, skewed before the move, and
    after it."""
    res = {"move_s": None, "moves": 0, "moved_before_skew": False}
    if not samples or skew_at is None:
        return res
    res["moves"] = int(samples[-1]["moves"])
    first = next((s for s in samples if s["moves"] > 0), None)
    if first is not None:
        if first["t"] < skew_at:
            res["moved_before_skew"] = True
        res["move_t"] = first["t"]
        res["move_s"] = first["t"] - skew_at

    def rate(t_from, t_to):
        pts = [s for s in samples if t_from <= s["t"] <= t_to]
        if len(pts) < 2 or pts[-1]["t"] - pts[0]["t"] < 0.3:
            return None
        return (pts[-1]["txns"] - pts[0]["txns"]) / (pts[-1]["t"] - pts[0]["t"])

    end = samples[-1]["t"]
    res["balanced_ops_s"] = rate(0.5, skew_at)
    if first is not None and first["t"] > skew_at:
        res["skewed_ops_s"] = rate(skew_at + 0.2, first["t"])
        res["after_ops_s"] = rate(first["t"] + 0.2, end - 0.3)
    else:
        res["skewed_ops_s"] = rate(skew_at + 0.2, end - 0.3)
        res["after_ops_s"] = None
    return res


# The WAL figure's loads (sessions, in flight each), lightest first.
WAL_LOADS = ((2, 8), (4, 16), (8, 16), (16, 32), (32, 32))


def fig_wal(run):
    """The WAL thread's CPU per write as the load (and with it the group
    commit's groups) grows: P=1, setData of 100 B, each load of
    `WAL_LOADS` on one server per round, in alternating order."""
    a = run.args
    loads = WAL_LOADS if not a.quick else (WAL_LOADS[1], WAL_LOADS[3])
    for rnd, name, srv in run.each_server("wal", a.wal_rounds, ["P=1"], need=15):
        for sessions, outstanding in (loads if rnd % 2 == 0 else loads[::-1]):
            run.check_time("wal %dx%d" % (sessions, outstanding))
            run.settle(srv)
            f = run.bench(srv, closed_args(a, "set", 100, sessions, outstanding, roots="/g0"),
                          record={"figure": "wal", "config": name, "round": rnd,
                                  "load": "%dx%d" % (sessions, outstanding),
                                  "in_flight": sessions * outstanding},
                          counters=True)
            if f:
                c = f["counters"]
                groups = c.get("stoa_wal_fsyncs", 0) - c.get("stoa_wal_fsyncs_inline", 0)
                log("round %d wal %dx%d: %9.0f ops/s, %.1f writes per group, WAL thread "
                    "%.2f s" % (rnd, sessions, outstanding, f["throughput"],
                                c.get("stoa_txns_applied", 0) / max(1, groups),
                                f["thread_s"]["wal"]))


FAST_WAYS = (("plain", []), ("fast", ["--fast", "reads,watches"]))


def fig_fast(run):
    """Fast reads and watches: plain and opted-in sessions (rotated) on
    one owned P=2 server a round, a read-write mix switching partitions
    every call, so that reads find the partitions apart."""
    a = run.args
    for rnd, name, srv in run.each_server("fast", a.rounds, [O1]):
        for way, flags in rotated(FAST_WAYS, rnd):
            run.check_time("fast %s" % way)
            run.settle(srv)
            f = run.bench(srv, flags + [
                "--root", "/g0,/g1", "--burst", 1, "--sessions", 8, "--outstanding", 16,
                "--read-ratio", 50, "--payload", 100, "--keys", 1000,
                "--duration", a.duration, "--warmup", a.warmup],
                record={"figure": "fast", "config": name, "way": way, "round": rnd},
                counters=True)
            if f:
                log("round %d fast %-5s %9.0f ops/s  %.2f us/op  %d reads fast" % (
                    rnd, way, f["throughput"], f["cpu_us_per_op"] or 0,
                    f["counters"].get("stoa_reads_fast", 0)))


FIGURES = {"throughput": fig_throughput, "latency": fig_latency,
           "switching": fig_switching, "rebalance": fig_rebalance, "fast": fig_fast,
           "wal": fig_wal}


def need_s(a, figure):
    """About how long a figure's grid takes when nothing is run again."""
    run = a.duration + a.warmup + 0.5
    return {"throughput": a.rounds * (len(a.payloads) * 4 + 2) * run + a.rounds * 20,
            "latency": a.latency_rounds * 2 * 2 * len(a.fractions) * run,
            "switching": a.rounds * 2 * 2 * len(SWITCH_WAYS) * run,
            "fast": a.rounds * (len(FAST_WAYS) * run + 5),
            "rebalance": a.rebalance_rounds * (a.balanced_s + a.window_ms / 1000.0
                                               + a.skew_s + 4),
            "wal": a.wal_rounds * len(WAL_LOADS) * run + a.wal_rounds * 5}[figure]


def server_sources(commit):
    """The last commit at or before `commit` that changed the server's
    sources (what the binary was built from, when built there)."""
    try:
        return subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h", commit, "--",
                               "crates", "src", "Cargo.toml", "Cargo.lock"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def context(run):
    def git(*a):
        try:
            return subprocess.run(["git", "-C", ROOT] + list(a), stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": "%s, %d cores (%s), Linux %s" % (platform.machine(), os.cpu_count() or 0,
                                                    cpu, platform.release()),
        "cores": os.cpu_count(),
        "commit": git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)"
                                                         if dirty else ""),
        "server_sources": server_sources(git("rev-parse", "--short", "HEAD")),
        "stoa_bin": run.bin,
        "load_before": "%.2f" % os.getloadavg()[0],
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
    }


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="one round, short runs, a trimmed grid: the smoke test's (under a minute)")
    ap.add_argument("--out", help="write agora.json, agora_*.png and agora.md into DIR")
    ap.add_argument("--render", metavar="DIR",
                    help="run nothing: write the outputs again from DIR/agora.json")
    ap.add_argument("--figures", default=",".join(FIGURES),
                    help="comma-separated, of %s" % ", ".join(FIGURES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-rounds", type=int, default=2)
    ap.add_argument("--rebalance-rounds", type=int, default=3)
    ap.add_argument("--wal-rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=2.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--payloads", default="8,100,1024")
    ap.add_argument("--fractions", default="0.25,0.5,0.75,0.9",
                    help="Fig. 8's offered loads, fractions of P=1's closed-loop peak")
    ap.add_argument("--switch-sessions", type=int, default=32)
    ap.add_argument("--window-ms", type=int, default=1000, help="the balancer's window")
    ap.add_argument("--balanced-s", type=float, default=3.0)
    ap.add_argument("--skew-s", type=float, default=6.0)
    ap.add_argument("--zk-warmup", type=float, default=6.0)
    ap.add_argument("--no-zookeeper", action="store_true")
    ap.add_argument("--zookeeper-jars", help="a directory of ZooKeeper 3.9.5's jars "
                    "(default: bench/compare's cache, target/anchors/zookeeper-3.9.5)")
    ap.add_argument("--max-foreign", type=float, default=0.35,
                    help="cores other work may take during a run before it is taken again")
    ap.add_argument("--retries", type=int, default=2,
                    help="re-runs of a run that other work disturbed (the least disturbed "
                    "one is kept)")
    ap.add_argument("--quiet-budget", type=float, default=180,
                    help="seconds, over the whole run, to wait for a quiet machine")
    ap.add_argument("--max-seconds", type=float, default=720,
                    help="no run starts after this (the figures so far are reported)")
    a = ap.parse_args(argv)
    a.payloads = [int(x) for x in a.payloads.split(",")]
    a.fractions = [float(x) for x in a.fractions.split(",")]
    a.figures = [f.strip() for f in a.figures.split(",") if f.strip()]
    for f in a.figures:
        if f not in FIGURES:
            ap.error("unknown figure %r" % f)
    if a.quick:
        a.rounds = a.latency_rounds = a.rebalance_rounds = a.wal_rounds = 1
        a.duration, a.warmup = 0.6, 0.2
        a.payloads = [8, 100]
        a.fractions = [0.5]
        a.switch_sessions = 16
        a.balanced_s, a.skew_s = 1.5, 3.5
        a.max_seconds = min(a.max_seconds, 100)
        a.retries, a.quiet_budget = 0, 0
    return a


def write_outputs(ctx, notes, results, peaks, out):
    """The figures, the model and the targets from a run's results; with
    `out`, agora.json, agora.md and the plots written there. The
    markdown."""
    summary = report.summarize(results, peaks)
    model_inp = report.model_inputs(summary)
    pr = model.predict(model_inp.get("write"), model_inp.get("read"))
    model.self_check()
    doc = {"version": 1, "context": ctx, "notes": notes, "results": results,
           "summary": summary, "model_inputs": model_inp, "model": pr,
           "device_sweep": model.DEVICE_SWEEP}
    doc["targets"] = report.targets(doc, ROOT)
    text = report.markdown(doc, plots=[])
    if out:
        os.makedirs(out, exist_ok=True)
        plots = report.plots(doc, out)
        text = report.markdown(doc, plots=plots)
        with open(os.path.join(out, "agora.json"), "w") as f:
            json.dump(report.jsonable(doc), f, indent=1, sort_keys=True)
            f.write("\n")
        with open(os.path.join(out, "agora.md"), "w") as f:
            f.write(text)
        log("wrote %s/agora.json, agora.md and %d plots" % (out, len(plots)))
    return text


def render(a):
    """--render DIR: the outputs again from DIR/agora.json's results (after
    a change to how they are presented), into --out or DIR."""
    with open(os.path.join(a.render, "agora.json")) as f:
        doc = json.load(f)
    if "server_sources" not in doc["context"]:  # a run from before it was recorded
        doc["context"]["server_sources"] = server_sources(doc["context"]["commit"].split()[0])
    print(write_outputs(doc["context"], doc["notes"], doc["results"],
                        doc["summary"].get("latency_peaks") or {}, a.out or a.render))
    return 0


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.render:
        return render(a)
    run = Run(a)
    run.zookeeper = None
    run.latency_peaks = {}

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)
    ctx = context(run)
    log("%s; %s; figures %s" % (ctx["machine"], ctx["commit"], ",".join(a.figures)))
    try:
        for i, name in enumerate(a.figures):
            run.reserve = sum(need_s(a, f) for f in a.figures[i + 1:])
            try:
                FIGURES[name](run)
            except OutOfTime as e:
                log("out of time (--max-seconds %.0f) at %s" % (a.max_seconds, e))
                run.notes.append("Stopped at --max-seconds (%.0f): %s and what follows "
                                 "were not run." % (a.max_seconds, e))
                break
    finally:
        run.stop_all()
        shutil.rmtree(run.work, ignore_errors=True)
    ctx["load_after"] = "%.2f" % os.getloadavg()[0]
    ctx["seconds"] = round(time.monotonic() - run.t0)
    ctx["zookeeper"] = run.zookeeper
    ctx["quiet_waited_s"] = round(run.quiet_waited, 1)
    ctx["options"] = {k: v for k, v in vars(a).items()}
    text = write_outputs(ctx, run.notes, run.results, run.latency_peaks, a.out)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
