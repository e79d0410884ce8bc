//! Server-side extensions (DESIGN §4, issue 4) on the leader's write path.
//!
//! Registration is a replicated write: a child of `/extensions` whose data is
//! the JSON declaration. The leader checks it (ADMIN on `/extensions`, the
//! declaration parses, the Lua compiles) before proposing; every replica
//! (re)loads it when the write applies, and unloads it when the node goes.
//!
//! A request on a node extension's subtree runs the extension at once
//! against the speculative tree (applied state + every proposed write), so
//! no other write can interleave with it; its writes become one multi
//! transaction. Its reply is held until the state it saw is committed, so a
//! client never observes a write that could still be lost.

use stoa_ext::{Delivery, ExtOp, ExtReply, ExtRequest, NodeKind, TreeView, WriteOp};
use stoa_proto::codes::ErrorCode;
use stoa_proto::opcode::{perms, CreateMode, OpCode};
use stoa_proto::records::{
    Create2Response, CreateRequest, CreateResponse, CreateTtlRequest, DeleteRequest,
    GetChildren2Response, GetChildrenResponse, GetDataResponse, SetDataRequest, Stat,
};
use stoa_proto::request::Request;
use stoa_proto::response::{MultiResult, Response};
use stoa_tree::{
    Caller, DataTree, PrepContext, ReplyShape, TreeEventKind, Txn, TxnHeader, TxnOp, TxnResult,
};

use super::apply::change_of;
use super::handoff::Identity;
use super::Engine;
use crate::session::{Pending, SessionId};
use crate::watch::{ConnId, WatchKind};

pub const EXTENSIONS_ROOT: &str = "/extensions";

/// `/extensions/<name>` → `<name>`; deeper or other paths → None.
pub fn registration_name(path: &str) -> Option<&str> {
    let name = path.strip_prefix(EXTENSIONS_ROOT)?.strip_prefix('/')?;
    (!name.is_empty() && !name.contains('/')).then_some(name)
}

/// Whether applying `op` registers, changes or removes an extension.
pub(super) fn changes_registration(op: &TxnOp) -> bool {
    match op {
        TxnOp::Create(c) => registration_name(&c.path).is_some(),
        TxnOp::Delete { path } | TxnOp::DeleteContainer { path } | TxnOp::SetData { path, .. } => {
            registration_name(path).is_some()
        }
        TxnOp::CloseSession { paths } => paths.iter().any(|p| registration_name(p).is_some()),
        TxnOp::Multi(ops) => ops.iter().any(changes_registration),
        TxnOp::Watched { op, extra, .. } => {
            changes_registration(op) || extra.iter().any(changes_registration)
        }
        _ => false,
    }
}

/// Where a client multi op's result comes from (`run_extension_multi`).
enum MultiPart {
    /// The multi transaction's op at this index.
    Plain(usize),
    /// What the extension answered.
    Extension(MultiResult),
}

/// The extension view of a tree.
pub(super) struct View<'a>(pub(super) &'a DataTree);

impl TreeView for View<'_> {
    fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), ErrorCode> {
        let node = self.0.node(path).ok_or(ErrorCode::NoNode)?;
        Ok((node.data().to_vec(), node.stat()))
    }

    fn exists(&self, path: &str) -> Option<Stat> {
        self.0.node(path).map(|n| n.stat())
    }

    fn get_children(&self, path: &str) -> Result<Vec<String>, ErrorCode> {
        let node = self.0.node(path).ok_or(ErrorCode::NoNode)?;
        Ok(node.children().map(String::from).collect())
    }

    /// The ordered child set answers a cursor in O(log n + limit), so an
    /// extension taking a queue's head does not list the whole queue.
    fn children_after(
        &self,
        path: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, ErrorCode> {
        let node = self.0.node(path).ok_or(ErrorCode::NoNode)?;
        Ok(node
            .children_after(after)
            .take(limit)
            .map(String::from)
            .collect())
    }

    fn next_sequence(&self, parent: &str) -> Result<i32, ErrorCode> {
        // The persisted cversion counts child creations: ZooKeeper's counter.
        Ok(self
            .0
            .node(parent)
            .ok_or(ErrorCode::NoNode)?
            .persisted()
            .cversion)
    }
}

impl Engine {
    /// Loads every registration in the tree (at start-up, after recovery).
    pub(super) fn load_extensions(&mut self) {
        let ttl_enabled = self.config.ttl_enabled;
        self.extensions.manager_mut().set_ttl_enabled(ttl_enabled);
        let names: Vec<String> = match self.cores[0].tree.node(EXTENSIONS_ROOT) {
            Some(root) => root.children().map(String::from).collect(),
            None => return,
        };
        for name in names {
            self.load_extension(&name);
        }
    }

    /// The tree was replaced wholesale (a snapshot from the leader): load
    /// what it registers, forget the rest.
    pub(super) fn reload_extensions(&mut self) {
        self.extensions.clear();
        self.load_extensions();
        self.extensions_changed();
    }

