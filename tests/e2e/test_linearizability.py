"""Concurrent kazoo clients on different ensemble members read (sync + get),
write and compare-and-set (setData with a version) znodes under faults; the
recorded history must be linearizable (linearizability.py, per key):

- 3 members on 127.0.0.1, one znode, the leader killed -9;
- 5 members in network namespaces (netns.py, as test_partition.py), 3 keys:
  the leader and a follower partitioned away (2 of 5) and healed, the new
  leader killed -9 and restarted, two followers partitioned away and healed;
- 3 members in network namespaces, 3 keys: the leader cut off and healed, twice.

The namespace tests need root (ip netns) and are skipped with the reason
otherwise. Each recorded history is also checked corrupted (an acknowledged
write lost to a read, a version given twice), which must fail, and a unit
test runs the checker on simulated histories. Server tests are Stoa-only
(ensembles). With STOA_LIN_HISTORY_DIR set, the namespace tests write each
history (with the member every call went to) and fault timeline there.
"""

import json
import math
import os
import random
import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException

import harness as h
import netns
from linearizability import (CAS, READ, WRITE, Op, check, check_per_key, corrupt_duplicate_version,
                             corrupt_stale_read)
from test_ensemble import SIZE, leader_of, start_ensemble
from netns import leader_of as ns_leader_of
from test_partition import stop_client

stoa_only = pytest.mark.skipif(h.target() != "stoa", reason="stoa-only: ensemble harness")

CLIENTS = 4
OPS_PER_CLIENT = 30
KEY = "/register"


@pytest.fixture
def ensemble():
    servers = start_ensemble(SIZE)
    yield servers
    for s in servers:
        s.cleanup()


def run_client(index, hosts, seed, history, lock, kill_at, killed):
    rnd = random.Random(seed)
    c = KazooClient(hosts=hosts, timeout=8.0, randomize_hosts=False)
    c.start(timeout=20)
    known_version = 0
    try:
        for n in range(OPS_PER_CLIENT):
            if index == 0 and n == kill_at:
                killed.set()
            roll = rnd.random()
            start = time.monotonic()
            try:
                if roll < 0.4:
                    c.sync(KEY)
                    data, stat = c.get(KEY)
                    op = Op(READ, None, (data.decode(), stat.version), start, time.monotonic(), index)
                    known_version = stat.version
                elif roll < 0.7:
                    value = "c%d-%d" % (index, n)
                    stat = c.set(KEY, value.encode())
                    op = Op(WRITE, value, stat.version, start, time.monotonic(), index)
                else:
                    value = "c%d-%d" % (index, n)
                    try:
                        stat = c.set(KEY, value.encode(), version=known_version)
                        op = Op(CAS, (known_version, value), stat.version, start, time.monotonic(), index)
                    except BadVersionError:
                        op = Op(CAS, (known_version, value), None, start, time.monotonic(), index)
            except KazooException:
                if roll < 0.4:
                    continue  # a read that failed tells nothing
                # The write may or may not have happened: indeterminate.
                arg = value if roll < 0.7 else (known_version, value)
                op = Op(WRITE if roll < 0.7 else CAS, arg, None, start, math.inf, index)
            with lock:
                history.append(op)
    finally:
        c.stop()
        c.close()


