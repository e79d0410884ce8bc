//! Stubs: the ancestors a partition's tree needs to hang a nested group's
//! nodes from (docs/partitions.md, "Nested group roots"). A group root
//! `/a/b` living on partition 2 while `/a` lives elsewhere needs an `/a`
//! in partition 2's tree; that node is a stub: made by no transaction
//! (czxid 0), never served (reads of `/a` go to `/a`'s partition), and
//! gone again once nothing hangs from it. Every server makes and prunes
//! them at the same points of the one order, so replicas stay identical.

use crate::node::{shared_acl, shared_bytes, Node, NodeRef, PersistedStat};
use crate::path::{self, ROOT, ZOOKEEPER};
use crate::{Applied, DataTree, Txn, TxnOp};
use stoa_proto::records::Acl;

/// Whether the node at `p` is a stub: made by no transaction. The only
/// other such nodes are `/` and the system nodes under `/zookeeper`.
pub(crate) fn is_stub(p: &str, stat: &PersistedStat) -> bool {
    let p = path::canonical(p);
    stat.czxid == 0 && p != ROOT && !path::within(p, ZOOKEEPER)
}

impl DataTree {
    /// Stubs in the tree (counted in `node_count` and the data size too).
    pub fn stub_count(&self) -> usize {
        self.stubs
    }

    /// The path bytes of the stubs (their share of the data size).
    pub fn stub_bytes(&self) -> u64 {
        self.stub_bytes
    }

    /// Makes every missing ancestor of `p` (not `p`) a stub, top down.
    pub fn ensure_stubs(&mut self, p: &str) {
        let Some(parent) = path::parent_of(p).map(path::canonical) else {
            return;
        };
        if parent == ROOT || self.node(parent).is_some() {
            return;
        }
        self.ensure_stubs(parent);
        let stub = Node::new(
            shared_bytes(Some(&[])),
            shared_acl(&[Acl::open_unsafe()]),
            PersistedStat::default(),
        );
        self.attach(parent, stub);
    }

    /// Takes out the stub at `p` (or, if there is no node at `p`, at its
    /// nearest ancestor there is) if nothing hangs from it, then its
    /// parent's the same way, up to the first node that is no stub or
    /// still has children.
    pub fn prune_stubs(&mut self, p: &str) {
        let mut nearest = path::canonical(p);
        while self.node(nearest).is_none() {
            match path::parent_of(nearest) {
                Some(parent) => nearest = path::canonical(parent),
                None => return,
            }
        }
        let mut at = nearest.to_owned();
        loop {
            let prune = self
                .node(&at)
                .is_some_and(|n| n.child_count() == 0 && is_stub(&at, &n.stat));
            if !prune {
                return;
            }
            self.detach(&at, None);
            match path::parent_of(&at) {
                Some(parent) => at = path::canonical(parent).to_owned(),
                None => return,
            }
        }
    }

    /// Applies a part of a transaction over several partitions: a nested
    /// group root's node part creates its node where the partition holds
    /// none of its ancestors, so each create whose parent is missing (and
    /// made by no earlier op of the part) gets its ancestors as stubs
    /// first. Prep refused every other create without a parent, so this
    /// changes nothing else.
    pub fn apply_part<'t>(&mut self, txn: &'t Txn) -> Applied<'t> {
        let mut made: Vec<&str> = Vec::new();
        for create in creates(&txn.op) {
            let parent = path::parent_of(create).map(path::canonical);
            let missing =
                parent.is_some_and(|parent| self.node(parent).is_none() && !made.contains(&parent));
            if missing {
                self.ensure_stubs(create);
            }
            made.push(create);
        }
        self.apply(txn)
    }

    /// Calls `visit` with every node strictly below `p`, each parent
    /// before its children (nothing if there is no node at `p`).
    pub fn walk_below<'a>(&'a self, p: &str, mut visit: impl FnMut(&str, NodeRef<'a>)) {
        if let Some(node) = self.node(p) {
            let start = path::canonical(p);
            crate::tree::walk_from(start, node, |at, n| {
                if at != start {
                    visit(at, n)
                }
            });
        }
    }
}

