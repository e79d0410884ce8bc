"""Issue 25, item 3: the server-side primitives shipped as extensions
(examples/extensions: fifo_lock, semaphore, election, rwlock, barrier),
driven through a stock kazoo client: mutual exclusion and permit counts
under concurrent clients, FIFO order, no lost wake-up (a waiter's one watch
on its own ticket hears of its grant, and only its grant), a holder whose
session closes or expires (what it held passes on), and a leader failover
of a 3-member ensemble (STOA_TARGET=stoa-ensemble only). Stoa-only.

Every ticketed primitive follows one protocol (docs/primitives.md): acquire
is one create of an ephemeral-sequential ticket, whose reply's stat says
held (version 1) or waiting (version 0); the extension grants a ticket by
setting its data once, so a waiter watches only its own ticket.
"""

import threading
import time

import pytest
from kazoo.exceptions import BadArgumentsError, ConnectionLoss, NoAuthError, NoNodeError

import harness as h

pytestmark = pytest.mark.skipif(h.target() != "stoa", reason="stoa-only: server-side extensions")


# name -> (source file, registration path, the instance node, the ticket an exclusive holder creates)
PRIMS = {
    "fifo_lock": ("fifo_lock.lua", "/lock", "/lock/l", "w-"),
    "semaphore": ("semaphore.lua", "/sem", "/sem/s", "p-"),
    "election": ("election.lua", "/election", "/election/e", "c-"),
    "rwlock": ("rwlock.lua", "/rw", "/rw/l", "write-"),
}
EXCLUSIVE = sorted(PRIMS)

WAIT_S = 20  # a grant that does not come within this is a failure


example = h.example_extension
register = h.register_extension


def setup_prim(admin, prim, permits=1):
    """Registers `prim` as the extension named after it; returns its instance node. The semaphore is created
    with `permits`, so with 1 it is exclusive like the others."""
    source, path, node, _ = PRIMS[prim]
    register(admin, prim, path, example(source))
    if prim == "semaphore":
        admin.create(node, str(permits).encode())
    return node


def acquire(client, node, name, data=b""):
    """One call: (ticket path, held now?)."""
    path, stat = client.create(node + "/" + name, data, ephemeral=True, sequence=True, include_data=True)
    return path, stat.version >= 1


def wait_granted(client, ticket, timeout=WAIT_S):
    """Waits for `ticket`'s grant through watches on the ticket alone (no polling): True once its version is 1,
    False when `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while True:
        fired = threading.Event()
        stat = client.exists(ticket, watch=lambda event: fired.set())
        assert stat is not None, "ticket %s is gone" % ticket
        if stat.version >= 1:
            return True
        left = deadline - time.monotonic()
        if left <= 0 or not fired.wait(left):
            return False


def watch_once(client, ticket):
    """Sets ONE data watch on `ticket`; returns (its version now, the Event the watch sets)."""
    fired = threading.Event()
    stat = client.exists(ticket, watch=lambda event: fired.set())
    return stat.version, fired


def settle(client, node):
    """Before checking that a watch did NOT fire: the client's server has applied everything before this (a
    sync), and kazoo's event thread has had time to run the callbacks of what it delivered."""
    client.sync(node)
    time.sleep(0.2)


def name_of(path):
    return path.rsplit("/", 1)[1]


def run_threads(target, n, timeout=90):
    """Runs target(i) for i in range(n) on threads; re-raises the first error; bounded."""
    errors = []

    def run(i):
        try:
            target(i)
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "workers still running after %ss" % timeout
    if errors:
        raise errors[0]


@pytest.fixture(scope="module")
def module_server():
    """One server (an ensemble under STOA_TARGET=stoa-ensemble) with sessions of 0.5 s to 5 s, so a dropped
    holder expires quickly."""
    srv = h.Server(tick_time=250)
    srv.start()
    yield srv
    srv.cleanup()


@pytest.fixture
def zk(zk):
    zk.create("/extensions")
    return zk


# ---------------------------------------------------------------------------
# Behaviour common to the exclusive primitives (the semaphore with one permit,
# the read-write lock's write side, the election's leadership).

