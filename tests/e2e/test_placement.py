"""Routing by placement (docs/partitions.md): with partition.groups, the nodes of
each configured group live on a partition of their own, and a client sees exactly
what one partition would show it. Each scenario runs against a Stoa server of one
partition and one of three partitions with two groups (on partitions 1 and 2),
and the traces must be equal, stats, events and errors included."""

import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import (BadArgumentsError, BadVersionError, NoAuthError,
                              NoNodeError)
from kazoo.protocol.states import EventType

import harness as h

pytestmark = pytest.mark.skipif(h.target_name() not in ("stoa", "stoa-ensemble"),
                                reason="Stoa's partitions")

GROUPS = {"partitions": 3, "partition.groups": "/app,/billing"}
ONE = {"partitions": 1}


def stat_of(stat):
    """The stat a client sees, without zxids and times (a server of several
    partitions seals its first zxid, so its zxids run one ahead)."""
    if stat is None:
        return None
    return (stat.version, stat.cversion, stat.aversion, stat.dataLength, stat.numChildren,
            stat.ephemeralOwner != 0)


def start(request, cfg):
    srv = h.Server(kind="stoa", tick_time=500, extra_cfg=dict(cfg, snapCount=40))
    request.addfinalizer(srv.cleanup)
    srv.start()
    return srv


def client(srv):
    c = KazooClient(hosts=srv.hosts, timeout=10)
    c.start()
    return c


def outcome(call):
    try:
        return ("ok", call())
    except Exception as e:  # noqa: BLE001 - the error class is the observable
        return ("error", type(e).__name__)


def crud_trace(srv):
    """Creates and deletes group roots and nodes inside them, with every error a
    client can meet on the way; reads each result back."""
    c = client(srv)
    trace = []
    try:
        for path in ("/app", "/billing", "/plain"):
            trace.append(("create", path, outcome(lambda p=path: c.create(p, b"root"))))
        trace.append(("create again", outcome(lambda: c.create("/app", b""))))
        trace.append(("child", outcome(lambda: c.create("/app/a", b"A"))))
        trace.append(("deep", outcome(lambda: c.create("/app/a/b/c", b""))))
        trace.append(("makepath", outcome(lambda: c.ensure_path("/billing/x/y"))))
        trace.append(("seq under root", outcome(lambda: c.create("/s-", b"", sequence=True))))
        trace.append(("seq under group", outcome(lambda: c.create("/app/q-", b"", sequence=True))))
        trace.append(("set root", outcome(lambda: stat_of(c.set("/app", b"v2")))))
        trace.append(("set bad version", outcome(lambda: c.set("/app", b"v3", version=7))))
        trace.append(("delete non-empty root", outcome(lambda: c.delete("/app"))))
        for path in ("/", "/app", "/app/a", "/billing", "/billing/x", "/plain"):
            data, stat = c.get(path)
            trace.append(("get", path, data if path != "/" else None, stat_of(stat),
                          sorted(c.get_children(path))))
        raw = h.RawClient(srv.hosts)
        try:
            trace.append(("counts", [raw.get_all_children_number(p) for p in ("/", "/app", "/billing/x")]))
        finally:
            raw.close()
        for child in c.get_children("/app"):
            c.delete("/app/" + child, recursive=True)
        trace.append(("delete root bad version", outcome(lambda: c.delete("/app", version=5))))
        trace.append(("delete root", outcome(lambda: c.delete("/app", version=1))))
        trace.append(("after", stat_of(c.exists("/")), sorted(c.get_children("/")),
                      stat_of(c.exists("/app"))))
        trace.append(("delete missing root", outcome(lambda: c.delete("/app"))))
        trace.append(("recreate", outcome(lambda: c.create("/app", b"again")),
                      stat_of(c.exists("/app"))))
    finally:
        c.stop()
    return trace


def znodes_per_partition(srv):
    counts = {}
    for line in srv.four_letter("mntr").splitlines():
        key, _, value = line.partition("\t")
        if key.startswith("stoa_partition_") and key.endswith("_znode_count"):
            counts[int(key.split("_")[2])] = int(value)
    return counts


def test_group_roots_and_their_nodes_behave_as_on_one_partition(request):
    one = crud_trace(start(request, ONE))
    srv = start(request, GROUPS)
    groups = crud_trace(srv)
    assert groups == one
    # The groups' nodes are on partitions 1 and 2: /app and its child, and
    # /billing, /billing/x, /billing/x/y (each tree also has its own /,
    # /zookeeper, /zookeeper/config and /zookeeper/quota, and partition 1's
    # /zookeeper/partitions, the placement).
    assert znodes_per_partition(srv) == {0: 4 + 4, 1: 4 + 1 + 1, 2: 4 + 3}
    # The errors did happen (the trace is not all successes).
    assert ("create again", ("error", "NodeExistsError")) in groups
    assert ("delete non-empty root", ("error", "NotEmptyError")) in groups
    assert ("delete root bad version", ("error", "BadVersionError")) in groups


def watch_trace(srv):
    """The events a second session sees while the first creates, changes and
    deletes group roots and their nodes; each exactly once, in order."""
    a, b = client(srv), client(srv)
    events = []
    lock = threading.Lock()

    def record(tag):
        def on(e):
            with lock:
                events.append((tag, e.type, e.path))
        return on
    try:
        b.get_children("/", watch=record("children /"))
        b.exists("/app", watch=record("exists /app"))
        b.add_watch("/", record("recursive /"), 1) if hasattr(b, "add_watch") else None
        a.create("/app", b"")
        b.exists("/app/x", watch=record("exists /app/x"))
        a.create("/app/x", b"1")
        b.get("/app/x", watch=record("data /app/x"))
        a.set("/app/x", b"2")
        b.get_children("/app", watch=record("children /app"))
        a.delete("/app/x")
        b.exists("/app", watch=record("exists /app again"))
        a.delete("/app")
        h.wait_until(lambda: any(t == "exists /app again" for t, _, _ in events), timeout=10,
                     what="the delete's event")
        time.sleep(0.3)  # room for a duplicate, were one sent
    finally:
        a.stop()
        b.stop()
    with lock:
        return list(events)


def test_watches_fire_once_each_in_order_across_partitions(request):
    one = watch_trace(start(request, ONE))
    groups = watch_trace(start(request, GROUPS))
    assert groups == one
    assert ("exists /app", EventType.CREATED, "/app") in groups
    assert ("children /", EventType.CHILD, "/") in groups


