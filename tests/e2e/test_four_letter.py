"""Four letter words, parsed the way monitoring clients parse them."""

import re

import pytest

import harness
from harness import CreateMode

NODE_COUNT = 7   # see test_srvr


@pytest.fixture
def busy(raw):
    """A session with one ephemeral and one watch, so counts are non-trivial."""
    raw.create("/fl")
    raw.create("/fl/e", mode=CreateMode.EPHEMERAL)
    raw.get("/fl", watch=True)
    return raw


def test_ruok(server):
    """ruok answers imok."""
    assert server.four_letter("ruok") == "imok"


@pytest.mark.standalone_only("srvr says 'Mode: follower' on an ensemble member")
def test_srvr(server, busy):
    """srvr has version, latency, counts, zxid, mode standalone and node count."""
    out = server.four_letter("srvr")
    assert re.search(r"^Zookeeper version: \S+", out, re.M)
    assert re.search(r"^Latency min/avg/max: \d+/[\d.]+/\d+$", out, re.M)
    assert re.search(r"^Received: \d+$", out, re.M)
    assert re.search(r"^Sent: \d+$", out, re.M)
    assert re.search(r"^Connections: \d+$", out, re.M)
    assert re.search(r"^Outstanding: \d+$", out, re.M)
    m = re.search(r"^Zxid: 0x([0-9a-f]+)$", out, re.M)
    assert m and int(m.group(1), 16) >= busy.last_zxid
    assert re.search(r"^Mode: standalone$", out, re.M)
    m = re.search(r"^Node count: (\d+)$", out, re.M)
    # ZooKeeper's DataTree holds the root under both "" and "/", so its count is
    # one more than the znodes: root, /zookeeper, /zookeeper/config,
    # /zookeeper/quota, /fl, /fl/e -> 6 znodes, "Node count: 7".
    assert m and int(m.group(1)) == NODE_COUNT


@pytest.mark.standalone_only("stat says 'Mode: follower' on an ensemble member")
def test_stat(server, busy):
    """stat is srvr plus a Clients: section listing connections."""
    out = server.four_letter("stat")
    assert re.search(r"^Zookeeper version: ", out, re.M)
    assert re.search(r"^Clients:$", out, re.M)
    assert re.search(r"^ /127\.0\.0\.1:\d+\[\d+\]\(queued=\d+,recved=\d+,sent=\d+", out, re.M)
    assert re.search(r"^Mode: standalone$", out, re.M)
    assert re.search(r"^Node count: %d$" % NODE_COUNT, out, re.M)


@pytest.mark.standalone_only("mntr's zk_server_state is follower on an ensemble member")
def test_mntr(server, busy):
    """mntr is tab-separated key/value lines with the standard keys."""
    out = server.four_letter("mntr")
    kv = {}
    for line in out.splitlines():
        if not line:
            continue
        k, v = line.split("\t", 1)
        kv[k] = v
    for key in ("zk_version", "zk_avg_latency", "zk_max_latency", "zk_min_latency",
                "zk_packets_received", "zk_packets_sent", "zk_num_alive_connections",
                "zk_outstanding_requests", "zk_server_state", "zk_znode_count",
                "zk_watch_count", "zk_ephemerals_count", "zk_approximate_data_size"):
        assert key in kv, key
    assert kv["zk_server_state"] == "standalone"
    assert int(kv["zk_znode_count"]) == NODE_COUNT
    assert int(kv["zk_ephemerals_count"]) == 1
    assert int(kv["zk_watch_count"]) >= 1
    assert int(kv["zk_num_alive_connections"]) >= 1


def _mntr_value(server, key):
    kv = dict(line.split("\t", 1) for line in server.four_letter("mntr").splitlines() if "\t" in line)
    return int(kv[key])


def test_mntr_data_size_follows_creates_sets_and_deletes(server, raw):
    """zk_approximate_data_size counts each node's path and data bytes, as nodes come, change and go."""
    before = _mntr_value(server, "zk_approximate_data_size")
    raw.create("/ds-node", b"0123456789")
    assert _mntr_value(server, "zk_approximate_data_size") == before + len("/ds-node") + 10
    raw.set("/ds-node", b"abc")
    assert _mntr_value(server, "zk_approximate_data_size") == before + len("/ds-node") + 3
    raw.delete("/ds-node")
    assert _mntr_value(server, "zk_approximate_data_size") == before


