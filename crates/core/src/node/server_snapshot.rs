//! A snapshot of a whole server of several partitions: every partition's
//! tree at one cut of the one order (`crate::apply_order::Cut`), in one
//! file (docs/partitions.md, "Snapshots are of the whole server").
//!
//! One file settles what per-partition files could not: recovery finds
//! every partition at the same cut or none of them (a crash between two
//! partitions' files cannot split them), a partition with nothing new is
//! written again inside the newer file instead of replacing the file an
//! older cut needs, and the leader ships it whole through whichever group
//! asked for a snapshot.
//!
//! Layout (version 2), integers big-endian: magic `STOACUT2` (8), the
//! cut's zxid (8), the partition count (4), then per partition its raft
//! index (8) and term (8), a CRC32C of everything before it (4); then each
//! partition's tree as `stoa_tree::write_snapshot` writes it (which checks
//! itself and ends itself); then a trailer: each tree's length in bytes (8)
//! and a CRC32C of the trailer (4). The lengths come last so that a writer
//! streams every tree straight out: version 1 (`STOACUT1`, still read) gave
//! them in the head, and so held every serialized tree in memory first. A
//! server of one partition writes its tree alone, as before partitions
//! existed.

use std::io::{self, Read, Write};

use stoa_tree::DataTree;

/// What this version writes.
pub const MAGIC: &[u8; 8] = b"STOACUT2";
/// Version 1: the trees' lengths in the head.
const MAGIC_V1: &[u8; 8] = b"STOACUT1";
/// Partitions a file may list: far beyond any core count, and a bound on
/// what a damaged count makes a reader allocate.
const PARTITIONS_MAX: u32 = 4096;
const FIXED_HEAD_BYTES: usize = 8 + 8 + 4;
/// Version 1's: index, term, tree length.
const PART_HEAD_BYTES_V1: usize = 8 + 8 + 8;
const PART_HEAD_BYTES: usize = 8 + 8;
const CRC_BYTES: usize = 4;

/// One partition's tree in a server snapshot, with the raft index and
/// term of its group the tree covers.
#[derive(Clone)]
pub struct PartSnapshot {
    pub index: u64,
    pub term: u64,
    pub tree: DataTree,
}

/// Every partition of a server at one cut.
#[derive(Clone)]
pub struct ServerSnapshot {
    /// Every zxid at or below is applied on every partition, or void.
    pub zxid: i64,
    pub parts: Vec<PartSnapshot>,
}

/// What a server snapshot file says before its trees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSnapshotHead {
    pub zxid: i64,
    /// Each partition's (raft index, term).
    pub positions: Vec<(u64, u64)>,
    /// Version 1 gives each tree's length in its head; version 2 in the
    /// trailer.
    tree_lengths: Option<Vec<u64>>,
}

impl ServerSnapshotHead {
    /// Bytes the head of a file listing `partitions` partitions takes.
    pub fn bytes_for(partitions: usize) -> usize {
        FIXED_HEAD_BYTES + PART_HEAD_BYTES * partitions + CRC_BYTES
    }
}

/// Whether `data` starts as a server snapshot (rather than a tree's).
pub fn is_server_snapshot(data: &[u8]) -> bool {
    data.starts_with(MAGIC) || data.starts_with(MAGIC_V1)
}

/// Counts the bytes that go through it.
struct Counting<T> {
    inner: T,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
}

pub fn write_server_snapshot(snapshot: &ServerSnapshot, out: &mut impl Write) -> io::Result<()> {
    assert!(
        !snapshot.parts.is_empty() && snapshot.parts.len() as u32 <= PARTITIONS_MAX,
        "a server snapshot of {} partitions",
        snapshot.parts.len()
    );
    let mut head = Vec::with_capacity(ServerSnapshotHead::bytes_for(snapshot.parts.len()));
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&snapshot.zxid.to_be_bytes());
    head.extend_from_slice(&(snapshot.parts.len() as u32).to_be_bytes());
    for part in &snapshot.parts {
        head.extend_from_slice(&part.index.to_be_bytes());
        head.extend_from_slice(&part.term.to_be_bytes());
    }
    let crc = crc32c::crc32c(&head);
    head.extend_from_slice(&crc.to_be_bytes());
    out.write_all(&head)?;
    // Each tree streams straight out; its length goes in the trailer.
    let mut trailer = Vec::with_capacity(8 * snapshot.parts.len() + CRC_BYTES);
    for part in &snapshot.parts {
        let mut counted = Counting {
            inner: &mut *out,
            bytes: 0,
        };
        stoa_tree::write_snapshot(&part.tree, &mut counted)?;
        trailer.extend_from_slice(&counted.bytes.to_be_bytes());
    }
    let crc = crc32c::crc32c(&trailer);
    trailer.extend_from_slice(&crc.to_be_bytes());
    out.write_all(&trailer)
}

fn bad(what: String) -> String {
    format!("not a whole server snapshot: {what}")
}

