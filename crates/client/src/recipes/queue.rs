//! The FIFO queue: ZooKeeper's queue recipe. Producers add persistent
//! sequential nodes; a consumer takes the oldest by reading then deleting
//! it, and the one whose delete succeeds owns the item.

use std::time::Duration;

use stoa_proto::opcode::CreateMode;

use super::{
    after_connection_loss, check_recipe_path, child_path, deadline_after, ensure_path,
    sequence_number, wait_for_event, Woken,
};
use crate::acl::open_acl_unsafe;
use crate::client::Client;
use crate::error::Error;

const KIND: &str = "item";

/// A FIFO queue of byte strings at `path`.
///
/// - Guarantees: each item is taken by exactly one consumer; items are
///   taken in the order their offers were applied.
/// - Round trips: [`DistributedQueue::offer`] 1; [`DistributedQueue::poll`]
///   3 when an item is there (list, read, delete) plus 2 per item another
///   consumer took first; [`DistributedQueue::take`] as poll, plus 1 and a
///   notification per wait. Every consumer watches the list (a herd, as
///   in ZooKeeper's recipe: any of them may take the next item).
/// - Session loss: items are persistent and survive it. A take cut off by
///   a lost connection may have deleted an item it never returns.
/// - Timeouts and cancellation: `take` returns `Ok(None)` after the
///   timeout. Dropping a take before its delete loses nothing.
#[derive(Debug, Clone)]
pub struct DistributedQueue {
    pub(crate) items: ItemDir,
}

impl DistributedQueue {
    pub fn new(client: Client, path: &str) -> Result<DistributedQueue, Error> {
        Ok(DistributedQueue {
            items: ItemDir::new(client, path)?,
        })
    }

    /// Appends `data`; returns the item's node path.
    pub async fn offer(&self, data: &[u8]) -> Result<String, Error> {
        self.items.add(&format!("{KIND}-"), data).await
    }

    /// Takes the oldest item, `None` when the queue is empty.
    pub async fn poll(&self) -> Result<Option<Vec<u8>>, Error> {
        self.items.take_first(false).await
    }

    /// Takes the oldest item, waiting up to `timeout` for one.
    pub async fn take(&self, timeout: Option<Duration>) -> Result<Option<Vec<u8>>, Error> {
        self.items.take_waiting(timeout).await
    }

    /// How many items are queued.
    pub async fn len(&self) -> Result<usize, Error> {
        self.items.len().await
    }

    pub async fn is_empty(&self) -> Result<bool, Error> {
        Ok(self.items.len().await? == 0)
    }
}

/// A directory of persistent sequential item nodes, taken in the order of
/// their names' sort keys.
#[derive(Debug, Clone)]
pub(crate) struct ItemDir {
    client: Client,
    path: String,
}

/// What orders an item: (priority, sequence); 0 priority for the FIFO.
pub(crate) fn item_order(name: &str) -> Option<(u32, i64)> {
    let sequence = sequence_number(name)?;
    let priority = match name.split('-').collect::<Vec<_>>()[..] {
        [KIND, _] => 0,
        ["prio", priority, _] => priority.parse().ok()?,
        _ => return None,
    };
    Some((priority, sequence))
}

impl ItemDir {
    pub(crate) fn new(client: Client, path: &str) -> Result<ItemDir, Error> {
        check_recipe_path(path)?;
        Ok(ItemDir {
            client,
            path: path.to_owned(),
        })
    }

    pub(crate) async fn add(&self, prefix: &str, data: &[u8]) -> Result<String, Error> {
        let node = child_path(&self.path, prefix);
        let acl = open_acl_unsafe();
        let create = || {
            self.client
                .create(&node, data, &acl, CreateMode::PersistentSequential)
        };
        match create().await {
            Err(Error::NoNode { .. }) => {
                ensure_path(&self.client, &self.path).await?;
                create().await
            }
            other => other,
        }
    }

    async fn sorted(&self, watch: bool) -> Result<Vec<String>, Error> {
        let mut items: Vec<((u32, i64), String)> =
            match self.client.get_children(&self.path, watch).await {
                Ok(children) => children
                    .into_iter()
                    .filter_map(|name| Some((item_order(&name)?, name)))
                    .collect(),
                Err(Error::NoNode { .. }) if !watch => Vec::new(),
                Err(e) => return Err(e),
            };
        items.sort();
        Ok(items.into_iter().map(|(_, name)| name).collect())
    }

    pub(crate) async fn len(&self) -> Result<usize, Error> {
        Ok(self.sorted(false).await?.len())
    }

    /// Takes the first item still there; `watch` leaves a child watch
    /// set when the queue was empty.
    pub(crate) async fn take_first(&self, watch: bool) -> Result<Option<Vec<u8>>, Error> {
        for name in self.sorted(watch).await? {
            let node = child_path(&self.path, &name);
            let data = match self.client.get_data(&node, false).await {
                Ok((data, _)) => data,
                Err(Error::NoNode { .. }) => continue,
                Err(e) => return Err(e),
            };
            match self.client.delete(&node, -1).await {
                Ok(()) => return Ok(Some(data)),
                // Another consumer took it.
                Err(Error::NoNode { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    pub(crate) async fn take_waiting(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Option<Vec<u8>>, Error> {
        let deadline = deadline_after(timeout);
        let mut events = self.client.events();
        loop {
            match self.take_first(true).await {
                Ok(Some(item)) => return Ok(Some(item)),
                Ok(None) => {}
                Err(Error::NoNode { .. }) => ensure_path(&self.client, &self.path).await?,
                Err(e) => {
                    // A take cut off here may have deleted an item (see above).
                    if after_connection_loss(e, deadline).await? == Woken::TimedOut {
                        return Ok(None);
                    }
                    continue;
                }
            }
            if wait_for_event(&mut events, &self.path, deadline).await? == Woken::TimedOut {
                return Ok(None);
            }
        }
    }
}
