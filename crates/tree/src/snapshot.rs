//! The snapshot file: a header, checksummed chunks of sessions, ACL lists
//! and nodes (parents first), and an end chunk with counts and the tree
//! digest. Byte layout: docs/format-snapshot.md.

use std::collections::HashMap;
use std::io::{self, Write};

use crate::codec::{self, DecodeError};
use crate::digest::{node_digest, CURRENT_SCHEME};
use crate::node::NodeRef;
use crate::tree::DataTree;

pub(crate) const MAGIC: &[u8; 8] = b"STOASNAP";
/// 3: ACLS and NODES chunks alternate, each list ahead of the first node
/// that names it (one walk of the tree); node hashes in independent chains
/// (`DigestScheme::Lanes`). 2: ACLS before every NODES chunk; node hashes
/// a word at a time (`DigestScheme::Words`). 1: as 2 with FNV-1a. All
/// three are read.
pub(crate) const FORMAT_VERSION: u32 = 3;
/// magic (8) + version (4) + flags (4) + last zxid (8) + crc (4).
pub(crate) const HEADER_BYTES: usize = 28;
/// A chunk is closed once its payload reaches this size.
const CHUNK_TARGET_BYTES: usize = 64 * 1024;
/// Largest payload a reader accepts; one node record must fit.
pub const CHUNK_PAYLOAD_MAX_BYTES: usize = 64 * 1024 * 1024;
/// kind (1) + record count (4) + payload length (4).
pub(crate) const CHUNK_HEAD_BYTES: usize = 9;
pub(crate) const CRC_BYTES: usize = 4;

pub(crate) mod kind {
    pub const SESSIONS: u8 = 1;
    pub const ACLS: u8 = 2;
    pub const NODES: u8 = 3;
    pub const END: u8 = 4;
}

/// Smallest encodings, to bound record counts by payload size.
pub(crate) const SESSION_BYTES: usize = 12;
pub(crate) const ACL_LIST_MIN_BYTES: usize = 4;
/// path len + data len + acl index + 9 stat fields.
pub(crate) const NODE_MIN_BYTES: usize = 4 + 4 + NODE_TAIL_BYTES;
/// A node record after its path and data: ACL index and stat.
const NODE_TAIL_BYTES: usize = 4 + 6 * 8 + 3 * 4;
pub(crate) const END_PAYLOAD_BYTES: usize = 8 + 8 + 4 + 8;

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

pub(crate) fn corrupt(why: impl Into<String>) -> SnapshotError {
    SnapshotError::Corrupt(why.into())
}

/// Writes `tree` (typically a clone taken while writes continue).
pub fn write_snapshot(tree: &DataTree, out: &mut impl Write) -> io::Result<()> {
    write_nodes_in_order(tree, |visit| tree.walk(visit), out)
}

