//! The AdminServer's `snapshot` and `restore`, as ZooKeeper 3.9 serves
//! them (docs/operations.md, "Snapshot and restore"): both need an
//! `Authorization` header naming an identity with every right on `/`.
//!
//! `snapshot` hands the HTTP side the state now (the trees clone in O(1));
//! it writes them out in the whole server format off this thread.
//!
//! `restore` differs from ZooKeeper's on purpose. ZooKeeper swaps the
//! database of the one server called, outside its log, and asks operators
//! to call every member with the same file. Stoa's members must stay
//! replicas of one log, so a restore is a transaction (`TxnOp::Restore`,
//! one part per partition) that every member applies at one zxid, whichever
//! member took the request (a follower forwards it to the leader). It is a
//! barrier: the leader holds new writes, lets those in flight apply, then
//! proposes it, and prepares nothing else until it applied; the writes
//! held meanwhile go with their connections, closed by the restore. Its zxid is
//! above every zxid in the snapshot (the leader starts a new epoch first
//! when it must), so no client ever sees zxids go back. Clients are
//! disconnected as after a snapshot install, and the restored sessions
//! start their timeouts afresh.

use stoa_proto::opcode::perms;
use stoa_proto::records::Id;
use stoa_tree::{Caller, Txn, TxnHeader, TxnOp, TxnResult};

use super::forward::EngineMessage;
use super::Engine;
use crate::admin::{self, AdminAnswer, AdminCaller, Json};
use crate::node::server_snapshot::{PartSnapshot, ServerSnapshot};

/// Bytes a restore's trees may take: it is one raft entry, so one WAL
/// record and, in an ensemble, one peer frame, each at most 64 MiB.
pub const RESTORE_BYTES_MAX: usize = 60 << 20;
/// How long a restore may wait to be proposed (a new epoch campaigned
/// for, the writes in flight applied) before it is given up, unrestored.
const RESTORE_PROPOSE_WAIT_MS: i64 = 10_000;

/// The leader's and the origin's bookkeeping of restores.
#[derive(Default)]
pub(crate) struct RestoreState {
    /// Leader: taken, not yet proposed.
    pending: Option<PendingRestore>,
    /// Leader: the zxid of the restore proposed and not yet applied.
    in_flight: Option<i64>,
    /// Answers for this server's AdminServer: (token, answer).
    answers: Vec<(u64, AdminAnswer)>,
}

struct PendingRestore {
    origin: u64,
    token: u64,
    /// The highest zxid in the snapshot.
    zxid: i64,
    parts: Vec<Vec<u8>>,
    since_ms: i64,
    /// A new epoch was campaigned for: leadership is briefly in flux.
    epoch_campaigned: bool,
}

impl RestoreState {
    /// Nothing restores now: writes may be prepared.
    pub(super) fn quiet(&self) -> bool {
        self.pending.is_none() && self.in_flight.is_none()
    }
}

/// The (origin, token) of a restore transaction, from its first part.
pub(super) fn restore_origin(op: &TxnOp) -> Option<(u64, u64)> {
    match op {
        TxnOp::Restore { origin, token, .. } => Some((*origin, *token)),
        TxnOp::Parts { parts, .. } => parts.first().and_then(|(_, op)| restore_origin(op)),
        _ => None,
    }
}

impl Engine {
    /// May the request's identity run `requested` (`snapshot` or
    /// `restore`)? None if so; otherwise ZooKeeper's answer: 401 without
    /// an `Authorization` header or with one no scheme accepts, 403 when
    /// the identity lacks a right on `/`.
    pub fn admin_authorize(&self, requested: &str, caller: AdminCaller<'_>) -> Option<AdminAnswer> {
        let Some((command, needs_server)) = admin::resolve(requested) else {
            let error = format!("Unknown command: {requested}");
            return Some(AdminAnswer::error(200, requested, &error));
        };
        if needs_server && !self.serving_clients() {
            return Some(AdminAnswer::error(
                200,
                requested,
                super::admin_commands::NOT_SERVING,
            ));
        }
        let Some(authorization) = caller.authorization.filter(|a| !a.trim().is_empty()) else {
            return Some(AdminAnswer::error(
                401,
                requested,
                "Auth info is missing for the command",
            ));
        };
        let Some((id, is_super)) = self.admin_identity(authorization, caller) else {
            return Some(AdminAnswer::error(401, command, "Not authenticated"));
        };
        let ids = [id];
        let root = self.cores[0]
            .tree
            .node(stoa_tree::ROOT)
            .expect("a tree has a root");
        let acl = root.acl();
        // ZooKeeper checks each right on its own.
        let mut rights = (0..i32::BITS)
            .map(|bit| 1 << bit)
            .filter(|&r| perms::ALL & r != 0);
        let every_right = rights.all(|right| {
            stoa_tree::check_acl(
                acl,
                right,
                Caller {
                    ids: &ids,
                    is_super,
                },
            )
            .is_ok()
        });
        (!every_right).then(|| AdminAnswer::error(403, command, "Not authorized"))
    }

