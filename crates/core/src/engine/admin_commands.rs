//! The AdminServer commands that read the engine: each answers ZooKeeper
//! 3.9.5's JSON fields (`crate::admin`) from the same state the
//! four-letter words print. Counters Stoa does not keep (per-connection
//! latencies, buffer sizes, fsync threshold) read as ZooKeeper's server
//! reads them before anything happened: 0, or -1 where it writes -1.

use super::Engine;
use crate::admin::{self, AdminAnswer, AdminCall, Json};
use crate::ensemble::{Member, Role};
use crate::monitor::Monitor;

/// ZooKeeper's answer from a member that is not serving.
pub(super) const NOT_SERVING: &str = "This ZooKeeper instance is not currently serving requests";

impl Engine {
    /// Runs an AdminServer call on the engine's thread.
    pub fn admin(&mut self, call: AdminCall) -> AdminAnswer {
        match call {
            AdminCall::Live => {
                AdminAnswer::json(200, &Json::object(vec![("live", Json::Bool(true))]))
            }
            AdminCall::Ready => {
                let ready = self.serving_clients();
                let body = Json::object(vec![
                    ("ready", Json::Bool(ready)),
                    ("server_state", Json::str(self.mode())),
                ]);
                AdminAnswer::json(if ready { 200 } else { 503 }, &body)
            }
            AdminCall::Command { name, args: _ } => self.admin_command(&name),
        }
    }

    /// Serving clients: a leader is known (standalone: caught up), or
    /// serving read-only sessions while cut off.
    pub(super) fn serving_clients(&self) -> bool {
        let serving = if self.standalone() {
            self.caught_up()
        } else {
            self.leader_id() != 0 || self.read_only()
        };
        self.is_member() && serving
    }

    fn admin_command(&mut self, requested: &str) -> AdminAnswer {
        let Some((command, needs_server)) = admin::resolve(requested) else {
            let error = format!("Unknown command: {requested}");
            return AdminAnswer::error(200, requested, &error);
        };
        if needs_server && !self.serving_clients() {
            return AdminAnswer::error(200, requested, NOT_SERVING);
        }
        let data: Vec<(String, Json)> = match command {
            "monitor" => monitor_fields(&self.monitor()),
            _ => owned(match command {
                "configuration" => self.admin_configuration(),
                "connection_stat_reset" => {
                    self.stats.reset_latency_only();
                    vec![]
                }
                "stat_reset" => {
                    self.stats.reset();
                    self.gate.counters = Default::default();
                    vec![]
                }
                "connections" => {
                    let m = self.monitor();
                    vec![
                        ("connections", Json::Array(connections(&m, false))),
                        ("secure_connections", Json::Array(vec![])),
                    ]
                }
                "dump" => self.admin_dump(),
                "hash" => {
                    // One digest per partition's tree, in partition order
                    // (a server of one partition: ZooKeeper's single entry).
                    let digests = (self.cores.iter())
                        .map(|core| {
                            Json::object(vec![
                                ("zxid", Json::Int(core.tree.last_zxid())),
                                // Stoa's digest, comparable between Stoa servers only.
                                ("digest", Json::Int(core.tree.digest() as i64)),
                                ("digest_version", Json::Int(STOA_DIGEST_VERSION)),
                            ])
                        })
                        .collect();
                    vec![("digests", Json::Array(digests))]
                }
                "is_read_only" => vec![("read_only", Json::Bool(self.read_only()))],
                "last_snapshot" => {
                    let (zxid, ms) = self.cores[0].last_snapshot.unwrap_or((-1, -1000));
                    vec![
                        ("zxid", Json::str(format!("{:x}", zxid as u64))),
                        ("timestamp", Json::Int(ms.div_euclid(1000))),
                    ]
                }
                "leader" => self.admin_leader(),
                "observer_connection_stat_reset" | "ruok" => vec![],
                "observers" => self.admin_observers(),
                "server_stats" => self.server_stats(false),
                "stats" => self.server_stats(true),
                "voting_view" => vec![("current_config", self.voting_view())],
                "watch_summary" | "watches" | "watches_by_path" => self.admin_watches(command),
                "zabstate" => self.admin_zabstate(),
                // dirs, environment, initial_configuration, system_properties
                // and the trace mask are the HTTP side's (they read the
                // process and its disk, not the engine); snapshot and
                // restore move trees through it (`admin_snapshots.rs`).
                other => {
                    let error = format!("{other} is answered by the AdminServer itself");
                    return AdminAnswer::error(200, other, &error);
                }
            }),
        };
        AdminAnswer::json(200, &admin::response(command, data, None))
    }

