//! One znode: data, ACL, persisted stat and its children, loose ([`Node`])
//! or as the tree holds it ([`NodeRef`]).

use stoa_proto::records::{Acl, Stat};
use triomphe::ThinArc;

use crate::child_map::ChildMap;
use crate::ephemeral::client_owner;

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

/// An update's data: None keeps the node's, `Some(None)` makes it null,
/// `Some(Some(bytes))` gives it those bytes.
pub(crate) type NewData<'a> = Option<Option<&'a [u8]>>;

/// Znode data, or null (ZooKeeper keeps null apart from empty).
pub(crate) fn shared_bytes(bytes: Option<&[u8]>) -> SharedBytes {
    SharedBytes::of(bytes)
}

pub(crate) fn shared_acl(acl: &[Acl]) -> SharedAcl {
    ThinArc::from_header_and_iter((), acl.iter().cloned())
}

/// A child's name, inline up to 24 bytes (what nearly every name is).
pub type Name = compact_str::CompactString;

/// A znode outside the tree's leaves: the root, or one on its way in or
/// out. Cloning is cheap: data, ACL and children are shared.
#[derive(Debug, Clone)]
pub struct Node {
    pub(crate) data: SharedBytes,
    pub(crate) acl: SharedAcl,
    pub(crate) stat: PersistedStat,
    /// The children by name, sorted (ZooKeeper's order is unspecified).
    pub(crate) children: ChildMap,
}

impl Node {
    pub(crate) fn new(data: SharedBytes, acl: SharedAcl, stat: PersistedStat) -> Self {
        Node {
            data,
            acl,
            stat,
            children: ChildMap::new(),
        }
    }

    pub fn as_ref(&self) -> NodeRef<'_> {
        NodeRef {
            data: self.data.as_option(),
            acl: &self.acl,
            stat: self.stat,
            children: Some(&self.children),
        }
    }
}

/// The stat as ZooKeeper reports it (`DataNode.copyStat`): cversion counts
/// creations and deletions, owner 0 for containers and TTL nodes.
pub(crate) fn client_stat(stat: &PersistedStat, data_len: usize, num_children: usize) -> Stat {
    let num_children = num_children as i32;
    Stat {
        czxid: stat.czxid,
        mzxid: stat.mzxid,
        ctime: stat.ctime,
        mtime: stat.mtime,
        version: stat.version,
        cversion: stat.cversion.wrapping_mul(2).wrapping_sub(num_children),
        aversion: stat.aversion,
        ephemeral_owner: client_owner(stat.ephemeral_owner),
        data_length: data_len as i32,
        num_children,
        pzxid: stat.pzxid,
    }
}

/// A znode as the tree holds it, for reading: most sit packed in their
/// parent's leaves, so this is a view decoded from there.
#[derive(Debug, Clone, Copy)]
pub struct NodeRef<'a> {
    /// None: null data.
    pub(crate) data: Option<&'a [u8]>,
    pub(crate) acl: &'a SharedAcl,
    pub(crate) stat: PersistedStat,
    /// None for a node that never had children.
    pub(crate) children: Option<&'a ChildMap>,
}

impl<'a> NodeRef<'a> {
    /// The data; null reads as empty (`nullable_data` tells them apart).
    pub fn data(&self) -> &'a [u8] {
        self.data.unwrap_or_default()
    }

    /// The data, or None where it is null.
    pub fn nullable_data(&self) -> Option<&'a [u8]> {
        self.data
    }

    pub fn acl(&self) -> &'a [Acl] {
        &self.acl.slice
    }

    pub fn persisted(&self) -> PersistedStat {
        self.stat
    }

    /// The stat as ZooKeeper reports it.
    pub fn stat(&self) -> Stat {
        client_stat(&self.stat, self.data().len(), self.child_count())
    }

    /// The child `name`.
    pub fn child(&self, name: &str) -> Option<NodeRef<'a>> {
        self.children?.get(name)
    }

    /// Child names in sorted order.
    pub fn children(&self) -> impl Iterator<Item = Name> + 'a {
        self.children_after(None)
    }

    /// Child names that sort (bytewise) after `after`, or all of them from
    /// the first when `None`, in sorted order. The children are an ordered
    /// set, so reaching the start costs O(log n) rather than a scan: what
    /// lets an extension take the head of a long queue cheaply.
    pub fn children_after(&self, after: Option<&str>) -> impl Iterator<Item = Name> + 'a {
        self.children
            .map(|c| c.iter_after(after))
            .into_iter()
            .flatten()
            .map(|(name, _)| name)
    }

    pub fn child_count(&self) -> usize {
        self.children.map_or(0, ChildMap::len)
    }
}

/// What an update in place found and left: the stat it wrote, and the
/// node's old data size and child count (for the client's stat and the
/// tree's byte count), read on the same walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Updated {
    pub old_data_len: usize,
    pub child_count: usize,
    pub stat: PersistedStat,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_after_starts_strictly_after_the_cursor_in_byte_order() {
        // Proves the ordered child query skips to the cursor and keeps byte order.
        let mut node = Node::new(
            shared_bytes(Some(&[])),
            shared_acl(&[]),
            PersistedStat::default(),
        );
        for name in ["b", "a", "b0", "B", "c"] {
            let child = Node::new(
                shared_bytes(Some(&[])),
                shared_acl(&[]),
                PersistedStat::default(),
            );
            node.children.insert_new(name, child);
        }
        let node = node.as_ref();
        let all: Vec<Name> = node.children_after(None).collect();
        assert_eq!(all, ["B", "a", "b", "b0", "c"]);
        let after_b: Vec<Name> = node.children_after(Some("b")).collect();
        assert_eq!(after_b, ["b0", "c"]);
        let after_missing: Vec<Name> = node.children_after(Some("a0")).collect();
        assert_eq!(after_missing, ["b", "b0", "c"]);
        assert_eq!(node.children_after(Some("c")).count(), 0);
    }
}
