//! The barrier: ZooKeeper's barrier recipe. A coordinator raises the
//! barrier by creating its node; processes wait until the node is gone.

use std::time::Duration;

use stoa_proto::opcode::CreateMode;

use super::{check_recipe_path, deadline_after, ensure_path, wait_for_event, Woken};
use crate::acl::open_acl_unsafe;
use crate::client::Client;
use crate::error::Error;

/// A barrier on the node `path`: up while the node exists.
///
/// - Guarantees: a waiter returns only after it saw the node absent; every
///   waiter present when the barrier is lowered is woken (all watch the
///   one node).
/// - Round trips: [`Barrier::raise`] and [`Barrier::lower`] 1 (raise 2 more
///   when the parent is missing); [`Barrier::wait`] 1 when down, else 1
///   notification.
/// - Session loss: the barrier node is persistent, so a coordinator's lost
///   session leaves it raised (lower it from another session). A waiting
///   call fails with `SessionExpired` or `Closed`.
/// - Timeouts and cancellation: `wait` returns `Ok(false)` after the
///   timeout; dropping it is harmless (it owns nothing).
#[derive(Debug, Clone)]
pub struct Barrier {
    client: Client,
    path: String,
}

impl Barrier {
    pub fn new(client: Client, path: &str) -> Result<Barrier, Error> {
        check_recipe_path(path)?;
        Ok(Barrier {
            client,
            path: path.to_owned(),
        })
    }

    /// Raises the barrier; raising a raised barrier is no error.
    pub async fn raise(&self) -> Result<(), Error> {
        let acl = open_acl_unsafe();
        let create = || {
            self.client
                .create(&self.path, b"", &acl, CreateMode::Persistent)
        };
        match create().await {
            Ok(_) | Err(Error::NodeExists { .. }) => Ok(()),
            Err(Error::NoNode { .. }) => ensure_path(&self.client, &self.path).await,
            Err(e) => Err(e),
        }
    }

    /// Lowers the barrier, releasing every waiter; lowering a lowered
    /// barrier is no error.
    pub async fn lower(&self) -> Result<(), Error> {
        match self.client.delete(&self.path, -1).await {
            Ok(()) | Err(Error::NoNode { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Waits until the barrier is down: `Ok(false)` after `timeout`.
    pub async fn wait(&self, timeout: Option<Duration>) -> Result<bool, Error> {
        let deadline = deadline_after(timeout);
        let mut events = self.client.events();
        loop {
            let stat =
                read_or_look_again!(self.client.exists(&self.path, true).await, deadline, false);
            if stat.is_none() {
                return Ok(true);
            }
            if wait_for_event(&mut events, &self.path, deadline).await? == Woken::TimedOut {
                return Ok(false);
            }
        }
    }
}
