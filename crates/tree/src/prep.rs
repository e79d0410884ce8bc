//! The leader's `PrepRequestProcessor`: turns a client write into a [`Txn`]
//! against the committed tree plus the txns prepared but not yet applied
//! (ZooKeeper's `outstandingChanges`), with ZooKeeper's checks in
//! ZooKeeper's order.

use std::collections::{BTreeSet, VecDeque};
use std::hash::BuildHasher;

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use stoa_proto::codes::ErrorCode;
use stoa_proto::opcode::{perms, CreateMode};
use stoa_proto::records::{Acl, Id};
use stoa_proto::request::Request;

use crate::acl::{self, Caller};
use crate::ephemeral::{self, EphemeralKind, CONTAINER_OWNER};
use crate::fast;
use crate::node::{shared_acl, PersistedStat, SharedAcl};
use crate::path;
use crate::tree::DataTree;
use crate::txn::{CreateTxn, Txn, TxnHeader, TxnOp};

/// Everything about the request that is not in its body.
#[derive(Debug, Clone, Copy)]
pub struct PrepContext<'a> {
    pub session_id: i64,
    pub cxid: i32,
    /// Assigned by the caller; every op of a multi shares it.
    pub zxid: i64,
    pub time_ms: i64,
    /// The session's authenticated ids, the connection's `ip` id included.
    pub ids: &'a [Id],
    pub is_super: bool,
    /// `zookeeper.extendedTypesEnabled`: TTL nodes allowed.
    pub ttl_enabled: bool,
}

impl PrepContext<'_> {
    /// The error transaction a write that failed to prepare commits in its
    /// place (`PrepError::into_txn_op`), under this context's header.
    pub fn failed(&self, e: PrepError) -> Txn {
        Txn {
            header: self.header(),
            op: e.into_txn_op(),
        }
    }

    pub fn header(&self) -> TxnHeader {
        TxnHeader {
            session_id: self.session_id,
            cxid: self.cxid,
            zxid: self.zxid,
            time_ms: self.time_ms,
        }
    }

    fn caller(&self) -> Caller<'_> {
        Caller {
            ids: self.ids,
            is_super: self.is_super,
        }
    }
}

/// Where a multi prepared op by op began (`Preparer::begin_multi`).
#[derive(Debug, Clone, Copy)]
pub struct MultiMark(usize);

/// The op kinds a multi may hold.
pub fn is_multi_op(op: &Request) -> bool {
    matches!(
        op,
        Request::Create(_)
            | Request::Create2(_)
            | Request::CreateContainer(_)
            | Request::CreateTtl(_)
            | Request::Delete(_)
            | Request::SetData(_)
            | Request::Check(_)
    )
}

/// Why a write was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrepError {
    /// A single op failed with this code.
    Code(ErrorCode),
    /// A multi failed: `Ok` for the ops before the failing one, its code,
    /// `RuntimeInconsistency` for the ops after.
    Multi(Vec<ErrorCode>),
}

impl PrepError {
    /// A multi of `ops` ops whose op `at` failed with `code`: `Ok` before
    /// it, `code`, `RuntimeInconsistency` after, as ZooKeeper reports it.
    pub fn failed_multi(ops: usize, at: usize, code: ErrorCode) -> PrepError {
        PrepError::Multi(
            (0..ops)
                .map(|i| match i.cmp(&at) {
                    std::cmp::Ordering::Less => ErrorCode::Ok,
                    std::cmp::Ordering::Equal => code,
                    std::cmp::Ordering::Greater => ErrorCode::RuntimeInconsistency,
                })
                .collect(),
        )
    }

    /// The failed op as ZooKeeper still commits it: an error txn that takes
    /// a zxid and changes nothing. Commit it to keep zxids in step with
    /// ZooKeeper; its apply result gives the reply.
    pub fn into_txn_op(self) -> TxnOp {
        match self {
            PrepError::Code(code) => TxnOp::Error(code),
            PrepError::Multi(codes) => TxnOp::Multi(codes.into_iter().map(TxnOp::Error).collect()),
        }
    }
}

