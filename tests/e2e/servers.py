"""Server processes on 127.0.0.1, shared by the end-to-end harness
(harness.py) and the benchmarks (bench/compare): Stoa and Apache ZooKeeper
configured by a zoo.cfg we write, etcd by its flags, ensembles of each, free
ports.

Every process started here is stopped by PID (SIGTERM, then SIGKILL after a
bound), also at interpreter exit; every wait is bounded.
"""

import atexit
import base64
import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Where `cargo build --release` put it: cargo honours CARGO_TARGET_DIR (a
# relative one is taken from the repository root, where scripts/test runs
# cargo).
DEFAULT_STOA_BIN = os.path.join(REPO_ROOT, os.environ.get("CARGO_TARGET_DIR") or "target",
                                "release", "stoa")
DEBIAN_ETCD_BIN = "/usr/bin/etcd"

SUPER_PASSWORD = "test"


def stoa_bin():
    return os.environ.get("STOA_BIN", DEFAULT_STOA_BIN)


def stoa_partitions():
    """STOA_PARTITIONS=N: every Stoa server the suite starts runs N
    partitions (zoo.cfg partitions=N), except those a test configures with
    reconfigEnabled=true (reconfig needs one partition so far)."""
    return int(os.environ.get("STOA_PARTITIONS", "1"))


def stoa_io_threads():
    """STOA_IO_THREADS=N: every Stoa server the suite starts runs its
    client connections on N I/O threads (zoo.cfg io.threads=N); unset,
    the server's default."""
    return os.environ.get("STOA_IO_THREADS")


def stoa_partition_threads():
    """STOA_PARTITION_THREADS=N: every Stoa server the suite starts lends its
    partitions to N worker threads (zoo.cfg partition.threads=N); unset, the
    server's default."""
    return os.environ.get("STOA_PARTITION_THREADS")


def stoa_partition_owned():
    """STOA_PARTITION_OWNED=yes|no: every Stoa server the suite starts gives
    each partition's core a thread of its own between turns (zoo.cfg
    partition.owned); unset, the server's default."""
    return os.environ.get("STOA_PARTITION_OWNED") or None


def digest(user, password):
    """The ZooKeeper digest id for user:password (base64 of SHA1)."""
    raw = ("%s:%s" % (user, password)).encode()
    return "%s:%s" % (user, base64.b64encode(hashlib.sha1(raw).digest()).decode())


SUPER_DIGEST = digest("super", SUPER_PASSWORD)


# --------------------------------------------------------------------------
# ports

_HANDED_OUT = set()


def _listen_ports():
    """The range listening ports are handed out from: just below the
    kernel's ephemeral range. Outgoing connections take their local ports
    from that range, so a port chosen there and let go before its server
    binds it can be taken by any connection meanwhile (a quorum port lost
    that way stopped an ensemble's start: "Address already in use")."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    top = low - 1
    bottom = max(1024, top - 12000)
    return (bottom, top) if top - bottom >= 1000 else None


_LISTEN_PORTS = _listen_ports()
_PICK = random.Random(os.getpid() ^ int(time.time()))


def _bind_unhanded(sock):
    """Binds `sock` to a 127.0.0.1 port not handed out before in this run,
    from the listening range when there is one; the port."""
    if _LISTEN_PORTS is not None:
        for _ in range(500):
            port = _PICK.randint(*_LISTEN_PORTS)
            if port in _HANDED_OUT:
                continue
            try:
                sock.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    # No range (not Linux): the kernel's pick, which may repeat one.
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]


def free_port():
    """A port free now and not handed out before in this run (the kernel
    may offer a just-closed port again, and two servers of one ensemble
    given the same port would fail to start), outside the range outgoing
    connections take theirs from (`_listen_ports`)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        port = _bind_unhanded(s)
    finally:
        s.close()
    _HANDED_OUT.add(port)
    return port


@contextlib.contextmanager
def held_ports(n):
    """n distinct free ports, kept bound until the block ends: the members
    of an ensemble pick their client ports (free_port) inside it, and the
    kernel cannot offer a held port to them."""
    socks, ports = [], []
    try:
        for _ in range(n):
            sk = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sk)
            port = _bind_unhanded(sk)
            ports.append(port)
            _HANDED_OUT.add(port)
        yield ports
    finally:
        for sk in socks:
            sk.close()


