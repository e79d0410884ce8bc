//! Moving groups between partitions while serving (docs/partitions.md,
//! "Moving a group"). The super user moves groups by writing
//! `/zookeeper/partitions` (`engine/placement_state.rs`) a placement that
//! differs from the current one only in where groups live; the leader
//! turns the write into one transaction (`TxnOp::MoveGroups`), holds every
//! other write from its proposal until it applies, and every member,
//! applying it in the one order, takes each group's subtree out of one
//! tree and puts it into another, moves the watches set on it, and routes
//! by the new placement from that zxid on.

use std::collections::BTreeSet;

use stoa_proto::codes::ErrorCode;
use stoa_proto::records::SetDataRequest;
use stoa_proto::request::Request;
use stoa_tree::{GroupMove, PrepContext, PrepError, Txn, TxnOp, PARTITIONS};

use super::Engine;
use crate::placement::Placement;
use crate::watch::WatchKind;

/// The partition whose tree holds `/zookeeper/partitions` and whose group
/// carries the moves.
pub(super) const PLACEMENT_PARTITION: usize = 1;

/// Whether `path` is the placement node or below it.
pub(super) fn is_placement_path(path: &str) -> bool {
    stoa_tree::within(path, PARTITIONS)
}

/// The roots of a placement's groups, `/` included.
pub(super) fn roots(placement: &Placement) -> BTreeSet<&str> {
    placement.groups().map(|(root, _)| root).collect()
}

impl Engine {
    /// Leader: a setData of `/zookeeper/partitions`. Prepared as the
    /// setData it is (the node's ACL lets only the super user write it;
    /// the version is checked), then its text is read: it must keep the
    /// partition count, the groups and `auto`, and may change only where
    /// groups live. The node then holds the placement as the moves leave
    /// it, rendered again (its `version` counts every move since the
    /// groups were configured). Anything else is BadArguments.
    pub(super) fn prepare_group_moves(
        &mut self,
        ctx: &PrepContext<'_>,
        request: &Request,
    ) -> Result<Txn, PrepError> {
        self.prepare_placement_write(ctx, request, |engine, text| engine.moves_to(text))
    }

    /// A setData `request` of the placement, prepared as such (ACL,
    /// version), then turned by `decide` (given its text) into the moves
    /// and the placement they leave: one `TxnOp::MoveGroups`.
    pub(super) fn prepare_placement_write(
        &mut self,
        ctx: &PrepContext<'_>,
        request: &Request,
        decide: impl FnOnce(&Self, &[u8]) -> Result<(Vec<GroupMove>, Placement), ErrorCode>,
    ) -> Result<Txn, PrepError> {
        let Request::SetData(SetDataRequest { data, .. }) = request else {
            unreachable!("only a setData of the placement moves groups")
        };
        let core = &mut self.cores[PLACEMENT_PARTITION];
        let mark = core.preparer.begin_multi();
        let prepared = core.preparer.multi_op(&core.tree, ctx, request);
        let decided = prepared.and_then(|op| {
            let TxnOp::SetData { version, .. } = op else {
                unreachable!("a setData prepares as one")
            };
            let (moves, next) = decide(self, data.as_deref().unwrap_or_default())?;
            Ok(TxnOp::MoveGroups {
                moves,
                data: next.render().into_bytes(),
                version,
            })
        });
        self.cores[PLACEMENT_PARTITION]
            .preparer
            .end_multi(mark, decided.is_ok());
        let op = decided.map_err(PrepError::Code)?;
        if let TxnOp::MoveGroups { moves, .. } = &op {
            for m in moves {
                log::info!(
                    "moving group {} from partition {} to {}",
                    m.root,
                    m.from,
                    m.to
                );
            }
        }
        self.group_moves_in_flight = Some(ctx.zxid);
        Ok(Txn {
            header: ctx.header(),
            op,
        })
    }

    /// The moves from the current placement to the one `text` describes,
    /// and the placement they leave.
    fn moves_to(&self, text: &[u8]) -> Result<(Vec<GroupMove>, Placement), ErrorCode> {
        let refuse = |why: String| {
            log::info!("{PARTITIONS}: a write refused: {why}");
            ErrorCode::BadArguments
        };
        let text = std::str::from_utf8(text).map_err(|_| refuse("not text".into()))?;
        let wanted = Placement::parse(text).map_err(|e| refuse(e.to_string()))?;
        let current = &self.placement;
        if wanted.partitions() != current.partitions()
            || wanted.auto_top_level() != current.auto_top_level()
            || roots(&wanted) != roots(current)
        {
            return Err(refuse(
                "a write may change where groups live, not the partitions, the groups or auto"
                    .into(),
            ));
        }
        let mut next = current.clone();
        let mut moves = Vec::new();
        for (root, to) in wanted.groups() {
            let from = current.partition_of(root);
            if current.group_of(root) == root && from != to {
                next.move_group(root, to)
                    .map_err(|e| refuse(e.to_string()))?;
                moves.push(GroupMove {
                    root: root.to_string(),
                    from,
                    to,
                });
            }
        }
        Ok((moves, next))
    }

