"""Servers and one client in network namespaces, with emulated round trips
between the client and the servers and among the servers.

    servers   tests/e2e/netns.Topology: one namespace per member on a
              client LAN and a quorum LAN. With a server RTT s > 0 and more
              than one member, tests/e2e/regions.Regions with each member a
              region of its own: member 0 is the hub of a star of WAN links
              of round trip s, so 0<->i is s and i<->j is 2s (the model
              takes the leader's fastest majority over exactly these).
    client    a namespace of its own (<ns prefix><pid>-c<seq>) whose link
              to the client LAN is two veth pairs joined by wanlink.py,
              the user-space relay regions.py uses where the kernel has no
              sch_netem (this one has none), delaying each frame by c/2
              each way; a direct veth when c = 0. The load generator runs
              there (`ip netns exec`), so every call it makes crosses the
              delay, while the harness's own probes (ruok, srvr) do not.

The client link's names follow regions.py's WAN link names (<tag>w0a..d),
which netns.sweep_stale() removes after a killed run, like its namespace.
destroy() never raises and undoes what setup() did, also half way.
"""

import os
import subprocess
import sys

import netns
import regions


class PrimTopology:
    def __init__(self, n, server_rtt_ms, client_rtt_ms):
        self.n = n
        self.server_rtt_ms = server_rtt_ms if n > 1 else 0.0
        self.client_rtt_ms = client_rtt_ms
        if n > 1 and server_rtt_ms > 0:
            self.topo = regions.Regions([1] * n, wan_rtt_ms=server_rtt_ms, wan_jitter_ms=0.0)
        else:
            self.topo = netns.Topology(n)
        self.client_ns = "%s%d-c%s" % (netns.NS_PREFIX, os.getpid(), self.topo.tag)
        self.client_ip = str(self.topo.client_net.network_address + 200)
        self._relay = None
        self._links = []
        self._ns_made = False

    def _end(self, which):
        return "%sw0%s" % (self.topo.tag, which)

    def setup(self):
        try:
            self.topo.setup()
            netns.ip("netns", "add", self.client_ns)
            self._ns_made = True
            netns.ip("-n", self.client_ns, "link", "set", "lo", "up")
            bridge_end = self._end("a")
            if self.client_rtt_ms > 0:
                near, far = self._end("c"), self._end("d")
                netns.ip("link", "add", bridge_end, "type", "veth", "peer", "name", near)
                self._links += [bridge_end, near]
                netns.ip("link", "add", far, "type", "veth", "peer", "name", "c0",
                         "netns", self.client_ns)
                self._links.append(far)
                for end in (near, far):
                    netns.ip("link", "set", end, "up")
            else:
                netns.ip("link", "add", bridge_end, "type", "veth", "peer", "name", "c0",
                         "netns", self.client_ns)
                self._links.append(bridge_end)
            netns.ip("link", "set", bridge_end, "master", self.topo.client_bridge)
            netns.ip("link", "set", bridge_end, "up")
            netns.ip("-n", self.client_ns, "addr", "add", "%s/24" % self.client_ip, "dev", "c0")
            netns.ip("-n", self.client_ns, "link", "set", "c0", "up")
            if self.client_rtt_ms > 0:
                self._relay = subprocess.Popen(
                    [sys.executable, regions.WANLINK, self._end("c"), self._end("d"),
                     "--delay-ms", str(self.client_rtt_ms / 2.0), "--jitter-ms", "0"],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                line = self._relay.stdout.readline().decode(errors="replace")
                if "wanlink up" not in line:
                    raise RuntimeError("wanlink.py did not start: %s" % line.strip())
        except Exception:
            self.destroy()
            raise
        return self

    def client_prefix(self):
        """Runs a command as the client: in its namespace."""
        return ["ip", "netns", "exec", self.client_ns]

    def rtts(self):
        import model
        return model.star_rtts(self.n, self.server_rtt_ms)

    def destroy(self):
        relay, self._relay = self._relay, None
        if relay is not None:
            regions.stop_relay(relay)
        if self._ns_made:
            try:
                netns.ip("netns", "del", self.client_ns, check=False)
            except Exception:
                pass
            self._ns_made = False
        for link in reversed(self._links):
            try:
                if netns.ip("link", "show", link, check=False).returncode == 0:
                    netns.ip("link", "del", link, check=False)
            except Exception:
                pass
        self._links = []
        self.topo.destroy()

    def describe(self):
        return "%d server(s), server RTT %g ms, client RTT %g ms (%s)" % (
            self.n, self.server_rtt_ms, self.client_rtt_ms,
            "wanlink.py" if (self.client_rtt_ms or self.server_rtt_ms) else "no delay")
