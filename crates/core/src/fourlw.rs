//! Four-letter words on the client port, printed exactly as Apache ZooKeeper
//! prints them: client libraries and test harnesses parse `srvr`, `envi`
//! and `mntr` with regular expressions.

use std::fmt::Write;

use crate::engine::Engine;
use crate::stats::{version_line, ZOOKEEPER_COMPAT_VERSION};
use crate::watch::ConnId;

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

pub fn answer(engine: &mut Engine, word: &str, asking: ConnId) -> String {
    if !engine.config().four_letter_allowed(word) {
        return format!("{word} is not executed because it is not in the whitelist.\n");
    }
    match word {
        "ruok" => "imok".to_string(),
        "isro" => if engine.read_only() { "ro" } else { "rw" }.to_string(),
        "srvr" => server_summary(engine, false, asking),
        "stat" => server_summary(engine, true, asking),
        "mntr" => monitor(engine),
        "envi" => environment(engine),
        "conf" => configuration(engine),
        "cons" => connections(engine, asking),
        "crst" => {
            engine.stats.reset_latency_only();
            "Connection stats reset.\n".to_string()
        }
        "srst" => {
            engine.stats.reset();
            "Server stats reset.\n".to_string()
        }
        "wchs" => watch_summary(engine),
        "wchc" => watches_by_session(engine),
        "wchp" => watches_by_path(engine),
        "dump" => dump(engine),
        "hash" => format!("{:x}\n", engine.tree().digest()),
        "dirs" => "datadir_size: 0\nlogdir_size: 0\n".to_string(),
        "gtmk" | "stmk" => "0\n".to_string(),
        _ => format!("{word} is not a known command\n"),
    }
}

/// `conf`: the settings, then (in an ensemble) the membership as
/// ZooKeeper prints its dynamic configuration.
fn configuration(engine: &Engine) -> String {
    let mut out = engine.config().conf_text.clone();
    if !engine.standalone() {
        out.push_str(&engine.membership().render());
        out.push('\n');
    }
    out
}