    fn admin_configuration(&self) -> Vec<(&'static str, Json)> {
        let conf: Vec<(&str, &str)> = (self.config.conf_text.lines())
            .filter_map(|line| line.split_once('='))
            .collect();
        let text = |key: &str| conf.iter().find(|(k, _)| *k == key).map_or("", |(_, v)| v);
        let number = |key: &str| Json::Int(text(key).parse().unwrap_or(-1));
        // A standalone ZooKeeper reports server id 0.
        let server_id = if self.standalone() {
            0
        } else {
            self.config.server_id as i64
        };
        vec![
            ("client_port", number("clientPort")),
            ("data_dir", Json::str(text("dataDir"))),
            ("data_log_dir", Json::str(text("dataLogDir"))),
            ("tick_time", number("tickTime")),
            ("max_client_cnxns", number("maxClientCnxns")),
            ("min_session_timeout", number("minSessionTimeout")),
            ("max_session_timeout", number("maxSessionTimeout")),
            ("server_id", Json::Int(server_id)),
            (
                "client_port_listen_backlog",
                number("clientPortListenBacklog"),
            ),
        ]
    }

    fn admin_dump(&self) -> Vec<(&'static str, Json)> {
        let report = self.session_report();
        let mut by_expiry: std::collections::BTreeMap<i64, Vec<Json>> = Default::default();
        for (sid, expires_in_ms) in &report.sessions {
            let at = self.now_ms + expires_in_ms;
            by_expiry.entry(at).or_default().push(Json::Int(*sid));
        }
        let expiry = by_expiry
            .into_iter()
            .map(|(at, sids)| (at.to_string(), Json::Array(sids)))
            .collect();
        let ephemerals = (report.ephemerals.iter())
            .map(|(sid, paths)| (sid.to_string(), strings(paths)))
            .collect();
        vec![
            ("expiry_time_to_session_ids", Json::Object(expiry)),
            ("session_id_to_ephemeral_paths", Json::Object(ephemerals)),
        ]
    }

    fn admin_leader(&self) -> Vec<(&'static str, Json)> {
        if self.standalone() {
            return vec![("error", Json::str("server is not initialized"))];
        }
        let leader = self.leader_id();
        let host = self
            .membership()
            .members
            .get(&leader)
            .map_or("", |m| m.host.as_str());
        vec![
            ("is_leader", Json::Bool(self.is_leader())),
            ("leader_id", Json::Int(leader as i64)),
            ("leader_ip", Json::str(host)),
        ]
    }

    fn admin_observers(&self) -> Vec<(&'static str, Json)> {
        if !self.is_leader() || self.standalone() {
            return vec![
                ("synced_observers", Json::Int(0)),
                ("observers", Json::Array(vec![])),
            ];
        }
        let membership = self.membership();
        let last_zxid = self.applied_zxid();
        let observers: Vec<Json> = (membership.members.values())
            .filter(|m| m.role == Role::Observer)
            .filter(|m| {
                let heard = self.ensemble.peer_heard_ms.get(&m.id);
                heard.is_some_and(|&at| self.now_ms - at <= super::PEER_LIVE_MS)
            })
            .map(|m| {
                Json::object(vec![
                    (
                        "remote_socket_address",
                        Json::str(format!("/{}:{}", m.host, m.quorum_port)),
                    ),
                    ("sid", Json::Int(m.id as i64)),
                    ("established", Json::Int(0)),
                    ("queued_packets", Json::Int(0)),
                    ("queued_packets_size", Json::Int(0)),
                    ("packets_received", Json::Int(0)),
                    ("packets_sent", Json::Int(0)),
                    ("requests", Json::Int(0)),
                    ("last_zxid", Json::Int(last_zxid)),
                ])
            })
            .collect();
        vec![
            ("synced_observers", Json::Int(observers.len() as i64)),
            ("observers", Json::Array(observers)),
        ]
    }

