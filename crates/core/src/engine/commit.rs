//! Driving the partition's raft group: proposals go out as ready entries to
//! the WAL; entries come back committed once durable, and are applied.

use raft::eraftpb::{Message, MessageType};
use stoa_proto::request::Request;

use super::{Engine, SnapshotContent, SnapshotJob};

/// Raft log entries freed per engine step once a snapshot covers them:
/// about 0.1 ms of work, and far more per second than any write rate
/// appends, so the log still shrinks to the target within a moment.
const COMPACT_STEP_ENTRIES: usize = 1024;

impl Engine {
    /// Handles every ready each group has now. Entries to persist become a
    /// `PersistJob` (acknowledged later by `Input::Persisted`); committed
    /// entries are applied at once.
    pub(super) fn drive_raft(&mut self) {
        // What cores brought back goes first: a group's readies are
        // persisted in their order.
        let _ = self.absorb_away();
        // Every group's readies, in rounds (`engine/lent_ready.rs`).
        while self.ready_round() {}
        if self.applying_behind() {
            self.apply_by_partition(true);
            // The replies that went out as it handed over may have lifted
            // fences: what waited behind them applies now, not at the next
            // input (once load stops, a tick's). Each pass lifts one at
            // least, and none is added meanwhile.
            while self.fence_liftable() && self.applying_behind() {
                self.apply_by_partition(true);
            }
        }
        for partition in 0..self.cores.len() {
            // An installed snapshot counts as applied for raft only once durable.
            self.report_applied(partition);
        }
        self.maybe_seal();
        // The first leader's placement goes right after its seal: client
        // writes wait for it (`Engine::placement_settled`).
        self.publish_placement();
        self.drive_restore();
        self.serve_snapshot_requests();
        self.complete_attaches();
        self.release_held_writes();
        self.release_held_session_creates();
        self.release_held_attaches();
        self.publish_membership();
        self.maybe_snapshot();
        for partition in 0..self.cores.len() {
            self.release_applied_entries(partition);
        }
    }

    /// Handles the group's ready on the engine's thread: one that
    /// installs a snapshot from the leader, or one that came up while a
    /// round was absorbed.
    pub(super) fn handle_ready(&mut self, partition: usize) {
        let core = &mut self.cores[partition];
        let ready = core.raft.ready();
        let installed = if ready.snapshot().get_metadata().index != 0 {
            let snapshot = ready.snapshot().clone();
            core.installing = Some(ready.number());
            self.install_snapshot(partition, &snapshot)
        } else {
            None
        };
        let taken = self.cores[partition].take_ready(partition as u32, ready, installed);
        self.absorb_ready(partition, taken);
    }

    /// A leader with several partitions proposes its seal before any
    /// other transaction: the zxids below it that will never exist
    /// (`crate::apply_order`). It may once every entry in its logs is
    /// committed and handed to the order: a zxid missing from them then
    /// was never committed and never will be. What waited behind the gaps
    /// applies at once.
    fn maybe_seal(&mut self) {
        if self.order.is_none() || self.sealed || !self.is_leader() {
            return;
        }
        let all_committed = self.cores.iter().all(|core| {
            let log = &core.raft.raft.raft_log;
            log.committed == log.last_index() && !core.raft.has_ready()
        });
        if !all_committed {
            return;
        }
        let next = self.peek_next_zxid();
        let voids = self.order.as_mut().expect("checked").seal(next);
        self.sealed = true;
        let zxid = self.next_zxid();
        debug_assert_eq!(zxid, next);
        log::info!(
            "sealed the order before zxid {zxid:#x}: {} range(s) of zxids that will never exist",
            voids.len()
        );
        self.restart_chains();
        self.propose(stoa_tree::Txn {
            header: stoa_tree::TxnHeader {
                session_id: 0,
                cxid: 0,
                zxid,
                time_ms: self.now_ms,
            },
            op: stoa_tree::TxnOp::Seal { voids },
        });
        if self.applies_by_partition() {
            self.settle_partitions();
        } else {
            self.apply_in_order();
        }
        for (name, sid, writes) in std::mem::take(&mut self.held_internal_writes) {
            self.propose_internal_writes(&name, sid, writes);
        }
    }

