//! The committed state of one partition.

use std::sync::Arc;

use rpds::{HashTrieMapSync, RedBlackTreeMapSync, RedBlackTreeSetSync};
use stoa_proto::opcode::perms;
use stoa_proto::records::{Acl, Id};

use crate::digest::node_digest;
use crate::ephemeral::EphemeralKind;
use crate::node::{shared_acl, shared_bytes, ChildKey, Node, PersistedStat};
use crate::path::{self, CONFIG, QUOTA, ROOT, ZOOKEEPER};

type PathSet = RedBlackTreeSetSync<Arc<str>>;

/// Nodes by full path plus the indexes ZooKeeper keeps beside them.
///
/// Every map is persistent, so `clone()` is O(1) and the clone is a frozen
/// view: a snapshot writer serializes a clone while the owner keeps
/// applying transactions to the original.
///
/// Invariants (checked by [`DataTree::check_invariants`]): every node but
/// the root has its parent in `nodes`, listed in the parent's children;
/// `ephemerals`, `containers` and `ttls` list exactly the nodes whose owner
/// says so; ephemeral nodes have no children.
#[derive(Debug, Clone)]
pub struct DataTree {
    pub(crate) nodes: HashTrieMapSync<Arc<str>, Node>,
    /// Session id → paths of its ephemeral nodes; no empty sets.
    pub(crate) ephemerals: RedBlackTreeMapSync<i64, PathSet>,
    pub(crate) containers: PathSet,
    pub(crate) ttls: PathSet,
    /// Session id → negotiated timeout in ms (replicated state).
    pub(crate) sessions: RedBlackTreeMapSync<i64, i32>,
    /// zxid of the last applied transaction; 0 for a new tree.
    pub(crate) last_zxid: i64,
    /// Path and data bytes of every node (ZooKeeper's approximate data
    /// size), kept as nodes change: `mntr` and every metrics scrape report
    /// it, and summing it there walked the whole tree on the partition
    /// thread (a stall of about a second at a million znodes).
    pub(crate) data_bytes: u64,
}

impl Default for DataTree {
    fn default() -> Self {
        Self::new()
    }
}

impl DataTree {
    /// A fresh tree as ZooKeeper's `DataTree()` builds it: `/`,
    /// `/zookeeper`, `/zookeeper/quota` and `/zookeeper/config`, all with
    /// zeroed stats; config is `world:anyone` READ with aversion -1 (set by
    /// `setACL(..., -1)`), the others `world:anyone` ALL.
    pub fn new() -> Self {
        let open = shared_acl(&[Acl::open_unsafe()]);
        let read_only = shared_acl(&[Acl {
            perms: perms::READ,
            id: Id {
                scheme: "world".to_owned(),
                id: "anyone".to_owned(),
            },
        }]);
        let empty = shared_bytes(&[]);
        let mut tree = DataTree::empty();
        let zeroed = PersistedStat::default();
        tree.insert_indexed(
            Arc::from(ROOT),
            Node::new(empty.clone(), open.clone(), zeroed),
        );
        for p in [ZOOKEEPER, QUOTA] {
            tree.attach(p, Node::new(empty.clone(), open.clone(), zeroed));
        }
        let config_stat = PersistedStat {
            aversion: -1,
            ..zeroed
        };
        tree.attach(CONFIG, Node::new(empty, read_only, config_stat));
        tree
    }

    /// A tree without even a root, for the snapshot reader to fill.
    pub(crate) fn empty() -> Self {
        DataTree {
            nodes: HashTrieMapSync::new_sync(),
            ephemerals: RedBlackTreeMapSync::new_sync(),
            containers: RedBlackTreeSetSync::new_sync(),
            ttls: RedBlackTreeSetSync::new_sync(),
            sessions: RedBlackTreeMapSync::new_sync(),
            last_zxid: 0,
            data_bytes: 0,
        }
    }

