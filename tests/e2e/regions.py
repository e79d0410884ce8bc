"""Regions on one machine: an ensemble's members spread over regions whose
quorum links cross an emulated WAN, each member in a network namespace.

    client LAN  one bridge for every member (netns.Topology's): the test
                process is the client of every region, at LAN latency
    quorum LAN  one bridge per region: region 0 keeps the Topology's
                (<tag>qb), region r >= 1 gets <tag>r<r>b, and a WAN link
                joins each region r to region 0 (a star)

A WAN link delays every frame by half the round trip each way, with
jitter. Where the kernel has sch_netem, it is a veth pair between the two
bridges with a netem qdisc on each end (<tag>w<r>a, <tag>w<r>b); without it
(this project's CI kernel has none), two veth pairs whose free ends
(<tag>w<r>c, <tag>w<r>d) are joined by wanlink.py, a relay process that
holds each frame for the delay (in order; netem's jitter reorders).

So a member talks to the members of its own region at LAN latency (tens
of microseconds on a veth and a bridge) and to the others at the WAN
round trip, which is what per-client isolation (ZooNet, section 4.1) is
about: an observer far from its leader serving local reads while its
writes travel.

Everything is torn down by the pytest request's finalizers (servers by
PID, the relay by PID, then the links and namespaces) and, after a killed
run, swept by name with netns.sweep_stale() (the relay exits by itself
once its parent is gone).
"""

import concurrent.futures
import os
import subprocess
import sys

import harness as h
import netns

WANLINK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wanlink.py")

_netem = None


def netem_available():
    """Whether `tc qdisc add ... netem delay` works here (probed once, in a
    throwaway namespace)."""
    global _netem
    if _netem is None:
        name = "%snetem-%d" % (netns.NS_PREFIX, os.getpid())
        netns.ip("netns", "add", name)
        try:
            r = subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo",
                                "root", "netem", "delay", "1ms"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, timeout=netns.CMD_TIMEOUT)
            _netem = r.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _netem = False
        finally:
            netns.ip("netns", "del", name, check=False)
    return _netem


def unavailable_reason():
    """None when regions can be built here, else why not: namespaces are
    needed; netem is not (wanlink.py stands in for it)."""
    return netns.unavailable_reason()


def stop_relay(relay):
    """Stops a wanlink.py relay started with its stdout piped (TERM, then
    KILL after 5 s)."""
    if relay.poll() is None:
        relay.terminate()
        try:
            relay.wait(timeout=5)
        except subprocess.TimeoutExpired:
            relay.kill()
            relay.wait(timeout=5)
    relay.stdout.close()