    /// After a ready: tells the engine of a change of leader.
    pub(super) fn note_leader(&mut self) {
        let leader = self.leader_id();
        let known_terms = &self.ensemble.known_leader_terms;
        let terms_moved =
            ((0..self.cores.len()).map(|p| self.cores.term(p))).ne(known_terms.iter().copied());
        // A follower that missed an election can hear from the same
        // leader again in a newer term: in between, another leader may
        // have replaced what the old term left uncommitted, so that is
        // a change of leader too (its clients' pending replies would
        // otherwise be released by the newer term's zxids; ensemble
        // simulator seed 5011).
        let re_elected =
            leader != 0 && leader == self.ensemble.known_leader && terms_moved && !self.is_leader();
        if terms_moved || leader != self.ensemble.known_leader {
            // Another server may have led some group meanwhile: what this
            // one handed out before may be gone, so it seals again.
            self.sealed = false;
            if !self.is_leader() {
                self.held_internal_writes.clear();
            }
        }
        if leader != self.ensemble.known_leader || re_elected {
            let old = std::mem::replace(&mut self.ensemble.known_leader, leader);
            self.note_terms();
            self.on_leader_change(old, leader);
        } else if leader != 0 && terms_moved {
            self.note_terms();
        }
    }

    /// Remembers each group's term as the known leader's.
    fn note_terms(&mut self) {
        let terms = &mut self.ensemble.known_leader_terms;
        terms.clear();
        terms.extend((0..self.cores.len()).map(|p| self.cores.term(p)));
    }

    /// Frees in-memory raft log entries toward the compaction target, a
    /// bounded number per step. Standalone, that target is the applied
    /// index itself: no peer ever reads entries behind it, and the WAL
    /// keeps them for restarts (holding up to snapCount of them until the
    /// next snapshot was ~5% of the RSS).
    fn release_applied_entries(&mut self, partition: usize) {
        if !self.cores.is_home(partition) {
            // Next time, once it is back.
            return;
        }
        let standalone = self.standalone();
        let core = &mut self.cores[partition];
        if standalone {
            let applied = core.applied_index.min(core.raft.raft.raft_log.applied);
            core.raft.mut_store().compact(applied);
        }
        core.raft.mut_store().compact_step(COMPACT_STEP_ENTRIES);
    }

    pub(super) fn report_applied(&mut self, partition: usize) {
        if !self.cores.is_home(partition) {
            // It reports when it is back (`Engine::absorb_ready`, and
            // `Engine::absorb_applied` after applying away).
            return;
        }
        let core = &mut self.cores[partition];
        let log = &core.raft.raft.raft_log;
        let applied = core.applied_index.min(log.persisted).min(log.committed);
        if applied > log.applied {
            core.raft.advance_apply_to(applied);
        }
    }

    /// About what a snapshot of the trees takes: their paths and data, and
    /// a stat, ACL reference and framing per node.
    fn snapshot_bytes_estimate(&self) -> u64 {
        const NODE_BYTES: u64 = 48;
        (self.cores.iter())
            .map(|core| {
                core.tree.approximate_data_size() + NODE_BYTES * core.tree.node_count() as u64
            })
            .sum()
    }

    /// Snapshots the server every snapCount applied entries (over all its
    /// partitions: one snapshot holds them all, `engine/server_snapshots.rs`).
    fn maybe_snapshot(&mut self) {
        let entries_since: u64 = (0..self.cores.len())
            .map(|p| self.cores.applied_since_snapshot(p))
            .sum();
        // Not during a membership change: a snapshot compacts the log, and
        // a reconfig's quorum check counted which new participants hold
        // the log from where it starts (`check_new_quorum`). (A restart
        // from a snapshot taken while joint would also run the new
        // configuration early; that is safe, see `apply_conf_change`.)
        if entries_since < self.config.snap_count
            || self.in_joint_config()
            || self.ensemble.membership_pending.is_some()
        {
            return;
        }
        // Standalone, also wait for a log worth a share of the tree: with
        // a big tree, a snapshot every snapCount writes rewrote some 170
        // MiB per 15 MiB of log and cost a third of the write peak. The
        // share keeps the replay after a restart within about a quarter of
        // a snapshot. (An ensemble compacts its in-memory log at snapshots,
        // so waiting there would hold more of it.)
        let log_bytes: u64 = (self.cores.iter())
            .map(|core| core.log_bytes_since_snapshot)
            .sum();
        if self.standalone() && log_bytes < self.snapshot_bytes_estimate() / 4 {
            return;
        }
        // The trees clone in O(1) (structural sharing), so the writer
        // thread serializes frozen copies while this thread keeps applying.
        self.settle_partitions();
        let job = match self.order {
            Some(_) => self.server_snapshot_job(),
            None => SnapshotJob {
                partition: 0,
                index: self.cores[0].applied_index,
                term: self.cores[0].applied_term,
                content: SnapshotContent::Tree(self.cores[0].tree.clone()),
            },
        };
        self.out.snapshots.push(job);
        let retained = self.log_retained_after_snapshot();
        for core in &mut self.cores {
            core.log_bytes_since_snapshot = 0;
            core.snapshot_index = core.applied_index;
            core.last_snapshot = Some((core.tree.last_zxid(), self.now_ms));
            // Never past what raft counts as applied: it still reads entries
            // after that (e.g. for pending membership changes on campaign).
            let upto =
                (core.applied_index.saturating_sub(retained)).min(core.raft.raft.raft_log.applied);
            core.raft.mut_store().compact(upto);
        }
    }
}

