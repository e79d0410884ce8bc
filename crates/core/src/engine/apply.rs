//! Applying committed transactions: the core applies each to its tree
//! and watches and hands the gate what it decided (`Applied`), in order.

use raft::eraftpb::{Entry, EntryType};
use stoa_tree::{TreeEventKind, Txn, TxnOp, TxnResult};

use super::handoff::{Applied, SessionChange, WriteOutcome};
use super::Engine;
use crate::watch::ChangeKind;

/// The watch change a tree event is.
pub(super) fn change_of(kind: TreeEventKind) -> ChangeKind {
    match kind {
        TreeEventKind::NodeCreated => ChangeKind::Created,
        TreeEventKind::NodeDeleted => ChangeKind::Deleted,
        TreeEventKind::NodeDataChanged => ChangeKind::DataChanged,
        TreeEventKind::NodeChildrenChanged => ChangeKind::ChildrenChanged,
    }
}

/// The other partitions an encoded transaction of `group`'s log has an
/// item on, from its chain links. One written without links (format
/// version 1, by an older server) could touch any: it is one on each.
fn other_parts(group: usize, partitions: usize, data: &[u8]) -> Vec<u32> {
    match Txn::chain_of(data) {
        // Most name their own partition alone.
        Some(links) if links.len() == 1 => Vec::new(),
        Some(links) if links.len() > 0 => links
            .map(|(partition, _)| partition)
            .filter(|&partition| partition as usize != group && (partition as usize) < partitions)
            .collect(),
        Some(_) => (0..partitions as u32)
            .filter(|&partition| partition as usize != group)
            .collect(),
        // Undecodable: the engine stops when it comes to apply it.
        None => Vec::new(),
    }
}

/// The op a transaction's reply goes by: a transaction of parts answers
/// with its first part's.
fn reply_op(op: &TxnOp) -> &TxnOp {
    match op {
        TxnOp::Parts { parts, .. } => &parts[0].1,
        op => op,
    }
}

/// A client's multi over several partitions: each part's results, put
/// back in the order of the client's ops (`order` names each op's part).
fn multi_result_in_order(results: Vec<(u32, TxnResult)>, order: &[u32]) -> TxnResult {
    let mut by_part: Vec<(u32, std::vec::IntoIter<TxnResult>)> = (results.into_iter())
        .map(|(part, result)| match result {
            TxnResult::Multi(ops) => (part, ops.into_iter()),
            other => (part, vec![other].into_iter()),
        })
        .collect();
    let mut ops = Vec::with_capacity(order.len());
    for entry in order {
        let part = entry & !stoa_tree::SILENT_PART;
        let (_, results) = (by_part.iter_mut())
            .find(|(p, _)| *p == part)
            .expect("decoding checked every op has its part");
        let result = results
            .next()
            .expect("decoding checked each part's op count");
        if entry & stoa_tree::SILENT_PART == 0 {
            ops.push(result);
        }
    }
    TxnResult::Multi(ops)
}

impl Engine {
    /// Applies a group's committed entries: at once with one partition;
    /// with several, each in its place in the one order of every
    /// partition's entries (`crate::apply_order`), which may hold it until
    /// another group's entries come.
    pub(super) fn apply_entries(&mut self, partition: usize, entries: Vec<Entry>) {
        let Some(order) = &mut self.order else {
            for entry in entries {
                if !self.apply_entry(partition, entry) {
                    return;
                }
            }
            return;
        };
        let by_partition = self.by_partition.is_some();
        let mut in_hand = Vec::new();
        for entry in entries {
            if entry.index <= order.last_index(partition) {
                // Covered by a whole server snapshot installed through
                // another group (`engine/server_snapshots.rs`).
                assert!(
                    entry.index <= self.cores[partition].skipped_through,
                    "partition {partition} committed index {} twice",
                    entry.index
                );
                continue;
            }
            let is_txn = entry.get_entry_type() == EntryType::EntryNormal && !entry.data.is_empty();
            let zxid = if is_txn {
                Txn::zxid_of(&entry.data)
            } else {
                None
            };
            // An undecodable one has no zxid either: it passes as an entry
            // outside the order, and apply_entry stops at it.
            if let Some(voids) = is_txn.then(|| Txn::seal_of(&entry.data)).flatten() {
                order.add_voids(&voids);
            }
            let others = match zxid {
                Some(_) => other_parts(partition, self.cores.len(), &entry.data),
                None => Vec::new(),
            };
            if zxid.is_some() && by_partition {
                in_hand.extend(Txn::header_of(&entry.data));
            }
            order.committed_with_parts(partition, entry.index, zxid, others, entry);
        }
        for header in &in_hand {
            self.fence_if_replies_before(header);
        }
        if self.applies_by_partition() {
            self.apply_by_partition(true);
        } else {
            self.apply_in_order();
        }
    }

