//! The read rule of partitions that apply on threads of their own: the one
//! dense order's zxids with a closed watermark per partition (issue 23;
//! docs/partitions.md, "Three read rules, compared").
//!
//! Under the one order a server applies every partition's entries merged
//! by zxid (`ApplyOrder`), so its state is always a prefix of the history
//! and a read is served at once. With a thread per partition, a merge
//! that makes each partition wait for the others' earlier entries couples
//! the threads. This rule lets each partition apply its own entries as
//! they commit and moves the wait to the reads that need it:
//!
//! - A partition's *items* are its own entries and the parts it holds of
//!   operations over several partitions, which commit as one entry in one
//!   group's log. Each item names the zxid of the partition's item before
//!   it: the leader knows it when it hands the zxid out. A partition
//!   applies along that chain, so it waits for no other partition but for
//!   the entries that carry its parts. An item whose link is unknown (the
//!   first of each partition after a new leader's seal) waits until every
//!   zxid below it is in hand: then none of the partition's can be
//!   missing below it.
//! - A partition's state at its last applied zxid `a` is the projection of
//!   the whole history at any zxid from `a` up to just before its next
//!   item: its **closed** zxid, the highest such point this server can
//!   vouch for. With the next item not in hand, that is as far as every
//!   zxid is in hand here (or void): zxids are dense, so an item of the
//!   partition's at or below would be in hand.
//! - A session that has seen zxid `s` reads a partition once its closed
//!   zxid reaches `s`, and the reply carries `max(s, a)`. What the session
//!   reads is then the projection at that zxid, and the zxids of its
//!   replies never go back, so every session reads prefixes of the one
//!   history in order: ZooKeeper's guarantees, and the one zxid a client
//!   keeps still means what it does today on reconnect.
//!
//! The engine applies by a stricter rule (`ApplyOrder::next_ready_on`):
//! every item waits until every zxid below it is in hand, whatever its
//! link, since a new leader's seal voids everything above the first zxid
//! it lacks, committed entries included. This model's leaders lose
//! nothing, so it leaves that wait out.
//!
//! Pure: no I/O, no clock.

use std::collections::BTreeMap;

use stoa_tree::UNKNOWN_LINK;

/// One server's knowledge of the order, for the read rule above.
#[derive(Debug, Clone)]
pub struct ClosedWatermarks {
    /// Every zxid at or below is in hand (committed in its partition's
    /// log here) or void.
    known: i64,
    /// Ranges above `known + 1` in hand or void: first zxid to last.
    ahead: BTreeMap<i64, i64>,
    /// Each partition's last applied zxid.
    applied: Vec<i64>,
    /// Each partition's items in hand and not applied yet: each zxid, to
    /// the zxid of the item before it (`UNKNOWN_LINK` if not known).
    unapplied: Vec<BTreeMap<i64, i64>>,
}

impl ClosedWatermarks {
    /// A server of `partitions` whose every partition has applied the
    /// history up to `from` (a snapshot's zxid, 0 for none).
    pub fn new(partitions: usize, from: i64) -> Self {
        assert!(partitions >= 1, "a server has at least one partition");
        ClosedWatermarks {
            known: from,
            ahead: BTreeMap::new(),
            applied: vec![from; partitions],
            unapplied: vec![BTreeMap::new(); partitions],
        }
    }

    /// Every zxid at or below this is in hand here or void.
    pub fn known(&self) -> i64 {
        self.known
    }

    /// The last zxid `partition` applied.
    pub fn applied(&self, partition: usize) -> i64 {
        self.applied[partition]
    }

    /// An item of `partition`'s is in hand here: its entry `zxid`
    /// committed, and `previous` is the zxid of its item before, or
    /// `UNKNOWN_LINK` (the first after a leader's seal). Every part of an
    /// entry is in hand when its entry is.
    pub fn committed(&mut self, partition: usize, zxid: i64, previous: i64) {
        assert!(
            zxid > self.applied[partition]
                && (previous == UNKNOWN_LINK
                    || (previous < zxid && previous >= self.applied[partition])),
            "partition {partition}'s item {zxid:#x} after {previous:#x}, applied {:#x}",
            self.applied[partition]
        );
        let twice = self.unapplied[partition].insert(zxid, previous);
        assert!(twice.is_none(), "partition {partition} has {zxid:#x} twice");
        self.mark(zxid, zxid);
    }

