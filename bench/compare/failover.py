"""Failover: what clients feel when the leader of a 3-member ensemble is
killed with kill -9 under load (issue 27 item 4).

Per system and round, a fresh ensemble (launch.new_ensemble) gets
CLIENTS_PER_MEMBER closed-loop clients per member, each with its own key and
a host list that starts at its member and then names the others in order (no
randomization: the killed leader's clients are the ones that must move, and
where they go is the same for every system). A client alternates a write of a
small value to its key and a read of it, one call at a time. After
LOAD_BEFORE_S of load the leader gets SIGKILL; then per client: the seconds
from the kill to the acknowledgement of its first write that started after
the kill, the same for a read, its session expiries; and the acknowledged
writes of all clients in BIN_S bins around the kill (the throughput through
the fault). A round ends when every client has both, but not before the
throughput window is over, and at the latest RECOVERY_CAP_S after the kill.

ZooKeeper and Stoa: kazoo (the e2e tests' client; bench/requirements.txt
puts it in the bench venv) with a 6 s session timeout and a connection retry
of 50 ms doubling up to 1 s, as an application would configure it; a LOST
state is a session expiry. etcd: its HTTP JSON gateway (etcd_http), a put and
a linearizable range per attempt, the next endpoint after an error; no
session, so no expiry. The clients are Python threads on the same 2 cores as
the servers, so the throughput is the clients' (a few thousand writes/s), a
trace of when writes go through rather than a peak.
"""

import http.client
import logging
import os
import statistics
import threading
import time

from . import etcd_http
from .launch import new_ensemble
from .log import log
from .systems import family

CLIENTS_PER_MEMBER = 2
VALUE = b"failover-value--"
LOAD_BEFORE_S = 2.0
RECOVERY_CAP_S = 20.0
# One call's wait; a call not answered by then is given up (kazoo keeps it
# queued: its answer, if any, still counts, stamped when it comes).
ATTEMPT_TIMEOUT_S = 2.0
# After a failed call (refused, or an error answer) before the next: keeps
# six clients that fail at once from spinning on the cores the servers need.
ERROR_PAUSE_S = 0.01
SESSION_TIMEOUT_S = 6.0
CONNECT_TIMEOUT_S = 30.0
BIN_S = 0.1
WINDOW_S = (-2.0, 5.0)
# A bound on one client's write+read pairs in a round (about 20k/s at most
# on this machine for 25 s: far below).
MAX_PAIRS = 2000000
CLOSE_TIMEOUT_S = 10.0


def kazoo_version():
    """kazoo's version, or None without kazoo."""
    try:
        import kazoo.client  # noqa: F401
        from kazoo.version import __version__
        return __version__
    except ImportError:
        return None


class KazooLoad:
    """One ZooKeeper-protocol client (kazoo) with its own key."""

    def __init__(self, hosts, index):
        from kazoo.client import KazooClient
        from kazoo.retry import KazooRetry
        self.path = "/failover-%d" % index
        self.ops = []  # (kind, start, end, ok), appended as answers come
        self.states = []  # (time, kazoo state)
        self.zk = KazooClient(hosts=",".join(hosts), timeout=SESSION_TIMEOUT_S,
                              randomize_hosts=False,
                              connection_retry=KazooRetry(max_tries=-1, delay=0.05,
                                                          max_delay=1.0))
        self.zk.add_listener(lambda state: self.states.append((time.monotonic(), state)))

    def start(self):
        from kazoo.exceptions import NodeExistsError
        self.zk.start(timeout=CONNECT_TIMEOUT_S)
        try:
            self.zk.create(self.path, VALUE)
        except NodeExistsError:
            pass

    def attempt(self, kind):
        t0 = time.monotonic()
        a = self.zk.set_async(self.path, VALUE) if kind == "write" else self.zk.get_async(self.path)
        a.rawlink(lambda r: self.ops.append((kind, t0, time.monotonic(), r.successful())))
        a.wait(ATTEMPT_TIMEOUT_S)
        return a.ready() and a.successful()

    def expiries(self, since):
        return sum(1 for t, s in list(self.states) if t >= since and s == "LOST")

    def close(self):
        try:
            self.zk.stop()
            self.zk.close()
        except Exception as e:  # the servers may be gone already
            log("closing a kazoo client: %s" % e)


