"""End-to-end harness: start Stoa or Apache ZooKeeper on a free port with the
same zoo.cfg (servers.py, shared with the benchmarks), talk to it with kazoo
or with the small raw jute client below, and put a TCP proxy in between for
connection faults.

Everything here is bounded in time; every process started here is stopped by
PID (SIGTERM, then SIGKILL after a bound), also at interpreter exit.
"""

import contextlib
import json
import os
import queue
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time

import servers
# Re-exported: the tests know these as harness names.
from servers import (DEFAULT_STOA_BIN, ENSEMBLE_SIZE, REPO_ROOT, SUPER_DIGEST,  # noqa: F401
                     SUPER_PASSWORD, digest, four_letter, free_port, srvr_mode, srvr_zxid,
                     stoa_bin, stoa_partitions)

TARGETS = ("stoa", "zookeeper", "stoa-ensemble")


def target_name():
    """STOA_TARGET as given: stoa (default), zookeeper or stoa-ensemble."""
    t = os.environ.get("STOA_TARGET", "stoa").strip().lower()
    if t not in TARGETS:
        raise RuntimeError("STOA_TARGET must be 'stoa', 'zookeeper' or 'stoa-ensemble', not %r" % t)
    return t


def target():
    """The server software under test: 'stoa' or 'zookeeper'.

    STOA_TARGET=stoa-ensemble is Stoa too (target() says 'stoa', so stoa-only
    tests run); ensemble_target() tells it apart."""
    t = target_name()
    return "stoa" if t == "stoa-ensemble" else t


def ensemble_target():
    """True under STOA_TARGET=stoa-ensemble: a Server(kind="stoa") without
    server.N lines is a 3-member ensemble and clients talk to a follower."""
    return target_name() == "stoa-ensemble"


