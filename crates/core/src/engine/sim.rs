//! A seeded simulation of one server and its clients: no sockets, files or
//! clocks. Clients pipeline writes and reads on keys of their own; WAL
//! batches become durable in random prefixes; the server crashes, losing
//! whatever was not yet durable, and restarts from the durable log. After
//! every step the contract is checked: replies in request order, a read sees
//! exactly its session's preceding writes, and nothing acknowledged is lost.
//! A failing seed replays exactly: `STOA_SIM_SEED=n cargo test sim`.

use std::collections::VecDeque;
use std::net::SocketAddr;

use raft::eraftpb::{Entry, HardState};
use stoa_proto::codes::ErrorCode;
use stoa_proto::frame::{decode_reply_frame, encode_connect_request, encode_request, FrameDecoder};
use stoa_proto::jute::{Reader, Record};
use stoa_proto::records::{
    Acl, ConnectRequest, ConnectResponse, CreateRequest, GetDataRequest, GetDataResponse,
    RequestHeader, SetDataRequest,
};
use stoa_proto::request::Request;

use super::tests::{config, empty};
use super::{Engine, Input, Recovered};

const CLIENTS: usize = 3;
const KEYS_PER_CLIENT: usize = 3;
const STEPS_PER_SEED: usize = 400;
const SEEDS_DEFAULT: u64 = 40;
const IN_FLIGHT_MAX: usize = 6;
const T0_MS: i64 = 1_700_000_000_000;

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
    engine: Engine,
    now_ms: i64,
    /// Emitted by the engine, not yet durable: (ready number, entries, hard state).
    unsynced: VecDeque<(u64, Vec<Entry>, Option<HardState>)>,
    durable: Vec<Entry>,
    durable_hard_state: HardState,
    clients: Vec<Client>,
    next_conn: u64,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let engine = Engine::new(config(), empty(), T0_MS).expect("engine starts");
        let mut sim = Sim {
            rng: Rng(seed),
            seed,
            engine,
            now_ms: T0_MS,
            unsynced: VecDeque::new(),
            durable: Vec::new(),
            durable_hard_state: HardState::default(),
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
        self.engine.handle(Input::Accepted { conn, peer });
        let (session_id, passwd) = self.clients[c].session.clone().unwrap_or((0, vec![0; 16]));
        let req = ConnectRequest {
            time_out: 30_000,
            session_id,
            passwd,
            ..Default::default()
        };
        let mut bytes = Vec::new();
        encode_connect_request(&mut bytes, &req);
        self.engine.handle(Input::Frames { conn, bytes });
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
        self.engine.handle(Input::Frames { conn, bytes });
        self.collect();
        xid
    }

    fn collect(&mut self) {
        let out = self.engine.take_output();
        assert!(
            out.fatal.is_none(),
            "seed {}: fatal {:?}",
            self.seed,
            out.fatal
        );
        for job in out.persists {
            self.unsynced
                .push_back((job.number, job.entries, job.hard_state));
        }
        for (conn, bytes) in out.sends {
            if let Some(client) = self.clients.iter_mut().find(|c| c.conn == conn) {
                client.inbox.extend(bytes);
            }
        }
    }

    /// Makes the oldest `n` WAL batches durable, in order, as the WAL does.
    fn sync(&mut self, n: usize) {
        let mut last = None;
        for _ in 0..n {
            let Some((number, entries, hard_state)) = self.unsynced.pop_front() else {
                break;
            };
            for e in entries {
                self.durable.retain(|old| old.index < e.index);
                self.durable.push(e);
            }
            if let Some(hs) = hard_state {
                self.durable_hard_state = hs;
            }
            last = Some(number);
        }
        if let Some(number) = last {
            self.engine.handle(Input::Persisted { number });
            self.collect();
        }
    }

    fn settle(&mut self) {
        while !self.unsynced.is_empty() {
            self.sync(self.unsynced.len());
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
                self.engine.set_time(self.now_ms);
                self.engine.tick();
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
        self.unsynced.clear();
        let recovered = Recovered {
            entries: self.durable.clone(),
            hard_state: self.durable_hard_state.clone(),
            ..empty()
        };
        self.engine = Engine::new(config(), recovered, self.now_ms).expect("engine restarts");
        self.collect();
        self.settle();
        assert!(
            self.engine.caught_up(),
            "seed {}: not caught up after restart",
            self.seed
        );
        self.engine
            .tree()
            .check_invariants()
            .expect("tree invariants after restart");
        for c in 0..CLIENTS {
            // What survived of this client's writes: at least what was acked.
            for key in 0..KEYS_PER_CLIENT {
                let node = self
                    .engine
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

fn run(seed: u64) {
    let mut sim = Sim::new(seed);
    for _ in 0..STEPS_PER_SEED {
        sim.step();
        sim.engine
            .tree()
            .check_invariants()
            .expect("tree invariants");
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
