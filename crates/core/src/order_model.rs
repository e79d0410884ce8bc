//! A model of partitions that apply on threads of their own, to compare the
//! read rules they could keep (issue 23; docs/partitions.md, "Three read
//! rules, compared"). Seeded and pure: the tests check every rule's
//! histories, and `examples/order_model.rs` prints its figures.
//!
//! The world: one leader that orders writes (each committed when made),
//! two servers, and sessions making one call at a time on keys spread
//! over the partitions. Some writes are a `multi` of two keys on two
//! partitions: one entry in its first key's partition's log, with a part
//! for each partition, as the engine commits them. Every step, each partition of each server may take
//! its group's next committed entry in hand, and may apply one in hand:
//! each at its own speed, drawn per run, as threads on a loaded machine
//! run. A session's call is answered once its server can: a write once
//! the server has applied it, a read by its scheme's rule. Now and then a
//! session moves to the other server with what a standard client keeps,
//! one 64-bit zxid, as a reconnect does.
//!
//! The schemes:
//!
//! - [`Scheme::OneOrder`]: what Stoa does. Zxids from one dense counter;
//!   a server applies every partition's entries merged in zxid order
//!   (`ApplyOrder`), so a partition waits for the others' earlier entries,
//!   and reads are served at once.
//! - [`Scheme::Watermarks`]: the same zxids; each partition applies its
//!   items (its entries, and the parts other partitions' entries hold for
//!   it) along their chain as they come in hand (an item whose link a new
//!   leader did not know, once every zxid below it is in hand); a read waits for its
//!   partition's closed zxid to reach what the session saw
//!   (`ClosedWatermarks`).
//! - [`Scheme::Vectors`]: AGORA's per-partition numbering with vector
//!   stamps (`VectorStamp`); a `multi` gets one stamp numbered by every
//!   partition it touches (§IV-E); each partition applies in its own
//!   numbering as parts come in hand; a read waits for its partition to
//!   reach the session's stamp. On a reconnect the new server gets only
//!   the stamp's scalar.
//! - [`Scheme::Unwaited`]: each partition applies at once and every read
//!   is served at once: AGORA's fast reads, the baseline of the waits.

pub mod history;

use std::collections::{BTreeMap, VecDeque};

use crate::apply_order::{ApplyOrder, Cut};
use crate::closed_watermarks::ClosedWatermarks;
use crate::sim_rng::Rng;
use crate::vector_stamps::{VectorReplica, VectorSequencer, VectorStamp};
use history::{History, Op, WriteId};
use stoa_tree::UNKNOWN_LINK;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    OneOrder,
    Watermarks,
    Vectors,
    Unwaited,
}

impl Scheme {
    pub const ALL: [Scheme; 4] = [
        Scheme::OneOrder,
        Scheme::Watermarks,
        Scheme::Vectors,
        Scheme::Unwaited,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scheme::OneOrder => "one order",
            Scheme::Watermarks => "closed watermarks",
            Scheme::Vectors => "vector stamps",
            Scheme::Unwaited => "unwaited (fast reads)",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub scheme: Scheme,
    pub partitions: usize,
    /// Key `k` lives on partition `k % partitions`.
    pub keys: usize,
    pub sessions: usize,
    pub calls_per_session: usize,
    pub write_percent: u64,
    /// Of the writes, how many are a `multi` of two keys on two partitions.
    pub multi_percent: u64,
    /// Of the writes, how many a new leader makes first: every chain
    /// starts anew after its seal, with an item that names no item before
    /// (the seal itself and lost zxids are left out).
    pub new_leader_percent: u64,
    /// Of a session's calls, how many move it to the other server first.
    pub reconnect_percent: u64,
    pub seed: u64,
}

/// What the run cost, in steps (every partition thread may act once a step).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Figures {
    pub reads: u64,
    /// Reads not answerable the step they arrived.
    pub reads_waited: u64,
    /// Steps from arrival to answer, over every read.
    pub read_wait_steps: u64,
    pub writes: u64,
    /// Parts applied (a write's, on each partition it touches), on both
    /// servers.
    pub applies: u64,
    /// Steps from in hand to applied, over every part applied.
    pub apply_wait_steps: u64,
    pub reconnects: u64,
    /// Closed watermarks: parts applied, and the steps from each one's
    /// apply until every partition of its server has closed its zxid. Only
    /// then may its events go out to a session in zxid order: the wait
    /// fast watches would skip. (Under the one order events go out as
    /// entries apply.)
    pub events: u64,
    pub event_wait_steps: u64,
    /// Steps the run took.
    pub steps: u64,
}

