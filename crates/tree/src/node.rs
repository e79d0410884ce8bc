//! One znode: data, ACL, persisted stat and its children.

use stoa_proto::records::{Acl, Stat};
use triomphe::ThinArc;

use crate::ephemeral::client_owner;
use crate::ord_map::OrdMap;

/// The stat ZooKeeper persists (`StatPersisted`). `cversion` counts child
/// creations and `ephemeral_owner` is raw (containers and TTL nodes carry
/// their markers); [`Node::stat`] derives what clients see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PersistedStat {
    pub czxid: i64,
    pub mzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub version: i32,
    pub cversion: i32,
    pub aversion: i32,
    pub ephemeral_owner: i64,
    pub pzxid: i64,
}

impl PersistedStat {
    /// `DataTree.createStat`: a new node's stat.
    pub fn created(zxid: i64, time_ms: i64, ephemeral_owner: i64) -> Self {
        PersistedStat {
            czxid: zxid,
            mzxid: zxid,
            ctime: time_ms,
            mtime: time_ms,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner,
            pzxid: zxid,
        }
    }
}

/// A node's data behind a thin pointer (the length lives in the
/// allocation): 8 bytes in the node rather than 16, for every znode.
pub use crate::shared_bytes::SharedBytes;
/// A node's ACL list, thin for the same reason; nodes share lists.
pub type SharedAcl = ThinArc<(), Acl>;

pub(crate) fn shared_bytes(bytes: &[u8]) -> SharedBytes {
    SharedBytes::new(bytes)
}

pub(crate) fn shared_acl(acl: &[Acl]) -> SharedAcl {
    ThinArc::from_header_and_iter((), acl.iter().cloned())
}

/// A child's name, inline up to 24 bytes (what nearly every name is).
pub(crate) type Name = compact_str::CompactString;

// A node sits inline in its parent's child map, beside its name: every
// byte here is a byte per znode.
const _: () = assert!(std::mem::size_of::<Node>() <= 96);

/// A znode. Cloning is cheap: data, ACL and children are shared.
#[derive(Debug, Clone)]
pub struct Node {
    pub(crate) data: SharedBytes,
    pub(crate) acl: SharedAcl,
    pub(crate) stat: PersistedStat,
    /// The children by name, sorted (ZooKeeper's order is unspecified).
    pub(crate) children: OrdMap<Name, Node>,
}

/// Children are nested inside their parent, so the default drop recurses
/// once per level of the tree: a chain of a few thousand znodes (any
/// client may create one) would overflow a thread's stack when the last
/// copy of it goes. This drop takes apart, with a loop, whatever no
/// snapshot clone still shares.
impl Drop for Node {
    fn drop(&mut self) {
        if self.children.is_empty() {
            return;
        }
        let mut pending = vec![std::mem::take(&mut self.children)];
        while let Some(mut children) = pending.pop() {
            children.drain_unshared(|mut child| {
                if !child.children.is_empty() {
                    pending.push(std::mem::take(&mut child.children));
                }
            });
        }
    }
}

impl Node {
    pub(crate) fn new(data: SharedBytes, acl: SharedAcl, stat: PersistedStat) -> Self {
        Node {
            data,
            acl,
            stat,
            children: OrdMap::new(),
        }
    }

    pub fn data(&self) -> &[u8] {
        &self.data
    }

    pub fn acl(&self) -> &[Acl] {
        &self.acl.slice
    }

    pub fn persisted(&self) -> &PersistedStat {
        &self.stat
    }

    /// The stat as ZooKeeper reports it (`DataNode.copyStat`): cversion
    /// counts creations and deletions, owner 0 for containers and TTL nodes.
    pub fn stat(&self) -> Stat {
        let num_children = self.child_count() as i32;
        Stat {
            czxid: self.stat.czxid,
            mzxid: self.stat.mzxid,
            ctime: self.stat.ctime,
            mtime: self.stat.mtime,
            version: self.stat.version,
            cversion: self
                .stat
                .cversion
                .wrapping_mul(2)
                .wrapping_sub(num_children),
            aversion: self.stat.aversion,
            ephemeral_owner: client_owner(self.stat.ephemeral_owner),
            data_length: self.data().len() as i32,
            num_children,
            pzxid: self.stat.pzxid,
        }
    }

    /// Child names in sorted order.
    pub fn children(&self) -> impl Iterator<Item = &str> + '_ {
        self.children.iter().map(|(name, _)| name.as_str())
    }

    /// Child names that sort (bytewise) after `after`, or all of them from
    /// the first when `None`, in sorted order. The children are an ordered
    /// set, so reaching the start costs O(log n) rather than a scan: what
    /// lets an extension take the head of a long queue cheaply.
    pub fn children_after<'a>(
        &'a self,
        after: Option<&'a str>,
    ) -> impl Iterator<Item = &'a str> + 'a {
        self.children
            .iter_after(after)
            .map(|(name, _)| name.as_str())
    }

    pub fn child_count(&self) -> usize {
        self.children.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_after_starts_strictly_after_the_cursor_in_byte_order() {
        // Proves the ordered child query skips to the cursor and keeps byte order.
        let mut node = Node::new(shared_bytes(&[]), shared_acl(&[]), PersistedStat::default());
        for name in ["b", "a", "b0", "B", "c"] {
            let child = Node::new(shared_bytes(&[]), shared_acl(&[]), PersistedStat::default());
            node.children.insert_new(name.into(), child);
        }
        let all: Vec<&str> = node.children_after(None).collect();
        assert_eq!(all, ["B", "a", "b", "b0", "c"]);
        let after_b: Vec<&str> = node.children_after(Some("b")).collect();
        assert_eq!(after_b, ["b0", "c"]);
        let after_missing: Vec<&str> = node.children_after(Some("a0")).collect();
        assert_eq!(after_missing, ["b", "b0", "c"]);
        assert_eq!(node.children_after(Some("c")).count(), 0);
    }
}
