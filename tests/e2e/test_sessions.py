"""Sessions: expiry, reconnection, setWatches, close, timeout negotiation.

These run on a server with tickTime=200, minSessionTimeout=1000 and
maxSessionTimeout=4000 so that expiry takes about a second.
"""

import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import EventType as KEvent, KazooState

import harness as h
from harness import CreateMode, TcpProxy, wait_until

MIN_TO = 1000
MAX_TO = 4000


@pytest.fixture(scope="module")
def module_server(request):
    """Override: a fast-ticking server for this module."""
    import conftest
    srv = conftest._new_server(request, tick_time=200, min_session_timeout=MIN_TO,
                               max_session_timeout=MAX_TO)
    yield srv
    conftest._finish(srv)


@pytest.fixture
def proxy(server):
    p = TcpProxy(server.port)
    yield p
    p.close()


def test_negotiated_timeout_clamped(server, make_raw):
    """The negotiated session timeout is clamped to [minSessionTimeout, maxSessionTimeout]."""
    assert make_raw(timeout_ms=100).negotiated_timeout == MIN_TO
    assert make_raw(timeout_ms=100000).negotiated_timeout == MAX_TO
    assert make_raw(timeout_ms=2500).negotiated_timeout == 2500


def test_expiry_removes_ephemerals_and_fires_watches(zk, make_raw):
    """A session whose connection dies expires after its timeout; its ephemerals go and watchers hear it."""
    victim = make_raw(timeout_ms=MIN_TO)
    victim.create("/e1", mode=CreateMode.EPHEMERAL)
    victim.create("/eparent")
    victim.create("/eparent/e2", mode=CreateMode.EPHEMERAL)
    deleted = threading.Event()
    children = threading.Event()
    zk.exists("/e1", watch=lambda ev: ev.type == KEvent.DELETED and deleted.set())
    zk.get_children("/eparent", watch=lambda ev: ev.type == KEvent.CHILD and children.set())
    t0 = time.monotonic()
    victim.drop()            # socket closed, session not closed
    assert deleted.wait(10) and children.wait(10)
    elapsed = time.monotonic() - t0
    assert elapsed >= 0.5 * MIN_TO / 1000.0, "expired too early (%.2fs)" % elapsed
    assert zk.exists("/e1") is None
    assert zk.get_children("/eparent") == []
    assert zk.exists("/eparent") is not None   # persistent node survives


def test_expired_session_cannot_reconnect(server, make_raw):
    """Reconnecting with an expired session id is refused (session id 0 / closed connection)."""
    c = make_raw(timeout_ms=MIN_TO)
    sid, pw = c.session_id, c.passwd
    c.drop()
    o = make_raw()
    wait_until(lambda: "0x%x" % sid not in server.four_letter("dump"), timeout=10,
               what="session gone from dump")
    with pytest.raises(h.ConnectionLost):
        h.RawClient(server.hosts, session_id=sid, passwd=pw, timeout_ms=MIN_TO)
    o.close()


def test_wrong_password_refused(server, make_raw):
    """Reattaching with a wrong password is refused; the session survives (its connection is closed)."""
    c = make_raw(timeout_ms=MAX_TO)
    c.create("/pwtest", mode=CreateMode.EPHEMERAL)
    bad = bytes((b ^ 0xFF) for b in c.passwd)
    with pytest.raises(h.ConnectionLost):
        h.RawClient(server.hosts, session_id=c.session_id, passwd=bad, timeout_ms=MAX_TO)
    # ZooKeeper closes the session's current connection before checking the password.
    c2 = make_raw(session_id=c.session_id, passwd=c.passwd, timeout_ms=MAX_TO)
    assert c2.exists("/pwtest")["ephemeralOwner"] == c.session_id


def test_reattach_same_session_keeps_ephemerals(server, make_raw):
    """A new connection with the session id and password resumes the session and its ephemerals."""
    c = make_raw(timeout_ms=MAX_TO)
    c.create("/keep", mode=CreateMode.EPHEMERAL)
    sid, pw = c.session_id, c.passwd
    c.drop()
    c2 = make_raw(session_id=sid, passwd=pw, timeout_ms=MAX_TO, last_zxid_seen=c.last_zxid)
    assert c2.session_id == sid
    st = c2.exists("/keep")
    assert st is not None and st["ephemeralOwner"] == sid
    time.sleep(MAX_TO / 1000.0 * 1.2)   # beyond the timeout: pings keep it alive
    assert c2.exists("/keep") is not None


