//! A seeded simulation of one server and its clients: no sockets, files or
//! clocks. The server runs the production node driver over `SimLog` and an
//! in-memory snapshot store (`crate::node::sim_disk`). Clients pipeline
//! writes and reads on keys of their own; the WAL writer syncs random
//! groups of batches; the server crashes, keeping what `SimLog` keeps (the
//! synced log, perhaps a torn or damaged prefix of the rest), and restarts
//! through the production recovery. After
//! every step the contract is checked: replies in request order, a read sees
//! exactly its session's preceding writes, and nothing acknowledged is lost.
//! Some reads set data watches, on the client's keys or another's, which a
//! client restores with setWatches once the server is back; their events
//! are checked as the ensemble simulator checks them
//! (`sim_world/watch_log.rs`). Some writes are a `multi` of two of the
//! client's keys; at two partitions half of them also check a node on the
//! other partition (a transaction of parts), and a quarter end in a check
//! bound to fail: no value of a failed multi is ever read or left, and a
//! multi in flight at a crash survives whole or not at all.
//! At two partitions some clients opt into fast reads and fast watches
//! (`stoa_tree::FAST`): their events are checked in zxid order per
//! partition, and their reads against watched changes of the same
//! partition alone; every client's reads of another's key never go back.
//! A failing seed replays exactly: `STOA_SIM_SEED=n cargo test sim`;
//! `STOA_SIM_SEEDS=A..B` runs seeds A to B-1 (default 0..40).

use std::collections::VecDeque;

use stoa_proto::codes::ErrorCode;
use stoa_proto::jute::{Reader, Record};
use stoa_proto::records::{CheckVersionRequest, GetDataResponse};
use stoa_proto::request::Request;
use stoa_proto::response::MultiResult;

use super::sim_world::machine::{SimMachine, SimNode};
use super::sim_world::rng::Rng;
use super::sim_world::watch_log::{
    check_watch_order, record_ack, AckedWrites, ClientWatches, Lanes,
};
use super::sim_world::wire::{self, ServerFrame, WireClient};
use super::tests::config;
use super::{EngineConfig, Input};

const CLIENTS: usize = 3;
const KEYS_PER_CLIENT: usize = 3;
const STEPS_PER_SEED: usize = 400;
const SEEDS_DEFAULT: u64 = 40;
const IN_FLIGHT_MAX: usize = 6;
const T0_MS: i64 = 1_700_000_000_000;
/// Writes that are a multi of two keys, and of those the ones bound to fail.
const MULTI_PERCENT: u64 = 15;
const ABORT_PERCENT: u64 = 25;
/// A failed multi's values are numbered from here: above any a client
/// writes, so one read or left anywhere is caught.
const ABORTED_FROM: usize = 1_000_000;

enum Op {
    /// Writes the key's value number `index` (this client's write order).
    Set { key: usize, index: usize },
    /// Must see exactly the value written last before it was sent;
    /// `watch`: it sets a data watch.
    Get {
        key: usize,
        expect: Option<usize>,
        watch: bool,
    },
    /// Reads (and watches) another client's key.
    Peek { owner: usize, key: usize },
    /// Sets each (key, value number) at once; `abort`: a check bound to
    /// fail ends it, so none of it may apply.
    Multi {
        sets: Vec<(usize, usize)>,
        abort: bool,
    },
}

struct Client {
    conn: u64,
    wire: WireClient,
    in_flight: VecDeque<(i32, Op)>,
    /// Per key: number of values written (sent) so far, and the highest
    /// acknowledged one.
    written: Vec<usize>,
    acked: Vec<Option<usize>>,
    /// Its data watches (restored after a restart) and what it heard.
    watching: ClientWatches,
    /// The newest value it read of each other client's key: never goes
    /// back, fast reads or not.
    peeked: std::collections::HashMap<(usize, usize), Option<usize>>,
}

pub(super) fn key_path(client: usize, key: usize) -> String {
    format!("/c{client}/k{key}")
}

pub(super) fn value(client: usize, key: usize, index: usize) -> Vec<u8> {
    format!("{client}:{key}:{index}").into_bytes()
}

pub(super) fn index_of(bytes: &[u8]) -> Option<usize> {
    std::str::from_utf8(bytes)
        .ok()?
        .rsplit(':')
        .next()?
        .parse()
        .ok()
}

