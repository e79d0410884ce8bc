//! Reading a snapshot. The calling thread checks, decodes and hashes the
//! records and links each node into its parent's child set; a second
//! thread puts the finished nodes into the node map (a hash trie whose
//! inserts are mostly cache misses at a million nodes). The halves cost
//! about the same, so a restart uses both cores of a small machine.

use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::ScopedJoinHandle;

use rpds::RedBlackTreeMapSync;

use crate::codec::Reader;
use crate::digest::{node_digest, NodeDigest};
use crate::ephemeral::session_of;
use crate::node::{shared_acl, shared_bytes, ChildKey, Node, PersistedStat, SharedAcl};
use crate::path;
use crate::snapshot::{
    corrupt, kind, SnapshotError, ACL_LIST_MIN_BYTES, CHUNK_HEAD_BYTES, CHUNK_PAYLOAD_MAX_BYTES,
    CRC_BYTES, END_PAYLOAD_BYTES, FORMAT_VERSION, HEADER_BYTES, MAGIC, NODE_MIN_BYTES,
    SESSION_BYTES,
};
use crate::tree::DataTree;

/// Batches of finished nodes in flight to the map thread; bounds how far
/// the decoder runs ahead.
const BATCHES_IN_FLIGHT: usize = 16;
const BATCH_NODES: usize = 512;

/// Reads a snapshot, verifying every checksum, the structure of the tree,
/// the counts and the digest. Memory use is bounded by the input's size.
pub fn read_snapshot(input: &mut impl Read) -> Result<DataTree, SnapshotError> {
    let last_zxid = read_header(input)?;
    let (end, built) = std::thread::scope(|scope| {
        let (to_map, from_builder) = sync_channel::<Vec<(Arc<str>, Node)>>(BATCHES_IN_FLIGHT);
        let map = scope.spawn(move || fill_map(from_builder));
        let mut builder = Builder {
            open: Vec::new(),
            started: false,
            digest: 0,
            sink: Sink::Thread {
                to_map,
                map,
                batch: Vec::with_capacity(BATCH_NODES),
            },
        };
        let end = decode(input, &mut builder);
        (end, builder.finish())
    });
    let end = end?;
    let (mut tree, digest) = built;
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
    // The indexes and child sets were built from the node records
    // themselves (which the digest just vouched for), so a full invariant
    // pass would only re-prove the builder: a quarter of the load time at
    // a million nodes. Debug builds still run it.
    debug_assert_eq!(tree.check_invariants(), Ok(()));
    Ok(tree)
}

fn read_header(input: &mut impl Read) -> Result<i64, SnapshotError> {
    let mut header = [0u8; HEADER_BYTES];
    read_exact(input, &mut header)?;
    if &header[..8] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    let mut r = Reader::new(&header[8..]);
    let version = r.u32()?;
    if version != FORMAT_VERSION {
        return Err(SnapshotError::UnsupportedVersion(version));
    }
    let _flags = r.u32()?;
    let last_zxid = r.i64()?;
    let crc = r.u32()?;
    if crc != crc32c::crc32c(&header[..HEADER_BYTES - CRC_BYTES]) {
        return Err(SnapshotError::Checksum { offset: 0 });
    }
    Ok(last_zxid)
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
fn decode(input: &mut impl Read, builder: &mut Builder<'_>) -> Result<Decoded, SnapshotError> {
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
            match input.read(&mut probe) {
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
        if k < stage {
            return Err(corrupt("chunks out of order"));
        }
        stage = k;
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
                    builder.add(node_record(&mut r, &acls)?)?;
                    nodes_read += 1;
                }
            }
        }
        r.finish()?;
    }
}

fn node_record(r: &mut Reader<'_>, acls: &[SharedAcl]) -> Result<NodeRecord, SnapshotError> {
    let p = r.str()?;
    let data = shared_bytes(r.bytes()?);
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
        digest: NodeDigest::of_record(p, &node),
        path: Arc::from(p),
        node,
    })
}

/// The map thread: inserts finished nodes until the builder hangs up.
fn fill_map(from_builder: Receiver<Vec<(Arc<str>, Node)>>) -> DataTree {
    let mut tree = DataTree::empty();
    for batch in from_builder {
        for (key, node) in batch {
            tree.insert_indexed(key, node);
        }
    }
    tree
}

