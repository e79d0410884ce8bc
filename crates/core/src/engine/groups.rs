//! A server's partitions as raft groups: one leader for all of them, the
//! epoch over their terms, and each group's own WAL acknowledgements.
//!
//! Partition 0's group is the anchor. Its leader is the ensemble's leader
//! as soon as it leads every other group too (`Engine::leader_id`), and
//! the other groups follow it:
//!
//! - a server leading group p > 0 while another server leads group 0 hands
//!   group p over to that server (raft's leader transfer catches the new
//!   leader's log up first);
//! - the leader of group 0 campaigns (with pre-vote) for a group that
//!   has no leader;
//! - if a group still is not led by group 0's leader after
//!   `FORCE_CAMPAIGN_TICKS` (its leader may not hear group 0: a link
//!   between two members down), group 0's leader campaigns past the other
//!   members' leases, as a leader transfer does. Raft's vote still needs a
//!   quorum with a log no newer than the candidate's, so safety stays
//!   raft's. Such a campaign raises the group's term and restarts every
//!   member's election timer, so it is rare (several election timeouts
//!   apart): a candidate whose log is behind must leave the others time
//!   to elect a leader that then hands the group over.
//!
//! Nobody prepares writes while the groups' leaders differ.

use super::cores::AwayDone;
use super::partition_core::PartitionCore;
use super::{Engine, RAFT_ELECTION_TICKS};
use raft::eraftpb::Message;
use stoa_tree::{DataTree, Txn, TxnHeader, TxnOp};

/// Ticks the leader of group 0 waits for another group to come to it
/// before it campaigns there past the members' leases: longer than any
/// election timeout.
const FORCE_CAMPAIGN_TICKS: u32 = 4 * RAFT_ELECTION_TICKS as u32;

/// A zxid of the epoch's counter: the leader starts a new epoch well before
/// it ends (`wants_new_epoch`), so running out is a bug.
fn within_counter(zxid: Result<i64, crate::zxid::Exhausted>) -> i64 {
    match zxid {
        Ok(zxid) => zxid,
        Err(e) => panic!(
            "zxid counter of epoch {} used up, reserve included",
            e.epoch
        ),
    }
}

impl Engine {
    /// The epoch zxids are handed out in: the highest term over the groups
    /// (docs/zxids.md, `crate::zxid::server_epoch`).
    pub(super) fn epoch(&self) -> u64 {
        crate::zxid::server_epoch((0..self.cores.len()).map(|p| self.cores.term(p)))
    }

    /// Hands out the next zxid, for a transaction of any partition (one
    /// dense counter: `crate::zxid`).
    pub(super) fn next_zxid(&mut self) -> i64 {
        assert!(
            self.order.is_none() || self.sealed,
            "a zxid handed out before the leader's seal"
        );
        let zxid = within_counter(self.zxids.next(self.epoch()));
        let applied = self.highest_applied_zxid();
        assert!(
            zxid > applied,
            "zxid {zxid:#x} not above applied {applied:#x}"
        );
        zxid
    }

    /// The zxid `next_zxid` will hand out (extension replies carry it in
    /// the stats of what the call writes).
    pub(super) fn peek_next_zxid(&self) -> i64 {
        within_counter(self.zxids.peek(self.epoch()))
    }

    /// The newest zxid handed out in this epoch, or applied (if none).
    pub(super) fn last_zxid_handed_out(&self) -> i64 {
        let applied = self.highest_applied_zxid();
        let handed = self.zxids.last();
        if crate::zxid::epoch_of(handed) == self.epoch() {
            handed.max(applied)
        } else {
            applied
        }
    }

    /// The zxid the server's state is at, which replies carry: the
    /// newest applied on any partition; applying by partition, the prefix
    /// (`engine/by_partition.rs`).
    pub(super) fn applied_zxid(&self) -> i64 {
        self.prefix_zxid()
            .unwrap_or_else(|| self.newest_applied_zxid())
    }

    /// The highest of the prefix and the newest zxid applied anywhere:
    /// what the next zxid handed out must be above.
    fn highest_applied_zxid(&self) -> i64 {
        match self.prefix_zxid() {
            Some(prefix) => prefix.max(self.newest_applied_zxid()),
            None => self.newest_applied_zxid(),
        }
    }

