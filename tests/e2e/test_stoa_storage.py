"""Stoa's own storage and operations surface: snapshots, recovery from them,
the Prometheus endpoint and zoo.cfg warnings. ZooKeeper has other layouts, so
these run only against Stoa."""

import glob
import os
import urllib.request

import pytest

import harness as h

pytestmark = pytest.mark.skipif(h.target() != "stoa", reason="stoa-only: Stoa's data layout and endpoints")

SNAP_COUNT = 50
NODES = 400


def _fill(c, prefix, n):
    c.create(prefix)
    for i in range(n):
        c.create("%s/n%04d" % (prefix, i), b"v%d" % i)


def _check(c, prefix, n):
    kids = sorted(c.get_children(prefix)[0])
    assert kids == ["n%04d" % i for i in range(n)]
    for i in range(0, n, 37):
        assert c.get("%s/n%04d" % (prefix, i))[0] == b"v%d" % i


def _snapshots(srv):
    """Finished snapshots; one being written (snap-....tmp) is not yet one."""
    files = glob.glob(os.path.join(srv.data_dir, "snapshots", "snap-*"))
    return sorted(f for f in files if not f.endswith(".tmp"))


def test_snapshots_are_taken_and_a_restart_recovers_from_them(server_factory):
    """With a small snapCount, snapshots appear, old ones are pruned, and kill -9 + restart keeps every node."""
    srv = server_factory(extra_cfg={"snapCount": SNAP_COUNT})
    c = h.RawClient(srv.hosts)
    _fill(c, "/s", NODES)
    h.wait_until(lambda: len(_snapshots(srv)) >= 1, timeout=10, what="a snapshot file")
    # A new snapshot is renamed into place just before the oldest goes.
    h.wait_until(lambda: len(_snapshots(srv)) <= 2, timeout=10,
                 what="old snapshots pruned to the two newest")
    c.drop()
    srv.kill9()
    srv.start()
    assert "partition 0: recovered snapshot at index 0 " not in srv.log_tail(200).split("serving ZooKeeper")[-2], \
        "restart ignored the snapshots"
    c2 = h.RawClient(srv.hosts)
    _check(c2, "/s", NODES)
    c2.close()


def test_a_damaged_newest_snapshot_falls_back_to_the_older_one_and_the_log(server_factory):
    """Flipping a byte in the newest snapshot loses nothing: the older snapshot plus the WAL rebuild the tree."""
    srv = server_factory(extra_cfg={"snapCount": SNAP_COUNT})
    c = h.RawClient(srv.hosts)
    _fill(c, "/f", NODES)
    h.wait_until(lambda: len(_snapshots(srv)) >= 2, timeout=10, what="two snapshot files")
    c.close()
    srv.stop()
    newest = _snapshots(srv)[-1]
    with open(newest, "r+b") as f:
        f.seek(os.path.getsize(newest) // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))
    srv.start()
    assert "unreadable" in srv.log_tail(200)
    c2 = h.RawClient(srv.hosts)
    _check(c2, "/f", NODES)
    c2.close()


@pytest.mark.standalone_only("/metrics says server_state=\"follower\" on an ensemble member")
def test_prometheus_endpoint_serves_zookeeper_metric_names(server_factory):
    """metricsProvider.httpPort serves /metrics with ZooKeeper's Prometheus names."""
    port = h.free_port()
    srv = server_factory(extra_cfg={"metricsProvider.httpPort": port})
    c = h.RawClient(srv.hosts)
    c.create("/m")
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
    lines = dict(l.split(" ", 1) for l in text.splitlines() if l and not l.startswith("#"))
    assert int(lines["znode_count"]) >= 6
    assert int(lines["num_alive_connections"]) >= 1
    assert "server_state=\"standalone\"" in text
    c.close()


def test_unknown_zoo_cfg_keys_are_warned_about(server_factory):
    """A key Stoa does not know is named in a warning, not silently ignored."""
    srv = server_factory(extra_cfg={"no.such.key": "1"})
    assert "unknown key no.such.key" in srv.log_tail(100)


def test_null_data_stays_null_through_the_wal_and_a_snapshot(server_factory):
    """A znode created or set with null data reads back as null (not empty) after a restart that replays the WAL
    and after one that loads a snapshot holding it (ZooKeeper keeps the difference in its logs and snapshots)."""
    from kazoo.client import KazooClient
    srv = server_factory(extra_cfg={"snapCount": SNAP_COUNT})

    def read_back():
        c = KazooClient(hosts=srv.hosts)
        c.start(timeout=20)
        try:
            return [c.get(p)[0] for p in ("/null", "/empty", "/set-null")]
        finally:
            c.stop()

    c = KazooClient(hosts=srv.hosts)
    c.start(timeout=20)
    c.create("/null", None)
    c.create("/empty", b"")
    c.create("/set-null", b"x")
    c.set("/set-null", None)
    c.stop()
    expected = [None, b"", None]
    srv.kill9()
    srv.start()
    assert read_back() == expected
    # Past snapCount writes: the next start loads a snapshot holding the three nodes.
    _fill(h.RawClient(srv.hosts), "/filler", 2 * SNAP_COUNT)
    h.wait_until(lambda: len(_snapshots(srv)) >= 1, timeout=10, what="a snapshot file")
    srv.kill9()
    srv.start()
    assert "partition 0: recovered snapshot at index 0 " not in srv.log_tail(200).split("serving ZooKeeper")[-2], \
        "restart ignored the snapshots"
    assert read_back() == expected
