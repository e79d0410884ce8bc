//! The session gate: the client side of a server. It owns the connections
//! (their identities, handshakes and early frames), the sessions with
//! their FIFO queues of pending replies, the handshakes in flight, and the
//! bytes each connection is owed until the next flush. The partition core
//! decides what to answer; the gate keeps each session's answers in the
//! order its requests came, and encodes them (or, when the connections'
//! writers run on I/O threads, hands them over as values for the writers
//! to encode).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use rustc_hash::FxHashMap;
use stoa_proto::codes::ErrorCode;
use stoa_proto::frame::{encode_connect_response, encode_reply, OutgoingFrame};
use stoa_proto::opcode::KeeperState;
use stoa_proto::records::{ConnectResponse, Id, ReplyHeader, WatcherEvent};
use stoa_proto::records::{GetDataResponse, SyncResponse};
use stoa_proto::response::Response;
use stoa_tree::ReplyShape;

use super::handoff::{Identity, WriteOutcome};

use crate::session::{password_for, Pending, Session, SessionId};
use crate::watch::{ChangeKind, ConnId};

/// First allocation of a connection's outgoing buffer in one flush.
const OUT_BUF_BYTES_INITIAL: usize = 2048;

/// What each connection is owed until the next flush.
enum Owed {
    /// Encoded here, one buffer per connection.
    Bytes(FxHashMap<ConnId, Vec<u8>>),
    /// Replies and events as values, for the connection's writer to
    /// encode on its own thread (`io.threads`).
    Frames(FxHashMap<ConnId, Vec<OutgoingFrame>>),
}

pub(crate) struct Conn {
    pub peer: SocketAddr,
    pub established_ms: i64,
    pub session: Option<SessionId>,
    /// Authenticated identities: ip always, digest after auth.
    pub identity: Identity,
    /// The client sent `readOnly` in its handshake; answer in its dialect.
    pub sent_read_only: bool,
    pub handshaken: bool,
    pub packets_received: u64,
    pub packets_sent: u64,
    /// Writes this connection forwarded to the leader (numbers them).
    pub forwarded: u64,
    /// Request frames that came after the handshake, before the session
    /// was established: served once it is, as ZooKeeper, which stops
    /// reading such a connection until then, would serve them.
    pub early: Vec<crate::client_frame::ClientFrame<'static>>,
    pub early_bytes: usize,
    /// A SASL exchange between two of the client's tokens.
    pub sasl: Option<crate::sasl::Exchange>,
    /// Frames the connection was sent at its last flush that sent it any,
    /// when its writer encodes them (`frames_owed`).
    pub frames_last_flush: usize,
}

/// Packets the gate counted, for `srvr` and `mntr` (reset with the rest
/// of the statistics).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct GateCounters {
    pub packets_received: u64,
    pub packets_sent: u64,
    pub notifications_sent: u64,
}

/// The bytes `conn` is owed, with room for a flush's worth of small
/// replies: growing from empty reallocated several times per connection
/// per flush.
fn bytes_owed(owed: &mut FxHashMap<ConnId, Vec<u8>>, conn: ConnId) -> &mut Vec<u8> {
    owed.entry(conn)
        .or_insert_with(|| Vec::with_capacity(OUT_BUF_BYTES_INITIAL))
}

/// The frames `conn` is owed. A connection is likely sent about as many
/// frames in a flush as in its last (`Conn::frames_last_flush`): its vector
/// starts that large, as one grown a frame at a time reallocates several
/// times per flush.
fn frames_owed<'a>(
    owed: &'a mut FxHashMap<ConnId, Vec<OutgoingFrame>>,
    conns: &FxHashMap<ConnId, Conn>,
    conn: ConnId,
) -> &'a mut Vec<OutgoingFrame> {
    owed.entry(conn).or_insert_with(|| {
        let last = conns.get(&conn).map_or(1, |c| c.frames_last_flush);
        Vec::with_capacity(last.max(1))
    })
}

/// Counts one more tick for each waiting connection; the connections that
/// have now waited more than `max` ticks.
pub(crate) fn waited_past<'a>(
    waits: impl Iterator<Item = (&'a ConnId, &'a mut usize)>,
    max: usize,
) -> Vec<ConnId> {
    let mut expired = Vec::new();
    for (&conn, ticks) in waits {
        *ticks += 1;
        if *ticks > max {
            expired.push(conn);
        }
    }
    expired
}