@pytest.mark.skipif(harness.target() != "stoa", reason="a Stoa figure")
def test_mntr_reports_the_partitions_the_server_runs(server):
    """stoa_partitions is the configured partition count (STOA_PARTITIONS),
    and each partition's group reports a term, a leader and its progress."""
    partitions = harness.stoa_partitions()
    assert _mntr_value(server, "stoa_partitions") == partitions
    for p in range(partitions):
        assert _mntr_value(server, "stoa_partition_%d_term" % p) >= 1
        assert _mntr_value(server, "stoa_partition_%d_leader" % p) >= 1
        applied = _mntr_value(server, "stoa_partition_%d_applied_index" % p)
        assert applied <= _mntr_value(server, "stoa_partition_%d_last_index" % p)
    assert "stoa_partition_%d_term" % partitions not in server.four_letter("mntr")


@pytest.mark.skipif(harness.target() != "stoa", reason="a Stoa figure")
@pytest.mark.standalone_only("an ensemble keeps every batch with the WAL thread")
def test_a_lone_synchronous_writer_has_its_batches_synced_inline(server, raw):
    """One client writing synchronously: the server's main thread writes and
    fdatasyncs each batch itself instead of handing it to the WAL thread
    (docs/performance.md); every write still survives, as test_crash checks."""
    before = _mntr_value(server, "stoa_wal_fsyncs_inline")
    raw.create("/inline", b"")
    # Any other traffic (another client's ping) keeps batches with the WAL
    # thread for 20 ms: a few hundred writes leave room for that.
    for i in range(400):
        raw.set("/inline", b"%d" % i)
        if i % 50 == 49 and _mntr_value(server, "stoa_wal_fsyncs_inline") - before >= 40:
            break
    inline = _mntr_value(server, "stoa_wal_fsyncs_inline") - before
    assert inline >= 40, inline
    assert _mntr_value(server, "stoa_wal_fsyncs") >= _mntr_value(server, "stoa_wal_fsyncs_inline")
    assert raw.get("/inline")[0] == b"%d" % i


def test_conf(server):
    """conf lists key=value lines including clientPort, dataDir, tickTime and session bounds."""
    out = server.four_letter("conf")
    kv = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert int(kv["clientPort"]) == server.port
    assert int(kv["tickTime"]) == server.tick_time
    assert int(kv["minSessionTimeout"]) == server.min_session_timeout
    assert int(kv["maxSessionTimeout"]) == server.max_session_timeout
    assert "dataDir" in kv


def test_envi(server):
    """envi starts with Environment: and has zookeeper.version=."""
    out = server.four_letter("envi")
    assert out.startswith("Environment:")
    assert re.search(r"^zookeeper\.version=\S+", out, re.M)
    assert re.search(r"^host\.name=", out, re.M)


def test_cons(server, busy):
    """cons lists each connection with its session id and counters."""
    out = server.four_letter("cons")
    m = re.search(r"^ /127\.0\.0\.1:\d+\[1\]\(queued=\d+,recved=\d+,sent=\d+,sid=0x([0-9a-f]+),", out, re.M)
    assert m
    sids = [int(x, 16) for x in re.findall(r"sid=0x([0-9a-f]+)", out)]
    assert busy.session_id in sids


def test_wchs_wchc_wchp(server, busy):
    """wchs summarises watches, wchc lists them by session, wchp by path."""
    wchs = server.four_letter("wchs")
    assert re.search(r"^\d+ connections watching \d+ paths$", wchs, re.M)
    assert re.search(r"^Total watches:\d+$", wchs, re.M)
    wchc = server.four_letter("wchc")
    assert re.search(r"^0x%x$" % busy.session_id, wchc, re.M)
    assert re.search(r"^\t/fl$", wchc, re.M)
    wchp = server.four_letter("wchp")
    assert re.search(r"^/fl$", wchp, re.M)
    assert re.search(r"^\t0x%x$" % busy.session_id, wchp, re.M)


def test_dump(server, busy):
    """dump lists sessions and the ephemeral nodes of each session."""
    out = server.four_letter("dump")
    assert "Sessions with Ephemerals" in out
    assert re.search(r"^0x%x:$" % busy.session_id, out, re.M)
    assert re.search(r"^\t/fl/e$", out, re.M)


def test_isro(server):
    """isro answers rw on a writable server."""
    assert server.four_letter("isro") == "rw"


def test_srst_resets_counters(server, busy):
    """srst resets the server statistics."""
    assert server.four_letter("srst").startswith("Server stats reset")
    out = server.four_letter("srvr")
    m = re.search(r"^Received: (\d+)$", out, re.M)
    assert m and int(m.group(1)) < 5
