//! The node driver: what a server does around its engine apart from
//! sockets. It carries the engine's output out through three ports, the
//! log writer (`LogSink`), the snapshot writer (`SnapshotSink`) and the
//! network (`Transport`), and feeds their completions back in: WAL tokens
//! mapped to raft ready numbers, persist jobs turned into WAL records, an
//! installed snapshot written before the log marker that relies on it,
//! compaction markers after a snapshot is written, and recovery from a
//! snapshot store plus a log replay.
//!
//! Production plugs in the WAL writer thread over the file log, the
//! snapshot thread over the snapshot directory, and tokio sockets
//! (`stoa-server`'s `partition.rs`); the simulator plugs in `SimLog`, an
//! in-memory snapshot store with the same bytes, and its simulated network
//! (`sim_disk`), so both run this code.

pub mod outbox;
mod records;
pub mod server_snapshot;
pub mod sim_disk;
mod snapshots;
mod wal_tokens;

use stoa_wal::{Record, Replay};

use crate::engine::forward::EngineMessage;
use crate::engine::{Engine, Input, Output, Recovered};
use crate::ensemble::Member;
use crate::watch::ConnId;

pub use records::{
    entries_after, entry_to_record, hard_state_record, persist_records, record_to_entry,
    record_to_hard_state,
};
pub use snapshots::{
    coalesce_snapshot_tasks, load_newest, load_newest_of_server, run_snapshot_task, write_snapshot,
    write_snapshot_of, MemSnapshotStore, PartitionStart, SnapshotDone, SnapshotSource,
    SnapshotStore, SnapshotTask, StoredSnapshot, SNAPSHOTS_RETAINED,
};
pub use wal_tokens::WalTokens;

/// The log writer as a node sees it: batches go in with increasing tokens;
/// the owner calls `Node::on_durable(token)` once every batch up to `token`
/// is synced.
pub trait LogSink {
    fn submit(&mut self, token: u64, records: Vec<Record>) -> Result<(), String>;

    /// Writes and syncs `records` under `token` on the calling thread when
    /// the writer is idle. True: durable now, and never reported through
    /// `Node::on_durable`. False: nothing done; `submit` them.
    fn write_now(&mut self, token: u64, records: &[Record]) -> Result<bool, String> {
        let _ = (token, records);
        Ok(false)
    }
}

/// The snapshot writer as a node sees it.
pub trait SnapshotSink {
    /// Writes a snapshot of `partition` received from the leader, durably,
    /// before it returns: the WAL marker that makes recovery rely on it is
    /// submitted only after.
    fn install(&mut self, partition: u32, index: u64, term: u64, data: &[u8])
        -> Result<(), String>;
    /// Queues a task; the owner hands its outcome to
    /// `Node::on_snapshot_done`.
    fn submit(&mut self, task: SnapshotTask);
}

/// The network as a node sees it: client connections and peers.
pub trait Transport {
    fn send(&mut self, conn: ConnId, bytes: Vec<u8>);
    /// Frames for `conn` in order, for its writer to encode (the engine's
    /// `replies_encoded_by_writers`); by default encoded here and sent.
    fn send_frames(&mut self, conn: ConnId, frames: Vec<stoa_proto::frame::OutgoingFrame>) {
        let mut bytes = Vec::new();
        stoa_proto::frame::encode_frames(&mut bytes, &frames);
        self.send(conn, bytes);
    }
    /// Closes `conn` once its pending bytes are written. False when it was
    /// not open (the engine already heard it close).
    fn close(&mut self, conn: ConnId) -> bool;
    /// A raft message of `partition`'s group for peer `message.to`; a full
    /// queue may drop it (raft retransmits).
    fn send_raft(&mut self, partition: u32, message: raft::eraftpb::Message);
    fn send_engine(&mut self, to: u64, message: EngineMessage);
    /// The ensemble's members changed.
    fn set_members(&mut self, version: i64, members: &[Member]);
}

/// What a flush leaves to the host besides the ports.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flushed {
    /// A snapshot's worth of memory was let go: time to return it to the
    /// system.
    pub memory_freed: bool,
    /// A batch was written on this thread (`LogSink::write_now`): the log's
    /// timings changed without a durable report.
    pub wrote_inline: bool,
}

