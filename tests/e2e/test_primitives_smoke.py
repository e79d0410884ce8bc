"""bench/primitives (the Cost of Consensus harness, issue 25 items 4 and 5):
a tiny grid runs end to end, measured and modelled, and an interrupted
run leaves no server, relay, namespace or link behind.

Needs network namespaces (root): skipped, with the reason, where they
cannot be made. Stoa only (the harness starts its own servers); skipped
under stoa-ensemble and with STOA_PARTITIONS > 1, like test_regions.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import harness as h
import netns

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RUN = os.path.join(ROOT, "bench", "primitives", "run.py")

pytestmark = [
    pytest.mark.skipif(h.target() != "stoa" or h.target_name() == "stoa-ensemble",
                       reason="the harness starts its own Stoa servers"),
    pytest.mark.skipif(h.stoa_partitions() > 1, reason="runs in the partitions=1 pass"),
]


def leftovers(pid):
    """Namespaces and links named after run.py's process `pid`."""
    tag = "s%xx" % pid
    ns = netns.ip("netns", "list", check=False).stdout.decode()
    links = netns.ip("-o", "link", "show", check=False).stdout.decode()
    return ([l for l in ns.splitlines() if "%s%d-" % (netns.NS_PREFIX, pid) in l] +
            [l.split(":")[1].strip() for l in links.splitlines() if ": %s" % tag in l])


def alive(pid):
    """Running (a zombie, or a process gone while we look, is not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def settled(check, timeout=10.0):
    """check() once it is empty, or its last value after `timeout` s: the
    kernel removes a deleted namespace's devices after `ip netns del`
    returns, and a stopped process may take a moment to be reaped."""
    deadline = time.monotonic() + timeout
    while True:
        left = check()
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def server_pids(out):
    pids = []
    for line in out.splitlines():
        if "(server pids " in line:
            pids += [int(p) for p in line.split("(server pids ")[1].rstrip(")").split(",")]
    return pids


@pytest.mark.timeout(240)
def test_a_tiny_grid_runs_end_to_end_with_the_model_beside(namespaces_allowed, tmp_path):
    p = subprocess.Popen([sys.executable, RUN, "--tiny", "--duration", "2",
                          "--primitives", "tas,server", "--out", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, STOA_BIN=h.stoa_bin()))
    try:
        out, _ = p.communicate(timeout=200)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    assert p.returncode == 0, out
    assert not settled(lambda: leftovers(p.pid)), out
    assert not settled(lambda: [pid for pid in server_pids(out) if alive(pid)]), out
    doc = json.loads((tmp_path / "results.json").read_text())
    cells = doc["cells"]
    # Two topologies (1 server, no delay; 3 servers, 20 ms apart, client 20 ms away).
    assert [(c["n"], c["primitive"]) for c in cells] == \
        [(1, "tas"), (1, "server"), (3, "tas"), (3, "server")], out
    for c in cells:
        assert "error" not in c and not c["errors"], (c, out)
        assert c["acquisitions"] > 0 and c["measured_ms"] > 0, (c, out)
        assert c["model_ms"] > 0 and c["ratio"] > 0, (c, out)
        # The lock's own cost beside the latency: no grant seen before the
        # previous holder's release, and what the lock took is part of it.
        ho = c["handoffs"]
        assert ho["overlaps"] == 0, (c, out)
        assert 0 < ho["own_mean_us"] / 1e3 <= c["measured_ms"] * 1.001, (c, out)
    far = [c for c in cells if c["n"] == 3]
    # Every acquire needs at least one client round trip and one consensus round.
    for c in far:
        assert c["q_ms"] == 20 and c["p50_ms"] >= 0.9 * (20 + 20), (c, out)


@pytest.mark.timeout(180)
def test_an_interrupted_run_tears_everything_down(namespaces_allowed, tmp_path):
    p = subprocess.Popen([sys.executable, RUN, "--tiny", "--duration", "30",
                          "--primitives", "queue", "--out", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, STOA_BIN=h.stoa_bin()))
    lines = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("=="):
                break
        assert lines and lines[-1].startswith("=="), "".join(lines)
        time.sleep(1.0)  # the first cell is under way
        p.send_signal(signal.SIGTERM)
        rest, _ = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    out = "".join(lines) + rest
    assert p.returncode == 130, out
    assert "tearing down" in out
    assert not settled(lambda: leftovers(p.pid)), out
    assert not settled(lambda: [pid for pid in server_pids(out) if alive(pid)]), out
