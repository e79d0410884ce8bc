"""Regions (issue 24 items 4 and 5): three participants in region EU, their
observer in region US, 50 ms of WAN round trip between (regions.py).

The observer serves US reads locally and forwards writes across the WAN;
a session's read on it never waits behind another session's pending
writes (ZooNet, section 4.1: per-client isolation).

Runs against Stoa in the plain pass; under STOA_TARGET=zookeeper the same
deployment is Debian's ZooKeeper, whose isolation figures are printed and
not asserted (ZooKeeper >= 3.6 has ZooNet's commit processor; what it
shows here is recorded in docs/regions.md). Skipped under stoa-ensemble
(conftest) and with STOA_PARTITIONS > 1: the test starts its own
ensemble, once is enough.
"""

import os
import time

import pytest

import harness as h
import isolation
import regions

WAN_RTT_MS = 50.0
WAN_JITTER_MS = 2.0
LAYOUT = [["participant"] * 3, ["observer"]]  # EU, US

pytestmark = [
    pytest.mark.skipif(h.stoa_partitions() > 1 and h.target() == "stoa",
                       reason="starts its own ensemble: runs in the partitions=1 pass"),
    pytest.mark.skipif(h.target() == "zookeeper"
                       and not os.path.exists("/usr/share/java/zookeeper.jar"),
                       reason="ZooKeeper's jar (/usr/share/java/zookeeper.jar) is not installed"),
]


@pytest.fixture(scope="module")
def deployment(request, namespaces_allowed):
    return regions.start_deployment(request, LAYOUT, kind=h.target(), wan_rtt_ms=WAN_RTT_MS,
                                    wan_jitter_ms=WAN_JITTER_MS)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def test_the_far_observer_reads_locally_and_writes_across_the_wan(deployment):
    observer = deployment.observers()[0]
    eu = deployment.leader()
    assert eu in deployment.in_region(0), "the leader is a participant, in EU"
    us = h.RawClient(observer.hosts)
    home = h.RawClient(eu.hosts)
    try:
        # Writes from US travel to the EU leader and back: a WAN round trip each.
        us.create("/regions-us", b"0")
        writes = [timed(lambda: us.set("/regions-us", b"1")) for _ in range(5)]
        assert min(writes) >= WAN_RTT_MS - 2 * WAN_JITTER_MS, writes
        reads = [timed(lambda: us.get("/regions-us")) for _ in range(20)]
        assert sorted(reads)[10] < WAN_RTT_MS / 5, reads
        # Within one session order holds: a read sent behind the session's
        # own writes waits for them, so a queue, where there is one, shows.
        body = bytes(h.W().string("/regions-us").buffer(b"2").int(-1).b)
        pending = [us.send(h.OP.SET_DATA, body) for _ in range(10)]
        t0 = time.perf_counter()
        seen = us.get("/regions-us")[0]
        behind_own_writes = (time.perf_counter() - t0) * 1e3
        assert all(q.get(timeout=10).err == 0 for q in pending)
        assert seen == b"2", "a read sees its session's earlier writes"
        assert behind_own_writes >= WAN_RTT_MS - 2 * WAN_JITTER_MS, behind_own_writes
        # What EU writes reaches US (after sync, at once).
        home.create("/regions-eu", b"from eu")
        us.sync("/regions-eu")
        assert us.get("/regions-eu")[0] == b"from eu"
    finally:
        us.close()
        home.close()


def test_a_read_never_waits_behind_another_sessions_writes(deployment, capsys):
    """Session A keeps 100 writes in flight on the US observer, each a WAN
    round trip to the EU leader; session B reads on the same observer.
    B's reads stay at LAN latency: far below the round trip A's writes
    wait, where reads queued behind them would be."""
    observer = deployment.observers()[0]
    r = isolation.measure(observer.hosts, reads=150, outstanding=100)
    alone, contended, writes = r["alone"], r["contended"], r["writes"]
    line = ("%s observer, %s: B's reads alone p50 %.2f ms p99 %.2f ms; with A's 100 writes "
            "in flight p50 %.2f ms p90 %.2f ms p99 %.2f ms; A's writes p50 %.1f ms (%d)"
            % (h.target(), deployment.topo.describe(), alone["p50_ms"], alone["p99_ms"],
               contended["p50_ms"], contended["p90_ms"], contended["p99_ms"],
               writes["p50_ms"], writes["n"]))
    with capsys.disabled():
        print("\n" + line)
    # The load is what it should be: A's writes each waited for the WAN.
    assert writes["p50_ms"] >= WAN_RTT_MS - 2 * WAN_JITTER_MS, line
    assert writes["n"] >= 500, line
    if h.target() == "zookeeper":
        return  # recorded, not asserted (module doc)
    # Reads behind pending writes would take about a round trip each; a
    # busy 2-core machine costs B a few ms (p90 9 ms with two CPU hogs
    # running beside the test), never that.
    assert contended["p50_ms"] < WAN_RTT_MS / 10, line
    assert contended["p90_ms"] < WAN_RTT_MS / 3, line
