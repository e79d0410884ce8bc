//! Membership changes: ZooKeeper's `reconfig` carried out as raft
//! configuration changes, the `/zookeeper/config` node that records the
//! membership (so it reaches new servers in snapshots and survives
//! restarts), and leader transfer.
//!
//! A reconfig becomes one raft entry: a `ConfChangeV2` of every server it
//! changes, whose context is the transaction writing the new
//! `/zookeeper/config`. Applying the entry switches raft's configuration
//! and the tree together, on every server, at the same log position, so
//! the change is atomic: no server and no client ever sees part of it.
//! A change of more than one server enters raft's joint configuration
//! (both the old and the new participants' majorities must agree), and
//! raft-rs appends the empty entry that leaves it as soon as the leader
//! applied the first; writes wait until it applies, and no snapshot is
//! taken in between, so a snapshot's configuration is always the one its
//! `/zookeeper/config` records. A change of addresses only needs no raft
//! change and goes as an ordinary entry.

use raft::eraftpb::{ConfChangeSingle, ConfChangeV2, Entry};
use stoa_proto::codes::ErrorCode;
use stoa_proto::opcode::perms;
use stoa_proto::records::ReconfigRequest;
use stoa_tree::{check_acl, Caller, DataTree, PrepContext, Txn, CONFIG};

use super::{Engine, EngineConfig};
use crate::ensemble::{Member, Role};
use crate::membership::Membership;

/// A peer heard from within this long counts toward the quorum a
/// reconfig's new configuration needs (ZooKeeper's NewConfigNoQuorum).
const PEER_LIVE_MS: i64 = 1_000;

/// The membership a server starts with: what `/zookeeper/config` in its
/// recovered tree says, else its configuration file.
pub(super) fn initial_membership(
    config: &EngineConfig,
    tree: &DataTree,
) -> Result<Membership, String> {
    let recorded = match tree.node(CONFIG) {
        Some(node) => {
            let text = String::from_utf8_lossy(node.data());
            Membership::parse(&text).map_err(|e| format!("{CONFIG} in the snapshot: {e}"))?
        }
        None => None,
    };
    Ok(recorded.unwrap_or_else(|| static_membership(config)))
}

/// The configuration file's ensemble, version 0.
fn static_membership(config: &EngineConfig) -> Membership {
    let member = |id: u64, role: Role| {
        let mut m = config
            .members
            .iter()
            .find(|m| m.id == id)
            .cloned()
            .unwrap_or_else(|| placeholder(id));
        m.role = role;
        m
    };
    let voters = config
        .voters
        .iter()
        .map(|&id| member(id, Role::Participant));
    let learners = config.learners.iter().map(|&id| member(id, Role::Observer));
    Membership::new(voters.chain(learners), 0)
}

/// A member without an address (simulations and unit tests have none).
fn placeholder(id: u64) -> Member {
    Member {
        id,
        host: "127.0.0.1".into(),
        quorum_port: 2888,
        election_port: 3888,
        role: Role::Participant,
        client: None,
    }
}

impl Engine {
    /// Started without other servers in its configuration file.
    pub(crate) fn standalone(&self) -> bool {
        self.config.standalone()
    }

    /// False once a reconfig removed this server: it serves nobody then.
    /// It learns that by applying the change, or, when it missed that
    /// entry (down or cut off while the change committed, after which the
    /// leader no longer talks to it), from a member refusing its connection.
    pub(crate) fn is_member(&self) -> bool {
        self.standalone()
            || (self
                .ensemble
                .membership
                .members
                .contains_key(&self.config.server_id)
                && self.ensemble.removed_at_version.is_none())
    }

    /// Hands the membership to the transport: whom to dial and accept,
    /// and the version it tells a server it refuses.
    /// While a joint configuration lasts, the servers leaving are still
    /// among them.
    pub(super) fn publish_members(&mut self) {
        let mut members: Vec<Member> = self.ensemble.membership.members.values().cloned().collect();
        if let Some(outgoing) = &self.ensemble.outgoing {
            let leaving = outgoing.members.values();
            members.extend(
                leaving
                    .filter(|m| !self.ensemble.membership.members.contains_key(&m.id))
                    .cloned(),
            );
        }
        for m in &self.ensemble.farewell {
            if !members.iter().any(|known| known.id == m.id) {
                members.push(m.clone());
            }
        }
        self.out.members = Some((self.ensemble.membership.version, members));
    }

