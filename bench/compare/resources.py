"""Resource use with a big tree: each server fresh, loaded with N znodes,
then its memory, disk, stop and restart-to-serving times, and writes beside
the tree."""

import os
import re
import shutil
import statistics
import subprocess
import time
from math import nan as NAN

import harness

from . import etcd_http
from .launch import new_server
from .log import log
from .procstat import disk_bytes, proc_status, wait_idle
from .runner import figures, rotated, run_bench
from .snapshots import newest_snapshot, stoa_snapshot_nodes


# Transactions between snapshots, the same for all three: ZooKeeper's and
# Stoa's snapCount (both default to it), etcd's --snapshot-count (3.4's default).
SNAP_COUNT = 100000
# Written after the load; a restarted server is serving once it reads it back.
RESOURCE_MARKER = "/stoa-bench/resource-marker"
# The load: create-async with a fixed op count, one session, this many in flight.
LOAD_OUTSTANDING = 256
LOAD_PAYLOAD = 100
RESTART_POLL_S = 0.01
MIB = 1048576.0


def mntr_value(srv, key):
    try:
        text = harness.four_letter("127.0.0.1", srv.port, "mntr", timeout=30.0)
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 2 and parts[0] == key:
            try:
                return int(float(parts[1]))
            except ValueError:
                return None
    return None


