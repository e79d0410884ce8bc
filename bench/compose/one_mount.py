#!/usr/bin/env python3
"""A client that stays on one mount: plain KazooClient vs ComposedClient.

Issue 24's target: "clients that stay on one mount pay no measurable
overhead (within 3% of the plain client)". This starts one standalone
`stoa server` on a free loopback port (or uses --hosts), connects a plain
KazooClient and a ComposedClient with one mount on it, and runs the same
load through each in interleaved rounds (plain, composed, composed, plain,
...: the order alternates every round, so drift on a noisy machine falls
on both). Each run issues a fixed number of operations (90% get, 10% set
by default, on a few keys) with --window of them in flight, and reports
its throughput and the client process's CPU time per operation. Per round
the ratio composed / plain is taken; the medians over rounds are printed.

    .venv/bin/python bench/compose/one_mount.py                 # about 1 min
    .venv/bin/python bench/compose/one_mount.py --rounds 3 --ops 1000   # quick
    .venv/bin/python bench/compose/one_mount.py --baseline /path/to/other/clients/python

--driver rust runs the same comparison for the Rust client: `stoa bench
--servers` (a plain `Client`) against `stoa bench --mounts /m=HOSTS` (its
`ComposedClient` with one mount), one `stoa bench` process per run with
one session, --ops calls after a short unmeasured warm-up; its throughput
and client CPU per call come from the bench's own JSON.

--baseline DIR also loads the stoa_compose package found in DIR (another
checkout's clients/python) under another name and runs it as a third
variant in the same rounds, so two versions of the client are compared on
the same server at the same time. --json FILE writes every run.

Bounded: every run stops after --ops operations or --max-run-seconds,
whichever comes first; the server it started is stopped by PID and its
data directory removed however the script ends.
"""