# --------------------------------------------------------------------------
# talking to a ZooKeeper-protocol server without a client library

def four_letter(host, port, cmd, timeout=5.0):
    """Send a four letter word and read the reply until the server closes."""
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        s.sendall(cmd.encode())
        chunks = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks).decode("utf-8", "replace")
    finally:
        s.close()


def srvr_mode(server):
    """The Mode from a server's srvr (standalone, leader, follower, ...), or None."""
    try:
        m = re.search(r"^Mode: (\S+)$", server.four_letter("srvr", timeout=2.0), re.M)
    except OSError:
        return None
    return m.group(1) if m else None


def srvr_zxid(server):
    try:
        m = re.search(r"^Zxid: 0x([0-9a-f]+)$", server.four_letter("srvr", timeout=2.0), re.M)
    except OSError:
        return None
    return int(m.group(1), 16) if m else None


def _recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def session_opens(host, port, timeout_ms, connect_timeout):
    """Whether the server grants a new session (then closed again): ruok
    answers before the request pipeline is up, a session proves it. The
    handshake by hand, as harness.RawClient sends it, so that this module
    needs no client."""
    sock = socket.create_connection((host, port), timeout=connect_timeout)
    try:
        connect = struct.pack("!iqiqi16sB", 0, 0, timeout_ms, 0, 16, b"\0" * 16, 0)
        sock.sendall(struct.pack("!i", len(connect)) + connect)
        head = _recv_exact(sock, 4)
        if head is None:
            return False
        body = _recv_exact(sock, struct.unpack("!i", head)[0])
        if body is None or len(body) < 16:
            return False
        _, negotiated, session_id = struct.unpack("!iiq", body[:16])
        if session_id == 0 or negotiated <= 0:
            return False
        close = struct.pack("!ii", 1, -11)  # xid 1, closeSession
        sock.sendall(struct.pack("!i", len(close)) + close)
        try:
            _recv_exact(sock, 4)  # the reply, so the session is gone before we go on
        except OSError:
            pass  # granted all the same
        return True
    finally:
        sock.close()


# --------------------------------------------------------------------------
# processes

_LIVE = set()
_LIVE_LOCK = threading.Lock()


def _atexit_kill():
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for p in procs:
        try:
            p.kill()
            p.wait(timeout=5)
        except Exception:
            pass


atexit.register(_atexit_kill)


def terminate(proc, timeout=10.0):
    """SIGTERM `proc` if it runs, wait up to timeout, then SIGKILL."""
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


class Process:
    """One server process with its own base dir and log file; subclasses
    give its command line (_argv) and how to tell it serves (wait_ready)."""

    def __init__(self, kind, base_dir):
        self.kind = kind
        self.base_dir = base_dir
        self.log_path = os.path.join(base_dir, "server.log")
        self.proc = None
        self._log_file = None

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def launch(self):
        """Starts the process without waiting for it to serve."""
        assert not self.running(), "already running"
        self._log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self._argv(), stdout=self._log_file,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=self.base_dir, start_new_session=True)
        with _LIVE_LOCK:
            _LIVE.add(self.proc)
        return self

    def _reap(self):
        with _LIVE_LOCK:
            _LIVE.discard(self.proc)
        if self._log_file:
            self._log_file.close()
            self._log_file = None

    def stop(self, timeout=10.0):
        """SIGTERM, wait up to timeout, then SIGKILL."""
        if self.proc is None:
            return
        terminate(self.proc, timeout)
        self._reap()

    def kill9(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._reap()

    def log_tail(self, n=60):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return "(no log)"


# --------------------------------------------------------------------------
# Apache ZooKeeper's classes: Debian's package, or jars fetched elsewhere

LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.Target=System.err
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} - %-5p [%t:%C{1}@%L] - %m%n
"""

LOGBACK_XML = """\
<configuration>
  <appender name="CONSOLE" class="ch.qos.logback.core.ConsoleAppender">
    <target>System.err</target>
    <encoder><pattern>%d{ISO8601} - %-5p [%t:%C{1}@%L] - %m%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="CONSOLE"/></root>
