//! The semaphore, after Curator's lease design: acquirers queue on a FIFO
//! gate (the queue lock, each watching its predecessor), and only the gate's
//! holder takes a lease (an ephemeral sequential node) and, while the
//! leases number more than the permits, watches the list of leases. A
//! release thus wakes one process, not every waiter (no herd effect).

use std::time::Duration;

use super::sequential::{sorted_entries, OwnNode, Rule, SequenceLock};
use super::{check_recipe_path, child_path, deadline_after, wait_for_event, Woken};
use crate::client::Client;
use crate::error::Error;

const GATE: &str = "gate";
const LEASE: &str = "lease";

/// One acquirer of a counting semaphore on a path. Every participant must
/// use the same number of permits (it is not stored on the server).
///
/// - Guarantees: at most `permits` holders at once (only the gate's holder
///   adds a lease, and keeps it only while the leases are at most
///   `permits`); permits are granted in request order; a release or a
///   holder's session end wakes the one waiter at the gate.
/// - Round trips: acquire 3 when a permit is free (the gate's create and
///   listing together, the lease's create and listing together, the gate's
///   delete), plus a notification and a listing per release awaited at the
///   gate; release 1.
/// - Session loss: gate and lease nodes are ephemeral: a holder whose
///   session ends returns its permit. Waiting calls fail with
///   `SessionExpired` or `Closed`.
/// - Timeouts and cancellation: a timed-out acquire deletes its lease and
///   leaves the gate (`Ok(false)`). A dropped acquire leaves its nodes to the
///   next acquire on this object, which carries on from them, or to drop.
/// - Drop while holding spawns the lease's delete on the current tokio
///   runtime; without one, the lease goes with the session.
#[derive(Debug)]
pub struct Semaphore {
    gate: SequenceLock,
    lease: OwnNode,
    permits: usize,
    held: bool,
}

impl Semaphore {
    /// A semaphore on `path` with `permits` (at least 1) permits.
    pub fn new(client: Client, path: &str, permits: usize) -> Result<Semaphore, Error> {
        check_recipe_path(path)?;
        if permits == 0 {
            return Err(Error::InvalidArgument(format!(
                "a semaphore needs at least one permit: {path}"
            )));
        }
        let gate_dir = child_path(path, "gate");
        let leases_dir = child_path(path, "leases");
        Ok(Semaphore {
            gate: SequenceLock::new(
                client.clone(),
                &gate_dir,
                GATE,
                &[GATE],
                Rule::Exclusive,
                Vec::new(),
            ),
            lease: OwnNode::new(client, &leases_dir, LEASE, Vec::new()),
            permits,
            held: false,
        })
    }

    /// `Ok(true)` once a permit is held, `Ok(false)` after `timeout`.
    pub async fn acquire(&mut self, timeout: Option<Duration>) -> Result<bool, Error> {
        if self.held {
            return Err(Error::InvalidArgument(format!(
                "{} already holds a permit (it is not reentrant)",
                self.lease.dir()
            )));
        }
        let deadline = deadline_after(timeout);
        // Held already when an earlier acquire was dropped past the gate.
        if !self.gate.is_held() && !self.gate.acquire_pipelined(timeout).await? {
            return Ok(false);
        }
        let got = self.lease_within(deadline).await;
        if !matches!(got, Ok(true)) {
            if let Err(e) = self.lease.delete().await {
                log::debug!("lease under {} left to its session: {e}", self.lease.dir());
            }
        }
        self.gate.release().await?;
        self.held = got?;
        Ok(self.held)
    }

    /// As the gate's holder: takes a lease, and waits until the leases
    /// (ours included) are at most the permits.
    async fn lease_within(
        &mut self,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<bool, Error> {
        let client = self.lease.client().clone();
        let dir = self.lease.dir().to_owned();
        let mut events = client.events();
        let (created, listed) = tokio::join!(self.lease.create(), client.get_children(&dir, true));
        let mine = created?;
        let mut first_listing = Some(listed);
        loop {
            let leases = match first_listing.take() {
                // A listing sent before a retried create may miss our lease.
                Some(Ok(leases)) if leases.contains(&mine) => leases,
                _ => read_or_look_again!(client.get_children(&dir, true).await, deadline, false),
            };
            let entries = sorted_entries(leases, &[LEASE]);
            if !entries.iter().any(|e| e.name == mine) {
                // Only a session's end or someone else's delete removes it.
                return Err(Error::NoNode {
                    path: child_path(&dir, &mine),
                });
            }
            if entries.len() <= self.permits {
                return Ok(true);
            }
            if wait_for_event(&mut events, &dir, deadline).await? == Woken::TimedOut {
                return Ok(false);
            }
        }
    }

    /// Returns the permit. An error when this object holds none.
    pub async fn release(&mut self) -> Result<(), Error> {
        if !self.held {
            return Err(Error::InvalidArgument(format!(
                "release of a permit of {} which this object does not hold",
                self.lease.dir()
            )));
        }
        self.lease.delete().await?;
        self.held = false;
        Ok(())
    }

    pub fn is_held(&self) -> bool {
        self.held
    }

    /// The session this object uses.
    pub fn client(&self) -> &Client {
        self.lease.client()
    }

    pub fn permits(&self) -> usize {
        self.permits
    }
}
