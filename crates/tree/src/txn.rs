//! The idempotent transaction a leader prepares and every replica applies.
//! It carries the resulting state (new versions, the sequential name, the
//! owner), so applying never depends on who asked.

use stoa_proto::codes::ErrorCode;
use stoa_proto::records::Acl;

use crate::apply::TreeEventKind;
use crate::codec::{self, DecodeError, Reader};

/// Version byte leading every encoded txn of a server of one partition.
const TXN_FORMAT_VERSION: u8 = 1;
/// Version byte of a txn that carries its chain links (a server of several
/// partitions): the same header, the links, then the same op.
const TXN_CHAINED_VERSION: u8 = 2;

/// A txn's link on one partition it touches: the partition, and the zxid
/// of that partition's item before this txn, or [`UNKNOWN_LINK`]. Each
/// partition's items (its own txns and the parts it holds of txns over
/// several partitions) form a chain, so that a partition could apply its
/// items without waiting for the others' (docs/partitions.md, "Owned
/// partitions: the plan").
pub type ChainLink = (u32, i64);

/// A link the leader does not know: the first item of a partition after
/// the leader took over.
pub const UNKNOWN_LINK: i64 = -1;

/// Bytes of one encoded chain link.
const LINK_BYTES: usize = 4 + 8;

/// Who and when: ZooKeeper's `TxnHeader` minus the type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxnHeader {
    pub session_id: i64,
    pub cxid: i32,
    pub zxid: i64,
    pub time_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub header: TxnHeader,
    pub op: TxnOp,
}

/// A node creation, fully decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTxn {
    /// Final path (sequential suffix included).
    pub path: String,
    /// None: null data (ZooKeeper keeps it apart from empty).
    pub data: Option<Vec<u8>>,
    /// Fixed-up ACL (`auth` expanded, duplicates removed).
    pub acl: Vec<Acl>,
    /// Raw owner: 0, a session id, the container marker or a TTL encoding.
    pub ephemeral_owner: i64,
    /// The parent's persisted cversion after this create.
    pub parent_cversion: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOp {
    CreateSession {
        timeout_ms: i32,
    },
    /// Deletes `paths` (the session's ephemerals when prepared, sorted),
    /// then any other ephemeral of the session, then forgets the session.
    CloseSession {
        paths: Vec<String>,
    },
    Create(CreateTxn),
    Delete {
        path: String,
    },
    DeleteContainer {
        path: String,
    },
    /// `version` is the node's new version.
    SetData {
        path: String,
        /// None: null data.
        data: Option<Vec<u8>>,
        version: i32,
    },
    /// `aversion` is the node's new ACL version.
    SetAcl {
        path: String,
        acl: Vec<Acl>,
        aversion: i32,
    },
    Check {
        path: String,
    },
    /// Ops of a multi; never nested. If any op is `Error` the whole multi
    /// failed and applying it changes nothing.
    Multi(Vec<TxnOp>),
    /// A request that failed on the leader: it still takes a zxid, as in
    /// ZooKeeper, but changes nothing.
    Error(ErrorCode),
    /// A new leader's first transaction with several partitions: the
    /// inclusive ranges of zxids below it that will never exist
    /// (`stoa_core::apply_order`). Changes nothing in the tree.
    Seal {
        voids: Vec<(i64, i64)>,
    },
    /// A change as a leader running watch extensions decided it: `op`, then
    /// the extensions' writes (`extra`, the ops of a multi), in one
    /// transaction; watchers hear of `events` instead of the changes the
    /// tree reports. The reply is `op`'s.
    Watched {
        op: Box<TxnOp>,
        extra: Vec<TxnOp>,
        events: Vec<(TreeEventKind, String)>,
    },
    /// One transaction over several partitions (docs/partitions.md,
    /// "Routing by placement"): each part is the op its partition's tree
    /// applies, in the order listed, to distinct partitions. Parts are
    /// never nested, seals or watched ops. The reply is the first part's
    /// (the partition of the node the client named), except for a client's
    /// multi over several partitions: then every part is a multi of its
    /// partition's ops, and `order` gives the partition of each of the
    /// client's ops in its order, so the results are put back in it; an
    /// entry with `SILENT_PART` set is an op the client did not send (a
    /// group root's link), whose result is dropped.
    Parts {
        parts: Vec<(u32, TxnOp)>,
        /// Empty unless the parts are a client's multi.
        order: Vec<u32>,
    },
    /// Replaces the partition's tree by `tree` (`write_snapshot`'s format)
    /// at this transaction's zxid: the AdminServer's `restore`
    /// (docs/operations.md). The configuration node stays the ensemble's
    /// own. `origin` is the member whose AdminServer took the request and
    /// `token` its number there (both 0 on the parts after the first), so
    /// that member answers the request once it applied the restore.
    Restore {
        origin: u64,
        token: u64,
        tree: Vec<u8>,
    },
    /// Moves whole groups between partitions (the load balancer's or an
    /// operator's move, docs/partitions.md): the engine takes each group's
    /// subtree out of `from`'s tree and puts it into `to`'s, and the tree
    /// of partition 0, through whose group the transaction goes, sets
    /// `/zookeeper/partitions` to `data` at `version` (the reply is that
    /// setData's). Every member moves the same nodes at the same zxid.
    MoveGroups {
        moves: Vec<GroupMove>,
        data: Vec<u8>,
        version: i32,
    },
}

