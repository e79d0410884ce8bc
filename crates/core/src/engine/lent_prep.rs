//! Preparing client writes with the partitions lent to worker threads
//! (docs/partitions.md, "Lent partitions: preparing", slice 5b's second
//! phase).
//!
//! While the leader takes in one turn's client frames and followers'
//! forwards, a *plain* write (a data write whose ops all go to one
//! partition, touching neither `/zookeeper` nor `/extensions`, with no
//! node or watch extension involved) gets its zxid at once, as every write
//! does (its reply is matched by it), and waits in a batch to be prepared.
//! The batch is prepared, in zxid order per partition, before anything else
//! prepares or proposes, reads a speculative tree or in-flight list, or may
//! change leadership: before every admission that is not plain, and at the
//! start of every input other than frames and forwards, of every tick and
//! of every output taken. So each group receives its proposals in zxid
//! order and each check sees every earlier write of its partition, as when
//! each write was prepared on arrival, and no write waits past the turn.
//!
//! Preparing a batch: each partition prepares its share against its own
//! tree and pending changes and proposes it to its own group. The shares
//! touch disjoint state (each job borrows one partition core), so they may
//! run on any threads at once; without workers (`partition.threads=0`)
//! they run one after another, the same phases. The simulators lend to
//! `SequentialWorkers` (the jobs in order), so they check the batching
//! under every fault. With one partition nothing is batched: each write is
//! prepared on arrival.

use stoa_proto::request::Request;
use stoa_tree::PrepContext;

use super::cores::AwayDone;
use super::handoff::Identity;
use super::lent_apply::run_jobs;
use super::partition_core::PartitionCore;
use super::routing::WriteRoute;
use super::Engine;
use crate::session::SessionId;

/// Writes below which a batch is prepared on the engine's thread even with
/// workers: waking a thread costs some microseconds, preparing a plain
/// write a few.
const LEND_MIN_WRITES: usize = 32;

/// A plain write admitted and given its zxid, not yet prepared.
pub(super) struct PlainWrite {
    zxid: i64,
    session_id: SessionId,
    xid: i32,
    time_ms: i64,
    identity: Identity,
    request: Request,
}

/// The plain writes of the turn under way, per partition in zxid order.
/// Its vectors are kept from batch to batch.
#[derive(Default)]
pub(super) struct PrepBatch {
    /// Requests are being taken in (an input of frames or a forward):
    /// plain writes may wait here until the turn's output.
    open: bool,
    writes: usize,
    /// Per partition, its share in zxid order.
    shares: Vec<Vec<PlainWrite>>,
    /// Per partition, the writes of its share that failed (counted as
    /// request errors, as a write prepared on arrival is).
    errors: Vec<u64>,
    /// Per partition, whether it has a share (the cores to prepare on).
    with_share: Vec<bool>,
}

impl PrepBatch {
    pub(super) fn is_empty(&self) -> bool {
        self.writes == 0
    }
}

/// Whether `request` is a data write, the kind a batch may hold: a write
/// other than a reconfig or a session's close, which change the engine.
fn is_data_write(request: &Request) -> bool {
    request.is_write() && !matches!(request, Request::Reconfig(_) | Request::CloseSession)
}

/// Whether a path is one whose writes change the engine, not only a tree:
/// the configuration, the placement, the extensions' registry.
fn is_engine_path(path: &str) -> bool {
    stoa_tree::within(path, stoa_tree::ZOOKEEPER)
        || stoa_tree::within(path, super::extensions::EXTENSIONS_ROOT)
}

impl PartitionCore {
    /// Prepares this partition's share of a batch in zxid order and
    /// proposes each transaction to its group; returns how many failed.
    pub(super) fn prepare_share(
        &mut self,
        partition: usize,
        share: &mut Vec<PlainWrite>,
        ttl_enabled: bool,
    ) -> u64 {
        let mut errors = 0;
        for write in share.drain(..) {
            let ctx = PrepContext {
                session_id: write.session_id,
                cxid: write.xid,
                zxid: write.zxid,
                time_ms: write.time_ms,
                ids: &write.identity.ids,
                is_super: write.identity.is_super,
                ttl_enabled,
            };
            let prepared =
                self.preparing(|preparer, tree| preparer.prepare(tree, &ctx, &write.request));
            let txn = prepared.unwrap_or_else(|e| {
                errors += 1;
                ctx.failed(e)
            });
            self.propose_txn(partition, txn);
        }
        errors
    }
}

impl Engine {
    /// Opens the batch to the plain writes of an input of frames or
    /// forwards, or closes it (what it holds waits for `prepare_batch`).
    pub(super) fn open_prep_batch(&mut self, open: bool) {
        debug_assert!(self.cores.len() > 1, "one partition prepares on arrival");
        self.prep_batch.open = open;
    }

    /// Whether a turn's requests are being taken in (the batches may grow).
    pub(super) fn prep_batch_open(&self) -> bool {
        self.prep_batch.open
    }

