//! Reading a snapshot: checks, decodes and hashes the records and builds
//! the tree as they come, each node finished (its children in) before it
//! joins its parent.

use std::io::{self, Read};
use std::sync::Arc;

use rpds::RedBlackTreeMapSync;

use crate::codec::Reader;
use crate::digest::{node_digest, DigestScheme, NodeDigest};
use crate::ephemeral::session_of;
use crate::node::{shared_acl, shared_bytes, Node, PersistedStat, SharedAcl};
use crate::path;
use crate::snapshot::{
    corrupt, kind, SnapshotError, ACL_LIST_MIN_BYTES, CHUNK_HEAD_BYTES, CHUNK_PAYLOAD_MAX_BYTES,
    CRC_BYTES, END_PAYLOAD_BYTES, FORMAT_VERSION, HEADER_BYTES, MAGIC, NODE_MIN_BYTES,
    SESSION_BYTES,
};
use crate::tree::DataTree;

/// Reads a snapshot, verifying every checksum, the structure of the tree,
/// the counts and the digest. Memory use is bounded by the input's size.
/// Bytes after the snapshot's end make it unreadable.
pub fn read_snapshot(input: &mut impl Read) -> Result<DataTree, SnapshotError> {
    read_snapshot_ending(input, true)
}

/// `read_snapshot` of a snapshot inside a larger file: reads exactly up to
/// its end chunk and leaves what follows.
pub fn read_embedded_snapshot(input: &mut impl Read) -> Result<DataTree, SnapshotError> {
    read_snapshot_ending(input, false)
}

fn read_snapshot_ending(input: &mut impl Read, alone: bool) -> Result<DataTree, SnapshotError> {
    let (mut format, last_zxid) = read_header(input)?;
    format.alone = alone;
    let mut builder = Builder {
        scheme: format.scheme,
        open: Vec::new(),
        digest: 0,
        tree: DataTree::empty(),
    };
    let end = decode(input, format, &mut builder)?;
    let (mut tree, digest) = builder.finish()?;
    tree.last_zxid = last_zxid;
    tree.sessions = end.sessions;
    if end.nodes != end.nodes_read
        || end.nodes != tree.node_count() as u64
        || end.sessions_count != tree.sessions.size() as u64
        || end.acls as usize != end.acls_read
    {
        return Err(corrupt("counts in end chunk do not match"));
    }
    if end.digest != digest {
        return Err(corrupt("digest mismatch"));
    }
    // The indexes and child maps were built from the node records
    // themselves (which the digest just vouched for), so a full invariant
    // pass would only re-prove the builder: a quarter of the load time at
    // a million nodes. Debug builds still run it.
    debug_assert_eq!(tree.check_invariants(), Ok(()));
    Ok(tree)
}

/// What a snapshot's format version decides for its reader.
#[derive(Debug, Clone, Copy)]
struct Format {
    /// How nodes were hashed for the digest.
    scheme: DigestScheme,
    /// ACLS chunks may follow NODES chunks (version 3): each list comes
    /// ahead of the first node that names it, not all before any node.
    acls_between_nodes: bool,
    /// Nothing may follow the end chunk.
    alone: bool,
}

/// The header's format and last zxid.
fn read_header(input: &mut impl Read) -> Result<(Format, i64), SnapshotError> {
    let mut header = [0u8; HEADER_BYTES];
    read_exact(input, &mut header)?;
    if &header[..8] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    let mut r = Reader::new(&header[8..]);
    let version = r.u32()?;
    let scheme = match version {
        1 => DigestScheme::Fnv,
        2 => DigestScheme::Words,
        FORMAT_VERSION => DigestScheme::Lanes,
        _ => return Err(SnapshotError::UnsupportedVersion(version)),
    };
    let format = Format {
        scheme,
        acls_between_nodes: version >= 3,
        alone: true,
    };
    let _flags = r.u32()?;
    let last_zxid = r.i64()?;
    let crc = r.u32()?;
    if crc != crc32c::crc32c(&header[..HEADER_BYTES - CRC_BYTES]) {
        return Err(SnapshotError::Checksum { offset: 0 });
    }
    Ok((format, last_zxid))
}

