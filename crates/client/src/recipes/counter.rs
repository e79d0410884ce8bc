//! The counter: an integer in one node's data (decimal text, so a shell
//! reads it), changed by a versioned setData that is retried on
//! `BadVersion`: a compare-and-swap loop.

use stoa_proto::opcode::CreateMode;

use super::{check_recipe_path, ensure_path};
use crate::acl::open_acl_unsafe;
use crate::client::Client;
use crate::error::Error;

/// A shared 64-bit counter at `path`; a missing node counts as 0.
///
/// - Guarantees: every [`Counter::add`] is applied exactly once (no update
///   is lost among concurrent adders) and returns the value it produced.
/// - Round trips: `add` 2 (read, versioned write) plus 2 per concurrent
///   writer that won the race; the first add creates the node (1, and 2
///   more when parents are missing). [`Counter::get`] 1.
/// - Session loss: the node is persistent; nothing is held. A call in
///   flight when the connection is lost fails with `ConnectionLoss`, and
///   its write may or may not have been applied.
/// - Cancellation: dropping `add` may or may not apply it; no other harm.
#[derive(Debug, Clone)]
pub struct Counter {
    client: Client,
    path: String,
}

impl Counter {
    pub fn new(client: Client, path: &str) -> Result<Counter, Error> {
        check_recipe_path(path)?;
        Ok(Counter {
            client,
            path: path.to_owned(),
        })
    }

    /// The current value.
    pub async fn get(&self) -> Result<i64, Error> {
        match self.client.get_data(&self.path, false).await {
            Ok((data, _)) => self.parse(&data),
            Err(Error::NoNode { .. }) => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Adds `delta` and returns the new value. Overflow is an error and
    /// changes nothing.
    pub async fn add(&self, delta: i64) -> Result<i64, Error> {
        loop {
            let (value, version) = match self.client.get_data(&self.path, false).await {
                Ok((data, stat)) => (self.parse(&data)?, Some(stat.version)),
                Err(Error::NoNode { .. }) => (0, None),
                Err(e) => return Err(e),
            };
            let next = value.checked_add(delta).ok_or_else(|| {
                Error::InvalidArgument(format!("{} + {delta} overflows {}", value, self.path))
            })?;
            let text = next.to_string();
            let written = match version {
                Some(version) => self
                    .client
                    .set_data(&self.path, text.as_bytes(), version)
                    .await
                    .map(drop),
                None => self.create(text.as_bytes()).await,
            };
            match written {
                Ok(()) => return Ok(next),
                Err(Error::BadVersion { .. } | Error::NodeExists { .. } | Error::NoNode { .. }) => {
                    continue
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub async fn increment(&self) -> Result<i64, Error> {
        self.add(1).await
    }

    async fn create(&self, data: &[u8]) -> Result<(), Error> {
        let acl = open_acl_unsafe();
        let create = || {
            self.client
                .create(&self.path, data, &acl, CreateMode::Persistent)
        };
        match create().await {
            Err(Error::NoNode { .. }) => {
                let parent = &self.path[..self.path.rfind('/').unwrap_or(0)];
                if !parent.is_empty() {
                    ensure_path(&self.client, parent).await?;
                }
                create().await.map(drop)
            }
            other => other.map(drop),
        }
    }

    fn parse(&self, data: &[u8]) -> Result<i64, Error> {
        if data.is_empty() {
            return Ok(0);
        }
        std::str::from_utf8(data)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{} holds {:?}, not a decimal counter",
                    self.path,
                    String::from_utf8_lossy(data)
                ))
            })
    }
}
