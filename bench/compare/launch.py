"""Starting the compared servers (tests/e2e/servers.py, shared with the e2e
harness) as the benchmarks run them."""

import os

import servers

from .log import log

# ZooKeeper's heap: what upstream's zkServer.sh gives (ZK_SERVER_HEAP=1000
# MB); Debian's script sets none, leaving the JVM's default of 1/4 of RAM.
# The tests' flags (-XX:TieredStopAtLevel=1, 256 MB heap) favour start-up
# time and would understate ZooKeeper.
ZK_HEAP_FLAG = "-Xmx1g"


def new_server(kind, base_dir, extra_cfg=None, etcd_args=()):
    """A standalone server of `kind`, not started: maxClientCnxns=0 (no
    per-IP limit: the clients sweep opens 64), no super digest."""
    if kind == "etcd":
        return servers.EtcdServer(base_dir, extra_args=etcd_args)
    return servers.Server(kind=kind, max_client_cnxns=0, super_digest=False, base_dir=base_dir,
                          extra_cfg=extra_cfg, jvm_flags=(ZK_HEAP_FLAG,))


def new_ensemble(kind, base_dir):
    """A 3-member ensemble of `kind`, not started (ZooKeeper's with
    initLimit=10, syncLimit=5)."""
    if kind == "etcd":
        return servers.Ensemble("etcd", base_dir)
    extra = {"initLimit": 10, "syncLimit": 5} if kind == "zookeeper" else {}
    return servers.Ensemble(kind, base_dir, extra_cfg=extra, max_client_cnxns=0,
                            super_digest=False, jvm_flags=(ZK_HEAP_FLAG,))


def start_servers(stoa_bin, base, systems):
    os.environ["STOA_BIN"] = stoa_bin
    started = {}
    try:
        if "etcd" in systems:
            d = os.path.join(base, "etcd")
            os.makedirs(d)
            # Boots while the JVM starts; waited for below.
            started["etcd"] = new_server("etcd", d).launch()
        for kind in ("zookeeper", "stoa"):
            d = os.path.join(base, kind)
            os.makedirs(d)
            started[kind] = new_server(kind, d).start(timeout=60)
            log("%s on %s (pid %d)" % (kind, started[kind].hosts, started[kind].pid))
        if "etcd" in started:
            started["etcd"].wait_ready(timeout=60)
            log("etcd on %s (pid %d)" % (started["etcd"].hosts, started["etcd"].pid))
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
