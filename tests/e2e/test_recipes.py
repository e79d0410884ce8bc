"""kazoo recipes, each a short bounded scenario."""

import threading
import time

import pytest
from kazoo.recipe.barrier import Barrier, DoubleBarrier
from kazoo.recipe.cache import TreeCache, TreeEvent
from kazoo.recipe.counter import Counter
from kazoo.recipe.election import Election
from kazoo.recipe.lock import Lock
from kazoo.recipe.party import Party
from kazoo.recipe.queue import LockingQueue, Queue
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from harness import wait_until


def test_lock_mutual_exclusion(zk, make_client):
    """Two clients contending for a Lock never hold it at the same time, and both get it."""
    c2 = make_client()
    inside = []
    overlap = []
    order = []
    lock = threading.Lock()

    def worker(client, name):
        lk = Lock(client, "/lock", identifier=name)
        for _ in range(5):
            assert lk.acquire(timeout=10)
            try:
                with lock:
                    inside.append(name)
                    if len(inside) > 1:
                        overlap.append(list(inside))
                    order.append(name)
                time.sleep(0.01)
                with lock:
                    inside.remove(name)
            finally:
                lk.release()

    ts = [threading.Thread(target=worker, args=(c, n)) for c, n in ((zk, "a"), (c2, "b"))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not any(t.is_alive() for t in ts)
    assert overlap == []
    assert sorted(order) == ["a"] * 5 + ["b"] * 5


def test_lock_released_on_session_close(zk, make_client):
    """A lock held by a client is released when that client closes, and a waiter gets it."""
    c2 = make_client()
    l1 = Lock(c2, "/lock2", identifier="holder")
    assert l1.acquire(timeout=5)
    l2 = Lock(zk, "/lock2", identifier="waiter")
    from kazoo.exceptions import LockTimeout
    with pytest.raises(LockTimeout):
        l2.acquire(timeout=0.3)
    assert l2.contenders() == ["holder"]
    c2.stop()
    assert l2.acquire(timeout=10)
    l2.release()


def test_election(zk, make_client):
    """Election: exactly one leader runs at a time; the next runs when the first leaves."""
    c2 = make_client()
    leaders = []
    release = {"a": threading.Event(), "b": threading.Event()}

    def lead(name):
        leaders.append(name)
        release[name].wait(10)

    e1, e2 = Election(zk, "/election", "a"), Election(c2, "/election", "b")
    t1 = threading.Thread(target=e1.run, args=(lead, "a"), daemon=True)
    t1.start()
    wait_until(lambda: leaders == ["a"], timeout=10, what="first leader")
    t2 = threading.Thread(target=e2.run, args=(lead, "b"), daemon=True)
    t2.start()
    wait_until(lambda: len(e1.contenders()) == 2, timeout=10, what="two contenders")
    assert leaders == ["a"]
    release["a"].set()
    wait_until(lambda: leaders == ["a", "b"], timeout=10, what="second leader")
    release["b"].set()
    t1.join(10)
    t2.join(10)


def test_barrier(zk, make_client):
    """Barrier: waiters block while it exists and pass when it is removed."""
    c2 = make_client()
    b = Barrier(zk, "/barrier")
    b.create()
    assert not Barrier(c2, "/barrier").wait(timeout=0.3)
    passed = threading.Event()
    t = threading.Thread(target=lambda: Barrier(c2, "/barrier").wait(timeout=10) and passed.set())
    t.start()
    time.sleep(0.1)
    b.remove()
    t.join(10)
    assert passed.is_set()


def test_double_barrier(zk, make_client):
    """DoubleBarrier: nobody enters until 3 are there; nobody leaves until all left."""
    clients = [zk, make_client(), make_client()]
    entered = []
    left = []
    lock = threading.Lock()

    def run(i, c):
        db = DoubleBarrier(c, "/dbar", 3, identifier="p%d" % i)
        db.enter()
        with lock:
            entered.append((i, len(entered)))
        time.sleep(0.05)
        db.leave()
        with lock:
            left.append(i)

    ts = []
    for i, c in enumerate(clients[:2]):
        ts.append(threading.Thread(target=run, args=(i, c), daemon=True))
        ts[-1].start()
    time.sleep(0.4)
    assert entered == []
    ts.append(threading.Thread(target=run, args=(2, clients[2]), daemon=True))
    ts[-1].start()
    for t in ts:
        t.join(20)
    assert not any(t.is_alive() for t in ts)
    assert sorted(i for i, _ in entered) == [0, 1, 2] and sorted(left) == [0, 1, 2]


def test_queue(zk, make_client):
    """Queue: FIFO order (within priority), and priority before FIFO."""
    q = Queue(zk, "/queue")
    for v in (b"one", b"two", b"three"):
        q.put(v)
    q.put(b"urgent", priority=1)
    q2 = Queue(make_client(), "/queue")
    assert len(q2) == 4
    assert [q2.get() for _ in range(4)] == [b"urgent", b"one", b"two", b"three"]
    assert q2.get() is None


def test_locking_queue(zk, make_client):
    """LockingQueue: an item taken is invisible to others until consumed or released."""
    q = LockingQueue(zk, "/lq")
    q.put(b"a")
    q.put(b"b")
    c2 = LockingQueue(make_client(), "/lq")
    assert q.get(timeout=5) == b"a"
    assert c2.get(timeout=5) == b"b"
    assert q.consume()
    assert c2.release()
    assert len(q) == 1
    assert q.get(timeout=5) == b"b" and q.consume()
    assert len(q) == 0
    assert q.get(timeout=0.2) is None


def test_counter(zk, make_client):
    """Counter: concurrent increments from two clients are all counted."""
    c2 = make_client()

    def bump(client):
        ctr = Counter(client, "/counter")
        for _ in range(20):
            ctr += 1

    ts = [threading.Thread(target=bump, args=(c,)) for c in (zk, c2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert Counter(zk, "/counter").value == 40
    fc = Counter(zk, "/fcounter", default=0.0)
    fc += 1.5
    assert fc.value == 1.5


def test_party(zk, make_client):
    """Party: members appear on join and disappear on leave or session close."""
    c2 = make_client()
    p1 = Party(zk, "/party", "one")
    p2 = Party(c2, "/party", "two")
    p1.join()
    p2.join()
    assert sorted(p1) == ["one", "two"] and len(p1) == 2
    p1.leave()
    assert list(Party(zk, "/party")) == ["two"]
    c2.stop()
    wait_until(lambda: len(Party(zk, "/party")) == 0, timeout=10, what="party empty")


def test_tree_cache(zk, make_client):
    """TreeCache mirrors a subtree and reports add/update/remove events."""
    writer = make_client()
    writer.create("/tc/a", b"1", makepath=True)
    cache = TreeCache(zk, "/tc")
    events = []
    cache.listen(lambda ev: events.append((ev.event_type, ev.event_data.path if ev.event_data else None)))
    cache.start()
    try:
        wait_until(lambda: (TreeEvent.INITIALIZED, None) in events, timeout=10, what="cache init")
        assert cache.get_data("/tc/a").data == b"1"
        writer.create("/tc/b/c", b"2", makepath=True)
        writer.set("/tc/a", b"11")
        wait_until(lambda: (TreeEvent.NODE_UPDATED, "/tc/a") in events, timeout=10, what="update")
        writer.delete("/tc/a")
        wait_until(lambda: (TreeEvent.NODE_REMOVED, "/tc/a") in events, timeout=10, what="removal")
        wait_until(lambda: cache.get_data("/tc/b/c") is not None, timeout=10, what="deep add")
        assert cache.get_data("/tc/b/c").data == b"2"
        assert (TreeEvent.NODE_UPDATED, "/tc/a") in events
        assert (TreeEvent.NODE_ADDED, "/tc/b/c") in events
        assert cache.get_data("/tc/a") is None
        assert sorted(cache.get_children("/tc")) == ["b"]
    finally:
        cache.close()


def test_data_watch_recipe(zk, make_client):
    """DataWatch calls back with the current data, then on each change and on delete."""
    writer = make_client()
    seen = []
    DataWatch(zk, "/dw", func=lambda data, stat: seen.append((data, stat.version if stat else None)))
    wait_until(lambda: seen == [(None, None)], timeout=10, what="initial call")
    writer.create("/dw", b"a")
    wait_until(lambda: seen[-1] == (b"a", 0), timeout=10, what="create seen")
    writer.set("/dw", b"b")
    wait_until(lambda: seen[-1] == (b"b", 1), timeout=10, what="set seen")
    writer.delete("/dw")
    wait_until(lambda: seen[-1] == (None, None), timeout=10, what="delete seen")


def test_children_watch_recipe(zk, make_client):
    """ChildrenWatch calls back with the full child list after each change."""
    writer = make_client()
    writer.create("/cwr", b"")
    seen = []
    ChildrenWatch(zk, "/cwr", func=lambda ch: seen.append(sorted(ch)))
    wait_until(lambda: seen and seen[-1] == [], timeout=10, what="initial call")
    writer.create("/cwr/x", b"")
    wait_until(lambda: seen[-1] == ["x"], timeout=10, what="x added")
    writer.create("/cwr/y", b"")
    wait_until(lambda: seen[-1] == ["x", "y"], timeout=10, what="y added")
    writer.delete("/cwr/x")
    wait_until(lambda: seen[-1] == ["y"], timeout=10, what="x removed")
