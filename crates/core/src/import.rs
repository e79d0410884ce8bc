//! Reading a ZooKeeper data directory (3.5 to 3.9): its snapshots
//! (`version-2/snapshot.<zxid>`) and transaction logs (`version-2/log.<zxid>`),
//! as ZooKeeper writes them. Pure: bytes in, a tree and transactions out;
//! `stoa import` reads the files and writes the Stoa data directory.
//!
//! ZooKeeper restores by loading its newest valid snapshot, then replaying
//! every logged transaction after the snapshot's zxid. The snapshot is
//! fuzzy (taken while transactions applied), so a replayed transaction may
//! already be in it; ZooKeeper's `processTxn` ignores what no longer
//! applies (a create of a node that exists, a delete of one that does
//! not), and so does Stoa's tree, which applies the same transactions the
//! same way (`stoa_tree::DataTree::apply`).

use stoa_proto::codes::ErrorCode;
use stoa_proto::jute::{Reader, Record};
use stoa_proto::records::Acl;
use stoa_tree::{CreateTxn, ImportedNode, PersistedStat, Txn, TxnHeader, TxnOp};

/// "ZKSN" and "ZKLG", the file headers' magic numbers.
const SNAPSHOT_MAGIC: i32 = i32::from_be_bytes(*b"ZKSN");
const LOG_MAGIC: i32 = i32::from_be_bytes(*b"ZKLG");
/// The ACL reference ZooKeeper keeps for world:anyone with every right.
const OPEN_ACL_REFERENCE: i64 = -1;

/// What a ZooKeeper snapshot holds.
pub struct ZkSnapshot {
    pub sessions: Vec<(i64, i32)>,
    /// The ACL lists the nodes name by index (the first: world:anyone
    /// with every right, ZooKeeper's reference -1).
    pub acl_lists: Vec<Vec<Acl>>,
    /// Each node after its parent, the root (ZooKeeper's "") as `/`.
    pub nodes: Vec<ImportedNode>,
}

fn err(what: impl std::fmt::Display) -> String {
    what.to_string()
}

/// A snapshot file's bytes (uncompressed): the sessions and the nodes,
/// checked against the Adler-32 ZooKeeper seals them with.
pub fn read_snapshot(bytes: &[u8]) -> Result<ZkSnapshot, String> {
    let mut r = Reader::new(bytes);
    read_file_header(&mut r, SNAPSHOT_MAGIC, "snapshot")?;
    let count = r.read_i32().map_err(err)?;
    let mut sessions = Vec::new();
    for _ in 0..count.max(0) {
        sessions.push((r.read_i64().map_err(err)?, r.read_i32().map_err(err)?));
    }
    // The ACL cache: reference -> list.
    let acl_count = r.read_i32().map_err(err)?;
    let mut acl_lists = vec![vec![Acl::open_unsafe()]];
    let mut index_of = std::collections::HashMap::from([(OPEN_ACL_REFERENCE, 0)]);
    for _ in 0..acl_count.max(0) {
        let reference = r.read_i64().map_err(err)?;
        index_of.insert(reference, acl_lists.len());
        acl_lists.push(r.read_vec(Acl::decode).map_err(err)?);
    }
    let mut nodes = Vec::new();
    loop {
        let path = r.read_string().map_err(err)?;
        if path == "/" {
            break;
        }
        let data = r.read_nullable_buffer().map_err(err)?;
        let reference = r.read_i64().map_err(err)?;
        let acl = *index_of
            .get(&reference)
            .ok_or_else(|| format!("node {path:?}: ACL reference {reference} not in the cache"))?;
        let stat = PersistedStat {
            czxid: r.read_i64().map_err(err)?,
            mzxid: r.read_i64().map_err(err)?,
            ctime: r.read_i64().map_err(err)?,
            mtime: r.read_i64().map_err(err)?,
            version: r.read_i32().map_err(err)?,
            cversion: r.read_i32().map_err(err)?,
            aversion: r.read_i32().map_err(err)?,
            ephemeral_owner: r.read_i64().map_err(err)?,
            pzxid: r.read_i64().map_err(err)?,
        };
        let path = if path.is_empty() {
            "/".to_string()
        } else {
            path
        };
        nodes.push(ImportedNode {
            path,
            data,
            acl,
            stat,
        });
    }
    // The seal: the Adler-32 of everything before it, then "/".
    let sealed = bytes.len() - r.remaining();
    let checksum = r.read_i64().map_err(err)?;
    if checksum as u64 != u64::from(adler32(&bytes[..sealed])) {
        return Err("snapshot checksum mismatch (a damaged or unfinished snapshot)".into());
    }
    Ok(ZkSnapshot {
        sessions,
        acl_lists,
        nodes,
    })
}

