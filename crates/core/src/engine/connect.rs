//! Handshake, session creation, resumption, expiry and close.

use stoa_proto::records::ConnectRequest;
use stoa_tree::Txn;

use super::handoff::SessionCall;
use super::Engine;
use crate::session::{negotiate_timeout, password_for, Session, SessionId};
use crate::watch::ConnId;

impl Engine {
    pub(super) fn on_connect(&mut self, conn: ConnId, req: ConnectRequest, sent_read_only: bool) {
        // Applying by partition, what is in hand here will apply without
        // anything from elsewhere, and reads wait for what their client
        // saw (`engine/by_partition.rs`).
        let last_zxid = self.known_zxid().unwrap_or_else(|| self.applied_zxid());
        if req.last_zxid_seen > last_zxid {
            // The client saw a newer tree than ours: serving it would go back in time.
            log::warn!(
                "refusing connection {conn}: client has seen zxid {:#x}, our last zxid is {:#x}",
                req.last_zxid_seen,
                last_zxid
            );
            self.out.closes.push(conn);
            return;
        }
        if let Some(c) = self.gate.conns.get_mut(&conn) {
            c.handshaken = true;
            c.sent_read_only = sent_read_only;
        }
        self.note_zxid_seen(conn, req.last_zxid_seen);
        let (min, max) = (
            self.config.min_session_timeout_ms,
            self.config.max_session_timeout_ms,
        );
        let timeout_ms = negotiate_timeout(req.time_out, min, max);
        if self.leader_id() == 0 {
            return self.connect_read_only(conn, &req, timeout_ms);
        }
        if req.session_id == 0 {
            self.create_session(conn, timeout_ms);
        } else {
            self.resume_session(conn, req.session_id, &req.passwd);
        }
    }

    /// Without a quorum only read-only sessions are served (ZooKeeper's
    /// ReadOnlyZooKeeperServer): a new one is local to this server; an
    /// existing session is resumed for reads.
    fn connect_read_only(&mut self, conn: ConnId, req: &ConnectRequest, timeout_ms: i32) {
        if !req.read_only {
            self.out.closes.push(conn);
            return;
        }
        let sid = if req.session_id == 0 {
            let sid = self.allocate_session_id();
            let mut session = Session::new(sid, timeout_ms, self.now_ms);
            session.local = true;
            self.gate.sessions.insert(sid, session);
            sid
        } else if self.gate.sessions.contains_key(&req.session_id)
            && req.passwd == password_for(req.session_id)
        {
            req.session_id
        } else {
            self.send_connect_response(conn, 0, 0);
            self.out.closes.push(conn);
            return;
        };
        let Some(s) = self.gate.sessions.get_mut(&sid) else {
            return;
        };
        s.conn = Some(conn);
        s.touch(self.now_ms);
        let timeout_ms = s.timeout_ms;
        self.send_connect_response(conn, sid, timeout_ms);
        self.bind_session(conn, sid);
    }

    fn create_session(&mut self, conn: ConnId, timeout_ms: i32) {
        let sid = self.allocate_session_id();
        self.gate.connecting.insert(sid, conn);
        if self.is_leader() {
            self.admit_session(SessionCall::Create {
                origin: (self.config.server_id, conn),
                session_id: sid,
                timeout_ms,
            });
            return;
        }
        // The id carries this server's id, so followers allocate without
        // asking; the leader makes it a transaction.
        self.forward(super::forward::EngineMessage::CreateSession {
            session_id: sid,
            conn,
            timeout_ms,
        });
    }

    fn allocate_session_id(&mut self) -> SessionId {
        self.gate.allocate_session_id()
    }

    fn resume_session(&mut self, conn: ConnId, sid: SessionId, passwd: &[u8]) {
        let valid = passwd == password_for(sid).as_slice();
        if !valid || self.gate.sessions.get(&sid).is_some_and(|s| s.closing) {
            log::info!("connection {conn}: session {sid:#x} expired or invalid");
            self.send_connect_response(conn, 0, 0);
            self.out.closes.push(conn);
            return;
        }
        // The leader decides, as ZooKeeper's does when a follower
        // revalidates a session: one this server does not know may be
        // younger than what it has applied (a quorum of followers can apply
        // a session's creation before the leader does). The leader makes
        // this connection the session's owner, and the handshake is
        // answered once what it handed out for the session is applied here.
        self.gate.attaching.insert(conn, (sid, None));
        self.ask_attach(sid, conn);
    }

