//! The sessions that opted into fast reads or fast watches
//! (`stoa_tree::FAST`; docs/partitions.md, "Fast reads and fast watches"),
//! as the tree says at this member's applied state: kept as flag nodes
//! apply, and read afresh whenever the trees are replaced. Only servers
//! applying by partition have waits to skip (`engine/by_partition.rs`);
//! the others keep the flags and serve every session alike.

use rustc_hash::FxHashMap;

use stoa_tree::{flag_owner, FastFlags, FAST};

use super::Engine;
use crate::session::SessionId;
use crate::watch::ConnId;

#[derive(Default)]
pub(super) struct FastSessions {
    /// Sessions with any flag set.
    flags: FxHashMap<SessionId, FastFlags>,
}

impl FastSessions {
    fn set(&mut self, session: SessionId, flags: FastFlags) {
        match flags.any() {
            true => self.flags.insert(session, flags),
            false => self.flags.remove(&session),
        };
    }

    /// No session opted into anything (most servers: events are then
    /// held without a look at their connections).
    pub(super) fn is_empty(&self) -> bool {
        self.flags.is_empty()
    }

    pub(super) fn count(&self) -> (usize, usize) {
        let reads = self.flags.values().filter(|f| f.reads).count();
        let watches = self.flags.values().filter(|f| f.watches).count();
        (reads, watches)
    }
}

/// What a flag node in a tree says: its session's flags, if it is one
/// (a tree restored from elsewhere may hold any node there: one that breaks
/// the rules counts for nothing).
fn flags_in(tree: &stoa_tree::DataTree, path: &str) -> Option<(SessionId, FastFlags)> {
    let owner = flag_owner(path)?;
    let node = tree.node(path)?;
    let flags = FastFlags::parse(Some(node.data())).ok()?;
    (node.stat().ephemeral_owner == owner).then_some((owner, flags))
}

impl Engine {
    /// A node at `path` on `partition`'s tree was created, changed or
    /// deleted (a session's close deletes its flag node too): if it is a
    /// flag node, its session's flags follow it.
    #[inline]
    pub(super) fn fast_flag_applied(&mut self, partition: usize, path: &str) {
        // Every applied change comes here: most are nowhere near.
        if !path.starts_with(FAST) {
            return;
        }
        let Some(owner) = flag_owner(path) else {
            return;
        };
        let flags = flags_in(&self.cores[partition].tree, path).map(|(_, flags)| flags);
        self.fast.set(owner, flags.unwrap_or_default());
    }

    /// The trees were replaced (start, a snapshot installed, a restore).
    pub(super) fn reload_fast_sessions(&mut self) {
        self.fast = FastSessions::default();
        let tree = &self.cores[self.partition_of(FAST)].tree;
        let Some(parent) = tree.node(FAST) else {
            return;
        };
        for name in parent.children() {
            let path = format!("{FAST}/{}", name.as_str());
            if let Some((owner, flags)) = flags_in(tree, &path) {
                self.fast.set(owner, flags);
            }
        }
    }

    /// What `conn`'s session opted into.
    pub(super) fn fast_flags_of(&self, conn: ConnId) -> FastFlags {
        if self.fast.is_empty() {
            return FastFlags::default();
        }
        let session = self.gate.conns.get(&conn).and_then(|c| c.session);
        (session.and_then(|s| self.fast.flags.get(&s).copied())).unwrap_or_default()
    }
}