struct Sim {
    rng: Rng,
    seed: u64,
    machine: SimMachine,
    now_ms: i64,
    clients: Vec<Client>,
    next_conn: u64,
    /// The zxid of every acknowledged write, by key and value.
    writes_acked: AckedWrites,
    /// Multis applied, refused whole, and of those over two partitions.
    multis: [u64; 3],
    /// Over every engine the run booted: jobs sent away with a core,
    /// recalls that found the job still held, and jobs sent after a core
    /// still away (`engine/cores.rs`); and of the jobs, those applying
    /// entries (`engine/away_apply.rs`); and reads and events of fast
    /// sessions that skipped a wait (`engine/fast_sessions.rs`).
    away: [u64; 6],
    /// Numbers the values of multis bound to fail.
    aborted_values: usize,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut machine = SimMachine::new();
        machine
            .boot(engine_config(seed), T0_MS)
            .expect("a blank disk boots");
        let mut sim = Sim {
            rng: Rng(seed),
            seed,
            machine,
            now_ms: T0_MS,
            clients: Vec::new(),
            next_conn: 1,
            writes_acked: AckedWrites::new(),
            multis: [0; 3],
            away: [0; 6],
            aborted_values: ABORTED_FROM,
        };
        for _ in 0..CLIENTS {
            let conn = sim.fresh_conn();
            sim.clients.push(Client {
                conn,
                wire: WireClient::new(),
                in_flight: VecDeque::new(),
                written: vec![0; KEYS_PER_CLIENT],
                acked: vec![None; KEYS_PER_CLIENT],
                watching: ClientWatches::default(),
                peeked: Default::default(),
            });
        }
        sim.setup();
        sim
    }

    fn node(&mut self) -> &mut SimNode {
        self.machine.node_mut().expect("the server runs")
    }

    fn fresh_conn(&mut self) -> u64 {
        self.next_conn += 1;
        self.next_conn
    }

    /// Creates every client's keys and opens every session, all durable.
    fn setup(&mut self) {
        for c in 0..CLIENTS {
            self.connect(c);
        }
        self.settle();
        for c in 0..CLIENTS {
            self.receive(c);
            let mut paths = vec![format!("/c{c}")];
            paths.extend((0..KEYS_PER_CLIENT).map(|k| key_path(c, k)));
            for path in paths {
                self.send_raw(c, wire::create(&path, Vec::new()));
            }
        }
        self.settle();
        self.opt_into_fast();
        for c in 0..CLIENTS {
            // The creates' replies: drop them (nothing is in the model yet).
            self.clients[c].wire.inbox.clear();
            self.clients[c].wire.next_xid = 1_000;
        }
    }

    /// The clients whose seed makes them fast create their flag nodes
    /// (`stoa_tree::FAST`), durable before the run, and are checked as fast
    /// sessions from then on.
    fn opt_into_fast(&mut self) {
        let fast: Vec<(usize, &str)> = (0..CLIENTS)
            .filter_map(|c| Some((c, fast_words(self.seed, c)?)))
            .collect();
        if fast.is_empty() {
            return;
        }
        // A handshake answered late (its session's creation applied while
        // the keys were made): nothing else in the inbox is in the model yet.
        for client in &mut self.clients {
            for frame in client.wire.take_frames() {
                if let ServerFrame::Connected(r) = frame {
                    client.wire.adopt(&r);
                }
            }
        }
        self.send_raw(0, wire::create(stoa_tree::FAST, Vec::new()));
        self.settle();
        for &(c, words) in &fast {
            let (sid, _) = self.clients[c].wire.session.clone().expect("connected");
            let path = format!("{}/{sid:x}", stoa_tree::FAST);
            self.send_raw(c, wire::create_ephemeral(&path, words.as_bytes().to_vec()));
        }
        self.settle();
        let engine = self.node().engine();
        let lanes: Vec<usize> = (0..CLIENTS)
            .map(|owner| engine.partition_of(&key_path(owner, 0)))
            .collect();
        let flags = engine.fast.count();
        let reads = fast.iter().filter(|(_, w)| w.contains("reads")).count();
        let watches = fast.iter().filter(|(_, w)| w.contains("watches")).count();
        assert_eq!(
            flags,
            (reads, watches),
            "seed {}: the flags applied",
            self.seed
        );
        for (c, words) in fast {
            let reads_ahead = words.contains("reads");
            self.clients[c].watching =
                ClientWatches::fast(Some(Lanes::Owners(lanes.clone())), reads_ahead);
        }
    }

    fn connect(&mut self, c: usize) {
        let conn = self.clients[c].conn;
        let bytes = self.clients[c].wire.connect_bytes(30_000);
        wire::open(self.node().engine_mut(), conn, bytes);
        self.collect();
    }

    fn send_raw(&mut self, c: usize, request: Request) -> i32 {
        let client = &mut self.clients[c];
        let (xid, bytes) = client.wire.request_bytes(&request);
        let conn = client.conn;
        self.node()
            .engine_mut()
            .handle(Input::Frames { conn, bytes });
        self.collect();
        xid
    }

    /// Carries out the engine's output through the node driver, which may
    /// write a batch itself (inline) when the host says it is idle.
    fn collect(&mut self) {
        let idle = self.rng.chance(50);
        self.node().set_host_idle(idle);
        let seed = self.seed;
        let out = self
            .machine
            .flush()
            .unwrap_or_else(|reason| panic!("seed {seed}: fatal: {reason}"));
        for (conn, bytes) in out.sends {
            if let Some(client) = self.clients.iter_mut().find(|c| c.conn == conn) {
                client.wire.inbox.extend(bytes);
            }
        }
    }

    /// One pass of the WAL writer: up to `n` queued batches written and
    /// synced as a group; and now and then the snapshot thread runs.
    fn sync(&mut self, n: usize) {
        if let Some(result) = self.node().log_mut().write_group(n) {
            let token = result.unwrap_or_else(|e| panic!("seed {}: WAL: {e}", self.seed));
            self.node().on_durable(token);
        }
        for done in self.node().snapshots_mut().run_queued() {
            let result = self.node().on_snapshot_done(done);
            result.unwrap_or_else(|e| panic!("seed {}: {e}", self.seed));
        }
        self.collect();
    }

    fn settle(&mut self) {
        for _ in 0..100_000 {
            if self.node().log().queued() > 0 || self.node().snapshots().queued() > 0 {
                let queued = self.node().log().queued();
                self.sync(queued);
            } else if self.node().engine().applying_behind() {
                // Partitions applying their own left some for later turns.
                self.collect();
            } else if self.node().engine_mut().threads_finish() {
                // Cores away on their threads come back.
                self.collect();
            } else {
                return;
            }
        }
        panic!("seed {}: the server did not settle", self.seed);
    }

    /// Parses the client's inbox and checks every reply against the model.
    fn receive(&mut self, c: usize) {
        let seed = self.seed;
        let frames = self.clients[c].wire.take_frames();
        for frame in frames {
            let client = &mut self.clients[c];
            let (header, body) = match frame {
                ServerFrame::Connected(r) => {
                    client.wire.adopt(&r);
                    continue;
                }
                ServerFrame::Event(zxid, event) => {
                    if let Err(why) = client.watching.fired(zxid, &event) {
                        panic!("seed {seed}: client {c} heard {why}");
                    }
                    continue;
                }
                ServerFrame::Reply(header, _) if header.xid < 0 => continue, // pings
                ServerFrame::Reply(header, body) => (header, body),
            };
            let Some((xid, op)) = client.in_flight.pop_front() else {
                panic!(
                    "seed {}: client {c} got reply {} with nothing in flight",
                    self.seed, header.xid
                )
            };
            assert_eq!(
                header.xid, xid,
                "seed {}: client {c} replies out of order",
                self.seed
            );
            assert_eq!(
                header.err,
                ErrorCode::Ok.as_i32(),
                "seed {}: client {c} xid {xid} failed",
                self.seed
            );
            let zxid = header.zxid;
            client.wire.last_zxid = client.wire.last_zxid.max(zxid);
            match op {
                Op::Set { key, index } => {
                    let acked = &mut client.acked[key];
                    record_ack((seed, c), acked, (key, index, zxid), &mut self.writes_acked);
                    client.watching.replied(Vec::new(), zxid);
                }
                Op::Multi { sets, abort } => {
                    let results = wire::multi_results(&body).unwrap_or_else(|other| {
                        panic!("seed {seed}: client {c}'s multi answered {other}")
                    });
                    if abort {
                        // Refused whole, as ZooKeeper refuses it: Ok, and
                        // every op an error, the check's own last.
                        assert!(
                            wire::refused_whole(&results),
                            "seed {seed}: client {c}'s multi bound to fail answered {results:?}"
                        );
                        self.multis[1] += 1;
                        continue;
                    }
                    assert!(
                        !results.iter().any(|r| matches!(r, MultiResult::Error(_))),
                        "seed {seed}: client {c}'s multi failed: {results:?}"
                    );
                    for (key, index) in sets {
                        let acked = &mut client.acked[key];
                        record_ack((seed, c), acked, (key, index, zxid), &mut self.writes_acked);
                    }
                    self.multis[0] += 1;
                    client.watching.replied(Vec::new(), zxid);
                }
                Op::Get { .. } | Op::Peek { .. } => {
                    let reply =
                        GetDataResponse::decode(&mut Reader::new(&body)).expect("getData reply");
                    let seen = index_of(reply.data.as_deref().unwrap_or_default());
                    assert!(
                        seen.is_none_or(|i| i < ABORTED_FROM),
                        "seed {seed}: client {c} read {seen:?}, a value of a multi that failed"
                    );
                    let (key, watch) = match op {
                        Op::Get { key, expect, watch } => {
                            assert_eq!(
                                seen, expect,
                                "seed {}: client {c} key {key}: read {seen:?}, its last write was {expect:?}",
                                self.seed
                            );
                            ((c, key), watch)
                        }
                        Op::Peek { owner, key } => {
                            let before = client.peeked.insert((owner, key), seen);
                            assert!(
                                before.is_none_or(|b| b <= seen),
                                "seed {seed}: client {c} read /c{owner}/k{key} = {seen:?} after {before:?}"
                            );
                            ((owner, key), true)
                        }
                        Op::Set { .. } | Op::Multi { .. } => unreachable!("a read"),
                    };
                    client.watching.replied(vec![(key, seen)], zxid);
                    if watch {
                        client.watching.arm(key, seen, zxid);
                    }
                }
            }
        }
    }

    fn step(&mut self) {
        match self.rng.below(100) {
            0..=44 => {
                let c = self.rng.below(CLIENTS as u64) as usize;
                if self.clients[c].wire.handshaken
                    && self.clients[c].in_flight.len() < IN_FLIGHT_MAX
                {
                    let key = self.rng.below(KEYS_PER_CLIENT as u64) as usize;
                    self.send_op(c, key);
                }
            }
            45..=74 => {
                let n = 1 + self.rng.below(3) as usize;
                self.sync(n);
            }
            75..=93 => {
                // Partitions' threads finish their work now and then.
                if self.rng.chance(50) && self.node().engine_mut().threads_finish() {
                    self.collect();
                }
                for c in 0..CLIENTS {
                    self.receive(c);
                }
            }
            94..=97 => {
                self.now_ms += 10;
                let now = self.now_ms;
                let engine = self.node().engine_mut();
                engine.set_time(now);
                engine.tick();
                self.collect();
            }
            _ => self.crash_and_restart(),
        }
    }

    fn send_op(&mut self, c: usize, key: usize) {
        let path = key_path(c, key);
        if self.rng.chance(60) && self.rng.chance(MULTI_PERCENT) {
            self.send_multi(c, key);
        } else if self.rng.chance(60) {
            let index = self.clients[c].written[key];
            self.clients[c].written[key] += 1;
            let xid = self.send_raw(c, wire::set(&path, value(c, key, index)));
            self.clients[c]
                .in_flight
                .push_back((xid, Op::Set { key, index }));
        } else if self
            .rng
            .chance(if self.clients[c].watching.lanes.is_some() {
                60
            } else {
                20
            })
        {
            // (Fast sessions read the others' keys more: their reads across
            // partitions are what the opt-in changes.)
            let owner = self.rng.below(CLIENTS as u64) as usize;
            let xid = self.send_raw(c, wire::get(&key_path(owner, key), true));
            let peek = Op::Peek { owner, key };
            self.clients[c].in_flight.push_back((xid, peek));
        } else {
            let written = self.clients[c].written[key];
            let expect = written.checked_sub(1);
            let watch = self.rng.chance(25);
            let xid = self.send_raw(c, wire::get(&path, watch));
            let get = Op::Get { key, expect, watch };
            self.clients[c].in_flight.push_back((xid, get));
        }
    }

    /// A multi setting `key` and the client's next key; at two partitions,
    /// half of them also check (any version) a key on the other partition,
    /// so that the multi is a transaction of parts.
    fn send_multi(&mut self, c: usize, key: usize) {
        let keys = [key, (key + 1) % KEYS_PER_CLIENT];
        let abort = self.rng.chance(ABORT_PERCENT);
        let mut sets = Vec::new();
        let mut ops = Vec::new();
        for key in keys {
            let index = match abort {
                true => {
                    self.aborted_values += 1;
                    self.aborted_values
                }
                false => {
                    self.clients[c].written[key] += 1;
                    self.clients[c].written[key] - 1
                }
            };
            sets.push((key, index));
            ops.push(wire::set(&key_path(c, key), value(c, key, index)));
        }
        let engine = self.node().engine();
        let here = engine.partition_of(&key_path(c, key));
        let elsewhere = (0..CLIENTS)
            .map(|owner| key_path(owner, 0))
            .find(|path| engine.partition_of(path) != here);
        if let (Some(path), true) = (elsewhere, self.rng.chance(50)) {
            ops.push(Request::Check(CheckVersionRequest { path, version: -1 }));
            self.multis[2] += 1;
        }
        if abort {
            ops.push(Request::Check(CheckVersionRequest {
                path: key_path(c, key),
                version: i32::MAX,
            }));
        }
        let xid = self.send_raw(c, Request::Multi(ops));
        self.clients[c]
            .in_flight
            .push_back((xid, Op::Multi { sets, abort }));
    }

    /// What `engine` sent away, into `away`.
    fn count_away(&mut self, engine: &super::Engine) {
        for (sum, n) in self.away.iter_mut().zip(away_counts(engine)) {
            *sum += n;
        }
    }

    /// The process dies: unsynced batches and all connections are lost. It
    /// restarts from the durable log; clients resume their sessions and
    /// check that every acknowledged write survived.
    fn crash_and_restart(&mut self) {
        for c in 0..CLIENTS {
            self.receive(c);
        }
        let tail_seed = self.rng.next();
        if let Some(engine) = self.machine.crash(tail_seed) {
            self.count_away(&engine);
        }
        let seed = self.seed;
        self.machine
            .boot(engine_config(seed), self.now_ms)
            .unwrap_or_else(|e| panic!("seed {seed}: cannot recover: {e}"));
        self.collect();
        self.settle();
        assert!(
            self.node().engine().caught_up(),
            "seed {}: not caught up after restart",
            self.seed
        );
        for core in self.node().engine().cores.iter() {
            core.tree
                .check_invariants()
                .expect("tree invariants after restart");
        }
        for c in 0..CLIENTS {
            // A multi in flight survived whole or not at all: each key is
            // written by its client alone, in order, so a write survived
            // iff its key holds it or a later one.
            let survived = |engine: &super::Engine, key: usize, index: usize| {
                let path = key_path(c, key);
                let node = engine.cores[engine.partition_of(&path)].tree.node(&path);
                let seen = node.and_then(|n| index_of(n.data()));
                seen.is_some_and(|s| s >= index && s < ABORTED_FROM)
            };
            for (_, op) in &self.clients[c].in_flight {
                let Op::Multi { sets, abort: false } = op else {
                    continue;
                };
                let engine = self.machine.engine().expect("the server runs");
                let parts: Vec<bool> = (sets.iter())
                    .map(|&(key, index)| survived(engine, key, index))
                    .collect();
                assert!(
                    parts.iter().all(|&p| p == parts[0]),
                    "seed {}: client {c}'s multi {sets:?} survived the crash in part: {parts:?}",
                    self.seed
                );
            }
            // What survived of this client's writes: at least what was acked.
            for key in 0..KEYS_PER_CLIENT {
                let engine = self.node().engine();
                let path = key_path(c, key);
                let node = (engine.cores[engine.partition_of(&path)].tree)
                    .node(&path)
                    .expect("setup keys are durable");
                let seen = index_of(node.data());
                assert!(
                    seen.is_none_or(|i| i < ABORTED_FROM),
                    "seed {}: client {c} key {key} holds {seen:?}, a value of a multi that failed",
                    self.seed
                );
                let acked = self.clients[c].acked[key];
                assert!(
                    seen >= acked,
                    "seed {}: client {c} key {key}: acknowledged write {acked:?} lost (found {seen:?})",
                    self.seed
                );
                // Writes in flight at the crash survived or not; continue from what is there.
                self.clients[c].written[key] = seen.map_or(0, |i| i + 1);
                self.clients[c].acked[key] = seen;
            }
            self.clients[c].in_flight.clear();
            self.clients[c].wire.inbox.clear();
            self.clients[c].watching.new_connection();
            self.clients[c].conn = self.fresh_conn();
            self.connect(c);
        }
        self.settle();
        for c in 0..CLIENTS {
            self.receive(c);
            assert!(
                self.clients[c].wire.session.is_some(),
                "seed {}: durable session {c} was lost",
                self.seed
            );
            self.restore_watches(c);
        }
        self.settle();
    }

    /// Restores the client's data watches on its new connection.
    fn restore_watches(&mut self, c: usize) {
        let client = &self.clients[c];
        let Some(restore) = client.watching.restoring(client.wire.last_zxid) else {
            return;
        };
        let bytes = wire::request_frame(-8, &restore);
        let conn = client.conn;
        self.node()
            .engine_mut()
            .handle(Input::Frames { conn, bytes });
        self.collect();
    }
}

