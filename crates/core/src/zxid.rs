//! Zxids: the server-wide scheme (docs/zxids.md).
//!
//! A zxid is ZooKeeper's 64-bit transaction id: the epoch in the high 32
//! bits, a counter in the low 32. Clients compare zxids (a reconnect
//! refuses a server behind what the client saw; stats and watch events
//! carry them), so each client must see them ascend.
//!
//! - The epoch is the server's leadership epoch, the highest raft term of
//!   the groups it leads ([`server_epoch`]); a server prepares writes only
//!   while it leads every group, so a new leader's epoch is above every
//!   epoch an earlier leader used (each of its groups elected it at a
//!   term above that leader's). With one group it is that group's term,
//!   as before.
//! - The low 32 bits are the partition's counter above the partition's
//!   number: `counter << partition_bits | partition`. Zxids of different
//!   partitions never collide, and each partition's ascend. With one
//!   partition `partition_bits` is 0: exactly ZooKeeper's layout.
//! - A zxid seen from elsewhere in the same epoch (a client's newest, a
//!   transaction of another partition) moves the counter past it
//!   ([`ZxidClock::observe`], a Lamport clock): no shared counter between
//!   partition threads, and a client's next write is above what it saw.
//! - When a counter nears its end the leader starts a new epoch (a new
//!   raft term, which it wins at once: [`ZxidClock::wants_new_epoch`]),
//!   holding client writes meanwhile, as ZooKeeper's leader does at
//!   counter rollover. The reserve above that point is for transactions
//!   the server makes itself (session creation and expiry, container
//!   cleanup) while the new term is being established.

/// The newest epoch this server may hand zxids out in: the highest term of
/// the raft groups it leads.
pub fn server_epoch(group_terms: impl IntoIterator<Item = u64>) -> u64 {
    group_terms.into_iter().max().unwrap_or(0)
}

/// Bits of the low half that number the partition.
pub fn partition_bits(partitions: u32) -> u32 {
    assert!(partitions >= 1, "a server has at least one partition");
    u32::BITS - (partitions - 1).leading_zeros()
}

/// The epoch of a zxid.
pub fn epoch_of(zxid: i64) -> u64 {
    (zxid as u64) >> 32
}

/// One partition's zxid allocator.
#[derive(Debug, Clone)]
pub struct ZxidClock {
    partition: u32,
    partition_bits: u32,
    /// Epoch and counter of the last zxid handed out or observed (0, 0:
    /// none yet).
    epoch: u64,
    counter: u32,
    /// Highest counter value; from `wants_new_epoch_at` on the leader
    /// starts a new epoch.
    limit: u32,
    wants_new_epoch_at: u32,
}

/// The counter of this epoch is used up: a new epoch must start first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted {
    pub epoch: u64,
}

impl ZxidClock {
    /// `counter_limit`: the highest counter value the partition may use
    /// (None: all its bits); tests lower it to roll epochs often.
    pub fn new(partition: u32, partitions: u32, counter_limit: Option<u32>) -> ZxidClock {
        assert!(
            partition < partitions,
            "partition {partition} of {partitions}"
        );
        let partition_bits = partition_bits(partitions);
        let full = if partition_bits == 0 {
            u32::MAX
        } else {
            (1u32 << (32 - partition_bits)) - 1
        };
        let limit = counter_limit.unwrap_or(full).min(full);
        assert!(
            limit >= 8,
            "a zxid counter limit of {limit} leaves no reserve"
        );
        ZxidClock {
            partition,
            partition_bits,
            epoch: 0,
            counter: 0,
            limit,
            wants_new_epoch_at: limit - limit / 8,
        }
    }

    fn compose(&self, epoch: u64, counter: u32) -> i64 {
        assert!(epoch < 1 << 31, "epoch {epoch} outside a zxid");
        let low = ((counter as u64) << self.partition_bits) | self.partition as u64;
        debug_assert!(low <= u32::MAX as u64);
        ((epoch << 32) | low) as i64
    }

    /// The zxid `next(epoch)` would hand out.
    pub fn peek(&self, epoch: u64) -> Result<i64, Exhausted> {
        assert!(
            epoch >= self.epoch,
            "epoch {epoch} is behind the clock's {}",
            self.epoch
        );
        let counter = if epoch == self.epoch { self.counter } else { 0 };
        if counter >= self.limit {
            return Err(Exhausted { epoch });
        }
        Ok(self.compose(epoch, counter + 1))
    }

    /// Hands out the next zxid of `epoch`.
    pub fn next(&mut self, epoch: u64) -> Result<i64, Exhausted> {
        let zxid = self.peek(epoch)?;
        self.epoch = epoch;
        self.counter = self.counter_of(zxid);
        Ok(zxid)
    }

    fn counter_of(&self, zxid: i64) -> u32 {
        ((zxid as u64 & u32::MAX as u64) >> self.partition_bits) as u32
    }

    /// A zxid seen from elsewhere: the next one handed out is above it.
    /// A zxid of an older epoch changes nothing (the next epoch's are all
    /// above it); one of a newer epoch moves the clock into it.
    pub fn observe(&mut self, zxid: i64) {
        let epoch = epoch_of(zxid);
        if epoch < self.epoch {
            return;
        }
        let counter = self.counter_of(zxid).min(self.limit);
        if epoch > self.epoch {
            self.epoch = epoch;
            self.counter = counter;
        } else {
            self.counter = self.counter.max(counter);
        }
    }

