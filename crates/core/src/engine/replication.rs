//! The engine's part in an ensemble beyond raft: forwarding to the leader,
//! the leader's handling of forwarded work, session liveness reports, and
//! what a change of leader does to clients.

use stoa_proto::request::Request;

use super::forward::EngineMessage;
use super::handoff::{Admission, Identity, SessionCall};
use super::Engine;
use crate::session::SessionId;
use crate::watch::ConnId;

impl Engine {
    /// Sends a message to the leader; without a known leader it is dropped
    /// and the client's request times out into a reconnect.
    pub(super) fn forward(&mut self, message: EngineMessage) {
        let leader = self.leader_id();
        if leader != 0 && leader != self.config.server_id {
            self.out.engine_messages.push((leader, message));
        }
    }

    /// A message from peer `from`.
    pub(super) fn on_peer(&mut self, from: u64, message: EngineMessage) {
        match message {
            EngineMessage::Touch { sessions } => {
                let now = self.now_ms;
                for sid in sessions {
                    if let Some(s) = self.gate.sessions.get_mut(&sid) {
                        s.touch(now);
                    }
                }
            }
            EngineMessage::Attached {
                session_id,
                conn,
                valid,
                after_zxid,
            } => self.on_attached(session_id, conn, valid, after_zxid),
            EngineMessage::Rejected { session_id, conn } => self.on_rejected(session_id, conn),
            EngineMessage::ExtensionReply {
                session_id,
                conn,
                xid,
                after_zxid,
                err,
                response,
            } => self.on_extension_reply(session_id, conn, xid, after_zxid, err, &response),
            EngineMessage::RestoreRefused {
                token,
                status,
                error,
            } => self.on_restore_refused(token, status, &error),
            EngineMessage::Restore { token, .. } if !self.is_leader() => {
                let error = "the server it went to no longer leads".to_string();
                self.answer_restore(from, token, 503, error);
            }
            _ if !self.is_leader() => {
                log::debug!("dropping work forwarded by server {from}: not the leader");
            }
            EngineMessage::Restore { token, zxid, parts } => {
                if let Some((status, error)) = self.take_restore(from, token, zxid, parts) {
                    self.answer_restore(from, token, status, error);
                }
            }
            EngineMessage::Attach { session_id, conn } => {
                self.answer_attach(from, session_id, conn)
            }
            EngineMessage::CreateSession {
                session_id,
                conn,
                timeout_ms,
            } => {
                self.admit_session(SessionCall::Create {
                    origin: (from, conn),
                    session_id,
                    timeout_ms,
                });
            }
            EngineMessage::Forward {
                session_id,
                conn,
                seq,
                xid,
                ids,
                is_super,
                request,
                via_extension,
            } => {
                if !self.accept_forward(from, session_id, conn, seq) {
                    return;
                }
                self.admit(Admission {
                    origin: (from, conn),
                    session_id,
                    xid,
                    identity: Identity::new(ids, is_super),
                    request,
                    via_extension,
                });
            }
        }
    }

    /// Follower: sends a client's write (or extension call) on `conn` to
    /// the leader, numbered in that connection's forward sequence, saying
    /// which answer its session waits for (`via_extension`).
    pub(super) fn forward_write(
        &mut self,
        conn: ConnId,
        sid: SessionId,
        xid: i32,
        request: Request,
        via_extension: bool,
    ) {
        let Some(c) = self.gate.conns.get_mut(&conn) else {
            return;
        };
        c.forwarded += 1;
        let message = EngineMessage::Forward {
            session_id: sid,
            conn,
            seq: c.forwarded,
            xid,
            ids: c.identity.ids.to_vec(),
            is_super: c.identity.is_super,
            request,
            via_extension: Some(via_extension),
        };
        self.forward(message);
    }

    /// Starts a new epoch when this leader's zxid counter nears its end
    /// (ZooKeeper's leader does at counter rollover): a new raft term,
    /// campaigned for as a leader transfer to itself so that its peers
    /// vote at once. Standalone it wins in the same step; in an ensemble
    /// the votes come back within a round trip (or another server wins).
    /// Client writes are held meanwhile (`may_prepare`).
    pub(super) fn roll_epoch(&mut self) {
        if !self.wants_new_epoch() || !self.may_campaign_for_epoch() {
            return;
        }
        log::info!(
            "zxid counter of epoch {} near its end: starting a new term",
            self.epoch()
        );
        self.campaign_for_epoch(self.epoch() + 1);
        self.stats.epoch_rollovers += 1;
    }