@stoa_only
def test_reads_writes_and_cas_stay_linearizable_across_a_leader_kill(ensemble):
    """4 clients × 30 ops on one znode, leader killed -9 a third of the way in: the history is linearizable."""
    h.wait_until(lambda: leader_of(ensemble) is not None, timeout=20, what="one leader")
    setup = KazooClient(hosts=ensemble[0].hosts, timeout=8.0)
    setup.start(timeout=20)
    setup.create(KEY, b"")
    setup.stop()
    history, lock, killed = [], threading.Lock(), threading.Event()
    threads = []
    for i in range(CLIENTS):
        # Each client starts on a different member and can fail over to the others.
        order = [ensemble[(i + k) % SIZE].hosts for k in range(SIZE)]
        t = threading.Thread(target=run_client,
                             args=(i, ",".join(order), 1000 + i, history, lock, OPS_PER_CLIENT // 3, killed))
        threads.append(t)
        t.start()
    assert killed.wait(60)
    leader = leader_of(ensemble)
    assert leader is not None, "no leader to kill"
    leader.kill9()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    determinate = [o for o in history if not o.indeterminate]
    print("history: %d ops, %d indeterminate, %d reads, %d CAS refused" % (
        len(history), len(history) - len(determinate), sum(o.kind == READ for o in history),
        sum(o.kind == CAS and o.result is None for o in determinate)))
    assert len(determinate) >= CLIENTS * OPS_PER_CLIENT // 2, "too few completed operations to judge"
    assert check(history, ("", 0)), "not linearizable:\n" + "\n".join(map(repr, sorted(history, key=lambda o: o.start)))


KEYS = ("/lin/a", "/lin/b", "/lin/c")
INITIAL = ("", 0)
NS_TICK_MS = 200
NS_SESSION_TIMEOUT_S = 6.0  # clamped by the server to 20 ticks = 4 s
OP_TIMEOUT_S = 2.5          # a call not answered by then is left pending (recorded when it ends)
PACE_S = 0.05               # mean pause between a client's calls: the calls span the faults
GATE_FRACTION = 0.85        # clients hold their last 15% of calls until the faults are over
ELECTION_S = 15
SETTLE_S = 20
CUT_S = 3.0                 # each partition lasts this long (several election timeouts)


# --------------------------------------------------------------------------
# The checker itself: it passes linearizable histories and fails corrupted ones.

def _simulated_history(seed, clients=4, ops_per_client=12, keys=("/a", "/b")):
    """A linearizable multi-key history made by a simulated register: each
    op has an interval and a linearization point inside it, results are
    computed in linearization-point order; some updates are indeterminate
    (took effect at their point, or never) and then the client moves on."""
    rnd = random.Random(seed)
    ops = []
    for c in range(clients):
        t = rnd.uniform(0, 1)
        for n in range(ops_per_client):
            start = t
            end = start + rnd.uniform(0.05, 2.0)
            point = rnd.uniform(start, end)
            kind = rnd.choice((READ, WRITE, CAS))
            indeterminate = kind != READ and rnd.random() < 0.1
            if indeterminate:
                point = start + rnd.uniform(0, 6.0) if rnd.random() < 0.7 else None
            ops.append({"key": rnd.choice(keys), "kind": kind, "start": start,
                        "end": math.inf if indeterminate else end, "value": "c%d-%d" % (c, n),
                        "point": point, "client": c, "guess": rnd.randint(0, 3)})
            t = (start + 2.5 if indeterminate else end) + rnd.uniform(0.01, 0.5)
    state = {k: ("", 0) for k in keys}
    for o in sorted((o for o in ops if o["point"] is not None), key=lambda o: o["point"]):
        value, version = state[o["key"]]
        if o["kind"] == READ:
            o["result"] = (value, version)
        elif o["kind"] == WRITE:
            state[o["key"]] = (o["value"], version + 1)
            o["result"] = version + 1
        else:
            o["expected"] = max(0, version - 1 + o["guess"] % 3)  # version-1, version or version+1
            if o["expected"] == version:
                state[o["key"]] = (o["value"], version + 1)
                o["result"] = version + 1
            else:
                o["result"] = None
    history = {k: [] for k in keys}
    for o in ops:
        arg = o["value"] if o["kind"] == WRITE else None
        if o["kind"] == CAS:
            arg = (o.get("expected", o["guess"]), o["value"])
        result = None if o["end"] == math.inf else o.get("result")
        history[o["key"]].append(Op(o["kind"], arg, result, o["start"], o["end"], o["client"]))
    return history


def test_the_checker_passes_linearizable_histories_and_fails_corrupted_ones():
    """Simulated linearizable histories (4 clients, 2 keys, indeterminate updates) pass; the
    same histories with a lost write (stale read) or a duplicated version fail, per key."""
    corrupted = 0
    for seed in range(40):
        history = _simulated_history(seed)
        assert check_per_key(history, INITIAL) == [], "seed %d: a linearizable history was refused" % seed
        for key, ops in history.items():
            for bad in (corrupt_stale_read(ops, INITIAL), corrupt_duplicate_version(ops)):
                if bad is None:
                    continue
                corrupted += 1
                assert not check(bad, INITIAL), "seed %d key %s: a corrupted history passed" % (seed, key)
                assert check_per_key(dict(history, **{key: bad}), INITIAL) == [key]
    assert corrupted >= 100, "too few corruptions applied (%d)" % corrupted


# --------------------------------------------------------------------------
# Ensembles in network namespaces (netns.py): several keys, clients on
# different members, minority partitions, a kill -9 and a restart.

class Call:
    """One client call as recorded: kind, key, argument, invocation time, the
    kazoo async result and when it was seen to end (an upper bound); `via`
    (diagnostics only) is the address the client was connected to when it
    made the call."""

    __slots__ = ("kind", "key", "arg", "start", "ar", "end", "client", "via")

    def __init__(self, kind, key, arg, start, ar, client, via=None):
        self.kind, self.key, self.arg, self.start, self.ar, self.client = kind, key, arg, start, ar, client
        self.via = via
        self.end = None
        if ar.wait(OP_TIMEOUT_S):
            self.end = time.monotonic()
        else:
            ar.rawlink(self._ended)  # answered later, or failed when the client stops

    def _ended(self, _ar):
        if self.end is None:
            self.end = time.monotonic()

    def op(self, now):
        """The checker's Op, or None for a read that tells nothing."""
        ar = self.ar
        end = self.end if self.end is not None else now
        if not ar.ready():
            return None if self.kind == READ else Op(self.kind, self.arg, None, self.start, math.inf, self.client)
        exc = ar.exception
        if self.kind == READ:
            if exc is not None:
                return None
            data, stat = ar.value
            return Op(READ, None, (data.decode(), stat.version), self.start, end, self.client)
        if exc is None:
            return Op(self.kind, self.arg, ar.value.version, self.start, end, self.client)
        if self.kind == CAS and isinstance(exc, BadVersionError):
            return Op(CAS, self.arg, None, self.start, end, self.client)
        # Connection loss, session expiry, client closed...: may or may not have happened.
        return Op(self.kind, self.arg, None, self.start, math.inf, self.client)


class Run:
    """Shared state of one run: calls, progress, the fault schedule's end."""

    def __init__(self, clients, ops_per_client):
        self.total = clients * ops_per_client
        self.calls = []
        self.started = 0
        self.dropped_reads = 0
        self.lock = threading.Lock()
        self.faults_done = threading.Event()
        self.t0 = time.monotonic()
        self.events = []  # (seconds since t0, what)

    def progress(self):
        with self.lock:
            return self.started / self.total

    def event(self, what):
        self.events.append((time.monotonic() - self.t0, what))


class Worker(threading.Thread):
    """One kazoo client on its own member (the others as fallback), making a
    fixed number of calls on random keys: 40% sync + get, 30% set, 30% set
    with the version it last read or wrote (compare-and-set), a random pause
    (PACE_S on average) before each; the last 15% wait for the faults to be over."""

    def __init__(self, index, servers, run, ops, seed):
        super().__init__(daemon=True)
        self.index, self.run_, self.ops, self.rnd = index, run, ops, random.Random(seed)
        order = [servers[(index + k) % len(servers)].hosts for k in range(len(servers))]
        self.kazoo = KazooClient(hosts=",".join(order), timeout=NS_SESSION_TIMEOUT_S,
                                 randomize_hosts=False,
                                 connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5})
        self.error = None

    def run(self):
        try:
            self._run()
        except BaseException as e:  # noqa: B902 - reported by the test
            self.error = e

    def peer(self):
        """The address the client is connected to, or None (diagnostics only)."""
        try:
            return self.kazoo._connection._socket.getpeername()[0]
        except Exception:
            return None

    def _record(self, call):
        with self.run_.lock:
            self.run_.calls.append(call)

    def _run(self):
        run, rnd, c = self.run_, self.rnd, self.kazoo
        known = {k: 0 for k in KEYS}
        for n in range(self.ops):
            if n == int(self.ops * GATE_FRACTION):
                run.faults_done.wait(60)
            time.sleep(rnd.uniform(0, 2 * PACE_S))
            key, roll, value = rnd.choice(KEYS), rnd.random(), "c%d-%d" % (self.index, n)
            with run.lock:
                run.started += 1
            start, via = time.monotonic(), self.peer()
            if roll < 0.4:
                sync = c.sync_async(key)
                if not sync.wait(OP_TIMEOUT_S) or not sync.successful():
                    with run.lock:
                        run.dropped_reads += 1  # a read that failed tells nothing
                    continue
                call = Call(READ, key, None, start, c.get_async(key), self.index, via)
                if call.end is not None and call.ar.successful():
                    known[key] = call.ar.value[1].version
            elif roll < 0.7:
                call = Call(WRITE, key, value, start, c.set_async(key, value.encode()), self.index, via)
            else:
                call = Call(CAS, key, (known[key], value), start,
                            c.set_async(key, value.encode(), version=known[key]), self.index, via)
            if call.kind != READ and call.end is not None and call.ar.successful():
                known[key] = call.ar.value.version
            self._record(call)


class Faults(threading.Thread):
    """Runs a fault schedule (a function of this object) beside the workers;
    every step is bounded, and the schedule's end (or failure) releases them."""

    def __init__(self, topo, servers, run, schedule):
        super().__init__(daemon=True)
        self.topo, self.servers, self.run_, self.schedule = topo, servers, run, schedule
        self.error = None

    def run(self):
        try:
            self.schedule(self)
        except BaseException as e:  # noqa: B902 - reported by the test
            self.error = e
            self.run_.event("fault schedule failed: %r" % e)
            try:
                self.topo.rejoin()
                for i in range(len(self.servers)):
                    self.topo.heal(i)
            except Exception:
                pass
        finally:
            self.run_.faults_done.set()

    def wait_progress(self, fraction, timeout=30):
        h.wait_until(lambda: self.run_.progress() >= fraction, timeout=timeout, interval=0.02,
                     what="%.0f%% of the calls started" % (100 * fraction))

    def leader(self, among=None, timeout=ELECTION_S):
        among = among or self.servers
        return h.wait_until(lambda: ns_leader_of(among), timeout=timeout, interval=0.05,
                            what="one leader among %s" % [s.index + 1 for s in among])

    def settle(self):
        """One leader, every running member following it."""
        running = [s for s in self.servers if s.running()]

        def settled():
            modes = [h.srvr_mode(s) for s in running]
            if modes.count("leader") == 1 and modes.count("follower") == len(running) - 1:
                return running[modes.index("leader")]
            return None
        leader = h.wait_until(settled, timeout=SETTLE_S, interval=0.05,
                              what="one leader and %d followers among %s"
                              % (len(running) - 1, [s.index + 1 for s in running]))
        self.run_.event("settled: leader m%d" % (leader.index + 1))

    def partition(self, group):
        self.topo.partition([s.index for s in group])
        self.run_.event("partition %s | rest" % [s.index + 1 for s in group])

    def rejoin(self):
        self.topo.rejoin()
        self.run_.event("partition healed")

    def cut(self, s):
        self.topo.cut(s.index)
        self.run_.event("cut m%d" % (s.index + 1))

    def heal(self, s):
        self.topo.heal(s.index)
        self.run_.event("healed m%d" % (s.index + 1))

    def kill9(self, s):
        s.kill9()
        self.run_.event("kill -9 m%d" % (s.index + 1))

    def restart(self, s):
        s.start(timeout=30)
        self.run_.event("restarted m%d" % (s.index + 1))

    def note(self, what):
        self.run_.event(what)


def five_member_schedule(f):
    """Partition the leader and one follower (2 of 5) away, heal; kill -9 the
    leader then, restart it; partition two followers away, heal."""
    f.wait_progress(0.10)
    old = f.leader()
    buddy = f.servers[(old.index + 1) % len(f.servers)]
    majority = [s for s in f.servers if s not in (old, buddy)]
    f.partition([old, buddy])
    t_cut = time.monotonic()
    f.note("new leader m%d (of the majority)" % (f.leader(majority).index + 1))
    time.sleep(max(0.0, t_cut + CUT_S - time.monotonic()))
    f.rejoin()
    f.settle()

    f.wait_progress(0.35)
    victim = f.leader()
    f.kill9(victim)
    f.note("new leader m%d" % (f.leader([s for s in f.servers if s is not victim]).index + 1))
    time.sleep(1.0)
    f.restart(victim)
    f.settle()

    f.wait_progress(0.55)
    leader = f.leader()
    followers = [f.servers[(leader.index + k) % len(f.servers)] for k in (1, 2)]
    f.partition(followers)
    time.sleep(CUT_S)
    f.rejoin()
    f.settle()


def three_member_schedule(f):
    """Cut the leader off (as test_partition does), heal; twice."""
    for at in (0.10, 0.45):
        f.wait_progress(at)
        old = f.leader()
        f.cut(old)
        t_cut = time.monotonic()
        f.note("new leader m%d (of the other two)"
               % (f.leader([s for s in f.servers if s is not old]).index + 1))
        time.sleep(max(0.0, t_cut + CUT_S - time.monotonic()))
        f.heal(old)
        f.settle()


def final_reads(servers, run):
    """sync + get of every key through every member, after everything else:
    each must see the registers' last state (no acknowledged write lost)."""
    calls = []
    for s in servers:
        c = KazooClient(hosts=s.hosts, timeout=NS_SESSION_TIMEOUT_S,
                        connection_retry={"max_tries": 3, "delay": 0.1, "max_delay": 0.5})
        try:
            c.start(timeout=15)
            for key in KEYS:
                start = time.monotonic()
                c.sync_async(key).get(timeout=10)
                call = Call(READ, key, None, start, c.get_async(key), 100 + s.index + 1, s.host)
                assert call.end is not None, "final read of %s on m%d not answered" % (key, s.index + 1)
                calls.append(call)
        finally:
            stop_client(c)
    with run.lock:
        run.calls.extend(calls)


def in_flight(run, t):
    """Calls begun and not yet ended t seconds into the run."""
    t += run.t0
    with run.lock:
        return sum(c.start <= t and (c.end is None or c.end > t) for c in run.calls)


def save_history(name, history, run, members):
    """With STOA_LIN_HISTORY_DIR set, write the history (with the member each
    call went to) and the fault timeline there; returns the path."""
    out = os.environ.get("STOA_LIN_HISTORY_DIR")
    if not out:
        return None
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "%s-%d-%d.json" % (name, os.getpid(), int(time.time() * 1000)))

    def enc(o, call):
        return {"kind": o.kind, "arg": o.arg, "result": o.result, "start": o.start - run.t0,
                "end": None if o.indeterminate else o.end - run.t0, "client": o.client,
                "via": members.get(call.via)}
    with open(path, "w") as f:
        json.dump({"events": run.events,
                   "history": {k: [enc(o, c) for o, c in sorted(pairs, key=lambda p: p[0].start)]
                               for k, pairs in history.items()}}, f, indent=1)
    return path