    /// A member's applied membership leaves this server out. Only news
    /// when newer than the membership applied here: a member behind us
    /// (say, one that has not applied our addition yet) proves nothing.
    pub(super) fn on_refused_by_peer(&mut self, from: u64, membership_version: i64) {
        if membership_version <= self.ensemble.membership.version || !self.is_member() {
            return;
        }
        let me = self.config.server_id;
        log::warn!(
            "server {from} does not list this server in membership version \
             {membership_version:x} (this server applied {:x}): removed, or not added yet; \
             no clients are served until a membership listing this server applies",
            self.ensemble.membership.version
        );
        self.ensemble.removed_at_version = Some(membership_version);
        debug_assert!(!self.is_member(), "server {me} still counts as a member");
        self.drop_clients();
    }

    pub(crate) fn voter_count(&self) -> usize {
        self.ensemble.membership.voters().len()
    }

    pub(crate) fn membership(&self) -> &Membership {
        &self.ensemble.membership
    }

    /// Leader: turns a client's reconfig into its log entry; a refusal is
    /// committed as an error transaction, like any refused write.
    pub(super) fn propose_reconfig(&mut self, ctx: &PrepContext<'_>, request: &ReconfigRequest) {
        match self.decide_reconfig(ctx, request) {
            Ok((txn, changes)) => self.propose_membership_change(txn, changes),
            Err(code) => {
                self.stats.request_errors += 1;
                self.propose_error(ctx.session_id, ctx.cxid, ctx.zxid, code);
            }
        }
    }

    fn decide_reconfig(
        &mut self,
        ctx: &PrepContext<'_>,
        request: &ReconfigRequest,
    ) -> Result<(Txn, Vec<ConfChangeSingle>), ErrorCode> {
        // ZooKeeper: the super user, or WRITE on /zookeeper/config (which
        // by default only grants READ to anyone).
        let acl = self.cores[0]
            .preparer
            .current_acl(&self.cores[0].tree, CONFIG)
            .unwrap_or_default();
        let caller = Caller {
            ids: ctx.ids,
            is_super: ctx.is_super,
        };
        check_acl(&acl, perms::WRITE, caller)?;
        if self.ensemble.membership_pending.is_some()
            || self.cores[0].raft.raft.has_pending_conf()
            || self.in_joint_config()
        {
            return Err(ErrorCode::ReconfigInProgress);
        }
        let mut target = self.ensemble.membership.reconfigure(request).map_err(|r| {
            log::warn!("reconfig refused ({}): {}", r.code.as_i32(), r.reason);
            r.code
        })?;
        self.check_new_quorum(&target)?;
        target.version = ctx.zxid;
        let changes = self.ensemble.membership.changes_to(&target);
        let txn = self.cores[0].preparing(|preparer, tree| {
            preparer.prepare_set_config(tree, ctx, target.render().into_bytes())
        })?;
        log::info!(
            "reconfig: participants {:?} observers {:?} -> participants {:?} observers {:?} ({} raft change{}; version {:x})",
            self.ensemble.membership.voters(),
            self.ensemble.membership.learners(),
            target.voters(),
            target.learners(),
            changes.len(),
            if changes.len() == 1 { "" } else { "s" },
            target.version
        );
        self.ensemble.membership_pending = Some(target);
        Ok((txn, changes))
    }

    /// Raft runs a joint configuration: a change of several servers
    /// applied, and the entry that leaves it not yet. Stoa only enters
    /// joint configurations that raft leaves by itself (auto-leave), so
    /// that flag tells.
    pub(crate) fn in_joint_config(&self) -> bool {
        self.cores.joint_config(0)
    }

    /// ZooKeeper refuses a configuration whose quorum is not up and in
    /// touch with the leader: committing it would stop the ensemble. (The
    /// old participants' majority, needed too while a joint configuration
    /// lasts, is the one this leader leads.) A participant counts only when
    /// it also holds the log from where this leader's begins (a newcomer:
    /// when this leader's log still starts at the first entry): one that needs
    /// a snapshot first would leave the joint configuration only once its
    /// snapshot is built, sent and installed.
    fn check_new_quorum(&self, next: &Membership) -> Result<(), ErrorCode> {
        let voters = next.voters();
        // Where the log will start once compaction already asked for is
        // done: entries before it are going even though some are still here.
        let first_index = self.cores[0].raft.store().first_index_kept();
        let progress = self.cores[0].raft.raft.prs();
        let ready = voters
            .iter()
            .filter(|&&id| {
                let live = self
                    .ensemble
                    .peer_heard_ms
                    .get(&id)
                    .is_some_and(|&t| self.now_ms - t <= PEER_LIVE_MS);
                // A server not yet in raft's configuration starts from the
                // first entry, which it gets only while the log holds it.
                let has_log = progress
                    .get(id)
                    .map_or(first_index <= 1, |p| p.matched + 1 >= first_index);
                id == self.config.server_id || (live && has_log)
            })
            .count();
        if ready * 2 <= voters.len() {
            log::warn!(
                "reconfig refused: only {ready} of the new participants {voters:?} are in touch and hold the log"
            );
            return Err(ErrorCode::NewConfigNoQuorum);
        }
        Ok(())
    }

