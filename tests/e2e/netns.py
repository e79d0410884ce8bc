"""Network namespaces for partition tests: one namespace per server, two
switches (Linux bridges in the root namespace) and commands to cut and heal
one member's link to its peers.

    client LAN  10.77.C.0/24  bridge <tag>cb (10.77.C.1, the test process)
                              veth <tag>cNh (bridge port) <-> cN (in ns N, 10.77.C.(10+N))
    quorum LAN  10.77.Q.0/24  bridge <tag>qb (no address: L2 only)
                              veth <tag>qNh (bridge port) <-> qN (in ns N, 10.77.Q.(10+N))

Clients (in the test process) reach every server over the client LAN;
servers talk raft over the quorum LAN only (their server.N lines name
quorum LAN addresses). cut(N) takes member N's quorum port on the bridge
down: its packets to the peers and theirs to it are dropped silently (no
RST, no ICMP from the far side, established TCP connections just stall),
while its client LAN link stays up, so a client can still talk to a member
that cannot reach its peers. heal(N) brings the port back up.
partition(group) moves the group's quorum ports to a bridge of their own
(<tag>pb): the group's members still reach each other but none of the rest
(a minority partition, not just isolated members); rejoin() moves them back.

NsServer (a harness.Server in a namespace) and start_cluster() (a leader-
elected ensemble of them, torn down by PID and name through the pytest
request's finalizers) are shared by the partition and linearizability tests.

Only iproute2 and the kernel's veth and bridge drivers are needed (no
netem, tc actions or nftables). Every command is bounded in time; destroy()
deletes what setup() created, also when setup() failed half way, and a
sweep removes what a killed earlier run left behind.
"""

import atexit
import concurrent.futures
import ipaddress
import os
import random
import re
import signal
import subprocess
import threading

import harness as h

NS_PREFIX = "stoa-pt-"
CMD_TIMEOUT = 10.0

_seq = 0
_seq_lock = threading.Lock()
_LIVE = set()


class NetnsUnavailable(Exception):
    """This machine (or user) cannot make namespaces, veths or bridges."""