/// Where finished nodes go.
enum Sink<'scope> {
    Thread {
        to_map: SyncSender<Vec<(Arc<str>, Node)>>,
        map: ScopedJoinHandle<'scope, DataTree>,
        batch: Vec<(Arc<str>, Node)>,
    },
    /// The map on this thread: after a record whose parent was already
    /// finished (not depth first), or once the map thread is done.
    Here(DataTree),
}

impl Sink<'_> {
    fn put(&mut self, key: Arc<str>, node: Node) {
        match self {
            Sink::Thread { to_map, batch, .. } => {
                batch.push((key, node));
                if batch.len() == BATCH_NODES {
                    let full = std::mem::replace(batch, Vec::with_capacity(BATCH_NODES));
                    // Only a panic ends the map thread early; join reports it.
                    let _ = to_map.send(full);
                }
            }
            Sink::Here(tree) => tree.insert_indexed(key, node),
        }
    }

    /// The map with everything put so far, on this thread.
    fn tree(&mut self) -> &mut DataTree {
        if let Sink::Thread { .. } = self {
            let Sink::Thread { to_map, map, batch } =
                std::mem::replace(self, Sink::Here(DataTree::empty()))
            else {
                unreachable!("matched above");
            };
            if !batch.is_empty() {
                let _ = to_map.send(batch);
            }
            drop(to_map);
            let tree = map.join().expect("snapshot map thread panicked");
            *self = Sink::Here(tree);
        }
        match self {
            Sink::Here(tree) => tree,
            Sink::Thread { .. } => unreachable!("replaced above"),
        }
    }
}

struct Builder<'scope> {
    /// The node just read and its ancestors, root first, not yet in
    /// the map. Snapshots list nodes depth first, so a node's parent is
    /// almost always on this stack: children are added to an owned node
    /// and each node enters the map once, complete, instead of costing
    /// several lookups of its parent in a map of a million entries.
    open: Vec<(Arc<str>, Node, NodeDigest)>,
    started: bool,
    /// Sum of the node digests, each finished as its node is closed (the
    /// child count is part of it) rather than in a second pass.
    digest: u64,
    sink: Sink<'scope>,
}

impl Builder<'_> {
    fn add(&mut self, record: NodeRecord) -> Result<(), SnapshotError> {
        let NodeRecord {
            path: p,
            node,
            digest,
        } = record;
        if !self.started {
            if *p != *path::ROOT {
                return Err(corrupt("first node is not the root"));
            }
            self.started = true;
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
            self.close_last();
        }
        // Not depth first (no writer of ours does that): the parent, if
        // any, is already in the map, its digest counted with fewer children.
        let reopened = self.open.is_empty();
        let parent_node = match self.open.last_mut() {
            Some((_, parent_node, _)) => parent_node,
            None => self
                .sink
                .tree()
                .nodes
                .get_mut(parent)
                .ok_or_else(|| corrupt(format!("{p} before its parent")))?,
        };
        // Ephemerals never have children: such a snapshot was not ours.
        if session_of(parent_node.stat.ephemeral_owner).is_some() {
            return Err(corrupt(format!("bad node {p}")));
        }
        // Siblings come sorted, so only an out-of-order name needs a lookup.
        let in_order = parent_node
            .children
            .last()
            .is_none_or(|last| last.name() < name);
        if !in_order && parent_node.children.contains(name) {
            return Err(corrupt(format!("node {p} twice")));
        }
        if reopened {
            self.digest = self.digest.wrapping_sub(node_digest(parent, parent_node));
        }
        parent_node.children.insert(ChildKey::new(p.clone()));
        if reopened {
            self.digest = self.digest.wrapping_add(node_digest(parent, parent_node));
        }
        self.open.push((p, node, digest));
        Ok(())
    }

    /// Finishes the innermost open node and sends it to the map.
    fn close_last(&mut self) {
        if let Some((key, node, digest)) = self.open.pop() {
            self.digest = self.digest.wrapping_add(digest.finish(node.child_count()));
            self.sink.put(key, node);
        }
    }

    /// The node map with every node read, and the digest sum.
    fn finish(mut self) -> (DataTree, u64) {
        while !self.open.is_empty() {
            self.close_last();
        }
        let tree = std::mem::replace(self.sink.tree(), DataTree::empty());
        (tree, self.digest)
    }
}
