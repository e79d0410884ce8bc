//! Client requests after the handshake: reads run against the applied tree
//! in session order, writes are prepared and proposed.

use stoa_proto::codes::ErrorCode;
use stoa_proto::request::Request;
use stoa_proto::response::Response;
use stoa_tree::{digest_id, PrepContext, ReplyShape};

use super::handoff::{Admitted, Identity, ReadCall, ReadOutcome};
use super::Engine;
use crate::session::{Pending, SessionId};
use crate::watch::ConnId;

impl Engine {
    pub(super) fn on_request(&mut self, conn: ConnId, xid: i32, request: Request) {
        // An auth, a SASL token or a read-only server's close is answered
        // at once, not through the session's queue: the reads batched
        // before it go first.
        if !(self.read_batch.is_empty() && self.read_flight.is_empty())
            && answered_outside_queue(&request)
        {
            self.serve_read_batch(true);
        }
        let Some(sid) = self.gate.conns.get(&conn).and_then(|c| c.session) else {
            // Handshake answered but the session is gone (expired meanwhile).
            self.out.closes.push(conn);
            return;
        };
        let now = self.now_ms;
        let Some(session) = self.gate.sessions.get_mut(&sid) else {
            self.out.closes.push(conn);
            return;
        };
        session.touch(now);
        self.gate.touched.insert(sid);
        if session.closing {
            self.queue_reply(conn, xid, ErrorCode::SessionExpired, Response::Empty);
            return;
        }
        if self.read_only() {
            match request {
                Request::CloseSession => {
                    // Only a local session ends here; a replicated one
                    // outlives this server's isolation.
                    if self.gate.sessions.get(&sid).is_some_and(|s| s.local) {
                        self.gate.sessions.remove(&sid);
                    }
                    self.gate.send_reply(
                        conn,
                        xid,
                        self.applied_zxid(),
                        ErrorCode::Ok,
                        Response::Empty,
                    );
                    self.out.closes.push(conn);
                    return;
                }
                ref r if r.is_write() || self.extension_for(r).is_some() => {
                    return self.queue_reply(conn, xid, ErrorCode::NotReadOnly, Response::Empty);
                }
                _ => {}
            }
        }
        if !self.auth_enforced(conn, xid, &request) {
            return;
        }
        if let Some(name) = self.extension_for(&request) {
            return self.on_extension_request(conn, sid, xid, &name, request);
        }
        if self.multi_touches_extension(&request) {
            if let Request::MultiRead(_) = request {
                log::info!("connection {conn}: a multiRead with an op on an extension's path");
                return self.queue_reply(conn, xid, ErrorCode::Unimplemented, Response::Empty);
            }
            return self.on_extension_multi(conn, sid, xid, request);
        }
        match request {
            Request::Auth(packet) => self.on_auth(conn, xid, &packet.scheme, &packet.auth),
            Request::CloseSession => {
                // Its later requests are answered SessionExpired at once.
                if let Some(s) = self.gate.sessions.get_mut(&sid) {
                    s.closing = true;
                }
                self.on_write(conn, sid, xid, Request::CloseSession)
            }
            Request::Reconfig(_) if !self.config.reconfig_enabled => {
                self.queue_reply(conn, xid, ErrorCode::ReconfigDisabled, Response::Empty)
            }
            // As ZooKeeper: a standalone server has no ensemble to change.
            Request::Reconfig(_) if self.standalone() => {
                self.queue_reply(conn, xid, ErrorCode::Unimplemented, Response::Empty)
            }
            Request::Sasl(packet) => self.on_sasl(conn, xid, &packet.token),
            request if request.is_write() => self.on_write(conn, sid, xid, request),
            // In an ensemble a sync goes through the leader's log, the
            // leader's own included, so the reads after it see everything
            // committed before it: a leader answering from its tree could
            // be deposed without knowing yet, or be behind a follower that
            // applied a commit before the leader's own disk write finished.
            request @ Request::Sync(_) if !self.standalone() => {
                self.on_write(conn, sid, xid, request)
            }
            request => {
                if let Some(s) = self.gate.sessions.get_mut(&sid) {
                    s.queue.push_back(Pending::Read {
                        xid,
                        request,
                        received_ms: now,
                    });
                }
                self.pump(sid);
            }
        }
    }