/// A connection's frames held while no leader is known.
#[derive(Default)]
pub(crate) struct AwaitingLeader {
    pub frames: Vec<crate::client_frame::ClientFrame<'static>>,
    pub bytes: usize,
    pub ticks: usize,
}

/// A session's write answered by `complete_write`.
pub(crate) struct Completed {
    /// When its request arrived (for the latency statistics).
    pub received_ms: i64,
}

pub(crate) struct SessionGate {
    pub conns: FxHashMap<ConnId, Conn>,
    pub sessions: BTreeMap<SessionId, Session>,
    /// New sessions whose createSession is in flight → the connection to answer.
    pub connecting: FxHashMap<SessionId, ConnId>,
    /// Connections whose session was just established with early frames
    /// held (see `Conn::early`): served at the next `take_output`.
    pub rebound: Vec<ConnId>,
    pub next_session_id: SessionId,
    /// SASL exchanges started (numbers their nonces).
    pub sasl_nonces: u64,
    /// Sessions with traffic here since the last liveness report.
    pub touched: BTreeSet<SessionId>,
    /// Follower: handshakes waiting for the leader's `Attached` (and then
    /// for its zxid to be applied here).
    pub attaching: FxHashMap<ConnId, (SessionId, Option<i64>)>,
    /// Follower: those of `attaching` kept open through a change of leader
    /// (`Engine::reattach_kept`): their handshake was answered long ago,
    /// so they complete silently. With the ticks each has waited.
    pub kept: FxHashMap<ConnId, usize>,
    /// Sessions whose next reply waits for a zxid to be applied.
    pub zxid_waiters: BTreeMap<i64, Vec<SessionId>>,
    /// Connections that began their handshake while no leader was known
    /// (an election): their frames, served once one is, and the ticks they
    /// have waited.
    pub awaiting_leader: BTreeMap<ConnId, AwaitingLeader>,
    /// What each connection is owed until the next flush.
    owed: Owed,
    pub counters: GateCounters,
}

impl SessionGate {
    /// The sessions are those a tree (partition 0's, which holds them)
    /// records, each with a fresh deadline: after a restart or an
    /// installed snapshot.
    pub fn restore_sessions(&mut self, tree: &stoa_tree::DataTree, now_ms: i64) {
        self.sessions = (tree.sessions())
            .map(|(id, timeout_ms)| (id, Session::new(id, timeout_ms, now_ms)))
            .collect();
    }

    /// `encoded_by_writers`: replies and events leave as values, for the
    /// connections' writers to encode; else as bytes (`take_owed`).
    pub fn new(first_session_id: SessionId, encoded_by_writers: bool) -> SessionGate {
        SessionGate {
            conns: FxHashMap::default(),
            sessions: BTreeMap::new(),
            connecting: FxHashMap::default(),
            rebound: Vec::new(),
            next_session_id: first_session_id,
            sasl_nonces: 0,
            touched: BTreeSet::new(),
            attaching: FxHashMap::default(),
            kept: FxHashMap::default(),
            zxid_waiters: BTreeMap::new(),
            awaiting_leader: BTreeMap::new(),
            owed: if encoded_by_writers {
                Owed::Frames(FxHashMap::default())
            } else {
                Owed::Bytes(FxHashMap::default())
            },
            counters: GateCounters::default(),
        }
    }

    /// A client connected from `peer`.
    pub fn accept(&mut self, conn: ConnId, peer: SocketAddr, now_ms: i64) {
        let ids = vec![Id {
            scheme: "ip".into(),
            id: peer.ip().to_string(),
        }];
        let fresh = Conn {
            peer,
            established_ms: now_ms,
            session: None,
            identity: Identity::new(ids, false),
            sent_read_only: false,
            handshaken: false,
            packets_received: 0,
            packets_sent: 0,
            forwarded: 0,
            early: Vec::new(),
            early_bytes: 0,
            sasl: None,
            frames_last_flush: 0,
        };
        let previous = self.conns.insert(conn, fresh);
        assert!(previous.is_none(), "connection id {conn} reused");
    }

