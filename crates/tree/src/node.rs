//! One znode: data, ACL, persisted stat and child names.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::sync::Arc;

use stoa_proto::records::{Acl, Stat};
use triomphe::ThinArc;

use crate::ephemeral::client_owner;
use crate::ord_set::OrdSet;

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

/// A child as its parent lists it: the child's whole path, the very
/// allocation that keys it in the node map, ordered and looked up by its
/// name (the part after the last `/`). A separate name string per child
/// cost an allocation and some 32 bytes per znode.
#[derive(Debug, Clone)]
pub(crate) struct ChildKey {
    path: Arc<str>,
    /// Byte offset of the name in `path`.
    name_at: u32,
}

impl ChildKey {
    pub(crate) fn new(path: Arc<str>) -> ChildKey {
        let name_at = path.rfind('/').map_or(0, |i| i + 1);
        let name_at = u32::try_from(name_at).unwrap_or_else(|_| panic!("path of {name_at} bytes"));
        ChildKey { path, name_at }
    }

    pub(crate) fn name(&self) -> &str {
        &self.path[self.name_at as usize..]
    }

    pub(crate) fn path(&self) -> &str {
        &self.path
    }
}

impl PartialEq for ChildKey {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for ChildKey {}

impl PartialOrd for ChildKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// By name, as `Borrow<str>` requires (lookups pass a bare name).
impl Ord for ChildKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.name().cmp(other.name())
    }
}

impl Borrow<str> for ChildKey {
    fn borrow(&self) -> &str {
        self.name()
    }
}

/// A node's data behind a thin pointer (the length lives in the
/// allocation). Thin data and ACL fields bring the node map's entry (path,
/// node and count) from 144 bytes to 128, one allocator size class down:
/// 32 bytes less per znode.
pub type SharedBytes = ThinArc<(), u8>;
/// A node's ACL list, thin for the same reason; nodes share lists.
pub type SharedAcl = ThinArc<(), Acl>;

pub(crate) fn shared_bytes(bytes: &[u8]) -> SharedBytes {
    ThinArc::from_header_and_slice((), bytes)
}

pub(crate) fn shared_acl(acl: &[Acl]) -> SharedAcl {
    ThinArc::from_header_and_iter((), acl.iter().cloned())
}

// The node map stores each (path, node) pair in one refcounted allocation:
// 8 + 16 + 104 = 128 bytes, an allocator size class. A larger node costs
// 32 bytes more per znode.
const _: () = assert!(std::mem::size_of::<Node>() <= 104);

/// A znode. Cloning is cheap: data, ACL and children are shared.
#[derive(Debug, Clone)]
pub struct Node {
    pub(crate) data: SharedBytes,
    pub(crate) acl: SharedAcl,
    pub(crate) stat: PersistedStat,
    /// The children, sorted by name (ZooKeeper's order is unspecified).
    pub(crate) children: OrdSet<ChildKey>,
}

impl Node {
    pub(crate) fn new(data: SharedBytes, acl: SharedAcl, stat: PersistedStat) -> Self {
        Node {
            data,
            acl,
            stat,
            children: OrdSet::new(),
        }
    }

    pub fn data(&self) -> &[u8] {
        &self.data.slice
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
        self.children.iter().map(ChildKey::name)
    }

    /// Child names that sort (bytewise) after `after`, or all of them from
    /// the first when `None`, in sorted order. The children are an ordered
    /// set, so reaching the start costs O(log n) rather than a scan: what
    /// lets an extension take the head of a long queue cheaply.
    pub fn children_after<'a>(
        &'a self,
        after: Option<&'a str>,
    ) -> impl Iterator<Item = &'a str> + 'a {
        self.children.iter_after(after).map(ChildKey::name)
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
            node.children
                .insert(ChildKey::new(Arc::from(format!("/p/{name}"))));
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
