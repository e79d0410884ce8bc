//! The one order a server's partitions apply in (issue 23; docs/partitions.md,
//! "One order for every partition").
//!
//! The leader hands out zxids from one dense counter shared by the
//! partitions: within an epoch the counter steps by one whatever partition
//! a transaction goes to, so the global order is the order of the zxids,
//! and a server knows what comes after the last zxid it applied: the next
//! counter value, unless that one is void. Each partition's raft group
//! delivers its committed entries in its own log order (which is zxid
//! order); this module merges them back into the one order, so that every
//! server applies a prefix of the same history, as ZooKeeper's servers do.
//!
//! A zxid is void when it was handed out and never committed (its leader
//! died first), and every zxid between one epoch's last and the next
//! epoch's first is void. Only a leader can know which: once every entry
//! in its logs is committed, anything missing from them never will be.
//! Its first transaction is then a seal, in partition 0's group: one void
//! range from the first zxid missing up to the seal's own. What waits
//! above a missing zxid is committed in its group's log but voided too:
//! no server applied it (the order waited), so no client heard of it, and
//! a session whose write was lost in one group must not see its next,
//! committed in another group, apply without it (ZooKeeper applies a
//! session's writes in order or not at all). A seal's range takes effect
//! when it commits, and a voided entry passes as nothing whenever its
//! group delivers it; the seal itself applies in its place in the order,
//! as a transaction that changes nothing. Every range a seal names is
//! below its zxid, so a server that has applied the seal needs none of
//! them again: a cut (below) carries no ranges, and an entry at or below
//! the applied zxid delivered after it is one voided.
//!
//! An operation over several partitions (a create whose parent lives on
//! another, a session's close, a `multi`) is one entry in one group's log
//! with a part for each partition it touches: it commits or not as a
//! whole, so no partition ever needs another's verdict on it.
//!
//! Snapshots are of the whole server, every partition at one [`Cut`] of
//! the order, taken, shipped to a lagging follower, installed and
//! recovered together. One partition's snapshot alone cannot be: the
//! entries it replaces can carry parts for the other partitions, which
//! would then never apply there (the model in the tests found that).
//!
//! Pure: no I/O, no clock. `T` is whatever the engine keeps per entry.

use std::collections::{BTreeMap, VecDeque};

/// A point of the order every partition has reached: what a snapshot of
/// the server is taken at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cut {
    /// Every zxid at or below this is applied on every partition or void.
    pub zxid: i64,
    /// Each partition's raft index applied at that point. A seal whose
    /// ranges reach above `zxid` is not applied yet, so it lies past these
    /// indices and comes again after a restart or an install.
    pub indices: Vec<u64>,
}

/// A committed entry whose turn has come.
#[derive(Debug, PartialEq, Eq)]
pub struct Ready<T> {
    pub partition: usize,
    pub index: u64,
    /// None: an entry outside the order (a new leader's empty entry).
    pub zxid: Option<i64>,
    /// Its zxid is void: a seal voided it with everything above the first
    /// zxid lost (see `ApplyOrder::seal`); it applies as nothing.
    pub void: bool,
    pub entry: T,
}

#[derive(Debug, Clone)]
struct Waiting<T> {
    index: u64,
    zxid: Option<i64>,
    entry: T,
}

/// Disjoint, non-adjacent inclusive ranges of void zxids.
#[derive(Debug, Clone, Default)]
struct Voids(BTreeMap<i64, i64>);

impl Voids {
    fn add(&mut self, mut lo: i64, mut hi: i64) {
        if lo > hi {
            return;
        }
        // Swallow every range that overlaps or touches [lo, hi].
        let touching: Vec<(i64, i64)> = self
            .0
            .range(..=hi.saturating_add(1))
            .rev()
            .take_while(|(_, &end)| end >= lo.saturating_sub(1))
            .map(|(&start, &end)| (start, end))
            .collect();
        for (start, end) in touching {
            self.0.remove(&start);
            lo = lo.min(start);
            hi = hi.max(end);
        }
        self.0.insert(lo, hi);
    }