/// Makes an append's previous index and term those of the entry before
/// its first entry. raft-rs's `batch_append` (0.7) adds entries to an
/// append already queued for the peer when that append has none, without
/// moving its previous index: a commit-only append at index 57 followed, in
/// the same ready, by a probe from 33 became "after 57: entries 33..57". The
/// follower matched at 57, took the entries as new ones past it and
/// acknowledged index 82; the leader then counted it as holding 82 entries
/// it never had (a commit without a quorum) and the follower stopped at the
/// next commit index past its log. Found by the ensemble simulator (seed
/// 111, five participants). Returns false (drop the message; raft probes
/// again) when the entry before the first is compacted here.
pub(super) fn repair_batched_append(
    message: &mut Message,
    term_of: impl Fn(u64) -> Option<u64>,
) -> bool {
    let Some(first) = message.entries.first() else {
        return true;
    };
    if message.get_msg_type() != MessageType::MsgAppend || first.index == message.index + 1 {
        return true;
    }
    let previous = first.index - 1;
    let Some(term) = term_of(previous) else {
        return false;
    };
    log::debug!(
        "append to server {} after index {} carried entries from {}: sent after {previous}",
        message.to,
        message.index,
        first.index
    );
    message.index = previous;
    message.log_term = term;
    true
}

/// Pushes `message` onto `out`, cut into several appends if it is an
/// append whose entries exceed `max_bytes`. raft-rs's `batch_append` joins
/// every proposal made before its messages are taken into one append per
/// peer, without its own size limit; a burst of large writes would make one
/// message bigger than a peer frame. Each part is a valid append on its
/// own: it follows the previous part's last entry, with the same commit.
pub(super) fn split_append(
    partition: u32,
    mut message: Message,
    max_bytes: u64,
    out: &mut Vec<(u32, Message)>,
) {
    let entry_bytes = |e: &raft::eraftpb::Entry| (e.data.len() + e.context.len()) as u64 + 32;
    if message.get_msg_type() != MessageType::MsgAppend
        || message.entries.iter().map(entry_bytes).sum::<u64>() <= max_bytes
    {
        out.push((partition, message));
        return;
    }
    let entries: Vec<_> = message.take_entries().into();
    let (mut index, mut log_term) = (message.index, message.log_term);
    let mut part = Vec::new();
    let mut part_bytes = 0;
    let mut entries = entries.into_iter().peekable();
    while let Some(entry) = entries.next() {
        part_bytes += entry_bytes(&entry);
        part.push(entry);
        let full = entries
            .peek()
            .is_none_or(|next| part_bytes + entry_bytes(next) > max_bytes);
        if full {
            let last = part.last().expect("a part has an entry");
            let (next_index, next_term) = (last.index, last.term);
            let mut piece = message.clone();
            piece.index = index;
            piece.log_term = log_term;
            piece.set_entries(std::mem::take(&mut part).into());
            out.push((partition, piece));
            (index, log_term) = (next_index, next_term);
            part_bytes = 0;
        }
    }
}