def jvm_heap(pid):
    """(live heap after a full GC, committed heap) in bytes via jcmd, or NaNs."""
    jcmd = shutil.which("jcmd")
    if not jcmd:
        return NAN, NAN
    try:
        subprocess.run([jcmd, str(pid), "GC.run"], capture_output=True, timeout=120)
        out = subprocess.run([jcmd, str(pid), "GC.heap_info"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return NAN, NAN
    m = re.search(r"total (\d+)K, used (\d+)K", out)
    return (int(m.group(2)) * 1024, int(m.group(1)) * 1024) if m else (NAN, NAN)


def write_marker(srv, data):
    if srv.kind == "etcd":
        etcd_http.put(srv, RESOURCE_MARKER, data)
        return
    c = harness.RawClient(srv.hosts, timeout_ms=10000)
    try:
        c.create(RESOURCE_MARKER, data)
    finally:
        c.close()


def read_marker(srv, expect):
    """One try: whether the server answers a read of the marker with expect."""
    if srv.kind == "etcd":
        try:
            return etcd_http.read(srv, RESOURCE_MARKER, timeout=1.0) == expect
        except (OSError, ValueError):
            return False
    try:
        c = harness.RawClient(srv.hosts, timeout_ms=10000, connect_timeout=1.0)
    except (OSError, harness.RawError):
        return False
    try:
        return c.get(RESOURCE_MARKER)[0] == expect
    except (OSError, harness.RawError):
        return False
    finally:
        c.close(timeout=2.0)


def timed_restart(srv, expect, bound_s):
    """Starts srv's process and polls (every RESTART_POLL_S) until a read of
    the marker succeeds; seconds from just before the exec to that reply."""
    t0 = time.monotonic()
    srv.launch()
    deadline = t0 + bound_s
    while True:
        if srv.proc.poll() is not None:
            raise RuntimeError("%s exited with %s during a restart\n%s"
                               % (srv.kind, srv.proc.returncode, srv.log_tail()))
        if read_marker(srv, expect):
            return time.monotonic() - t0
        if time.monotonic() > deadline:
            raise RuntimeError("%s did not serve %.0f s after a restart\n%s"
                               % (srv.kind, bound_s, srv.log_tail()))
        time.sleep(RESTART_POLL_S)


def resource_server(system, base_dir):
    return new_server(system, base_dir, extra_cfg={"snapCount": SNAP_COUNT},
                      etcd_args=["--snapshot-count", str(SNAP_COUNT)])


# Writes beside the loaded tree: the write peak cells' best shape for Stoa.
BIG_TREE_WRITE = ["--sessions", "8", "--outstanding", "32", "--mix", "set=100"]


def resource_run(stoa_bin, system, base, n, restarts, bound_s, work, name, write_timing):
    """Loads n znodes of LOAD_PAYLOAD bytes into a fresh standalone server,
    then measures memory, disk, stop and restart-to-serving times, and
    last the write throughput beside that tree (`write_timing`: measured
    and warm-up seconds)."""
    d = os.path.join(base, "resources-" + name)
    os.makedirs(d)
    srv = resource_server(system, d)
    kind = srv.kind
    r = {"n": n}
    try:
        srv.start(timeout=60)
        if kind != "stoa":
            r["version"] = ".".join(map(str, srv.version() or ("?",)))
        t = time.monotonic()
        res = run_bench(stoa_bin, srv, ["--scenario", "create-async", "--ops", str(n),
                                        "--warmup", "0", "--sessions", "1",
                                        "--outstanding", str(LOAD_OUTSTANDING), "--keys", "1",
                                        "--payload", str(LOAD_PAYLOAD)],
                        [], work, bound=bound_s)
        r["load_s"] = time.monotonic() - t
        r["load_ops_s"] = res["throughput_ops_s"]
        r["load_cpu_us_per_op"] = res.get("server_cpu_us_per_op") or NAN
        r["load_errors"] = res["error_count"]
        expect = ("marker-%d" % n).encode()
        write_marker(srv, expect)
        r["settle_s"] = wait_idle([srv.pid], bound_s)
        st = proc_status(srv.pid)
        r["rss"], r["rss_anon"], r["rss_peak"] = (st.get("VmRSS", NAN), st.get("RssAnon", NAN),
                                                  st.get("VmHWM", NAN))
        if kind == "etcd":
            r["znodes"] = etcd_http.key_count(srv)
            r["zxid"] = None
        else:
            r["znodes"] = mntr_value(srv, "zk_znode_count")
            r["zxid"] = harness.srvr_zxid(srv)
        r["disk"] = disk_bytes(srv.data_dir)
        path, _ = newest_snapshot(kind, srv.data_dir)
        r["snap_bytes_loaded"] = os.path.getsize(path) if path else NAN
        if kind == "zookeeper":
            r["jvm_live_heap"], r["jvm_heap_committed"] = jvm_heap(srv.pid)
        t = time.monotonic()
        srv.stop(timeout=bound_s)
        r["stop_s"] = time.monotonic() - t
        r["restart_s"] = []
        for i in range(restarts):
            if i:
                srv.stop(timeout=bound_s)
            r["restart_s"].append(timed_restart(srv, expect, bound_s))
            if i == 0:
                wait_idle([srv.pid], bound_s)
                r["rss_restart"] = proc_status(srv.pid).get("VmRSS", NAN)
        # Every snapshot now covers the whole tree, as the peak cells'
        # small one: what differs is only the tree's size.
        wait_idle([srv.pid], bound_s)
        w = figures(run_bench(stoa_bin, srv, BIG_TREE_WRITE,
                              ["--duration", str(write_timing[0]),
                               "--warmup", str(write_timing[1])], work))
        r["big_write_ops_s"] = w["throughput_ops_s"]
        r["big_write_cpu_us_per_op"] = w["cpu_us_per_op"]
        r["big_write_p99"] = w["p99"]
        r["big_write_errors"] = w["errors"]
        srv.stop(timeout=bound_s)
        # The newest snapshot now: ZooKeeper writes one of the whole tree
        # while starting; Stoa's newest may lag the tree by up to snapCount
        # transactions, so bytes per znode use the znodes it holds.
        path, pos = newest_snapshot(kind, srv.data_dir)
        r["snap_bytes"] = os.path.getsize(path) if path else NAN
        if kind == "stoa":
            r["snap_nodes"] = stoa_snapshot_nodes(path) if path else None
        elif kind == "zookeeper":
            whole = pos is not None and r["zxid"] is not None and pos >= r["zxid"]
            r["snap_nodes"] = r["znodes"] if whole else None
        else:
            r["snap_nodes"] = r["znodes"]
        r["disk_after"] = disk_bytes(srv.data_dir)
    finally:
        srv.stop()
        if not os.environ.get("STOA_BENCH_KEEP"):
            shutil.rmtree(d, ignore_errors=True)
    log("resources %-9s %d znodes: load %.0f ops/s (%.1f s), RSS %.0f MiB (peak %.0f), "
        "disk %.0f MiB, snapshot %.0f MiB, stop %.2f s, restart %s s, writes beside it "
        "%.0f ops/s"
        % (system, n, r["load_ops_s"], r["load_s"], r["rss"] / MIB, r["rss_peak"] / MIB,
           r["disk"] / MIB, r["snap_bytes"] / MIB, r["stop_s"],
           " / ".join("%.2f" % x for x in r["restart_s"]), r["big_write_ops_s"]))
    return r


def run_resources(stoa_bin, base, systems, n, runs, restarts, bound_s, work, write_timing):
    """`runs` rounds, each system once per round on a fresh server of its
    own, the order rotating; each figure is the median of its runs. One
    run was not enough: ZooKeeper's RSS after the same load was 660 MiB in
    one full benchmark and 965 MiB in the next, as G1 sized its heap."""
    done = {system: [] for system in systems}
    for i in range(runs):
        for system in rotated(systems, i):
            done[system].append(resource_run(stoa_bin, system, base, n, restarts, bound_s, work,
                                             "%s-%d" % (system, i), write_timing))
    return {system: combine_resource_runs(done[system]) for system in systems}


def combine_resource_runs(runs):
    """One run's figures where every figure is the median of `runs` (NaN
    and None where no run has it); each run's own under "runs"."""
    def median(values):
        vals = [v for v in values if v is not None and v == v]
        if vals:
            return statistics.median(vals)
        return None if all(v is None for v in values) else NAN

    out = {}
    for key, first in runs[0].items():
        values = [r.get(key) for r in runs]
        if key == "restart_s":
            out[key] = [median(col) for col in zip(*values)]
        elif key in ("load_errors", "big_write_errors"):
            out[key] = sum(values)
        elif isinstance(first, (int, float)) or first is None:
            out[key] = median(values)
        else:
            out[key] = first
    out["n"] = runs[0]["n"]
    out["runs"] = runs
    return out
