//! Which partition serves a request (docs/partitions.md, "Routing by
//! placement"): the partition of its path's group. A group root's node
//! lives on its group's partition and a link to it on its parent's, so
//! creating or deleting a root is one transaction with a part on each.

use std::borrow::Cow;

use stoa_proto::request::Request;
use stoa_tree::{PrepContext, PrepError, Txn, TxnOp};

use super::Engine;

/// The partition whose tree holds `path`'s node, on a server of
/// `partitions` partitions placed by `placement`.
pub(super) fn partition_holding(
    placement: &crate::placement::Placement,
    partitions: usize,
    path: &str,
) -> usize {
    if partitions > 1 && super::group_moves::is_placement_path(path) {
        return super::group_moves::PLACEMENT_PARTITION;
    }
    placement.partition_of(path) as usize
}

impl Engine {
    /// The partition whose tree holds `path`'s node.
    pub(super) fn partition_of(&self, path: &str) -> usize {
        partition_holding(&self.placement, self.cores.len(), path)
    }

    /// For a group root other than `/` whose parent lives on another
    /// partition: (the root's partition, the parent's partition).
    pub(super) fn spans_for_root(&self, path: &str) -> Option<(usize, usize)> {
        if self.placement.group_of(path) != path || path == stoa_tree::ROOT {
            return None;
        }
        let parent = stoa_tree::parent_of(path)?;
        let (own, parents) = (self.partition_of(path), self.partition_of(parent));
        (own != parents).then_some((own, parents))
    }

    /// The partition a read runs on: its path's, or a multiRead's ops'.
    /// Reads without a path (pings, whoami, a sync answered locally) run
    /// on partition 0, the root group's; those that gather from several
    /// partitions are `Engine::read_routed`'s.
    pub(super) fn read_partition(&self, request: &Request) -> usize {
        match request {
            Request::MultiRead(ops) => ops.first().map_or(0, |op| self.read_partition(op)),
            request => request.path().map_or(0, |path| self.partition_of(path)),
        }
    }

    /// Where a client write is prepared and proposed (see `WriteRoute`).
    /// A sequential create is named by its parent's counter, never a
    /// configured root: it goes to its parent's group. Writes without one
    /// path (a session's close, a reconfig) go to partition 0.
    pub(super) fn write_route(&self, request: &Request) -> WriteRoute {
        let path = match request {
            Request::Create(r) | Request::Create2(r) | Request::CreateContainer(r)
                if r.flags & SEQUENTIAL_FLAG != 0 =>
            {
                return WriteRoute::On(self.parent_partition(&r.path));
            }
            Request::CreateTtl(r) if r.flags & SEQUENTIAL_FLAG != 0 => {
                return WriteRoute::On(self.parent_partition(&r.path));
            }
            Request::Multi(ops) => {
                return match self.multi_partition(ops) {
                    Some(partition) => WriteRoute::On(partition),
                    None => WriteRoute::MultiAcross,
                }
            }
            Request::CloseSession | Request::Reconfig(_) => return WriteRoute::On(0),
            request => match request.path() {
                Some(path) => path,
                None => return WriteRoute::On(0),
            },
        };
        // Only a create or delete can change a group root (and setData,
        // the common write, is then routed with one lookup).
        if request.creates_or_deletes() {
            if let Some((own, parents)) = self.spans_for_root(path) {
                return WriteRoute::RootChange { own, parents };
            }
        }
        WriteRoute::On(self.partition_of(path))
    }

    /// The one partition a multi's ops all go to, if they do (none of them
    /// creating or deleting a group root).
    fn multi_partition(&self, ops: &[Request]) -> Option<usize> {
        let mut partition = None;
        for op in ops {
            match self.write_route(op) {
                WriteRoute::On(own) if partition.is_none_or(|p| p == own) => partition = Some(own),
                _ => return None,
            }
        }
        Some(partition.unwrap_or(0))
    }

    fn parent_partition(&self, path: &str) -> usize {
        stoa_tree::parent_of(path).map_or(0, |parent| self.partition_of(parent))
    }

