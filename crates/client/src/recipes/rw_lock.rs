//! The read-write lock: ZooKeeper's shared-lock recipe. Readers and
//! writers queue in one directory (`read-` and `write-` sequential
//! ephemeral nodes); a reader waits only for the newest older writer, a
//! writer for its immediate predecessor, so readers share the lock,
//! writers exclude everyone, and the order of requests is kept (a writer
//! is not starved by readers that arrive after it).

use std::time::Duration;

use super::check_recipe_path;
use super::sequential::{Rule, SequenceLock};
use crate::client::Client;
use crate::error::Error;

const READ: &str = "read";
const WRITE: &str = "write";
const KINDS: &[&str] = &[READ, WRITE];

/// Makes the read and write sides of one lock path.
///
/// - Guarantees: while a writer holds, nobody else does; readers hold
///   together; requests are served in arrival order.
/// - Round trips: acquire 2 when free (create, list), plus 1 (exists) and
///   a notification per wait; release 1. Each wake-up wakes only waiters
///   of the node that went (a writer's release wakes the readers queued
///   right behind it, each watching it).
/// - Session loss, timeouts, cancellation and drop: as [`super::QueueLock`].
#[derive(Debug, Clone)]
pub struct ReadWriteLock {
    client: Client,
    path: String,
}

impl ReadWriteLock {
    pub fn new(client: Client, path: &str) -> Result<ReadWriteLock, Error> {
        check_recipe_path(path)?;
        Ok(ReadWriteLock {
            client,
            path: path.to_owned(),
        })
    }

    /// A new reader (one object per acquirer).
    pub fn read_lock(&self) -> ReadLock {
        ReadLock {
            lock: SequenceLock::new(
                self.client.clone(),
                &self.path,
                READ,
                KINDS,
                Rule::Shared,
                Vec::new(),
            ),
        }
    }

    /// A new writer (one object per acquirer).
    pub fn write_lock(&self) -> WriteLock {
        WriteLock {
            lock: SequenceLock::new(
                self.client.clone(),
                &self.path,
                WRITE,
                KINDS,
                Rule::Exclusive,
                Vec::new(),
            ),
        }
    }
}

macro_rules! lock_side {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name {
            lock: SequenceLock,
        }

        impl $name {
            /// `Ok(true)` once held, `Ok(false)` after `timeout` (the place
            /// in the queue given up).
            pub async fn acquire(&mut self, timeout: Option<Duration>) -> Result<bool, Error> {
                self.lock.acquire(timeout).await
            }

            /// An error when this object does not hold the lock.
            pub async fn release(&mut self) -> Result<(), Error> {
                self.lock.release().await
            }

            pub fn is_held(&self) -> bool {
                self.lock.is_held()
            }
        }
    };
}

lock_side!(
    /// The shared side: held with other readers, never with a writer.
    ReadLock
);
lock_side!(
    /// The exclusive side: held alone.
    WriteLock
);
