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
//! **Applying by partition** (step 2 of owned partitions, docs/partitions.md).
//! Besides the merge ([`ApplyOrder::next_ready`]), each partition may take
//! its own next entry ([`ApplyOrder::next_ready_on`]) without waiting for
//! the others to apply theirs. An entry of zxid `z` may apply once every
//! zxid below `z` is in hand here (committed in its group's log) or void
//! ([`ApplyOrder::known`]), and once nothing of the partitions it touches
//! lies below it unapplied. The first condition keeps the seal's rule
//! sound: a seal voids everything above the first zxid missing from the
//! leader's logs, and anything committed is in every later leader's logs,
//! so an entry with nothing missing below it is never voided. It costs a
//! partition a wait for the others' commits, never for their applying.
//! A partition's state is then the history's projection at its
//! [`closed`](ApplyOrder::closed) zxid, and [`applied`](ApplyOrder::applied)
//! is the lowest of those: the prefix every partition has reached.
//!
//! Pure: no I/O, no clock. `T` is whatever the engine keeps per entry.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

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
    /// Taken away: it counts as applied once the caller says so
    /// (`ApplyOrder::applied_away`).
    pub away: bool,
    pub entry: T,
}

#[derive(Debug, Clone)]
struct Waiting<T> {
    index: u64,
    zxid: Option<i64>,
    /// It has parts on other partitions too (`ApplyOrder::others`).
    crosses: bool,
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
        // Asked of every entry in hand, mostly with no range at all.
        lo > hi
            || (!self.0.is_empty()
                && (self.0.range(..=lo).next_back()).is_some_and(|(_, &end)| end >= hi))
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

/// Zxids in hand or void: every one at or below `through`, and ranges
/// above it.
#[derive(Debug, Clone, Default)]
struct Known {
    through: i64,
    /// Ranges above `through + 1` by their first zxid, first to last: a
    /// few at most in steady traffic (a partition's entries arriving ahead
    /// of another's), where a `BTreeMap` allocated a node each time it
    /// went from empty to one.
    ahead: VecDeque<(i64, i64)>,
}

impl Known {
    fn mark(&mut self, lo: i64, hi: i64) {
        if hi <= self.through {
            return;
        }
        if lo > self.through + 1 {
            match self.ahead.binary_search_by_key(&lo, |&(first, _)| first) {
                Ok(at) => self.ahead[at].1 = self.ahead[at].1.max(hi),
                Err(at) => self.ahead.insert(at, (lo, hi)),
            }
            return;
        }
        self.through = hi;
        // Swallow the ranges now touching `through`.
        while let Some(&(first, end)) = self.ahead.front() {
            if first > self.through + 1 {
                break;
            }
            self.through = self.through.max(end);
            self.ahead.pop_front();
        }
    }
}

/// Merges the partitions' committed entries into the one order, or lets
/// each partition apply its own (module docs, "Applying by partition").
#[derive(Debug, Clone)]
pub struct ApplyOrder<T> {
    /// Every zxid at or below is applied on every partition or void.
    applied: i64,
    applied_index: Vec<u64>,
    voids: Voids,
    waiting: Vec<VecDeque<Waiting<T>>>,
    known: Known,
    /// Per partition: the zxids of entries in other groups' logs with a
    /// part on it, in hand, neither applied nor void.
    crossing: Vec<BTreeSet<i64>>,
    /// The other partitions of each entry waiting with parts on some, by
    /// zxid (kept aside: most entries have none).
    others: BTreeMap<i64, Vec<u32>>,
    /// Per partition: the zxid of the last entry applied with a part on it.
    last_applied: Vec<i64>,
    /// Per partition, in order: the zxids of its entries taken to apply
    /// elsewhere (`next_ready_on` with `away`), not yet applied there
    /// (`applied_away`). Its state stands below the first.
    away: Vec<VecDeque<i64>>,
    /// Bumped by every change, before it: by each `pub` method that takes
    /// `&mut self` on entry, but for `next_ready` and `next_ready_on`,
    /// whose changes are all in `take` and `take_away`, which bump it.
    /// What the memos below hold is current while they carry this number.
    generation: u64,
    /// (generation, value) of each partition's `closed` and of `prefix`.
    /// The engine asks for them several times per request (every reply
    /// carries the prefix; every read asks its partition's closed zxid),
    /// between changes that come once per entry. `&self` methods fill
    /// them, and `reach_prefix` after a change that nothing follows (a
    /// `&mut self` method that asked `closed` or `prefix` before a change
    /// of its own would leave them stale under the generation it bumped:
    /// those use `closed_now` and `prefix_now`).
    closed_memo: Vec<Cell<(u64, i64)>>,
    prefix_memo: Cell<(u64, i64)>,
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
            known: Known::default(),
            crossing: vec![BTreeSet::new(); partitions],
            others: BTreeMap::new(),
            last_applied: vec![0; partitions],
            away: (0..partitions).map(|_| VecDeque::new()).collect(),
            // Memos at generation 0 were never filled.
            generation: 1,
            closed_memo: vec![Cell::new((0, 0)); partitions],
            prefix_memo: Cell::new((0, 0)),
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
        self.known.mark(i64::MIN, cut.zxid);
        for crossing in &mut self.crossing {
            *crossing = crossing.split_off(&(cut.zxid + 1));
        }
        self.others = self.others.split_off(&(cut.zxid + 1));
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