    /// The node at `path`; `""` is the root, as in ZooKeeper.
    pub fn node(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path::canonical(path))
    }

    pub fn node_count(&self) -> usize {
        self.nodes.size()
    }

    /// ZooKeeper's approximate data size: path and data bytes of every
    /// node. O(1): kept as nodes change.
    pub fn approximate_data_size(&self) -> u64 {
        self.data_bytes
    }

    /// Ephemeral nodes of all sessions. O(sessions).
    pub fn ephemeral_count(&self) -> usize {
        self.ephemerals.values().map(|set| set.size()).sum()
    }

    pub fn last_zxid(&self) -> i64 {
        self.last_zxid
    }

    /// Live sessions and their timeouts in ms, by session id.
    pub fn sessions(&self) -> impl Iterator<Item = (i64, i32)> + '_ {
        self.sessions.iter().map(|(id, t)| (*id, *t))
    }

    pub fn session_timeout_ms(&self, session_id: i64) -> Option<i32> {
        self.sessions.get(&session_id).copied()
    }

    /// Paths of the ephemeral nodes of `session_id`, sorted.
    pub fn ephemerals(&self, session_id: i64) -> impl Iterator<Item = &str> + '_ {
        self.ephemerals
            .get(&session_id)
            .into_iter()
            .flat_map(|s| s.iter().map(|p| &**p))
    }

    /// Paths of container nodes, sorted.
    pub fn containers(&self) -> impl Iterator<Item = &str> + '_ {
        self.containers.iter().map(|p| &**p)
    }

    /// Paths of TTL nodes, sorted.
    pub fn ttls(&self) -> impl Iterator<Item = &str> + '_ {
        self.ttls.iter().map(|p| &**p)
    }

    /// An order-independent hash of every node's path, data, ACL and
    /// persisted stat, for comparing replicas.
    pub fn digest(&self) -> u64 {
        self.nodes
            .iter()
            .fold(0u64, |acc, (p, n)| acc.wrapping_add(node_digest(p, n)))
    }

    /// What ZooKeeper's `ContainerManager.getCandidates` would reap at
    /// `now_ms`: empty containers that once had a child (or, if
    /// `max_never_used_ms` > 0, that are older than it), and childless TTL
    /// nodes unmodified for longer than their TTL. Sorted.
    pub fn expiry_candidates(&self, now_ms: i64, max_never_used_ms: i64) -> Vec<String> {
        let mut out = Vec::new();
        for p in self.containers.iter() {
            let Some(n) = self.nodes.get(&**p) else {
                continue;
            };
            let elapsed = now_ms.saturating_sub(n.stat.mtime);
            let used = n.stat.cversion > 0;
            let stale = max_never_used_ms != 0 && elapsed > max_never_used_ms;
            if n.child_count() == 0 && (used || stale) {
                out.push(p.to_string());
            }
        }
        for p in self.ttls.iter() {
            let Some(n) = self.nodes.get(&**p) else {
                continue;
            };
            if let EphemeralKind::Ttl(ttl) = EphemeralKind::of(n.stat.ephemeral_owner) {
                if n.child_count() == 0 && ttl != 0 && now_ms.saturating_sub(n.stat.mtime) > ttl {
                    out.push(p.to_string());
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// Paths in depth-first order, each parent before its children,
    /// siblings sorted: the order of a snapshot.
    pub fn paths_depth_first(&self) -> Vec<Arc<str>> {
        self.nodes_depth_first()
            .into_iter()
            .map(|(p, _)| p)
            .collect()
    }

    /// Every node with its path, parents before children (one lookup per
    /// node: what snapshot writing and size estimates walk).
    pub fn nodes_depth_first(&self) -> Vec<(Arc<str>, &Node)> {
        // One pass over the map and a sort, rather than a walk from the root
        // that builds every child's path and looks it up (a cache miss or
        // more per node): 150k znodes took 180 ms that way.
        let mut out: Vec<(Arc<str>, &Node)> =
            self.nodes.iter().map(|(p, n)| (p.clone(), n)).collect();
        out.sort_unstable_by(|(a, _), (b, _)| path::depth_first_cmp(a, b));
        out
    }

    /// Inserts `node` at `path` under its existing parent and indexes its
    /// owner. Does not touch the parent's stat.
    pub(crate) fn attach(&mut self, p: &str, node: Node) {
        let parent = path::canonical(path::parent_of(p).unwrap_or_default()).to_owned();
        let key: Arc<str> = Arc::from(p);
        let parent_node = self.nodes.get_mut(parent.as_str());
        assert!(parent_node.is_some(), "attach {p}: parent {parent} missing");
        if let Some(parent_node) = parent_node {
            parent_node.children.insert(ChildKey::new(key.clone()));
        }
        self.insert_indexed(key, node);
    }

    /// Puts `node` into the node map under `key` and indexes its owner;
    /// the caller has listed it in its parent's children.
    pub(crate) fn insert_indexed(&mut self, key: Arc<str>, node: Node) {
        let owner = node.stat.ephemeral_owner;
        debug_assert!(!self.nodes.contains_key(&*key), "{key} inserted twice");
        self.data_bytes += node_bytes(&key, &node);
        self.nodes.insert_mut(key.clone(), node);
        match EphemeralKind::of(owner) {
            EphemeralKind::Void => {}
            EphemeralKind::Container => self.containers.insert_mut(key),
            EphemeralKind::Ttl(_) => self.ttls.insert_mut(key),
            EphemeralKind::Normal => {
                let mut set = self.ephemerals.get(&owner).cloned().unwrap_or_default();
                set.insert_mut(key);
                self.ephemerals.insert_mut(owner, set);
            }
        }
    }

    /// Removes the leaf at `path` from the maps, its parent's children and
    /// the owner indexes. Does not touch the parent's stat.
    pub(crate) fn detach(&mut self, p: &str) -> Option<Node> {
        let node = self.nodes.get(p)?.clone();
        assert_eq!(node.child_count(), 0, "detach {p}: node has children");
        let parent = path::canonical(path::parent_of(p).unwrap_or_default()).to_owned();
        if let Some(parent_node) = self.nodes.get_mut(parent.as_str()) {
            parent_node.children.remove(path::name_of(p));
        }
        self.nodes.remove_mut(p);
        self.data_bytes -= node_bytes(p, &node);
        let owner = node.stat.ephemeral_owner;
        match EphemeralKind::of(owner) {
            EphemeralKind::Void => {}
            EphemeralKind::Container => {
                self.containers.remove_mut(p);
            }
            EphemeralKind::Ttl(_) => {
                self.ttls.remove_mut(p);
            }
            EphemeralKind::Normal => {
                if let Some(set) = self.ephemerals.get(&owner) {
                    let mut set = set.clone();
                    set.remove_mut(p);
                    if set.is_empty() {
                        self.ephemerals.remove_mut(&owner);
                    } else {
                        self.ephemerals.insert_mut(owner, set);
                    }
                }
            }
        }
        Some(node)
    }

    /// Checks every structural invariant; returns the first violation.
    /// O(n): for tests and after loading a snapshot.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.nodes.get(ROOT).is_none() {
            return Err("no root".into());
        }
        let mut ephemeral_count = 0usize;
        let mut container_count = 0usize;
        let mut ttl_count = 0usize;
        let data_bytes: u64 = self.nodes.iter().map(|(p, n)| node_bytes(p, n)).sum();
        if data_bytes != self.data_bytes {
            return Err(format!(
                "data size kept as {} but the nodes hold {data_bytes}",
                self.data_bytes
            ));
        }
        for (p, n) in self.nodes.iter() {
            n.children
                .check()
                .map_err(|e| format!("children of {p}: {e}"))?;
            for c in n.children.iter() {
                let child = path::join(p, c.name());
                if c.path() != child {
                    return Err(format!("{p} lists {} as child {}", c.path(), c.name()));
                }
                if self.nodes.get(child.as_str()).is_none() {
                    return Err(format!("{p} lists missing child {}", c.name()));
                }
            }
            match EphemeralKind::of(n.stat.ephemeral_owner) {
                EphemeralKind::Void => {}
                EphemeralKind::Container => {
                    container_count += 1;
                    if !self.containers.contains(&**p) {
                        return Err(format!("container {p} not indexed"));
                    }
                }
                EphemeralKind::Ttl(_) => {
                    ttl_count += 1;
                    if !self.ttls.contains(&**p) {
                        return Err(format!("ttl {p} not indexed"));
                    }
                }
                EphemeralKind::Normal => {
                    ephemeral_count += 1;
                    if n.child_count() != 0 {
                        return Err(format!("ephemeral {p} has children"));
                    }
                    let indexed = self.ephemerals.get(&n.stat.ephemeral_owner);
                    if !indexed.is_some_and(|s| s.contains(&**p)) {
                        return Err(format!("ephemeral {p} not indexed"));
                    }
                }
            }
            if &**p == ROOT {
                continue;
            }
            let parent = path::canonical(path::parent_of(p).unwrap_or_default());
            match self.nodes.get(parent) {
                Some(pn) if pn.children.contains(path::name_of(p)) => {}
                _ => return Err(format!("{p}: parent {parent} missing or not listing it")),
            }
        }
        let indexed: usize = self.ephemerals.values().map(|s| s.size()).sum();
        if indexed != ephemeral_count || self.ephemerals.values().any(|s| s.is_empty()) {
            return Err("ephemeral index has extra entries".into());
        }
        if container_count != self.containers.size() || ttl_count != self.ttls.size() {
            return Err("container/ttl index has extra entries".into());
        }
        Ok(())
    }
}

/// What a node adds to ZooKeeper's approximate data size.
pub(crate) fn node_bytes(path: &str, node: &Node) -> u64 {
    (path.len() + node.data().len()) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoa_proto::records::Stat;

    #[test]
    fn new_tree_has_zookeepers_system_nodes() {
        // Proves the fresh tree matches a fresh ZooKeeper 3.9 (stats, ACLs, children).
        let t = DataTree::new();
        assert_eq!(t.node_count(), 4);
        assert_eq!(t.check_invariants(), Ok(()));
        let root = t.node("/").unwrap();
        assert_eq!(
            root.stat(),
            Stat {
                num_children: 1,
                cversion: -1,
                ..Stat::default()
            }
        );
        let zk = t.node("/zookeeper").unwrap();
        assert_eq!(zk.children().collect::<Vec<_>>(), ["config", "quota"]);
        assert_eq!(zk.stat().num_children, 2);
        let config = t.node("/zookeeper/config").unwrap();
        assert_eq!(config.stat().aversion, -1);
        assert_eq!(config.acl()[0].perms, perms::READ);
        assert_eq!(
            t.node("/zookeeper/quota").unwrap().acl(),
            [Acl::open_unsafe()]
        );
        assert!(t.node("").is_some(), "\"\" aliases the root");
    }

    #[test]
    fn clone_is_a_frozen_view() {
        // Proves a clone does not see later changes to the original.
        let t = DataTree::new();
        let frozen = t.clone();
        let mut t = t;
        t.detach("/zookeeper/quota");
        assert!(frozen.node("/zookeeper/quota").is_some());
        assert!(t.node("/zookeeper/quota").is_none());
    }
}