/// Reads a file's head: the cut and each partition's position, checked.
pub fn read_server_snapshot_head(input: &mut impl Read) -> Result<ServerSnapshotHead, String> {
    let mut fixed = [0u8; FIXED_HEAD_BYTES];
    input
        .read_exact(&mut fixed)
        .map_err(|e| bad(format!("head: {e}")))?;
    let version_1 = &fixed[..8] == MAGIC_V1;
    if !version_1 && &fixed[..8] != MAGIC {
        return Err(bad("bad magic".into()));
    }
    let part_head_bytes = if version_1 {
        PART_HEAD_BYTES_V1
    } else {
        PART_HEAD_BYTES
    };
    let zxid = i64::from_be_bytes(fixed[8..16].try_into().expect("8 bytes"));
    let count = u32::from_be_bytes(fixed[16..20].try_into().expect("4 bytes"));
    if count == 0 || count > PARTITIONS_MAX {
        return Err(bad(format!("{count} partitions")));
    }
    let mut rest = vec![0u8; part_head_bytes * count as usize + CRC_BYTES];
    input
        .read_exact(&mut rest)
        .map_err(|e| bad(format!("head: {e}")))?;
    let (parts, crc) = rest.split_at(rest.len() - CRC_BYTES);
    let mut hasher_input = fixed.to_vec();
    hasher_input.extend_from_slice(parts);
    if crc32c::crc32c(&hasher_input).to_be_bytes() != crc {
        return Err(bad("the head's checksum does not match".into()));
    }
    let field = |at: usize| u64::from_be_bytes(parts[at..at + 8].try_into().expect("8 bytes"));
    let mut positions = Vec::with_capacity(count as usize);
    let mut tree_lengths = Vec::with_capacity(count as usize);
    for part in 0..count as usize {
        let at = part * part_head_bytes;
        positions.push((field(at), field(at + 8)));
        if version_1 {
            tree_lengths.push(field(at + 16));
        }
    }
    Ok(ServerSnapshotHead {
        zxid,
        positions,
        tree_lengths: version_1.then_some(tree_lengths),
    })
}

