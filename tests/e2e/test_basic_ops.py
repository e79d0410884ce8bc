"""Basic znode operations, checked against what Apache ZooKeeper does."""

import pytest
from kazoo.exceptions import (BadArgumentsError, BadVersionError, ConnectionLoss,
                              NoChildrenForEphemeralsError, NodeExistsError,
                              NoNodeError, NotEmptyError)

import harness as h
from harness import ERR, CreateMode, ZkError, wait_until


def test_create_persistent_and_stat(zk):
    """A persistent create returns its path, and exists/get report a fresh stat."""
    assert zk.create("/p", b"hello") == "/p"
    data, st = zk.get("/p")
    assert data == b"hello"
    assert st.version == 0 and st.cversion == 0 and st.aversion == 0
    assert st.ephemeralOwner == 0
    assert st.dataLength == 5 and st.numChildren == 0
    assert st.czxid == st.mzxid == st.pzxid > 0
    assert st.ctime == st.mtime > 0
    assert zk.exists("/p") == st
    assert zk.exists("/missing") is None


def test_create_returns_stat_create2(zk):
    """create with include_data (create2) returns the same stat as exists."""
    path, st = zk.create("/p2", b"d", include_data=True)
    assert path == "/p2"
    assert zk.exists("/p2") == st


def test_set_increments_version_and_mzxid(zk):
    """setData bumps version and mzxid, keeps czxid and ctime; a stale version is refused."""
    zk.create("/v", b"a")
    st0 = zk.exists("/v")
    st1 = zk.set("/v", b"bb", version=0)
    assert st1.version == 1 and st1.mzxid > st0.mzxid
    assert st1.czxid == st0.czxid and st1.ctime == st0.ctime
    assert st1.mtime >= st0.mtime and st1.dataLength == 2
    assert st1.pzxid == st0.pzxid  # pzxid only moves with children
    with pytest.raises(BadVersionError):
        zk.set("/v", b"c", version=0)
    st2 = zk.set("/v", b"c", version=-1)
    assert st2.version == 2
    assert zk.get("/v")[0] == b"c"


def test_delete_with_version(zk):
    """delete honours the version: a wrong one raises BadVersionError, the right one deletes."""
    zk.create("/d", b"")
    zk.set("/d", b"x")
    with pytest.raises(BadVersionError):
        zk.delete("/d", version=0)
    zk.delete("/d", version=1)
    assert zk.exists("/d") is None
    with pytest.raises(NoNodeError):
        zk.delete("/d")


def test_child_changes_move_cversion_and_pzxid(zk):
    """Creating and deleting children increments cversion and sets pzxid to that txn's zxid."""
    zk.create("/par", b"")
    st0 = zk.exists("/par")
    _, cst = zk.create("/par/a", b"", include_data=True)
    st1 = zk.exists("/par")
    assert st1.cversion == st0.cversion + 1
    assert st1.pzxid == cst.czxid
    assert st1.numChildren == 1
    assert st1.version == st0.version and st1.mzxid == st0.mzxid  # data untouched
    zk.delete("/par/a")
    st2 = zk.exists("/par")
    assert st2.cversion == st0.cversion + 2
    assert st2.pzxid > st1.pzxid
    assert st2.numChildren == 0
    zk.set("/par", b"x")
    assert zk.exists("/par").pzxid == st2.pzxid


def test_delete_not_empty(zk):
    """Deleting a node with children fails with NotEmptyError."""
    zk.create("/ne/child", makepath=True)
    with pytest.raises(NotEmptyError):
        zk.delete("/ne")
    assert zk.exists("/ne/child")


def test_create_existing_and_missing_parent(zk):
    """Create on an existing path is NodeExistsError; under a missing parent NoNodeError."""
    zk.create("/x", b"")
    with pytest.raises(NodeExistsError):
        zk.create("/x", b"")
    with pytest.raises(NoNodeError):
        zk.create("/nope/child", b"")
    with pytest.raises(NoNodeError):
        zk.create("/nope/child", b"", sequence=True)