/// One group's move: its root and the partitions it leaves and joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMove {
    pub root: String,
    pub from: u32,
    pub to: u32,
}

impl TxnOp {
    /// The op a client's reply and the session bookkeeping go by: `op` of
    /// a `Watched`, else this one.
    pub fn decided(&self) -> &TxnOp {
        match self {
            TxnOp::Watched { op, .. } => op,
            op => op,
        }
    }
}

mod tag {
    pub const CREATE_SESSION: u8 = 1;
    pub const CLOSE_SESSION: u8 = 2;
    pub const CREATE: u8 = 3;
    pub const DELETE: u8 = 4;
    pub const DELETE_CONTAINER: u8 = 5;
    pub const SET_DATA: u8 = 6;
    pub const SET_ACL: u8 = 7;
    pub const CHECK: u8 = 8;
    pub const MULTI: u8 = 9;
    pub const ERROR: u8 = 10;
    pub const SEAL: u8 = 11;
    pub const WATCHED: u8 = 12;
    pub const PARTS: u8 = 13;
    pub const RESTORE: u8 = 14;
    pub const MOVE_GROUPS: u8 = 15;
}

fn event_kind_code(kind: TreeEventKind) -> u8 {
    match kind {
        TreeEventKind::NodeCreated => 1,
        TreeEventKind::NodeDeleted => 2,
        TreeEventKind::NodeDataChanged => 3,
        TreeEventKind::NodeChildrenChanged => 4,
    }
}

fn event_kind_of(code: u8) -> Option<TreeEventKind> {
    Some(match code {
        1 => TreeEventKind::NodeCreated,
        2 => TreeEventKind::NodeDeleted,
        3 => TreeEventKind::NodeDataChanged,
        4 => TreeEventKind::NodeChildrenChanged,
        _ => return None,
    })
}

/// Whether every part is a multi holding as many ops as `order` gives
/// its partition.
fn parts_match_order(parts: &[(u32, TxnOp)], order: &[u32]) -> bool {
    let partition_of = |entry: &u32| entry & !SILENT_PART;
    parts.iter().all(|(partition, op)| match op.decided() {
        TxnOp::Multi(ops) => {
            ops.len()
                == order
                    .iter()
                    .filter(|e| partition_of(e) == *partition)
                    .count()
        }
        _ => false,
    }) && order
        .iter()
        .all(|e| parts.iter().any(|(q, _)| *q == partition_of(e)))
}

/// In a client's multi's `order` (`TxnOp::Parts`), this bit on a
/// partition marks an op of that partition's part the client did not send:
/// the link of a group root the multi creates or deletes. Its result is
/// not the client's. (Partitions number far below it.)
pub const SILENT_PART: u32 = 1 << 31;

/// Smallest encoding of a path or other length-prefixed value.
const LEN_PREFIX_BYTES: usize = 4;
/// Smallest encoding of an op (its tag and a 4-byte field).
const OP_MIN_BYTES: usize = 5;

