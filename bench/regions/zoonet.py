#!/usr/bin/env python3
"""Composition across regions: ZooNet's Figures 4-8 on one machine.

Lev-Ari et al., "Modular Composition of Coordination Services" (USENIX ATC
2016), section 5, with real `stoa server` processes in network namespaces
(tests/e2e/regions.py: two regions, a WAN round trip apart, made by netem
or wanlink.py) and real clients (kazoo, stoa_compose.ComposedClient) in
worker processes of their own. Four figures:

  modes     (Figs. 5/6) composed ensembles, one per region, each with an
            observer in the other region. Region-B clients mix reads and
            writes over their local mount /b (B's participants) and the
            remote mount /a (A's observer in region B) in bursts; modes:
            composed (Algorithm 1), never-sync (Algorithm 1 without its
            syncs: not sequentially consistent), sync-all (a sync before
            every read), local-only (every op on /b).
  overhead  a client that stays on one mount: plain KazooClient vs
            ComposedClient on the same ensemble, same load, alternating.
  remote    (Figs. 7b/8b) region-B clients writing: (a) composed, to their
            own region's ensemble; (b) one ensemble spanning the regions (2
            participants in A with the leader, 1 in B); (c) one ensemble in
            A with an observer in B.
  observer  (Fig. 4) one observer's throughput vs read ratio: Stoa (per-
            session isolation), and with --observer-zookeeper the same
            deployment of Apache ZooKeeper 3.9.5 (with ZooNet's isolation,
            ZOOKEEPER-2024, since 3.6) and 3.5.10 (without: every session's
            reads wait behind any write in flight), jars from Maven Central.

The overhead, remote and observer figures run with each of --drivers: `kazoo` (the
Python clients above, one worker process per client) and `rust` (`stoa
bench`, one process per cell with one session per client: the Rust client,
and its ComposedClient with --mounts). The same driver makes both sides
of every ratio; the Rust one takes a fraction of the CPU per call, so on a
small machine the composed side is not bounded by its clients.

    sudo .venv/bin/python bench/regions/zoonet.py            # about 7 min here
    sudo .venv/bin/python bench/regions/zoonet.py --quick    # a smoke run

Prints every figure as a table (low / middle / high of the rounds, which
alternate between the variants compared) and, with --out DIR, writes
zoonet_*.png plots and zoonet.json there. Root only (namespaces). Bounded:
every cell runs a fixed time and op count, the whole run stops at
--max-seconds, and every server, relay and worker it started is stopped by
PID, its namespaces and links deleted, however it ends (Ctrl-C included).
"""

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(1, ROOT)  # bench.compare.anchors: the ZooKeepers of the observer figure

MODES = ["composed", "never-sync", "sync-all", "local-only"]
DRIVER_NAMES = {"kazoo": "kazoo", "rust": "Rust (stoa bench)"}
DRIVERS = list(DRIVER_NAMES)
LOCAL, REMOTE = "/b", "/a"

# ---------------------------------------------------------------- the worker
#
# `zoonet.py worker` reads one JSON command a line on stdin and answers one
# JSON line on stdout. It exits when stdin closes (its parent is gone).


def _no_sync_client_class():
    from stoa_compose import ComposedClient
    from stoa_compose.sequencer import READ, Sequencer

    class NoSyncSequencer(Sequencer):
        """Algorithm 1 without its syncs (lines 15-17): requests to a new
        target are still held until the old target answered (FIFO order),
        but a read after a switch goes out alone. Never-sync, the paper's
        inconsistent baseline."""

        def _dispatch(self, request):
            if request.target != self._current:
                self._current = request.target
                self.stats["switches"] += 1
            self._outstanding += 1
            self.stats["requests"] += 1
            self.stats["reads" if request.kind == READ else "updates"] += 1
            request.send(self._complete)

    class NeverSyncClient(ComposedClient):
        def __init__(self, mounts, **kw):
            super().__init__(mounts, **kw)
            self._sequencer = NoSyncSequencer(self._inject_sync, self.stats)

    return NeverSyncClient


def _connect(spec):
    import logging
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    from kazoo.client import KazooClient
    from stoa_compose import ComposedClient
    if spec["kind"] == "plain":
        c = KazooClient(hosts=spec["hosts"], timeout=10)
    elif spec["kind"] == "composed":
        c = ComposedClient(spec["mounts"], timeout=10)
    elif spec["kind"] == "never-sync":
        c = _no_sync_client_class()(spec["mounts"], timeout=10)
    else:
        raise ValueError(spec["kind"])
    c.start(timeout=20)
    return c


def op_stream(seed, burst, locality, read_ratio, keys):
    """(mount, is_read, path) forever: `burst` consecutive ops on one mount,
    the mount of each burst local with probability `locality`."""
    rng = random.Random(seed)
    while True:
        mount = LOCAL if rng.random() < locality else REMOTE
        for _ in range(burst):
            yield mount, rng.random() < read_ratio, "%s/k%d" % (mount, rng.randrange(keys))


