//! The leader's admission: the one way work enters its partition. A
//! client request (its own client's, a follower's forward, a held one) is
//! an `Admission`; a change to a session's life (creation, a new owning
//! connection, expiry) is a `SessionCall`. Each comes back as one value
//! saying what the leader did (`Admitted`, `SessionAdmitted`); the gate's
//! side acts on it (closes a refused connection, answers a follower).

use stoa_proto::request::Request;
use stoa_tree::TxnOp;

use super::handoff::{Admission, Admitted, SessionAdmitted, SessionCall};
use super::Engine;
use crate::session::SessionId;
use crate::watch::ConnId;

impl Engine {
    /// Leader: admits a request of this server's own client on `conn`;
    /// `None` when the connection is gone. A refused request means the
    /// session moved on to another connection meanwhile: this one closes.
    pub(super) fn admit_local(
        &mut self,
        conn: ConnId,
        sid: SessionId,
        xid: i32,
        request: Request,
        via_extension: bool,
    ) -> Option<Admitted> {
        let identity = self.gate.conns.get(&conn)?.identity.clone();
        let admission = Admission {
            origin: (self.config.server_id, conn),
            session_id: sid,
            xid,
            identity,
            request,
            via_extension: Some(via_extension),
        };
        Some(self.admit_closing_refused(admission, false))
    }

    /// Whether this server routes `request` to a node extension (its
    /// session's queue then waits for the extension's answer, not for a
    /// transaction).
    pub(super) fn routes_to_extension(&self, request: &Request) -> bool {
        self.extension_for(request).is_some() || self.multi_touches_extension(request)
    }

    /// Leader: the origin routed the request by extensions registered or
    /// unregistered since (it had not applied the change yet), so its
    /// session waits for an answer of the other kind. The request is
    /// refused before it runs: the origin drops the connection and the
    /// client, seeing ConnectionLoss, tries again.
    fn routed_otherwise(&mut self, admission: &Admission) -> bool {
        let Some(via_extension) = admission.via_extension else {
            return false;
        };
        if via_extension == self.routes_to_extension(&admission.request) {
            return false;
        }
        let (server, conn) = admission.origin;
        let sid = admission.session_id;
        log::info!(
            "request {} of session {sid:#x} came routed {} by server {server}, whose extensions \
             were behind this leader's: refused, its connection drops",
            admission.xid,
            if via_extension {
                "to an extension"
            } else {
                "as a plain write"
            },
        );
        // Everything after it from that connection is refused too.
        self.holds.owners.remove(&sid);
        if server != self.config.server_id {
            let rejected = super::forward::EngineMessage::Rejected {
                session_id: sid,
                conn,
            };
            self.out.engine_messages.push((server, rejected));
        }
        true
    }

    /// `admit`, and the gate's side of a refusal: a connection of this
    /// server that no longer owns its session is closed (a remote one was
    /// told by `accept_forward`, or lost its session).
    fn admit_closing_refused(&mut self, admission: Admission, released: bool) -> Admitted {
        let (server, conn) = admission.origin;
        let admitted = self.admit_in_turn(admission, released);
        if admitted == Admitted::Refused && server == self.config.server_id {
            self.out.closes.push(conn);
        }
        admitted
    }

    /// Leader: the one way a client request enters this partition,
    /// whatever its origin. It must come from the connection that owns the
    /// session; it waits while this leader may not prepare; a node
    /// extension's call runs now; anything else becomes the next
    /// transaction. What it did comes back as a value: the caller (the
    /// gate's side) closes a refused local connection.
    pub(super) fn admit(&mut self, admission: Admission) -> Admitted {
        self.admit_in_turn(admission, false)
    }