pub struct Run {
    pub history: History,
    pub figures: Figures,
}

/// A write, in the log of its first key's partition (its owner): one
/// entry, whatever the partitions it touches.
struct Entry {
    id: WriteId,
    zxid: i64,
    stamp: VectorStamp,
    parts: Vec<Part>,
}

struct Part {
    partition: usize,
    key: usize,
    /// The zxid of the partition's item before this one.
    previous: i64,
}

/// A part in hand on a partition that applies on its own.
struct Item {
    key: usize,
    id: WriteId,
    zxid: i64,
    stamp: VectorStamp,
    since: u64,
}

struct Server {
    /// Each partition's log: entries in hand, and (one order) applied.
    in_hand: Vec<usize>,
    applied: Vec<usize>,
    /// One order: the step each entry in hand and not applied came.
    waiting_since: Vec<VecDeque<u64>>,
    /// The other rules: each partition's items in hand, by zxid (by
    /// sequence number under vector stamps).
    items: Vec<BTreeMap<i64, Item>>,
    /// Each partition's chance in a hundred to act, each step.
    speed: Vec<u64>,
    values: Vec<WriteId>,
    order: ApplyOrder<()>,
    marks: ClosedWatermarks,
    vectors: VectorReplica,
    /// Closed watermarks: the zxid of each part applied whose events wait
    /// for every partition to close it, and the step it applied.
    events: Vec<(i64, u64)>,
}

enum Call {
    Read { key: usize, since: u64 },
    Write { owner: usize, entry: usize },
}

struct Session {
    server: usize,
    seen_zxid: i64,
    seen_stamp: VectorStamp,
    calls_left: usize,
    call: Option<Call>,
}

struct World<'c> {
    config: &'c Config,
    rng: Rng,
    logs: Vec<Vec<Entry>>,
    next_zxid: i64,
    /// Each partition's last item's zxid, as the leader hands them out.
    last_item: Vec<i64>,
    sequencer: VectorSequencer,
    servers: Vec<Server>,
    sessions: Vec<Session>,
    history: History,
    figures: Figures,
    step: u64,
}

/// Runs the model to the end: every session's calls made and answered.
pub fn run(config: &Config) -> Run {
    assert!(config.partitions >= 1 && config.keys >= config.partitions && config.sessions >= 1);
    let mut rng = Rng(config.seed);
    let servers = (0..2)
        .map(|_| Server {
            in_hand: vec![0; config.partitions],
            applied: vec![0; config.partitions],
            waiting_since: vec![VecDeque::new(); config.partitions],
            items: (0..config.partitions).map(|_| BTreeMap::new()).collect(),
            // From a stalled thread to one that keeps up.
            speed: (0..config.partitions).map(|_| 10 + rng.below(91)).collect(),
            values: vec![0; config.keys],
            order: ApplyOrder::recover(config.partitions, &Cut::default()),
            marks: ClosedWatermarks::new(config.partitions, 0),
            vectors: VectorReplica::new(config.partitions),
            events: Vec::new(),
        })
        .collect();
    let sessions = (0..config.sessions)
        .map(|s| Session {
            server: s % 2,
            seen_zxid: 0,
            seen_stamp: VectorStamp::zero(config.partitions),
            calls_left: config.calls_per_session,
            call: None,
        })
        .collect();
    let mut world = World {
        config,
        rng,
        logs: (0..config.partitions).map(|_| Vec::new()).collect(),
        next_zxid: 1,
        last_item: vec![0; config.partitions],
        sequencer: VectorSequencer::new(config.partitions),
        servers,
        sessions,
        history: History {
            sessions: vec![Vec::new(); config.sessions],
            versions: vec![Vec::new(); config.keys],
        },
        figures: Figures::default(),
        step: 0,
    };
    let limit = 1_000 + 200 * (config.calls_per_session * config.sessions) as u64;
    while !world.done() {
        assert!(world.step < limit, "the model made no progress: {config:?}");
        world.step();
    }
    world.figures.steps = world.step;
    Run {
        history: world.history,
        figures: world.figures,
    }
}