    fn server_stats(&self, with_connections: bool) -> Vec<(&'static str, Json)> {
        let m = self.monitor();
        let s = &m.stats;
        let buffers = || {
            Json::object(vec![
                ("last_buffer_size", Json::Int(-1)),
                ("min_buffer_size", Json::Int(-1)),
                ("max_buffer_size", Json::Int(-1)),
            ])
        };
        let stats = Json::object(vec![
            ("packets_sent", Json::Int(s.packets_sent as i64)),
            ("packets_received", Json::Int(s.packets_received as i64)),
            ("fsync_threshold_exceed_count", Json::Int(0)),
            ("client_response_stats", buffers()),
            ("data_dir_size", Json::Int(0)),
            ("log_dir_size", Json::Int(0)),
            ("provider_null", Json::Bool(false)),
            ("last_processed_zxid", Json::Int(m.last_zxid)),
            ("outstanding_requests", Json::Int(m.outstanding as i64)),
            ("server_state", Json::str(m.mode)),
            ("avg_latency", Json::Float(round4(s.latency_avg_ms()))),
            ("max_latency", Json::Int(s.latency_max_ms as i64)),
            (
                "min_latency",
                Json::Int(s.latency_min_ms.unwrap_or(0) as i64),
            ),
            (
                "num_alive_client_connections",
                Json::Int(m.connections.len() as i64),
            ),
            ("uptime", Json::Int((m.now_ms - s.started_at_ms).max(0))),
            ("auth_failed_count", Json::Int(s.auth_failures as i64)),
            ("non_mtlsremote_conn_count", Json::Int(0)),
            ("non_mtlslocal_conn_count", Json::Int(0)),
        ]);
        let mut fields = vec![
            ("version", Json::str(crate::stats::version_line())),
            ("read_only", Json::Bool(m.read_only)),
            ("server_stats", stats),
            ("client_response", buffers()),
        ];
        if self.is_leader() && !self.standalone() {
            fields.push(("proposal_stats", buffers()));
        }
        // ZooKeeper counts its root twice (as "" and "/").
        fields.push(("node_count", Json::Int(m.node_count as i64 + 1)));
        if with_connections {
            fields.push(("connections", Json::Array(connections(&m, true))));
            fields.push(("secure_connections", Json::Array(vec![])));
        }
        fields
    }

    /// The voting members by id (string keys, as Jackson writes a map).
    fn voting_view(&self) -> Json {
        if self.standalone() {
            return Json::Object(vec![]);
        }
        let members = (self.membership().members.values())
            .filter(|m| m.role == Role::Participant)
            .map(|m| (m.id.to_string(), member_view(m)))
            .collect();
        Json::Object(members)
    }

    fn admin_watches(&self, command: &str) -> Vec<(&'static str, Json)> {
        let w = self.watch_report();
        match command {
            "watch_summary" => vec![
                ("num_connections", Json::Int(w.connections as i64)),
                ("num_paths", Json::Int(w.paths as i64)),
                ("num_total_watches", Json::Int(w.watches as i64)),
            ],
            "watches" => {
                let by_session = (w.by_session.iter())
                    .map(|(sid, paths)| (sid.to_string(), strings(paths)))
                    .collect();
                vec![("session_id_to_watched_paths", Json::Object(by_session))]
            }
            _ => {
                let by_path = (w.by_path.iter())
                    .map(|(path, sids)| {
                        let sids = sids.iter().map(|&sid| Json::Int(sid)).collect();
                        (path.clone(), Json::Array(sids))
                    })
                    .collect();
                vec![("path_to_session_ids", Json::Object(by_path))]
            }
        }
    }

    fn admin_zabstate(&self) -> Vec<(&'static str, Json)> {
        let me = self.config.server_id;
        let in_quorum = !self.standalone() && self.serving_clients();
        let Some(member) = self.membership().members.get(&me).filter(|_| in_quorum) else {
            return vec![("voting", Json::Bool(false)), ("zabstate", Json::str(""))];
        };
        let zxid = self.applied_zxid();
        let client = member.client_address().unwrap_or_default();
        vec![
            ("myid", Json::Int(me as i64)),
            ("is_leader", Json::Bool(self.is_leader())),
            (
                "quorum_address",
                addresses(&member.host, member.quorum_port),
            ),
            (
                "election_address",
                addresses(&member.host, member.election_port),
            ),
            ("client_address", Json::str(client)),
            ("voting", Json::Bool(member.role == Role::Participant)),
            ("last_zxid", Json::str(format!("{zxid:#x}"))),
            ("zab_epoch", Json::Int(crate::zxid::epoch_of(zxid) as i64)),
            ("zab_counter", Json::Int(zxid & 0xffff_ffff)),
            ("zabstate", Json::str("broadcast")),
        ]
    }
}

