//! The one error type of the log. The world (disk, files) produces these;
//! broken invariants of our own code are `assert!`s instead.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a log operation failed.
#[derive(Debug)]
pub enum WalError {
    /// A system call failed; `op` names what we were doing.
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// Acknowledged data is damaged (not a torn tail): the log refuses to
    /// open rather than silently drop it.
    Corrupt {
        path: PathBuf,
        offset_bytes: u64,
        reason: String,
    },
    /// A record's payload exceeds `RECORD_PAYLOAD_BYTES_MAX`.
    RecordTooLarge { payload_bytes: usize },
    /// `FileLogOptions` out of their documented bounds.
    InvalidOptions(&'static str),
    /// Another process holds the directory lock.
    Locked { path: PathBuf },
    /// An earlier write or sync failed. After a failed fsync the state of
    /// the page cache is unknown, so the log stops (fail-stop) and every
    /// later call returns this until the process restarts and replays.
    Failed,
    /// A fault injected by `SimLog`.
    InjectedSyncFailure,
    /// The `WalWriter` thread has stopped (after an error or shutdown).
    WriterStopped,
}

impl WalError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        WalError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, offset_bytes: u64, reason: String) -> Self {
        WalError::Corrupt {
            path: path.into(),
            offset_bytes,
            reason,
        }
    }
}

impl fmt::Display for WalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalError::Io { op, path, source } => {
                write!(f, "wal: {op} {}: {source}", path.display())
            }
            WalError::Corrupt {
                path,
                offset_bytes,
                reason,
            } => write!(
                f,
                "wal: corrupt log {} at byte {offset_bytes}: {reason}",
                path.display()
            ),
            WalError::RecordTooLarge { payload_bytes } => {
                write!(f, "wal: record payload of {payload_bytes} bytes too large")
            }
            WalError::InvalidOptions(why) => write!(f, "wal: invalid options: {why}"),
            WalError::Locked { path } => {
                write!(f, "wal: {} is locked by another process", path.display())
            }
            WalError::Failed => write!(f, "wal: an earlier write or sync failed (fail-stop)"),
            WalError::InjectedSyncFailure => write!(f, "wal: injected sync failure"),
            WalError::WriterStopped => write!(f, "wal: writer thread stopped"),
        }
    }
}

impl std::error::Error for WalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WalError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