    /// Binds a resumed session to `conn` and answers the handshake.
    pub(super) fn attach_session(&mut self, conn: ConnId, sid: SessionId) {
        let now = self.now_ms;
        let Some(s) = self.gate.sessions.get_mut(&sid).filter(|s| !s.closing) else {
            log::info!("connection {conn}: session {sid:#x} expired meanwhile");
            self.send_connect_response(conn, 0, 0);
            self.out.closes.push(conn);
            return;
        };
        // A session lives on one connection: the newest wins, as in ZooKeeper.
        let previous = s.conn.replace(conn);
        s.touch(now);
        let timeout_ms = s.timeout_ms;
        if let Some(old) = previous.filter(|&old| old != conn) {
            // What was in flight belonged to the old connection.
            s.queue.clear();
            if let Some(c) = self.gate.conns.get_mut(&old) {
                c.session = None;
            }
            self.out.closes.push(old);
        }
        self.send_connect_response(conn, sid, timeout_ms);
        self.bind_session(conn, sid);
    }

    /// Called when a createSession transaction is applied.
    pub(super) fn session_created(&mut self, sid: SessionId, timeout_ms: i32) {
        let mut session = Session::new(sid, timeout_ms, self.now_ms);
        if let Some(conn) = self.gate.connecting.remove(&sid) {
            if self.gate.conns.contains_key(&conn) {
                session.conn = Some(conn);
                self.gate.sessions.insert(sid, session);
                self.send_connect_response(conn, sid, timeout_ms);
                self.bind_session(conn, sid);
                return;
            }
        }
        // Created for a connection that has gone, or replayed after a
        // restart: it lives until it expires, as in ZooKeeper.
        self.gate.sessions.insert(sid, session);
    }

    /// Called when a closeSession transaction is applied.
    pub(super) fn session_closed(&mut self, sid: SessionId, reply_xid: Option<i32>) {
        let Some(s) = self.gate.sessions.remove(&sid) else {
            return;
        };
        if let Some(conn) = s.conn {
            if let Some(xid) = reply_xid {
                let zxid = self.applied_zxid();
                self.gate.send_reply(
                    conn,
                    xid,
                    zxid,
                    stoa_proto::codes::ErrorCode::Ok,
                    stoa_proto::response::Response::Empty,
                );
            }
            if let Some(c) = self.gate.conns.get_mut(&conn) {
                c.session = None;
            }
            self.out.closes.push(conn);
        }
    }

    pub(super) fn expire_sessions(&mut self) {
        if !self.leads_its_term() {
            return;
        }
        let now = self.now_ms;
        let expired: Vec<SessionId> = self
            .gate
            .sessions
            .values()
            .filter(|s| !s.closing && s.deadline_ms < now)
            .map(|s| s.id)
            .collect();
        for sid in expired {
            if !self.may_prepare() {
                // The zxid counter nears its end: the others expire in the
                // new epoch, next tick, rather than eat into the reserve
                // kept for what cannot wait (many sessions can expire at
                // once after an outage).
                break;
            }
            log::info!("session {sid:#x} expired");
            self.stats.sessions_expired += 1;
            if let Some(s) = self.gate.sessions.get_mut(&sid) {
                s.closing = true;
            }
            self.admit_session(SessionCall::Expire { session_id: sid });
        }
    }

    /// Context for transactions the server itself decides (no client ids).
    pub(super) fn internal_ctx(
        &self,
        sid: SessionId,
        zxid: i64,
    ) -> stoa_tree::PrepContext<'static> {
        stoa_tree::PrepContext {
            session_id: sid,
            cxid: 0,
            zxid,
            time_ms: self.now_ms,
            ids: &[],
            is_super: true,
            ttl_enabled: self.config.ttl_enabled,
        }
    }

    /// Leader: ends a session (its client's close, request `xid`, or an
    /// expiry, 0). The node extensions owning its ephemerals release them
    /// first, in a transaction of their own; then the close. Returns the
    /// close's zxid.
    pub(super) fn propose_close_session(&mut self, sid: SessionId, xid: i32) -> i64 {
        self.release_through_extensions(sid);
        let zxid = self.next_zxid();
        let mut ctx = self.internal_ctx(sid, zxid);
        ctx.cxid = xid;
        let txn = self.prepare_close_everywhere(&ctx);
        self.propose(txn);
        zxid
    }

    /// A transaction that changes nothing: a sync's barrier.
    pub(super) fn propose_noop(&mut self, sid: SessionId, xid: i32, zxid: i64) {
        self.propose_error(sid, xid, zxid, stoa_proto::codes::ErrorCode::Ok);
    }

    /// A transaction that changes nothing and answers request `xid` of
    /// session `sid` with `code` where it applies.
    pub(super) fn propose_error(
        &mut self,
        sid: SessionId,
        xid: i32,
        zxid: i64,
        code: stoa_proto::codes::ErrorCode,
    ) {
        let header = stoa_tree::TxnHeader {
            session_id: sid,
            cxid: xid,
            zxid,
            time_ms: self.now_ms,
        };
        self.propose(Txn {
            header,
            op: stoa_tree::TxnOp::Error(code),
        });
    }
}
