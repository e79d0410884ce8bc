"""Fast reads and fast watches (docs/partitions.md, "Fast reads and fast
watches"): a session opts in by creating an ephemeral node named by its own
session id under /zookeeper/fast, whose data lists "reads" and/or "watches".
On a server whose partitions apply on their own threads (partition.owned) its
reads then skip the waits that tie them to other partitions, and its watch
events go out as their partition applies the change; everywhere else the
flag is kept and changes nothing."""

import json
import subprocess
import threading

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadArgumentsError, NodeExistsError, NoNodeError

import harness as h

pytestmark = pytest.mark.skipif(h.target_name() not in ("stoa", "stoa-ensemble"),
                                reason="Stoa's fast reads and watches")

FAST = "/zookeeper/fast"
OWNED = {"partitions": 3, "partition.groups": "/app,/billing", "partition.owned": "yes",
         "partition.threads": 1, "io.threads": 2}
KEYS = ("/app/k", "/billing/k")


def client(request, hosts):
    c = KazooClient(hosts=hosts, timeout=20)
    c.start()

    def done():
        c.stop()
        c.close()
    request.addfinalizer(done)
    return c


def flag_path(c):
    return f"{FAST}/{c.client_id[0]:x}"


def opt_in(c, flags):
    c.ensure_path(FAST)
    c.create(flag_path(c), flags.encode(), ephemeral=True)


def fast_sessions(srv):
    return (h.mntr_int(srv, "stoa_fast_read_sessions"),
            h.mntr_int(srv, "stoa_fast_watch_sessions"))


def test_the_opt_in_is_a_plain_ephemeral_named_by_its_own_session(zk, server):
    with pytest.raises(NoNodeError):
        zk.create(flag_path(zk), b"reads", ephemeral=True)
    # The parent is one plain persistent node for every session's flag.
    with pytest.raises(BadArgumentsError):
        zk.create(FAST, ephemeral=True)
    zk.ensure_path(FAST)
    other = f"{FAST}/{zk.client_id[0] + 1:x}"
    for path, value, ephemeral in [(other, b"reads", True), (flag_path(zk), b"reads", False),
                                   (flag_path(zk), b"everything", True)]:
        with pytest.raises(BadArgumentsError):
            zk.create(path, value, ephemeral=ephemeral)
    with pytest.raises(BadArgumentsError):
        zk.create(flag_path(zk), b"reads", ephemeral=True, sequence=True)
    zk.create(flag_path(zk), b"reads, watches", ephemeral=True)
    with pytest.raises(NodeExistsError):
        zk.create(flag_path(zk), b"reads", ephemeral=True)
    assert zk.get(flag_path(zk))[0] == b"reads, watches"
    members = getattr(server, "members", [server])
    for member in members:
        h.wait_until(lambda: fast_sessions(member) == (1, 1), what="the flag everywhere")
    with pytest.raises(BadArgumentsError):
        zk.set(flag_path(zk), b"reads;watches")
    zk.set(flag_path(zk), b"watches")
    for member in members:
        h.wait_until(lambda: fast_sessions(member) == (0, 1), what="the new flag")
    zk.set(flag_path(zk), b"")
    for member in members:
        h.wait_until(lambda: fast_sessions(member) == (0, 0), what="no flag")
    zk.set(flag_path(zk), b"reads")
    zk.stop()
    zk.close()
    # The session's close takes its flag node, and the flag, with it.
    for member in members:
        h.wait_until(lambda: fast_sessions(member) == (0, 0), what="the flag gone")


def start_owned(request):
    srv = h.Server(kind="stoa", extra_cfg=OWNED)
    request.addfinalizer(srv.cleanup)
    srv.start()
    return srv


class Writer:
    """Pipelined setData on every key, round after round, each value the round's
    number, until stopped (or ROUNDS_MAX): keeps both groups' partitions busy so
    that they stand apart now and then."""

    ROUNDS_MAX = 20000

    def __init__(self, hosts, keys):
        self.client = KazooClient(hosts=hosts, timeout=20)
        self.client.start()
        self.keys = keys
        for key in keys:
            self.client.ensure_path(key)
        self.stop = threading.Event()
        self.acked = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        for i in range(1, self.ROUNDS_MAX):
            if self.stop.is_set():
                break
            calls = [self.client.set_async(key, str(i).encode()) for key in self.keys]
            if i % 8 == 0:
                for call in calls:
                    call.get(timeout=30)
                self.acked = i

    def finish(self):
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the writer did not stop"
        for key in self.keys:
            self.client.set(key, b"final")
        self.client.stop()
        self.client.close()