impl Txn {
    /// Appends the encoding described in docs/format-snapshot.md (§ Txn).
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_header(TXN_FORMAT_VERSION, out);
        self.op.encode(out);
    }

    /// The version byte and the header after it.
    fn encode_header(&self, version: u8, out: &mut Vec<u8>) {
        codec::put_u8(out, version);
        codec::put_i64(out, self.header.session_id);
        codec::put_i32(out, self.header.cxid);
        codec::put_i64(out, self.header.zxid);
        codec::put_i64(out, self.header.time_ms);
    }

    /// Exactly the bytes `encode` appends, so a buffer can be sized once
    /// (growing it op by op was a visible share of the write path).
    pub fn encoded_len(&self) -> usize {
        TXN_HEADER_BYTES + self.op.encoded_len()
    }

    /// Appends the encoding with its chain links (format version 2).
    pub fn encode_chained(&self, links: &[ChainLink], out: &mut Vec<u8>) {
        self.encode_header(TXN_CHAINED_VERSION, out);
        codec::put_u32(out, links.len() as u32);
        for &(partition, previous) in links {
            codec::put_u32(out, partition);
            codec::put_i64(out, previous);
        }
        self.op.encode(out);
    }

    /// Exactly the bytes `encode_chained` appends.
    pub fn encoded_len_chained(&self, links: usize) -> usize {
        self.encoded_len() + LEN_PREFIX_BYTES + LINK_BYTES * links
    }

    /// The zxid in an encoded txn's header, without decoding the rest.
    pub fn zxid_of(bytes: &[u8]) -> Option<i64> {
        if !matches!(
            bytes.first(),
            Some(&TXN_FORMAT_VERSION | &TXN_CHAINED_VERSION)
        ) {
            return None;
        }
        let field = bytes.get(ZXID_OFFSET..ZXID_OFFSET + 8)?;
        Some(i64::from_be_bytes(field.try_into().ok()?))
    }

    /// The header of an encoded txn, read without its op; None if it is
    /// not a txn's encoding.
    pub fn header_of(bytes: &[u8]) -> Option<TxnHeader> {
        read_header(&mut Reader::new(bytes)).ok()
    }

    /// The chain links of an encoded txn, read in place: none for one
    /// without (format version 1); None if it is not a txn's encoding.
    /// Read at fixed offsets: every member does it for every entry.
    pub fn chain_of(bytes: &[u8]) -> Option<ChainLinks<'_>> {
        let (links, op_at) = layout(bytes)?;
        bytes.get(op_at)?;
        Some(ChainLinks {
            bytes: &bytes[links],
        })
    }

    /// The void ranges of an encoded seal; None for any other txn (read
    /// from the op's tag first, so other txns are not decoded).
    pub fn seal_of(bytes: &[u8]) -> Option<Vec<(i64, i64)>> {
        let (_, op_at) = layout(bytes)?;
        if bytes.get(op_at) != Some(&tag::SEAL) {
            return None;
        }
        match Txn::decode(bytes).ok()?.op {
            TxnOp::Seal { voids } => Some(voids),
            _ => None,
        }
    }

    /// Decodes exactly one txn, of either format version (a chained one's
    /// links are skipped: `chain_of` reads them); never panics, allocates
    /// at most in proportion to `bytes.len()`.
    pub fn decode(bytes: &[u8]) -> Result<Txn, DecodeError> {
        let mut r = Reader::new(bytes);
        let header = read_header(&mut r)?;
        read_links(&mut r, bytes[0])?;
        let op = TxnOp::decode(&mut r, true)?;
        r.finish()?;
        Ok(Txn { header, op })
    }
}

/// Where an encoded txn's chain links lie and where its op starts, read
/// at fixed offsets from its version byte and link count.
fn layout(bytes: &[u8]) -> Option<(std::ops::Range<usize>, usize)> {
    match *bytes.first()? {
        TXN_FORMAT_VERSION => Some((TXN_HEADER_BYTES..TXN_HEADER_BYTES, TXN_HEADER_BYTES)),
        TXN_CHAINED_VERSION => {
            let count = bytes
                .get(TXN_HEADER_BYTES..)?
                .first_chunk::<LEN_PREFIX_BYTES>()?;
            let start = TXN_HEADER_BYTES + LEN_PREFIX_BYTES;
            let span = LINK_BYTES.checked_mul(u32::from_be_bytes(*count) as usize)?;
            let end = start.checked_add(span)?;
            Some((start..end, end))
        }
        _ => None,
    }
}

/// The version byte and the header after it.
fn read_header(r: &mut Reader<'_>) -> Result<TxnHeader, DecodeError> {
    if !matches!(r.u8()?, TXN_FORMAT_VERSION | TXN_CHAINED_VERSION) {
        return Err(DecodeError::BadValue("txn format version"));
    }
    Ok(TxnHeader {
        session_id: r.i64()?,
        cxid: r.i32()?,
        zxid: r.i64()?,
        time_ms: r.i64()?,
    })
}

/// The chain links after the header of a txn of format `version`,
/// checked and left in place.
fn read_links<'a>(r: &mut Reader<'a>, version: u8) -> Result<ChainLinks<'a>, DecodeError> {
    if version != TXN_CHAINED_VERSION {
        return Ok(ChainLinks { bytes: &[] });
    }
    let count = r.u32()? as usize;
    if count > r.remaining() / LINK_BYTES {
        return Err(DecodeError::TooLong);
    }
    let links = ChainLinks {
        bytes: r.take(count * LINK_BYTES)?,
    };
    if links.clone().any(|(_, previous)| previous < UNKNOWN_LINK) {
        return Err(DecodeError::BadValue("chain link"));
    }
    Ok(links)
}

/// A txn's chain links, as `Txn::chain_of` finds them in its encoding.
#[derive(Debug, Clone)]
pub struct ChainLinks<'a> {
    bytes: &'a [u8],
}

impl Iterator for ChainLinks<'_> {
    type Item = ChainLink;

    fn next(&mut self) -> Option<ChainLink> {
        let (link, rest) = self.bytes.split_first_chunk::<LINK_BYTES>()?;
        self.bytes = rest;
        let (partition, previous) = link.split_at(4);
        Some((
            u32::from_be_bytes(partition.try_into().expect("4 bytes")),
            i64::from_be_bytes(previous.try_into().expect("8 bytes")),
        ))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.bytes.len() / LINK_BYTES;
        (n, Some(n))
    }
}