def test_makepath(zk):
    """makepath creates all missing ancestors as persistent empty nodes."""
    zk.create("/m1/m2/m3", b"leaf", makepath=True)
    assert zk.get("/m1/m2/m3")[0] == b"leaf"
    assert zk.get("/m1")[0] == b""
    assert zk.exists("/m1").ephemeralOwner == 0


def test_ephemeral_owner_is_session(zk):
    """An ephemeral node's ephemeralOwner is the creating session's id."""
    zk.create("/eph", b"", ephemeral=True)
    assert zk.exists("/eph").ephemeralOwner == zk.client_id[0]


def test_no_children_for_ephemerals(zk):
    """Any create under an ephemeral node fails with NoChildrenForEphemeralsError."""
    zk.create("/eph2", b"", ephemeral=True)
    with pytest.raises(NoChildrenForEphemeralsError):
        zk.create("/eph2/c", b"")
    with pytest.raises(NoChildrenForEphemeralsError):
        zk.create("/eph2/c", b"", ephemeral=True)


def test_sequential_names_and_counter(zk):
    """Sequential names are prefix + 10-digit counter; the counter counts child creates, not deletes.

    ZooKeeper takes the suffix from the parent's cversion as its request
    pipeline sees it, which child creates bump and child deletes do not, while
    the Stat.cversion clients read counts creates and deletes.
    """
    zk.create("/seq", b"")
    a = zk.create("/seq/n-", b"", sequence=True)
    b = zk.create("/seq/n-", b"", sequence=True)
    assert a == "/seq/n-0000000000" and b == "/seq/n-0000000001"
    zk.create("/seq/other", b"")           # third create
    zk.delete("/seq/other")
    assert zk.exists("/seq").cversion == 4   # 3 creates + 1 delete
    c = zk.create("/seq/n-", b"", sequence=True)
    assert c == "/seq/n-0000000003"
    zk.delete(a)
    zk.delete(b)
    d = zk.create("/seq/", b"", sequence=True)   # empty prefix
    assert d == "/seq/0000000004"
    e = zk.create("/seq/e-", b"", sequence=True, ephemeral=True)
    assert e == "/seq/e-0000000005"
    assert zk.exists(e).ephemeralOwner == zk.client_id[0]
    assert zk.exists("/seq").cversion == 9   # 6 creates + 3 deletes


def test_sequence_counter_from_failed_create_is_unchanged(zk):
    """A sequential create that fails (node exists) does not advance the counter."""
    zk.create("/sq", b"")
    zk.create("/sq/a0000000000", b"")   # 1 create: next suffix 1
    zk.create("/sq/a0000000002", b"")   # 2 creates: next suffix 2
    with pytest.raises(NodeExistsError):
        zk.create("/sq/a", b"", sequence=True)  # a0000000002 exists
    assert zk.exists("/sq").cversion == 2
    assert zk.create("/sq/b", b"", sequence=True) == "/sq/b0000000002"


def test_get_children_and_include_data(zk):
    """get_children lists names (unordered) and include_data returns the parent's stat."""
    zk.create("/gc", b"")
    for n in ("b", "a", "c"):
        zk.create("/gc/" + n, n.encode())
    assert sorted(zk.get_children("/gc")) == ["a", "b", "c"]
    children, st = zk.get_children("/gc", include_data=True)
    assert sorted(children) == ["a", "b", "c"]
    assert st == zk.exists("/gc") and st.numChildren == 3
    with pytest.raises(NoNodeError):
        zk.get_children("/nope")


def test_zookeeper_system_node(zk):
    """/zookeeper exists with children config and quota and cannot be deleted."""
    assert zk.exists("/zookeeper") is not None
    assert sorted(zk.get_children("/zookeeper")) == ["config", "quota"]
    with pytest.raises(BadArgumentsError):
        zk.delete("/zookeeper/quota")
    with pytest.raises(BadArgumentsError):
        zk.delete("/zookeeper/config")
    with pytest.raises(BadArgumentsError):
        zk.delete("/zookeeper")