@pytest.mark.parametrize("prim", EXCLUSIVE)
def test_mutual_exclusion_under_concurrent_clients(prim, zk, make_client):
    """Four clients take turns five times each; inside, each does an unprotected read-modify-write of a plain
    node with a pause in between. Exclusion means no overlap is seen and no increment is lost."""
    node = setup_prim(zk, prim)
    ticket_name = PRIMS[prim][3]
    zk.create("/counter", b"0")
    clients = [make_client() for _ in range(4)]
    rounds = 5
    inside = [0]
    overlaps = []
    guard = threading.Lock()

    def worker(i):
        c = clients[i]
        for _ in range(rounds):
            ticket, held = acquire(c, node, ticket_name)
            assert held or wait_granted(c, ticket), "%s: %s was never granted" % (prim, ticket)
            with guard:
                inside[0] += 1
                if inside[0] > 1:
                    overlaps.append(inside[0])
            value = int(c.get("/counter")[0])
            time.sleep(0.005)
            c.set("/counter", str(value + 1).encode())
            with guard:
                inside[0] -= 1
            c.delete(ticket)

    run_threads(worker, len(clients))
    assert overlaps == [], "%s: holders overlapped" % prim
    assert int(zk.get("/counter")[0]) == len(clients) * rounds


@pytest.mark.parametrize("prim", EXCLUSIVE)
def test_waiters_are_granted_in_arrival_order(prim, zk, make_client):
    """Five clients queue behind a holder in a known order; each waits on its own ticket and releases as soon as
    it holds. The grants come in arrival order."""
    node = setup_prim(zk, prim)
    ticket_name = PRIMS[prim][3]
    first, held = acquire(zk, node, ticket_name)
    assert held
    clients = [make_client() for _ in range(5)]
    tickets = []
    for c in clients:
        ticket, held = acquire(c, node, ticket_name)
        assert not held, "%s: a second holder" % prim
        tickets.append(ticket)
    order = []
    guard = threading.Lock()

    def waiter(i):
        assert wait_granted(clients[i], tickets[i]), "%s: %s was never granted" % (prim, tickets[i])
        with guard:
            order.append(i)
        clients[i].delete(tickets[i])

    releasing = threading.Timer(0.3, lambda: zk.delete(first))
    releasing.start()
    try:
        run_threads(waiter, len(clients))
    finally:
        releasing.cancel()
    assert order == list(range(len(clients)))


@pytest.mark.parametrize("prim", EXCLUSIVE)
def test_a_hand_off_wakes_the_next_waiter_and_only_it(prim, zk, make_client):
    """No lost wake-up, no herd: two waiters each set ONE watch on their own ticket. The holder's release fires
    the first waiter's watch (and its ticket is granted) while the second's stays quiet; the first's release
    fires the second's. A grant made before a waiter looks is seen in the look itself."""
    node = setup_prim(zk, prim)
    ticket_name = PRIMS[prim][3]
    w1, w2 = make_client(), make_client()
    holder, _ = acquire(zk, node, ticket_name)
    t1, held1 = acquire(w1, node, ticket_name)
    t2, held2 = acquire(w2, node, ticket_name)
    assert not held1 and not held2
    v1, fired1 = watch_once(w1, t1)
    v2, fired2 = watch_once(w2, t2)
    assert (v1, v2) == (0, 0)
    zk.delete(holder)
    assert fired1.wait(WAIT_S), "%s: the first waiter's watch did not fire at the hand-off" % prim
    assert w1.exists(t1).version == 1
    settle(w2, node)
    assert not fired2.is_set(), "%s: the second waiter was woken by a hand-off that was not its own" % prim
    w1.delete(t1)
    assert fired2.wait(WAIT_S), "%s: the second waiter's watch did not fire at its hand-off" % prim
    assert w2.exists(t2).version == 1
    # A waiter that looks only after its grant sees it in the look (nothing to wait for).
    t3, held3 = acquire(w1, node, ticket_name)
    assert not held3
    w2.delete(t2)
    w1.sync(node)
    assert w1.exists(t3).version == 1


@pytest.mark.parametrize("prim", EXCLUSIVE)
def test_a_holder_whose_session_closes_or_expires_passes_it_on(prim, zk, make_client, server):
    """The holder's end runs the delete of its ticket through the extension: a closed session passes it on at
    once, an expired one (connection dropped, no close) once the server expires it; the waiter hears of it
    through its one watch."""
    node = setup_prim(zk, prim)
    ticket_name = PRIMS[prim][3]
    waiter = make_client()
    closer = make_client()
    _, held = acquire(closer, node, ticket_name)
    assert held
    mine, _ = acquire(waiter, node, ticket_name)
    version, fired = watch_once(waiter, mine)
    assert version == 0
    closer.stop()
    assert fired.wait(WAIT_S), "%s: the holder's close did not pass it on" % prim
    assert waiter.exists(mine).version == 1

    # Now a holder whose session expires. The waiter queues behind it.
    waiter.delete(mine)
    raw = h.RawClient(server.hosts, timeout_ms=1000)
    dead, stat = raw.create(node + "/" + ticket_name, mode=h.CreateMode.EPHEMERAL_SEQUENTIAL)
    assert stat["version"] == 1, "%s: the raw client did not get it at once" % prim
    mine, held = acquire(waiter, node, ticket_name)
    assert not held
    version, fired = watch_once(waiter, mine)
    assert version == 0
    raw.drop()
    assert fired.wait(WAIT_S), "%s: the holder's expiry did not pass it on" % prim
    assert waiter.exists(mine).version == 1
    assert waiter.exists(dead) is None