impl ExactSizeIterator for ChainLinks<'_> {}

/// The version byte and the header's fields.
const TXN_HEADER_BYTES: usize = 1 + 8 + 4 + 8 + 8;
/// Where the header's zxid starts: after the version, session id and cxid.
const ZXID_OFFSET: usize = 1 + 8 + 4;

fn str_len(s: &str) -> usize {
    LEN_PREFIX_BYTES + s.len()
}

/// Bytes after the length prefix (none for null data).
fn data_len(data: &Option<Vec<u8>>) -> usize {
    data.as_ref().map_or(0, Vec::len)
}

fn acl_len(acl: &[Acl]) -> usize {
    LEN_PREFIX_BYTES
        + acl
            .iter()
            .map(|a| 4 + str_len(&a.id.scheme) + str_len(&a.id.id))
            .sum::<usize>()
}

impl TxnOp {
    fn encoded_len(&self) -> usize {
        // Each arm mirrors the same arm of `encode`; the tag byte is added once.
        1 + match self {
            TxnOp::CreateSession { .. } => 4,
            TxnOp::CloseSession { paths } => {
                LEN_PREFIX_BYTES + paths.iter().map(|p| str_len(p)).sum::<usize>()
            }
            TxnOp::Create(c) => {
                str_len(&c.path) + LEN_PREFIX_BYTES + data_len(&c.data) + acl_len(&c.acl) + 8 + 4
            }
            TxnOp::Delete { path } | TxnOp::DeleteContainer { path } | TxnOp::Check { path } => {
                str_len(path)
            }
            TxnOp::SetData { path, data, .. } => {
                str_len(path) + LEN_PREFIX_BYTES + data_len(data) + 4
            }
            TxnOp::SetAcl { path, acl, .. } => str_len(path) + acl_len(acl) + 4,
            TxnOp::Multi(ops) => {
                LEN_PREFIX_BYTES + ops.iter().map(TxnOp::encoded_len).sum::<usize>()
            }
            TxnOp::Error(_) => 4,
            TxnOp::Seal { voids } => LEN_PREFIX_BYTES + 16 * voids.len(),
            TxnOp::Restore { tree, .. } => 16 + LEN_PREFIX_BYTES + tree.len(),
            TxnOp::MoveGroups { moves, data, .. } => {
                LEN_PREFIX_BYTES
                    + moves.iter().map(|m| str_len(&m.root) + 8).sum::<usize>()
                    + LEN_PREFIX_BYTES
                    + data.len()
                    + 4
            }
            TxnOp::Parts { parts, order } => {
                LEN_PREFIX_BYTES
                    + parts
                        .iter()
                        .map(|(_, op)| 4 + op.encoded_len())
                        .sum::<usize>()
                    + LEN_PREFIX_BYTES
                    + 4 * order.len()
            }
            TxnOp::Watched { op, extra, events } => {
                op.encoded_len()
                    + LEN_PREFIX_BYTES
                    + extra.iter().map(TxnOp::encoded_len).sum::<usize>()
                    + LEN_PREFIX_BYTES
                    + events
                        .iter()
                        .map(|(_, path)| 1 + str_len(path))
                        .sum::<usize>()
            }
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            TxnOp::CreateSession { timeout_ms } => {
                codec::put_u8(out, tag::CREATE_SESSION);
                codec::put_i32(out, *timeout_ms);
            }
            TxnOp::CloseSession { paths } => {
                codec::put_u8(out, tag::CLOSE_SESSION);
                codec::put_u32(out, paths.len() as u32);
                for p in paths {
                    codec::put_str(out, p);
                }
            }
            TxnOp::Create(c) => {
                codec::put_u8(out, tag::CREATE);
                codec::put_str(out, &c.path);
                codec::put_nullable_bytes(out, c.data.as_deref());
                codec::put_acl(out, &c.acl);
                codec::put_i64(out, c.ephemeral_owner);
                codec::put_i32(out, c.parent_cversion);
            }
            TxnOp::Delete { path } => {
                codec::put_u8(out, tag::DELETE);
                codec::put_str(out, path);
            }
            TxnOp::DeleteContainer { path } => {
                codec::put_u8(out, tag::DELETE_CONTAINER);
                codec::put_str(out, path);
            }
            TxnOp::SetData {
                path,
                data,
                version,
            } => {
                codec::put_u8(out, tag::SET_DATA);
                codec::put_str(out, path);
                codec::put_nullable_bytes(out, data.as_deref());
                codec::put_i32(out, *version);
            }
            TxnOp::SetAcl {
                path,
                acl,
                aversion,
            } => {
                codec::put_u8(out, tag::SET_ACL);
                codec::put_str(out, path);
                codec::put_acl(out, acl);
                codec::put_i32(out, *aversion);
            }
            TxnOp::Check { path } => {
                codec::put_u8(out, tag::CHECK);
                codec::put_str(out, path);
            }
            TxnOp::Multi(ops) => {
                assert!(
                    ops.iter().all(|o| !matches!(o, TxnOp::Multi(_))),
                    "nested multi"
                );
                codec::put_u8(out, tag::MULTI);
                codec::put_u32(out, ops.len() as u32);
                for op in ops {
                    op.encode(out);
                }
            }
            TxnOp::Error(code) => {
                codec::put_u8(out, tag::ERROR);
                codec::put_i32(out, code.as_i32());
            }
            TxnOp::Restore {
                origin,
                token,
                tree,
            } => {
                codec::put_u8(out, tag::RESTORE);
                codec::put_u64(out, *origin);
                codec::put_u64(out, *token);
                codec::put_bytes(out, tree);
            }
            TxnOp::MoveGroups {
                moves,
                data,
                version,
            } => {
                codec::put_u8(out, tag::MOVE_GROUPS);
                codec::put_u32(out, moves.len() as u32);
                for m in moves {
                    codec::put_str(out, &m.root);
                    codec::put_u32(out, m.from);
                    codec::put_u32(out, m.to);
                }
                codec::put_bytes(out, data);
                codec::put_i32(out, *version);
            }
            TxnOp::Seal { voids } => {
                codec::put_u8(out, tag::SEAL);
                codec::put_u32(out, voids.len() as u32);
                for &(lo, hi) in voids {
                    codec::put_i64(out, lo);
                    codec::put_i64(out, hi);
                }
            }
            TxnOp::Watched { op, extra, events } => {
                assert!(
                    !matches!(
                        **op,
                        TxnOp::Watched { .. } | TxnOp::Seal { .. } | TxnOp::Parts { .. }
                    ),
                    "a watched seal, watched change or watched transaction of parts"
                );
                codec::put_u8(out, tag::WATCHED);
                op.encode(out);
                codec::put_u32(out, extra.len() as u32);
                for op in extra {
                    assert!(!matches!(op, TxnOp::Multi(_)), "nested multi");
                    op.encode(out);
                }
                codec::put_u32(out, events.len() as u32);
                for (kind, path) in events {
                    codec::put_u8(out, event_kind_code(*kind));
                    codec::put_str(out, path);
                }
            }
            TxnOp::Parts { parts, order } => {
                codec::put_u8(out, tag::PARTS);
                codec::put_u32(out, parts.len() as u32);
                for (partition, op) in parts {
                    codec::put_u32(out, *partition);
                    op.encode(out);
                }
                codec::put_u32(out, order.len() as u32);
                for partition in order {
                    codec::put_u32(out, *partition);
                }
            }
        }
    }

