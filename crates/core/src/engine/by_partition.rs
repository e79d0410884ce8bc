//! Applying by partition on the engine's one thread: step 2 of owned
//! partitions (docs/partitions.md, "Owned partitions: the plan").
//!
//! Each partition applies its own committed entries as soon as the order
//! lets it (`ApplyOrder::next_ready_on`): once every zxid below is in
//! hand, and nothing of the partitions the entry touches lies below it
//! unapplied. The partitions then stand at different zxids, as threads of
//! their own will, and what clients see must not show it:
//!
//! - **What applying hands the gate waits for the prefix.** Watch events
//!   and write outcomes of an entry above the prefix (the lowest zxid
//!   every partition has closed) are held, and handed over in zxid order
//!   as the prefix passes them. So every connection hears its events and
//!   replies in zxid order, as under the merge.
//! - **Reads wait for a cut.** A session's read (or any reply that carries
//!   a zxid) waits until no partition has applied past the prefix: every
//!   tree is then the one order's state at one zxid, and the reply carries
//!   it. Reads by closed watermark, which wait only for the partition
//!   read, come next.
//! - **A read holds back its session's next write.** The merge serves a
//!   read queued between two writes of its session right after the first
//!   applies, before the second. Applying by partition, the second can be
//!   on a partition that gets there first, and a read answered after it
//!   would see it (the ensemble simulator's seed 3 did). So once a write
//!   is in hand with a reply of its session queued before it, it is a
//!   *fence*: no partition applies it or anything above it until that
//!   reply is out. The reply then sees the session's state before the
//!   write, and carries a zxid below the write's, as ZooKeeper's would.
//!   The lowest fence's read always gets its cut: every write of its
//!   session before it is below the fence.
//! - **What needs a cut takes one.** A snapshot, an installed snapshot, a
//!   leader's seal: every partition first applies all it may, after which
//!   they meet at a cut (`ApplyOrder::at_cut`).
//! - **What spans partitions is a barrier.** An entry that is not a plain
//!   write (sessions, seals, group moves, restores, `/zookeeper`,
//!   extensions; `chains::touched`) carries a link on every partition, so
//!   it applies only once each has applied everything below it.
//!
//! Servers apply in the merge unless configured otherwise
//! (`EngineConfig::apply_lag_seed`): the simulators turn this on, and
//! have each partition apply a random few of its ready entries per turn,
//! as threads on a loaded machine would, so the rules above are checked
//! under crashes, failover, seals and snapshots before threads rely on
//! them.

use std::collections::BTreeMap;

use super::handoff::Applied;
use super::Engine;
use crate::session::{Pending, SessionId};
use crate::sim_rng::Rng;

pub(super) struct ByPartition {
    /// How many ready entries each partition applies in a lagged turn.
    lag: Rng,
    /// Hand-offs of entries applied above the prefix, by zxid.
    held: BTreeMap<i64, Vec<Applied>>,
    /// Sessions whose next reply waits for the partitions to meet at a cut.
    cut_waiters: Vec<SessionId>,
    /// Writes in hand with a reply of their session queued before them:
    /// zxid to (session, cxid). Nothing at or above the lowest applies.
    fences: BTreeMap<i64, (SessionId, i32)>,
}

impl ByPartition {
    pub(super) fn new(seed: u64) -> Self {
        ByPartition {
            lag: Rng(seed),
            held: BTreeMap::new(),
            cut_waiters: Vec::new(),
            fences: BTreeMap::new(),
        }
    }
}

fn zxid_of(applied: &Applied) -> i64 {
    match applied {
        Applied::Fired { zxid, .. } => *zxid,
        Applied::Outcome(outcome) => outcome.zxid,
    }
}

impl Engine {
    pub(super) fn applies_by_partition(&self) -> bool {
        self.by_partition.is_some()
    }

    /// Applies what the order lets each partition apply. `lagged`: in half
    /// the turns, each partition applies at most a few (the rest wait for a
    /// later turn); otherwise all it may, so the partitions meet at a cut.
    pub(super) fn apply_by_partition(&mut self, lagged: bool) {
        self.lift_fences();
        let partitions = self.cores.len();
        let lag = lagged
            && (self.by_partition.as_mut())
                .expect("applying by partition")
                .lag
                .chance(50);
        loop {
            let mut applied_some = false;
            for partition in 0..partitions {
                let budget = match &mut self.by_partition {
                    Some(by) if lag => by.lag.below(3),
                    _ => u64::MAX,
                };
                for _ in 0..budget {
                    if self.out.fatal.is_some() {
                        return;
                    }
                    let fence = self.lowest_fence();
                    let order = self.order.as_mut().expect("several partitions");
                    let Some(ready) = order.next_ready_on(partition, fence) else {
                        break;
                    };
                    applied_some = true;
                    if ready.void {
                        self.skip_void_entry(partition, &ready.entry);
                        continue;
                    }
                    self.follow_chain(partition, &ready.entry);
                    self.apply_entry(partition, ready.entry);
                    if !self.at_cut() {
                        self.stats.applied_past_prefix += 1;
                    }
                }
            }
            if !applied_some || lag {
                break;
            }
        }
        debug_assert!(
            lag || self.at_cut(),
            "every partition applied all it may, yet they are not at a cut"
        );
        self.release_handoffs();
    }