def test_second_connection_takes_over_session(server, make_raw):
    """Attaching a second connection to a session closes the first connection."""
    c = make_raw(timeout_ms=MAX_TO)
    c2 = make_raw(session_id=c.session_id, passwd=c.passwd, timeout_ms=MAX_TO)
    wait_until(lambda: c.lost, timeout=10, what="first connection closed")
    c2.create("/takeover", mode=CreateMode.EPHEMERAL)
    assert c2.exists("/takeover")["ephemeralOwner"] == c.session_id


def test_kazoo_reconnect_keeps_session(zk, make_client, proxy):
    """kazoo reconnecting through a cut TCP connection within the timeout keeps its session and ephemerals."""
    c = make_client(hosts=proxy.hosts, timeout=MAX_TO / 1000.0)
    c.create("/kz-eph", b"", ephemeral=True)
    sid = c.client_id[0]
    states = []
    c.add_listener(states.append)
    proxy.drop_all()
    wait_until(lambda: KazooState.SUSPENDED in states, timeout=10, what="SUSPENDED")
    wait_until(lambda: c.connected and states[-1] == KazooState.CONNECTED, timeout=10, what="reconnect")
    assert c.client_id[0] == sid
    assert KazooState.LOST not in states
    assert zk.exists("/kz-eph").ephemeralOwner == sid
    assert proxy.accepted >= 2


def test_kazoo_watch_reset_on_disconnect(zk, make_client, proxy):
    """kazoo (which never sends SetWatches) tells its watchers about a disconnect with a NONE event."""
    zk.create("/kw", b"")
    c = make_client(hosts=proxy.hosts, timeout=MAX_TO / 1000.0)
    evs = []
    c.get("/kw", watch=evs.append)
    proxy.drop_all()
    wait_until(lambda: evs, timeout=10, what="state event")
    assert evs[0].type == KEvent.NONE


def _reconnect(server, old):
    old.drop()
    return h.RawClient(server.hosts, session_id=old.session_id, passwd=old.passwd,
                       timeout_ms=MAX_TO, last_zxid_seen=old.last_zxid)


def test_set_watches_after_reconnect(server, zk, make_raw):
    """SetWatches after a reconnect delivers the events missed while disconnected."""
    zk.create("/sw-data", b"0")
    zk.create("/sw-child", b"")
    zk.create("/sw-gone", b"")
    a = make_raw(timeout_ms=MAX_TO)
    a.get("/sw-data", watch=True)
    a.get_children("/sw-child", watch=True)
    a.exists("/sw-new", watch=True)
    a.get("/sw-gone", watch=True)
    seen = a.last_zxid
    a.drop()
    zk.set("/sw-data", b"1")
    zk.create("/sw-child/x", b"")
    zk.create("/sw-new", b"")
    zk.delete("/sw-gone")
    a2 = make_raw(session_id=a.session_id, passwd=a.passwd, timeout_ms=MAX_TO, last_zxid_seen=seen)
    a2.set_watches(seen, data=["/sw-data", "/sw-gone"], exist=["/sw-new"], child=["/sw-child"])
    evs = a2.wait_events(4)
    assert sorted((e.type, e.path) for e in evs) == sorted([
        (h.EventType.NODE_DATA_CHANGED, "/sw-data"),
        (h.EventType.NODE_CHILDREN_CHANGED, "/sw-child"),
        (h.EventType.NODE_CREATED, "/sw-new"),
        (h.EventType.NODE_DELETED, "/sw-gone"),
    ])
    time.sleep(0.3)
    assert len(a2.events) == 4


def test_set_watches_nothing_missed(server, zk, make_raw):
    """SetWatches with nothing changed fires nothing, and the re-armed watches fire on the next change."""
    zk.create("/swq", b"0")
    a = make_raw(timeout_ms=MAX_TO)
    a.get("/swq", watch=True)
    a.exists("/swq-missing", watch=True)
    seen = a.last_zxid
    a.drop()
    a2 = make_raw(session_id=a.session_id, passwd=a.passwd, timeout_ms=MAX_TO, last_zxid_seen=seen)
    a2.set_watches(seen, data=["/swq"], exist=["/swq-missing"])
    time.sleep(0.3)
    assert a2.events == []
    zk.set("/swq", b"1")
    zk.create("/swq-missing", b"")
    evs = a2.wait_events(2)
    assert [(e.type, e.path) for e in evs] == [(h.EventType.NODE_DATA_CHANGED, "/swq"),
                                               (h.EventType.NODE_CREATED, "/swq-missing")]


