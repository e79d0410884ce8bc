"""Partitions lent to worker threads (partition.threads, docs/partitions.md "Lent
partitions"): committed writes apply in runs, each partition's share on a thread
of its own, and the replies, reads and watch events a client sees are exactly
those of a server that applies them on one thread."""

import json
import subprocess
import threading

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import EventType

import harness as h

pytestmark = pytest.mark.skipif(h.target_name() not in ("stoa", "stoa-ensemble"),
                                reason="Stoa's partitions")
# (Under STOA_TARGET=stoa-ensemble the conftest skips this module: it starts
# its own ensemble.)

GROUPS = {"partitions": 3, "partition.groups": "/app,/billing"}
ROOTS = ("/app", "/billing", "/plain")
WRITERS = 4
ROUNDS = 150


def start(request, shape, threads, owned="no"):
    """A standalone server, or a 3-member ensemble whose follower (it applies decoded entries, the leader its own) is the one
    the kazoo sessions use and whose counters are checked; the bench's
    sessions spread over every member. Returns that server, the hosts, and
    the server that prepares the writes (the leader)."""
    cfg = dict(GROUPS, **{"partition.threads": threads, "partition.owned": "no" if owned == "no" else "yes"})
    if owned == "polling":
        # Owned, each thread looking for its next job before it parks.
        cfg["partition.pollMicros"] = 100
    if shape == "ensemble":
        ensemble = h.Ensemble(kind="stoa", extra_cfg=cfg)
        request.addfinalizer(ensemble.cleanup)
        ensemble.start()
        leader = ensemble.leader()
        assert leader is not None, "no leader"
        follower = next(m for m in ensemble.members if m is not leader)
        return follower, ensemble.hosts, leader
    srv = h.Server(kind="stoa", extra_cfg=cfg)
    request.addfinalizer(srv.cleanup)
    srv.start()
    return srv, srv.hosts, srv


def pipelined_writer(srv, n, out, armed):
    """Writer n keeps all its calls in flight at once: a setData on each root's
    key per round. The odd writers read the key back after every tenth round's
    write, which must see exactly that write (the session's later writes wait
    behind the read); the even ones only write, so runs grow long."""
    c = KazooClient(hosts=srv.hosts, timeout=20)
    c.start()
    try:
        keys = [f"{root}/w{n}" for root in ROOTS]
        for key in keys:
            c.create(key, b"-1")
        assert armed.wait(30), "the watcher did not arm"
        calls = []
        for i in range(ROUNDS):
            for key in keys:
                reads = n % 2 == 1 and i % 10 == 0
                calls.append((i, key, c.set_async(key, str(i).encode()),
                              c.get_async(key) if reads else None))
        seen = []
        for i, key, write, read in calls:
            stat = write.get(timeout=30)
            data, read_stat = read.get(timeout=30) if read else (str(i).encode(), stat)
            seen.append((key, i, stat.version, data, read_stat.version))
        out[n] = seen
    finally:
        c.stop()


def run_workload(srv):
    """Several pipelined writers on three partitions, and a watcher with a data
    watch on every writer's keys: what each saw."""
    watcher = KazooClient(hosts=srv.hosts, timeout=20)
    watcher.start()
    for root in ("/app", "/billing", "/plain"):
        watcher.ensure_path(root)
    events = []
    lock = threading.Lock()
    armed = threading.Event()

    def watch(key):
        def on(event):
            with lock:
                events.append((event.type, event.path))
        return on

    seen = [None] * WRITERS
    threads = [threading.Thread(target=pipelined_writer, args=(srv, n, seen, armed))
               for n in range(WRITERS)]
    try:
        for t in threads:
            t.start()
        # Each writer's keys, watched once they exist: one data event each.
        keys = [f"{root}/w{n}" for n in range(WRITERS) for root in ROOTS]
        h.wait_until(lambda: all(watcher.exists(k) for k in keys), timeout=30,
                     what="the writers' keys")
        for key in keys:
            watcher.get(key, watch=watch(key))
        armed.set()
        for t in threads:
            t.join(timeout=120)
            assert not t.is_alive(), "a writer did not finish"
        final = {k: watcher.get(k)[0] for k in keys}
    finally:
        watcher.stop()
    return seen, final, events, keys


def start_bench(hosts, tmp_path, reads=0):
    """`stoa bench` on every partition, 4 sessions x 32 calls in flight,
    writing (or reading, `reads` percent): each turn's commits (or reads)
    come in batches long enough to be lent."""
    name = "write" if reads == 0 else "read"
    out = tmp_path / f"{name}-bench.json"
    roots = ",".join(f"{root}/{name}-bench" for root in ROOTS)
    argv = [h.stoa_bin(), "bench", "--servers", hosts, "--quiet", "--json", str(out),
            "--root", roots, "--keys", "60",
            "--sessions", "4", "--outstanding", "32", "--read-ratio", str(reads),
            "--warmup", "0", "--duration", "4"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True), out


def stop_bench(bench):
    """Kills a bench that has not ended (a failure cut its test short)."""
    if bench.poll() is None:
        bench.kill()
        bench.wait()