def run_load(client, spec):
    """Keeps spec["window"] ops in flight on `client` for warmup + seconds
    (at most max_ops issued); counts the ops answered in the measured
    window. sync_all: a sync on the read's path goes just before every read
    (pipelined: the pair takes one slot)."""
    window, seconds, warmup = spec["window"], spec["seconds"], spec["warmup"]
    data = b"w" * spec["size"]
    slots = threading.Semaphore(window)
    lock = threading.Lock()
    n = {"ops": 0, "reads": 0, "writes": 0, "errors": 0, "issued": 0}
    errors = []
    stats0 = dict(getattr(client, "stats", {}))
    t0 = time.monotonic()
    measure_from, end = t0 + warmup, t0 + warmup + seconds

    def finished(is_read):
        def cb(result):
            now = time.monotonic()
            with lock:
                if not result.successful():
                    n["errors"] += 1
                    if len(errors) < 3:
                        errors.append(repr(result.exception))
                elif measure_from <= now < end:
                    n["ops"] += 1
                    n["reads" if is_read else "writes"] += 1
            slots.release()
        return cb

    stream = op_stream(spec["seed"], spec["burst"], spec["locality"], spec["read_ratio"],
                       spec["keys"])
    while n["issued"] < spec["max_ops"]:
        left = end - time.monotonic()
        if left <= 0 or not slots.acquire(timeout=left):
            break
        mount, is_read, path = next(stream)
        n["issued"] += 1
        if is_read:
            if spec["sync_all"]:
                client.sync_async(path)
            r = client.get_async(path)
        else:
            r = client.set_async(path, data)
        r.rawlink(finished(is_read))
    drained = all(slots.acquire(timeout=max(5.0, 60.0 - (time.monotonic() - end)))
                  for _ in range(window))
    stats = getattr(client, "stats", {})
    out = dict(n, throughput=n["ops"] / seconds, drained=drained, error_samples=errors,
               stopped_early=n["issued"] >= spec["max_ops"] and time.monotonic() < end,
               syncs=stats.get("syncs_injected", 0) - stats0.get("syncs_injected", 0),
               switches=stats.get("switches", 0) - stats0.get("switches", 0),
               held=stats.get("requests_held", 0) - stats0.get("requests_held", 0))
    return out


def worker_main():
    clients = {}
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write on the answer channel
    for line in sys.stdin:
        msg = json.loads(line)
        try:
            if msg["cmd"] == "connect":
                clients[msg["name"]] = _connect(msg)
                answer = {"ok": True}
            elif msg["cmd"] == "run":
                start_at = msg.get("start_at")
                if start_at:  # every worker of a cell starts together
                    time.sleep(max(0.0, start_at - time.time()))
                answer = dict(run_load(clients[msg["name"]], msg), ok=True)
            elif msg["cmd"] == "quit":
                break
            else:
                answer = {"ok": False, "error": "unknown command %r" % msg["cmd"]}
        except Exception as e:  # reported to the parent, which stops
            answer = {"ok": False, "error": repr(e)}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    for c in clients.values():
        try:
            c.stop()
            c.close()
        except Exception:
            pass