    fn load_extension(&mut self, name: &str) {
        let path = format!("{EXTENSIONS_ROOT}/{name}");
        let Some(node) = self.cores[0].tree.node(&path) else {
            return;
        };
        let data = node.data().to_vec();
        match self.extensions.register(name, &data) {
            Ok(()) => log::info!("extension {name} registered"),
            // The leader checked it before proposing; a replica that cannot load
            // it keeps serving and says why.
            Err(e) => log::error!("extension {name} cannot be loaded: {e}"),
        }
        self.extensions_changed();
    }

    /// Nothing reads the speculative tree once no node extension is left.
    fn extensions_changed(&mut self) {
        if !self.extensions.has_node_extensions() {
            self.drop_speculative();
        }
    }

    /// Called for every applied change under `/extensions`.
    pub(super) fn on_registration_change(&mut self, path: &str, deleted: bool) {
        let Some(name) = registration_name(path) else {
            return;
        };
        if deleted {
            if self.extensions.unregister(name) {
                log::info!("extension {name} unregistered");
            }
            self.extensions_changed();
        } else {
            self.load_extension(name);
        }
    }

    /// The leader's checks on a write that registers an extension. `Err`
    /// makes the write an error transaction.
    pub(super) fn check_registration(
        &self,
        ids: &[stoa_proto::records::Id],
        is_super: bool,
        request: &Request,
    ) -> Result<(), ErrorCode> {
        let (path, data) = match request {
            Request::Create(r) | Request::Create2(r) | Request::CreateContainer(r) => {
                (&r.path, &r.data)
            }
            Request::CreateTtl(r) => (&r.path, &r.data),
            Request::SetData(r) => (&r.path, &r.data),
            _ => return Ok(()),
        };
        let Some(name) = registration_name(path) else {
            return Ok(());
        };
        // `/extensions` may itself still be pending (a pipelined create).
        let root_acl = self.cores[0]
            .preparer
            .current_acl(&self.cores[0].tree, EXTENSIONS_ROOT)
            .ok_or(ErrorCode::NoNode)?;
        stoa_tree::check_acl(&root_acl, perms::ADMIN, Caller { ids, is_super })?;
        // A registration with null data is as invalid as an empty one.
        let data = data.as_deref().unwrap_or_default();
        let (kind, path) = self.extensions.check(name, data).map_err(|e| {
            log::warn!("extension {name} refused: {e}");
            e.error_code()
        })?;
        let Some(path) = path else {
            return Ok(());
        };
        if kind != stoa_ext::ExtensionKind::Node {
            // A watch extension hears of changes on every partition.
            return Ok(());
        }
        let partition = self.partition_of(&path);
        // A node extension runs on the partition of its path's group
        // (docs/partitions.md, "Extensions"): its subtree must lie there
        // whole, with no group root below it on another partition.
        let elsewhere = (self.placement.groups()).find(|&(root, on)| {
            root != path && stoa_tree::within(root, &path) && on as usize != partition
        });
        if let Some((root, on)) = elsewhere {
            log::warn!(
                "extension {name} refused: the group {root} below its path {path} lives on \
                 partition {on}, and an extension's subtree must lie in one group"
            );
            return Err(ErrorCode::BadArguments);
        }
        Ok(())
    }

    /// Leader: a registration change is proposed and not yet applied here.
    /// Extensions load as their registration applies, and a follower may
    /// apply it first: a client that saw its registration there and at
    /// once calls the extension would reach a leader that does not run it
    /// yet. So the leader holds client requests until it has applied every
    /// registration change it proposed (rare: one round trip each).
    pub(super) fn registration_pending(&mut self) -> bool {
        if self.holds.registrations_in_flight.is_empty() {
            return false;
        }
        let applied = self.cores[0].tree.last_zxid();
        let in_flight = &mut self.holds.registrations_in_flight;
        while in_flight.front().is_some_and(|&zxid| zxid <= applied) {
            in_flight.pop_front();
        }
        !in_flight.is_empty()
    }

    /// The node extension that owns this request's path, if any.
    pub(super) fn extension_for(&self, request: &Request) -> Option<String> {
        if !self.extensions.has_node_extensions() {
            return None;
        }
        extension_request(request, 0).and_then(|r| self.extensions.node_extension_for(&r.path))
    }

