"""Starting the compared systems (tests/e2e/servers.py, shared with the e2e
harness) as the benchmarks run them, each from its anchor (use())."""

import os

import servers

from .log import log
from .systems import family, of_family

# ZooKeeper's heap: what upstream's zkServer.sh gives (ZK_SERVER_HEAP=1000
# MB); Debian's script sets none, leaving the JVM's default of 1/4 of RAM.
# The tests' flags (-XX:TieredStopAtLevel=1, 256 MB heap) favour start-up
# time and would understate ZooKeeper.
ZK_HEAP_FLAG = "-Xmx1g"

# system -> anchors.Anchor, for the whole run.
_anchors = {}


def use(anchors):
    """The anchors (system -> anchors.Anchor) the servers are started from."""
    _anchors.clear()
    _anchors.update(anchors)


def new_server(system, base_dir, extra_cfg=None, etcd_args=()):
    """A standalone server of `system`, not started: maxClientCnxns=0 (no
    per-IP limit: the clients sweep opens 64), no super digest."""
    anchor = _anchors[system]
    if family(system) == "etcd":
        return servers.EtcdServer(base_dir, extra_args=etcd_args, binary=anchor.etcd_binary)
    return servers.Server(kind=family(system), max_client_cnxns=0, super_digest=False,
                          base_dir=base_dir, extra_cfg=extra_cfg, zookeeper=anchor.zookeeper,
                          jvm_flags=(ZK_HEAP_FLAG,))


def new_ensemble(system, base_dir):
    """A 3-member ensemble of `system`, not started (ZooKeeper's with
    initLimit=10, syncLimit=5)."""
    anchor = _anchors[system]
    if family(system) == "etcd":
        return servers.Ensemble("etcd", base_dir, etcd_binary=anchor.etcd_binary)
    extra = {"initLimit": 10, "syncLimit": 5} if family(system) == "zookeeper" else {}
    return servers.Ensemble(family(system), base_dir, extra_cfg=extra, max_client_cnxns=0,
                            super_digest=False, zookeeper=anchor.zookeeper,
                            jvm_flags=(ZK_HEAP_FLAG,))


def start_servers(stoa_bin, base, systems):
    """{system: started standalone server} for each of `systems`."""
    os.environ["STOA_BIN"] = stoa_bin
    started = {}
    try:
        # The etcds boot while the JVMs start; waited for below.
        for system in of_family("etcd", systems):
            d = os.path.join(base, system)
            os.makedirs(d)
            started[system] = new_server(system, d).launch()
        for system in of_family("zookeeper", systems) + of_family("stoa", systems):
            d = os.path.join(base, system)
            os.makedirs(d)
            started[system] = new_server(system, d).start(timeout=60)
            log("%s on %s (pid %d)" % (system, started[system].hosts, started[system].pid))
        for system in of_family("etcd", systems):
            started[system].wait_ready(timeout=60)
            log("%s on %s (pid %d)" % (system, started[system].hosts, started[system].pid))
    except BaseException:
        stop_servers(started)
        raise
    return started


def stop_servers(running):
    for srv in running.values():
        try:
            srv.stop()
        except Exception as e:  # keep stopping the others
            log("stopping %r: %s" % (srv, e))
