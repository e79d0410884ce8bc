//! What the server reports about itself, as values read from the engine at
//! one moment: four-letter words (`fourlw`) and Prometheus metrics format
//! these and never reach into the engine themselves.

use std::net::SocketAddr;

use crate::stats::Stats;
use crate::watch::ConnId;

/// A follower this close to the leader's log counts as synced in `mntr`.
pub const SYNCED_LAG_ENTRIES_MAX: u64 = 100;

/// The server's state and counters: everything `srvr`, `stat`, `mntr`,
/// `cons`, `conf`, `envi` and `isro` print.
#[derive(Debug, Clone)]
pub struct Monitor {
    /// ZooKeeper's name for the role: standalone, leader, follower,
    /// observer, read-only.
    pub mode: &'static str,
    /// Part of a working ensemble (a leader known, or serving read-only).
    pub serving: bool,
    pub read_only: bool,
    pub now_ms: i64,
    pub stats: Stats,
    pub connections: Vec<ConnectionReport>,
    /// Requests received and not yet answered, over all sessions.
    pub outstanding: usize,
    pub last_zxid: i64,
    /// Nodes in the tree (ZooKeeper counts its root twice; `fourlw` adds it).
    pub node_count: usize,
    pub approximate_data_size: u64,
    pub ephemerals: usize,
    pub watches: usize,
    pub sessions: usize,
    pub quorum_size: usize,
    /// Partitions (raft groups) this server runs.
    pub partitions: u32,
    /// Each partition's group, by partition number.
    pub partition_reports: Vec<PartitionReport>,
    /// Leader only: (peers, peers within `SYNCED_LAG_ENTRIES_MAX` entries,
    /// the largest lag in entries).
    pub followers: (usize, usize, u64),
    pub extensions: Vec<(String, stoa_ext::ExtMetrics)>,
    /// `conf`'s answer: the settings, then (in an ensemble) the membership.
    pub configuration: String,
    pub host_name: String,
    pub working_dir: String,
}

/// One partition's raft group and tree, for `mntr` and Prometheus.
#[derive(Debug, Clone, Default)]
pub struct PartitionReport {
    pub term: u64,
    /// Its group's leader (0: none known).
    pub leader: u64,
    pub applied_index: u64,
    pub last_index: u64,
    pub last_zxid: i64,
    pub znodes: usize,
}

/// One client connection as `cons` and `stat` list it.
#[derive(Debug, Clone)]
pub struct ConnectionReport {
    pub conn: ConnId,
    pub peer: SocketAddr,
    pub established_ms: i64,
    pub packets_received: u64,
    pub packets_sent: u64,
    /// The session and its negotiated timeout, once established.
    pub session: Option<(i64, i32)>,
}

/// Watches by session and by path (`wchs`, `wchc`, `wchp`).
#[derive(Debug, Clone, Default)]
pub struct WatchReport {
    pub connections: usize,
    pub paths: usize,
    pub watches: usize,
    /// Per watching connection: its session (0 before one) and the paths.
    pub by_session: Vec<(i64, Vec<String>)>,
    /// Per watched path: the sessions watching it.
    pub by_path: Vec<(String, Vec<i64>)>,
}

/// Sessions and their ephemeral nodes (`dump`).
#[derive(Debug, Clone, Default)]
pub struct SessionReport {
    /// Every session with the milliseconds until it expires.
    pub sessions: Vec<(i64, i64)>,
    /// Sessions that own ephemeral nodes, with their paths.
    pub ephemerals: Vec<(i64, Vec<String>)>,
}
