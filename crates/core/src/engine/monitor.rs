//! The engine's side of what the server reports: the words that change
//! counters, and the values (`crate::monitor`) the others are printed from.

use super::Engine;
use crate::fourlw;
use crate::monitor::{
    ConnectionReport, Monitor, SessionReport, WatchReport, SYNCED_LAG_ENTRIES_MAX,
};
use crate::stats::Stats;
use crate::watch::ConnId;

impl Engine {
    /// The answer to a four-letter word asked on connection `asking`.
    pub(super) fn four_letter(&mut self, word: &str, asking: ConnId) -> String {
        if !self.config.four_letter_allowed(word) {
            return fourlw::not_allowed(word);
        }
        match word {
            "crst" => {
                self.stats.reset_latency_only();
                "Connection stats reset.\n".to_string()
            }
            "srst" => {
                self.stats.reset();
                self.gate.counters = Default::default();
                "Server stats reset.\n".to_string()
            }
            "wchs" | "wchc" | "wchp" => fourlw::watch_answer(word, &self.watch_report()),
            "dump" => fourlw::dump(&self.session_report()),
            // Replicas compare it: with several partitions, one line per
            // partition's tree.
            "hash" => (self.cores.iter())
                .map(|core| format!("{:x}\n", core.tree.digest()))
                .collect(),
            _ => {
                let mut monitor = self.monitor();
                // ZooKeeper counts the word's own packet on the asking connection.
                for c in monitor.connections.iter_mut().filter(|c| c.conn == asking) {
                    c.packets_received += 1;
                }
                fourlw::answer(word, &monitor)
            }
        }
    }

    /// The server's state and counters now.
    pub fn monitor(&self) -> Monitor {
        // Before anything here recalls a core: those are the host's.
        let away = self.cores.counts();
        let fast_sessions = self.fast.count();
        let served = self.served_totals();
        let mut configuration = self.config.conf_text.clone();
        if !self.standalone() {
            configuration.push_str(&self.membership().render());
            configuration.push('\n');
        }
        Monitor {
            mode: self.mode(),
            serving: self.is_member() && (self.leader_id() != 0 || self.read_only()),
            partitions: self.config.partitions,
            partition_reports: (self.cores.iter())
                .map(|core| crate::monitor::PartitionReport {
                    term: core.term(),
                    leader: core.leader_id(),
                    applied_index: core.applied_index,
                    last_index: core.raft.store().last_index(),
                    last_zxid: core.tree.last_zxid(),
                    znodes: core.tree.node_count(),
                })
                .collect(),
            read_only: self.read_only(),
            now_ms: self.now_ms,
            stats: Stats {
                packets_received: self.gate.counters.packets_received,
                packets_sent: self.gate.counters.packets_sent,
                notifications_sent: self.gate.counters.notifications_sent,
                cores_sent: away.sent,
                core_recalls: away.recalled,
                core_recalls_waited: away.waited,
                core_jobs_followed: away.followed,
                core_jobs_followed_late: away.followed_late,
                fast_read_sessions: fast_sessions.0 as u64,
                fast_watch_sessions: fast_sessions.1 as u64,
                ..self.stats.clone()
            },
            connections: self
                .gate
                .conns
                .iter()
                .map(|(&conn, c)| ConnectionReport {
                    conn,
                    peer: c.peer,
                    established_ms: c.established_ms,
                    packets_received: c.packets_received,
                    packets_sent: c.packets_sent,
                    session: c.session.map(|sid| {
                        let timeout = self.gate.sessions.get(&sid).map_or(0, |s| s.timeout_ms);
                        (sid, timeout)
                    }),
                })
                .collect(),
            outstanding: self.outstanding(),
            last_zxid: self.applied_zxid(),
            node_count: served.nodes,
            approximate_data_size: served.data_bytes,
            ephemerals: served.ephemerals,
            watches: self
                .cores
                .iter()
                .map(|core| core.watches.watch_count())
                .sum(),
            sessions: self.gate.sessions.len(),
            quorum_size: self.voter_count(),
            followers: self.follower_lag(SYNCED_LAG_ENTRIES_MAX),
            extensions: self.extensions.metrics(),
            configuration,
            host_name: self.config.host_name.clone(),
            working_dir: self.config.working_dir.clone(),
        }
    }

