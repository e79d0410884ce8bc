//! The snapshot file: a header, checksummed chunks of sessions, ACL lists
//! and nodes (parents first), and an end chunk with counts and the tree
//! digest. Byte layout: docs/format-snapshot.md.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::sync::Arc;

use stoa_proto::records::Acl;

use crate::codec::{self, DecodeError, Reader};
use crate::node::{Node, PersistedStat};
use crate::path;
use crate::tree::DataTree;

pub(crate) const MAGIC: &[u8; 8] = b"STOASNAP";
pub(crate) const FORMAT_VERSION: u32 = 1;
/// magic (8) + version (4) + flags (4) + last zxid (8) + crc (4).
const HEADER_BYTES: usize = 28;
/// A chunk is closed once its payload reaches this size.
const CHUNK_TARGET_BYTES: usize = 64 * 1024;
/// Largest payload a reader accepts; one node record must fit.
pub const CHUNK_PAYLOAD_MAX_BYTES: usize = 64 * 1024 * 1024;
/// kind (1) + record count (4) + payload length (4).
const CHUNK_HEAD_BYTES: usize = 9;
const CRC_BYTES: usize = 4;

mod kind {
    pub const SESSIONS: u8 = 1;
    pub const ACLS: u8 = 2;
    pub const NODES: u8 = 3;
    pub const END: u8 = 4;
}

/// Smallest encodings, to bound record counts by payload size.
const SESSION_BYTES: usize = 12;
const ACL_LIST_MIN_BYTES: usize = 4;
/// path len + data len + acl index + 9 stat fields.
const NODE_MIN_BYTES: usize = 4 + 4 + 4 + 6 * 8 + 3 * 4;
const END_PAYLOAD_BYTES: usize = 8 + 8 + 4 + 8;

/// Why a snapshot was rejected.
#[derive(Debug)]
pub enum SnapshotError {
    Io(io::Error),
    /// Not a snapshot (wrong magic).
    BadMagic,
    UnsupportedVersion(u32),
    /// A header or chunk checksum does not match: the bytes are damaged.
    Checksum {
        offset: u64,
    },
    /// Checksums hold but the content is inconsistent.
    Corrupt(String),
}

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SnapshotError::Io(e) => write!(f, "snapshot I/O: {e}"),
            SnapshotError::BadMagic => f.write_str("not a stoa snapshot (bad magic)"),
            SnapshotError::UnsupportedVersion(v) => write!(f, "unsupported snapshot version {v}"),
            SnapshotError::Checksum { offset } => {
                write!(f, "snapshot checksum mismatch at byte {offset}")
            }
            SnapshotError::Corrupt(why) => write!(f, "corrupt snapshot: {why}"),
        }
    }
}

impl std::error::Error for SnapshotError {}

impl From<DecodeError> for SnapshotError {
    fn from(e: DecodeError) -> Self {
        SnapshotError::Corrupt(e.to_string())
    }
}

fn corrupt(why: impl Into<String>) -> SnapshotError {
    SnapshotError::Corrupt(why.into())
}

