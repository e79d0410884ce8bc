//! WalWriter: group commit, durable callbacks in token order, fail-stop.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};

use stoa_wal::{LogStore, Record, SimLog, WalError, WalWriter};

/// Counts syncs and can hold the first sync until released, so submits pile
/// up behind it deterministically.
struct CountingLog {
    inner: SimLog,
    syncs: Arc<AtomicU64>,
    first_sync_gate: Option<Arc<Barrier>>,
    fail_sync_number: Option<u64>,
}

impl CountingLog {
    fn new(syncs: Arc<AtomicU64>) -> CountingLog {
        CountingLog {
            inner: SimLog::new(),
            syncs,
            first_sync_gate: None,
            fail_sync_number: None,
        }
    }
}

impl LogStore for CountingLog {
    fn append(&mut self, records: &[Record]) -> Result<(), WalError> {
        self.inner.append(records)
    }

    fn sync(&mut self) -> Result<(), WalError> {
        if let Some(gate) = self.first_sync_gate.take() {
            gate.wait(); // the test has started
            gate.wait(); // the test has queued everything
        }
        let number = self.syncs.fetch_add(1, Ordering::SeqCst) + 1;
        if self.fail_sync_number == Some(number) {
            self.inner.fail_next_sync();
        }
        self.inner.sync()
    }

    fn mark_compactable(&mut self, partition: u32, index: u64) -> Result<(), WalError> {
        self.inner.mark_compactable(partition, index)
    }
}

type Reports = Arc<Mutex<Vec<(u64, bool)>>>;

fn recorder() -> (
    Reports,
    impl FnMut(u64, Result<(), WalError>) + Send + 'static,
) {
    let reports: Reports = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&reports);
    let callback = move |token, result: Result<(), WalError>| {
        sink.lock().expect("lock").push((token, result.is_ok()));
    };
    (reports, callback)
}

/// A writer whose first sync waits at `gate` twice (started, then released):
/// (syncs counted, gate, reports, writer).
fn writer_with_gated_first_sync() -> (
    Arc<AtomicU64>,
    Arc<Barrier>,
    Reports,
    WalWriter<CountingLog>,
) {
    let syncs = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(Barrier::new(2));
    let mut log = CountingLog::new(Arc::clone(&syncs));
    log.first_sync_gate = Some(Arc::clone(&gate));
    let (reports, on_durable) = recorder();
    let writer = WalWriter::spawn(log, on_durable).expect("spawn");
    (syncs, gate, reports, writer)
}

#[test]
fn many_submits_behind_a_slow_sync_share_one_sync() {
    let (syncs, gate, reports, writer) = writer_with_gated_first_sync();
    writer
        .submit(1, vec![Record::entry(0, 1, 1, vec![])])
        .expect("submit");
    gate.wait(); // writer is inside the first sync
    for token in 2..=100 {
        writer
            .submit(token, vec![Record::entry(0, 1, token, vec![])])
            .expect("submit");
    }
    gate.wait(); // release the first sync
    writer.shutdown();
    assert_eq!(
        syncs.load(Ordering::SeqCst),
        2,
        "tokens 2..=100 in one group"
    );
    assert_eq!(*reports.lock().expect("lock"), vec![(1, true), (100, true)]);
}

