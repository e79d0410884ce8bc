//! The partition core: what one partition owns. Its tree, the preparer
//! that validates writes against it, its raft group with the proposals in
//! flight and the speculative tree over them, the watches set on its tree,
//! its snapshots' bookkeeping and its container/TTL reaper's clock. (The
//! leader's admission state, one per server, is `LeaderHolds`.)
//!
//! With several partitions a server holds one of these per partition, each
//! owned by its partition's thread; the session gate and the ensemble view
//! stay one per server. The engine's methods still reach into the core's
//! fields directly (one partition, one thread); what the core can do on its
//! own is here.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use raft::RawNode;
use stoa_tree::{Applied, ChainLink, DataTree, Preparer, Txn, TxnOp, UNKNOWN_LINK};

use crate::raft_log::RaftLog;
use crate::watch::WatchTable;

pub(crate) struct PartitionCore {
    pub tree: DataTree,
    pub preparer: Preparer,
    pub raft: RawNode<RaftLog>,
    pub watches: WatchTable,
    /// Proposed and not yet applied, in zxid order.
    pub in_flight: VecDeque<Txn>,
    /// `tree` + `in_flight`, maintained only while extensions read it.
    pub speculative: Option<DataTree>,
    /// Raft messages that may leave only once their ready is durable.
    pub held_messages: VecDeque<(u64, Vec<raft::eraftpb::Message>)>,
    /// The ready that last changed raft's term or vote, until it is
    /// durable: nothing may speak for that term before.
    pub term_or_vote_unsynced: Option<u64>,
    /// Raft index of the last applied entry, and its term.
    pub applied_index: u64,
    pub applied_term: u64,
    /// A whole server snapshot installed through another group covered
    /// this group's entries up to here before the group committed them:
    /// they are skipped as it does (`engine/server_snapshots.rs`).
    pub skipped_through: u64,
    pub snapshot_index: u64,
    /// Bytes of the transactions applied since the snapshot at
    /// `snapshot_index` (see `maybe_snapshot`).
    pub log_bytes_since_snapshot: u64,
    /// A snapshot for lagging peers is being serialized.
    /// Holds the configuration as of the snapshot's index, which raft
    /// needs in the snapshot's metadata.
    pub shipping: Option<raft::eraftpb::ConfState>,
    /// The ready that installed a leader's snapshot, until it is durable.
    /// raft-rs counts the snapshot as stored but not applied meanwhile, and
    /// an election in that window would read entries the snapshot replaced:
    /// raft is not ticked until then.
    pub installing: Option<u64>,
    /// Leader: ticks each peer has been waiting on a snapshot sent to it.
    pub snapshot_wait_ticks: FxHashMap<u64, u32>,
    /// Ticks the snapshot for lagging peers has gone unused.
    pub shippable_idle_ticks: u32,
    /// The zxid and time (ms) of the newest snapshot taken, or the one
    /// recovered from (`last_snapshot` of the AdminServer).
    pub last_snapshot: Option<(i64, i64)>,
    /// A server of several partitions logs each transaction with its chain
    /// links (`engine/chains.rs`).
    pub chained: bool,
    /// Leader: the zxid of this partition's last item proposed since its
    /// seal; None before the first.
    pub chain_proposed: Option<i64>,
}

impl PartitionCore {
    pub fn new(tree: DataTree, raft: RawNode<RaftLog>, snapshot: (u64, u64), now_ms: i64) -> Self {
        let (snapshot_index, snapshot_term) = snapshot;
        let last_snapshot = (snapshot_index > 0).then(|| (tree.last_zxid(), now_ms));
        PartitionCore {
            tree,
            preparer: Preparer::new(),
            raft,
            watches: WatchTable::default(),
            in_flight: VecDeque::new(),
            speculative: None,
            held_messages: VecDeque::new(),
            term_or_vote_unsynced: None,
            applied_index: snapshot_index,
            skipped_through: 0,
            applied_term: snapshot_term,
            snapshot_index,
            log_bytes_since_snapshot: 0,
            shipping: None,
            installing: None,
            snapshot_wait_ticks: FxHashMap::default(),
            shippable_idle_ticks: 0,
            last_snapshot,
            chained: false,
            chain_proposed: None,
        }
    }

    /// The leader of this partition's raft group as of its last step (0: none).
    pub fn leader_id(&self) -> u64 {
        self.raft.raft.leader_id
    }

    pub fn is_leader(&self) -> bool {
        self.raft.raft.state == raft::StateRole::Leader
    }

    /// Entries applied since the snapshot at `snapshot_index`.
    pub fn applied_since_snapshot(&self) -> u64 {
        self.applied_index - self.snapshot_index
    }

    /// It applied an entry of its current term (`Engine::log_applied`).
    pub fn log_applied(&self) -> bool {
        self.applied_term == self.term()
    }

    /// Its group is handing its leadership over.
    pub fn transferring(&self) -> bool {
        self.raft.raft.lead_transferee.is_some()
    }

    /// This group's current raft term (the server's epoch is the highest
    /// over its groups: `Engine::epoch`).
    pub fn term(&self) -> u64 {
        self.raft.raft.term
    }

    /// Steps a raft message from a peer into this group, at home or on
    /// the partition's thread (`step_kept`).
    pub fn step(&mut self, message: raft::eraftpb::Message) {
        if let Err(e) = self.raft.step(message) {
            // Stale or misdirected messages are normal in raft.
            log::debug!("raft message dropped: {e}");
        }
    }

    /// Advances this group's raft clock by a tick, at home or on the
    /// partition's thread (`step_kept`), unless it waits for a snapshot
    /// from the leader to be durable (`installing`).
    pub fn tick(&mut self) {
        if self.installing.is_none() {
            self.raft.tick();
        }
    }

