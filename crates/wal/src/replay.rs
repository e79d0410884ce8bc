//! Folding the records of the shared log, in log order, into what each
//! partition's raft storage needs on restart.

use std::collections::BTreeMap;

use crate::record::{Record, RecordKind};

/// What survives in the log for one partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionReplay {
    /// Surviving entries in increasing index order, after raft overwrite
    /// semantics, and above the snapshot marker's index (entries at or
    /// below it are covered by the snapshot).
    pub entries: Vec<Record>,
    /// The last HardState record written, if any.
    pub hard_state: Option<Record>,
    /// The last Snapshot marker written, if any.
    pub snapshot: Option<Record>,
}

/// The result of opening (or recovering) a log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    /// Per partition, only partitions with at least one surviving record.
    pub partitions: BTreeMap<u32, PartitionReplay>,
    /// Bytes of an incomplete or damaged last write that were discarded
    /// (0 when the log ended cleanly). For the caller to log.
    pub torn_tail_bytes: u64,
}

impl Replay {
    pub fn partition(&self, partition: u32) -> Option<&PartitionReplay> {
        self.partitions.get(&partition)
    }
}

/// Accumulates records in log order.
#[derive(Default)]
pub(crate) struct ReplayBuilder {
    partitions: BTreeMap<u32, PartitionState>,
}

#[derive(Default)]
struct PartitionState {
    /// Keyed by index so an overwrite is one `split_off`.
    entries: BTreeMap<u64, Record>,
    hard_state: Option<Record>,
    snapshot: Option<Record>,
}

impl ReplayBuilder {
    pub(crate) fn push(&mut self, record: Record) {
        let state = self.partitions.entry(record.partition).or_default();
        match record.kind {
            RecordKind::Entry => {
                // Raft truncates a conflicting suffix by appending at its
                // first index: everything at or above this index is stale.
                drop(state.entries.split_off(&record.index));
                state.entries.insert(record.index, record);
            }
            RecordKind::HardState => state.hard_state = Some(record),
            RecordKind::Snapshot => {
                if record.is_snapshot_installed() {
                    state.entries.clear();
                }
                state.snapshot = Some(record);
            }
        }
    }

    pub(crate) fn finish(self, torn_tail_bytes: u64) -> Replay {
        let partitions = self
            .partitions
            .into_iter()
            .map(|(partition, state)| {
                let covered_index = state.snapshot.as_ref().map_or(0, |s| s.index);
                let entries: Vec<Record> = state
                    .entries
                    .into_values()
                    .filter(|e| state.snapshot.is_none() || e.index > covered_index)
                    .collect();
                let replay = PartitionReplay {
                    entries,
                    hard_state: state.hard_state,
                    snapshot: state.snapshot,
                };
                (partition, replay)
            })
            .collect();
        Replay {
            partitions,
            torn_tail_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn indexes(replay: &Replay, partition: u32) -> Vec<(u64, u64)> {
        replay.partitions[&partition]
            .entries
            .iter()
            .map(|e| (e.index, e.term))
            .collect()
    }

    #[test]
    fn later_entry_discards_conflicting_suffix_of_its_partition_only() {
        let mut builder = ReplayBuilder::default();
        for i in 1..=5 {
            builder.push(Record::entry(0, 1, i, vec![]));
            builder.push(Record::entry(1, 1, i, vec![]));
        }
        builder.push(Record::entry(0, 2, 3, vec![]));
        let replay = builder.finish(0);
        assert_eq!(indexes(&replay, 0), vec![(1, 1), (2, 1), (3, 2)]);
        assert_eq!(indexes(&replay, 1).len(), 5);
    }

    #[test]
    fn snapshot_hides_covered_entries_and_latest_state_wins() {
        let mut builder = ReplayBuilder::default();
        for i in 1..=5 {
            builder.push(Record::entry(0, 1, i, vec![]));
        }
        builder.push(Record::hard_state(0, 1, 2, vec![1]));
        builder.push(Record::hard_state(0, 1, 4, vec![2]));
        builder.push(Record::snapshot(0, 1, 3, vec![]));
        let replay = builder.finish(0);
        assert_eq!(indexes(&replay, 0), vec![(4, 1), (5, 1)]);
        let partition = &replay.partitions[&0];
        assert_eq!(partition.hard_state.as_ref().map(|h| h.index), Some(4));
        assert_eq!(partition.snapshot.as_ref().map(|s| s.index), Some(3));
    }

    #[test]
    fn an_installed_snapshot_forgets_the_whole_earlier_log() {
        let mut builder = ReplayBuilder::default();
        for i in 1..=8 {
            builder.push(Record::entry(0, 1, i, vec![]));
            builder.push(Record::entry(1, 1, i, vec![]));
        }
        // Stale entries 6..8 of term 1 lie past the installed index 5.
        builder.push(Record::snapshot_installed(0, 3, 5));
        builder.push(Record::entry(0, 3, 6, vec![]));
        let replay = builder.finish(0);
        assert_eq!(indexes(&replay, 0), vec![(6, 3)]);
        assert_eq!(indexes(&replay, 1).len(), 8, "other partitions untouched");
        // A local snapshot's marker keeps entries after its index.
        let mut builder = ReplayBuilder::default();
        for i in 1..=8 {
            builder.push(Record::entry(0, 1, i, vec![]));
        }
        builder.push(Record::snapshot(0, 1, 5, vec![]));
        assert_eq!(indexes(&builder.finish(0), 0).len(), 3);
    }
}