def wait_until(pred, timeout=10.0, interval=0.02, what="condition"):
    """Poll pred() until it is truthy; return its value or raise after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


class Server(servers.Server):
    """servers.Server (one Stoa or ZooKeeper process, zoo.cfg options as
    keywords) whose kind defaults to the server under test (STOA_TARGET).

    Under STOA_TARGET=stoa-ensemble, Server(kind="stoa", ...) without
    server.N entries in extra_cfg builds an Ensemble instead (same options,
    same interface); ensemble=False forces one process, ensemble=True an
    Ensemble whatever the target.
    """

    def __new__(cls, *args, **kw):
        if cls is Server and _wants_ensemble(*args, **kw):
            kw.pop("ensemble", None)
            return Ensemble(*args, **kw)
        return object.__new__(cls)

    def default_kind(self):
        return target()


# --------------------------------------------------------------------------
# STOA_TARGET=stoa-ensemble: the one-server interface over a 3-member ensemble

# zoo.cfg keys naming a port of this host: the client member (m1) gets the
# requested one, the other members free ports of their own.
ENSEMBLE_PER_MEMBER_PORT_KEYS = ("metricsProvider.httpPort", "admin.serverPort")


def _wants_ensemble(*args, **kw):
    """Whether Server(*args, **kw) is to be an Ensemble (see Server)."""
    import inspect
    a = inspect.signature(Server.__init__).bind(None, *args, **kw).arguments
    if a.get("ensemble") is not None:
        return bool(a["ensemble"])
    if not ensemble_target() or (a.get("kind") or target()) != "stoa":
        return False
    # A caller that writes its own server.N lines (test_ensemble.py) builds its own ensemble.
    return not any(str(k).startswith("server.") for k in (a.get("extra_cfg") or {}))


class Ensemble:
    """ENSEMBLE_SIZE Stoa members on 127.0.0.1 with the options of one Server
    (the same zoo.cfg plus server.N lines, a myid each, data under base_dir/mN),
    presented as one server: hosts, port, four_letter, pid, data_dir and
    log_tail are those of member m1, which is always a follower, so every
    write a test makes is forwarded to the leader. start/stop/kill9/restart/
    cleanup act on every member; data dirs are kept across restarts.

    m1 is made a follower by starting it last: m2 and m3 (a quorum) start
    together and elect a leader, then m1 joins, and start() waits until srvr
    on m1 says "Mode: follower" and its zxid has caught up with the leader's.
    (servers.Ensemble is the benchmarks' kind: every member a client's.)
    """

    def __init__(self, kind=None, tick_time=2000, min_session_timeout=None,
                 max_session_timeout=None, max_client_cnxns=60,
                 container_check_ms=500, super_digest=True, extra_cfg=None,
                 base_dir=None, size=ENSEMBLE_SIZE):
        kind = kind or target()
        if kind != "stoa":
            raise ValueError("an Ensemble is of Stoa servers, not %r" % kind)
        self.kind = "stoa"
        self.base_dir = base_dir or tempfile.mkdtemp(prefix="stoa-e2e-stoa-ensemble-")
        self._own_base = base_dir is None
        cfg = dict(extra_cfg or {})
        # The quorum/election ports stay bound until every member picked its
        # client port, so all 3 * size ports differ.
        with servers.held_ports(2 * size) as ports:
            for i in range(size):
                cfg["server.%d" % (i + 1)] = "127.0.0.1:%d:%d" % (ports[2 * i], ports[2 * i + 1])
            self.members = []
            for i in range(size):
                member_cfg = dict(cfg)
                if i > 0:
                    for k in ENSEMBLE_PER_MEMBER_PORT_KEYS:
                        if k in member_cfg:
                            member_cfg[k] = free_port()
                m = Server(kind="stoa", tick_time=tick_time,
                           min_session_timeout=min_session_timeout,
                           max_session_timeout=max_session_timeout,
                           max_client_cnxns=max_client_cnxns,
                           container_check_ms=container_check_ms, super_digest=super_digest,
                           extra_cfg=member_cfg,
                           base_dir=os.path.join(self.base_dir, "m%d" % (i + 1)),
                           ensemble=False)
                servers.write_myid(m.data_dir, i + 1)
                self.members.append(m)
        self.client_member = self.members[0]
        c = self.client_member
        self.port, self.hosts = c.port, c.hosts
        self.data_dir, self.log_path, self.cfg_path = c.data_dir, c.log_path, c.cfg_path
        self.tick_time = c.tick_time
        self.min_session_timeout = c.min_session_timeout
        self.max_session_timeout = c.max_session_timeout
        self.container_check_ms = c.container_check_ms
        self.super_digest = c.super_digest

    @property
    def proc(self):
        return self.client_member.proc

    @property
    def pid(self):
        return self.client_member.pid

    def running(self):
        return any(m.running() for m in self.members)

    def mode(self, member=None):
        return srvr_mode(member or self.client_member)

    def leader(self):
        leaders = [m for m in self.members if m.running() and srvr_mode(m) == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def start(self, timeout=60.0):
        assert not self.running(), "already running"
        timeout = max(timeout, 60.0)
        deadline = time.monotonic() + timeout
        others = [m for m in self.members if m is not self.client_member]
        try:
            # A quorum without m1 first: they elect a leader among themselves.
            servers.run_parallel(lambda m: m.start(timeout=timeout), others)
            wait_until(lambda: any(srvr_mode(m) == "leader" for m in others),
                       timeout=max(1.0, deadline - time.monotonic()), interval=0.05,
                       what="a leader among %s" % others)
            self.client_member.start(timeout=max(1.0, deadline - time.monotonic()))
            wait_until(lambda: srvr_mode(self.client_member) == "follower",
                       timeout=max(1.0, deadline - time.monotonic()), interval=0.05,
                       what="Mode: follower on %r" % self.client_member)
            leader = self.leader()
            target_zxid = srvr_zxid(leader) if leader else None
            if target_zxid is not None:
                wait_until(lambda: (srvr_zxid(self.client_member) or -1) >= target_zxid,
                           timeout=max(1.0, deadline - time.monotonic()), interval=0.05,
                           what="%r caught up with the leader (zxid 0x%x)"
                           % (self.client_member, target_zxid))
        except BaseException as e:
            tails = self.log_tails(40)
            self.kill9()
            if isinstance(e, (RuntimeError, AssertionError)):
                raise RuntimeError("ensemble did not start: %s\n%s" % (e, tails))
            raise
        return self

    def stop(self, timeout=10.0):
        servers.run_parallel(lambda m: m.stop(timeout=timeout), self.members)

    def kill9(self):
        for m in self.members:
            m.kill9()

    def restart(self, timeout=60.0):
        self.stop()
        return self.start(timeout=timeout)

    def four_letter(self, cmd, timeout=5.0):
        return self.client_member.four_letter(cmd, timeout=timeout)

    def version(self):
        return self.client_member.version()

    def log_tail(self, n=60):
        """The client member's log (the server the tests talk to)."""
        return self.client_member.log_tail(n)

    def log_tails(self, n=40):
        """Every member's log tail, labelled with its mode."""
        out = []
        for i, m in enumerate(self.members):
            role = srvr_mode(m) if m.running() else "down"
            out.append("---- member m%d %r mode=%s%s (%s) ----\n%s"
                       % (i + 1, m, role, " [client member]" if m is self.client_member else "",
                          m.log_path, m.log_tail(n)))
        return "\n".join(out)

    def cleanup(self):
        self.stop()
        try:
            for m in self.members:
                servers.assert_log_clean(m.log_path)
        finally:
            if self._own_base and not os.environ.get("STOA_E2E_KEEP"):
                shutil.rmtree(self.base_dir, ignore_errors=True)

    def __repr__(self):
        return "<Ensemble stoa %s (follower m1) pids=%s>" % (
            self.hosts, ",".join(str(m.pid) for m in self.members))