    /// Leader, before a session's close (`propose_close_session`): each node
    /// extension owning one of the session's ephemerals runs that
    /// ephemeral's delete as the session would, so that a lock held through
    /// an extension is released and handed over rather than left naming a
    /// dead holder. Its writes are a transaction of their own, proposed
    /// just ahead of the close; whatever the extension leaves, the close
    /// deletes.
    pub(super) fn release_through_extensions(&mut self, sid: SessionId) {
        if !self.extensions.has_node_extensions() {
            return;
        }
        // The partitions node extensions run on (their groups').
        let mut partitions: Vec<usize> = (self.extensions.node_extension_paths())
            .map(|path| self.partition_of(path))
            .collect();
        partitions.sort_unstable();
        partitions.dedup();
        let mut owned: Vec<(String, String)> = Vec::new();
        for partition in partitions {
            self.prepare_extension_state(partition);
            let tree = self.cores[partition].current_tree();
            owned.extend(
                (tree.ephemerals(sid))
                    .filter_map(|p| Some((self.extensions.node_extension_for(p)?, p.to_owned()))),
            );
        }
        for (name, path) in owned {
            let request = Request::Delete(DeleteRequest { path, version: -1 });
            let (err, _, writes) = self.call_node_extension(&name, &request, sid);
            if err == ErrorCode::Ok && !writes.is_empty() {
                self.propose_internal_writes(&name, sid, writes);
            }
        }
    }

    /// A multi (or multiRead) with an op on a node extension's path: the
    /// leader runs it as one transaction, extension ops included
    /// (`run_extension_multi`); a multiRead of one is refused.
    pub(super) fn multi_touches_extension(&self, request: &Request) -> bool {
        let ops = match request {
            Request::Multi(ops) | Request::MultiRead(ops)
                if self.extensions.has_node_extensions() =>
            {
                ops
            }
            _ => return false,
        };
        ops.iter().any(|op| {
            op.path()
                .is_some_and(|p| self.extensions.node_extension_for(p).is_some())
        })
    }

    /// Runs a node extension for a client request and queues its reply.
    /// A follower runs it on its own state and answers calls that only
    /// read; one that writes goes to the leader, which runs it again on the
    /// leader's state and sends the answer back.
    pub(super) fn on_extension_request(
        &mut self,
        conn: ConnId,
        sid: SessionId,
        xid: i32,
        name: &str,
        request: Request,
    ) {
        if self.is_leader() {
            // Its place in the session's order, filled in when the leader
            // runs it (at once, or once it may prepare).
            self.queue_remote(sid, xid, &request);
            self.admit_local(conn, sid, xid, request, true);
            return;
        }
        let (err, response, writes) = self.call_node_extension(name, &request, sid);
        if writes.is_empty() {
            // A read: what it saw here is committed already.
            let watch = watch_left(&request, err);
            return self.queue_decided(sid, xid, 0, err, response, watch);
        }
        self.queue_remote(sid, xid, &request);
        self.forward_write(conn, sid, xid, request, true);
    }

    /// A client's multi with ops on extensions' paths: the leader runs it
    /// (`leader_extension_multi`), a follower sends it there; its reply
    /// waits in the session's order.
    pub(super) fn on_extension_multi(
        &mut self,
        conn: ConnId,
        sid: SessionId,
        xid: i32,
        request: Request,
    ) {
        self.queue_remote(sid, xid, &request);
        if self.is_leader() {
            self.admit_local(conn, sid, xid, request, true);
        } else {
            self.forward_write(conn, sid, xid, request, true);
        }
    }

    fn queue_remote(&mut self, sid: SessionId, xid: i32, request: &Request) {
        if let Some(s) = self.gate.sessions.get_mut(&sid) {
            s.queue.push_back(Pending::Remote {
                xid,
                op: request.opcode(),
                watch: watched_path(request).map(str::to_owned),
            });
        }
    }

    /// Leader: runs the extension a forwarded (or held) request routes to
    /// and answers its origin.
    pub(super) fn leader_extension_write(
        &mut self,
        origin: (u64, ConnId),
        sid: SessionId,
        xid: i32,
        ids: &[stoa_proto::records::Id],
        name: &str,
        request: &Request,
    ) {
        let (err, response, after_zxid) = self.leader_extension_call(name, request, sid, xid, ids);
        self.answer_extension_call(origin, sid, xid, err, response, after_zxid);
    }

    /// Leader: a client's multi with ops on node extensions' paths, run as
    /// one transaction (`run_extension_multi`) and answered to its origin
    /// as an extension call is.
    pub(super) fn leader_extension_multi(
        &mut self,
        origin: (u64, ConnId),
        sid: SessionId,
        xid: i32,
        identity: &Identity,
        ops: &[Request],
    ) {
        let (response, after_zxid) = self.run_extension_multi(sid, xid, identity, ops);
        self.answer_extension_call(origin, sid, xid, ErrorCode::Ok, response, after_zxid);
    }

    /// The answer to a call run on the leader, for the connection it came
    /// from: this server's own, or a follower's through an engine message.
    fn answer_extension_call(
        &mut self,
        origin: (u64, ConnId),
        sid: SessionId,
        xid: i32,
        err: ErrorCode,
        response: Response,
        after_zxid: i64,
    ) {
        let (server, conn) = origin;
        if server == self.config.server_id {
            return self.resolve_remote(sid, conn, xid, after_zxid, err, response);
        }
        let mut body = Vec::new();
        if err == ErrorCode::Ok {
            response.encode(&mut body);
        }
        let reply = super::forward::EngineMessage::ExtensionReply {
            session_id: sid,
            conn,
            xid,
            after_zxid,
            err: err.as_i32(),
            response: body,
        };
        self.out.engine_messages.push((server, reply));
    }