def test_a_sessions_ephemerals_on_every_partition_go_at_once(request):
    srv = start(request, GROUPS)
    a, b = client(srv), client(srv)
    try:
        b.create("/billing", b"")
        a.create("/app", b"", ephemeral=True)
        a.create("/billing/e", b"", ephemeral=True)
        a.create("/plain-e", b"", ephemeral=True)
        seen = []
        b.get_children("/", watch=lambda e: seen.append(("/", e.type)))
        b.get_children("/billing", watch=lambda e: seen.append(("/billing", e.type)))
        b.exists("/app", watch=lambda e: seen.append(("/app", e.type)))
        before = sorted(b.get_children("/"))
        a.stop()
        a.close()
        h.wait_until(lambda: len(seen) == 3, timeout=10, what="three events")
        assert before == ["app", "billing", "plain-e", "zookeeper"]
        assert sorted(b.get_children("/")) == ["billing", "zookeeper"]
        assert b.get_children("/billing") == []
        assert b.exists("/app") is None
        assert sorted(seen) == [("/", EventType.CHILD), ("/app", EventType.DELETED),
                                ("/billing", EventType.CHILD)]
    finally:
        b.stop()


def children_or_none(c, path):
    try:
        return sorted(c.get_children(path))
    except NoNodeError:
        return ["<no " + path + ">"]


def multi_trace(srv):
    """Multis within one group and across groups and the root group: their
    results in the ops' order, a failure anywhere rolling back every op."""
    c = client(srv)
    shape = (lambda r: r if isinstance(r, (str, bool)) or r is None
             else type(r).__name__ if isinstance(r, Exception) else stat_of(r))
    trace = []
    try:
        c.create("/app", b"")
        c.create("/billing", b"")
        for ops in (
            [("create", "/app/m1"), ("create", "/app/m2"), ("set", "/app")],
            [("create", "/app/n"), ("create", "/billing/n"), ("create", "/plain-n"),
             ("set", "/billing"), ("check", "/app/n")],
            [("create", "/app/o"), ("create", "/billing/o"), ("create", "/billing/n")],
            [("delete", "/billing/n"), ("delete", "/app/n"), ("set", "/app/missing")],
            [("delete", "/billing/n"), ("delete", "/app/n"), ("delete", "/plain-n")],
            # Group roots created and deleted inside multis over several
            # partitions (the root's node on its group's partition, its
            # link on the parent's).
            [("delete", "/billing"), ("set", "/app")],
            [("create", "/billing"), ("create", "/billing/x"), ("create", "/app/x")],
            [("create", "/billing/y"), ("delete", "/billing")],
            [("create", "/app/z"), ("create", "/billing")],
            [("delete", "/billing/x"), ("delete", "/billing")],
            [("create", "/billing")],
            [("check", "/billing"), ("delete", "/billing")],
        ):
            t = c.transaction()
            for kind, path in ops:
                {"create": lambda p: t.create(p, b"m"), "set": lambda p: t.set_data(p, b"s"),
                 "check": lambda p: t.check(p, 0), "delete": lambda p: t.delete(p)}[kind](path)
            trace.append([shape(r) for r in t.commit()])
            trace.append(sorted(c.get_children("/")) + sorted(c.get_children("/app"))
                         + children_or_none(c, "/billing"))
            trace.append([stat_of(c.exists(path)) if c.exists(path) else None
                          for path in ("/", "/app", "/billing")])
    finally:
        c.stop()
    return trace


def test_a_multi_over_several_groups_is_atomic_and_answers_in_order(request):
    one = multi_trace(start(request, ONE))
    groups = multi_trace(start(request, GROUPS))
    assert groups == one
    # One of them failed and left nothing behind; the others committed.
    assert any("NodeExistsError" in str(step) for step in groups)
    assert any("NoNodeError" in str(step) for step in groups)


def multi_read_trace(srv):
    """multiReads inside one group (each group's on a partition other than 0
    at three partitions), across groups and the root group, and with a read
    of a missing node: each result as one partition would give it."""
    c = client(srv)
    raw = h.RawClient(srv.hosts)
    counts = ("version", "cversion", "aversion", "dataLength", "numChildren")
    shape = (lambda r: (r[0], r[1], [r[2][k] for k in counts]) if r[0] == "get_data"
             else (r[0], sorted(r[1])) if r[0] == "get_children" else r)
    trace = []
    try:
        for path in ("/app", "/app/a", "/app/b", "/billing", "/billing/x", "/plain"):
            c.create(path, path.encode())
        for ops in (
            [("get_data", "/app/a"), ("get_data", "/app/b"), ("get_children", "/app")],
            [("get_children", "/billing"), ("get_data", "/billing/x")],
            [("get_data", "/app"), ("get_data", "/billing/x"), ("get_data", "/plain"),
             ("get_children", "/")],
            [("get_data", "/app/a"), ("get_data", "/app/missing"), ("get_children", "/app/b")],
        ):
            err, results = raw.multi(ops, read=True)
            trace.append((err, [shape(r) for r in results]))
    finally:
        raw.close()
        c.stop()
    return trace


def test_a_multi_read_answers_from_the_groups_it_reads(request):
    """A multiRead whose reads all lie in one group on another partition than
    the root group's was once answered from partition 0: NoNode (found by
    the ensemble simulator's multiReads)."""
    one = multi_read_trace(start(request, ONE))
    groups = multi_read_trace(start(request, GROUPS))
    assert groups == one
    assert groups[0][1][0][:2] == ("get_data", b"/app/a")
    assert ("error", h.ERR.NO_NODE) in groups[3][1]


def test_every_partition_comes_back_after_kill_9(request):
    srv = start(request, GROUPS)
    c = client(srv)
    try:
        for root in ("/app", "/billing", "/plain"):
            c.create(root, root.encode())
            for i in range(60):
                c.create("%s/n%02d" % (root, i), b"%d" % i)
        expected = {root: sorted(c.get_children(root)) for root in ("/app", "/billing", "/plain")}
    finally:
        c.stop()
    srv.kill9()
    srv.start()
    c = client(srv)
    try:
        assert sorted(c.get_children("/")) == ["app", "billing", "plain", "zookeeper"]
        for root, children in expected.items():
            assert sorted(c.get_children(root)) == children
            assert c.get(root + "/n59")[0] == b"59"
    finally:
        c.stop()


NESTED = {"partitions": 4,
          "partition.groups": "/app,/app/t1,/plain/t2,/app/t1/x/deep"}
