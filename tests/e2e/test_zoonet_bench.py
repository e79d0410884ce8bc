"""bench/regions/zoonet.py smoke test (issue 24's ZooNet Figs. 4-8): its
tiny grid (--quick: one round, 0.5 s cells; about 20 s) builds the three
deployments in network namespaces, runs every figure with real clients and
prints sane figures, so the benchmark cannot rot. Skipped, saying why,
where namespaces cannot be made (root), and outside the plain Stoa pass
(it starts its own ensembles; once is enough).
"""

import json
import os
import subprocess
import sys


import harness as h

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ZOONET = os.path.join(ROOT, "bench", "regions", "zoonet.py")

pytestmark = h.plain_stoa_pass_only("Stoa ensembles")


def test_zoonet_quick_run_prints_every_figure(namespaces_allowed, tmp_path):
    env = dict(os.environ, STOA_BIN=h.stoa_bin())
    p = subprocess.run([sys.executable, ZOONET, "--quick", "--out", str(tmp_path),
                        "--max-seconds", "80"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=100, env=env, stdin=subprocess.DEVNULL)
    out = p.stdout
    assert p.returncode == 0, out[-4000:]
    for heading in ("### Figs. 5/6", "### Staying on one mount", "### Figs. 7b/8b",
                    "### Fig. 4", "### Targets"):
        assert heading in out, (heading, out[-4000:])
    with open(tmp_path / "zoonet.json") as f:
        run = json.load(f)
    results = run["results"]
    by_figure = {}
    for r in results:
        by_figure.setdefault(r["figure"], []).append(r)
        assert r["errors"] == 0 and r["drained"], r
        assert r["throughput"] > 0 and r["ops"] > 0, r
    assert set(by_figure) == {"modes", "overhead", "remote", "observer"}
    assert {r["mode"] for r in by_figure["modes"]} == {"composed", "never-sync", "sync-all",
                                                       "local-only"}
    for driver in ("kazoo", "rust"):
        over = [r for r in by_figure["overhead"] if r["driver"] == driver]
        assert {r["kind"] for r in over} == {"plain-b", "composed"}, driver
        rem = [r for r in by_figure["remote"] if r["driver"] == driver]
        assert {r["deployment"] for r in rem} == {"composed", "spanning", "observer"}, driver
    # Algorithm 1 shows in the counts: the composed client syncs after a
    # switch to a read, never-sync and local-only never do.
    modes = {(r["mode"], r["burst"]): r for r in by_figure["modes"]}
    assert modes[("composed", 1)]["syncs"] > 0
    assert modes[("never-sync", 1)]["syncs"] == 0
    assert modes[("local-only", 1)]["syncs"] <= 2  # the first read of a client
    # The WAN shows: a write from region B to a leader in region A takes a
    # round trip, to its own region's ensemble much less.
    for driver in ("kazoo", "rust"):
        remote = {r["deployment"]: r["throughput"] for r in by_figure["remote"]
                  if r["driver"] == driver}
        assert remote["composed"] > 2 * remote["spanning"], (driver, remote)
    # One mount and the remote writes for each driver, and the bursts.
    assert len(run["targets"]) >= 5


def test_zoonet_observer_figure_beside_zookeeper_without_isolation(namespaces_allowed, tmp_path):
    # Fig. 4's baseline: the same observer deployment of Apache ZooKeeper
    # 3.5.10, whose reads wait behind every session's writes. With many
    # synchronous sessions and half of the calls writes, Stoa's observer
    # answers the reads at once and ZooKeeper 3.5's holds them for a WAN
    # round trip: a wide margin, so a short cell shows it.
    h.zookeeper_35_or_skip()
    env = dict(os.environ, STOA_BIN=h.stoa_bin())
    p = subprocess.run([sys.executable, ZOONET, "--quick", "--figures", "observer",
                        "--observer-zookeeper", "3.5", "--drivers", "rust",
                        "--observer-sessions", "16", "--seconds", "1.5", "--out",
                        str(tmp_path), "--max-seconds", "100"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=130, env=env, stdin=subprocess.DEVNULL)
    out = p.stdout
    assert p.returncode == 0, out[-4000:]
    assert "ZooKeeper 3.5.10 (no isolation)" in out, out[-4000:]
    with open(tmp_path / "zoonet.json") as f:
        results = json.load(f)["results"]
    cells = {(r["system"], r["read_ratio"]): r for r in results}
    assert set(cells) == {(s, rr) for s in ("stoa", "3.5") for rr in (0.5, 1.0)}, cells
    for r in results:
        assert r["errors"] == 0 and r["ops"] > 0, r
    assert cells[("stoa", 0.5)]["throughput"] > 1.5 * cells[("3.5", 0.5)]["throughput"], cells
