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
//! enough, or on the partition's own thread where partitions own threads
//! (`partition.owned`); the replies then go to the gate in the batch's
//! order, on the engine's thread. On the partitions' own threads a batch
//! sent at the end of a turn is not waited for: it is *in flight* while
//! the engine goes on, and lands (`Engine::land_reads`) before anything
//! could overtake its replies: the next batch, anything a thread brings
//! back, any input but client requests, an event for one of its
//! connections, the close of one of its sessions, a change of leader. Its
//! sessions stop their queues until it lands.
//!
//! Applying by partition (owned partitions), a read is batched only where
//! the closed-watermark rule answers it at once, with the zxid that rule
//! gave it; and once a session's batched read sets a watch, only reads of
//! that partition join it: the watch is in no table until the batch is
//! served, and the rule for a read of another partition must see the
//! session's watches. (A read that sets none changes nothing the rule
//! reads: batched, it is answered as it would have been at once.)
//! Nothing a core brings back from its thread is absorbed while reads are
//! batched (`Engine::absorb_away` serves them first): until then each
//! tree is the one the reads were taken against.

use rustc_hash::{FxHashMap, FxHashSet};
use stoa_proto::request::Request;

use super::cores::AwayDone;
use super::handoff::{ReadCall, ReadOutcome};
use super::lent_apply::run_jobs;
use super::Engine;
use crate::session::SessionId;
use crate::watch::{ChangeKind, ConnId};

/// Reads below which a batch is served on the engine's thread even with
/// workers: a read costs about a microsecond, a wake-up several; and the
/// partitions it must span (one busy partition gains nothing from a
/// thread while the engine's waits). The simulators' batches are short
/// (requests come one at a time): they lend any, so that serving on the
/// partitions' threads runs under their faults.
const LEND_MIN_READS: usize = if cfg!(test) { 1 } else { 64 };
const LEND_MIN_PARTITIONS: usize = if cfg!(test) { 1 } else { 2 };

/// A read taken into the batch, in the order taken.
struct BatchedRead {
    conn: ConnId,
    xid: i32,
    partition: usize,
    received_ms: i64,
    /// The zxid its reply carries, where the closed-watermark rule gave
    /// one; else the server's prefix when served.
    zxid: Option<i64>,
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
    /// Sessions with reads in the batch, each with the partition its
    /// batched reads set watches on, if any.
    sessions: FxHashMap<SessionId, Option<usize>>,
    /// Sessions whose queue stopped behind their batched reads.
    stopped: Vec<SessionId>,
    /// The connections with reads in the batch.
    conns: FxHashSet<ConnId>,
    /// In flight: the partitions whose share went to their threads, and
    /// the server's prefix when it went (the zxid of a reply the
    /// closed-watermark rule gave none).
    sent: Vec<usize>,
    prefix_when_sent: i64,
}

impl ReadBatch {
    pub(super) fn is_empty(&self) -> bool {
        self.reads.is_empty()
    }

    /// Whether `sid` has reads in the batch: nothing else of its queue may
    /// be answered before them.
    pub(super) fn holds(&self, sid: SessionId) -> bool {
        !self.sessions.is_empty() && self.sessions.contains_key(&sid)
    }

