//! The committed state of one partition.

use std::sync::Arc;

use rpds::{RedBlackTreeMapSync, RedBlackTreeSetSync};
use stoa_proto::opcode::perms;
use stoa_proto::records::{Acl, Id};

use crate::child_map::{self, ChildMap};
use crate::digest::{node_digest, CURRENT_SCHEME};
use crate::ephemeral::EphemeralKind;
use crate::node::{
    shared_acl, shared_bytes, NewData, Node, NodeRef, PersistedStat, SharedAcl, Updated,
};
use crate::path::{self, CONFIG, PARTITIONS, QUOTA, ROOT, ZOOKEEPER};

type PathSet = RedBlackTreeSetSync<Arc<str>>;

/// The znodes, each in its parent's child map, plus the indexes ZooKeeper
/// keeps beside them.
///
/// Every map is persistent, so `clone()` is O(1) and the clone is a frozen
/// view: a snapshot writer serializes a clone while the owner keeps
/// applying transactions to the original. There is no map of full paths: a
/// lookup walks from the root, one child map per path component. That saves
/// the path string and index entry of every znode (about 200 bytes each);
/// the price is some twenty name comparisons per lookup among a million
/// siblings, about 100 ns more than a hash map of paths on the engine
/// alone, and not measurable in end-to-end throughput.
///
/// Invariants (checked by [`DataTree::check_invariants`]): `ephemerals`,
/// `containers` and `ttls` list exactly the nodes whose owner says so;
/// ephemeral nodes have no children; the counts kept match the nodes.
#[derive(Debug, Clone)]
pub struct DataTree {
    pub(crate) root: Node,
    /// Nodes, the root included.
    pub(crate) node_count: usize,
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
    /// Stubs (`crate::stubs`) among the nodes, and their share of
    /// `data_bytes`, which the server takes off what it reports.
    pub(crate) stubs: usize,
    pub(crate) stub_bytes: u64,
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
        let read_only = world_read_only();
        let empty = shared_bytes(Some(&[]));
        let zeroed = PersistedStat::default();
        let mut tree = DataTree::empty();
        tree.set_root(Node::new(empty.clone(), open.clone(), zeroed));
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

    /// A tree without even a root (an empty placeholder not counted as a
    /// node), for the snapshot reader to fill.
    pub(crate) fn empty() -> Self {
        DataTree {
            root: Node::new(
                shared_bytes(Some(&[])),
                shared_acl(&[]),
                PersistedStat::default(),
            ),
            node_count: 0,
            ephemerals: RedBlackTreeMapSync::new_sync(),
            containers: RedBlackTreeSetSync::new_sync(),
            ttls: RedBlackTreeSetSync::new_sync(),
            sessions: RedBlackTreeMapSync::new_sync(),
            last_zxid: 0,
            data_bytes: 0,
            stubs: 0,
            stub_bytes: 0,
        }
    }

    /// Makes the configuration node `stat`, `data` and `acl` (a restore
    /// keeps the ensemble's own), creating it if the tree lacks it.
    pub(crate) fn keep_config(&mut self, stat: PersistedStat, data: Option<&[u8]>, acl: SharedAcl) {
        let new_len = data.map_or(0, <[u8]>::len) as u64;
        match self.update_node(CONFIG, &|s| *s = stat, Some(data), Some(&acl)) {
            Some(updated) => {
                self.data_bytes = self.data_bytes - updated.old_data_len as u64 + new_len;
            }
            None if self.node(ZOOKEEPER).is_some() => {
                self.attach(CONFIG, Node::new(shared_bytes(data), acl, stat));
            }
            // A tree without /zookeeper is no ZooKeeper tree: the restore
            // refused it before proposing.
            None => debug_assert!(false, "a restored tree without /zookeeper"),
        }
    }