    /// Leader: the ops of a client's multi in order, as one transaction. A
    /// plain op is prepared as in any multi, as the client. An op on a node
    /// extension's path runs the extension against the tree as the ops
    /// before it leave it, and the extension's writes join the multi (with
    /// the server's authority, as any extension call's). A failure anywhere
    /// fails the whole multi as ZooKeeper's does (`Ok` before the failing
    /// op, its code, `RuntimeInconsistency` after), committed as an error
    /// transaction. Returns the reply and the zxid it waits for.
    fn run_extension_multi(
        &mut self,
        sid: SessionId,
        xid: i32,
        identity: &Identity,
        ops: &[Request],
    ) -> (Response, i64) {
        // Every op on the partition of the extension's group: the
        // extension's view and the multi's prep are that partition's.
        let partitions: Vec<usize> = (ops.iter().filter_map(Request::path))
            .map(|path| self.partition_of(path))
            .collect();
        let partition = partitions.first().copied().unwrap_or(0);
        let across = partitions.iter().position(|&p| p != partition);
        self.prepare_extension_state(partition);
        let header = TxnHeader {
            session_id: sid,
            cxid: xid,
            zxid: self.peek_next_zxid(),
            time_ms: self.now_ms,
        };
        let client = PrepContext {
            session_id: sid,
            cxid: xid,
            zxid: header.zxid,
            time_ms: header.time_ms,
            ids: &identity.ids,
            is_super: identity.is_super,
            ttl_enabled: self.config.ttl_enabled,
        };
        let server = PrepContext {
            is_super: true,
            ..client
        };
        // The leader's current state: applied plus proposed (O(1) clone).
        let base = self.speculative_tree(partition).clone();
        let mark = self.cores[partition].preparer.begin_multi();
        let mut txns: Vec<TxnOp> = Vec::new();
        let mut parts: Vec<MultiPart> = Vec::with_capacity(ops.len());
        let mut failed: Option<(usize, ErrorCode)> = None;
        if let Some(at) = across {
            log::info!(
                "a multi of session {sid:#x} with an extension's op spans partitions \
                 {partition} and {}: refused",
                partitions[at]
            );
            // The ops with a path are counted: find the op itself.
            let op_at = (ops.iter().enumerate())
                .filter(|(_, op)| op.path().is_some())
                .nth(at)
                .map_or(0, |(i, _)| i);
            failed = Some((op_at, ErrorCode::BadArguments));
        }
        let ops_to_run = if failed.is_none() { ops } else { &[] };
        for (i, op) in ops_to_run.iter().enumerate() {
            let name = op
                .path()
                .and_then(|p| self.extensions.node_extension_for(p));
            let part = match name {
                None => {
                    let core = &mut self.cores[partition];
                    (core.preparer.multi_op(&core.tree, &client, op)).map(|txn| {
                        txns.push(txn);
                        MultiPart::Plain(txns.len() - 1)
                    })
                }
                Some(name) => {
                    let at = (partition, &header, &base);
                    self.extension_multi_op(&name, op, at, &mut txns, &server)
                }
            };
            match part {
                Ok(part) => parts.push(part),
                Err(code) => {
                    failed = Some((i, code));
                    break;
                }
            }
        }
        let keep = failed.is_none();
        self.cores[partition].preparer.end_multi(mark, keep);
        let zxid = self.next_zxid();
        debug_assert_eq!(zxid, header.zxid, "nothing took a zxid while the multi ran");
        if let Some((at, code)) = failed {
            self.stats.request_errors += 1;
            let failure = stoa_tree::PrepError::failed_multi(ops.len(), at, code);
            let stoa_tree::PrepError::Multi(codes) = &failure else {
                unreachable!("failed_multi is a multi's failure")
            };
            let response = Response::Multi(codes.iter().map(|c| MultiResult::Error(*c)).collect());
            let op = failure.into_txn_op();
            self.propose_on(partition, Txn { header, op });
            return (response, zxid);
        }
        let txn = Txn {
            header,
            op: TxnOp::Multi(txns),
        };
        // The plain ops' results as the transaction will apply.
        let mut after = base;
        let applied = after.apply(&txn);
        let TxnResult::Multi(results) = &applied.result else {
            unreachable!("a multi applies to a multi's results")
        };
        let response = Response::Multi(
            parts
                .into_iter()
                .zip(ops)
                .map(|(part, op)| match part {
                    MultiPart::Plain(j) => ReplyShape::of(op).multi_result(&results[j]),
                    MultiPart::Extension(result) => result,
                })
                .collect(),
        );
        drop(applied);
        self.propose_on(partition, txn);
        (response, zxid)
    }

