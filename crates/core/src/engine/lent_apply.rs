//! Applying committed entries with the partitions lent to worker threads
//! (docs/partitions.md, "Lent partitions", slice 5b).
//!
//! With several partitions the engine gathers the entries whose turn in
//! the one order has come into a run. A run holds only plain transactions:
//! a client's write that touches its own partition's tree and watches and
//! nothing of the engine's (no session's life, no membership, no extension
//! registration, no group move, no parts). Applying a run has two phases:
//!
//! 1. **Per partition, lent out.** Each partition applies its share of the
//!    run to its tree in zxid order and fires its own watches, producing
//!    the hand-off values of `engine/handoff.rs` (`Applied`). The shares
//!    touch disjoint state, so they may run on any threads at once.
//! 2. **The merge, on the engine's thread.** The values go to the gate in
//!    zxid order, as the sequential engine hands them over.
//!
//! Phase 2 must not read a tree: by then every partition has applied the
//! whole run. Only pumping a session's queue does (a read behind a write
//! is served when the write completes), so a run ends after any entry
//! whose completion may let a read or a decided reply go out; that read
//! then sees the state at its write, as it would sequentially.
//!
//! Without workers (`partition.threads=0`) the shares run one after
//! another on the engine's thread: the same phases. The simulators lend
//! to `SequentialWorkers`, which run the jobs in order, so they check the
//! runs' cutting and merging too.

use raft::eraftpb::{Entry, EntryType};
use stoa_tree::{TreeEventKind, Txn, TxnHeader, TxnOp};

use super::apply::change_of;
use super::handoff::{Applied, WriteOutcome};
use super::partition_core::PartitionCore;
use super::Engine;
use crate::session::{Pending, SessionId};

/// Threads the engine lends its partitions to, for work that touches one
/// partition alone. The server passes a pool (`partition.threads`); the
/// core itself starts no thread.
pub trait PartitionWorkers: Send {
    /// Threads beside the engine's own; 0 runs everything on the
    /// engine's thread.
    fn threads(&self) -> usize;

    /// Runs every job, on any threads (the caller's included), and returns
    /// once all have finished.
    fn run_all(&self, jobs: &mut [&mut (dyn FnMut() + Send)]);
}

/// Runs the jobs one after another on the engine's thread.
pub struct InlineWorkers;

impl PartitionWorkers for InlineWorkers {
    fn threads(&self) -> usize {
        0
    }

    fn run_all(&self, jobs: &mut [&mut (dyn FnMut() + Send)]) {
        for job in jobs {
            job();
        }
    }
}

/// Runs `job` on every item: spread over `workers` when `lend`, else one
/// after another on this thread. The lent phases' jobs each borrow one
/// partition core (their items), so they may run at once.
pub(super) fn run_jobs<T: Send>(
    workers: &dyn PartitionWorkers,
    lend: bool,
    items: impl Iterator<Item = T>,
    job: impl Fn(T) + Sync,
) {
    if !lend {
        return items.for_each(job);
    }
    let job = &job;
    let mut items: Vec<Option<T>> = items.map(Some).collect();
    let mut jobs: Vec<Box<dyn FnMut() + Send + '_>> = (items.iter_mut())
        .map(|item| {
            Box::new(move || job(item.take().expect("a job runs once")))
                as Box<dyn FnMut() + Send + '_>
        })
        .collect();
    let mut refs: Vec<&mut (dyn FnMut() + Send)> =
        jobs.iter_mut().map(|job| &mut **job as _).collect();
    workers.run_all(&mut refs);
}

/// For the simulators: says it has a thread, so that every lent phase
/// runs as with workers (reads are batched only then), but runs the jobs
/// one after another on the caller's thread, deterministically.
#[cfg(test)]
pub(crate) struct SequentialWorkers;

#[cfg(test)]
impl PartitionWorkers for SequentialWorkers {
    fn threads(&self) -> usize {
        1
    }

    fn run_all(&self, jobs: &mut [&mut (dyn FnMut() + Send)]) {
        InlineWorkers.run_all(jobs);
    }
}

/// Entries below which a run is applied on the engine's thread even with
/// workers: waking a thread costs some microseconds, applying a plain
/// transaction about one.
const LEND_MIN_ENTRIES: usize = 32;

