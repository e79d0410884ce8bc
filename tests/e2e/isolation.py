"""Per-client isolation on one server (ZooNet, section 4.1): session B's
reads, timed one at a time, alone and while session A keeps many writes
in flight on the same server.

A's load runs in a process of its own (`python3 isolation.py write ...`)
so that it does not share the interpreter lock with B's timing; it sends
setData requests back to back on one session, keeping `outstanding` of
them unanswered, and reports its own latencies when it ends. Shared by
test_regions.py and bench/regions/isolation.py.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness as h  # noqa: E402

HERE = os.path.abspath(__file__)


def percentile(values, q):
    """The q-th percentile (0-100) by nearest rank."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q / 100.0 * len(s) + 0.5)) - 1))]


def summary(latencies_s):
    ms = [x * 1e3 for x in latencies_s]
    return {"n": len(ms), "p50_ms": percentile(ms, 50), "p90_ms": percentile(ms, 90),
            "p99_ms": percentile(ms, 99), "max_ms": max(ms)}


def prepare(hosts, read_path, write_path, size):
    c = h.RawClient(hosts)
    try:
        for path in (read_path, write_path):
            try:
                c.create(path, b"x" * size)
            except h.ZkError as e:
                if e.code != h.ERR.NODE_EXISTS:
                    raise
    finally:
        c.close()


def time_reads(hosts, path, count, pause_s=0.002):
    """Latencies (s) of `count` getData calls made one after another by one
    session, with a short pause between them (a reader, not a flood)."""
    c = h.RawClient(hosts)
    try:
        c.get(path)  # the first call pays for nothing we measure
        out = []
        for _ in range(count):
            t0 = time.perf_counter()
            c.get(path)
            out.append(time.perf_counter() - t0)
            time.sleep(pause_s)
        return out
    finally:
        c.close()


def write_load(hosts, path, outstanding, seconds, size):
    """Session A: `outstanding` setData calls always in flight for `seconds`.
    Prints 'loaded' once the first reply is back (every slot filled), then
    a JSON summary of its write latencies."""
    c = h.RawClient(hosts)
    data = b"a" * size
    body = bytes(h.W().string(path).buffer(data).int(-1).b)
    inflight, latencies = [], []
    deadline = time.monotonic() + seconds
    announced = False
    try:
        while time.monotonic() < deadline:
            while len(inflight) < outstanding:
                inflight.append((time.perf_counter(), c.send(h.OP.SET_DATA, body)))
            t0, q = inflight.pop(0)
            rep = q.get(timeout=30)
            if rep is None or rep.err:
                raise RuntimeError("write failed: %r" % (rep and rep.err))
            latencies.append(time.perf_counter() - t0)
            if not announced:
                print("loaded", flush=True)
                announced = True
        for _, q in inflight:
            q.get(timeout=30)
    finally:
        c.close()
    print(json.dumps(summary(latencies)), flush=True)


class WriteLoad:
    """write_load in a child process, stopped by PID however the block ends."""

    def __init__(self, hosts, path, outstanding, seconds, size):
        self.argv = [sys.executable, HERE, "write", hosts, path, str(outstanding),
                     str(seconds), str(size)]
        self.seconds = seconds
        self.proc = None
        self.result = None
        self.error = None

    def __enter__(self):
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode(errors="replace").strip()
        if line != "loaded":
            self.__exit__(None, None, None)
            raise RuntimeError("write load did not start: %r %s" % (
                line, self.proc.stderr.read().decode(errors="replace")[-2000:]))
        return self

    def __exit__(self, *exc):
        try:
            out, err = self.proc.communicate(timeout=self.seconds + 30)
            lines = out.decode(errors="replace").strip().splitlines()
            if self.proc.returncode == 0 and lines:
                self.result = json.loads(lines[-1])
            else:
                self.error = err.decode(errors="replace")[-2000:]
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return False


def measure(hosts, reads=150, outstanding=100, size=1024, load_s=None, prefix="/isolation"):
    """B's read latencies alone, then under A's write load, on `hosts` (one
    server). Returns {"alone": summary, "contended": summary, "writes":
    A's summary}."""
    read_path, write_path = prefix + "-b", prefix + "-a"
    prepare(hosts, read_path, write_path, size)
    alone = time_reads(hosts, read_path, reads)
    # A runs a little longer than B's reads take alone, so B reads under
    # load from first to last; write_load stops on its own.
    load_s = load_s or max(3.0, 3 * sum(alone) + reads * 0.004)
    with WriteLoad(hosts, write_path, outstanding, load_s, size) as load:
        contended = time_reads(hosts, read_path, reads)
        finished_early = load.proc.poll() is not None
    if load.result is None:
        raise RuntimeError("write load failed: %s" % load.error)
    if finished_early:
        raise RuntimeError("the write load ended before B's reads did (load_s %.1f too short)"
                           % load_s)
    return {"alone": summary(alone), "contended": summary(contended), "writes": load.result}


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "write":
        write_load(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]),
                   int(sys.argv[6]))
    else:
        sys.exit("usage: isolation.py write HOSTS PATH OUTSTANDING SECONDS SIZE")
