"""The composed client (clients/python, docs/compose.md): two separate
ensembles used as one through stoa_compose.ComposedClient, ZooNet's
Algorithm 1 over kazoo.

The first tests need no server: mount routing, the Algorithm 1 state
machine, and the sequential-consistency checker itself. The rest start two
servers of the target under test (two "ensembles"; under
STOA_TARGET=stoa-ensemble each is a 3-member ensemble with the clients on a
follower, under STOA_TARGET=zookeeper two ZooKeepers with write-syncs).
The lagging-follower test needs a Stoa ensemble for /eu and starts one where
the target is standalone Stoa; the ZooKeeper 3.9.5 test starts that server.
"""

import concurrent.futures
import datetime
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import KazooState

import harness as h
from stoa_compose import (ComposedClient, CrossMountError, MountTable, NoMountError, READ, UPDATE,
                          Request, Sequencer)
from stoa_compose.mounts import DEFAULT_SYNC_NODE

# Apache ZooKeeper's sync is not linearizable: there the client syncs by a write.
SYNC = "write" if h.target() == "zookeeper" else "sync"
SESSION_TIMEOUT = 4.0   # the harness's minimum: 2 ticks of 2000 ms


# ---------------------------------------------------------------- no server

def test_routing_takes_the_longest_prefix_by_whole_components():
    table = MountTable({"/": "r:1", "/eu": "e:1", "/eu/paris": "p:1", "/us": "u:1"})
    assert table.route("/eu").prefix == "/eu"
    assert table.route("/eu/x/y").prefix == "/eu"
    assert table.route("/eu/paris/z").prefix == "/eu/paris"
    assert table.route("/eu/parisian").prefix == "/eu"
    assert table.route("/europe").prefix == "/"
    assert table.route("/").prefix == "/"
    no_root = MountTable({"/eu": "e:1", "/us": {"hosts": "u:1", "sync": "write"}})
    assert no_root.mounts["/us"].sync == "write"
    assert no_root.mounts["/us"].sync_node == DEFAULT_SYNC_NODE
    with pytest.raises(NoMountError) as e:
        no_root.route("/europe/x")
    assert "/europe/x" in str(e.value) and "/eu, /us" in str(e.value)
    assert isinstance(e.value, KazooException)
    with pytest.raises(NoMountError):
        no_root.route("relative")


@pytest.mark.parametrize("mounts, fragment", [
    ({}, "non-empty"),
    ({"eu": "h:1"}, "absolute"),
    ({"/eu/": "h:1"}, "empty component"),
    ({"/eu": ""}, "hosts"),
    ({"/eu": 2181}, "hosts string or a dict"),
    ({"/eu": {"hosts": "h:1", "sync": "fast"}}, "'sync' must be one of"),
    ({"/eu": {"hosts": "h:1", "colour": "red"}}, "unknown keys"),
    ({"/eu": {"hosts": "h:1", "sync_node": "x"}}, "absolute"),
])
def test_bad_mounts_are_refused_clearly(mounts, fragment):
    with pytest.raises(ValueError) as e:
        MountTable(mounts)
    assert fragment in str(e.value)


class FakeService:
    """Sends recorded in order; answers given by the test."""

    def __init__(self):
        self.sent = []          # (target, what, path)
        self.unanswered = []    # done callbacks, in send order

    def sync(self, target, path, done):
        self.sent.append((target, "sync", path))
        self.unanswered.append(done)

    def request(self, target, kind, path):
        def send(done):
            self.sent.append((target, kind, path))
            self.unanswered.append(done)
        return Request(target, kind, path, send)

    def answer_all(self):
        """Answers what is outstanding now (not what those answers release)."""
        now, self.unanswered = self.unanswered, []
        for done in now:
            done()


def test_algorithm1_syncs_before_the_first_read_after_a_switch_only():
    svc = FakeService()
    seq = Sequencer(svc.sync)
    program = [("A", UPDATE, "/a/1"), ("A", READ, "/a/1"), ("B", READ, "/b/1"),
               ("B", READ, "/b/2"), ("A", UPDATE, "/a/1"), ("A", READ, "/a/2"),
               ("B", UPDATE, "/b/1"), ("B", READ, "/b/1"), ("A", READ, "/a/1")]
    for target, kind, path in program:
        seq.submit(svc.request(target, kind, path))
        svc.answer_all()    # one request (and its sync) at a time: nothing is ever held
    assert svc.sent == [
        ("A", UPDATE, "/a/1"), ("A", READ, "/a/1"),
        ("B", "sync", "/b/1"), ("B", READ, "/b/1"), ("B", READ, "/b/2"),
        ("A", UPDATE, "/a/1"), ("A", READ, "/a/2"),
        ("B", UPDATE, "/b/1"), ("B", READ, "/b/1"),
        ("A", "sync", "/a/1"), ("A", READ, "/a/1")]
    assert seq.stats["syncs_injected"] == 2
    assert seq.stats["requests_held"] == 0
    assert seq.stats["switches"] == 5
    # The very first read goes out with a sync too (lastService starts nil),
    # and so does the first after forget_target (a new session).
    first = FakeService()
    seq = Sequencer(first.sync)
    seq.submit(first.request("A", READ, "/a"))
    assert first.sent == [("A", "sync", "/a"), ("A", READ, "/a")]
    first.answer_all()
    seq.forget_target()
    seq.submit(first.request("A", READ, "/a"))
    assert first.sent[-2:] == [("A", "sync", "/a"), ("A", READ, "/a")]