    /// A server of several partitions keeps its placement in
    /// [`PARTITIONS`], read-only to all but the super user (as the
    /// configuration node is). Creates the node with `text` and zeroed
    /// stats, or gives it `text` while the log has not written it (its
    /// version is 0): until then it mirrors the configuration.
    pub fn mirror_partitions_node(&mut self, text: &[u8]) {
        let new_len = text.len() as u64;
        match self.node(PARTITIONS).map(|n| n.stat.version) {
            Some(0) => {
                let keep = |_: &mut PersistedStat| {};
                let updated = self.update_node(PARTITIONS, &keep, Some(Some(text)), None);
                let updated = updated.expect("the node is there");
                self.data_bytes = self.data_bytes - updated.old_data_len as u64 + new_len;
            }
            Some(_) => {}
            None if self.node(ZOOKEEPER).is_some() => {
                let data = shared_bytes(Some(text));
                let node = Node::new(data, world_read_only(), PersistedStat::default());
                self.attach(PARTITIONS, node);
            }
            None => debug_assert!(false, "a tree without /zookeeper"),
        }
    }

    /// Puts in the root of an empty tree.
    pub(crate) fn set_root(&mut self, root: Node) {
        assert_eq!(self.node_count, 0, "the tree has a root");
        self.note_added(ROOT, root.as_ref());
        self.root = root;
    }