</configuration>
"""

ZK_JARS = [
    "/usr/share/java/zookeeper.jar",  # its manifest Class-Path brings the rest
    "/usr/share/java/slf4j-log4j12.jar",
    "/usr/share/java/log4j-1.2.jar",
]

ZK_STANDALONE_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
ZK_QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class ZooKeeperJars:
    """A ZooKeeper's class path and its logging backend: "log4j" (1.2,
    through slf4j-log4j12, as Debian packages 3.8) or "logback" (upstream's
    since 3.8)."""

    def __init__(self, classpath, logging):
        assert logging in ("log4j", "logback"), logging
        self.classpath = list(classpath)
        self.logging = logging

    def present(self):
        return all(os.path.exists(j) for j in self.classpath)

    def logging_flags(self, base_dir):
        """JVM flags that send the log to stderr (our log file), writing
        the backend's config file into base_dir."""
        if self.logging == "log4j":
            path = os.path.join(base_dir, "log4j.properties")
            text, flag = LOG4J_PROPERTIES, "-Dlog4j.configuration=file:" + path
        else:
            path = os.path.join(base_dir, "logback.xml")
            text, flag = LOGBACK_XML, "-Dlogback.configurationFile=" + path
        with open(path, "w") as f:
            f.write(text)
        return [flag]


DEBIAN_ZOOKEEPER = ZooKeeperJars(ZK_JARS, "log4j")

# The tests' JVM: start-up time over speed. A benchmark passes its own.
TEST_JVM_FLAGS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


