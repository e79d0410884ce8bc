//! Applying committed transactions: tree, watches, sessions, replies.

use raft::eraftpb::{Entry, EntryType};
use stoa_proto::codes::ErrorCode;
use stoa_proto::records::{GetDataResponse, SyncResponse};
use stoa_proto::request::Request;
use stoa_proto::response::Response;
use stoa_tree::{reply_for, TreeEventKind, Txn, TxnOp};

use super::Engine;
use crate::session::Pending;
use crate::watch::ChangeKind;

impl Engine {
    pub(super) fn apply_entries(&mut self, entries: Vec<Entry>) {
        for entry in entries {
            assert!(
                entry.index == self.core.applied_index + 1,
                "applying {} after {}",
                entry.index,
                self.core.applied_index
            );
            self.core.applied_index = entry.index;
            self.core.applied_term = entry.term;
            match entry.get_entry_type() {
                EntryType::EntryConfChangeV2 => {
                    // Entries after one that cannot be applied are not
                    // applied either: stop rather than diverge.
                    if let Err(why) = self.apply_conf_change_entry(&entry) {
                        self.out.fatal = Some(format!("raft index {}: {why}", entry.index));
                        return;
                    }
                    continue;
                }
                EntryType::EntryConfChange => {
                    self.out.fatal = Some(format!(
                        "raft index {}: a version 1 configuration change (Stoa writes version 2)",
                        entry.index
                    ));
                    return;
                }
                // The empty entry a new leader appends.
                EntryType::EntryNormal if entry.data.is_empty() => continue,
                EntryType::EntryNormal => {}
            }
            self.core.log_bytes_since_snapshot += entry.data.len() as u64;
            if let Some(txn) = self.core.own_proposal(&entry.data) {
                self.apply_txn(txn);
                continue;
            }
            match Txn::decode(&entry.data) {
                Ok(txn) => self.apply_txn(txn),
                Err(e) => {
                    // A committed entry we cannot read means the log is not ours
                    // or is corrupt beyond its checksums: stop rather than diverge.
                    self.out.fatal = Some(format!(
                        "undecodable transaction at raft index {}: {e}",
                        entry.index
                    ));
                    return;
                }
            }
        }
    }