    /// One op of `run_extension_multi` on a node extension's path: the
    /// extension runs against `base` with the multi's ops so far applied,
    /// and its writes are prepared into the multi.
    fn extension_multi_op(
        &mut self,
        name: &str,
        op: &Request,
        (partition, header, base): (usize, &TxnHeader, &DataTree),
        txns: &mut Vec<TxnOp>,
        server: &PrepContext<'_>,
    ) -> Result<MultiPart, ErrorCode> {
        // A check on an extension's path has nothing to run.
        let request = extension_request(op, header.session_id).ok_or(ErrorCode::Unimplemented)?;
        let mut view = base.clone();
        if !txns.is_empty() {
            view.apply(&Txn {
                header: *header,
                op: TxnOp::Multi(txns.clone()),
            });
        }
        let stamp = stoa_ext::TxnStamp {
            zxid: header.zxid,
            time_ms: header.time_ms,
        };
        let outcome = (self.extensions.manager_mut())
            .call_stamped(name, &request, &View(&view), Some(stamp))
            .map_err(|e| {
                log::warn!(
                    "extension {name} failed in a multi on {}: {e}",
                    request.path
                );
                e.error_code()
            })?;
        let response = response_for_extension(op, outcome.reply?)?;
        for write in outcome.writes {
            let write = write_request(write);
            let core = &mut self.cores[partition];
            let txn = (core.preparer.multi_op(&core.tree, server, &write)).map_err(|code| {
                // The extension's view and prep agree: a bug in one of them.
                log::error!("extension {name}'s write in a multi refused by prep: {code:?}");
                ErrorCode::SystemError
            })?;
            txns.push(txn);
        }
        Ok(MultiPart::Extension(match response {
            Response::Create(r) => MultiResult::Create(r.path),
            Response::Create2(r) => MultiResult::Create2(r.path, r.stat),
            Response::Stat(stat) => MultiResult::SetData(stat),
            _ => MultiResult::Delete,
        }))
    }

    /// The answer to an extension call sent to the leader.
    pub(super) fn on_extension_reply(
        &mut self,
        sid: SessionId,
        conn: ConnId,
        xid: i32,
        after_zxid: i64,
        err: i32,
        body: &[u8],
    ) {
        let op = self.gate.sessions.get(&sid).and_then(|s| {
            s.queue.iter().find_map(|p| match p {
                Pending::Remote { xid: x, op, .. } if *x == xid => Some(*op),
                _ => None,
            })
        });
        let Some(op) = op else {
            return; // the connection has gone meanwhile
        };
        let err = ErrorCode::from_i32(err).unwrap_or(ErrorCode::SystemError);
        let response = if err == ErrorCode::Ok {
            match Response::decode(op, &mut stoa_proto::jute::Reader::new(body)) {
                Ok(r) => r,
                Err(e) => {
                    log::error!("the leader's extension answer does not decode: {e}");
                    return self.resolve_remote(
                        sid,
                        conn,
                        xid,
                        0,
                        ErrorCode::SystemError,
                        Response::Empty,
                    );
                }
            }
        } else {
            Response::Empty
        };
        self.resolve_remote(sid, conn, xid, after_zxid, err, response);
    }

    fn resolve_remote(
        &mut self,
        sid: SessionId,
        conn: ConnId,
        xid: i32,
        after_zxid: i64,
        err: ErrorCode,
        response: Response,
    ) {
        let Some(s) = self
            .gate
            .sessions
            .get_mut(&sid)
            .filter(|s| s.conn == Some(conn))
        else {
            return;
        };
        let slot = s
            .queue
            .iter_mut()
            .find(|p| matches!(p, Pending::Remote { xid: x, .. } if *x == xid));
        if let Some(slot) = slot {
            let watch = match slot {
                Pending::Remote { op, watch, .. } => watch
                    .take()
                    .and_then(|path| Some((watch_kind(*op, err)?, path))),
                _ => None,
            };
            *slot = Pending::Decided {
                xid,
                after_zxid,
                err,
                response,
                watch,
            };
        }
        self.pump(sid);
    }

    /// Readies the state an extension call sees: the leader's speculative tree
    /// (applied + proposed), or a follower's applied tree (it proposes
    /// nothing; the speculative copy would go stale as entries apply).
    pub(super) fn prepare_extension_state(&mut self, partition: usize) {
        if self.is_leader() {
            self.speculative_tree(partition);
        } else {
            self.drop_speculative();
        }
    }

    /// The partition an extension call on `request` runs on: its path's
    /// group's, where the extension's whole subtree lies
    /// (`check_registration`).
    fn extension_partition(&self, request: &Request) -> usize {
        request.path().map_or(0, |path| self.partition_of(path))
    }

