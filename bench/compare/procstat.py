"""What /proc says about a server's processes: memory, CPU time, whether
they are idle; and what its files take on disk."""

import os
import time


# After the load and after a restart, RSS is read once the server is idle:
# below IDLE_CPU of a core over IDLE_WINDOW_S (snapshots, GC, compaction done).
IDLE_CPU, IDLE_WINDOW_S = 0.1, 0.5


def proc_status(pid):
    """VmRSS, VmHWM, RssAnon, RssFile of pid from /proc, in bytes ({} if gone)."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                    out[k] = int(v.split()[0]) * 1024
    except (OSError, ValueError, TypeError):
        pass
    return out


def proc_cpu_s(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, TypeError):
        return None


def pids_cpu_s(pids):
    """CPU seconds of the processes together; None if one is gone."""
    each = [proc_cpu_s(p) for p in pids]
    return None if None in each else sum(each)


def wait_idle(pids, bound_s, window_s=IDLE_WINDOW_S):
    """Waits until the processes together use less than IDLE_CPU of a core
    over window_s, at most bound_s; returns the seconds waited."""
    t0 = time.monotonic()
    last = pids_cpu_s(pids)
    while time.monotonic() - t0 < bound_s:
        time.sleep(window_s)
        now = pids_cpu_s(pids)
        if now is None or last is None or (now - last) / window_s < IDLE_CPU:
            break
        last = now
    return time.monotonic() - t0


def disk_bytes(path):
    """What the files under path take on disk (allocated blocks, as du)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total
