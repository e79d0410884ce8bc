//! Applying on a partition's own thread (docs/partitions.md, "Step 3,
//! the inversion", its third slice): a server whose partitions own their
//! threads and apply by partition sends each partition's committed
//! entries that touch it alone away with its core, instead of applying
//! them on the engine's thread.
//!
//! The order takes such an entry *away* (`ApplyOrder::next_ready_on`):
//! the partition's state stands below it until the engine absorbs what
//! the thread did (`Engine::absorb_applied`), so no read by watermark and
//! no cut counts on it before its watch events and outcome are in the
//! engine's hands. Meanwhile the partition takes only more entries away,
//! and an entry spanning partitions waits for what each has away. The
//! thread applies the entries in order, as `apply_entry` would: its own
//! proposal or the decoded transaction, the entry's bookkeeping, the
//! tree, the watches; the engine then hands their events and outcomes to
//! the gate, each held for the prefix like any other applied by
//! partition.

use raft::eraftpb::Entry;
use stoa_tree::{Txn, TxnOp};

use super::chains::changes_one_tree;
use super::cores::AwayDone;
use super::handoff::Applied;
use super::partition_core::PartitionCore;
use super::Engine;

/// An entry sent away to apply.
pub(super) struct AwayEntry {
    pub entry: Entry,
    /// Counts for the commit latency (an entry of this leader's term, as
    /// `apply_txn` decides it).
    pub timed: bool,
}

/// What a partition's thread applied of the entries sent with its core.
pub(crate) struct AppliedAway {
    /// Each transaction applied, in order: its zxid, when the leader
    /// prepared it, and whether that counts for the commit latency.
    txns: Vec<(i64, i64, bool)>,
    /// Each transaction's fired watches, then its outcome, in order.
    values: Vec<Applied>,
    /// An entry the thread could not apply: the engine stops there, as it
    /// would have applying it itself.
    fatal: Option<String>,
}

impl PartitionCore {
    /// Applies `entries`, each touching this partition alone, in order.
    fn apply_away(&mut self, partition: usize, entries: Vec<AwayEntry>) -> AppliedAway {
        let mut applied = AppliedAway {
            txns: Vec::with_capacity(entries.len()),
            values: Vec::with_capacity(entries.len() + entries.len() / 4),
            fatal: None,
        };
        for AwayEntry { entry, timed } in entries {
            let txn = match self.own_proposal(&entry.data) {
                Some(txn) => txn,
                None => match Txn::decode(&entry.data) {
                    Ok(txn) => txn,
                    Err(e) => {
                        applied.fatal = Some(format!(
                            "undecodable transaction at raft index {} of partition {partition}: {e}",
                            entry.index
                        ));
                        break;
                    }
                },
            };
            // Its links named this partition alone: a plain write, or one a
            // watch extension decided the events of.
            if !changes_one_tree(&txn.op) {
                applied.fatal = Some(format!(
                    "zxid {:#x} at raft index {} of partition {partition}: its links name \
                     this partition alone, yet it changes more than its tree",
                    txn.header.zxid, entry.index
                ));
                break;
            }
            let decided = match &txn.op {
                TxnOp::Watched { events, .. } => Some(&events[..]),
                _ => None,
            };
            self.take_entry(&entry);
            self.apply_one_tree(&txn, decided, &mut applied.values);
            applied
                .txns
                .push((txn.header.zxid, txn.header.time_ms, timed));
        }
        applied
    }
}

impl Engine {
    /// Sends each partition's entries taken away (`shares`, emptied) to
    /// apply on its thread, after whatever its core is doing there.
    pub(super) fn send_applies_away(&mut self, shares: &mut [Vec<AwayEntry>]) {
        for (partition, share) in shares.iter_mut().enumerate() {
            if share.is_empty() {
                continue;
            }
            let entries = std::mem::take(share);
            self.stats.applies_sent_away += 1;
            self.cores.send_away(partition, move |core| AwayDone {
                applied: Some(core.apply_away(partition, entries)),
                ..AwayDone::nothing(partition)
            });
        }
    }

    /// What `partition`'s thread applied: each transaction counts as
    /// applied in the order, and its events and outcome go to the gate
    /// (held for the prefix, as any applied by partition); then what
    /// the prefix passed goes out.
    pub(super) fn absorb_applied(&mut self, partition: usize, applied: AppliedAway) {
        let mut values = applied.values.into_iter();
        for (zxid, time_ms, timed) in applied.txns {
            let order = self.order.as_mut().expect("several partitions");
            order.applied_away(partition, zxid);
            if zxid > order.applied() {
                // Applied while another partition still stood below it.
                self.stats.applied_past_prefix += 1;
            }
            self.hand_over_applied(&mut values, zxid, time_ms, timed);
        }
        debug_assert!(values.next().is_none());
        if let Some(fatal) = applied.fatal {
            self.out.fatal.get_or_insert(fatal);
        }
        self.report_applied(partition);
        self.release_handoffs();
    }

    /// Takes back every core with entries away and absorbs what they
    /// applied, so that the partitions may meet at a cut.
    pub(super) fn take_back_applies(&mut self) {
        while let Some(order) = self.order.as_ref().filter(|order| order.has_away()) {
            let away: Vec<usize> = (0..self.cores.len())
                .filter(|&p| order.away_on(p))
                .collect();
            for partition in away {
                let _ = &mut self.cores[partition];
            }
            self.absorb_away();
        }
    }
}