/// What client `c` opts into (`stoa_tree::FAST`), if anything: at two
/// partitions, client 2 (keys on partition 0) in every seed, reads,
/// watches or both by turns, and client 1 (partition 1) in one seed in
/// four, both; client 0 stays plain.
fn fast_words(seed: u64, c: usize) -> Option<&'static str> {
    if seed.is_multiple_of(2) {
        return None;
    }
    match c {
        2 => Some(["reads", "watches", "reads,watches"][(seed / 2 % 3) as usize]),
        1 if (seed / 2).is_multiple_of(4) => Some("watches reads"),
        _ => None,
    }
}

/// One seed in four rolls the epoch every few dozen zxids; odd seeds run
/// two partitions (two raft groups recovering from one torn log), client
/// 1's keys in a group on the second, and half of those apply by
/// partition (`engine/by_partition.rs`).
fn engine_config(seed: u64) -> EngineConfig {
    let partitions = 1 + (seed % 2) as u32;
    EngineConfig {
        zxid_counter_limit: (seed % 4 == 1).then_some(24 + (seed % 41) as u32),
        partitions,
        partition_groups: match partitions {
            1 => Vec::new(),
            _ => vec!["/c1".into()],
        },
        apply_lag_seed: (seed % 4 == 3).then_some(seed),
        owned_threads_seed: (seed / 4).is_multiple_of(2).then_some(seed ^ 0x5eed),
        reconfig_enabled: seed.is_multiple_of(2),
        // Replies leave as values for the node's transport to encode, as
        // a server's with `io.threads` does, every other seed drawn apart
        // from the bits above.
        replies_encoded_by_writers: crate::session::splitmix64(seed ^ 0xe4c0de).is_multiple_of(2),
        ..config()
    }
}