    pub(super) fn apply_txn(&mut self, txn: Txn) {
        let zxid = txn.header.zxid;
        let sid = txn.header.session_id;
        let applied = self.core.tree.apply(&txn);
        self.core.preparer.applied(zxid);
        // A transaction the leader still holds (a reconfig's, applied
        // through `apply_conf_change_entry`) leaves the in-flight queue here.
        if self
            .core.in_flight
            .front()
            .is_some_and(|t| t.header.zxid == zxid)
        {
            self.core.in_flight.pop_front();
        }
        self.stats.txns_applied += 1;
        if self.is_leader() {
            // The header's time is this leader's clock when it prepared the txn.
            self.stats
                .record_commit((self.now_ms - txn.header.time_ms).max(0) as u64);
        }
        let mut membership_changed = false;
        for event in &applied.events {
            membership_changed |= event.path == stoa_tree::CONFIG;
            let change = match event.kind {
                TreeEventKind::NodeCreated => ChangeKind::Created,
                TreeEventKind::NodeDeleted => ChangeKind::Deleted,
                TreeEventKind::NodeDataChanged => ChangeKind::DataChanged,
                TreeEventKind::NodeChildrenChanged => ChangeKind::ChildrenChanged,
            };
            let deliver = !self.extensions.has_watch_extensions()
                || self.run_watch_extensions(&event.path, change);
            if deliver {
                for conn in self.core.watches.trigger(change, &event.path) {
                    self.gate.notify(conn, zxid, change, &event.path);
                }
            }
            if event.path.starts_with(super::extensions::EXTENSIONS_ROOT)
                && change != ChangeKind::ChildrenChanged
            {
                self.on_registration_change(&event.path, change == ChangeKind::Deleted);
            }
        }
        self.release_zxid_waiters(zxid);
        match &txn.op {
            TxnOp::CreateSession { timeout_ms } => {
                self.session_created(sid, *timeout_ms);
                self.run_session_extensions(sid, true);
            }
            TxnOp::CloseSession { .. } => {
                let xid = self
                    .take_head_write(sid, zxid, txn.header.cxid)
                    .map(|(xid, _)| xid);
                self.session_closed(sid, xid);
                self.run_session_extensions(sid, false);
            }
            _ => {
                if let Some((xid, request)) = self.take_head_write(sid, zxid, txn.header.cxid) {
                    let (err, response) = match (&request, reply_for(&request, &applied.result)) {
                        (Request::Sync(r), _) => {
                            let path = r.path.clone();
                            (ErrorCode::Ok, Response::Sync(SyncResponse { path }))
                        }
                        // ZooKeeper answers a reconfig with the new
                        // configuration, as getData of /zookeeper/config.
                        (Request::Reconfig(_), Ok(Response::Stat(stat))) => {
                            let data = self
                                .core.tree
                                .node(stoa_tree::CONFIG)
                                .map(|n| n.data().to_vec())
                                .unwrap_or_default();
                            (
                                ErrorCode::Ok,
                                Response::GetData(GetDataResponse { data, stat }),
                            )
                        }
                        (_, Ok(response)) => (ErrorCode::Ok, response),
                        (_, Err(code)) => (code, Response::Empty),
                    };
                    if let Some(conn) = self.gate.sessions.get(&sid).and_then(|s| s.conn) {
                        self.gate.send_reply(conn, xid, zxid, err, &response);
                    }
                    self.pump(sid);
                }
            }
        }
        if membership_changed {
            self.membership_applied();
        }
    }

    /// Sends the replies that waited for `zxid` to be applied.
    fn release_zxid_waiters(&mut self, zxid: i64) {
        while let Some(entry) = self.gate.zxid_waiters.first_entry() {
            if *entry.key() > zxid {
                break;
            }
            for sid in entry.remove() {
                self.pump(sid);
            }
        }
    }

    /// Pops the session's queued write for `zxid`, which FIFO order puts at
    /// the head of its queue.
    /// A write forwarded to the leader waits with zxid 0 (unknown here) and
    /// is recognised by its xid.
    fn take_head_write(&mut self, sid: i64, zxid: i64, cxid: i32) -> Option<(i32, Request)> {
        let now_ms = self.now_ms;
        let session = self.gate.sessions.get_mut(&sid)?;
        match session.queue.front() {
            // An extension call's writes: its answer comes from the leader.
            Some(Pending::Remote { .. }) => return None,
            Some(Pending::Write { zxid: head, .. }) if *head == zxid => {}
            Some(Pending::Write { zxid: 0, xid, .. }) if *xid == cxid => {}
            // Not the forwarded write at the head: an internal transaction
            // of the session (expiry), or one of an earlier connection's.
            // The leader's owner check keeps this connection's own writes
            // in order, so the head's turn is still to come.
            Some(Pending::Write { zxid: 0, .. }) => return None,
            // An internal transaction of this session (e.g. expiry) applied
            // ahead of the client's next write.
            Some(Pending::Write { zxid: head, .. }) if *head > zxid => return None,
            Some(Pending::Write { zxid: head, .. }) => {
                panic!("session {sid:#x}: applied zxid {zxid:#x} but its oldest write is {head:#x}")
            }
            // Internal transactions (expiry, container cleanup) have no reply.
            _ => return None,
        }
        match session.queue.pop_front() {
            Some(Pending::Write {
                xid,
                request,
                received_ms,
                ..
            }) => {
                self.stats
                    .record_latency((now_ms - received_ms).max(0) as u64);
                Some((xid, request))
            }
            _ => unreachable!("checked above"),
        }
    }
}