    /// The newest zxid applied on any partition.
    pub(super) fn newest_applied_zxid(&self) -> i64 {
        (0..self.cores.len())
            .map(|p| self.cores.applied_zxid(p))
            .max()
            .unwrap_or(0)
    }

    /// The zxid counter nears the end of the epoch.
    pub(super) fn wants_new_epoch(&self) -> bool {
        self.zxids.wants_new_epoch(self.epoch())
    }

    /// The WAL made `partition`'s batches up to ready `number` durable.
    pub(super) fn on_persisted(&mut self, partition: u32, number: u64) {
        let p = partition as usize;
        if p < self.cores.len() && !self.cores.is_home(p) {
            if self.cores.away_now(p) {
                // Its thread hears it after what it was sent before, and
                // takes the ready that follows (what it commits comes back
                // with it).
                return self.cores.follow(p, move |core| {
                    let heard = core.hear_persisted(partition, number);
                    AwayDone {
                        taken: core.take_plain_ready(p),
                        heard,
                        ..AwayDone::nothing(p)
                    }
                });
            }
            // Back just now: what it did was before this.
            let _ = self.absorb_away();
        }
        let Some(core) = self.cores.get_mut(p) else {
            debug_assert!(false, "persisted a batch of partition {partition}");
            return;
        };
        let heard = core.hear_persisted(partition, number);
        self.absorb_heard(heard);
    }

    /// A raft message for `partition`: if its core is away and the message
    /// cannot change who leads (`Cores::steps_away`), its thread steps it,
    /// with the others of the batch, and takes the ready that follows
    /// (`Cores::step_later`), as it does a durable notification; otherwise
    /// it is handed back to be stepped here.
    pub(super) fn step_away(&mut self, partition: u32, message: Message) -> Option<Message> {
        let p = partition as usize;
        if p >= self.cores.len() || self.cores.is_home(p) {
            return Some(message);
        }
        if self.cores.away_now(p) && self.cores.steps_away(p, &message) {
            self.stats.raft_steps_away += 1;
            self.cores.step_later(p, message);
            return None;
        }
        // Back just now (or recalled next): what it did was before this.
        let _ = self.absorb_away();
        Some(message)
    }

    /// What a group's durable notification let go: its held messages go
    /// out, and the memory of a snapshot it installed is freed.
    pub(super) fn absorb_heard(&mut self, heard: Heard) {
        self.out.messages.extend(heard.released);
        if heard.memory_freed {
            self.out.memory_freed = true;
        }
    }

    /// Every tick: each group's raft clock. A core away ticks on its thread
    /// when the tick cannot change who leads (`Cores::ticks_away`), as the
    /// steady traffic of a term does (`step_away`): kept with its messages,
    /// in order, and stepped with them as one job. Otherwise the core is
    /// recalled and ticked here.
    pub(super) fn tick_groups(&mut self) {
        for partition in 0..self.cores.len() {
            if !self.cores.is_home(partition) {
                if self.cores.away_now(partition) && self.cores.ticks_away(partition) {
                    self.stats.raft_ticks_away += 1;
                    self.cores.tick_later(partition);
                    continue;
                }
                // Back just now (or recalled next): what it did was before this.
                let _ = self.absorb_away();
            }
            self.cores[partition].tick();
        }
    }

    /// Every tick: brings every group under group 0's leader (see above).
    /// The steady case (every group led here, or none led here while group
    /// 0 is not) reads the groups as their cores left and recalls none.
    pub(super) fn align_groups(&mut self) {
        let me = self.config.server_id;
        let anchor = self.cores.leader_id(0);
        let leads_anchor = self.cores.is_leader(0);
        for partition in 1..self.cores.len() {
            let leads = self.cores.is_leader(partition);
            if (leads && (anchor == 0 || anchor == me)) || (!leads && !leads_anchor) {
                self.ensemble.unaligned_ticks[partition] = 0;
                continue;
            }
            let core = &mut self.cores[partition];
            if core.installing.is_some() {
                continue;
            }
            let unaligned = &mut self.ensemble.unaligned_ticks[partition];
            if core.is_leader() {
                *unaligned = 0;
                if core.raft.raft.lead_transferee != Some(anchor) {
                    log::info!("handing partition {partition}'s group over to leader {anchor}");
                    core.raft.transfer_leader(anchor);
                }
                continue;
            }
            *unaligned += 1;
            let log = &core.raft.raft.raft_log;
            // raft-rs campaigns only with its whole log durable.
            if log.persisted != log.last_index() {
                continue;
            }
            if *unaligned >= FORCE_CAMPAIGN_TICKS {
                *unaligned = 0;
                log::info!(
                    "campaigning for partition {partition}'s group (led by {}) past its leases, \
                     to lead it with partition 0's",
                    core.leader_id()
                );
                core.raft.raft.campaign(raft::CAMPAIGN_TRANSFER);
            } else if core.leader_id() == 0 && core.raft.raft.state == raft::StateRole::Follower {
                // A pre-vote that fails changes nothing.
                let _ = core.raft.campaign();
            }
        }
    }
}