@pytest.mark.parametrize("prim", EXCLUSIVE)
def test_only_the_owner_releases_and_grants_cannot_be_forged(prim, zk, make_client):
    """Another session's delete of a ticket is NoAuth; a setData on a ticket is refused (a grant is the
    extension's), so a waiter cannot make itself a holder."""
    node = setup_prim(zk, prim)
    ticket_name = PRIMS[prim][3]
    other = make_client()
    holder, _ = acquire(zk, node, ticket_name)
    mine, _ = acquire(other, node, ticket_name)
    with pytest.raises(NoAuthError):
        other.delete(holder)
    with pytest.raises(BadArgumentsError):
        other.set(mine, b"held")
    assert other.exists(mine).version == 0


# ---------------------------------------------------------------------------
# Per primitive.

def test_fifo_lock_names_its_holder_and_a_watch_on_it_fires_at_each_hand_off(zk, make_client):
    """The lock's data names the holder's ticket ("" when free); observers watching it hear every change."""
    node = setup_prim(zk, "fifo_lock")
    other = make_client()
    a, _ = acquire(zk, node, "w-")
    b, _ = acquire(other, node, "w-")
    changed = threading.Event()
    assert other.get(node, watch=lambda e: changed.set())[0].decode() == name_of(a)
    zk.delete(a)
    assert changed.wait(WAIT_S)
    assert other.get(node)[0].decode() == name_of(b)
    other.delete(b)
    assert zk.get(node)[0] == b""


def test_semaphore_holds_at_most_n_permits_under_concurrent_clients(zk, make_client):
    """Six clients take permits of a semaphore of three, four rounds each: never more than three inside, and
    (since each holder lingers) three are inside together at some point."""
    node = setup_prim(zk, "semaphore", permits=3)
    clients = [make_client() for _ in range(6)]
    inside, most = [0], [0]
    guard = threading.Lock()

    def worker(i):
        c = clients[i]
        for _ in range(4):
            ticket, held = acquire(c, node, "p-")
            assert held or wait_granted(c, ticket)
            with guard:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.05)
            with guard:
                inside[0] -= 1
            c.delete(ticket)

    run_threads(worker, len(clients))
    assert most[0] == 3


def test_semaphore_grants_freed_permits_in_arrival_order_and_on_expiry(zk, make_client, server):
    """A semaphore of two: the first two acquirers hold at once, the rest wait; whichever holder releases (here
    one whose session expires, then one that deletes), the oldest waiter gets the permit and nobody else is
    woken. More permits (setData N) grant waiters at once; a bad N is refused."""
    node = setup_prim(zk, "semaphore", permits=2)
    with pytest.raises(BadArgumentsError):
        zk.create("/sem/bad", b"0")
    with pytest.raises(NoNodeError):
        zk.create("/sem/missing/p-", ephemeral=True, sequence=True)
    raw = h.RawClient(server.hosts, timeout_ms=1000)
    dying, stat = raw.create(node + "/p-", mode=h.CreateMode.EPHEMERAL_SEQUENTIAL)
    assert stat["version"] == 1
    second, held = acquire(zk, node, "p-")
    assert held
    waiters = [make_client() for _ in range(3)]
    tickets = [acquire(c, node, "p-") for c in waiters]
    assert [held for _, held in tickets] == [False, False, False]
    watches = [watch_once(c, t) for c, (t, _) in zip(waiters, tickets)]
    raw.drop()
    assert watches[0][1].wait(WAIT_S), "the expired holder's permit did not pass on"
    settle(zk, node)
    assert not watches[1][1].is_set() and not watches[2][1].is_set()
    zk.delete(second)
    assert watches[1][1].wait(WAIT_S)
    settle(zk, node)
    assert not watches[2][1].is_set()
    zk.set(node, b"3")
    assert watches[2][1].wait(WAIT_S), "a permit added by setData was not granted"
    assert [zk.exists(t).version for t, _ in tickets] == [1, 1, 1]
    with pytest.raises(BadArgumentsError):
        zk.set(node, b"none")