"""Nested group roots, spread round robin over partitions 1-3: /app on 1, /app/t1
on 2 (its parent's group on 1), /plain/t2 on 3 (its parent in the root group on
0) and /app/t1/x/deep on 1 again, below /app/t1's group on 2."""


def dump(c, path="/"):
    """Every node a client sees below `path` (not /zookeeper): its data, stat and
    children, depth first."""
    out = []
    for child in sorted(c.get_children(path)):
        p = (path.rstrip("/") + "/" + child)
        if p == "/zookeeper":
            continue
        data, stat = c.get(p)
        out.append((p, data, stat_of(stat)))
        out.extend(dump(c, p))
    return out


def nested_trace(srv):
    """Creates, reads, watches, multis, ephemerals and deletes through nested
    group roots, with the errors a client can meet on the way."""
    c = client(srv)
    trace = []
    events = []
    heard = lambda e: events.append((e.type, e.path))  # noqa: E731
    try:
        trace.append(("before its parent", outcome(lambda: c.create("/plain/t2", b""))))
        for path in ("/app", "/app/t1", "/app/t1/x", "/plain"):
            trace.append(("create", path, outcome(lambda p=path: c.create(p, path.encode()))))
        c.get_children("/app/t1/x", watch=heard)
        c.exists("/app/t1/x/deep", watch=heard)
        trace.append(("create deep", outcome(lambda: c.create("/app/t1/x/deep", b"d"))))
        trace.append(("again", outcome(lambda: c.create("/app/t1", b""))))
        trace.append(("leaf", outcome(lambda: c.create("/app/t1/x/deep/leaf", b"l"))))
        trace.append(("seq", outcome(lambda: c.create("/app/t1/q-", b"", sequence=True))))
        d = client(srv)
        trace.append(("ephemeral root", outcome(lambda: d.create("/plain/t2", b"e", ephemeral=True))))
        trace.append(("child of ephemeral", outcome(lambda: c.create("/plain/t2/y", b""))))
        d.stop()
        trace.append(("gone with its session", stat_of(c.exists("/plain/t2"))))
        t = c.transaction()
        t.create("/plain/t2", b"again")
        t.create("/plain/t2/m", b"")
        t.create("/app/t1/m", b"")
        t.set_data("/app", b"v2")
        trace.append(("multi", [type(r).__name__ for r in t.commit()]))
        trace.append(("delete non-empty", outcome(lambda: c.delete("/app/t1/x/deep"))))
        trace.append(("delete parent of a root", outcome(lambda: c.delete("/app/t1/x"))))
        trace.append(("tree", dump(c)))
        raw = h.RawClient(srv.hosts)
        try:
            trace.append(("counts", [raw.get_all_children_number(p)
                                     for p in ("/", "/app", "/app/t1", "/app/t1/x", "/plain")]))
        finally:
            raw.close()
        trace.append(("mntr", h.mntr_int(srv, "zk_znode_count")))
        c.delete("/app/t1/x/deep", recursive=True)
        trace.append(("deleted deep", c.get_children("/app/t1/x"), stat_of(c.exists("/app/t1/x"))))
        trace.append(("delete x", outcome(lambda: c.delete("/app/t1/x"))))
        trace.append(("recreate", outcome(lambda: c.ensure_path("/app/t1/x/deep/leaf")),
                      stat_of(c.exists("/app/t1/x/deep"))))
        c.sync("/")
        time.sleep(0.2)
        trace.append(("events", sorted(events)))
        trace.append(("final", dump(c), h.mntr_int(srv, "zk_znode_count")))
    finally:
        c.stop()
    return trace


def test_nested_group_roots_behave_as_on_one_partition(request):
    """Group roots inside other groups (and inside the root group): a nested
    root's node hangs from stubs on its partition, its link from its parent's
    node on the parent's, and a client sees exactly what one partition shows."""
    one = nested_trace(start(request, ONE))
    nested_srv = start(request, NESTED)
    nested = nested_trace(nested_srv)
    assert nested == one
    admin = client(nested_srv)
    try:
        assert placed(admin.get(PLACEMENT)[0]) == {
            "/app": 1, "/app/t1": 2, "/plain/t2": 3, "/app/t1/x/deep": 1}
    finally:
        admin.stop()


NESTED_MOVES = [("/app/t1", 1), ("/app", 2), ("/app/t1/x/deep", 0), ("/app/t1", 3),
                ("/plain/t2", 0), ("/app", 0), ("/app/t1/x/deep", 2), ("/plain/t2", 1),
                ("/app", 3), ("/app/t1", 3), ("/app", 1), ("/app/t1", 2), ("/plain/t2", 3),
                ("/app/t1/x/deep", 1)]
"""Each nested group onto its parent's partition, away from it, onto and off
the partitions of the groups around it, and back where it started."""


def nested_moves_trace(srv, moving):
    """Builds a tree over the nested groups (an ephemeral among them), then,
    step by step, moves a group (when `moving`), reads everything back, writes
    in every group and fires a watch set before the move."""
    c, owner = client(srv), client(srv)
    admin = super_client(srv) if moving else None
    roots = ["/app", "/app/t1", "/app/t1/x/deep", "/plain/t2"]
    trace = []
    try:
        for path in ("/app/t1/x/deep/leaf", "/plain/t2/y", "/app/t1/q/r"):
            c.ensure_path(path)
        owner.create("/app/t1/x/deep/eph", b"e", ephemeral=True)
        raw = h.RawClient(srv.hosts)
        for step, (root, to) in enumerate(NESTED_MOVES):
            fired = []
            for r in roots:
                c.exists(r + "/w", watch=lambda e: fired.append((e.type, e.path)))
            if moving:
                move(admin, root, to)
                assert placed(admin.get(PLACEMENT)[0])[root] == to
            for r in roots:
                if c.exists(r + "/w"):
                    c.delete(r + "/w")
                else:
                    c.create(r + "/w", b"%d" % step)
            c.sync("/")
            time.sleep(0.1)
            trace.append((step, dump(c), sorted(fired),
                          [raw.get_all_children_number(p) for p in ("/", "/app", "/app/t1", "/plain")],
                          h.mntr_int(srv, "zk_znode_count"), sorted(owner.get_children("/app/t1/x/deep"))))
        raw.close()
        owner.stop()
        trace.append(("the session's ephemeral went", dump(c)))
    finally:
        for x in (c, admin):
            if x is not None:
                x.stop()
    return trace


