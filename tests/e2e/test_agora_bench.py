"""bench/partitions/agora.py smoke test (issue 23's AGORA Figs. 6-10): its
tiny grid (--quick: one round, 0.6 s runs; under a minute) starts servers
of one, two and three partitions, runs every figure with `stoa bench` and
the load balancer (the WAL thread's groups included), and must come back
with sane figures, so the benchmark cannot rot. Skipped outside the plain Stoa pass: it starts its own
servers, with their partitions named (once is enough).
"""

import json
import math
import os
import subprocess
import sys


import harness as h

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
AGORA = os.path.join(ROOT, "bench", "partitions", "agora.py")

pytestmark = h.plain_stoa_pass_only("Stoa servers")


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def test_agora_quick_run_produces_every_figure(tmp_path):
    env = dict(os.environ, STOA_BIN=h.stoa_bin())
    p = subprocess.run([sys.executable, AGORA, "--quick", "--out", str(tmp_path),
                        "--max-seconds", "90"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=150, env=env, stdin=subprocess.DEVNULL)
    out = p.stdout
    assert p.returncode == 0, out[-4000:]
    for heading in ("### Targets (issue 23)", "### Figs. 6/7", "### Fig. 8", "### Fig. 9",
                    "### Fig. 10", "### Fast reads and fast watches", "### The WAL thread's CPU", "### A model of the scaling",
                    "### Which machine gave which figure"):
        assert heading in out, (heading, out[-4000:])
    with open(tmp_path / "agora.json") as f:
        run = json.load(f)
    assert not run["notes"] or not any("max-seconds" in n for n in run["notes"]), run["notes"]
    by_figure = {}
    for r in run["results"]:
        by_figure.setdefault(r["figure"], []).append(r)
    assert set(by_figure) == {"throughput", "latency", "switching", "rebalance", "fast", "wal"}

    # Figs. 6/7: both configurations, every cell served without errors,
    # with the server's CPU per op and its split by thread.
    tr = by_figure["throughput"]
    assert {r["config"] for r in tr} == {"P=1", "P=2"}
    for r in tr:
        assert r["errors"] == 0 and r["throughput"] > 0, r
        assert finite(r["cpu_us_per_op"]) and r["cpu_us_per_op"] > 0, r
        assert r["threads_us_per_op"]["engine"] > 0, r
    s = run["summary"]
    for r in s["throughput"]:
        if r["config"] == "P=2":
            for key in ("vs_p1_throughput", "vs_p1_cpu"):
                assert finite(r[key]["median"]) and r[key]["median"] > 0, r
    # Fast reads and watches: both kinds of session served without errors on
    # the owned server, only the opted-in ones counted as skipping waits.
    fast = {r["way"]: r for r in by_figure["fast"]}
    assert set(fast) == {"plain", "fast"}, fast
    for r in fast.values():
        assert r["errors"] == 0 and r["throughput"] > 0, r
        assert r["config"] == "P=2, partition.owned=yes", r
    assert fast["plain"]["counters"]["stoa_reads_fast"] == 0, fast["plain"]
    # Fig. 8: open loop near its offered rate, latencies ordered.
    for r in by_figure["latency"]:
        assert r["errors"] == 0 and r["throughput"] > 0.5 * r["offered"], r
        assert 0 < r["p50_ms"] <= r["p99_ms"], r
    # Fig. 9: every way at both P, ratios to no switch finite.
    ways = {(r["config"], r["op"], r["way"]) for r in by_figure["switching"]}
    assert len(ways) == 12, ways
    for r in s["switching"]:
        if r["way"] != "none":
            assert finite(r["vs_none_throughput"]["median"]), r
    # Fig. 10: the skew is rebalanced, by a move after the skew began.
    rb = by_figure["rebalance"]
    assert any(r["move_s"] is not None and r["moves"] >= 1 for r in rb), rb
    for r in rb:
        assert not r["moved_before_skew"], r
        if r["move_s"] is not None:
            assert r["placement_after"] != r["placement_before"], r
    # The WAL figure: each load's writes went through the WAL thread's
    # groups, and the heavier load gathered more writes per group.
    wal = s["wal"]
    assert len(wal) == 2, wal
    for r in wal:
        assert r["throughput"] > 0 and r["writes_per_group"] >= 1, r
        assert finite(r["wal_us_per_group"]) and r["wal_us_per_group"] > 0, r
    assert wal[1]["writes_per_group"] > wal[0]["writes_per_group"], wal
    # The model: P=1 is 1.0 in every variant, everything finite.
    for kind in ("writes", "reads"):
        for name, series in run["model"][kind].items():
            assert abs(series["1"] - 1.0) < 1e-6, (name, series)
            assert all(finite(v) and v > 0 for v in series.values()), (name, series)
    assert len(run["targets"]) >= 4
    assert (tmp_path / "agora.md").exists()