# --------------------------------------------------------------------------
# TCP proxy for connection faults

class TcpProxy:
    """A bounded threaded TCP proxy on a free port forwarding to (host, port).

    drop_all() cuts every live connection; set_accepting(False) refuses new
    ones (they are accepted and closed immediately) so a client cannot
    reconnect until set_accepting(True).
    """

    def __init__(self, upstream_port, upstream_host="127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.lsock.settimeout(0.2)
        self.port = self.lsock.getsockname()[1]
        self.hosts = "127.0.0.1:%d" % self.port
        self.accepting = True
        self._stop = threading.Event()
        self._conns = []
        self._lock = threading.Lock()
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                c, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if not self.accepting:
                c.close()
                continue
            try:
                u = socket.create_connection(self.upstream, timeout=2)
            except OSError:
                c.close()
                continue
            self.accepted += 1
            with self._lock:
                self._conns.append((c, u))
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src, dst):
        src.settimeout(None)
        try:
            while not self._stop.is_set():
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def drop_all(self):
        with self._lock:
            conns, self._conns = self._conns, []
        for c, u in conns:
            for s in (c, u):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                try:
                    s.close()
                except OSError:
                    pass

    def set_accepting(self, on):
        self.accepting = on

    def close(self):
        self._stop.set()
        self.drop_all()
        try:
            self.lsock.close()
        except OSError:
            pass
        self._thread.join(timeout=2)


# --------------------------------------------------------------------------
# A small raw ZooKeeper client (jute), for what kazoo cannot send: TTL and
# container creates, addWatch, removeWatches, getEphemerals,
# getAllChildrenNumber, multiRead, whoAmI, unvalidated paths, raw error codes.

class OP:
    NOTIFICATION = 0
    CREATE = 1
    DELETE = 2
    EXISTS = 3
    GET_DATA = 4
    SET_DATA = 5
    GET_ACL = 6
    SET_ACL = 7
    GET_CHILDREN = 8
    SYNC = 9
    PING = 11
    GET_CHILDREN2 = 12
    CHECK = 13
    MULTI = 14
    CREATE2 = 15
    RECONFIG = 16
    CHECK_WATCHES = 17
    REMOVE_WATCHES = 18
    CREATE_CONTAINER = 19
    DELETE_CONTAINER = 20
    CREATE_TTL = 21
    MULTI_READ = 22
    AUTH = 100
    SET_WATCHES = 101
    SASL = 102
    GET_EPHEMERALS = 103
    GET_ALL_CHILDREN_NUMBER = 104
    SET_WATCHES2 = 105
    ADD_WATCH = 106
    WHO_AM_I = 107
    CREATE_SESSION = -10
    CLOSE_SESSION = -11
    ERROR = -1