    /// Proposes a membership change: a raft configuration change carrying
    /// `txn` (joint when it changes several servers; raft-rs leaves that
    /// configuration by itself), or `txn` alone when only addresses change.
    fn propose_membership_change(&mut self, txn: Txn, changes: Vec<ConfChangeSingle>) {
        if changes.is_empty() {
            return self.propose(txn);
        }
        let mut context = Vec::new();
        txn.encode(&mut context);
        let cc = ConfChangeV2 {
            changes: changes.into(),
            context: context.into(),
            ..Default::default()
        };
        self.cores[0].raft.raft.abort_leader_transfer();
        if let Err(e) = self.cores[0].raft.propose_conf_change(vec![], cc) {
            panic!("raft refused a configuration change: {e}");
        }
        let raft = &self.cores[0].raft.raft;
        assert_eq!(
            raft.pending_conf_index,
            raft.raft_log.last_index(),
            "raft ignored a configuration change it was checked to accept"
        );
        // Its transaction travels in the change's context, without links.
        self.cores[0].chain_proposed = None;
        self.cores[0].proposed(txn);
    }

    /// Leader of an ensemble that has never recorded its membership: the
    /// configuration raft runs with goes into `/zookeeper/config`, so
    /// clients (`getConfig`) and servers that join later read it.
    pub(super) fn publish_membership(&mut self) {
        if self.standalone()
            || !self.is_leader()
            || !self.log_applied()
            || self.ensemble.membership_pending.is_some()
            || self.cores[0].transferring()
            || self.cores[0]
                .tree
                .node(CONFIG)
                .is_none_or(|n| !n.data().is_empty())
        {
            return;
        }
        let zxid = self.next_zxid();
        let mut next = self.ensemble.membership.clone();
        next.version = zxid;
        let ctx = self.internal_ctx(0, zxid);
        match self.cores[0].preparing(|preparer, tree| {
            preparer.prepare_set_config(tree, &ctx, next.render().into_bytes())
        }) {
            Ok(txn) => {
                self.ensemble.membership_pending = Some(next);
                self.propose(txn);
            }
            Err(code) => log::error!("cannot record the membership: {code:?}"),
        }
    }

    /// Applies a committed configuration change: raft's, then the tree's.
    /// An error means the log cannot be followed: the caller stops.
    pub(super) fn apply_conf_change_entry(&mut self, entry: &Entry) -> Result<(), String> {
        let cc: ConfChangeV2 = protobuf::Message::parse_from_bytes(&entry.data)
            .map_err(|e| format!("undecodable configuration change: {e}"))?;
        let before = self.peers_before_change();
        self.apply_conf_change(&cc)?;
        self.tell_removed_servers(before, entry);
        Ok(())
    }

    /// A removed server: the leader's last heartbeat may commit up to the
    /// entry that removed it only if this log holds that very entry (its
    /// index and term); raft would stop the server on a commit past its
    /// log. Every other message passes.
    pub(super) fn farewell_applies(&self, m: &raft::eraftpb::Message) -> bool {
        if m.get_msg_type() != raft::eraftpb::MessageType::MsgHeartbeat || m.log_term == 0 {
            return true;
        }
        let holds = self.cores[0].raft.raft.raft_log.term(m.commit).ok() == Some(m.log_term);
        if !holds {
            log::info!(
                "the leader's word that this server's removal committed at index {} came before the entry; ignored",
                m.commit
            );
        }
        holds
    }