    /// The node at `path`; `""` is the root, as in ZooKeeper.
    pub fn node(&self, path: &str) -> Option<NodeRef<'_>> {
        let rest = path::canonical(path).strip_prefix('/')?;
        if rest.is_empty() {
            return Some(self.root.as_ref());
        }
        // The last name found with a byte scan (a backward `split` costs
        // more in its searcher's set-up than a short path's bytes).
        let (above, last) = path::split_last(rest).unwrap_or(("", rest));
        // Only the last node is decoded; those above it are passed through.
        let mut children = &self.root.children;
        if !above.is_empty() {
            for name in above.split('/') {
                children = children.children_of(name)??;
            }
        }
        children.get(last)
    }

    /// The child map of the node at `path`, for changing (copies what a
    /// clone shares on the way down; gives a node that had none an empty
    /// one).
    pub(crate) fn children_mut(&mut self, path: &str) -> Option<&mut ChildMap> {
        let mut children = &mut self.root.children;
        for name in components(path)? {
            children = children.children_mut(name)?;
        }
        Some(children)
    }

    /// Changes the stat of the node at `path` with `change` and, when
    /// given, gives it new data or ACL, walking the path once; `None` if
    /// there is no such node.
    pub(crate) fn update_node(
        &mut self,
        p: &str,
        change: &dyn Fn(&mut PersistedStat),
        data: NewData<'_>,
        acl: Option<&SharedAcl>,
    ) -> Option<Updated> {
        let p = path::canonical(p);
        if p == ROOT {
            if self.node_count == 0 {
                return None;
            }
            let root = &mut self.root;
            let old_data_len = root.data.len();
            change(&mut root.stat);
            if let Some(data) = data {
                root.data = shared_bytes(data);
            }
            if let Some(acl) = acl {
                root.acl = acl.clone();
            }
            return Some(Updated {
                old_data_len,
                child_count: root.children.len(),
                stat: root.stat,
            });
        }
        let (parent, name) = path::split_last(p)?;
        self.children_mut(path::canonical(parent))?
            .update(name, change, data, acl)
    }

    pub fn node_count(&self) -> usize {
        self.node_count
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
        let mut sum = 0u64;
        self.walk(|p, n| sum = sum.wrapping_add(node_digest(CURRENT_SCHEME, p, n)));
        sum
    }

    /// What ZooKeeper's `ContainerManager.getCandidates` would reap at
    /// `now_ms`: empty containers that once had a child (or, if
    /// `max_never_used_ms` > 0, that are older than it), and childless TTL
    /// nodes unmodified for longer than their TTL. Sorted.
    pub fn expiry_candidates(&self, now_ms: i64, max_never_used_ms: i64) -> Vec<String> {
        let mut out = Vec::new();
        for p in self.containers.iter() {
            let Some(n) = self.node(p) else {
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
            let Some(n) = self.node(p) else {
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

    /// Calls `visit` with every node and its path in depth-first order,
    /// each parent before its children, siblings sorted: the order of a
    /// snapshot.
    pub fn walk<'a>(&'a self, visit: impl FnMut(&str, NodeRef<'a>)) {
        if self.node_count == 0 {
            return;
        }
        walk_from(ROOT, self.root.as_ref(), visit);
    }

    /// Takes the subtree at `root` (not `/`) out of the tree, its nodes
    /// out of every count and index, as of `zxid`: a group leaving this
    /// partition. The parent's stat stays as it is (the node moves; it is
    /// neither created nor deleted). None if there is no such node.
    pub fn evict(&mut self, root: &str, zxid: i64) -> Option<Subtree> {
        assert!(
            zxid >= self.last_zxid,
            "evict at {zxid:#x}, before {:#x}",
            self.last_zxid
        );
        let parent = path::canonical(path::parent_of(root)?);
        let node = self.children_mut(parent)?.remove(path::name_of(root))?;
        walk_from(root, node.as_ref(), |p, n| self.note_removed(p, n));
        self.last_zxid = zxid;
        Some(Subtree(node))
    }

    /// Puts `subtree` in at `root`, under its existing parent, where no
    /// node is, as of `zxid`: a group joining this partition. The parent's
    /// stat stays as it is.
    pub fn adopt(&mut self, root: &str, subtree: Subtree, zxid: i64) {
        assert!(
            zxid >= self.last_zxid,
            "adopt at {zxid:#x}, before {:#x}",
            self.last_zxid
        );
        walk_from(root, subtree.0.as_ref(), |p, n| self.note_added(p, n));
        let parent = path::canonical(path::parent_of(root).expect("not the root"));
        let siblings = self.children_mut(parent);
        let siblings = siblings.unwrap_or_else(|| panic!("adopt {root}: parent missing"));
        let fresh = siblings.insert_new(path::name_of(root), subtree.0);
        assert!(fresh, "adopt {root}: a node is there");
        self.last_zxid = zxid;
    }

    /// Paths in [`DataTree::walk`] order.
    pub fn paths_depth_first(&self) -> Vec<Arc<str>> {
        let mut out = Vec::with_capacity(self.node_count);
        self.walk(|p, _| out.push(Arc::from(p)));
        out
    }

    /// Inserts `node` at `path` under its existing parent and indexes its
    /// owner; leaves the parent's stat alone.
    pub(crate) fn attach(&mut self, p: &str, node: Node) {
        let parent = path::canonical(path::parent_of(p).unwrap_or_default());
        self.note_added(p, node.as_ref());
        let siblings = self.children_mut(parent);
        let siblings = siblings.unwrap_or_else(|| panic!("attach {p}: parent missing"));
        let fresh = siblings.insert_new(path::name_of(p), node);
        assert!(fresh, "{p} attached twice");
    }

    /// Counts a node about to join the tree and indexes its owner.
    pub(crate) fn note_added(&mut self, p: &str, node: NodeRef<'_>) {
        self.node_count += 1;
        self.data_bytes += node_bytes(p, node);
        if crate::stubs::is_stub(p, &node.stat) {
            self.stubs += 1;
            self.stub_bytes += node_bytes(p, node);
        }
        let owner = node.stat.ephemeral_owner;
        match EphemeralKind::of(owner) {
            EphemeralKind::Void => {}
            EphemeralKind::Container => self.containers.insert_mut(Arc::from(p)),
            EphemeralKind::Ttl(_) => self.ttls.insert_mut(Arc::from(p)),
            EphemeralKind::Normal => {
                let mut set = self.ephemerals.get(&owner).cloned().unwrap_or_default();
                set.insert_mut(Arc::from(p));
                self.ephemerals.insert_mut(owner, set);
            }
        }
    }

    /// Removes the leaf at `path` from its parent's children and the owner
    /// indexes; with `zxid`, moves the parent's pzxid up to it.
    pub(crate) fn detach(&mut self, p: &str, zxid: Option<i64>) -> Option<Node> {
        let parent = path::canonical(path::parent_of(p)?);
        let node = self.children_mut(parent)?.remove(path::name_of(p))?;
        let mut emptied_stub = false;
        if let Some(zxid) = zxid {
            let raise = |s: &mut PersistedStat| s.pzxid = s.pzxid.max(zxid);
            let left = (self.update_node(parent, &raise, None, None)).expect("the parent is there");
            emptied_stub = left.child_count == 0 && crate::stubs::is_stub(parent, &left.stat);
        }
        assert!(node.children.is_empty(), "detach {p}: node has children");
        self.note_removed(p, node.as_ref());
        if emptied_stub {
            // A nested group root's node hung from stubs nothing else needs.
            self.prune_stubs(parent);
        }
        Some(node)
    }

    /// Uncounts a node leaving the tree and takes it out of its owner's
    /// index.
    fn note_removed(&mut self, p: &str, node: NodeRef<'_>) {
        self.node_count -= 1;
        self.data_bytes -= node_bytes(p, node);
        if crate::stubs::is_stub(p, &node.stat) {
            self.stubs -= 1;
            self.stub_bytes -= node_bytes(p, node);
        }
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
    }

    /// Checks every structural invariant; returns the first violation.
    /// O(n): for tests and after loading a snapshot.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.node_count == 0 {
            return Err("no root".into());
        }
        let (mut nodes, mut data_bytes) = (0usize, 0u64);
        let (mut stubs, mut stub_bytes) = (0usize, 0u64);
        let (mut ephemeral_count, mut container_count, mut ttl_count) = (0usize, 0usize, 0usize);
        let mut first_error = None;
        self.walk(|p, n| {
            nodes += 1;
            data_bytes += node_bytes(p, n);
            if crate::stubs::is_stub(p, &n.stat) {
                stubs += 1;
                stub_bytes += node_bytes(p, n);
            }
            if first_error.is_none() {
                first_error = check_node(self, p, n).err();
            }
            match EphemeralKind::of(n.stat.ephemeral_owner) {
                EphemeralKind::Void => {}
                EphemeralKind::Container => container_count += 1,
                EphemeralKind::Ttl(_) => ttl_count += 1,
                EphemeralKind::Normal => ephemeral_count += 1,
            }
        });
        if let Some(e) = first_error {
            return Err(e);
        }
        if nodes != self.node_count {
            return Err(format!("{nodes} nodes, count kept as {}", self.node_count));
        }
        if (stubs, stub_bytes) != (self.stubs, self.stub_bytes) {
            return Err(format!(
                "{stubs} stubs of {stub_bytes} bytes, kept as {} of {}",
                self.stubs, self.stub_bytes
            ));
        }
        if data_bytes != self.data_bytes {
            return Err(format!(
                "data size kept as {} but the nodes hold {data_bytes}",
                self.data_bytes
            ));
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

/// The names along `path` from the root (none for the root itself);
/// `None` for a path that does not start at the root.
fn components(path: &str) -> Option<impl Iterator<Item = &str>> {
    let p = path::canonical(path);
    let rest = p.strip_prefix('/')?;
    Some(rest.split('/').filter(move |_| !rest.is_empty()))
}

/// One node's share of [`DataTree::check_invariants`].
fn check_node(tree: &DataTree, p: &str, n: NodeRef<'_>) -> Result<(), String> {
    if let Some(children) = n.children {
        children
            .check()
            .map_err(|e| format!("children of {p}: {e}"))?;
    }
    for name in n.children() {
        if name.is_empty() || name.contains('/') {
            return Err(format!("{p} has a child named {name:?}"));
        }
    }
    match EphemeralKind::of(n.stat.ephemeral_owner) {
        EphemeralKind::Void => {}
        EphemeralKind::Container => {
            if !tree.containers.contains(p) {
                return Err(format!("container {p} not indexed"));
            }
        }
        EphemeralKind::Ttl(_) => {
            if !tree.ttls.contains(p) {
                return Err(format!("ttl {p} not indexed"));
            }
        }
        EphemeralKind::Normal => {
            if n.child_count() != 0 {
                return Err(format!("ephemeral {p} has children"));
            }
            let indexed = tree.ephemerals.get(&n.stat.ephemeral_owner);
            if !indexed.is_some_and(|s| s.contains(p)) {
                return Err(format!("ephemeral {p} not indexed"));
            }
        }
    }
    Ok(())
}

/// Calls `visit` with `node` at `start` and every node below it, each
/// parent before its children, siblings sorted.
pub(crate) fn walk_from<'a>(
    start: &str,
    node: NodeRef<'a>,
    mut visit: impl FnMut(&str, NodeRef<'a>),
) {
    visit(start, node);
    // Explicit stack: paths may nest deeper than a thread's stack.
    let mut path = String::from(if start == ROOT { "" } else { start });
    let mut stack: Vec<(child_map::Iter<'a>, usize)> = Vec::new();
    stack.extend(node.children.map(|c| (c.iter(), path.len())));
    while let Some((siblings, parent_len)) = stack.last_mut() {
        let Some((prefix, suffix, node)) = siblings.next_entry() else {
            stack.pop();
            continue;
        };
        path.truncate(*parent_len);
        path.push('/');
        path.push_str(prefix);
        path.push_str(suffix);
        visit(&path, node);
        if let Some(children) = node.children.filter(|c| !c.is_empty()) {
            stack.push((children.iter(), path.len()));
        }
    }
}

/// `world:anyone` READ: the ACL of the nodes only the super user writes
/// (`/zookeeper/config`, `/zookeeper/partitions`).
fn world_read_only() -> SharedAcl {
    shared_acl(&[Acl {
        perms: perms::READ,
        id: Id {
            scheme: "world".to_owned(),
            id: "anyone".to_owned(),
        },
    }])
}

/// A group's nodes between leaving one partition's tree and joining
/// another's ([`DataTree::evict`], [`DataTree::adopt`]).
#[derive(Debug)]
pub struct Subtree(Node);

impl Subtree {
    /// A childless copy of the subtree's root (data, ACL, stat): the link
    /// a group root leaves on its parent's partition (docs/partitions.md).
    pub fn link(&self) -> Subtree {
        Subtree(Node::new(
            self.0.data.clone(),
            self.0.acl.clone(),
            self.0.stat,
        ))
    }
}

/// What a node adds to ZooKeeper's approximate data size.
pub(crate) fn node_bytes(path: &str, node: NodeRef<'_>) -> u64 {
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
    fn a_deep_chain_is_walked_and_dropped_without_recursion() {
        // Proves a chain of 5,000 nested znodes (a client can make one) is
        // walked, snapshotted and dropped, clone and original, on a thread
        // whose 128 KiB stack a recursive drop would overflow.
        let depth = 5_000;
        let run = move || {
            let mut t = DataTree::new();
            let mut p = String::new();
            for _ in 0..depth {
                p.push_str("/a");
                let node = Node::new(
                    shared_bytes(Some(b"x")),
                    shared_acl(&[]),
                    PersistedStat::default(),
                );
                t.attach(&p, node);
            }
            assert_eq!(t.node(&p).map(|n| n.data()), Some(&b"x"[..]));
            assert_eq!(t.paths_depth_first().len(), depth + 4);
            let mut image = Vec::new();
            crate::write_snapshot(&t, &mut image).unwrap();
            let back = crate::read_snapshot(&mut image.as_slice()).unwrap();
            assert_eq!(back.digest(), t.digest());
            let frozen = t.clone();
            t.detach(&p, None);
            drop(t);
            drop(back);
            assert_eq!(frozen.node_count(), depth + 4);
        };
        std::thread::Builder::new()
            .stack_size(128 << 10)
            .spawn(run)
            .unwrap()
            .join()
            .expect("no stack overflow");
    }

    #[test]
    fn clone_is_a_frozen_view() {
        // Proves a clone does not see later changes to the original.
        let t = DataTree::new();
        let frozen = t.clone();
        let mut t = t;
        t.detach("/zookeeper/quota", None);
        assert!(frozen.node("/zookeeper/quota").is_some());
        assert!(t.node("/zookeeper/quota").is_none());
    }
}
