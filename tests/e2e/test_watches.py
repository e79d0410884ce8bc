"""Watches: one-shot, persistent, recursive, removal, ordering."""

import threading
import time

import pytest
from kazoo.protocol.states import EventType as KEvent

import harness as h
from harness import ERR, EventType, WatchMode, WatcherType, ZkError, wait_until


class Recorder:
    def __init__(self):
        self.events = []
        self.cv = threading.Condition()

    def __call__(self, ev):
        with self.cv:
            self.events.append(ev)
            self.cv.notify_all()

    def wait(self, n, timeout=10):
        deadline = time.monotonic() + timeout
        with self.cv:
            while len(self.events) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("expected %d events, got %r" % (n, self.events))
                self.cv.wait(left)
            return list(self.events)


def quiet(predicate_events, settle=0.3):
    """Give stray events a short chance to arrive, then return them."""
    time.sleep(settle)
    return predicate_events()


def test_data_watch_fires_once_on_set(zk, make_client):
    """A getData watch fires exactly once (CHANGED) however many sets follow."""
    other = make_client()
    zk.create("/w", b"0")
    rec = Recorder()
    zk.get("/w", watch=rec)
    other.set("/w", b"1")
    other.set("/w", b"2")
    evs = rec.wait(1)
    assert evs[0].type == KEvent.CHANGED and evs[0].path == "/w"
    assert len(quiet(lambda: rec.events)) == 1


def test_data_watch_on_delete(zk, make_client):
    """A getData watch fires DELETED when the node is deleted."""
    other = make_client()
    zk.create("/wd", b"")
    rec = Recorder()
    zk.get("/wd", watch=rec)
    other.delete("/wd")
    assert rec.wait(1)[0].type == KEvent.DELETED


def test_child_watch_create_and_delete(zk, make_client):
    """A getChildren watch fires CHILD on a child create, and again (re-armed) on a child delete."""
    other = make_client()
    zk.create("/cw", b"")
    rec = Recorder()
    zk.get_children("/cw", watch=rec)
    other.set("/cw", b"data change does not trigger a child watch")
    other.create("/cw/a", b"")
    assert rec.wait(1)[0].type == KEvent.CHILD
    zk.get_children("/cw", watch=rec)
    other.delete("/cw/a")
    evs = rec.wait(2)
    assert evs[1].type == KEvent.CHILD and evs[1].path == "/cw"
    assert len(quiet(lambda: rec.events)) == 2


def test_child_watch_on_parent_delete(zk, make_client):
    """A getChildren watch fires DELETED when the watched node itself is deleted."""
    other = make_client()
    zk.create("/cwd", b"")
    rec = Recorder()
    zk.get_children("/cwd", watch=rec)
    other.delete("/cwd")
    assert rec.wait(1)[0].type == KEvent.DELETED


def test_exists_watch_on_missing_node(zk, make_client):
    """exists() on a missing node leaves a watch that fires CREATED on creation."""
    other = make_client()
    rec = Recorder()
    assert zk.exists("/later", watch=rec) is None
    other.create("/later", b"")
    ev = rec.wait(1)[0]
    assert ev.type == KEvent.CREATED and ev.path == "/later"


def test_exists_watch_on_existing_node_data_change(zk, make_client):
    """exists() on an existing node leaves a data watch that fires CHANGED."""
    other = make_client()
    zk.create("/ex", b"")
    rec = Recorder()
    zk.exists("/ex", watch=rec)
    other.set("/ex", b"x")
    assert rec.wait(1)[0].type == KEvent.CHANGED


def test_watch_event_before_read_reply(raw, make_raw):
    """The watch notification reaches the client before the reply of a read that sees the change."""
    b = make_raw()
    raw.create("/ord", b"0")
    for i in range(20):
        raw.get("/ord", watch=True)
        n_before = len(raw.events)
        b.set("/ord", str(i + 1).encode())
        rep = raw.call(h.OP.GET_DATA, h.W().string("/ord").bool(False).b)
        assert rep.reader().buffer() == str(i + 1).encode()
        evs = [e for e in raw.events[n_before:] if e.path == "/ord"]
        assert evs, "no notification had arrived when the read reply came"
        assert evs[0].type == EventType.NODE_DATA_CHANGED
        assert evs[0].seq < rep.seq


