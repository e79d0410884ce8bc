//! `WalWriter`: the dedicated I/O thread. Partition threads submit batches;
//! the thread appends every batch queued so far and syncs once for the whole
//! group (group commit), then reports the highest token made durable.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use crate::error::WalError;
use crate::record::Record;
use crate::store::{check_payload_bounds, LogStore};

/// Batches that may wait for the writer; `submit` blocks beyond this, which
/// is the back-pressure on the partitions.
pub const WRITER_QUEUE_BATCHES_MAX: usize = 1024;
/// Batches made durable by one sync at most, so one group's latency stays
/// bounded under a flood.
const GROUP_BATCHES_MAX: usize = WRITER_QUEUE_BATCHES_MAX;

struct Batch {
    token: u64,
    records: Vec<Record>,
}

struct Submitter {
    /// None once shut down.
    sender: Option<SyncSender<Batch>>,
    /// The last token submitted; tokens must increase.
    last_token: Option<u64>,
}

/// How long the writer's groups took to reach the disk: the write and the
/// fdatasync of each group, as operators see it in `mntr`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncStats {
    pub groups: u64,
    pub sync_micros_total: u64,
    pub sync_micros_max: u64,
}

/// Written by the writer thread only; read by anyone.
#[derive(Default)]
struct SyncCounters {
    groups: AtomicU64,
    sync_micros_total: AtomicU64,
    sync_micros_max: AtomicU64,
}

impl SyncCounters {
    fn record(&self, micros: u64) {
        self.groups.fetch_add(1, Ordering::Relaxed);
        self.sync_micros_total.fetch_add(micros, Ordering::Relaxed);
        self.sync_micros_max.fetch_max(micros, Ordering::Relaxed);
    }
}

pub struct WalWriter {
    /// Token check and send under one lock, so queue order is token order
    /// even with several submitting threads.
    submitter: Mutex<Submitter>,
    stopped: Arc<AtomicBool>,
    sync_counters: Arc<SyncCounters>,
    thread: Option<JoinHandle<()>>,
}

impl WalWriter {
    /// Starts the thread. `on_durable(token, Ok(()))` means every batch
    /// submitted with a token `<= token` is durable. `on_durable(token,
    /// Err(e))` means a write or sync failed: nothing from the failing group
    /// on is durable, and the writer accepts nothing more (fail-stop).
    pub fn spawn<L, F>(log: L, on_durable: F) -> Result<WalWriter, WalError>
    where
        L: LogStore + 'static,
        F: FnMut(u64, Result<(), WalError>) + Send + 'static,
    {
        let (sender, receiver) = mpsc::sync_channel(WRITER_QUEUE_BATCHES_MAX);
        let stopped = Arc::new(AtomicBool::new(false));
        let thread_stopped = Arc::clone(&stopped);
        let sync_counters = Arc::new(SyncCounters::default());
        let thread_counters = Arc::clone(&sync_counters);
        let thread = thread::Builder::new()
            .name("stoa-wal".to_string())
            .spawn(move || run(log, on_durable, receiver, &thread_stopped, &thread_counters))
            .map_err(|e| WalError::io("spawn wal writer thread", "", e))?;
        Ok(WalWriter {
            submitter: Mutex::new(Submitter {
                sender: Some(sender),
                last_token: None,
            }),
            stopped,
            sync_counters,
            thread: Some(thread),
        })
    }

    /// Queues `records` under `token`, blocking while the queue is full.
    /// Tokens must strictly increase across all submitters. An oversized
    /// record is refused here, before it could stop the writer.
    pub fn submit(&self, token: u64, records: Vec<Record>) -> Result<(), WalError> {
        if self.stopped.load(Ordering::Acquire) {
            return Err(WalError::WriterStopped);
        }
        check_payload_bounds(&records)?;
        let mut submitter = self
            .submitter
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(last) = submitter.last_token {
            assert!(token > last, "wal token {token} not above {last}");
        }
        let Some(sender) = submitter.sender.as_ref() else {
            return Err(WalError::WriterStopped);
        };
        sender
            .send(Batch { token, records })
            .map_err(|_| WalError::WriterStopped)?;
        submitter.last_token = Some(token);
        Ok(())
    }

    /// Time spent writing and syncing groups so far.
    pub fn sync_stats(&self) -> SyncStats {
        let c = &self.sync_counters;
        SyncStats {
            groups: c.groups.load(Ordering::Relaxed),
            sync_micros_total: c.sync_micros_total.load(Ordering::Relaxed),
            sync_micros_max: c.sync_micros_max.load(Ordering::Relaxed),
        }
    }

    /// True once a write or sync failed; `submit` then returns
    /// `WriterStopped`.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Makes everything submitted durable (or reports the failure), then
    /// joins the thread. A panic of the writer thread is re-raised here.
    pub fn shutdown(mut self) {
        if let Err(panic) = self.stop_and_join() {
            std::panic::resume_unwind(panic);
        }
    }

    fn stop_and_join(&mut self) -> thread::Result<()> {
        let mut submitter = self
            .submitter
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Dropping the sender ends the thread's loop once the queue drains.
        submitter.sender = None;
        drop(submitter);
        match self.thread.take() {
            Some(thread) => thread.join(),
            None => Ok(()),
        }
    }
}

impl Drop for WalWriter {
    fn drop(&mut self) {
        // A panic is not re-raised from drop; `shutdown` is the loud path.
        let _ = self.stop_and_join();
    }
}

fn run<L, F>(
    mut log: L,
    mut on_durable: F,
    receiver: Receiver<Batch>,
    stopped: &AtomicBool,
    counters: &SyncCounters,
) where
    L: LogStore,
    F: FnMut(u64, Result<(), WalError>),
{
    let mut group = Vec::with_capacity(GROUP_BATCHES_MAX);
    while let Ok(first) = receiver.recv() {
        group.push(first);
        while group.len() < GROUP_BATCHES_MAX {
            match receiver.try_recv() {
                Ok(batch) => group.push(batch),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let highest_token = match group.last() {
            Some(batch) => batch.token,
            None => unreachable!("group holds at least the first batch"),
        };
        let started = Instant::now();
        let result = group
            .iter()
            .try_for_each(|batch| log.append(&batch.records))
            .and_then(|()| log.sync());
        counters.record(started.elapsed().as_micros() as u64);
        group.clear();
        let failed = result.is_err();
        if failed {
            // Before the callback, so nothing submitted after it is accepted.
            stopped.store(true, Ordering::Release);
        }
        on_durable(highest_token, result);
        if failed {
            return;
        }
    }
}