/// Jobs `engine` sent away with a core, recalls that found the job still
/// held, jobs sent after a core still away, and jobs applying entries;
/// fast sessions' reads and events that skipped a wait.
fn away_counts(engine: &super::Engine) -> [u64; 6] {
    let counts = engine.cores.counts();
    [
        counts.sent,
        counts.waited,
        counts.followed,
        engine.stats.applies_sent_away,
        engine.stats.reads_fast,
        engine.stats.events_fast,
    ]
}

/// Runs one seed; returns the batches the node wrote inline, the events
/// the clients heard, and the multis applied, refused whole and of those
/// over two partitions.
fn run(seed: u64) -> (u64, usize, [u64; 3], [u64; 6]) {
    let mut sim = Sim::new(seed);
    for _ in 0..STEPS_PER_SEED {
        sim.step();
        let engine = sim.node().engine();
        // A core away is checked once back: reaching for it would recall it.
        for (_, core) in engine.cores.home_iter() {
            core.tree.check_invariants().expect("tree invariants");
        }
        if let Err(broken) = engine.check_invariants() {
            panic!("seed {seed}: {broken}");
        }
    }
    // Drain: everything sent is answered, and the final state holds every ack.
    sim.settle();
    for c in 0..CLIENTS {
        sim.receive(c);
        assert!(
            sim.clients[c].in_flight.is_empty(),
            "seed {seed}: client {c} left unanswered"
        );
    }
    sim.crash_and_restart();
    for c in 0..CLIENTS {
        sim.receive(c);
    }
    for (c, client) in sim.clients.iter().enumerate() {
        let lanes = client.watching.lanes.as_ref();
        if let Err(broken) =
            check_watch_order(seed, c, &client.watching.heard, &sim.writes_acked, lanes)
        {
            panic!("{broken}");
        }
    }
    let engine = sim.machine.engine().expect("the server runs");
    // Settled, every client has heard every event.
    let value_of = |(owner, key)| {
        let path = key_path(owner, key);
        let tree = &engine.cores[engine.partition_of(&path)].tree;
        index_of(tree.node(&path).expect("keys exist").data())
    };
    for (c, client) in sim.clients.iter().enumerate() {
        if let Err(why) = client.watching.check_unchanged(value_of) {
            panic!("seed {seed}: client {c}: {why}");
        }
    }
    if engine.cores.len() > 1 {
        let path = key_path(1, 0);
        assert!(
            engine.partition_of(&path) == 1 && engine.cores[1].tree.node(&path).is_some(),
            "seed {seed}: client 1's keys live on partition 1"
        );
    }
    let fired = (sim.clients.iter()).map(|c| c.watching.fired_count()).sum();
    // The last engine booted counts too.
    let mut away = sim.away;
    for (sum, n) in away.iter_mut().zip(away_counts(sim.node().engine())) {
        *sum += n;
    }
    (sim.node().log().inline_writes, fired, sim.multis, away)
}