class Worker:
    """One `zoonet.py worker` process, stopped by PID."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        self.lock = threading.Lock()

    def send(self, msg):
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def receive(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("worker %d exited (%s)" % (self.proc.pid, self.proc.poll()))
        answer = json.loads(line)
        if not answer.pop("ok"):
            raise RuntimeError("worker %d: %s" % (self.proc.pid, answer.get("error")))
        return answer

    def call(self, msg):
        self.send(msg)
        return self.receive()

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.send({"cmd": "quit"})
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except Exception:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except Exception:
                pass


# ------------------------------------------------------------- deployments


def composed_deployment(request, rtt_ms, jitter_ms):
    """Two 3-participant ensembles, A in region 0 and B in region 1, each
    with an observer in the other region. Members (0-based) 0-2: A's
    participants, 3: B's observer (region 0); 4-6: B's participants, 7: A's
    observer (region 1). Server ids are member index + 1 in both."""
    import harness as h
    import netns
    import regions
    topo = regions.Regions([4, 4], rtt_ms, jitter_ms)
    request.addfinalizer(topo.destroy)
    topo.setup()

    def line(i, observer=False):
        return "%s:%d:%d%s" % (topo.quorum_ip(i), netns.QUORUM_PORT, netns.ELECTION_PORT,
                               ":observer" if observer else "")
    ens = {"A": ([0, 1, 2], 7), "B": ([4, 5, 6], 3)}
    servers = [None] * 8
    request.addfinalizer(lambda: [s.cleanup() for s in servers if s])
    for name, (parts, obs) in ens.items():
        cfg = {"server.%d" % (i + 1): line(i) for i in parts}
        cfg["server.%d" % (obs + 1)] = line(obs, observer=True)
        for i in parts:
            servers[i] = netns.NsServer(topo, i, tick_time=200, extra_cfg=cfg)
        servers[obs] = netns.NsServer(topo, obs, tick_time=200,
                                      extra_cfg=dict(cfg, peerType="observer"))
    _start_all(servers)
    for name, (parts, obs) in ens.items():
        members = [servers[i] for i in parts]
        h.wait_until(lambda: netns.leader_of(members) is not None, timeout=60,
                     what="a leader of ensemble %s" % name)
        h.wait_until(lambda: h.srvr_mode(servers[obs]) == "observer", timeout=60,
                     what="ensemble %s's observer" % name)
    return {"topo": topo, "servers": servers,
            "a_participant": servers[0], "b_participants": servers[4:7],
            "a_observer_in_b": servers[7]}


def _start_all(servers):
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
        list(pool.map(lambda s: s.start(timeout=60), servers))


def one_ensemble(request, regions_layout, rtt_ms, jitter_ms, zookeeper=None):
    """regions.start_deployment, with the leader moved into region 0 if the
    election put it elsewhere (restarting that member: the others elect
    one of theirs, it comes back as a follower). Stoa, or the ZooKeeper
    whose jars `zookeeper` (servers.ZooKeeperJars) names."""
    import harness as h
    import regions
    from bench.compare.launch import ZK_HEAP_FLAG
    d = regions.start_deployment(request, regions_layout,
                                 kind="zookeeper" if zookeeper else "stoa",
                                 wan_rtt_ms=rtt_ms, wan_jitter_ms=jitter_ms,
                                 zookeeper=zookeeper, jvm_flags=(ZK_HEAP_FLAG,))
    for _ in range(5):
        leader = d.leader()
        if leader in d.in_region(0):
            return d
        leader.stop()
        h.wait_until(lambda: d.leader() is not None and d.leader() in d.in_region(0),
                     timeout=30, what="a leader in region 0")
        leader.start(timeout=60)
    h.wait_until(lambda: d.leader() in d.in_region(0), timeout=30, what="a leader in region 0")
    return d


def populate(hosts, prefix, keys, size):
    from kazoo.client import KazooClient
    c = KazooClient(hosts=hosts, timeout=10)
    c.start(timeout=20)
    try:
        c.ensure_path(prefix)
        for k in range(keys):
            path = "%s/k%d" % (prefix, k)
            if c.exists(path) is None:
                c.create(path, b"x" * size)
    finally:
        c.stop()
        c.close()


# ------------------------------------------------------------------ the run


class Bench:
    def __init__(self, args, workers, targets):
        self.args, self.workers = args, workers
        # client name -> ("servers" | "mounts", what `stoa bench` is given)
        self.targets = targets
        self.results = []  # every cell of every round
        self.seed = 0
        self.bench_procs = []  # `stoa bench` processes, stopped by PID at the end

    def run_cell(self, figure, variant, client, **spec):
        """All workers run `client` with spec at once; one result row."""
        a = self.args
        self.seed += 1
        msg = dict(cmd="run", name=client, window=a.window, seconds=a.seconds,
                   warmup=a.warmup, max_ops=a.max_ops, size=a.size, keys=a.keys,
                   burst=1, locality=1.0, read_ratio=a.read_ratio, sync_all=False,
                   start_at=time.time() + 0.2)
        msg.update(spec)
        for i, w in enumerate(self.workers):
            w.send(dict(msg, seed=self.seed * 100 + i))
        parts = [w.receive() for w in self.workers]
        row = {"figure": figure, "variant": variant, "client": client,
               "spec": {k: msg[k] for k in ("window", "burst", "locality", "read_ratio",
                                            "sync_all")},
               "throughput": sum(p["throughput"] for p in parts),
               "ops": sum(p["ops"] for p in parts), "errors": sum(p["errors"] for p in parts),
               "syncs": sum(p["syncs"] for p in parts),
               "switches": sum(p["switches"] for p in parts),
               "drained": all(p["drained"] for p in parts),
               "error_samples": [e for p in parts for e in p["error_samples"]][:3],
               "driver": "kazoo"}
        return self._record(figure, variant, row)

    def run_rust_cell(self, figure, variant, client, window, read_ratio, sessions=None):
        """One `stoa bench` process with `sessions` sessions (default one per
        client, --clients) and `window` calls in flight each, on the
        keyspace under /b that it creates (not measured); one result row."""
        import servers
        a = self.args
        sessions = sessions or a.clients
        flag, where = self.targets[client]
        fd, out = tempfile.mkstemp(prefix="zoonet-bench-", suffix=".json")
        os.close(fd)
        cmd = [os.environ["STOA_BIN"], "bench", "--" + flag, where, "--root", LOCAL,
               "--sessions", str(sessions), "--outstanding", str(window),
               "--read-ratio", str(round(read_ratio * 100)), "--payload", str(a.size),
               "--keys", str(a.keys), "--duration", str(a.seconds), "--warmup", str(a.warmup),
               "--label", variant, "--quiet", "--json", out]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        self.bench_procs.append(proc)
        try:
            _, err = proc.communicate(timeout=a.seconds + a.warmup + 120)
            if proc.returncode != 0:
                raise RuntimeError("stoa bench %s: %s" % (variant, err.decode().strip()))
            with open(out) as f:
                res = json.load(f)["results"][0]
        finally:
            servers.terminate(proc)
            self.bench_procs.remove(proc)
            os.unlink(out)
        row = {"figure": figure, "variant": variant, "client": client, "driver": "rust",
               "spec": {"window": window, "burst": 1, "locality": 1.0,
                        "read_ratio": read_ratio, "sync_all": False, "sessions": sessions},
               "throughput": res["throughput_ops_s"], "ops": res["ops"],
               "errors": res["error_count"], "syncs": 0, "switches": 0, "drained": True,
               "error_samples": sorted(res["errors"])[:3]}
        return self._record(figure, variant, row)

    def _record(self, figure, variant, row):
        self.results.append(row)
        if row["errors"] or not row["drained"]:
            print("  ! %s %s: %d errors %s, drained %s" % (figure, variant, row["errors"],
                                                          row["error_samples"], row["drained"]),
                  file=sys.stderr, flush=True)
        if self.args.verbose:
            print("  %-9s %-5s %-40s %9.0f ops/s  syncs %d" % (
                figure, row["driver"], variant, row["throughput"], row["syncs"]), flush=True)
        return row

    def cell(self, driver, figure, variant, client, window, read_ratio, rust_sessions=None):
        """One cell by `driver`; `rust_sessions` replaces the Rust driver's
        one session per client."""
        if driver == "rust":
            return self.run_rust_cell(figure, variant, client, window, read_ratio,
                                      sessions=rust_sessions)
        return self.run_cell(figure, variant, client, window=window, locality=1.0,
                             read_ratio=read_ratio)


def modes_figure(b, rounds, bursts, localities):
    for r in range(rounds):
        cells = []
        for burst in bursts:
            for loc in localities:
                for mode in ("composed", "never-sync", "sync-all"):
                    cells.append((mode, burst, loc))
        cells.append(("local-only", 1, 1.0))
        if r % 2:
            cells.reverse()
        for mode, burst, loc in cells:
            client = "nosync" if mode == "never-sync" else "composed"
            b.run_cell("modes", "%s b=%d loc=%.2f" % (mode, burst, loc), client, burst=burst,
                       locality=loc, sync_all=mode == "sync-all")
            b.results[-1].update(mode=mode, burst=burst, locality=loc)


def overhead_figure(b, rounds, windows, drivers):
    for r in range(rounds):
        for driver in drivers:
            for window in windows:
                order = ["plain-b", "composed"] if r % 2 == 0 else ["composed", "plain-b"]
                for client in order:
                    b.cell(driver, "overhead", "%s w=%d" % (client, window), client, window,
                           b.args.read_ratio)
                    b.results[-1].update(kind=client, window=window)


def remote_figure(b, rounds, windows, drivers):
    deployments = [("composed", "composed"), ("spanning", "plain-span"),
                   ("observer", "plain-obs")]
    for r in range(rounds):
        order = deployments if r % 2 == 0 else list(reversed(deployments))
        for driver in drivers:
            for window in windows:
                for name, client in order:
                    b.cell(driver, "remote", "%s w=%d" % (name, window), client, window, 0.0)
                    b.results[-1].update(deployment=name, window=window)


def observer_figure(b, rounds, read_ratios, systems, drivers):
    """systems: (name, client) of each observer deployment, Stoa's first.
    The kazoo driver: --clients sessions with --window calls in flight
    each; the Rust one: --observer-sessions synchronous sessions, the
    paper's many clients, where isolation shows (a session's read waits
    only for its own writes, or, without isolation, for anyone's)."""
    for r in range(rounds):
        order = read_ratios if r % 2 == 0 else list(reversed(read_ratios))
        for driver in drivers:
            for rr in order:
                for system, client in (systems if r % 2 == 0 else systems[::-1]):
                    window = 1 if driver == "rust" else b.args.window
                    b.cell(driver, "observer", "%s reads=%.2f" % (system, rr), client, window,
                           rr, rust_sessions=b.args.observer_sessions)
                    b.results[-1].update(read_ratio=rr, system=system)


