//! The test-and-set lock: whoever creates the lock's ephemeral node holds
//! the lock. Waiters are not queued: a release wakes every waiter
//! (watching the node) and they race to create it again (herd effect, no
//! fairness), which the paper finds the fastest lock under low contention
//! and high latency.

use std::time::Duration;

use stoa_proto::opcode::CreateMode;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{
    check_recipe_path, deadline_after, ensure_path, joined, spawn_cleanup, unique_marker,
    wait_for_event, Woken,
};
use crate::acl::open_acl_unsafe;
use crate::client::Client;
use crate::error::Error;

/// The shortest polling interval accepted: below it polling is a flood.
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(1);

/// One acquirer of a test-and-set lock held by creating the node `path`.
///
/// - Guarantees: at most one holder (the node's creator). No order among
///   waiters, and no starvation bound.
/// - Round trips: [`TasLock::try_lock`] 1; [`TasLock::lock`] 1 when free,
///   else 1 (exists with a watch) and a notification per release seen and
///   1 more try; [`TasLock::lock_polling`] 1 when free, else a create per
///   interval, several in flight at once; [`TasLock::release`] 1.
/// - Session loss: the node is ephemeral, so the lock is released when the
///   holder's session expires or closes; a waiting `lock` then fails with
///   `SessionExpired` or `Closed`.
/// - Timeouts and cancellation: `lock` and `lock_polling` return
///   `Ok(false)` after the timeout. A dropped future whose create may have
///   succeeded leaves this object unsure; the next call (or drop) checks
///   the node's data, this object's marker, and deletes a node it owns.
/// - Drop while holding spawns the delete on the current tokio runtime;
///   without one, the node goes with the session.
#[derive(Debug)]
pub struct TasLock {
    client: Client,
    path: String,
    /// The node's data: tells this object's node from anyone else's.
    marker: Vec<u8>,
    held: bool,
    /// A create was sent whose reply was not seen.
    unsure: bool,
}

impl TasLock {
    pub fn new(client: Client, path: &str) -> Result<TasLock, Error> {
        check_recipe_path(path)?;
        Ok(TasLock {
            client,
            path: path.to_owned(),
            marker: unique_marker().into_bytes(),
            held: false,
            unsure: false,
        })
    }

    /// The session this object uses.
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn is_held(&self) -> bool {
        self.held
    }

    /// One attempt: `Ok(true)` when this object now holds the lock.
    pub async fn try_lock(&mut self) -> Result<bool, Error> {
        self.settle().await?;
        if self.held {
            return Err(self.reentry());
        }
        self.unsure = true;
        // An error leaves us unsure: the create may have been applied.
        self.held = create_lock_node(&self.client, &self.path, &self.marker).await?;
        self.unsure = false;
        Ok(self.held)
    }

    /// Tries, and while another holds the lock, waits for its node to go
    /// (a watch) and tries again: `Ok(false)` after `timeout`.
    pub async fn lock(&mut self, timeout: Option<Duration>) -> Result<bool, Error> {
        let deadline = deadline_after(timeout);
        let mut events = self.client.events();
        loop {
            if read_or_look_again!(self.try_lock().await, deadline, false) {
                return Ok(true);
            }
            let stat =
                read_or_look_again!(self.client.exists(&self.path, true).await, deadline, false);
            if stat.is_none() {
                continue;
            }
            if wait_for_event(&mut events, &self.path, deadline).await? == Woken::TimedOut {
                return Ok(false);
            }
        }
    }

