//! A `Transport` that keeps what a flush sends, for whoever drives the
//! node by hand (the simulators, tests): sends in order, closes, and peer
//! messages with their receiver.

use crate::engine::forward::EngineMessage;
use crate::ensemble::Member;
use crate::watch::ConnId;

use super::Transport;

/// A peer message as the simulated network carries it.
pub enum PeerMessage {
    /// A message of one partition's raft group.
    Raft(u32, raft::eraftpb::Message),
    Engine(EngineMessage),
}

#[derive(Default)]
pub struct Outbox {
    pub sends: Vec<(ConnId, Vec<u8>)>,
    /// Every close counts as open: the engine hears each one (closing an
    /// unknown connection does nothing there).
    pub closes: Vec<ConnId>,
    /// (receiver, message) in the order sent.
    pub messages: Vec<(u64, PeerMessage)>,
    pub members: Option<(i64, Vec<Member>)>,
}

impl Transport for Outbox {
    fn send(&mut self, conn: ConnId, bytes: Vec<u8>) {
        self.sends.push((conn, bytes));
    }

    fn close(&mut self, conn: ConnId) -> bool {
        self.closes.push(conn);
        true
    }

    fn send_raft(&mut self, partition: u32, message: raft::eraftpb::Message) {
        (self.messages).push((message.to, PeerMessage::Raft(partition, message)));
    }

    fn send_engine(&mut self, to: u64, message: EngineMessage) {
        self.messages.push((to, PeerMessage::Engine(message)));
    }

    fn set_members(&mut self, version: i64, members: &[Member]) {
        self.members = Some((version, members.to_vec()));
    }
}
