//! The write-ahead log of Stoa (DESIGN.md §3): one log per server shared by
//! all partitions' raft groups.
//!
//! - [`Record`] and its encoding: `record`; the format is specified in
//!   `docs/format-wal.md`.
//! - [`LogStore`]: the interface; [`FileLog`] on disk, [`SimLog`] in memory
//!   for deterministic tests and the simulator.
//! - [`Replay`]: what survives, per partition, after open or recovery.
//! - [`WalWriter`]: the dedicated I/O thread doing group commit.

mod compaction;
mod error;
mod file_log;
mod record;
mod replay;
mod segment;
mod sim_log;
mod store;
mod writer;

pub use error::WalError;
pub use file_log::{
    FileLog, FileLogOptions, SEGMENT_BYTES_DEFAULT, SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN,
};
pub use record::{
    decode_record, encode_record, Decoded, InvalidRecord, Record, RecordKind,
    RECORD_BODY_BYTES_MAX, RECORD_BODY_FIXED_BYTES, RECORD_FRAME_BYTES, RECORD_PAYLOAD_BYTES_MAX,
};
pub use replay::{PartitionReplay, Replay};
pub use segment::{Preallocate, SEGMENT_HEADER_BYTES};
pub use sim_log::SimLog;
pub use store::LogStore;
pub use writer::{SyncStats, WalWriter, WRITER_QUEUE_BATCHES_MAX};
