//! What must hold of an engine between two inputs, checked by the
//! simulators after every step (and cheap enough to call anywhere).

use super::Engine;

impl Engine {
    /// Checks the engine's own invariants; the error says which broke.
    /// The tree checks its own (`DataTree::check_invariants`).
    pub fn check_invariants(&self) -> Result<(), String> {
        let applied_zxid = self.core.tree.last_zxid();
        // Proposals apply in the order made: their zxids ascend, all past
        // what the tree has applied.
        let mut previous = applied_zxid;
        for txn in &self.core.in_flight {
            let zxid = txn.header.zxid;
            if zxid <= previous {
                return Err(format!(
                    "in-flight zxid {zxid:#x} not above {previous:#x} (applied {applied_zxid:#x})"
                ));
            }
            previous = zxid;
        }
        if let Some(speculative) = &self.core.speculative {
            let mut expected = self.core.tree.clone();
            for txn in &self.core.in_flight {
                expected.apply(txn);
            }
            if (speculative.digest(), speculative.last_zxid())
                != (expected.digest(), expected.last_zxid())
            {
                return Err(
                    "the speculative tree is not the applied tree plus the in-flight transactions"
                        .into(),
                );
            }
        }
        // Writes are owned and proposed by the leader alone: a server that
        // stops leading forgets both (`drop_clients`).
        let holds_writes = !self.core.owners.is_empty() || !self.core.in_flight.is_empty();
        if holds_writes && !self.is_leader() {
            return Err(format!(
                "server {} does not lead but owns {} sessions' writes and has {} proposals in flight",
                self.config.server_id,
                self.core.owners.len(),
                self.core.in_flight.len()
            ));
        }
        // Sessions wait only for zxids not yet applied (applying one
        // releases its waiters).
        if let Some((&zxid, _)) = self.gate.zxid_waiters.first_key_value() {
            if zxid <= applied_zxid {
                return Err(format!(
                    "replies wait for zxid {zxid:#x}, already applied ({applied_zxid:#x})"
                ));
            }
        }
        let committed = self.core.raft.raft.raft_log.committed;
        if self.core.applied_index < self.core.snapshot_index || self.core.applied_index > committed
        {
            return Err(format!(
                "applied index {} outside [snapshot {}, committed {committed}]",
                self.core.applied_index, self.core.snapshot_index
            ));
        }
        Ok(())
    }
}