    /// Runs the extension on the current state: (error, reply, writes).
    fn call_node_extension(
        &mut self,
        name: &str,
        request: &Request,
        sid: SessionId,
    ) -> (ErrorCode, Response, Vec<WriteOp>) {
        let Some(ext_request) = extension_request(request, sid) else {
            return (ErrorCode::Unimplemented, Response::Empty, Vec::new());
        };
        let partition = self.extension_partition(request);
        self.prepare_extension_state(partition);
        // On the leader the call's writes become the next transaction, so
        // the stats it replies with can carry that zxid; a follower's run
        // of a writing call is discarded (the leader runs it again).
        let stamp = self.is_leader().then(|| stoa_ext::TxnStamp {
            zxid: self.peek_next_zxid(),
            time_ms: self.now_ms,
        });
        let view = View(self.cores[partition].current_tree());
        let outcome = self
            .extensions
            .manager_mut()
            .call_stamped(name, &ext_request, &view, stamp);
        match outcome {
            Err(e) => {
                log::warn!(
                    "extension {name} failed on {} {}: {e}",
                    ext_request.op.name(),
                    ext_request.path
                );
                (e.error_code(), Response::Empty, Vec::new())
            }
            Ok(outcome) => match outcome.reply {
                Err(code) => (code, Response::Empty, Vec::new()),
                Ok(reply) => match response_for_extension(request, reply) {
                    Ok(response) => (ErrorCode::Ok, response, outcome.writes),
                    Err(code) => (code, Response::Empty, Vec::new()),
                },
            },
        }
    }

    /// Leader: runs the extension, proposes its writes as one multi, and
    /// returns the answer with the zxid it must wait for.
    fn leader_extension_call(
        &mut self,
        name: &str,
        request: &Request,
        sid: SessionId,
        xid: i32,
        ids: &[stoa_proto::records::Id],
    ) -> (ErrorCode, Response, i64) {
        let (err, response, writes) = self.call_node_extension(name, request, sid);
        // The reply waits until what the extension saw (or wrote) is
        // committed: every proposal its partition's state holds, a part
        // proposed through another group's log included.
        let partition = self.extension_partition(request);
        let after_zxid = (self
            .pending_ops_on(partition)
            .map(|(header, _)| header.zxid))
        .max()
        .unwrap_or(0);
        if writes.is_empty() {
            return (err, response, after_zxid);
        }
        match self.propose_extension_writes(partition, ids, sid, xid, writes) {
            Ok(zxid) => (err, response, zxid),
            Err(code) => (code, Response::Empty, self.applied_zxid()),
        }
    }

    fn queue_decided(
        &mut self,
        sid: SessionId,
        xid: i32,
        after_zxid: i64,
        err: ErrorCode,
        response: Response,
        watch: Option<(WatchKind, String)>,
    ) {
        if let Some(s) = self.gate.sessions.get_mut(&sid) {
            s.queue.push_back(Pending::Decided {
                xid,
                after_zxid,
                err,
                response,
                watch,
            });
        }
        self.pump(sid);
    }

    fn propose_extension_writes(
        &mut self,
        partition: usize,
        ids: &[stoa_proto::records::Id],
        sid: SessionId,
        xid: i32,
        writes: Vec<WriteOp>,
    ) -> Result<i64, ErrorCode> {
        let ops: Vec<Request> = writes.into_iter().map(write_request).collect();
        let zxid = self.next_zxid();
        let ctx = stoa_tree::PrepContext {
            session_id: sid,
            cxid: xid,
            zxid,
            time_ms: self.now_ms,
            ids,
            // The extension acts with the server's authority; registering it
            // needed ADMIN.
            is_super: true,
            ttl_enabled: self.config.ttl_enabled,
        };
        match self.cores[partition]
            .preparing(|preparer, tree| preparer.prepare(tree, &ctx, &Request::Multi(ops)))
        {
            Ok(txn) => {
                self.propose_on(partition, txn);
                Ok(zxid)
            }
            // The speculative view and prep agree, so this means a bug in one
            // of them; refuse the call rather than commit something else.
            Err(e) => {
                log::error!("extension writes refused by prep: {e:?}");
                Err(ErrorCode::SystemError)
            }
        }
    }

    /// Leader: runs the watch extensions on the changes `txn` makes, on the
    /// tree as it will be right after it, and folds what they decide into
    /// the transaction (issue 25): their writes join it, and watchers hear
    /// of the events they chose, the writes' own changes included
    /// (`TxnOp::Watched`). Followers deliver what the leader decided.
    /// Without watch extensions, or when they change nothing, `txn` goes as
    /// it is. They run on the state of the partition `txn` goes to, and
    /// their writes are prepared there: one outside it is refused by prep
    /// and the writes are dropped, with a warning. A transaction of parts
    /// is decided part by part, each on its partition's state and with the
    /// events about that partition's own nodes (`Engine::apply_parts`
    /// fires no other), so an extension hears of a group root's create or
    /// a session's close over several partitions as on one.
    pub(super) fn decide_watches(&mut self, partition: usize, txn: Txn) -> Txn {
        if !self.extensions.has_watch_extensions() {
            return txn;
        }
        let Txn { header, op } = txn;
        let op = match op {
            TxnOp::Parts { parts, order } => TxnOp::Parts {
                parts: (parts.into_iter())
                    .map(|(part, op)| {
                        (
                            part,
                            self.decide_op_watches(part as usize, header, op, true),
                        )
                    })
                    .collect(),
                order,
            },
            op => self.decide_op_watches(partition, header, op, false),
        };
        Txn { header, op }
    }