def observer_load(args, driver):
    """The observer figure's load under `driver`, in words."""
    if driver == "rust":
        return "%d synchronous sessions" % args.observer_sessions
    return "%d sessions with %d calls in flight each" % (args.clients, args.window)


# Fig. 4's servers: Stoa, and the ZooKeepers of --observer-zookeeper.
OBSERVER_SYSTEMS = {
    "stoa": ("Stoa (per-session isolation)", "plain-obs"),
    "3.9": ("ZooKeeper 3.9.5 (isolation, ZOOKEEPER-2024)", "plain-obs-zk39"),
    "3.5": ("ZooKeeper 3.5.10 (no isolation)", "plain-obs-zk35"),
}


# ------------------------------------------------------------------ output


def lmh(values):
    """low / middle / high of the rounds."""
    v = sorted(values)
    return v[0], statistics.median(v), v[-1]


def fmt_lmh(values, digits=0):
    return " / ".join("%.*f" % (digits, x) for x in lmh(values))


def pick(results, **match):
    return [r for r in results if all(r.get(k) == v for k, v in match.items())]


def paired_ratios(num, den):
    """num[i] / den[i], rounds paired in the order they ran."""
    return [a["throughput"] / d["throughput"] for a, d in zip(num, den) if d["throughput"] > 0]