class EtcdLoad:
    """One etcd client over the HTTP gateway: its member first, the next
    endpoint after an error."""

    def __init__(self, members, index):
        self.members = members
        self.at = 0
        self.key = "/failover-%d" % index
        self.ops = []

    def start(self):
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while not self.attempt("write"):
            if time.monotonic() > deadline:
                raise RuntimeError("etcd client: no put went through in %.0f s"
                                   % CONNECT_TIMEOUT_S)
            time.sleep(0.1)
        self.ops = []

    def attempt(self, kind):
        srv = self.members[self.at]
        t0 = time.monotonic()
        try:
            if kind == "write":
                etcd_http.put(srv, self.key, VALUE, timeout=ATTEMPT_TIMEOUT_S)
            else:
                etcd_http.read(srv, self.key, timeout=ATTEMPT_TIMEOUT_S)
            ok = True
        except (OSError, ValueError, http.client.HTTPException):
            ok = False
            self.at = (self.at + 1) % len(self.members)
        self.ops.append((kind, t0, time.monotonic(), ok))
        return ok

    def expiries(self, since):
        return None

    def close(self):
        pass


def new_client(system, ensemble, member, index):
    """Client `index`, starting at member `member` (0-based), then the
    others in order."""
    order = ensemble.members[member:] + ensemble.members[:member]
    if family(system) == "etcd":
        return EtcdLoad(order, index)
    return KazooLoad([m.hosts for m in order], index)


def recovered(client, kind, t_kill):
    """Seconds from the kill to the end of the first acknowledged `kind`
    call that started after it, or None."""
    ends = [t1 for k, t0, t1, ok in list(client.ops) if k == kind and ok and t0 > t_kill]
    return min(ends) - t_kill if ends else None


def write_bins(clients, t_kill):
    """Acknowledged writes per second of all clients in BIN_S bins over
    WINDOW_S (seconds from the kill)."""
    n = int(round((WINDOW_S[1] - WINDOW_S[0]) / BIN_S))
    counts = [0] * n
    for c in clients:
        for k, _, t1, ok in list(c.ops):
            i = int((t1 - t_kill - WINDOW_S[0]) // BIN_S)
            if k == "write" and ok and 0 <= i < n:
                counts[i] += 1
    return [x / BIN_S for x in counts]


def leader_after(system, ens):
    """The leader's member number among the members still running, or None
    (etcd's Ensemble.leader() asks every member, the killed one too)."""
    if family(system) != "etcd":
        return ens.leader()
    live = [m for m in ens.members if m.running()]
    try:
        st = [m.call("/v3/maintenance/status", body={}) for m in live]
        leaders = {str(s["leader"]) for s in st}
    except (OSError, ValueError, KeyError, http.client.HTTPException):
        return None
    ids = [str(s["header"]["member_id"]) for s in st]
    if len(leaders) != 1 or not leaders <= set(ids):
        return None
    return ens.members.index(live[ids.index(leaders.pop())]) + 1


def _load_loop(client, stop, deadline):
    pairs = 0
    while not stop.is_set() and time.monotonic() < deadline and pairs < MAX_PAIRS:
        ok = client.attempt("write")
        ok = client.attempt("read") and ok
        if not ok:
            stop.wait(ERROR_PAUSE_S)
        pairs += 1


def _close_all(clients):
    """Closes the clients, each in a thread, waiting CLOSE_TIMEOUT_S at most
    (a client reconnecting to a dead member must not hold the run)."""
    threads = [threading.Thread(target=c.close, daemon=True) for c in clients]
    for t in threads:
        t.start()
    deadline = time.monotonic() + CLOSE_TIMEOUT_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))