#[test]
fn durable_reports_increase_and_cover_every_token() {
    let syncs = Arc::new(AtomicU64::new(0));
    let (reports, on_durable) = recorder();
    let writer = WalWriter::spawn(CountingLog::new(Arc::clone(&syncs)), on_durable).expect("spawn");
    let writer = Arc::new(writer);
    let next_token = Arc::new(Mutex::new(0u64));
    let handles: Vec<_> = (0..4)
        .map(|partition| {
            let writer = Arc::clone(&writer);
            let next_token = Arc::clone(&next_token);
            std::thread::spawn(move || {
                for i in 0..250 {
                    // Allocate and submit under one lock: tokens must reach
                    // the writer in increasing order.
                    let mut token = next_token.lock().expect("lock");
                    *token += 1;
                    writer
                        .submit(*token, vec![Record::entry(partition, 1, i, vec![])])
                        .expect("submit");
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("join");
    }
    let writer = Arc::into_inner(writer).expect("sole owner");
    writer.shutdown();
    let reports = reports.lock().expect("lock");
    assert!(reports.iter().all(|&(_, ok)| ok));
    assert!(reports.windows(2).all(|w| w[0].0 < w[1].0), "token order");
    assert_eq!(reports.last().map(|r| r.0), Some(1000));
    assert_eq!(syncs.load(Ordering::SeqCst), reports.len() as u64);
}

#[test]
fn failed_sync_is_reported_once_and_stops_the_writer() {
    let syncs = Arc::new(AtomicU64::new(0));
    let mut log = CountingLog::new(Arc::clone(&syncs));
    log.fail_sync_number = Some(2);
    let (done_tx, done_rx) = mpsc::channel();
    let writer = WalWriter::spawn(log, move |token, result: Result<(), WalError>| {
        done_tx.send((token, result.is_ok())).expect("send");
    })
    .expect("spawn");
    writer.submit(1, vec![]).expect("submit");
    assert_eq!(done_rx.recv().expect("report"), (1, true));
    writer.submit(2, vec![]).expect("submit");
    assert_eq!(done_rx.recv().expect("report"), (2, false));
    assert!(writer.is_stopped());
    assert!(matches!(
        writer.submit(3, vec![]),
        Err(WalError::WriterStopped)
    ));
    writer.shutdown();
    assert!(done_rx.try_recv().is_err(), "no report after the failure");
}

#[test]
#[should_panic(expected = "not above")]
fn decreasing_token_is_a_caller_bug() {
    let (_reports, on_durable) = recorder();
    let writer = WalWriter::spawn(SimLog::new(), on_durable).expect("spawn");
    writer.submit(5, vec![]).expect("submit");
    let _ = writer.submit(5, vec![]);
}

#[test]
fn oversized_record_is_refused_at_submit_without_stopping_the_writer() {
    let (reports, on_durable) = recorder();
    let writer = WalWriter::spawn(SimLog::new(), on_durable).expect("spawn");
    let too_big = Record::entry(0, 1, 1, vec![0; stoa_wal::RECORD_PAYLOAD_BYTES_MAX + 1]);
    assert!(matches!(
        writer.submit(1, vec![too_big]),
        Err(WalError::RecordTooLarge { .. })
    ));
    writer.submit(2, vec![]).expect("still accepting");
    writer.shutdown();
    assert_eq!(*reports.lock().expect("lock"), vec![(2, true)]);
}

#[test]
fn write_now_on_an_idle_writer_syncs_on_the_callers_thread() {
    let syncs = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = mpsc::channel();
    let writer = WalWriter::spawn(
        CountingLog::new(Arc::clone(&syncs)),
        move |token, result: Result<(), WalError>| {
            done_tx.send((token, result.is_ok())).expect("send");
        },
    )
    .expect("spawn");
    let record = |index| vec![Record::entry(0, 1, index, vec![1, 2, 3])];
    assert!(writer.write_now(1, &record(1)).expect("write"));
    assert_eq!(syncs.load(Ordering::SeqCst), 1, "synced before it returned");
    // The thread goes on after it, in token order.
    writer.submit(2, record(2)).expect("submit");
    assert_eq!(done_rx.recv().expect("report"), (2, true));
    assert!(writer.write_now(3, &record(3)).expect("write"));
    assert_eq!(syncs.load(Ordering::SeqCst), 3);
    let stats = writer.sync_stats();
    assert_eq!((stats.groups, stats.inline_groups), (3, 2));
    writer.shutdown();
    assert!(
        done_rx.try_recv().is_err(),
        "inline batches are not reported through the callback"
    );
}

#[test]
fn write_now_while_a_batch_is_in_flight_leaves_it_to_the_thread() {
    let (syncs, gate, reports, writer) = writer_with_gated_first_sync();
    writer.submit(1, vec![]).expect("submit");
    gate.wait(); // the writer is inside its sync of batch 1
    assert!(!writer.write_now(2, &[]).expect("not written"));
    writer.submit(2, vec![]).expect("submit");
    gate.wait();
    writer.shutdown();
    let reports = reports.lock().expect("lock");
    assert_eq!(reports.last(), Some(&(2, true)));
    assert_eq!(syncs.load(Ordering::SeqCst), reports.len() as u64);
}

#[test]
fn a_failed_inline_sync_stops_the_writer() {
    let syncs = Arc::new(AtomicU64::new(0));
    let mut log = CountingLog::new(Arc::clone(&syncs));
    log.fail_sync_number = Some(1);
    let (reports, on_durable) = recorder();
    let writer = WalWriter::spawn(log, on_durable).expect("spawn");
    assert!(writer.write_now(1, &[]).is_err());
    assert!(writer.is_stopped());
    assert!(matches!(
        writer.submit(2, vec![]),
        Err(WalError::WriterStopped)
    ));
    assert!(matches!(
        writer.write_now(3, &[]),
        Err(WalError::WriterStopped)
    ));
    writer.shutdown();
    assert!(reports.lock().expect("lock").is_empty());
}

#[test]
#[should_panic(expected = "not above")]
fn an_inline_token_not_above_the_last_is_a_caller_bug() {
    let (_reports, on_durable) = recorder();
    let writer = WalWriter::spawn(SimLog::new(), on_durable).expect("spawn");
    writer.write_now(5, &[]).expect("write");
    let _ = writer.write_now(5, &[]);
}