    /// Prepares a write where `route` (its `write_route`) says: on one
    /// partition, as a group root's node and link, or as a multi over
    /// several partitions.
    pub(super) fn prepare_routed(
        &mut self,
        ctx: &PrepContext<'_>,
        request: &Request,
        route: WriteRoute,
    ) -> Result<Txn, PrepError> {
        match route {
            WriteRoute::On(partition) => (self.cores[partition])
                .preparing(|preparer, tree| preparer.prepare(tree, ctx, request)),
            WriteRoute::RootChange { own, parents } => {
                self.prepare_root_change(ctx, request, own, parents)
            }
            WriteRoute::MultiAcross => {
                let Request::Multi(ops) = request else {
                    unreachable!("only a multi goes across partitions")
                };
                self.prepare_multi_across(ctx, ops)
            }
        }
    }

    /// Prepares the create or delete of a group root: the link on its
    /// parent's partition first (which decides the parent's existence and
    /// ACL, and whether the node exists), then the node on its own (its
    /// version and children). Each is prepared inside a multi mark, so a
    /// failure of the second rolls the first back; the transaction's first
    /// part is the node's, which the reply comes from.
    pub(super) fn prepare_root_change(
        &mut self,
        ctx: &PrepContext<'_>,
        request: &Request,
        own: usize,
        parents: usize,
    ) -> Result<Txn, PrepError> {
        let link_request = link_request(request);
        // The link's partition decides first: the parent's existence and
        // ACL, and whether the node exists.
        self.prepare_node_and_link(ctx, own, parents, |node, link| {
            let link = link.multi_op(&link_request)?;
            node.assume_stubs_for(request);
            let node = node.multi_op(request)?;
            Ok((node, link))
        })
    }
}

/// The request a group root's link on its parent's partition gets for the
/// root's create or delete: the same, but a delete's version is the
/// node's, not the link's.
fn link_request(request: &Request) -> Request {
    match request {
        Request::Delete(r) => Request::Delete(stoa_proto::records::DeleteRequest {
            path: r.path.clone(),
            version: -1,
        }),
        other => other.clone(),
    }
}

impl Engine {
    /// Prepares a change of a group root and its link as one transaction
    /// of parts, the node's first: `prepare` gets the node's partition and
    /// the link's, each inside a multi mark, so that an error anywhere
    /// rolls both back.
    pub(super) fn prepare_node_and_link(
        &mut self,
        ctx: &PrepContext<'_>,
        own: usize,
        parents: usize,
        prepare: impl FnOnce(
            &mut PartPreparer<'_, '_>,
            &mut PartPreparer<'_, '_>,
        ) -> Result<(TxnOp, TxnOp), stoa_proto::codes::ErrorCode>,
    ) -> Result<Txn, PrepError> {
        assert_ne!(own, parents, "a link lives on another partition");
        let (node_core, link_core) = self.cores.pair_mut(own, parents);
        let node_mark = node_core.preparer.begin_multi();
        let link_mark = link_core.preparer.begin_multi();
        let mut node = PartPreparer {
            core: node_core,
            ctx,
        };
        let mut link = PartPreparer {
            core: link_core,
            ctx,
        };
        let prepared = prepare(&mut node, &mut link);
        let keep = prepared.is_ok();
        node.core.preparer.end_multi(node_mark, keep);
        link.core.preparer.end_multi(link_mark, keep);
        let (node, link) = prepared.map_err(PrepError::Code)?;
        Ok(Txn {
            header: ctx.header(),
            op: TxnOp::Parts {
                parts: vec![(own as u32, node), (parents as u32, link)],
                order: Vec::new(),
            },
        })
    }