class ERR:
    OK = 0
    SYSTEM = -1
    RUNTIME_INCONSISTENCY = -2
    DATA_INCONSISTENCY = -3
    CONNECTION_LOSS = -4
    MARSHALLING = -5
    UNIMPLEMENTED = -6
    OPERATION_TIMEOUT = -7
    BAD_ARGUMENTS = -8
    UNKNOWN_SESSION = -12
    NEW_CONFIG_NO_QUORUM = -13
    RECONFIG_IN_PROGRESS = -14
    API = -100
    NO_NODE = -101
    NO_AUTH = -102
    BAD_VERSION = -103
    NO_CHILDREN_FOR_EPHEMERALS = -108
    NODE_EXISTS = -110
    NOT_EMPTY = -111
    SESSION_EXPIRED = -112
    INVALID_CALLBACK = -113
    INVALID_ACL = -114
    AUTH_FAILED = -115
    SESSION_MOVED = -118
    NOT_READ_ONLY = -119
    EPHEMERAL_ON_LOCAL_SESSION = -120
    NO_WATCHER = -121
    RECONFIG_DISABLED = -123
    SESSION_CLOSED_REQUIRE_SASL = -124
    QUOTA_EXCEEDED = -125
    THROTTLED = -127


class CreateMode:
    PERSISTENT = 0
    EPHEMERAL = 1
    PERSISTENT_SEQUENTIAL = 2
    EPHEMERAL_SEQUENTIAL = 3
    CONTAINER = 4
    PERSISTENT_WITH_TTL = 5
    PERSISTENT_SEQUENTIAL_WITH_TTL = 6


class WatchMode:
    PERSISTENT = 0
    PERSISTENT_RECURSIVE = 1


class WatcherType:
    CHILDREN = 1
    DATA = 2
    ANY = 3


class EventType:
    NONE = -1
    NODE_CREATED = 1
    NODE_DELETED = 2
    NODE_DATA_CHANGED = 3
    NODE_CHILDREN_CHANGED = 4
    DATA_WATCH_REMOVED = 5
    CHILD_WATCH_REMOVED = 6
    PERSISTENT_WATCH_REMOVED = 7


class Perms:
    READ = 1
    WRITE = 2
    CREATE = 4
    DELETE = 8
    ADMIN = 16
    ALL = 31


OPEN_ACL_UNSAFE = [(Perms.ALL, "world", "anyone")]


class RawError(Exception):
    pass


class ConnectionLost(RawError):
    pass


class ZkError(RawError):
    def __init__(self, code, what=""):
        RawError.__init__(self, "ZooKeeper error %d %s" % (code, what))
        self.code = code


class W:
    """jute writer"""

    def __init__(self):
        self.b = bytearray()

    def int(self, v):
        self.b += struct.pack("!i", v)
        return self

    def long(self, v):
        self.b += struct.pack("!q", v)
        return self

    def bool(self, v):
        self.b += b"\x01" if v else b"\x00"
        return self

    def buffer(self, v):
        if v is None:
            return self.int(-1)
        self.int(len(v))
        self.b += v
        return self

    def string(self, v):
        return self.buffer(None if v is None else v.encode("utf-8"))

    def acls(self, acls):
        if acls is None:
            return self.int(-1)
        self.int(len(acls))
        for perms, scheme, ident in acls:
            self.int(perms).string(scheme).string(ident)
        return self

    def strings(self, v):
        self.int(len(v))
        for s in v:
            self.string(s)
        return self


class R:
    """jute reader"""

    def __init__(self, b, off=0):
        self.b = b
        self.off = off

    def int(self):
        v = struct.unpack_from("!i", self.b, self.off)[0]
        self.off += 4
        return v

    def long(self):
        v = struct.unpack_from("!q", self.b, self.off)[0]
        self.off += 8
        return v

    def bool(self):
        v = self.b[self.off] != 0
        self.off += 1
        return v

    def buffer(self):
        n = self.int()
        if n < 0:
            return None
        v = bytes(self.b[self.off:self.off + n])
        self.off += n
        return v

    def string(self):
        v = self.buffer()
        return None if v is None else v.decode("utf-8")

    def strings(self):
        n = self.int()
        return [self.string() for _ in range(max(n, 0))]

    def stat(self):
        keys = ("czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion",
                "ephemeralOwner", "dataLength", "numChildren", "pzxid")
        fmt = "!qqqqiiiqiiq"
        vals = struct.unpack_from(fmt, self.b, self.off)
        self.off += struct.calcsize(fmt)
        return dict(zip(keys, vals))

    def acls(self):
        n = self.int()
        out = []
        for _ in range(max(n, 0)):
            perms = self.int()
            out.append((perms, self.string(), self.string()))
        return out

    def done(self):
        return self.off >= len(self.b)