def test_election_leader_is_readable_and_watchable_and_passes_on_in_join_order(zk, make_client, server):
    """The election node's data names the leader's ticket (its data is the candidate's), a watch on it fires when
    the leader changes, and the leader's session ending (closed, then expired) hands leadership to the next
    candidate in join order; a candidate that resigns before its turn is skipped."""
    node = setup_prim(zk, "election")
    a, b, c = make_client(), make_client(), make_client()
    ta, leads = acquire(a, node, "c-", b"host-a")
    assert leads
    tb, _ = acquire(b, node, "c-", b"host-b")
    tc, _ = acquire(c, node, "c-", b"host-c")
    raw = h.RawClient(server.hosts, timeout_ms=1000)
    td, _ = raw.create(node + "/c-", b"host-d", mode=h.CreateMode.EPHEMERAL_SEQUENTIAL)
    te, _ = acquire(zk, node, "c-", b"host-e")

    def leader(watch=None):
        name = zk.get(node, watch=watch)[0].decode()
        return name, zk.get(node + "/" + name)[0].decode() if name else None

    assert leader() == (name_of(ta), "host-a")
    b.delete(tb)  # resigns before its turn
    assert leader() == (name_of(ta), "host-a")
    changed = threading.Event()
    leader(watch=lambda e: changed.set())
    _, c_elected = watch_once(c, tc)
    a.stop()
    assert changed.wait(WAIT_S), "the leader's close did not change the election's data"
    assert c_elected.wait(WAIT_S), "the next candidate was not told it leads"
    assert leader() == (name_of(tc), "host-c")
    c.stop()
    assert leader() == (name_of(td), "host-d")
    _, e_elected = watch_once(zk, te)
    raw.drop()
    assert e_elected.wait(WAIT_S), "the expired leader's successor was not told it leads"
    assert leader() == (name_of(te), "host-e")


def test_rwlock_readers_share_writers_exclude_and_writers_do_not_starve(zk, make_client):
    """Readers hold together; a writer behind them waits, and readers arriving after the waiting writer wait
    for it (FIFO fairness); the readers' release grants the writer alone, its release grants the readers behind
    it together, each woken through its own ticket."""
    node = setup_prim(zk, "rwlock")
    c = [make_client() for _ in range(5)]
    r1, h1 = acquire(c[0], node, "read-")
    r2, h2 = acquire(c[1], node, "read-")
    w3, h3 = acquire(c[2], node, "write-")
    r4, h4 = acquire(c[3], node, "read-")
    r5, h5 = acquire(c[4], node, "read-")
    assert (h1, h2, h3, h4, h5) == (True, True, False, False, False)
    assert zk.get(node)[0].decode().split() == [name_of(r1), name_of(r2)]
    _, w3_fired = watch_once(c[2], w3)
    _, r4_fired = watch_once(c[3], r4)
    _, r5_fired = watch_once(c[4], r5)
    c[0].delete(r1)
    settle(c[2], node)
    assert not w3_fired.is_set(), "the writer was woken while a reader still holds"
    c[1].delete(r2)
    assert w3_fired.wait(WAIT_S)
    settle(c[3], node)
    assert not r4_fired.is_set() and not r5_fired.is_set(), "readers behind the writer were woken"
    assert zk.get(node)[0].decode() == name_of(w3)
    c[2].delete(w3)
    assert r4_fired.wait(WAIT_S) and r5_fired.wait(WAIT_S)
    assert zk.get(node)[0].decode().split() == [name_of(r4), name_of(r5)]
    with pytest.raises(BadArgumentsError):
        zk.create(node + "/reader-", ephemeral=True, sequence=True)


def test_rwlock_never_lets_a_writer_in_with_anyone_else_under_concurrent_clients(zk, make_client):
    """Six clients, two writing and four reading, three rounds each: a writer is always alone, and the readers
    do share (two or more inside together at some point)."""
    node = setup_prim(zk, "rwlock")
    clients = [make_client() for _ in range(6)]
    state = {"readers": 0, "writers": 0, "most_readers": 0}
    bad = []
    guard = threading.Lock()

    def worker(i):
        c = clients[i]
        kind = "write-" if i < 2 else "read-"
        for _ in range(3):
            ticket, held = acquire(c, node, kind)
            assert held or wait_granted(c, ticket)
            with guard:
                state["writers" if kind == "write-" else "readers"] += 1
                if state["writers"] > 1 or (state["writers"] and state["readers"]):
                    bad.append(dict(state))
                state["most_readers"] = max(state["most_readers"], state["readers"])
            time.sleep(0.05)
            with guard:
                state["writers" if kind == "write-" else "readers"] -= 1
            c.delete(ticket)

    run_threads(worker, len(clients))
    assert bad == []
    assert state["most_readers"] >= 2