/// Writes `tree` (typically a clone taken while writes continue).
pub fn write_snapshot(tree: &DataTree, out: &mut impl Write) -> io::Result<()> {
    let mut header = Vec::with_capacity(HEADER_BYTES);
    header.extend_from_slice(MAGIC);
    codec::put_u32(&mut header, FORMAT_VERSION);
    codec::put_u32(&mut header, 0);
    codec::put_i64(&mut header, tree.last_zxid);
    let crc = crc32c::crc32c(&header);
    codec::put_u32(&mut header, crc);
    debug_assert_eq!(header.len(), HEADER_BYTES);
    out.write_all(&header)?;

    let mut chunks = ChunkWriter {
        out,
        kind: kind::SESSIONS,
        count: 0,
        payload: Vec::new(),
    };
    for (id, timeout) in tree.sessions() {
        codec::put_i64(&mut chunks.payload, id);
        codec::put_i32(&mut chunks.payload, timeout);
        chunks.record_done()?;
    }
    chunks.flush()?;

    // ACL lists, deduplicated by their encoding; nodes refer to them by index.
    let nodes = tree.nodes_depth_first();
    let mut acl_index: HashMap<Vec<u8>, u32> = HashMap::new();
    // Nodes share ACL lists; the pointer finds a list already indexed
    // without encoding it again. The tree outlives this function, so the
    // pointers stay valid and distinct.
    let mut acl_by_ptr: HashMap<*const Acl, u32> = HashMap::new();
    let mut node_acl = Vec::with_capacity(nodes.len());
    let mut enc = Vec::new();
    chunks.kind = kind::ACLS;
    for (_, n) in &nodes {
        let ptr = n.acl.as_ptr();
        let idx = match acl_by_ptr.get(&ptr) {
            Some(&idx) => idx,
            None => {
                enc.clear();
                codec::put_acl(&mut enc, n.acl());
                let idx = match acl_index.get(&enc) {
                    Some(&idx) => idx,
                    None => {
                        let idx = acl_index.len() as u32;
                        acl_index.insert(enc.clone(), idx);
                        chunks.payload.extend_from_slice(&enc);
                        chunks.record_done()?;
                        idx
                    }
                };
                acl_by_ptr.insert(ptr, idx);
                idx
            }
        };
        node_acl.push(idx);
    }
    chunks.flush()?;

    chunks.kind = kind::NODES;
    for ((p, n), acl) in nodes.iter().zip(node_acl) {
        let b = &mut chunks.payload;
        codec::put_str(b, p);
        codec::put_bytes(b, n.data());
        codec::put_u32(b, acl);
        let s = n.persisted();
        for v in [s.czxid, s.mzxid, s.ctime, s.mtime] {
            codec::put_i64(b, v);
        }
        for v in [s.version, s.cversion, s.aversion] {
            codec::put_i32(b, v);
        }
        codec::put_i64(b, s.ephemeral_owner);
        codec::put_i64(b, s.pzxid);
        chunks.record_done()?;
    }
    chunks.flush()?;

    chunks.kind = kind::END;
    codec::put_u64(&mut chunks.payload, tree.node_count() as u64);
    codec::put_u64(&mut chunks.payload, tree.sessions.size() as u64);
    codec::put_u32(&mut chunks.payload, acl_index.len() as u32);
    codec::put_u64(&mut chunks.payload, tree.digest());
    chunks.emit()?;
    chunks.out.flush()
}

struct ChunkWriter<'w, W: Write> {
    out: &'w mut W,
    kind: u8,
    count: u32,
    payload: Vec<u8>,
}

impl<W: Write> ChunkWriter<'_, W> {
    fn record_done(&mut self) -> io::Result<()> {
        self.count += 1;
        if self.payload.len() > CHUNK_PAYLOAD_MAX_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "snapshot record too large",
            ));
        }
        if self.payload.len() >= CHUNK_TARGET_BYTES {
            self.emit()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.count > 0 {
            self.emit()?;
        }
        Ok(())
    }

    fn emit(&mut self) -> io::Result<()> {
        let mut head = Vec::with_capacity(CHUNK_HEAD_BYTES);
        codec::put_u8(&mut head, self.kind);
        codec::put_u32(&mut head, self.count);
        codec::put_u32(&mut head, self.payload.len() as u32);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&head), &self.payload);
        self.out.write_all(&head)?;
        self.out.write_all(&self.payload)?;
        self.out.write_all(&crc.to_be_bytes())?;
        self.payload.clear();
        self.count = 0;
        Ok(())
    }
}