def report(args, results, setups):
    L = []
    out = L.append
    out("Setup: %s" % "; ".join(setups))
    out("Each cell: %d clients (kazoo: a worker process each; Rust: one session each in one "
        "`stoa bench` process), %d ops in flight each, %.1f s measured after %.1f s "
        "warm-up, 1 KiB values over %d keys per mount; figures are low / middle / high of "
        "%d rounds (variants alternating)." % (args.clients, args.window, args.seconds,
                                                args.warmup, args.keys, args.rounds))
    out("")
    modes = pick(results, figure="modes")
    if modes:
        out("### Figs. 5/6: region-B clients over /b (local) and /a (remote), %d%% reads "
            "(ops/s)" % round(args.read_ratio * 100))
        out("")
        out("| burst | local ops | composed | never-sync | sync-all | composed / never-sync |"
            " syncs per 1000 ops (composed) |")
        out("|---:|---:|---:|---:|---:|---:|---:|")
        for burst in args.bursts:
            for loc in args.localities:
                cells = {m: pick(modes, mode=m, burst=burst, locality=loc)
                         for m in ("composed", "never-sync", "sync-all")}
                if not all(cells.values()):
                    continue
                syncs = sum(r["syncs"] for r in cells["composed"])
                ops = sum(r["ops"] for r in cells["composed"]) or 1
                out("| %d | %d%% | %s | %s | %s | %s | %.0f |" % (
                    burst, round(loc * 100),
                    *(fmt_lmh([r["throughput"] for r in cells[m]])
                      for m in ("composed", "never-sync", "sync-all")),
                    fmt_lmh(paired_ratios(cells["composed"], cells["never-sync"]), 2),
                    1000.0 * syncs / ops))
        lo = pick(modes, mode="local-only")
        if lo:
            out("")
            out("local-only (every op on /b): %s ops/s" % fmt_lmh([r["throughput"] for r in lo]))
        out("")
    for driver in args.drivers:
        over = pick(results, figure="overhead", driver=driver)
        if over:
            out("### Staying on one mount: plain vs composed client, driver %s (ops/s)"
                % DRIVER_NAMES[driver])
            out("")
            out("| ops in flight per client | plain | composed | composed / plain |")
            out("|---:|---:|---:|---:|")
            for w in args.overhead_windows:
                p = pick(over, kind="plain-b", window=w)
                c = pick(over, kind="composed", window=w)
                if p and c:
                    out("| %d | %s | %s | %s |" % (w, fmt_lmh([r["throughput"] for r in p]),
                                                   fmt_lmh([r["throughput"] for r in c]),
                                                   fmt_lmh(paired_ratios(c, p), 3)))
            out("")
    for driver in args.drivers:
        rem = pick(results, figure="remote", driver=driver)
        if rem:
            out("### Figs. 7b/8b: region-B clients writing (100%% setData of 1 KiB), driver %s "
                "(ops/s)" % DRIVER_NAMES[driver])
            out("")
            out("| ops in flight per client | (a) composed, own ensemble | (b) one ensemble "
                "spanning | (c) one ensemble + observer in B | a / b | a / c |")
            out("|---:|---:|---:|---:|---:|---:|")
            for w in args.remote_windows:
                a, s, o = (pick(rem, deployment=d, window=w)
                           for d in ("composed", "spanning", "observer"))
                if a and s and o:
                    out("| %d | %s | %s | %s | %s | %s |" % (
                        w, *(fmt_lmh([r["throughput"] for r in x]) for x in (a, s, o)),
                        fmt_lmh(paired_ratios(a, s), 1), fmt_lmh(paired_ratios(a, o), 1)))
            out("")
    for driver in args.drivers:
        obs = pick(results, figure="observer", driver=driver)
        if not obs:
            continue
        systems = [k for k in OBSERVER_SYSTEMS if pick(obs, system=k)]
        out("### Fig. 4: one observer in region B, its clients' throughput vs read ratio, "
            "driver %s, %s (ops/s)" % (DRIVER_NAMES[driver], observer_load(args, driver)))
        out("")
        out("| reads | %s |" % " | ".join(OBSERVER_SYSTEMS[k][0] for k in systems))
        out("|---:|%s" % ("---:|" * len(systems)))
        for rr in args.read_ratios:
            cells = [pick(obs, read_ratio=rr, system=k) for k in systems]
            if all(cells):
                out("| %d%% | %s |" % (round(rr * 100), " | ".join(
                    fmt_lmh([r["throughput"] for r in c]) for c in cells)))
        out("")
    bad = [r for r in results if r["errors"] or not r["drained"]]
    if bad:
        out("Cells with errors: %s" % ", ".join("%s %s (%d)" % (r["figure"], r["variant"],
                                                                r["errors"]) for r in bad))
    return "\n".join(L)


def targets(args, results):
    """(name, measured text, met) for the issue's targets."""
    t = []
    for driver in args.drivers:
        over = pick(results, figure="overhead", driver=driver)
        for w in args.overhead_windows:
            p, c = pick(over, kind="plain-b", window=w), pick(over, kind="composed", window=w)
            if p and c:
                ratio = statistics.median(paired_ratios(c, p))
                t.append(("one mount, %d in flight, %s: composed / plain >= 0.97"
                          % (w, DRIVER_NAMES[driver]), "%.3f" % ratio, ratio >= 0.97))
    modes = pick(results, figure="modes")
    for burst in [x for x in args.bursts if x >= 25]:
        for loc in args.localities:
            c = pick(modes, mode="composed", burst=burst, locality=loc)
            n = pick(modes, mode="never-sync", burst=burst, locality=loc)
            if c and n:
                ratio = statistics.median(paired_ratios(c, n))
                t.append(("burst %d, %d%% local: composed / never-sync >= 0.90"
                          % (burst, round(loc * 100)), "%.2f" % ratio, ratio >= 0.90))
    for driver in args.drivers:
        rem = pick(results, figure="remote", driver=driver)
        for w in args.remote_windows:
            a = pick(rem, deployment="composed", window=w)
            s = pick(rem, deployment="spanning", window=w)
            if a and s:
                ratio = statistics.median(paired_ratios(a, s))
                t.append(("region-B writes, %d in flight, %s: composed / spanning >= 7"
                          % (w, DRIVER_NAMES[driver]), "%.1f" % ratio, ratio >= 7))
    return t