def assert_bench_clean(bench, out, err):
    """The bench ended well and none of its calls failed."""
    assert bench.returncode == 0, err
    with open(out) as f:
        results = json.load(f)["results"]
    assert all(not r["errors"] for r in results), [r["errors"] for r in results]


@pytest.mark.parametrize("threads,owned", [(0, "no"), (2, "no"), (0, "yes"), (0, "polling")])
@pytest.mark.parametrize("shape", ["standalone", "ensemble"])
def test_pipelined_writes_on_every_partition_read_and_fire_as_on_one_thread(
        request, tmp_path, shape, threads, owned):
    """Under a bench's load on three partitions, kazoo sessions pipeline writes
    and reads and watch each other's keys: every read sees exactly its own
    session's write before it, every watch fires once, and every bench call
    succeeds, whether the partitions apply on worker threads or not, and
    whether each core goes to a thread of its own between turns
    (partition.owned, engine/cores.rs; polling for its next job first or
    not, partition.pollMicros) or not; owned, each partition applies
    its own entries (engine/by_partition.rs), on its thread
    (engine/away_apply.rs), instead of runs of the merge."""
    srv, hosts, preparer = start(request, shape, threads, owned)
    bench, bench_out = start_bench(hosts, tmp_path)
    try:
        h.wait_until(lambda: h.mntr_int(srv, "stoa_txns_applied") > 5000, timeout=30,
                     what="the bench's load")
        seen, final, events, keys = run_workload(srv)
        _, err = bench.communicate(timeout=60)
    finally:
        stop_bench(bench)
    assert_bench_clean(bench, bench_out, err)
    for n, calls in enumerate(seen):
        assert calls is not None, f"writer {n} did not report"
        for key, i, version, data, read_version in calls:
            # The write is the key's (i+1)th, and the read right behind it
            # sees exactly it: nothing of the session's later writes.
            assert version == i + 1, (key, i, version)
            assert data == str(i).encode(), (key, i, data)
            assert read_version == version, (key, i, read_version)
    assert final == {k: str(ROUNDS - 1).encode() for k in keys}
    # Every watch fired once, a data change of its own key.
    assert sorted(events) == sorted((EventType.CHANGED, k) for k in keys)
    lent = h.mntr_int(srv, "stoa_apply_runs_lent")
    runs, txns = h.mntr_int(srv, "stoa_apply_runs"), h.mntr_int(srv, "stoa_apply_run_txns")
    assert h.mntr_int(srv, "stoa_txns_applied") >= WRITERS * ROUNDS * len(ROOTS)
    if owned != "no":
        # Applied by partition: no run of the merge, lent or not; on the
        # leader, what touched one partition alone followed its core to
        # apply on its thread (engine/away_apply.rs). (A follower's cores
        # go away only for long shares.)
        for member in ([srv] if srv is preparer else [srv, preparer]):
            merged = (h.mntr_int(member, "stoa_apply_runs"),
                      h.mntr_int(member, "stoa_apply_runs_lent"))
            assert merged == (0, 0), merged
        assert h.mntr_int(preparer, "stoa_applies_sent_away") > 0
    elif threads == 0:
        assert runs > 0 and txns >= WRITERS * ROUNDS * len(ROOTS)
        assert lent == 0
    else:
        assert runs > 0 and txns >= WRITERS * ROUNDS * len(ROOTS)
        assert lent > 0, f"no run was lent ({runs} runs of {txns} transactions)"
    # The leader prepared the plain writes in batches, lent or not as it
    # applied them (engine/lent_prep.rs).
    batches = h.mntr_int(preparer, "stoa_prep_batches")
    writes = h.mntr_int(preparer, "stoa_prep_batch_writes")
    batches_lent = h.mntr_int(preparer, "stoa_prep_batches_lent")
    assert batches > 0 and writes >= WRITERS * ROUNDS * len(ROOTS)
    if threads == 0:
        assert batches_lent == 0
    else:
        assert batches_lent > 0, f"no batch was lent ({batches} batches of {writes} writes)"
    # Owned, the leader's cores went away with its batches, and came back
    # either as their threads finished or when the engine reached for them.
    sent = h.mntr_int(preparer, "stoa_cores_sent")
    recalls = h.mntr_int(preparer, "stoa_core_recalls")
    waited = h.mntr_int(preparer, "stoa_core_recalls_waited")
    # A batch for a core still away followed it (its thread ran it before
    # sending the core back, or the engine as the core landed).
    followed = h.mntr_int(preparer, "stoa_core_jobs_followed")
    late = h.mntr_int(preparer, "stoa_core_jobs_followed_late")
    # An ensemble's leader stepped its followers' responses on the threads
    # of cores away (Engine::step_away); a standalone server hears none.
    steps_away = h.mntr_int(preparer, "stoa_raft_steps_away")
    # Raft ticks short of a timeout follow a core away too (Engine::tick_groups).
    ticks_away = h.mntr_int(preparer, "stoa_raft_ticks_away")
    print(f"owned={owned} shape={shape}: sent {sent}, recalls {recalls}, ticks away {ticks_away}")
    if owned != "no":
        assert sent > 0 and waited <= recalls <= sent, (sent, recalls, waited)
        assert late <= followed, (followed, late)
        assert (steps_away > 0) == (shape == "ensemble"), steps_away
        # The load lasts dozens of ticks, most finding some core away.
        assert ticks_away > 0, ticks_away
    else:
        assert (sent, recalls, waited, followed, late, steps_away, ticks_away) == (0,) * 7
    # Every member handled its groups' readies in rounds, more readies
    # than rounds (both groups had readies in some), and lent none
    # without threads (engine/lent_ready.rs).
    for member in ([srv] if srv is preparer else [srv, preparer]):
        rounds = h.mntr_int(member, "stoa_ready_rounds")
        readies = h.mntr_int(member, "stoa_ready_round_readies")
        assert 0 < rounds < readies, (rounds, readies)
        if threads == 0:
            assert h.mntr_int(member, "stoa_ready_rounds_lent") == 0
    # Every transaction carried its chain links, and each matched the item
    # its partition applied last, on the member and on the leader
    # (engine/chains.rs).
    for member in ([srv] if srv is preparer else [srv, preparer]):
        assert h.mntr_int(member, "stoa_chain_links_followed") >= WRITERS * ROUNDS * len(ROOTS)
        assert h.mntr_int(member, "stoa_chain_breaks") == 0


