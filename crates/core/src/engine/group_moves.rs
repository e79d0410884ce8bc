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
            let parents = stoa_tree::parent_of(root).map_or(0, |parent| self.partition_of(parent));
            if let Some(subtree) = self.cores[from].tree.evict(root, zxid) {
                if from == parents {
                    self.cores[from].tree.adopt(root, subtree.link(), zxid);
                }
                if to == parents {
                    // Its link, which the node replaces.
                    self.cores[to].tree.evict(root, zxid);
                }
                self.cores[to].tree.adopt(root, subtree, zxid);
            }
            self.move_watches(root, from, to);
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
    }

    fn move_watches(&mut self, root: &str, from: usize, to: usize) {
        let above = |path: &str| path != root && stoa_tree::within(root, path);
        let moving = (self.cores[from].watches).select(|_, path| stoa_tree::within(path, root));
        for (conn, kind, path) in &moving {
            self.cores[from].watches.remove(*conn, *kind, path);
            self.cores[to].watches.add(*conn, *kind, path);
        }
        let recursive = self.cores[from]
            .watches
            .select(|kind, path| kind == WatchKind::PersistentRecursive && above(path));
        for (conn, kind, path) in &recursive {
            self.cores[to].watches.add(*conn, *kind, path);
        }
    }
}