    /// Whether a read of `partition` by `sid` may join the batch, applying
    /// by partition: none of `sid`'s batched reads sets a watch on another
    /// partition.
    pub(super) fn joins(&self, sid: SessionId, partition: usize) -> bool {
        (self.sessions.get(&sid)).is_none_or(|watching| watching.is_none_or(|p| p == partition))
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

/// Whether a plain read sets a watch.
fn sets_watch(request: &Request) -> bool {
    match request {
        Request::GetData(r) => r.watch,
        Request::Exists(r) => r.watch,
        Request::GetChildren(r) => r.watch,
        Request::GetChildren2(r) => r.watch,
        _ => false,
    }
}

impl Engine {
    /// Whether reads are batched now: while a turn's requests are taken in,
    /// on a server with threads to lend its partitions to (whose partitions
    /// owning threads serve the batches there instead). Without them a
    /// batch only costs (holding a turn's reads and replies at once defeats
    /// the allocator's caches: 15% more instructions per read at two
    /// partitions), where batching writes costs 1%; and where
    /// `partition.threads=auto` lends to none (below 4 cores), owned
    /// partitions' threads share the engine's cores too: served there, an
    /// owned server's reads of four partitions went at 0.65x on 2 cores.
    pub(super) fn batches_reads(&self) -> bool {
        self.prep_batch_open() && self.workers.threads() > 0
    }

    /// Takes `request`, at the head of `sid`'s queue on `conn`, into the
    /// batch if it may wait there; gives it back (`Some`) otherwise.
    /// Applying by partition, `at` is the zxid and partition the
    /// closed-watermark rule answers it at (`Engine::by_partition_turn`).
    pub(super) fn batch_read(
        &mut self,
        conn: ConnId,
        sid: SessionId,
        xid: i32,
        request: Request,
        received_ms: i64,
        at: Option<(i64, usize)>,
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
        let partition = match at {
            Some((_, partition)) => partition,
            None => self.read_partition(&request),
        };
        let watch = sets_watch(&request);
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
            zxid: at.map(|(zxid, _)| zxid),
        });
        batch.conns.insert(conn);
        let watching = batch.sessions.entry(sid).or_default();
        if watch {
            debug_assert!(watching.is_none_or(|p| p == partition));
            *watching = Some(partition);
        }
        None
    }

    /// Serves every read of the batch (lent when it is worth it) and
    /// answers them in the batch's order, letting the queues that stopped
    /// behind them go on; leaves the batch empty. Where partitions own
    /// threads, the shares go to them and the batch is in flight until it
    /// lands (`land_reads`): at once if `wait`, else when the engine next
    /// needs it answered.
    pub(super) fn serve_read_batch(&mut self, wait: bool) {
        // One batch in flight at a time: its replies go first.
        self.land_reads();
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
        let worth_it = busy >= LEND_MIN_PARTITIONS && batch.reads.len() >= LEND_MIN_READS;
        let owned = worth_it && self.cores.owned();
        let lend = worth_it && !owned && self.workers.threads() > 0;
        if lend || owned {
            self.stats.read_batches_lent += 1;
        }
        if owned {
            self.send_shares_away();
            match wait {
                true => self.land_reads(),
                false => self.stats.read_flights += 1,
            }
            return;
        }
        // Only the cores with a share: the others may stay away.
        let has_share: Vec<bool> = batch.shares.iter().map(|s| !s.is_empty()).collect();
        let shares = (self.cores.picked_mut(|p| has_share[p]))
            .map(|(_, core)| core)
            .zip(
                (batch.shares.iter_mut())
                    .zip(batch.outcomes.iter_mut())
                    .filter(|(share, _)| !share.is_empty()),
            );
        run_jobs(&*self.workers, lend, shares, |(core, (share, outcomes))| {
            outcomes.extend(share.drain(..).map(|call| core.read(call)))
        });
        // Nothing applied since the reads were taken: the server's prefix.
        let prefix = self.applied_zxid();
        let mut batch = std::mem::take(&mut self.read_batch);
        batch.prefix_when_sent = prefix;
        let stopped = self.answer_batch(&mut batch);
        self.read_batch = batch;
        self.pump_all(stopped);
    }

    /// Answers the batch in flight, if any, once every share it sent has
    /// come back (waiting for those still on their threads).
    pub(super) fn land_reads(&mut self) {
        if self.read_flight.is_empty() {
            return;
        }
        let flight = &mut self.read_flight;
        for partition in flight.sent.drain(..) {
            flight.outcomes[partition] = self.cores.take_reads(partition);
        }
        let mut flight = std::mem::take(&mut self.read_flight);
        let stopped = self.answer_batch(&mut flight);
        self.read_flight = flight;
        self.pump_all(stopped);
    }