import argparse
import importlib.util
import json
import logging
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MOUNT = "/m"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One standalone `stoa server` on a free port, stopped by PID."""

    def __init__(self, binary):
        self.binary = binary
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="stoa-compose-bench-")
        self.proc = None

    def start(self, timeout=20.0):
        log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen(
            [self.binary, "server", "--bind", "127.0.0.1", "--port", str(self.port),
             "--data-dir", os.path.join(self.dir, "data")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("stoa server exited with %s (log in %s)"
                                   % (self.proc.returncode, self.dir))
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return "127.0.0.1:%d" % self.port
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("stoa server did not listen on %d within %ss" % (self.port, timeout))

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def load_stoa_compose(name, directory):
    """The stoa_compose package in `directory`, imported as module `name`."""
    pkg = os.path.join(directory, "stoa_compose")
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(pkg, "__init__.py"), submodule_search_locations=[pkg])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run(client, window, ops, read_ratio, keys, seed, max_seconds):
    """Issues `ops` operations with `window` in flight; returns (answered,
    seconds, cpu seconds, errors)."""
    rng = random.Random(seed)
    plan = [(rng.random() < read_ratio, "%s/k%d" % (MOUNT, rng.randrange(keys)))
            for _ in range(ops)]
    data = b"v" * 64
    errors = [0]
    deadline = time.monotonic() + max_seconds
    cpu0, t0 = time.process_time(), time.perf_counter()
    done = 0
    if window == 1:
        for is_read, path in plan:
            if time.monotonic() > deadline:
                break
            try:
                if is_read:
                    client.get(path)
                else:
                    client.set(path, data)
            except Exception:
                errors[0] += 1
            done += 1
    else:
        slots = threading.Semaphore(window)
        lock = threading.Lock()

        def finished(result):
            if not result.successful():
                with lock:
                    errors[0] += 1
            slots.release()

        for is_read, path in plan:
            left = deadline - time.monotonic()
            if left <= 0 or not slots.acquire(timeout=left):
                break
            r = client.get_async(path) if is_read else client.set_async(path, data)
            r.rawlink(finished)
            done += 1
        for _ in range(window):
            slots.acquire(timeout=max(1.0, deadline - time.monotonic() + 10))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return done, seconds, cpu, errors[0]


class RustVariant:
    """`stoa bench` with a plain session (`--servers`) or a composed one
    with a single mount (`--mounts`), on the keys under MOUNT."""

    def __init__(self, binary, flag, hosts):
        self.binary, self.flag = binary, flag
        self.where = hosts if flag == "servers" else "%s=%s" % (MOUNT, hosts)

    def run(self, window, ops, read_ratio, keys, max_seconds):
        fd, out = tempfile.mkstemp(prefix="one-mount-", suffix=".json")
        os.close(fd)
        cmd = [self.binary, "bench", "--" + self.flag, self.where, "--root", MOUNT,
               "--outstanding", str(window), "--ops", str(ops), "--warmup", "0.2",
               "--read-ratio", str(round(read_ratio * 100)), "--keys", str(keys),
               "--payload", "64", "--quiet", "--json", out]
        try:
            p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               timeout=max_seconds + 30, start_new_session=True)
            if p.returncode != 0:
                raise RuntimeError("stoa bench: %s" % p.stderr.decode().strip())
            with open(out) as f:
                r = json.load(f)["results"][0]
        finally:
            os.unlink(out)
        done = r["ops"] + r["error_count"]
        cpu = r["client_cpu_us_per_op"] * done / 1e6
        return done, r["elapsed_s"], cpu, r["error_count"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", help="use this server instead of starting one")
    ap.add_argument("--stoa-bin", default=os.environ.get(
        "STOA_BIN", os.path.join(ROOT, "target", "release", "stoa")))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--ops", type=int, default=3000, help="operations per run")
    ap.add_argument("--windows", default="1,32", help="ops in flight, comma-separated")
    ap.add_argument("--read-ratio", type=float, default=0.9)
    ap.add_argument("--keys", type=int, default=16)
    ap.add_argument("--max-run-seconds", type=float, default=20.0)
    ap.add_argument("--baseline", metavar="DIR",
                    help="also run the stoa_compose package of DIR (a clients/python)")
    ap.add_argument("--json", metavar="FILE", help="write every run here")
    ap.add_argument("--driver", choices=["kazoo", "rust"], default="kazoo",
                    help="kazoo (stoa_compose) or the Rust client (stoa bench)")
    args = ap.parse_args()
    if args.driver == "rust" and args.baseline:
        ap.error("--baseline is for --driver kazoo")
    logging.getLogger("kazoo").setLevel(logging.ERROR)

    from kazoo.client import KazooClient
    import stoa_compose
    variants = {"plain": lambda h: KazooClient(hosts=h, timeout=10),
                "composed": lambda h: stoa_compose.ComposedClient({MOUNT: h}, timeout=10)}
    if args.driver == "rust":
        variants = {"plain": lambda h: RustVariant(args.stoa_bin, "servers", h),
                    "composed": lambda h: RustVariant(args.stoa_bin, "mounts", h)}
    if args.baseline:
        base = load_stoa_compose("stoa_compose_baseline", os.path.abspath(args.baseline))
        variants["baseline"] = lambda h: base.ComposedClient({MOUNT: h}, timeout=10)
    print("client: %s" % (os.path.dirname(stoa_compose.__file__) if args.driver == "kazoo"
                          else "Rust, through %s bench" % args.stoa_bin))
    if args.baseline:
        print("baseline:     %s" % os.path.dirname(base.__file__))

    server = None
    clients = {}
    runs = []
    try:
        hosts = args.hosts
        if not hosts:
            server = Server(args.stoa_bin)
            hosts = server.start()
            print("stoa server pid %d on %s" % (server.proc.pid, hosts))
        for name, make in variants.items():
            clients[name] = make(hosts)
        if args.driver == "kazoo":
            for c in clients.values():
                c.start(timeout=20)
        setup = KazooClient(hosts=hosts, timeout=10)
        setup.start(timeout=20)
        setup.ensure_path(MOUNT)
        for k in range(args.keys):
            path = "%s/k%d" % (MOUNT, k)
            if not setup.exists(path):
                setup.create(path, b"v" * 64)
        setup.stop()
        setup.close()

        def run_one(name, window, ops, seed):
            if args.driver == "rust":
                return clients[name].run(window, ops, args.read_ratio, args.keys,
                                         args.max_run_seconds)
            return run(clients[name], window, ops, args.read_ratio, args.keys, seed,
                       args.max_run_seconds)
        names = list(variants)
        for window in [int(w) for w in args.windows.split(",")]:
            for name in names:   # warm up: connections, code paths, the first sync
                run_one(name, window, min(300, args.ops), 0)
            for r in range(args.rounds):
                order = names if r % 2 == 0 else names[::-1]
                for name in order:
                    done, secs, cpu, errs = run_one(name, window, args.ops, r + 1)
                    runs.append({"variant": name, "window": window, "round": r, "ops": done,
                                 "seconds": secs, "cpu": cpu, "errors": errs,
                                 "throughput": done / secs, "cpu_us_per_op": 1e6 * cpu / done})
        composed_stats = dict(getattr(clients["composed"], "stats", {}))
    finally:
        for c in clients.values():
            if isinstance(c, RustVariant):
                continue
            try:
                c.stop()
                c.close()
            except Exception:
                pass
        if server is not None:
            server.stop()

    print("\n%d rounds of %d ops per variant and window (medians; min-max over rounds)"
          % (args.rounds, args.ops))
    print("%-7s %-9s %18s %16s %24s" % ("window", "variant", "ops/s", "cpu us/op",
                                        "ratio to plain"))
    for window in sorted({x["window"] for x in runs}):
        by = {n: [x for x in runs if x["window"] == window and x["variant"] == n]
              for n in variants}
        for name in variants:
            xs = by[name]
            tp = [x["throughput"] for x in xs]
            cpu = [x["cpu_us_per_op"] for x in xs]
            ratio = ""
            if name != "plain":
                rs = [a["throughput"] / b["throughput"] for a, b in zip(xs, by["plain"])]
                ratio = "%.3f (%.3f-%.3f)" % (statistics.median(rs), min(rs), max(rs))
            print("%-7d %-9s %8.0f (%5.0f-%5.0f) %6.2f (%5.2f-%5.2f) %24s"
                  % (window, name, statistics.median(tp), min(tp), max(tp),
                     statistics.median(cpu), min(cpu), max(cpu), ratio))
    errors = sum(x["errors"] for x in runs)
    print("errors: %d; composed stats: %s" % (errors, composed_stats))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "composed_stats": composed_stats}, f, indent=1)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