    /// This leader may campaign for a new epoch now.
    pub(super) fn may_campaign_for_epoch(&self) -> bool {
        let ready = |core: &super::partition_core::PartitionCore| {
            let log = &core.raft.raft.raft_log;
            core.raft.raft.lead_transferee.is_none()
                && core.installing.is_none()
                // raft-rs campaigns only with its whole log durable.
                && log.persisted == log.last_index()
        };
        self.is_leader()
            && self.log_applied()
            && !self.in_joint_config()
            && self.cores.iter().all(ready)
    }

    /// Campaigns every group at term `epoch` (at least the next), so the
    /// highest term, the epoch, becomes `epoch`: as a leader transfer to
    /// itself, so that its peers vote at once. Raising a term is always
    /// safe in raft; a server at a higher term has only to be heard.
    pub(super) fn campaign_for_epoch(&mut self, epoch: u64) {
        debug_assert!(epoch > self.epoch());
        for core in &mut self.cores {
            let raft = &mut core.raft.raft;
            // campaign() steps the term by one.
            let term = raft.term.max(epoch - 1);
            raft.become_follower(term, raft::INVALID_ID);
            raft.campaign(raft::CAMPAIGN_TRANSFER);
        }
    }

    /// Followers tell the leader which sessions had traffic (once a tick).
    pub(super) fn report_liveness(&mut self) {
        // A client whose calls wait at this member is connected and alive,
        // whether or not it sent anything lately: reported every tick, so
        // a report lost (a leader cut off for a moment) is made good by the
        // next, not only by the client's next call.
        let waiting = |s: &&mut crate::session::Session| {
            s.conn.is_some() && !s.closing && !s.queue.is_empty()
        };
        let (leader, now) = (self.is_leader(), self.now_ms);
        let gate = &mut self.gate;
        if leader {
            // The leader touches its own sessions directly.
            gate.touched.clear();
            gate.sessions
                .values_mut()
                .filter(waiting)
                .for_each(|s| s.touch(now));
            return;
        }
        let ids = gate.sessions.values_mut().filter(waiting).map(|s| s.id);
        gate.touched.extend(ids);
        if self.gate.touched.is_empty() {
            return;
        }
        let sessions: Vec<SessionId> = std::mem::take(&mut self.gate.touched).into_iter().collect();
        self.forward(EngineMessage::Touch { sessions });
    }

    /// Called after raft reports a (possibly) new leader. Requests in flight
    /// through the old leader may or may not commit, so their clients are
    /// dropped: they reconnect and resume their sessions, and their
    /// outstanding calls end in ConnectionLoss. Idle clients stay
    /// (`drop_clients_in_doubt`).
    pub(super) fn on_leader_change(&mut self, old: u64, new: u64) {
        // Reads in flight were answered by this server's state: they go
        // before anything is dropped.
        self.land_reads();
        log::info!(
            "leader changed from {old} to {new} (this server: {})",
            self.config.server_id
        );
        let kept = self.drop_clients_in_doubt();
        // A new leader applies its whole log before it prepares anything,
        // a restore in it included.
        self.forget_restore_in_flight();
        for s in self.gate.sessions.values_mut() {
            // The new leader gives every session a full timeout to find it.
            s.touch(self.now_ms);
            // A close asked of the old leader is in the log or lost: until
            // one applies, the session lives. Left set, a leader that woke
            // from a pause, expired its sessions and was deposed would
            // refuse them and never expire them again (issue 27).
            s.closing = false;
        }
        // Read-only sessions were this server's own while it was cut off.
        self.gate.sessions.retain(|_, s| !s.local);
        self.reattach_kept(kept);
        if new != 0 {
            self.serve_awaiting_leader();
        }
    }

    /// At a change of leader: closes the connections whose calls' outcomes
    /// went with the old leader (something in flight, a new session being
    /// created, a read-only session) and forgets all work in flight; keeps
    /// the idle ones, with their sessions and watches (issue 27: clients
    /// barely notice an election). Returns the kept connections and their
    /// sessions, unbound until the new leader makes them the owners again.
    fn drop_clients_in_doubt(&mut self) -> Vec<(ConnId, SessionId, usize)> {
        let mut kept = Vec::new();
        let mut closes = Vec::new();
        for (&conn, c) in &mut self.gate.conns {
            if !c.handshaken {
                continue; // a four-letter word, or a handshake awaiting the leader
            }
            // An idle bound session, or one that was already re-attaching.
            let sid = c
                .session
                .or_else(|| self.gate.attaching.get(&conn).map(|a| a.0));
            let idle = sid
                .and_then(|sid| self.gate.sessions.get(&sid))
                .is_some_and(|s| {
                    s.queue.is_empty() && !s.local && !s.closing && s.conn == Some(conn)
                });
            match sid {
                Some(sid) if idle => {
                    c.session = None;
                    c.forwarded = 0;
                    // Kept through an earlier change too: its wait goes on.
                    let waited = self.gate.kept.get(&conn).copied().unwrap_or(0);
                    kept.push((conn, sid, waited));
                }
                _ => closes.push(conn),
            }
        }
        self.out.closes.extend(closes);
        let kept_sessions: rustc_hash::FxHashSet<SessionId> =
            kept.iter().map(|&(_, sid, _)| sid).collect();
        for s in self.gate.sessions.values_mut() {
            if !kept_sessions.contains(&s.id) {
                s.queue.clear();
                s.conn = None;
            }
        }
        self.forget_work_in_flight();
        kept
    }

