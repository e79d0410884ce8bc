//! The queue lock: ZooKeeper's lock recipe. Each acquirer creates an
//! ephemeral sequential node under the lock's path and holds the lock when
//! its node is the oldest; otherwise it watches only its predecessor, so a
//! release wakes exactly one waiter (no herd effect) and the lock is
//! granted in request order (FIFO).

use std::time::Duration;

use tokio::task::JoinHandle;

use super::sequential::{Rule, SequenceLock};
use super::{check_recipe_path, joined};
use crate::client::Client;
use crate::error::Error;

const KIND: &str = "lock";

/// A FIFO mutual-exclusion lock on a path; one object per acquirer.
///
/// - Guarantees: at most one holder among all sessions; holders in the
///   order their nodes were created; a waiter whose predecessor goes
///   (released, or its session closed or expired) is woken, so none waits
///   on a lock nobody holds.
/// - Round trips: [`QueueLock::acquire`] 2 when free (create, list), plus 1
///   (exists) and a notification per wait; [`QueueLock::acquire_pipelined`]
///   and [`QueueLock::lock_async`] 1 when free; [`QueueLock::release`] 1.
/// - Session loss: the node is ephemeral, so the lock is released when the
///   session expires or closes. A waiting acquire then fails with
///   `SessionExpired` or `Closed`; a holder must assume it lost the lock
///   once its session is gone.
/// - Timeouts and cancellation: a timed-out acquire deletes its node and
///   returns `Ok(false)`. A dropped acquire future leaves its node for the
///   next call on this object (which finds it by marker) or for drop.
/// - Drop while holding (or queued) spawns the node's delete on the
///   current tokio runtime; without one, the node goes with the session.
#[derive(Debug)]
pub struct QueueLock {
    lock: SequenceLock,
}

impl QueueLock {
    /// A lock on `path` (created, with its parents, when first needed).
    pub fn new(client: Client, path: &str) -> Result<QueueLock, Error> {
        check_recipe_path(path)?;
        Ok(QueueLock {
            lock: SequenceLock::new(client, path, KIND, &[KIND], Rule::Exclusive, Vec::new()),
        })
    }

    /// Queues for the lock and waits for it: `Ok(true)` once held,
    /// `Ok(false)` after `timeout` (the place in the queue given up).
    pub async fn acquire(&mut self, timeout: Option<Duration>) -> Result<bool, Error> {
        self.lock.acquire(timeout).await
    }

    /// As [`QueueLock::acquire`], with the create and the first listing
    /// sent together rather than one after the other: one round trip less,
    /// the asynchronous queue lock of the paper, minus its polling (the
    /// listing, answered after the create, already shows the new node).
    pub async fn acquire_pipelined(&mut self, timeout: Option<Duration>) -> Result<bool, Error> {
        self.lock.acquire_pipelined(timeout).await
    }

    /// Queues for the lock now and returns at once: the handle resolves to
    /// this lock once held. The place in the queue is taken when the create
    /// reaches the server, not when the handle is awaited. Must be called
    /// inside a tokio runtime: the acquire runs on a task of its own.
    pub fn lock_async(mut self, timeout: Option<Duration>) -> PendingLock {
        let task = tokio::spawn(async move {
            let acquired = self.acquire_pipelined(timeout).await?;
            Ok(acquired.then_some(self))
        });
        PendingLock { task: Some(task) }
    }

    /// Deletes this holder's node, handing the lock to the next in line.
    /// An error when this object does not hold the lock.
    pub async fn release(&mut self) -> Result<(), Error> {
        self.lock.release().await
    }

    /// Whether this object holds the lock, as far as it knows: a holder
    /// whose session ended no longer does.
    pub fn is_held(&self) -> bool {
        self.lock.is_held()
    }

    /// The session this object uses.
    pub fn client(&self) -> &Client {
        self.lock.client()
    }

    /// The path of this object's node while it has one.
    pub fn node_path(&self) -> Option<String> {
        self.lock.node_path()
    }
}

/// An acquire in progress on its own task, from [`QueueLock::lock_async`].
/// Dropping it (or [`PendingLock::cancel`]) stops the acquire and deletes
/// the node, even when the lock had been granted meanwhile.
#[derive(Debug)]
pub struct PendingLock {
    task: Option<JoinHandle<Result<Option<QueueLock>, Error>>>,
}

impl PendingLock {
    /// Whether [`PendingLock::wait`] would return at once.
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_some_and(JoinHandle::is_finished)
    }

    /// The held lock, `None` when the timeout passed first.
    pub async fn wait(mut self) -> Result<Option<QueueLock>, Error> {
        let task = self.task.take().expect("a pending lock is awaited once");
        joined(task.await)
    }

    /// Stops waiting; the node is deleted.
    pub fn cancel(self) {}
}

impl Drop for PendingLock {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            // The aborted task drops the lock, whose drop deletes the node.
            task.abort();
        }
    }
}
