//! A seeded simulation of one server and its clients: no sockets, files or
//! clocks. The server runs the production node driver over `SimLog` and an
//! in-memory snapshot store (`crate::node::sim_disk`). Clients pipeline
//! writes and reads on keys of their own; the WAL writer syncs random
//! groups of batches; the server crashes, keeping what `SimLog` keeps (the
//! synced log, perhaps a torn or damaged prefix of the rest), and restarts
//! through the production recovery. After
//! every step the contract is checked: replies in request order, a read sees
//! exactly its session's preceding writes, and nothing acknowledged is lost.
//! A failing seed replays exactly: `STOA_SIM_SEED=n cargo test sim`.

use std::collections::VecDeque;
use std::net::SocketAddr;

use stoa_proto::codes::ErrorCode;
use stoa_proto::frame::{decode_reply_frame, encode_connect_request, encode_request, FrameDecoder};
use stoa_proto::jute::{Reader, Record};
use stoa_proto::records::{
    Acl, ConnectRequest, ConnectResponse, CreateRequest, GetDataRequest, GetDataResponse,
    RequestHeader, SetDataRequest,
};
use stoa_proto::request::Request;

use super::tests::config;
use super::{Engine, EngineConfig, Input};
use crate::node::outbox::Outbox;
use crate::node::sim_disk::{SimSnapshots, SimWal};
use crate::node::{self, Node};

const CLIENTS: usize = 3;
const KEYS_PER_CLIENT: usize = 3;
const STEPS_PER_SEED: usize = 400;
const SEEDS_DEFAULT: u64 = 40;
const IN_FLIGHT_MAX: usize = 6;
const T0_MS: i64 = 1_700_000_000_000;
const PARTITION: u32 = 0;

type SimNode = Node<SimWal, SimSnapshots>;

/// splitmix64: small, seedable, and the same on every platform (the
/// ensemble simulator draws from it too).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        let z = crate::session::splitmix64(self.0);
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

enum Op {
    /// Writes the key's value number `index` (this client's write order).
    Set { key: usize, index: usize },
    /// Must see exactly the value written last before it was sent.
    Get { key: usize, expect: Option<usize> },
}

