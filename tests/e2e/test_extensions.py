"""Server-side extensions through a stock kazoo client: registration through
the tree, the shipped examples, atomicity under concurrency, the sandbox, and
durability of registrations. Stoa-only (ZooKeeper has no extensions)."""

import time
import threading

import pytest
from kazoo.exceptions import (BadArgumentsError, NoAuthError, NodeExistsError, NoNodeError,
                              QuotaExceededError, RolledBackError, RuntimeInconsistency,
                              SystemErrorException)
from kazoo.security import make_digest_acl

import harness as h

pytestmark = pytest.mark.skipif(h.target() != "stoa", reason="stoa-only: server-side extensions")



example = h.example_extension
register = h.register_extension


@pytest.fixture
def ext_server(server_factory):
    return server_factory()


@pytest.fixture
def zk(ext_server, make_client):
    c = make_client(hosts=ext_server.hosts)
    c.create("/extensions")
    return c


def drain(client):
    out = []
    while True:
        try:
            out.append(client.get("/queue/next")[0].decode())
        except NoNodeError:
            return out


def test_priority_queue_serves_smallest_priority_first_in_insertion_order(zk):
    """The paper's priority queue: getData /queue/next removes the head in one call; NoNode when empty."""
    register(zk, "pq", "/queue", example("priority_queue.lua"))
    for prio, item in [(5, "e"), (1, "a"), (3, "c"), (1, "b"), (-2, "first")]:
        zk.create("/queue/node-%d-" % prio, item.encode(), sequence=True)
    assert drain(zk) == ["first", "a", "b", "c", "e"]
    with pytest.raises(NoNodeError):
        zk.get("/queue/next")


def test_priority_queue_orders_negative_and_64_bit_priorities_with_ties_in_insertion_order(zk):
    """Priorities span the whole signed 64-bit range (leading zeros allowed), equal ones come out
    in insertion order, an insert's reply names the stored node, and a priority beyond 64 bits is
    refused."""
    register(zk, "pq", "/queue", example("priority_queue.lua"))
    inserts = [("9223372036854775807", "max"), ("0", "zero-a"), ("-1", "minus-one"),
               ("-9223372036854775808", "min"), ("007", "seven-a"), ("-10", "minus-ten"),
               ("0", "zero-b"), ("7", "seven-b"), ("-9223372036854775808", "min-b"),
               ("9223372036854775807", "max-b"), ("0", "zero-c")]
    for prio, item in inserts:
        path = zk.create("/queue/node-%s-" % prio, item.encode(), sequence=True)
        assert zk.get(path)[0] == item.encode()
    for too_big in ("9223372036854775808", "-9223372036854775809"):
        with pytest.raises(BadArgumentsError):
            zk.create("/queue/node-%s-" % too_big, b"x", sequence=True)
    assert drain(zk) == ["min", "min-b", "minus-ten", "minus-one", "zero-a", "zero-b", "zero-c",
                         "seven-a", "seven-b", "max", "max-b"]


def test_an_insert_through_the_queue_replies_with_the_stat_the_node_gets(zk):
    """The extension's reply carries the zxid its transaction commits with (not 0)."""
    register(zk, "pq", "/queue", example("priority_queue.lua"))
    path, stat = zk.create("/queue/node-4-", b"x", sequence=True, include_data=True)
    stored = zk.get(path)[1]
    assert stat.czxid != 0
    assert (stat.czxid, stat.mzxid) == (stored.czxid, stored.mzxid)