    /// `conn` authenticated as `id` too, which makes it the super user
    /// when `is_super`. Requests already handed on keep the identities
    /// they were sent with; the next ones carry these.
    pub fn add_identity(&mut self, conn: ConnId, id: Id, is_super: bool) {
        if let Some(c) = self.conns.get_mut(&conn) {
            let mut ids = c.identity.ids.to_vec();
            let super_id = Id {
                scheme: "super".into(),
                id: String::new(),
            };
            for id in [is_super.then_some(super_id), Some(id)]
                .into_iter()
                .flatten()
            {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            c.identity = Identity::new(ids, c.identity.is_super || is_super);
        }
    }

    /// The connection is gone; false if it was not known. Its session
    /// stays, detached.
    pub fn close(&mut self, conn: ConnId) -> bool {
        let Some(c) = self.conns.remove(&conn) else {
            return false;
        };
        match &mut self.owed {
            Owed::Bytes(owed) => drop(owed.remove(&conn)),
            Owed::Frames(owed) => drop(owed.remove(&conn)),
        }
        let attaching = self.attaching.remove(&conn).map(|(sid, _)| sid);
        // A connection kept through a change of leader still holds its
        // session while it re-attaches.
        let kept = self.kept.remove(&conn).and(attaching);
        self.awaiting_leader.remove(&conn);
        if let Some(sid) = c.session.or(kept) {
            if let Some(s) = self.sessions.get_mut(&sid) {
                if s.conn == Some(conn) {
                    s.conn = None;
                    // The calls in flight were this connection's: their
                    // outcome is unknown to the client, and what it sends
                    // next is not ordered behind them.
                    s.queue.clear();
                }
            }
        }
        true
    }

    /// Binds `conn` to `sid`; early frames are served at the next output.
    pub fn bind_session(&mut self, conn: ConnId, sid: SessionId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.session = Some(sid);
            if !c.early.is_empty() {
                self.rebound.push(conn);
            }
        }
    }

    pub fn allocate_session_id(&mut self) -> SessionId {
        loop {
            let sid = self.next_session_id;
            self.next_session_id += 1;
            if !self.sessions.contains_key(&sid) && !self.connecting.contains_key(&sid) {
                return sid;
            }
        }
    }

    /// Requests received and not yet answered, over all sessions.
    pub fn outstanding(&self) -> usize {
        self.sessions.values().map(|s| s.queue.len()).sum()
    }

    /// Adds `frame` to what `conn` is owed: encoded at once, or kept for
    /// its writer to encode.
    fn owe(&mut self, conn: ConnId, frame: OutgoingFrame) {
        match &mut self.owed {
            Owed::Bytes(owed) => frame.encode(bytes_owed(owed, conn)),
            Owed::Frames(owed) => frames_owed(owed, &self.conns, conn).push(frame),
        }
    }

    pub fn send_raw(&mut self, conn: ConnId, bytes: Vec<u8>) {
        self.owe(conn, OutgoingFrame::Encoded(bytes));
    }

