//! Moving groups between partitions while serving (docs/partitions.md,
//! "Moving a group"). The placement is replicated state: partition 1's
//! tree holds it at `/zookeeper/partitions`, in `Placement::render`'s
//! text (requests for that path go there; `ls /zookeeper`, served by
//! partition 0, does not list it, so a client's view of `/zookeeper` is
//! what one partition shows). The super user moves groups by writing that node a placement
//! that differs from the current one only in where groups live; the
//! leader turns the write into one transaction (`TxnOp::MoveGroups`),
//! holds every other write from its proposal until it applies, and every
//! member, applying it in the one order, takes each group's subtree out
//! of one tree and puts it into another, moves the watches set on it, and
//! routes by the new placement from that zxid on.

use std::collections::BTreeSet;

use super::routing::SEQUENTIAL_FLAG;
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
    path.strip_prefix(PARTITIONS)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The roots of a placement's groups, `/` included.
fn roots(placement: &Placement) -> BTreeSet<&str> {
    placement.groups().map(|(root, _)| root).collect()
}

impl Engine {
    /// Settles the placement against the data (at start, and after a
    /// restore or a whole server snapshot replaced the trees). Once groups
    /// have moved, the data's placement is the one to route by: its groups
    /// must be the configured ones (and those automatic placement added),
    /// wherever they now live. Before any
    /// move the node only mirrors the configuration, and is written from
    /// it.
    pub(super) fn settle_placement(&mut self) -> Result<(), String> {
        if self.cores.len() == 1 {
            return Ok(());
        }
        if let Some(held) = self.placement_held()? {
            if self.placement_written() {
                if let Some(why) = self.unconfigured(&held) {
                    return Err(why);
                }
                self.placement = held;
                return Ok(());
            }
        }
        let text = self.placement.render();
        (self.cores[PLACEMENT_PARTITION].tree).mirror_partitions_node(text.as_bytes());
        Ok(())
    }

    /// A restore's trees whose groups moved must have this server's
    /// groups: why not, if they do not (`settle_placement` would stop
    /// every member once it applied).
    pub(super) fn restored_placement_differs(&self, parts: &[Vec<u8>]) -> Option<String> {
        if self.cores.len() == 1 {
            return None;
        }
        let tree = stoa_tree::read_snapshot(&mut &parts.get(PLACEMENT_PARTITION)?[..]).ok()?;
        let node = tree.node(PARTITIONS)?;
        let held = Placement::parse(std::str::from_utf8(node.data()).ok()?).ok()?;
        let differs = node.stat().version > 0 && self.unconfigured(&held).is_some();
        differs.then(|| {
            format!(
                "the snapshot's groups ({PARTITIONS}) are not this server's partition.groups; \
                 nothing was restored"
            )
        })
    }

    /// The placement node's version, for the balancer's setData.
    pub(super) fn placement_node_version(&self) -> Option<i32> {
        let core = self.cores.get(PLACEMENT_PARTITION)?;
        Some(core.tree.node(PARTITIONS)?.stat().version)
    }

    /// Leader: proposes a move the server decided (the balancer's), as the
    /// super user's setData `request` of the placement; a refusal still
    /// takes its zxid, as an error transaction.
    pub(super) fn propose_internal_group_move(&mut self, request: &Request) {
        let zxid = self.next_zxid();
        let ctx = self.internal_ctx(0, zxid);
        let txn = self.prepare_group_moves(&ctx, request).unwrap_or_else(|e| {
            log::warn!("load balancer: the move was refused ({e:?})");
            Txn {
                header: ctx.header(),
                op: e.into_txn_op(),
            }
        });
        self.propose_on(PLACEMENT_PARTITION, txn);
    }

    /// Why the data's placement `held` does not fit this server's
    /// configuration, if it does not: it must have the same partitions and
    /// `auto`, the configured groups, and others only where automatic
    /// placement made them.
    pub(super) fn unconfigured(&self, held: &Placement) -> Option<String> {
        let configured = super::start_placement(&self.config).ok()?;
        let (held_roots, configured_roots) = (roots(held), roots(&configured));
        let fits = held.partitions() == configured.partitions()
            && held.auto_top_level() == configured.auto_top_level()
            && configured_roots.is_subset(&held_roots)
            && (held.auto_top_level() || held_roots == configured_roots);
        if fits {
            return None;
        }
        let listed = |roots: BTreeSet<&str>| {
            let roots: Vec<&str> = roots.into_iter().filter(|r| *r != "/").collect();
            format!("[{}]", roots.join(", "))
        };
        Some(format!(
            "this data directory's placement ({PARTITIONS}) has {} partitions and the groups \
             {}; the configuration has {} partitions and partition.groups {}: start the server \
             with the partitions and groups its data was written with",
            held.partitions(),
            listed(held_roots),
            configured.partitions(),
            listed(configured_roots)
        ))
    }