def test_set_watches2_persistent_recursive(server, zk, make_raw):
    """SetWatches2 re-registers a persistent recursive watch, which then fires repeatedly."""
    zk.create("/swp", b"")
    a = make_raw(timeout_ms=MAX_TO)
    seen = a.last_zxid
    a.drop()
    a2 = make_raw(session_id=a.session_id, passwd=a.passwd, timeout_ms=MAX_TO, last_zxid_seen=seen)
    a2.set_watches(a2.last_zxid or seen, persistent=[], persistent_recursive=["/swp"])
    zk.create("/swp/a", b"")
    zk.set("/swp/a", b"1")
    zk.set("/swp/a", b"2")
    evs = a2.wait_events(3)
    assert [(e.type, e.path) for e in evs] == [(h.EventType.NODE_CREATED, "/swp/a"),
                                               (h.EventType.NODE_DATA_CHANGED, "/swp/a"),
                                               (h.EventType.NODE_DATA_CHANGED, "/swp/a")]


def test_close_removes_ephemerals_immediately(zk, make_client):
    """close() ends the session at once: its ephemerals are gone when close returns."""
    c = make_client()
    c.create("/bye", b"", ephemeral=True)
    c.create("/bye-seq-", b"", ephemeral=True, sequence=True)
    c.stop()
    c.close()
    zk.sync("/")
    assert zk.exists("/bye") is None
    assert [n for n in zk.get_children("/") if n.startswith("bye-seq-")] == []


def test_kazoo_session_expired_state(zk, make_client, proxy):
    """kazoo reports LOST when its session expired during a disconnect, then gets a new session."""
    c = make_client(hosts=proxy.hosts, timeout=MIN_TO / 1000.0)
    c.create("/lost-eph", b"", ephemeral=True)
    sid = c.client_id[0]
    states = []
    c.add_listener(states.append)
    proxy.set_accepting(False)
    proxy.drop_all()
    wait_until(lambda: zk.exists("/lost-eph") is None, timeout=10, what="ephemeral removed by expiry")
    proxy.set_accepting(True)
    wait_until(lambda: KazooState.LOST in states, timeout=15, what="LOST state")
    wait_until(lambda: c.connected, timeout=15, what="new session")
    assert c.client_id[0] != sid


def test_ping_keeps_idle_session(server, make_raw):
    """An idle session that pings survives several timeouts."""
    c = make_raw(timeout_ms=MIN_TO)
    c.create("/idle", mode=CreateMode.EPHEMERAL)
    time.sleep(3 * MIN_TO / 1000.0)
    assert c.exists("/idle") is not None


def test_requests_sent_behind_the_handshake_are_answered_after_it_in_order(server):
    """A client may write requests right behind its ConnectRequest, before
    the answer: ZooKeeper reads nothing more from the connection until the
    session exists, then serves them in order."""
    import socket
    import struct

    path = "/pipelined-%d" % time.monotonic_ns()
    connect = h.W().int(0).long(0).int(MAX_TO).long(0).buffer(b"\0" * 16).bool(False)
    create = h.W().int(1).int(h.OP.CREATE).string(path).buffer(b"x").acls(h.OPEN_ACL_UNSAFE).int(0)
    get = h.W().int(2).int(h.OP.GET_DATA).string(path).bool(False)
    missing = h.W().int(3).int(h.OP.GET_DATA).string(path + "/none").bool(False)
    frames = b"".join(struct.pack("!i", len(w.b)) + bytes(w.b) for w in (connect, create, get, missing))
    host, port = server.hosts.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(frames)

        def frame():
            head = b""
            while len(head) < 4:
                chunk = s.recv(4 - len(head))
                assert chunk, "connection closed"
                head += chunk
            n = struct.unpack("!i", head)[0]
            body = b""
            while len(body) < n:
                chunk = s.recv(n - len(body))
                assert chunk, "connection closed"
                body += chunk
            return h.R(body)

        r = frame()
        r.int()
        assert r.int() > 0  # negotiated timeout
        assert r.long() != 0  # session id
        replies = []
        for _ in range(3):
            r = frame()
            xid, _zxid, err = r.int(), r.long(), r.int()
            replies.append((xid, err))
            if xid == 2:
                assert r.buffer() == b"x"
        assert replies == [(1, 0), (2, 0), (3, h.ERR.NO_NODE)]