impl Engine {
    /// The proposals in flight that change `partition`'s tree, as (header,
    /// op), in no particular order: its own group's transactions, and its
    /// part of every transaction of parts, whichever group carries it. A
    /// group move is left out: it reaches the speculative trees at apply,
    /// which drops them (`engine/group_moves.rs`).
    pub(super) fn pending_ops_on(
        &self,
        partition: usize,
    ) -> impl Iterator<Item = (TxnHeader, &TxnOp)> + '_ {
        (self.cores.iter().enumerate()).flat_map(move |(group, core)| {
            (core.in_flight.iter()).flat_map(move |txn| {
                // Each transaction as (partition, op) pairs: its parts, or
                // itself on its own group's partition.
                let (parts, whole): (&[(u32, TxnOp)], _) = match &txn.op {
                    TxnOp::Parts { parts, .. } => (parts, None),
                    TxnOp::MoveGroups { .. } => (&[], None),
                    op => (&[], Some((group as u32, op))),
                };
                (parts.iter().map(|(part, op)| (*part, op)))
                    .chain(whole)
                    .filter(move |&(part, _)| part as usize == partition)
                    .map(move |(_, op)| (txn.header, op))
            })
        })
    }

    /// What `partition`'s tree will become once every proposal in flight
    /// applies (`pending_ops_on`), in zxid order: the speculative tree as
    /// it is built, and as the invariants expect it to be kept.
    pub(super) fn speculative_from_scratch(&self, partition: usize) -> DataTree {
        let mut pending: Vec<(TxnHeader, &TxnOp)> = self.pending_ops_on(partition).collect();
        pending.sort_by_key(|(header, _)| header.zxid);
        let mut tree = self.cores[partition].tree.clone();
        for (header, op) in pending {
            // A whole transaction's creates have their parents (prep saw
            // to it): stubbing is a part's alone, and harmless here.
            tree.apply_part(&Txn {
                header,
                op: op.clone(),
            });
        }
        tree
    }

    /// The leader's current state of `partition`: the applied tree plus
    /// every proposal in flight. Built on first use (O(1) clone, then the
    /// pending transactions) and kept up to date by `propose_on` while it
    /// is kept.
    pub(super) fn speculative_tree(&mut self, partition: usize) -> &DataTree {
        if self.cores[partition].speculative.is_none() {
            let tree = self.speculative_from_scratch(partition);
            self.cores[partition].speculative = Some(tree);
        }
        (self.cores[partition].speculative.as_ref()).expect("just built")
    }
}

/// What a group's durable notification let go (`PartitionCore::hear_persisted`).
#[derive(Default)]
pub(crate) struct Heard {
    /// Messages that waited for the readies now durable, tagged.
    pub released: Vec<(u32, Message)>,
    /// raft let go of a snapshot's data it installed.
    pub memory_freed: bool,
}

impl PartitionCore {
    /// The WAL made this group's readies up to `number` durable (this
    /// group is partition `partition`): raft hears it, and the messages
    /// that waited for it are let go.
    pub(super) fn hear_persisted(&mut self, partition: u32, number: u64) -> Heard {
        self.raft.on_persist_ready(number);
        if self.term_or_vote_unsynced.is_some_and(|n| n <= number) {
            self.term_or_vote_unsynced = None;
        }
        let mut heard = Heard::default();
        if self.installing.is_some_and(|n| n <= number) {
            // raft-rs let go of the snapshot's data just now.
            self.installing = None;
            heard.memory_freed = true;
        }
        while (self.held_messages.front()).is_some_and(|(n, _)| *n <= number) {
            if let Some((_, messages)) = self.held_messages.pop_front() {
                (heard.released).extend(messages.into_iter().map(|m| (partition, m)));
            }
        }
        heard
    }
}