def ip(*args, check=True, timeout=CMD_TIMEOUT):
    r = subprocess.run(["ip"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("ip %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                   r.stderr.decode(errors="replace").strip()))
    return r


def probe():
    """Raise NetnsUnavailable with the reason if namespaces cannot be used here."""
    if os.geteuid() != 0:
        raise NetnsUnavailable("network namespaces need root (euid %d)" % os.geteuid())
    try:
        name = "%sprobe-%d" % (NS_PREFIX, os.getpid())
        r = ip("netns", "add", name, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NetnsUnavailable("cannot run `ip netns add`: %s" % e)
    if r.returncode != 0:
        raise NetnsUnavailable("`ip netns add` failed: %s" % r.stderr.decode(errors="replace").strip())
    try:
        tag = "sp%x" % os.getpid()
        r = ip("link", "add", tag + "a", "type", "veth", "peer", "name", tag + "b", check=False)
        if r.returncode != 0:
            raise NetnsUnavailable("cannot create a veth pair: %s" % r.stderr.decode(errors="replace").strip())
        ip("link", "del", tag + "a", check=False)
        r = ip("link", "add", tag + "br", "type", "bridge", check=False)
        if r.returncode != 0:
            raise NetnsUnavailable("cannot create a bridge: %s" % r.stderr.decode(errors="replace").strip())
        ip("link", "del", tag + "br", check=False)
    finally:
        ip("netns", "del", name, check=False)


def _stale(pid):
    if pid == os.getpid():
        return not _LIVE
    return not os.path.exists("/proc/%d" % pid)


def sweep_stale():
    """Delete namespaces and links left by earlier runs whose process is gone."""
    r = ip("netns", "list", check=False)
    for line in r.stdout.decode(errors="replace").splitlines():
        m = re.match(r"(%s(?:probe-|netem-)?(\d+)\S*)" % re.escape(NS_PREFIX), line.strip())
        if m and _stale(int(m.group(2))):
            _kill_servers_in(m.group(1))
            ip("netns", "del", m.group(1), check=False)
    r = ip("-o", "link", "show", check=False)
    for line in r.stdout.decode(errors="replace").splitlines():
        # regions.py adds region bridges (r<N>b) and WAN link ends (w<N>a..d).
        m = re.match(r"\d+: (s([0-9a-f]+)x[0-9a-f]+(?:cb|qb|pb|[cq]\d+h|r\d+b|w\d+[a-d]))[@:]",
                     line)
        if m and _stale(int(m.group(2), 16)):
            ip("link", "del", m.group(1), check=False)


def _kill_servers_in(namespace):
    """SIGKILL the processes a killed run left in its namespace (its servers,
    started in sessions of their own, outlive it): deleting the name alone
    would leave them running there."""
    r = ip("netns", "pids", namespace, check=False)
    for pid in r.stdout.decode(errors="replace").split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ValueError, OSError):
            pass


def _used_subnets():
    used = set()
    out = ip("-4", "-o", "addr", "show", check=False).stdout.decode() + \
        ip("-4", "route", "show", "table", "all", check=False).stdout.decode()
    for m in re.finditer(r"\b10\.77\.(\d+)\.", out):
        used.add(int(m.group(1)))
    return used


class Topology:
    """n namespaces on a client LAN and a quorum LAN (see the module doc)."""

    def __init__(self, n):
        global _seq
        with _seq_lock:
            _seq += 1
            seq = _seq
        pid = os.getpid()
        self.n = n
        self.tag = "s%xx%x" % (pid, seq)  # interface names: <= 15 chars
        assert len(self.tag) + 3 <= 15, self.tag
        self.namespaces = ["%s%d-%d-%d" % (NS_PREFIX, pid, seq, i + 1) for i in range(n)]
        used = _used_subnets()
        free = [k for k in range(1, 127) if 2 * k not in used and 2 * k + 1 not in used]
        if not free:
            raise RuntimeError("no free 10.77.x.0/24 pair on this machine")
        k = random.Random(pid * 1000 + seq).choice(free)
        self.client_net = ipaddress.ip_network("10.77.%d.0/24" % (2 * k))
        self.quorum_net = ipaddress.ip_network("10.77.%d.0/24" % (2 * k + 1))
        self.gateway = str(self.client_net.network_address + 1)
        self.client_bridge = self.tag + "cb"
        self.quorum_bridge = self.tag + "qb"
        self.partition_bridge = self.tag + "pb"
        self._made_links = []
        self._made_ns = []
        self._cut = set()
        self._partitioned = set()

    # addresses of member i (0-based)
    def client_ip(self, i):
        return str(self.client_net.network_address + 11 + i)

    def quorum_ip(self, i):
        return str(self.quorum_net.network_address + 11 + i)

    def _host_end(self, lan, i):
        return "%s%s%dh" % (self.tag, lan, i + 1)

    def setup(self):
        _LIVE.add(self)
        try:
            for br in (self.client_bridge, self.quorum_bridge):
                ip("link", "add", br, "type", "bridge")
                self._made_links.append(br)
                ip("link", "set", br, "up")
            ip("addr", "add", "%s/24" % self.gateway, "dev", self.client_bridge)
            for i, ns in enumerate(self.namespaces):
                ip("netns", "add", ns)
                self._made_ns.append(ns)
                ip("-n", ns, "link", "set", "lo", "up")
                for lan, bridge, addr in (("c", self.client_bridge, self.client_ip(i)),
                                          ("q", self.quorum_bridge, self.quorum_ip(i))):
                    host_end, ns_end = self._host_end(lan, i), "%s%d" % (lan, i + 1)
                    # Create the pair with its inner end already in the namespace.
                    ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end, "netns", ns)
                    self._made_links.append(host_end)
                    ip("link", "set", host_end, "master", bridge)
                    ip("link", "set", host_end, "up")
                    ip("-n", ns, "addr", "add", "%s/24" % addr, "dev", ns_end)
                    ip("-n", ns, "link", "set", ns_end, "up")
        except Exception:
            self.destroy()
            raise
        return self

    def cut(self, i):
        """Member i can no longer reach its peers, nor they it (client LAN untouched)."""
        ip("link", "set", self._host_end("q", i), "down")
        self._cut.add(i)

    def heal(self, i):
        ip("link", "set", self._host_end("q", i), "up")
        self._cut.discard(i)

    def partition(self, group):
        """The members in group (0-based indexes) reach each other but none
        of the others, nor they them: their quorum ports move to a bridge of
        their own. Client LANs untouched; rejoin() undoes it."""
        group = sorted(set(group))
        assert group and len(group) < self.n, group
        assert not self._partitioned, "already partitioned: %s" % sorted(self._partitioned)
        if self.partition_bridge not in self._made_links:
            ip("link", "add", self.partition_bridge, "type", "bridge")
            self._made_links.append(self.partition_bridge)
            ip("link", "set", self.partition_bridge, "up")
        for i in group:
            ip("link", "set", self._host_end("q", i), "master", self.partition_bridge)
            self._partitioned.add(i)

    def rejoin(self):
        """Undo partition(): every member's quorum port back on the quorum bridge."""
        for i in sorted(self._partitioned):
            ip("link", "set", self._host_end("q", i), "master", self.quorum_bridge)
            self._partitioned.discard(i)

    def exec_prefix(self, i):
        return ["ip", "netns", "exec", self.namespaces[i]]

    def destroy(self):
        """Delete namespaces (their veth ends go with them) and bridges; never raises."""
        for ns in reversed(self._made_ns):
            try:
                ip("netns", "del", ns, check=False)
            except Exception:
                pass
        for link in reversed(self._made_links):
            try:
                # Already gone with its namespace peer, except the bridges.
                if ip("link", "show", link, check=False).returncode == 0:
                    ip("link", "del", link, check=False)
            except Exception:
                pass
        self._made_ns, self._made_links = [], []
        _LIVE.discard(self)


def unavailable_reason():
    """None when namespaces can be used here (after sweeping what killed
    earlier runs left behind), else why not."""
    try:
        probe()
    except NetnsUnavailable as e:
        return str(e)
    sweep_stale()
    return None


class NsServer(h.Server):
    """A harness.Server whose process runs in a network namespace, serving
    clients on its client LAN address: Stoa, or a ZooKeeper ensemble member
    (QuorumPeerMain) with kind="zookeeper"."""

    def __init__(self, topo, index, kind="stoa", **kw):
        super().__init__(kind=kind, quorum=kind == "zookeeper", **kw)
        self.topo, self.index = topo, index
        self.host = topo.client_ip(index)
        self.hosts = "%s:%d" % (self.host, self.port)
        # harness.Server wrote clientPortAddress=127.0.0.1: point it at the LAN.
        with open(self.cfg_path) as f:
            lines = f.read().splitlines()
        lines = ["clientPortAddress=%s" % self.host if l.startswith("clientPortAddress=") else l
                 for l in lines]
        with open(self.cfg_path, "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(self.data_dir + "/myid", "w") as f:
            f.write("%d\n" % (index + 1))

    def _argv(self):
        return self.topo.exec_prefix(self.index) + super()._argv()

    def _ready(self, serving=True):
        try:
            if h.four_letter(self.host, self.port, "ruok", timeout=1.0).strip() == "imok":
                if not serving:
                    return True
                c = h.RawClient(self.hosts, timeout_ms=self.min_session_timeout, connect_timeout=2.0)
                c.close()
                return True
        except (OSError, h.RawError, AssertionError):
            return False
        return False

    def four_letter(self, cmd, timeout=5.0):
        return h.four_letter(self.host, self.port, cmd, timeout=timeout)

    def __repr__(self):
        return "<NsServer %d %s pid=%s>" % (self.index + 1, self.hosts, self.pid)


# Every server has a namespace of its own, so fixed quorum ports never clash.
QUORUM_PORT, ELECTION_PORT = 2888, 3888


def _report_logs(servers):
    """Let conftest's failure hook print these servers' log tails."""
    try:
        import conftest
        conftest._SERVERS.extend(servers)
        return lambda: [conftest._SERVERS.remove(s) for s in servers if s in conftest._SERVERS]
    except Exception:
        return lambda: None


def leader_of(servers):
    """The one running server whose srvr says leader, else None."""
    leaders = [s for s in servers if s.running() and h.srvr_mode(s) == "leader"]
    return leaders[0] if len(leaders) == 1 else None


def start_cluster(request, size, tick_ms=200, election_s=15, start_timeout=30):
    """(Topology, [NsServer] * size) started together, one leader elected.
    Torn down through request's finalizers: servers stopped by PID (and
    their directories removed), then the namespaces and links deleted."""
    topo = Topology(size)
    request.addfinalizer(topo.destroy)  # runs last
    topo.setup()
    quorum = {"server.%d" % (i + 1): "%s:%d:%d" % (topo.quorum_ip(i), QUORUM_PORT, ELECTION_PORT)
              for i in range(size)}
    servers = []
    request.addfinalizer(lambda: [s.cleanup() for s in servers])
    for i in range(size):
        servers.append(NsServer(topo, i, tick_time=tick_ms, extra_cfg=quorum))
    request.addfinalizer(_report_logs(servers))
    with concurrent.futures.ThreadPoolExecutor(size) as pool:
        list(pool.map(lambda s: s.start(timeout=start_timeout), servers))
    h.wait_until(lambda: leader_of(servers) is not None, timeout=election_s, what="one leader")
    return topo, servers


@atexit.register
def _destroy_all():
    for t in list(_LIVE):
        t.destroy()