def test_algorithm1_holds_a_switch_until_the_previous_target_answered_then_releases_in_order():
    svc = FakeService()
    seq = Sequencer(svc.sync)
    seq.submit(svc.request("A", UPDATE, "/a/1"))
    seq.submit(svc.request("A", UPDATE, "/a/2"))     # same target: pipelined
    seq.submit(svc.request("B", READ, "/b/1"))       # switch: held
    seq.submit(svc.request("A", READ, "/a/3"))       # behind a held one: held
    seq.submit(svc.request("B", UPDATE, "/b/2"))
    assert svc.sent == [("A", UPDATE, "/a/1"), ("A", UPDATE, "/a/2")]
    assert seq.held == 3 and seq.stats["requests_held"] == 3
    svc.unanswered.pop(0)()
    assert len(svc.sent) == 2, "released while a request to A was outstanding"
    svc.unanswered.pop(0)()
    # B's read leaves with its sync; A's read waits for both answers.
    assert svc.sent[2:] == [("B", "sync", "/b/1"), ("B", READ, "/b/1")]
    svc.answer_all()
    assert svc.sent[4:] == [("A", "sync", "/a/3"), ("A", READ, "/a/3")]
    svc.answer_all()
    assert svc.sent[6:] == [("B", UPDATE, "/b/2")]
    svc.answer_all()
    assert seq.held == 0 and seq.outstanding == 0


def test_algorithm1_keeps_program_order_when_a_sync_is_answered_at_once():
    # A sync can be answered inside the call that sends it (a member whose
    # session is closed fails it synchronously). That answer must not let
    # the requests held behind the read leave before the read itself.
    svc = FakeService()

    def sync_answered_at_once(target, path, done):
        svc.sent.append((target, "sync", path))
        done()

    seq = Sequencer(sync_answered_at_once)
    seq.submit(svc.request("A", UPDATE, "/a/1"))
    seq.submit(svc.request("B", READ, "/b/1"))      # switch: held
    seq.submit(svc.request("B", UPDATE, "/b/2"))    # behind it: held
    seq.submit(svc.request("A", READ, "/a/2"))      # another switch: held
    assert seq.held == 3
    svc.unanswered.pop(0)()
    assert svc.sent == [("A", UPDATE, "/a/1"), ("B", "sync", "/b/1"), ("B", READ, "/b/1"),
                        ("B", UPDATE, "/b/2")]
    assert seq.outstanding == 2 and seq.held == 1
    svc.answer_all()
    assert svc.sent[4:] == [("A", "sync", "/a/2"), ("A", READ, "/a/2")]
    svc.answer_all()
    assert seq.held == 0 and seq.outstanding == 0


class FakeAnswer:
    """An answer the fast path returns: ready() and rawlink, as kazoo's."""

    def __init__(self):
        self.answered = False
        self.callbacks = []

    def ready(self):
        return self.answered

    def rawlink(self, callback):
        if self.answered:
            callback(self)
        else:
            self.callbacks.append(callback)

    def answer(self):
        self.answered = True
        for callback in self.callbacks:
            callback(self)


def test_the_fast_path_sends_at_once_and_a_switch_waits_for_what_it_sent():
    svc = FakeService()
    seq = Sequencer(svc.sync)
    never = lambda: pytest.fail("sent by the fast path")   # noqa: E731
    assert seq.send_if_current("A", UPDATE, never) is None   # no target yet
    seq.submit(svc.request("A", UPDATE, "/a/1"))
    svc.answer_all()
    answers = [FakeAnswer() for _ in range(3)]
    for a in answers:
        assert seq.send_if_current("A", READ, lambda a=a: a) is a
    assert seq.send_if_current("B", READ, never) is None      # another target
    assert seq.outstanding == 3 and seq.stats["requests"] == 4 and seq.stats["reads"] == 3
    answers[0].answer()                                       # before the switch
    seq.submit(svc.request("B", READ, "/b/1"))
    assert seq.held == 1 and seq.outstanding == 2
    assert seq.send_if_current("A", READ, never) is None      # something is held
    seq.submit(svc.request("A", UPDATE, "/a/2"))
    answers[2].answer()
    assert svc.sent == [("A", UPDATE, "/a/1")]
    answers[1].answer()
    assert svc.sent[1:] == [("B", "sync", "/b/1"), ("B", READ, "/b/1")]
    svc.answer_all()
    assert svc.sent[3:] == [("A", UPDATE, "/a/2")]
    svc.answer_all()
    assert seq.held == 0 and seq.outstanding == 0
    assert seq.stats["requests_held"] == 2 and seq.stats["switches"] == 3


