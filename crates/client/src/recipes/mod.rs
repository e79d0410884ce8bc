//! Coordination recipes built from standard ZooKeeper operations only, so
//! they run against Stoa and Apache ZooKeeper alike. They follow
//! ZooKeeper's recipe designs: sequential ephemeral nodes, each waiter
//! watching only the node it waits on (no herd effect) where the recipe
//! allows it.
//!
//! Common rules (each recipe's docs add its own):
//! - Every blocking call takes `timeout: Option<Duration>`; it returns
//!   `Ok(false)` (or `Ok(None)`) when the timeout passes, and `None` waits
//!   without bound. Every blocking call is also cancel-safe: dropping its
//!   future leaves the recipe object consistent, and a node whose create
//!   was in flight is found by the object's unique marker and deleted.
//! - Nodes a recipe owns are ephemeral where the recipe holds something
//!   (locks, permits, candidates, barrier members): a lost session
//!   (expired or closed) releases them on the server. A call that sees the
//!   session end fails with `Error::SessionExpired` or `Error::Closed`,
//!   and the holder must assume it holds nothing. A lost connection is not
//!   a lost session: a waiting call's read that fails with
//!   `ConnectionLoss` is tried again (after a short pause) until the session
//!   comes back, ends, or the timeout passes.
//! - `release` (or its recipe's equivalent) is explicit and async. Dropping
//!   a holding object without it spawns the delete on the current tokio
//!   runtime when there is one; otherwise the node goes with the session.
//! - Parent nodes of a recipe's path are created (persistent) as needed
//!   and left in place.
//!
//! See `docs/recipes.md` for the round trips each operation costs.

/// The value of a read in a wait loop. On `ConnectionLoss` the client is
/// reconnecting: the loop pauses and looks again (`continue`), so a session
/// that comes back keeps its place and one that ended fails the next read
/// with `SessionExpired`; past the deadline it returns `Ok($timed_out)`.
macro_rules! read_or_look_again {
    ($read:expr, $deadline:expr, $timed_out:expr) => {
        match $read {
            Ok(value) => value,
            Err(error) => match $crate::recipes::after_connection_loss(error, $deadline).await? {
                $crate::recipes::Woken::TimedOut => return Ok($timed_out),
                _ => continue,
            },
        }
    };
}

mod barrier;
mod counter;
mod double_barrier;
mod election;
mod priority_queue;
mod queue;
mod queue_lock;
mod rw_lock;
mod semaphore;
mod sequential;
pub mod server_side;
mod tas_lock;

pub use barrier::Barrier;
pub use counter::Counter;
pub use double_barrier::DoubleBarrier;
pub use election::LeaderElection;
pub use priority_queue::PriorityQueue;
pub use queue::DistributedQueue;
pub use queue_lock::{PendingLock, QueueLock};
pub use rw_lock::{ReadLock, ReadWriteLock, WriteLock};
pub use semaphore::Semaphore;
pub use tas_lock::TasLock;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use stoa_proto::opcode::{CreateMode, EventType, KeeperState};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use crate::acl::open_acl_unsafe;
use crate::client::Client;
use crate::error::Error;
use crate::path::validate_path;
use crate::watch::WatchedEvent;

/// When a blocking call gives up; `None` never.
pub(crate) fn deadline_after(timeout: Option<Duration>) -> Option<Instant> {
    timeout.map(|t| Instant::now() + t)
}

/// What ended a wait for a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The watched node or list may have changed (or the connection came
    /// back): look again.
    LookAgain,
    /// An event of this type on the watched path: what changed is known
    /// (a caller that knows what such a change means need not look).
    Changed(EventType),
    TimedOut,
}

/// Waits for an event on `path` from `events` (a subscription made before
/// the watch was set, so the event cannot be missed), a reconnection, or
/// the deadline. A session that ends is an error: what it held is gone.
pub(crate) async fn wait_for_event(
    events: &mut UnboundedReceiver<WatchedEvent>,
    path: &str,
    deadline: Option<Instant>,
) -> Result<Woken, Error> {
    loop {
        let next = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(next) => next,
                Err(_) => return Ok(Woken::TimedOut),
            },
            None => events.recv().await,
        };
        let Some(event) = next else {
            return Err(Error::Closed);
        };
        if event.event_type != EventType::None {
            if event.path == path {
                return Ok(Woken::Changed(event.event_type));
            }
            continue;
        }
        match event.state {
            KeeperState::Expired => {
                return Err(Error::SessionExpired {
                    path: path.to_owned(),
                })
            }
            KeeperState::AuthFailed => {
                return Err(Error::AuthFailed {
                    path: path.to_owned(),
                })
            }
            KeeperState::Closed => return Err(Error::Closed),
            // Watches are set again after a reconnect, but a change seen
            // through SetWatches may name a path we already gave up on:
            // looking again is always safe.
            KeeperState::SyncConnected => return Ok(Woken::LookAgain),
            _ => {}
        }
    }
}