class Server(Process):
    """One server process (Stoa or ZooKeeper) configured by a zoo.cfg we write.

    kind: "stoa" or "zookeeper" (default: default_kind()). Keyword options
    become zoo.cfg entries. A ZooKeeper runs the classes of `zookeeper` (a
    ZooKeeperJars, default Debian's package) with `jvm_flags`, as
    QuorumPeerMain when `quorum` (an ensemble member), else standalone.
    """

    def __init__(self, kind=None, tick_time=2000, min_session_timeout=None,
                 max_session_timeout=None, max_client_cnxns=60,
                 container_check_ms=500, super_digest=True, extra_cfg=None,
                 base_dir=None, ensemble=None, zookeeper=None, jvm_flags=TEST_JVM_FLAGS,
                 quorum=False):
        kind = kind or self.default_kind()
        own_base = base_dir is None
        super().__init__(kind, base_dir or tempfile.mkdtemp(prefix="stoa-e2e-%s-" % kind))
        self.port = free_port()
        self.hosts = "127.0.0.1:%d" % self.port
        self._own_base = own_base
        self.data_dir = os.path.join(self.base_dir, "data")
        os.makedirs(self.data_dir, exist_ok=True)
        self.cfg_path = os.path.join(self.base_dir, "zoo.cfg")
        self.tick_time = tick_time
        self.min_session_timeout = min_session_timeout or 2 * tick_time
        self.max_session_timeout = max_session_timeout or 20 * tick_time
        self.container_check_ms = container_check_ms
        self.super_digest = super_digest
        self.zookeeper = zookeeper or DEBIAN_ZOOKEEPER
        self.jvm_flags = list(jvm_flags)
        self.quorum = quorum
        cfg = [
            ("tickTime", tick_time),
            ("dataDir", self.data_dir),
            ("clientPort", self.port),
            ("clientPortAddress", "127.0.0.1"),
            ("maxClientCnxns", max_client_cnxns),
            ("minSessionTimeout", self.min_session_timeout),
            ("maxSessionTimeout", self.max_session_timeout),
            ("4lw.commands.whitelist", "*"),
            # No AdminServer: it would take port 8080.
            ("admin.enableServer", "false"),
            ("extendedTypesEnabled", "true"),
            ("znode.container.checkIntervalMs", container_check_ms),
        ]
        if super_digest:
            cfg.append(("DigestAuthenticationProvider.superDigest", SUPER_DIGEST))
        for k, v in (extra_cfg or {}).items():
            cfg.append((k, v))
        partitions = stoa_partitions()
        extra = extra_cfg or {}
        if (kind == "stoa" and partitions > 1 and "partitions" not in extra
                and extra.get("reconfigEnabled") != "true"):
            cfg.append(("partitions", partitions))
        if kind == "stoa" and stoa_io_threads() is not None and "io.threads" not in extra:
            cfg.append(("io.threads", stoa_io_threads()))
        if (kind == "stoa" and stoa_partition_threads() is not None
                and "partition.threads" not in extra):
            cfg.append(("partition.threads", stoa_partition_threads()))
        if (kind == "stoa" and stoa_partition_owned() is not None
                and "partition.owned" not in extra):
            cfg.append(("partition.owned", stoa_partition_owned()))
        with open(self.cfg_path, "w") as f:
            for k, v in cfg:
                f.write("%s=%s\n" % (k, v))

    def default_kind(self):
        raise ValueError("Server needs a kind: 'stoa' or 'zookeeper'")

    # -- command lines
    def _argv(self):
        if self.kind == "stoa":
            return [stoa_bin(), "server", "--config", self.cfg_path]
        java = shutil.which("java") or "/usr/bin/java"
        argv = [java] + self.jvm_flags + self.zookeeper.logging_flags(self.base_dir) + [
            "-Dzookeeper.log.dir=" + self.base_dir,
            "-Dznode.container.checkIntervalMs=%d" % self.container_check_ms,
            "-Dzookeeper.extendedTypesEnabled=true",
        ]
        if self.super_digest:
            argv.append("-Dzookeeper.DigestAuthenticationProvider.superDigest=" + SUPER_DIGEST)
        argv += ["-cp", ":".join(self.zookeeper.classpath),
                 ZK_QUORUM_MAIN if self.quorum else ZK_STANDALONE_MAIN, self.cfg_path]
        return argv

    def launch(self):
        if self.kind == "stoa" and not os.access(stoa_bin(), os.X_OK):
            raise RuntimeError("Stoa binary not found at %s (set STOA_BIN or cargo build --release)"
                               % stoa_bin())
        return super().launch()

    def start(self, timeout=30.0, serving=True):
        """Starts the process and waits until it serves a session, or only
        until it answers ruok when `serving` is false (a server that waits
        to be added to an ensemble serves nobody yet)."""
        self.launch()
        return self.wait_ready(timeout, serving)

    def wait_ready(self, timeout=30.0, serving=True):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %s during start\n%s"
                                   % (self.kind, self.proc.returncode, self.log_tail()))
            if self._ready(serving):
                return self
            time.sleep(0.05)
        self.kill9()
        raise RuntimeError("%s not ready after %.0fs\n%s" % (self.kind, timeout, self.log_tail()))

    def _ready(self, serving=True):
        try:
            if four_letter("127.0.0.1", self.port, "ruok", timeout=1.0).strip() == "imok":
                return not serving or session_opens("127.0.0.1", self.port,
                                                    self.min_session_timeout, 2.0)
        except (OSError, struct.error):
            return False
        return False

    def restart(self, timeout=30.0):
        self.stop()
        return self.start(timeout=timeout)

    def four_letter(self, cmd, timeout=5.0):
        return four_letter("127.0.0.1", self.port, cmd, timeout=timeout)

    def version(self):
        """(major, minor, patch) from srvr's 'Zookeeper version:' line, or None."""
        m = re.search(r"Zookeeper version: (\d+)\.(\d+)\.(\d+)", self.four_letter("srvr"))
        return tuple(int(x) for x in m.groups()) if m else None

    def cleanup(self):
        self.stop()
        try:
            if self.kind == "stoa":
                assert_log_clean(self.log_path)
        finally:
            if self._own_base and not os.environ.get("STOA_E2E_KEEP"):
                shutil.rmtree(self.base_dir, ignore_errors=True)

    def __repr__(self):
        return "<Server %s %s pid=%s>" % (self.kind, self.hosts, self.pid)