/// One entry of a run, in zxid order.
struct RunEntry {
    partition: usize,
    header: TxnHeader,
    /// Counts for the commit latency (an entry of this leader's term).
    timed: bool,
}

/// A run of plain transactions and what applying it produced. Its vectors
/// are kept from run to run.
#[derive(Default)]
pub(super) struct Run {
    entries: Vec<RunEntry>,
    /// Per partition, its share of the run in zxid order.
    shares: Vec<Vec<Txn>>,
    /// Per partition, the hand-off values its share produced, in order:
    /// each transaction's fired watches, then its outcome.
    applied: Vec<Vec<Applied>>,
    /// Sessions seen in this run, and whether a reply that reads waits in
    /// their queue: nothing joins a queue while a run gathers, so each
    /// session's queue is scanned once per run, not once per write.
    reads_waiting: rustc_hash::FxHashMap<SessionId, bool>,
}

impl Run {
    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Whether applying `op` touches nothing but its partition's tree and
/// watches (see the module's comment).
pub(super) fn is_plain(op: &TxnOp) -> bool {
    let ours = |path: &str| {
        !path.starts_with(stoa_tree::ZOOKEEPER)
            && !path.starts_with(super::extensions::EXTENSIONS_ROOT)
    };
    match op {
        TxnOp::Create(create) => ours(&create.path),
        TxnOp::Delete { path }
        | TxnOp::DeleteContainer { path }
        | TxnOp::SetData { path, .. }
        | TxnOp::SetAcl { path, .. }
        | TxnOp::Check { path } => ours(path),
        TxnOp::Error(_) => true,
        TxnOp::Multi(ops) => ops
            .iter()
            .all(|op| !matches!(op, TxnOp::Multi(_)) && is_plain(op)),
        TxnOp::CreateSession { .. }
        | TxnOp::CloseSession { .. }
        | TxnOp::Seal { .. }
        | TxnOp::Watched { .. }
        | TxnOp::Parts { .. }
        | TxnOp::Restore { .. }
        | TxnOp::MoveGroups { .. } => false,
    }
}

impl PartitionCore {
    /// Phase 1: applies this partition's share of a run and fires its
    /// watches, appending what each transaction did to `applied`.
    fn apply_share(&mut self, share: &[Txn], applied: &mut Vec<Applied>) {
        for txn in share {
            self.apply_one_tree(txn, None, applied);
        }
    }

    /// Applies a transaction that changes this partition's tree alone and
    /// fires its watches (those of `decided` events, where a watch
    /// extension decided them), appending the events fired and then the
    /// outcome to `applied`.
    #[inline]
    pub(super) fn apply_one_tree(
        &mut self,
        txn: &Txn,
        decided: Option<&[(TreeEventKind, String)]>,
        applied: &mut Vec<Applied>,
    ) {
        let header = txn.header;
        let done = self.apply(txn);
        let mut fire = |core: &mut PartitionCore, kind, path: &str| {
            let change = change_of(kind);
            let conns = core.watches.trigger(change, path);
            if !conns.is_empty() {
                applied.push(Applied::Fired {
                    conns,
                    zxid: header.zxid,
                    change,
                    path: path.to_string(),
                });
            }
        };
        match decided {
            None => (done.events.iter()).for_each(|event| fire(self, event.kind, &event.path)),
            Some(events) => (events.iter()).for_each(|(kind, path)| fire(self, *kind, path)),
        }
        applied.push(Applied::Outcome(WriteOutcome {
            session: header.session_id,
            cxid: header.cxid,
            zxid: header.zxid,
            result: done.result,
            config: None,
            session_change: None,
        }));
    }
}

impl Engine {
    /// Lends the partitions to `workers` from now on.
    pub fn lend_partitions(&mut self, workers: Box<dyn PartitionWorkers>) {
        self.workers = workers;
    }