def plots(args, results, out_dir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no plots: matplotlib is not installed; pip install -r bench/requirements.txt)")
        return []
    written = []

    def mid(cells):
        return statistics.median([r["throughput"] for r in cells]) if cells else float("nan")

    def err(cells):
        lo, m, hi = lmh([r["throughput"] for r in cells])
        return [[m - lo], [hi - m]]

    modes = pick(results, figure="modes")
    if modes:
        fig, axes = plt.subplots(1, len(args.bursts), figsize=(4 * len(args.bursts), 3.6),
                                 sharey=True, squeeze=False)
        lo = pick(modes, mode="local-only")
        for ax, burst in zip(axes[0], args.bursts):
            for mode, style in (("composed", "o-"), ("never-sync", "s--"), ("sync-all", "^:")):
                xs = [loc * 100 for loc in args.localities]
                ys = [mid(pick(modes, mode=mode, burst=burst, locality=loc))
                      for loc in args.localities]
                ax.plot(xs, ys, style, label=mode)
            if lo:
                ax.axhline(mid(lo), color="grey", lw=0.8, label="local-only")
            ax.set_title("burst %d" % burst)
            ax.set_xlabel("local ops (%)")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("region-B ops/s")
        axes[0][0].legend(fontsize=8)
        fig.suptitle("Composed ensembles: %d%% reads, %.0f ms WAN RTT"
                     % (round(args.read_ratio * 100), args.rtt_ms))
        fig.tight_layout()
        written.append(_save(fig, plt, out_dir, "zoonet_modes.png"))
    rem = pick(results, figure="remote")
    if rem:
        fig, ax = plt.subplots(figsize=(9, 3.8))
        names = [("composed", "(a) composed"), ("spanning", "(b) spanning"),
                 ("observer", "(c) observer in B")]
        drivers = [d for d in args.drivers if pick(rem, driver=d)]
        bars = [(d, n) for d in drivers for n in names]
        width = 0.85 / len(bars)
        for j, (driver, (d, label)) in enumerate(bars):
            xs = [i + j * width for i in range(len(args.remote_windows))]
            cells = [pick(rem, deployment=d, window=w, driver=driver)
                     for w in args.remote_windows]
            ax.bar(xs, [mid(c) for c in cells], width, color="C%d" % names.index((d, label)),
                   hatch="//" if driver == "rust" else None,
                   label="%s, %s" % (label, DRIVER_NAMES[driver]),
                   yerr=[sum((err(c)[k] for c in cells if c), []) for k in (0, 1)]
                   if all(cells) else None)
        ax.set_xticks([i + 0.85 / 2 - width / 2 for i in range(len(args.remote_windows))])
        ax.set_xticklabels(["%d in flight" % w for w in args.remote_windows])
        ax.set_ylabel("region-B writes/s")
        ax.set_yscale("log")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_title("Remote-region writes, %.0f ms WAN RTT" % args.rtt_ms)
        fig.tight_layout()
        written.append(_save(fig, plt, out_dir, "zoonet_remote_writes.png"))
    obs = pick(results, figure="observer")
    drivers = [d for d in args.drivers if pick(obs, driver=d)]
    if drivers:
        fig, axes = plt.subplots(1, len(drivers), figsize=(5 * len(drivers), 3.6),
                                 squeeze=False)
        xs = [rr * 100 for rr in args.read_ratios]
        for ax, driver in zip(axes[0], drivers):
            for k, style in zip(OBSERVER_SYSTEMS, ("o-", "s--", "^:")):
                cells = [pick(obs, read_ratio=rr, system=k, driver=driver)
                         for rr in args.read_ratios]
                if all(cells):
                    ax.plot(xs, [mid(c) for c in cells], style, label=OBSERVER_SYSTEMS[k][0])
            ax.set_yscale("log")
            ax.set_xlabel("reads (%)")
            ax.grid(alpha=0.3)
            ax.set_title("%s: %s" % (DRIVER_NAMES[driver], observer_load(args, driver)),
                fontsize=9)
        axes[0][0].set_ylabel("observer clients' ops/s")
        axes[0][0].legend(fontsize=7)
        fig.suptitle("One observer %.0f ms from its leader" % args.rtt_ms)
        fig.tight_layout()
        written.append(_save(fig, plt, out_dir, "zoonet_observer.png"))
    return written


def _save(fig, plt, out_dir, name):
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# -------------------------------------------------------------------- main