    /// Applies one committed entry; false when it cannot be (the engine
    /// stops: `out.fatal`).
    pub(super) fn apply_entry(&mut self, partition: usize, entry: Entry) -> bool {
        assert!(
            entry.index == self.cores[partition].applied_index + 1,
            "applying {} after {}",
            entry.index,
            self.cores[partition].applied_index
        );
        self.cores[partition].applied_index = entry.index;
        self.cores[partition].applied_term = entry.term;
        match entry.get_entry_type() {
            EntryType::EntryConfChangeV2 if partition != 0 => {
                // Membership changes go through partition 0's group,
                // which carries /zookeeper/config.
                self.out.fatal = Some(format!(
                    "partition {partition}, raft index {}: a configuration change outside \
                     partition 0",
                    entry.index
                ));
                return false;
            }
            EntryType::EntryConfChangeV2 => {
                // Entries after one that cannot be applied are not
                // applied either: stop rather than diverge.
                if let Err(why) = self.apply_conf_change_entry(&entry) {
                    self.out.fatal = Some(format!("raft index {}: {why}", entry.index));
                    return false;
                }
                return true;
            }
            EntryType::EntryConfChange => {
                self.out.fatal = Some(format!(
                    "raft index {}: a version 1 configuration change (Stoa writes version 2)",
                    entry.index
                ));
                return false;
            }
            // The empty entry a new leader appends.
            EntryType::EntryNormal if entry.data.is_empty() => return true,
            EntryType::EntryNormal => {}
        }
        self.cores[partition].log_bytes_since_snapshot += entry.data.len() as u64;
        if let Some(txn) = self.cores[partition].own_proposal(&entry.data) {
            self.apply_txn(partition, txn);
            return true;
        }
        match Txn::decode(&entry.data) {
            Ok(txn) => {
                self.apply_txn(partition, txn);
                true
            }
            Err(e) => {
                // A committed entry we cannot read means the log is not ours
                // or is corrupt beyond its checksums: stop rather than diverge.
                self.out.fatal = Some(format!(
                    "undecodable transaction at raft index {}: {e}",
                    entry.index
                ));
                false
            }
        }
    }

