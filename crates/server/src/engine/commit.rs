//! Driving the partition's raft group: proposals go out as ready entries to
//! the WAL; entries come back committed once durable, and are applied.

use super::{Engine, PersistJob, SnapshotJob};

/// Raft log entries freed per engine step once a snapshot covers them:
/// about 0.1 ms of work, and far more per second than any write rate
/// appends, so the log still shrinks to the target within a moment.
const COMPACT_STEP_ENTRIES: usize = 1024;

impl Engine {
    /// Handles every ready raft has now. Entries to persist become a
    /// `PersistJob` (acknowledged later by `Input::Persisted`); committed
    /// entries are applied at once.
    pub(super) fn drive_raft(&mut self) {
        while self.raft.has_ready() {
            let mut ready = self.raft.ready();
            let installed = if ready.snapshot().get_metadata().index != 0 {
                let snapshot = ready.snapshot().clone();
                self.installing = Some(ready.number());
                self.install_snapshot(&snapshot)
            } else {
                None
            };
            // Messages that need nothing durable (e.g. a leader's appends)
            // leave at once; the others wait for this ready's persistence.
            self.out.messages.extend(ready.take_messages());
            let committed = ready.take_committed_entries();
            self.apply_entries(committed);
            let entries = ready.take_entries();
            let must_sync = ready.must_sync() || installed.is_some();
            if let Some(hs) = ready.hs() {
                self.raft.mut_store().set_hard_state(hs.clone());
            }
            let after_persist = ready.take_persisted_messages();
            // A ready with messages to send after persistence needs a job
            // even when it writes nothing: its acknowledgement (in order,
            // after every earlier batch) is what releases them.
            if !entries.is_empty()
                || ready.hs().is_some()
                || !after_persist.is_empty()
                || installed.is_some()
            {
                self.raft.mut_store().append(&entries);
                // Every synced batch carries the latest hard state, so a
                // commit index written lazily still reaches the disk.
                let hard_state = must_sync.then(|| self.raft.store().hard_state().clone());
                if !entries.is_empty() {
                    self.stats.record_wal_batch(entries.len() as u64);
                }
                self.out.persists.push(PersistJob {
                    number: ready.number(),
                    must_sync,
                    hard_state,
                    entries,
                    installed,
                });
            }
            if !after_persist.is_empty() {
                self.held_messages
                    .push_back((ready.number(), after_persist));
            }
            self.raft.advance_append_async(ready);
            self.report_applied();
            let leader = self.leader_id();
            if leader != self.known_leader {
                let old = std::mem::replace(&mut self.known_leader, leader);
                self.on_leader_change(old, leader);
            }
        }
        // An installed snapshot counts as applied for raft only once durable.
        self.report_applied();
        self.serve_snapshot_requests();
        self.complete_attaches();
        self.release_held_writes();
        self.publish_membership();
        self.maybe_snapshot();
        self.release_applied_entries();
    }

    /// Frees in-memory raft log entries toward the compaction target, a
    /// bounded number per step. Standalone, that target is the applied
    /// index itself: no peer ever reads entries behind it, and the WAL
    /// keeps them for restarts (holding up to snapCount of them until the
    /// next snapshot was ~5% of the RSS).
    fn release_applied_entries(&mut self) {
        if self.standalone() {
            let applied = self.applied_index.min(self.raft.raft.raft_log.applied);
            self.raft.mut_store().compact(applied);
        }
        self.raft.mut_store().compact_step(COMPACT_STEP_ENTRIES);
    }

    fn report_applied(&mut self) {
        let log = &self.raft.raft.raft_log;
        let applied = self.applied_index.min(log.persisted).min(log.committed);
        if applied > log.applied {
            self.raft.advance_apply_to(applied);
        }
    }

    fn maybe_snapshot(&mut self) {
        // A restart rebuilds raft's configuration from the snapshot's
        // `/zookeeper/config`, which cannot express a joint one.
        if self.applied_index < self.snapshot_index + self.config.snap_count
            || self.in_joint_config()
        {
            return;
        }
        // The tree clones in O(1) (structural sharing), so the writer thread
        // serializes a frozen copy while this thread keeps applying.
        self.out.snapshots.push(SnapshotJob {
            tree: self.tree.clone(),
            index: self.applied_index,
            term: self.applied_term,
        });
        self.snapshot_index = self.applied_index;
        // Never past what raft counts as applied: it still reads entries
        // after that (e.g. for pending membership changes on campaign).
        let upto = self
            .applied_index
            .saturating_sub(self.log_retained_after_snapshot())
            .min(self.raft.raft.raft_log.applied);
        self.raft.mut_store().compact(upto);
    }
}

impl Engine {
    /// ZooKeeper's ContainerManager: deletes empty containers and expired TTL
    /// nodes, as ordinary replicated transactions.
    pub(super) fn check_containers(&mut self) {
        let interval_ms = self.config.container_check_interval_ms as i64;
        if !self.caught_up() || self.now_ms - self.last_container_check_ms < interval_ms {
            return;
        }
        self.last_container_check_ms = self.now_ms;
        for path in self.tree.expiry_candidates(self.now_ms, 0) {
            let zxid = self.next_zxid();
            let ctx = self.internal_ctx(0, zxid);
            match self
                .preparer
                .prepare_delete_container(&self.tree, &ctx, &path)
            {
                Ok(txn) => {
                    self.propose(txn);
                    self.stats.containers_deleted += 1;
                }
                // Raced with a client write (a child appeared): skip this round.
                Err(_) => continue,
            }
        }
    }
}
