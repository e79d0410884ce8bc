//! Four-letter words on the client port, printed exactly as Apache ZooKeeper
//! prints them: client libraries and test harnesses parse `srvr`, `envi`
//! and `mntr` with regular expressions. Everything here formats a value the
//! engine reports (`crate::monitor`); the engine answers the words that
//! change its counters (`engine/monitor.rs`).

use std::fmt::Write;

use crate::monitor::{Monitor, SessionReport, WatchReport};
use crate::stats::{version_line, ZOOKEEPER_COMPAT_VERSION};

/// Every word ZooKeeper recognises in place of a handshake length.
pub const WORDS: &[&str] = &[
    "conf", "cons", "crst", "dump", "envi", "gtmk", "ruok", "stmk", "srst", "srvr", "stat", "wchc",
    "wchp", "wchs", "mntr", "isro", "hash", "dirs",
];

/// `4lw.commands.whitelist` semantics; ZooKeeper 3.5+ enables only srvr by default.
pub fn four_letter_allowed(whitelist: Option<&[String]>, word: &str) -> bool {
    match whitelist {
        None => word == "srvr",
        Some(list) => list.iter().any(|w| w == "*" || w == word),
    }
}

/// The word if these four bytes spell one.
pub fn recognise(first4: [u8; 4]) -> Option<&'static str> {
    WORDS.iter().copied().find(|w| w.as_bytes() == first4)
}

/// The answer to a word the whitelist leaves out.
pub fn not_allowed(word: &str) -> String {
    format!("{word} is not executed because it is not in the whitelist.\n")
}

/// The words printed from the server's state and counters.
pub fn answer(word: &str, m: &Monitor) -> String {
    match word {
        "ruok" => "imok".to_string(),
        "isro" => if m.read_only { "ro" } else { "rw" }.to_string(),
        "srvr" => server_summary(m, false),
        "stat" => server_summary(m, true),
        "mntr" => mntr(m),
        "envi" => environment(m),
        "conf" => m.configuration.clone(),
        "cons" => connections(m),
        "dirs" => "datadir_size: 0\nlogdir_size: 0\n".to_string(),
        "gtmk" | "stmk" => "0\n".to_string(),
        _ => format!("{word} is not a known command\n"),
    }
}