fn server_summary(engine: &Engine, with_clients: bool, asking: ConnId) -> String {
    if !engine.is_member() || (engine.leader_id() == 0 && !engine.read_only()) {
        // ZooKeeper's answer while it is not part of a working ensemble
        // (looking for a leader, or removed from the ensemble).
        return "This ZooKeeper instance is not currently serving requests\n".into();
    }
    let s = &engine.stats;
    let mut out = String::new();
    let _ = writeln!(out, "Zookeeper version: {}", version_line());
    if with_clients {
        out.push_str("Clients:\n");
        for (&id, c) in engine.conns() {
            let received = c.packets_received + u64::from(id == asking);
            let _ = writeln!(
                out,
                " /{}[1](queued=0,recved={},sent={})",
                c.peer, received, c.packets_sent
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
    let _ = writeln!(out, "Connections: {}", engine.conns().len());
    let _ = writeln!(out, "Outstanding: {}", engine.outstanding());
    let _ = writeln!(out, "Zxid: {:#x}", engine.tree().last_zxid());
    let _ = writeln!(out, "Mode: {}", engine.mode());
    let _ = writeln!(out, "Node count: {}", zookeeper_node_count(engine));
    out
}

/// ZooKeeper's DataTree holds the root under both "" and "/", and every
/// count it reports includes both; monitoring compares against that.
fn zookeeper_node_count(engine: &Engine) -> usize {
    engine.tree().node_count() + 1
}

/// ZooKeeper's estimate: path and data bytes of every node (kept by the
/// tree, not summed here: every metrics scrape asks).
fn approximate_data_size(engine: &Engine) -> u64 {
    engine.tree().approximate_data_size()
}

/// A follower this close to the leader's log counts as synced in `mntr`.
const SYNCED_LAG_ENTRIES_MAX: u64 = 100;

pub fn monitor(engine: &Engine) -> String {
    let s = &engine.stats;
    let ephemerals = engine.tree().ephemeral_count();
    let uptime_ms = engine.now_ms() - s.started_at_ms;
    let rows: Vec<(&str, String)> = vec![
        ("zk_version", version_line()),
        ("zk_server_state", engine.mode().into()),
        ("zk_avg_latency", format!("{:.4}", s.latency_avg_ms())),
        ("zk_max_latency", s.latency_max_ms.to_string()),
        ("zk_min_latency", s.latency_min_ms.unwrap_or(0).to_string()),
        ("zk_packets_received", s.packets_received.to_string()),
        ("zk_packets_sent", s.packets_sent.to_string()),
        ("zk_num_alive_connections", engine.conns().len().to_string()),
        ("zk_outstanding_requests", engine.outstanding().to_string()),
        ("zk_znode_count", zookeeper_node_count(engine).to_string()),
        (
            "zk_approximate_data_size",
            approximate_data_size(engine).to_string(),
        ),
        ("zk_watch_count", engine.watches().watch_count().to_string()),
        ("zk_ephemerals_count", ephemerals.to_string()),
        ("zk_global_sessions", engine.sessions().len().to_string()),
        ("zk_local_sessions", "0".into()),
        ("zk_uptime", uptime_ms.max(0).to_string()),
        ("zk_last_proposal_size", "-1".into()),
        ("zk_auth_failed_count", s.auth_failures.to_string()),
        ("zk_quorum_size", engine.voter_count().to_string()),
        ("stoa_txns_applied", s.txns_applied.to_string()),
        ("stoa_sessions_expired", s.sessions_expired.to_string()),
    ];
    let mut out = String::new();
    for (k, v) in rows {
        let _ = writeln!(out, "{k}\t{v}");
    }
    let (followers, synced, lag_max) = engine.follower_lag(SYNCED_LAG_ENTRIES_MAX);
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
    for (name, m) in engine.extension_metrics() {
        let name: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let _ = writeln!(out, "stoa_extension_{name}_calls\t{}", m.calls);
        let _ = writeln!(out, "stoa_extension_{name}_errors\t{}", m.errors);
        let _ = writeln!(
            out,
            "stoa_extension_{name}_error_replies\t{}",
            m.error_replies
        );
        let _ = writeln!(out, "stoa_extension_{name}_time_us\t{}", m.total_time_us);
        let _ = writeln!(out, "stoa_extension_{name}_limits_hit\t{}", m.limits_hit);
    }
    out
}

fn environment(engine: &Engine) -> String {
    let mut out = String::from("Environment:\n");
    let _ = writeln!(out, "zookeeper.version={}", version_line());
    let _ = writeln!(out, "host.name={}", engine.config().host_name);
    let _ = writeln!(out, "stoa.version={}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(out, "zookeeper.protocol.version={ZOOKEEPER_COMPAT_VERSION}");
    let _ = writeln!(out, "os.name={}", std::env::consts::OS);
    let _ = writeln!(out, "os.arch={}", std::env::consts::ARCH);
    let _ = writeln!(out, "user.dir={}", engine.config().working_dir);
    out
}

fn connections(engine: &Engine, asking: ConnId) -> String {
    let mut out = String::new();
    for (&id, c) in engine.conns() {
        let received = c.packets_received + u64::from(id == asking);
        match c.session {
            Some(sid) => {
                let to = engine.sessions().get(&sid).map_or(0, |s| s.timeout_ms);
                let _ = writeln!(
                    out,
                    " /{}[1](queued=0,recved={},sent={},sid={:#x},lop=NA,est={},to={},lcxid=0x0,lzxid={:#x},lresp=0,llat=0,minlat=0,avglat=0,maxlat=0)",
                    c.peer,
                    received,
                    c.packets_sent,
                    sid,
                    c.established_ms,
                    to,
                    engine.tree().last_zxid()
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    " /{}[0](queued=0,recved={},sent={})",
                    c.peer, received, c.packets_sent
                );
            }
        }
    }
    out.push('\n');
    out
}

fn session_of(engine: &Engine, conn: ConnId) -> i64 {
    engine
        .conns()
        .get(&conn)
        .and_then(|c| c.session)
        .unwrap_or(0)
}

fn watch_summary(engine: &Engine) -> String {
    let w = engine.watches();
    format!(
        "{} connections watching {} paths\nTotal watches:{}\n",
        w.conns().count(),
        w.path_count(),
        w.watch_count()
    )
}

fn watches_by_session(engine: &Engine) -> String {
    let mut out = String::new();
    for conn in engine.watches().conns() {
        let _ = writeln!(out, "{:#x}", session_of(engine, conn));
        for (_, path) in engine.watches().of_conn(conn) {
            let _ = writeln!(out, "\t{path}");
        }
    }
    out
}

fn watches_by_path(engine: &Engine) -> String {
    let mut out = String::new();
    for (path, conns) in engine.watches().by_path() {
        let _ = writeln!(out, "{path}");
        for conn in conns {
            let _ = writeln!(out, "\t{:#x}", session_of(engine, conn));
        }
    }
    out
}

fn dump(engine: &Engine) -> String {
    let mut out = String::from("SessionTracker dump:\n");
    let sessions = engine.sessions();
    let _ = writeln!(
        out,
        "Session Sets ({})/({}):",
        sessions.len(),
        sessions.len()
    );
    for (sid, s) in sessions {
        let _ = writeln!(
            out,
            "{:#x}\texpires in {} ms",
            sid,
            (s.deadline_ms - engine.now_ms()).max(0)
        );
    }
    out.push_str("ephemeral nodes dump:\n");
    let with_ephemerals: Vec<i64> = sessions
        .keys()
        .copied()
        .filter(|&sid| engine.tree().ephemerals(sid).next().is_some())
        .collect();
    let _ = writeln!(out, "Sessions with Ephemerals ({}):", with_ephemerals.len());
    for sid in with_ephemerals {
        let _ = writeln!(out, "{sid:#x}:");
        for path in engine.tree().ephemerals(sid) {
            let _ = writeln!(out, "\t{path}");
        }
    }
    out.push_str("Connections dump:\n");
    let _ = writeln!(out, "Connections Sets (0)/(0):");
    out
}