    /// Applies every entry whose turn in the one order has come: plain
    /// transactions in runs, anything else on its own.
    pub(super) fn apply_in_order(&mut self) {
        let mut run = std::mem::take(&mut self.run);
        run.shares.resize_with(self.cores.len(), Vec::new);
        run.applied.resize_with(self.cores.len(), Vec::new);
        while self.out.fatal.is_none() {
            let Some(ready) = self.order.as_mut().and_then(|order| order.next_ready()) else {
                break;
            };
            if ready.void {
                self.apply_run(&mut run);
                self.skip_void_entry(ready.partition, &ready.entry);
                continue;
            }
            self.follow_chain(ready.partition, &ready.entry);
            match self.take_plain(ready.partition, &ready.entry) {
                Some(txn) => {
                    let ends_run = self.may_release_reads(&mut run, &txn.header);
                    // As `apply_txn` decides it, after the entry's bookkeeping.
                    let timed = self.is_leader() && self.log_applied();
                    run.entries.push(RunEntry {
                        partition: ready.partition,
                        header: txn.header,
                        timed,
                    });
                    run.shares[ready.partition].push(txn);
                    if ends_run {
                        self.apply_run(&mut run);
                    }
                }
                None => {
                    self.apply_run(&mut run);
                    self.apply_entry(ready.partition, ready.entry);
                }
            }
        }
        self.apply_run(&mut run);
        self.run = run;
    }

    /// An entry a seal voided (`ApplyOrder::seal`): committed in its
    /// group's log but applied nowhere, as if it never committed. Only its
    /// bookkeeping is done.
    pub(super) fn skip_void_entry(&mut self, partition: usize, entry: &Entry) {
        let core = &mut self.cores[partition];
        core.take_entry(entry);
        if let Some(zxid) = Txn::zxid_of(&entry.data) {
            log::info!("partition {partition}: zxid {zxid:#x} voided by its seal, not applied");
            // A leader's own (it cannot have sealed after proposing it).
            if core
                .in_flight
                .front()
                .is_some_and(|t| t.header.zxid == zxid)
            {
                core.in_flight.pop_front();
            }
        }
    }

    /// The entry's transaction if it is plain, with the bookkeeping
    /// `apply_entry` does for it done; None leaves the entry to
    /// `apply_entry`.
    fn take_plain(&mut self, partition: usize, entry: &Entry) -> Option<Txn> {
        if entry.get_entry_type() != EntryType::EntryNormal || entry.data.is_empty() {
            return None;
        }
        let core = &mut self.cores[partition];
        let own = (core.in_flight.front())
            .is_some_and(|txn| Txn::zxid_of(&entry.data) == Some(txn.header.zxid));
        let txn = if own {
            if !is_plain(&core.in_flight.front().expect("checked").op) {
                return None;
            }
            core.own_proposal(&entry.data).expect("checked")
        } else {
            // Undecodable: apply_entry decodes it again and stops there.
            let txn = Txn::decode(&entry.data).ok()?;
            if !is_plain(&txn.op) {
                return None;
            }
            txn
        };
        core.take_entry(entry);
        Some(txn)
    }

    /// Completing this transaction may send a reply that reads the tree
    /// (or carries the applied zxid): its session has something other
    /// than writes queued, or a decided reply waits for a zxid up to it.
    fn may_release_reads(&self, run: &mut Run, header: &TxnHeader) -> bool {
        let sid = header.session_id;
        let waiting_read = *run.reads_waiting.entry(sid).or_insert_with(|| {
            (self.gate.sessions.get(&sid)).is_some_and(|s| {
                (s.queue.iter())
                    .any(|p| !matches!(p, Pending::Write { .. } | Pending::Remote { .. }))
            })
        });
        let waiting_zxid = (self.gate.zxid_waiters.first_key_value())
            .is_some_and(|(&after, _)| after <= header.zxid);
        waiting_read || waiting_zxid
    }

    /// Applies a run (phase 1, lent when it is worth it) and hands what it
    /// did to the gate in zxid order (phase 2); leaves it empty.
    fn apply_run(&mut self, run: &mut Run) {
        if run.is_empty() {
            return;
        }
        self.stats.apply_runs += 1;
        self.stats.apply_run_txns += run.entries.len() as u64;
        let busy = run.shares.iter().filter(|share| !share.is_empty()).count();
        let lend = busy > 1 && run.entries.len() >= LEND_MIN_ENTRIES && self.workers.threads() > 0;
        if lend {
            self.stats.apply_runs_lent += 1;
        }
        // A core away with no share stays away.
        let cores = self.cores.picked_mut(|p| !run.shares[p].is_empty());
        let shares = (run.shares.iter().zip(&mut run.applied))
            .filter(|(share, _)| !share.is_empty())
            .zip(cores)
            .map(|((share, applied), (_, core))| ((core, share), applied));
        run_jobs(&*self.workers, lend, shares, |((core, share), applied)| {
            core.apply_share(share, applied)
        });
        self.merge_run(run);
    }