    /// A client's write on this server. A follower forwards it; a leader
    /// admits it (`Engine::admit`) as it admits forwarded ones. Either way
    /// the reply waits in the session's queue for the transaction to apply
    /// here, matched by zxid when it is known here, else by xid.
    fn on_write(&mut self, conn: ConnId, sid: SessionId, xid: i32, request: Request) {
        // The request goes on to the leader's partition; its reply needs
        // only its shape.
        let shape = ReplyShape::of(&request);
        let zxid = if self.is_leader() {
            let Some(admitted) = self.admit_local(conn, sid, xid, request, false) else {
                return;
            };
            match admitted {
                Admitted::Refused => return,
                // A reconfig of several servers is answered by its last
                // step, whose zxid is not known yet: matched by xid.
                Admitted::Proposed(_) if shape == ReplyShape::Reconfig => 0,
                Admitted::Proposed(zxid) => zxid,
                Admitted::Held | Admitted::Answered => 0,
            }
        } else {
            if !self.gate.conns.contains_key(&conn) {
                return;
            }
            self.forward_write(conn, sid, xid, request, false);
            0
        };
        if let Some(s) = self.gate.sessions.get_mut(&sid) {
            s.queue.push_back(Pending::Write {
                xid,
                zxid,
                shape,
                received_ms: self.now_ms,
            });
        }
    }

    /// The leader turns a client write (its own client's or a forwarded
    /// one) into a transaction. A refused write still goes through the log
    /// as an error transaction, as in ZooKeeper: its reply must not overtake
    /// the pending write that caused the refusal (a create that fails with
    /// NodeExists must be followed by reads that see the node).
    pub(super) fn prepare_and_propose(
        &mut self,
        zxid: i64,
        sid: SessionId,
        xid: i32,
        identity: &Identity,
        request: &Request,
    ) {
        let (ids, is_super) = (&identity.ids[..], identity.is_super);
        let ctx = PrepContext {
            session_id: sid,
            cxid: xid,
            zxid,
            time_ms: self.now_ms,
            ids,
            is_super,
            ttl_enabled: self.config.ttl_enabled,
        };
        if let Request::Reconfig(r) = request {
            return self.propose_reconfig(&ctx, r);
        }
        if self.group_load_counted() {
            self.count_group_request(request);
        }
        if self.cores.len() > 1 && touches_placement(request) {
            // Only a setData of the node itself moves groups: it is
            // neither deleted, nor given children, nor set in a multi.
            let prepared = match request {
                Request::SetData(r) if r.path == stoa_tree::PARTITIONS => {
                    self.prepare_group_moves(&ctx, request)
                }
                Request::Multi(ops) => {
                    let at = ops.iter().position(touches_placement).unwrap_or(0);
                    let code = stoa_proto::codes::ErrorCode::BadArguments;
                    Err(stoa_tree::PrepError::failed_multi(ops.len(), at, code))
                }
                _ => Err(stoa_tree::PrepError::Code(
                    stoa_proto::codes::ErrorCode::BadArguments,
                )),
            };
            let txn = prepared.unwrap_or_else(|e| {
                self.stats.request_errors += 1;
                ctx.failed(e)
            });
            self.propose_on(super::group_moves::PLACEMENT_PARTITION, txn);
            return;
        }
        let route = self.write_route(request);
        let prepared = match self.check_registration(ids, is_super, request) {
            Err(code) => Err(stoa_tree::PrepError::Code(code)),
            Ok(()) => self.prepare_routed(&ctx, request, route),
        };
        let txn = prepared.unwrap_or_else(|e| {
            self.stats.request_errors += 1;
            ctx.failed(e)
        });
        self.propose_on(route.home(&txn), txn);
    }