# What a Stoa server logs only when it is wrong, whatever the test did: a
# transaction's chain link that does not match its partition's last item
# (crates/core/src/engine/chains.rs; fatal in the simulators, only logged in
# a server).
LOG_NEVER = ("chain broken",)


def assert_log_clean(log_path):
    """Fails the test (at its cleanup) if the server's log has a line that
    no run may produce."""
    try:
        with open(log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return
    bad = [line for line in text.splitlines() if any(s in line for s in LOG_NEVER)]
    assert not bad, "%s: %s" % (log_path, "\n".join(bad[:5]))


# --------------------------------------------------------------------------
# etcd

class EtcdServer(Process):
    """A one-member etcd (or a cluster member) on free 127.0.0.1 ports
    (client and peer) with its own data dir, otherwise etcd's defaults: a
    write is acknowledged once its raft entry is fsynced to etcd's WAL (one
    fsync per raft batch, as group commit), the bbolt backend is committed
    every 100 ms, no auto-compaction. `binary`: which etcd (default
    ETCD_BIN, else Debian's). Same interface as Server where it applies
    (hosts, pid, launch, start, stop, version)."""

    def __init__(self, base_dir, name="bench", ports=None, extra_args=(), binary=None):
        """ports: (client, peer), else free ones. A cluster member gets its
        peers with initial_cluster before launch()."""
        super().__init__("etcd", base_dir)
        self.binary = binary or default_etcd_binary()
        self.port, self.peer_port = ports or (free_port(), free_port())
        self.hosts = "127.0.0.1:%d" % self.port
        self.url = "http://" + self.hosts
        self.peer_url = "http://127.0.0.1:%d" % self.peer_port
        self.name = name
        self.initial_cluster = "%s=%s" % (name, self.peer_url)
        self.extra_args = list(extra_args)
        self.data_dir = os.path.join(base_dir, "data")

    def _argv(self):
        peer = self.peer_url
        return [self.binary, "--name", self.name, "--data-dir", self.data_dir,
                "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", self.initial_cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", "stoa-bench-compare",
                "--logger", "zap", "--log-outputs", "stderr"] + self.extra_args

    def call(self, path, body=None, timeout=2.0):
        """etcd's HTTP API (the v3 gRPC gateway with a JSON body, or GET)."""
        data = None if body is None else json.dumps(body).encode()
        with urllib.request.urlopen(self.url + path, data=data, timeout=timeout) as r:
            return json.loads(r.read().decode())

    def wait_ready(self, timeout=60.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("etcd exited with %s during start\n%s"
                                   % (self.proc.returncode, self.log_tail()))
            try:
                # /health answers true once the member has a leader and
                # serves a linearizable read.
                if str(self.call("/health", timeout=1.0).get("health")) == "true":
                    return self
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("etcd not ready after %.0fs\n%s" % (timeout, self.log_tail()))

    def start(self, timeout=60.0):
        return self.launch().wait_ready(timeout)

    def version(self):
        """(major, minor, patch) of the running server, or None."""
        try:
            v = self.call("/version").get("etcdserver", "")
            return tuple(int(x) for x in v.split(".")[:3])
        except (OSError, ValueError):
            return None

    def __repr__(self):
        return "<EtcdServer %s %s pid=%s>" % (self.name, self.hosts, self.pid)


def default_etcd_binary():
    return os.environ.get("ETCD_BIN") or (DEBIAN_ETCD_BIN if os.path.exists(DEBIAN_ETCD_BIN)
                                          else shutil.which("etcd") or DEBIAN_ETCD_BIN)


# --------------------------------------------------------------------------
# ensembles

def write_myid(data_dir, n):
    with open(os.path.join(data_dir, "myid"), "w") as f:
        f.write("%d\n" % n)


def run_parallel(fn, items):
    """fn on every item at once, each in a thread; the first error raised
    again once all are done (a member's start waits for a quorum, which
    forms only with the others starting too)."""
    errors = []

    def run(x):
        try:
            fn(x)
        except BaseException as e:  # noqa: B902 - raised again below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(x,), daemon=True) for x in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


ENSEMBLE_SIZE = 3


class Ensemble:
    """`size` members of one kind on 127.0.0.1, each with its own data dir
    under base_dir/mN, shown as one server whose hosts list every member
    and whose pids are every process. ZooKeeper and Stoa: the same zoo.cfg
    plus server.N=127.0.0.1:quorum:election lines and a myid per member
    (ZooKeeper runs QuorumPeerMain; server_kw go to each Server); etcd:
    --initial-cluster of the members (etcd_binary picks which etcd)."""

    def __init__(self, kind, base_dir, size=ENSEMBLE_SIZE, extra_cfg=None, etcd_binary=None,
                 **server_kw):
        self.kind = kind
        self.members = []
        with held_ports(2 * size) as ports:
            if kind == "etcd":
                for i in range(size):
                    d = os.path.join(base_dir, "m%d" % (i + 1))
                    os.makedirs(d)
                    self.members.append(EtcdServer(d, name="m%d" % (i + 1), binary=etcd_binary,
                                                   ports=(ports[2 * i], ports[2 * i + 1])))
                cluster = ",".join("%s=%s" % (m.name, m.peer_url) for m in self.members)
                for m in self.members:
                    m.initial_cluster = cluster
            else:
                cfg = {"server.%d" % (i + 1): "127.0.0.1:%d:%d" % (ports[2 * i], ports[2 * i + 1])
                       for i in range(size)}
                cfg.update(extra_cfg or {})
                for i in range(size):
                    d = os.path.join(base_dir, "m%d" % (i + 1))
                    os.makedirs(d)
                    m = Server(kind=kind, extra_cfg=cfg, base_dir=d,
                               quorum=kind == "zookeeper", **server_kw)
                    write_myid(m.data_dir, i + 1)
                    self.members.append(m)
        self.hosts = ",".join(m.hosts for m in self.members)

    @property
    def pids(self):
        return [m.pid for m in self.members]

    @property
    def pid(self):
        return self.members[0].pid

    def start(self, timeout=90.0):
        """Starts every member and waits until they have one leader."""
        try:
            if self.kind == "etcd":
                for m in self.members:
                    m.launch()
                run_parallel(lambda m: m.wait_ready(timeout=timeout), self.members)
            else:
                # Each member's start waits until it takes a session, i.e.
                # until it is in a quorum with a leader.
                run_parallel(lambda m: m.start(timeout=timeout), self.members)
            deadline = time.monotonic() + timeout
            while self.leader() is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("no single leader among %r" % self)
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise
        return self

    def leader(self):
        """The leader's member number (1-based), or None."""
        if self.kind == "etcd":
            try:
                st = [m.call("/v3/maintenance/status", body={}) for m in self.members]
                ids = [str(s["header"]["member_id"]) for s in st]
                leaders = {str(s["leader"]) for s in st}
            except (OSError, ValueError, KeyError):
                return None
            return ids.index(leaders.pop()) + 1 if len(leaders) == 1 and leaders <= set(ids) \
                else None
        modes = [srvr_mode(m) for m in self.members]
        return modes.index("leader") + 1 if modes.count("leader") == 1 else None

    def stop(self, timeout=30.0):
        """Stops every member, also when one of them fails to stop."""
        errors = []
        for m in self.members:
            try:
                m.stop(timeout=timeout)
            except Exception as e:  # keep stopping the others
                errors.append("stopping %r: %s" % (m, e))
        if errors:
            raise RuntimeError("; ".join(errors))

    def version(self):
        return self.members[0].version()

    def __repr__(self):
        return "<Ensemble %s %s pids=%s>" % (self.kind, self.hosts, self.pids)
