//! The double barrier: ZooKeeper's double-barrier recipe. `size`
//! participants enter (each an ephemeral sequential member node) and start
//! together once all are in, when the last one creates the `ready` node;
//! they leave together: the oldest member waits for the newest, the others
//! delete their node and wait for the oldest, so each waits on one node.

use std::time::Duration;

use stoa_proto::opcode::CreateMode;

use super::sequential::{sorted_entries, OwnNode};
use super::{
    after_connection_loss, check_recipe_path, child_path, deadline_after, wait_for_event, Woken,
};
use crate::acl::open_acl_unsafe;
use crate::client::Client;
use crate::error::Error;

const KIND: &str = "member";
const READY: &str = "ready";

/// One participant of a double barrier of `size` participants at `path`.
/// A barrier path serves one round at a time: the last to leave deletes
/// `ready`, and a new round starts after that.
///
/// - Guarantees: [`DoubleBarrier::enter`] returns `Ok(true)` only once
///   `size` participants have entered; [`DoubleBarrier::leave`] returns
///   `Ok(true)` only once every participant has left.
/// - Round trips: enter 3 (exists with a watch, create, list) plus, for
///   the last to enter, 1 (create `ready`), for the others 1 (exists) and
///   a notification;
///   leave 1 per member still in (list, then delete or watch).
/// - Session loss: member nodes are ephemeral: a participant whose session
///   ends counts as left (and, if the barrier was not full, as never
///   entered). Waiting calls fail with `SessionExpired` or `Closed`.
/// - Timeouts and cancellation: enter's timeout withdraws the member node
///   (`Ok(false)`). Leave's timeout returns `Ok(false)` with the member
///   node possibly deleted already; call leave again to keep waiting.
///   Drop deletes the member node.
#[derive(Debug)]
pub struct DoubleBarrier {
    node: OwnNode,
    size: usize,
}

impl DoubleBarrier {
    pub fn new(client: Client, path: &str, size: usize) -> Result<DoubleBarrier, Error> {
        check_recipe_path(path)?;
        if size == 0 {
            return Err(Error::InvalidArgument(format!(
                "a double barrier needs at least one participant: {path}"
            )));
        }
        Ok(DoubleBarrier {
            node: OwnNode::new(client, path, KIND, Vec::new()),
            size,
        })
    }

    fn ready_path(&self) -> String {
        child_path(self.node.dir(), READY)
    }

    /// Enters and waits until `size` participants have: `Ok(false)` after
    /// `timeout`, having withdrawn.
    pub async fn enter(&mut self, timeout: Option<Duration>) -> Result<bool, Error> {
        let deadline = deadline_after(timeout);
        let client = self.node.client().clone();
        let ready = self.ready_path();
        let mut events = client.events();
        // The watch comes first: the last to enter may create `ready`
        // any time after our member node exists.
        if client.exists(&ready, true).await?.is_some() {
            return Err(Error::InvalidArgument(format!(
                "the double barrier {} is in use: {ready} exists",
                self.node.dir()
            )));
        }
        self.node.create().await?;
        let members = sorted_entries(client.get_children(self.node.dir(), false).await?, &[KIND]);
        if members.len() >= self.size {
            match client
                .create(&ready, b"", &open_acl_unsafe(), CreateMode::Persistent)
                .await
            {
                Ok(_) | Err(Error::NodeExists { .. }) => return Ok(true),
                Err(e) => return Err(e),
            }
        }
        loop {
            let woken = match client.exists(&ready, true).await {
                Ok(Some(_)) => return Ok(true),
                Ok(None) => wait_for_event(&mut events, &ready, deadline).await?,
                Err(error) => after_connection_loss(error, deadline).await?,
            };
            if woken == Woken::TimedOut {
                self.node.delete().await?;
                return Ok(false);
            }
        }
    }

    /// Leaves and waits until every participant has: `Ok(false)` after
    /// `timeout`.
    pub async fn leave(&mut self, timeout: Option<Duration>) -> Result<bool, Error> {
        let deadline = deadline_after(timeout);
        let client = self.node.client().clone();
        let dir = self.node.dir().to_owned();
        let mut events = client.events();
        loop {
            let children =
                read_or_look_again!(client.get_children(&dir, false).await, deadline, false);
            let members = sorted_entries(children, &[KIND]);
            let me = self.node.name().map(str::to_owned);
            let mine = |name: &str| me.as_deref() == Some(name);
            let (Some(oldest), Some(newest)) = (members.first(), members.last()) else {
                // Everyone is out; the last to see it takes `ready` away.
                match client.delete(&self.ready_path(), -1).await {
                    Ok(()) | Err(Error::NoNode { .. }) => return Ok(true),
                    Err(e) => return Err(e),
                }
            };
            let watched = if members.len() == 1 && mine(&oldest.name) {
                self.node.delete().await?;
                continue;
            } else if mine(&oldest.name) {
                // The oldest leaves last, so the others wait on it alone.
                child_path(&dir, &newest.name)
            } else {
                self.node.delete().await?;
                child_path(&dir, &oldest.name)
            };
            if read_or_look_again!(client.exists(&watched, true).await, deadline, false).is_none() {
                continue;
            }
            if wait_for_event(&mut events, &watched, deadline).await? == Woken::TimedOut {
                return Ok(false);
            }
        }
    }
}