    /// The last zxid handed out or observed (0: none).
    pub fn last(&self) -> i64 {
        if self.epoch == 0 && self.counter == 0 {
            return 0;
        }
        self.compose(self.epoch, self.counter)
    }

    /// The leader should start a new epoch before handing out more of
    /// `epoch`'s zxids to clients.
    pub fn wants_new_epoch(&self, epoch: u64) -> bool {
        epoch == self.epoch && self.counter >= self.wants_new_epoch_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_partition_is_zookeepers_layout() {
        let mut clock = ZxidClock::new(0, 1, None);
        assert_eq!(clock.last(), 0);
        assert_eq!(clock.next(3), Ok(0x3_0000_0001));
        assert_eq!(clock.next(3), Ok(0x3_0000_0002));
        assert_eq!(clock.peek(4), Ok(0x4_0000_0001));
        assert_eq!(clock.next(4), Ok(0x4_0000_0001));
        assert_eq!(clock.last(), 0x4_0000_0001);
    }

    #[test]
    fn partitions_interleave_without_colliding() {
        assert_eq!(partition_bits(1), 0);
        assert_eq!(partition_bits(2), 1);
        assert_eq!(partition_bits(3), 2);
        assert_eq!(partition_bits(16), 4);
        assert_eq!(partition_bits(17), 5);
        let mut a = ZxidClock::new(0, 4, None);
        let mut b = ZxidClock::new(3, 4, None);
        assert_eq!(a.next(1), Ok(0x1_0000_0004));
        assert_eq!(b.next(1), Ok(0x1_0000_0007));
        // b saw a's next zxid: its own next is above it.
        let from_a = a.next(1).unwrap();
        b.observe(from_a);
        assert!(b.next(1).unwrap() > from_a);
    }

    #[test]
    fn exhausted_counter_refuses_and_asks_for_a_new_epoch() {
        let mut clock = ZxidClock::new(0, 1, Some(16));
        for _ in 0..13 {
            assert!(!clock.wants_new_epoch(2));
            clock.next(2).unwrap();
        }
        assert_eq!(clock.last(), 0x2_0000_000d);
        assert!(!clock.wants_new_epoch(2));
        clock.next(2).unwrap();
        assert!(clock.wants_new_epoch(2), "at 14 of 16");
        assert!(!clock.wants_new_epoch(3), "a newer epoch has room");
        clock.next(2).unwrap();
        clock.next(2).unwrap();
        assert_eq!(clock.next(2), Err(Exhausted { epoch: 2 }));
        assert_eq!(clock.next(3), Ok(0x3_0000_0001));
    }

    #[test]
    #[should_panic(expected = "behind")]
    fn an_epoch_never_goes_back() {
        let mut clock = ZxidClock::new(0, 1, None);
        clock.next(5).unwrap();
        let _ = clock.next(4);
    }

    #[test]
    fn server_epoch_is_the_highest_term() {
        assert_eq!(server_epoch([3, 9, 4]), 9);
        assert_eq!(server_epoch([]), 0);
    }

    /// Steps of a server with several partitions: a partition hands out a
    /// zxid, a client carries what it saw to another partition, or the
    /// epoch moves on (a new leader, or a rollover).
    #[derive(Debug, Clone)]
    enum Step {
        Write { partition: usize, client: usize },
        NewEpoch { by: u64 },
    }

    fn steps(partitions: usize) -> impl Strategy<Value = Vec<Step>> {
        let step = prop_oneof![
            8 => (0..partitions, 0..4usize)
                .prop_map(|(partition, client)| Step::Write { partition, client }),
            1 => (1..3u64).prop_map(|by| Step::NewEpoch { by }),
        ];
        proptest::collection::vec(step, 1..300)
    }

    proptest! {
        /// Every zxid is unique, each partition's ascend, and each client's
        /// writes get zxids above everything it saw before, across
        /// partitions and epochs (rollovers included).
        #[test]
        fn zxids_are_unique_and_ascend_for_every_client(
            partitions in 1u32..6,
            limit in 8u32..64,
            steps in (1usize..6).prop_flat_map(steps),
        ) {
            let mut clocks: Vec<ZxidClock> =
                (0..partitions).map(|p| ZxidClock::new(p, partitions, Some(limit))).collect();
            let mut epoch = 1u64;
            let mut seen_by_client = [0i64; 4];
            let mut last_of_partition = vec![0i64; partitions as usize];
            let mut all = std::collections::HashSet::new();
            for step in steps {
                match step {
                    Step::NewEpoch { by } => epoch += by,
                    Step::Write { partition, client } => {
                        let clock = &mut clocks[partition % partitions as usize];
                        clock.observe(seen_by_client[client]);
                        let zxid = match clock.next(epoch) {
                            Ok(z) => z,
                            Err(Exhausted { epoch: e }) => {
                                prop_assert!(clock.wants_new_epoch(e) || e < epoch);
                                epoch += 1;
                                clock.next(epoch).unwrap()
                            }
                        };
                        prop_assert!(all.insert(zxid), "zxid {zxid:#x} handed out twice");
                        prop_assert!(zxid > seen_by_client[client]);
                        let p = partition % partitions as usize;
                        prop_assert!(zxid > last_of_partition[p]);
                        last_of_partition[p] = zxid;
                        seen_by_client[client] = zxid;
                        prop_assert_eq!(clock.last(), zxid);
                    }
                }
            }
        }
    }
}
