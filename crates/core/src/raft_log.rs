//! The in-memory view of one partition's raft log that raft-rs reads through
//! its `Storage` trait. The durable copy is the WAL; the owning partition
//! thread appends here before it hands the same entries to the WAL writer, and
//! owns this value outright (no lock, unlike raft-rs's MemStorage).

use std::cell::Cell;
use std::collections::VecDeque;

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, StorageError};

#[derive(Default)]
pub struct RaftLog {
    hard_state: HardState,
    conf_state: ConfState,
    /// Index and term of the last entry folded into a tree snapshot.
    /// Invariant: `entries[0].index == snapshot.index + 1` when entries exist.
    snapshot: SnapshotMetadata,
    entries: VecDeque<Entry>,
    /// Entries up to here may be dropped; `compact_step` gets there.
    compact_target: u64,
    /// A serialized tree a lagging peer can be sent; valid while the log
    /// still holds every entry after it.
    shippable: Option<Snapshot>,
    /// Raft asked for a snapshot nobody has built yet. A `Cell` because
    /// raft asks through `&self`; the owning thread alone touches it.
    snapshot_wanted: Cell<bool>,
}

impl RaftLog {
    pub fn new(voters: Vec<u64>, learners: Vec<u64>) -> RaftLog {
        let mut log = RaftLog::default();
        log.conf_state.voters = voters;
        log.conf_state.learners = learners;
        log
    }

    /// State after a restart: the snapshot the tree was loaded from and the
    /// entries the WAL still holds after it.
    pub fn restore(
        &mut self,
        snapshot: SnapshotMetadata,
        hard_state: HardState,
        entries: Vec<Entry>,
    ) {
        assert!(
            entries
                .first()
                .is_none_or(|e| e.index == snapshot.index + 1),
            "WAL gap after snapshot"
        );
        self.snapshot = snapshot;
        self.hard_state = hard_state;
        if self.hard_state.commit < self.snapshot.index {
            self.hard_state.commit = self.snapshot.index;
        }
        if self.hard_state.term < self.snapshot.term {
            self.hard_state.term = self.snapshot.term;
        }
        self.entries = entries.into();
    }

    /// The configuration as of the last applied change.
    pub fn set_conf_state(&mut self, conf_state: ConfState) {
        self.conf_state = conf_state;
    }

    pub fn set_hard_state(&mut self, hs: HardState) {
        self.hard_state = hs;
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn first_index(&self) -> u64 {
        self.snapshot.index + 1
    }

    /// The first index the log keeps once `compact_step` has dropped what
    /// `compact` let go (the first index now, when nothing waits).
    pub fn first_index_kept(&self) -> u64 {
        self.first_index()
            .max(self.compact_target.min(self.last_index()) + 1)
    }

    pub fn last_index(&self) -> u64 {
        self.entries.back().map_or(self.snapshot.index, |e| e.index)
    }

    /// Appends, truncating any conflicting suffix as raft requires.
    pub fn append(&mut self, new: &[Entry]) {
        let Some(first) = new.first() else { return };
        assert!(
            first.index >= self.first_index(),
            "append below the snapshot"
        );
        assert!(first.index <= self.last_index() + 1, "gap in raft log");
        let keep = (first.index - self.first_index()) as usize;
        self.entries.truncate(keep);
        self.entries.extend(new.iter().cloned());
    }

    /// Lets entries up to `index` go once a snapshot covers them; they are
    /// dropped by later `compact_step` calls.
    pub fn compact(&mut self, index: u64) {
        assert!(index <= self.last_index(), "compacting past the log end");
        self.compact_target = self.compact_target.max(index);
    }

    /// Drops at most `budget` entries toward the compaction target.
    pub fn compact_step(&mut self, budget: usize) {
        let target = self.compact_target.min(self.last_index());
        if target <= self.snapshot.index {
            return;
        }
        let drop = ((target - self.snapshot.index) as usize).min(budget);
        let Some(last_dropped) = self.entries.get(drop - 1) else {
            unreachable!("entries after the snapshot index reach the target")
        };
        let (index, term) = (last_dropped.index, last_dropped.term);
        self.entries.drain(..drop);
        self.snapshot.index = index;
        self.snapshot.term = term;
        if self
            .shippable
            .as_ref()
            .is_some_and(|s| s.get_metadata().index < index)
        {
            // Entries after it are gone: a peer sent it could not continue.
            self.shippable = None;
        }
    }

    /// True once after raft asked for a snapshot to send a lagging peer.
    pub fn take_snapshot_wanted(&self) -> bool {
        self.snapshot_wanted.replace(false)
    }

    /// Offers the tree serialized at `index` (applied, so at or after the
    /// compaction point) to raft for lagging peers.
    pub fn set_shippable(
        &mut self,
        index: u64,
        term: u64,
        data: bytes::Bytes,
        conf_state: ConfState,
    ) {
        assert!(
            index >= self.snapshot.index && index <= self.last_index(),
            "shippable snapshot at {index} outside the log [{}, {}]",
            self.snapshot.index,
            self.last_index()
        );
        let mut snapshot = Snapshot {
            data,
            ..Default::default()
        };
        let meta = snapshot.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(conf_state);
        self.shippable = Some(snapshot);
    }

    pub fn has_shippable(&self) -> bool {
        self.shippable.is_some()
    }

    /// Lets the snapshot for lagging peers go (raft asks for a new one
    /// when a peer needs one again).
    pub fn drop_shippable(&mut self) {
        self.shippable = None;
    }

    /// A follower installs the leader's snapshot: the whole log is replaced.
    pub fn install(&mut self, meta: &SnapshotMetadata) {
        self.entries.clear();
        self.compact_target = self.compact_target.max(meta.index);
        self.shippable = None;
        self.snapshot.index = meta.index;
        self.snapshot.term = meta.term;
        self.conf_state = meta.get_conf_state().clone();
        self.hard_state.commit = meta.index;
        self.hard_state.term = self.hard_state.term.max(meta.term);
    }

    fn term_of(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.snapshot.index {
            return Ok(self.snapshot.term);
        }
        if idx < self.first_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.last_index() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(idx - self.first_index()) as usize].term)
    }
}