/// ZooKeeper's `ChangeRecord`: the state of a path as pending txns leave it.
#[derive(Debug, Clone)]
struct Record {
    /// `None`: deleted by a pending txn.
    stat: Option<PersistedStat>,
    child_count: usize,
    acl: SharedAcl,
}

#[derive(Debug)]
struct Pending {
    zxid: i64,
    seq: u64,
    /// The path's hash, and where its bytes are in [`PathRing`].
    hash: u64,
    path: PathSpan,
    /// The owner of the record's node; `None` for a deletion.
    owner: Option<i64>,
}

/// The latest record of one path: its `seq` ties it to its queue entry,
/// whose bytes in [`PathRing`] hold the path.
#[derive(Debug, Clone)]
struct Latest {
    hash: u64,
    seq: u64,
    path: PathSpan,
    record: Record,
}

/// A path's bytes in [`PathRing`]: absolute offset and length.
#[derive(Debug, Clone, Copy)]
struct PathSpan {
    at: u64,
    len: u32,
}

/// The paths of the pending changes, one after another in queue order.
/// Entries leave the queue at its front (applied) or its back (a multi
/// rolled back), so their paths can share one buffer: a change costs a
/// copy of its path and no allocation of its own. (With a shared path
/// allocated per change, that record keeping was about a tenth of a
/// standalone server's CPU per setData.)
#[derive(Debug, Default)]
struct PathRing {
    bytes: Vec<u8>,
    /// Absolute offset of `bytes[0]`.
    start: u64,
}

impl PathRing {
    fn push(&mut self, path: &str) -> PathSpan {
        let at = self.start + self.bytes.len() as u64;
        self.bytes.extend_from_slice(path.as_bytes());
        PathSpan {
            at,
            len: u32::try_from(path.len()).expect("a path fits a frame"),
        }
    }

    /// The path's bytes: what a lookup compares, with no UTF-8 check.
    fn bytes(&self, span: PathSpan) -> &[u8] {
        let from = usize::try_from(span.at - self.start).expect("a live span");
        &self.bytes[from..from + span.len as usize]
    }

    fn get(&self, span: PathSpan) -> &str {
        // Only whole `&str`s go in, and spans cut at their bounds.
        std::str::from_utf8(self.bytes(span)).expect("a pushed path")
    }

    /// Forgets every byte before `at` (the front entry left the queue).
    fn release_before(&mut self, at: u64) {
        let n = usize::try_from(at - self.start).expect("a live offset");
        // Moving the live tail down only once the dead head outweighs it
        // keeps the copying amortized O(1) per byte.
        if n >= self.bytes.len() / 2 {
            self.bytes.drain(..n);
            self.start = at;
        }
    }

    /// Forgets every byte from `at` on (entries left the queue's back).
    fn truncate(&mut self, at: u64) {
        let n = usize::try_from(at - self.start).expect("a live offset");
        self.bytes.truncate(n);
    }

    fn clear(&mut self) {
        self.start += self.bytes.len() as u64;
        self.bytes.clear();
    }
}

/// The `by_path` entry a multi's change replaced, for rollback: the path's
/// hash, the change's seq, and the entry before it.
type Undo = (u64, u64, Option<Latest>);

/// Pending changes of prepared, not yet applied, txns.
///
/// Records are keyed by the path exactly as ZooKeeper keys them, so the
/// root's alias `""` (the parent of `/a`) and `"/"` are separate records.
#[derive(Debug, Default)]
pub struct Preparer {
    /// In zxid order.
    queue: VecDeque<Pending>,
    paths: PathRing,
    /// Latest record per path.
    by_path: HashTable<Latest>,
    next_seq: u64,
    /// While preparing a multi: previous `by_path` values, for rollback.
    undo: Option<Vec<Undo>>,
}

fn path_hash(p: &str) -> u64 {
    FxBuildHasher.hash_one(p)
}

impl Preparer {
    pub fn new() -> Self {
        Self::default()
    }