class FakeMember:
    """A member session for ComposedClient with no server: records its
    sends in `log` and answers when the test says; its sync raises at once."""

    def __init__(self, prefix, log, handler):
        self.prefix, self.log, self.handler = prefix, log, handler
        self.unanswered = []

    def _send(self, op, path):
        self.log.append((self.prefix, op, path))
        result = self.handler.async_result()
        self.unanswered.append(result)
        return result

    def get_async(self, path, watch=None):
        return self._send("get", path)

    def set_async(self, path, value, version=-1):
        return self._send("set", path)

    def sync_async(self, path):
        self.log.append((self.prefix, "sync", path))
        raise RuntimeError("this session cannot sync")


def test_a_sync_that_raises_at_once_leaves_the_read_before_the_requests_behind_it():
    from kazoo.handlers.threading import SequentialThreadingHandler
    handler = SequentialThreadingHandler()   # not started: callbacks run inline
    c = ComposedClient({"/a": "127.0.0.1:1", "/b": "127.0.0.1:2"}, handler=handler)
    log = []
    members = {p: FakeMember(p, log, handler) for p in ("/a", "/b")}
    c.members.update(members)
    first = c.set_async("/a/x", b"1")
    read = c.get_async("/b/y")          # switch: held behind /a/x
    write = c.set_async("/b/z", b"2")   # behind the read
    assert log == [("/a", "set", "/a/x")]
    members["/a"].unanswered.pop().set(None)
    assert first.ready()
    assert log == [("/a", "set", "/a/x"), ("/b", "sync", "/b/y"), ("/b", "get", "/b/y"),
                   ("/b", "set", "/b/z")]
    assert c.stats["sync_failures"] == 1 and c.stats["syncs_injected"] == 1
    for r in members["/b"].unanswered:
        r.set(None)
    assert read.ready() and write.ready()
    assert c._sequencer.outstanding == 0 and c._sequencer.held == 0


# A history: one list per client of ("w", key, value) / ("r", key, value),
# in program order. Values written are unique; INITIAL is every key's start.
INITIAL = b"0"


def sequentially_consistent(history, limit=500_000):
    """Whether one total order of all operations keeps each client's program
    order and has every read return the latest write before it to its key
    (depth-first over interleavings, remembering dead states)."""
    n = len(history)
    keys = sorted({op[1] for ops in history for op in ops})
    start = (tuple([0] * n), tuple(INITIAL for _ in keys))
    index = {k: i for i, k in enumerate(keys)}
    seen = set()
    stack = [start]
    while stack:
        state = stack.pop()
        if state in seen:
            continue
        seen.add(state)
        if len(seen) > limit:
            raise AssertionError("history too large to check")
        positions, values = state
        if all(positions[c] == len(history[c]) for c in range(n)):
            return True
        for c in range(n):
            if positions[c] == len(history[c]):
                continue
            kind, key, value = history[c][positions[c]]
            if kind == "r" and values[index[key]] != value:
                continue
            nxt = list(positions)
            nxt[c] += 1
            new_values = values
            if kind == "w":
                new_values = values[:index[key]] + (value,) + values[index[key] + 1:]
            stack.append((tuple(nxt), new_values))
    return False


def test_the_checker_rejects_zoonets_figure_1_and_accepts_figure_3():
    # Figure 1: each client writes its own service, then reads the other's
    # from the past. No total order explains both reads.
    figure1 = [[("w", "x", b"5"), ("r", "y", INITIAL)],
               [("w", "y", b"3"), ("r", "x", INITIAL)]]
    assert not sequentially_consistent(figure1)
    figure3 = [[("w", "x", b"5"), ("r", "y", b"3")],
               [("w", "y", b"3"), ("r", "x", INITIAL)]]
    assert sequentially_consistent(figure3)
    # Program order counts: a client cannot read its own write undone.
    assert not sequentially_consistent([[("w", "x", b"1"), ("r", "x", INITIAL)]])


# ---------------------------------------------------------- two ensembles

@pytest.fixture(scope="module")
def ensembles():
    """Two servers of the target under test: "eu" and "us"."""
    eu, us = h.Server(), h.Server()
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda s: s.start(timeout=90), (eu, us)))
        yield {"/eu": eu, "/us": us}
    finally:
        eu.cleanup()
        us.cleanup()


def plain_client(server):
    c = KazooClient(hosts=server.hosts, timeout=10)
    c.start(timeout=15)
    return c


@pytest.fixture
def plain(ensembles):
    """A started plain KazooClient per mount, with the mount's subtree
    emptied and its root made."""
    clients = {}
    for prefix, server in ensembles.items():
        c = plain_client(server)
        if c.exists(prefix):
            c.delete(prefix, recursive=True)
        c.ensure_path(prefix)
        clients[prefix] = c
    yield clients
    for c in clients.values():
        c.stop()
        c.close()