/// ZooKeeper's FileHeader: magic, format version (2), database id.
fn read_file_header(r: &mut Reader<'_>, magic: i32, what: &str) -> Result<(), String> {
    if r.read_i32().map_err(err)? != magic {
        let name = String::from_utf8_lossy(&magic.to_be_bytes()).into_owned();
        return Err(format!("not a ZooKeeper {what} (no {name} header)"));
    }
    let version = r.read_i32().map_err(err)?;
    if version != 2 {
        return Err(format!("{what} format version {version} (2 is read)"));
    }
    let _dbid = r.read_i64().map_err(err)?;
    Ok(())
}

/// A transaction log file's bytes: every transaction, as Stoa's tree
/// applies it. The log ends at its preallocated zeros, or at a record cut
/// short (a crash while ZooKeeper wrote it: never acknowledged).
pub fn read_log(bytes: &[u8]) -> Result<Vec<Txn>, String> {
    let mut r = Reader::new(bytes);
    read_file_header(&mut r, LOG_MAGIC, "transaction log")?;
    // Each record: checksum (i64), length (i32), the transaction, then an
    // end-of-record byte.
    let mut at = bytes.len() - r.remaining();
    let mut txns = Vec::new();
    while let Some(head) = bytes.get(at..at + 12) {
        let checksum = i64::from_be_bytes(head[..8].try_into().expect("8 bytes"));
        let length = i32::from_be_bytes(head[8..].try_into().expect("4 bytes"));
        let Ok(length) = usize::try_from(length) else {
            break;
        };
        // The preallocated zeros, or a record cut short by a crash (never
        // acknowledged): the log ends there, as ZooKeeper reads it.
        let Some(record) = bytes
            .get(at + 12..at + 12 + length)
            .filter(|r| !r.is_empty())
        else {
            break;
        };
        if checksum as u64 != u64::from(adler32(record))
            || bytes.get(at + 12 + length) != Some(&b'B')
        {
            break;
        }
        txns.push(read_txn(record)?);
        at += 12 + length + 1;
    }
    Ok(txns)
}

/// One logged transaction: ZooKeeper's TxnHeader and its record (and, in
/// 3.6+, a digest after it, not needed here).
pub fn read_txn(bytes: &[u8]) -> Result<Txn, String> {
    let mut r = Reader::new(bytes);
    let header = TxnHeader {
        session_id: r.read_i64().map_err(err)?,
        cxid: r.read_i32().map_err(err)?,
        zxid: r.read_i64().map_err(err)?,
        time_ms: r.read_i64().map_err(err)?,
    };
    let kind = r.read_i32().map_err(err)?;
    let op = read_op(kind, header.session_id, &mut r)
        .map_err(|e| format!("transaction {:#x}: {e}", header.zxid))?;
    Ok(Txn { header, op })
}

mod kind {
    pub const ERROR: i32 = -1;
    pub const CREATE_SESSION: i32 = -10;
    pub const CLOSE_SESSION: i32 = -11;
    pub const CREATE: i32 = 1;
    pub const DELETE: i32 = 2;
    pub const SET_DATA: i32 = 5;
    pub const SET_ACL: i32 = 7;
    pub const CHECK: i32 = 13;
    pub const MULTI: i32 = 14;
    pub const CREATE2: i32 = 15;
    pub const RECONFIG: i32 = 16;
    pub const CREATE_CONTAINER: i32 = 19;
    pub const DELETE_CONTAINER: i32 = 20;
    pub const CREATE_TTL: i32 = 21;
}