    /// The latest pending record of `p`, if any.
    fn latest(&self, p: &str) -> Option<&Latest> {
        let paths = &self.paths;
        self.by_path
            .find(path_hash(p), |l| paths.bytes(l.path) == p.as_bytes())
    }

    /// The ACL of `path` as the pending txns leave it; `None` if no such
    /// node (or a pending txn deletes it).
    pub fn current_acl(&self, tree: &DataTree, path: &str) -> Option<Vec<Acl>> {
        match self.latest(path) {
            Some(l) => l.record.stat.as_ref().map(|_| l.record.acl.slice.to_vec()),
            None => tree.node(path).map(|n| n.acl().to_vec()),
        }
    }

    /// Number of pending change records.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// The tree has applied every txn up to `zxid`: forget their records.
    pub fn applied(&mut self, zxid: i64) {
        while self.queue.front().is_some_and(|p| p.zxid <= zxid) {
            let Some(p) = self.queue.pop_front() else {
                break;
            };
            // Seqs are unique: the entry is this change's only if no later
            // change of the same path replaced it.
            if let Ok(entry) = self.by_path.find_entry(p.hash, |l| l.seq == p.seq) {
                entry.remove();
            }
            let next = self
                .queue
                .front()
                .map_or(p.path.at + u64::from(p.path.len), |n| n.path.at);
            self.paths.release_before(next);
        }
    }

    /// Prepared txns were abandoned (leadership lost): forget everything.
    pub fn clear(&mut self) {
        self.queue.clear();
        self.by_path.clear();
        self.paths.clear();
        self.undo = None;
    }

    pub fn prepare_create_session(&mut self, ctx: &PrepContext<'_>, timeout_ms: i32) -> Txn {
        Txn {
            header: ctx.header(),
            op: TxnOp::CreateSession { timeout_ms },
        }
    }

    /// Close `ctx.session_id`: delete its ephemerals, pending ones included.
    pub fn prepare_close_session(&mut self, tree: &DataTree, ctx: &PrepContext<'_>) -> Txn {
        let session = ctx.session_id;
        let mut paths: BTreeSet<String> = tree.ephemerals(session).map(str::to_owned).collect();
        for p in &self.queue {
            match p.owner {
                None => {
                    paths.remove(self.paths.get(p.path));
                }
                Some(owner) if owner == session => {
                    paths.insert(self.paths.get(p.path).to_owned());
                }
                Some(_) => {}
            }
        }
        for p in &paths {
            match path::parent_of(p)
                .and_then(|parent| Some((parent, self.record(tree, parent).ok()?)))
            {
                Some((parent, rec)) => self.record_delete(tree, ctx.zxid, p, parent, rec),
                None => self.add(ctx.zxid, p, deleted()),
            }
        }
        let op = TxnOp::CloseSession {
            paths: paths.into_iter().collect(),
        };
        Txn {
            header: ctx.header(),
            op,
        }
    }

    /// Reap an empty container or expired TTL node (`deleteContainer`),
    /// as the server's expiry timer asks; no ACL check, like ZooKeeper.
    pub fn prepare_delete_container(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        path: &str,
    ) -> Result<Txn, PrepError> {
        let op = self
            .delete_container(tree, ctx, path)
            .map_err(PrepError::Code)?;
        Ok(Txn {
            header: ctx.header(),
            op,
        })
    }

    /// A new `/zookeeper/config` (the ensemble's membership) decided by the
    /// server for a reconfig, or recorded by a new leader (`ctx.is_super`).
    /// The node's ACL applies: ZooKeeper lets only the super user or those
    /// granted WRITE on it reconfigure.
    pub fn prepare_set_config(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        data: Vec<u8>,
    ) -> Result<Txn, ErrorCode> {
        let op = self.set_data(tree, ctx, path::CONFIG, Some(&data), -1)?;
        Ok(Txn {
            header: ctx.header(),
            op,
        })
    }