    /// No zxid from `first` to `last` will ever exist (a seal's ranges,
    /// an epoch's end).
    pub fn void(&mut self, first: i64, last: i64) {
        self.mark(first, last);
    }

    /// The zxid of the item `partition` applies next, if it may now: the
    /// lowest in hand, when it names the last applied as its item before,
    /// or names none and every zxid below it is in hand (so no item of
    /// the partition's lies between).
    pub fn next(&self, partition: usize) -> Option<i64> {
        let (&zxid, &previous) = self.unapplied[partition].first_key_value()?;
        let follows = previous == self.applied[partition]
            || (previous == UNKNOWN_LINK && self.known >= zxid - 1);
        follows.then_some(zxid)
    }

    /// `partition` applied its next item, `zxid`.
    pub fn apply(&mut self, partition: usize, zxid: i64) {
        assert_eq!(
            self.next(partition),
            Some(zxid),
            "partition {partition} applied {zxid:#x} out of turn"
        );
        self.unapplied[partition].pop_first();
        self.applied[partition] = zxid;
    }

    /// The highest zxid at which `partition`'s state is the projection of
    /// the history: just before its next item, if that may apply; else as
    /// far as every zxid is known (an item of its at or below `known`
    /// would be in hand), and below any item of its in hand.
    pub fn closed(&self, partition: usize) -> i64 {
        if let Some(next) = self.next(partition) {
            return next - 1;
        }
        let below_in_hand =
            (self.unapplied[partition].first_key_value()).map_or(i64::MAX, |(&zxid, _)| zxid - 1);
        self.known.max(self.applied[partition]).min(below_in_hand)
    }

    /// A read of `partition` by a session that has seen `seen`: the zxid
    /// its reply carries, or None while the partition cannot vouch for
    /// `seen` yet (the read waits).
    pub fn serve(&self, partition: usize, seen: i64) -> Option<i64> {
        (self.closed(partition) >= seen).then(|| seen.max(self.applied[partition]))
    }

