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
//! - The low 32 bits are one counter shared by every partition of the
//!   server, so within an epoch zxids are dense whatever partition a
//!   transaction goes to: the order of the zxids is the one order every
//!   server applies the partitions in (`crate::apply_order`). With one
//!   partition this is exactly ZooKeeper's layout, and with several too.
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

/// The epoch of a zxid.
pub fn epoch_of(zxid: i64) -> u64 {
    (zxid as u64) >> 32
}

/// The leader's zxid allocator, one for every partition.
#[derive(Debug, Clone)]
pub struct ZxidClock {
    /// Epoch and counter of the last zxid handed out (0, 0: none yet).
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
    /// `counter_limit`: the highest counter value (None: all 32 bits);
    /// tests lower it to roll epochs often.
    pub fn new(counter_limit: Option<u32>) -> ZxidClock {
        let limit = counter_limit.unwrap_or(u32::MAX);
        assert!(
            limit >= 8,
            "a zxid counter limit of {limit} leaves no reserve"
        );
        ZxidClock {
            epoch: 0,
            counter: 0,
            limit,
            wants_new_epoch_at: limit - limit / 8,
        }
    }

    fn compose(&self, epoch: u64, counter: u32) -> i64 {
        assert!(epoch < 1 << 31, "epoch {epoch} outside a zxid");
        ((epoch << 32) | counter as u64) as i64
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
        zxid as u64 as u32
    }

    /// The last zxid handed out (0: none).
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
        let mut clock = ZxidClock::new(None);
        assert_eq!(clock.last(), 0);
        assert_eq!(clock.next(3), Ok(0x3_0000_0001));
        assert_eq!(clock.next(3), Ok(0x3_0000_0002));
        assert_eq!(clock.peek(4), Ok(0x4_0000_0001));
        assert_eq!(clock.next(4), Ok(0x4_0000_0001));
        assert_eq!(clock.last(), 0x4_0000_0001);
    }

    #[test]
    fn exhausted_counter_refuses_and_asks_for_a_new_epoch() {
        let mut clock = ZxidClock::new(Some(16));
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
        let mut clock = ZxidClock::new(None);
        clock.next(5).unwrap();
        let _ = clock.next(4);
    }

    #[test]
    fn server_epoch_is_the_highest_term() {
        assert_eq!(server_epoch([3, 9, 4]), 9);
        assert_eq!(server_epoch([]), 0);
    }

    proptest! {
        /// Within an epoch the zxids handed out are dense; across epochs
        /// (rollovers included) they ascend.
        #[test]
        fn zxids_are_dense_within_an_epoch_and_ascend_across(
            limit in 8u32..64,
            epoch_steps in proptest::collection::vec(0u64..3, 1..300),
        ) {
            let mut clock = ZxidClock::new(Some(limit));
            let mut epoch = 1u64;
            let mut last = 0i64;
            for step in epoch_steps {
                epoch += step;
                let zxid = match clock.next(epoch) {
                    Ok(z) => z,
                    Err(Exhausted { epoch: e }) => {
                        prop_assert_eq!(e, epoch);
                        epoch += 1;
                        clock.next(epoch).unwrap()
                    }
                };
                prop_assert!(zxid > last, "{zxid:#x} after {last:#x}");
                if epoch_of(zxid) == epoch_of(last) {
                    prop_assert_eq!(zxid, last + 1);
                } else {
                    prop_assert_eq!(zxid as u32, 1, "a new epoch starts at counter 1");
                }
                prop_assert_eq!(clock.last(), zxid);
                last = zxid;
            }
        }
    }
}