    pub(super) fn apply_txn(&mut self, partition: usize, txn: Txn) {
        let (zxid, sid, header) = (txn.header.zxid, txn.header.session_id, txn.header);
        // The op the reply and the session's life go by: a transaction of
        // parts answers with its first part's.
        let session_change = match reply_op(&txn.op).decided() {
            TxnOp::CreateSession { timeout_ms } => Some(SessionChange::Created {
                timeout_ms: *timeout_ms,
            }),
            TxnOp::CloseSession { .. } => Some(SessionChange::Closed),
            _ => None,
        };
        // No member may serve a client before it routes by the placement
        // the log holds (`Engine::placement_settled`). Checked under test
        // (the simulators run release builds), not in a server: a data
        // directory written before the placement was, replays its
        // sessions' creations.
        if cfg!(any(test, debug_assertions)) {
            let created = matches!(session_change, Some(SessionChange::Created { .. }));
            assert!(
                !created || self.placement_settled(),
                "session {sid:#x} created at {zxid:#x} before the placement was written"
            );
        }
        let restore = super::admin_snapshots::restore_origin(&txn.op);
        let (result, membership_changed) = match txn.op {
            TxnOp::Parts { parts, order } => {
                (self.apply_parts(partition, header, parts, &order), false)
            }
            TxnOp::MoveGroups {
                moves,
                data,
                version,
            } => {
                assert_eq!(
                    partition,
                    super::group_moves::PLACEMENT_PARTITION,
                    "group moves go through the placement's group"
                );
                // The placement's tree records it first: the moves may
                // take nodes out of that same tree at the same zxid.
                let text = data.clone();
                let record = TxnOp::MoveGroups {
                    moves: Vec::new(),
                    data,
                    version,
                };
                let applied = self.apply_whole(partition, Txn { header, op: record });
                self.move_groups(zxid, &moves, &text);
                debug_assert_eq!(
                    Some(self.placement.render().as_str()),
                    self.cores[partition]
                        .tree
                        .node(stoa_tree::PARTITIONS)
                        .and_then(|n| std::str::from_utf8(n.data()).ok()),
                    "the placement the leader rendered"
                );
                applied
            }
            op => self.apply_whole(partition, Txn { header, op }),
        };
        self.stats.txns_applied += 1;
        if self.is_leader() && self.log_applied() {
            // An entry of this leader's term: the header's time is this
            // leader's clock when it prepared the txn. Its predecessors'
            // entries (and the WAL replayed at a restart) carry older
            // clocks and would read as minutes of commit latency.
            self.stats
                .record_commit((self.now_ms - header.time_ms).max(0) as u64);
        }
        if session_change == Some(SessionChange::Closed) {
            // Its writes are accepted from no connection any more.
            self.holds.owners.remove(&sid);
        }
        let config = membership_changed.then(|| {
            self.cores[partition]
                .tree
                .node(stoa_tree::CONFIG)
                .map(|n| n.data().to_vec())
                .unwrap_or_default()
        });
        if let Some((origin, token)) = restore {
            self.on_restore_applied(origin, token, zxid, &result);
        }
        self.hand_to_gate(Applied::Outcome(WriteOutcome {
            session: sid,
            cxid: header.cxid,
            zxid,
            result,
            config,
            session_change,
        }));
        if let Some(change) = session_change {
            self.run_session_extensions(sid, change != SessionChange::Closed);
        }
        if membership_changed {
            self.membership_applied();
        }
    }

    /// A transaction on one partition's tree: its result, and whether it
    /// changed the membership (`/zookeeper/config`).
    fn apply_whole(&mut self, partition: usize, txn: Txn) -> (TxnResult, bool) {
        let zxid = txn.header.zxid;
        let applied = self.cores[partition].apply(&txn);
        let mut membership_changed = false;
        // A leader running watch extensions decided what watchers hear.
        let decided = match &txn.op {
            TxnOp::Watched { events, .. } => Some(events),
            _ => None,
        };
        for event in &applied.events {
            membership_changed |= event.path == stoa_tree::CONFIG;
            let change = change_of(event.kind);
            if decided.is_none() {
                self.fire(partition, zxid, change, &event.path);
            }
            if event.path.starts_with(super::extensions::EXTENSIONS_ROOT)
                && change != ChangeKind::ChildrenChanged
            {
                self.on_registration_change(&event.path, change == ChangeKind::Deleted);
            }
            self.fast_flag_applied(partition, &event.path);
        }
        for (kind, path) in decided.into_iter().flatten() {
            self.fire(partition, zxid, change_of(*kind), path);
        }
        (applied.result, membership_changed)
    }

    /// A transaction of parts: each part to its partition's tree, in the
    /// order listed; the result is the first part's, or for a client's
    /// multi the parts' results in its ops' order. A part's events about
    /// nodes of another partition (a group root's link, a tree's own
    /// unserved `/`) are not that partition's to fire: the node's own part
    /// reports them.
    fn apply_parts(
        &mut self,
        partition: usize,
        header: stoa_tree::TxnHeader,
        parts: Vec<(u32, TxnOp)>,
        order: &[u32],
    ) -> TxnResult {
        assert_eq!(
            parts.first().map(|(p, _)| *p as usize),
            Some(partition),
            "a transaction of parts is applied through its first part's group"
        );
        let mut results = Vec::with_capacity(parts.len());
        for (part, op) in parts {
            let part = part as usize;
            let part_txn = Txn { header, op };
            let applied = self.cores[part].apply_part(&part_txn);
            // A leader running watch extensions decided what this part's
            // watchers hear (`Engine::decide_watches`), of its own nodes.
            let events: Vec<(ChangeKind, String)> = match &part_txn.op {
                TxnOp::Watched { events, .. } => (events.iter())
                    .map(|(kind, path)| (change_of(*kind), path.clone()))
                    .collect(),
                _ => (applied.events.iter())
                    .map(|event| (change_of(event.kind), event.path.to_string()))
                    .filter(|(_, path)| self.partition_of(path) == part)
                    .collect(),
            };
            results.push((part as u32, applied.result));
            for (change, path) in events {
                self.fast_flag_applied(part, &path);
                self.fire(part, header.zxid, change, &path);
            }
        }
        if order.is_empty() {
            results.swap_remove(0).1
        } else {
            multi_result_in_order(results, order)
        }
    }