/// Reads a snapshot, verifying every checksum, the structure of the tree,
/// the counts and the digest. Memory use is bounded by the input's size.
pub fn read_snapshot(input: &mut impl Read) -> Result<DataTree, SnapshotError> {
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

    let mut state = Loader {
        tree: DataTree::empty(),
        acls: Vec::new(),
        stage: 0,
    };
    state.tree.last_zxid = last_zxid;
    let mut offset = HEADER_BYTES as u64;
    loop {
        let (k, count, payload) = read_chunk(input, offset)?;
        offset += (CHUNK_HEAD_BYTES + payload.len() + CRC_BYTES) as u64;
        if k == kind::END {
            state.finish(count, &payload)?;
            break;
        }
        state.chunk(k, count, &payload)?;
    }
    let mut probe = [0u8; 1];
    match input.read(&mut probe) {
        Ok(0) => {}
        Ok(_) => return Err(corrupt("bytes after the end chunk")),
        Err(e) => return Err(SnapshotError::Io(e)),
    }
    Ok(state.tree)
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

struct Loader {
    tree: DataTree,
    acls: Vec<Arc<[Acl]>>,
    /// Highest chunk kind seen: kinds must not go backwards.
    stage: u8,
}

impl Loader {
    fn chunk(&mut self, k: u8, count: u32, payload: &[u8]) -> Result<(), SnapshotError> {
        if !(kind::SESSIONS..=kind::NODES).contains(&k) {
            return Err(corrupt(format!("unknown chunk kind {k}")));
        }
        if k < self.stage {
            return Err(corrupt("chunks out of order"));
        }
        self.stage = k;
        let min = match k {
            kind::SESSIONS => SESSION_BYTES,
            kind::ACLS => ACL_LIST_MIN_BYTES,
            _ => NODE_MIN_BYTES,
        };
        if (count as usize).saturating_mul(min) > payload.len() {
            return Err(corrupt("record count exceeds chunk size"));
        }
        let mut r = Reader::new(payload);
        for _ in 0..count {
            match k {
                kind::SESSIONS => {
                    let (id, timeout) = (r.i64()?, r.i32()?);
                    if self.tree.sessions.contains_key(&id) {
                        return Err(corrupt(format!("session {id:#x} twice")));
                    }
                    self.tree.sessions.insert_mut(id, timeout);
                }
                kind::ACLS => self.acls.push(Arc::from(r.acl()?)),
                _ => self.node(&mut r)?,
            }
        }
        r.finish()?;
        Ok(())
    }

    fn node(&mut self, r: &mut Reader<'_>) -> Result<(), SnapshotError> {
        let p = r.string()?;
        let data: Arc<[u8]> = Arc::from(r.bytes()?);
        let acl_idx = r.u32()? as usize;
        let acl = self
            .acls
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
        if self.tree.nodes.contains_key(p.as_str()) {
            return Err(corrupt(format!("node {p} twice")));
        }
        if self.tree.nodes.size() == 0 {
            if p != path::ROOT {
                return Err(corrupt("first node is not the root"));
            }
            self.tree.nodes.insert_mut(Arc::from(path::ROOT), node);
            return Ok(());
        }
        let parent = path::parent_of(&p)
            .map(path::canonical)
            .ok_or_else(|| corrupt("bad path"))?;
        let parent_node = self
            .tree
            .nodes
            .get(parent)
            .ok_or_else(|| corrupt(format!("{p} before its parent")))?;
        // Ephemerals never have children: such a snapshot was not ours.
        let ephemeral_parent =
            crate::ephemeral::session_of(parent_node.stat.ephemeral_owner).is_some();
        if path::name_of(&p).is_empty() || ephemeral_parent {
            return Err(corrupt(format!("bad node {p}")));
        }
        self.tree.attach(&p, node);
        Ok(())
    }

    fn finish(&mut self, count: u32, payload: &[u8]) -> Result<(), SnapshotError> {
        if count != 0 || payload.len() != END_PAYLOAD_BYTES {
            return Err(corrupt("malformed end chunk"));
        }
        let mut r = Reader::new(payload);
        let (nodes, sessions, acls, digest) = (r.u64()?, r.u64()?, r.u32()?, r.u64()?);
        if nodes != self.tree.node_count() as u64
            || sessions != self.tree.sessions.size() as u64
            || acls as usize != self.acls.len()
        {
            return Err(corrupt("counts in end chunk do not match"));
        }
        if digest != self.tree.digest() {
            return Err(corrupt("digest mismatch"));
        }
        // The indexes and child sets were built by `attach` from the node
        // records themselves (which the digest just vouched for), so a full
        // invariant pass would only re-prove `attach`: a quarter of the
        // load time at a million nodes. Debug builds still run it.
        debug_assert_eq!(self.tree.check_invariants(), Ok(()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{CreateTxn, Txn, TxnHeader, TxnOp};
    use proptest::prelude::*;

    /// `/`, the system nodes, one session and `/a` holding "hi".
    fn tiny_tree() -> DataTree {
        let mut t = DataTree::new();
        let h = |zxid| TxnHeader {
            session_id: 0x42,
            cxid: 1,
            zxid,
            time_ms: 1_700_000_000_000,
        };
        t.apply(&Txn {
            header: h(1),
            op: TxnOp::CreateSession { timeout_ms: 30_000 },
        });
        let create = CreateTxn {
            path: "/a".into(),
            data: b"hi".to_vec(),
            acl: vec![Acl::open_unsafe()],
            ephemeral_owner: 0,
            parent_cversion: 1,
        };
        t.apply(&Txn {
            header: h(2),
            op: TxnOp::Create(create),
        });
        t
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The golden encoding of [`tiny_tree`]; a change here is a format change.
    const GOLDEN_HEX: &str = include_str!("../tests/golden/tiny-snapshot.hex");

    #[test]
    fn golden_bytes_of_a_tiny_tree() {
        // Proves the byte layout is stable (docs/format-snapshot.md) and reads back.
        let mut buf = Vec::new();
        write_snapshot(&tiny_tree(), &mut buf).unwrap();
        assert_eq!(hex(&buf), GOLDEN_HEX.trim());
        let back = read_snapshot(&mut buf.as_slice()).unwrap();
        assert_eq!(back.digest(), tiny_tree().digest());
        assert_eq!(back.last_zxid(), 2);
        assert_eq!(back.session_timeout_ms(0x42), Some(30_000));
        assert_eq!(back.node("/a").unwrap().data(), b"hi");
        assert_eq!(back.node("/zookeeper/config").unwrap().stat().aversion, -1);
    }

    #[test]
    fn every_flipped_bit_and_truncation_is_rejected() {
        // Proves checksums cover every byte and truncation is detected.
        let mut buf = Vec::new();
        write_snapshot(&tiny_tree(), &mut buf).unwrap();
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert!(
                read_snapshot(&mut bad.as_slice()).is_err(),
                "flip at {i} accepted"
            );
            assert!(
                read_snapshot(&mut &buf[..i]).is_err(),
                "truncation at {i} accepted"
            );
        }
        let mut longer = buf.clone();
        longer.push(0);
        assert!(matches!(
            read_snapshot(&mut longer.as_slice()),
            Err(SnapshotError::Corrupt(_))
        ));
        assert!(matches!(
            read_snapshot(&mut &b"NOTASNAPxxxxxxxxxxxxxxxxxxxxxxxx"[..]),
            Err(SnapshotError::BadMagic)
        ));
    }

    #[test]
    fn large_trees_span_many_chunks() {
        // Proves records split across chunks and ACL dedup keep the tree intact.
        let mut t = DataTree::new();
        for i in 0..300 {
            let create = CreateTxn {
                path: format!("/n{i:04}"),
                data: vec![i as u8; 1000],
                acl: if i % 2 == 0 {
                    vec![Acl::open_unsafe()]
                } else {
                    vec![]
                },
                ephemeral_owner: 0,
                parent_cversion: i + 1,
            };
            let header = TxnHeader {
                session_id: 1,
                cxid: i,
                zxid: i64::from(i) + 1,
                time_ms: 5,
            };
            t.apply(&Txn {
                header,
                op: TxnOp::Create(create),
            });
        }
        let mut buf = Vec::new();
        write_snapshot(&t, &mut buf).unwrap();
        let back = read_snapshot(&mut buf.as_slice()).unwrap();
        assert_eq!(back.digest(), t.digest());
        assert_eq!(back.node_count(), 304);
    }

    #[test]
    fn forged_chunk_length_does_not_allocate() {
        // Proves a chunk claiming the maximum length on a tiny input fails as truncated.
        let mut buf = Vec::new();
        write_snapshot(&DataTree::new(), &mut buf).unwrap();
        let mut bad = buf[..HEADER_BYTES].to_vec();
        bad.push(kind::NODES);
        bad.extend_from_slice(&1u32.to_be_bytes());
        bad.extend_from_slice(&(CHUNK_PAYLOAD_MAX_BYTES as u32).to_be_bytes());
        assert!(matches!(
            read_snapshot(&mut bad.as_slice()),
            Err(SnapshotError::Corrupt(_))
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            // Proves the reader is total on arbitrary input, with or without a valid header.
            let _ = read_snapshot(&mut bytes.as_slice());
            let mut framed = Vec::new();
            write_snapshot(&DataTree::new(), &mut framed).unwrap();
            framed.truncate(HEADER_BYTES);
            framed.extend_from_slice(&bytes);
            let _ = read_snapshot(&mut framed.as_slice());
        }
    }
}