    /// Makes each kept connection its session's owner at the new leader
    /// again, as a resumed session's handshake does but answering nothing:
    /// its frames wait meanwhile (as before a handshake completes), and
    /// a follower serves them once it has applied what the leader handed
    /// out for the session. With no leader yet, they wait for the next
    /// change.
    fn reattach_kept(&mut self, kept: Vec<(ConnId, SessionId, usize)>) {
        for (conn, sid, waited) in kept {
            self.gate.attaching.insert(conn, (sid, None));
            self.gate.kept.insert(conn, waited);
            self.ask_attach(sid, conn);
        }
    }

    /// Asks the leader (this server or another) to make `conn` the owner
    /// of session `sid`; with no leader known, the question waits for the
    /// next change of leader.
    pub(super) fn ask_attach(&mut self, sid: SessionId, conn: ConnId) {
        if self.is_leader() {
            self.answer_attach(self.config.server_id, sid, conn);
        } else if self.leader_id() != 0 {
            self.forward(EngineMessage::Attach {
                session_id: sid,
                conn,
            });
        }
    }

    /// Every tick: a kept connection that has waited `LEADER_WAIT_TICKS`
    /// (no leader elected where this server can hear it, or its attach
    /// lost) is closed, so that its client tries another server instead
    /// of waiting out its own timeout here.
    pub(super) fn expire_kept_waits(&mut self) {
        for conn in super::gate::waited_past(self.gate.kept.iter_mut(), super::LEADER_WAIT_TICKS) {
            self.gate.kept.remove(&conn);
            if let Some((sid, _)) = self.gate.attaching.remove(&conn) {
                self.close_kept(conn, sid, "waited too long for a leader");
            }
        }
    }

    /// A kept connection owns its session again: what it sent meanwhile
    /// is served, in order.
    pub(super) fn rebind_kept(&mut self, conn: ConnId, sid: SessionId) {
        let now = self.now_ms;
        match self.gate.sessions.get_mut(&sid) {
            Some(s) if s.conn == Some(conn) && !s.closing => s.touch(now),
            _ => return self.close_kept(conn, sid, "moved or ended meanwhile"),
        }
        self.bind_session(conn, sid);
    }

    /// A kept connection cannot go on: its session lets go of it, and the
    /// client reconnects (and learns whether the session lives).
    pub(super) fn close_kept(&mut self, conn: ConnId, sid: SessionId, why: &str) {
        log::info!("connection {conn}: session {sid:#x} {why}; closing it");
        if let Some(s) = self
            .gate
            .sessions
            .get_mut(&sid)
            .filter(|s| s.conn == Some(conn))
        {
            s.conn = None;
            s.queue.clear();
        }
        self.out.closes.push(conn);
    }

    /// Closes every client connection and forgets all work in flight for
    /// them; sessions stay (clients resume them elsewhere or here).
    pub(super) fn drop_clients(&mut self) {
        self.land_reads();
        // Only client sessions: a four-letter word in flight keeps its answer.
        let conns: Vec<_> = self
            .gate
            .conns
            .iter()
            .filter(|(_, c)| c.handshaken)
            .map(|(&id, _)| id)
            .collect();
        self.out.closes.extend(conns);
        for s in self.gate.sessions.values_mut() {
            s.queue.clear();
            s.conn = None;
        }
        self.forget_work_in_flight();
    }

    /// Forgets every piece of work in flight for clients and every
    /// leader-only hold: handshakes and attaches under way, session
    /// owners, held writes, proposals and the speculative tree.
    fn forget_work_in_flight(&mut self) {
        self.gate.connecting.clear();
        self.gate.attaching.clear();
        self.gate.kept.clear();
        self.holds.owners.clear();
        self.holds.held_attaches.clear();
        self.holds.held_session_creates.clear();
        self.gate.zxid_waiters.clear();
        self.holds.held_writes.clear();
        for core in &mut self.cores {
            core.preparer.clear();
            core.in_flight.clear();
            core.speculative = None;
        }
        self.ensemble.membership_pending = None;
        self.group_moves_in_flight = None;
    }
}