def test_a_client_multi_through_an_extension_is_one_transaction(zk):
    """A multi with ops on an extension's path runs them through the extension, in order, with
    the plain ops around them, as one transaction: the second insert sees the first (distinct
    sequence numbers), and each op gets its own result."""
    register(zk, "pq", "/queue", example("priority_queue.lua"))
    zk.create("/counter", b"0")
    t = zk.transaction()
    t.create("/plain", b"p")
    t.create("/queue/node-2-", b"second", sequence=True)
    t.create("/queue/node-1-", b"first", sequence=True)
    t.create("/queue/node-2-", b"third", sequence=True)
    t.set_data("/counter", b"1")
    results = t.commit()
    assert results[0] == "/plain"
    inserted = results[1:4]
    assert all(isinstance(r, str) and r.startswith("/queue") for r in inserted), results
    assert len(set(inserted)) == 3
    assert [zk.get(path)[0] for path in inserted] == [b"second", b"first", b"third"]
    assert results[4].version == 1
    assert zk.get("/counter")[1].mzxid == zk.get("/plain")[1].czxid, "one transaction, one zxid"
    assert drain(zk) == ["first", "second", "third"]


def test_a_failing_op_fails_the_whole_multi_extension_ops_included(zk):
    """A plain op failing after an extension's op, or an extension refusing its op, fails the
    whole multi as ZooKeeper's does: nothing of it applies, the failing op gets its error."""
    register(zk, "pq", "/queue", example("priority_queue.lua"))
    zk.create("/taken")
    t = zk.transaction()
    t.create("/plain", b"p")
    t.create("/queue/node-1-", b"x", sequence=True)
    t.create("/taken")
    results = t.commit()
    assert isinstance(results[2], NodeExistsError), results
    assert all(isinstance(r, RolledBackError) for r in results[:2]), results
    t = zk.transaction()
    t.create("/plain", b"p")
    t.create("/queue/node-99999999999999999999-", b"x", sequence=True)
    t.create("/after")
    results = t.commit()
    assert isinstance(results[1], BadArgumentsError), results
    assert isinstance(results[0], RolledBackError) and isinstance(results[2], RuntimeInconsistency)
    assert zk.exists("/plain") is None and zk.exists("/after") is None
    with pytest.raises(NoNodeError):
        zk.get("/queue/next")
    # The session goes on in order after the failures.
    zk.create("/queue/node-1-", b"ok", sequence=True)
    assert drain(zk) == ["ok"]


MAKER = """
return {
  create = function(req, zk)
    local name = req.path:match("([^/]+)$")
    zk.create("/made-" .. name, "s", zk.PERSISTENT,
              { acl = { { scheme = "digest", id = "%s", perms = "rwcda" } } })
    zk.create("/box-" .. name, "", zk.CONTAINER)
    zk.create("/box-" .. name .. "/c", "")
    zk.create("/ttl-" .. name, "", zk.PERSISTENT_WITH_TTL, { ttl = 200 })
    return { path = req.path }
  end,
}
"""


def test_an_extension_creates_nodes_with_an_acl_containers_and_ttl_nodes(zk):
    """An extension's create can give the node an ACL (a client without it gets NoAuth), make a
    container (reaped once its child goes) and a TTL node (reaped once its TTL passes), as a
    client's own creates would."""
    register(zk, "maker", "/maker", MAKER % h.digest("someone", "pw"))
    zk.create("/maker/n1")
    with pytest.raises(NoAuthError):
        zk.get("/made-n1")
    zk.add_auth("digest", "someone:pw")
    assert zk.get("/made-n1")[0] == b"s"
    assert zk.get_acls("/made-n1")[0] == [make_digest_acl("someone", "pw", all=True)]
    assert zk.exists("/box-n1").ephemeralOwner == 0
    zk.delete("/box-n1/c")
    h.wait_until(lambda: zk.exists("/box-n1") is None, timeout=15, what="container reaped")
    h.wait_until(lambda: zk.exists("/ttl-n1") is None, timeout=15, what="TTL node reaped")


def test_an_extension_answers_the_first_call_after_its_registration(zk):
    """A call right after the registration's reply goes through the extension, even where the
    client's server applied the registration before the leader did (an ensemble's follower):
    the leader holds writes until it has applied the registration changes it proposed. Many
    rounds, since the window is one fsync wide."""
    for i in range(30):
        register(zk, "pq%d" % i, "/q%d" % i, example("priority_queue.lua"))
        path = zk.create("/q%d/node-1-" % i, b"x", sequence=True)
        assert zk.get("/q%d/next" % i)[0] == b"x", path
        zk.delete("/extensions/pq%d" % i)