/// Writes `tree` with its nodes in the order `for_each` hands them to its
/// visitor (every node of the tree, parents before children), in one walk:
/// each ACL list goes out in an ACLS chunk ahead of the NODES chunk that
/// first refers to it.
fn write_nodes_in_order<'t>(
    tree: &'t DataTree,
    for_each: impl FnOnce(&mut dyn FnMut(&str, NodeRef<'t>)),
    out: &mut impl Write,
) -> io::Result<()> {
    let mut header = Vec::with_capacity(HEADER_BYTES);
    header.extend_from_slice(MAGIC);
    codec::put_u32(&mut header, FORMAT_VERSION);
    codec::put_u32(&mut header, 0);
    codec::put_i64(&mut header, tree.last_zxid);
    let crc = crc32c::crc32c(&header);
    codec::put_u32(&mut header, crc);
    debug_assert_eq!(header.len(), HEADER_BYTES);
    out.write_all(&header)?;

    let mut sessions = Chunk::new(kind::SESSIONS);
    for (id, timeout) in tree.sessions() {
        codec::put_i64(&mut sessions.payload, id);
        codec::put_i32(&mut sessions.payload, timeout);
        sessions.record_done(out)?;
    }
    sessions.flush(out)?;

    let mut acl_table = AclTable::default();
    let mut acls = Chunk::new(kind::ACLS);
    let mut nodes = Chunk::new(kind::NODES);
    // The digest is summed here, from nodes at hand, rather than by a
    // second walk of the tree.
    let mut digest = 0u64;
    // The visitor cannot return an error: the first one stops the writing
    // once the walk is over.
    let mut failed: io::Result<()> = Ok(());
    for_each(&mut |p, n| {
        if failed.is_err() {
            return;
        }
        let acl = match acl_table.index_of(n, &mut acls, out) {
            Ok(idx) => idx,
            Err(e) => {
                failed = Err(e);
                return;
            }
        };
        digest = digest.wrapping_add(node_digest(CURRENT_SCHEME, p, n));
        let b = &mut nodes.payload;
        b.reserve(8 + p.len() + n.data().len() + NODE_TAIL_BYTES);
        codec::put_str(b, p);
        codec::put_nullable_bytes(b, n.nullable_data());
        b.extend_from_slice(&node_tail(acl, &n.persisted()));
        nodes.count += 1;
        failed = nodes.check_size().and_then(|()| {
            if nodes.payload.len() < CHUNK_TARGET_BYTES {
                return Ok(());
            }
            // The lists this chunk's nodes refer to go first.
            acls.flush(out)?;
            nodes.emit(out)
        });
    });
    failed?;
    acls.flush(out)?;
    nodes.flush(out)?;

    let mut end = Chunk::new(kind::END);
    codec::put_u64(&mut end.payload, tree.node_count() as u64);
    codec::put_u64(&mut end.payload, tree.sessions.size() as u64);
    codec::put_u32(&mut end.payload, acl_table.by_encoding.len() as u32);
    codec::put_u64(&mut end.payload, digest);
    end.emit(out)?;
    out.flush()
}

/// The ACL lists written so far, deduplicated by their encoding; nodes
/// refer to them by index.
#[derive(Default)]
struct AclTable {
    by_encoding: HashMap<Vec<u8>, u32>,
    /// Nodes share ACL lists; the pointer finds a list already indexed
    /// without encoding it again. The tree outlives the writing, so the
    /// pointers stay valid and distinct.
    by_ptr: HashMap<*const std::ffi::c_void, u32>,
    /// Siblings mostly share one list: the last one found skips the lookup.
    last: Option<(*const std::ffi::c_void, u32)>,
    enc: Vec<u8>,
}

impl AclTable {
    /// `n`'s list's index; a list not seen before is added to `acls`,
    /// which goes out ahead of the nodes chunk naming it.
    fn index_of(
        &mut self,
        n: NodeRef<'_>,
        acls: &mut Chunk,
        out: &mut impl Write,
    ) -> io::Result<u32> {
        let ptr = n.acl.as_ptr();
        if let Some((last, idx)) = self.last {
            if last == ptr {
                return Ok(idx);
            }
        }
        let idx = match self.by_ptr.get(&ptr) {
            Some(&idx) => idx,
            None => {
                self.enc.clear();
                codec::put_acl(&mut self.enc, n.acl());
                let idx = match self.by_encoding.get(&self.enc) {
                    Some(&idx) => idx,
                    None => {
                        let idx = self.by_encoding.len() as u32;
                        self.by_encoding.insert(self.enc.clone(), idx);
                        acls.payload.extend_from_slice(&self.enc);
                        // Lists may go out before the nodes chunk that
                        // names them is full, so a chunk of lists stays
                        // within its size like any.
                        acls.record_done(out)?;
                        idx
                    }
                };
                self.by_ptr.insert(ptr, idx);
                idx
            }
        };
        self.last = Some((ptr, idx));
        Ok(idx)
    }
}

/// The fixed-size end of a node record, built in place and appended in
/// one copy rather than field by field.
fn node_tail(acl: u32, s: &crate::node::PersistedStat) -> [u8; NODE_TAIL_BYTES] {
    let mut tail = [0u8; NODE_TAIL_BYTES];
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        tail[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    put(&acl.to_be_bytes());
    for v in [s.czxid, s.mzxid, s.ctime, s.mtime] {
        put(&v.to_be_bytes());
    }
    for v in [s.version, s.cversion, s.aversion] {
        put(&v.to_be_bytes());
    }
    put(&s.ephemeral_owner.to_be_bytes());
    put(&s.pzxid.to_be_bytes());
    debug_assert_eq!(at, NODE_TAIL_BYTES);
    tail
}

/// Records of one kind on their way into a chunk.
struct Chunk {
    kind: u8,
    count: u32,
    payload: Vec<u8>,
}

impl Chunk {
    fn new(kind: u8) -> Chunk {
        Chunk {
            kind,
            count: 0,
            payload: Vec::new(),
        }
    }

    fn record_done(&mut self, out: &mut impl Write) -> io::Result<()> {
        self.count += 1;
        self.check_size()?;
        if self.payload.len() >= CHUNK_TARGET_BYTES {
            self.emit(out)?;
        }
        Ok(())
    }

    fn check_size(&self) -> io::Result<()> {
        if self.payload.len() > CHUNK_PAYLOAD_MAX_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "snapshot record too large",
            ));
        }
        Ok(())
    }

    fn flush(&mut self, out: &mut impl Write) -> io::Result<()> {
        if self.count > 0 {
            self.emit(out)?;
        }
        Ok(())
    }

    fn emit(&mut self, out: &mut impl Write) -> io::Result<()> {
        let mut head = Vec::with_capacity(CHUNK_HEAD_BYTES);
        codec::put_u8(&mut head, self.kind);
        codec::put_u32(&mut head, self.count);
        codec::put_u32(&mut head, self.payload.len() as u32);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&head), &self.payload);
        out.write_all(&head)?;
        out.write_all(&self.payload)?;
        out.write_all(&crc.to_be_bytes())?;
        self.payload.clear();
        self.count = 0;
        Ok(())
    }
}