    /// The paper's asynchronous test-and-set: sends a create every
    /// `interval` without waiting for the previous answer, until one
    /// succeeds or `timeout` passes (`Ok(false)`). Before returning it
    /// waits for the creates still in flight, so none can succeed later.
    pub async fn lock_polling(
        &mut self,
        interval: Duration,
        timeout: Option<Duration>,
    ) -> Result<bool, Error> {
        if interval < MIN_POLL_INTERVAL {
            return Err(Error::InvalidArgument(format!(
                "polling interval {interval:?} is below {MIN_POLL_INTERVAL:?}"
            )));
        }
        self.settle().await?;
        if self.held {
            return Err(self.reentry());
        }
        let deadline = deadline_after(timeout);
        let mut in_flight = JoinSet::new();
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.unsure = true;
        let mut outcome: Result<bool, Error> = Ok(false);
        loop {
            let expired = deadline.is_some_and(|d| Instant::now() >= d);
            if expired || !matches!(outcome, Ok(false)) {
                break;
            }
            tokio::select! {
                _ = ticks.tick() => {
                    let (client, path, marker) =
                        (self.client.clone(), self.path.clone(), self.marker.clone());
                    in_flight.spawn(async move { create_lock_node(&client, &path, &marker).await });
                }
                Some(done) = in_flight.join_next() => outcome = joined(done),
                _ = sleep_until(deadline) => {}
            }
        }
        // Creates sent after ours succeeded fail with NodeExists; one sent
        // before may still succeed after an error: count it.
        while let Some(done) = in_flight.join_next().await {
            if let (Ok(true), Ok(false)) | (Ok(true), Err(_)) = (joined(done), &outcome) {
                outcome = Ok(true);
            }
        }
        self.unsure = false;
        self.held = matches!(outcome, Ok(true));
        outcome
    }

    /// Deletes the node. An error when this object does not hold the lock.
    pub async fn release(&mut self) -> Result<(), Error> {
        if !self.held {
            return Err(Error::InvalidArgument(format!(
                "release of {} which this object does not hold",
                self.path
            )));
        }
        match self.client.delete(&self.path, -1).await {
            Ok(()) | Err(Error::NoNode { .. }) => {
                self.held = false;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn reentry(&self) -> Error {
        Error::InvalidArgument(format!(
            "{} is already held by this object (it is not reentrant)",
            self.path
        ))
    }

    /// After a dropped call: whether the node that exists is ours.
    async fn settle(&mut self) -> Result<(), Error> {
        if !self.unsure {
            return Ok(());
        }
        self.held = owns_node(&self.client, &self.path, &self.marker).await?;
        self.unsure = false;
        Ok(())
    }
}

impl Drop for TasLock {
    fn drop(&mut self) {
        if !self.held && !self.unsure {
            return;
        }
        let (client, path, marker) = (
            self.client.clone(),
            std::mem::take(&mut self.path),
            std::mem::take(&mut self.marker),
        );
        spawn_cleanup(async move {
            if let Ok(true) = owns_node(&client, &path, &marker).await {
                let _ = client.delete(&path, -1).await;
            }
        });
    }
}

/// One create of the lock node: `Ok(false)` when someone holds it.
async fn create_lock_node(client: &Client, path: &str, marker: &[u8]) -> Result<bool, Error> {
    for _ in 0..2 {
        match client
            .create(path, marker, &open_acl_unsafe(), CreateMode::Ephemeral)
            .await
        {
            Ok(_) => return Ok(true),
            Err(Error::NodeExists { .. }) => return Ok(false),
            Err(Error::NoNode { .. }) => {
                let parent = &path[..path.rfind('/').unwrap_or(0)];
                if !parent.is_empty() {
                    ensure_path(client, parent).await?;
                }
            }
            // The create may have been applied: the node's data says.
            Err(Error::ConnectionLoss { .. }) => return owns_node(client, path, marker).await,
            Err(e) => return Err(e),
        }
    }
    Err(Error::NoNode {
        path: path.to_owned(),
    })
}

/// Whether the lock node exists and carries `marker`.
async fn owns_node(client: &Client, path: &str, marker: &[u8]) -> Result<bool, Error> {
    match client.get_data(path, false).await {
        Ok((data, _)) => Ok(data == marker),
        Err(Error::NoNode { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