def run_under_faults(topo, servers, schedule, name, ops_per_client):
    """Workers on every member, the schedule beside them; then final reads,
    the per-key check, and a check that the same history corrupted fails."""
    setup = KazooClient(hosts=",".join(s.hosts for s in servers), timeout=NS_SESSION_TIMEOUT_S)
    setup.start(timeout=15)
    try:
        setup.ensure_path("/lin")
        for key in KEYS:
            setup.create(key, b"")
    finally:
        stop_client(setup)
    run = Run(len(servers), ops_per_client)
    workers = [Worker(i, servers, run, ops_per_client, seed=7000 + i) for i in range(len(servers))]
    try:
        for w in workers:
            w.kazoo.start(timeout=15)
        run.t0 = time.monotonic()
        faults = Faults(topo, servers, run, schedule)
        faults.start()
        for w in workers:
            w.start()
        faults.join(60)
        assert not faults.is_alive(), "fault schedule stuck; events: %s" % run.events
        for w in workers:
            w.join(30)
        assert not any(w.is_alive() for w in workers), "a worker is stuck; events: %s" % run.events
        # Let calls left pending by a fault end (answered or failed) before closing.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(c.ar.ready() for c in run.calls):
            time.sleep(0.1)
    finally:
        for w in workers:
            stop_client(w.kazoo)
    assert faults.error is None, "fault schedule failed: %r; events: %s" % (faults.error, run.events)
    errors = [(w.index, w.error) for w in workers if w.error is not None]
    assert errors == [], errors
    assert all(s.running() for s in servers), [(s.index + 1, s.log_tail(20)) for s in servers if not s.running()]
    final_reads(servers, run)

    now = time.monotonic()
    pairs = {k: [] for k in KEYS}  # (op, call)
    for call in run.calls:
        op = call.op(now)
        if op is not None:
            pairs[call.key].append((op, call))
    history = {k: [o for o, _ in v] for k, v in pairs.items()}
    members = {s.host: "m%d" % (s.index + 1) for s in servers}
    flat = [o for ops in history.values() for o in ops]
    determinate = [o for o in flat if not o.indeterminate]
    summary = ("%d calls started, %d ops in the history (%d indeterminate, %d reads, %d CAS refused, "
               "%d reads dropped); per key %s; faults: %s"
               % (run.started, len(flat), len(flat) - len(determinate), sum(o.kind == READ for o in flat),
                  sum(o.kind == CAS and o.result is None for o in determinate), run.dropped_reads,
                  {k: len(v) for k, v in history.items()},
                  ["%.1fs %s (%d calls in flight)" % (t, what, in_flight(run, t)) for t, what in run.events]))
    print(summary)
    path = save_history(name, pairs, run, members)
    t_check = time.monotonic()
    bad = check_per_key(history, INITIAL)
    print("checked in %.2fs%s" % (time.monotonic() - t_check, "; history in %s" % path if path else ""))
    assert bad == [], "not linearizable on %s (%s):\n%s" % (bad, summary, "\n".join(
        "%s %r via %s" % (k, o, members.get(c.via)) for k in bad
        for o, c in sorted(pairs[k], key=lambda p: p[0].start)))
    assert len(determinate) >= run.total // 2, "too few completed operations to judge: " + summary
    assert sum(o.kind in (WRITE, CAS) and o.result is not None for o in determinate) >= len(KEYS), summary
    # The same history with one acknowledged write lost, or a version given twice, must fail.
    key = max(KEYS, key=lambda k: len(history[k]))
    for corrupt in (lambda ops: corrupt_stale_read(ops, INITIAL), corrupt_duplicate_version):
        bad_ops = corrupt(history[key])
        assert bad_ops is not None, "nothing to corrupt in %s's history" % key
        assert not check(bad_ops, INITIAL), "a corrupted history of %s passed the check" % key


@stoa_only
@pytest.mark.timeout(90)
def test_five_members_stay_linearizable_across_minority_partitions_and_a_kill(namespaces_allowed, request):
    """5 members in namespaces, a client on each, 3 keys, 5 × 300 calls while: the leader and a
    follower are partitioned away (2 of 5) and healed, the new leader is killed -9 and restarted,
    two followers are partitioned away and healed. Every key's history is linearizable."""
    topo, servers = netns.start_cluster(request, 5, tick_ms=NS_TICK_MS, election_s=ELECTION_S)
    run_under_faults(topo, servers, five_member_schedule, "five", ops_per_client=300)


@stoa_only
@pytest.mark.timeout(90)
def test_three_members_stay_linearizable_across_leader_partitions(namespaces_allowed, request):
    """3 members in namespaces, a client on each, 3 keys, 3 × 200 calls while the leader is cut
    off from its peers (its clients still reach it) and healed, twice. Linearizable per key."""
    topo, servers = netns.start_cluster(request, 3, tick_ms=NS_TICK_MS, election_s=ELECTION_S)
    run_under_faults(topo, servers, three_member_schedule, "three", ops_per_client=200)
