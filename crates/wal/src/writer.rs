//! `WalWriter`: the dedicated I/O thread. Partition threads submit batches;
//! the thread appends every batch queued so far and syncs once for the whole
//! group (group commit), then reports the highest token made durable.
//!
//! A submitter may instead write a batch itself (`write_now`) while the
//! thread is idle, every earlier batch durable: a lone synchronous writer
//! then pays no thread hand-off, and no wake-up back, around its fsync.
//! The log sits behind a mutex only to move between the two threads; by
//! construction nobody ever waits on it (see `write_now`).

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
    /// Of `groups`, those a submitter wrote itself (`WalWriter::write_now`).
    pub inline_groups: u64,
    pub sync_micros_total: u64,
    pub sync_micros_max: u64,
}

/// Written by the writer thread only; read by anyone.
#[derive(Default)]
struct SyncCounters {
    groups: AtomicU64,
    inline_groups: AtomicU64,
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

pub struct WalWriter<L> {
    /// Token check and send under one lock, so queue order is token order
    /// even with several submitting threads.
    submitter: Mutex<Submitter>,
    /// The writer thread's, except while `write_now` writes a batch.
    log: Arc<Mutex<L>>,
    /// The highest token made durable; stored once the thread let go of
    /// the log for that group.
    durable: Arc<AtomicU64>,
    stopped: Arc<AtomicBool>,
    sync_counters: Arc<SyncCounters>,
    thread: Option<JoinHandle<()>>,
}

impl<L: LogStore + 'static> WalWriter<L> {
    /// Starts the thread. `on_durable(token, Ok(()))` means every batch
    /// submitted with a token `<= token` is durable. `on_durable(token,
    /// Err(e))` means a write or sync failed: nothing from the failing group
    /// on is durable, and the writer accepts nothing more (fail-stop).
    pub fn spawn<F>(log: L, on_durable: F) -> Result<WalWriter<L>, WalError>
    where
        F: FnMut(u64, Result<(), WalError>) + Send + 'static,
    {
        let (sender, receiver) = mpsc::sync_channel(WRITER_QUEUE_BATCHES_MAX);
        let log = Arc::new(Mutex::new(log));
        let durable = Arc::new(AtomicU64::new(0));
        let stopped = Arc::new(AtomicBool::new(false));
        let sync_counters = Arc::new(SyncCounters::default());
        let shared = Shared {
            log: Arc::clone(&log),
            durable: Arc::clone(&durable),
            stopped: Arc::clone(&stopped),
            counters: Arc::clone(&sync_counters),
        };
        let thread = thread::Builder::new()
            .name("stoa-wal".to_string())
            .spawn(move || run(shared, on_durable, receiver))
            .map_err(|e| WalError::io("spawn wal writer thread", "", e))?;
        Ok(WalWriter {
            submitter: Mutex::new(Submitter {
                sender: Some(sender),
                last_token: None,
            }),
            log,
            durable,
            stopped,
            sync_counters,
            thread: Some(thread),
        })
    }

    /// Queues `records` under `token`, blocking while the queue is full.
    /// Tokens must strictly increase across all submitters. An oversized
    /// record is refused here, before it could stop the writer.
    pub fn submit(&self, token: u64, records: Vec<Record>) -> Result<(), WalError> {
        let mut submitter = self.submitter_for(token, &records)?;
        let Some(sender) = submitter.sender.as_ref() else {
            return Err(WalError::WriterStopped);
        };
        sender
            .send(Batch { token, records })
            .map_err(|_| WalError::WriterStopped)?;
        submitter.last_token = Some(token);
        Ok(())
    }

    /// Writes and syncs `records` under `token` on the caller's thread, if
    /// the writer thread is idle: every batch submitted before is durable
    /// (so the thread holds nothing and is not writing). Returns true when
    /// `records` are durable now (nothing is reported through the
    /// callback for `token`), false when the thread was busy and nothing
    /// was done: submit the batch instead. An error stops the writer, as a
    /// failed group does.
    pub fn write_now(&self, token: u64, records: &[Record]) -> Result<bool, WalError> {
        let mut submitter = self.submitter_for(token, records)?;
        if let Some(last) = submitter.last_token {
            if self.durable.load(Ordering::Acquire) < last {
                return Ok(false);
            }
        }
        if submitter.sender.is_none() {
            return Err(WalError::WriterStopped);
        }
        // The thread stores `durable` only after letting go of the log, and
        // takes it again only for a batch submitted after this one (the
        // submitter lock is held): it is free.
        let Ok(mut log) = self.log.try_lock() else {
            return Ok(false);
        };
        let started = Instant::now();
        let result = log.append(records).and_then(|()| log.sync());
        self.sync_counters
            .record(started.elapsed().as_micros() as u64);
        self.sync_counters
            .inline_groups
            .fetch_add(1, Ordering::Relaxed);
        drop(log);
        if let Err(e) = result {
            self.stopped.store(true, Ordering::Release);
            return Err(e);
        }
        submitter.last_token = Some(token);
        self.durable.store(token, Ordering::Release);
        Ok(true)
    }

    /// The submitter, locked, for a batch under `token`: refused when the
    /// writer stopped or a record is too large; a token not above the last
    /// one is a caller's bug.
    fn submitter_for(
        &self,
        token: u64,
        records: &[Record],
    ) -> Result<std::sync::MutexGuard<'_, Submitter>, WalError> {
        if self.stopped.load(Ordering::Acquire) {
            return Err(WalError::WriterStopped);
        }
        check_payload_bounds(records)?;
        let submitter = self
            .submitter
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(last) = submitter.last_token {
            assert!(token > last, "wal token {token} not above {last}");
        }
        Ok(submitter)
    }

    /// Time spent writing and syncing groups so far.
    pub fn sync_stats(&self) -> SyncStats {
        let c = &self.sync_counters;
        SyncStats {
            groups: c.groups.load(Ordering::Relaxed),
            inline_groups: c.inline_groups.load(Ordering::Relaxed),
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
}

impl<L> WalWriter<L> {
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

impl<L> Drop for WalWriter<L> {
    fn drop(&mut self) {
        // A panic is not re-raised from drop; `shutdown` is the loud path.
        let _ = self.stop_and_join();
    }
}

/// What the writer thread shares with `WalWriter`.
struct Shared<L> {
    log: Arc<Mutex<L>>,
    durable: Arc<AtomicU64>,
    stopped: Arc<AtomicBool>,
    counters: Arc<SyncCounters>,
}

fn run<L, F>(shared: Shared<L>, mut on_durable: F, receiver: Receiver<Batch>)
where
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
        let result = {
            // `write_now` writes only while every submitted batch is
            // durable, and these are not yet: the lock is free.
            let mut log = shared
                .log
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            group
                .iter()
                .try_for_each(|batch| log.append(&batch.records))
                .and_then(|()| log.sync())
        };
        shared.counters.record(started.elapsed().as_micros() as u64);
        group.clear();
        let failed = result.is_err();
        if failed {
            // Before the callback, so nothing submitted after it is accepted.
            shared.stopped.store(true, Ordering::Release);
        } else {
            shared.durable.store(highest_token, Ordering::Release);
        }
        on_durable(highest_token, result);
        if failed {
            return;
        }
    }
}