    /// `decide_watches` of one op on `partition`; `part`: the op is a part
    /// of a transaction over several partitions, whose events about other
    /// partitions' nodes (a link, a tree's own `/`) are not this one's.
    fn decide_op_watches(
        &mut self,
        partition: usize,
        header: TxnHeader,
        op: TxnOp,
        part: bool,
    ) -> TxnOp {
        if matches!(
            op,
            TxnOp::Seal { .. } | TxnOp::Error(_) | TxnOp::Watched { .. } | TxnOp::Restore { .. }
        ) {
            return op;
        }
        let txn = Txn { header, op };
        let before = self.speculative_tree(partition).clone();
        let mut after = before.clone();
        // `apply_part`: as a part applies (a nested group root's node may
        // hang from stubs); a whole transaction's creates have parents.
        let all: Vec<(TreeEventKind, String)> = (after.apply_part(&txn).events.into_iter())
            .map(|event| (event.kind, event.path.into_owned()))
            .collect();
        let own_events = all.len();
        let own_node = |engine: &Self, path: &str| !part || engine.partition_of(path) == partition;
        let natural: Vec<(TreeEventKind, String)> = (all.into_iter())
            .filter(|(_, path)| own_node(self, path))
            .collect();
        let mut events = Vec::with_capacity(natural.len());
        let mut writes = Vec::new();
        let mut rewritten = false;
        for (kind, path) in natural {
            let event_type = change_of(kind).event_type();
            let results =
                (self.extensions.manager_mut()).watch_event(&path, event_type, &View(&after));
            let mut as_is = true;
            let mut instead = Vec::new();
            for (name, result) in results {
                match result {
                    Ok(outcome) => {
                        match outcome.delivery {
                            Delivery::AsIs => {}
                            Delivery::Suppressed => as_is = false,
                            Delivery::Instead(list) => {
                                as_is = false;
                                instead.extend(list);
                            }
                        }
                        writes.extend(outcome.writes);
                    }
                    Err(e) => log::warn!("watch extension {name} failed on {path}: {e}"),
                }
            }
            rewritten |= !as_is;
            if as_is {
                events.push((kind, path));
            }
            events.extend(
                instead
                    .into_iter()
                    .filter_map(|(t, p)| Some((tree_kind(t)?, p))),
            );
        }
        let extra = if writes.is_empty() {
            Vec::new()
        } else {
            let ops: Vec<Request> = writes.into_iter().map(write_request).collect();
            let ctx = self.internal_ctx(0, header.zxid);
            match self.cores[partition]
                .preparing(|preparer, tree| preparer.prepare(tree, &ctx, &Request::Multi(ops)))
            {
                Ok(Txn {
                    op: TxnOp::Multi(ops),
                    ..
                }) => ops,
                Ok(other) => {
                    log::warn!(
                        "watch extensions' writes prepared as {:?}: dropped",
                        other.op
                    );
                    Vec::new()
                }
                Err(e) => {
                    log::warn!("watch extensions' writes refused: {e:?}");
                    Vec::new()
                }
            }
        };
        if extra.is_empty() && !rewritten {
            return txn.op;
        }
        let mut watched = Txn {
            header,
            op: TxnOp::Watched {
                op: Box::new(txn.op),
                extra,
                events: Vec::new(),
            },
        };
        // The writes' own changes reach their watchers as they are: the
        // events past the op's own in what the whole transaction makes.
        let mut tree = before;
        events.extend(
            (tree
                .apply_part(&watched)
                .events
                .into_iter()
                .skip(own_events))
            .map(|event| (event.kind, event.path.into_owned()))
            .filter(|(_, path)| own_node(self, path)),
        );
        if let TxnOp::Watched {
            events: decided, ..
        } = &mut watched.op
        {
            *decided = events;
        }
        watched.op
    }
}

/// The tree's name of an event a watch extension chose (the four node
/// events; the manager allows no other).
fn tree_kind(event: stoa_ext::EventType) -> Option<TreeEventKind> {
    use stoa_ext::EventType;
    Some(match event {
        EventType::NodeCreated => TreeEventKind::NodeCreated,
        EventType::NodeDeleted => TreeEventKind::NodeDeleted,
        EventType::NodeDataChanged => TreeEventKind::NodeDataChanged,
        EventType::NodeChildrenChanged => TreeEventKind::NodeChildrenChanged,
        _ => return None,
    })
}

/// The path a read on an extension's node asks to watch, if it does.
fn watched_path(request: &Request) -> Option<&str> {
    match request {
        Request::GetData(r) if r.watch => Some(&r.path),
        Request::Exists(r) if r.watch => Some(&r.path),
        Request::GetChildren(r) if r.watch => Some(&r.path),
        Request::GetChildren2(r) if r.watch => Some(&r.path),
        _ => None,
    }
}