    /// `admit`; `released`: the admission is the oldest held one, taken
    /// back out (`Engine::release_held_writes`). Any other waits behind
    /// the writes held before it, whatever let this one through: a write
    /// must not overtake its session's held ones. (Applying by partition,
    /// a group move can apply after this turn released what it held, and
    /// the next write went first: the ensemble simulator's seed 2981 of
    /// five participants.)
    fn admit_in_turn(&mut self, admission: Admission, released: bool) -> Admitted {
        debug_assert!(self.is_leader(), "only a leader admits requests");
        let (server, conn) = admission.origin;
        let sid = admission.session_id;
        if !self.is_owner(sid, server, conn) {
            if server == self.config.server_id {
                log::info!("connection {conn}: session {sid:#x} is owned elsewhere; closing");
            } else {
                // Its connection lost the session while the write was held:
                // that client saw ConnectionLoss, and its newer
                // connection's writes must not be overtaken by this one.
                log::debug!(
                    "dropping a write of session {sid:#x} from server {server}: owner changed"
                );
            }
            return Admitted::Refused;
        }
        let behind_held = !released && !self.holds.held_writes.is_empty();
        if behind_held || !self.may_prepare() || self.registration_pending() {
            self.hold_write(admission, released);
            return Admitted::Held;
        }
        if self.routed_otherwise(&admission) {
            return Admitted::Refused;
        }
        if let Some(root) = self.auto_group_for(&admission.request) {
            // The group first; the request once it applied.
            self.prepare_batch();
            self.propose_group_add(&root);
            self.hold_write(admission, released);
            return Admitted::Held;
        }
        let Admission {
            origin,
            xid,
            identity,
            request,
            ..
        } = admission;
        if let Some(partition) = self.batch_partition(&request) {
            let zxid = self.next_zxid();
            self.batch_write(partition, zxid, sid, xid, identity, request);
            return Admitted::Proposed(zxid);
        }
        // Whatever follows prepares or proposes: the batch's writes first.
        self.prepare_batch();
        if let Some(name) = self.extension_for(&request) {
            self.leader_extension_write(origin, sid, xid, &identity.ids, &name, &request);
            return Admitted::Answered;
        }
        if let Request::Multi(ops) = &request {
            if self.multi_touches_extension(&request) {
                self.leader_extension_multi(origin, sid, xid, &identity, ops);
                return Admitted::Answered;
            }
        }
        if matches!(request, Request::CloseSession) {
            return Admitted::Proposed(self.propose_close_session(sid, xid));
        }
        let zxid = self.next_zxid();
        match request {
            // The origin answers a sync once this no-op applies there: every
            // write committed before the sync is then visible on it.
            Request::Sync(_) => self.propose_noop(sid, xid, zxid),
            other => self.prepare_and_propose(zxid, sid, xid, &identity, &other),
        }
        Admitted::Proposed(zxid)
    }

    /// True once this leader applied an entry of its own term (the empty
    /// entry raft appends on election), hence every earlier leader's: only
    /// then may it prepare, since those entries change the tree its checks
    /// read. Its own proposals in flight do not count: prep sees them.
    pub(super) fn log_applied(&self) -> bool {
        (0..self.cores.len()).all(|p| self.cores.log_applied(p))
    }

    /// The leader may turn writes into transactions now: its log is
    /// applied, it is not handing leadership over (raft-rs would drop the
    /// proposals), and a reconfig has not removed or demoted it. Otherwise
    /// writes are held.
    pub(super) fn may_prepare(&self) -> bool {
        self.may_write_placement() && self.placement_settled()
    }

    /// `may_prepare`, but for a placement no leader has written yet: the
    /// first leader writes it before anything else
    /// (`Engine::publish_placement`).
    pub(super) fn may_write_placement(&self) -> bool {
        self.may_prepare_unless_restoring()
            && self.restore.quiet()
            && self.group_moves_in_flight.is_none()
    }

    /// `may_prepare`, but for a restore under way (a barrier: nothing is
    /// prepared from when it is taken until it applied).
    pub(super) fn may_prepare_unless_restoring(&self) -> bool {
        self.log_applied()
            && (0..self.cores.len()).all(|p| !self.cores.transferring(p))
            // A reconfig of several servers is done only once raft left
            // the joint configuration; writes received meanwhile wait.
            && !self.in_joint_config()
            // Client writes wait while the leader starts a new epoch.
            && !self.wants_new_epoch()
            // With several partitions, the leader's seal goes first.
            && (self.order.is_none() || self.sealed)
            && (self.standalone()
                || self.ensemble.membership.role_of(self.config.server_id)
                    == Some(crate::ensemble::Role::Participant))
    }

    /// Prepares the writes held while the log was being applied (or a
    /// registration change was).
    pub(super) fn release_held_writes(&mut self) {
        while self.is_leader() && self.may_prepare() && !self.registration_pending() {
            let Some(write) = self.holds.held_writes.pop_front() else {
                return;
            };
            if self.admit_closing_refused(write, true) == Admitted::Held {
                return;
            }
        }
    }