    /// Whether every zxid in [lo, hi] is void (an empty range is).
    fn covers(&self, lo: i64, hi: i64) -> bool {
        lo > hi
            || self
                .0
                .range(..=lo)
                .next_back()
                .is_some_and(|(_, &end)| end >= hi)
    }

    /// Forgets the ranges wholly at or below `zxid`.
    fn forget_through(&mut self, zxid: i64) {
        // Disjoint and sorted: those wholly at or below `zxid` come first.
        // Runs for every entry applied, mostly with no range at all.
        while let Some(first) = self.0.first_entry() {
            if *first.get() > zxid {
                break;
            }
            first.remove();
        }
    }

    #[cfg(test)]
    fn list(&self) -> Vec<(i64, i64)> {
        self.0.iter().map(|(&lo, &hi)| (lo, hi)).collect()
    }
}

/// Merges the partitions' committed entries into the one order.
#[derive(Debug, Clone)]
pub struct ApplyOrder<T> {
    /// Every zxid at or below is applied on every partition or void.
    applied: i64,
    applied_index: Vec<u64>,
    voids: Voids,
    waiting: Vec<VecDeque<Waiting<T>>>,
}

impl<T> ApplyOrder<T> {
    /// A server of `partitions` starting from a snapshot taken at `cut`
    /// (a default cut: no snapshot).
    pub fn recover(partitions: usize, cut: &Cut) -> Self {
        assert!(partitions >= 1, "a server has at least one partition");
        assert!(
            cut.indices.is_empty() || cut.indices.len() == partitions,
            "a cut of {} partitions for a server of {partitions}",
            cut.indices.len()
        );
        let mut order = ApplyOrder {
            applied: 0,
            applied_index: vec![0; partitions],
            voids: Voids::default(),
            waiting: (0..partitions).map(|_| VecDeque::new()).collect(),
        };
        order.restore(cut);
        order
    }

    /// Takes the cut's state. A partition's applied index never goes
    /// back: past the cut's index it can only have applied entries
    /// outside the order (the cut's zxid is at or above the applied one).
    fn restore(&mut self, cut: &Cut) {
        self.applied = cut.zxid;
        for (index, &at) in self.applied_index.iter_mut().zip(&cut.indices) {
            *index = (*index).max(at);
        }
        self.voids.forget_through(self.applied);
    }

    /// Every zxid at or below this is applied on every partition or void.
    pub fn applied(&self) -> i64 {
        self.applied
    }

    pub fn applied_index(&self, partition: usize) -> u64 {
        self.applied_index[partition]
    }

    /// The index of the last entry of `partition` committed here: waiting,
    /// or applied.
    pub fn last_index(&self, partition: usize) -> u64 {
        self.waiting[partition]
            .back()
            .map_or(self.applied_index[partition], |w| w.index)
    }

    /// The cut a snapshot of the server taken now is at.
    pub fn cut(&self) -> Cut {
        Cut {
            zxid: self.applied,
            indices: self.applied_index.clone(),
        }
    }

    /// Partition `partition`'s group committed the entry at `index`
    /// (`zxid`: None for an entry outside the order).
    pub fn committed(&mut self, partition: usize, index: u64, zxid: Option<i64>, entry: T) {
        let last = self.last_index(partition);
        assert_eq!(
            index,
            last + 1,
            "partition {partition} committed index {index} after {last}"
        );
        // An entry at or below the applied zxid is one a seal voided, its
        // group delivering it after the seal applied: it passes as void.
        self.waiting[partition].push_back(Waiting { index, zxid, entry });
    }

    /// A seal committed: no zxid in these inclusive ranges will ever exist.
    pub fn add_voids(&mut self, ranges: &[(i64, i64)]) {
        for &(lo, hi) in ranges {
            self.voids.add(lo.max(self.applied + 1), hi);
        }
    }

