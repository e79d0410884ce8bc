//! The priority queue: the FIFO queue's items named `prio-{priority}-`
//! with the priority zero-padded to ten digits, so the children sort by
//! priority, then arrival. Lower numbers come first.

use std::time::Duration;

use super::queue::ItemDir;
use crate::client::Client;
use crate::error::Error;

/// A priority queue of byte strings at `path`: the item with the lowest
/// priority number is taken first, ties in arrival order.
///
/// Guarantees, round trips, session loss and cancellation: as
/// [`super::DistributedQueue`].
#[derive(Debug, Clone)]
pub struct PriorityQueue {
    items: ItemDir,
}

impl PriorityQueue {
    pub fn new(client: Client, path: &str) -> Result<PriorityQueue, Error> {
        Ok(PriorityQueue {
            items: ItemDir::new(client, path)?,
        })
    }

    /// Adds `data` with `priority` (0 first); returns the item's path.
    pub async fn offer(&self, priority: u32, data: &[u8]) -> Result<String, Error> {
        self.items.add(&format!("prio-{priority:010}-"), data).await
    }

    /// Takes the first item, `None` when the queue is empty.
    pub async fn poll(&self) -> Result<Option<Vec<u8>>, Error> {
        self.items.take_first(false).await
    }

    /// Takes the first item, waiting up to `timeout` for one.
    pub async fn take(&self, timeout: Option<Duration>) -> Result<Option<Vec<u8>>, Error> {
        self.items.take_waiting(timeout).await
    }

    pub async fn len(&self) -> Result<usize, Error> {
        self.items.len().await
    }

    pub async fn is_empty(&self) -> Result<bool, Error> {
        Ok(self.items.len().await? == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::queue::item_order;

    #[test]
    fn items_order_by_priority_then_sequence() {
        let mut names = vec![
            "prio-0000000002-0000000001",
            "prio-0000000001-0000000003",
            "prio-0000000001-0000000002",
        ];
        names.sort_by_key(|name| item_order(name).unwrap());
        assert_eq!(
            names,
            [
                "prio-0000000001-0000000002",
                "prio-0000000001-0000000003",
                "prio-0000000002-0000000001"
            ]
        );
        assert_eq!(item_order("item-0000000009"), Some((0, 9)));
        assert_eq!(item_order("junk"), None);
    }
}