/// The paths an op creates, in order (a multi's, a watched op's and its
/// extensions' writes).
fn creates(op: &TxnOp) -> Vec<&str> {
    fn created(op: &TxnOp) -> Option<&str> {
        match op {
            TxnOp::Create(c) => Some(c.path.as_str()),
            _ => None,
        }
    }
    match op {
        TxnOp::Multi(ops) => ops.iter().filter_map(created).collect(),
        TxnOp::Watched { op, extra, .. } => {
            let own: Vec<&str> = match &**op {
                TxnOp::Multi(ops) => ops.iter().filter_map(created).collect(),
                op => created(op).into_iter().collect(),
            };
            own.into_iter()
                .chain(extra.iter().filter_map(created))
                .collect()
        }
        op => created(op).into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use stoa_proto::request::Request;

    use crate::testutil::*;
    use crate::Txn;

    /// A nested group root's node part, prepared and applied where none of
    /// its ancestors is: stubs above it, counted apart, gone with it.
    #[test]
    fn a_nested_roots_node_hangs_from_stubs_that_go_with_it() {
        let mut w = World::new();
        let (empty_count, empty_bytes, empty_digest) = (
            w.tree.node_count(),
            w.tree.approximate_data_size(),
            w.tree.digest(),
        );
        // Without its ancestors a create is refused, as ZooKeeper's.
        let ctx = w.ctx(1, &[]);
        let refused = w.prep.prepare(&w.tree, &ctx, &create("/a/b/c"));
        assert!(refused.is_err());

        let ctx = w.ctx(1, &[]);
        w.prep.assume_stubs(&w.tree, "/a/b/c", ctx.zxid);
        let txn = w.prep.prepare(&w.tree, &ctx, &create("/a/b/c")).unwrap();
        let applied = w.tree.apply_part(&txn).into_owned();
        w.prep.applied(txn.header.zxid);
        assert!(matches!(applied.result, crate::TxnResult::Created { .. }));
        assert_eq!(w.tree.stub_count(), 2);
        assert_eq!(w.tree.stub_bytes(), ("/a".len() + "/a/b".len()) as u64);
        assert_eq!(w.tree.node_count(), empty_count + 3);
        assert_eq!(w.tree.node("/a").unwrap().stat().czxid, 0);
        assert_eq!(w.tree.check_invariants(), Ok(()));
        // A child of the root's node is a plain create.
        w.run(&create("/a/b/c/d")).unwrap();
        assert_eq!(w.tree.stub_count(), 2);

        // Deleting the child leaves the stubs (the root's node still hangs
        // there); prep then sees them go with the root, as apply does.
        w.run(&delete("/a/b/c/d", -1)).unwrap();
        assert_eq!(w.tree.stub_count(), 2);
        let ctx = w.ctx(1, &[]);
        let txn = w
            .prep
            .prepare(&w.tree, &ctx, &delete("/a/b/c", -1))
            .unwrap();
        assert!(
            w.prep.current_acl(&w.tree, "/a/b").is_none(),
            "pruned in prep"
        );
        assert!(
            w.prep.current_acl(&w.tree, "/a").is_none(),
            "pruned in prep"
        );
        w.tree.apply_part(&txn);
        w.prep.applied(txn.header.zxid);
        assert_eq!(w.tree.stub_count(), 0);
        assert!(w.tree.node("/a").is_none());
        assert_eq!(w.tree.node_count(), empty_count);
        assert_eq!(w.tree.approximate_data_size(), empty_bytes);
        assert_eq!(w.tree.digest(), empty_digest);
        assert_eq!(w.tree.check_invariants(), Ok(()));
    }

    /// A stub keeps hanging while another node needs it; a real node is
    /// never pruned; a create whose parent an earlier op of the same part
    /// makes needs no stub.
    #[test]
    fn stubs_are_pruned_only_when_nothing_hangs_from_them() {
        let mut w = World::new();
        w.run(&create("/real")).unwrap();
        for (i, path) in ["/s/x", "/s/y", "/real/x"].into_iter().enumerate() {
            let ctx = w.ctx(1, &[]);
            w.prep.assume_stubs(&w.tree, path, ctx.zxid);
            let txn = w.prep.prepare(&w.tree, &ctx, &create(path)).unwrap();
            w.tree.apply_part(&txn);
            w.prep.applied(txn.header.zxid);
            assert_eq!(w.tree.stub_count(), 1, "after {i}");
        }
        w.run(&delete("/s/x", -1)).unwrap();
        assert!(w.tree.node("/s").is_some());
        w.run(&delete("/real/x", -1)).unwrap();
        assert!(w.tree.node("/real").is_some(), "a real node stays");
        w.run(&delete("/s/y", -1)).unwrap();
        assert!(w.tree.node("/s").is_none());
        assert_eq!(w.tree.check_invariants(), Ok(()));

        let ctx = w.ctx(1, &[]);
        let multi = Request::Multi(vec![create("/m"), create("/m/n")]);
        let txn: Txn = w.prep.prepare(&w.tree, &ctx, &multi).unwrap();
        w.tree.apply_part(&txn);
        assert_eq!(w.tree.stub_count(), 0);
        assert_eq!(w.tree.node("/m").unwrap().stat().czxid, txn.header.zxid);
    }
}