class Overrun(Exception):
    pass


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    fl = lambda s: [float(x) for x in s.split(",") if x]  # noqa: E731
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    p.add_argument("--figures", default="modes,overhead,remote,observer",
                   help="comma-separated subset of modes,overhead,remote,observer")
    p.add_argument("--rtt-ms", type=float, default=50.0)
    p.add_argument("--jitter-ms", type=float, default=2.0)
    p.add_argument("--clients", type=int, default=2, help="client processes (region B)")
    p.add_argument("--window", type=int, default=32, help="ops in flight per client")
    p.add_argument("--seconds", type=float, default=3.0, help="measured per cell")
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--max-ops", type=int, default=200000, help="issued per client per cell")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--read-ratio", type=float, default=0.9, help="modes and overhead figures")
    p.add_argument("--bursts", type=ints, default=[1, 25, 50])
    p.add_argument("--localities", type=fl, default=[0.5, 0.9])
    p.add_argument("--overhead-windows", type=ints, default=[1, 32])
    p.add_argument("--overhead-rounds", type=int, default=5)
    p.add_argument("--remote-windows", type=ints, default=[1, 32])
    p.add_argument("--read-ratios", type=fl, default=[0.0, 0.5, 0.9, 0.99, 1.0])
    p.add_argument("--observer-zookeeper",
                   help="ZooKeepers beside Stoa in the observer figure: 3.9, 3.5, or none "
                        "(default 3.9,3.5; none with --quick)")
    p.add_argument("--observer-sessions", type=int, default=32,
                   help="observer figure, Rust driver: synchronous sessions")
    p.add_argument("--drivers", default="kazoo,rust",
                   help="load generators of the overhead, remote and observer figures: "
                        "kazoo, rust")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--keys", type=int, default=100)
    p.add_argument("--out", help="directory for zoonet_*.png and zoonet.json (e.g. docs/bench)")
    p.add_argument("--max-seconds", type=int, default=1200,
                   help="the whole run stops (and cleans up) after this long")
    p.add_argument("--quick", action="store_true",
                   help="a tiny grid (smoke test): 1 round, burst 1 and 25, 0.5 s cells")
    p.add_argument("--verbose", "-v", action="store_true")
    a = p.parse_args(argv)
    a.figures = [f for f in a.figures.split(",") if f]
    a.drivers = [d for d in a.drivers.split(",") if d]
    if a.observer_zookeeper is None:
        a.observer_zookeeper = "none" if a.quick else "3.9,3.5"
    a.observer_zookeeper = [v for v in a.observer_zookeeper.split(",") if v and v != "none"]
    if set(a.observer_zookeeper) - {"3.9", "3.5"}:
        p.error("--observer-zookeeper: a comma-separated subset of 3.9,3.5, or none")
    if not a.drivers or set(a.drivers) - set(DRIVERS):
        p.error("--drivers: a comma-separated subset of %s" % ",".join(DRIVERS))
    unknown = set(a.figures) - {"modes", "overhead", "remote", "observer"}
    if unknown:
        p.error("unknown figures: %s" % ", ".join(sorted(unknown)))
    if a.quick:
        a.rounds, a.overhead_rounds, a.seconds, a.warmup = 1, 1, 0.5, 0.2
        a.bursts, a.localities = [1, 25], [0.5]
        a.overhead_windows, a.remote_windows, a.read_ratios = [8], [8], [0.5, 1.0]
        a.keys = 10
    return a


