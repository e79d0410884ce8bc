//! Handling the raft groups' readies with the partitions lent to worker
//! threads (docs/partitions.md, "Lent partitions: readies", the first
//! piece of owned partitions' step 3).
//!
//! A group's ready is mostly its own business: the messages it sends (an
//! append repaired and cut to size), the entries and hard state it
//! persists (into its raft store, and a `PersistJob` for the WAL), the
//! messages that wait for that persistence, and raft's own advance. That
//! part is `PartitionCore::take_ready`, which touches one core alone. What
//! is left for the engine's thread is what reads or changes the engine:
//! applying the committed entries in the one order, noticing a change of
//! leader, installing a snapshot from the leader.
//!
//! With several partitions the engine handles readies in rounds: each
//! round takes one ready of every group that has one (lent to the workers
//! when enough entries ride on them), then, partition by partition, sends
//! its messages, applies its committed entries, queues its persist job and
//! notes the leader. A ready that installs a snapshot is handled alone on
//! the engine's thread. Without workers the same rounds run one share
//! after another, so a server's WAL records and replies do not depend on
//! its threads (`crates/server/tests/lent_partitions.rs`), and the
//! simulators, which lend to a stand-in running the jobs in order, check
//! the rounds under every fault.

use raft::eraftpb::{Message, MessageType};
use raft::Ready;

use super::commit::{repair_batched_append, split_append};
use super::cores::{AwayDone, KeptInput};
use super::lent_apply::run_jobs;
use super::partition_core::PartitionCore;
use super::{Engine, InstalledSnapshot, PersistJob, RAFT_MAX_MSG_BYTES};
use crate::node::persist_records;

/// Entries (to persist or committed) over a round's readies below which
/// the round stays on the engine's thread even with workers. Taking a
/// standalone server's ready apart costs about 150 instructions per write
/// (`LENT=1 scripts/engine-instructions`), a leader's more (the appends
/// to its followers), and waking a worker some microseconds: only a
/// large round pays for it.
const LEND_MIN_ENTRIES: usize = 256;

/// What a group's ready leaves for the engine's thread.
pub(crate) struct TakenReady {
    /// Messages to send now, tagged with the group.
    messages: Vec<(u32, Message)>,
    /// Entries committed, to apply in the one order.
    committed: Vec<raft::eraftpb::Entry>,
    /// The records to make durable, if any.
    persist: Option<PersistJob>,
}

impl PartitionCore {
    /// Whether this group's next ready is its own business alone: it has
    /// one, and it installs no snapshot from the leader.
    fn has_plain_ready(&self) -> bool {
        self.raft.has_ready() && self.raft.snap().is_none()
    }

    /// Takes this group's next ready apart if it has one that is its own
    /// business alone (`take_ready`).
    pub(super) fn take_plain_ready(&mut self, partition: usize) -> Option<TakenReady> {
        if !self.has_plain_ready() {
            return None;
        }
        let ready = self.raft.ready();
        Some(self.take_ready(partition as u32, ready, None))
    }

    /// Steps `inputs` (raft messages and ticks for this core, away: they
    /// cannot change who leads, `Cores::steps_away`, `Cores::ticks_away`)
    /// and takes the ready that follows, once for them all, as the engine's
    /// thread does for a batch of peer messages.
    pub(super) fn step_kept(&mut self, partition: usize, inputs: Vec<KeptInput>) -> AwayDone {
        for input in inputs {
            match input {
                KeptInput::Message(message) => self.step(message),
                KeptInput::Tick => self.tick(),
            }
        }
        AwayDone {
            taken: self.take_plain_ready(partition),
            ..AwayDone::nothing(partition)
        }
    }

    /// Entries riding on this group's next ready: what lending it is
    /// worth.
    fn ready_entries(&self) -> usize {
        let log = &self.raft.raft.raft_log;
        log.unstable.entries.len() + log.committed.saturating_sub(log.applied) as usize
    }