    /// Leader, with automatic placement: a create (alone or in a multi) of
    /// a new top-level node that is not a group yet, which must first
    /// become one. Its group is added, and the request waits for it.
    pub(super) fn auto_group_for(&self, request: &Request) -> Option<String> {
        if !self.placement.auto_top_level() || self.cores.len() == 1 {
            return None;
        }
        fn creates(r: &Request) -> Option<&str> {
            match r {
                Request::Create(c) | Request::Create2(c) | Request::CreateContainer(c) => {
                    (c.flags & SEQUENTIAL_FLAG == 0).then_some(c.path.as_str())
                }
                Request::CreateTtl(c) => {
                    (c.flags & SEQUENTIAL_FLAG == 0).then_some(c.path.as_str())
                }
                _ => None,
            }
        }
        let new_group = |path: &str| {
            let root = self.placement.group_root_for_new_node(path)?;
            // The extensions' registry is the server's, read from `/`'s
            // partition.
            if root == super::extensions::EXTENSIONS_ROOT {
                return None;
            }
            // A node already there (made before automatic placement was
            // on, or in flight) stays in the root group: a group over it
            // would hide it.
            let core = &self.cores[0];
            let present = core.preparer.current_acl(&core.tree, &root).is_some();
            (!present).then_some(root)
        };
        match request {
            Request::Multi(ops) => ops.iter().filter_map(creates).find_map(new_group),
            other => creates(other).and_then(new_group),
        }
    }

    /// Leader: adds `root` as a group on the partition with the fewest,
    /// as one `TxnOp::MoveGroups` without moves; nothing else is prepared
    /// until it applies.
    pub(super) fn propose_group_add(&mut self, root: &str) {
        let mut next = self.placement.clone();
        let to = next.pick_partition();
        if let Err(e) = next.add_group(root, to) {
            debug_assert!(false, "auto_group_for checked {root}: {e}");
            return;
        }
        let Some(version) = self.placement_node_version() else {
            return;
        };
        log::info!("automatic placement: {root} becomes a group on partition {to}");
        let request = Request::SetData(SetDataRequest {
            path: PARTITIONS.to_string(),
            data: Some(next.render().into_bytes()),
            version,
        });
        let zxid = self.next_zxid();
        let ctx = self.internal_ctx(0, zxid);
        let txn = self
            .prepare_placement_write(&ctx, &request, |_, _| Ok((Vec::new(), next)))
            .unwrap_or_else(|e| Txn {
                header: ctx.header(),
                op: e.into_txn_op(),
            });
        self.propose_on(PLACEMENT_PARTITION, txn);
    }

    /// Whether the placement node was ever written through the log (its
    /// version above 0): the leader's first act with several partitions
    /// (`publish_placement`), then every move. Until then it mirrors this
    /// server's configuration alone.
    pub(super) fn placement_written(&self) -> bool {
        self.placement_node_version().is_some_and(|v| v > 0)
    }

    /// Leader, each tick: a placement no leader has written yet is written
    /// through the log as it is, once, so that every member routes by the
    /// same one (a member configured with other groups takes the leader's)
    /// and a member restarted with other groups refuses to start.
    pub(super) fn publish_placement(&mut self) {
        if self.cores.len() == 1
            || !self.is_leader()
            || !self.may_prepare()
            || self.placement_written()
        {
            return;
        }
        let Some(version) = self.placement_node_version() else {
            return;
        };
        let request = Request::SetData(SetDataRequest {
            path: PARTITIONS.to_string(),
            data: Some(self.placement.render().into_bytes()),
            version,
        });
        let zxid = self.next_zxid();
        let ctx = self.internal_ctx(0, zxid);
        let next = self.placement.clone();
        let txn = self
            .prepare_placement_write(&ctx, &request, |_, _| Ok((Vec::new(), next)))
            .unwrap_or_else(|e| Txn {
                header: ctx.header(),
                op: e.into_txn_op(),
            });
        self.propose_on(PLACEMENT_PARTITION, txn);
    }

    /// The placement the data holds, if any.
    fn placement_held(&self) -> Result<Option<Placement>, String> {
        let Some(node) = self.cores[PLACEMENT_PARTITION].tree.node(PARTITIONS) else {
            return Ok(None);
        };
        let text = std::str::from_utf8(node.data())
            .map_err(|_| format!("{PARTITIONS} does not hold text"))?;
        Placement::parse(text)
            .map(Some)
            .map_err(|e| format!("{PARTITIONS}: {e}"))
    }

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
    fn prepare_placement_write(
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
        let under = |path: &str| {
            path == root
                || path
                    .strip_prefix(root)
                    .is_some_and(|rest| rest.starts_with('/'))
        };
        let above = |path: &str| {
            path == "/"
                || root
                    .strip_prefix(path)
                    .is_some_and(|rest| rest.starts_with('/'))
        };
        let moving = self.cores[from].watches.select(|_, path| under(path));
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