class Event:
    def __init__(self, type, state, path, seq, zxid):
        self.type, self.state, self.path, self.seq, self.zxid = type, state, path, seq, zxid

    def __repr__(self):
        return "Event(type=%d, path=%r, zxid=%d)" % (self.type, self.path, self.zxid)


class Reply:
    def __init__(self, xid, zxid, err, body, seq):
        self.xid, self.zxid, self.err, self.body, self.seq = xid, zxid, err, body, seq

    def reader(self):
        return R(self.body)


class RawClient:
    """Minimal ZooKeeper client: one connection, no reconnects.

    request(op, body) returns a Reply; helper methods raise ZkError on a
    non-zero error code. Watch events are collected in self.events (each with
    a frame sequence number shared with replies, so tests can tell which
    arrived first).
    """

    def __init__(self, hosts, timeout_ms=10000, session_id=0, passwd=b"\x00" * 16,
                 connect_timeout=5.0, last_zxid_seen=0, read_only=False):
        host, port = hosts.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=connect_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        req = (W().int(0).long(last_zxid_seen).int(timeout_ms).long(session_id)
               .buffer(passwd).bool(read_only))
        self._send_frame(bytes(req.b))
        resp = self._recv_frame()
        if resp is None or len(resp) < 20:
            self.sock.close()
            raise ConnectionLost("connect handshake refused (session expired or invalid)")
        r = R(resp)
        self.protocol_version = r.int()
        self.negotiated_timeout = r.int()
        self.session_id = r.long()
        self.passwd = r.buffer()
        if self.session_id == 0 or self.negotiated_timeout <= 0:
            self.sock.close()
            raise ConnectionLost("session expired (server answered session id 0)")
        self.sock.settimeout(None)
        self._xid = 0
        self._lock = threading.Lock()
        self._pending = {}
        self._seq = 0
        self.events = []
        self.events_cv = threading.Condition()
        self.last_zxid = 0
        self.closed = False
        self.lost = False
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()
        self._ping_stop = threading.Event()
        self._pinger = threading.Thread(target=self._ping_loop, daemon=True)
        self._pinger.start()

    # -- framing
    def _send_frame(self, payload):
        self.sock.sendall(struct.pack("!i", len(payload)) + payload)

    def _recv_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def _recv_frame(self):
        h = self._recv_exact(4)
        if h is None:
            return None
        n = struct.unpack("!i", h)[0]
        if n < 0 or n > 64 * 1024 * 1024:
            raise RawError("bad frame length %d" % n)
        return self._recv_exact(n)

    def _read_loop(self):
        try:
            while True:
                frame = self._recv_frame()
                if frame is None:
                    break
                r = R(frame)
                xid, zxid, err = r.int(), r.long(), r.int()
                with self._lock:
                    self._seq += 1
                    seq = self._seq
                if zxid > 0:
                    self.last_zxid = max(self.last_zxid, zxid)
                if xid == -1:
                    ev = Event(r.int(), r.int(), r.string(), seq, zxid)
                    with self.events_cv:
                        self.events.append(ev)
                        self.events_cv.notify_all()
                elif xid == -2:
                    continue
                else:
                    with self._lock:
                        q = self._pending.pop(xid, None)
                    if q is not None:
                        q.put(Reply(xid, zxid, err, frame[r.off:], seq))
        except (OSError, RawError):
            pass
        finally:
            self.lost = True
            with self._lock:
                pend, self._pending = self._pending, {}
            for q in pend.values():
                q.put(None)
            with self.events_cv:
                self.events_cv.notify_all()

    def _ping_loop(self):
        interval = max(self.negotiated_timeout / 3000.0, 0.1)
        while not self._ping_stop.wait(interval):
            if self.lost or self.closed:
                return
            try:
                with self._lock:
                    self._send_frame(bytes(W().int(-2).int(OP.PING).b))
            except OSError:
                return

    # -- requests
    def send(self, op, body=b""):
        """Send a request; return a queue that will receive its Reply (or None)."""
        q = queue.Queue()
        with self._lock:
            if self.lost:
                raise ConnectionLost("connection lost")
            self._xid += 1
            xid = self._xid
            self._pending[xid] = q
            try:
                self._send_frame(bytes(W().int(xid).int(op).b) + bytes(body))
            except OSError as e:
                self._pending.pop(xid, None)
                raise ConnectionLost(str(e))
        return q

    def request(self, op, body=b"", timeout=10.0):
        q = self.send(op, body)
        try:
            rep = q.get(timeout=timeout)
        except queue.Empty:
            raise RawError("no reply to op %d within %.1fs" % (op, timeout))
        if rep is None:
            raise ConnectionLost("connection lost before reply to op %d" % op)
        return rep

    def call(self, op, body=b"", timeout=10.0):
        rep = self.request(op, body, timeout)
        if rep.err != 0:
            raise ZkError(rep.err, "op %d" % op)
        return rep

    # -- helpers (raise ZkError)
    def create(self, path, data=b"", acl=OPEN_ACL_UNSAFE, mode=CreateMode.PERSISTENT, ttl=None):
        """create2 / createContainer / createTTL; returns (path, stat)."""
        w = W().string(path).buffer(data).acls(acl).int(mode)
        if mode == CreateMode.CONTAINER:
            op = OP.CREATE_CONTAINER
        elif mode in (CreateMode.PERSISTENT_WITH_TTL, CreateMode.PERSISTENT_SEQUENTIAL_WITH_TTL):
            op = OP.CREATE_TTL
            w.long(ttl if ttl is not None else -1)
        else:
            op = OP.CREATE2
        r = self.call(op, w.b).reader()
        return r.string(), r.stat()

    def create_v1(self, path, data=b"", acl=OPEN_ACL_UNSAFE, mode=CreateMode.PERSISTENT):
        """the old create (opcode 1): returns the path only."""
        return self.call(OP.CREATE, W().string(path).buffer(data).acls(acl).int(mode).b).reader().string()

    def delete(self, path, version=-1):
        self.call(OP.DELETE, W().string(path).int(version).b)

    def exists(self, path, watch=False):
        rep = self.request(OP.EXISTS, W().string(path).bool(watch).b)
        if rep.err == ERR.NO_NODE:
            return None
        if rep.err:
            raise ZkError(rep.err, "exists")
        return rep.reader().stat()

    def get(self, path, watch=False):
        r = self.call(OP.GET_DATA, W().string(path).bool(watch).b).reader()
        return r.buffer(), r.stat()

    def set(self, path, data, version=-1):
        return self.call(OP.SET_DATA, W().string(path).buffer(data).int(version).b).reader().stat()

    def get_children(self, path, watch=False):
        r = self.call(OP.GET_CHILDREN2, W().string(path).bool(watch).b).reader()
        return r.strings(), r.stat()

    def get_acl(self, path):
        r = self.call(OP.GET_ACL, W().string(path).b).reader()
        return r.acls(), r.stat()

    def set_acl(self, path, acl, version=-1):
        return self.call(OP.SET_ACL, W().string(path).acls(acl).int(version).b).reader().stat()

    def sync(self, path):
        return self.call(OP.SYNC, W().string(path).b).reader().string()

    def _special(self, xid, op, body, timeout=10.0):
        q = queue.Queue()
        with self._lock:
            self._pending[xid] = q
            self._send_frame(bytes(W().int(xid).int(op).b) + bytes(body))
        rep = q.get(timeout=timeout)
        if rep is None:
            raise ConnectionLost("connection lost during op %d" % op)
        if rep.err:
            raise ZkError(rep.err, "op %d" % op)
        return rep

    def set_watches(self, relative_zxid, data=(), exist=(), child=(), persistent=None,
                    persistent_recursive=None):
        """SetWatches (101), or SetWatches2 (105) when persistent lists are given; xid -8."""
        w = W().long(relative_zxid).strings(list(data)).strings(list(exist)).strings(list(child))
        op = OP.SET_WATCHES
        if persistent is not None or persistent_recursive is not None:
            w.strings(list(persistent or [])).strings(list(persistent_recursive or []))
            op = OP.SET_WATCHES2
        return self._special(-8, op, w.b)

    def add_auth(self, scheme, auth):
        # auth replies use xid -4; a failure makes the server close the session
        q = queue.Queue()
        with self._lock:
            self._pending[-4] = q
            self._send_frame(bytes(W().int(-4).int(OP.AUTH).int(0).string(scheme).buffer(auth).b))
        rep = q.get(timeout=10)
        if rep is None:
            raise ConnectionLost("connection lost during auth")
        if rep.err:
            raise ZkError(rep.err, "auth")

    def add_watch(self, path, mode):
        self.call(OP.ADD_WATCH, W().string(path).int(mode).b)

    def remove_watches(self, path, wtype):
        self.call(OP.REMOVE_WATCHES, W().string(path).int(wtype).b)

    def check_watches(self, path, wtype):
        self.call(OP.CHECK_WATCHES, W().string(path).int(wtype).b)

    def get_ephemerals(self, prefix):
        return self.call(OP.GET_EPHEMERALS, W().string(prefix).b).reader().strings()

    def get_all_children_number(self, path):
        return self.call(OP.GET_ALL_CHILDREN_NUMBER, W().string(path).b).reader().int()

    def whoami(self):
        r = self.call(OP.WHO_AM_I).reader()
        n = r.int()
        return [(r.string(), r.string()) for _ in range(n)]

    # -- multi: ops are tuples ("create", path, data, acl, mode) | ("delete", path, version)
    #    | ("set", path, data, version) | ("check", path, version)
    #    | ("get_data", path) | ("get_children", path)  (the last two for multiRead)
    def multi(self, ops, read=False):
        w = W()
        for op in ops:
            kind = op[0]
            if kind == "create":
                _, path, data, acl, mode = op
                if mode == CreateMode.CONTAINER:
                    code = OP.CREATE_CONTAINER
                else:
                    code = OP.CREATE2
                w.int(code).bool(False).int(-1)
                w.string(path).buffer(data).acls(acl).int(mode)
            elif kind == "delete":
                w.int(OP.DELETE).bool(False).int(-1).string(op[1]).int(op[2])
            elif kind == "set":
                w.int(OP.SET_DATA).bool(False).int(-1).string(op[1]).buffer(op[2]).int(op[3])
            elif kind == "check":
                w.int(OP.CHECK).bool(False).int(-1).string(op[1]).int(op[2])
            elif kind == "get_data":
                w.int(OP.GET_DATA).bool(False).int(-1).string(op[1]).bool(False)
            elif kind == "get_children":
                w.int(OP.GET_CHILDREN).bool(False).int(-1).string(op[1]).bool(False)
            else:
                raise ValueError(kind)
        w.int(-1).bool(True).int(-1)
        rep = self.request(OP.MULTI_READ if read else OP.MULTI, w.b)
        return rep.err, self._parse_multi(rep.reader())

    @staticmethod
    def _parse_multi(r):
        results = []
        while not r.done():
            t, done, err = r.int(), r.bool(), r.int()
            if done:
                break
            if t == OP.ERROR:
                results.append(("error", r.int()))
            elif t == OP.CREATE:
                results.append(("create", r.string()))
            elif t in (OP.CREATE2, OP.CREATE_CONTAINER, OP.CREATE_TTL):
                results.append(("create", r.string(), r.stat()))
            elif t == OP.DELETE:
                results.append(("delete",))
            elif t == OP.SET_DATA:
                results.append(("set", r.stat()))
            elif t == OP.CHECK:
                results.append(("check",))
            elif t == OP.GET_DATA:
                results.append(("get_data", r.buffer(), r.stat()))
            elif t == OP.GET_CHILDREN:
                results.append(("get_children", r.strings()))
            else:
                raise RawError("unknown multi result type %d" % t)
        return results

    # -- events
    def wait_events(self, n, timeout=10.0):
        """Wait until at least n events have arrived; return a copy of all."""
        deadline = time.monotonic() + timeout
        with self.events_cv:
            while len(self.events) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("expected %d events, got %d: %r" % (n, len(self.events), self.events))
                self.events_cv.wait(left)
            return list(self.events)

    def close(self, timeout=5.0):
        if self.closed:
            return
        self.closed = True
        self._ping_stop.set()
        try:
            if not self.lost:
                self.request(OP.CLOSE_SESSION, b"", timeout=timeout)
        except RawError:
            pass
        finally:
            self.drop()

    def drop(self):
        """Close the socket without closing the session."""
        self._ping_stop.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._reader.join(timeout=5)