    /// Whether the partitions' states are all at [`applied`](Self::applied):
    /// none has applied an entry of the order above it, so a snapshot of
    /// every tree now is one of the server at [`cut`](Self::cut). Always
    /// so under the merge; by partition, once every entry in hand that may
    /// apply has.
    pub fn at_cut(&self) -> bool {
        !self.has_away() && self.last_applied.iter().all(|&zxid| zxid <= self.applied)
    }

    /// Whether some entry taken away has not been applied yet.
    pub fn has_away(&self) -> bool {
        self.away.iter().any(|away| !away.is_empty())
    }

    /// `partition`'s committed entries not taken yet.
    pub fn waiting_on(&self, partition: usize) -> usize {
        self.waiting[partition].len()
    }

    /// Whether `partition` has entries taken away, not applied yet.
    pub fn away_on(&self, partition: usize) -> bool {
        !self.away[partition].is_empty()
    }

    /// The cut a snapshot of the server taken now is at.
    pub fn cut(&self) -> Cut {
        assert!(
            self.at_cut(),
            "a cut at {:#x} with partitions applied past it: {:#x?}",
            self.applied,
            self.last_applied
        );
        Cut {
            zxid: self.applied,
            indices: self.applied_index.clone(),
        }
    }

    /// The zxid of the last entry applied with a part on `partition`.
    pub fn last_applied(&self, partition: usize) -> i64 {
        self.last_applied[partition]
    }

    /// Whether some partition's next entry is in hand with every zxid
    /// below it: it applies once what it touches below it has.
    /// (While entries are away, one that spans partitions, and any of a
    /// partition with entries away, count as applicable only once those
    /// are applied.)
    pub fn has_applicable(&self) -> bool {
        let away = self.has_away();
        (self.waiting.iter().enumerate()).any(|(p, waiting)| {
            waiting.front().is_some_and(|head| {
                head.zxid.is_none_or(|zxid| zxid <= self.known.through)
                    && !(away && (head.crosses || self.away_on(p)))
            })
        })
    }

    /// Every zxid at or below this is in hand here (committed in its
    /// group's log, waiting or applied) or void.
    pub fn known(&self) -> i64 {
        self.known.through
    }

    /// The highest zxid at which `partition`'s state is the projection of
    /// the history: just below its lowest entry in hand not yet applied,
    /// and no further than every zxid is in hand (an entry of its own at
    /// or below that would be in hand).
    pub fn closed(&self, partition: usize) -> i64 {
        let memo = &self.closed_memo[partition];
        let (generation, closed) = memo.get();
        if generation == self.generation {
            debug_assert_eq!(closed, self.closed_now(partition), "partition {partition}");
            return closed;
        }
        let closed = self.closed_now(partition);
        memo.set((self.generation, closed));
        closed
    }

