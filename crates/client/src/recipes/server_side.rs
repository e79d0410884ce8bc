//! Clients of the server-side primitives that Stoa ships as extensions
//! (`examples/extensions/`: `fifo_lock.lua`, `semaphore.lua`,
//! `election.lua`, `rwlock.lua`; see `docs/primitives.md`). Unlike the
//! other recipes they need Stoa, with the extension registered under
//! `/extensions`; the types here only speak its protocol:
//!
//! - Acquire is one create of an ephemeral-sequential *ticket* under the
//!   primitive's node (`<registration path>/<name>`). The reply's stat says
//!   whether the ticket was granted at once (version 1) or waits
//!   (version 0): one round trip when nobody is in the way.
//! - The extension grants a waiting ticket by setting its data once, in the
//!   transaction that releases what it waits for. A waiter watches its own
//!   ticket only, so each release wakes exactly the tickets it grants (no
//!   herd), and a grant made before the watch was set shows in the read
//!   that sets it (no lost wake-up).
//! - Release is the ticket's delete. A holder whose session ends releases
//!   the same way: the server runs the delete of its ephemeral ticket
//!   through the extension, which hands over in that transaction.
//!
//! A ticket's name carries a marker unique to the request, so a create whose
//! reply was lost with the connection is found again instead of queueing
//! twice. Dropping an unreleased [`Ticket`] spawns its delete on the current
//! tokio runtime, if any; otherwise it goes with the session.

use std::time::Duration;

use stoa_proto::opcode::{CreateMode, EventType};
use tokio::time::Instant;

use super::{
    after_connection_loss, check_recipe_path, child_path, deadline_after, spawn_cleanup,
    unique_marker, wait_for_event, Woken,
};
use crate::acl::open_acl_unsafe;
use crate::client::Client;
use crate::error::Error;

/// One request of a server-side primitive: granted (held), or waiting.
#[derive(Debug)]
pub struct Ticket {
    client: Client,
    path: String,
    granted: bool,
    released: bool,
}

impl Ticket {
    /// The ticket's node.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The ticket's name (what a lock's or an election's data names).
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// Whether the ticket is known to be granted (at the create, or by
    /// [`Ticket::wait`]).
    pub fn is_granted(&self) -> bool {
        self.granted
    }

    /// Waits for the grant: `Ok(true)` once the ticket is granted,
    /// `Ok(false)` when `timeout` passes first (the ticket keeps its
    /// place). One read per wake-up, and only the grant wakes it. Fails with
    /// `NoNode` if the ticket is gone (its session ended, or it was
    /// released), or with `SessionExpired`/`Closed`.
    pub async fn wait(&mut self, timeout: Option<Duration>) -> Result<bool, Error> {
        if self.granted {
            return Ok(true);
        }
        let deadline = deadline_after(timeout);
        // Subscribed before the watch is set: its event cannot be missed.
        let mut events = self.client.events();
        loop {
            let stat =
                read_or_look_again!(self.client.exists(&self.path, true).await, deadline, false);
            match stat {
                None => {
                    return Err(Error::NoNode {
                        path: self.path.clone(),
                    })
                }
                Some(stat) if stat.version >= 1 => {
                    self.granted = true;
                    return Ok(true);
                }
                Some(_) => {}
            }
            match wait_for_event(&mut events, &self.path, deadline).await? {
                Woken::TimedOut => return Ok(false),
                // The extensions refuse every client's setData on a
                // ticket: a change of its data is the grant itself, known
                // without another round trip to read it.
                Woken::Changed(EventType::NodeDataChanged) => {
                    self.granted = true;
                    return Ok(true);
                }
                _ => {}
            }
        }
    }