/// A seed replays: run twice in one process, it exercises the same things
/// (see the ensemble simulator's `a_seed_replays_the_same_run`). Odd seeds
/// run two partitions; a quarter of them own their threads.
#[test]
fn a_seed_replays_the_same_run_on_one_server() {
    for seed in 0..8 {
        assert_eq!(
            run(seed),
            run(seed),
            "seed {seed} ran differently the second time"
        );
    }
}

#[test]
fn simulated_crashes_lose_no_acknowledged_write_and_keep_session_order() {
    match std::env::var("STOA_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => {
            run(seed);
        }
        None => {
            let (mut inline, mut fired, mut multis, mut away) = (0, 0, [0; 3], [0; 6]);
            for seed in seed_range(SEEDS_DEFAULT) {
                let (i, f, m, a) = run(seed);
                inline += i;
                fired += f;
                for (sum, n) in multis.iter_mut().zip(m) {
                    *sum += n;
                }
                for (sum, n) in away.iter_mut().zip(a) {
                    *sum += n;
                }
            }
            if std::env::var("STOA_SIM_VERBOSE").is_ok() {
                eprintln!(
                    "inline batches {inline}, events {fired}, multis applied, refused, over \
                     two partitions: {multis:?}, cores sent away, recalls that found the \
                     job held, jobs that followed a core, jobs applying entries, fast reads and \
                     fast events: {away:?}"
                );
            }
            // Cores went away, the engine reached for some before their
            // jobs had run, sent jobs after some, and sent entries to apply;
            // fast sessions' reads and events skipped waits.
            assert!(
                away.iter().all(|&n| n > 0),
                "cores sent away, recalls that waited, jobs followed, applying, fast reads, \
                 fast events: {away:?}"
            );
            // Crashes must also fall between batches the node synced itself.
            assert!(inline > 0, "no seed wrote a batch inline");
            assert!(fired > 0, "no client heard an event");
            assert!(
                multis.iter().all(|&n| n > 0),
                "multis applied, refused, over two partitions: {multis:?}"
            );
        }
    }
}

/// The seeds a simulator runs when `STOA_SIM_SEED` names none:
/// `STOA_SIM_SEEDS=N` runs 0..N, `A..B` runs A to B-1, and without it
/// 0..`default`.
pub(super) fn seed_range(default: u64) -> std::ops::Range<u64> {
    let seeds = std::env::var("STOA_SIM_SEEDS").unwrap_or_default();
    match seeds.split_once("..") {
        Some((a, b)) => a.parse().unwrap_or(0)..b.parse().unwrap_or(default),
        None => 0..seeds.parse().unwrap_or(default),
    }
}
