//! This server's view of the ensemble: the membership it applied (and the
//! one a reconfig is moving to), the leader it knows of, and when it last
//! heard from each peer. One per server, whatever the number of
//! partitions; raft's own configuration lives in each partition's group
//! and follows the membership applied here.

use rustc_hash::FxHashMap;

use crate::membership::Membership;

pub(crate) struct EnsembleView {
    /// The membership `/zookeeper/config` holds as applied here.
    pub membership: Membership,
    /// Leader: a membership change proposed and not yet applied.
    pub membership_pending: Option<Membership>,
    /// A member refused this server's connection: its applied membership,
    /// at this version, leaves this server out. Set only when newer than
    /// what this server applied (it missed its own removal); any membership
    /// it applies at this version or later supersedes it.
    pub removed_at_version: Option<i64>,
    /// While raft runs the joint configuration of a reconfig of several
    /// servers: the membership before it, whose servers still vote (and
    /// must be talked to) until the entry leaving it applies.
    pub outgoing: Option<Membership>,
    /// Leader: servers the change just applied took out of raft's
    /// configuration, kept among the transport's peers until the next tick
    /// so that the commit of their own removal reaches them
    /// (`Engine::tell_removed_servers`).
    pub farewell: Vec<crate::ensemble::Member>,
    /// When each peer was last heard from (a reconfig needs its new
    /// quorum in touch; raft-rs's own activity flags reset periodically).
    pub peer_heard_ms: FxHashMap<u64, i64>,
    /// The leader as of the last raft step (0: none).
    pub known_leader: u64,
    /// Each group's raft term when that leader was known.
    pub known_leader_terms: Vec<u64>,
    /// Each group's ticks during which this server led group 0 but not it
    /// (`Engine::align_groups`).
    pub unaligned_ticks: Vec<u32>,
    /// Follower: the leader's connection closed and it has been silent
    /// since (`engine::leader_loss`).
    pub leader_loss: Option<super::leader_loss::LeaderLoss>,
    /// A peer sent a message for a partition this server does not run
    /// (logged once).
    pub foreign_partition_seen: bool,
}

impl EnsembleView {
    pub fn new(membership: Membership, groups: usize) -> Self {
        EnsembleView {
            membership,
            membership_pending: None,
            removed_at_version: None,
            outgoing: None,
            farewell: Vec::new(),
            peer_heard_ms: FxHashMap::default(),
            known_leader: 0,
            known_leader_terms: Vec::new(),
            unaligned_ticks: vec![0; groups],
            leader_loss: None,
            foreign_partition_seen: false,
        }
    }

    pub fn heard_from(&mut self, peer: u64, now_ms: i64) {
        self.peer_heard_ms.insert(peer, now_ms);
    }
}
