"""multi (transactions) and multiRead, as ZooKeeper applies and reports them."""

import pytest
from kazoo.exceptions import (BadVersionError, NodeExistsError, NoNodeError,
                              NotEmptyError, RolledBackError, RuntimeInconsistency)

import harness as h
from harness import ERR, OP


def test_transaction_all_succeed(zk):
    """A transaction of create/set/check/delete applies every op and returns per-op results."""
    zk.create("/t", b"")
    zk.create("/t/del", b"")
    tx = zk.transaction()
    tx.create("/t/a", b"1")
    tx.create("/t/s-", b"", sequence=True)
    tx.set_data("/t", b"root", version=0)
    tx.check("/t/del", 0)
    tx.delete("/t/del", version=0)
    res = tx.commit()
    assert res[0] == "/t/a"
    assert res[1] == "/t/s-0000000002"
    assert res[2].version == 1          # ZnodeStat from setData
    assert res[3] is True and res[4] is True
    assert sorted(zk.get_children("/t")) == ["a", "s-0000000002"]
    assert zk.get("/t")[0] == b"root"


def test_transaction_zxid_is_shared(raw):
    """All ops of one multi get the same zxid."""
    raw.create("/z")
    err, res = raw.multi([
        ("create", "/z/a", b"", h.OPEN_ACL_UNSAFE, 0),
        ("create", "/z/b", b"", h.OPEN_ACL_UNSAFE, 0),
        ("set", "/z", b"x", -1),
    ])
    assert err == 0
    assert res[0][:2] == ("create", "/z/a") and res[1][:2] == ("create", "/z/b")
    za, zb = raw.exists("/z/a")["czxid"], raw.exists("/z/b")["czxid"]
    assert za == zb == res[2][1]["mzxid"]
    assert raw.exists("/z")["pzxid"] == za


def test_multi_create2_result(raw):
    """A create2 inside a multi returns its path (ZooKeeper >= 3.8.2/3.9 adds the stat, ZOOKEEPER-4026)."""
    raw.create("/c2")
    err, res = raw.multi([("create", "/c2/a", b"xy", h.OPEN_ACL_UNSAFE, 0)])
    assert err == 0 and res[0][:2] == ("create", "/c2/a")
    if len(res[0]) == 3:
        assert res[0][2] == raw.exists("/c2/a")


def test_transaction_failure_rolls_back(zk):
    """One failing op aborts the whole multi: earlier ops RolledBack, later RuntimeInconsistency."""
    zk.create("/f", b"orig")
    tx = zk.transaction()
    tx.create("/f/new", b"")
    tx.set_data("/f", b"changed")
    tx.create("/f", b"")              # fails: exists
    tx.delete("/f/new")
    res = tx.commit()
    assert isinstance(res[0], RolledBackError)
    assert isinstance(res[1], RolledBackError)
    assert isinstance(res[2], NodeExistsError)
    assert isinstance(res[3], RuntimeInconsistency)
    assert zk.exists("/f/new") is None
    data, st = zk.get("/f")
    assert data == b"orig" and st.version == 0 and st.cversion == 0


@pytest.mark.parametrize("bad_op,exc", [
    (lambda tx: tx.check("/g", 5), BadVersionError),
    (lambda tx: tx.check("/missing", 0), NoNodeError),
    (lambda tx: tx.set_data("/g", b"x", version=7), BadVersionError),
    (lambda tx: tx.delete("/g"), NotEmptyError),
    (lambda tx: tx.create("/missing/x", b""), NoNodeError),
])
def test_transaction_error_kinds(zk, bad_op, exc):
    """Each kind of failing op reports its own error in a multi and nothing is applied."""
    zk.create("/g/child", b"", makepath=True)
    tx = zk.transaction()
    tx.create("/g/new", b"")
    bad_op(tx)
    res = tx.commit()
    assert isinstance(res[0], RolledBackError)
    assert isinstance(res[1], exc)
    assert zk.exists("/g/new") is None


def test_transaction_sees_own_earlier_ops(zk):
    """Ops in a multi see the effects of earlier ops of the same multi."""
    tx = zk.transaction()
    tx.create("/in", b"")
    tx.create("/in/child", b"")
    tx.set_data("/in/child", b"v", version=0)
    tx.check("/in/child", 1)
    tx.delete("/in/child", version=1)
    res = tx.commit()
    assert res[0] == "/in" and res[1] == "/in/child" and res[4] is True
    assert zk.get_children("/in") == []
    assert zk.exists("/in").cversion == 2


def test_raw_multi_failure_reply(raw):
    """A failed multi replies with header err 0 and error results: 0 before, the code at, -2 after."""
    raw.create("/r")
    err, res = raw.multi([
        ("create", "/r/a", b"", h.OPEN_ACL_UNSAFE, 0),
        ("check", "/r", 3),
        ("delete", "/r/a", -1),
    ])
    assert res == [("error", 0), ("error", ERR.BAD_VERSION), ("error", ERR.RUNTIME_INCONSISTENCY)]
    assert err in (0, ERR.BAD_VERSION)
    assert raw.exists("/r/a") is None


def test_empty_multi(raw):
    """An empty multi succeeds with no results."""
    err, res = raw.multi([])
    assert err == 0 and res == []


def test_multi_read(raw):
    """multiRead returns per-op data/children or an error, without aborting other reads."""
    raw.create("/mr", b"d")
    raw.create("/mr/c1")
    raw.create("/mr/c2")
    err, res = raw.multi([("get_data", "/mr"), ("get_children", "/mr"), ("get_data", "/nope"),
                          ("get_children", "/mr/c1")], read=True)
    assert err == 0
    assert res[0][0] == "get_data" and res[0][1] == b"d" and res[0][2] == raw.exists("/mr")
    assert res[1][0] == "get_children" and sorted(res[1][1]) == ["c1", "c2"]
    assert res[2] == ("error", ERR.NO_NODE)
    assert res[3] == ("get_children", [])


def test_multi_with_read_op_is_rejected(raw):
    """A write multi containing a read op is refused as a whole (connection or error)."""
    raw.create("/mx")
    try:
        err, res = raw.multi([("create", "/mx/a", b"", h.OPEN_ACL_UNSAFE, 0), ("get_data", "/mx")])
    except h.ConnectionLost:
        pass
    else:
        assert err != 0 or any(r[0] == "error" and r[1] != 0 for r in res)
    c2 = h.RawClient(raw.sock.getpeername()[0] + ":%d" % raw.sock.getpeername()[1]) if raw.lost else raw
    try:
        assert c2.exists("/mx/a") is None
    finally:
        if c2 is not raw:
            c2.close()