def assert_enforce_auth_refuses_a_plain_client(srv):
    """With enforce.auth.schemes=sasl, a client that did not authenticate is
    refused its first request with SessionClosedRequireSasl."""
    import pytest
    from kazoo.client import KazooClient
    from kazoo.exceptions import SessionClosedRequireSaslError
    plain = KazooClient(hosts=srv.hosts, timeout=10)
    try:
        plain.start(timeout=5)
        with pytest.raises(SessionClosedRequireSaslError):
            plain.get("/")
    finally:
        plain.stop()
        plain.close()


def plain_stoa_pass_only(what):
    """The skip marks of a test that starts its own Stoa servers (`what`): it
    runs once, in the plain STOA_TARGET=stoa pass at partitions=1."""
    # Here, not at the top: the benchmarks import this module from a
    # Python without pytest (bench/requirements.txt).
    import pytest
    return [
        pytest.mark.skipif(target() != "stoa" or ensemble_target(),
                           reason="starts its own %s: runs under STOA_TARGET=stoa" % what),
        pytest.mark.skipif(stoa_partitions() > 1,
                           reason="starts its own %s: runs in the partitions=1 pass" % what),
    ]


def example_extension(name):
    """The source of a shipped extension (examples/extensions/NAME)."""
    with open(os.path.join(REPO_ROOT, "examples", "extensions", name)) as f:
        return f.read()