def test_nested_groups_move_between_partitions_as_groups_do(request):
    """Nested groups moved onto their parent's partition, away from it and
    around each other: every node keeps its data and stat, the counts and
    watches stay what one partition shows, writes go on in every group, and the
    session's ephemeral in a nested group still goes with it; then the server
    restarts from that data."""
    one = nested_moves_trace(start(request, ONE), moving=False)
    srv = start(request, NESTED)
    moved = nested_moves_trace(srv, moving=True)
    for a, b in zip(moved, one):
        assert a == b
    assert len(moved) == len(one)
    c = client(srv)
    before = dump(c)
    c.stop()
    srv.restart()
    c = client(srv)
    try:
        assert dump(c) == before
    finally:
        c.stop()


def refused_counts_trace(srv):
    """getAllChildrenNumber on paths over several partitions (/app holds the
    nested /app/t1): counted, refused without READ on the node itself, NoNode
    for a missing one, from a client that may read everything else."""
    from kazoo.security import make_digest_acl
    owner = KazooClient(hosts=srv.hosts, timeout=10, auth_data=[("digest", "owner:pw")])
    owner.start()
    raw = h.RawClient(srv.hosts)
    trace = []
    try:
        for path in ("/app/t1/x/deep/leaf", "/app/y", "/plain/t2/z"):
            owner.ensure_path(path)

        def count(path):
            try:
                return raw.get_all_children_number(path)
            except h.ZkError as e:
                return ("error", e.code)
        trace.append([count(p) for p in ("/", "/app", "/app/t1", "/nope", "/app/nope")])
        owner.set_acls("/app", [make_digest_acl("owner", "pw", all=True)])
        trace.append([count(p) for p in ("/", "/app", "/app/t1", "/app/y")])
    finally:
        raw.close()
        owner.stop()
    return trace


def test_a_count_over_partitions_is_refused_as_on_one(request):
    """A count whose subtree spans partitions answers and refuses (NoAuth on
    the node without READ, NoNode) as a server of one partition does."""
    one = refused_counts_trace(start(request, ONE))
    nested = refused_counts_trace(start(request, NESTED))
    assert nested == one
    assert one[1][1] == ("error", -102), one


def extension_trace(srv):
    """A counter and a FIFO lock registered inside the group /app: calls from two
    sessions, a multi with an extension's op, and a holder's close that passes
    the lock on through its one watch."""
    import threading
    a, b = client(srv), client(srv)
    trace = []
    try:
        a.ensure_path("/extensions")
        a.create("/app", b"")
        h.register_extension(a, "counter", "/app/counter", h.example_extension("counter.lua"))
        h.register_extension(a, "lock", "/app/lock", h.example_extension("fifo_lock.lua"))
        for c in (a, b, a):
            trace.append(("next", c.get("/app/counter/hits/next")[0]))
        trace.append(("add", stat_of(a.set("/app/counter/hits", b"10"))))
        trace.append(("value", a.get("/app/counter/hits")[0]))
        t = a.transaction()
        t.set_data("/app/counter/hits", b"5")
        t.create("/app/plain", b"x")
        trace.append(("multi", [type(r).__name__ for r in t.commit()]))
        trace.append(("after multi", a.get("/app/counter/hits")[0], a.exists("/app/plain") is not None))
        held, stat = a.create("/app/lock/l/w-", b"", ephemeral=True, sequence=True,
                              include_data=True)
        mine, stat_b = b.create("/app/lock/l/w-", b"", ephemeral=True, sequence=True,
                                include_data=True)
        trace.append(("acquired", stat.version, stat_b.version))
        granted = threading.Event()
        b.exists(mine, watch=lambda e: granted.set())
        a.stop()
        a = None
        trace.append(("passed on", granted.wait(20), b.exists(mine).version))
        trace.append(("holder gone", b.exists(held) is None))
    finally:
        for c in (a, b):
            if c is not None:
                c.stop()
    return trace


def test_node_extensions_in_a_group_on_another_partition_behave_as_on_one(request):
    """Extensions run on the partition of their path's group: a counter and a FIFO
    lock registered inside /app (partition 1 of 3) answer, write, join a multi
    and pass a closed holder's lock on exactly as on a server of one partition,
    and their nodes live on /app's partition."""
    one = extension_trace(start(request, ONE))
    srv = start(request, GROUPS)
    before = znodes_per_partition(srv)
    groups = extension_trace(srv)
    assert groups == one
    assert ("next", b"3") in groups and ("passed on", True, 1) in groups
    after = znodes_per_partition(srv)
    # /app's own nodes (counter, hits, plain, lock, l, the waiter's ticket)
    # went to its partition; partition 0 gained the registrations and the link.
    assert after[1] - before[1] >= 6, (before, after)


def test_node_extensions_in_a_group_work_through_a_follower_of_an_ensemble(request):
    """The same calls through a follower of a 3-member ensemble: it runs reads on
    its own copy of /app's partition and sends writes to the leader, which runs
    the extension on that partition's state."""
    one = extension_trace(start(request, ONE))
    ensemble = h.Ensemble(kind="stoa", extra_cfg=dict(GROUPS, tickTime=500))
    request.addfinalizer(ensemble.cleanup)
    ensemble.start()
    leader = ensemble.leader()
    follower = next(m for i, m in enumerate(ensemble.members, 1) if i != leader)
    assert extension_trace(follower) == one


def watch_extension_trace(srv):
    """A watch extension registered at /app (a group of its own): it rolls a
    change below /app up into a data change of /app, hides /app/hidden's, and
    counts the changes in /app/stats in the changing transaction itself."""
    rollup = """
      return function(ev, zk)
        if ev.type ~= "NodeDataChanged" or ev.path == "/app/stats" then return true end
        local n = tonumber((zk.get("/app/stats"))) or 0
        zk.set("/app/stats", tostring(n + 1))
        if ev.path == "/app/hidden" then return {} end
        return { type = "NodeDataChanged", path = "/app" }
      end"""
    a, b = client(srv), client(srv)
    events = []
    try:
        a.ensure_path("/extensions")
        for path in ("/app", "/app/stats", "/app/x", "/app/hidden"):
            a.create(path, b"0")
        h.register_extension(a, "rollup", "/app", rollup, kind="watch")
        b.get("/app", watch=lambda e: events.append((e.type, e.path)))
        b.get("/app/x", watch=lambda e: events.append((e.type, e.path)))
        b.get("/app/hidden", watch=lambda e: events.append((e.type, e.path)))
        stat = a.set("/app/x", b"1")
        h.wait_until(lambda: events, timeout=10, what="the rolled-up event")
        counter, counter_stat = a.get("/app/stats")
        same_txn = counter_stat.mzxid == stat.mzxid
        a.set("/app/hidden", b"1")
        hidden = a.get("/app/stats")[0]
        b.sync("/app")
        time.sleep(0.3)
        return [list(events), counter, same_txn, hidden]
    finally:
        a.stop()
        b.stop()