impl raft::Storage for RaftLog {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        assert!(high <= self.last_index() + 1, "entries past the log end");
        let lo = (low - self.first_index()) as usize;
        let hi = (high - self.first_index()) as usize;
        let mut out: Vec<Entry> = self.entries.range(lo..hi).cloned().collect();
        raft::util::limit_size(&mut out, max_size.into());
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.term_of(idx)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(RaftLog::first_index(self))
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(RaftLog::last_index(self))
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        if let Some(s) = &self.shippable {
            let conf = s.get_metadata().get_conf_state();
            // One built before `to` joined would be refused by it forever
            // (raft drops a snapshot whose configuration lacks the receiver).
            let names_to = conf.voters.contains(&to) || conf.learners.contains(&to);
            if s.get_metadata().index >= request_index && names_to {
                return Ok(s.clone());
            }
        }
        // Serializing a large tree takes a while: the engine builds one off
        // this thread and raft asks again on the peer's next heartbeat.
        self.snapshot_wanted.set(true);
        Err(raft::Error::Store(
            StorageError::SnapshotTemporarilyUnavailable,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Default::default()
        }
    }

    #[test]
    fn append_truncates_a_conflicting_suffix() {
        let mut log = RaftLog::new(vec![1], vec![]);
        log.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        log.append(&[entry(2, 2)]);
        assert_eq!(log.last_index(), 2);
        assert_eq!(log.term(2).unwrap(), 2);
    }

    #[test]
    fn compaction_keeps_the_term_of_the_compacted_index() {
        let mut log = RaftLog::new(vec![1], vec![]);
        log.append(&[entry(1, 1), entry(2, 1), entry(3, 2)]);
        log.compact(2);
        log.compact_step(usize::MAX);
        assert_eq!(log.term(2).unwrap(), 1);
        assert!(log.term(1).is_err());
        assert_eq!(
            log.entries(3, 4, None, GetEntriesContext::empty(false))
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn compaction_drops_at_most_the_budget_per_step() {
        let mut log = RaftLog::new(vec![1], vec![]);
        let entries: Vec<Entry> = (1..=10).map(|i| entry(i, 1 + i / 6)).collect();
        log.append(&entries);
        log.compact(7);
        assert_eq!(log.first_index(), 1, "nothing dropped before a step");
        log.compact_step(3);
        assert_eq!(log.first_index(), 4);
        assert_eq!(log.term(3).unwrap(), 1);
        log.compact_step(3);
        assert_eq!(log.first_index(), 7);
        log.compact_step(3);
        assert_eq!((log.first_index(), log.term(7).unwrap()), (8, 2));
        log.compact_step(3);
        assert_eq!(log.first_index(), 8, "stops at the target");
        assert_eq!(log.last_index(), 10);
        log.compact(5);
        log.compact_step(3);
        assert_eq!(log.first_index(), 8, "a lower target never goes back");
    }

    #[test]
    fn a_snapshot_is_built_on_request_and_dropped_once_compacted_past() {
        let mut log = RaftLog::new(vec![1, 2], vec![3]);
        log.append(&[entry(1, 1), entry(2, 1), entry(3, 2), entry(4, 2)]);
        log.compact(2);
        log.compact_step(usize::MAX);
        assert!(log.snapshot(0, 2).is_err(), "nothing built yet");
        assert!(log.take_snapshot_wanted());
        assert!(!log.take_snapshot_wanted(), "reported once");
        let conf = log.conf_state.clone();
        log.set_shippable(3, 2, bytes::Bytes::from_static(b"tree"), conf);
        let s = log.snapshot(3, 2).expect("built");
        assert_eq!(s.get_metadata().index, 3);
        assert_eq!(s.get_metadata().get_conf_state().learners, vec![3]);
        assert!(log.snapshot(4, 2).is_err(), "too old for the request");
        let _ = log.take_snapshot_wanted();
        assert!(log.snapshot(0, 5).is_err(), "built before server 5 joined");
        assert!(log.take_snapshot_wanted(), "a newer one is asked for");
        log.compact(4);
        log.compact_step(usize::MAX);
        assert!(log.snapshot(0, 2).is_err(), "compacted past it");
    }

    #[test]
    fn installing_replaces_the_whole_log() {
        let mut log = RaftLog::new(vec![1, 2, 3], vec![]);
        log.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        let mut meta = SnapshotMetadata {
            index: 10,
            term: 4,
            ..Default::default()
        };
        meta.mut_conf_state().voters = vec![1, 2, 3];
        log.install(&meta);
        assert_eq!(log.first_index(), 11);
        assert_eq!(log.last_index(), 10);
        assert_eq!(log.term(10).unwrap(), 4);
        assert_eq!(log.hard_state().commit, 10);
        log.append(&[entry(11, 4)]);
        assert_eq!(log.last_index(), 11);
    }
}