    /// Proposes `txn`, which touches this partition alone, to its group
    /// (`partition`, for the message should raft refuse: only a server
    /// that does not lead does).
    #[inline]
    pub fn propose_txn(&mut self, partition: usize, txn: Txn) {
        if !self.chained {
            let mut data = Vec::with_capacity(txn.encoded_len());
            txn.encode(&mut data);
            debug_assert_eq!(data.len(), txn.encoded_len());
            return self.propose_data(partition, txn, data);
        }
        let link = (partition as u32, self.take_link(txn.header.zxid));
        self.propose_linked(partition, txn, &[link]);
    }

    /// Proposes a transaction with its chain links on every partition it
    /// touches (`engine/chains.rs`).
    pub fn propose_linked(&mut self, partition: usize, txn: Txn, links: &[ChainLink]) {
        debug_assert!(self.chained);
        let mut data = Vec::with_capacity(txn.encoded_len_chained(links.len()));
        txn.encode_chained(links, &mut data);
        debug_assert_eq!(data.len(), txn.encoded_len_chained(links.len()));
        self.propose_data(partition, txn, data)
    }

    /// This partition's link for the item `zxid` the leader proposes: the
    /// zxid of its item before, if it knows it.
    pub fn take_link(&mut self, zxid: i64) -> i64 {
        let previous = self.chain_proposed.replace(zxid);
        debug_assert!(
            previous.is_none_or(|p| p < zxid),
            "item {zxid:#x} proposed after {previous:x?}"
        );
        previous.unwrap_or(UNKNOWN_LINK)
    }

    #[inline]
    fn propose_data(&mut self, partition: usize, txn: Txn, data: Vec<u8>) {
        if let Some(to) = self.raft.raft.lead_transferee {
            // raft-rs drops proposals while it hands leadership over; client
            // writes are held meanwhile, and what cannot wait (a session's
            // creation or expiry) keeps this leader.
            log::info!("leader transfer to server {to} abandoned: a transaction must go out");
            self.raft.raft.abort_leader_transfer();
        }
        if let Err(e) = self.raft.propose(vec![], data) {
            // Only a non-leader refuses; standalone is always leader once caught up.
            panic!("raft refused a proposal of partition {partition}: {e}");
        }
        self.proposed(txn);
    }

    /// Bookkeeping for a transaction raft accepted.
    pub fn proposed(&mut self, txn: Txn) {
        // A transaction of parts reaches each speculative tree part by
        // part (`Engine::propose_on`).
        // A group move reaches them at apply, which drops them.
        let partial = matches!(txn.op, TxnOp::Parts { .. } | TxnOp::MoveGroups { .. });
        if let (Some(speculative), false) = (&mut self.speculative, partial) {
            speculative.apply(&txn);
        }
        self.in_flight.push_back(txn);
    }

    /// The leader keeps every txn it proposed until it applies: a committed
    /// entry that is the oldest of them is taken from there instead of
    /// decoded (zxids are unique: the epoch is in their high bits).
    pub fn own_proposal(&mut self, data: &[u8]) -> Option<Txn> {
        let zxid = Txn::zxid_of(data)?;
        if self.in_flight.front()?.header.zxid != zxid {
            return None;
        }
        let txn = self.in_flight.pop_front()?;
        debug_assert_eq!(Txn::decode(data).as_ref(), Ok(&txn));
        Some(txn)
    }

    /// The bookkeeping of a transaction entry taken from the order (applied
    /// or voided): the next index, its term, the log it adds to.
    pub fn take_entry(&mut self, entry: &raft::eraftpb::Entry) {
        assert!(
            entry.index == self.applied_index + 1,
            "taking {} after {}",
            entry.index,
            self.applied_index
        );
        self.applied_index = entry.index;
        self.applied_term = entry.term;
        self.log_bytes_since_snapshot += entry.data.len() as u64;
    }

    /// Applies a committed transaction to the tree.
    pub fn apply<'t>(&mut self, txn: &'t Txn) -> Applied<'t> {
        self.apply_as(txn, false)
    }

    /// Applies this partition's part of a committed transaction of parts
    /// (a nested group root's node may need stubs: `DataTree::apply_part`).
    pub fn apply_part<'t>(&mut self, txn: &'t Txn) -> Applied<'t> {
        self.apply_as(txn, true)
    }

    fn apply_as<'t>(&mut self, txn: &'t Txn, part: bool) -> Applied<'t> {
        let zxid = txn.header.zxid;
        let applied = if part {
            self.tree.apply_part(txn)
        } else {
            self.tree.apply(txn)
        };
        self.preparer.applied(zxid);
        // A transaction the leader still holds (a reconfig's, applied
        // through `apply_conf_change_entry`) leaves the in-flight queue here.
        if self
            .in_flight
            .front()
            .is_some_and(|t| t.header.zxid == zxid)
        {
            self.in_flight.pop_front();
        }
        applied
    }

    /// The state extensions see: the speculative tree while it is kept
    /// (the leader's applied plus proposed), else the applied tree.
    pub fn current_tree(&self) -> &DataTree {
        self.speculative.as_ref().unwrap_or(&self.tree)
    }

    /// Whether raft's configuration is joint (a reconfig of several
    /// servers in progress).
    pub fn in_joint_config(&self) -> bool {
        *self.raft.raft.prs().conf().auto_leave()
    }
}

impl PartitionCore {
    /// Runs `prepare` with the preparer and the applied tree it validates
    /// against, borrowed together.
    pub fn preparing<R>(&mut self, prepare: impl FnOnce(&mut Preparer, &DataTree) -> R) -> R {
        prepare(&mut self.preparer, &self.tree)
    }
}