fn read_op(kind: i32, session: i64, r: &mut Reader<'_>) -> Result<TxnOp, String> {
    Ok(match kind {
        kind::CREATE_SESSION => TxnOp::CreateSession {
            timeout_ms: r.read_i32().map_err(err)?,
        },
        kind::CLOSE_SESSION => TxnOp::CloseSession {
            // Before 3.6 the record is empty: the ephemerals are found
            // when it applies (`fill_close_session`).
            paths: if r.remaining() >= 4 {
                r.read_vec(|r| r.read_string()).map_err(err)?
            } else {
                Vec::new()
            },
        },
        kind::CREATE | kind::CREATE2 => {
            let (path, data, acl) = created(r)?;
            let ephemeral = r.read_bool().map_err(err)?;
            let parent_cversion = r.read_i32().map_err(err)?;
            TxnOp::Create(CreateTxn {
                path,
                data,
                acl,
                ephemeral_owner: if ephemeral { session } else { 0 },
                parent_cversion,
            })
        }
        kind::CREATE_CONTAINER => {
            let (path, data, acl) = created(r)?;
            TxnOp::Create(CreateTxn {
                path,
                data,
                acl,
                ephemeral_owner: stoa_tree::CONTAINER_OWNER,
                parent_cversion: r.read_i32().map_err(err)?,
            })
        }
        kind::CREATE_TTL => {
            let (path, data, acl) = created(r)?;
            let parent_cversion = r.read_i32().map_err(err)?;
            let ttl = r.read_i64().map_err(err)?;
            TxnOp::Create(CreateTxn {
                path,
                data,
                acl,
                ephemeral_owner: stoa_tree::ttl_owner(ttl)
                    .ok_or_else(|| format!("TTL {ttl} out of range"))?,
                parent_cversion,
            })
        }
        kind::DELETE => TxnOp::Delete {
            path: r.read_string().map_err(err)?,
        },
        kind::DELETE_CONTAINER => TxnOp::DeleteContainer {
            path: r.read_string().map_err(err)?,
        },
        kind::SET_DATA | kind::RECONFIG => TxnOp::SetData {
            path: r.read_string().map_err(err)?,
            data: r.read_nullable_buffer().map_err(err)?,
            version: r.read_i32().map_err(err)?,
        },
        kind::SET_ACL => TxnOp::SetAcl {
            path: r.read_string().map_err(err)?,
            acl: r.read_vec(Acl::decode).map_err(err)?,
            aversion: r.read_i32().map_err(err)?,
        },
        kind::CHECK => {
            let path = r.read_string().map_err(err)?;
            let _version = r.read_i32().map_err(err)?;
            TxnOp::Check { path }
        }
        kind::ERROR => TxnOp::Error(error_code(r.read_i32().map_err(err)?)),
        kind::MULTI => {
            let parts = r
                .read_vec(|r| Ok((r.read_i32()?, r.read_buffer()?)))
                .map_err(err)?;
            let mut ops = Vec::with_capacity(parts.len());
            for (kind, bytes) in parts {
                ops.push(read_op(kind, session, &mut Reader::new(&bytes))?);
            }
            TxnOp::Multi(ops)
        }
        other => return Err(format!("transaction type {other} is not read")),
    })
}

/// A created node's path, data and ACL, as every create record begins.
type Created = (String, Option<Vec<u8>>, Vec<Acl>);

fn created(r: &mut Reader<'_>) -> Result<Created, String> {
    Ok((
        r.read_string().map_err(err)?,
        r.read_nullable_buffer().map_err(err)?,
        r.read_vec(Acl::decode).map_err(err)?,
    ))
}

fn error_code(code: i32) -> ErrorCode {
    ErrorCode::from_i32(code).unwrap_or(ErrorCode::SystemError)
}

/// A close logged before 3.6 names no paths: the session's ephemerals in
/// `tree` are the ones to delete, as ZooKeeper's `killSession` finds them.
pub fn fill_close_session(tree: &stoa_tree::DataTree, txn: &mut Txn) {
    if let TxnOp::CloseSession { paths } = &mut txn.op {
        if paths.is_empty() {
            *paths = tree
                .ephemerals(txn.header.session_id)
                .map(String::from)
                .collect();
        }
    }
}

/// Adler-32, the checksum ZooKeeper's snapshots and logs carry.
pub fn adler32(bytes: &[u8]) -> u32 {
    const MOD: u32 = 65_521;
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in bytes.chunks(5552) {
        for &byte in chunk {
            a += u32::from(byte);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    proptest! {
        /// The decoders refuse what is not theirs, whatever the bytes,
        /// without panicking (headers given so the bodies are reached).
        #[test]
        fn no_input_makes_a_decoder_panic(body in proptest::collection::vec(any::<u8>(), 0..400)) {
            for magic in [b"ZKSN", b"ZKLG"] {
                let mut bytes = magic.to_vec();
                bytes.extend_from_slice(&2i32.to_be_bytes());
                bytes.extend_from_slice(&(-1i64).to_be_bytes());
                bytes.extend_from_slice(&body);
                let _ = read_snapshot(&bytes);
                let _ = read_log(&bytes);
            }
            let _ = read_txn(&body);
        }
    }

    #[test]
    fn adler32_matches_known_values() {
        assert_eq!(adler32(b""), 1);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    }
}