def register_extension(client, name, path, source, kind="node", ephemeral=False, **extra):
    """Registers an extension as /extensions/NAME (`path` None: a watch or
    session extension without one)."""
    doc = dict(kind=kind, source=source, **extra)
    if path is not None:
        doc["path"] = path
    client.create("/extensions/" + name, json.dumps(doc).encode(), ephemeral=ephemeral)


def mntr_int(server, key):
    """The integer row `key` of the server's mntr (KeyError when it has none)."""
    for line in server.four_letter("mntr").splitlines():
        k, _, v = line.partition("\t")
        if k == key:
            return int(v)
    raise KeyError(key)


@contextlib.contextmanager
def started_client(client, timeout=10.0):
    """`client` started; stopped and closed however the block ends."""
    try:
        client.start(timeout=timeout)
        yield client
    finally:
        client.stop()
        client.close()


def zookeeper_395(admin=False, cli=False):
    """Apache ZooKeeper 3.9.5's jars from Maven Central (cached under
    target/anchors), with its AdminServer's or its command line client's
    where asked; the test skips, saying why, when they cannot be had."""
    import pytest
    if REPO_ROOT not in sys.path:
        sys.path.insert(0, REPO_ROOT)
    from bench.compare.anchors import AnchorUnavailable, maven
    try:
        jars, _ = maven.zookeeper(admin=admin, cli=cli)
    except AnchorUnavailable as e:
        pytest.skip("ZooKeeper 3.9.5 cannot be had: %s" % e)
    return jars