    /// The identities an `Authorization` header proves, as ZooKeeper's
    /// AdminServer reads it: `digest user:password`, `ip` (the
    /// connection's address) or `x509` (the subject of the client
    /// certificate an HTTPS request showed, as the client port's `x509`),
    /// and whether it is the super user.
    fn admin_identity(&self, authorization: &str, caller: AdminCaller<'_>) -> Option<(Id, bool)> {
        let words: Vec<&str> = authorization.split(' ').collect();
        let id = |scheme: &str, id: String| Id {
            scheme: scheme.into(),
            id,
        };
        match words[..] {
            ["digest", credentials] => Some(self.digest_identity(credentials)),
            ["ip"] | ["ip", _] => caller.peer.map(|ip| (id("ip", ip.to_string()), false)),
            ["x509"] | ["x509", _] => caller
                .certificate
                .map(|subject| (id("x509", subject.to_string()), false)),
            _ => None,
        }
    }

    /// `snapshot`: every partition's tree now, for the AdminServer to
    /// write out (`node::server_snapshot`). Applying by partition, the
    /// partitions first meet at a cut.
    pub fn admin_snapshot(&mut self) -> ServerSnapshot {
        if self.order.is_some() {
            self.settle_partitions();
            return self.server_snapshot_now();
        }
        let core = &self.cores[0];
        ServerSnapshot {
            zxid: core.tree.last_zxid(),
            parts: vec![PartSnapshot {
                index: core.applied_index,
                term: core.applied_term,
                tree: core.tree.clone(),
            }],
        }
    }

    /// `restore` of `parts` (one serialized tree per partition, highest
    /// zxid `zxid`), answered later under `token` (`take_admin_answers`);
    /// or refused now.
    pub fn admin_restore(
        &mut self,
        token: u64,
        zxid: i64,
        parts: Vec<Vec<u8>>,
    ) -> Option<AdminAnswer> {
        let refuse = |status, error: &str| Some(AdminAnswer::error(status, "restore", error));
        let bytes: usize = parts.iter().map(Vec::len).sum();
        if bytes > RESTORE_BYTES_MAX {
            let error = format!(
                "the snapshot's trees take {bytes} bytes; a restore takes at most \
                 {RESTORE_BYTES_MAX} (one raft entry)"
            );
            return refuse(413, &error);
        }
        if self.is_leader() {
            let id = self.config.server_id;
            return self
                .take_restore(id, token, zxid, parts)
                .and_then(|(status, error)| refuse(status, &error));
        }
        match self.leader_id() {
            0 => refuse(503, "no leader to take the restore; nothing was restored"),
            _ => {
                self.forward(EngineMessage::Restore { token, zxid, parts });
                None
            }
        }
    }

    /// Answers for this server's AdminServer, by token.
    pub fn take_admin_answers(&mut self) -> Vec<(u64, AdminAnswer)> {
        std::mem::take(&mut self.restore.answers)
    }

    /// Leader: a restore from `origin` (this server or a follower). Returns
    /// the refusal (status, why) when it cannot be taken.
    pub(super) fn take_restore(
        &mut self,
        origin: u64,
        token: u64,
        zxid: i64,
        parts: Vec<Vec<u8>>,
    ) -> Option<(u16, String)> {
        if !self.restore.quiet() {
            return Some((429, "a restore is under way".into()));
        }
        if parts.len() != self.cores.len() {
            return Some((
                500,
                "the snapshot's partitions do not match this server's".into(),
            ));
        }
        if let Some(why) = self.restored_placement_differs(&parts) {
            return Some((400, why));
        }
        if crate::zxid::epoch_of(zxid) >= u64::from(u32::MAX - 1) {
            return Some((
                500,
                format!("the snapshot's zxid {zxid:#x} leaves no epoch above it"),
            ));
        }
        log::info!(
            "restore from the AdminServer of server {origin}: snapshot up to zxid {zxid:#x}, {} \
             bytes",
            parts.iter().map(Vec::len).sum::<usize>()
        );
        self.restore.pending = Some(PendingRestore {
            origin,
            token,
            zxid,
            parts,
            since_ms: self.now_ms,
            epoch_campaigned: false,
        });
        self.drive_restore();
        None
    }