struct Client {
    conn: u64,
    session: Option<(i64, Vec<u8>)>,
    handshaken: bool,
    next_xid: i32,
    in_flight: VecDeque<(i32, Op)>,
    inbox: Vec<u8>,
    /// Per key: number of values written (sent) so far, and the highest
    /// acknowledged one.
    written: Vec<usize>,
    acked: Vec<Option<usize>>,
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
    node: SimNode,
    now_ms: i64,
    clients: Vec<Client>,
    next_conn: u64,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let node = start(seed, SimWal::default(), SimSnapshots::default(), T0_MS);
        let mut sim = Sim {
            rng: Rng(seed),
            seed,
            node,
            now_ms: T0_MS,
            clients: Vec::new(),
            next_conn: 1,
        };
        for _ in 0..CLIENTS {
            let conn = sim.fresh_conn();
            sim.clients.push(Client {
                conn,
                session: None,
                handshaken: false,
                next_xid: 1,
                in_flight: VecDeque::new(),
                inbox: Vec::new(),
                written: vec![0; KEYS_PER_CLIENT],
                acked: vec![None; KEYS_PER_CLIENT],
            });
        }
        sim.setup();
        sim
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
                let create = CreateRequest {
                    path,
                    data: Vec::new(),
                    acl: vec![Acl::open_unsafe()],
                    flags: 0,
                };
                self.send_raw(c, Request::Create(create));
            }
        }
        self.settle();
        for c in 0..CLIENTS {
            // The creates' replies: drop them (nothing is in the model yet).
            self.clients[c].inbox.clear();
            self.clients[c].next_xid = 1_000;
        }
    }

    fn connect(&mut self, c: usize) {
        let peer: SocketAddr = "127.0.0.1:5000".parse().expect("literal address");
        let conn = self.clients[c].conn;
        self.node
            .engine_mut()
            .handle(Input::Accepted { conn, peer });
        let (session_id, passwd) = self.clients[c].session.clone().unwrap_or((0, vec![0; 16]));
        let req = ConnectRequest {
            time_out: 30_000,
            session_id,
            passwd,
            ..Default::default()
        };
        let mut bytes = Vec::new();
        encode_connect_request(&mut bytes, &req);
        self.node.engine_mut().handle(Input::Frames { conn, bytes });
        self.clients[c].handshaken = false;
        self.collect();
    }

    fn send_raw(&mut self, c: usize, request: Request) -> i32 {
        let client = &mut self.clients[c];
        let xid = client.next_xid;
        client.next_xid += 1;
        let mut bytes = Vec::new();
        encode_request(
            &mut bytes,
            &RequestHeader {
                xid,
                kind: request.opcode() as i32,
            },
            &request,
        );
        let conn = client.conn;
        self.node.engine_mut().handle(Input::Frames { conn, bytes });
        self.collect();
        xid
    }

    /// Carries out the engine's output through the node driver.
    fn collect(&mut self) {
        let mut out = Outbox::default();
        if let Err(reason) = self.node.flush(&mut out) {
            panic!("seed {}: fatal: {reason}", self.seed);
        }
        for (conn, bytes) in out.sends {
            if let Some(client) = self.clients.iter_mut().find(|c| c.conn == conn) {
                client.inbox.extend(bytes);
            }
        }
    }

    /// One pass of the WAL writer: up to `n` queued batches written and
    /// synced as a group; and now and then the snapshot thread runs.
    fn sync(&mut self, n: usize) {
        if let Some(result) = self.node.log_mut().write_group(n) {
            let token = result.unwrap_or_else(|e| panic!("seed {}: WAL: {e}", self.seed));
            self.node.on_durable(token);
        }
        for done in self.node.snapshots_mut().run_queued() {
            let result = self.node.on_snapshot_done(done);
            result.unwrap_or_else(|e| panic!("seed {}: {e}", self.seed));
        }
        self.collect();
    }

    fn settle(&mut self) {
        while self.node.log().queued() > 0 || self.node.snapshots().queued() > 0 {
            self.sync(self.node.log().queued());
        }
    }

    /// Parses the client's inbox and checks every reply against the model.
    fn receive(&mut self, c: usize) {
        let bytes = std::mem::take(&mut self.clients[c].inbox);
        let decoder = FrameDecoder::new(1 << 20);
        let mut at = 0;
        while let Some((used, body)) = decoder
            .decode(&bytes[at..])
            .expect("server frames are well formed")
        {
            at += used;
            let client = &mut self.clients[c];
            if !client.handshaken {
                client.handshaken = true;
                let r = ConnectResponse::decode(&mut Reader::new(body)).expect("connect response");
                client.session = (r.session_id != 0).then(|| (r.session_id, r.passwd.clone()));
                continue;
            }
            let (header, rest) = decode_reply_frame(body).expect("reply header");
            if header.xid < 0 {
                continue; // pings, notifications
            }
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
            match op {
                Op::Set { key, index } => {
                    let acked = &mut client.acked[key];
                    assert!(
                        acked.is_none_or(|a| a < index),
                        "seed {}: acks out of order",
                        self.seed
                    );
                    *acked = Some(index);
                }
                Op::Get { key, expect } => {
                    let reply =
                        GetDataResponse::decode(&mut Reader::new(rest)).expect("getData reply");
                    let seen = index_of(&reply.data);
                    assert_eq!(
                        seen, expect,
                        "seed {}: client {c} key {key}: read {seen:?}, its last write was {expect:?}",
                        self.seed
                    );
                }
            }
        }
        assert_eq!(at, bytes.len(), "partial frame");
    }

    fn step(&mut self) {
        match self.rng.below(100) {
            0..=44 => {
                let c = self.rng.below(CLIENTS as u64) as usize;
                if self.clients[c].handshaken && self.clients[c].in_flight.len() < IN_FLIGHT_MAX {
                    let key = self.rng.below(KEYS_PER_CLIENT as u64) as usize;
                    self.send_op(c, key);
                }
            }
            45..=74 => {
                let n = 1 + self.rng.below(3) as usize;
                self.sync(n);
            }
            75..=93 => {
                for c in 0..CLIENTS {
                    self.receive(c);
                }
            }
            94..=97 => {
                self.now_ms += 10;
                let engine = self.node.engine_mut();
                engine.set_time(self.now_ms);
                engine.tick();
                self.collect();
            }
            _ => self.crash_and_restart(),
        }
    }

    fn send_op(&mut self, c: usize, key: usize) {
        let path = key_path(c, key);
        if self.rng.chance(60) {
            let index = self.clients[c].written[key];
            self.clients[c].written[key] += 1;
            let set = SetDataRequest {
                path,
                data: value(c, key, index),
                version: -1,
            };
            let xid = self.send_raw(c, Request::SetData(set));
            self.clients[c]
                .in_flight
                .push_back((xid, Op::Set { key, index }));
        } else {
            let written = self.clients[c].written[key];
            let expect = written.checked_sub(1);
            let xid = self.send_raw(c, Request::GetData(GetDataRequest { path, watch: false }));
            self.clients[c]
                .in_flight
                .push_back((xid, Op::Get { key, expect }));
        }
    }

    /// The process dies: unsynced batches and all connections are lost. It
    /// restarts from the durable log; clients resume their sessions and
    /// check that every acknowledged write survived.
    fn crash_and_restart(&mut self) {
        for c in 0..CLIENTS {
            self.receive(c);
        }
        // A stand-in takes the node's place while the disk is moved to the
        // restarted one.
        let stand_in = start(
            self.seed,
            SimWal::default(),
            SimSnapshots::default(),
            self.now_ms,
        );
        let (_, mut wal, mut snapshots) = std::mem::replace(&mut self.node, stand_in).into_parts();
        wal.crash(self.rng.next());
        snapshots.crash();
        self.node = start(self.seed, wal, snapshots, self.now_ms);
        self.collect();
        self.settle();
        assert!(
            self.node.engine().caught_up(),
            "seed {}: not caught up after restart",
            self.seed
        );
        self.node
            .engine()
            .tree()
            .check_invariants()
            .expect("tree invariants after restart");
        for c in 0..CLIENTS {
            // What survived of this client's writes: at least what was acked.
            for key in 0..KEYS_PER_CLIENT {
                let node = self
                    .node
                    .engine()
                    .tree()
                    .node(&key_path(c, key))
                    .expect("setup keys are durable");
                let seen = index_of(node.data());
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
            self.clients[c].inbox.clear();
            self.clients[c].conn = self.fresh_conn();
            self.connect(c);
        }
        self.settle();
        for c in 0..CLIENTS {
            self.receive(c);
            assert!(
                self.clients[c].session.is_some(),
                "seed {}: durable session {c} was lost",
                self.seed
            );
        }
    }
}

/// A server started from `wal` and `snapshots` through the production
/// recovery.
/// One seed in four rolls the epoch every few dozen zxids.
fn start(seed: u64, mut wal: SimWal, snapshots: SimSnapshots, now_ms: i64) -> SimNode {
    let replay = wal.recover();
    let newest = node::load_newest(&snapshots.store).expect("the store lists");
    let recovered = node::recovered(newest, &replay, PARTITION).expect("recovery");
    let config = EngineConfig {
        zxid_counter_limit: (seed % 4 == 1).then_some(24 + (seed % 41) as u32),
        ..config()
    };
    let engine = Engine::new(config, recovered, now_ms).expect("engine starts");
    Node::new(engine, wal, snapshots)
}

fn run(seed: u64) {
    let mut sim = Sim::new(seed);
    for _ in 0..STEPS_PER_SEED {
        sim.step();
        let engine = sim.node.engine();
        engine.tree().check_invariants().expect("tree invariants");
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
}

#[test]
fn simulated_crashes_lose_no_acknowledged_write_and_keep_session_order() {
    match std::env::var("STOA_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => run(seed),
        None => {
            for seed in 0..SEEDS_DEFAULT {
                run(seed);
            }
        }
    }
}
