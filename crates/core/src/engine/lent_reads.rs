//! Serving reads with the partitions lent to worker threads
//! (docs/partitions.md, "Lent partitions: reads", slice 5b's third phase).
//!
//! While a server takes in one turn's client requests, a *plain* read (a
//! getData, exists, getChildren or getACL, answered by one partition) that
//! reaches the head of its session's queue is taken from the queue into a
//! batch instead of being answered at once. Nothing applies during the
//! turn, so each partition's tree is the one the read would have seen, and
//! the reply carries the same zxid. The batch is served before anything
//! else can apply, reply or reorder: at the start of every input other
//! than client frames and forwards, of every tick and of every output
//! taken, and before any request that the engine answers without its
//! session's queue (an auth, a SASL token). A session whose queue holds,
//! behind its batched reads, anything else to answer now stops there and
//! goes on once the batch is served, so each connection receives its
//! replies in the order it sent the requests.
//!
//! Serving a batch: each partition runs its share on its tree and watch
//! table (a read's watch is set there), on a worker when the batch is long
//! enough; the replies then go to the gate in the batch's order, on the
//! engine's thread.

use rustc_hash::FxHashSet;
use stoa_proto::request::Request;

use super::handoff::{ReadCall, ReadOutcome};
use super::lent_apply::run_jobs;
use super::Engine;
use crate::session::SessionId;
use crate::watch::ConnId;

/// Reads below which a batch is served on the engine's thread even with
/// workers: a read costs about a microsecond, a wake-up several.
const LEND_MIN_READS: usize = 64;

/// A read taken into the batch, in the order taken.
struct BatchedRead {
    conn: ConnId,
    xid: i32,
    partition: usize,
    received_ms: i64,
}

/// The plain reads of the turn under way. Its vectors are kept from batch
/// to batch.
#[derive(Default)]
pub(super) struct ReadBatch {
    reads: Vec<BatchedRead>,
    /// Per partition, its share's calls in the batch's order.
    shares: Vec<Vec<ReadCall>>,
    /// Per partition, its share's outcomes in order.
    outcomes: Vec<Vec<ReadOutcome>>,
    /// Sessions with reads in the batch.
    sessions: FxHashSet<SessionId>,
    /// Sessions whose queue stopped behind their batched reads.
    stopped: Vec<SessionId>,
}

impl ReadBatch {
    pub(super) fn is_empty(&self) -> bool {
        self.reads.is_empty()
    }

    /// Whether `sid` has reads in the batch: nothing else of its queue may
    /// be answered before them.
    pub(super) fn holds(&self, sid: SessionId) -> bool {
        !self.sessions.is_empty() && self.sessions.contains(&sid)
    }

    /// `sid`'s queue stopped behind its batched reads.
    pub(super) fn stop(&mut self, sid: SessionId) {
        if !self.stopped.contains(&sid) {
            self.stopped.push(sid);
        }
    }
}

/// Whether `request` is a read one partition answers alone, with nothing
/// but its tree and watch table.
pub(super) fn is_plain_read(request: &Request) -> bool {
    matches!(
        request,
        Request::GetData(_)
            | Request::Exists(_)
            | Request::GetChildren(_)
            | Request::GetChildren2(_)
            | Request::GetAcl(_)
    )
}

impl Engine {
    /// Whether reads are batched now: while a turn's requests are taken in,
    /// on a server with threads to lend its partitions to. Without them a
    /// batch only costs (holding a turn's reads and replies at once defeats
    /// the allocator's caches: 15% more instructions per read at two
    /// partitions), where batching writes costs 1%.
    pub(super) fn batches_reads(&self) -> bool {
        self.prep_batch_open() && self.workers.threads() > 0
    }

    /// Takes `request`, at the head of `sid`'s queue on `conn`, into the
    /// batch if it may wait there; gives it back (`Some`) otherwise.
    pub(super) fn batch_read(
        &mut self,
        conn: ConnId,
        sid: SessionId,
        xid: i32,
        request: Request,
        received_ms: i64,
    ) -> Option<Request> {
        if !self.batches_reads() || !is_plain_read(&request) {
            return Some(request);
        }
        let Some(identity) = self.gate.conns.get(&conn).map(|c| c.identity.clone()) else {
            return Some(request);
        };
        if self.group_load_counted() {
            self.count_group_request(&request);
        }
        let partition = self.read_partition(&request);
        let batch = &mut self.read_batch;
        batch.shares.resize_with(self.cores.len(), Vec::new);
        batch.shares[partition].push(ReadCall {
            conn,
            session: sid,
            identity,
            request,
        });
        batch.reads.push(BatchedRead {
            conn,
            xid,
            partition,
            received_ms,
        });
        batch.sessions.insert(sid);
        None
    }

    /// Serves every read of the batch (lent when it is worth it), answers
    /// them in the batch's order, and lets the queues that stopped behind
    /// them go on; leaves the batch empty.
    pub(super) fn serve_read_batch(&mut self) {
        let batch = &mut self.read_batch;
        if batch.is_empty() {
            return;
        }
        self.stats.read_batches += 1;
        self.stats.read_batch_reads += batch.reads.len() as u64;
        batch.outcomes.resize_with(batch.shares.len(), Vec::new);
        let busy = batch
            .shares
            .iter()
            .filter(|share| !share.is_empty())
            .count();
        let lend = busy > 1 && batch.reads.len() >= LEND_MIN_READS && self.workers.threads() > 0;
        if lend {
            self.stats.read_batches_lent += 1;
        }
        let shares = (self.cores.iter_mut())
            .zip(&mut batch.shares)
            .zip(&mut batch.outcomes)
            .filter(|((_, share), _)| !share.is_empty());
        run_jobs(&*self.workers, lend, shares, |((core, share), outcomes)| {
            outcomes.extend(share.drain(..).map(|call| core.read(call)))
        });
        let mut batch = std::mem::take(&mut self.read_batch);
        // Nothing applied since the reads were taken: the server's prefix.
        let zxid = self.applied_zxid();
        let mut outcomes: Vec<_> = (batch.outcomes.iter_mut()).map(|o| o.drain(..)).collect();
        for read in batch.reads.drain(..) {
            let outcome = outcomes[read.partition]
                .next()
                .expect("every batched read has an outcome");
            debug_assert!(outcome.fired.is_empty(), "a plain read fired a watch");
            self.answer_read(read.conn, read.xid, zxid, outcome.result);
            self.stats
                .record_latency((self.now_ms - read.received_ms).max(0) as u64);
        }
        debug_assert!(outcomes.iter_mut().all(|o| o.next().is_none()));
        drop(outcomes);
        batch.sessions.clear();
        let stopped = std::mem::take(&mut batch.stopped);
        self.read_batch = batch;
        for sid in stopped {
            self.pump(sid);
        }
    }
}