def test_child_watch_event_before_read_reply(raw, make_raw):
    """A child notification precedes the getChildren reply that lists the new child."""
    b = make_raw()
    raw.create("/ordc")
    raw.get_children("/ordc", watch=True)
    b.create("/ordc/x")
    rep = raw.call(h.OP.GET_CHILDREN2, h.W().string("/ordc").bool(False).b)
    assert rep.reader().strings() == ["x"]
    evs = [e for e in raw.events if e.path == "/ordc"]
    assert evs and evs[0].type == EventType.NODE_CHILDREN_CHANGED and evs[0].seq < rep.seq


def test_persistent_watch(raw, make_raw):
    """A PERSISTENT addWatch fires on every data change, child change, delete and re-create of the node."""
    b = make_raw()
    b.create("/pw")
    raw.add_watch("/pw", WatchMode.PERSISTENT)
    b.set("/pw", b"1")
    b.set("/pw", b"2")
    b.create("/pw/c")
    b.set("/pw/c", b"x")          # not seen: not recursive
    b.delete("/pw/c")
    b.delete("/pw")
    b.create("/pw")
    evs = raw.wait_events(6)
    got = [(e.type, e.path) for e in evs]
    assert got == [
        (EventType.NODE_DATA_CHANGED, "/pw"),
        (EventType.NODE_DATA_CHANGED, "/pw"),
        (EventType.NODE_CHILDREN_CHANGED, "/pw"),
        (EventType.NODE_CHILDREN_CHANGED, "/pw"),
        (EventType.NODE_DELETED, "/pw"),
        (EventType.NODE_CREATED, "/pw"),
    ]
    assert len(quiet(lambda: raw.events)) == 6


def test_persistent_recursive_watch(raw, make_raw):
    """A PERSISTENT_RECURSIVE watch fires for the node and all descendants, without child events."""
    b = make_raw()
    raw.add_watch("/rw", WatchMode.PERSISTENT_RECURSIVE)   # may be added before the node exists
    b.create("/rw")
    b.set("/rw", b"1")
    b.create("/rw/c")
    b.create("/rw/c/d")
    b.set("/rw/c/d", b"x")
    b.delete("/rw/c/d")
    b.create("/rwx")                  # sibling with a common prefix: not a descendant
    evs = raw.wait_events(6)
    got = [(e.type, e.path) for e in evs]
    assert got == [
        (EventType.NODE_CREATED, "/rw"),
        (EventType.NODE_DATA_CHANGED, "/rw"),
        (EventType.NODE_CREATED, "/rw/c"),
        (EventType.NODE_CREATED, "/rw/c/d"),
        (EventType.NODE_DATA_CHANGED, "/rw/c/d"),
        (EventType.NODE_DELETED, "/rw/c/d"),
    ]
    assert len(quiet(lambda: raw.events)) == 6


def test_persistent_and_one_shot_together(raw, make_raw, server):
    """A one-shot data watch and a persistent watch on the same node deliver one event per change."""
    if server.kind == "zookeeper" and (server.version() or (0, 0, 0)) < (3, 9, 0):
        pytest.skip("ZooKeeper < 3.9 lets the one-shot watch replace the persistent one (ZOOKEEPER-4466)")
    b = make_raw()
    b.create("/both")
    raw.add_watch("/both", WatchMode.PERSISTENT)
    raw.get("/both", watch=True)
    b.set("/both", b"1")
    b.set("/both", b"2")
    evs = raw.wait_events(2)
    assert [(e.type, e.path) for e in evs] == [(EventType.NODE_DATA_CHANGED, "/both")] * 2
    assert len(quiet(lambda: raw.events)) == 2