def test_concurrent_consumers_dequeue_every_element_exactly_once(zk, make_client, ext_server):
    """Four consumers racing on /queue/next get 300 elements with no loss and no duplicate."""
    register(zk, "pq", "/queue", example("priority_queue.lua"))
    for i in range(300):
        zk.create("/queue/node-%d-" % (i % 5), str(i).encode(), sequence=True)
    got, lock = [], threading.Lock()

    def consume(c):
        for item in drain(c):
            with lock:
                got.append(item)

    consumers = [make_client(hosts=ext_server.hosts) for _ in range(4)]
    threads = [threading.Thread(target=consume, args=(c,)) for c in consumers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(got, key=int) == [str(i) for i in range(300)]


def test_quota_allocates_atomically_and_refuses_only_when_short(zk, make_client, ext_server):
    """Quota of 1500 in requests of 100 from 6 clients: exactly 15 succeed, the rest get QuotaExceeded."""
    zk.create("/memory", b"1500")
    register(zk, "quota", "/memory-quota", example("quota.lua"))
    results, lock = [], threading.Lock()

    def allocate(c):
        for _ in range(5):
            try:
                c.set("/memory-quota", b"100")
                outcome = "ok"
            except QuotaExceededError:
                outcome = "short"
            with lock:
                results.append(outcome)

    clients = [make_client(hosts=ext_server.hosts) for _ in range(6)]
    threads = [threading.Thread(target=allocate, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results.count("ok") == 15 and results.count("short") == 15
    assert zk.get("/memory")[0] == b"0"
    zk.set("/memory-quota", b"-100")
    assert zk.get("/memory")[0] == b"100"


PAIRS = """
-- create /pair/<name> makes /pairs/<name> with children a and b in one zk.multi.
-- If the multi fails, nothing of it remains; the handler records why in
-- /failures/<name> and succeeds. setData /pair/<name> runs the same multi
-- without catching its error.
local function ops(name, data)
  local base = "/pairs/" .. name
  return {
    { op = "create", path = base, data = data },
    { op = "create", path = base .. "/a", data = "a" },
    { op = "create", path = base .. "/b", data = "b" },
    { op = "create", path = "/registry/" .. name, data = "" },
  }
end
return {
  create = function(req, zk)
    local name = req.path:match("^/pair/([^/]+)$")
    if not name then zk.fail("BadArguments") end
    local ok, r = pcall(zk.multi, ops(name, req.data))
    if not ok then
      zk.create("/failures/" .. name, r.name .. "@" .. r.index)
      return { path = req.path }
    end
    return { path = r[1].path }
  end,
  setData = function(req, zk)
    zk.multi(ops(req.path:match("^/pair/([^/]+)$"), req.data))
    return { stat = zk.exists("/pairs") }
  end,
}
"""


def test_multi_inside_an_extension_is_all_or_nothing(zk):
    """zk.multi commits every operation or none: a failing operation (here the fourth) leaves no
    trace of the first three, the extension can catch it (name and position) and go on, and an
    uncaught one reaches the client as that error."""
    for p in ("/pairs", "/registry", "/failures", "/registry/taken"):
        zk.create(p)
    register(zk, "pairs", "/pair", PAIRS)
    assert zk.create("/pair/ok", b"data") == "/pairs/ok"
    assert zk.get("/pairs/ok")[0] == b"data"
    assert sorted(zk.get_children("/pairs/ok")) == ["a", "b"]
    assert zk.exists("/registry/ok") is not None

    zk.create("/pair/taken", b"x")
    assert zk.exists("/pairs/taken") is None
    assert zk.get("/failures/taken")[0] == b"NodeExists@4"

    with pytest.raises(NodeExistsError):
        zk.set("/pair/taken", b"y")
    assert zk.exists("/pairs/taken") is None
    assert zk.get_children("/pairs") == ["ok"]


def test_a_broken_extension_is_refused_and_never_registered(zk):
    """Lua that does not compile is refused with BadArguments; its node is not created."""
    with pytest.raises(BadArgumentsError):
        register(zk, "bad", "/queue", "this is not lua")
    assert zk.exists("/extensions/bad") is None
    with pytest.raises(BadArgumentsError):
        zk.create("/extensions/nojson", b"{not json")


def test_registration_needs_admin_on_extensions(zk, make_client, ext_server):
    """With /extensions restricted to an admin digest, others cannot register."""
    zk.add_auth("digest", "admin:pw")
    zk.set_acls("/extensions", [make_digest_acl("admin", "pw", all=True)])
    other = make_client(hosts=ext_server.hosts)
    with pytest.raises(NoAuthError):
        register(other, "pq", "/queue", example("priority_queue.lua"))
    register(zk, "pq", "/queue", example("priority_queue.lua"))


def test_runaway_extension_returns_an_error_and_the_server_keeps_serving(zk):
    """An infinite loop hits the instruction cap: the caller gets an error, nothing changes, others are served."""
    loop = "return { getData = function(req, zk) while true do end end }"
    register(zk, "spin", "/spin", loop, limits={"instructions": 100000})
    with pytest.raises(SystemErrorException):
        zk.get("/spin")
    zk.create("/still-alive", b"yes")
    assert zk.get("/still-alive")[0] == b"yes"


def test_an_ephemeral_registration_dies_with_its_session(zk, make_client, ext_server):
    """Registered ephemerally, the extension is gone when its session closes."""
    owner = make_client(hosts=ext_server.hosts)
    register(owner, "pq", "/queue", example("priority_queue.lua"), ephemeral=True)
    zk.create("/queue/node-1-", b"x", sequence=True)
    assert zk.get("/queue/next")[0] == b"x"
    owner.stop()
    h.wait_until(lambda: zk.exists("/extensions/pq") is None, timeout=10, what="registration removed")
    with pytest.raises(NoNodeError):
        zk.get("/queue/next")   # a regular (missing) node again


def test_registrations_survive_a_kill9_restart(ext_server, make_client):
    """Registration is a replicated write: after kill -9 and restart the extension is loaded again."""
    c = make_client(hosts=ext_server.hosts)
    c.create("/extensions")
    register(c, "pq", "/queue", example("priority_queue.lua"))
    c.create("/queue/node-2-", b"later", sequence=True)
    c.create("/queue/node-1-", b"sooner", sequence=True)
    c.stop()
    ext_server.kill9()
    ext_server.start()
    c2 = make_client(hosts=ext_server.hosts)
    assert drain(c2) == ["sooner", "later"]


def test_extension_metrics_appear_in_mntr(zk, ext_server):
    """mntr reports calls, errors and limits hit per extension."""
    register(zk, "pq", "/queue", example("priority_queue.lua"))
    zk.create("/queue/node-1-", b"x", sequence=True)
    zk.get("/queue/next")
    with pytest.raises(NoNodeError):
        zk.get("/queue/next")
    rows = dict(l.split("\t", 1) for l in ext_server.four_letter("mntr").splitlines() if "\t" in l)
    assert int(rows["stoa_extension_pq_calls"]) == 3
    assert int(rows["stoa_extension_pq_error_replies"]) == 1
    assert int(rows["stoa_extension_pq_limits_hit"]) == 0


def test_session_extension_runs_when_sessions_start_and_end(zk, make_client, ext_server):
    """A session extension records each new session in the tree and notes its end."""
    zk.create("/sessions")
    track = """
      return {
        start = function(ev, zk) zk.create("/sessions/" .. ev.session, "started") end,
        ["end"] = function(ev, zk) zk.set("/sessions/" .. ev.session, "ended", -1) end,
      }"""
    register(zk, "track", None, track, kind="session")
    c = make_client(hosts=ext_server.hosts)
    node = "/sessions/%d" % c.client_id[0]
    h.wait_until(lambda: zk.exists(node) is not None, timeout=10, what="session start recorded")
    c.stop()
    h.wait_until(lambda: zk.get(node)[0] == b"ended", timeout=10, what="session end recorded")


def test_watch_extension_can_suppress_events(zk):
    """A watch extension that returns false for /app/quiet keeps that data watch from firing."""
    quiet = """
      return function(ev, zk)
        return not (ev.type == "NodeDataChanged" and ev.path == "/app/quiet")
      end"""
    register(zk, "hush", "/app", quiet, kind="watch")
    zk.create("/app/quiet", b"0", makepath=True)
    zk.create("/app/loud", b"0")
    fired = []
    zk.get("/app/quiet", watch=lambda e: fired.append(e.path))
    zk.get("/app/loud", watch=lambda e: fired.append(e.path))
    zk.set("/app/quiet", b"1")
    zk.set("/app/loud", b"1")
    h.wait_until(lambda: "/app/loud" in fired, timeout=10, what="loud event")
    zk.sync("/")
    assert fired == ["/app/loud"]


def test_a_watch_extension_rewrites_events_and_its_writes_join_the_triggering_transaction(zk, make_client, ext_server):
    """Issue 25: a watch extension may deliver other events instead of the one that fired (here a change below
    /app becomes a data change of /app itself, and a change of /app/hidden nothing), and its writes commit in the
    transaction that made the change: the counter it keeps has the change's own zxid. A second client, on any
    member, hears what the leader decided."""
    rollup = """
      return function(ev, zk)
        if ev.type ~= "NodeDataChanged" then return true end
        local n = tonumber((zk.get("/stats/changes"))) or 0
        zk.set("/stats/changes", tostring(n + 1))
        if ev.path == "/app/hidden" then return {} end
        return { type = "NodeDataChanged", path = "/app" }
      end"""
    zk.create("/stats/changes", b"0", makepath=True)
    zk.create("/app/x", b"0", makepath=True)
    zk.create("/app/hidden", b"0")
    register(zk, "rollup", "/app", rollup, kind="watch")
    other = make_client(hosts=ext_server.hosts)
    app_events, x_events, hidden_events = [], [], []
    other.get("/app", watch=app_events.append)
    other.get("/app/x", watch=x_events.append)
    other.get("/app/hidden", watch=hidden_events.append)

    stat = zk.set("/app/x", b"1")
    h.wait_until(lambda: app_events, timeout=10, what="the rolled-up event on /app")
    assert [(e.type, e.path) for e in app_events] == [("CHANGED", "/app")]
    counter, counter_stat = zk.get("/stats/changes")
    assert counter == b"1"
    assert counter_stat.mzxid == stat.mzxid, "the extension's write is in the change's own transaction"

    zk.set("/app/hidden", b"1")
    assert zk.get("/stats/changes")[0] == b"2"
    other.sync("/")
    time.sleep(0.3)
    assert x_events == [] and hidden_events == [], "the original events were replaced"
    assert len(app_events) == 1


def test_the_shipped_examples_work_at_any_path_and_two_registrations_are_independent(zk):
    """Issue 25: an extension learns the path it is registered at (the global EXTENSION.path), so the shipped
    priority queue registered at /jobs/q and at /queue serves two independent queues, and the counter at a path
    with Lua pattern characters in it works."""
    zk.create("/jobs")
    register(zk, "jobs", "/jobs/q", example("priority_queue.lua"))
    register(zk, "pq", "/queue", example("priority_queue.lua"))
    zk.create("/jobs/q/node-5-", b"j5", sequence=True)
    zk.create("/queue/node-1-", b"q1", sequence=True)
    zk.create("/jobs/q/node-2-", b"j2", sequence=True)
    assert zk.get("/jobs/q/next")[0] == b"j2"
    assert zk.get("/queue/next")[0] == b"q1"
    assert zk.get("/jobs/q/next")[0] == b"j5"
    with pytest.raises(NoNodeError):
        zk.get("/queue/next")
    register(zk, "hits", "/hit-counter.v2", example("counter.lua"))
    assert zk.get("/hit-counter.v2/a/next")[0] == b"1"
    assert zk.get("/hit-counter.v2/a/next")[0] == b"2"


def test_a_watch_set_through_an_extension_fires_when_its_writes_change_what_was_read(zk, make_client, ext_server):
    """Issue 25: a read on an extension's virtual node with watch=true leaves the watch ZooKeeper's own read would
    (getData: data; exists: data or exist; getChildren: child), so the FIFO lock's waiter hears of the hand-off:
    its watch on the lock's data fires when the holder's release, run by the extension, names the next ticket."""
    register(zk, "lock", "/lock", example("fifo_lock.lua"))
    holder = zk
    waiter = make_client(hosts=ext_server.hosts)
    mine = holder.create("/lock/l/w-", ephemeral=True, sequence=True)
    ticket = waiter.create("/lock/l/w-", ephemeral=True, sequence=True)
    changed = threading.Event()
    data, _ = waiter.get("/lock/l", watch=lambda event: changed.set())
    assert data.decode() == mine.rsplit("/", 1)[1]
    children = threading.Event()
    assert sorted(waiter.get_children("/lock/l", watch=lambda event: children.set())) == sorted(
        [mine.rsplit("/", 1)[1], ticket.rsplit("/", 1)[1]])
    appeared = threading.Event()
    assert waiter.exists("/lock/other", watch=lambda event: appeared.set()) is None
    holder.delete(mine)
    assert changed.wait(10), "the waiter's data watch did not fire at the hand-off"
    assert children.wait(10), "the waiter's child watch did not fire at the release"
    assert waiter.get("/lock/l")[0].decode() == ticket.rsplit("/", 1)[1]
    waiter.create("/lock/other/w-", ephemeral=True, sequence=True)
    assert appeared.wait(10), "the exist watch did not fire when the node appeared"


def test_a_lock_held_through_an_extension_passes_on_when_its_holder_closes_or_expires(server_factory, make_client):
    """Issue 25: a session's close or expiry runs through the node extension that owns its ephemerals, so the FIFO
    lock is handed to the next waiter (the lock's data names it, and its watch fires) instead of naming a dead
    holder until someone touches the lock."""
    srv = server_factory(tick_time=200)  # sessions of 4 s at most (20 ticks)
    admin = make_client(hosts=srv.hosts)
    admin.create("/extensions")
    register(admin, "lock", "/lock", example("fifo_lock.lua"))
    waiter = make_client(hosts=srv.hosts)

    def passes_to_the_waiter(lock, holder_ticket, end_holder, wait_s):
        name = lambda p: p.rsplit("/", 1)[1]  # noqa: E731
        mine = waiter.create(lock + "/w-", ephemeral=True, sequence=True)
        handed = threading.Event()
        assert waiter.get(lock, watch=lambda event: handed.set())[0].decode() == name(holder_ticket)
        end_holder()
        assert handed.wait(wait_s), "the holder's end did not hand %s over" % lock
        assert waiter.get(lock)[0].decode() == name(mine)

    # A holder that closes its session.
    closer = make_client(hosts=srv.hosts)
    passes_to_the_waiter("/lock/l", closer.create("/lock/l/w-", ephemeral=True, sequence=True), closer.stop, 10)
    # A holder whose session expires (its connection dropped without a close).
    raw = h.RawClient(srv.hosts, timeout_ms=1000)
    ticket, _ = raw.create("/lock/m/w-", mode=h.CreateMode.EPHEMERAL_SEQUENTIAL)
    passes_to_the_waiter("/lock/m", ticket, raw.drop, 20)
    assert waiter.exists(ticket) is None