    /// Prepare a client write. On `Err` nothing is pending; see
    /// [`PrepError::into_txn_op`] to commit the failure as ZooKeeper does.
    pub fn prepare(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        req: &Request,
    ) -> Result<Txn, PrepError> {
        let op = match req {
            Request::Multi(ops) => self.multi(tree, ctx, ops)?,
            // ZooKeeper answers a top-level check with Unimplemented.
            Request::Check(_) => return Err(PrepError::Code(ErrorCode::Unimplemented)),
            Request::Reconfig(_) => return Err(PrepError::Code(ErrorCode::ReconfigDisabled)),
            Request::CloseSession => self.prepare_close_session(tree, ctx).op,
            other => self.op(tree, ctx, other).map_err(PrepError::Code)?,
        };
        Ok(Txn {
            header: ctx.header(),
            op,
        })
    }

    /// `prepare`, with a failure turned into its error txn: what to commit.
    pub fn prepare_txn(&mut self, tree: &DataTree, ctx: &PrepContext<'_>, req: &Request) -> Txn {
        match self.prepare(tree, ctx, req) {
            Ok(txn) => txn,
            Err(e) => Txn {
                header: ctx.header(),
                op: e.into_txn_op(),
            },
        }
    }

    fn multi(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        ops: &[Request],
    ) -> Result<TxnOp, PrepError> {
        let mark = self.begin_multi();
        let mut txns = Vec::with_capacity(ops.len());
        for (at, op) in ops.iter().enumerate() {
            if !is_multi_op(op) {
                // ZooKeeper fails the whole request on any other op kind.
                self.end_multi(mark, false);
                return Err(PrepError::Code(ErrorCode::MarshallingError));
            }
            match self.multi_op(tree, ctx, op) {
                Ok(t) => txns.push(t),
                Err(code) => {
                    self.end_multi(mark, false);
                    return Err(PrepError::failed_multi(ops.len(), at, code));
                }
            }
        }
        self.end_multi(mark, true);
        Ok(TxnOp::Multi(txns))
    }

    /// Starts a multi prepared op by op (`multi_op`), for a caller that
    /// runs something between its ops: a node extension's part of a
    /// client's multi sees the ops before it. End it with `end_multi`.
    pub fn begin_multi(&mut self) -> MultiMark {
        assert!(self.undo.is_none(), "a multi is already being prepared");
        self.undo = Some(Vec::new());
        MultiMark(self.queue.len())
    }

    /// One op of the multi begun with `begin_multi`, prepared against the
    /// tree and every op before it; `ctx` may differ from op to op (an
    /// extension's writes go with the server's authority). After an error
    /// the multi must end, rolled back.
    pub fn multi_op(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        op: &Request,
    ) -> Result<TxnOp, ErrorCode> {
        assert!(self.undo.is_some(), "multi_op outside a multi");
        if !is_multi_op(op) {
            return Err(ErrorCode::MarshallingError);
        }
        self.op(tree, ctx, op)
    }

    /// Ends the multi: its ops stay pending (`keep`, they are proposed as
    /// one transaction) or are all rolled back.
    pub fn end_multi(&mut self, mark: MultiMark, keep: bool) {
        if !keep {
            self.rollback(mark.0);
        }
        self.undo = None;
    }

    fn rollback(&mut self, mark: usize) {
        if let Some(first) = self.queue.get(mark) {
            self.paths.truncate(first.path.at);
        }
        self.queue.truncate(mark);
        for (hash, seq, old) in self.undo.take().unwrap_or_default().into_iter().rev() {
            let Ok(entry) = self.by_path.find_entry(hash, |l| l.seq == seq) else {
                unreachable!("a multi's change is the latest of its path until undone");
            };
            match old {
                Some(v) => *entry.into_mut() = v,
                None => {
                    entry.remove();
                }
            }
        }
    }