    /// Whether every share of the batch in flight (if any) is back from
    /// its partition's thread: landing it would wait for none.
    pub(super) fn reads_back(&mut self) -> bool {
        let flight = &self.read_flight;
        (flight.sent.iter()).all(|&partition| !self.cores.away_now(partition))
    }

    /// Sends `conn` the event of a change to `path` at `zxid`, after the
    /// batch in flight if it holds reads of `conn`: an event must not
    /// overtake their replies (a reply that did not see a change would
    /// come after the change's event). Every event goes out this way.
    pub(super) fn notify(&mut self, conn: ConnId, zxid: i64, change: ChangeKind, path: &str) {
        if !self.read_flight.is_empty() && self.read_flight.conns.contains(&conn) {
            self.land_reads();
        }
        self.gate.notify(conn, zxid, change, path);
    }

    /// Whether `sid` has reads batched or in flight: nothing else of its
    /// queue may be answered before them.
    pub(super) fn reads_hold(&self, sid: SessionId) -> bool {
        self.read_batch.holds(sid) || self.read_flight.holds(sid)
    }

    /// Whether a read of `partition` by `sid` may join the batch: `sid`
    /// has none in flight, and none of its batched reads sets a watch on
    /// another partition.
    pub(super) fn read_joins(&self, sid: SessionId, partition: usize) -> bool {
        !self.read_flight.holds(sid) && self.read_batch.joins(sid, partition)
    }

    /// `sid`'s queue stopped behind its reads: it goes on once they are
    /// answered.
    pub(super) fn stop_behind_reads(&mut self, sid: SessionId) {
        match self.read_flight.holds(sid) {
            true => self.read_flight.stop(sid),
            false => self.read_batch.stop(sid),
        }
    }

    /// Answers every read of `batch`, whose outcomes are all in, in its
    /// order, and empties it (its vectors are kept for the next). Gives
    /// the sessions that stopped behind them, to pump once the batch is
    /// back in its place: pumping may batch their next reads.
    fn answer_batch(&mut self, batch: &mut ReadBatch) -> Vec<SessionId> {
        debug_assert!(batch.sent.is_empty(), "a share of the batch still away");
        let prefix = batch.prefix_when_sent;
        let mut outcomes: Vec<_> = (batch.outcomes.iter_mut()).map(|o| o.drain(..)).collect();
        for read in batch.reads.drain(..) {
            let outcome = outcomes[read.partition]
                .next()
                .expect("every batched read has an outcome");
            debug_assert!(outcome.fired.is_empty(), "a plain read fired a watch");
            let zxid = read.zxid.unwrap_or(prefix);
            self.answer_read(read.conn, read.xid, zxid, outcome.result);
            self.stats
                .record_latency((self.now_ms - read.received_ms).max(0) as u64);
        }
        debug_assert!(outcomes.iter_mut().all(|o| o.next().is_none()));
        drop(outcomes);
        batch.sessions.clear();
        batch.conns.clear();
        std::mem::take(&mut batch.stopped)
    }

    fn pump_all(&mut self, sessions: Vec<SessionId>) {
        for sid in sessions {
            self.pump(sid);
        }
    }

    /// Each partition's share of the batch goes to the partition's own
    /// thread, after whatever was sent there before (which leaves its tree
    /// as it was when the reads were taken: the rule batched a read only
    /// with nothing of its partition away to apply) and before whatever
    /// is sent there next. The batch is then in flight.
    fn send_shares_away(&mut self) {
        debug_assert!(self.read_flight.is_empty(), "one batch in flight");
        let prefix = self.applied_zxid();
        let batch = &mut self.read_batch;
        for (partition, share) in batch.shares.iter_mut().enumerate() {
            if share.is_empty() {
                continue;
            }
            let share = std::mem::take(share);
            self.cores.send_away(partition, move |core| AwayDone {
                reads: share.into_iter().map(|call| core.read(call)).collect(),
                ..AwayDone::nothing(partition)
            });
            batch.sent.push(partition);
        }
        batch.prefix_when_sent = prefix;
        std::mem::swap(&mut self.read_batch, &mut self.read_flight);
    }
}