def test_remove_watches(raw, make_raw):
    """removeWatches removes the server-side watch; removing a missing one is NoWatcher."""
    b = make_raw()
    raw.create("/rm")
    raw.get("/rm", watch=True)
    raw.get_children("/rm", watch=True)
    raw.remove_watches("/rm", WatcherType.DATA)
    with pytest.raises(ZkError) as ei:
        raw.remove_watches("/rm", WatcherType.DATA)
    assert ei.value.code == ERR.NO_WATCHER
    b.set("/rm", b"x")                         # data watch gone: no event
    b.create("/rm/c")                          # child watch still there
    evs = raw.wait_events(1)
    assert [(e.type, e.path) for e in evs] == [(EventType.NODE_CHILDREN_CHANGED, "/rm")]
    assert len(quiet(lambda: raw.events)) == 1


def test_remove_all_watches_any(raw, make_raw):
    """removeWatches(ANY) removes one-shot and persistent watches of the path."""
    b = make_raw()
    raw.create("/ra")
    raw.add_watch("/ra", WatchMode.PERSISTENT_RECURSIVE)
    raw.get("/ra", watch=True)
    raw.remove_watches("/ra", WatcherType.ANY)
    b.set("/ra", b"x")
    b.create("/ra/c")
    assert quiet(lambda: raw.events) == []
    with pytest.raises(ZkError) as ei:
        raw.check_watches("/ra", WatcherType.ANY)
    assert ei.value.code == ERR.NO_WATCHER


def test_notification_order_is_zxid_order(raw, make_raw):
    """A burst of pipelined writes is notified to a recursive watcher in write (zxid) order."""
    writer = make_raw()
    writer.create("/burst")
    raw.add_watch("/burst", WatchMode.PERSISTENT_RECURSIVE)
    qs = []
    n = 60
    for i in range(n):
        p = "/burst/n%03d" % i
        qs.append(writer.send(h.OP.CREATE2, h.W().string(p).buffer(b"").acls(h.OPEN_ACL_UNSAFE).int(0).b))
        if i % 3 == 2:
            qs.append(writer.send(h.OP.SET_DATA, h.W().string(p).buffer(b"v").int(-1).b))
    zxids = []
    for q in qs:
        rep = q.get(timeout=10)
        assert rep is not None and rep.err == 0
        zxids.append(rep.zxid)
    assert zxids == sorted(zxids) and len(set(zxids)) == len(zxids)
    expected = []
    for i in range(n):
        p = "/burst/n%03d" % i
        expected.append((EventType.NODE_CREATED, p))
        if i % 3 == 2:
            expected.append((EventType.NODE_DATA_CHANGED, p))
    evs = raw.wait_events(len(expected))
    assert [(e.type, e.path) for e in evs] == expected
    # ZooKeeper 3.8 sends zxid -1 in notification headers; if a server sends real zxids they must rise.
    ev_zxids = [e.zxid for e in evs if e.zxid != -1]
    if ev_zxids:
        assert ev_zxids == zxids


def test_watch_on_session_own_change(zk):
    """A client's own write triggers its own watch."""
    zk.create("/own", b"")
    rec = Recorder()
    zk.get("/own", watch=rec)
    zk.set("/own", b"x")
    assert rec.wait(1)[0].type == KEvent.CHANGED


def test_wchs_counts_watches(raw, server):
    """wchs reports the number of watched paths and watches."""
    raw.create("/wc")
    raw.get("/wc", watch=True)
    raw.exists("/wc-missing", watch=True)
    out = server.four_letter("wchs")
    import re
    m = re.search(r"(\d+) connections watching (\d+) paths", out)
    assert m and int(m.group(1)) >= 1 and int(m.group(2)) >= 2
    m2 = re.search(r"Total watches:\s*(\d+)", out)
    assert m2 and int(m2.group(1)) >= 2