    fn session_of(&self, conn: ConnId) -> i64 {
        self.gate
            .conns
            .get(&conn)
            .and_then(|c| c.session)
            .unwrap_or(0)
    }

    pub(super) fn watch_report(&self) -> WatchReport {
        // Each partition keeps the watches on its own paths.
        let mut conns: Vec<ConnId> = (self.cores.iter())
            .flat_map(|core| core.watches.conns())
            .collect();
        conns.sort_unstable();
        conns.dedup();
        WatchReport {
            connections: conns.len(),
            paths: self
                .cores
                .iter()
                .map(|core| core.watches.path_count())
                .sum(),
            watches: self
                .cores
                .iter()
                .map(|core| core.watches.watch_count())
                .sum(),
            by_session: (conns.iter())
                .map(|&conn| {
                    let paths = (self.cores.iter())
                        .flat_map(|core| core.watches.of_conn(conn).map(|(_, path)| path.clone()))
                        .collect();
                    (self.session_of(conn), paths)
                })
                .collect(),
            by_path: (self.cores.iter())
                .flat_map(|core| core.watches.by_path())
                .map(|(path, conns)| {
                    let sessions = conns.into_iter().map(|c| self.session_of(c)).collect();
                    (path.to_string(), sessions)
                })
                .collect(),
        }
    }

    /// The znodes, data bytes and ephemerals a client can see, over every
    /// partition: each tree's own `/` and `/zookeeper` are served from
    /// partition 0 only, and a group root's link is its node's copy
    /// (docs/partitions.md, "Routing by placement").
    fn served_totals(&self) -> ServedTotals {
        let mut totals = ServedTotals::default();
        let empty = stoa_tree::DataTree::new();
        for (partition, core) in self.cores.iter().enumerate() {
            totals.nodes += core.tree.node_count();
            totals.data_bytes += core.tree.approximate_data_size();
            totals.ephemerals += core.tree.ephemeral_count();
            // Stubs above nested group roots are no client's nodes.
            totals.nodes -= core.tree.stub_count();
            totals.data_bytes -= core.tree.stub_bytes();
            if partition > 0 {
                totals.nodes -= empty.node_count();
                totals.data_bytes -= empty.approximate_data_size();
            }
        }
        // The placement is the server's, not a client's node.
        let placement = (self.cores.get(super::group_moves::PLACEMENT_PARTITION))
            .and_then(|core| core.tree.node(stoa_tree::PARTITIONS));
        if let Some(node) = placement {
            totals.nodes -= 1;
            totals.data_bytes -= (stoa_tree::PARTITIONS.len() + node.data().len()) as u64;
        }
        for (root, _) in self.placement.groups() {
            let Some((_, linked_on)) = self.spans_for_root(root) else {
                continue;
            };
            if let Some(link) = self.cores[linked_on].tree.node(root) {
                totals.nodes -= 1;
                totals.data_bytes -= (root.len() + link.data().len()) as u64;
                totals.ephemerals -= usize::from(link.stat().ephemeral_owner != 0);
            }
        }
        totals
    }

    pub(super) fn session_report(&self) -> SessionReport {
        SessionReport {
            sessions: self
                .gate
                .sessions
                .iter()
                .map(|(&sid, s)| (sid, (s.deadline_ms - self.now_ms).max(0)))
                .collect(),
            ephemerals: self
                .gate
                .sessions
                .keys()
                .map(|&sid| {
                    // Each partition's own, not the links of group roots.
                    let paths = (self.cores.iter().enumerate())
                        .flat_map(|(p, core)| {
                            (core.tree.ephemerals(sid))
                                .filter(move |path| self.partition_of(path) == p)
                                .map(String::from)
                        })
                        .collect();
                    (sid, paths)
                })
                .filter(|(_, paths): &(i64, Vec<String>)| !paths.is_empty())
                .collect(),
        }
    }
}

#[derive(Default)]
struct ServedTotals {
    nodes: usize,
    data_bytes: u64,
    ephemerals: usize,
}
