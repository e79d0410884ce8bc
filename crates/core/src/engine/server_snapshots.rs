//! Snapshots of a server of several partitions: every partition's tree at
//! one cut of the one order, taken, shipped and installed together
//! (`crate::node::server_snapshot`; docs/partitions.md).
//!
//! A local one is named by its cut: (zxid, the sum of the partitions'
//! indices). Every state a server passes through has a zxid and indices
//! at least those of the one before, so the newest name is the newest
//! state, whichever partitions moved, and two snapshots of one name are
//! of one state.
//!
//! Raft asks for a snapshot per group, when that group's follower is
//! behind the leader's compacted log. The leader then ships the whole
//! server's, through the group that asked. The follower installs every
//! partition from it; the groups that did not ask still deliver the
//! entries it covers, and the engine skips them (`PartitionCore::skipped_through`).

use raft::eraftpb::Snapshot;

use super::{Engine, InstalledSnapshot, SnapshotContent, SnapshotJob};
use crate::apply_order::Cut;
use crate::node::server_snapshot::{self, PartSnapshot, ServerSnapshot};

impl Engine {
    /// Every partition's tree now, at the order's cut (the trees clone
    /// in O(1)).
    pub(super) fn server_snapshot_now(&self) -> ServerSnapshot {
        let order = self.order.as_ref().expect("a server of several partitions");
        let cut = order.cut();
        let parts = (self.cores.iter().zip(&cut.indices))
            .map(|(core, &index)| {
                debug_assert_eq!(index, core.applied_index, "the order and the core agree");
                PartSnapshot {
                    index: core.applied_index,
                    term: core.applied_term,
                    tree: core.tree.clone(),
                }
            })
            .collect();
        ServerSnapshot {
            zxid: cut.zxid,
            parts,
        }
    }

    /// The job writing this server's snapshot to its store.
    pub(super) fn server_snapshot_job(&self) -> SnapshotJob {
        let snapshot = self.server_snapshot_now();
        let (index, term) = name_of(&snapshot);
        SnapshotJob {
            partition: 0,
            index,
            term,
            content: SnapshotContent::Server(snapshot),
        }
    }

    /// Follower: the leader's whole server snapshot came through the
    /// group of `partition`. Its trees replace this server's if its cut
    /// is ahead of what this server applied; either way the group moves
    /// to the snapshot's index. Returns what the WAL must make durable
    /// first: the state this server is in now, as a snapshot.
    pub(super) fn install_server_snapshot(
        &mut self,
        partition: usize,
        snapshot: &Snapshot,
    ) -> Option<InstalledSnapshot> {
        let meta = snapshot.get_metadata();
        let fail = |why: String| {
            format!(
                "the leader's snapshot through partition {partition}'s group at index {}: {why}",
                meta.index
            )
        };
        let server = match server_snapshot::read_server_snapshot(&mut &snapshot.data[..]) {
            Ok(server) if server.parts.len() != self.cores.len() => {
                self.out.fatal = Some(fail(format!(
                    "it holds {} partitions, this server runs {}",
                    server.parts.len(),
                    self.cores.len()
                )));
                return None;
            }
            Ok(server)
                if (server.parts[partition].index, server.parts[partition].term)
                    != (meta.index, meta.term) =>
            {
                self.out.fatal = Some(fail("it names another index for the group".into()));
                return None;
            }
            Ok(server) => server,
            Err(e) => {
                self.out.fatal = Some(fail(e));
                return None;
            }
        };
        // Its cut replaces this server's, so this server takes one first.
        self.settle_partitions();
        let applied = self.order.as_ref().expect("several partitions").applied();
        log::info!(
            "installing the leader's snapshot of every partition at zxid {:#x} (through \
             partition {partition} at index {}, term {}; applied here: {applied:#x})",
            server.zxid,
            meta.index,
            meta.term
        );
        let (data, (name_index, name_term)) = if server.zxid > applied {
            self.take_server_trees(server, &snapshot.data)
        } else {
            // Only entries outside the order (a new leader's empty ones)
            // were missing here: the trees stand, the group moves on.
            self.skip_through(partition, meta.index, meta.term);
            self.own_server_snapshot_file()
        };
        self.cores[partition].raft.mut_store().install(meta);
        self.stats.snapshots_installed += 1;
        Some(InstalledSnapshot {
            index: meta.index,
            term: meta.term,
            data,
            stored_as: (0, name_index, name_term),
        })
    }

    /// Replaces every tree with the snapshot's, and returns the snapshot
    /// as this server then stands, with its name: each partition at the
    /// snapshot's index or its own, if higher (entries outside the order).
    fn take_server_trees(
        &mut self,
        server: ServerSnapshot,
        received: &bytes::Bytes,
    ) -> (bytes::Bytes, (u64, u64)) {
        // Clients' watches and pending calls refer to the trees being
        // replaced: they reconnect and re-register.
        self.drop_clients();
        let cut = Cut {
            zxid: server.zxid,
            indices: server.parts.iter().map(|part| part.index).collect(),
        };
        let mut own_ahead = false;
        for (p, part) in server.parts.into_iter().enumerate() {
            let core = &mut self.cores[p];
            core.tree = part.tree;
            if part.index > core.applied_index {
                core.applied_index = part.index;
                core.applied_term = part.term;
                core.skipped_through = part.index;
            } else {
                own_ahead = true;
            }
            core.snapshot_index = core.applied_index;
            core.log_bytes_since_snapshot = 0;
        }
        self.gate.restore_sessions(&self.cores[0].tree, self.now_ms);
        if let Err(why) = self.settle_placement() {
            self.out.fatal = Some(format!("a snapshot from the leader: {why}"));
        }
        self.order
            .as_mut()
            .expect("several partitions")
            .install(&cut);
        self.forget_applied_chains();
        self.reload_extensions();
        self.reload_fast_sessions();
        self.membership_applied();
        self.publish_members();
        if !own_ahead {
            return (received.clone(), name_of_cut(&cut));
        }
        self.own_server_snapshot_file()
    }

    /// This server's whole snapshot now, serialized, and its name.
    fn own_server_snapshot_file(&self) -> (bytes::Bytes, (u64, u64)) {
        let snapshot = self.server_snapshot_now();
        let mut data = Vec::new();
        server_snapshot::write_server_snapshot(&snapshot, &mut data).expect("in memory");
        (data.into(), name_of(&snapshot))
    }

    /// Moves partition `partition` to `index` without touching its tree:
    /// the entries up to there are in it or change nothing.
    fn skip_through(&mut self, partition: usize, index: u64, term: u64) {
        let order = self.order.as_mut().expect("several partitions");
        let mut cut = order.cut();
        if index > cut.indices[partition] {
            cut.indices[partition] = index;
            order.install(&cut);
            self.forget_applied_chains();
        }
        let core = &mut self.cores[partition];
        if index > core.applied_index {
            core.applied_index = index;
            core.applied_term = term;
            core.skipped_through = index;
        }
        core.snapshot_index = core.applied_index;
    }
}

/// The name a whole server snapshot is stored under (see the module).
fn name_of(snapshot: &ServerSnapshot) -> (u64, u64) {
    name_of_cut(&Cut {
        zxid: snapshot.zxid,
        indices: snapshot.parts.iter().map(|part| part.index).collect(),
    })
}

fn name_of_cut(cut: &Cut) -> (u64, u64) {
    assert!(cut.zxid >= 0, "a cut at zxid {:#x}", cut.zxid);
    (cut.zxid as u64, cut.indices.iter().sum())
}
