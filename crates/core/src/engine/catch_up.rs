//! Bringing a peer that fell behind the leader's compacted log up to date:
//! the leader serializes its applied tree (off the partition thread) and
//! raft sends it; the follower replaces its tree and log with it.

use raft::eraftpb::Snapshot;
use raft::{ProgressState, SnapshotStatus};

use super::{Engine, InstalledSnapshot, SnapshotContent, SnapshotJob};

/// Ticks a peer may sit on a sent snapshot without acknowledging it before
/// the leader assumes it was lost and sends again (the transport drops
/// messages under pressure and raft does not notice by itself).
const SNAPSHOT_ACK_TICKS_MAX: u32 = 200;

/// Ticks a snapshot built for lagging peers is kept after the last of them
/// got it, for another peer that may need it soon (a whole ensemble
/// restarted, say). After that it goes: it is the whole tree serialized,
/// hundreds of megabytes for a large one, and would otherwise stay until
/// the log is next compacted past it, snapCount writes later.
pub(super) const SHIPPABLE_IDLE_TICKS_MAX: u32 = 200;

impl Engine {
    /// Log entries kept in memory behind the applied index after a tree
    /// snapshot, so a peer a little behind catches up from entries.
    pub(super) fn log_retained_after_snapshot(&self) -> u64 {
        if self.standalone() {
            0
        } else {
            self.config.snap_count / 2
        }
    }

    /// After a raft step: starts building the snapshots raft asked for,
    /// and notes snapshots raft just sent.
    pub(super) fn serve_snapshot_requests(&mut self) {
        for (partition, m) in &self.out.messages {
            if m.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot {
                log::info!(
                    "sending a snapshot of partition {partition} at index {} to server {}",
                    m.get_snapshot().get_metadata().index,
                    m.to
                );
                self.stats.snapshots_sent += 1;
                (self.cores[*partition as usize].snapshot_wait_ticks).insert(m.to, 0);
            }
        }
        let mut wanted = Vec::new();
        // A core away asks when it is back.
        for (partition, core) in self.cores.home_iter_mut() {
            // Also in a joint configuration: a new participant that needs a
            // snapshot may be the one the new quorum waits for (a leader
            // elected during the change may have compacted further than the
            // one that checked the quorum). The receiver restarts from such a
            // snapshot in the new configuration (`apply_conf_change_entry`).
            if !core.raft.store().take_snapshot_wanted() || core.shipping.is_some() {
                continue;
            }
            // The trees clone in O(1); the shell serializes them elsewhere.
            core.shipping = Some(core.raft.raft.prs().conf().to_conf_state());
            wanted.push(partition);
        }
        if !wanted.is_empty() {
            // A snapshot is of a cut.
            self.settle_partitions();
        }
        for partition in wanted {
            let core = &self.cores[partition];
            // With several partitions, the whole server's, through the
            // group that asked (`engine/server_snapshots.rs`).
            let content = match self.order {
                Some(_) => SnapshotContent::Server(self.server_snapshot_now()),
                None => SnapshotContent::Tree(core.tree.clone()),
            };
            self.out.snapshots_to_ship.push(SnapshotJob {
                partition: partition as u32,
                index: core.applied_index,
                term: core.applied_term,
                content,
            });
        }
    }

    pub(super) fn on_snapshot_built(
        &mut self,
        partition: usize,
        index: u64,
        term: u64,
        data: bytes::Bytes,
    ) {
        let Some(core) = self.cores.get_mut(partition) else {
            return;
        };
        let Some(conf_state) = core.shipping.take() else {
            return;
        };
        if index < core.raft.store().first_index() - 1 {
            log::debug!("snapshot at {index} is already behind the log; dropped");
            return;
        }
        log::info!(
            "snapshot of partition {partition} at index {index} ({} bytes) ready for lagging peers",
            data.len()
        );
        (core.raft.mut_store()).set_shippable(index, term, data, conf_state);
        // Counted afresh: ticks are counted only while it keeps one.
        core.shippable_idle_ticks = 0;
    }