@pytest.fixture
def make_composed(ensembles, plain):
    made = []

    def make(sync=SYNC, eu_sync=None, start=True, **kw):
        mounts = {"/eu": {"hosts": ensembles["/eu"].hosts, "sync": eu_sync or sync},
                  "/us": {"hosts": ensembles["/us"].hosts, "sync": sync}}
        kw.setdefault("timeout", 10)
        c = ComposedClient(mounts, **kw)
        made.append(c)
        if start:
            c.start(timeout=20)
        return c

    yield make
    for c in made:
        try:
            c.stop()
            c.close()
        except Exception:
            pass


class SendLog:
    """Records, in send order, what the composed client sends to each
    member session: (prefix, operation, path)."""

    OPERATIONS = ("sync", "set", "get", "exists", "get_children", "create", "delete")

    def __init__(self, composed):
        self.entries = []
        self.hooks = []   # called at each send, before it leaves
        for prefix, member in composed.members.items():
            for op in self.OPERATIONS:
                name = op + "_async"
                setattr(member, name, self._wrap(prefix, op, getattr(member, name)))

    def _wrap(self, prefix, op, original):
        def send(path, *args, **kwargs):
            for hook in self.hooks:
                hook(prefix, op, path)
            self.entries.append((prefix, op, path))
            return original(path, *args, **kwargs)
        return send


def sync_op():
    return "sync" if SYNC == "sync" else "set"


def test_paths_reach_the_owning_ensemble_unchanged(make_composed, plain):
    c = make_composed()
    c.create("/eu/config", b"eu-1")
    c.create("/us/config/deep", b"us-1", makepath=True)
    assert plain["/eu"].get("/eu/config")[0] == b"eu-1"
    assert plain["/us"].get("/us/config/deep")[0] == b"us-1"
    assert plain["/us"].exists("/eu/config") is None
    assert plain["/eu"].exists("/us/config") is None
    plain["/us"].set("/us/config/deep", b"us-2")
    assert c.get("/us/config/deep")[0] == b"us-2"
    assert c.get_children("/us/config") == ["deep"]
    assert sorted(c.get_children("/eu")) == ["config"]
    with pytest.raises(NoMountError) as e:
        c.create("/europe/x", b"")
    assert "/eu, /us" in str(e.value)
    with pytest.raises(NoMountError):
        c.get("/")
    c.delete("/us/config", recursive=True)
    assert plain["/us"].exists("/us/config") is None
    # A read of a missing node after a switch: its sync still succeeds.
    assert c.current_mount == "/us"
    assert c.exists("/eu/missing") is None
    with pytest.raises(NoNodeError):
        c.get("/eu/missing/deeper")
    assert c.current_mount == "/eu"
    assert c.stats["syncs_injected"] >= 2 and c.stats["sync_failures"] == 0
    assert c.connected and c.state == KazooState.CONNECTED


@pytest.mark.parametrize("eu_sync", ["sync", "write"])
def test_syncs_are_injected_exactly_where_algorithm1_says(make_composed, plain, eu_sync):
    if h.target() == "zookeeper" and eu_sync == "sync":
        pytest.skip("ZooKeeper's sync is not linearizable: write-syncs only")
    plain["/eu"].create("/eu/x", b"0")
    plain["/us"].create("/us/y", b"0")
    c = make_composed(eu_sync=eu_sync)
    sync_node_version = lambda: plain["/eu"].exists(DEFAULT_SYNC_NODE).version  # noqa: E731
    if eu_sync == "write":
        before = sync_node_version()
    log = SendLog(c)
    c.set("/eu/x", b"1")         # first target, an update: no sync
    c.get("/eu/x")
    c.get("/us/y")               # switch, read: sync /us
    c.get("/us/y")
    c.set("/eu/x", b"2")         # switch, update: no sync
    assert c.get("/eu/x")[0] == b"2"
    c.exists("/us/y")            # switch, read: sync /us
    c.set("/us/y", b"3")
    c.get_children("/eu")        # switch, read: sync /eu
    eu_sync_send = ("/eu", "sync", "/eu") if eu_sync == "sync" else ("/eu", "set", DEFAULT_SYNC_NODE)
    us_sync_send = ("/us", sync_op(), "/us/y" if SYNC == "sync" else DEFAULT_SYNC_NODE)
    assert log.entries == [
        ("/eu", "set", "/eu/x"), ("/eu", "get", "/eu/x"),
        us_sync_send, ("/us", "get", "/us/y"), ("/us", "get", "/us/y"),
        ("/eu", "set", "/eu/x"), ("/eu", "get", "/eu/x"),
        us_sync_send, ("/us", "exists", "/us/y"), ("/us", "set", "/us/y"),
        eu_sync_send, ("/eu", "get_children", "/eu")]
    assert c.stats["syncs_injected"] == 3
    assert c.stats["requests_held"] == 0
    assert c.stats["sync_failures"] == 0
    if eu_sync == "write":
        # Seen by the server: one no-op write per sync to /eu.
        assert sync_node_version() == before + 1