    /// A client's multi whose ops go to several partitions: each op is
    /// prepared on its partition's preparer, in the multi's order, inside
    /// a multi mark on every one of them, so the first failure rolls all
    /// back (and fails the multi as ZooKeeper reports it). One part per
    /// partition holds its ops; `order` puts the results back. A group
    /// root's create or delete is two ops, as alone: its link's on the
    /// parent's partition first (silent in `order`: the client gets one
    /// result per op), then the node's.
    pub(super) fn prepare_multi_across(
        &mut self,
        ctx: &PrepContext<'_>,
        ops: &[Request],
    ) -> Result<Txn, PrepError> {
        if !ops.iter().all(stoa_tree::is_multi_op) {
            return Err(PrepError::Code(
                stoa_proto::codes::ErrorCode::MarshallingError,
            ));
        }
        // Each op's partition; a group root's create or delete also its
        // link's, on its parent's partition (decided first, as alone).
        let routes: Vec<(usize, Option<usize>)> = (ops.iter())
            .map(|op| match self.write_route(op) {
                WriteRoute::On(partition) => (partition, None),
                WriteRoute::RootChange { own, parents } => (own, Some(parents)),
                WriteRoute::MultiAcross => unreachable!("a multi's ops are no multis"),
            })
            .collect();
        let mut involved: Vec<usize> = (routes.iter())
            .flat_map(|&(own, link)| std::iter::once(own).chain(link))
            .collect();
        involved.sort_unstable();
        involved.dedup();
        let marks: Vec<(usize, stoa_tree::MultiMark)> = (involved.iter())
            .map(|&p| (p, self.cores[p].preparer.begin_multi()))
            .collect();
        let mut per_part: Vec<(usize, Vec<TxnOp>)> =
            involved.iter().map(|&p| (p, Vec::new())).collect();
        let mut order = Vec::with_capacity(ops.len());
        let mut failed = None;
        'ops: for (at, (op, &(own, link))) in ops.iter().zip(&routes).enumerate() {
            let link_step = link.map(|parents| {
                (
                    parents,
                    Cow::Owned(link_request(op)),
                    stoa_tree::SILENT_PART,
                )
            });
            let spans = link.is_some();
            let steps = link_step.into_iter().chain([(own, Cow::Borrowed(op), 0)]);
            for (partition, request, silent) in steps {
                if spans && partition == own {
                    let core = &mut self.cores[own];
                    assume_stubs_for(&mut core.preparer, &core.tree, ctx.zxid, &request);
                }
                let prepared = self.cores[partition]
                    .preparing(|preparer, tree| preparer.multi_op(tree, ctx, &request));
                match prepared {
                    Ok(txn_op) => {
                        let part = per_part.iter_mut().find(|(p, _)| *p == partition);
                        part.expect("an involved partition").1.push(txn_op);
                        order.push(partition as u32 | silent);
                    }
                    Err(code) => {
                        failed = Some(PrepError::failed_multi(ops.len(), at, code));
                        break 'ops;
                    }
                }
            }
        }
        for (partition, mark) in marks {
            self.cores[partition]
                .preparer
                .end_multi(mark, failed.is_none());
        }
        if let Some(failed) = failed {
            return Err(failed);
        }
        // The first op's partition carries the entry.
        let first = routes[0].0;
        per_part.sort_by_key(|&(p, _)| (p != first, p));
        Ok(Txn {
            header: ctx.header(),
            op: TxnOp::Parts {
                parts: (per_part.into_iter())
                    .map(|(p, ops)| (p as u32, TxnOp::Multi(ops)))
                    .collect(),
                order,
            },
        })
    }

    /// A session's close: partition 0 forgets the session and deletes its
    /// ephemerals there; every other partition holding some (pending
    /// ones included) deletes its own, as parts of the same transaction,
    /// so the client's ephemerals go at once everywhere.
    pub(super) fn prepare_close_everywhere(&mut self, ctx: &PrepContext<'_>) -> Txn {
        let mut parts = Vec::new();
        for (partition, core) in self.cores.iter_mut().enumerate() {
            let txn = core.preparing(|preparer, tree| preparer.prepare_close_session(tree, ctx));
            let TxnOp::CloseSession { paths } = &txn.op else {
                unreachable!("a close prepares a close")
            };
            if partition == 0 || !paths.is_empty() {
                parts.push((partition as u32, txn.op));
            }
        }
        if parts.len() == 1 {
            let (_, op) = parts.pop().expect("partition 0's part");
            return Txn {
                header: ctx.header(),
                op,
            };
        }
        Txn {
            header: ctx.header(),
            op: TxnOp::Parts {
                parts,
                order: Vec::new(),
            },
        }
    }
}

