//! WAL tokens: the numbers a node hands the log writer with each batch,
//! mapped back to the raft ready numbers they make durable. Every
//! partition's group numbers its readies on its own; the log is shared, so
//! one token sequence covers them all.

use std::collections::VecDeque;

/// Maps WAL tokens back to (partition, raft ready number) (snapshot
/// markers share the token sequence but acknowledge no ready).
///
/// Invariant: `in_flight` holds tokens in increasing order, all at or
/// below `next`, and per partition the ready numbers in it increase too:
/// the writer completes batches in token order and each group's readies
/// complete in order.
#[derive(Default)]
pub struct WalTokens {
    next: u64,
    /// Each batch's token and the readies it acknowledges, at most one
    /// (the highest) per partition.
    in_flight: VecDeque<(u64, Vec<(u32, u64)>)>,
}

impl WalTokens {
    /// A token for a batch about to be submitted, acknowledging ready
    /// `number` of `partition` once durable (`None`: a marker,
    /// acknowledging none).
    pub fn issue(&mut self, ready: Option<(u32, u64)>) -> u64 {
        if let Some((partition, number)) = ready {
            if let Some(last) = self.last_ready(partition) {
                assert!(
                    number > last,
                    "partition {partition}: ready {number} issued after ready {last}"
                );
            }
        }
        self.next += 1;
        self.in_flight
            .push_back((self.next, ready.into_iter().collect()));
        self.next
    }

    /// A ready that needs no fsync of its own: it is done when the batch
    /// in flight is (readies complete in order), or now if none is.
    pub fn piggyback(&mut self, partition: u32, number: u64) -> Option<u64> {
        let Some((_, readies)) = self.in_flight.back_mut() else {
            return Some(number);
        };
        match readies.iter_mut().find(|(p, _)| *p == partition) {
            Some((_, earlier)) => {
                assert!(
                    number > *earlier,
                    "partition {partition}: ready {number} after {earlier}"
                );
                *earlier = number;
            }
            None => readies.push((partition, number)),
        }
        None
    }

    /// The highest ready number per partition made durable by `token`
    /// (the writer reports the highest token of each group it synced).
    pub fn durable(&mut self, token: u64) -> Vec<(u32, u64)> {
        assert!(token <= self.next, "token {token} was never issued");
        let mut done: Vec<(u32, u64)> = Vec::new();
        while let Some((t, _)) = self.in_flight.front() {
            if *t > token {
                break;
            }
            let (_, readies) = self.in_flight.pop_front().expect("just seen");
            for (partition, number) in readies {
                match done.iter_mut().find(|(p, _)| *p == partition) {
                    Some((_, highest)) => *highest = number,
                    None => done.push((partition, number)),
                }
            }
        }
        done
    }

    /// Batches submitted and not yet reported durable.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn last_ready(&self, partition: u32) -> Option<u64> {
        (self.in_flight.iter().rev())
            .find_map(|(_, readies)| readies.iter().find(|(p, _)| *p == partition))
            .map(|(_, number)| *number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_tokens_map_back_to_the_highest_ready_number() {
        let mut t = WalTokens::default();
        let a = t.issue(Some((0, 1)));
        let _marker = t.issue(None);
        let c = t.issue(Some((0, 2)));
        assert_eq!(t.durable(a), [(0, 1)]);
        assert_eq!(t.durable(c), [(0, 2)]);
        assert_eq!(t.durable(c), []);
        assert_eq!(t.piggyback(0, 3), Some(3), "nothing in flight: done now");
        let d = t.issue(Some((0, 4)));
        assert_eq!(t.piggyback(0, 5), None, "waits for the batch in flight");
        assert_eq!(t.durable(d), [(0, 5)]);
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn a_marker_in_flight_holds_back_a_piggybacked_ready() {
        // Proves a ready riding on a marker's batch is acknowledged only
        // when that batch is durable, not earlier.
        let mut t = WalTokens::default();
        let a = t.issue(Some((0, 1)));
        let marker = t.issue(None);
        assert_eq!(t.piggyback(0, 2), None);
        assert_eq!(t.durable(a), [(0, 1)]);
        assert_eq!(t.durable(marker), [(0, 2)]);
    }

    #[test]
    fn each_partition_counts_its_own_readies() {
        // Proves readies of two groups, numbered independently, share the
        // token sequence and come back per partition, each at its highest.
        let mut t = WalTokens::default();
        let a = t.issue(Some((0, 7)));
        let b = t.issue(Some((1, 2)));
        assert_eq!(t.piggyback(0, 8), None);
        let c = t.issue(Some((1, 3)));
        assert_eq!(t.durable(a), [(0, 7)]);
        let mut done = t.durable(c);
        done.sort();
        assert_eq!(done, [(0, 8), (1, 3)]);
        assert!(b < c);
        assert_eq!(t.in_flight(), 0);
    }
}