def test_a_watch_extension_in_a_group_on_another_partition_behaves_as_on_one(request):
    """A watch extension hears of the changes of the partition its path's group
    lives on, rewrites their events and writes in their transactions there,
    exactly as on a server of one partition."""
    one = watch_extension_trace(start(request, ONE))
    groups = watch_extension_trace(start(request, GROUPS))
    assert groups == one
    assert one == [[(EventType.CHANGED, "/app")], b"1", True, b"2"]


def watch_extension_parts_trace(srv):
    """A watch extension without a path over changes that span groups: group
    roots' creates, a multi over two groups (a write of the extension joins its
    /app part) and a session's close deleting ephemerals in both groups (one
    deletion's event rewritten)."""
    tally = """
      return function(ev, zk)
        if ev.type == "NodeCreated" and ev.path:match("^/app/e") then
          zk.set("/app/count", tostring((tonumber((zk.get("/app/count"))) or 0) + 1))
        end
        if ev.type == "NodeDeleted" and ev.path:match("^/billing/e") then
          return { type = "NodeDataChanged", path = "/billing" }
        end
        return true
      end"""
    a, b = client(srv), client(srv)
    events = []
    heard = lambda e: events.append((e.type, e.path))  # noqa: E731
    steps = []

    def step(what, n):
        h.wait_until(lambda: len(events) >= n, timeout=10, what=what)
        b.sync("/")
        time.sleep(0.2)
        steps.append((what, sorted(events)))
        events.clear()

    try:
        a.ensure_path("/extensions")
        h.register_extension(a, "tally", None, tally, kind="watch")
        b.get_children("/", watch=heard)
        a.create("/app", b"")
        step("a group root's create", 1)
        a.create("/billing", b"")
        a.create("/app/count", b"0")
        b.get("/app/count", watch=heard)
        txn = a.transaction()
        txn.create("/app/e1", b"")
        txn.create("/billing/x", b"")
        multi = txn.commit()
        step("a multi over two groups", 1)
        count, count_stat = a.get("/app/count")
        steps.append(("count", count, count_stat.mzxid == a.exists("/billing/x").czxid))
        c = client(srv)
        c.create("/app/e2", b"", ephemeral=True)
        c.create("/billing/e3", b"", ephemeral=True)
        b.exists("/app/e2", watch=heard)
        b.get("/billing", watch=heard)
        c.stop()
        step("a session's close", 2)
        steps.append(("after", a.get("/app/count")[0], multi))
        return steps
    finally:
        a.stop()
        b.stop()


def test_a_watch_extension_hears_of_changes_spanning_groups_as_on_one(request):
    """A transaction over several groups is shown to watch extensions part by
    part, each on its partition's state: they hear of a group root's create, a
    multi over groups and a session's close as on one partition, their writes
    join the part of their group, and their rewrites reach the watchers. (Such
    transactions went to the log unseen by them.)"""
    one = watch_extension_parts_trace(start(request, ONE))
    groups = watch_extension_parts_trace(start(request, GROUPS))
    assert groups == one
    assert one[2] == ("count", b"1", True), one
    assert one[3] == ("a session's close", [(EventType.CHANGED, "/billing"),
                                             (EventType.DELETED, "/app/e2")]), one


def session_extension_trace(srv):
    """A session extension that reads `/` and two groups' roots when a session
    starts, records what it saw in one node of each of three groups (one write
    over three partitions), and at the session's end updates one and deletes
    another; then a plain client's write goes through."""
    track = """
      return {
        start = function(ev, zk)
          local seen = table.concat(zk.children("/"), ",") .. "|" .. zk.get("/app") .. "|"
            .. zk.get("/billing") .. "|" .. #zk.children("/billing")
          local n = #zk.children("/app")
          zk.create("/app/s" .. n, seen)
          zk.create("/billing/s" .. n, seen)
          zk.create("/plain/s" .. n, seen)
        end,
        ["end"] = function(ev, zk)
          local n = #zk.children("/app") - 1
          zk.set("/billing/s" .. n, "ended")
          zk.delete("/plain/s" .. n)
        end,
      }"""
    a = client(srv)
    try:
        a.ensure_path("/extensions")
        for path in ("/app", "/billing", "/plain"):
            a.create(path, path.encode())
        h.register_extension(a, "track", None, track, kind="session")
        trace = []
        for _ in range(2):
            n = len(a.get_children("/app"))
            b = client(srv)
            h.wait_until(lambda: a.exists("/plain/s%d" % n), timeout=10, what="the start's writes")
            trace.append([a.get("/%s/s%d" % (g, n))[0] for g in ("app", "billing", "plain")])
            b.stop()
            h.wait_until(lambda: not a.exists("/plain/s%d" % n), timeout=10, what="the end's writes")
            trace.append(a.get("/billing/s%d" % n)[0])
        # Nothing the extension wrote left the server waiting for a zxid.
        trace.append(outcome(lambda: a.create("/after", b"") and "created"))
        trace.append(sorted(a.get_children("/plain")))
        return trace
    finally:
        a.stop()


def test_a_session_extension_sees_and_writes_every_partition_as_on_one(request):
    """A session extension reads each path where a client would, and its writes
    over several groups commit as one transaction of parts, exactly as on a
    server of one partition. (They were prepared on the first write's partition,
    which refused the others', and the zxid handed out for them was never
    proposed: every later write waited for it.)"""
    one = session_extension_trace(start(request, ONE))
    groups = session_extension_trace(start(request, GROUPS))
    assert groups == one
    seen = b"app,billing,extensions,plain,zookeeper|/app|/billing|"
    assert one[:2] == [[seen + b"0"] * 3, b"ended"], one