/// The watch a read answered with `err` leaves, as ZooKeeper's own reads
/// do: getData and a found exists a data watch, exists on a missing node
/// an exist watch, getChildren a child watch; none after another error.
fn watch_kind(op: OpCode, err: ErrorCode) -> Option<WatchKind> {
    match (op, err) {
        (OpCode::GetData | OpCode::Exists, ErrorCode::Ok) => Some(WatchKind::Data),
        (OpCode::Exists, ErrorCode::NoNode) => Some(WatchKind::Exist),
        (OpCode::GetChildren | OpCode::GetChildren2, ErrorCode::Ok) => Some(WatchKind::Child),
        _ => None,
    }
}

/// The watch an extension's read of `request` leaves after answering `err`.
fn watch_left(request: &Request, err: ErrorCode) -> Option<(WatchKind, String)> {
    let path = watched_path(request)?;
    Some((watch_kind(request.opcode(), err)?, path.to_owned()))
}

fn extension_request(request: &Request, session_id: i64) -> Option<ExtRequest> {
    let (op, path, data, version) = match request {
        Request::Create(r) | Request::Create2(r) => (
            ExtOp::Create { flags: r.flags },
            &r.path,
            r.data.clone().unwrap_or_default(),
            -1,
        ),
        Request::Delete(r) => (ExtOp::Delete, &r.path, Vec::new(), r.version),
        Request::GetData(r) => (ExtOp::GetData, &r.path, Vec::new(), -1),
        // Extensions see null data as empty (Lua strings have no null).
        Request::SetData(r) => (
            ExtOp::SetData,
            &r.path,
            r.data.clone().unwrap_or_default(),
            r.version,
        ),
        Request::Exists(r) => (ExtOp::Exists, &r.path, Vec::new(), -1),
        Request::GetChildren(r) => (ExtOp::GetChildren, &r.path, Vec::new(), -1),
        Request::GetChildren2(r) => (ExtOp::GetChildren, &r.path, Vec::new(), -1),
        _ => return None,
    };
    Some(ExtRequest {
        op,
        path: path.clone(),
        data,
        version,
        session_id,
    })
}

pub(super) fn write_request(write: WriteOp) -> Request {
    match write {
        WriteOp::Create {
            path,
            data,
            kind,
            acl,
        } => {
            let create = |mode: CreateMode| CreateRequest {
                path,
                data: Some(data),
                acl,
                flags: mode.flags(),
            };
            // The sequence suffix is in the path already.
            match kind {
                NodeKind::Persistent => Request::Create(create(CreateMode::Persistent)),
                NodeKind::Ephemeral => Request::Create(create(CreateMode::Ephemeral)),
                NodeKind::Container => Request::CreateContainer(create(CreateMode::Container)),
                NodeKind::Ttl { ttl_ms } => {
                    let r = create(CreateMode::PersistentWithTtl);
                    Request::CreateTtl(CreateTtlRequest {
                        path: r.path,
                        data: r.data,
                        acl: r.acl,
                        flags: r.flags,
                        ttl: ttl_ms,
                    })
                }
            }
        }
        WriteOp::Delete { path, version } => Request::Delete(DeleteRequest { path, version }),
        WriteOp::SetData {
            path,
            data,
            version,
        } => Request::SetData(SetDataRequest {
            path,
            data: Some(data),
            version,
        }),
    }
}

/// The reply the client's request kind expects, from what the extension returned.
fn response_for_extension(request: &Request, reply: ExtReply) -> Result<Response, ErrorCode> {
    let stat = reply.stat.clone().unwrap_or_default();
    Ok(match request {
        Request::Create(r) => Response::Create(CreateResponse {
            path: reply.path.unwrap_or_else(|| r.path.clone()),
        }),
        Request::Create2(r) => Response::Create2(Create2Response {
            path: reply.path.unwrap_or_else(|| r.path.clone()),
            stat,
        }),
        Request::Delete(_) => Response::Empty,
        Request::GetData(_) => Response::GetData(GetDataResponse {
            data: Some(reply.data.unwrap_or_default()),
            stat,
        }),
        Request::SetData(_) => Response::Stat(stat),
        Request::Exists(_) => Response::Stat(reply.stat.ok_or(ErrorCode::NoNode)?),
        Request::GetChildren(_) => Response::GetChildren(GetChildrenResponse {
            children: reply.children.unwrap_or_default(),
        }),
        Request::GetChildren2(_) => Response::GetChildren2(GetChildren2Response {
            children: reply.children.unwrap_or_default(),
            stat,
        }),
        _ => return Err(ErrorCode::Unimplemented),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_direct_children_of_extensions_are_registrations() {
        assert_eq!(registration_name("/extensions/q"), Some("q"));
        assert_eq!(registration_name("/extensions"), None);
        assert_eq!(registration_name("/extensions/"), None);
        assert_eq!(registration_name("/extensions/q/x"), None);
        assert_eq!(registration_name("/extensionsx/q"), None);
    }
}