    /// The ranges of the leader's seal, the transaction it proposes with
    /// zxid `next` in partition 0's group before any other: the void
    /// ranges between what it applied, every entry waiting, and `next`.
    /// They take effect here at once (the leader applies what waited
    /// behind the gaps).
    ///
    /// Only a leader may seal, and only once every entry in its logs is
    /// committed and passed to [`committed`](Self::committed): then a zxid
    /// missing from them was never committed and never will be.
    pub fn seal(&mut self, next: i64) -> Vec<(i64, i64)> {
        let mut present: Vec<i64> = (self.waiting.iter().flatten())
            .filter_map(|w| w.zxid)
            .filter(|&zxid| zxid > self.applied && !self.voids.covers(zxid, zxid))
            .collect();
        present.sort_unstable();
        let mut previous = self.applied;
        for zxid in present.into_iter().chain(std::iter::once(next)) {
            assert!(
                zxid > previous,
                "zxid {zxid:#x} twice or not above {previous:#x}"
            );
            if !self.voids.covers(previous + 1, zxid - 1) {
                // The first zxid lost, and everything above it up to the
                // seal: what waits above a lost zxid was applied nowhere
                // (the order waited for it), so no client heard of it, and
                // one session's write must not apply without an earlier
                // one of its that was lost (its next went to another
                // group's log, which committed it).
                let ranges = vec![(previous + 1, next - 1)];
                self.add_voids(&ranges);
                return ranges;
            }
            previous = zxid;
        }
        Vec::new()
    }

    /// The server installed a leader's snapshot taken at `cut`, every
    /// partition at once. What waited at or below the cut's indices is
    /// in it; the ranges of seals this server has and the cut has not
    /// applied stay known.
    pub fn install(&mut self, cut: &Cut) {
        assert_eq!(
            cut.indices.len(),
            self.waiting.len(),
            "a cut of every partition"
        );
        assert!(
            cut.zxid >= self.applied,
            "a snapshot at {:#x} behind the applied {:#x}",
            cut.zxid,
            self.applied
        );
        for (waiting, &index) in self.waiting.iter_mut().zip(&cut.indices) {
            while waiting.front().is_some_and(|w| w.index <= index) {
                waiting.pop_front();
            }
        }
        self.restore(cut);
    }

    /// The partition whose head entry goes next, if any may: an entry
    /// outside the order at once, else the head whose zxid follows
    /// `applied` (every zxid between them void).
    fn next_partition(&self) -> Option<usize> {
        let heads = (self.waiting.iter().enumerate())
            .filter_map(|(p, waiting)| Some((p, waiting.front()?)));
        let mut next = None;
        for (p, head) in heads {
            match head.zxid {
                None => return Some(p),
                Some(zxid) if self.is_void(zxid) => return Some(p),
                Some(zxid) if self.voids.covers(self.applied + 1, zxid - 1) => next = Some(p),
                Some(_) => {}
            }
        }
        next
    }

    /// A zxid that will never apply: void, or at or below the applied one
    /// (a voided entry its group delivered after its seal applied).
    fn is_void(&self, zxid: i64) -> bool {
        zxid <= self.applied || self.voids.covers(zxid, zxid)
    }

    /// The next entry to apply, if its turn has come.
    pub fn next_ready(&mut self) -> Option<Ready<T>> {
        let partition = self.next_partition()?;
        let Waiting { index, zxid, entry } = self.waiting[partition].pop_front()?;
        self.applied_index[partition] = index;
        let void = zxid.is_some_and(|zxid| self.is_void(zxid));
        if let (Some(zxid), false) = (zxid, void) {
            self.applied = zxid;
            self.voids.forget_through(zxid);
        }
        Some(Ready {
            partition,
            index,
            zxid,
            void,
            entry,
        })
    }
}

#[cfg(test)]
mod tests;
