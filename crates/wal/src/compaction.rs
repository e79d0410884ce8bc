//! Which stretches of the log may be deleted.
//!
//! A "unit" is a segment for `FileLog` and a single record for `SimLog`;
//! units are identified by increasing sequence numbers and only ever deleted
//! as a prefix, oldest first. Deleting out of order could resurrect an entry
//! that a deleted later record had overwritten.

use std::collections::BTreeMap;

use crate::record::{Record, RecordKind};

/// What one unit holds, as far as compaction cares.
#[derive(Clone, Debug)]
pub(crate) struct UnitSummary {
    pub(crate) seq: u64,
    /// Highest Entry index per partition in this unit.
    pub(crate) entry_index_max: BTreeMap<u32, u64>,
}

impl UnitSummary {
    pub(crate) fn new(seq: u64) -> UnitSummary {
        UnitSummary {
            seq,
            entry_index_max: BTreeMap::new(),
        }
    }

    pub(crate) fn note(&mut self, record: &Record) {
        if record.kind == RecordKind::Entry {
            let max = self.entry_index_max.entry(record.partition).or_insert(0);
            *max = (*max).max(record.index);
        }
    }
}

/// Per-partition facts deciding whether a unit is still needed.
#[derive(Clone, Debug, Default)]
pub(crate) struct CompactionState {
    /// Entries at or below this index are covered by a durable snapshot.
    compactable_index: BTreeMap<u32, u64>,
    /// The unit holding the latest durable HardState: it must survive so
    /// replay still finds a hard state.
    hard_state_unit: BTreeMap<u32, u64>,
    /// The unit holding the latest durable Snapshot marker, same reason.
    snapshot_unit: BTreeMap<u32, u64>,
}

impl CompactionState {
    pub(crate) fn mark_compactable(&mut self, partition: u32, index: u64) {
        let current = self.compactable_index.entry(partition).or_insert(0);
        *current = (*current).max(index);
    }

    /// Called only once `record` (in unit `seq`) is durable: a marker that
    /// might still be lost must not allow deleting what it supersedes.
    pub(crate) fn note_durable(&mut self, seq: u64, record: &Record) {
        match record.kind {
            RecordKind::Entry => {}
            RecordKind::HardState => {
                self.hard_state_unit.insert(record.partition, seq);
            }
            RecordKind::Snapshot => {
                self.snapshot_unit.insert(record.partition, seq);
                self.mark_compactable(record.partition, record.index);
            }
        }
    }

    pub(crate) fn is_compactable(&self, unit: &UnitSummary) -> bool {
        let entries_covered = unit.entry_index_max.iter().all(|(partition, max)| {
            self.compactable_index
                .get(partition)
                .is_some_and(|covered| max <= covered)
        });
        let holds_latest_state = self
            .hard_state_unit
            .values()
            .chain(self.snapshot_unit.values())
            .any(|&seq| seq == unit.seq);
        entries_covered && !holds_latest_state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_with_uncovered_entry_or_latest_state_is_kept() {
        let mut state = CompactionState::default();
        let mut unit = UnitSummary::new(1);
        unit.note(&Record::entry(0, 1, 10, vec![]));
        unit.note(&Record::entry(1, 1, 3, vec![]));
        state.mark_compactable(0, 10);
        assert!(!state.is_compactable(&unit), "partition 1 not covered");
        state.mark_compactable(1, 3);
        assert!(state.is_compactable(&unit));
        state.note_durable(1, &Record::hard_state(1, 1, 3, vec![]));
        assert!(!state.is_compactable(&unit), "holds latest hard state");
        state.note_durable(2, &Record::hard_state(1, 1, 4, vec![]));
        assert!(state.is_compactable(&unit));
    }
}