def test_an_extensions_subtree_must_lie_in_one_group_and_its_multis_too(request):
    """A node extension whose path has a group on another partition below it is
    refused with BadArguments; a multi with an extension's op and an op in
    another group fails whole with BadArguments, and changes nothing."""
    from kazoo.exceptions import BadArgumentsError
    srv = start(request, GROUPS)
    c = client(srv)
    try:
        c.ensure_path("/extensions")
        c.create("/app", b"")
        c.create("/billing", b"")
        with pytest.raises(BadArgumentsError):
            h.register_extension(c, "everything", "/", h.example_extension("counter.lua"))

        h.register_extension(c, "counter", "/app/counter", h.example_extension("counter.lua"))
        assert c.get("/app/counter/hits/next")[0] == b"1"
        t = c.transaction()
        t.set_data("/app/counter/hits", b"5")
        t.create("/billing/x", b"")
        results = t.commit()
        assert any(isinstance(r, BadArgumentsError) for r in results), results
        assert c.get("/app/counter/hits")[0] == b"1"
        assert c.exists("/billing/x") is None
    finally:
        c.stop()


def mntr_totals(srv):
    keys = ("zk_znode_count", "zk_approximate_data_size", "zk_ephemerals_count", "zk_watch_count")
    values = dict(line.split("\t", 1) for line in srv.four_letter("mntr").splitlines() if "\t" in line)
    return {k: values[k] for k in keys}


def totals_after_workload(request, cfg):
    srv = start(request, cfg)
    a, b = client(srv), client(srv)
    try:
        a.create("/app", b"root-data", ephemeral=True)
        b.create("/billing", b"b")
        b.create("/billing/x", b"xx", ephemeral=True)
        b.create("/plain", b"p")
        b.set("/billing", b"longer data")
        a.exists("/app", watch=lambda e: None)
        a.get_children("/", watch=lambda e: None)
        a.get("/billing/x", watch=lambda e: None)
        return mntr_totals(srv)
    finally:
        a.stop()
        b.stop()


def test_mntr_counts_what_clients_see_whatever_the_partitions(request):
    """zk_znode_count, the data size, ephemerals and watches count each node
    once: a group root's link and each partition's own / and /zookeeper are
    not the client's."""
    assert totals_after_workload(request, GROUPS) == totals_after_workload(request, ONE)


def test_empty_containers_and_expired_ttl_nodes_are_reaped_in_groups_too(request):
    """A container group root (its node and its link), a container inside a group
    and a TTL node inside a group all go once empty or expired, as on one partition."""
    srv = start(request, GROUPS)
    c = client(srv)
    raw = h.RawClient(srv.hosts)
    try:
        raw.create("/app", b"", mode=h.CreateMode.CONTAINER)
        c.create("/app/child", b"")
        c.create("/billing", b"")
        raw.create("/billing/box", b"", mode=h.CreateMode.CONTAINER)
        c.create("/billing/box/item", b"")
        raw.create("/billing/ttl", b"", mode=h.CreateMode.PERSISTENT_WITH_TTL, ttl=500)
        c.delete("/app/child")
        c.delete("/billing/box/item")
        h.wait_until(lambda: c.exists("/app") is None and c.exists("/billing/box") is None
                     and c.exists("/billing/ttl") is None, timeout=20,
                     what="the containers and the TTL node reaped")
        assert sorted(c.get_children("/")) == ["billing", "zookeeper"]
        assert c.get_children("/billing") == []
        c.create("/app", b"again")  # its link went too
    finally:
        raw.close()
        c.stop()


def test_a_data_directory_written_with_other_groups_is_refused_not_hidden(request):
    """Adding /app to partition.groups over a directory that holds /app on partition
    0 would hide it from clients; dropping a group would hide its partition's nodes.
    Either way the server stops, naming the groups its data's placement has and the
    ones configured, and starts again with the groups the data was written with."""
    no_groups = {"partitions": 3, "partition.groups": None}
    for written, restarted, expected in (
            (no_groups, GROUPS, "the groups []; the configuration has 3 partitions and "
                                "partition.groups [/app, /billing]"),
            (GROUPS, no_groups, "the groups [/app, /billing]; the configuration has 3 "
                                "partitions and partition.groups []")):
        srv = h.Server(kind="stoa", ensemble=False,
                       extra_cfg={k: v for k, v in written.items() if v is not None})
        request.addfinalizer(srv.cleanup)
        srv.start()
        c = client(srv)
        c.create("/app", b"kept")
        c.create("/app/child", b"")
        c.stop()
        srv.stop()
        h.set_member_cfg(srv, restarted)
        srv.launch()
        h.wait_until(lambda: not srv.running(), timeout=15, what="the server to refuse its data")
        assert expected in srv.log_tail(20), srv.log_tail(20)
        h.set_member_cfg(srv, written)
        srv.start()
        c = client(srv)
        assert c.get("/app")[0] == b"kept" and c.get_children("/app") == ["child"]
        c.stop()


# --------------------------------------------------------------------------
# Moving groups (docs/partitions.md, "Moving a group")

PLACEMENT = "/zookeeper/partitions"


def super_client(srv):
    c = KazooClient(hosts=srv.hosts, timeout=10, auth_data=[("digest", "super:%s" % h.SUPER_PASSWORD)])
    c.start()
    return c


def placed(text):
    """{root: partition} from the placement's text."""
    out = {}
    for line in text.decode().splitlines():
        if line.startswith("group="):
            partition, root = line[len("group="):].split(" ", 1)
            out[root] = int(partition)
    return out


def move(admin, root, to):
    """Moves `root`'s group to partition `to` by writing the placement."""
    text, stat = admin.get(PLACEMENT)
    lines = [("group=%d %s" % (to, root)) if line.endswith(" " + root) else line
             for line in text.decode().splitlines()]
    return admin.set(PLACEMENT, ("\n".join(lines) + "\n").encode(), version=stat.version)


class Writer:
    """A thread that sets `path` to 1, 2, ... through `client` until stopped
    (or its first error, kept), recording each value acknowledged."""

    def __init__(self, client, path):
        self.client, self.path = client, path
        self.acknowledged, self.errors = [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        for i in range(1, 1000000):
            if self._stop.is_set():
                return
            try:
                self.client.set(self.path, b"%d" % i)
                self.acknowledged.append(i)
            except Exception as e:  # noqa: BLE001 (kept; tests assert there is none)
                self.errors.append(repr(e))
                return

    def wait_for_more(self, count, what):
        seen = len(self.acknowledged)
        h.wait_until(lambda: len(self.acknowledged) >= seen + count, timeout=15, what=what)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=20)
        assert not self.errors, self.errors