def bench_fast(srv, tmp_path, words, seconds):
    """`stoa bench --fast WORDS`: 8 sessions x 16 in flight, getData and
    setData half and half over /app and /billing, switching partitions at
    every call, so that reads find the partitions apart. Its result."""
    out = tmp_path / "bench.json"
    argv = [h.stoa_bin(), "bench", "--servers", srv.hosts, "--quiet", "--json", str(out),
            "--fast", words, "--root", "/app,/billing", "--burst", "1", "--sessions", "8",
            "--outstanding", "16", "--read-ratio", "50", "--keys", "100",
            "--duration", str(seconds), "--warmup", "0.5"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def bench_result(proc, tmp_path):
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out[-2000:]
    with open(tmp_path / "bench.json") as f:
        result = json.load(f)["results"][0]
    assert result["error_count"] == 0 and result["ops"] > 0, result
    assert result.get("fast"), result
    return result


def test_fast_reads_never_go_back_and_skip_the_waits_across_partitions(request, tmp_path):
    srv = start_owned(request)
    writer = Writer(srv.hosts, KEYS)
    reader = client(request, srv.hosts)
    opt_in(reader, "reads")
    reader.ensure_path("/billing/mine")
    # A watch on the other group's partition that never fires: a read of
    # /app by a session holding it waits, for every other session, until
    # that partition has closed the read's zxid (its events come first).
    reader.exists("/billing/never", watch=lambda event: None)
    # The load that sets the partitions apart: fast sessions of its own.
    bench = bench_fast(srv, tmp_path, "reads", 4)
    last = {key: 0 for key in KEYS}
    reads = 0
    try:
        while bench.poll() is None and reads < 20000:
            for key in KEYS:
                value = int(reader.get(key)[0] or b"0")
                reads += 1
                # A partition's state never goes back for a session.
                assert value >= last[key], (key, value, last[key])
                last[key] = value
            if reads % 100 == 0:
                # Its own writes, it sees at once.
                reader.set("/billing/mine", str(reads).encode())
                assert reader.get("/billing/mine")[0] == str(reads).encode()
    finally:
        writer.finish()
        result = bench_result(bench, tmp_path)
    assert reads > 0
    fast = h.mntr_int(srv, "stoa_reads_fast")
    assert fast > 0, f"no read of {result['ops']} skipped a wait"
    # What another session had acknowledged before is there.
    for key in KEYS:
        assert reader.get(key)[0] == b"final"


def test_fast_watches_deliver_every_event_early(request, tmp_path):
    srv = start_owned(request)
    watcher = client(request, srv.hosts)
    opt_in(watcher, "watches")
    setter = client(request, srv.hosts)
    for key in KEYS:
        setter.ensure_path(key)
    bench = bench_fast(srv, tmp_path, "reads,watches", 4)
    rounds = 0
    try:
        while bench.poll() is None and rounds < 5000:
            rounds += 1
            heard = {key: threading.Event() for key in KEYS}
            for key in KEYS:
                watcher.get(key, watch=lambda event, key=key: heard[key].set())
            for key in KEYS:
                setter.set_async(key, str(rounds).encode())
            for key in KEYS:
                assert heard[key].wait(20), f"round {rounds}: no event for {key}"
                # The event comes before any read that sees its change.
                assert int(watcher.get(key)[0]) >= rounds
    finally:
        bench_result(bench, tmp_path)
    assert rounds > 0
    assert h.mntr_int(srv, "stoa_events_fast") > 0, f"no event of {rounds} rounds went early"


@pytest.mark.standalone_only("starts its own ensemble")
def test_the_flag_is_replicated_and_outlives_a_reconnect(request):
    ensemble = h.Ensemble(kind="stoa", extra_cfg=OWNED)
    request.addfinalizer(ensemble.cleanup)
    ensemble.start()
    first, second = ensemble.members[0], ensemble.members[1]
    c = client(request, first.hosts)
    opt_in(c, "reads,watches")
    for member in ensemble.members:
        h.wait_until(lambda: fast_sessions(member) == (1, 1), what="the flag on every member")
    # The same session on another member (the first one down, so that kazoo
    # cannot take it back): still fast, with no new write.
    sid, passwd = c.client_id
    first.stop()
    raw = h.RawClient(second.hosts, session_id=sid, passwd=passwd, timeout_ms=20000)
    assert raw.session_id == sid
    assert raw.get(f"{FAST}/{sid:x}")[0] == b"reads,watches"
    assert fast_sessions(second) == (1, 1)
    raw.close()
    for member in ensemble.members[1:]:
        h.wait_until(lambda: fast_sessions(member) == (0, 0), what="the flag gone")