pub struct Node<L, S> {
    engine: Engine,
    tokens: WalTokens,
    log: L,
    snapshots: S,
    /// The host has nothing else waiting (`set_host_idle`).
    host_idle: bool,
    inline_policy: InlinePolicy,
}

/// Records that `partition`'s readies up to `number` are done: readies of
/// one group complete in order, so the latest wins.
fn note_done(done: &mut Vec<(u32, u64)>, partition: u32, number: u64) {
    done.retain(|(p, _)| *p != partition);
    done.push((partition, number));
}

/// How long after any sign of load batches stay with the writer thread.
const INLINE_QUIET_MS: i64 = 20;

/// When a batch is worth writing on the engine's thread: it saves the
/// hand-off to the writer thread and the wake-up back (two of a lone
/// synchronous writer's four context switches per write), but the thread
/// serves nothing during the fsync. Under load the writer thread syncs one
/// group while the engine prepares the next, and writing inline cost a
/// fifth of the 8x16 write peak. So only a batch of one entry, with the
/// host idle and no batch in flight, and nothing busier for
/// `INLINE_QUIET_MS`: a synchronous client's rhythm, never a pipeline's.
/// And only standalone: an ensemble's leader commits on any quorum, which
/// its followers alone can make while its own sync runs (inline, its
/// thread would not take their acknowledgements meanwhile), and followers
/// writing inline measured no better (3-member 1x1 p50 1.08x the thread's
/// on a 16-core machine, past that run's noise; docs/performance.md).
#[derive(Debug, Default)]
struct InlinePolicy {
    busy_until_ms: i64,
}

impl InlinePolicy {
    fn decide(&mut self, now_ms: i64, host_idle: bool, in_flight: usize, entries: usize) -> bool {
        if !host_idle || in_flight > 0 || entries > 1 {
            self.busy_until_ms = now_ms + INLINE_QUIET_MS;
            return false;
        }
        now_ms >= self.busy_until_ms
    }
}

impl<L: LogSink, S: SnapshotSink> Node<L, S> {
    pub fn new(engine: Engine, log: L, snapshots: S) -> Node<L, S> {
        Node {
            engine,
            tokens: WalTokens::default(),
            log,
            snapshots,
            host_idle: false,
            inline_policy: InlinePolicy::default(),
        }
    }