    fn decode(r: &mut Reader<'_>, top_level: bool) -> Result<TxnOp, DecodeError> {
        Ok(match r.u8()? {
            tag::CREATE_SESSION => TxnOp::CreateSession {
                timeout_ms: r.i32()?,
            },
            tag::CLOSE_SESSION => {
                let n = r.count(LEN_PREFIX_BYTES)?;
                let mut paths = Vec::with_capacity(n);
                for _ in 0..n {
                    paths.push(r.string()?);
                }
                TxnOp::CloseSession { paths }
            }
            tag::CREATE => TxnOp::Create(CreateTxn {
                path: r.string()?,
                data: r.nullable_bytes()?.map(<[u8]>::to_vec),
                acl: r.acl()?,
                ephemeral_owner: r.i64()?,
                parent_cversion: r.i32()?,
            }),
            tag::DELETE => TxnOp::Delete { path: r.string()? },
            tag::DELETE_CONTAINER => TxnOp::DeleteContainer { path: r.string()? },
            tag::SET_DATA => TxnOp::SetData {
                path: r.string()?,
                data: r.nullable_bytes()?.map(<[u8]>::to_vec),
                version: r.i32()?,
            },
            tag::SET_ACL => TxnOp::SetAcl {
                path: r.string()?,
                acl: r.acl()?,
                aversion: r.i32()?,
            },
            tag::CHECK => TxnOp::Check { path: r.string()? },
            tag::MULTI if top_level => {
                let n = r.count(OP_MIN_BYTES)?;
                let mut ops = Vec::with_capacity(n);
                for _ in 0..n {
                    ops.push(TxnOp::decode(r, false)?);
                }
                TxnOp::Multi(ops)
            }
            tag::MULTI => return Err(DecodeError::BadValue("nested multi")),
            tag::SEAL if top_level => {
                let n = r.count(16)?;
                let mut voids = Vec::with_capacity(n);
                for _ in 0..n {
                    let (lo, hi) = (r.i64()?, r.i64()?);
                    if lo > hi {
                        return Err(DecodeError::BadValue("seal range"));
                    }
                    voids.push((lo, hi));
                }
                TxnOp::Seal { voids }
            }
            tag::SEAL => return Err(DecodeError::BadValue("seal in a multi")),
            tag::RESTORE if top_level => TxnOp::Restore {
                origin: r.u64()?,
                token: r.u64()?,
                tree: r.bytes()?.to_vec(),
            },
            tag::RESTORE => return Err(DecodeError::BadValue("restore in a multi")),
            tag::MOVE_GROUPS if top_level => {
                let n = r.count(LEN_PREFIX_BYTES + 8)?;
                let mut moves = Vec::with_capacity(n);
                for _ in 0..n {
                    moves.push(GroupMove {
                        root: r.string()?,
                        from: r.u32()?,
                        to: r.u32()?,
                    });
                }
                TxnOp::MoveGroups {
                    moves,
                    data: r.bytes()?.to_vec(),
                    version: r.i32()?,
                }
            }
            tag::MOVE_GROUPS => return Err(DecodeError::BadValue("group move in a multi")),
            tag::WATCHED if top_level => {
                let op = TxnOp::decode(r, true)?;
                if matches!(
                    op,
                    TxnOp::Watched { .. }
                        | TxnOp::Seal { .. }
                        | TxnOp::Restore { .. }
                        | TxnOp::MoveGroups { .. }
                        | TxnOp::Parts { .. }
                ) {
                    return Err(DecodeError::BadValue("watched op"));
                }
                let n = r.count(OP_MIN_BYTES)?;
                let mut extra = Vec::with_capacity(n);
                for _ in 0..n {
                    extra.push(TxnOp::decode(r, false)?);
                }
                let n = r.count(1 + LEN_PREFIX_BYTES)?;
                let mut events = Vec::with_capacity(n);
                for _ in 0..n {
                    let kind = event_kind_of(r.u8()?).ok_or(DecodeError::BadValue("event kind"))?;
                    events.push((kind, r.string()?));
                }
                TxnOp::Watched {
                    op: Box::new(op),
                    extra,
                    events,
                }
            }
            tag::WATCHED => return Err(DecodeError::BadValue("watched op in a multi")),
            tag::PARTS if top_level => {
                let n = r.count(4 + OP_MIN_BYTES)?;
                let mut parts: Vec<(u32, TxnOp)> = Vec::with_capacity(n);
                for _ in 0..n {
                    let partition = r.u32()?;
                    if parts.iter().any(|(p, _)| *p == partition) {
                        return Err(DecodeError::BadValue("a partition's part twice"));
                    }
                    // A part may be watched (a leader's watch extensions
                    // decided its events); the op it watches is checked
                    // as a part's would be.
                    let op = TxnOp::decode(r, true)?;
                    if matches!(
                        op.decided(),
                        TxnOp::Parts { .. } | TxnOp::Seal { .. } | TxnOp::Watched { .. }
                    ) {
                        return Err(DecodeError::BadValue("part op"));
                    }
                    parts.push((partition, op));
                }
                let n = r.count(4)?;
                let mut order = Vec::with_capacity(n);
                for _ in 0..n {
                    order.push(r.u32()?);
                }
                if !order.is_empty() && !parts_match_order(&parts, &order) {
                    return Err(DecodeError::BadValue("a multi's parts and order"));
                }
                TxnOp::Parts { parts, order }
            }
            tag::PARTS => return Err(DecodeError::BadValue("parts in a multi")),
            tag::ERROR => {
                let code = r.i32()?;
                TxnOp::Error(ErrorCode::from_i32(code).ok_or(DecodeError::BadValue("error code"))?)
            }
            _ => return Err(DecodeError::BadValue("txn op tag")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use stoa_proto::records::Id;

    fn sample() -> Vec<TxnOp> {
        let acl = vec![Acl {
            perms: 31,
            id: Id {
                scheme: "world".into(),
                id: "anyone".into(),
            },
        }];
        vec![
            TxnOp::CreateSession { timeout_ms: 30_000 },
            TxnOp::CloseSession {
                paths: vec!["/a".into(), "/b".into()],
            },
            TxnOp::Create(CreateTxn {
                path: "/a".into(),
                data: Some(b"x".to_vec()),
                acl: acl.clone(),
                ephemeral_owner: i64::MIN,
                parent_cversion: 3,
            }),
            TxnOp::Create(CreateTxn {
                path: "/null".into(),
                data: None,
                acl: acl.clone(),
                ephemeral_owner: 0,
                parent_cversion: 4,
            }),
            TxnOp::Delete { path: "/a".into() },
            TxnOp::DeleteContainer { path: "/c".into() },
            TxnOp::SetData {
                path: "/a".into(),
                data: Some(vec![0; 3]),
                version: 2,
            },
            TxnOp::SetData {
                path: "/a".into(),
                data: None,
                version: 3,
            },
            TxnOp::SetAcl {
                path: "/a".into(),
                acl,
                aversion: 1,
            },
            TxnOp::Check { path: "/a".into() },
            TxnOp::Error(ErrorCode::NoNode),
            TxnOp::Seal { voids: vec![] },
            TxnOp::Seal {
                voids: vec![(1, 0x1_0000_0000), (0x1_0000_0003, 0x1_0000_0003)],
            },
            TxnOp::Restore {
                origin: 2,
                token: 7,
                tree: b"a snapshot".to_vec(),
            },
            TxnOp::MoveGroups {
                moves: vec![
                    GroupMove {
                        root: "/app".into(),
                        from: 1,
                        to: 2,
                    },
                    GroupMove {
                        root: "/b".into(),
                        from: 0,
                        to: 3,
                    },
                ],
                data: b"partitions=4".to_vec(),
                version: 3,
            },
            TxnOp::Watched {
                op: Box::new(TxnOp::SetData {
                    path: "/app/x".into(),
                    data: Some(b"1".to_vec()),
                    version: 4,
                }),
                extra: vec![
                    TxnOp::SetData {
                        path: "/stats".into(),
                        data: None,
                        version: 1,
                    },
                    TxnOp::Delete {
                        path: "/old".into(),
                    },
                ],
                events: vec![
                    (TreeEventKind::NodeDataChanged, "/app".into()),
                    (TreeEventKind::NodeDataChanged, "/stats".into()),
                ],
            },
            TxnOp::Watched {
                op: Box::new(TxnOp::Multi(vec![TxnOp::Delete { path: "/x".into() }])),
                extra: vec![],
                events: vec![],
            },
            TxnOp::Multi(vec![
                TxnOp::Delete { path: "/x".into() },
                TxnOp::Error(ErrorCode::Ok),
            ]),
            TxnOp::Parts {
                parts: vec![
                    (
                        1,
                        TxnOp::Delete {
                            path: "/app".into(),
                        },
                    ),
                    (
                        0,
                        TxnOp::Delete {
                            path: "/app".into(),
                        },
                    ),
                ],
                order: vec![],
            },
            TxnOp::Parts {
                parts: vec![
                    (2, TxnOp::Multi(vec![TxnOp::Check { path: "/q".into() }])),
                    (
                        0,
                        TxnOp::Multi(vec![
                            TxnOp::Delete { path: "/a".into() },
                            TxnOp::Delete { path: "/b".into() },
                        ]),
                    ),
                ],
                order: vec![0, 2, 0],
            },
            // A group root's create in a multi: its link (silent) on 0.
            TxnOp::Parts {
                parts: vec![
                    (1, TxnOp::Multi(vec![TxnOp::Delete { path: "/g".into() }])),
                    (0, TxnOp::Multi(vec![TxnOp::Delete { path: "/g".into() }])),
                ],
                order: vec![SILENT_PART, 1],
            },
            // Parts a watch extension decided the events of, a multi's too.
            TxnOp::Parts {
                parts: vec![
                    (
                        2,
                        TxnOp::Watched {
                            op: Box::new(TxnOp::Multi(vec![TxnOp::Delete { path: "/q".into() }])),
                            extra: vec![TxnOp::Delete { path: "/r".into() }],
                            events: vec![(TreeEventKind::NodeDeleted, "/r".into())],
                        },
                    ),
                    (0, TxnOp::Multi(vec![TxnOp::Delete { path: "/a".into() }])),
                ],
                order: vec![2, 0],
            },
        ]
    }

    #[test]
    fn parts_are_refused_nested_twice_for_a_partition_or_inside_a_multi() {
        let encode = |op: TxnOp| {
            let mut buf = Vec::new();
            Txn {
                header: TxnHeader::default(),
                op,
            }
            .encode(&mut buf);
            buf
        };
        let delete = || TxnOp::Delete { path: "/a".into() };
        let parts = |parts: Vec<(u32, TxnOp)>| TxnOp::Parts {
            parts,
            order: vec![],
        };
        let multi = || TxnOp::Multi(vec![delete()]);
        let watched = |op: TxnOp| TxnOp::Watched {
            op: Box::new(op),
            extra: vec![],
            events: vec![],
        };
        for bad in [
            parts(vec![(0, delete()), (0, delete())]),
            // A watched part's multi must match the order too.
            TxnOp::Parts {
                parts: vec![(0, watched(multi())), (1, multi())],
                order: vec![0, 0],
            },
            parts(vec![(0, parts(vec![(1, delete())]))]),
            parts(vec![(0, TxnOp::Seal { voids: vec![] })]),
            TxnOp::Multi(vec![parts(vec![(1, delete())])]),
            // A multi's order must match its parts' ops.
            TxnOp::Parts {
                parts: vec![(0, multi()), (1, multi())],
                order: vec![0, 0],
            },
            TxnOp::Parts {
                parts: vec![(0, multi())],
                order: vec![0, 1],
            },
            TxnOp::Parts {
                parts: vec![(0, delete())],
                order: vec![0],
            },
        ] {
            assert!(Txn::decode(&encode(bad.clone())).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_op_round_trips() {
        // Proves encode/decode are inverse for each op kind.
        for (i, op) in sample().into_iter().enumerate() {
            let txn = Txn {
                header: TxnHeader {
                    session_id: 7,
                    cxid: i as i32,
                    zxid: 0x1_0000_0005,
                    time_ms: 99,
                },
                op,
            };
            let mut buf = Vec::new();
            txn.encode(&mut buf);
            assert_eq!(buf.len(), txn.encoded_len(), "encoded_len of {:?}", txn.op);
            assert_eq!(Txn::zxid_of(&buf), Some(txn.header.zxid));
            assert_eq!(Txn::header_of(&buf), Some(txn.header));
            let voids = match &txn.op {
                TxnOp::Seal { voids } => Some(voids.clone()),
                _ => None,
            };
            assert_eq!(Txn::seal_of(&buf), voids);
            assert_eq!(Txn::decode(&buf), Ok(txn.clone()));
            assert!(
                Txn::decode(&buf[..buf.len() - 1]).is_err(),
                "truncation detected"
            );
            buf.push(0);
            assert_eq!(Txn::decode(&buf), Err(DecodeError::TrailingBytes));

            let links = [(0, UNKNOWN_LINK), (3, 0x1_0000_0004)];
            let mut chained = Vec::new();
            txn.encode_chained(&links, &mut chained);
            assert_eq!(chained.len(), txn.encoded_len_chained(links.len()));
            assert_eq!(Txn::zxid_of(&chained), Some(txn.header.zxid));
            assert_eq!(Txn::header_of(&chained), Some(txn.header));
            assert_eq!(Txn::seal_of(&chained), Txn::seal_of(&buf[..buf.len() - 1]));
            let read = |bytes| Txn::chain_of(bytes).map(Iterator::collect::<Vec<_>>);
            assert_eq!(read(&chained), Some(links.to_vec()));
            assert_eq!(read(&buf[..buf.len() - 1]), Some(Vec::new()));
            assert_eq!(Txn::decode(&chained), Ok(txn.clone()));
            assert!(Txn::decode(&chained[..chained.len() - 1]).is_err());
            let mut no_links = Vec::new();
            txn.encode_chained(&[], &mut no_links);
            assert_eq!(Txn::decode(&no_links), Ok(txn.clone()));
        }
    }

    #[test]
    fn forged_chains_are_rejected() {
        let txn = Txn {
            header: TxnHeader::default(),
            op: TxnOp::Check { path: "/a".into() },
        };
        let mut buf = Vec::new();
        txn.encode_chained(&[(1, 7)], &mut buf);
        let count_at = TXN_HEADER_BYTES;
        let mut huge = buf.clone();
        huge[count_at..count_at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(Txn::decode(&huge), Err(DecodeError::TooLong));
        assert!(Txn::chain_of(&huge).is_none());
        assert_eq!(Txn::seal_of(&huge), None);
        let mut below = buf.clone();
        let previous_at = count_at + 4 + 4;
        below[previous_at..previous_at + 8].copy_from_slice(&(-2i64).to_be_bytes());
        assert!(Txn::decode(&below).is_err());
        let mut version = buf;
        version[0] = 3;
        assert!(Txn::decode(&version).is_err());
        assert_eq!(Txn::zxid_of(&version), None);
        assert_eq!(Txn::header_of(&version), None);
        assert_eq!(Txn::header_of(&version[..10]), None);
    }

    #[test]
    fn forged_counts_are_rejected_without_allocating() {
        // Proves a huge count in a tiny input fails fast instead of reserving memory.
        let mut buf = vec![TXN_FORMAT_VERSION];
        buf.extend_from_slice(&[0; 28]);
        buf.push(tag::MULTI);
        buf.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(Txn::decode(&buf), Err(DecodeError::TooLong));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            // Proves the decoder is total on arbitrary input.
            let _ = Txn::decode(&bytes);
            let _ = Txn::chain_of(&bytes).map(Iterator::count);
            let _ = Txn::seal_of(&bytes);
        }

        #[test]
        fn mutated_encodings_never_panic(i in 0usize..12, pos in any::<usize>(), byte in any::<u8>(), chained in any::<bool>()) {
            // Proves single-byte corruption of valid txns is handled.
            let txn = Txn { header: TxnHeader::default(), op: sample()[i].clone() };
            let mut buf = Vec::new();
            if chained {
                txn.encode_chained(&[(1, 2), (2, UNKNOWN_LINK)], &mut buf);
            } else {
                txn.encode(&mut buf);
            }
            let at = pos % buf.len();
            buf[at] = byte;
            let _ = Txn::decode(&buf);
            let _ = Txn::chain_of(&buf).map(Iterator::count);
            let _ = Txn::seal_of(&buf);
        }
    }
}