def test_barrier_releases_every_member_through_its_watch_and_dead_members_do_not_count(zk, make_client):
    """Members of a barrier for three each set one exists watch on ready; a member whose session ends before the
    barrier opens no longer counts; the third live join opens it and every waiting member's watch fires."""
    register(zk, "barrier", "/barrier", example("barrier.lua"))
    zk.create("/barrier/b", b"3")
    members = [make_client() for _ in range(3)]
    quitter = make_client()
    quitter.create("/barrier/b/q", ephemeral=True)
    fired = []

    def join(i):
        members[i].create("/barrier/b/m%d" % i, ephemeral=True)
        ev = threading.Event()
        assert members[i].exists("/barrier/b/ready", watch=lambda e: ev.set()) is None
        fired.append(ev)

    join(0)
    quitter.stop()  # would have been the third member
    join(1)
    zk.sync("/barrier/b")
    assert zk.exists("/barrier/b/ready") is None
    members[2].create("/barrier/b/m2", ephemeral=True)
    for ev in fired:
        assert ev.wait(WAIT_S), "a member was not released"
    assert members[2].exists("/barrier/b/ready") is not None


def test_two_registrations_of_each_primitive_are_independent(zk, make_client):
    """Each source registered twice (one path with pattern characters) gives two instances that grant on their
    own."""
    zk.create("/app-1")
    other = make_client()
    for prim, (source, path, node, ticket) in PRIMS.items():
        second = "/app-1/%s.v2" % prim
        register(zk, prim, path, example(source))
        register(zk, prim + "-2", second, example(source))
        nodes = [node, second + node[len(path):]]
        if prim == "semaphore":
            for n in nodes:
                zk.create(n, b"1")
        assert [acquire(zk, n, ticket)[1] for n in nodes] == [True, True], prim
        assert [acquire(other, n, ticket)[1] for n in nodes] == [False, False], prim


# ---------------------------------------------------------------------------
# Leader failover of a 3-member ensemble.

def _retrying(call, *args, timeout=60, **kw):
    """call(*args) retried across the connection losses of a failover (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call(*args, **kw)
        except ConnectionLoss:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


@pytest.mark.skipif(not h.ensemble_target(),
                    reason="needs STOA_TARGET=stoa-ensemble: kills the ensemble's leader")
@pytest.mark.parametrize("prim", EXCLUSIVE)
def test_after_a_leader_failover_an_expired_holder_passes_it_on_and_hand_offs_go_on(prim, server_factory,
                                                                                     make_client):
    """A holder (its connection then dropped), two waiters with a watch on their tickets, all on a follower;
    the leader is killed. The new leader expires the holder and its ticket's delete runs through the extension
    there, granting the first waiter (its watch fires); that waiter's release then grants the second."""
    srv = server_factory(tick_time=500)  # sessions of up to 10 s outlive the election
    admin = make_client(hosts=srv.hosts, timeout=15)
    admin.create("/extensions")
    node = setup_prim(admin, prim)
    ticket_name = PRIMS[prim][3]
    raw = h.RawClient(srv.hosts, timeout_ms=3000)
    holder, stat = raw.create(node + "/" + ticket_name, mode=h.CreateMode.EPHEMERAL_SEQUENTIAL)
    assert stat["version"] == 1
    w1, w2 = make_client(hosts=srv.hosts, timeout=15), make_client(hosts=srv.hosts, timeout=15)
    t1, _ = acquire(w1, node, ticket_name)
    t2, _ = acquire(w2, node, ticket_name)
    _, fired1 = watch_once(w1, t1)
    _, fired2 = watch_once(w2, t2)
    old = srv.leader()
    assert old is not None and old is not srv.client_member
    old.kill9()
    raw.drop()
    h.wait_until(lambda: srv.leader() not in (None, old), timeout=60, what="a new leader")
    assert fired1.wait(60), "%s: the expired holder's ticket did not pass on under the new leader" % prim
    assert _retrying(w1.exists, t1).version == 1
    assert _retrying(w1.exists, holder) is None
    _retrying(settle, w2, node)
    assert not fired2.is_set()
    _retrying(w1.delete, t1)
    assert fired2.wait(WAIT_S), "%s: a release under the new leader did not hand off" % prim
    assert _retrying(w2.exists, t2).version == 1