    /// Takes `ready` (this group's, as `tag`) apart: the messages to send
    /// now, the committed entries, the persist job; persists it to the
    /// raft store, holds the messages that wait for it, and advances raft.
    /// `installed`: a snapshot from the leader the engine installed from
    /// this ready, written before the job's records.
    pub(super) fn take_ready(
        &mut self,
        tag: u32,
        mut ready: Ready,
        installed: Option<InstalledSnapshot>,
    ) -> TakenReady {
        let mut messages = Vec::new();
        // Messages that need nothing durable (e.g. a leader's appends)
        // leave at once; the others wait for this ready's persistence.
        for mut message in ready.take_messages() {
            let log = &self.raft.raft.raft_log;
            let term_of = |index| (index + 1 >= log.first_index()).then(|| log.term(index).ok())?;
            if !repair_batched_append(&mut message, term_of) {
                log::debug!(
                    "append to server {} dropped: its entries from {} follow a compacted entry",
                    message.to,
                    message.entries[0].index
                );
                continue;
            }
            split_append(tag, message, RAFT_MAX_MSG_BYTES, &mut messages);
        }
        let committed = ready.take_committed_entries();
        let entries = ready.take_entries();
        let must_sync = ready.must_sync() || installed.is_some();
        let mut after_persist = ready.take_persisted_messages();
        // raft holds every message of a follower until its ready is
        // durable, heartbeat responses included, so a slow disk silenced
        // the followers and their leader stepped down for want of a
        // quorum (check-quorum) although every member was alive. A
        // heartbeat response acknowledges nothing a ready persists; only
        // a new term or vote must reach the disk before anything speaks
        // for it.
        if ready.hs().is_some_and(|hs| {
            let stored = self.raft.store().hard_state();
            hs.term != stored.term || hs.vote != stored.vote
        }) {
            self.term_or_vote_unsynced = Some(ready.number());
        }
        if self.term_or_vote_unsynced.is_none() {
            let (now, held) = (after_persist.into_iter())
                .partition(|m| m.get_msg_type() == MessageType::MsgHeartbeatResponse);
            after_persist = held;
            messages.extend(now.into_iter().map(|m: Message| (tag, m)));
        }
        if let Some(hs) = ready.hs() {
            self.raft.mut_store().set_hard_state(hs.clone());
        }
        // A ready with messages to send after persistence needs a job
        // even when it writes nothing: its acknowledgement (in order,
        // after every earlier batch) is what releases them.
        let persist = (!entries.is_empty()
            || ready.hs().is_some()
            || !after_persist.is_empty()
            || installed.is_some())
        .then(|| {
            self.raft.mut_store().append(&entries);
            // Every synced batch carries the latest hard state, so a
            // commit index written lazily still reaches the disk. A batch
            // that needs no sync writes nothing (it holds no entries).
            let records = if must_sync {
                let hard_state = self.raft.store().hard_state();
                let marker = installed.as_ref().map(|s| (s.term, s.index));
                persist_records(tag, marker, &entries, hard_state)
            } else {
                debug_assert!(entries.is_empty(), "entries are always synced");
                Vec::new()
            };
            PersistJob {
                partition: tag,
                number: ready.number(),
                must_sync,
                entries: entries.len(),
                records,
                installed,
            }
        });
        if !after_persist.is_empty() {
            self.held_messages
                .push_back((ready.number(), after_persist));
        }
        self.raft.advance_append_async(ready);
        TakenReady {
            messages,
            committed,
            persist,
        }
    }
}

impl Engine {
    /// What a group's taken ready leaves for the engine's thread: its
    /// messages go out, its committed entries apply, its job is queued.
    pub(super) fn absorb_ready(&mut self, partition: usize, taken: TakenReady) {
        self.out.messages.extend(taken.messages);
        self.apply_entries(partition, taken.committed);
        if let Some(job) = taken.persist {
            if job.entries > 0 {
                self.stats.record_wal_batch(job.entries as u64);
            }
            self.out.persists.push(job);
        }
        self.report_applied(partition);
    }

    /// One round over the groups with a ready (see the module's comment);
    /// false when none had one.
    pub(super) fn ready_round(&mut self) -> bool {
        // Every turn ends with a round that finds nothing: it allocates
        // nothing either. A core away takes its own ready there.
        let home = |p: usize| self.cores.is_home(p);
        if !(0..self.cores.len()).any(|p| home(p) && self.cores[p].raft.has_ready()) {
            return false;
        }
        let plain: Vec<bool> = (0..self.cores.len())
            .map(|p| home(p) && self.cores[p].has_plain_ready())
            .collect();
        let busy = plain.iter().filter(|&&p| p).count();
        let lend = busy > 1
            && self.workers.threads() > 0
            && (0..self.cores.len())
                .filter(|&p| plain[p])
                .map(|p| self.cores[p].ready_entries())
                .sum::<usize>()
                >= LEND_MIN_ENTRIES;
        if busy > 0 {
            self.stats.ready_rounds += 1;
            self.stats.ready_round_readies += busy as u64;
            if lend {
                self.stats.ready_rounds_lent += 1;
            }
        }
        let mut taken: Vec<Option<TakenReady>> = (0..self.cores.len()).map(|_| None).collect();
        let mut home: Vec<Option<&mut PartitionCore>> = (0..plain.len()).map(|_| None).collect();
        for (partition, core) in self.cores.home_iter_mut() {
            home[partition] = plain[partition].then_some(core);
        }
        let jobs = (home.into_iter().enumerate().zip(&mut taken))
            .filter_map(|((partition, core), slot)| Some(((partition, core?), slot)));
        run_jobs(&*self.workers, lend, jobs, |((partition, core), slot)| {
            let ready = core.raft.ready();
            *slot = Some(core.take_ready(partition as u32, ready, None));
        });
        let mut any = busy > 0;
        for (partition, slot) in taken.into_iter().enumerate() {
            match slot {
                Some(taken) => self.absorb_ready(partition, taken),
                None if plain[partition] => {
                    unreachable!("partition {partition}'s ready was lent and not taken")
                }
                // A snapshot from the leader, installed on this thread, or
                // a ready that came up while this round was absorbed.
                None if self.cores.is_home(partition) && self.cores[partition].raft.has_ready() => {
                    self.handle_ready(partition);
                    any = true;
                }
                None => continue,
            }
            self.note_leader();
        }
        any
    }
}