    /// Whether nothing else waits for this thread now, so that the next
    /// flushes may write a batch here while the log writer is idle
    /// (`InlinePolicy`): a lone synchronous writer then saves the hand-off
    /// to the writer thread and the wake-up back; queued requests would
    /// rather be served while the writer syncs.
    pub fn set_host_idle(&mut self, host_idle: bool) {
        self.host_idle = host_idle;
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    pub fn log(&self) -> &L {
        &self.log
    }

    pub fn log_mut(&mut self) -> &mut L {
        &mut self.log
    }

    pub fn snapshots(&self) -> &S {
        &self.snapshots
    }

    pub fn snapshots_mut(&mut self) -> &mut S {
        &mut self.snapshots
    }

    /// Batches handed to the log and not yet durable.
    pub fn wal_in_flight(&self) -> usize {
        self.tokens.in_flight()
    }

    /// The node stops (a crash or a stop): its ports, for the next start.
    pub fn into_parts(self) -> (Engine, L, S) {
        (self.engine, self.log, self.snapshots)
    }

    /// Carries out everything the engine asked for. Acknowledging a ready
    /// that needed no fsync can make more output (its committed entries),
    /// so this goes on until the engine is quiet. An error is fatal: the
    /// node must stop serving.
    pub fn flush(&mut self, net: &mut impl Transport) -> Result<Flushed, String> {
        let mut flushed = Flushed::default();
        loop {
            let done = self.flush_once(net, &mut flushed)?;
            if done.is_empty() {
                return Ok(flushed);
            }
            for (partition, number) in done {
                self.engine.handle(Input::Persisted { partition, number });
            }
        }
    }

    /// Carries out one batch of output; returns the readies (partition,
    /// number) already done (they needed no fsync and nothing was in
    /// flight, or this thread wrote them).
    fn flush_once(
        &mut self,
        net: &mut impl Transport,
        flushed: &mut Flushed,
    ) -> Result<Vec<(u32, u64)>, String> {
        let mut done_now: Vec<(u32, u64)> = Vec::new();
        let Output {
            sends,
            frames,
            closes,
            persists,
            snapshots,
            snapshots_to_ship,
            members,
            messages,
            engine_messages,
            fatal,
            memory_freed,
        } = self.engine.take_output();
        if let Some(reason) = fatal {
            return Err(reason);
        }
        flushed.memory_freed |= memory_freed;
        // The network first: a batch written on this thread below would
        // hold up a leader's appends and every reply already decided.
        if let Some((version, members)) = members {
            net.set_members(version, &members);
        }
        for (partition, m) in messages {
            net.send_raft(partition, m);
        }
        for (to, m) in engine_messages {
            net.send_engine(to, m);
        }
        for (conn, bytes) in sends {
            net.send(conn, bytes);
        }
        for (conn, frames) in frames {
            net.send_frames(conn, frames);
        }
        for conn in closes {
            if net.close(conn) {
                self.engine.handle(Input::Closed { conn });
            }
        }
        // Written on this thread: the one batch of this output that must be
        // synced (the policy allows one entry, so one job at most).
        let mut inline: Option<(u64, Vec<Record>)> = None;
        let sync_entries: usize = (persists.iter())
            .filter(|job| job.must_sync)
            .map(|job| job.entries.max(1))
            .sum();
        let write_inline = sync_entries > 0
            && self.engine.standalone()
            && self.inline_policy.decide(
                self.engine.now_ms(),
                self.host_idle,
                self.tokens.in_flight(),
                sync_entries,
            );
        for mut job in persists {
            if let Some(s) = &job.installed {
                // Rare (a follower far behind), so written here, before the
                // WAL marker that makes recovery rely on it.
                let (partition, index, term) = s.stored_as;
                self.snapshots.install(partition, index, term, &s.data)?;
            }
            if !job.must_sync {
                if let Some(number) = self.tokens.piggyback(job.partition, job.number) {
                    note_done(&mut done_now, job.partition, number);
                }
                continue;
            }
            let records = std::mem::take(&mut job.records);
            let token = self.tokens.issue(Some((job.partition, job.number)));
            if write_inline {
                debug_assert!(inline.is_none(), "one batch of one entry goes inline");
                inline = Some((token, records));
                continue;
            }
            self.log
                .submit(token, records)
                .map_err(|e| format!("WAL: {e}"))?;
        }
        if let Some((token, records)) = inline {
            let written = (self.log)
                .write_now(token, &records)
                .map_err(|e| format!("WAL: {e}"))?;
            if written {
                flushed.wrote_inline = true;
                for (partition, number) in self.tokens.durable(token) {
                    note_done(&mut done_now, partition, number);
                }
            } else {
                self.log
                    .submit(token, records)
                    .map_err(|e| format!("WAL: {e}"))?;
            }
        }
        for job in snapshots {
            self.snapshots.submit(SnapshotTask::Write(job));
        }
        for job in snapshots_to_ship {
            self.snapshots.submit(SnapshotTask::Ship(job));
        }
        Ok(done_now)
    }

    /// The log made every batch up to `token` durable.
    pub fn on_durable(&mut self, token: u64) {
        for (partition, number) in self.tokens.durable(token) {
            self.engine.handle(Input::Persisted { partition, number });
        }
    }

    /// A snapshot task finished. A written snapshot lets the WAL drop what
    /// the oldest retained one covers (a marker record); a failed one loses
    /// nothing (the WAL still holds every entry) and the next one retries.
    pub fn on_snapshot_done(&mut self, done: Result<SnapshotDone, String>) -> Result<(), String> {
        match done {
            Ok(SnapshotDone::Shipped {
                partition,
                index,
                term,
                data,
            }) => {
                self.engine.handle(Input::SnapshotBuilt {
                    partition,
                    index,
                    term,
                    data,
                });
            }
            Ok(SnapshotDone::Written {
                partition,
                index,
                term,
                compact_to,
            }) => {
                log::info!(
                    "snapshot of partition {partition} at raft index {index} (term {term}) written"
                );
                if !compact_to.is_empty() {
                    let token = self.tokens.issue(None);
                    let markers = (compact_to.into_iter())
                        .map(|(partition, upto)| {
                            Record::snapshot(partition, term, upto, Vec::new())
                        })
                        .collect();
                    self.log
                        .submit(token, markers)
                        .map_err(|e| format!("WAL: {e}"))?;
                }
            }
            Err(e) => log::error!("snapshot failed: {e}"),
        }
        Ok(())
    }
}

/// The state a partition starts from: the newest readable snapshot (as
/// `load_newest_of_server` returns it) and what the log replay holds
/// after it.
pub fn recovered(
    start: PartitionStart,
    replay: &Replay,
    partition: u32,
) -> Result<Recovered, String> {
    let PartitionStart {
        tree,
        index: snapshot_index,
        term: snapshot_term,
        cut_zxid,
    } = start;
    if replay.torn_tail_bytes > 0 {
        log::warn!(
            "WAL: discarded a torn tail of {} bytes (a write cut short by a crash)",
            replay.torn_tail_bytes
        );
    }
    let marker = replay
        .partition(partition)
        .and_then(|p| p.snapshot.as_ref());
    if let Some(marker) = marker.filter(|m| m.index > snapshot_index) {
        // The log forgot what the snapshot it relies on covers: starting
        // would silently lose those entries.
        return Err(format!(
            "the WAL holds the log only after index {} but the newest readable snapshot ends at \
             index {snapshot_index}: a snapshot is missing or unreadable",
            marker.index
        ));
    }
    let (hard_state, entries) = entries_after(replay, partition, snapshot_index)?;
    Ok(Recovered {
        tree,
        snapshot_index,
        snapshot_term,
        cut_zxid,
        hard_state,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use stoa_wal::{LogStore, SimLog};

    use super::*;

    fn start_at(index: u64) -> PartitionStart {
        PartitionStart {
            tree: stoa_tree::DataTree::new(),
            index,
            term: u64::from(index != 0),
            cut_zxid: None,
        }
    }

    fn replay_of(records: &[Record]) -> Replay {
        let mut log = SimLog::new();
        log.append(records).unwrap();
        log.sync().unwrap();
        log.crash(0);
        log.recover()
    }

    #[test]
    fn only_a_lone_synchronous_writers_rhythm_writes_inline() {
        let mut policy = InlinePolicy::default();
        // Idle host, nothing in flight, one entry: inline from the start.
        assert!(policy.decide(1_000, true, 0, 1));
        assert!(policy.decide(1_001, true, 0, 1));
        // Any sign of load keeps batches with the writer thread for a while.
        for (host_idle, in_flight, entries) in [(false, 0, 1), (true, 1, 1), (true, 0, 2)] {
            let mut policy = InlinePolicy::default();
            assert!(!policy.decide(2_000, host_idle, in_flight, entries));
            assert!(!policy.decide(2_001, true, 0, 1), "still busy");
            assert!(!policy.decide(2_000 + INLINE_QUIET_MS - 1, true, 0, 1));
            assert!(
                policy.decide(2_000 + INLINE_QUIET_MS, true, 0, 1),
                "quiet again"
            );
        }
        // A steady pipeline never gets there: each flush renews the hold.
        let mut policy = InlinePolicy::default();
        for now in 0..100 {
            let busy = now % 3 != 2;
            assert!(
                !policy.decide(now, !busy, 0, 1),
                "load every few ms keeps it off"
            );
        }
    }

    #[test]
    fn recovery_refuses_a_log_that_relies_on_a_missing_snapshot() {
        // Proves a WAL whose marker says entries up to 7 live in a snapshot
        // is refused when no snapshot that far is readable, instead of
        // starting from an older tree with entries missing.
        let records = [
            Record::entry(0, 1, 1, vec![0]),
            Record::snapshot_installed(0, 1, 7),
            Record::entry(0, 1, 8, vec![0]),
        ];
        let replay = replay_of(&records);
        let Err(err) = recovered(start_at(0), &replay, 0) else {
            panic!("recovered without the snapshot the log relies on");
        };
        assert!(err.contains("after index 7"), "{err}");
        let ok = recovered(start_at(7), &replay, 0).unwrap();
        assert_eq!(ok.entries.iter().map(|e| e.index).collect::<Vec<_>>(), [8]);
    }
}
