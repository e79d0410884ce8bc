//! The placement as replicated state (docs/partitions.md, "Moving a
//! group"): partition 1's tree holds it at `/zookeeper/partitions`, in
//! `Placement::render`'s text. Requests for that path go there; `ls
//! /zookeeper`, served by partition 0, does not list it, so a client's
//! view of `/zookeeper` is what one partition shows. The first leader
//! writes it through the log once; from then on every member routes by
//! the one the log holds, which must still have the configured groups.
//! Automatic placement adds a group per new top-level node here too.

use stoa_proto::records::SetDataRequest;
use stoa_proto::request::Request;
use stoa_tree::{GroupMove, PARTITIONS};

use super::group_moves::{roots, PLACEMENT_PARTITION};
use super::routing::SEQUENTIAL_FLAG;
use super::Engine;
use crate::placement::Placement;
use std::collections::BTreeSet;

impl Engine {
    /// Settles the placement against the data (at start, and after a
    /// restore or a whole server snapshot replaced the trees). Once written
    /// through the log, the data's placement is the one to route by: its
    /// groups must be the configured ones (and those automatic placement
    /// added), wherever they now live. Until then the node only mirrors
    /// the configuration, and is written from it.
    pub(super) fn settle_placement(&mut self) -> Result<(), String> {
        let settled = self.settle_placement_node();
        self.note_placement_state();
        settled
    }

    fn settle_placement_node(&mut self) -> Result<(), String> {
        if self.cores.len() == 1 {
            return Ok(());
        }
        if let Some(held) = self.placement_held()? {
            if self.placement_node_version().is_some_and(|v| v > 0) {
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
        // The group is added by writing the node (always there with
        // several partitions: `settle_placement`).
        self.placement_node_version()?;
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
        log::info!("automatic placement: {root} becomes a group on partition {to}");
        self.propose_placement(next, Vec::new());
    }

    /// Whether the placement node was ever written through the log (its
    /// version above 0): the leader's first act with several partitions
    /// (`publish_placement`), then every move. Until then it mirrors this
    /// server's configuration alone.
    pub(super) fn placement_written(&self) -> bool {
        // Checked against the node only while its core is home: reaching
        // for one away would recall it, and a debug build would then run
        // another schedule than a release build (the simulators' seeds
        // would replay differently in each).
        debug_assert!(
            !self.cores.is_home(PLACEMENT_PARTITION)
                || self.placement_written == self.placement_node_version().is_some_and(|v| v > 0)
        );
        self.placement_written
    }

    /// Leader, each tick: a placement no leader has written yet is written
    /// through the log as it is, once, so that every member routes by the
    /// same one (a member configured with other groups takes the leader's)
    /// and a member restarted with other groups refuses to start.
    pub(super) fn publish_placement(&mut self) {
        if self.cores.len() == 1
            || !self.is_leader()
            || !self.may_write_placement()
            || self.placement_written()
        {
            return;
        }
        self.propose_placement(self.placement.clone(), Vec::new());
    }

    /// Leader: writes `next`, which `moves` lead to, through the log as the
    /// super user's setData of the node would (its version checked,
    /// nothing else prepared until it applies): the server's own placement
    /// writes (the first, automatic placement's, the balancer's). A refusal
    /// still takes its zxid, as an error transaction.
    pub(super) fn propose_placement(&mut self, next: Placement, moves: Vec<GroupMove>) {
        let Some(version) = self.placement_node_version() else {
            return;
        };
        let request = Request::SetData(SetDataRequest {
            path: PARTITIONS.to_string(),
            data: Some(next.render().into_bytes()),
            version,
        });
        let zxid = self.next_zxid();
        let ctx = self.internal_ctx(0, zxid);
        let txn = self
            .prepare_placement_write(&ctx, &request, |_, _| Ok((moves, next)))
            .unwrap_or_else(|e| {
                log::warn!("the server's own write of {PARTITIONS} was refused ({e:?})");
                ctx.failed(e)
            });
        self.propose_on(PLACEMENT_PARTITION, txn);
    }

    /// Whether clients' writes and sessions may be prepared as far as the
    /// placement goes: with several partitions, once a leader wrote it.
    /// Every session is then created after the placement in the one
    /// order, so no member serves a client before it routes by the
    /// ensemble's placement (a member configured with other groups would
    /// otherwise route that client's reads by its own until then).
    pub(super) fn placement_settled(&self) -> bool {
        self.placement_settled
    }

    /// Recomputes `placement_settled` (kept, since `may_prepare` asks on
    /// every write): after the trees were replaced, or the node written.
    pub(super) fn note_placement_state(&mut self) {
        let version = self.placement_node_version();
        self.placement_settled = self.cores.len() == 1 || version.is_none_or(|v| v > 0);
        self.placement_written = version.is_some_and(|v| v > 0);
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
}
