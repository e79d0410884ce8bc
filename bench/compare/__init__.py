"""Stoa vs Apache ZooKeeper and etcd, one machine, one load generator.

The systems (systems.py): Debian's ZooKeeper 3.8 (`zookeeper`) and etcd 3.4
(`etcd`), and beside them the newest releases, ZooKeeper 3.9.5
(`zookeeper-3.9`, jars from Maven Central) and etcd 3.6 (`etcd-3.6`, built
from the Go module proxy), installed where missing and cached under
target/anchors/ (anchors/). One that cannot be had is left out with a
message, unless --systems names it.

Five sections, each written into docs/benchmarks.md with Stoa's ratio to
each ZooKeeper and each etcd, plus PNG plots under docs/bench/:

- matrix: one standalone server of each system on free 127.0.0.1 ports
  with fresh data dirs on the same disk runs the same `stoa bench` cells
  (etcd through `stoa bench --target etcd`, the same op mix over etcd's v3
  gRPC API), interleaved with the order rotating per repeat, medians of the
  repeats; then the fsync floor (a raw fsynced write, no server).
- ezk: the Extendable ZooKeeper experiments (priority queue, quota): the
  server-side extension on Stoa against the client-side recipe on Stoa and
  on each ZooKeeper, interleaved (ZooKeeper protocol only, so not on etcd).
- resources: each server fresh, loaded with N znodes of 100 B (1M; --quick
  20,000): resident memory, data dir and snapshot size, stop time, and the
  time from a restart's exec until a read of a known znode succeeds.
- ensemble: 3-member ensembles of each (ZooKeeper quorum, Stoa raft, etcd
  cluster) with the clients spread over the members, a few cells interleaved.
- failover: per round a fresh 3-member ensemble of each, 6 closed-loop
  writer clients (kazoo; etcd over its HTTP gateway), the leader killed
  with kill -9 after 2 s: how long until each client's writes and reads go
  through again, session expiries, writes/s through the fault (3 rounds;
  --quick 1, about 10 s a system).

Every process started here is stopped by PID (also on errors).

  scripts/bench-compare            everything (about an hour)
  scripts/bench-compare --quick    a few minutes; CI smoke, writes under
                                   target/ (the systems but Debian's
                                   ZooKeeper and Stoa on a few cells only;
                                   one failover round)
Options: --repeats N, --duration S, --warmup S, --out-dir DIR, --no-build,
         --no-install, --no-etcd, --systems LIST, --sections LIST (the others
         are reused from the out dir's bench/results.json), --znodes N,
         --rounds N (failover), --report-only.
         Env: STOA_BIN (the stoa binary; else $CARGO_TARGET_DIR/release/stoa,
         built first unless --no-build), CARGO_TARGET_DIR, ETCD_BIN (Debian's
         etcd), STOA_BENCH_KEEP=1 keeps the temp dirs.

Installs what is missing (not with --no-install): the zookeeper and
etcd-server packages (apt-get), the anchors, and a venv with
bench/requirements.txt (matplotlib, and kazoo for the failover clients)
under target/bench-venv; without matplotlib it still writes the tables,
without plots, and without kazoo the failover section has etcd only.

The code, a module per part: cli (options, the order of a run), install
(venv, stoa binary), anchors/ (the systems' installs), launch (the servers,
through tests/e2e/servers.py, shared with the e2e harness), runner (one
`stoa bench` run), procstat, the sections (matrix, floor, ezk, resources,
ensemble, failover), results (results.json, versioned), render/ (benchmarks.md),
plots, publish (all three outputs).
"""

import os

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
