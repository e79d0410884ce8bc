//! What the queue-shaped recipes share: the one ephemeral sequential node a
//! recipe object owns (found again by its marker when a create's reply was
//! lost), the sorted view of its siblings, and waiting for one's turn by
//! watching only the node one waits on.

use std::time::Duration;

use stoa_proto::opcode::CreateMode;
use tokio::time::Instant;

use super::{
    child_path, deadline_after, ensure_path, sequence_number, spawn_cleanup, unique_marker,
    wait_for_event, Woken,
};
use crate::acl::open_acl_unsafe;
use crate::client::Client;
use crate::error::Error;

/// How often a create whose reply was lost (`ConnectionLoss`) is looked
/// for and sent again before the error is passed on.
const CREATE_ATTEMPTS: usize = 5;

/// A recipe child node: `{kind}-{marker}-{sequence}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) sequence: i64,
}

/// The children of `kinds` (all recipe children when empty) in the order
/// they were created. Names that are not recipe nodes are ignored: a
/// recipe directory may hold other nodes (the double barrier's `ready`).
pub(crate) fn sorted_entries(children: Vec<String>, kinds: &[&str]) -> Vec<Entry> {
    let mut entries: Vec<Entry> = children
        .into_iter()
        .filter_map(|name| {
            let sequence = sequence_number(&name)?;
            let (kind, _) = name.split_once('-')?;
            if !kinds.is_empty() && !kinds.contains(&kind) {
                return None;
            }
            Some(Entry {
                kind: kind.to_owned(),
                name: name.clone(),
                sequence,
            })
        })
        .collect();
    entries.sort_by_key(|entry| entry.sequence);
    entries
}

/// The ephemeral sequential node of one recipe object under `dir`.
#[derive(Debug)]
pub(crate) struct OwnNode {
    client: Client,
    dir: String,
    kind: &'static str,
    marker: String,
    data: Vec<u8>,
    /// The node's name once its create's reply arrived.
    name: Option<String>,
    /// A create was sent whose reply was not seen (a dropped future, a lost
    /// connection): a node with our marker may exist.
    unsure: bool,
}