impl Engine {
    /// Once every group has applied its log: the data must have been
    /// written with the configured groups. A group added to (or dropped
    /// from) `partition.groups` over a data directory that already holds
    /// its subtree elsewhere would hide those znodes from every client, so
    /// the server stops and says so instead.
    pub(super) fn check_placement_matches_data(&mut self) {
        if self.placement_checked || self.cores.len() == 1 {
            return;
        }
        let caught_up = (self.cores.iter())
            .all(|core| core.applied_index >= core.raft.raft.raft_log.last_index());
        if !caught_up {
            return;
        }
        self.placement_checked = true;
        // The log may have written the placement since the start checked
        // the snapshot's.
        if self.placement_written() {
            if let Some(why) = self.unconfigured(&self.placement) {
                self.out.fatal = Some(why);
                return;
            }
        }
        let empty = stoa_tree::DataTree::new().node_count();
        let mut problem = None;
        for (root, _) in self.placement.groups() {
            let Some((own, parents)) = self.spans_for_root(root) else {
                continue;
            };
            if self.cores[parents].tree.node(root).is_some()
                && self.cores[own].tree.node(root).is_none()
            {
                problem = Some(format!(
                    "partition.groups lists {root}, but this data directory holds {root} on \
                     partition {parents}: it was written without that group"
                ));
            }
        }
        for (partition, core) in self.cores.iter().enumerate().skip(1) {
            let holds_groups = self.placement.groups_on(partition as u32).next().is_some();
            let own = usize::from(core.tree.node(stoa_tree::PARTITIONS).is_some());
            if !holds_groups && core.tree.node_count() > empty + own {
                problem = Some(format!(
                    "partition {partition} holds znodes of a group partition.groups no longer \
                     lists"
                ));
            }
        }
        if let Some(problem) = problem {
            self.out.fatal = Some(format!(
                "{problem}; start the server with the partition.groups its data was written with"
            ));
        }
    }
}

/// Where a client write goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WriteRoute {
    /// Prepared and proposed on this partition.
    On(usize),
    /// The create or delete of a group root: its node on `own`, its link
    /// on its parent's partition, one transaction of parts.
    RootChange { own: usize, parents: usize },
    /// A multi whose ops go to several partitions (or create or delete a
    /// group root): a part per partition.
    MultiAcross,
}

impl WriteRoute {
    /// The group a failed write's error transaction goes through.
    pub(super) fn partition(self) -> usize {
        match self {
            WriteRoute::On(partition) | WriteRoute::RootChange { own: partition, .. } => partition,
            WriteRoute::MultiAcross => 0,
        }
    }

    /// The group that carries `txn`, prepared (or failed) on this route: a
    /// transaction of parts goes in its first part's log.
    pub(super) fn home(self, txn: &Txn) -> usize {
        match &txn.op {
            TxnOp::Parts { parts, .. } => parts[0].0 as usize,
            _ => self.partition(),
        }
    }
}

/// A partition's preparer and tree, to prepare one op of a transaction of
/// parts (inside the multi mark `Engine::prepare_node_and_link` opened).
pub(super) struct PartPreparer<'a, 'c> {
    core: &'a mut super::partition_core::PartitionCore,
    ctx: &'a PrepContext<'c>,
}

/// Before a group root's node part: a create of a nested root whose
/// ancestors this partition does not hold finds them as stubs
/// (`Preparer::assume_stubs`); applying the part makes them.
fn assume_stubs_for(
    preparer: &mut stoa_tree::Preparer,
    tree: &stoa_tree::DataTree,
    zxid: i64,
    request: &Request,
) {
    if let Request::Create(c) | Request::Create2(c) | Request::CreateContainer(c) = request {
        preparer.assume_stubs(tree, &c.path, zxid);
    } else if let Request::CreateTtl(c) = request {
        preparer.assume_stubs(tree, &c.path, zxid);
    }
}

impl PartPreparer<'_, '_> {
    fn assume_stubs_for(&mut self, request: &Request) {
        let core = &mut *self.core;
        assume_stubs_for(&mut core.preparer, &core.tree, self.ctx.zxid, request);
    }

    pub(super) fn multi_op(
        &mut self,
        request: &Request,
    ) -> Result<TxnOp, stoa_proto::codes::ErrorCode> {
        let ctx = self.ctx;
        self.core
            .preparing(|preparer, tree| preparer.multi_op(tree, ctx, request))
    }

    pub(super) fn delete_container(
        &mut self,
        path: &str,
    ) -> Result<TxnOp, stoa_proto::codes::ErrorCode> {
        let ctx = self.ctx;
        (self
            .core
            .preparing(|preparer, tree| preparer.prepare_delete_container(tree, ctx, path)))
        .map(|txn| txn.op)
        .map_err(|e| match e {
            PrepError::Code(code) => code,
            PrepError::Multi(_) => stoa_proto::codes::ErrorCode::MarshallingError,
        })
    }
}

/// CreateMode's sequential bit (PERSISTENT_SEQUENTIAL, EPHEMERAL_SEQUENTIAL,
/// PERSISTENT_SEQUENTIAL_WITH_TTL).
pub(super) const SEQUENTIAL_FLAG: i32 = 2;