def test_an_injected_sync_is_counted_before_the_read_behind_it_answers(make_composed, plain):
    """The sync injected before a switching read is counted done on the
    member's completion thread, in answer order: an application callback
    that keeps the composed completion thread busy does not keep the sync
    outstanding after the read was answered (the next switch is not held)."""
    if SYNC != "sync":
        pytest.skip("the target syncs by a write, which kazoo answers without a chain")
    plain["/eu"].create("/eu/x", b"0")
    plain["/us"].create("/us/y", b"0")
    c = make_composed()
    assert c.get("/eu/x")[0] == b"0"         # the first read syncs /eu
    busy = threading.Event()
    c.handler.completion_queue.put(lambda: busy.wait(10))
    try:
        assert c.get("/us/y")[0] == b"0"     # switch: sync /us, then the read
        assert c.get("/eu/x")[0] == b"0"     # switch: needs the sync counted
        assert c.stats["syncs_injected"] == 3
        assert c.stats["requests_held"] == 0
        assert not busy.is_set()
    finally:
        busy.set()


def test_held_requests_leave_in_order_once_the_previous_target_answered(make_composed, plain):
    for i in range(10):
        plain["/eu"].create("/eu/n%d" % i, b"0")
    plain["/us"].create("/us/y", b"0")
    c = make_composed()
    c.get("/eu/n0")
    log = SendLog(c)
    # The eu member's answers are passed on only when the test opens a
    # gate, so the switch to /us is held for certain. (Those writes leave
    # by the fast path and are answered with the member's own results: the
    # stand-ins are results of the member's handler too.)
    gate = threading.Event()
    member = c.members["/eu"]
    send_set, gated = member.set_async, []

    def set_behind_gate(path, value, version=-1):
        stand_in = member.handler.async_result()
        gated.append((send_set(path, value, version), stand_in))
        return stand_in

    def open_gate():
        gate.wait(20)
        for answer, stand_in in gated:
            if answer.wait(20) and answer.successful():
                stand_in.set(answer.value)
            else:
                stand_in.set_exception(answer.exception)

    member.set_async = set_behind_gate
    threading.Thread(target=open_gate, daemon=True).start()
    eu_writes = [c.set_async("/eu/n%d" % i, b"1") for i in range(10)]
    member.set_async = send_set
    assert [r for r in eu_writes] == [stand_in for _, stand_in in gated]   # the fast path's
    us_read = c.get_async("/us/y")
    us_write = c.set_async("/us/y", b"2")
    eu_read = c.get_async("/eu/n9")
    time.sleep(0.3)
    assert [e[0] for e in log.entries] == ["/eu"] * 10, log.entries
    assert c.stats["requests_held"] == 3
    answered_at_send = []
    log.hooks.append(lambda prefix, op, path: answered_at_send.append(
        (prefix, op, all(r.ready() for r in eu_writes[:-1]))))
    gate.set()
    assert eu_read.get(timeout=10)[0] == b"1"
    assert us_read.get(timeout=10)[0] == b"0"
    assert us_write.get(timeout=10).version == 1
    assert [r.get(timeout=10).version for r in eu_writes] == [1] * 10
    us_sync = ("/us", sync_op(), "/us/y" if SYNC == "sync" else DEFAULT_SYNC_NODE)
    eu_sync = ("/eu", sync_op(), "/eu/n9" if SYNC == "sync" else DEFAULT_SYNC_NODE)
    assert log.entries[10:] == [us_sync, ("/us", "get", "/us/y"), ("/us", "set", "/us/y"),
                                eu_sync, ("/eu", "get", "/eu/n9")]
    # Every eu write was answered before anything left for /us.
    assert all(done for _, _, done in answered_at_send), answered_at_send
    assert c.stats["syncs_injected"] == 3    # the first read, /us, back to /eu


def test_fast_path_answers_call_back_on_the_composed_thread_which_may_switch_mounts(
        make_composed, plain):
    plain["/eu"].create("/eu/x", b"e")
    plain["/us"].create("/us/y", b"u")
    c = make_composed()
    threads = []
    switched = c.get_async("/us/y")          # the first request: Algorithm 1's slow path
    switched.rawlink(lambda r: threads.append(threading.current_thread()))
    switched.get(timeout=10)
    # Stays on /us: the fast path. The write's answer is passed on only
    # when a gate opens, so it is unanswered when the callback switches.
    member = c.members["/us"]
    gate = threading.Event()
    send_set = member.set_async

    def set_behind_gate(path, value, version=-1):
        answer, stand_in = send_set(path, value, version), member.handler.async_result()

        def pass_on():
            gate.wait(20)
            answer.wait(20)
            stand_in.set(answer.value)
        threading.Thread(target=pass_on, daemon=True).start()
        return stand_in

    member.set_async = set_behind_gate
    seen = []

    def switch_from_a_callback(result):
        threads.append(threading.current_thread())
        threading.Timer(0.3, gate.set).start()
        try:   # waits for the gated write: its answer must be counted elsewhere
            seen.append(c.get_async("/eu/x").get(timeout=5)[0])
        except Exception as e:
            seen.append(e)

    read = c.get_async("/us/y")
    write = c.set_async("/us/y", b"u2")
    member.set_async = send_set
    assert c.stats["switches"] == 1
    read.rawlink(switch_from_a_callback)
    assert write.get(timeout=10).version == 1
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [b"e"]
    assert c.stats["requests_held"] == 1 and c.stats["syncs_injected"] == 2
    # Callbacks of every answer run on the composed handler's one thread.
    assert len(threads) == 2 and threads[0] is threads[1]
    assert threads[0] is not threading.current_thread()