    /// Leader: moves the pending restore on (a new epoch above the
    /// snapshot's, the writes in flight applied, then the proposal), or
    /// gives it up once it waited too long or leadership moved.
    pub(super) fn drive_restore(&mut self) {
        let Some(pending) = &self.restore.pending else {
            return;
        };
        let waited_too_long = self.now_ms - pending.since_ms > RESTORE_PROPOSE_WAIT_MS;
        if !self.is_leader() {
            if pending.epoch_campaigned && !waited_too_long {
                return; // its own campaign for the new epoch
            }
            self.give_up_restore(503, "leadership moved before the restore was proposed");
            return;
        }
        if waited_too_long {
            self.give_up_restore(503, "the restore could not be proposed in time");
            return;
        }
        let epoch_needed = crate::zxid::epoch_of(pending.zxid) + 1;
        if self.epoch() < epoch_needed {
            if !pending.epoch_campaigned && self.may_campaign_for_epoch() {
                self.campaign_for_epoch(epoch_needed);
                if let Some(pending) = &mut self.restore.pending {
                    pending.epoch_campaigned = true;
                }
            }
            return;
        }
        let drained = self.cores.iter().all(|core| core.in_flight.is_empty());
        if !self.may_prepare_unless_restoring() || !drained {
            return;
        }
        let pending = self.restore.pending.take().expect("checked");
        let zxid = self.next_zxid();
        let restore = |p: usize, tree: Vec<u8>| TxnOp::Restore {
            origin: if p == 0 { pending.origin } else { 0 },
            token: if p == 0 { pending.token } else { 0 },
            tree,
        };
        let op = if pending.parts.len() == 1 {
            restore(0, pending.parts.into_iter().next().expect("one"))
        } else {
            TxnOp::Parts {
                parts: (pending.parts.into_iter().enumerate())
                    .map(|(p, tree)| (p as u32, restore(p, tree)))
                    .collect(),
                order: vec![],
            }
        };
        self.restore.in_flight = Some(zxid);
        log::info!("restore proposed at zxid {zxid:#x}");
        self.propose(Txn {
            header: TxnHeader {
                session_id: 0,
                cxid: 0,
                zxid,
                time_ms: self.now_ms,
            },
            op,
        });
    }

    fn give_up_restore(&mut self, status: u16, why: &str) {
        let Some(pending) = self.restore.pending.take() else {
            return;
        };
        let error = format!("{why}; nothing was restored");
        log::warn!("restore from server {}: {error}", pending.origin);
        self.answer_restore(pending.origin, pending.token, status, error);
    }

    /// Sends a refusal to the server whose AdminServer took the restore.
    pub(super) fn answer_restore(&mut self, origin: u64, token: u64, status: u16, error: String) {
        if origin == self.config.server_id {
            let answer = AdminAnswer::error(status, "restore", &error);
            self.restore.answers.push((token, answer));
        } else {
            let refused = EngineMessage::RestoreRefused {
                token,
                status,
                error,
            };
            self.out.engine_messages.push((origin, refused));
        }
    }

    /// A refusal of a restore this server forwarded.
    pub(super) fn on_restore_refused(&mut self, token: u64, status: u16, error: &str) {
        let answer = AdminAnswer::error(status, "restore", error);
        self.restore.answers.push((token, answer));
    }

    /// Leadership moved: a restore proposed by this server may or may not
    /// commit; it no longer holds this server's writes.
    pub(super) fn forget_restore_in_flight(&mut self) {
        self.restore.in_flight = None;
    }

    /// Every member: a restore applied at `zxid`. Clients' watches and
    /// calls refer to the trees replaced: they reconnect (setWatches
    /// replays what changed since their last zxid). The sessions are the
    /// snapshot's.
    pub(super) fn on_restore_applied(
        &mut self,
        origin: u64,
        token: u64,
        zxid: i64,
        result: &TxnResult,
    ) {
        if self.restore.in_flight == Some(zxid) {
            self.restore.in_flight = None;
        }
        let failed = matches!(result, TxnResult::Error(_));
        if !failed {
            self.drop_clients();
            self.gate.restore_sessions(&self.cores[0].tree, self.now_ms);
            // Writes held through the restore came from connections just
            // closed: they end in ConnectionLoss, unapplied, as writes in
            // flight at a change of leader may.
            self.holds.owners.clear();
            self.holds.held_writes.clear();
            if let Err(why) = self.settle_placement() {
                self.out.fatal = Some(format!("restored at zxid {zxid:#x}: {why}"));
            }
            self.reload_extensions();
            self.reload_fast_sessions();
            self.stats.restores += 1;
            log::info!(
                "restored at zxid {zxid:#x}: {} znodes, {} sessions",
                self.cores
                    .iter()
                    .map(|c| c.tree.node_count())
                    .sum::<usize>(),
                self.gate.sessions.len()
            );
        }
        if origin != self.config.server_id || token == 0 {
            return;
        }
        let answer = if failed {
            AdminAnswer::error(
                500,
                "restore",
                "the snapshot did not read back; nothing was restored",
            )
        } else {
            let data = vec![("last_zxid".to_string(), Json::Int(zxid))];
            AdminAnswer::json(200, &admin::response("restore", data, None))
        };
        self.restore.answers.push((token, answer));
    }
}