    /// Leader: every peer in raft's configuration, with its address (from
    /// the membership or the outgoing one).
    fn peers_before_change(&self) -> Vec<Member> {
        if !self.is_leader() {
            return Vec::new();
        }
        let known = |id: u64| {
            let outgoing = self.ensemble.outgoing.as_ref();
            (self.ensemble.membership.members.get(&id))
                .or_else(|| outgoing.and_then(|o| o.members.get(&id)))
                .cloned()
        };
        let me = self.config.server_id;
        (self.cores[0].raft.raft.prs().iter())
            .filter(|(&id, _)| id != me)
            .filter_map(|(&id, _)| known(id))
            .collect()
    }

    /// Leader: raft stops talking to a server the moment a change takes it
    /// out of the configuration, so that server would never learn that its
    /// own removal committed, and a reconfig its client sent through it
    /// would go unanswered. As ZooKeeper's removed follower does, it
    /// should apply its removal and answer: one last heartbeat carries the
    /// commit to each removed server, naming the entry's term so that the
    /// server can check it holds that entry (`farewell_applies`; raft's own
    /// heartbeats never name one). The transport keeps the server as a
    /// peer until the next tick to deliver it, behind the entry's append.
    fn tell_removed_servers(&mut self, before: Vec<Member>, entry: &Entry) {
        let raft = &self.cores[0].raft.raft;
        let index = entry.index;
        for member in before {
            if raft.prs().get(member.id).is_some() {
                continue;
            }
            let mut farewell = raft::eraftpb::Message::default();
            farewell.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
            farewell.to = member.id;
            farewell.from = self.config.server_id;
            farewell.term = raft.term;
            farewell.log_term = entry.term;
            farewell.commit = index;
            log::info!(
                "telling server {} its removal committed at index {index}",
                member.id
            );
            self.out.messages.push((0, farewell));
            self.ensemble.farewell.push(member);
        }
        if !self.ensemble.farewell.is_empty() {
            self.publish_members();
        }
    }

    fn apply_conf_change(&mut self, cc: &ConfChangeV2) -> Result<(), String> {
        if cc.leave_joint() && !self.in_joint_config() {
            // Restarted from a snapshot installed during the joint
            // configuration: `/zookeeper/config` in it named the new one,
            // which this server runs already. Safe, since the snapshot
            // holds only committed entries: the joint configuration was
            // committed, so neither old majority alone can elect a leader
            // (raft's rule for moving on from it).
            log::info!("leaving a joint configuration this server already left at its restart");
            self.left_joint_config();
            return Ok(());
        }
        let conf_state = self.cores[0]
            .raft
            .apply_conf_change(cc)
            .map_err(|e| format!("configuration change does not apply: {e}"))?;
        let joint = !conf_state.voters_outgoing.is_empty();
        assert_eq!(
            joint, conf_state.auto_leave,
            "Stoa enters only joint configurations raft leaves by itself"
        );
        self.cores[0].raft.mut_store().set_conf_state(conf_state);
        self.step_down_if_removed();
        if joint {
            // The servers leaving still vote until the leave entry applies.
            self.ensemble.outgoing = Some(self.ensemble.membership.clone());
        }
        if !cc.context.is_empty() {
            let txn = Txn::decode(&cc.context)
                .map_err(|e| format!("undecodable transaction in the configuration change: {e}"))?;
            self.apply_txn(0, txn);
        }
        if cc.leave_joint() {
            self.left_joint_config();
        }
        Ok(())
    }

    fn left_joint_config(&mut self) {
        log::info!(
            "left the joint configuration: participants {:?}, observers {:?}",
            self.ensemble.membership.voters(),
            self.ensemble.membership.learners()
        );
        self.ensemble.outgoing = None;
        self.publish_members();
        self.hand_over_if_not_participant();
    }

    /// `/zookeeper/config` changed in the tree (applied, or installed with
    /// a snapshot): the membership follows it.
    pub(super) fn membership_applied(&mut self) {
        let recorded = self.cores[0]
            .tree
            .node(CONFIG)
            .map(|n| Membership::parse(&String::from_utf8_lossy(n.data())));
        let next = match recorded {
            Some(Ok(Some(m))) => m,
            Some(Ok(None)) | None => return,
            Some(Err(e)) => {
                self.out.fatal = Some(format!("{CONFIG} is unreadable: {e}"));
                return;
            }
        };
        if self
            .ensemble
            .membership_pending
            .as_ref()
            .is_some_and(|p| p.version <= next.version)
        {
            self.ensemble.membership_pending = None;
        }
        if next == self.ensemble.membership {
            return;
        }
        let me = self.config.server_id;
        let was_member = self.is_member();
        self.ensemble.membership = next;
        if self
            .ensemble
            .removed_at_version
            .is_some_and(|v| v <= self.ensemble.membership.version)
        {
            self.ensemble.removed_at_version = None;
        }
        self.publish_members();
        log::info!(
            "membership version {:x}: participants {:?}, observers {:?}",
            self.ensemble.membership.version,
            self.ensemble.membership.voters(),
            self.ensemble.membership.learners()
        );
        if was_member && !self.is_member() {
            log::warn!("server {me} was removed from the ensemble: it stops serving clients");
            self.drop_clients();
        }
        self.hand_over_if_not_participant();
    }

