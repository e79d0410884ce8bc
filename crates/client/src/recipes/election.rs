//! Leader election: ZooKeeper's election recipe. Candidates create
//! sequential ephemeral nodes carrying their id; the oldest is the leader,
//! and each other candidate watches only its predecessor, so a leader's
//! end wakes only its successor.

use std::time::Duration;

use super::check_recipe_path;
use super::child_path;
use super::sequential::{sorted_entries, Rule, SequenceLock};
use crate::client::Client;
use crate::error::Error;

const KIND: &str = "candidate";

/// One candidate for leadership of a path.
///
/// - Guarantees: at most one leader at a time (the oldest candidate);
///   when the leader resigns or its session ends, the next candidate in
///   line becomes leader.
/// - Round trips: [`LeaderElection::campaign`] 2 when nobody leads, plus 1
///   and a notification per predecessor that goes; [`LeaderElection::resign`]
///   1; [`LeaderElection::current_leader`] 2.
/// - Session loss: the candidate's node is ephemeral: a leader whose
///   session expires or closes stops being leader on the server, and must
///   treat `SessionExpired`/`Closed` errors as lost leadership.
/// - Timeouts and cancellation: as [`super::QueueLock`]; a timed-out
///   campaign withdraws the candidacy. Drop withdraws it too.
#[derive(Debug)]
pub struct LeaderElection {
    lock: SequenceLock,
}

impl LeaderElection {
    /// A candidate known to the others by `id` (what
    /// [`LeaderElection::current_leader`] returns).
    pub fn new(client: Client, path: &str, id: &[u8]) -> Result<LeaderElection, Error> {
        check_recipe_path(path)?;
        Ok(LeaderElection {
            lock: SequenceLock::new(client, path, KIND, &[KIND], Rule::Exclusive, id.to_vec()),
        })
    }

    /// Stands for election and waits to lead: `Ok(true)` once leader,
    /// `Ok(false)` after `timeout` (the candidacy withdrawn).
    pub async fn campaign(&mut self, timeout: Option<Duration>) -> Result<bool, Error> {
        self.lock.acquire(timeout).await
    }

    /// The session this object uses.
    pub fn client(&self) -> &Client {
        self.lock.client()
    }

    /// Whether this candidate leads, as far as it knows.
    pub fn is_leader(&self) -> bool {
        self.lock.is_held()
    }

    /// Gives up leadership; the next candidate takes over. An error when
    /// this candidate is not the leader.
    pub async fn resign(&mut self) -> Result<(), Error> {
        self.lock.release().await
    }

    /// The id of the leader of this election now, if any.
    pub async fn leader(&self) -> Result<Option<Vec<u8>>, Error> {
        Self::current_leader(self.lock.client(), self.lock.dir()).await
    }

    /// The id of the current leader of the election at `path`, `None`
    /// when nobody stands.
    pub async fn current_leader(client: &Client, path: &str) -> Result<Option<Vec<u8>>, Error> {
        check_recipe_path(path)?;
        loop {
            let children = match client.get_children(path, false).await {
                Ok(children) => children,
                Err(Error::NoNode { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            let Some(oldest) = sorted_entries(children, &[KIND]).into_iter().next() else {
                return Ok(None);
            };
            match client
                .get_data(&child_path(path, &oldest.name), false)
                .await
            {
                Ok((id, _)) => return Ok(Some(id)),
                // The leader left between the two reads: ask again.
                Err(Error::NoNode { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
    }
}