    /// One transaction applied on its partition's core, from what that
    /// produced (`apply_one_tree`: its fired watches, then its outcome):
    /// it counts as applied, and they go to the gate. `timed`: an entry of
    /// this leader's term, counted in the commit latency.
    pub(super) fn hand_over_applied(
        &mut self,
        produced: &mut impl Iterator<Item = Applied>,
        zxid: i64,
        time_ms: i64,
        timed: bool,
    ) {
        loop {
            match produced.next() {
                Some(fired @ Applied::Fired { .. }) => self.hand_to_gate(fired),
                Some(Applied::Outcome(outcome)) => {
                    debug_assert_eq!(outcome.zxid, zxid);
                    self.stats.txns_applied += 1;
                    if timed {
                        self.stats
                            .record_commit((self.now_ms - time_ms).max(0) as u64);
                    }
                    self.hand_to_gate(Applied::Outcome(outcome));
                    return;
                }
                None => unreachable!("every transaction applied has an outcome"),
            }
        }
    }

    /// Phase 2: every entry's fired watches and outcome to the gate, in
    /// the run's (zxid) order.
    fn merge_run(&mut self, run: &mut Run) {
        let mut applied: Vec<_> = (run.applied.iter_mut()).map(|a| a.drain(..)).collect();
        for entry in run.entries.drain(..) {
            let header = &entry.header;
            let produced = &mut applied[entry.partition];
            self.hand_over_applied(produced, header.zxid, header.time_ms, entry.timed);
        }
        debug_assert!(applied.iter_mut().all(|a| a.next().is_none()));
        drop(applied);
        for share in &mut run.shares {
            share.clear();
        }
        run.reads_waiting.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::is_plain;
    use stoa_proto::codes::ErrorCode;
    use stoa_tree::{CreateTxn, TreeEventKind, TxnOp};

    fn create(path: &str) -> TxnOp {
        TxnOp::Create(CreateTxn {
            path: path.into(),
            data: None,
            acl: Vec::new(),
            ephemeral_owner: 0,
            parent_cversion: 1,
        })
    }

    fn set(path: &str) -> TxnOp {
        TxnOp::SetData {
            path: path.into(),
            data: None,
            version: 1,
        }
    }

    #[test]
    fn a_clients_write_on_its_own_partition_is_plain() {
        for op in [
            create("/app/x"),
            set("/app"),
            TxnOp::Delete { path: "/x".into() },
            TxnOp::DeleteContainer { path: "/c".into() },
            TxnOp::SetAcl {
                path: "/x".into(),
                acl: Vec::new(),
                aversion: 1,
            },
            TxnOp::Check { path: "/x".into() },
            TxnOp::Error(ErrorCode::NoNode),
            TxnOp::Multi(vec![create("/a"), set("/b"), TxnOp::Error(ErrorCode::Ok)]),
        ] {
            assert!(is_plain(&op), "{op:?}");
        }
    }

    #[test]
    fn what_touches_the_engine_or_several_partitions_is_not() {
        for op in [
            // The configuration, the placement, the extensions' registry:
            // applying them changes the engine, not only a tree.
            set("/zookeeper/config"),
            set("/zookeeper/partitions"),
            create("/extensions/counter"),
            TxnOp::Delete {
                path: "/extensions".into(),
            },
            TxnOp::Multi(vec![set("/x"), set("/zookeeper/config")]),
            TxnOp::CreateSession { timeout_ms: 1 },
            TxnOp::CloseSession { paths: Vec::new() },
            TxnOp::Seal { voids: Vec::new() },
            TxnOp::Watched {
                op: Box::new(set("/x")),
                extra: Vec::new(),
                events: vec![(TreeEventKind::NodeDataChanged, "/x".into())],
            },
            TxnOp::Parts {
                parts: vec![(1, set("/app/x"))],
                order: Vec::new(),
            },
            TxnOp::Restore {
                origin: 1,
                token: 1,
                tree: Vec::new(),
            },
            TxnOp::MoveGroups {
                moves: Vec::new(),
                data: Vec::new(),
                version: 1,
            },
        ] {
            assert!(!is_plain(&op), "{op:?}");
        }
    }
}