    /// raft-rs keeps a removed or demoted leader leading; it hands over to
    /// the participant most up to date instead (again each tick, since raft
    /// abandons a transfer that does not complete within an election
    /// timeout).
    pub(super) fn hand_over_if_not_participant(&mut self) {
        if self.is_leader()
            && !self.standalone()
            && self.ensemble.membership.role_of(self.config.server_id) != Some(Role::Participant)
            // It leads on until the joint configuration is left.
            && !self.in_joint_config()
            && !self.cores.transferring(0)
        {
            self.transfer_leadership();
        }
    }

    /// A leader the change removed: raft-rs cannot go on leading without
    /// its own progress entry, so it steps down at once and tells the most
    /// up-to-date participant to campaign now rather than after an election
    /// timeout. A candidate the change removed ends its campaign.
    fn step_down_if_removed(&mut self) {
        let me = self.config.server_id;
        let raft = &mut self.cores[0].raft.raft;
        if matches!(
            raft.state,
            raft::StateRole::Candidate | raft::StateRole::PreCandidate
        ) && !raft.promotable()
        {
            // A candidate that applies a change leaving it out of the
            // participants (one committed before its restart, say) would
            // still count the votes it asked for and could win a
            // configuration it is not in: raft-rs then panics looking up
            // its own progress (ensemble simulator, seed 2813).
            log::info!("server {me} is no longer a participant: ending its campaign");
            let term = raft.term;
            raft.become_follower(term, raft::INVALID_ID);
            return;
        }
        if !self.is_leader() || self.cores[0].raft.raft.prs().get(me).is_some() {
            return;
        }
        let successor = self.most_up_to_date_voter();
        let term = self.cores[0].raft.raft.term;
        log::info!("server {me} left the ensemble: stepping down as leader");
        self.cores[0]
            .raft
            .raft
            .become_follower(term, raft::INVALID_ID);
        if let Some(to) = successor {
            self.cores[0].raft.raft.send_timeout_now(to);
        }
    }

    /// The participant (other than this server) whose log matches the
    /// leader's furthest. Raft's own configuration decides who is one: a
    /// change applies there just before its transaction reaches the tree.
    fn most_up_to_date_voter(&self) -> Option<u64> {
        let me = self.config.server_id;
        let voters = self.cores[0].raft.raft.prs().conf().to_conf_state().voters;
        self.cores[0]
            .raft
            .raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != me && voters.contains(id))
            .max_by_key(|(id, p)| (p.matched, std::cmp::Reverse(**id)))
            .map(|(id, _)| *id)
    }

    /// Leader: asks the most up-to-date participant to take over (rolling
    /// restarts, removal of the leader). False when there is none.
    pub fn transfer_leadership(&mut self) -> bool {
        if !self.is_leader() {
            return false;
        }
        let me = self.config.server_id;
        let Some(to) = self.most_up_to_date_voter() else {
            return false;
        };
        log::info!("transferring leadership from server {me} to server {to}");
        // Every group at once: the successor leads them all without
        // waiting for the others to come to it.
        for core in &mut self.cores {
            core.raft.transfer_leader(to);
        }
        true
    }

    /// A leader transfer is under way in some group this server still
    /// leads (raft-rs drops it after an election timeout if the successor
    /// does not take over).
    pub fn transferring_leadership(&self) -> bool {
        (self.cores.iter()).any(|core| core.is_leader() && core.transferring())
    }

    /// This server leads some partition's group (a stopping leader waits
    /// until it leads none).
    pub fn leads_any_group(&self) -> bool {
        self.cores.iter().any(|core| core.is_leader())
    }

    /// Notes that `from` is alive (for the reconfig quorum check).
    pub(super) fn heard_from(&mut self, from: u64) {
        self.ensemble.heard_from(from, self.now_ms);
    }
}