    /// `closed`, computed.
    fn closed_now(&self, partition: usize) -> i64 {
        let lowest = match (
            self.away[partition].front(),
            self.lowest_unapplied(partition),
        ) {
            (Some(&away), Some(waiting)) => Some(away.min(waiting)),
            (away, waiting) => away.copied().or(waiting),
        };
        lowest.map_or(self.known.through, |zxid| {
            (zxid - 1).min(self.known.through)
        })
    }

    /// The lowest zxid with a part on `partition` in hand here, neither
    /// applied nor void, nor taken away.
    fn lowest_unapplied(&self, partition: usize) -> Option<i64> {
        let own = (self.waiting[partition].iter())
            .filter_map(|w| w.zxid)
            .find(|&zxid| !self.is_void(zxid));
        let crossing = self.crossing[partition].first().copied();
        match (own, crossing) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Partition `partition`'s group committed the entry at `index`
    /// (`zxid`: None for an entry outside the order), with parts on no
    /// other partition.
    pub fn committed(&mut self, partition: usize, index: u64, zxid: Option<i64>, entry: T) {
        // (committed_with_parts bumps the generation.)
        self.committed_with_parts(partition, index, zxid, Vec::new(), entry);
    }

    /// Partition `partition`'s group committed the entry at `index`, with
    /// parts on the `others` partitions too.
    pub fn committed_with_parts(
        &mut self,
        partition: usize,
        index: u64,
        zxid: Option<i64>,
        others: Vec<u32>,
        entry: T,
    ) {
        self.generation += 1;
        let last = self.last_index(partition);
        assert_eq!(
            index,
            last + 1,
            "partition {partition} committed index {index} after {last}"
        );
        let mut crosses = false;
        if let Some(zxid) = zxid {
            self.known.mark(zxid, zxid);
            // An entry at or below the applied zxid is one a seal voided,
            // its group delivering it after the seal applied: it passes as
            // void, and holds up no other partition.
            if !others.is_empty() && !self.is_void(zxid) {
                for &other in &others {
                    assert!(
                        other as usize != partition && (other as usize) < self.crossing.len(),
                        "partition {partition}'s entry {zxid:#x} with a part on {other}"
                    );
                    self.crossing[other as usize].insert(zxid);
                }
                self.others.insert(zxid, others);
                crosses = true;
            }
        }
        self.waiting[partition].push_back(Waiting {
            index,
            zxid,
            crosses,
            entry,
        });
    }

    /// A seal committed: no zxid in these inclusive ranges will ever exist.
    pub fn add_voids(&mut self, ranges: &[(i64, i64)]) {
        self.generation += 1;
        for &(lo, hi) in ranges {
            let lo = lo.max(self.applied + 1);
            if lo > hi {
                continue;
            }
            self.voids.add(lo, hi);
            self.known.mark(lo, hi);
            // Seals are rare: a walk of what waits is cheap enough.
            let kept = |zxid: &i64| !(lo..=hi).contains(zxid);
            for crossing in &mut self.crossing {
                crossing.retain(kept);
            }
            self.others.retain(|zxid, _| kept(zxid));
        }
    }

    /// The ranges of the leader's seal, the transaction it proposes with
    /// zxid `next` in partition 0's group before any other: the void
    /// ranges between what it applied, every entry waiting, and `next`.
    /// They take effect here as on every member, once the seal commits
    /// ([`add_voids`](Self::add_voids)): a leader deposed before its seal
    /// commits must not keep them, or its next seal would leave them out
    /// while no other member ever heard of them (the ensemble simulator's
    /// seed 745 of three partitions: every follower waited forever for
    /// the zxids the lost seal had voided).
    ///
    /// Only a leader may seal, and only once every entry in its logs is
    /// committed and passed to [`committed`](Self::committed): then a zxid
    /// missing from them was never committed and never will be.
    pub fn seal(&mut self, next: i64) -> Vec<(i64, i64)> {
        self.generation += 1;
        let in_hand_above = (self.known.ahead.back()).map_or(self.known.through, |&(_, hi)| hi);
        assert!(
            next > in_hand_above,
            "a seal at {next:#x} below the zxid {in_hand_above:#x} in hand"
        );
        let first_missing = self.known.through + 1;
        if first_missing >= next {
            return Vec::new();
        }
        // The first zxid lost, and everything above it up to the seal:
        // what waits above a lost zxid was applied nowhere (nothing
        // applies above a zxid missing here), so no client heard of it,
        // and one session's write must not apply without an earlier one
        // of its that was lost (its next went to another group's log,
        // which committed it).
        vec![(first_missing, next - 1)]
    }

    /// The server installed a leader's snapshot taken at `cut`, every
    /// partition at once. What waited at or below the cut's indices is
    /// in it; the ranges of seals this server has and the cut has not
    /// applied stay known.
    pub fn install(&mut self, cut: &Cut) {
        self.generation += 1;
        assert!(!self.has_away(), "a snapshot installed with entries away");
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
        assert!(
            self.last_applied.iter().all(|&zxid| zxid <= cut.zxid),
            "a snapshot at {:#x} below what partitions applied: {:#x?}",
            cut.zxid,
            self.last_applied
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

    /// The next entry to apply in the one order, if its turn has come.
    pub fn next_ready(&mut self) -> Option<Ready<T>> {
        // (take bumps the generation: asked when nothing may go, as it
        // is after every entry, this changes nothing.)
        let partition = self.next_partition()?;
        let ready = self.take(partition);
        if let (Some(zxid), false) = (ready.zxid, ready.void) {
            // The merge applies each zxid once all below are applied or
            // void. (Its prefix may reach further, over void zxids in hand.)
            debug_assert!(self.prefix_now() >= zxid, "the merge's prefix");
            self.applied = zxid;
            self.voids.forget_through(zxid);
        }
        Some(ready)
    }

    /// The next entry of `partition`'s log, if it may apply now: an entry
    /// outside the order or a void one at once; else once every zxid
    /// below it is in hand or void, and no entry with a part on a
    /// partition it touches lies below it unapplied, if it is below
    /// `fence`. An entry with parts on others is theirs to apply too, at
    /// the same time.
    ///
    /// `away(entry)`: the caller would apply this entry elsewhere (on the
    /// partition's own thread). An entry of the order that touches no
    /// other partition is then taken *away*: the partition's state stands
    /// below it until the caller says it applied (`applied_away`); its
    /// later entries may be taken away meanwhile, but no other one (they
    /// would apply before it). One that spans partitions waits until what
    /// each of them has away is applied.
    pub fn next_ready_on(
        &mut self,
        partition: usize,
        fence: i64,
        away: impl FnOnce(&T) -> bool,
    ) -> Option<Ready<T>> {
        // (take and take_away bump the generation; the answer None
        // changes nothing.)
        let head = self.waiting[partition].front()?;
        let mut goes_away = false;
        if let Some(zxid) = head.zxid.filter(|&zxid| !self.is_void(zxid)) {
            if zxid >= fence {
                return None;
            }
            // Each partition it touches has it as its lowest unapplied
            // (its own log's head; a part among the others' crossings),
            // and, if it spans several, nothing away.
            let crosses = head.crosses;
            let clear =
                |p: usize| self.lowest_unapplied(p) == Some(zxid) && !(crosses && self.away_on(p));
            let others = match crosses {
                true => self.others.get(&zxid).map_or(&[][..], |o| &o[..]),
                false => &[],
            };
            // On its own partition the head is the lowest of its log's
            // entries in the order (it is neither applied nor void), so
            // only the parts crossing from other logs can lie below it.
            let clear_here = (self.crossing[partition].first()).is_none_or(|&c| c >= zxid)
                && !(crosses && self.away_on(partition));
            debug_assert_eq!(clear_here, clear(partition));
            if zxid > self.known.through
                || !clear_here
                || !others.iter().all(|&p| clear(p as usize))
            {
                return None;
            }
            goes_away = !crosses && away(&head.entry);
        }
        if goes_away {
            return Some(self.take_away(partition));
        }
        if self.away_on(partition) {
            return None;
        }
        let ready = self.take(partition);
        if !ready.void && ready.zxid.is_some() {
            self.reach_prefix();
        }
        Some(ready)
    }

    /// Takes `partition`'s head entry, an entry of the order touching it
    /// alone, to be applied elsewhere: it counts as applied once the
    /// caller says so (`applied_away`).
    fn take_away(&mut self, partition: usize) -> Ready<T> {
        self.generation += 1;
        let Waiting {
            index, zxid, entry, ..
        } = (self.waiting[partition].pop_front()).expect("an entry whose turn came");
        let zxid = zxid.expect("only an entry of the order goes away");
        self.applied_index[partition] = index;
        self.away[partition].push_back(zxid);
        Ready {
            partition,
            index,
            zxid: Some(zxid),
            void: false,
            away: true,
            entry,
        }
    }

    /// `partition` applied the first entry it had away, `zxid`.
    pub fn applied_away(&mut self, partition: usize, zxid: i64) {
        self.generation += 1;
        let first = self.away[partition].pop_front();
        assert_eq!(
            first,
            Some(zxid),
            "partition {partition} applied {zxid:#x} away, out of order"
        );
        self.last_applied[partition] = self.last_applied[partition].max(zxid);
        self.reach_prefix();
    }

    /// Raises `applied` to the prefix, which an entry applied may have
    /// raised, and leaves the closed zxids and the prefix in the memos for
    /// the engine's next asks (a reply after each entry). They are the
    /// same after the raise: an entry unapplied on a partition lies above
    /// its closed zxid, so above the prefix, and so does every part
    /// waiting there; what the raise voids (zxids at or below it) is
    /// none of them.
    fn reach_prefix(&mut self) {
        // The change before this bumped the generation: `prefix` computes
        // afresh, filling the memos.
        let prefix = self.prefix();
        if prefix > self.applied {
            self.applied = prefix;
            self.voids.forget_through(prefix);
        }
        debug_assert_eq!(prefix, self.prefix_now(), "the prefix moved with applied");
    }

    /// Takes `partition`'s head entry, whose turn has come.
    fn take(&mut self, partition: usize) -> Ready<T> {
        self.generation += 1;
        let Waiting {
            index,
            zxid,
            crosses,
            entry,
        } = (self.waiting[partition].pop_front()).expect("an entry whose turn came");
        self.applied_index[partition] = index;
        let void = zxid.is_some_and(|zxid| self.is_void(zxid));
        let others = match (zxid, crosses) {
            (Some(zxid), true) => self.others.remove(&zxid).unwrap_or_default(),
            _ => Vec::new(),
        };
        if let (Some(zxid), false) = (zxid, void) {
            self.last_applied[partition] = zxid;
            for other in others {
                let crossed = self.crossing[other as usize].remove(&zxid);
                debug_assert!(crossed, "{zxid:#x}'s part on partition {other}");
                self.last_applied[other as usize] = zxid;
            }
        }
        Ready {
            partition,
            index,
            zxid,
            void,
            away: false,
            entry,
        }
    }

    /// The lowest of the partitions' closed zxids: every partition's state
    /// is the projection of the history at it or past it.
    pub fn prefix(&self) -> i64 {
        let (generation, prefix) = self.prefix_memo.get();
        if generation == self.generation {
            debug_assert_eq!(prefix, self.prefix_now());
            return prefix;
        }
        let prefix = (0..self.waiting.len())
            .map(|p| self.closed(p))
            .min()
            .expect("a server has at least one partition");
        self.prefix_memo.set((self.generation, prefix));
        prefix
    }

    /// `prefix`, computed: what the `&mut self` methods use, which must
    /// not fill the memos (a change after it in the same method would
    /// leave them stale).
    fn prefix_now(&self) -> i64 {
        (0..self.waiting.len())
            .map(|p| self.closed_now(p))
            .min()
            .expect("a server has at least one partition")
    }
}

#[cfg(test)]
mod tests;