    fn op(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        req: &Request,
    ) -> Result<TxnOp, ErrorCode> {
        match req {
            Request::Create(r) | Request::Create2(r) => self.create(
                tree,
                ctx,
                CreateKind::Plain,
                &r.path,
                r.data.as_deref(),
                &r.acl,
                r.flags,
                -1,
            ),
            Request::CreateContainer(r) => self.create(
                tree,
                ctx,
                CreateKind::Container,
                &r.path,
                r.data.as_deref(),
                &r.acl,
                r.flags,
                -1,
            ),
            Request::CreateTtl(r) => self.create(
                tree,
                ctx,
                CreateKind::Ttl,
                &r.path,
                r.data.as_deref(),
                &r.acl,
                r.flags,
                r.ttl,
            ),
            Request::Delete(r) => self.delete(tree, ctx, &r.path, r.version),
            Request::DeleteContainer(r) => self.delete_container(tree, ctx, &r.path),
            Request::SetData(r) => self.set_data(tree, ctx, &r.path, r.data.as_deref(), r.version),
            Request::SetAcl(r) => self.set_acl(tree, ctx, &r.path, &r.acl, r.version),
            Request::Check(r) => self.check(tree, ctx, &r.path, r.version),
            _ => Err(ErrorCode::Unimplemented),
        }
    }

    /// `pRequest2TxnCreate`.
    #[allow(clippy::too_many_arguments)]
    fn create(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        kind: CreateKind,
        req_path: &str,
        data: Option<&[u8]>,
        req_acl: &[Acl],
        flags: i32,
        ttl: i64,
    ) -> Result<TxnOp, ErrorCode> {
        let mode = CreateMode::from_flags(flags).ok_or(ErrorCode::BadArguments)?;
        if mode.is_ttl() && !ctx.ttl_enabled {
            return Err(ErrorCode::Unimplemented);
        }
        let ttl_owner = if mode.is_ttl() {
            Some(ephemeral::ttl_owner(ttl).ok_or(ErrorCode::BadArguments)?)
        } else if ttl >= 0 || kind == CreateKind::Ttl {
            // ZooKeeper would accept createTtl with a negative ttl and a
            // plain mode, then fail applying it; refuse it up front.
            return Err(ErrorCode::BadArguments);
        } else {
            None
        };
        let parent_path = match path::parent_of(req_path) {
            Some(p) if !req_path.contains('\0') => p,
            _ => return Err(ErrorCode::BadArguments),
        };
        let acl = acl::fixup(req_acl, ctx.ids)?;
        let mut parent = self.record(tree, parent_path)?;
        acl::check(&parent.acl.slice, perms::CREATE, ctx.caller())?;
        let parent_stat = parent.stat.unwrap_or_default();
        let final_path = if mode.is_sequential() {
            format!("{req_path}{:010}", parent_stat.cversion)
        } else {
            req_path.to_owned()
        };
        path::validate_path(&final_path)?;
        if let Some(checked) = fast::check_create(&final_path, mode, data, ctx.session_id) {
            checked?;
        }
        if self.record(tree, &final_path).is_ok() {
            return Err(ErrorCode::NodeExists);
        }
        if EphemeralKind::of(parent_stat.ephemeral_owner) == EphemeralKind::Normal {
            return Err(ErrorCode::NoChildrenForEphemerals);
        }
        let new_cversion = parent_stat.cversion.wrapping_add(1);
        let owner = match kind {
            CreateKind::Container => CONTAINER_OWNER,
            CreateKind::Ttl => ttl_owner.unwrap_or_default(),
            CreateKind::Plain if mode.is_ephemeral() => ctx.session_id,
            CreateKind::Plain => 0,
        };
        parent.child_count += 1;
        if let Some(s) = parent.stat.as_mut() {
            s.cversion = new_cversion;
            s.pzxid = ctx.zxid;
        }
        self.add(ctx.zxid, parent_path, parent);
        let acl_shared = shared_acl(&acl);
        let node = Record {
            stat: Some(PersistedStat::created(ctx.zxid, ctx.time_ms, owner)),
            child_count: 0,
            acl: acl_shared,
        };
        self.add(ctx.zxid, &final_path, node);
        Ok(TxnOp::Create(CreateTxn {
            path: final_path,
            data: data.map(<[u8]>::to_vec),
            acl,
            ephemeral_owner: owner,
            parent_cversion: new_cversion,
        }))
    }