def test_a_group_moves_between_partitions_while_a_client_writes_to_it(request):
    """The super user moves /app from partition 1 to 2, to 0 (where its link
    was) and back to 1 by writing /zookeeper/partitions, while another session
    keeps writing under /app: no write fails or is lost, every node keeps its
    data and stat, watches set before a move fire after it, the session's
    ephemeral under /app still goes with the session, and the placement
    survives a restart."""
    srv = start(request, GROUPS)
    owner, reader, admin = client(srv), client(srv), super_client(srv)
    try:
        assert placed(admin.get(PLACEMENT)[0]) == {"/app": 1, "/billing": 2}
        assert sorted(reader.get_children("/zookeeper")) == ["config", "quota"]
        owner.create("/app", b"root")
        owner.create("/app/x", b"x-data")
        owner.create("/app/e", b"", ephemeral=True)
        for i in range(20):
            owner.create("/app/n%02d" % i, b"%d" % i)
        owner.create("/app/counter", b"0")
        before = {p: reader.get(p) for p in ["/app", "/app/x", "/app/n07"]}
        children_before = sorted(reader.get_children("/app"))
        root_children = sorted(reader.get_children("/"))
        assert znodes_per_partition(srv)[1] > znodes_per_partition(srv)[2]

        fired = []
        reader.get("/app/x", watch=fired.append)
        writer = Writer(owner, "/app/counter")
        writer.wait_for_more(20, "writes under /app")
        for to in (2, 0, 1, 2):
            stat = move(admin, "/app", to)
            assert placed(admin.get(PLACEMENT)[0])["/app"] == to
            assert stat.version >= 1
            writer.wait_for_more(10, "writes after the move to %d" % to)
        writer.stop()
        assert reader.get("/app/counter")[0] == b"%d" % writer.acknowledged[-1]
        for path, (data, stat) in before.items():
            now_data, now_stat = reader.get(path)
            assert now_data == data, path
            assert stat_of(now_stat) == stat_of(stat) or path == "/app", path
        assert sorted(reader.get_children("/app")) == children_before
        assert sorted(reader.get_children("/")) == root_children
        assert znodes_per_partition(srv)[2] > znodes_per_partition(srv)[1]

        owner.set("/app/x", b"changed")
        h.wait_until(lambda: fired, timeout=10, what="the watch set before the moves")
        assert fired[0].type == "CHANGED" and fired[0].path == "/app/x"

        owner.stop()
        owner = None
        h.wait_until(lambda: reader.exists("/app/e") is None, timeout=10,
                     what="the moved ephemeral gone with its session")
        count = len(reader.get_children("/app"))
    finally:
        for c in (owner, reader, admin):
            if c is not None:
                c.stop()
    srv.stop()
    srv.start()
    c, admin = client(srv), super_client(srv)
    try:
        assert placed(admin.get(PLACEMENT)[0]) == {"/app": 2, "/billing": 2}
        assert c.get("/app/x")[0] == b"changed"
        assert len(c.get_children("/app")) == count
        assert znodes_per_partition(srv)[1] < znodes_per_partition(srv)[2]
        c.set("/app/x", b"after restart")
    finally:
        c.stop()
        admin.stop()


def test_the_placement_refuses_what_is_not_a_move(request):
    """Only the super user writes /zookeeper/partitions; a text that is not a
    placement, or that adds, drops or renames a group, changes the partition
    count or puts a group on a partition that does not exist, is BadArguments;
    the node is neither deleted nor written in a multi; nothing moves."""
    srv = start(request, GROUPS)
    c, admin = client(srv), super_client(srv)
    try:
        text, stat = admin.get(PLACEMENT)
        with pytest.raises(NoAuthError):
            c.set(PLACEMENT, text.replace(b"group=1 /app", b"group=2 /app"))
        for bad in (b"nonsense",
                    text.replace(b"group=1 /app\n", b""),
                    text + b"group=1 /new\n",
                    text.replace(b"partitions=3", b"partitions=4"),
                    text.replace(b"group=1 /app", b"group=7 /app")):
            with pytest.raises(BadArgumentsError):
                admin.set(PLACEMENT, bad)
        with pytest.raises(BadVersionError):
            admin.set(PLACEMENT, text, version=stat.version + 5)
        with pytest.raises(BadArgumentsError):
            admin.delete(PLACEMENT)
        with pytest.raises(BadArgumentsError):
            admin.create(PLACEMENT + "/child", b"")
        t = admin.transaction()
        t.set_data(PLACEMENT, text.replace(b"group=1 /app", b"group=2 /app"))
        results = t.commit()
        assert any(isinstance(r, BadArgumentsError) for r in results), results
        assert admin.get(PLACEMENT)[0] == text
    finally:
        c.stop()
        admin.stop()


def member_view(member, paths):
    """What `member` serves for `paths` (after a sync), and its placement."""
    c = KazooClient(hosts=member.hosts, timeout=10)
    c.start()
    try:
        c.sync("/")
        view = {p: (c.get(p)[0], stat_of(c.get(p)[1]), sorted(c.get_children(p))) for p in paths}
        return view, placed(c.get(PLACEMENT)[0]), znodes_per_partition(member)
    finally:
        c.stop()


def test_a_group_moves_on_every_member_of_an_ensemble(request):
    """On a 3-member ensemble a move written through a follower applies on
    every member at one zxid: a writer on another follower loses nothing, and
    every member then serves the same nodes from the same partitions; a
    member that was down through a move takes it from the log."""
    ensemble = h.Ensemble(kind="stoa", extra_cfg=dict(GROUPS, tickTime=500))
    request.addfinalizer(ensemble.cleanup)
    ensemble.start()
    leader = ensemble.leader()
    followers = [m for m in ensemble.members if m is not leader]
    writer = KazooClient(hosts=followers[0].hosts, timeout=10)
    writer.start()
    admin = super_client(followers[1])
    try:
        writer.create("/app", b"root")
        for i in range(10):
            writer.create("/app/n%d" % i, b"%d" % i)
        writer.create("/app/counter", b"0")
        load = Writer(writer, "/app/counter")
        for to in (2, 0):
            move(admin, "/app", to)
            load.wait_for_more(10, "writes after the move to %d" % to)
        load.stop()
        acknowledged = load.acknowledged
        paths = ["/", "/app", "/app/n3", "/app/counter"]
        views = [member_view(m, paths) for m in ensemble.members]
        assert all(v == views[0] for v in views), views
        assert views[0][0]["/app/counter"][0] == b"%d" % acknowledged[-1]
        assert views[0][1]["/app"] == 0

        down = followers[0]
        writer.stop()
        writer = None
        down.stop()
        move(admin, "/app", 1)
        admin.set("/app/n3", b"while down")
        down.start()
        h.wait_until(lambda: member_view(down, paths) == member_view(leader, paths),
                     timeout=30, what="the restarted member to take the move")
        assert member_view(down, paths)[1]["/app"] == 1
    finally:
        for c in (writer, admin):
            if c is not None:
                c.stop()