    /// Leader, every tick: a snapshot nobody acknowledged in time is
    /// reported lost, so raft probes the peer and sends again.
    pub(super) fn watch_snapshot_sends(&mut self) {
        // Each group's own leadership: raft keeps a peer waiting on a
        // snapshot while its group is led here, whoever leads the others.
        // A core away with no peer waiting is left there.
        let waits: Vec<bool> = (0..self.cores.len())
            .map(|p| self.cores.snapshot_waits(p))
            .collect();
        for (_, core) in self.cores.picked_mut(|p| waits[p]) {
            if !core.is_leader() {
                core.snapshot_wait_ticks.clear();
                continue;
            }
            let mut lost = Vec::new();
            let progress = core.raft.raft.prs();
            core.snapshot_wait_ticks.retain(|&peer, ticks| {
                let waiting = progress
                    .get(peer)
                    .is_some_and(|p| p.state == ProgressState::Snapshot);
                *ticks += 1;
                if waiting && *ticks > SNAPSHOT_ACK_TICKS_MAX {
                    lost.push(peer);
                }
                waiting && *ticks <= SNAPSHOT_ACK_TICKS_MAX
            });
            for peer in lost {
                log::warn!("server {peer} did not acknowledge its snapshot; sending again");
                core.raft.report_snapshot(peer, SnapshotStatus::Failure);
            }
        }
    }

    /// Every tick: lets a snapshot for lagging peers go once no peer has
    /// waited on one for `SHIPPABLE_IDLE_TICKS_MAX` ticks (at once when
    /// this server no longer leads).
    pub(super) fn release_idle_shippable(&mut self) {
        // A core away keeps none it did not leave with.
        let keeps: Vec<bool> = (0..self.cores.len())
            .map(|p| self.cores.keeps_shippable(p))
            .collect();
        for (_, core) in self.cores.picked_mut(|p| keeps[p]) {
            let leader = core.is_leader();
            if !core.raft.store().has_shippable() {
                core.shippable_idle_ticks = 0;
                continue;
            }
            // (`snapshot_wait_ticks` only lists peers in this state.)
            let wanted = leader
                && (core.raft.raft.prs().iter()).any(|(_, p)| p.state == ProgressState::Snapshot);
            if wanted {
                core.shippable_idle_ticks = 0;
                continue;
            }
            core.shippable_idle_ticks += 1;
            if leader && core.shippable_idle_ticks < SHIPPABLE_IDLE_TICKS_MAX {
                continue;
            }
            log::info!("letting go of the snapshot built for lagging peers: none waits for it");
            core.raft.mut_store().drop_shippable();
            core.shippable_idle_ticks = 0;
            self.out.memory_freed = true;
        }
    }

    /// Follower: the leader's snapshot replaces the tree, the sessions and
    /// the log (with several partitions, every partition's: see
    /// `engine/server_snapshots.rs`). Returns what the WAL must make
    /// durable first.
    pub(super) fn install_snapshot(
        &mut self,
        partition: usize,
        snapshot: &Snapshot,
    ) -> Option<InstalledSnapshot> {
        if self.order.is_some() {
            return self.install_server_snapshot(partition, snapshot);
        }
        let meta = snapshot.get_metadata();
        let tree = match stoa_tree::read_snapshot(&mut &snapshot.data[..]) {
            Ok(tree) => tree,
            Err(e) => {
                self.out.fatal = Some(format!(
                    "snapshot of partition {partition} at index {} from the leader is unreadable: \
                     {e}",
                    meta.index
                ));
                return None;
            }
        };
        log::info!(
            "installing the leader's snapshot of partition {partition} at index {} (term {}, {} \
             nodes, zxid {:#x})",
            meta.index,
            meta.term,
            tree.node_count(),
            tree.last_zxid()
        );
        assert!(
            meta.index > self.cores[partition].applied_index,
            "snapshot at {} does not move past applied {}",
            meta.index,
            self.cores[partition].applied_index
        );
        // Clients' watches and pending calls refer to the tree being
        // replaced: they reconnect and re-register (setWatches replays what
        // changed since their last zxid).
        self.drop_clients();
        debug_assert_eq!(partition, 0, "a server of one partition");
        self.gate.restore_sessions(&tree, self.now_ms);
        let core = &mut self.cores[partition];
        core.tree = tree;
        core.applied_index = meta.index;
        core.applied_term = meta.term;
        core.snapshot_index = meta.index;
        core.log_bytes_since_snapshot = 0;
        core.raft.mut_store().install(meta);
        self.stats.snapshots_installed += 1;
        let installed = InstalledSnapshot {
            index: meta.index,
            term: meta.term,
            data: snapshot.data.clone(),
            stored_as: (partition as u32, meta.index, meta.term),
        };
        self.reload_extensions();
        self.reload_fast_sessions();
        // Sent during a joint configuration: the servers leaving still vote
        // until it ends, reached at the addresses this server knew.
        let joint = !meta.get_conf_state().voters_outgoing.is_empty();
        let known = self.ensemble.membership.clone();
        self.ensemble.outgoing = joint.then_some(known);
        self.membership_applied();
        self.publish_members();
        Some(installed)
    }
}