    /// addauth, as ZooKeeper's providers answer it. `digest` takes any
    /// bytes: the id is the text before the first colon (all of it when
    /// there is none) and the hash covers the whole text (ZooKeeper reads
    /// the bytes as UTF-8, invalid ones replaced). `ip` adds the
    /// connection's address, which every connection holds from the start.
    /// Any other scheme fails the connection.
    fn on_auth(&mut self, conn: ConnId, xid: i32, scheme: &str, auth: &[u8]) {
        match scheme {
            "digest" => {
                let (id, is_super) = self.digest_identity(&String::from_utf8_lossy(auth));
                self.gate.add_identity(conn, id, is_super);
                self.queue_reply(conn, xid, ErrorCode::Ok, Response::Empty);
            }
            "ip" => self.queue_reply(conn, xid, ErrorCode::Ok, Response::Empty),
            _ => {
                log::warn!("connection {conn}: authentication failed for scheme {scheme:?}");
                // ZooKeeper answers AuthFailed and closes the connection.
                self.fail_auth(conn, xid);
            }
        }
    }

    /// The `digest` identity `user:password` proves, and whether it is the
    /// super user's (`DigestAuthenticationProvider.superDigest`).
    pub(super) fn digest_identity(&self, credentials: &str) -> (stoa_proto::records::Id, bool) {
        let id = digest_id(credentials);
        let is_super = self.config.super_digest.as_deref() == Some(id.id.as_str());
        (id, is_super)
    }

    /// Hands a read (or an ordered no-op like ping/sync) to the core once
    /// it reaches the head of its session's queue, and answers with what
    /// the core decided, carrying `at` (by default the server's zxid).
    pub(super) fn execute_read(
        &mut self,
        conn: ConnId,
        sid: SessionId,
        xid: i32,
        request: Request,
        at: Option<i64>,
    ) {
        if self.group_load_counted() {
            self.count_group_request(&request);
        }
        let mut outcome = match self.gate.conns.get(&conn) {
            Some(c) => self.read_routed(ReadCall {
                conn,
                session: sid,
                identity: c.identity.clone(),
                request,
            }),
            None => ReadOutcome {
                zxid: 0,
                result: Err(ErrorCode::ConnectionLoss),
                fired: Vec::new(),
            },
        };
        // The server's prefix, whichever partition answered: a reply's
        // zxid never goes back. (Applying by partition, a read by closed
        // watermark carries its own: `Engine::watermark_read_zxid`.)
        outcome.zxid = at.unwrap_or_else(|| self.applied_zxid());
        for (change, path) in &outcome.fired {
            self.notify(conn, outcome.zxid, *change, path);
        }
        self.answer_read(conn, xid, outcome.zxid, outcome.result);
    }

    /// Sends a read's answer (an error, counted, or its response).
    pub(super) fn answer_read(
        &mut self,
        conn: ConnId,
        xid: i32,
        zxid: i64,
        result: Result<Response, ErrorCode>,
    ) {
        let (err, response) = match result {
            Ok(response) => (ErrorCode::Ok, response),
            Err(code) => (code, Response::Empty),
        };
        if err != ErrorCode::Ok {
            self.stats.request_errors += 1;
        }
        self.gate.send_reply(conn, xid, zxid, err, response);
    }
}

/// Whether `request` may be answered without passing its session's queue
/// (everything but a read, a write, a sync and a ping: the rare requests
/// for which batched reads are served first).
fn answered_outside_queue(request: &Request) -> bool {
    !(super::lent_reads::is_plain_read(request)
        || (request.is_write() && !matches!(request, Request::CloseSession))
        || matches!(request, Request::Sync(_) | Request::Ping))
}

/// Whether a write names `/zookeeper/partitions` or a path below it.
pub(super) fn touches_placement(request: &Request) -> bool {
    match request {
        Request::Multi(ops) => ops.iter().any(touches_placement),
        other => other
            .path()
            .is_some_and(super::group_moves::is_placement_path),
    }
}