fn read_exact(input: &mut impl Read, buf: &mut [u8]) -> Result<(), SnapshotError> {
    input.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => corrupt("truncated"),
        _ => SnapshotError::Io(e),
    })
}

fn read_chunk(input: &mut impl Read, offset: u64) -> Result<(u8, u32, Vec<u8>), SnapshotError> {
    let mut head = [0u8; CHUNK_HEAD_BYTES];
    read_exact(input, &mut head)?;
    let mut r = Reader::new(&head);
    let (k, count, len) = (r.u8()?, r.u32()?, r.u32()? as usize);
    if len > CHUNK_PAYLOAD_MAX_BYTES {
        return Err(corrupt(format!(
            "chunk at byte {offset} claims {len} bytes"
        )));
    }
    // Grows with the bytes actually read, so a forged length cannot make
    // us allocate more than the input holds.
    let mut payload = Vec::new();
    let got = input
        .take(len as u64)
        .read_to_end(&mut payload)
        .map_err(SnapshotError::Io)?;
    if got != len {
        return Err(corrupt("truncated chunk"));
    }
    let mut crc = [0u8; CRC_BYTES];
    read_exact(input, &mut crc)?;
    if u32::from_be_bytes(crc) != crc32c::crc32c_append(crc32c::crc32c(&head), &payload) {
        return Err(SnapshotError::Checksum { offset });
    }
    Ok((k, count, payload))
}

/// One decoded node, hashed as far as its record allows.
struct NodeRecord {
    path: Arc<str>,
    node: Node,
    digest: NodeDigest,
}

/// What the decoder learned besides the nodes: the sessions and the end
/// chunk's claims, with its own counts to check them against.
struct Decoded {
    sessions: RedBlackTreeMapSync<i64, i32>,
    nodes_read: u64,
    acls_read: usize,
    nodes: u64,
    sessions_count: u64,
    acls: u32,
    digest: u64,
}

/// Reads every chunk to the end, handing the node records to `builder`.
fn decode(
    input: &mut impl Read,
    format: Format,
    builder: &mut Builder,
) -> Result<Decoded, SnapshotError> {
    let mut acls: Vec<SharedAcl> = Vec::new();
    let mut sessions = RedBlackTreeMapSync::new_sync();
    let mut nodes_read = 0u64;
    let mut stage = 0u8;
    let mut offset = HEADER_BYTES as u64;
    loop {
        let (k, count, payload) = read_chunk(input, offset)?;
        offset += (CHUNK_HEAD_BYTES + payload.len() + CRC_BYTES) as u64;
        if k == kind::END {
            if count != 0 || payload.len() != END_PAYLOAD_BYTES {
                return Err(corrupt("malformed end chunk"));
            }
            let mut r = Reader::new(&payload);
            let (nodes, sessions_count, acl_lists, digest) =
                (r.u64()?, r.u64()?, r.u32()?, r.u64()?);
            let mut probe = [0u8; 1];
            match if format.alone {
                input.read(&mut probe)
            } else {
                Ok(0)
            } {
                Ok(0) => {}
                Ok(_) => return Err(corrupt("bytes after the end chunk")),
                Err(e) => return Err(SnapshotError::Io(e)),
            }
            return Ok(Decoded {
                sessions,
                nodes_read,
                acls_read: acls.len(),
                nodes,
                sessions_count,
                acls: acl_lists,
                digest,
            });
        }
        if !(kind::SESSIONS..=kind::NODES).contains(&k) {
            return Err(corrupt(format!("unknown chunk kind {k}")));
        }
        // Kinds come in non-decreasing order, except that version 3 ranks
        // ACLS and NODES alike.
        let rank = if format.acls_between_nodes && k == kind::ACLS {
            kind::NODES
        } else {
            k
        };
        if rank < stage {
            return Err(corrupt("chunks out of order"));
        }
        stage = rank;
        let min = match k {
            kind::SESSIONS => SESSION_BYTES,
            kind::ACLS => ACL_LIST_MIN_BYTES,
            _ => NODE_MIN_BYTES,
        };
        if (count as usize).saturating_mul(min) > payload.len() {
            return Err(corrupt("record count exceeds chunk size"));
        }
        let mut r = Reader::new(&payload);
        for _ in 0..count {
            match k {
                kind::SESSIONS => {
                    let (id, timeout) = (r.i64()?, r.i32()?);
                    if sessions.contains_key(&id) {
                        return Err(corrupt(format!("session {id:#x} twice")));
                    }
                    sessions.insert_mut(id, timeout);
                }
                kind::ACLS => acls.push(shared_acl(&r.acl()?)),
                _ => {
                    builder.add(node_record(&mut r, &acls, builder.scheme)?)?;
                    nodes_read += 1;
                }
            }
        }
        r.finish()?;
    }
}