def test_root_stat_and_root_delete(raw):
    """The root has czxid 0 and cannot be deleted (BadArguments)."""
    st = raw.exists("/")
    assert st["czxid"] == 0 and st["ctime"] == 0
    with pytest.raises(ZkError) as ei:
        raw.delete("/")
    assert ei.value.code == ERR.BAD_ARGUMENTS


def test_sync(zk):
    """sync returns the path and later reads see earlier writes."""
    zk.create("/s", b"1")
    assert zk.sync("/s") == "/s"
    assert zk.get("/s")[0] == b"1"


@pytest.mark.parametrize("path,code", [
    ("", ERR.BAD_ARGUMENTS),
    ("a", ERR.BAD_ARGUMENTS),
    ("/a/", ERR.BAD_ARGUMENTS),
    ("//a", ERR.BAD_ARGUMENTS),
    ("/a\x00b", ERR.BAD_ARGUMENTS),
    ("/a\x01", ERR.BAD_ARGUMENTS),
    ("/a/./b", ERR.NO_NODE),      # the parent "/a/." is looked up first and is missing
    ("/a/../b", ERR.NO_NODE),
])
def test_bad_paths_raw(raw, path, code):
    """Invalid paths are refused by the server itself (kazoo validates some client-side)."""
    raw.create("/a")
    with pytest.raises(ZkError) as ei:
        raw.create(path)
    assert ei.value.code == code
    assert not raw.lost


def test_bad_path_dot_component_rejected(raw):
    """A path component '.' or '..' is a bad argument when its parent exists."""
    raw.create("/a")
    for p in ("/a/.", "/a/..", "/a/./b"):
        with pytest.raises(ZkError) as ei:
            raw.create(p)
        assert ei.value.code in (ERR.BAD_ARGUMENTS, ERR.NO_NODE), p
    with pytest.raises(ZkError) as ei:
        raw.create("/a/.")
    assert ei.value.code == ERR.BAD_ARGUMENTS


def test_container_node(raw, server):
    """A container reports ephemeralOwner 0 and is removed after its last child goes."""
    path, st = raw.create("/cont", mode=CreateMode.CONTAINER)
    assert path == "/cont"
    assert st["ephemeralOwner"] == 0
    assert raw.exists("/cont")["ephemeralOwner"] == 0
    raw.create("/cont/child")
    raw.delete("/cont/child")
    wait_until(lambda: raw.exists("/cont") is None, timeout=10, what="container removal")


def test_empty_container_never_used_stays(raw, server):
    """A container that never had a child (cversion 0) is not removed."""
    raw.create("/cont0", mode=CreateMode.CONTAINER)
    # two check intervals (500 ms each) are enough for the manager to have looked
    import time
    time.sleep(3 * server.container_check_ms / 1000.0)
    assert raw.exists("/cont0") is not None


def test_ttl_node(raw):
    """A TTL node reports ephemeralOwner 0 and expires after its TTL when childless."""
    path, st = raw.create("/ttl", b"x", mode=CreateMode.PERSISTENT_WITH_TTL, ttl=500)
    assert path == "/ttl" and st["ephemeralOwner"] == 0
    name, _ = raw.create("/ttlseq-", mode=CreateMode.PERSISTENT_SEQUENTIAL_WITH_TTL, ttl=100000)
    assert name.startswith("/ttlseq-") and len(name) == len("/ttlseq-") + 10
    wait_until(lambda: raw.exists("/ttl") is None, timeout=10, what="ttl expiry")
    assert raw.exists(name) is not None


@pytest.mark.parametrize("ttl", [0, -1, 2 ** 40 + 1])
def test_ttl_out_of_range(raw, ttl):
    """createTTL with a TTL outside (0, 2^40) is BadArguments."""
    with pytest.raises(ZkError) as ei:
        raw.create("/ttlbad", mode=CreateMode.PERSISTENT_WITH_TTL, ttl=ttl)
    assert ei.value.code == ERR.BAD_ARGUMENTS


def test_ttl_with_non_ttl_mode(raw):
    """createTTL with a non-TTL create mode is BadArguments."""
    body = h.W().string("/t3").buffer(b"").acls(h.OPEN_ACL_UNSAFE).int(0).long(100).b
    rep = raw.request(h.OP.CREATE_TTL, body)
    assert rep.err == ERR.BAD_ARGUMENTS


