//! A node's disk in the simulator: the log writer over `SimLog` and the
//! snapshot writer over `MemSnapshotStore`, both run when the simulator
//! says, so a crash can fall between any two of their steps. A crash keeps
//! what a real disk may keep: synced records, any prefix of what the writer
//! had written since (torn, perhaps damaged: `SimLog::crash`), and whole
//! snapshots only.

use std::collections::VecDeque;

use stoa_wal::{LogStore, Record, Replay, SimLog};

use super::snapshots::{
    coalesce_snapshot_tasks, run_snapshot_task, write_snapshot, MemSnapshotStore, SnapshotDone,
    SnapshotSource, SnapshotTask,
};
use super::{LogSink, SnapshotSink};

/// The error an install returns when the machine stops in the middle of it.
pub const INSTALL_STOPPED: &str = "the machine stopped while installing a snapshot";

/// The WAL writer thread, stepped by hand: `write_group` does what one
/// pass of the writer's loop does (append every batch of the group, one
/// sync).
#[derive(Default)]
pub struct SimWal {
    log: SimLog,
    /// Submitted, not yet taken by the writer.
    queued: VecDeque<(u64, Vec<Record>)>,
    /// A write or sync failed: the writer takes nothing more (fail-stop).
    stopped: bool,
    /// The next sync will fail.
    sync_failure_armed: bool,
    /// Batches the node wrote on its own thread (`LogSink::write_now`).
    pub inline_writes: u64,
}

impl SimWal {
    /// Batches submitted and not yet written.
    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    /// Writes and syncs up to `batches_max` queued batches as one group.
    /// `Some(Ok(token))`: every batch up to `token` is durable; `Some(Err)`:
    /// nothing of the group is, and the writer has stopped.
    pub fn write_group(&mut self, batches_max: usize) -> Option<Result<u64, String>> {
        if self.stopped || self.queued.is_empty() {
            return None;
        }
        let take = batches_max.clamp(1, self.queued.len());
        let group: Vec<(u64, Vec<Record>)> = self.queued.drain(..take).collect();
        let highest = group.last().map(|(token, _)| *token)?;
        self.sync_failure_armed = false;
        let result = group
            .iter()
            .try_for_each(|(_, records)| self.log.append(records))
            .and_then(|()| self.log.sync());
        match result {
            Ok(()) => Some(Ok(highest)),
            Err(e) => {
                self.stopped = true;
                Some(Err(e.to_string()))
            }
        }
    }

    /// The next sync fails (an fsync error).
    pub fn fail_next_sync(&mut self) {
        self.sync_failure_armed = true;
        self.log.fail_next_sync();
    }

    /// A sync failure is armed and has not happened yet.
    pub fn sync_failure_armed(&self) -> bool {
        self.sync_failure_armed
    }

    /// The machine stops: the writer had written everything queued (the
    /// most a crash can leave behind), none of it synced; `SimLog::crash`
    /// keeps a random prefix of it, torn or damaged as a disk would.
    pub fn crash(&mut self, rng_seed: u64) {
        for (_, records) in self.queued.drain(..) {
            if self.log.append(&records).is_err() {
                break;
            }
        }
        self.log.crash(rng_seed);
    }

    /// Opens the log again after a crash: what survived, as `FileLog::open`
    /// would read it.
    pub fn recover(&mut self) -> Replay {
        self.queued.clear();
        self.stopped = false;
        self.sync_failure_armed = false;
        self.log.recover()
    }
}

impl LogSink for SimWal {
    fn submit(&mut self, token: u64, records: Vec<Record>) -> Result<(), String> {
        if self.stopped {
            return Err("the WAL writer stopped".into());
        }
        if let Some((last, _)) = self.queued.back() {
            assert!(token > *last, "wal token {token} not above {last}");
        }
        self.queued.push_back((token, records));
        Ok(())
    }

    /// As `WalWriter::write_now`: only with nothing queued (the writer
    /// idle), appended and synced at once; a failure stops the writer.
    fn write_now(&mut self, token: u64, records: &[Record]) -> Result<bool, String> {
        if self.stopped {
            return Err("the WAL writer stopped".into());
        }
        if !self.queued.is_empty() {
            return Ok(false);
        }
        let _ = token;
        self.sync_failure_armed = false;
        match self.log.append(records).and_then(|()| self.log.sync()) {
            Ok(()) => {
                self.inline_writes += 1;
                Ok(true)
            }
            Err(e) => {
                self.stopped = true;
                Err(e.to_string())
            }
        }
    }
}

/// The snapshot thread, stepped by hand.
#[derive(Default)]
pub struct SimSnapshots {
    /// One store per partition, by partition number.
    stores: Vec<MemSnapshotStore>,
    queued: Vec<SnapshotTask>,
    /// The machine stops in the middle of the next install: nothing of
    /// that snapshot is stored (the file store's rename never happened).
    pub stop_in_next_install: bool,
}

impl SimSnapshots {
    /// The snapshots of `partition`.
    pub fn store(&mut self, partition: u32) -> &mut MemSnapshotStore {
        let index = partition as usize;
        if self.stores.len() <= index {
            self.stores
                .resize_with(index + 1, MemSnapshotStore::default);
        }
        &mut self.stores[index]
    }

    /// The stores of a server of `partitions` partitions.
    pub fn stores(&mut self, partitions: u32) -> &[MemSnapshotStore] {
        self.store(partitions - 1);
        &self.stores[..partitions as usize]
    }

    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    /// Runs what is queued, as the snapshot thread does when it wakes.
    pub fn run_queued(&mut self) -> Vec<Result<SnapshotDone, String>> {
        let tasks = coalesce_snapshot_tasks(std::mem::take(&mut self.queued));
        tasks
            .into_iter()
            .map(|task| run_snapshot_task(self.store(task.partition()), task))
            .collect()
    }

    /// The machine stops: tasks not yet run are gone.
    pub fn crash(&mut self) {
        self.queued.clear();
    }
}

impl SnapshotSink for SimSnapshots {
    fn install(
        &mut self,
        partition: u32,
        index: u64,
        term: u64,
        data: &[u8],
    ) -> Result<(), String> {
        if std::mem::take(&mut self.stop_in_next_install) {
            return Err(INSTALL_STOPPED.into());
        }
        let store = self.store(partition);
        write_snapshot(store, index, term, SnapshotSource::Bytes(data)).map(|_| ())
    }

    fn submit(&mut self, task: SnapshotTask) {
        self.queued.push(task);
    }
}