fn node_record(
    r: &mut Reader<'_>,
    acls: &[SharedAcl],
    scheme: DigestScheme,
) -> Result<NodeRecord, SnapshotError> {
    let p = r.str()?;
    let data = shared_bytes(r.nullable_bytes()?);
    let acl_idx = r.u32()? as usize;
    let acl = acls
        .get(acl_idx)
        .cloned()
        .ok_or_else(|| corrupt("bad ACL index"))?;
    let (czxid, mzxid, ctime, mtime) = (r.i64()?, r.i64()?, r.i64()?, r.i64()?);
    let (version, cversion, aversion) = (r.i32()?, r.i32()?, r.i32()?);
    let (ephemeral_owner, pzxid) = (r.i64()?, r.i64()?);
    let stat = PersistedStat {
        czxid,
        mzxid,
        ctime,
        mtime,
        version,
        cversion,
        aversion,
        ephemeral_owner,
        pzxid,
    };
    let node = Node::new(data, acl, stat);
    Ok(NodeRecord {
        digest: NodeDigest::of_record(scheme, p, node.as_ref()),
        path: Arc::from(p),
        node,
    })
}

struct Builder {
    /// How the snapshot being read hashed its nodes.
    scheme: DigestScheme,
    /// The node just read and its ancestors, root first, not yet in the
    /// tree. Snapshots list nodes depth first, so a node's parent is almost
    /// always on this stack: children join an owned node, and each node
    /// joins the tree once, complete.
    open: Vec<(Arc<str>, Node, NodeDigest)>,
    /// Sum of the node digests, each finished as its node is closed (the
    /// child count is part of it) rather than in a second pass.
    digest: u64,
    /// Counts and owner indexes as nodes are read; nodes as they close.
    tree: DataTree,
}

impl Builder {
    fn add(&mut self, record: NodeRecord) -> Result<(), SnapshotError> {
        let NodeRecord {
            path: p,
            node,
            digest,
        } = record;
        if self.tree.node_count() == 0 {
            if *p != *path::ROOT {
                return Err(corrupt("first node is not the root"));
            }
            self.tree.note_added(&p, node.as_ref());
            self.open.push((p, node, digest));
            return Ok(());
        }
        let parent = path::parent_of(&p)
            .map(path::canonical)
            .ok_or_else(|| corrupt(format!("bad path {p}")))?;
        let name = path::name_of(&p);
        if name.is_empty() || *p == *path::ROOT {
            return Err(corrupt(format!("bad node {p}")));
        }
        while self
            .open
            .last()
            .is_some_and(|(open, _, _)| **open != *parent)
        {
            self.close_last()?;
        }
        // Not depth first (no writer of ours does that): the parent, if
        // any, is already in the tree.
        let parent_node = match self.open.last() {
            Some((_, parent_node, _)) => parent_node.as_ref(),
            None => self
                .tree
                .node(parent)
                .ok_or_else(|| corrupt(format!("{p} before its parent")))?,
        };
        // Ephemerals never have children: such a snapshot was not ours.
        if session_of(parent_node.stat.ephemeral_owner).is_some() {
            return Err(corrupt(format!("bad node {p}")));
        }
        // Earlier siblings have all closed into the parent by now, and come
        // sorted: only a name out of order needs a lookup.
        let in_order = parent_node
            .children
            .and_then(|c| c.last_key())
            .is_none_or(|last| last.as_str() < name);
        if !in_order && parent_node.child(name).is_some() {
            return Err(corrupt(format!("node {p} twice")));
        }
        self.tree.note_added(&p, node.as_ref());
        self.open.push((p, node, digest));
        Ok(())
    }