    /// Holds a write until this leader may prepare it: a write taken back
    /// out of the held ones goes back first, where it was.
    fn hold_write(&mut self, admission: Admission, released: bool) {
        let held = &mut self.holds.held_writes;
        match released {
            true => held.push_front(admission),
            false => held.push_back(admission),
        }
    }

    /// Proposes the session creations held while the leader could not
    /// prepare.
    pub(super) fn release_held_session_creates(&mut self) {
        while self.is_leader() && self.may_prepare() {
            let Some((server, conn, session_id, timeout_ms)) =
                self.holds.held_session_creates.pop_front()
            else {
                return;
            };
            self.admit_session(SessionCall::Create {
                origin: (server, conn),
                session_id,
                timeout_ms,
            });
        }
    }

    /// Answers the attaches held while the log was being applied.
    pub(super) fn release_held_attaches(&mut self) {
        while self.is_leader() && self.log_applied() {
            let Some((server, conn, sid)) = self.holds.held_attaches.pop_front() else {
                return;
            };
            self.answer_attach(server, sid, conn);
        }
    }

    /// Leader: admits a change to a session's life. A session is created
    /// and closed by transactions like any write; an attach changes only
    /// which connection the leader accepts the session's writes from.
    pub(super) fn admit_session(&mut self, call: SessionCall) -> SessionAdmitted {
        debug_assert!(self.is_leader(), "only a leader admits sessions");
        // A session's life reads what is in flight and proposes.
        self.prepare_batch();
        match call {
            SessionCall::Create {
                origin: (server, conn),
                session_id,
                timeout_ms,
            } if !self.may_prepare() => {
                // As client writes: a new leader applies its log first, and
                // a counter near its end waits for the new epoch.
                self.holds
                    .held_session_creates
                    .push_back((server, conn, session_id, timeout_ms));
                SessionAdmitted::Held
            }
            SessionCall::Create {
                origin: (server, conn),
                session_id,
                timeout_ms,
            } => {
                self.set_owner(session_id, server, conn);
                let zxid = self.next_zxid();
                let ctx = self.internal_ctx(session_id, zxid);
                let txn = self.cores[0]
                    .preparer
                    .prepare_create_session(&ctx, timeout_ms);
                self.propose(txn);
                SessionAdmitted::Proposed(zxid)
            }
            SessionCall::Attach {
                origin: (server, conn),
                session_id,
            } => {
                if !self.log_applied() {
                    self.holds
                        .held_attaches
                        .push_back((server, conn, session_id));
                    return SessionAdmitted::Held;
                }
                if !self.session_lives(session_id) {
                    return SessionAdmitted::Unknown;
                }
                // The client just showed it lives (ZooKeeper's leader
                // touches a session it revalidates).
                let now = self.now_ms;
                if let Some(s) = self.gate.sessions.get_mut(&session_id) {
                    s.touch(now);
                }
                self.set_owner(session_id, server, conn);
                SessionAdmitted::Attached {
                    after_zxid: self.last_zxid_handed_out(),
                }
            }
            SessionCall::Expire { session_id } => {
                SessionAdmitted::Proposed(self.propose_close_session(session_id, 0))
            }
        }
    }

    /// Leader: the session exists, or its creation is proposed (a quorum
    /// of followers may apply it, and answer its client, before the
    /// leader's own disk lets it apply), and nothing admitted so far
    /// closes it.
    fn session_lives(&self, sid: SessionId) -> bool {
        let closes = |op: &TxnOp| matches!(op, TxnOp::CloseSession { .. });
        let creates = |op: &TxnOp| matches!(op, TxnOp::CreateSession { .. });
        let created = self.cores[0].tree.session_timeout_ms(sid).is_some()
            || self.cores[0]
                .in_flight
                .iter()
                .any(|t| t.header.session_id == sid && creates(t.op.decided()));
        created
            && !self.cores[0]
                .in_flight
                .iter()
                .any(|t| t.header.session_id == sid && closes(t.op.decided()))
            && !self
                .holds
                .held_writes
                .iter()
                .any(|w| w.session_id == sid && matches!(w.request, Request::CloseSession))
    }
}