pub use crate::snapshot_load::{read_embedded_snapshot, read_snapshot};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{CreateTxn, Txn, TxnHeader, TxnOp};
    use proptest::prelude::*;
    use std::sync::Arc;
    use stoa_proto::records::Acl;

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
            data: Some(b"hi".to_vec()),
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

    /// ZooKeeper keeps null data apart from empty data: so do the tree,
    /// its digest, a setData and a snapshot.
    #[test]
    fn null_data_stays_null_and_hashes_apart_from_empty() {
        let h = |zxid| TxnHeader {
            session_id: 0,
            cxid: 1,
            zxid,
            time_ms: 1_700_000_000_000,
        };
        let tree_with = |data: Option<Vec<u8>>| {
            let mut t = DataTree::new();
            let create = CreateTxn {
                path: "/n".into(),
                data,
                acl: vec![Acl::open_unsafe()],
                ephemeral_owner: 0,
                parent_cversion: 1,
            };
            t.apply(&Txn {
                header: h(1),
                op: TxnOp::Create(create),
            });
            t
        };
        let null = tree_with(None);
        let empty = tree_with(Some(Vec::new()));
        assert_eq!(null.node("/n").unwrap().nullable_data(), None);
        assert_eq!(null.node("/n").unwrap().stat().data_length, 0);
        assert_eq!(empty.node("/n").unwrap().nullable_data(), Some(&[][..]));
        assert_ne!(null.digest(), empty.digest());
        for t in [&null, &empty] {
            let mut buf = Vec::new();
            write_snapshot(t, &mut buf).unwrap();
            let back = read_snapshot(&mut buf.as_slice()).unwrap();
            assert_eq!(back.digest(), t.digest());
            assert_eq!(
                back.node("/n").unwrap().nullable_data(),
                t.node("/n").unwrap().nullable_data()
            );
        }
        // setData to null and back to bytes.
        let mut t = empty.clone();
        for (zxid, data) in [(2, None), (3, Some(b"x".to_vec())), (4, None)] {
            let expected = data.clone();
            t.apply(&Txn {
                header: h(zxid),
                op: TxnOp::SetData {
                    path: "/n".into(),
                    data,
                    version: zxid as i32 - 1,
                },
            });
            assert_eq!(t.node("/n").unwrap().nullable_data(), expected.as_deref());
        }
        assert_eq!(t.digest(), {
            let mut again = null.clone();
            again.apply(&Txn {
                header: h(4),
                op: TxnOp::SetData {
                    path: "/n".into(),
                    data: None,
                    version: 3,
                },
            });
            again.digest()
        });
        assert_eq!(t.check_invariants(), Ok(()));
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The golden encoding of [`tiny_tree`]; a change here is a format change.
    const GOLDEN_HEX: &str = include_str!("../tests/golden/tiny-snapshot.hex");
    /// The same tree as format version 1 wrote it (FNV-1a node hashes).
    const GOLDEN_V1_HEX: &str = include_str!("../tests/golden/tiny-snapshot-v1.hex");
    /// The same tree as format version 2 wrote it (every ACLS chunk first).
    const GOLDEN_V2_HEX: &str = include_str!("../tests/golden/tiny-snapshot-v2.hex");

    fn unhex(text: &str) -> Vec<u8> {
        let text = text.trim();
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn a_version_1_snapshot_still_reads() {
        // Servers upgraded over a data dir written by format 1 start from it.
        let v1 = unhex(GOLDEN_V1_HEX);
        let back = read_snapshot(&mut v1.as_slice()).unwrap();
        assert_eq!(back.digest(), tiny_tree().digest());
        assert_eq!(back.node("/a").unwrap().data(), b"hi");
        // Its digest is checked with the scheme it was written with.
        let mut bad = v1.clone();
        let end_digest = bad.len() - CRC_BYTES - 8;
        bad[end_digest] ^= 1;
        let crc_at = bad.len() - CRC_BYTES;
        let chunk_start = crc_at - END_PAYLOAD_BYTES - CHUNK_HEAD_BYTES;
        let crc = crc32c::crc32c(&bad[chunk_start..crc_at]);
        bad[crc_at..].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            read_snapshot(&mut bad.as_slice()),
            Err(SnapshotError::Corrupt(_))
        ));
    }

    #[test]
    fn a_version_2_snapshot_still_reads() {
        let v2 = unhex(GOLDEN_V2_HEX);
        assert_eq!(&v2[8..12], &2u32.to_be_bytes());
        let back = read_snapshot(&mut v2.as_slice()).unwrap();
        assert_eq!(back.digest(), tiny_tree().digest());
        assert_eq!(back.node("/a").unwrap().data(), b"hi");
    }

    /// A tree of `/n0000`, `/n0001`, ... (`count` of them, one per zxid),
    /// each with the data and ACL `of` gives for its number.
    fn nodes_n0000_up(count: i32, of: impl Fn(i32) -> (Vec<u8>, Vec<Acl>)) -> DataTree {
        let mut t = DataTree::new();
        for i in 0..count {
            let (data, acl) = of(i);
            let create = CreateTxn {
                path: format!("/n{i:04}"),
                data: Some(data),
                acl,
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
        t
    }

    fn digest_acl(perms: i32, id: &str) -> Acl {
        Acl {
            perms,
            id: stoa_proto::records::Id {
                scheme: "digest".into(),
                id: id.into(),
            },
        }
    }

    /// `image`'s chunks in file order: kind, payload length and the bytes
    /// the whole chunk spans.
    fn chunks(image: &[u8]) -> Vec<(u8, usize, std::ops::Range<usize>)> {
        let mut out = Vec::new();
        let mut at = HEADER_BYTES;
        while at < image.len() {
            let len = u32::from_be_bytes(image[at + 5..at + 9].try_into().unwrap()) as usize;
            let end = at + CHUNK_HEAD_BYTES + len + CRC_BYTES;
            out.push((image[at], len, at..end));
            at = end;
        }
        assert_eq!(at, image.len());
        out
    }

    /// The kinds of `image`'s chunks, in file order.
    fn chunk_kinds(image: &[u8]) -> Vec<u8> {
        chunks(image).into_iter().map(|(kind, _, _)| kind).collect()
    }

    /// `image` with its header saying `version` (and its checksum redone).
    fn as_version(image: &[u8], version: u32) -> Vec<u8> {
        let mut out = image.to_vec();
        out[8..12].copy_from_slice(&version.to_be_bytes());
        let crc = crc32c::crc32c(&out[..HEADER_BYTES - CRC_BYTES]);
        out[HEADER_BYTES - CRC_BYTES..HEADER_BYTES].copy_from_slice(&crc.to_be_bytes());
        out
    }

    #[test]
    fn an_acl_list_first_named_late_goes_out_between_node_chunks() {
        // Proves the one-walk writer puts a list ahead of the chunk whose
        // node first names it, and that only version 3 readers take that order.
        // The last node, past several full chunks, has a list of its own.
        let t = nodes_n0000_up(400, |i| {
            let acl = if i == 399 {
                vec![digest_acl(1, "late:x")]
            } else {
                vec![Acl::open_unsafe()]
            };
            (vec![7; 500], acl)
        });
        let mut buf = Vec::new();
        write_snapshot(&t, &mut buf).unwrap();
        let kinds = chunk_kinds(&buf);
        let first_nodes = kinds.iter().position(|&k| k == kind::NODES).unwrap();
        let last_acls = kinds.iter().rposition(|&k| k == kind::ACLS).unwrap();
        assert!(
            first_nodes < last_acls && last_acls < kinds.len() - 2,
            "kinds {kinds:?}"
        );
        let back = read_snapshot(&mut buf.as_slice()).unwrap();
        assert_eq!(back.digest(), t.digest());
        assert_eq!(back.node("/n0399").unwrap().acl()[0].id.id, "late:x");
        // Version 2 kept every list ahead of the nodes.
        assert!(matches!(
            read_snapshot(&mut as_version(&buf, 2).as_slice()),
            Err(SnapshotError::Corrupt(_))
        ));
    }

    #[test]
    fn many_new_acl_lists_under_one_nodes_chunk_are_cut_into_chunks_of_the_usual_size() {
        // Proves ACL lists written ahead of a nodes chunk still close their
        // chunk at the target size (a reader refuses chunks past its limit).
        let t = nodes_n0000_up(300, |i| {
            let id = format!("user{i}:{}", "h".repeat(500));
            (Vec::new(), vec![digest_acl(31, &id)])
        });
        let mut buf = Vec::new();
        write_snapshot(&t, &mut buf).unwrap();
        let kinds = chunk_kinds(&buf);
        assert!(
            kinds.iter().filter(|&&k| k == kind::ACLS).count() >= 2,
            "kinds {kinds:?}"
        );
        for (_, len, _) in chunks(&buf) {
            assert!(len < CHUNK_TARGET_BYTES + 1024, "a chunk of {len} bytes");
        }
        let back = read_snapshot(&mut buf.as_slice()).unwrap();
        assert_eq!(back.digest(), t.digest());
    }

    #[test]
    fn sessions_after_nodes_are_out_of_order_in_version_3() {
        let mut buf = Vec::new();
        write_snapshot(&tiny_tree(), &mut buf).unwrap();
        assert_eq!(
            chunk_kinds(&buf),
            [kind::SESSIONS, kind::ACLS, kind::NODES, kind::END]
        );
        // Move the sessions chunk after the nodes chunk.
        let spans: Vec<_> = chunks(&buf).into_iter().map(|(_, _, span)| span).collect();
        let (sessions, acls, nodes, end) = (&spans[0], &spans[1], &spans[2], &spans[3]);
        let mut moved = buf[..HEADER_BYTES].to_vec();
        moved.extend_from_slice(&buf[acls.start..nodes.end]);
        moved.extend_from_slice(&buf[sessions.clone()]);
        moved.extend_from_slice(&buf[end.clone()]);
        let err = read_snapshot(&mut moved.as_slice()).unwrap_err();
        assert!(err.to_string().contains("out of order"), "{err}");
    }

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
        let t = nodes_n0000_up(300, |i| {
            let acl = if i % 2 == 0 {
                vec![Acl::open_unsafe()]
            } else {
                vec![]
            };
            (vec![i as u8; 1000], acl)
        });
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

    /// Nested persistent, ephemeral and container nodes built from `ops`:
    /// (parent choice, name, kind) where kind 0 = persistent, 1 = ephemeral,
    /// 2 = container, 3 = delete the chosen node if it is a leaf.
    fn random_tree(ops: &[(usize, u8, u8)]) -> DataTree {
        random_tree_named(ops, &["a", "b", "c", "d", "e", "f"])
    }

    /// [`random_tree`] with the names drawn from `names`.
    fn random_tree_named(ops: &[(usize, u8, u8)], names: &[&str]) -> DataTree {
        use crate::testutil::{create_mode, delete, World};
        let mut w = World::new();
        let mut paths = vec!["".to_owned()];
        for &(pick, name, kind) in ops {
            let parent = paths[pick % paths.len()].clone();
            let path = format!("{parent}/{}", names[name as usize % names.len()]);
            let request = match kind % 4 {
                3 => delete(&parent, -1),
                mode => create_mode(&path, [0, 1, 4][mode as usize]),
            };
            if parent.is_empty() && kind % 4 == 3 {
                continue;
            }
            let session = 0x10 + i64::from(name % 2);
            if w.run_as(session, &[], &request).is_ok() && kind % 4 != 3 {
                paths.push(path);
            }
        }
        w.tree
    }

    #[test]
    fn a_parents_first_order_that_is_not_depth_first_loads_the_same_tree() {
        // Proves the loader's fast path (parent on its stack) is not the only one:
        // a breadth-first snapshot (children added to nodes already closed) loads
        // with the same digest and indexes.
        let t = random_tree(&[
            (0, 0, 0),
            (0, 1, 2),
            (1, 2, 0),
            (2, 3, 1),
            (1, 4, 0),
            (3, 0, 1),
            (0, 5, 0),
        ]);
        assert!(t.node_count() > 8, "tree too small: {}", t.node_count());
        // By depth, siblings in reverse order: parents first, nothing else kept.
        let depth = |p: &str| if p == "/" { 0 } else { p.matches('/').count() };
        let mut nodes = listed(&t);
        nodes.sort_by(|a, b| b.0.cmp(&a.0));
        nodes.sort_by_key(|(p, _)| depth(p));
        let mut buf = Vec::new();
        write_listed(&t, &nodes, &mut buf);
        let back = read_snapshot(&mut buf.as_slice()).unwrap();
        assert_eq!(back.digest(), t.digest());
        assert_eq!(back.check_invariants(), Ok(()));
        assert_eq!(back.ephemerals(0x10).count(), t.ephemerals(0x10).count());
    }

    #[test]
    fn a_node_listed_twice_is_rejected_adjacent_or_not() {
        // Proves the loader's duplicate check (sibling order first, lookup
        // otherwise) catches a repeated record wherever it appears.
        let t = random_tree(&[(0, 0, 0), (1, 1, 0), (0, 2, 0), (0, 3, 0)]);
        let nodes = listed(&t);
        for (from, to) in [(4, 5), (4, nodes.len())] {
            let mut twice = nodes.clone();
            twice.insert(to, nodes[from].clone());
            let mut buf = Vec::new();
            write_listed(&t, &twice, &mut buf);
            assert!(
                matches!(
                    read_snapshot(&mut buf.as_slice()),
                    Err(SnapshotError::Corrupt(_))
                ),
                "{} repeated at {to} accepted",
                nodes[from].0
            );
        }
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

    /// Every node with its path, in walk order.
    fn listed(t: &DataTree) -> Vec<(Arc<str>, NodeRef<'_>)> {
        let mut out = Vec::new();
        t.walk(|p, n| out.push((Arc::from(p), n)));
        out
    }

    /// A snapshot listing exactly `nodes`, in their order.
    fn write_listed<'t>(t: &'t DataTree, nodes: &[(Arc<str>, NodeRef<'t>)], out: &mut Vec<u8>) {
        let for_each = |visit: &mut dyn FnMut(&str, NodeRef<'t>)| {
            for (p, n) in nodes {
                visit(p, *n);
            }
        };
        write_nodes_in_order(t, for_each, out).unwrap();
    }

    /// The order `walk` promises, the slow way: paths looked up one by one
    /// from the root, each node's children in name order.
    fn walk_from_root(t: &DataTree) -> Vec<Arc<str>> {
        let mut out = Vec::new();
        let mut stack: Vec<String> = vec!["/".to_owned()];
        while let Some(p) = stack.pop() {
            let node = t.node(&p).expect("listed child exists");
            for name in node.children().collect::<Vec<_>>().into_iter().rev() {
                stack.push(crate::path::join(&p, &name));
            }
            out.push(Arc::from(p));
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
        #[test]
        fn depth_first_order_is_a_walk_from_the_root(
            ops in proptest::collection::vec((0usize..64, any::<u8>(), any::<u8>()), 0..80)
        ) {
            // Names where byte order and walk order part ways ('-' and '.'
            // sort before '/'; "a" is a prefix of its siblings).
            let t = random_tree_named(&ops, &["a", "a-", "a-b", "a.b", "ab", "a0", "b", "z"]);
            prop_assert_eq!(t.paths_depth_first(), walk_from_root(&t));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
        #[test]
        fn random_trees_round_trip(
            ops in proptest::collection::vec((0usize..64, any::<u8>(), any::<u8>()), 0..60)
        ) {
            // Proves write then read gives back every node, session and index.
            let t = random_tree(&ops);
            let mut buf = Vec::new();
            write_snapshot(&t, &mut buf).unwrap();
            let back = read_snapshot(&mut buf.as_slice()).unwrap();
            prop_assert_eq!(back.digest(), t.digest());
            prop_assert_eq!(back.check_invariants(), Ok(()));
            prop_assert_eq!(back.paths_depth_first(), t.paths_depth_first());
            prop_assert_eq!(back.sessions().collect::<Vec<_>>(), t.sessions().collect::<Vec<_>>());
            prop_assert_eq!(back.containers().collect::<Vec<_>>(), t.containers().collect::<Vec<_>>());
            for s in [0x10, 0x11] {
                prop_assert_eq!(back.ephemerals(s).collect::<Vec<_>>(), t.ephemerals(s).collect::<Vec<_>>());
            }
        }
    }
}
