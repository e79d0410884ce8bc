//! What must hold of an engine between two inputs, checked by the
//! simulators after every step (and cheap enough to call anywhere). Each
//! part checks its own state; the engine adds what spans parts.

use super::gate::SessionGate;
use super::partition_core::PartitionCore;
use super::Engine;

impl Engine {
    /// Checks every part's invariants; the error says which broke. The
    /// tree checks its own (`DataTree::check_invariants`).
    pub fn check_invariants(&self) -> Result<(), String> {
        (self.holds.check_invariants(self.cores.is_leader(0)))
            .map_err(|e| format!("leader's holds: {e}"))?;
        // A core away is checked once it is back: checking it here would
        // recall it.
        for (partition, core) in self.cores.home_iter() {
            core.check_invariants()
                .map_err(|e| format!("core {partition}: {e}"))?;
            if let Some(speculative) = &core.speculative {
                let expected = self.speculative_from_scratch(partition);
                if (speculative.digest(), speculative.last_zxid())
                    != (expected.digest(), expected.last_zxid())
                {
                    return Err(format!(
                        "core {partition}: the speculative tree is not the applied tree plus \
                         the proposals in flight"
                    ));
                }
            }
            if let Some(last) = core.in_flight.back() {
                if last.header.zxid > self.zxids.last() {
                    return Err(format!(
                        "core {partition}: in-flight zxid {:#x} past the clock's last {:#x}",
                        last.header.zxid,
                        self.zxids.last()
                    ));
                }
            }
        }
        if !self.prep_batch.is_empty() {
            return Err("plain writes left unprepared after their turn".into());
        }
        if !self.read_batch.is_empty() {
            return Err("plain reads left unanswered after their turn".into());
        }
        self.gate
            .check_invariants(self.applied_zxid())
            .map_err(|e| format!("gate: {e}"))?;
        if let Some(by) = &self.by_partition {
            by.check_invariants()
                .map_err(|e| format!("applying by partition: {e}"))?;
        }
        Ok(())
    }
}

impl PartitionCore {
    pub fn check_invariants(&self) -> Result<(), String> {
        let applied_zxid = self.tree.last_zxid();
        // Proposals apply in the order made: their zxids ascend, all past
        // what the tree has applied, and none past what the clock handed out.
        let mut previous = applied_zxid;
        for txn in &self.in_flight {
            let zxid = txn.header.zxid;
            if zxid <= previous {
                return Err(format!(
                    "in-flight zxid {zxid:#x} not above {previous:#x} (applied {applied_zxid:#x})"
                ));
            }
            previous = zxid;
        }
        // Writes are proposed by the leader alone: a server that stops
        // leading forgets them (`drop_clients`).
        if !self.in_flight.is_empty() && !self.is_leader() {
            return Err(format!(
                "does not lead but has {} proposals in flight",
                self.in_flight.len()
            ));
        }
        let committed = self.raft.raft.raft_log.committed;
        let applied_max = committed.max(self.skipped_through);
        if self.applied_index < self.snapshot_index || self.applied_index > applied_max {
            return Err(format!(
                "applied index {} outside [snapshot {}, committed {committed} or skipped {}]",
                self.applied_index, self.snapshot_index, self.skipped_through
            ));
        }
        Ok(())
    }
}

impl SessionGate {
    /// `applied_zxid`: what the core's tree has applied.
    pub fn check_invariants(&self, applied_zxid: i64) -> Result<(), String> {
        // Sessions wait only for zxids not yet applied (applying one
        // releases its waiters).
        if let Some((&zxid, _)) = self.zxid_waiters.first_key_value() {
            if zxid <= applied_zxid {
                return Err(format!(
                    "replies wait for zxid {zxid:#x}, already applied ({applied_zxid:#x})"
                ));
            }
        }
        // A session answers on one connection, which knows it is bound to it.
        for (sid, session) in &self.sessions {
            let Some(conn) = session.conn else {
                if !session
                    .queue
                    .iter()
                    .all(|p| matches!(p, crate::session::Pending::Write { .. }))
                {
                    return Err(format!(
                        "session {sid:#x} has no connection but replies queued for one"
                    ));
                }
                continue;
            };
            match self.conns.get(&conn) {
                Some(c) if c.session == Some(*sid) => {}
                // Kept through a change of leader, re-attaching: unbound,
                // with nothing queued until it is bound again.
                Some(c)
                    if c.session.is_none()
                        && self.kept.contains_key(&conn)
                        && self.attaching.get(&conn).is_some_and(|a| a.0 == *sid)
                        && session.queue.is_empty() => {}
                Some(c) => {
                    return Err(format!(
                        "session {sid:#x} answers on connection {conn}, which is bound to {:?}",
                        c.session
                    ))
                }
                None => {
                    return Err(format!(
                        "session {sid:#x} answers on connection {conn}, which is closed"
                    ))
                }
            }
        }
        // A kept connection re-attaches exactly one live session.
        for conn in self.kept.keys() {
            let Some(&(sid, _)) = self.attaching.get(conn) else {
                return Err(format!("kept connection {conn} is not re-attaching"));
            };
            if self
                .sessions
                .get(&sid)
                .is_none_or(|s| s.conn != Some(*conn))
            {
                return Err(format!(
                    "kept connection {conn} re-attaches session {sid:#x}, which answers elsewhere"
                ));
            }
        }
        Ok(())
    }
}
