//! Tree snapshots as a node keeps them: a store of complete snapshots (on
//! disk in production, in memory in the simulator, the same bytes in
//! both), the tasks a snapshot thread runs, and the rules every store
//! shares: which tasks run, how many snapshots stay, which one recovery
//! loads.

use std::collections::BTreeMap;

use stoa_tree::DataTree;

use crate::engine::SnapshotJob;

/// Snapshots kept; the WAL keeps entries back to the oldest, so a damaged
/// newest snapshot still leaves a full recovery path.
pub const SNAPSHOTS_RETAINED: usize = 2;

/// What a snapshot is written from.
#[derive(Clone, Copy)]
pub enum SnapshotSource<'a> {
    /// Serialized here (`stoa_tree::write_snapshot`).
    Tree(&'a DataTree),
    /// Already serialized: a snapshot received from the leader.
    Bytes(&'a [u8]),
}

/// Where complete snapshots live, named by raft (index, term).
pub trait SnapshotStore {
    /// Every complete snapshot, oldest (lowest index) first.
    fn list(&self) -> Result<Vec<(u64, u64)>, String>;
    /// Writes a snapshot atomically and durably: after `Ok` it survives a
    /// crash, and a crash before `Ok` leaves nothing of it in `list`.
    fn write(&mut self, index: u64, term: u64, source: SnapshotSource<'_>) -> Result<(), String>;
    /// Reads one back; an error names the snapshot and what is wrong.
    fn load(&self, index: u64, term: u64) -> Result<DataTree, String>;
    fn remove(&mut self, index: u64, term: u64) -> Result<(), String>;
}

/// Writes a snapshot and removes all but the newest `SNAPSHOTS_RETAINED`.
/// Returns the index up to which the WAL may be compacted (the oldest
/// retained snapshot's).
pub fn write_snapshot(
    store: &mut impl SnapshotStore,
    index: u64,
    term: u64,
    source: SnapshotSource<'_>,
) -> Result<Option<u64>, String> {
    store.write(index, term, source)?;
    let kept = store.list()?;
    let excess = kept.len().saturating_sub(SNAPSHOTS_RETAINED);
    for &(old_index, old_term) in &kept[..excess] {
        if let Err(e) = store.remove(old_index, old_term) {
            log::warn!("cannot remove old snapshot at index {old_index}: {e}");
        }
    }
    Ok(kept.get(excess).map(|(index, _)| *index))
}

/// The newest snapshot that reads back, with its raft index and term; an
/// empty tree at 0 when none does.
pub fn load_newest(store: &impl SnapshotStore) -> Result<(DataTree, u64, u64), String> {
    for (index, term) in store.list()?.into_iter().rev() {
        match store.load(index, term) {
            Ok(tree) => return Ok((tree, index, term)),
            Err(e) => log::error!("{e}; trying an older snapshot"),
        }
    }
    Ok((DataTree::new(), 0, 0))
}

/// Work for the snapshot thread: serializing a tree is slow for large
/// trees, so the node's own thread never does it.
pub enum SnapshotTask {
    /// Write to the store (then the WAL may be compacted).
    Write(SnapshotJob),
    /// Serialize in memory for a lagging peer.
    Ship(SnapshotJob),
}

impl SnapshotTask {
    /// The partition whose tree the task writes (its store).
    pub fn partition(&self) -> u32 {
        match self {
            SnapshotTask::Write(job) | SnapshotTask::Ship(job) => job.partition,
        }
    }
}

/// A task's outcome, for `Node::on_snapshot_done`.
pub enum SnapshotDone {
    Written {
        partition: u32,
        index: u64,
        term: u64,
        compact_to: Option<u64>,
    },
    Shipped {
        partition: u32,
        index: u64,
        term: u64,
        data: bytes::Bytes,
    },
}

/// The tasks waiting for the snapshot thread, to run now: every Ship (a
/// peer waits for each) and only the newest Write of each partition. Under a heavy load the
/// engine asks for a snapshot faster than a large tree is written (every
/// 1.3 s at 78k creates/s, while 800k znodes take longer): the queue grew,
/// each queued job holding a tree copy alive, and the newest snapshot fell
/// further behind, leaving more WAL to replay at a restart.
pub fn coalesce_snapshot_tasks(tasks: Vec<SnapshotTask>) -> Vec<SnapshotTask> {
    let mut out = Vec::with_capacity(tasks.len());
    let mut newest_writes: BTreeMap<u32, SnapshotJob> = BTreeMap::new();
    for task in tasks {
        match task {
            SnapshotTask::Write(job) => {
                if let Some(older) = newest_writes.insert(job.partition, job) {
                    log::debug!(
                        "snapshot of partition {} at raft index {} skipped: a newer one is queued",
                        older.partition,
                        older.index
                    );
                }
            }
            ship @ SnapshotTask::Ship(_) => out.push(ship),
        }
    }
    out.extend(newest_writes.into_values().map(SnapshotTask::Write));
    out
}

pub fn run_snapshot_task(
    store: &mut impl SnapshotStore,
    task: SnapshotTask,
) -> Result<SnapshotDone, String> {
    match task {
        SnapshotTask::Write(job) => {
            write_snapshot(store, job.index, job.term, SnapshotSource::Tree(&job.tree)).map(
                |compact_to| SnapshotDone::Written {
                    partition: job.partition,
                    index: job.index,
                    term: job.term,
                    compact_to,
                },
            )
        }
        SnapshotTask::Ship(job) => {
            let mut data = Vec::new();
            stoa_tree::write_snapshot(&job.tree, &mut data)
                .map(|()| SnapshotDone::Shipped {
                    partition: job.partition,
                    index: job.index,
                    term: job.term,
                    data: data.into(),
                })
                .map_err(|e| format!("serializing a snapshot for a peer: {e}"))
        }
    }
}

/// A `SnapshotStore` in memory, for the simulator and tests: each snapshot
/// is the bytes a file would hold, written and read by the same code as on
/// disk. A write is atomic (the file store's rename), so a crash keeps
/// whole snapshots only. `fail_writes` makes writes fail, as a full disk
/// would.
#[derive(Default)]
pub struct MemSnapshotStore {
    files: BTreeMap<(u64, u64), bytes::Bytes>,
    pub fail_writes: bool,
}

impl MemSnapshotStore {
    /// The stored bytes of one snapshot (tests damage them).
    pub fn bytes_mut(&mut self, index: u64, term: u64) -> Option<&mut bytes::Bytes> {
        self.files.get_mut(&(index, term))
    }
}

impl SnapshotStore for MemSnapshotStore {
    fn list(&self) -> Result<Vec<(u64, u64)>, String> {
        Ok(self.files.keys().copied().collect())
    }

    fn write(&mut self, index: u64, term: u64, source: SnapshotSource<'_>) -> Result<(), String> {
        if self.fail_writes {
            return Err(format!("snapshot {index}-{term}: write: no space left"));
        }
        let data = match source {
            SnapshotSource::Tree(tree) => {
                let mut data = Vec::new();
                stoa_tree::write_snapshot(tree, &mut data)
                    .map_err(|e| format!("snapshot {index}-{term}: write: {e}"))?;
                bytes::Bytes::from(data)
            }
            SnapshotSource::Bytes(data) => bytes::Bytes::copy_from_slice(data),
        };
        self.files.insert((index, term), data);
        Ok(())
    }

    fn load(&self, index: u64, term: u64) -> Result<DataTree, String> {
        let data = self
            .files
            .get(&(index, term))
            .ok_or_else(|| format!("snapshot {index}-{term}: not found"))?;
        stoa_tree::read_snapshot(&mut &data[..])
            .map_err(|e| format!("snapshot {index}-{term} is unreadable ({e})"))
    }

    fn remove(&mut self, index: u64, term: u64) -> Result<(), String> {
        self.files.remove(&(index, term));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(index: u64) -> SnapshotJob {
        SnapshotJob {
            partition: 0,
            tree: DataTree::new(),
            index,
            term: 1,
        }
    }

    #[test]
    fn queued_snapshot_tasks_keep_every_ship_and_the_newest_write() {
        let tasks = vec![
            SnapshotTask::Write(job(100)),
            SnapshotTask::Ship(job(150)),
            SnapshotTask::Write(job(200)),
            SnapshotTask::Ship(job(250)),
            SnapshotTask::Write(job(300)),
        ];
        let kept: Vec<(bool, u64)> = coalesce_snapshot_tasks(tasks)
            .into_iter()
            .map(|t| match t {
                SnapshotTask::Write(j) => (true, j.index),
                SnapshotTask::Ship(j) => (false, j.index),
            })
            .collect();
        assert_eq!(kept, vec![(false, 150), (false, 250), (true, 300)]);
        assert!(coalesce_snapshot_tasks(Vec::new()).is_empty());
    }

    #[test]
    fn writing_keeps_the_newest_two_and_compacts_to_the_older() {
        let mut store = MemSnapshotStore::default();
        let tree = DataTree::new();
        for (i, index) in [10, 20, 30].into_iter().enumerate() {
            let compact_to =
                write_snapshot(&mut store, index, 1, SnapshotSource::Tree(&tree)).unwrap();
            assert_eq!(compact_to, Some(if i == 0 { 10 } else { index - 10 }));
        }
        assert_eq!(store.list().unwrap(), vec![(20, 1), (30, 1)]);
    }

    #[test]
    fn recovery_falls_back_to_an_older_snapshot_when_the_newest_is_damaged() {
        let mut store = MemSnapshotStore::default();
        let tree = DataTree::new();
        write_snapshot(&mut store, 5, 1, SnapshotSource::Tree(&tree)).unwrap();
        write_snapshot(&mut store, 9, 1, SnapshotSource::Tree(&tree)).unwrap();
        assert_eq!(load_newest(&store).unwrap().1, 9);
        *store.bytes_mut(9, 1).unwrap() = bytes::Bytes::from_static(b"half a snapshot");
        let (_, index, _) = load_newest(&store).unwrap();
        assert_eq!(index, 5, "the damaged newest one is skipped");
    }
}