/// How long a wait loop pauses after a lost connection before it looks
/// again: the client is reconnecting meanwhile.
const LOOK_AGAIN_PAUSE: Duration = Duration::from_millis(50);

/// `error` itself, unless it is `ConnectionLoss`: then a pause, and whether
/// the deadline left time to look again.
pub(crate) async fn after_connection_loss(
    error: Error,
    deadline: Option<Instant>,
) -> Result<Woken, Error> {
    if !matches!(error, Error::ConnectionLoss { .. }) {
        return Err(error);
    }
    let resume = Instant::now() + LOOK_AGAIN_PAUSE;
    match deadline {
        Some(deadline) if deadline <= resume => {
            tokio::time::sleep_until(deadline).await;
            Ok(Woken::TimedOut)
        }
        _ => {
            tokio::time::sleep_until(resume).await;
            Ok(Woken::LookAgain)
        }
    }
}

/// Checks a recipe's base path: a valid, non-root node path.
pub(crate) fn check_recipe_path(path: &str) -> Result<(), Error> {
    validate_path(path, false)?;
    if path == "/" {
        return Err(Error::InvalidArgument(
            "a recipe needs a node of its own, not the root /".into(),
        ));
    }
    Ok(())
}

/// `dir/name`.
pub(crate) fn child_path(dir: &str, name: &str) -> String {
    format!("{dir}/{name}")
}

/// Creates `path` and its missing ancestors as empty persistent nodes.
/// One round trip when `path` exists already.
pub(crate) async fn ensure_path(client: &Client, path: &str) -> Result<(), Error> {
    match client.exists(path, false).await? {
        Some(_) => Ok(()),
        None => create_with_parents(client, path).await,
    }
}

async fn create_with_parents(client: &Client, path: &str) -> Result<(), Error> {
    let mut prefix = String::new();
    for component in path.split('/').skip(1) {
        prefix.push('/');
        prefix.push_str(component);
        match client
            .create(&prefix, b"", &open_acl_unsafe(), CreateMode::Persistent)
            .await
        {
            Ok(_) | Err(Error::NodeExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The counter a sequential create appended: the name's last ten digits.
pub(crate) fn sequence_number(name: &str) -> Option<i64> {
    let digits = name.len().checked_sub(10).and_then(|at| name.get(at..))?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A token no other recipe object (in this or another process) uses: it
/// names the nodes one object creates, so a node whose create reply was
/// lost (a dropped future, a lost connection) can be found again.
pub(crate) fn unique_marker() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let count = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    format!(
        "{:x}{:x}{:x}",
        std::process::id(),
        nanos & 0xffff_ffff,
        count
    )
}

/// The outcome of a recipe task: its panic goes on in the caller; a task
/// stopped by its runtime shutting down finds the session closed too.
pub(crate) fn joined<T>(
    done: Result<Result<T, Error>, tokio::task::JoinError>,
) -> Result<T, Error> {
    match done {
        Ok(outcome) => outcome,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(Error::Closed),
    }
}

/// Runs `cleanup` on the current tokio runtime, if any: what `Drop` can do
/// for a node that `release` was not called for.
pub(crate) fn spawn_cleanup<F>(cleanup: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(cleanup);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_are_the_last_ten_digits() {
        assert_eq!(sequence_number("lock-ab-0000000042"), Some(42));
        assert_eq!(sequence_number("0000000007"), Some(7));
        assert_eq!(sequence_number("lock-ab-00000x0042"), None);
        assert_eq!(sequence_number("short"), None);
    }

    #[test]
    fn markers_differ() {
        assert_ne!(unique_marker(), unique_marker());
        assert!(!unique_marker().contains('-'));
    }

    #[test]
    fn the_root_is_no_recipe_path() {
        assert!(check_recipe_path("/").is_err());
        assert!(check_recipe_path("a").is_err());
        assert!(check_recipe_path("/locks/a").is_ok());
    }
}