fn server_summary(m: &Monitor, with_clients: bool) -> String {
    if !m.serving {
        // ZooKeeper's answer while it is not part of a working ensemble
        // (looking for a leader, or removed from the ensemble).
        return "This ZooKeeper instance is not currently serving requests\n".into();
    }
    let s = &m.stats;
    let mut out = String::new();
    let _ = writeln!(out, "Zookeeper version: {}", version_line());
    if with_clients {
        out.push_str("Clients:\n");
        for c in &m.connections {
            let _ = writeln!(
                out,
                " /{}[1](queued=0,recved={},sent={})",
                c.peer, c.packets_received, c.packets_sent
            );
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "Latency min/avg/max: {}/{:.4}/{}",
        s.latency_min_ms.unwrap_or(0),
        s.latency_avg_ms(),
        s.latency_max_ms
    );
    let _ = writeln!(out, "Received: {}", s.packets_received);
    let _ = writeln!(out, "Sent: {}", s.packets_sent);
    let _ = writeln!(out, "Connections: {}", m.connections.len());
    let _ = writeln!(out, "Outstanding: {}", m.outstanding);
    let _ = writeln!(out, "Zxid: {:#x}", m.last_zxid);
    let _ = writeln!(out, "Mode: {}", m.mode);
    let _ = writeln!(out, "Node count: {}", zookeeper_node_count(m));
    out
}

/// ZooKeeper's DataTree holds the root under both "" and "/", and every
/// count it reports includes both; monitoring compares against that.
fn zookeeper_node_count(m: &Monitor) -> usize {
    m.node_count + 1
}

/// `mntr`: one `key\tvalue` row per figure (also what Prometheus scrapes).
pub fn mntr(m: &Monitor) -> String {
    let s = &m.stats;
    let uptime_ms = m.now_ms - s.started_at_ms;
    let rows: Vec<(&str, String)> = vec![
        ("zk_version", version_line()),
        ("zk_server_state", m.mode.into()),
        ("zk_avg_latency", format!("{:.4}", s.latency_avg_ms())),
        ("zk_max_latency", s.latency_max_ms.to_string()),
        ("zk_min_latency", s.latency_min_ms.unwrap_or(0).to_string()),
        ("zk_packets_received", s.packets_received.to_string()),
        ("zk_packets_sent", s.packets_sent.to_string()),
        ("zk_num_alive_connections", m.connections.len().to_string()),
        ("zk_outstanding_requests", m.outstanding.to_string()),
        ("zk_znode_count", zookeeper_node_count(m).to_string()),
        (
            "zk_approximate_data_size",
            m.approximate_data_size.to_string(),
        ),
        ("zk_watch_count", m.watches.to_string()),
        ("zk_ephemerals_count", m.ephemerals.to_string()),
        ("zk_global_sessions", m.sessions.to_string()),
        ("zk_local_sessions", "0".into()),
        ("zk_uptime", uptime_ms.max(0).to_string()),
        ("zk_last_proposal_size", "-1".into()),
        ("zk_auth_failed_count", s.auth_failures.to_string()),
        ("zk_quorum_size", m.quorum_size.to_string()),
        ("stoa_partitions", m.partitions.to_string()),
        ("stoa_txns_applied", s.txns_applied.to_string()),
        ("stoa_sessions_expired", s.sessions_expired.to_string()),
        ("stoa_epoch_rollovers", s.epoch_rollovers.to_string()),
        (
            "stoa_leader_losses_noticed",
            s.leader_losses_noticed.to_string(),
        ),
        ("stoa_group_moves", s.group_moves.to_string()),
        ("stoa_balancer_moves", s.balancer_moves.to_string()),
        ("stoa_apply_runs", s.apply_runs.to_string()),
        ("stoa_apply_run_txns", s.apply_run_txns.to_string()),
        ("stoa_apply_runs_lent", s.apply_runs_lent.to_string()),
        ("stoa_prep_batches", s.prep_batches.to_string()),
        ("stoa_prep_batch_writes", s.prep_batch_writes.to_string()),
        ("stoa_prep_batches_lent", s.prep_batches_lent.to_string()),
        ("stoa_read_batches", s.read_batches.to_string()),
        ("stoa_read_batch_reads", s.read_batch_reads.to_string()),
        ("stoa_read_batches_lent", s.read_batches_lent.to_string()),
        ("stoa_read_flights", s.read_flights.to_string()),
        ("stoa_ready_rounds", s.ready_rounds.to_string()),
        (
            "stoa_ready_round_readies",
            s.ready_round_readies.to_string(),
        ),
        ("stoa_ready_rounds_lent", s.ready_rounds_lent.to_string()),
        ("stoa_cores_sent", s.cores_sent.to_string()),
        ("stoa_core_recalls", s.core_recalls.to_string()),
        (
            "stoa_core_recalls_waited",
            s.core_recalls_waited.to_string(),
        ),
        ("stoa_core_jobs_followed", s.core_jobs_followed.to_string()),
        (
            "stoa_core_jobs_followed_late",
            s.core_jobs_followed_late.to_string(),
        ),
        ("stoa_raft_steps_away", s.raft_steps_away.to_string()),
        ("stoa_raft_ticks_away", s.raft_ticks_away.to_string()),
        (
            "stoa_chain_links_followed",
            s.chain_links_followed.to_string(),
        ),
        ("stoa_chain_breaks", s.chain_breaks.to_string()),
        (
            "stoa_applied_past_prefix",
            s.applied_past_prefix.to_string(),
        ),
        ("stoa_writes_fenced", s.writes_fenced.to_string()),
        ("stoa_applies_sent_away", s.applies_sent_away.to_string()),
        ("stoa_reads_off_cut", s.reads_off_cut.to_string()),
        ("stoa_reads_fast", s.reads_fast.to_string()),
        ("stoa_events_fast", s.events_fast.to_string()),
        ("stoa_fast_read_sessions", s.fast_read_sessions.to_string()),
        (
            "stoa_fast_watch_sessions",
            s.fast_watch_sessions.to_string(),
        ),
    ];
    let mut out = String::new();
    for (k, v) in rows {
        let _ = writeln!(out, "{k}\t{v}");
    }
    let (followers, synced, lag_max) = m.followers;
    let ensemble_rows: Vec<(&str, String)> = vec![
        ("zk_followers", followers.to_string()),
        ("zk_synced_followers", synced.to_string()),
        ("stoa_follower_lag_entries_max", lag_max.to_string()),
        (
            "stoa_commit_latency_avg_ms",
            format!("{:.4}", s.commit_latency_avg_ms()),
        ),
        (
            "stoa_commit_latency_max_ms",
            s.commit_latency_max_ms.to_string(),
        ),
        ("stoa_wal_batches", s.wal_batches.to_string()),
        ("stoa_wal_fsyncs", s.wal_sync.groups.to_string()),
        (
            "stoa_wal_fsyncs_inline",
            s.wal_sync.inline_groups.to_string(),
        ),
        (
            "stoa_wal_fsync_avg_ms",
            format!("{:.4}", s.wal_sync_avg_ms()),
        ),
        (
            "stoa_wal_fsync_max_ms",
            format!("{:.3}", s.wal_sync.sync_micros_max as f64 / 1000.0),
        ),
        ("stoa_snapshots_sent", s.snapshots_sent.to_string()),
        (
            "stoa_snapshots_installed",
            s.snapshots_installed.to_string(),
        ),
        (
            "stoa_wal_batch_entries_avg",
            format!("{:.2}", s.wal_batch_entries_avg()),
        ),
        (
            "stoa_wal_batch_entries_max",
            s.wal_batch_entries_max.to_string(),
        ),
    ];
    for (k, v) in ensemble_rows {
        let _ = writeln!(out, "{k}\t{v}");
    }
    // Per partition: its group's term and leader, how far it applied, its
    // tree (Prometheus turns the number into a `partition` label).
    for (p, r) in m.partition_reports.iter().enumerate() {
        let rows = [
            ("term", r.term.to_string()),
            ("leader", r.leader.to_string()),
            ("applied_index", r.applied_index.to_string()),
            ("last_index", r.last_index.to_string()),
            ("last_zxid", r.last_zxid.to_string()),
            ("znode_count", r.znodes.to_string()),
        ];
        for (name, value) in rows {
            let _ = writeln!(out, "stoa_partition_{p}_{name}\t{value}");
        }
    }
    for (name, e) in &m.extensions {
        let name: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let _ = writeln!(out, "stoa_extension_{name}_calls\t{}", e.calls);
        let _ = writeln!(out, "stoa_extension_{name}_errors\t{}", e.errors);
        let _ = writeln!(
            out,
            "stoa_extension_{name}_error_replies\t{}",
            e.error_replies
        );
        let _ = writeln!(out, "stoa_extension_{name}_time_us\t{}", e.total_time_us);
        let _ = writeln!(out, "stoa_extension_{name}_limits_hit\t{}", e.limits_hit);
    }
    out
}

fn environment(m: &Monitor) -> String {
    let mut out = String::from("Environment:\n");
    let _ = writeln!(out, "zookeeper.version={}", version_line());
    let _ = writeln!(out, "host.name={}", m.host_name);
    let _ = writeln!(out, "stoa.version={}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(out, "zookeeper.protocol.version={ZOOKEEPER_COMPAT_VERSION}");
    let _ = writeln!(out, "os.name={}", std::env::consts::OS);
    let _ = writeln!(out, "os.arch={}", std::env::consts::ARCH);
    let _ = writeln!(out, "user.dir={}", m.working_dir);
    out
}

fn connections(m: &Monitor) -> String {
    let mut out = String::new();
    for c in &m.connections {
        match c.session {
            Some((sid, timeout_ms)) => {
                let _ = writeln!(
                    out,
                    " /{}[1](queued=0,recved={},sent={},sid={:#x},lop=NA,est={},to={},lcxid=0x0,lzxid={:#x},lresp=0,llat=0,minlat=0,avglat=0,maxlat=0)",
                    c.peer,
                    c.packets_received,
                    c.packets_sent,
                    sid,
                    c.established_ms,
                    timeout_ms,
                    m.last_zxid
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    " /{}[0](queued=0,recved={},sent={})",
                    c.peer, c.packets_received, c.packets_sent
                );
            }
        }
    }
    out.push('\n');
    out
}

/// `wchs`, `wchc` and `wchp`.
pub fn watch_answer(word: &str, w: &WatchReport) -> String {
    let mut out = String::new();
    match word {
        "wchs" => {
            let _ = write!(
                out,
                "{} connections watching {} paths\nTotal watches:{}\n",
                w.connections, w.paths, w.watches
            );
        }
        "wchc" => {
            for (sid, paths) in &w.by_session {
                let _ = writeln!(out, "{sid:#x}");
                for path in paths {
                    let _ = writeln!(out, "\t{path}");
                }
            }
        }
        _ => {
            for (path, sessions) in &w.by_path {
                let _ = writeln!(out, "{path}");
                for sid in sessions {
                    let _ = writeln!(out, "\t{sid:#x}");
                }
            }
        }
    }
    out
}

/// `dump`: sessions with their expiry, and ephemeral nodes by session.
pub fn dump(r: &SessionReport) -> String {
    let mut out = String::from("SessionTracker dump:\n");
    let n = r.sessions.len();
    let _ = writeln!(out, "Session Sets ({n})/({n}):");
    for (sid, expires_in_ms) in &r.sessions {
        let _ = writeln!(out, "{sid:#x}\texpires in {expires_in_ms} ms");
    }
    out.push_str("ephemeral nodes dump:\n");
    let _ = writeln!(out, "Sessions with Ephemerals ({}):", r.ephemerals.len());
    for (sid, paths) in &r.ephemerals {
        let _ = writeln!(out, "{sid:#x}:");
        for path in paths {
            let _ = writeln!(out, "\t{path}");
        }
    }
    out.push_str("Connections dump:\n");
    let _ = writeln!(out, "Connections Sets (0)/(0):");
    out
}