    /// Fires the watches set on `path` for `change`.
    fn fire(&mut self, partition: usize, zxid: i64, change: ChangeKind, path: &str) {
        let conns = self.cores[partition].watches.trigger(change, path);
        if !conns.is_empty() {
            self.hand_to_gate(Applied::Fired {
                conns,
                zxid,
                change,
                path: path.to_string(),
            });
        }
    }

    /// The gate's side of applying: watch events go out, then the
    /// transaction's reply or session change. With one partition this is a
    /// call; with several, the end of a queue from the core's thread.
    /// Applying by partition, it waits for the prefix to reach its zxid.
    pub(super) fn hand_to_gate(&mut self, applied: Applied) {
        let applied = match self.applies_by_partition() {
            false => applied,
            true => match self.hold_handoff(applied) {
                Some(applied) => applied,
                None => return,
            },
        };
        match applied {
            Applied::Fired {
                conns,
                zxid,
                change,
                path,
            } => {
                for conn in conns {
                    self.notify(conn, zxid, change, &path);
                }
            }
            Applied::Outcome(outcome) => self.on_outcome(outcome),
        }
    }

    fn on_outcome(&mut self, outcome: WriteOutcome) {
        let (sid, zxid) = (outcome.session, outcome.zxid);
        self.release_zxid_waiters(zxid);
        match outcome.session_change {
            Some(SessionChange::Created { timeout_ms }) => self.session_created(sid, timeout_ms),
            Some(SessionChange::Closed) => {
                // Its reads in flight are answered before its close.
                if self.read_flight.holds(sid) {
                    self.land_reads();
                }
                let xid = self
                    .gate
                    .take_head_write(sid, zxid, outcome.cxid)
                    .map(|(xid, ..)| xid);
                self.session_closed(sid, xid);
            }
            None => {
                if let Some(completed) = self.gate.complete_write(outcome) {
                    self.stats
                        .record_latency((self.now_ms - completed.received_ms).max(0) as u64);
                    self.pump(sid);
                }
            }
        }
    }

    /// Sends the replies that waited for `zxid` to be applied.
    pub(super) fn release_zxid_waiters(&mut self, zxid: i64) {
        while let Some(entry) = self.gate.zxid_waiters.first_entry() {
            if *entry.key() > zxid {
                break;
            }
            for sid in entry.remove() {
                self.pump(sid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A multi's ops, split over parts by partition (each part keeping
        /// its ops' relative order) and put back by `order`, come back in
        /// the client's order; ops marked silent (group roots' links)
        /// leave no result.
        #[test]
        fn a_multis_results_come_back_in_the_ops_order(
            ops in proptest::collection::vec((0u32..4, any::<bool>()), 1..20),
        ) {
            // Op i's result names it: Created { path: i }.
            let result = |i: usize| TxnResult::Created {
                path: i.to_string(),
                stat: Default::default(),
            };
            let order: Vec<u32> = (ops.iter())
                .map(|&(p, silent)| if silent { p | stoa_tree::SILENT_PART } else { p })
                .collect();
            let mut parts: Vec<(u32, Vec<TxnResult>)> = Vec::new();
            for (i, &(p, _)) in ops.iter().enumerate() {
                match parts.iter_mut().find(|(q, _)| *q == p) {
                    Some((_, results)) => results.push(result(i)),
                    None => parts.push((p, vec![result(i)])),
                }
            }
            // The parts in any order: the first op's first, the rest sorted.
            parts.sort_by_key(|&(p, _)| (p != ops[0].0, p));
            let results = (parts.into_iter())
                .map(|(p, results)| (p, TxnResult::Multi(results)))
                .collect();
            let heard = (0..ops.len()).filter(|&i| !ops[i].1).map(result).collect();
            let expected = TxnResult::Multi(heard);
            prop_assert_eq!(multi_result_in_order(results, &order), expected);
        }
    }
}
