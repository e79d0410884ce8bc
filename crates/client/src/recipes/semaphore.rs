//! The semaphore: the queue lock with `permits` holders. The oldest
//! `permits` sequential ephemeral nodes hold a permit each; the others
//! wait in arrival order.

use std::time::Duration;

use super::check_recipe_path;
use super::sequential::{Rule, SequenceLock};
use crate::client::Client;
use crate::error::Error;

const KIND: &str = "permit";

/// One acquirer of a counting semaphore on a path. Every participant must
/// use the same number of permits (it is not stored on the server).
///
/// - Guarantees: at most `permits` holders at once; permits are granted in
///   request order; a release or a holder's session end wakes the waiters.
/// - Round trips: acquire 2 when a permit is free (create, list); a waiter
///   watches the list of children, since any of the `permits` holders may
///   release first, and looks again (1 round trip) after each change: a
///   herd of at most the waiters present. Release 1.
/// - Session loss, timeouts, cancellation and drop: as [`super::QueueLock`].
#[derive(Debug)]
pub struct Semaphore {
    lock: SequenceLock,
    permits: usize,
}

impl Semaphore {
    /// A semaphore on `path` with `permits` (at least 1) permits.
    pub fn new(client: Client, path: &str, permits: usize) -> Result<Semaphore, Error> {
        check_recipe_path(path)?;
        if permits == 0 {
            return Err(Error::InvalidArgument(format!(
                "a semaphore needs at least one permit: {path}"
            )));
        }
        Ok(Semaphore {
            lock: SequenceLock::new(
                client,
                path,
                KIND,
                &[KIND],
                Rule::Permits(permits),
                Vec::new(),
            ),
            permits,
        })
    }

    /// `Ok(true)` once a permit is held, `Ok(false)` after `timeout`.
    pub async fn acquire(&mut self, timeout: Option<Duration>) -> Result<bool, Error> {
        self.lock.acquire(timeout).await
    }

    /// Returns the permit. An error when this object holds none.
    pub async fn release(&mut self) -> Result<(), Error> {
        self.lock.release().await
    }

    pub fn is_held(&self) -> bool {
        self.lock.is_held()
    }

    /// The session this object uses.
    pub fn client(&self) -> &Client {
        self.lock.client()
    }

    pub fn permits(&self) -> usize {
        self.permits
    }
}