    /// Marks `first..=last` in hand or void, and moves `known` over every
    /// range that now touches it.
    fn mark(&mut self, first: i64, last: i64) {
        let first = first.max(self.known + 1);
        if first > last {
            return;
        }
        let end = self.ahead.entry(first).or_insert(last);
        *end = (*end).max(last);
        while let Some((&lo, &hi)) = self.ahead.first_key_value() {
            if lo > self.known + 1 {
                break;
            }
            self.known = self.known.max(hi);
            self.ahead.pop_first();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_closes_up_to_its_next_item_in_hand() {
        let mut marks = ClosedWatermarks::new(2, 0);
        marks.committed(0, 1, 0);
        marks.committed(0, 3, 1);
        assert_eq!(marks.known(), 1, "2 is not in hand");
        assert_eq!(marks.closed(0), 0, "1 is not applied");
        assert_eq!(marks.closed(1), 1);
        marks.apply(0, 1);
        assert_eq!(marks.closed(0), 2, "its next item is 3");
        marks.committed(1, 2, 0);
        assert_eq!(marks.known(), 3);
        assert_eq!(marks.closed(1), 1, "2 is in hand, not applied");
        marks.apply(0, 3);
        assert_eq!(marks.closed(0), 3);
        marks.apply(1, 2);
        assert_eq!(marks.closed(1), 3);
    }

    #[test]
    fn a_read_waits_until_its_partition_vouches_for_what_the_session_saw() {
        let mut marks = ClosedWatermarks::new(2, 0);
        marks.committed(1, 2, 0);
        marks.apply(1, 2);
        // A session read partition 1 at 2; partition 0 cannot vouch for 2
        // while 1 is not in hand: it could be partition 0's.
        assert_eq!(marks.serve(1, 0), Some(2));
        assert_eq!(marks.serve(0, 2), None);
        assert_eq!(marks.serve(0, 0), Some(0), "a session that saw nothing");
        marks.committed(0, 1, 0);
        assert_eq!(marks.serve(0, 2), None, "1 is not applied");
        marks.apply(0, 1);
        assert_eq!(marks.serve(0, 2), Some(2), "the reply never goes back");
    }

    #[test]
    fn a_part_of_another_partitions_entry_applies_in_its_place_in_the_chain() {
        // Zxid 2 is an entry of partition 1 with a part on partition 0;
        // partition 0's own entry 3 names 2 as its item before.
        let mut marks = ClosedWatermarks::new(2, 0);
        marks.committed(0, 1, 0);
        marks.committed(0, 3, 2);
        marks.apply(0, 1);
        assert_eq!(marks.next(0), None, "3 waits for the part at 2");
        assert_eq!(marks.closed(0), 1, "2 is not in hand");
        marks.committed(1, 2, 0);
        marks.committed(0, 2, 1);
        assert_eq!(marks.next(0), Some(2));
        marks.apply(0, 2);
        assert_eq!(marks.closed(0), 2);
        assert_eq!(marks.serve(1, 2), None, "partition 1 has not applied 2");
        marks.apply(1, 2);
        assert_eq!(marks.serve(1, 2), Some(2));
        marks.apply(0, 3);
        assert_eq!(marks.closed(0), 3);
    }

    #[test]
    fn an_item_with_an_unknown_link_waits_until_every_zxid_below_is_in_hand() {
        // A new leader's first items: 5 on partition 0 names no item
        // before; 4 (a part for partition 0 in partition 1's log) may lie
        // below it.
        let mut marks = ClosedWatermarks::new(2, 3);
        marks.committed(0, 5, UNKNOWN_LINK);
        assert_eq!(marks.next(0), None, "4 is not in hand");
        assert_eq!(marks.closed(0), 3);
        marks.committed(1, 4, UNKNOWN_LINK);
        marks.committed(0, 4, UNKNOWN_LINK);
        assert_eq!(marks.next(0), Some(4), "the lowest goes first");
        marks.apply(0, 4);
        assert_eq!(marks.next(0), Some(5));
        assert_eq!(marks.closed(0), 4);
        marks.apply(0, 5);
        marks.committed(0, 7, 5);
        assert_eq!(marks.next(0), Some(7), "a known link needs nothing below");
        assert_eq!(marks.closed(0), 6);
        assert_eq!(marks.closed(1), 3, "its 4 is in hand, not applied");
        marks.apply(1, 4);
        assert_eq!(marks.closed(1), 5, "6 is not in hand");
    }

    #[test]
    fn void_ranges_close_as_in_hand_zxids_do() {
        let mut marks = ClosedWatermarks::new(3, 10);
        marks.committed(2, 1 << 32 | 1, 10);
        marks.void(11, (1 << 32) - 1);
        assert_eq!(
            marks.known(),
            (1 << 32) - 1,
            "the new epoch's counter 0 is not named"
        );
        marks.void(1 << 32, 1 << 32);
        assert_eq!(marks.known(), 1 << 32 | 1);
        assert_eq!(marks.closed(0), 1 << 32 | 1);
        assert_eq!(marks.closed(2), 1 << 32);
    }

    #[test]
    fn ranges_in_any_order_and_overlapping_join_up() {
        let mut marks = ClosedWatermarks::new(1, 0);
        marks.void(5, 9);
        marks.void(3, 6);
        marks.void(12, 12);
        marks.void(2, 2);
        assert_eq!(marks.known(), 0);
        marks.void(1, 1);
        assert_eq!(marks.known(), 9);
        marks.void(10, 11);
        assert_eq!(marks.known(), 12);
        marks.void(4, 8);
        assert_eq!(marks.known(), 12, "a range already known changes nothing");
    }

    #[test]
    #[should_panic(expected = "out of turn")]
    fn a_partition_applies_along_its_chain() {
        let mut marks = ClosedWatermarks::new(1, 0);
        marks.committed(0, 1, 0);
        marks.committed(0, 2, 1);
        marks.apply(0, 2);
    }
}
