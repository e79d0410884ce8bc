//! Noticing a dead leader from the transport instead of raft's election
//! timeout alone (issue 27).
//!
//! When a leader's process dies its kernel closes its connections at once,
//! and every follower reads the end of the stream on the connection the
//! leader sends it appends on (`Input::PeerLost`). Raft alone would wait a
//! randomized 10-20 ticks (0.5-1 s) of silence, and a follower within its
//! lease (check-quorum) would still refuse to vote for the first one that
//! campaigns. A lost connection is only a hint: the leader may be alive
//! and redialing. So the follower waits `CONFIRM_TICKS` for the leader to
//! be heard again (it sends a heartbeat every tick); if it stays silent,
//! the follower gives up its lease and campaigns after a short stagger by
//! rank, so that the survivors do not split the vote.
//!
//! Safety stays raft's: pre-vote and the vote itself still need a quorum,
//! and a follower that has not lost the leader refuses both while in its
//! lease. A false alarm costs a pre-vote round that fails.

use super::{election_timeout_bounds, Engine};

/// Ticks of silence after the lost connection before the leader counts as
/// gone: a live leader redials and sends a heartbeat every tick.
const CONFIRM_TICKS: u32 = 2;

/// What a follower knows about a leader whose connection closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaderLoss {
    pub leader: u64,
    /// Ticks since the connection closed with no word from the leader.
    pub silent_ticks: u32,
}

impl Engine {
    /// The connection peer `from` sends on closed.
    pub(super) fn on_peer_lost(&mut self, from: u64) {
        if from == 0 || self.is_leader() || from != self.leader_id() {
            return;
        }
        log::info!("the connection from leader {from} closed; waiting for a word from it");
        self.ensemble.leader_loss = Some(LeaderLoss {
            leader: from,
            silent_ticks: 0,
        });
    }

    /// A raft message arrived: a word from the suspected leader clears the
    /// suspicion; a pre-vote from a peer while the leader is silent is
    /// more evidence, so this server gives up its lease and may grant it.
    pub(super) fn leader_loss_on_raft(&mut self, message: &raft::eraftpb::Message) {
        let Some(loss) = self.ensemble.leader_loss else {
            return;
        };
        if message.from == loss.leader {
            self.ensemble.leader_loss = None;
        } else if message.get_msg_type() == raft::eraftpb::MessageType::MsgRequestPreVote {
            self.give_up_lease(0);
        }
    }

    /// Per tick, before raft's own tick.
    pub(super) fn leader_loss_tick(&mut self) {
        let is_leader = self.is_leader();
        let Some(loss) = self.ensemble.leader_loss.as_mut() else {
            return;
        };
        if self.cores.leader_id(0) != loss.leader || is_leader {
            // Someone else leads now (or nobody, and raft campaigns itself).
            self.ensemble.leader_loss = None;
            return;
        }
        loss.silent_ticks += 1;
        if loss.silent_ticks < CONFIRM_TICKS {
            return;
        }
        let leader = loss.leader;
        self.ensemble.leader_loss = None;
        self.stats.leader_losses_noticed += 1;
        let stagger = 1 + 2 * self.campaign_rank(leader);
        log::info!(
            "leader {leader} silent since its connection closed: campaigning in {stagger} tick(s)"
        );
        self.give_up_lease(stagger);
    }

    /// Leaves raft's lease (so this server grants votes) and arms its
    /// election timer to fire within `ticks` more ticks (0: as raft
    /// would).
    fn give_up_lease(&mut self, ticks: u32) {
        let (min, max) = election_timeout_bounds(&self.config);
        // Every group: the leader was the same server in all of them.
        for core in &mut self.cores {
            let raft = &mut core.raft.raft;
            let timeout = raft.election_timeout();
            let mut elapsed = raft.election_elapsed.max(timeout);
            if ticks > 0 {
                // Raft campaigns once elapsed reaches the randomized timeout:
                // `ticks` from now where its bounds allow, sooner otherwise,
                // and never with elapsed below the plain timeout, which is
                // what the lease checks.
                let target = (timeout + ticks as usize).clamp(min, max - 1);
                raft.set_randomized_election_timeout(target);
                elapsed = elapsed.max(target.saturating_sub(ticks as usize));
            }
            raft.election_elapsed = elapsed;
        }
    }

    /// This server's place among the voters that may replace `leader`
    /// (by id): the first campaigns first.
    fn campaign_rank(&self, leader: u64) -> u32 {
        let me = self.config.server_id;
        let ahead = self
            .membership()
            .voters()
            .into_iter()
            .filter(|&id| id != leader && id < me)
            .count();
        u32::try_from(ahead).unwrap_or(u32::MAX / 4)
    }
}