impl Engine {
    /// ZooKeeper's ContainerManager: deletes empty containers and expired TTL
    /// nodes, as ordinary replicated transactions.
    pub(super) fn check_containers(&mut self) {
        let interval_ms = self.config.container_check_interval_ms as i64;
        // Once every entry of an earlier term applied (what is in flight is
        // this leader's, and the preparer checks against it), as
        // ZooKeeper's container manager runs beside outstanding requests.
        if self.now_ms - self.last_container_check_ms < interval_ms || !self.leads_its_term() {
            return;
        }
        self.last_container_check_ms = self.now_ms;
        for partition in 0..self.cores.len() {
            // A group root's link is reaped with its node, by the node's
            // partition (docs/partitions.md, "Routing by placement").
            let candidates: Vec<String> = (self.cores[partition].tree)
                .expiry_candidates(self.now_ms, 0)
                .into_iter()
                .filter(|p| self.partition_of(p) == partition)
                .collect();
            for path in candidates {
                if !self.may_prepare() {
                    // The zxid counter nears its end: the rest wait for the
                    // new epoch (the next check) rather than eat into the
                    // reserve.
                    return;
                }
                let zxid = self.next_zxid();
                let ctx = self.internal_ctx(0, zxid);
                let prepared = match self.spans_for_root(&path) {
                    Some((own, parents)) => {
                        let unlink = Request::Delete(stoa_proto::records::DeleteRequest {
                            path: path.clone(),
                            version: -1,
                        });
                        self.prepare_node_and_link(&ctx, own, parents, |node, link| {
                            Ok((node.delete_container(&path)?, link.multi_op(&unlink)?))
                        })
                    }
                    None => self.cores[partition].preparing(|preparer, tree| {
                        preparer.prepare_delete_container(tree, &ctx, &path)
                    }),
                };
                match prepared {
                    Ok(txn) => {
                        self.propose_on(partition, txn);
                        self.stats.containers_deleted += 1;
                    }
                    // Raced with a client write (a child appeared): skip
                    // this round. The zxid still commits, as a no-op: with
                    // several partitions the one order waits for every
                    // zxid handed out.
                    Err(_) => self.propose_noop(0, 0, zxid),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use raft::eraftpb::Entry;

    fn append(first: u64, sizes: &[usize]) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.to = 2;
        m.index = first - 1;
        m.log_term = 3;
        m.commit = 7;
        let entries: Vec<Entry> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| Entry {
                index: first + i as u64,
                term: 3 + i as u64 / 4,
                data: vec![0u8; n].into(),
                ..Default::default()
            })
            .collect();
        m.set_entries(entries.into());
        m
    }

    proptest! {
        /// The parts carry every entry once, in order; each follows the one
        /// before it (index and log term of its predecessor) and fits the
        /// limit unless it is a single entry too big for any part.
        #[test]
        fn parts_chain_and_fit(sizes in proptest::collection::vec(0usize..300, 0..40), max in 1u64..1000) {
            let message = append(10, &sizes);
            let mut out = Vec::new();
            split_append(0, message.clone(), max, &mut out);
            let out: Vec<Message> = out.into_iter().map(|(_, m)| m).collect();
            let all: Vec<&Entry> = out.iter().flat_map(|m| m.entries.iter()).collect();
            prop_assert_eq!(all.len(), sizes.len());
            for (i, e) in all.iter().enumerate() {
                prop_assert_eq!(e.index, 10 + i as u64);
            }
            let (mut index, mut term) = (message.index, message.log_term);
            for part in &out {
                prop_assert_eq!((part.index, part.log_term), (index, term));
                prop_assert_eq!((part.to, part.commit), (2, 7));
                if let Some(last) = part.entries.last() {
                    (index, term) = (last.index, last.term);
                }
                let bytes: u64 = part.entries.iter().map(|e| e.data.len() as u64 + 32).sum();
                prop_assert!(bytes <= max || part.entries.len() == 1);
            }
            if sizes.iter().map(|&n| n as u64 + 32).sum::<u64>() <= max {
                prop_assert_eq!(out, vec![message]);
            }
        }
    }

    #[test]
    fn a_batched_append_is_sent_after_the_entry_before_its_first() {
        // Proves the shape raft-rs's batching produced (entries 10.. behind
        // a previous index of 20) leaves as a valid append after 9, and that
        // well-formed appends and other messages are left alone.
        let mut batched = append(10, &[1, 1]);
        batched.index = 20;
        batched.log_term = 4;
        let term_of = |index: u64| Some(index / 3);
        assert!(repair_batched_append(&mut batched, term_of));
        assert_eq!((batched.index, batched.log_term), (9, 3));
        let well_formed = append(10, &[1]);
        let mut same = well_formed.clone();
        assert!(repair_batched_append(&mut same, |_| None));
        assert_eq!(same, well_formed);
        let mut compacted = append(10, &[1]);
        compacted.index = 20;
        assert!(!repair_batched_append(&mut compacted, |_| None));
        let mut heartbeat = append(10, &[1]);
        heartbeat.set_msg_type(MessageType::MsgHeartbeat);
        heartbeat.index = 20;
        assert!(repair_batched_append(&mut heartbeat, |_| None));
        assert_eq!(heartbeat.index, 20);
    }

    #[test]
    fn other_messages_pass_whole() {
        let mut m = append(1, &[5000, 5000]);
        m.set_msg_type(MessageType::MsgHeartbeat);
        let mut out = Vec::new();
        split_append(3, m.clone(), 100, &mut out);
        assert_eq!(out, vec![(3, m)]);
    }
}