impl OwnNode {
    pub(crate) fn new(client: Client, dir: &str, kind: &'static str, data: Vec<u8>) -> OwnNode {
        debug_assert!(!kind.contains('-'), "a kind is one name component");
        OwnNode {
            client,
            dir: dir.to_owned(),
            kind,
            marker: unique_marker(),
            data,
            name: None,
            unsure: false,
        }
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn dir(&self) -> &str {
        &self.dir
    }

    pub(crate) fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    pub(crate) fn path(&self) -> Option<String> {
        self.name.as_deref().map(|name| child_path(&self.dir, name))
    }

    /// Creates the node unless this object has one; its name. One round
    /// trip (two more the first time the directory is missing).
    pub(crate) async fn create(&mut self) -> Result<String, Error> {
        for _ in 0..CREATE_ATTEMPTS {
            if self.unsure {
                self.name = self.find_own().await?;
                self.unsure = false;
            }
            if let Some(name) = &self.name {
                return Ok(name.clone());
            }
            let prefix = child_path(&self.dir, &format!("{}-{}-", self.kind, self.marker));
            self.unsure = true;
            let created = self
                .client
                .create(
                    &prefix,
                    &self.data,
                    &open_acl_unsafe(),
                    CreateMode::EphemeralSequential,
                )
                .await;
            match created {
                Ok(path) => {
                    let name = path.rsplit('/').next().unwrap_or_default().to_owned();
                    self.name = Some(name.clone());
                    self.unsure = false;
                    return Ok(name);
                }
                Err(Error::ConnectionLoss { .. }) => continue,
                Err(Error::NoNode { .. }) => {
                    self.unsure = false;
                    ensure_path(&self.client, &self.dir).await?;
                }
                Err(e) => {
                    self.unsure = false;
                    return Err(e);
                }
            }
        }
        Err(Error::ConnectionLoss {
            path: self.dir.clone(),
        })
    }

    /// The node with our marker, if one exists.
    async fn find_own(&self) -> Result<Option<String>, Error> {
        let tag = format!("-{}-", self.marker);
        let children = match self.client.get_children(&self.dir, false).await {
            Ok(children) => children,
            Err(Error::NoNode { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(children.into_iter().find(|name| name.contains(&tag)))
    }

    /// Deletes the node if this object has (or may have) one. Deleting an
    /// already deleted node succeeds.
    pub(crate) async fn delete(&mut self) -> Result<(), Error> {
        if self.unsure {
            self.name = self.find_own().await?;
            self.unsure = false;
        }
        let Some(path) = self.path() else {
            return Ok(());
        };
        match self.client.delete(&path, -1).await {
            Ok(()) | Err(Error::NoNode { .. }) => {
                self.name = None;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

impl Drop for OwnNode {
    fn drop(&mut self) {
        if self.name.is_none() && !self.unsure {
            return;
        }
        let (client, dir, marker) = (
            self.client.clone(),
            std::mem::take(&mut self.dir),
            std::mem::take(&mut self.marker),
        );
        let (name, unsure) = (self.name.take(), self.unsure);
        spawn_cleanup(async move {
            let name = match (name, unsure) {
                (Some(name), _) => Some(name),
                (None, true) => {
                    let tag = format!("-{marker}-");
                    let children = client.get_children(&dir, false).await;
                    children
                        .ok()
                        .and_then(|names| names.into_iter().find(|name| name.contains(&tag)))
                }
                (None, false) => None,
            };
            if let Some(name) = name {
                if let Err(e) = client.delete(&child_path(&dir, &name), -1).await {
                    log::debug!("recipe node {dir}/{name} left to its session: {e}");
                }
            }
        });
    }
}

/// Which sibling an owner of a sequential node waits for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Turn<'a> {
    Mine,
    /// Wait until this node is gone.
    After(&'a Entry),
}

/// How a sequential lock decides whose turn it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    /// Only the oldest node holds; each waiter watches its predecessor.
    Exclusive,
    /// Holds unless an older `write` node exists; watches the newest one.
    Shared,
}

impl Rule {
    pub(crate) fn turn<'a>(self, entries: &'a [Entry], index: usize) -> Turn<'a> {
        assert!(index < entries.len());
        match self {
            Rule::Exclusive if index == 0 => Turn::Mine,
            Rule::Exclusive => Turn::After(&entries[index - 1]),
            Rule::Shared => match entries[..index].iter().rev().find(|e| e.kind == "write") {
                Some(writer) => Turn::After(writer),
                None => Turn::Mine,
            },
        }
    }
}

/// Waits until `rule` gives `node` its turn among the siblings of `kinds`:
/// `Ok(false)` when `deadline` passes first.
pub(crate) async fn wait_for_turn(
    node: &OwnNode,
    kinds: &[&str],
    rule: Rule,
    deadline: Option<Instant>,
) -> Result<bool, Error> {
    let me = node.name().expect("wait_for_turn needs a created node");
    let client = node.client();
    let dir = node.dir();
    // Subscribed before any watch is set, so no event can slip by.
    let mut events = client.events();
    loop {
        let children = read_or_look_again!(client.get_children(dir, false).await, deadline, false);
        let entries = sorted_entries(children, kinds);
        let Some(index) = entries.iter().position(|e| e.name == me) else {
            // Only a session's end or someone else's delete removes it.
            return Err(Error::NoNode {
                path: child_path(dir, me),
            });
        };
        let watched = match rule.turn(&entries, index) {
            Turn::Mine => return Ok(true),
            Turn::After(entry) => {
                let path = child_path(dir, &entry.name);
                if read_or_look_again!(client.exists(&path, true).await, deadline, false).is_none()
                {
                    continue;
                }
                path
            }
        };
        if wait_for_event(&mut events, &watched, deadline).await? == Woken::TimedOut {
            return Ok(false);
        }
    }
}

/// A lock held by owning a sequential node: the queue lock, both sides of
/// the read-write lock, the semaphore's gate and the election share it.
#[derive(Debug)]
pub(crate) struct SequenceLock {
    node: OwnNode,
    kinds: &'static [&'static str],
    rule: Rule,
    held: bool,
}

impl SequenceLock {
    pub(crate) fn new(
        client: Client,
        dir: &str,
        kind: &'static str,
        kinds: &'static [&'static str],
        rule: Rule,
        data: Vec<u8>,
    ) -> SequenceLock {
        assert!(kinds.contains(&kind), "a lock competes with its own kind");
        SequenceLock {
            node: OwnNode::new(client, dir, kind, data),
            kinds,
            rule,
            held: false,
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        self.held
    }

    pub(crate) fn node_path(&self) -> Option<String> {
        self.node.path()
    }

    pub(crate) fn dir(&self) -> &str {
        self.node.dir()
    }

    pub(crate) fn client(&self) -> &Client {
        self.node.client()
    }

    fn refuse_if_held(&self) -> Result<(), Error> {
        if self.held {
            return Err(Error::InvalidArgument(format!(
                "{} is already held by this object (it is not reentrant)",
                self.node.path().unwrap_or_default()
            )));
        }
        Ok(())
    }

    /// Create, then list the siblings: two round trips when free.
    pub(crate) async fn acquire(&mut self, timeout: Option<Duration>) -> Result<bool, Error> {
        self.refuse_if_held()?;
        let deadline = deadline_after(timeout);
        self.node.create().await?;
        self.wait(deadline).await
    }

    /// Create and list the siblings at once (the list is answered after
    /// the create, in session order): one round trip when free.
    pub(crate) async fn acquire_pipelined(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<bool, Error> {
        self.refuse_if_held()?;
        let deadline = deadline_after(timeout);
        let client = self.node.client().clone();
        let dir = self.node.dir().to_owned();
        let (created, listed) = tokio::join!(self.node.create(), client.get_children(&dir, false));
        let name = created?;
        if let Ok(children) = listed {
            let entries = sorted_entries(children, self.kinds);
            if let Some(index) = entries.iter().position(|e| e.name == name) {
                if self.rule.turn(&entries, index) == Turn::Mine {
                    self.held = true;
                    return Ok(true);
                }
            }
        }
        self.wait(deadline).await
    }

    /// Waits for the turn of the node this object already created; gives
    /// the place up on timeout or error.
    async fn wait(&mut self, deadline: Option<Instant>) -> Result<bool, Error> {
        match wait_for_turn(&self.node, self.kinds, self.rule, deadline).await {
            Ok(true) => {
                self.held = true;
                Ok(true)
            }
            Ok(false) => {
                self.node.delete().await?;
                Ok(false)
            }
            Err(e) => {
                if let Err(cleanup) = self.node.delete().await {
                    log::debug!("giving up a place in {} failed: {cleanup}", self.dir());
                }
                Err(e)
            }
        }
    }

    /// Deletes the node: one round trip.
    pub(crate) async fn release(&mut self) -> Result<(), Error> {
        if !self.held {
            return Err(Error::InvalidArgument(format!(
                "release of {} which this object does not hold",
                self.dir()
            )));
        }
        self.node.delete().await?;
        self.held = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(names: &[&str]) -> Vec<Entry> {
        sorted_entries(names.iter().map(|s| s.to_string()).collect(), &[])
    }

    #[test]
    fn entries_sort_by_sequence_whatever_their_kind() {
        let sorted = entries(&["write-b-0000000003", "ready", "read-a-0000000001"]);
        let names: Vec<&str> = sorted.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["read-a-0000000001", "write-b-0000000003"]);
    }

    #[test]
    fn each_rule_names_whom_to_wait_for() {
        let all = entries(&[
            "read-a-0000000001",
            "write-b-0000000002",
            "read-c-0000000003",
            "read-d-0000000004",
        ]);
        assert_eq!(Rule::Exclusive.turn(&all, 0), Turn::Mine);
        assert_eq!(Rule::Exclusive.turn(&all, 2), Turn::After(&all[1]));
        assert_eq!(Rule::Shared.turn(&all, 0), Turn::Mine);
        assert_eq!(Rule::Shared.turn(&all, 3), Turn::After(&all[1]));
    }
}
