//! Client requests after the handshake: reads run against the applied tree
//! in session order, writes are prepared and proposed.

use stoa_proto::codes::ErrorCode;
use stoa_proto::opcode::{AddWatchMode, WatcherType};
use stoa_proto::records::{ClientInfo, Id, Stat, SyncResponse, WhoAmIResponse};
use stoa_proto::request::Request;
use stoa_proto::response::Response;
use stoa_tree::{digest_id, PrepContext, Txn, TxnHeader};

use super::replication::Admitted;
use super::Engine;
use crate::session::{Pending, SessionId};
use crate::watch::{ChangeKind, ConnId, WatchKind};

impl Engine {
    pub(super) fn on_request(&mut self, conn: ConnId, xid: i32, request: Request) {
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
                        self.core.tree.last_zxid(),
                        ErrorCode::Ok,
                        &Response::Empty,
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
        if let Some(name) = self.extension_for(&request) {
            return self.on_extension_request(conn, sid, xid, &name, request);
        }
        if self.multi_touches_extension(&request) {
            log::info!("connection {conn}: a multi with an op on an extension's path; refused");
            return self.queue_reply(conn, xid, ErrorCode::Unimplemented, Response::Empty);
        }
        match request {
            Request::Auth(packet) => self.on_auth(conn, xid, &packet.scheme, &packet.auth),
            Request::CloseSession => self.close_session(sid, Some(xid)),
            Request::Reconfig(_) if !self.config.reconfig_enabled => {
                self.queue_reply(conn, xid, ErrorCode::ReconfigDisabled, Response::Empty)
            }
            // As ZooKeeper: a standalone server has no ensemble to change.
            Request::Reconfig(_) if self.standalone() => {
                self.queue_reply(conn, xid, ErrorCode::Unimplemented, Response::Empty)
            }
            Request::Sasl(_) => {
                self.queue_reply(conn, xid, ErrorCode::Unimplemented, Response::Empty)
            }
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
        let zxid = if self.is_leader() {
            let Some(admitted) = self.admit_local(conn, sid, xid, &request) else {
                return;
            };
            match admitted {
                Admitted::Refused => return,
                // A reconfig of several servers is answered by its last
                // step, whose zxid is not known yet: matched by xid.
                Admitted::Proposed(_) if matches!(request, Request::Reconfig(_)) => 0,
                Admitted::Proposed(zxid) => zxid,
                Admitted::Held | Admitted::Answered => 0,
            }
        } else {
            if !self.gate.conns.contains_key(&conn) {
                return;
            }
            self.forward_write(conn, sid, xid, request.clone());
            0
        };
        if let Some(s) = self.gate.sessions.get_mut(&sid) {
            s.queue.push_back(Pending::Write {
                xid,
                zxid,
                request,
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
        ids: &[Id],
        is_super: bool,
        request: &Request,
    ) {
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
        let prepared = match self.check_registration(ids, is_super, request) {
            Ok(()) => self.core.preparer.prepare(&self.core.tree, &ctx, request),
            Err(code) => Err(stoa_tree::PrepError::Code(code)),
        };
        let txn = match prepared {
            Ok(txn) => txn,
            Err(e) => {
                self.stats.request_errors += 1;
                Txn {
                    header: TxnHeader {
                        session_id: sid,
                        cxid: xid,
                        zxid,
                        time_ms: self.now_ms,
                    },
                    op: e.into_txn_op(),
                }
            }
        };
        self.propose(txn);
    }

    fn on_auth(&mut self, conn: ConnId, xid: i32, scheme: &str, auth: &[u8]) {
        let credentials = std::str::from_utf8(auth).ok().filter(|s| s.contains(':'));
        match (scheme, credentials) {
            ("digest", Some(user_password)) => {
                let id = digest_id(user_password);
                let is_super = self.config.super_digest.as_deref() == Some(id.id.as_str());
                if let Some(c) = self.gate.conns.get_mut(&conn) {
                    if is_super {
                        c.is_super = true;
                        c.ids.push(Id {
                            scheme: "super".into(),
                            id: String::new(),
                        });
                    }
                    if !c.ids.contains(&id) {
                        c.ids.push(id);
                    }
                }
                self.queue_reply(conn, xid, ErrorCode::Ok, Response::Empty);
            }
            _ => {
                log::warn!("connection {conn}: authentication failed for scheme {scheme:?}");
                // ZooKeeper answers AuthFailed and closes the connection.
                let zxid = self.core.tree.last_zxid();
                self.gate
                    .send_reply(conn, xid, zxid, ErrorCode::AuthFailed, &Response::Empty);
                self.out.closes.push(conn);
            }
        }
    }

    /// Runs a read (or an ordered no-op like ping/sync) once it reaches the
    /// head of its session's queue.
    pub(super) fn execute_read(
        &mut self,
        conn: ConnId,
        sid: SessionId,
        xid: i32,
        request: Request,
    ) {
        let zxid = self.core.tree.last_zxid();
        let (err, response) = match self.read_response(conn, sid, &request) {
            Ok(response) => (ErrorCode::Ok, response),
            Err(code) => (code, Response::Empty),
        };
        if err != ErrorCode::Ok {
            self.stats.request_errors += 1;
        }
        self.gate.send_reply(conn, xid, zxid, err, &response);
    }

    fn read_response(
        &mut self,
        conn: ConnId,
        sid: SessionId,
        request: &Request,
    ) -> Result<Response, ErrorCode> {
        let Some(c) = self.gate.conns.get(&conn) else {
            return Err(ErrorCode::ConnectionLoss);
        };
        match request {
            Request::Ping => Ok(Response::Empty),
            Request::SetWatches(w) => {
                let restore = WatchesToRestore {
                    relative_zxid: w.relative_zxid,
                    data: &w.data_watches,
                    exist: &w.exist_watches,
                    child: &w.child_watches,
                    persistent: &[],
                    recursive: &[],
                };
                self.set_watches(conn, restore);
                Ok(Response::Empty)
            }
            Request::SetWatches2(w) => {
                let restore = WatchesToRestore {
                    relative_zxid: w.relative_zxid,
                    data: &w.data_watches,
                    exist: &w.exist_watches,
                    child: &w.child_watches,
                    persistent: &w.persistent_watches,
                    recursive: &w.persistent_recursive_watches,
                };
                self.set_watches(conn, restore);
                Ok(Response::Empty)
            }
            Request::Sync(r) => {
                // Standalone: everything committed is applied already (an
                // ensemble's sync goes through the log instead).
                stoa_tree::validate_path(&r.path)?;
                Ok(Response::Sync(SyncResponse {
                    path: r.path.clone(),
                }))
            }
            Request::WhoAmI => {
                // ZooKeeper shows a digest identity by its user name only.
                let user = |id: &Id| match id.scheme.as_str() {
                    "digest" => id.id.split(':').next().unwrap_or_default().to_string(),
                    _ => id.id.clone(),
                };
                let client_info = c
                    .ids
                    .iter()
                    .map(|id| ClientInfo {
                        auth_scheme: id.scheme.clone(),
                        user: user(id),
                    })
                    .collect();
                Ok(Response::WhoAmI(WhoAmIResponse { client_info }))
            }
            Request::AddWatch(r) => {
                stoa_tree::validate_path(&r.path)?;
                let kind = match AddWatchMode::from_i32(r.mode) {
                    Some(AddWatchMode::Persistent) => WatchKind::Persistent,
                    Some(AddWatchMode::PersistentRecursive) => WatchKind::PersistentRecursive,
                    None => return Err(ErrorCode::BadArguments),
                };
                self.core.watches.add(conn, kind, &r.path);
                // ZooKeeper answers addWatch with an ErrorResponse body of 0.
                Ok(Response::AddWatch(stoa_proto::records::ErrorResponse {
                    err: 0,
                }))
            }
            Request::RemoveWatches(r) => self.remove_watches(conn, &r.path, r.kind, true),
            Request::CheckWatches(r) => self.remove_watches(conn, &r.path, r.kind, false),
            _ => {
                let result = self
                    .core
                    .tree
                    .execute_read(&c.ids, c.is_super, sid, request);
                self.register_read_watch(conn, request, &result);
                result
            }
        }
    }

    fn register_read_watch(
        &mut self,
        conn: ConnId,
        request: &Request,
        result: &Result<Response, ErrorCode>,
    ) {
        let (path, kind) = match request {
            Request::Exists(r) if r.watch => match result {
                Ok(_) => (&r.path, WatchKind::Data),
                Err(ErrorCode::NoNode) => (&r.path, WatchKind::Exist),
                Err(_) => return,
            },
            Request::GetData(r) if r.watch && result.is_ok() => (&r.path, WatchKind::Data),
            Request::GetChildren(r) if r.watch && result.is_ok() => (&r.path, WatchKind::Child),
            Request::GetChildren2(r) if r.watch && result.is_ok() => (&r.path, WatchKind::Child),
            _ => return,
        };
        self.core.watches.add(conn, kind, path);
    }

    fn remove_watches(
        &mut self,
        conn: ConnId,
        path: &str,
        watcher_type: i32,
        remove: bool,
    ) -> Result<Response, ErrorCode> {
        let kinds: &[WatchKind] = match WatcherType::from_i32(watcher_type) {
            Some(WatcherType::Children) => &[WatchKind::Child],
            Some(WatcherType::Data) => &[WatchKind::Data, WatchKind::Exist],
            Some(WatcherType::Persistent) => &[WatchKind::Persistent],
            Some(WatcherType::PersistentRecursive) => &[WatchKind::PersistentRecursive],
            Some(WatcherType::Any) => &[
                WatchKind::Child,
                WatchKind::Data,
                WatchKind::Exist,
                WatchKind::Persistent,
                WatchKind::PersistentRecursive,
            ],
            None => return Err(ErrorCode::BadArguments),
        };
        let mut found = false;
        for &kind in kinds {
            if remove {
                found |= self.core.watches.remove(conn, kind, path);
            } else {
                found |= self.core.watches.contains(conn, kind, path);
            }
        }
        if found {
            Ok(Response::Empty)
        } else {
            Err(ErrorCode::NoWatcher)
        }
    }

    /// Re-registers a reconnecting client's watches, firing at once those
    /// whose change it missed (anything newer than `relative_zxid`).
    fn set_watches(&mut self, conn: ConnId, w: WatchesToRestore<'_>) {
        let zxid = self.core.tree.last_zxid();
        let versioned: [VersionedWatches<'_>; 2] = [
            (
                w.data,
                WatchKind::Data,
                |s| s.mzxid,
                ChangeKind::DataChanged,
            ),
            (
                w.child,
                WatchKind::Child,
                |s| s.pzxid,
                ChangeKind::ChildrenChanged,
            ),
        ];
        for (paths, kind, changed_at, change) in versioned {
            for path in paths {
                match self.core.tree.node(path).map(|n| changed_at(&n.stat())) {
                    None => self.gate.notify(conn, zxid, ChangeKind::Deleted, path),
                    Some(at) if at > w.relative_zxid => self.gate.notify(conn, zxid, change, path),
                    Some(_) => self.core.watches.add(conn, kind, path),
                }
            }
        }
        for path in w.exist {
            if self.core.tree.node(path).is_some() {
                self.gate.notify(conn, zxid, ChangeKind::Created, path);
            } else {
                self.core.watches.add(conn, WatchKind::Exist, path);
            }
        }
        for (paths, kind) in [
            (w.persistent, WatchKind::Persistent),
            (w.recursive, WatchKind::PersistentRecursive),
        ] {
            for path in paths {
                self.core.watches.add(conn, kind, path);
            }
        }
    }
}

/// Watches restored against a zxid: paths, their kind, the stat field that
/// says when they last changed, and the event a newer change fires.
type VersionedWatches<'a> = (&'a [String], WatchKind, fn(&Stat) -> i64, ChangeKind);

/// The watches a reconnecting client asks to restore (setWatches/setWatches2).
struct WatchesToRestore<'a> {
    relative_zxid: i64,
    data: &'a [String],
    exist: &'a [String],
    child: &'a [String],
    persistent: &'a [String],
    recursive: &'a [String],
}