def test_the_load_balancer_moves_a_group_off_a_busy_partition(request):
    """partition.balanceIntervalMs on: with /g1 and /g3 on partition 1 both
    written to and the other partitions idle, the leader moves one of them to
    an idle partition by itself, and stops once the load is even; every write
    succeeds and the data stays."""
    cfg = {"partitions": 3, "partition.groups": "/g1,/g2,/g3,/g4",
           "partition.balanceIntervalMs": 500}
    srv = start(request, cfg)
    c = client(srv)
    try:
        assert placed(c.get(PLACEMENT)[0]) == {"/g1": 1, "/g2": 2, "/g3": 1, "/g4": 2}
        for g in ("/g1", "/g3"):
            c.create(g, b"")
            c.create(g + "/k", b"0")
        started = time.monotonic()
        writers = [Writer(c, g + "/k") for g in ("/g1", "/g3")]

        def split():
            where = placed(c.get(PLACEMENT)[0])
            return where["/g1"] != where["/g3"]

        h.wait_until(split, timeout=30, what="the balancer to split /g1 and /g3")
        print("rebalanced %.2f s after the skew began" % (time.monotonic() - started))
        # Applied on every member (the balancer's own count is the leader's).
        moves = h.mntr_int(srv, "stoa_group_moves")
        assert moves >= 1
        time.sleep(2.0)  # four more windows of even load
        for w in writers:
            w.stop()
        assert h.mntr_int(srv, "stoa_group_moves") == moves, "it kept moving"
        where = placed(c.get(PLACEMENT)[0])
        assert where["/g1"] != where["/g3"]
        for g in ("/g1", "/g3"):
            assert int(c.get(g + "/k")[0]) > 0
    finally:
        c.stop()


def test_the_shell_lists_and_moves_groups(request):
    """stoa shell's listGroups and moveGroup: anyone lists, the super user
    moves, others are refused with zkCli's message."""
    import subprocess
    srv = start(request, GROUPS)

    def shell(script):
        p = subprocess.run([h.stoa_bin(), "shell", "-server", srv.hosts], input=script,
                           capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout, p.stderr

    code, out, _ = shell("listGroups\n")
    assert (code, out) == (0, "/ 0\n/app 1\n/billing 2\n")
    code, _, err = shell("moveGroup /app 2\n")
    assert code == 1 and "Insufficient permission : /zookeeper/partitions" in err, err
    code, out, err = shell("addauth digest super:%s\nmoveGroup /app 2\nmoveGroup /nope 1\n"
                           "moveGroup /billing 9\nlistGroups\n" % h.SUPER_PASSWORD)
    assert "Moved group /app to partition 2" in out
    assert "No group /nope" in err and "partitions 0 to 2" in err, err
    assert out.endswith("/ 0\n/app 2\n/billing 2\n"), out


def test_automatic_placement_makes_each_new_top_level_node_a_group(request):
    """partition.auto=true: every new top-level node becomes a group of its
    own on the partition with the fewest groups, alone or in a multi; a
    client sees what one partition shows it; a sequential top-level create
    stays in the root group; the groups survive a restart."""
    cfg = {"partitions": 3, "partition.auto": "true"}
    srv = start(request, cfg)
    c = client(srv)
    try:
        for name in ("a", "b", "c"):
            c.create("/" + name, name.encode())
            c.create("/%s/child" % name, b"x")
        t = c.transaction()
        t.create("/m", b"m")
        t.create("/m/child", b"y")
        assert all(r is not None and not isinstance(r, Exception) for r in t.commit())
        seq = c.create("/s-", b"", sequence=True)
        where = placed(c.get(PLACEMENT)[0])
        assert set(where) == {"/a", "/b", "/c", "/m"}, where
        assert len(set(where.values())) == 3, "spread over every partition: %r" % where
        assert seq.lstrip("/") in c.get_children("/")
        assert sorted(c.get_children("/")) == sorted(["a", "b", "c", "m", seq.lstrip("/"),
                                                      "zookeeper"])
        for name in ("a", "b", "c"):
            assert c.get("/" + name)[0] == name.encode()
            assert c.get_children("/" + name) == ["child"]
        assert c.get("/m/child")[0] == b"y"
        assert c.exists("/").numChildren == 6
        c.delete("/c/child")
        c.delete("/c")
        c.create("/c", b"again")  # its group stays; the node comes back there
        assert placed(c.get(PLACEMENT)[0])["/c"] == where["/c"]
    finally:
        c.stop()
    srv.stop()
    srv.start()
    c = client(srv)
    try:
        assert placed(c.get(PLACEMENT)[0]) == where
        assert c.get("/c")[0] == b"again" and c.get("/a/child")[0] == b"x"
        c.create("/d", b"")
        assert "/d" in placed(c.get(PLACEMENT)[0])
    finally:
        c.stop()


def test_a_member_configured_with_other_groups_routes_by_the_ensembles_placement(request):
    """The first leader writes its placement through the log, so every member
    serves by that one, whatever its own partition.groups (a member routing by
    its own would hide the groups' nodes from its clients), and a member whose
    groups differ from its data's refuses to start again."""
    ensemble = h.Ensemble(kind="stoa", extra_cfg=dict(GROUPS, tickTime=500))
    request.addfinalizer(ensemble.cleanup)
    odd = ensemble.members[2]
    h.set_member_cfg(odd, {"partition.groups": "/billing"})
    ensemble.start()
    c = KazooClient(hosts=ensemble.members[0].hosts, timeout=10)
    c.start()
    try:
        c.create("/app", b"a")
        c.create("/app/x", b"x")
        c.create("/billing", b"b")
        views = [member_view(m, ["/app", "/app/x", "/billing"]) for m in ensemble.members]
        assert all(v[:2] == views[0][:2] for v in views), views
        published = views[0][1]
        # Whichever member led first wrote its own configuration's placement.
        assert published in ({"/app": 1, "/billing": 2}, {"/billing": 1}), published
    finally:
        c.stop()
    differs = odd if "/app" in published else ensemble.members[0]
    differs.stop()
    differs.launch()
    h.wait_until(lambda: not differs.running(), timeout=20,
                 what="the member whose groups differ from its data's to refuse")
    assert "start the server with the partitions and groups" in differs.log_tail(20), \
        differs.log_tail(20)