/// The version number `hash` gives Stoa's tree digest (ZooKeeper's own
/// digest is version 2; the two are not comparable).
const STOA_DIGEST_VERSION: i64 = 1001;

fn owned(fields: Vec<(&str, Json)>) -> Vec<(String, Json)> {
    fields
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

fn strings(items: &[String]) -> Json {
    Json::Array(items.iter().map(Json::str).collect())
}

/// `cons` (`full`) or `stat`'s short form, per client connection.
fn connections(m: &Monitor, short: bool) -> Vec<Json> {
    m.connections
        .iter()
        .map(|c| {
            let mut fields = vec![
                ("remote_socket_address", Json::str(c.peer.to_string())),
                ("interest_ops", Json::Int(1)),
                ("outstanding_requests", Json::Int(0)),
                ("packets_received", Json::Int(c.packets_received as i64)),
                ("packets_sent", Json::Int(c.packets_sent as i64)),
            ];
            if !short {
                let (sid, timeout) = c.session.unwrap_or((0, 0));
                fields.extend([
                    ("session_id", Json::Int(sid)),
                    ("last_operation", Json::str("NA")),
                    ("established", Json::Int(c.established_ms)),
                    ("session_timeout", Json::Int(timeout as i64)),
                    ("last_cxid", Json::Int(0)),
                    ("last_zxid", Json::Int(m.last_zxid)),
                    ("last_response_time", Json::Int(0)),
                    ("last_latency", Json::Int(0)),
                    ("min_latency", Json::Int(0)),
                    ("avg_latency", Json::Int(0)),
                    ("max_latency", Json::Int(0)),
                ]);
            }
            Json::object(fields)
        })
        .collect()
}

/// `monitor`: `version`, `server_state`, ZooKeeper's `peer_state` in an
/// ensemble, then every `mntr` row without its `zk_` prefix (numbers as
/// numbers).
fn monitor_fields(m: &Monitor) -> Vec<(String, Json)> {
    let mut fields = owned(vec![
        ("version", Json::str(crate::stats::version_line())),
        ("server_state", Json::str(m.mode)),
    ]);
    let peer_state = match m.mode {
        "leader" => Some("leading - broadcast"),
        "follower" => Some("following - broadcast"),
        "observer" => Some("observing - broadcast"),
        _ => None,
    };
    if let Some(state) = peer_state {
        fields.push(("peer_state".into(), Json::str(state)));
    }
    for line in crate::fourlw::mntr(m).lines() {
        let Some((key, value)) = line.split_once('\t') else {
            continue;
        };
        let key = key.strip_prefix("zk_").unwrap_or(key);
        if matches!(key, "version" | "server_state") {
            continue;
        }
        let value = if let Ok(n) = value.parse::<i64>() {
            Json::Int(n)
        } else if let Ok(x) = value.parse::<f64>() {
            Json::Float(x)
        } else {
            Json::str(value)
        };
        fields.push((key.to_string(), value));
    }
    fields
}

fn member_view(m: &Member) -> Json {
    let client = m.client_address().unwrap_or_default();
    let learner_type = m.role.name();
    Json::object(vec![
        (
            "server_addresses",
            strings(&[format!("{}:{}", m.host, m.quorum_port)]),
        ),
        (
            "election_addresses",
            strings(&[format!("{}:{}", m.host, m.election_port)]),
        ),
        ("client_address", Json::str(client)),
        ("learner_type", Json::str(learner_type)),
    ])
}

/// ZooKeeper's `MultipleAddresses` as Jackson writes the bean.
fn addresses(host: &str, port: u16) -> Json {
    let one = format!("{host}:{port}");
    Json::object(vec![
        ("empty", Json::Bool(false)),
        ("all_addresses", strings(std::slice::from_ref(&one))),
        ("wildcard_addresses", strings(&[format!("0.0.0.0:{port}")])),
        ("all_ports", Json::Array(vec![Json::Int(port as i64)])),
        ("all_host_strings", strings(&[host.to_string()])),
        ("reachable_address", Json::str(one.clone())),
        (
            "all_reachable_addresses",
            strings(std::slice::from_ref(&one)),
        ),
        (
            "all_reachable_addresses_or_all",
            strings(std::slice::from_ref(&one)),
        ),
        ("reachable_or_one", Json::str(one.clone())),
        ("one", Json::str(one)),
    ])
}
