//! WAL tokens: the numbers a node hands the log writer with each batch,
//! mapped back to the raft ready numbers they make durable.

use std::collections::VecDeque;

/// Maps WAL tokens back to raft ready numbers (snapshot markers share the
/// token sequence but acknowledge no ready).
///
/// Invariant: `in_flight` holds tokens in increasing order, all at or
/// below `next`, and the ready numbers in it increase too: the writer
/// completes batches in token order and readies complete in order.
#[derive(Default)]
pub struct WalTokens {
    next: u64,
    in_flight: VecDeque<(u64, Option<u64>)>,
}

impl WalTokens {
    /// A token for a batch about to be submitted, acknowledging
    /// `ready_number` once durable (`None`: a marker, acknowledging none).
    pub fn issue(&mut self, ready_number: Option<u64>) -> u64 {
        if let (Some(number), Some(last)) = (ready_number, self.last_ready()) {
            assert!(number > last, "ready {number} issued after ready {last}");
        }
        self.next += 1;
        self.in_flight.push_back((self.next, ready_number));
        self.next
    }

    /// A ready that needs no fsync of its own: it is done when the batch
    /// in flight is (readies complete in order), or now if none is.
    pub fn piggyback(&mut self, ready_number: u64) -> Option<u64> {
        match self.in_flight.back_mut() {
            Some((_, number)) => {
                if let Some(earlier) = *number {
                    assert!(
                        ready_number > earlier,
                        "ready {ready_number} after {earlier}"
                    );
                }
                *number = Some(ready_number);
                None
            }
            None => Some(ready_number),
        }
    }

    /// Highest ready number made durable by `token` (the writer reports
    /// the highest token of each group it synced).
    pub fn durable(&mut self, token: u64) -> Option<u64> {
        assert!(token <= self.next, "token {token} was never issued");
        let mut number = None;
        while let Some(&(t, n)) = self.in_flight.front() {
            if t > token {
                break;
            }
            self.in_flight.pop_front();
            number = n.or(number);
        }
        number
    }

    /// Batches submitted and not yet reported durable.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn last_ready(&self) -> Option<u64> {
        self.in_flight.iter().rev().find_map(|(_, n)| *n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_tokens_map_back_to_the_highest_ready_number() {
        let mut t = WalTokens::default();
        let a = t.issue(Some(1));
        let _marker = t.issue(None);
        let c = t.issue(Some(2));
        assert_eq!(t.durable(a), Some(1));
        assert_eq!(t.durable(c), Some(2));
        assert_eq!(t.durable(c), None);
        assert_eq!(t.piggyback(3), Some(3), "nothing in flight: done now");
        let d = t.issue(Some(4));
        assert_eq!(t.piggyback(5), None, "waits for the batch in flight");
        assert_eq!(t.durable(d), Some(5));
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn a_marker_in_flight_holds_back_a_piggybacked_ready() {
        // Proves a ready riding on a marker's batch is acknowledged only
        // when that batch is durable, not earlier.
        let mut t = WalTokens::default();
        let a = t.issue(Some(1));
        let marker = t.issue(None);
        assert_eq!(t.piggyback(2), None);
        assert_eq!(t.durable(a), Some(1));
        assert_eq!(t.durable(marker), Some(2));
    }
}
