#!/usr/bin/env python3
"""Where an owned ensemble's cores go: a 3-member Stoa ensemble of three
partitions with `partition.owned=yes` under `stoa bench` (6 sessions of 16
calls in flight over two groups, bursts of 1), and per member the mntr
counters of cores sent away, recalled, followed, and raft messages and ticks
stepped away (docs/partitions.md, "Raft messages follow the core", "Ticks
follow the core").

usage: owned_ensemble.py [--rounds N] [--read-ratio R] STOA_BIN [STOA_BIN ..]

Several binaries run in alternating rounds (an A/B of two builds); each
round starts a fresh ensemble under a temporary directory and removes it.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "e2e"))

COUNTERS = ("stoa_cores_sent", "stoa_core_recalls", "stoa_core_recalls_waited",
            "stoa_core_jobs_followed", "stoa_raft_steps_away", "stoa_raft_ticks_away",
            "stoa_wal_batches")
CONFIG = {"partitions": 3, "partition.groups": "/app,/billing", "partition.owned": "yes",
          "partition.threads": 1, "io.threads": 1}


def counters(member):
    found = {}
    for line in member.four_letter("mntr").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in COUNTERS:
            found[parts[0]] = int(parts[1])
    return found


def round_of(binary, read_ratio):
    os.environ["STOA_BIN"] = binary
    import servers
    base = tempfile.mkdtemp(prefix="owned-ensemble-")
    ensemble = servers.Ensemble(kind="stoa", base_dir=base, extra_cfg=CONFIG)
    try:
        ensemble.start()
        leader = ensemble.members[ensemble.leader() - 1]
        before = {m: counters(m) for m in ensemble.members}
        bench = subprocess.run(
            [binary, "bench", "--servers", ensemble.hosts, "--sessions", "6",
             "--outstanding", "16", "--read-ratio", str(read_ratio), "--duration", "4",
             "--warmup", "1", "--root", "/app,/billing", "--burst", "1"],
            capture_output=True, text=True, timeout=120, check=True).stdout
        ops = next(line.split()[2] for line in bench.splitlines() if line.startswith("bench"))
        rows = []
        for m in ensemble.members:
            after = counters(m)
            delta = {k: after.get(k, 0) - before[m].get(k, 0) for k in COUNTERS}
            rows.append(("leader" if m is leader else "follower", delta))
        return ops, rows
    finally:
        ensemble.stop()
        shutil.rmtree(base, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--read-ratio", type=int, default=0)
    parser.add_argument("binaries", nargs="+")
    args = parser.parse_args()
    print("| build | round | ops/s | member | cores sent | recalls | sent per recall "
          "| followed | raft steps away | ticks away | WAL batches |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in range(args.rounds):
        for binary in args.binaries:
            ops, rows = round_of(binary, args.read_ratio)
            for role, d in sorted(rows, key=lambda row: row[0] != "leader"):
                per = d["stoa_cores_sent"] / max(d["stoa_core_recalls"], 1)
                print(f"| {os.path.basename(binary)} | {r + 1} | {ops} | {role} "
                      f"| {d['stoa_cores_sent']} | {d['stoa_core_recalls']} | {per:.0f} "
                      f"| {d['stoa_core_jobs_followed']} | {d['stoa_raft_steps_away']} "
                      f"| {d['stoa_raft_ticks_away']} "
                      f"| {d['stoa_wal_batches']} |", flush=True)


if __name__ == "__main__":
    main()