def test_concurrent_composed_clients_are_sequentially_consistent(make_composed, plain):
    keys = ["/eu/a", "/eu/b", "/us/a", "/us/b"]
    for k in keys:
        plain[k[:3]].create(k, INITIAL)
    clients = [make_composed() for _ in range(3)]
    rng = random.Random(24)
    programs = [[(rng.choice("rrw"), rng.choice(keys)) for _ in range(10)] for _ in clients]
    history = [[] for _ in clients]
    barrier = threading.Barrier(len(clients))

    def run(i):
        barrier.wait(10)
        for n, (kind, key) in enumerate(programs[i]):
            if kind == "w":
                value = b"c%d-%d" % (i, n)
                clients[i].set(key, value)
            else:
                value = clients[i].get(key)[0]
            history[i].append((kind, key, value))

    with concurrent.futures.ThreadPoolExecutor(len(clients)) as pool:
        list(pool.map(run, range(len(clients))))
    assert sequentially_consistent(history), history
    assert sum(c.stats["syncs_injected"] for c in clients) > 0


@pytest.fixture(scope="module")
def eu_ensemble(ensembles):
    """A 3-member Stoa ensemble for /eu whose client member m1 is a
    follower: the target's own under STOA_TARGET=stoa-ensemble, else one
    started here."""
    if h.target() != "stoa":
        pytest.skip("needs a Stoa ensemble (the harness builds only Stoa ones)")
    if h.ensemble_target():
        yield ensembles["/eu"]
        return
    eu = h.Server(kind="stoa", ensemble=True)
    try:
        eu.start(timeout=90)
        yield eu
    finally:
        eu.cleanup()


@pytest.mark.parametrize("eu_sync", ["sync", "write"])
def test_a_read_after_a_switch_sees_a_write_its_follower_had_not_applied(eu_ensemble, plain,
                                                                         ensembles, eu_sync):
    """ZooNet's Figure 1 on a real lagging follower: the composed client's
    eu session is on follower m1, which is paused while the leader commits a
    write (with the other follower), then resumed just after the client's
    read arrives. Without the injected sync m1 answers from before the
    write; with it, m1 answers only once it applied the sync, so the write."""
    eu = eu_ensemble
    writer = plain_client(h.wait_until(eu.leader, timeout=30, what="the eu leader"))
    c = ComposedClient({"/eu": {"hosts": eu.hosts, "sync": eu_sync},
                        "/us": ensembles["/us"].hosts}, timeout=10)
    try:
        if writer.exists("/eu"):
            writer.delete("/eu", recursive=True)
        writer.create("/eu/x", b"old", makepath=True)
        plain["/us"].create("/us/y", b"0")
        c.start(timeout=20)
        assert c.get("/eu/x")[0] == b"old"
        c.get("/us/y")
        follower = eu.client_member.pid
        os.kill(follower, signal.SIGSTOP)
        try:
            writer.set("/eu/x", b"new")
            read = c.get_async("/eu/x")         # a switch: sync, then the read
            time.sleep(0.3)
        finally:
            os.kill(follower, signal.SIGCONT)
        assert read.get(timeout=20)[0] == b"new"
        assert c.stats["syncs_injected"] == 3
    finally:
        c.stop()
        c.close()
        writer.stop()
        writer.close()


def test_kazoo_recipes_run_unchanged_under_one_mount(make_composed, plain):
    a, b = make_composed(), make_composed()
    # Lock: one holder at a time.
    lock_a, lock_b = a.Lock("/eu/lock", "a"), b.Lock("/eu/lock", "b")
    assert lock_a.acquire(timeout=10)
    assert not lock_b.acquire(blocking=False)
    assert lock_b.contenders() == ["a"]
    lock_a.release()
    assert lock_b.acquire(timeout=10)
    lock_b.release()
    # Counter, with a switch between every step.
    counter = a.Counter("/us/counter")
    counter += 5
    a.get("/eu/lock")
    counter += 2
    assert b.Counter("/us/counter").value == 7
    # Election: the only contender leads.
    led = threading.Event()
    election = b.Election("/us/election", "b")
    worker = threading.Thread(target=election.run, args=(led.set,), daemon=True)
    worker.start()
    assert led.wait(10)
    worker.join(10)
    # Barrier.
    barrier = a.Barrier("/eu/barrier")
    barrier.create()
    assert not b.Barrier("/eu/barrier").wait(timeout=0.3)
    barrier.remove()
    assert b.Barrier("/eu/barrier").wait(timeout=5)
    # DataWatch and ChildrenWatch see changes made by a plain client.
    seen_data, seen_children = [], []
    plain["/us"].create("/us/watched", b"v0")
    a.DataWatch("/us/watched", lambda data, stat: seen_data.append(data))
    a.ChildrenWatch("/eu", lambda children: seen_children.append(sorted(children)))
    plain["/us"].set("/us/watched", b"v1")
    plain["/eu"].create("/eu/newchild")
    h.wait_until(lambda: seen_data[-1:] == [b"v1"], what="DataWatch update")
    h.wait_until(lambda: seen_children and "newchild" in seen_children[-1],
                 what="ChildrenWatch update")
    assert seen_data[0] == b"v0"
    # Semaphore, LockingQueue and NonBlockingLease (a transaction inside).
    sem = a.Semaphore("/eu/sem", max_leases=1)
    assert sem.acquire(timeout=5)
    assert not b.Semaphore("/eu/sem", max_leases=1).acquire(blocking=False)
    sem.release()
    queue = a.LockingQueue("/us/queue")
    queue.put(b"job")
    assert b.LockingQueue("/us/queue").get(timeout=5) == b"job"
    lease = a.NonBlockingLease("/eu/lease", datetime.timedelta(seconds=30), identifier="a")
    assert lease
    assert not b.NonBlockingLease("/eu/lease", datetime.timedelta(seconds=30), identifier="b")