def test_get_ephemerals(raw, make_raw):
    """getEphemerals lists the session's own ephemerals under a prefix, not others'."""
    raw.create("/ge")
    raw.create("/ge/e1", mode=CreateMode.EPHEMERAL)
    raw.create("/ge/e2", mode=CreateMode.EPHEMERAL)
    raw.create("/ge/p")
    other = make_raw()
    other.create("/ge/o1", mode=CreateMode.EPHEMERAL)
    assert sorted(raw.get_ephemerals("/")) == ["/ge/e1", "/ge/e2"]
    assert sorted(raw.get_ephemerals("/ge/e1")) == ["/ge/e1"]
    assert other.get_ephemerals("/") == ["/ge/o1"]


def test_get_all_children_number(raw):
    """getAllChildrenNumber counts all descendants, and fails with NoNode on a missing path."""
    raw.create("/n")
    raw.create("/n/a")
    raw.create("/n/a/b")
    raw.create("/n/c")
    assert raw.get_all_children_number("/n") == 3
    assert raw.get_all_children_number("/n/c") == 0
    # root: /n subtree (4) + /zookeeper, /zookeeper/config, /zookeeper/quota
    assert raw.get_all_children_number("/") == 7
    with pytest.raises(ZkError) as ei:
        raw.get_all_children_number("/missing")
    assert ei.value.code == ERR.NO_NODE


def test_large_data_accepted(zk):
    """Data just under 1 MiB (jute.maxbuffer) is stored and read back intact."""
    data = bytes(range(256)) * ((1024 * 1024 - 1024) // 256)
    zk.create("/big", data)
    assert zk.get("/big")[0] == data


def test_oversized_request_closes_connection(server, make_raw):
    """A request larger than 1 MiB makes the server close the connection."""
    c = make_raw()
    with pytest.raises(h.ConnectionLost):
        c.create("/toobig", b"x" * (1024 * 1024 + 16))
    # the send can fail before the reader thread has seen the close
    h.wait_until(lambda: c.lost, timeout=5, what="connection marked lost")
    c2 = make_raw()
    assert c2.exists("/toobig") is None


def test_oversized_set_via_kazoo(zk):
    """kazoo sees an over-limit setData as ConnectionLoss and the value is unchanged."""
    zk.create("/big2", b"small")
    with pytest.raises(ConnectionLoss):
        zk.set("/big2", b"y" * (1024 * 1024 + 16))
    wait_until(lambda: zk.connected, timeout=10, what="kazoo reconnect")
    assert zk.get("/big2")[0] == b"small"


def test_create_v1_returns_path(raw):
    """The old create opcode (1) returns only the actual path."""
    assert raw.create_v1("/old", b"d") == "/old"
    assert raw.create_v1("/old/s-", b"", mode=CreateMode.PERSISTENT_SEQUENTIAL) == "/old/s-0000000000"


def test_get_missing(zk):
    """get/set on a missing node raise NoNodeError."""
    with pytest.raises(NoNodeError):
        zk.get("/missing")
    with pytest.raises(NoNodeError):
        zk.set("/missing", b"")


def test_null_data_reads_back_as_null_and_empty_as_empty(zk):
    """ZooKeeper keeps null data (a buffer of length -1) apart from empty data: a znode created or set with null
    reads back as None, one with b'' as b''; both report dataLength 0 (kazoo's test_create_null_data and
    test_set_null_data)."""
    zk.create("/null", None)
    zk.create("/empty", b"")
    zk.create("/full", b"x")
    assert zk.get("/null")[0] is None
    assert zk.get("/empty")[0] == b""
    assert zk.get("/null")[1].dataLength == 0
    zk.set("/full", None)
    assert zk.get("/full")[0] is None
    zk.set("/null", b"back")
    assert zk.get("/null")[0] == b"back"
    zk.set("/null", None)
    assert zk.get("/null")[0] is None
    assert zk.get("/null")[1].version == 2
