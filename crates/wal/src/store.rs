//! The interface the raft driver persists through; `FileLog` and `SimLog`
//! implement it.

use crate::error::WalError;
use crate::record::Record;

/// A log shared by all partitions of a server.
///
/// Nothing appended is durable until `sync` returns `Ok`. After any error
/// from `append` or `sync` the store is failed: every later call returns
/// `WalError::Failed` (a server must not acknowledge after a failed fsync).
pub trait LogStore: Send {
    /// Queues `records` in order. All or none are accepted when a record is
    /// rejected for its size. May perform I/O (segment rollover).
    fn append(&mut self, records: &[Record]) -> Result<(), WalError>;

    /// Makes everything appended so far durable.
    fn sync(&mut self) -> Result<(), WalError>;

    /// Declares that `partition`'s state up to `index` is durable elsewhere
    /// (a snapshot), so its entries at or below `index` may be deleted.
    fn mark_compactable(&mut self, partition: u32, index: u64) -> Result<(), WalError>;
}

impl<T: LogStore + ?Sized> LogStore for Box<T> {
    fn append(&mut self, records: &[Record]) -> Result<(), WalError> {
        (**self).append(records)
    }

    fn sync(&mut self) -> Result<(), WalError> {
        (**self).sync()
    }

    fn mark_compactable(&mut self, partition: u32, index: u64) -> Result<(), WalError> {
        (**self).mark_compactable(partition, index)
    }
}

/// Rejects a batch before any of it is queued.
pub(crate) fn check_payload_bounds(records: &[Record]) -> Result<(), WalError> {
    match records
        .iter()
        .find(|r| r.payload.len() > crate::record::RECORD_PAYLOAD_BYTES_MAX)
    {
        Some(r) => Err(WalError::RecordTooLarge {
            payload_bytes: r.payload.len(),
        }),
        None => Ok(()),
    }
}
