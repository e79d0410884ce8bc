"""Concurrent kazoo clients on different ensemble members read (sync + get),
write and compare-and-set (setData with a version) one znode while the
leader is killed -9; the recorded history must be linearizable. Stoa-only
(it needs the ensemble harness)."""

import math
import random
import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException

import harness as h
from linearizability import CAS, READ, WRITE, Op, check
from test_ensemble import SIZE, leader_of, start_ensemble

pytestmark = pytest.mark.skipif(h.target() != "stoa", reason="stoa-only: ensemble harness")

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