impl World<'_> {
    fn done(&self) -> bool {
        (self.sessions.iter()).all(|s| s.calls_left == 0 && s.call.is_none())
    }

    fn step(&mut self) {
        self.step += 1;
        for server in 0..self.servers.len() {
            for partition in self.shuffled(self.config.partitions) {
                let speed = self.servers[server].speed[partition];
                if self.rng.chance(speed) {
                    self.take_in_hand(server, partition);
                }
                if self.rng.chance(speed) {
                    self.apply(server, partition);
                }
            }
        }
        for session in self.shuffled(self.sessions.len()) {
            self.advance(session);
        }
        if self.config.scheme == Scheme::Watermarks {
            self.release_events();
        }
    }

    /// Events whose zxid every partition has closed go out.
    fn release_events(&mut self) {
        for srv in &mut self.servers {
            let prefix = (0..self.config.partitions)
                .map(|p| srv.marks.closed(p))
                .min()
                .expect("a partition");
            let (step, figures) = (self.step, &mut self.figures);
            srv.events.retain(|&(zxid, applied)| {
                let waits = zxid > prefix;
                if !waits {
                    figures.events += 1;
                    figures.event_wait_steps += step - applied;
                }
                waits
            });
        }
    }

    fn shuffled(&mut self, n: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            order.swap(i, self.rng.below(i as u64 + 1) as usize);
        }
        order
    }

    fn take_in_hand(&mut self, server: usize, owner: usize) {
        let scheme = self.config.scheme;
        let srv = &mut self.servers[server];
        let index = srv.in_hand[owner];
        let Some(entry) = self.logs[owner].get(index) else {
            return;
        };
        srv.in_hand[owner] += 1;
        if scheme == Scheme::OneOrder {
            srv.waiting_since[owner].push_back(self.step);
            (srv.order).committed(owner, index as u64 + 1, Some(entry.zxid), ());
            return;
        }
        // Every part is in hand with its entry, on its own partition.
        for part in &entry.parts {
            let p = part.partition;
            if scheme != Scheme::Vectors {
                srv.marks.committed(p, entry.zxid, part.previous);
            }
            let at = match scheme {
                Scheme::Vectors => entry.stamp.get(p) as i64,
                _ => entry.zxid,
            };
            let item = Item {
                key: part.key,
                id: entry.id,
                zxid: entry.zxid,
                stamp: entry.stamp.clone(),
                since: self.step,
            };
            srv.items[p].insert(at, item);
        }
    }

    /// The partition's thread applies its next entry or part, if its rule
    /// lets it now.
    fn apply(&mut self, server: usize, partition: usize) {
        let srv = &mut self.servers[server];
        // When what applies came in hand, and how many parts it holds.
        let (since, parts) = match self.config.scheme {
            Scheme::OneOrder => {
                let index = srv.applied[partition];
                if index == srv.in_hand[partition] {
                    return;
                }
                let entry = &self.logs[partition][index];
                // Its turn in the one order: every zxid below is applied.
                if entry.zxid != srv.order.applied() + 1 {
                    return;
                }
                let ready = srv.order.next_ready().expect("the next zxid is in hand");
                assert_eq!((ready.partition, ready.zxid), (partition, Some(entry.zxid)));
                srv.applied[partition] += 1;
                for part in &entry.parts {
                    srv.values[part.key] = entry.id;
                }
                let since = srv.waiting_since[partition].pop_front().unwrap();
                (since, entry.parts.len() as u64)
            }
            Scheme::Vectors => {
                let next = srv.vectors.applied(partition) as i64 + 1;
                let Some(item) = srv.items[partition].remove(&next) else {
                    return;
                };
                srv.vectors.apply(partition, &item.stamp);
                srv.values[item.key] = item.id;
                (item.since, 1)
            }
            Scheme::Watermarks | Scheme::Unwaited => {
                let Some(next) = srv.marks.next(partition) else {
                    return;
                };
                let item = srv.items[partition].remove(&next).unwrap();
                srv.marks.apply(partition, item.zxid);
                srv.values[item.key] = item.id;
                if self.config.scheme == Scheme::Watermarks {
                    srv.events.push((item.zxid, self.step));
                }
                (item.since, 1)
            }
        };
        self.figures.applies += parts;
        self.figures.apply_wait_steps += parts * (self.step - since);
    }

    fn advance(&mut self, session: usize) {
        match self.sessions[session].call {
            Some(Call::Read { key, since }) => self.try_read(session, key, since),
            Some(Call::Write { owner, entry }) => self.try_answer_write(session, owner, entry),
            // A session makes its next call a step or so after its answer.
            None if self.sessions[session].calls_left > 0 && self.rng.chance(50) => {
                self.call(session)
            }
            None => {}
        }
    }

    fn call(&mut self, session: usize) {
        self.sessions[session].calls_left -= 1;
        if self.rng.chance(self.config.reconnect_percent) {
            self.reconnect(session);
        }
        let key = self.rng.below(self.config.keys as u64) as usize;
        if self.rng.chance(self.config.write_percent) {
            self.write(session, key);
        } else {
            self.figures.reads += 1;
            self.sessions[session].call = Some(Call::Read {
                key,
                since: self.step,
            });
            self.try_read(session, key, self.step);
        }
    }

    /// The session moves to the other server, carrying the one number a
    /// client keeps; it is taken once that server has caught up with it,
    /// as ZooKeeper's servers refuse a client that has seen more.
    fn reconnect(&mut self, session: usize) {
        let to = 1 - self.sessions[session].server;
        let srv = &self.servers[to];
        let s = &mut self.sessions[session];
        let taken = match self.config.scheme {
            Scheme::OneOrder => srv.order.applied() >= s.seen_zxid,
            Scheme::Watermarks | Scheme::Unwaited => srv.marks.known() >= s.seen_zxid,
            Scheme::Vectors => srv.vectors.scalar() >= s.seen_stamp.scalar(),
        };
        if !taken {
            return;
        }
        self.figures.reconnects += 1;
        s.server = to;
        // The server knows only the client's scalar, not which partitions
        // it saw.
        s.seen_stamp = VectorStamp::zero(self.config.partitions);
    }

    fn write(&mut self, session: usize, key: usize) {
        let p = self.config.partitions;
        let mut keys = vec![key];
        if p > 1 && self.rng.chance(self.config.multi_percent) {
            let other = loop {
                let other = self.rng.below(self.config.keys as u64) as usize;
                if other % p != key % p {
                    break other;
                }
            };
            keys.push(other);
        }
        if self.rng.chance(self.config.new_leader_percent) {
            self.last_item.fill(UNKNOWN_LINK);
        }
        let id = self.figures.writes + 1;
        let zxid = self.next_zxid;
        self.next_zxid += 1;
        let mut parts = Vec::with_capacity(keys.len());
        for &key in &keys {
            let partition = key % p;
            let previous = std::mem::replace(&mut self.last_item[partition], zxid);
            parts.push(Part {
                partition,
                key,
                previous,
            });
            self.history.versions[key].push(id);
        }
        let touched: Vec<usize> = parts.iter().map(|part| part.partition).collect();
        let stamp = (self.sequencer).stamp(&touched, &self.sessions[session].seen_stamp);
        let owner = key % p;
        self.logs[owner].push(Entry {
            id,
            zxid,
            stamp,
            parts,
        });
        self.history.sessions[session].push(Op::Write { keys, id });
        self.figures.writes += 1;
        let entry = self.logs[owner].len() - 1;
        self.sessions[session].call = Some(Call::Write { owner, entry });
    }

    /// A write is answered once its server applied all of it.
    fn try_answer_write(&mut self, session: usize, owner: usize, entry: usize) {
        let s = &mut self.sessions[session];
        let srv = &self.servers[s.server];
        let written = &self.logs[owner][entry];
        let applied = match self.config.scheme {
            Scheme::OneOrder => srv.order.applied() >= written.zxid,
            Scheme::Vectors => (written.parts.iter()).all(|part| {
                srv.vectors.applied(part.partition) >= written.stamp.get(part.partition)
            }),
            Scheme::Watermarks | Scheme::Unwaited => {
                (written.parts.iter()).all(|part| srv.marks.applied(part.partition) >= written.zxid)
            }
        };
        if !applied {
            return;
        }
        s.seen_zxid = s.seen_zxid.max(written.zxid);
        // The reply carries what the partitions it touched have seen, as
        // a read's would.
        for part in &written.parts {
            s.seen_stamp.merge(srv.vectors.clock(part.partition));
        }
        s.call = None;
    }

    fn try_read(&mut self, session: usize, key: usize, since: u64) {
        let partition = key % self.config.partitions;
        let s = &mut self.sessions[session];
        let srv = &self.servers[s.server];
        match self.config.scheme {
            Scheme::OneOrder => {
                let applied = srv.order.applied();
                assert!(applied >= s.seen_zxid, "a server behind its session");
                s.seen_zxid = applied;
            }
            Scheme::Watermarks => match srv.marks.serve(partition, s.seen_zxid) {
                Some(zxid) => s.seen_zxid = zxid,
                None => return,
            },
            Scheme::Vectors => match srv.vectors.serve(partition, &s.seen_stamp) {
                Some(stamp) => s.seen_stamp = stamp,
                None => return,
            },
            Scheme::Unwaited => {}
        }
        let saw = srv.values[key];
        s.call = None;
        self.history.sessions[session].push(Op::Read { key, saw });
        if self.step > since {
            self.figures.reads_waited += 1;
            self.figures.read_wait_steps += self.step - since;
        }
    }
}

#[cfg(test)]
mod tests;