    /// At the end of a turn, or before an input that is not one of its
    /// requests: serves the batched reads (where partitions own threads,
    /// sends them there: answered at once if `wait_for_reads`, else in
    /// flight until the engine next needs them answered), and sends each
    /// partition's share of the batched writes away to be prepared on its
    /// own thread if it has one (`engine/cores.rs`), else prepares them.
    /// Away, the shares still go first: whatever reaches for a core next
    /// waits for its share (a recall) or follows it (a job, a raft message
    /// or tick stepped there).
    pub(super) fn finish_batches(&mut self, wait_for_reads: bool) {
        self.serve_read_batch(wait_for_reads);
        if self.cores.owned() {
            self.send_batch_away();
        } else {
            self.prepare_batch();
        }
    }

    /// The partition a request admitted now may wait in the batch for:
    /// `Some` only for a plain write while the batch is open.
    pub(super) fn batch_partition(&self, request: &Request) -> Option<usize> {
        if !self.prep_batch.open
            || !is_data_write(request)
            || self.extensions.has_watch_extensions()
        {
            return None;
        }
        let engine_path = match request {
            Request::Multi(ops) => ops.iter().any(|op| op.path().is_none_or(is_engine_path)),
            request => request.path().is_none_or(is_engine_path),
        };
        if engine_path || self.routes_to_extension(request) {
            return None;
        }
        match self.write_route(request) {
            WriteRoute::On(partition) => Some(partition),
            WriteRoute::RootChange { .. } | WriteRoute::MultiAcross => None,
        }
    }

    /// Puts a plain write, its zxid just handed out, in the batch.
    pub(super) fn batch_write(
        &mut self,
        partition: usize,
        zxid: i64,
        session_id: SessionId,
        xid: i32,
        identity: Identity,
        request: Request,
    ) {
        debug_assert!(
            self.prep_batch.open,
            "a write batched outside a turn's requests"
        );
        if self.group_load_counted() {
            self.count_group_request(&request);
        }
        let batch = &mut self.prep_batch;
        batch.shares.resize_with(self.cores.len(), Vec::new);
        batch.shares[partition].push(PlainWrite {
            zxid,
            session_id,
            xid,
            time_ms: self.now_ms,
            identity,
            request,
        });
        batch.writes += 1;
    }

    /// Sends each partition's share of the batch away with its core, to
    /// be prepared and proposed there, its group's ready taken apart
    /// after (`engine/cores.rs`); leaves the batch empty. What it did comes
    /// back to `Engine::absorb_away`.
    fn send_batch_away(&mut self) {
        if self.prep_batch.is_empty() {
            return;
        }
        self.stats.prep_batches += 1;
        self.stats.prep_batch_writes += self.prep_batch.writes as u64;
        self.prep_batch.writes = 0;
        let ttl_enabled = self.config.ttl_enabled;
        for partition in 0..self.prep_batch.shares.len() {
            if self.prep_batch.shares[partition].is_empty() {
                continue;
            }
            let mut share = std::mem::take(&mut self.prep_batch.shares[partition]);
            self.cores.send_away(partition, move |core| {
                let errors = core.prepare_share(partition, &mut share, ttl_enabled);
                let taken = core.take_plain_ready(partition);
                AwayDone {
                    errors,
                    taken,
                    ..AwayDone::nothing(partition)
                }
            });
        }
    }

    /// Prepares and proposes every write of the batch (lent when it is
    /// worth it); leaves it empty.
    pub(super) fn prepare_batch(&mut self) {
        let batch = &mut self.prep_batch;
        if batch.is_empty() {
            return;
        }
        batch.errors.clear();
        batch.errors.resize(batch.shares.len(), 0);
        self.stats.prep_batches += 1;
        self.stats.prep_batch_writes += batch.writes as u64;
        let ttl_enabled = self.config.ttl_enabled;
        let busy = batch
            .shares
            .iter()
            .filter(|share| !share.is_empty())
            .count();
        let lend = busy > 1 && batch.writes >= LEND_MIN_WRITES && self.workers.threads() > 0;
        if lend {
            self.stats.prep_batches_lent += 1;
        }
        // A core away with no share stays away.
        batch.with_share.clear();
        (batch.with_share).extend(batch.shares.iter().map(|share| !share.is_empty()));
        let with_share = &batch.with_share;
        let cores = (self.cores).picked_mut(|p| with_share.get(p) == Some(&true));
        let shares = (batch.shares.iter_mut().zip(&mut batch.errors))
            .filter(|(share, _)| !share.is_empty())
            .zip(cores)
            .map(|((share, errors), core)| ((core, share), errors));
        run_jobs(
            &*self.workers,
            lend,
            shares,
            |(((partition, core), share), errors)| {
                *errors = core.prepare_share(partition, share, ttl_enabled)
            },
        );
        debug_assert!(
            batch.shares.iter().all(Vec::is_empty),
            "a share left unprepared"
        );
        self.stats.request_errors += batch.errors.iter().sum::<u64>();
        batch.writes = 0;
    }
}
