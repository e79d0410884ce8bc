//! The data tree of one partition: nodes, stats and ACLs exactly as
//! ZooKeeper 3.9 keeps them; the leader's request preparation
//! ([`Preparer`]); idempotent transactions ([`Txn`]) and their application;
//! reads; and the snapshot format. Pure code: no I/O beyond `Read`/`Write`.

mod acl;
mod apply;
mod child_map;
mod codec;
mod digest;
mod entry_offsets;
mod ephemeral;
mod fast;
mod leaf_bytes;
mod node;
mod packed_leaf;
mod path;
mod prep;
mod read;
mod response;
mod shared_bytes;
mod snapshot;
mod snapshot_load;
mod stubs;
mod tree;
mod txn;

pub use acl::{check as check_acl, digest_id, fixup as fixup_acl, Caller};
pub use apply::{Applied, TreeEvent, TreeEventKind, TxnResult};
pub use codec::DecodeError;
pub use ephemeral::{client_owner, ttl_owner, EphemeralKind, CONTAINER_OWNER, TTL_MAX_MS};
pub use fast::{flag_owner, FastFlags, FAST};
pub use node::{Name, Node, NodeRef, PersistedStat};
pub use path::{parent_of, validate_path, within, CONFIG, PARTITIONS, QUOTA, ROOT, ZOOKEEPER};
pub use prep::{is_multi_op, MultiMark, PrepContext, PrepError, Preparer};
pub use response::{reply_for, response_for, ReplyShape};
pub use snapshot::{read_embedded_snapshot, read_snapshot, write_snapshot, SnapshotError};
pub use snapshot_load::{tree_from_nodes, ImportedNode};
pub use tree::DataTree;
pub use tree::Subtree;
pub use txn::{
    ChainLink, ChainLinks, CreateTxn, GroupMove, Txn, TxnHeader, TxnOp, SILENT_PART, UNKNOWN_LINK,
};

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod move_tests;
#[cfg(test)]
mod prep_tests;
#[cfg(test)]
mod testutil;
