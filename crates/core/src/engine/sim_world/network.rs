//! Peer links between simulated servers: messages in order per link (as
//! TCP keeps them), lost to a partition, to a server that is down, or at
//! random when the rig says so.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::engine::Input;
use crate::node::outbox::PeerMessage;

#[derive(Default)]
pub(crate) struct SimNetwork {
    /// Per link (from, to): messages in order.
    links: BTreeMap<(u64, u64), VecDeque<PeerMessage>>,
    /// Servers cut off from the others; among themselves they still talk
    /// (a minority partition).
    isolated: BTreeSet<u64>,
}

impl SimNetwork {
    /// A message between these two servers is lost to the partition.
    pub fn cut(&self, a: u64, b: u64) -> bool {
        self.isolated.contains(&a) != self.isolated.contains(&b)
    }

    pub fn is_isolated(&self, id: u64) -> bool {
        self.isolated.contains(&id)
    }

    pub fn isolated_count(&self) -> usize {
        self.isolated.len()
    }

    /// Queues a message, or loses it: cut off, or to a server that is
    /// down (its connections are refused).
    pub fn post(&mut self, from: u64, to: u64, message: PeerMessage, to_is_up: bool) {
        if to_is_up && !self.cut(from, to) {
            self.links.entry((from, to)).or_default().push_back(message);
        }
    }

    /// Cuts `id` off with the servers already isolated; what is in flight
    /// across the cut is lost.
    pub fn isolate(&mut self, id: u64) {
        self.isolated.insert(id);
        let isolated = &self.isolated;
        self.links
            .retain(|(from, to), _| isolated.contains(from) == isolated.contains(to));
    }

    pub fn heal(&mut self) {
        self.isolated.clear();
    }

    /// A server stopped: its connections, and what was in them, are gone.
    pub fn drop_server(&mut self, id: u64) {
        self.links.retain(|(from, to), _| *from != id && *to != id);
    }

    /// The links with a message waiting (into `to` only, if given).
    pub fn busy_links(&self, to: Option<u64>) -> Vec<(u64, u64)> {
        self.links
            .iter()
            .filter(|((_, t), q)| to.is_none_or(|to| to == *t) && !q.is_empty())
            .map(|(k, _)| *k)
            .collect()
    }

    /// No message is waiting anywhere.
    pub fn is_quiet(&self) -> bool {
        self.links.values().all(VecDeque::is_empty)
    }

    /// The oldest message on a link.
    pub fn take(&mut self, link: (u64, u64)) -> Option<PeerMessage> {
        self.links.get_mut(&link)?.pop_front()
    }
}

/// What the receiving engine is handed for a message from `from`.
pub(crate) fn input_of(from: u64, message: PeerMessage) -> Input {
    match message {
        PeerMessage::Raft(partition, message) => Input::Raft { partition, message },
        PeerMessage::Engine(message) => Input::Peer { from, message },
    }
}