def run_round(system, base_dir):
    """One ensemble of `system`, loaded, its leader killed: the round's
    figures (see the module's doc)."""
    ens = new_ensemble(system, base_dir)
    clients, threads, stop = [], [], threading.Event()
    try:
        ens.start()
        version = ens.version() if system != "stoa" else None
        for i in range(len(ens.members) * CLIENTS_PER_MEMBER):
            clients.append(new_client(system, ens, i // CLIENTS_PER_MEMBER, i))
            clients[-1].start()
        deadline = time.monotonic() + LOAD_BEFORE_S + RECOVERY_CAP_S + ATTEMPT_TIMEOUT_S
        threads = [threading.Thread(target=_load_loop, args=(c, stop, deadline), daemon=True)
                   for c in clients]
        for t in threads:
            t.start()
        stop.wait(LOAD_BEFORE_S)
        leader = ens.leader()
        if leader is None:
            raise RuntimeError("%s: no single leader before the kill" % system)
        t_kill = time.monotonic()
        ens.members[leader - 1].kill9()
        while time.monotonic() < t_kill + RECOVERY_CAP_S:
            if time.monotonic() >= t_kill + WINDOW_S[1] and all(
                    recovered(c, k, t_kill) is not None for c in clients
                    for k in ("write", "read")):
                break
            stop.wait(0.05)
        stop.set()
        for t in threads:
            t.join(ATTEMPT_TIMEOUT_S + 1.0)
        return {
            "leader": leader,
            "leader_after": leader_after(system, ens),
            "version": ".".join(map(str, version)) if version else None,
            "clients": [{"member": i // CLIENTS_PER_MEMBER + 1,
                         "write_s": recovered(c, "write", t_kill),
                         "read_s": recovered(c, "read", t_kill),
                         "expiries": c.expiries(t_kill)} for i, c in enumerate(clients)],
            "bins": write_bins(clients, t_kill),
        }
    finally:
        stop.set()
        _close_all(clients)
        try:
            ens.stop()
        except Exception as e:  # keep going with the next round
            log("stopping the %s ensemble: %s" % (system, e))


def run_failover(base, systems, rounds):
    """{"context": ..., "systems": {system: {"rounds": [...], "errors": [...]}}}
    of the failover section: `rounds` rounds, each system once per round in
    an order rotating per round. A system whose round fails (or a
    ZooKeeper-protocol one without kazoo) is reported, not fatal."""
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    kazoo = kazoo_version()
    if not kazoo:
        log("failover: no kazoo in this Python; ZooKeeper and Stoa left out "
            "(pip install -r bench/requirements.txt)")
        systems = [k for k in systems if family(k) == "etcd"]
    out = {k: {"rounds": [], "errors": []} for k in systems}
    versions = {}
    for r in range(rounds):
        order = systems[r % len(systems):] + systems[:r % len(systems)] if systems else []
        for system in order:
            d = os.path.join(base, "failover-%s-%d" % (system, r + 1))
            os.makedirs(d)
            started = time.monotonic()
            try:
                res = run_round(system, d)
            except Exception as e:
                log("failover: %s round %d failed: %s" % (system, r + 1, e))
                out[system]["errors"].append("round %d: %s" % (r + 1, str(e).splitlines()[0]
                                                               if str(e) else repr(e)))
                continue
            v = res.pop("version")
            if v:
                versions[system] = v
            out[system]["rounds"].append(res)
            s = summary(out[system]["rounds"][-1:])
            log("failover: %s round %d: killed m%d (then m%s leads), write %s, read %s, "
                "expiries %s (%.0f s)" % (system, r + 1, res["leader"], res["leader_after"],
                                          fmt_s(s["write_max"]), fmt_s(s["read_max"]),
                                          s["expiries"], time.monotonic() - started))
    ctx = {"rounds": rounds, "clients_per_member": CLIENTS_PER_MEMBER,
           "load_before_s": LOAD_BEFORE_S, "cap_s": RECOVERY_CAP_S, "bin_s": BIN_S,
           "window_s": list(WINDOW_S), "session_timeout_s": SESSION_TIMEOUT_S,
           "attempt_timeout_s": ATTEMPT_TIMEOUT_S, "systems": list(systems),
           "versions": versions, "kazoo": kazoo}
    return {"context": ctx, "systems": {k: v for k, v in out.items()
                                        if v["rounds"] or v["errors"]}}


def fmt_s(x):
    """Seconds, or '> cap' for a client that never got through."""
    if x is None or x != x:
        return "–"
    return "> %.0f" % RECOVERY_CAP_S if x == float("inf") else "%.2f" % x


def summary(rounds):
    """p50 and max over every client of every round (a client that never
    got through counts as infinite), the expiries (None for etcd), and the
    clients that did not get through."""
    inf = float("inf")
    out = {"rounds": len(rounds)}
    for kind in ("write", "read"):
        vals = sorted(inf if c[kind + "_s"] is None else c[kind + "_s"]
                      for r in rounds for c in r["clients"])
        out[kind + "_p50"] = statistics.median(vals) if vals else float("nan")
        out[kind + "_max"] = vals[-1] if vals else float("nan")
        out[kind + "_stuck"] = sum(1 for v in vals if v == inf)
    exp = [c["expiries"] for r in rounds for c in r["clients"]]
    out["expiries"] = None if not exp or any(e is None for e in exp) else sum(exp)
    return out


def median_bins(rounds):
    """The median over rounds of each throughput bin."""
    if not rounds:
        return []
    return [statistics.median(col) for col in zip(*(r["bins"] for r in rounds))]