    fn delete(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        p: &str,
        version: i32,
    ) -> Result<TxnOp, ErrorCode> {
        let parent_path = parent_for_delete(p)?;
        let parent = self.record(tree, parent_path)?;
        acl::check(&parent.acl.slice, perms::DELETE, ctx.caller())?;
        let node = self.record(tree, p)?;
        check_version(node.stat.unwrap_or_default().version, version)?;
        if node.child_count > 0 {
            return Err(ErrorCode::NotEmpty);
        }
        self.record_delete(tree, ctx.zxid, p, parent_path, parent);
        Ok(TxnOp::Delete { path: p.to_owned() })
    }

    fn delete_container(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        p: &str,
    ) -> Result<TxnOp, ErrorCode> {
        let parent_path = parent_for_delete(p)?;
        let node = self.record(tree, p)?;
        if node.child_count > 0 {
            return Err(ErrorCode::NotEmpty);
        }
        let owner = node.stat.unwrap_or_default().ephemeral_owner;
        if EphemeralKind::of(owner) == EphemeralKind::Normal {
            return Err(ErrorCode::BadVersion);
        }
        let parent = self.record(tree, parent_path)?;
        self.record_delete(tree, ctx.zxid, p, parent_path, parent);
        Ok(TxnOp::DeleteContainer { path: p.to_owned() })
    }

    fn record_delete(
        &mut self,
        tree: &DataTree,
        zxid: i64,
        p: &str,
        parent_path: &str,
        mut parent: Record,
    ) {
        parent.child_count = parent.child_count.saturating_sub(1);
        if let Some(s) = parent.stat.as_mut() {
            s.pzxid = zxid;
        }
        // A stub left with nothing to hold goes too, as the tree prunes it
        // when the delete applies (`DataTree::prune_stubs`).
        let prune = parent.child_count == 0
            && (parent.stat.as_ref()).is_some_and(|s| crate::stubs::is_stub(parent_path, s));
        self.add(zxid, parent_path, parent);
        self.add(zxid, p, deleted());
        if prune {
            let grandparent = path::parent_of(parent_path).map(path::canonical);
            let above = grandparent.and_then(|g| Some((g, self.record(tree, g).ok()?)));
            if let Some((grandparent, record)) = above {
                self.record_delete(tree, zxid, parent_path, grandparent, record);
            }
        }
    }

    /// A nested group root's node part: the partition holds none of the
    /// root's missing ancestors, which applying the part makes stubs
    /// (`DataTree::apply_part`). Records them as pending stubs, top down,
    /// so the create that follows finds its parent. Inside a multi mark,
    /// a failure takes them back.
    pub fn assume_stubs(&mut self, tree: &DataTree, p: &str, zxid: i64) {
        let Some(parent) = path::parent_of(p).map(path::canonical) else {
            return;
        };
        if parent == path::ROOT || self.record(tree, parent).is_ok() {
            return;
        }
        self.assume_stubs(tree, parent, zxid);
        let grandparent = path::canonical(path::parent_of(parent).unwrap_or_default());
        if let Ok(mut above) = self.record(tree, grandparent) {
            above.child_count += 1;
            self.add(zxid, grandparent, above);
        }
        let stub = Record {
            stat: Some(PersistedStat::default()),
            child_count: 0,
            acl: shared_acl(&[Acl::open_unsafe()]),
        };
        self.add(zxid, parent, stub);
    }

    fn set_data(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        p: &str,
        data: Option<&[u8]>,
        version: i32,
    ) -> Result<TxnOp, ErrorCode> {
        path::validate_path(p)?;
        let mut node = self.record(tree, p)?;
        acl::check(&node.acl.slice, perms::WRITE, ctx.caller())?;
        fast::check_set(p, data)?;
        let mut stat = node.stat.unwrap_or_default();
        check_version(stat.version, version)?;
        stat.version = stat.version.wrapping_add(1);
        stat.mtime = ctx.time_ms;
        stat.mzxid = ctx.zxid;
        node.stat = Some(stat);
        self.add(ctx.zxid, p, node);
        Ok(TxnOp::SetData {
            path: p.to_owned(),
            data: data.map(<[u8]>::to_vec),
            version: stat.version,
        })
    }