@pytest.mark.parametrize("threads,owned", [(0, "no"), (2, "no"), (2, "yes"), (0, "yes")])
@pytest.mark.parametrize("shape", ["standalone", "ensemble"])
def test_pipelined_reads_on_every_partition_keep_each_sessions_order(
        request, tmp_path, shape, threads, owned):
    """Reads batched per turn and served by each partition (engine/lent_reads.rs),
    on worker threads or on the partitions' own (partition.owned, where reads
    go by closed watermark), under a bench's reads on three partitions: a
    kazoo session pipelining reads of keys on every partition, with a sync,
    exists and getChildren among them, gets every answer in the order it
    asked (kazoo drops a connection whose reply xids go out of order) and
    never sees a key go back while another session keeps writing it."""
    srv, hosts, _ = start(request, shape, threads, owned)
    keys = [f"{root}/r{i}" for root in ROOTS for i in range(20)]
    writer = KazooClient(hosts=srv.hosts, timeout=20)
    reader = KazooClient(hosts=srv.hosts, timeout=20)
    writer.start()
    reader.start()
    bench, bench_out = start_bench(hosts, tmp_path, reads=100)
    stop = threading.Event()
    failures = []

    def write():
        n = 0
        try:
            while not stop.is_set() and n < 400:
                n += 1
                for r in [writer.set_async(k, str(n).encode()) for k in keys]:
                    r.get(timeout=20)
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(f"writer: {e!r}")

    try:
        for root in ROOTS:
            writer.ensure_path(root)
        for k in keys:
            writer.create(k, b"0")
        thread = threading.Thread(target=write)
        thread.start()
        last = {k: 0 for k in keys}
        for _ in range(25):
            calls = []
            for i, k in enumerate(keys):
                calls.append((k, reader.get_async(k)))
                if i == len(keys) // 2:
                    # Answered at once where nothing is ahead of it (a
                    # standalone server's sync): it waits for the batch.
                    calls.append((None, reader.sync_async(ROOTS[0])))
            calls.append((None, reader.exists_async(keys[0])))
            calls.append((None, reader.get_children_async(ROOTS[1])))
            for k, call in calls:
                value = call.get(timeout=20)
                if k is None:
                    continue
                seen = int(value[0])
                assert seen >= last[k], f"{k} went back from {last[k]} to {seen}"
                last[k] = seen
        stop.set()
        thread.join(timeout=60)
        assert not thread.is_alive(), "the writer did not finish"
        assert not failures, failures
        assert max(last.values()) > 0, "the reads never saw a write"
        _, err = bench.communicate(timeout=60)
    finally:
        stop.set()
        stop_bench(bench)
        writer.stop()
        reader.stop()
    assert_bench_clean(bench, bench_out, err)
    batches, reads = h.mntr_int(srv, "stoa_read_batches"), h.mntr_int(srv, "stoa_read_batch_reads")
    lent = h.mntr_int(srv, "stoa_read_batches_lent")
    if threads == 0:
        # Without threads to lend to, reads are not batched, owned or not
        # (owned, the partitions' threads would share the engine's cores).
        assert batches == 0 and lent == 0
    else:
        # Owned, the long batches went to the partitions' own threads.
        assert reads >= len(keys) and lent > 0, f"{batches} batches of {reads} reads, {lent} lent"
    flights = h.mntr_int(srv, "stoa_read_flights")
    # Owned, a batch sent at a turn's end stays in flight while the engine
    # goes on (its replies checked in order above).
    assert (flights > 0) == (owned != "no" and threads > 0), f"{flights} batches left in flight"
    if owned != "no":
        assert h.mntr_int(srv, "stoa_cores_sent") > 0