    /// Deletes the ticket: a release when granted (the extension hands over
    /// in the same transaction), a cancelled wait otherwise. A ticket that
    /// is gone already counts as released.
    pub async fn release(mut self) -> Result<(), Error> {
        self.released = true;
        match self.client.delete(&self.path, -1).await {
            Ok(()) | Err(Error::NoNode { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The session this ticket belongs to.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (client, path) = (self.client.clone(), self.path.clone());
        spawn_cleanup(async move {
            if let Err(e) = client.delete(&path, -1).await {
                log::debug!("ticket {path} left to its session: {e}");
            }
        });
    }
}

/// Creates a ticket `<node>/<kind><marker>-<sequence>` with `data`: one
/// round trip. After a lost connection the ticket is looked for by its
/// marker before it is asked for again.
async fn request(
    client: &Client,
    node: &str,
    kind: &str,
    data: &[u8],
    deadline: Option<Instant>,
) -> Result<Ticket, Error> {
    let prefix = format!("{kind}{}-", unique_marker());
    let wanted = child_path(node, &prefix);
    let ticket = |path: String, version: i32| Ticket {
        client: client.clone(),
        path,
        granted: version >= 1,
        released: false,
    };
    loop {
        let lost = match client
            .create2(
                &wanted,
                data,
                &open_acl_unsafe(),
                CreateMode::EphemeralSequential,
            )
            .await
        {
            Ok((path, stat)) => return Ok(ticket(path, stat.version)),
            // Only a lost connection leaves the create's outcome unknown.
            Err(Error::ConnectionLoss { path }) => path,
            Err(e) => return Err(e),
        };
        loop {
            let error = Error::ConnectionLoss { path: lost.clone() };
            if after_connection_loss(error, deadline).await? == Woken::TimedOut {
                return Err(Error::ConnectionLoss { path: lost });
            }
            let names = match client.get_children(node, false).await {
                Ok(names) => names,
                Err(Error::ConnectionLoss { .. }) => continue,
                Err(e) => return Err(e),
            };
            let Some(name) = names.into_iter().find(|n| n.starts_with(&prefix)) else {
                break; // not created: ask again
            };
            let path = child_path(node, &name);
            match client.exists(&path, false).await {
                Ok(Some(stat)) => return Ok(ticket(path, stat.version)),
                Ok(None) => return Err(Error::NoNode { path }),
                Err(Error::ConnectionLoss { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Takes a ticket and waits for its grant; a ticket that times out is
/// cancelled.
async fn acquire(
    client: &Client,
    node: &str,
    kind: &str,
    data: &[u8],
    timeout: Option<Duration>,
) -> Result<Option<Ticket>, Error> {
    let deadline = deadline_after(timeout);
    let mut ticket = request(client, node, kind, data, deadline).await?;
    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    if ticket.wait(left).await? {
        return Ok(Some(ticket));
    }
    ticket.release().await?;
    Ok(None)
}

/// Checks `node` and returns it: `<registration path>/<name>`.
fn instance(node: &str) -> Result<String, Error> {
    check_recipe_path(node)?;
    Ok(node.to_owned())
}

/// The FIFO lock of `fifo_lock.lua` at `node` (the extension's path plus
/// the lock's name: `/lock/jobs` for the extension registered at `/lock`).
///
/// Round trips: acquire 1 when the lock is free; a waiter 1 more to set its
/// watch, then 1 read when its grant arrives. Release 1.
#[derive(Debug, Clone)]
pub struct FifoLock {
    client: Client,
    node: String,
}

impl FifoLock {
    pub fn new(client: Client, node: &str) -> Result<FifoLock, Error> {
        Ok(FifoLock {
            client,
            node: instance(node)?,
        })
    }

    /// The held lock's ticket, or `None` after `timeout` (the request is
    /// cancelled). Waiters are granted in request order.
    pub async fn acquire(&self, timeout: Option<Duration>) -> Result<Option<Ticket>, Error> {
        acquire(&self.client, &self.node, "w-", b"", timeout).await
    }

    /// Queues without waiting: the ticket says whether it holds already.
    pub async fn request(&self) -> Result<Ticket, Error> {
        request(&self.client, &self.node, "w-", b"", None).await
    }

    /// The holder's ticket name; `None` when the lock is free.
    pub async fn holder(&self) -> Result<Option<String>, Error> {
        let (data, _) = self.client.get_data(&self.node, false).await?;
        Ok((!data.is_empty()).then(|| String::from_utf8_lossy(&data).into_owned()))
    }
}

/// The counting semaphore of `semaphore.lua` at `node` (the extension's
/// path plus the semaphore's name). The number of permits is stored on the
/// server, as the node's data: [`Semaphore::create`] sets it.
///
/// Round trips: as [`FifoLock`]'s.
#[derive(Debug, Clone)]
pub struct Semaphore {
    client: Client,
    node: String,
}

impl Semaphore {
    pub fn new(client: Client, node: &str) -> Result<Semaphore, Error> {
        Ok(Semaphore {
            client,
            node: instance(node)?,
        })
    }

    /// Creates the semaphore with `permits` (at least 1; `NodeExists` if it
    /// exists).
    pub async fn create(&self, permits: u32) -> Result<(), Error> {
        self.client
            .create(
                &self.node,
                permits.to_string().as_bytes(),
                &open_acl_unsafe(),
                CreateMode::Persistent,
            )
            .await
            .map(|_| ())
    }

    /// Sets the number of permits: more grant waiters at once; fewer take
    /// none back.
    pub async fn set_permits(&self, permits: u32) -> Result<(), Error> {
        self.client
            .set_data(&self.node, permits.to_string().as_bytes(), -1)
            .await
            .map(|_| ())
    }

    /// A permit's ticket, or `None` after `timeout` (the request is
    /// cancelled). Waiters are granted in request order as permits free up.
    /// `NoNode` if the semaphore was not created.
    pub async fn acquire(&self, timeout: Option<Duration>) -> Result<Option<Ticket>, Error> {
        acquire(&self.client, &self.node, "p-", b"", timeout).await
    }

    /// Queues without waiting: the ticket says whether it holds already.
    pub async fn request(&self) -> Result<Ticket, Error> {
        request(&self.client, &self.node, "p-", b"", None).await
    }
}

/// The leader election of `election.lua` at `node` (the extension's path
/// plus the election's name).
///
/// Round trips: join 1 (it says whether the candidate leads at once); a
/// candidate that waits 1 more to set its watch, then 1 read when it is
/// elected. [`Election::leader`] 2.
#[derive(Debug, Clone)]
pub struct Election {
    client: Client,
    node: String,
}

impl Election {
    pub fn new(client: Client, node: &str) -> Result<Election, Error> {
        Ok(Election {
            client,
            node: instance(node)?,
        })
    }

    /// Joins as a candidate with `data` (say its address). The ticket is
    /// granted when the candidate leads ([`Ticket::wait`] waits for that);
    /// releasing it resigns.
    pub async fn join(&self, data: &[u8]) -> Result<Ticket, Error> {
        request(&self.client, &self.node, "c-", data, None).await
    }

    /// The leader's ticket name and data; `None` when there is no
    /// candidate. With `watch`, a data watch on the election node fires at
    /// the next change of leader.
    pub async fn leader(&self, watch: bool) -> Result<Option<(String, Vec<u8>)>, Error> {
        let mut watch = watch;
        loop {
            let (name, _) = self.client.get_data(&self.node, watch).await?;
            if name.is_empty() {
                return Ok(None);
            }
            let name = String::from_utf8_lossy(&name).into_owned();
            match self
                .client
                .get_data(&child_path(&self.node, &name), false)
                .await
            {
                Ok((data, _)) => return Ok(Some((name, data))),
                // It resigned in between: the election's data names the next.
                Err(Error::NoNode { .. }) => watch = false,
                Err(e) => return Err(e),
            }
        }
    }
}

/// The read-write lock of `rwlock.lua` at `node` (the extension's path
/// plus the lock's name): readers share, a writer holds alone, and tickets
/// are served in request order, so a waiting writer holds back the readers
/// behind it (writers do not starve).
///
/// Round trips: as [`FifoLock`]'s.
#[derive(Debug, Clone)]
pub struct ReadWriteLock {
    client: Client,
    node: String,
}

impl ReadWriteLock {
    pub fn new(client: Client, node: &str) -> Result<ReadWriteLock, Error> {
        Ok(ReadWriteLock {
            client,
            node: instance(node)?,
        })
    }

    /// A read lock's ticket, or `None` after `timeout`.
    pub async fn read(&self, timeout: Option<Duration>) -> Result<Option<Ticket>, Error> {
        acquire(&self.client, &self.node, "read-", b"", timeout).await
    }

    /// A write lock's ticket, or `None` after `timeout`.
    pub async fn write(&self, timeout: Option<Duration>) -> Result<Option<Ticket>, Error> {
        acquire(&self.client, &self.node, "write-", b"", timeout).await
    }
}