def test_transactions_compose_within_one_mount_only(make_composed, plain):
    c = make_composed()
    t = c.transaction()
    t.create("/eu/t1", b"1")
    t.create("/eu/t2", b"2")
    assert t.commit() == ["/eu/t1", "/eu/t2"]
    assert plain["/eu"].get("/eu/t2")[0] == b"2"
    t = c.transaction()
    t.create("/eu/t3", b"3")
    with pytest.raises(CrossMountError) as e:
        t.set_data("/us/t", b"x")
    assert "/eu" in str(e.value) and "/us" in str(e.value)
    assert isinstance(e.value, KazooException)
    with pytest.raises(NoMountError):
        c.transaction().create("/nowhere", b"")
    assert plain["/eu"].exists("/eu/t3") is None
    with c.transaction() as t:
        t.delete("/eu/t1")
        t.check("/eu/t2", 0)
    assert plain["/eu"].exists("/eu/t1") is None


def test_one_member_expiring_expires_the_composed_session_everywhere(make_composed, plain,
                                                                     ensembles):
    c = make_composed(timeout=SESSION_TIMEOUT)
    states = []
    c.add_listener(states.append)
    c.create("/eu/eph", b"", ephemeral=True)
    c.create("/us/eph", b"", ephemeral=True)
    old = c.client_ids
    # Close the eu member's session from another connection: that server
    # ends it, and the member learns it is expired on its next contact.
    sid, password = old["/eu"]
    h.RawClient(ensembles["/eu"].hosts, session_id=sid, passwd=password,
                timeout_ms=int(SESSION_TIMEOUT * 1000)).close()
    h.wait_until(lambda: KazooState.LOST in states, timeout=20, what="composed LOST")
    # The us session was closed too, so its ephemeral went with it.
    h.wait_until(lambda: plain["/us"].exists("/us/eph") is None, timeout=20,
                 what="us ephemeral removed")
    assert plain["/eu"].exists("/eu/eph") is None
    # Then a new virtual session, as kazoo does after LOST.
    h.wait_until(lambda: c.connected, timeout=30, what="a new composed session")
    assert states[-1] == KazooState.CONNECTED
    new = c.client_ids
    assert new["/eu"][0] != old["/eu"][0] and new["/us"][0] != old["/us"][0]
    assert c.stats["sessions_expired"] == 1
    c.create("/us/eph", b"", ephemeral=True)
    assert c.get("/us/eph")[1].ephemeralOwner == new["/us"][0]


def test_a_deleted_sync_node_is_counted_and_made_again(make_composed, plain):
    c = make_composed(eu_sync="write")
    c.create("/us/y", b"0")
    plain["/eu"].delete(DEFAULT_SYNC_NODE)
    assert c.exists("/eu/x") is None          # a switch: a write-sync, refused
    assert c.stats["sync_failures"] == 1
    h.wait_until(lambda: plain["/eu"].exists(DEFAULT_SYNC_NODE), what="sync node made again")
    c.get("/us/y")
    c.exists("/eu/x")
    assert c.stats["sync_failures"] == 1 and c.stats["syncs_injected"] == 3


def test_a_member_disconnect_suspends_the_composed_session_without_expiring_it(
        make_composed, plain, ensembles):
    proxy = h.TcpProxy(ensembles["/eu"].port)
    try:
        c = ComposedClient({"/eu": proxy.hosts, "/us": {"hosts": ensembles["/us"].hosts,
                                                        "sync": SYNC}},
                           timeout=10, connection_retry={"max_tries": -1, "delay": 0.05,
                                                         "max_delay": 0.2})
        c.start(timeout=20)
        states = []
        c.add_listener(states.append)
        c.create("/eu/eph", b"", ephemeral=True)
        ids = c.client_ids
        proxy.drop_all()
        h.wait_until(lambda: KazooState.SUSPENDED in states, what="composed SUSPENDED")
        h.wait_until(lambda: c.connected, timeout=15, what="reconnected")
        assert states == [KazooState.SUSPENDED, KazooState.CONNECTED]
        assert c.client_ids == ids and c.stats["sessions_expired"] == 0
        assert c.exists("/eu/eph") is not None
        c.stop()
        c.close()
    finally:
        proxy.close()