    fn set_acl(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        p: &str,
        req_acl: &[Acl],
        version: i32,
    ) -> Result<TxnOp, ErrorCode> {
        path::validate_path(p)?;
        let acl = acl::fixup(req_acl, ctx.ids)?;
        let mut node = self.record(tree, p)?;
        acl::check(&node.acl.slice, perms::ADMIN, ctx.caller())?;
        let mut stat = node.stat.unwrap_or_default();
        check_version(stat.aversion, version)?;
        stat.aversion = stat.aversion.wrapping_add(1);
        // ZooKeeper's pending record keeps the old ACL: later pending ops
        // are checked against it until this txn is applied.
        node.stat = Some(stat);
        self.add(ctx.zxid, p, node);
        Ok(TxnOp::SetAcl {
            path: p.to_owned(),
            acl,
            aversion: stat.aversion,
        })
    }

    fn check(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        p: &str,
        version: i32,
    ) -> Result<TxnOp, ErrorCode> {
        path::validate_path(p)?;
        let node = self.record(tree, p)?;
        acl::check(&node.acl.slice, perms::READ, ctx.caller())?;
        check_version(node.stat.unwrap_or_default().version, version)?;
        Ok(TxnOp::Check { path: p.to_owned() })
    }

    /// `getRecordForPath`: the pending record, else the committed node.
    fn record(&self, tree: &DataTree, p: &str) -> Result<Record, ErrorCode> {
        let rec = match self.latest(p) {
            Some(l) => l.record.clone(),
            None => {
                let node = tree.node(p).ok_or(ErrorCode::NoNode)?;
                Record {
                    stat: Some(node.persisted()),
                    child_count: node.child_count(),
                    acl: node.acl.clone(),
                }
            }
        };
        if rec.stat.is_none() {
            return Err(ErrorCode::NoNode);
        }
        Ok(rec)
    }

    fn add(&mut self, zxid: i64, p: &str, record: Record) {
        self.next_seq += 1;
        let seq = self.next_seq;
        let owner = record.stat.map(|s| s.ephemeral_owner);
        let hash = path_hash(p);
        let path = self.paths.push(p);
        self.queue.push_back(Pending {
            zxid,
            seq,
            hash,
            path,
            owner,
        });
        let latest = Latest {
            hash,
            seq,
            path,
            record,
        };
        let paths = &self.paths;
        let old =
            match self
                .by_path
                .entry(hash, |l| paths.bytes(l.path) == p.as_bytes(), |l| l.hash)
            {
                Entry::Occupied(mut o) => Some(std::mem::replace(o.get_mut(), latest)),
                Entry::Vacant(v) => {
                    v.insert(latest);
                    None
                }
            };
        if let Some(undo) = self.undo.as_mut() {
            undo.push((hash, seq, old));
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CreateKind {
    /// create / create2: the mode decides ephemeral or persistent.
    Plain,
    Container,
    Ttl,
}

fn deleted() -> Record {
    Record {
        stat: None,
        child_count: 0,
        acl: shared_acl(&[]),
    }
}

/// `getParentPathAndValidate`.
fn parent_for_delete(p: &str) -> Result<&str, ErrorCode> {
    match path::parent_of(p) {
        Some(parent) if !p.contains('\0') && !path::is_special(p) => Ok(parent),
        _ => Err(ErrorCode::BadArguments),
    }
}

/// `checkAndIncVersion`: -1 matches any version.
fn check_version(current: i32, expected: i32) -> Result<(), ErrorCode> {
    if expected != -1 && expected != current {
        return Err(ErrorCode::BadVersion);
    }
    Ok(())
}
