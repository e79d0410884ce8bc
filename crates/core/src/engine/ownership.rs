//! Which connection owns a session, as the leader sees it. A client's
//! writes must apply in the order it sent them and none after a write sent
//! later on another connection. Forwards travel over links that can lose
//! messages and are not ordered with each other, so the leader accepts a
//! forwarded write only from the session's owning connection and only in
//! sequence; a connection becomes the owner through a round trip to the
//! leader (`Attach`), which also makes its server apply everything proposed
//! for the session's earlier connections before the client is answered.
//! ZooKeeper gets the same from its session owner check (SessionMoved).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::forward::EngineMessage;
use super::handoff::{Admission, SessionAdmitted, SessionCall};
use super::Engine;
use crate::session::SessionId;
use crate::watch::ConnId;

/// The connection a session's writes are accepted from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner {
    pub server: u64,
    pub conn: ConnId,
    /// Sequence number the next forward from `conn` must carry.
    pub next_seq: u64,
}

impl Engine {
    /// Leader: `conn` at `server` now owns the session.
    pub(super) fn set_owner(&mut self, sid: SessionId, server: u64, conn: ConnId) {
        self.holds.owners.insert(
            sid,
            Owner {
                server,
                conn,
                next_seq: 1,
            },
        );
    }

    /// Leader: does `conn` at `server` own the session?
    pub(super) fn is_owner(&self, sid: SessionId, server: u64, conn: ConnId) -> bool {
        self.holds
            .owners
            .get(&sid)
            .is_some_and(|o| o.server == server && o.conn == conn)
    }

    /// Leader: accepts a forward if it comes from the owner, in sequence.
    /// A refusal tells the sender to drop the connection: the client's
    /// calls then end in ConnectionLoss, as after any lost connection.
    pub(super) fn accept_forward(
        &mut self,
        from: u64,
        sid: SessionId,
        conn: ConnId,
        seq: u64,
    ) -> bool {
        match self.holds.owners.get_mut(&sid) {
            Some(o) if o.server == from && o.conn == conn && o.next_seq == seq => {
                o.next_seq += 1;
                true
            }
            owner => {
                log::debug!(
                    "refusing forward {seq} of session {sid:#x} from server {from} connection {conn}: owner {owner:?}"
                );
                if owner.is_some_and(|o| o.server == from && o.conn == conn) {
                    // A gap: everything after it from this connection is refused too.
                    self.holds.owners.remove(&sid);
                }
                let rejected = EngineMessage::Rejected {
                    session_id: sid,
                    conn,
                };
                self.out.engine_messages.push((from, rejected));
                false
            }
        }
    }

    /// Leader: a client resumed its session through `conn` at `from`
    /// (this server or a follower), or a connection kept through a change
    /// of leader asks to own its session again. Held while this leader's
    /// log is not applied (`release_held_attaches` asks again).
    pub(super) fn answer_attach(&mut self, from: u64, sid: SessionId, conn: ConnId) {
        let call = SessionCall::Attach {
            origin: (from, conn),
            session_id: sid,
        };
        let (valid, after_zxid) = match self.admit_session(call) {
            SessionAdmitted::Attached { after_zxid } => (true, after_zxid),
            SessionAdmitted::Held => return,
            _ => (false, self.last_zxid_handed_out()),
        };
        if from == self.config.server_id {
            return self.on_attached(sid, conn, valid, after_zxid);
        }
        let reply = EngineMessage::Attached {
            session_id: sid,
            conn,
            valid,
            after_zxid,
        };
        self.out.engine_messages.push((from, reply));
    }

    /// The leader (perhaps this server) answered an attach.
    pub(super) fn on_attached(
        &mut self,
        sid: SessionId,
        conn: ConnId,
        valid: bool,
        after_zxid: i64,
    ) {
        match self.gate.attaching.get_mut(&conn) {
            Some((s, after)) if *s == sid => {
                if !valid && self.gate.kept.remove(&conn).is_some() {
                    self.gate.attaching.remove(&conn);
                    return self.close_kept(conn, sid, "is unknown to the new leader");
                }
                if !valid {
                    self.gate.attaching.remove(&conn);
                    log::info!("connection {conn}: the leader does not know session {sid:#x}");
                    self.send_connect_response(conn, 0, 0);
                    self.out.closes.push(conn);
                    return;
                }
                *after = Some(after_zxid);
            }
            _ => return,
        }
        self.complete_attaches();
    }

    /// Finishes the handshakes (and re-attaches of kept connections) whose
    /// session history is applied here.
    pub(super) fn complete_attaches(&mut self) {
        if self.gate.attaching.is_empty() {
            return;
        }
        let applied = self.applied_zxid();
        let ready: Vec<(ConnId, SessionId)> = self
            .gate
            .attaching
            .iter()
            .filter(|(_, (_, after))| after.is_some_and(|z| z <= applied))
            .map(|(&conn, &(sid, _))| (conn, sid))
            .collect();
        for (conn, sid) in ready {
            self.gate.attaching.remove(&conn);
            if self.gate.kept.remove(&conn).is_some() {
                self.rebind_kept(conn, sid);
            } else {
                self.attach_session(conn, sid);
            }
        }
    }

    /// Follower: the leader refused a forward of `conn`.
    pub(super) fn on_rejected(&mut self, sid: SessionId, conn: ConnId) {
        if self
            .gate
            .conns
            .get(&conn)
            .is_some_and(|c| c.session == Some(sid))
        {
            log::info!("connection {conn}: the leader refused its write; closing it");
            self.out.closes.push(conn);
        }
    }
}

/// The leader's admission state, one per server: whose writes it accepts,
/// and what it holds until it may prepare. The engine's thread keeps it
/// (it lived on partition 0's core, which may now be away on its thread
/// while the engine admits: `engine/cores.rs`).
#[derive(Default)]
pub(super) struct LeaderHolds {
    /// Writes received before it may prepare them.
    pub held_writes: VecDeque<Admission>,
    /// Zxids of proposed registration changes, in order
    /// (`Engine::registration_pending`).
    pub registrations_in_flight: VecDeque<i64>,
    /// Session creations (origin server, connection, session, timeout)
    /// received while it could not prepare.
    pub held_session_creates: VecDeque<(u64, ConnId, SessionId, i32)>,
    /// Attaches (origin server, connection, session) received before its
    /// log was applied.
    pub held_attaches: VecDeque<(u64, ConnId, SessionId)>,
    /// The connection each session's writes are accepted from.
    pub owners: FxHashMap<SessionId, Owner>,
}

impl LeaderHolds {
    /// Writes are owned and held by the leader alone: a server that stops
    /// leading forgets them (`drop_clients`).
    pub fn check_invariants(&self, is_leader: bool) -> Result<(), String> {
        if !is_leader && (!self.owners.is_empty() || !self.held_writes.is_empty()) {
            return Err(format!(
                "does not lead but owns {} sessions' writes and holds {}",
                self.owners.len(),
                self.held_writes.len()
            ));
        }
        Ok(())
    }
}
