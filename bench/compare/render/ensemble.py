"""The report's section on 3-member ensembles."""

from ..launch import ZK_HEAP_FLAG
from ..systems import SYSTEMS, long
from .text import cell_table


def ensemble_report(L, cells, med, ectx):
    if not cells:
        return
    systems = [k for k in SYSTEMS if any((c.name, k) in med for c in cells)]
    L.append("## 3-member ensembles\n")
    L.append("Three members of each on 127.0.0.1 (so all nine processes share the 2 cores and "
             "the disk; each member its own data dir): ZooKeeper's quorum (QuorumPeerMain, "
             "server.N lines, initLimit=10, syncLimit=5, `%s` each), Stoa's raft ensemble "
             "(the same zoo.cfg lines), etcd's 3-member cluster (`--initial-cluster`). Clients "
             "spread over the members: session i starts at member i mod 3 (9 sessions: 3 per "
             "member), so writes reach the leader directly from a third of the sessions and "
             "through a follower from the rest; ZooKeeper and Stoa answer reads at the member "
             "a client is connected to, etcd's (linearizable) reads confirm the commit index "
             "with the leader first. Each cell runs %d time(s) per ensemble, interleaved with "
             "the order rotating, %.1f s measured after %.1f s warm-up, medians (each run "
             "after a `sync` and a wait for the servers to go idle, as above); every "
             "ensemble got a %.0f s mixed warm-up first (three JVMs to JIT: ZooKeeper's ensemble "
             "figures kept rising for about 30 s of load). cpu µs/op sums the three members' "
             "CPU. "
             "Leader (member number) before / after the cells: %s.\n" % (
                 ZK_HEAP_FLAG, ectx["repeats"], ectx["duration"], ectx["warmup"],
                 ectx["global_warmup"],
                 ", ".join("%s m%s / m%s" % (long(k), ectx["leaders"].get(k),
                                             ectx.get("leaders_after", {}).get(k))
                           for k in systems)))
    cell_table(L, cells, med, systems)
    L.append("")
    for png, title in ectx.get("plots", []):
        L.append("![%s](bench/%s)\n" % (title, png))