    fn lowest_fence(&self) -> i64 {
        (self.by_partition.as_ref())
            .and_then(|by| by.fences.first_key_value())
            .map_or(i64::MAX, |(&zxid, _)| zxid)
    }

    /// An entry came in hand: a fence if it is a write of its session's
    /// with a reply queued before it.
    pub(super) fn fence_if_replies_before(&mut self, header: &stoa_tree::TxnHeader) {
        if self.replies_before(header.session_id, header.zxid, header.cxid) {
            let by = self.by_partition.as_mut().expect("applying by partition");
            by.fences
                .insert(header.zxid, (header.session_id, header.cxid));
            self.stats.writes_fenced += 1;
        }
    }

    /// Whether `sid`'s queue holds its write of `zxid` (known here by its
    /// zxid, or by its xid if forwarded) behind some reply yet to go out.
    fn replies_before(&self, sid: SessionId, zxid: i64, cxid: i32) -> bool {
        let Some(session) = self.gate.sessions.get(&sid) else {
            return false;
        };
        let mut reply_before = false;
        for pending in &session.queue {
            match pending {
                Pending::Write { xid, zxid: z, .. } => {
                    if *z == zxid || (*z == 0 && *xid == cxid) {
                        return reply_before;
                    }
                }
                _ => reply_before = true,
            }
        }
        false
    }

    /// Drops the fences whose replies before them have gone out.
    fn lift_fences(&mut self) {
        let Some(by) = self.by_partition.as_ref() else {
            return;
        };
        let lifted: Vec<i64> = (by.fences.iter())
            .filter(|(&zxid, &(s, cxid))| !self.replies_before(s, zxid, cxid))
            .map(|(&zxid, _)| zxid)
            .collect();
        let by = self.by_partition.as_mut().expect("checked");
        for zxid in lifted {
            by.fences.remove(&zxid);
        }
    }

    /// Every partition applies all it may: they then meet at a cut.
    pub(super) fn settle_partitions(&mut self) {
        if self.applies_by_partition() {
            self.apply_by_partition(false);
        }
    }

    /// Whether every partition's tree is the one order's state at one
    /// zxid (always, applying in the merge).
    pub(crate) fn at_cut(&self) -> bool {
        self.order.as_ref().is_none_or(|order| order.at_cut())
    }

    /// The zxid a reply carries now: the prefix, applying by partition.
    pub(super) fn prefix_zxid(&self) -> Option<i64> {
        self.by_partition.as_ref()?;
        self.order.as_ref().map(|order| order.prefix())
    }

    /// Holds `applied` if its entry lies above the prefix; else gives it
    /// back, to go to the gate now.
    pub(super) fn hold_handoff(&mut self, applied: Applied) -> Option<Applied> {
        let Some(prefix) = self.prefix_zxid() else {
            return Some(applied);
        };
        let zxid = zxid_of(&applied);
        let by = self.by_partition.as_mut().expect("checked");
        if zxid > prefix {
            by.held.entry(zxid).or_default().push(applied);
            return None;
        }
        // What was held below it goes first (and what is held above it,
        // after).
        self.deliver_held_through(zxid - 1);
        Some(applied)
    }

    /// Hands the gate what was held of zxids up to `zxid`, in zxid order.
    fn deliver_held_through(&mut self, zxid: i64) {
        loop {
            let by = self.by_partition.as_mut().expect("applying by partition");
            let Some(entry) = by.held.first_entry() else {
                break;
            };
            if *entry.key() > zxid {
                break;
            }
            // At or below the prefix now: each goes to the gate at once.
            for applied in entry.remove() {
                self.hand_to_gate(applied);
            }
        }
    }

    /// Hands the gate what the prefix has passed, in zxid order; then the
    /// replies that waited for a cut, if the partitions are at one.
    fn release_handoffs(&mut self) {
        let Some(prefix) = self.prefix_zxid() else {
            return;
        };
        self.deliver_held_through(prefix);
        // A prefix that passed void zxids passed the replies waiting for them.
        self.release_zxid_waiters(prefix);
        if self.at_cut() {
            let by = self.by_partition.as_mut().expect("applying by partition");
            for sid in std::mem::take(&mut by.cut_waiters) {
                self.pump(sid);
            }
        }
    }

    /// `sid`'s next reply waits for a cut: it is pumped at the next one.
    pub(super) fn wait_for_cut(&mut self, sid: SessionId) {
        let by = self
            .by_partition
            .as_mut()
            .expect("only applying by partition is a cut missed");
        if !by.cut_waiters.contains(&sid) {
            by.cut_waiters.push(sid);
        }
    }

    /// Partitions stand apart, or hand-offs are held: a later turn applies
    /// or hands over more.
    pub(crate) fn applying_behind(&self) -> bool {
        self.by_partition.as_ref().is_some_and(|by| {
            !by.held.is_empty()
                || !self.at_cut()
                || self
                    .order
                    .as_ref()
                    .is_some_and(|order| order.has_applicable())
        })
    }
}