    pub fn send_reply(
        &mut self,
        conn: ConnId,
        xid: i32,
        zxid: i64,
        err: ErrorCode,
        response: Response,
    ) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.packets_sent += 1;
        self.counters.packets_sent += 1;
        let header = ReplyHeader {
            xid,
            zxid,
            err: err.as_i32(),
        };
        // Encoded here without a frame in between: the hot path when the
        // engine's thread writes the sockets itself.
        match &mut self.owed {
            Owed::Bytes(owed) => encode_reply(bytes_owed(owed, conn), &header, &response),
            Owed::Frames(owed) => {
                frames_owed(owed, &self.conns, conn).push(OutgoingFrame::Reply(header, response))
            }
        }
    }

    /// Answers a handshake: `session` 0 is ZooKeeper's answer to an unknown
    /// or expired session; `read_only` whether this server serves only reads.
    pub fn send_connect_response(
        &mut self,
        conn: ConnId,
        session: SessionId,
        timeout_ms: i32,
        read_only: bool,
    ) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let sent_read_only = c.sent_read_only;
        let response = if session == 0 {
            ConnectResponse {
                protocol_version: 0,
                time_out: 0,
                session_id: 0,
                passwd: vec![0; 16],
                read_only: false,
            }
        } else {
            ConnectResponse {
                protocol_version: 0,
                time_out: timeout_ms,
                session_id: session,
                passwd: password_for(session),
                read_only,
            }
        };
        let mut bytes = Vec::new();
        encode_connect_response(&mut bytes, &response, sent_read_only);
        self.owe(conn, OutgoingFrame::Encoded(bytes));
    }

    pub fn notify(&mut self, conn: ConnId, zxid: i64, change: ChangeKind, path: &str) {
        let event = WatcherEvent {
            kind: change.event_type() as i32,
            state: KeeperState::SyncConnected as i32,
            path: path.to_string(),
        };
        self.counters.notifications_sent += 1;
        self.owe(conn, OutgoingFrame::Notification(zxid, event));
    }

    /// Every connection's bytes since the last flush, one buffer each,
    /// or when their writers encode, their frames.
    pub fn take_owed(
        &mut self,
        sends: &mut Vec<(ConnId, Vec<u8>)>,
        frames: &mut Vec<(ConnId, Vec<OutgoingFrame>)>,
    ) {
        match &mut self.owed {
            Owed::Bytes(owed) => sends.extend(owed.drain()),
            Owed::Frames(owed) => {
                for (conn, owed) in owed.drain() {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.frames_last_flush = owed.len();
                    }
                    frames.push((conn, owed));
                }
            }
        }
    }

    /// Answers the session's write that `outcome` completes, if it is
    /// this server's to answer.
    pub fn complete_write(&mut self, outcome: WriteOutcome) -> Option<Completed> {
        let (xid, shape, received_ms) =
            self.take_head_write(outcome.session, outcome.zxid, outcome.cxid)?;
        let (err, response) = match (shape.reply(&outcome.result), shape) {
            (_, ReplyShape::Sync(path)) => (ErrorCode::Ok, Response::Sync(SyncResponse { path })),
            // ZooKeeper answers a reconfig with the new configuration.
            (Ok(Response::Stat(stat)), ReplyShape::Reconfig) => (
                ErrorCode::Ok,
                Response::GetData(GetDataResponse {
                    data: Some(outcome.config.unwrap_or_default()),
                    stat,
                }),
            ),
            (Ok(response), _) => (ErrorCode::Ok, response),
            (Err(code), _) => (code, Response::Empty),
        };
        if let Some(conn) = self.sessions.get(&outcome.session).and_then(|s| s.conn) {
            self.send_reply(conn, xid, outcome.zxid, err, response);
        }
        Some(Completed { received_ms })
    }

    /// Pops the session's queued write for `zxid`, which FIFO order puts at
    /// the head of its queue: its xid, reply shape and arrival time.
    /// A write forwarded to the leader waits with zxid 0 (unknown here) and
    /// is recognised by its xid.
    pub fn take_head_write(
        &mut self,
        sid: SessionId,
        zxid: i64,
        cxid: i32,
    ) -> Option<(i32, ReplyShape, i64)> {
        let session = self.sessions.get_mut(&sid)?;
        match session.queue.front() {
            // An extension call's writes: its answer comes from the leader.
            Some(Pending::Remote { .. }) => return None,
            Some(head) if head.is_write_of(zxid, cxid) => {}
            // Not the forwarded write at the head: an internal transaction
            // of the session (expiry), or one of an earlier connection's.
            // The leader's owner check keeps this connection's own writes
            // in order, so the head's turn is still to come.
            Some(Pending::Write { zxid: 0, .. }) => return None,
            // An internal transaction of this session (e.g. expiry) applied
            // ahead of the client's next write.
            Some(Pending::Write { zxid: head, .. }) if *head > zxid => return None,
            Some(Pending::Write { zxid: head, .. }) => {
                panic!("session {sid:#x}: applied zxid {zxid:#x} but its oldest write is {head:#x}")
            }
            // Internal transactions (expiry, container cleanup) have no reply.
            _ => return None,
        }
        match session.queue.pop_front() {
            Some(Pending::Write {
                xid,
                shape,
                received_ms,
                ..
            }) => Some((xid, shape, received_ms)),
            _ => unreachable!("checked above"),
        }
    }
}