class Regions(netns.Topology):
    """netns.Topology whose members sit in regions (a list of member counts,
    region 0 first) joined by WAN links of wan_rtt_ms round trip."""

    def __init__(self, sizes, wan_rtt_ms=50.0, wan_jitter_ms=2.0, use_netem=None):
        super().__init__(sum(sizes))
        assert len(sizes) >= 2 and all(n > 0 for n in sizes), sizes
        self.sizes = list(sizes)
        self.region_of = [r for r, n in enumerate(sizes) for _ in range(n)]
        self.wan_rtt_ms, self.wan_jitter_ms = wan_rtt_ms, wan_jitter_ms
        self.use_netem = netem_available() if use_netem is None else use_netem
        self.delay = "netem" if self.use_netem else "wanlink.py"
        self._relays = []

    def members_of(self, region):
        return [i for i, r in enumerate(self.region_of) if r == region]

    def region_bridge(self, region):
        return self.quorum_bridge if region == 0 else "%sr%db" % (self.tag, region)

    def setup(self):
        super().setup()
        try:
            for region in range(1, len(self.sizes)):
                bridge = self.region_bridge(region)
                self._add_link(bridge, "type", "bridge")
                netns.ip("link", "set", bridge, "up")
                for i in self.members_of(region):
                    netns.ip("link", "set", self._host_end("q", i), "master", bridge)
                self._wan_link(region)
        except Exception:
            self.destroy()
            raise
        return self

    def _add_link(self, name, *args):
        netns.ip("link", "add", name, *args)
        self._made_links.append(name)

    def _wan_end(self, region, which):
        return "%sw%d%s" % (self.tag, region, which)

    def _wan_link(self, region):
        near, far = self._wan_end(region, "a"), self._wan_end(region, "b")
        one_way = "%.3fms" % (self.wan_rtt_ms / 2)
        jitter = "%.3fms" % self.wan_jitter_ms
        if self.use_netem:
            self._add_link(near, "type", "veth", "peer", "name", far)
            self._made_links.append(far)
            for end, bridge in ((near, self.quorum_bridge), (far, self.region_bridge(region))):
                netns.ip("link", "set", end, "master", bridge)
                netns.ip("link", "set", end, "up")
                subprocess.run(["tc", "qdisc", "add", "dev", end, "root", "netem", "delay",
                                one_way, jitter], check=True, timeout=netns.CMD_TIMEOUT,
                               stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            return
        relay_ends = []
        for end, bridge, free in ((near, self.quorum_bridge, self._wan_end(region, "c")),
                                  (far, self.region_bridge(region), self._wan_end(region, "d"))):
            self._add_link(end, "type", "veth", "peer", "name", free)
            self._made_links.append(free)
            netns.ip("link", "set", end, "master", bridge)
            netns.ip("link", "set", end, "up")
            netns.ip("link", "set", free, "up")
            relay_ends.append(free)
        relay = subprocess.Popen(
            [sys.executable, WANLINK, relay_ends[0], relay_ends[1],
             "--delay-ms", str(self.wan_rtt_ms / 2), "--jitter-ms", str(self.wan_jitter_ms),
             "--seed", str(region)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._relays.append(relay)
        line = relay.stdout.readline().decode(errors="replace")
        if "wanlink up" not in line:
            raise RuntimeError("wanlink.py did not start: %s" % line.strip())

    def destroy(self):
        for relay in self._relays:
            stop_relay(relay)
        self._relays = []
        super().destroy()

    def describe(self):
        return "%s regions %s, WAN RTT %.0f ms +/- %.0f ms by %s" % (
            len(self.sizes), self.sizes, self.wan_rtt_ms, self.wan_jitter_ms, self.delay)


class Deployment:
    """One ensemble over Regions: servers[i] is member i+1; roles[i] is
    'participant' or 'observer'."""

    def __init__(self, topo, servers, roles):
        self.topo, self.servers, self.roles = topo, servers, roles

    def in_region(self, region, role=None):
        return [s for i, s in enumerate(self.servers)
                if self.topo.region_of[i] == region and (role is None or self.roles[i] == role)]

    def observers(self):
        return [s for s, r in zip(self.servers, self.roles) if r == "observer"]

    def leader(self):
        return netns.leader_of(self.servers)


def start_deployment(request, regions, kind="stoa", wan_rtt_ms=50.0, wan_jitter_ms=2.0,
                     tick_ms=None, start_timeout=60.0, zookeeper=None, jvm_flags=None):
    """An ensemble whose members are laid out by `regions`, a list (region 0
    first) of role lists, e.g. [["participant"] * 3, ["observer"]]: three
    participants in one region, their observer in another. `zookeeper`
    (servers.ZooKeeperJars) picks the ZooKeeper of kind="zookeeper"
    (default Debian's) and `jvm_flags` its JVM's (default the tests',
    which favour start-up time; a benchmark passes its own). Started
    together; returns once one leader leads and every observer says so.
    Torn down through request's finalizers."""
    roles = [role for region in regions for role in region]
    assert set(roles) <= {"participant", "observer"}, roles
    topo = Regions([len(r) for r in regions], wan_rtt_ms, wan_jitter_ms)
    request.addfinalizer(topo.destroy)  # runs last
    topo.setup()
    quorum = {}
    for i, role in enumerate(roles):
        quorum["server.%d" % (i + 1)] = "%s:%d:%d%s" % (
            topo.quorum_ip(i), netns.QUORUM_PORT, netns.ELECTION_PORT,
            ":observer" if role == "observer" else "")
    if kind == "zookeeper":
        # ZooKeeper's learners must sync within these ticks, across the WAN too.
        quorum.update(initLimit=20, syncLimit=10)
    # Ticks long enough that the WAN round trip is a small part of one.
    tick_ms = tick_ms or (200 if kind == "stoa" else 500)
    servers = []
    request.addfinalizer(lambda: [s.cleanup() for s in servers])
    for i, role in enumerate(roles):
        cfg = dict(quorum, peerType="observer") if role == "observer" else quorum
        jvm = {} if jvm_flags is None else {"jvm_flags": jvm_flags}
        servers.append(netns.NsServer(topo, i, kind=kind, tick_time=tick_ms, extra_cfg=cfg,
                                      zookeeper=zookeeper, **jvm))
    request.addfinalizer(netns._report_logs(servers))
    with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
        list(pool.map(lambda s: s.start(timeout=start_timeout), servers))
    deployment = Deployment(topo, servers, roles)
    h.wait_until(lambda: deployment.leader() is not None, timeout=start_timeout,
                 what="one leader")
    for s in deployment.observers():
        h.wait_until(lambda: h.srvr_mode(s) == "observer", timeout=start_timeout,
                     what="Mode: observer on %r" % s)
    return deployment


class _Request:
    """Finalizers for callers outside pytest (the benchmark): run in
    reverse order by close()."""

    def __init__(self):
        self._finalizers = []

    def addfinalizer(self, fn):
        self._finalizers.append(fn)

    def close(self):
        while self._finalizers:
            try:
                self._finalizers.pop()()
            except Exception as e:  # keep tearing down
                print("teardown: %s" % e, file=sys.stderr)


def standalone_request():
    return _Request()
