"""`stoa bench` smoke test: it drives a real Stoa server and reports figures."""

import json
import os
import subprocess

import pytest

import harness as h

pytestmark = pytest.mark.skipif(h.target() != "stoa", reason="drives the stoa binary's bench")


def run_bench(srv, tmp_path, *extra):
    out = tmp_path / "bench.json"
    argv = [h.stoa_bin(), "bench", "--servers", srv.hosts, "--quiet", "--json", str(out),
            "--keys", "100"] + list(extra)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    with open(out) as f:
        return json.load(f)["results"]


def test_bench_mixed_load_reports_throughput_and_no_errors(server_factory, tmp_path):
    """A 2 s mixed run with every op kind has throughput > 0, no errors, CPU per op."""
    srv = server_factory()
    results = run_bench(srv, tmp_path, "--sessions", "2", "--outstanding", "4", "--duration", "2",
                        "--warmup", "0.2", "--server-pid", str(srv.pid),
                        "--mix", "create=10,set=20,get=40,exists=10,children=5,delete=5,multi=10")
    assert len(results) == 1
    r = results[0]
    assert r["throughput_ops_s"] > 0 and r["ops"] > 0
    assert r["error_count"] == 0 and r["errors"] == {}
    assert 0 < r["latency_us"]["p50"] <= r["latency_us"]["p99"] <= r["latency_us"]["max"]
    assert r["server_cpu_us_per_op"] > 0 and r["client_cpu_us_per_op"] > 0
    assert set(r["by_op"]) == {"create", "set", "get", "exists", "children", "delete", "multi"}


def test_bench_spreads_its_keys_over_several_roots_in_bursts(server_factory, tmp_path):
    """--root /a,/b spreads the keyspace over both roots (key i under root i mod 2), and
    --burst runs sessions through them in bursts: every key is there, and the setData
    run leaves writes under both roots, without errors."""
    srv = server_factory()
    results = run_bench(srv, tmp_path, "--root", "/sw-a,/sw-b", "--burst", "3", "--keys", "10",
                        "--sessions", "2", "--outstanding", "1", "--duration", "1",
                        "--warmup", "0.1", "--mix", "set=100")
    assert results[0]["ops"] > 0 and results[0]["error_count"] == 0
    from kazoo.client import KazooClient
    zk = KazooClient(hosts=srv.hosts, timeout=10)
    zk.start()
    try:
        a, b = zk.get_children("/sw-a/keys"), zk.get_children("/sw-b/keys")
        assert sorted(a + b) == ["k%07d" % i for i in range(10)]
        assert all(int(k[1:]) % 2 == 0 for k in a) and all(int(k[1:]) % 2 == 1 for k in b)
        assert any(zk.get("/sw-a/keys/" + k)[1].version > 0 for k in a)
        assert any(zk.get("/sw-b/keys/" + k)[1].version > 0 for k in b)
    finally:
        zk.stop()


def test_bench_scenario_counts_ops_and_appends_csv(server_factory, tmp_path):
    """A scenario bounded by op count measures exactly that many ops; --csv appends."""
    srv = server_factory()
    csv = tmp_path / "bench.csv"
    for _ in range(2):
        results = run_bench(srv, tmp_path, "--scenario", "ephemeral-300b", "--ops", "500",
                            "--csv", str(csv))
        assert results[0]["ops"] == 500 and results[0]["error_count"] == 0
        assert results[0]["payload_bytes"] == 300 and results[0]["ephemeral"]
    lines = csv.read_text().splitlines()
    assert lines[0].startswith("label,") and len(lines) == 3


def test_bench_clean_up_deletes_what_the_creates_left(server_factory, make_client, tmp_path):
    """--clean-up: a timed create run leaves no znode behind it, a run without leaves them all,
    and the deletes count in no figure."""
    srv = server_factory()
    zk = make_client(hosts=srv.hosts)
    args = ["--scenario", "create-async", "--duration", "0.5", "--warmup", "0.1",
            "--outstanding", "20"]
    results = run_bench(srv, tmp_path, *args, "--clean-up")
    r = results[0]
    assert r["ops"] > 100 and r["error_count"] == 0
    assert set(r["by_op"]) == {"create"}
    assert zk.get_children("/stoa-bench/w") == []
    kept = run_bench(srv, tmp_path, *args)[0]
    # Warm-up creates are kept too: at least the measured ones remain.
    assert len(zk.get_children("/stoa-bench/w")) >= kept["ops"] > 100


def test_bench_ezk_extension_queue_dequeues_in_one_call(server_factory, tmp_path):
    """The EZK priority-queue extension scenario: a 1 s run with 2 consumers registers
    examples/extensions/priority_queue.lua, dequeues, and every dequeue is one call."""
    srv = server_factory()
    results = run_bench(srv, tmp_path, "--scenario", "pq-extension", "--sessions", "2",
                        "--duration", "1", "--warmup", "0.2")
    assert len(results) == 1
    r = results[0]
    assert r["error_count"] == 0, r["errors"]
    e = r["ezk"]
    assert (e["scenario"], e["approach"], e["clients"]) == ("pq-extension", "extension", 2)
    assert e["dequeues"] > 0 and e["dequeues"] == r["ops"]
    assert e["dequeue"]["empty"] == 0 and e["dequeue"]["conflicts"] == 0
    assert e["calls_per_dequeue"] == 1.0
    assert r["throughput_ops_s"] > 0


def test_bench_ezk_quota_extension_releases_in_one_call(server_factory, tmp_path):
    """quota-extension with 20 clients (more than the 15 the quota of 1500 holds): allocations
    and releases succeed, each release is one call, refusals are counted."""
    srv = server_factory()
    results = run_bench(srv, tmp_path, "--scenario", "quota-extension", "--sessions", "20",
                        "--duration", "1", "--warmup", "0.2")
    e = results[0]["ezk"]
    assert results[0]["error_count"] == 0, results[0]["errors"]
    assert e["allocations"] > 0 and e["releases"] > 0
    assert e["calls_per_release"] == 1.0
    assert e["calls_per_allocation"] >= 1.0