    /// Finishes the innermost open node: into its parent, the next one
    /// down the stack, or the tree.
    fn close_last(&mut self) -> Result<(), SnapshotError> {
        let Some((p, node, digest)) = self.open.pop() else {
            return Ok(());
        };
        self.digest = self.digest.wrapping_add(digest.finish(node.children.len()));
        let name = path::name_of(&p);
        if let Some((_, parent_node, _)) = self.open.last_mut() {
            parent_node.children.insert_new(name, node);
            return Ok(());
        }
        if *p == *path::ROOT {
            self.tree.root = node;
            return Ok(());
        }
        // Its parent was finished before it was read: that parent's digest
        // was counted with fewer children.
        let parent = path::canonical(path::parent_of(&p).unwrap_or_default());
        let before = self
            .tree
            .node(parent)
            .map(|n| node_digest(self.scheme, parent, n))
            .ok_or_else(|| corrupt(format!("{p} before its parent")))?;
        let siblings = self.tree.children_mut(parent).expect("the parent is there");
        siblings.insert_new(name, node);
        let after = self.tree.node(parent).expect("the parent is there");
        self.digest =
            self.digest
                .wrapping_sub(before)
                .wrapping_add(node_digest(self.scheme, parent, after));
        Ok(())
    }

    /// The tree with every node read, and the digest sum.
    fn finish(mut self) -> Result<(DataTree, u64), SnapshotError> {
        while !self.open.is_empty() {
            self.close_last()?;
        }
        Ok((self.tree, self.digest))
    }
}

/// One node of a tree being imported (from a ZooKeeper snapshot).
pub struct ImportedNode {
    /// `/` for the root.
    pub path: String,
    pub data: Option<Vec<u8>>,
    /// Its ACL: an index into the lists given with the nodes.
    pub acl: usize,
    pub stat: PersistedStat,
}

/// Builds a tree from nodes listed each after its parent (depth first, as
/// ZooKeeper's snapshots list them; siblings in any order), each naming
/// one of `acl_lists` (shared by the nodes that name it), with its
/// sessions (id, timeout) and the zxid it is as of. The structure is
/// checked as a snapshot's is: a node before its parent, one twice, or a
/// child of an ephemeral is refused.
pub fn tree_from_nodes(
    acl_lists: &[Vec<stoa_proto::records::Acl>],
    nodes: impl IntoIterator<Item = ImportedNode>,
    sessions: impl IntoIterator<Item = (i64, i32)>,
    last_zxid: i64,
) -> Result<DataTree, SnapshotError> {
    let scheme = DigestScheme::Lanes;
    let mut builder = Builder {
        scheme,
        open: Vec::new(),
        digest: 0,
        tree: DataTree::empty(),
    };
    let acls: Vec<SharedAcl> = acl_lists.iter().map(|list| shared_acl(list)).collect();
    for imported in nodes {
        let acl = (acls.get(imported.acl).cloned())
            .ok_or_else(|| corrupt(format!("{}: no ACL list {}", imported.path, imported.acl)))?;
        let node = Node::new(shared_bytes(imported.data.as_deref()), acl, imported.stat);
        let path: Arc<str> = Arc::from(imported.path.as_str());
        builder.add(NodeRecord {
            digest: NodeDigest::of_record(scheme, &path, node.as_ref()),
            path,
            node,
        })?;
    }
    let (mut tree, _) = builder.finish()?;
    tree.last_zxid = last_zxid;
    for (id, timeout_ms) in sessions {
        tree.sessions = tree.sessions.insert(id, timeout_ms);
    }
    tree.check_invariants().map_err(corrupt)?;
    Ok(tree)
}