def main(argv=None):
    args = parse_args(argv)
    import regions
    import servers
    why = regions.unavailable_reason()
    if why:
        print("zoonet: regions unavailable: %s" % why, file=sys.stderr)
        return 2
    os.environ.setdefault("STOA_BIN", servers.stoa_bin())
    if not os.access(os.environ["STOA_BIN"], os.X_OK):
        print("zoonet: no stoa binary at %s (cargo build --release, or set STOA_BIN)"
              % os.environ["STOA_BIN"], file=sys.stderr)
        return 2

    def on_signal(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)

    def on_alarm(signum, frame):
        raise Overrun("ran past --max-seconds %d" % args.max_seconds)
    signal.signal(signal.SIGINT, on_signal)  # also where a shell started us ignoring it
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(args.max_seconds)
    request = regions.standalone_request()
    workers = []
    b = None
    started = time.monotonic()
    try:
        need_remote = "remote" in args.figures
        need_obs = "observer" in args.figures or need_remote
        need_composed = bool({"modes", "overhead"} & set(args.figures)) or need_remote
        setups = []
        comp = span = obsd = None
        if need_composed:
            comp = composed_deployment(request, args.rtt_ms, args.jitter_ms)
            setups.append("composed: ensembles A and B, 3 participants each in their region "
                          "and an observer in the other; %s" % comp["topo"].describe())
            populate(comp["a_participant"].hosts, REMOTE, args.keys, args.size)
            populate(comp["b_participants"][0].hosts, LOCAL, args.keys, args.size)
        if need_remote:
            span = one_ensemble(request, [["participant"] * 2, ["participant"]],
                                args.rtt_ms, args.jitter_ms)
            setups.append("spanning: one ensemble, 2 participants in A (leader), 1 in B")
            populate(span.leader().hosts, LOCAL, args.keys, args.size)
        if need_obs:
            obsd = one_ensemble(request, [["participant"] * 3, ["observer"]],
                                args.rtt_ms, args.jitter_ms)
            setups.append("observer: one ensemble, 3 participants in A, an observer in B")
            populate(obsd.leader().hosts, LOCAL, args.keys, args.size)
        zk_obs = {}  # "3.9" / "3.5": the same deployment of that ZooKeeper
        if "observer" in args.figures:
            from bench.compare.anchors import maven
            for version in args.observer_zookeeper:
                jars, full = (maven.zookeeper if version == "3.9" else maven.zookeeper_35)()
                zk_obs[version] = one_ensemble(request, [["participant"] * 3, ["observer"]],
                                               args.rtt_ms, args.jitter_ms, zookeeper=jars)
                setups.append("observer, ZooKeeper %s: the same" % full)
                populate(zk_obs[version].leader().hosts, LOCAL, args.keys, args.size)
        print("zoonet: deployments up in %.0f s" % (time.monotonic() - started), flush=True)
        workers = [Worker() for _ in range(args.clients)]
        for i, w in enumerate(workers):
            if comp:
                b_hosts = comp["b_participants"][i % 3].hosts
                mounts = {REMOTE: comp["a_observer_in_b"].hosts, LOCAL: b_hosts}
                w.send({"cmd": "connect", "name": "composed", "kind": "composed",
                        "mounts": mounts})
                w.send({"cmd": "connect", "name": "nosync", "kind": "never-sync",
                        "mounts": mounts})
                w.send({"cmd": "connect", "name": "plain-b", "kind": "plain", "hosts": b_hosts})
            if span:
                w.send({"cmd": "connect", "name": "plain-span", "kind": "plain",
                        "hosts": span.in_region(1)[0].hosts})
            if obsd:
                w.send({"cmd": "connect", "name": "plain-obs", "kind": "plain",
                        "hosts": obsd.observers()[0].hosts})
            for version, d in zk_obs.items():
                w.send({"cmd": "connect", "name": OBSERVER_SYSTEMS[version][1], "kind": "plain",
                        "hosts": d.observers()[0].hosts})
        for w in workers:
            for _ in range(3 * bool(comp) + bool(span) + bool(obsd) + len(zk_obs)):
                w.receive()
        # What `stoa bench` is given for each client name (the Rust driver):
        # session i starts at member i mod n of each ensemble, as worker i.
        bench_targets = {}
        if comp:
            b_hosts = ",".join(s.hosts for s in comp["b_participants"])
            bench_targets["composed"] = ("mounts", "%s=%s;%s=%s" % (
                REMOTE, comp["a_observer_in_b"].hosts, LOCAL, b_hosts))
            bench_targets["plain-b"] = ("servers", b_hosts)
        if span:
            bench_targets["plain-span"] = ("servers", span.in_region(1)[0].hosts)
        if obsd:
            bench_targets["plain-obs"] = ("servers", obsd.observers()[0].hosts)
        for version, d in zk_obs.items():
            bench_targets[OBSERVER_SYSTEMS[version][1]] = ("servers", d.observers()[0].hosts)
        b = Bench(args, workers, bench_targets)
        load_before = os.getloadavg()[0]
        for fig in args.figures:
            t0 = time.monotonic()
            if fig == "modes":
                modes_figure(b, args.rounds, args.bursts, args.localities)
            elif fig == "overhead":
                overhead_figure(b, args.overhead_rounds, args.overhead_windows, args.drivers)
            elif fig == "remote":
                remote_figure(b, args.rounds, args.remote_windows, args.drivers)
            elif fig == "observer":
                systems = [(k, OBSERVER_SYSTEMS[k][1]) for k in ["stoa"] + list(zk_obs)]
                observer_figure(b, args.rounds, args.read_ratios, systems, args.drivers)
            print("zoonet: %s done in %.0f s" % (fig, time.monotonic() - t0), flush=True)
        setups.append("load average (1 min) before / after the cells: %.2f / %.2f"
                      % (load_before, os.getloadavg()[0]))
        text = report(args, b.results, setups)
        print()
        print(text)
        t = targets(args, b.results)
        if t:
            print()
            print("### Targets")
            print()
            print("| target | measured (median of paired rounds) | met |")
            print("|---|---:|:-:|")
            for name, measured, met in t:
                print("| %s | %s | %s |" % (name, measured, "yes" if met else "**no**"))
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            for path in plots(args, b.results, args.out):
                print("wrote %s" % path)
            with open(os.path.join(args.out, "zoonet.json"), "w") as f:
                json.dump({"args": {k: v for k, v in vars(args).items()}, "setup": setups,
                           "results": b.results,
                           "targets": [{"target": n, "measured": m, "met": ok}
                                       for n, m, ok in t]}, f, indent=1)
            print("wrote %s" % os.path.join(args.out, "zoonet.json"))
        print("zoonet: total %.0f s" % (time.monotonic() - started))
        return 0
    except (KeyboardInterrupt, Overrun) as e:
        print("zoonet: stopped (%s); cleaning up" % (e or "interrupted"), file=sys.stderr)
        return 130
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the cleanup finish
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for w in workers:
            w.stop()
        for proc in list(b.bench_procs if b else []):
            servers.terminate(proc)
        request.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker_main()
    else:
        sys.exit(main())