def zookeeper_35_or_skip():
    """Apache ZooKeeper 3.5.10's jars from Maven Central (cached under
    target/anchors): the last ZooKeeper without per-session isolation of
    reads. The test skips, saying why, when they cannot be had."""
    import pytest
    if REPO_ROOT not in sys.path:
        sys.path.insert(0, REPO_ROOT)
    from bench.compare.anchors import AnchorUnavailable, maven
    try:
        jars, _ = maven.zookeeper_35()
    except AnchorUnavailable as e:
        pytest.skip("ZooKeeper 3.5.10 cannot be had: %s" % e)
    return jars


def set_member_cfg(member, changes):
    """Rewrites `member`'s zoo.cfg: each key of `changes` set to its value
    (added if absent), or dropped when the value is None."""
    with open(member.cfg_path) as f:
        lines = [l for l in f.read().splitlines() if l.split("=", 1)[0] not in changes]
    lines += ["%s=%s" % (k, v) for k, v in changes.items() if v is not None]
    with open(member.cfg_path, "w") as f:
        f.write("\n".join(lines) + "\n")


def ensemble_replicates(ens, path):
    """Starts `ens`, writes `path` through its client member and reads it
    back from the member that neither leads nor serves that client;
    (leader, that member)."""
    from kazoo.client import KazooClient
    ens.start()
    leader = ens.leader()
    assert leader is not None
    other = [m for m in ens.members if m is not ens.client_member and m is not leader][0]
    with started_client(KazooClient(hosts=ens.hosts, timeout=10)) as c:
        c.create(path, b"1")
    with started_client(KazooClient(hosts=other.hosts, timeout=10)) as reader:
        reader.sync(path)
        assert reader.get(path)[0] == b"1"
    return leader, other