def test_watch_events_from_both_mounts_are_delivered_one_at_a_time_in_arrival_order(
        make_composed, plain):
    plain["/eu"].create("/eu/w", b"0")
    plain["/us"].create("/us/w", b"0")
    c = make_composed()
    delivered = []
    release = threading.Event()

    def eu_watcher(event):
        delivered.append(("eu-start", threading.get_ident()))
        release.wait(10)
        delivered.append(("eu-end", threading.get_ident()))

    c.get("/eu/w", watch=eu_watcher)
    c.get("/us/w", watch=lambda event: delivered.append(("us", threading.get_ident())))
    plain["/eu"].set("/eu/w", b"1")
    h.wait_until(lambda: delivered, what="eu event")
    plain["/us"].set("/us/w", b"1")
    # The us event has arrived (a read through the member session returns
    # only after it), but waits behind the eu one on the single queue.
    assert c.get("/us/w")[0] == b"1"
    time.sleep(0.2)
    assert [d[0] for d in delivered] == ["eu-start"]
    release.set()
    h.wait_until(lambda: len(delivered) == 3, what="us event")
    assert [d[0] for d in delivered] == ["eu-start", "eu-end", "us"]
    assert len({d[1] for d in delivered}) == 1, "events of two mounts on two threads"
    assert c.get("/eu/w")[0] == b"1"


@pytest.mark.skipif(h.ensemble_target(), reason="stoa-ensemble: mixes one standalone ZooKeeper "
                    "3.9.5 with Stoa; runs under STOA_TARGET=stoa")
def test_write_syncs_compose_apache_zookeeper_with_stoa(ensembles, plain):
    jars = h.zookeeper_395()
    zk = h.Server(kind="zookeeper", zookeeper=jars)
    zk.start(timeout=60)
    c = None
    try:
        plain_zk = plain_client(zk)
        plain_zk.create("/zk/x", b"0", makepath=True)
        c = ComposedClient({"/zk": {"hosts": zk.hosts, "sync": "write"},
                            "/us": {"hosts": ensembles["/us"].hosts, "sync": SYNC}}, timeout=10)
        c.start(timeout=20)
        version = lambda: plain_zk.exists(DEFAULT_SYNC_NODE).version  # noqa: E731
        before = version()
        c.create("/us/z", b"0")
        for i in range(3):
            c.set("/us/z", b"%d" % i)
            assert c.get("/zk/x")[0] == b"%d" % i    # a switch: a write-sync to ZooKeeper
            c.set("/zk/x", b"%d" % (i + 1))
        assert version() == before + 3
        assert c.stats["syncs_injected"] == 3
        lock = c.Lock("/zk/lock", "me")
        assert lock.acquire(timeout=10)
        assert plain_zk.get_children("/zk/lock") != []
        lock.release()
        plain_zk.stop()
        plain_zk.close()
    finally:
        if c is not None:
            c.stop()
            c.close()
        zk.cleanup()


def test_stop_reports_lost_and_drops_ephemerals_on_both_mounts(make_composed, plain):
    c = make_composed()
    states = []
    c.add_listener(states.append)
    c.create("/eu/bye", b"", ephemeral=True)
    c.create("/us/bye", b"", ephemeral=True)
    c.stop()
    assert states == [KazooState.LOST]
    assert plain["/eu"].exists("/eu/bye") is None
    assert plain["/us"].exists("/us/bye") is None
    with pytest.raises(NoNodeError):
        plain["/eu"].get("/eu/bye")


@pytest.mark.skipif(h.target() != "stoa" or h.ensemble_target(),
                    reason="the benchmark starts its own standalone Stoa server")
def test_one_mount_benchmark_runs():
    # bench/compose/one_mount.py, tiny: so that it cannot rot.
    script = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "compose", "one_mount.py")
    p = subprocess.run([sys.executable, script, "--rounds", "2", "--ops", "60", "--windows", "1,4"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                       env=dict(os.environ, STOA_BIN=h.stoa_bin()), stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout[-3000:]
    assert "ratio to plain" in p.stdout and "errors: 0" in p.stdout, p.stdout[-3000:]
    assert "'syncs_injected': 1" in p.stdout, p.stdout[-3000:]   # the first read only
    # The same comparison for the Rust clients, through `stoa bench --mounts`.
    p = subprocess.run([sys.executable, script, "--driver", "rust", "--rounds", "2", "--ops",
                        "200", "--windows", "1,4"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                       env=dict(os.environ, STOA_BIN=h.stoa_bin()), stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout[-3000:]
    assert "ratio to plain" in p.stdout and "errors: 0" in p.stdout, p.stdout[-3000:]
    rows = [line.split() for line in p.stdout.splitlines()
            if line.split()[:2] in (["1", "composed"], ["4", "composed"])]
    assert len(rows) == 2 and all(float(r[2]) > 0 for r in rows), p.stdout[-3000:]