    /// Every member: a committed group move. Each group's subtree leaves
    /// its partition's tree for the other's, as of the transaction's zxid;
    /// a group root keeps a link on its parent's partition (docs/partitions.md),
    /// so moving to or from there turns the node into its link or back.
    /// The watches set on the group go with it, and recursive watches on
    /// its ancestors are set on the new partition too. Then the placement
    /// partition's tree records the placement, and routing follows it.
    pub(super) fn move_groups(&mut self, zxid: i64, moves: &[GroupMove], text: &[u8]) {
        for m in moves {
            let (root, from, to) = (m.root.as_str(), m.from as usize, m.to as usize);
            assert!(
                from < self.cores.len() && to < self.cores.len() && from != to,
                "a move of {root} from {from} to {to}"
            );
            self.move_group(zxid, root, from, to);
            self.placement
                .move_group(root, m.to)
                .unwrap_or_else(|e| panic!("a committed move of {root}: {e}"));
            self.move_watches(root, from);
            self.stats.group_moves += 1;
        }
        // Checked by the leader that proposed it: the moves, and groups
        // automatic placement added.
        let text = std::str::from_utf8(text).expect("a committed placement is text");
        self.placement = Placement::parse(text)
            .unwrap_or_else(|e| panic!("a committed placement does not parse: {e}"));
        // Built over the trees as they were.
        for core in &mut self.cores {
            core.speculative = None;
        }
        if self.group_moves_in_flight.is_some_and(|at| at <= zxid) {
            self.group_moves_in_flight = None;
        }
        self.note_placement_state();
    }

    /// Moves `root`'s group from partition `from` to `to` (the placement
    /// still has it on `from`). Groups nested in it stay where they are:
    /// their subtrees are lifted out of the tree they leave it in and put
    /// back under stubs, and the moved subtree's link to one or its stubs
    /// above one are replaced where it lands (docs/partitions.md, "Nested
    /// group roots").
    fn move_group(&mut self, zxid: i64, root: &str, from: usize, to: usize) {
        let parents = stoa_tree::parent_of(root).map_or(0, |parent| self.partition_of(parent));
        // Whether `nested`'s parent is in this group itself (then the
        // group's partition holds its link).
        let linked_from_root = |engine: &Self, nested: &str| {
            stoa_tree::parent_of(nested).is_some_and(|p| engine.placement.group_of(p) == root)
        };
        // The nested groups staying on `from`, out of the way.
        let mut staying = Vec::new();
        for nested in self.outermost_nested(root, from) {
            let links_here = linked_from_root(self, &nested);
            if let Some(subtree) = self.cores[from].tree.evict(&nested, zxid) {
                let link = links_here.then(|| subtree.link());
                staying.push((nested, subtree, link));
            }
        }
        // The nested groups already on `to`, out of the way.
        let mut waiting = Vec::new();
        for nested in self.outermost_nested(root, to) {
            if let Some(subtree) = self.cores[to].tree.evict(&nested, zxid) {
                waiting.push((nested, subtree));
            }
        }
        let moving = self.cores[from].tree.evict(root, zxid);
        if let (Some(subtree), true) = (&moving, from == parents) {
            let link = subtree.link();
            self.cores[from].tree.adopt(root, link, zxid);
        }
        let landed = moving.is_some();
        if let Some(subtree) = moving {
            let tree = &mut self.cores[to].tree;
            // What `to` held at the root: its link (when `to` is the
            // parent's partition) or stubs, which the node replaces.
            tree.evict(root, zxid);
            tree.ensure_stubs(root);
            tree.adopt(root, subtree, zxid);
        }
        for (nested, subtree, link) in staying {
            let tree = &mut self.cores[from].tree;
            tree.ensure_stubs(&nested);
            tree.adopt(&nested, subtree, zxid);
            let tree = &mut self.cores[to].tree;
            if let (Some(link), true) = (link, landed) {
                tree.adopt(&nested, link, zxid);
            } else if let Some(parent) = stoa_tree::parent_of(&nested) {
                // Stubs the moved subtree brought along for it.
                tree.prune_stubs(parent);
            }
        }
        for (nested, subtree) in waiting {
            let tree = &mut self.cores[to].tree;
            // The moved subtree's link to it, or stubs above it.
            tree.evict(&nested, zxid);
            tree.ensure_stubs(&nested);
            tree.adopt(&nested, subtree, zxid);
        }
        // Stubs the group hung from where it left, if nothing else does.
        self.cores[from].tree.prune_stubs(root);
    }

    /// The groups nested in `root` that live on `partition` and in no other
    /// such group nested in it (their subtrees hold the rest).
    fn outermost_nested(&self, root: &str, partition: usize) -> Vec<String> {
        let on: Vec<&str> = (self.placement.groups())
            .filter(|&(nested, p)| {
                p as usize == partition && nested != root && stoa_tree::within(nested, root)
            })
            .map(|(nested, _)| nested)
            .collect();
        (on.iter())
            .filter(|nested| {
                !(on.iter()).any(|outer| outer != *nested && stoa_tree::within(nested, outer))
            })
            .map(|nested| nested.to_string())
            .collect()
    }

    /// The watches set on the group's paths go where the paths are now
    /// served, a nested group's staying where it is; a recursive watch is
    /// on every partition holding a path below it (`partitions_under`),
    /// one on an ancestor of the group too.
    fn move_watches(&mut self, root: &str, from: usize) {
        let related = |path: &str| stoa_tree::within(path, root) || stoa_tree::within(root, path);
        let watched = (self.cores[from].watches).select(|_, path| related(path));
        for (conn, kind, path) in &watched {
            let targets = if *kind == WatchKind::PersistentRecursive {
                self.partitions_under(path)
            } else {
                vec![self.partition_of(path)]
            };
            for &target in targets.iter().filter(|&&t| t != from) {
                self.cores[target].watches.add(*conn, *kind, path);
            }
            if !targets.contains(&from) {
                self.cores[from].watches.remove(*conn, *kind, path);
            }
        }
    }
}