pub fn read_server_snapshot(input: &mut impl Read) -> Result<ServerSnapshot, String> {
    let head = read_server_snapshot_head(input)?;
    let mut parts = Vec::with_capacity(head.positions.len());
    let mut lengths = Vec::with_capacity(head.positions.len());
    for (partition, &(index, term)) in head.positions.iter().enumerate() {
        let tree_error = |e| bad(format!("partition {partition}'s tree: {e}"));
        let tree = match &head.tree_lengths {
            // Bounded by the length the head gives, so one tree's damage
            // cannot read into the next.
            Some(given) => {
                let mut limited = input.by_ref().take(given[partition]);
                let tree = stoa_tree::read_snapshot(&mut limited).map_err(tree_error)?;
                if limited.limit() != 0 {
                    return Err(bad(format!(
                        "partition {partition}'s tree ends {} bytes early",
                        limited.limit()
                    )));
                }
                tree
            }
            // A tree ends itself (its END chunk); the trailer then says
            // how long each was.
            None => {
                let mut counted = Counting {
                    inner: input.by_ref(),
                    bytes: 0,
                };
                let tree = stoa_tree::read_embedded_snapshot(&mut counted).map_err(tree_error)?;
                lengths.push(counted.bytes);
                tree
            }
        };
        parts.push(PartSnapshot { index, term, tree });
    }
    if head.tree_lengths.is_none() {
        let mut trailer = vec![0u8; 8 * parts.len() + CRC_BYTES];
        input
            .read_exact(&mut trailer)
            .map_err(|e| bad(format!("trailer: {e}")))?;
        let (given, crc) = trailer.split_at(trailer.len() - CRC_BYTES);
        if crc32c::crc32c(given).to_be_bytes() != crc {
            return Err(bad("the trailer's checksum does not match".into()));
        }
        let given = given
            .chunks(8)
            .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")));
        if !given.eq(lengths.iter().copied()) {
            return Err(bad("the trees' lengths differ from the trailer's".into()));
        }
    }
    let mut trailing = [0u8; 1];
    if input.read(&mut trailing).map_err(|e| bad(e.to_string()))? != 0 {
        return Err(bad("bytes after the last tree".into()));
    }
    Ok(ServerSnapshot {
        zxid: head.zxid,
        parts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use stoa_tree::{CreateTxn, Txn, TxnHeader, TxnOp};

    fn tree_with(paths: &[&str], zxid_from: i64) -> DataTree {
        let mut tree = DataTree::new();
        for (i, path) in paths.iter().enumerate() {
            let txn = Txn {
                header: TxnHeader {
                    session_id: 0,
                    cxid: 0,
                    zxid: zxid_from + i as i64,
                    time_ms: 1,
                },
                op: TxnOp::Create(CreateTxn {
                    path: (*path).to_string(),
                    data: Some(path.as_bytes().to_vec()),
                    acl: Vec::new(),
                    ephemeral_owner: 0,
                    parent_cversion: i as i32 + 1,
                }),
            };
            tree.apply(&txn);
        }
        tree
    }

    fn sample() -> ServerSnapshot {
        ServerSnapshot {
            zxid: 0x5_0000_0007,
            parts: vec![
                PartSnapshot {
                    index: 40,
                    term: 5,
                    tree: tree_with(&["/a", "/b"], 0x5_0000_0001),
                },
                PartSnapshot {
                    index: 3,
                    term: 2,
                    tree: tree_with(&["/c"], 0x5_0000_0003),
                },
            ],
        }
    }

    fn bytes_of(snapshot: &ServerSnapshot) -> Vec<u8> {
        let mut out = Vec::new();
        write_server_snapshot(snapshot, &mut out).unwrap();
        out
    }

    #[test]
    fn a_server_snapshot_reads_back_as_written() {
        let snapshot = sample();
        let data = bytes_of(&snapshot);
        assert!(is_server_snapshot(&data));
        let head = read_server_snapshot_head(&mut &data[..]).unwrap();
        assert_eq!(head.zxid, snapshot.zxid);
        assert_eq!(head.positions, vec![(40, 5), (3, 2)]);
        let back = read_server_snapshot(&mut &data[..]).unwrap();
        assert_eq!(back.zxid, snapshot.zxid);
        for (a, b) in back.parts.iter().zip(&snapshot.parts) {
            assert_eq!((a.index, a.term), (b.index, b.term));
            assert_eq!(a.tree.digest(), b.tree.digest());
            assert_eq!(a.tree.last_zxid(), b.tree.last_zxid());
        }
        let mut tree_only = Vec::new();
        stoa_tree::write_snapshot(&snapshot.parts[0].tree, &mut tree_only).unwrap();
        assert!(
            !is_server_snapshot(&tree_only),
            "a tree's file is told apart"
        );
    }

    /// Version 1, as servers wrote it before the trailer: the trees'
    /// lengths in the head.
    fn version_1_bytes_of(snapshot: &ServerSnapshot) -> Vec<u8> {
        let trees: Vec<Vec<u8>> = (snapshot.parts.iter())
            .map(|part| {
                let mut bytes = Vec::new();
                stoa_tree::write_snapshot(&part.tree, &mut bytes).unwrap();
                bytes
            })
            .collect();
        let mut out = MAGIC_V1.to_vec();
        out.extend_from_slice(&snapshot.zxid.to_be_bytes());
        out.extend_from_slice(&(snapshot.parts.len() as u32).to_be_bytes());
        for (part, tree) in snapshot.parts.iter().zip(&trees) {
            out.extend_from_slice(&part.index.to_be_bytes());
            out.extend_from_slice(&part.term.to_be_bytes());
            out.extend_from_slice(&(tree.len() as u64).to_be_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        trees.iter().for_each(|tree| out.extend_from_slice(tree));
        out
    }

    #[test]
    fn version_1_files_still_read() {
        let snapshot = sample();
        let data = version_1_bytes_of(&snapshot);
        assert!(is_server_snapshot(&data));
        let back = read_server_snapshot(&mut &data[..]).unwrap();
        assert_eq!(back.zxid, snapshot.zxid);
        for (a, b) in back.parts.iter().zip(&snapshot.parts) {
            assert_eq!((a.index, a.term), (b.index, b.term));
            assert_eq!(a.tree.digest(), b.tree.digest());
        }
        for len in 0..data.len() {
            assert!(
                read_server_snapshot(&mut &data[..len]).is_err(),
                "cut at {len}"
            );
        }
    }

    #[test]
    fn damage_anywhere_is_refused() {
        let data = bytes_of(&sample());
        // Cut short anywhere, or one byte appended: refused, never misread.
        for len in 0..data.len() {
            assert!(
                read_server_snapshot(&mut &data[..len]).is_err(),
                "cut at {len}"
            );
        }
        let mut longer = data.clone();
        longer.push(0);
        assert!(read_server_snapshot(&mut &longer[..]).is_err());
        // Any one byte of the head or the trailer changed: refused.
        let trailer = data.len() - (8 * 2 + CRC_BYTES)..data.len();
        for at in (0..ServerSnapshotHead::bytes_for(2)).chain(trailer) {
            let mut damaged = data.clone();
            damaged[at] ^= 0x40;
            assert!(
                read_server_snapshot(&mut &damaged[..]).is_err(),
                "byte {at}"
            );
        }
    }

    proptest! {
        /// Random bytes, or a valid file with random bytes overwritten, never
        /// panic the reader.
        #[test]
        fn the_reader_never_panics(noise in proptest::collection::vec(any::<u8>(), 0..512),
                                   at in 0usize..2048, with_magic in any::<bool>()) {
            let mut data = if with_magic { bytes_of(&sample()) } else { Vec::new() };
            let at = at.min(data.len());
            data.splice(at..(at + noise.len()).min(data.len()), noise.iter().copied());
            let _ = read_server_snapshot(&mut &data[..]);
            let _ = read_server_snapshot_head(&mut &data[..]);
        }
    }
}
