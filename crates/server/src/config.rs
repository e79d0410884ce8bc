//! Server configuration: an Apache ZooKeeper `zoo.cfg` read as-is, so users
//! migrate by pointing Stoa at the file they already have. Keys Stoa does not
//! use are reported back as warnings, never dropped silently.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use crate::ensemble::{parse_member, Ensemble, Member, Role};

/// ZooKeeper's default tick; session bounds derive from it.
pub const TICK_MS_DEFAULT: u32 = 2000;
pub const CLIENT_PORT_DEFAULT: u16 = 2181;
pub const MAX_CLIENT_CNXNS_DEFAULT: u32 = 60;
/// jute.maxbuffer's default in ZooKeeper (0xfffff bytes).
pub const MAX_FRAME_BYTES_DEFAULT: usize = 0xfffff;
/// ZooKeeper's ContainerManager period (one minute).
pub const CONTAINER_CHECK_INTERVAL_MS_DEFAULT: u64 = 60_000;
/// Transactions between snapshots (ZooKeeper's snapCount).
pub const SNAP_COUNT_DEFAULT: u64 = 100_000;
/// The longest TTL ZooKeeper's EphemeralType.TTL can encode (40 bits).
pub const TTL_MS_MAX: i64 = (1 << 40) - 1;

/// ZooKeeper's `quorum.auth.*` keys: SASL between members (DIGEST-MD5 or
/// Kerberos, as the JAAS file's sections say; `crate::peer_sasl`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumSaslSettings {
    pub enable: bool,
    pub learner_require: bool,
    pub server_require: bool,
    /// The section with this member's own credentials.
    pub learner_context: String,
    /// The section listing the members that may connect.
    pub server_context: String,
    /// `quorum.auth.kerberos.servicePrincipal`: the service a member asks
    /// tickets for when it dials another with Kerberos (`_HOST`: the
    /// dialled member's host).
    pub kerberos_service_principal: String,
}

impl Default for QuorumSaslSettings {
    fn default() -> Self {
        QuorumSaslSettings {
            enable: false,
            learner_require: false,
            server_require: false,
            learner_context: "QuorumLearner".into(),
            server_context: "QuorumServer".into(),
            kerberos_service_principal: stoa_core::sasl::quorum_kerberos::SERVICE_PRINCIPAL_DEFAULT
                .into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    pub tick_ms: u32,
    pub data_dir: PathBuf,
    /// Where the WAL lives; defaults to `data_dir`.
    pub data_log_dir: Option<PathBuf>,
    pub client_port: u16,
    pub client_address: IpAddr,
    /// Per client IP; 0 means unlimited, as in ZooKeeper.
    pub max_client_cnxns: u32,
    pub min_session_timeout_ms: Option<u32>,
    pub max_session_timeout_ms: Option<u32>,
    pub max_frame_bytes: usize,
    /// `*` or a list; `None` means ZooKeeper's default (srvr only).
    pub four_letter_whitelist: Option<Vec<String>>,
    pub extended_types_enabled: bool,
    pub container_check_interval_ms: u64,
    /// `user:base64(sha1)` of the super user, as DigestAuthenticationProvider.superDigest.
    pub super_digest: Option<String>,
    pub snap_count: u64,
    pub server_id: u64,
    /// Port of the Prometheus endpoint (`metricsProvider.httpPort`); 0 disables it.
    pub metrics_port: u16,
    /// Defaults to the client address.
    pub metrics_address: Option<IpAddr>,
    /// The `server.N` lines: the ensemble this server belongs to.
    pub servers: BTreeMap<u64, Member>,
    /// `peerType=observer`.
    pub observer: bool,
    /// `readonlymode.enabled`.
    pub read_only_enabled: bool,
    /// `reconfigEnabled`: serve the `reconfig` operation (ZooKeeper's
    /// default is off).
    pub reconfig_enabled: bool,
    /// `partitions`: the raft groups (partitions) this server runs, 1 to
    /// `stoa_core::placement::PARTITIONS_MAX`; `auto` takes the cores the
    /// process may use. Every member of an ensemble must run the same.
    pub partitions: u32,
    /// `io.threads`: threads that run the client connections' socket
    /// reads and writes; 0 (the default) keeps them on the engine's own
    /// thread; `auto` picks by the cores the process may use
    /// (`io_threads_auto`).
    pub io_threads: u32,
    /// `partition.threads`: threads the engine lends its partitions to
    /// (docs/partitions.md, "Lent partitions"), at most one fewer than the
    /// partitions; None is `auto` (`partition_threads`), the default.
    pub partition_threads: Option<u32>,
    /// `partition.owned`: each partition's core goes to a thread of its
    /// own between turns, to prepare its share of the turn's writes and
    /// take its raft group's ready apart while the engine's thread goes on
    /// (docs/partitions.md, "Step 3, the inversion"); off by default.
    pub partition_owned: bool,
    /// `partition.pollMicros`: with `partition.owned`, how long a
    /// partition's thread looks for its next job before it parks, so that
    /// a job sent meanwhile needs no wake-up (a futex call on the engine's
    /// thread); 0 (the default) parks at once. Polling takes a core for
    /// that long after every job: for machines with cores to spare.
    pub partition_poll_micros: u32,
    /// `partition.balanceIntervalMs`: the load balancer's window, which
    /// moves groups between partitions (docs/partitions.md); 0 (the
    /// default) leaves them where they are.
    pub partition_balance_interval_ms: u64,
    /// `partition.auto`: each new top-level node becomes a group of its
    /// own, on the partition with the fewest groups.
    pub partition_auto: bool,
    /// `partition.groups`: the roots of the configured groups (top-level
    /// paths, comma-separated), spread over partitions 1.. (docs/partitions.md).
    /// Every member of an ensemble must list the same.
    pub partition_groups: Vec<String>,
    /// `admin.enableServer`: the AdminServer (HTTP, ZooKeeper's JSON
    /// commands), on by default as in ZooKeeper.
    pub admin_enabled: bool,
    /// `admin.serverAddress`, `admin.serverPort`.
    pub admin_address: IpAddr,
    pub admin_port: u16,
    /// `admin.commandURL`: where the commands are served.
    pub admin_command_url: String,
    /// The zoo.cfg text read, when the configuration came from a file
    /// (the AdminServer's `initial_configuration`).
    pub initial_configuration: Option<String>,
    /// `secureClientPort`: TLS clients (`crate::tls`), beside or instead
    /// of `clientPort`.
    pub secure_client_port: Option<u16>,
    /// `secureClientPortAddress`; defaults to the client address.
    pub secure_client_address: Option<IpAddr>,
    /// The `ssl.*` keys.
    pub tls: crate::tls::TlsSettings,
    /// The `ssl.quorum.*` keys: ZooKeeper's AdminServer takes its HTTPS
    /// keys from them, and members their TLS (`sslQuorum`).
    pub quorum_tls: crate::tls::TlsSettings,
    /// `sslQuorum`: members talk over TLS with the `ssl.quorum.*` stores.
    pub ssl_quorum: bool,
    /// `portUnification`: the quorum port takes TLS and plain connections
    /// side by side (a rolling switch to or from `sslQuorum`).
    pub quorum_port_unification: bool,
    /// `quorum.auth.*`: SASL between members.
    pub quorum_sasl: QuorumSaslSettings,
    /// `admin.forceHttps`: the AdminServer speaks HTTPS only;
    /// `admin.portUnification`: HTTP and HTTPS on its one port;
    /// `admin.needClientAuth`: HTTPS clients show a certificate.
    pub admin_force_https: bool,
    pub admin_port_unification: bool,
    pub admin_need_client_auth: bool,
    /// `admin.snapshot.enabled`, `admin.restore.enabled` (ZooKeeper's
    /// `zookeeper.admin.*` properties, which its zoo.cfg sets too): the
    /// AdminServer's `snapshot` and `restore`.
    pub admin_snapshot_enabled: bool,
    pub admin_restore_enabled: bool,
    /// `admin.rateLimiterIntervalInMS`: at most one `snapshot` and one
    /// `restore` per interval.
    pub admin_rate_limit_interval_ms: u64,
    /// `clientPort` was set: with `secureClientPort` too, both are
    /// served; with only `secureClientPort`, only TLS clients are.
    pub client_port_set: bool,
    /// `jaasLoginConfig` (`stoa server --jaas`): the JAAS file whose
    /// `Server` section lists the SASL DIGEST-MD5 users.
    pub jaas_login_config: Option<PathBuf>,
    /// `enforce.auth.enabled`, `enforce.auth.schemes` (ZooKeeper 3.9).
    pub enforce_auth_enabled: bool,
    pub enforce_auth_schemes: Vec<String>,
    /// `kerberos.removeHostFromPrincipal`, `kerberos.removeRealmFromPrincipal`:
    /// the `sasl` identity of a Kerberos client leaves out its principal's
    /// host, its realm.
    pub kerberos_remove_host: bool,
    pub kerberos_remove_realm: bool,
}

/// ZooKeeper's AdminServer port.
pub const ADMIN_PORT_DEFAULT: u16 = 8080;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            tick_ms: TICK_MS_DEFAULT,
            data_dir: PathBuf::from("data"),
            data_log_dir: None,
            client_port: CLIENT_PORT_DEFAULT,
            client_address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            max_client_cnxns: MAX_CLIENT_CNXNS_DEFAULT,
            min_session_timeout_ms: None,
            max_session_timeout_ms: None,
            max_frame_bytes: MAX_FRAME_BYTES_DEFAULT,
            four_letter_whitelist: None,
            extended_types_enabled: true,
            container_check_interval_ms: CONTAINER_CHECK_INTERVAL_MS_DEFAULT,
            super_digest: None,
            snap_count: SNAP_COUNT_DEFAULT,
            server_id: 1,
            metrics_port: 0,
            metrics_address: None,
            servers: BTreeMap::new(),
            observer: false,
            read_only_enabled: false,
            reconfig_enabled: false,
            partitions: 1,
            io_threads: 0,
            partition_threads: None,
            partition_groups: Vec::new(),
            partition_balance_interval_ms: 0,
            partition_auto: false,
            partition_owned: false,
            partition_poll_micros: 0,
            admin_enabled: true,
            admin_address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            admin_port: ADMIN_PORT_DEFAULT,
            admin_command_url: "/commands".into(),
            initial_configuration: None,
            secure_client_port: None,
            secure_client_address: None,
            tls: crate::tls::TlsSettings::default(),
            quorum_tls: crate::tls::TlsSettings::default(),
            ssl_quorum: false,
            quorum_port_unification: false,
            quorum_sasl: QuorumSaslSettings::default(),
            admin_force_https: false,
            admin_port_unification: false,
            admin_need_client_auth: false,
            admin_snapshot_enabled: true,
            admin_restore_enabled: true,
            admin_rate_limit_interval_ms: 300_000,
            client_port_set: false,
            jaas_login_config: None,
            enforce_auth_enabled: false,
            enforce_auth_schemes: Vec::new(),
            kerberos_remove_host: false,
            kerberos_remove_realm: false,
        }
    }
}

impl ServerConfig {
    /// ZooKeeper's defaults: 2 and 20 ticks.
    pub fn session_timeout_bounds_ms(&self) -> (u32, u32) {
        let min = self.min_session_timeout_ms.unwrap_or(self.tick_ms * 2);
        let max = self.max_session_timeout_ms.unwrap_or(self.tick_ms * 20);
        (min, max.max(min))
    }

    /// The ensemble this server belongs to, or `None` when it runs
    /// standalone (no `server.N` lines, or only its own).
    pub fn ensemble(&self) -> Result<Option<Ensemble>, ConfigError> {
        if self.servers.keys().all(|&id| id == self.server_id) {
            return Ok(None);
        }
        let Some(me) = self.servers.get(&self.server_id) else {
            return Err(ConfigError(format!(
                "this server's id is {} (myid in {}), but zoo.cfg has no server.{} line",
                self.server_id,
                self.data_dir.display(),
                self.server_id
            )));
        };
        if self.observer != (me.role == Role::Observer) {
            return Err(ConfigError(format!(
                "peerType={} disagrees with server.{}'s role",
                if self.observer {
                    "observer"
                } else {
                    "participant"
                },
                self.server_id
            )));
        }
        let ids = |role: Role| {
            self.servers
                .values()
                .filter(|m| m.role == role)
                .map(|m| m.id)
                .collect()
        };
        let voters: Vec<u64> = ids(Role::Participant);
        if voters.is_empty() {
            return Err(ConfigError("the ensemble has no participants".into()));
        }
        Ok(Some(Ensemble {
            me: me.clone(),
            voters,
            learners: ids(Role::Observer),
            members: self.servers.values().cloned().collect(),
        }))
    }

    pub fn wal_dir(&self) -> PathBuf {
        self.data_log_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.clone())
            .join("wal")
    }

    pub fn snapshot_dir(&self) -> PathBuf {
        self.data_dir.join("snapshots")
    }

    pub fn four_letter_allowed(&self, word: &str) -> bool {
        stoa_core::fourlw::four_letter_allowed(self.four_letter_whitelist.as_deref(), word)
    }

    /// Reads a zoo.cfg file. Returns the config and warnings for keys Stoa
    /// does not use (they are reported, not silently ignored).
    pub fn from_file(path: &Path) -> Result<(ServerConfig, Vec<String>), ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
        let mut config = ServerConfig::default();
        let mut warnings = Vec::new();
        for (line_no, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(ConfigError(format!(
                    "{}:{}: expected key=value, got {line:?}",
                    path.display(),
                    line_no + 1
                )));
            };
            if let Some(w) = config.set(key.trim(), value.trim())? {
                warnings.push(format!("{}:{}: {w}", path.display(), line_no + 1));
            }
        }
        config.initial_configuration = Some(text);
        Ok((config, warnings))
    }

    /// Sets one key (zoo.cfg spelling). `Ok(Some(warning))` for a key that is
    /// accepted but has no effect in Stoa.
    pub fn set(&mut self, key: &str, value: &str) -> Result<Option<String>, ConfigError> {
        let bad = |what: &str| ConfigError(format!("invalid value {value:?} for {key}: {what}"));
        match key {
            "tickTime" => self.tick_ms = parse_positive(value).map_err(|e| bad(&e))?,
            "dataDir" => self.data_dir = PathBuf::from(value),
            "dataLogDir" => self.data_log_dir = Some(PathBuf::from(value)),
            "clientPort" => {
                self.client_port = value.parse().map_err(|_| bad("not a port"))?;
                self.client_port_set = true;
            }
            "clientPortAddress" => {
                self.client_address = value.parse().map_err(|_| bad("not an IP address"))?
            }
            "maxClientCnxns" => {
                self.max_client_cnxns = value.parse().map_err(|_| bad("not a count"))?
            }
            "minSessionTimeout" => {
                self.min_session_timeout_ms = Some(parse_positive(value).map_err(|e| bad(&e))?)
            }
            "maxSessionTimeout" => {
                self.max_session_timeout_ms = Some(parse_positive(value).map_err(|e| bad(&e))?)
            }
            "jute.maxbuffer" => {
                let n: u32 = parse_positive(value).map_err(|e| bad(&e))?;
                self.max_frame_bytes = n as usize;
            }
            "4lw.commands.whitelist" => self.four_letter_whitelist = Some(comma_list(value)),
            "extendedTypesEnabled" | "zookeeper.extendedTypesEnabled" => {
                self.extended_types_enabled = parse_bool(value).map_err(|e| bad(&e))?
            }
            "partition.threads" => {
                self.partition_threads = parse_partition_threads(value).map_err(|e| bad(&e))?
            }
            "partition.auto" => self.partition_auto = parse_bool(value).map_err(|e| bad(&e))?,
            "partition.owned" => self.partition_owned = parse_bool(value).map_err(|e| bad(&e))?,
            "partition.pollMicros" => {
                self.partition_poll_micros = (value.parse::<u32>().ok())
                    .filter(|&us| us <= POLL_MICROS_MAX)
                    .ok_or_else(|| {
                        bad(&format!(
                            "expected 0 (park at once) to {POLL_MICROS_MAX} µs"
                        ))
                    })?
            }
            "partition.balanceIntervalMs" => {
                self.partition_balance_interval_ms = value
                    .parse::<u32>()
                    .map_err(|_| bad("expected 0 (off) or a window in ms"))?
                    as u64
            }
            "znode.container.checkIntervalMs" => {
                self.container_check_interval_ms =
                    parse_positive::<u32>(value).map_err(|e| bad(&e))? as u64
            }
            "DigestAuthenticationProvider.superDigest"
            | "zookeeper.DigestAuthenticationProvider.superDigest" => {
                if !value.contains(':') {
                    return Err(bad("expected user:base64digest"));
                }
                self.super_digest = Some(value.to_string())
            }
            "snapCount" | "zookeeper.snapCount" => {
                self.snap_count = parse_positive::<u32>(value).map_err(|e| bad(&e))?.max(2) as u64
            }
            "metricsProvider.httpPort" => {
                self.metrics_port = value.parse().map_err(|_| bad("not a port"))?
            }
            "metricsProvider.httpHost" => {
                self.metrics_address = Some(value.parse().map_err(|_| bad("not an IP address"))?)
            }
            // Stoa always speaks Prometheus; the class name only says so.
            "metricsProvider.className" => {}
            "myid" => self.server_id = value.parse().map_err(|_| bad("not a server id"))?,
            // ZooKeeper's own template (zoo_sample.cfg) sets these, so
            // every copied zoo.cfg has them: accepted quietly. Raft's
            // timers replace the follower limits, and Stoa purges its own
            // WAL and snapshots (docs/operations.md).
            "initLimit"
            | "syncLimit"
            | "autopurge.snapRetainCount"
            | "autopurge.purgeInterval"
            | "metricsProvider.exportJvmInfo" => {}
            "admin.enableServer" | "zookeeper.admin.enableServer" => {
                self.admin_enabled = parse_bool(value).map_err(|e| bad(&e))?
            }
            "admin.serverAddress" | "zookeeper.admin.serverAddress" => {
                self.admin_address = value.parse().map_err(|_| bad("not an IP address"))?
            }
            "admin.serverPort" | "zookeeper.admin.serverPort" => {
                self.admin_port = value.parse().map_err(|_| bad("not a port"))?
            }
            "admin.forceHttps" | "zookeeper.admin.forceHttps" => {
                self.admin_force_https = parse_bool(value).map_err(|e| bad(&e))?
            }
            "admin.portUnification" | "zookeeper.admin.portUnification" => {
                self.admin_port_unification = parse_bool(value).map_err(|e| bad(&e))?
            }
            "admin.needClientAuth" | "zookeeper.admin.needClientAuth" => {
                self.admin_need_client_auth = parse_bool(value).map_err(|e| bad(&e))?
            }
            "admin.snapshot.enabled" | "zookeeper.admin.snapshot.enabled" => {
                self.admin_snapshot_enabled = parse_bool(value).map_err(|e| bad(&e))?
            }
            "admin.restore.enabled" | "zookeeper.admin.restore.enabled" => {
                self.admin_restore_enabled = parse_bool(value).map_err(|e| bad(&e))?
            }
            "admin.rateLimiterIntervalInMS" | "zookeeper.admin.rateLimiterIntervalInMS" => {
                self.admin_rate_limit_interval_ms = value
                    .parse()
                    .map_err(|_| bad("not a count of milliseconds"))?
            }
            "admin.commandURL" | "zookeeper.admin.commandURL" => {
                if !value.starts_with('/') || value.contains(char::is_whitespace) {
                    return Err(bad("expected a path such as /commands"));
                }
                self.admin_command_url = value.trim_end_matches('/').to_string();
                if self.admin_command_url.is_empty() {
                    return Err(bad("expected a path such as /commands"));
                }
            }
            // Accepted, but said once: an operator may expect them to act.
            "admin.idleTimeout"
            | "standaloneEnabled"
            | "preAllocSize"
            | "globalOutstandingLimit"
            | "electionAlg" => {
                return Ok(Some(format!(
                    "{key} is accepted for compatibility and has no effect in Stoa"
                )))
            }
            _ if key.starts_with("server.") => {
                let id: u64 = key["server.".len()..]
                    .parse()
                    .map_err(|_| ConfigError(format!("invalid server id in {key}")))?;
                let member = parse_member(id, value).map_err(|e| ConfigError(e.0))?;
                self.servers.insert(id, member);
            }
            "reconfigEnabled" => self.reconfig_enabled = parse_bool(value).map_err(|e| bad(&e))?,
            "partitions" => self.partitions = parse_partitions(value).map_err(|e| bad(&e))?,
            "io.threads" => self.io_threads = parse_io_threads(value).map_err(|e| bad(&e))?,
            "partition.groups" => {
                self.partition_groups = (value.split(','))
                    .map(str::trim)
                    .filter(|root| !root.is_empty())
                    .map(str::to_string)
                    .collect()
            }
            "secureClientPort" => {
                self.secure_client_port = Some(value.parse().map_err(|_| bad("not a port"))?)
            }
            "secureClientPortAddress" => {
                let ip = value.parse().map_err(|_| bad("not an IP address"))?;
                self.secure_client_address = Some(ip)
            }
            _ if key.starts_with("ssl.") || key.starts_with("zookeeper.ssl.") => {
                return self.set_ssl(key.trim_start_matches("zookeeper."), value);
            }
            "serverCnxnFactory" | "zookeeper.serverCnxnFactory" => {}
            "jaasLoginConfig" | "java.security.auth.login.config" => {
                self.jaas_login_config = Some(PathBuf::from(value))
            }
            "enforce.auth.enabled" | "zookeeper.enforce.auth.enabled" => {
                self.enforce_auth_enabled = parse_bool(value).map_err(|e| bad(&e))?
            }
            "enforce.auth.schemes" | "zookeeper.enforce.auth.schemes" => {
                self.enforce_auth_schemes = comma_list(value)
            }
            "kerberos.removeHostFromPrincipal" | "zookeeper.kerberos.removeHostFromPrincipal" => {
                self.kerberos_remove_host = parse_bool(value).map_err(|e| bad(&e))?
            }
            "kerberos.removeRealmFromPrincipal" | "zookeeper.kerberos.removeRealmFromPrincipal" => {
                self.kerberos_remove_realm = parse_bool(value).map_err(|e| bad(&e))?
            }
            // SASL is served whenever a JAAS Server section is given.
            _ if key.starts_with("authProvider.") => {}
            "sslQuorum" | "zookeeper.sslQuorum" => {
                self.ssl_quorum = parse_bool(value).map_err(|e| bad(&e))?
            }
            "portUnification" | "zookeeper.portUnification" => {
                self.quorum_port_unification = parse_bool(value).map_err(|e| bad(&e))?
            }
            "quorum.auth.enableSasl" => {
                self.quorum_sasl.enable = parse_bool(value).map_err(|e| bad(&e))?
            }
            "quorum.auth.learnerRequireSasl" => {
                self.quorum_sasl.learner_require = parse_bool(value).map_err(|e| bad(&e))?
            }
            "quorum.auth.serverRequireSasl" => {
                self.quorum_sasl.server_require = parse_bool(value).map_err(|e| bad(&e))?
            }
            "quorum.auth.learner.saslLoginContext" => {
                self.quorum_sasl.learner_context = value.to_string()
            }
            "quorum.auth.server.saslLoginContext" => {
                self.quorum_sasl.server_context = value.to_string()
            }
            "quorum.auth.kerberos.servicePrincipal" => {
                stoa_core::sasl::quorum_kerberos::check_service_principal(value)
                    .map_err(|e| bad(&e))?;
                self.quorum_sasl.kerberos_service_principal = value.to_string()
            }
            "readonlymode.enabled" | "zookeeper.readonlymode.enabled" => {
                self.read_only_enabled = parse_bool(value).map_err(|e| bad(&e))?
            }
            "peerType" => {
                self.observer = match value {
                    "observer" => true,
                    "participant" => false,
                    _ => return Err(bad("expected participant or observer")),
                }
            }
            _ => return Ok(Some(format!("unknown key {key} ignored"))),
        }
        Ok(None)
    }
}

fn parse_positive<T: std::str::FromStr + PartialOrd + Default>(value: &str) -> Result<T, String> {
    match value.parse::<T>() {
        Ok(n) if n > T::default() => Ok(n),
        _ => Err("expected a positive integer".into()),
    }
}

impl ServerConfig {
    /// Plain clients are served unless only `secureClientPort` is set.
    pub fn serves_plain_clients(&self) -> bool {
        self.client_port_set || self.secure_client_port.is_none()
    }

    /// The AdminServer's HTTPS settings, when it serves HTTPS: the
    /// `ssl.quorum.*` stores as ZooKeeper's, else the clients' `ssl.*`.
    pub fn admin_tls(&self) -> Option<crate::tls::TlsSettings> {
        if !self.admin_force_https && !self.admin_port_unification {
            return None;
        }
        let mut tls = match self.quorum_tls.key_store.location {
            Some(_) => self.quorum_tls.clone(),
            None => self.tls.clone(),
        };
        tls.client_auth = if self.admin_need_client_auth {
            crate::tls::ClientAuth::Need
        } else {
            crate::tls::ClientAuth::None
        };
        Some(tls)
    }

    /// One `ssl.*` or `ssl.quorum.*` key (ZooKeeper's X509Util names).
    fn set_ssl(&mut self, key: &str, value: &str) -> Result<Option<String>, ConfigError> {
        let bad = |why: &str| ConfigError(format!("{key}={value}: {why}"));
        let rest = key.strip_prefix("ssl.").unwrap_or(key);
        let (tls, rest) = match rest.strip_prefix("quorum.") {
            Some(rest) => (&mut self.quorum_tls, rest),
            None => (&mut self.tls, rest),
        };
        let (store, field) = if let Some(field) = rest.strip_prefix("keyStore.") {
            (Some(&mut tls.key_store), field)
        } else if let Some(field) = rest.strip_prefix("trustStore.") {
            (Some(&mut tls.trust_store), field)
        } else {
            (None, rest)
        };
        match (store, field) {
            (Some(store), "location") => store.location = Some(PathBuf::from(value)),
            (Some(store), "password") => store.password = value.to_string(),
            (Some(store), "passwordPath") => {
                let password = std::fs::read_to_string(value)
                    .map_err(|e| bad(&format!("cannot read the password file: {e}")))?;
                store.password = password.trim_end_matches(['\n', '\r']).to_string();
            }
            (Some(store), "type") => store.kind = Some(value.to_string()),
            (None, "clientAuth") => {
                tls.client_auth = crate::tls::parse_client_auth(value).map_err(|e| bad(&e))?
            }
            (None, "enabledProtocols") => tls.protocols = comma_list(value),
            (None, "ciphersuites") => tls.cipher_suites = comma_list(value),
            (None, "hostnameVerification") => {
                tls.hostname_verification = parse_bool(value).map_err(|e| bad(&e))?
            }
            // The SSLContext protocol and the host name check of a client's
            // certificate: rustls picks the version from enabledProtocols
            // and checks a client's chain, not its host name.
            (None, "protocol" | "clientHostnameVerification") => {}
            _ => return Ok(Some(format!("unknown key {key} ignored"))),
        }
        Ok(None)
    }
}

/// The non-empty items of a comma-separated value, trimmed.
fn comma_list(value: &str) -> Vec<String> {
    (value.split(','))
        .map(|item| item.trim().to_string())
        .filter(|item| !item.is_empty())
        .collect()
}

/// The most I/O threads `io.threads` takes.
pub const IO_THREADS_MAX: u32 = 64;

/// `io.threads=auto`: none below 4 cores, where a hand-off to another
/// thread costs more than the socket calls it moves (docs/performance.md);
/// above, a quarter of the cores, at most 4.
pub fn io_threads_auto() -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    if cores < 4 {
        0
    } else {
        (cores / 4).min(4)
    }
}

/// `N` (0 to `IO_THREADS_MAX`) or `auto`.
pub fn parse_io_threads(value: &str) -> Result<u32, String> {
    if value == "auto" {
        return Ok(io_threads_auto());
    }
    match value.parse::<u32>() {
        Ok(n) if n <= IO_THREADS_MAX => Ok(n),
        _ => Err(format!(
            "expected auto or a number of I/O threads from 0 to {IO_THREADS_MAX}"
        )),
    }
}

/// The longest `partition.pollMicros`: a thread that polls longer might as
/// well never park.
pub const POLL_MICROS_MAX: u32 = 10_000;

/// `partition.threads`: `N` (0 to `PARTITIONS_MAX`) or `auto` (None).
pub fn parse_partition_threads(value: &str) -> Result<Option<u32>, String> {
    let max = stoa_core::placement::PARTITIONS_MAX;
    if value == "auto" {
        return Ok(None);
    }
    match value.parse::<u32>() {
        Ok(n) if n <= max => Ok(Some(n)),
        _ => Err(format!(
            "expected auto or a number of threads from 0 to {max}"
        )),
    }
}

/// The worker threads a server of `partitions` partitions lends them to:
/// the engine's thread applies one partition's share itself, so at most
/// one fewer than the partitions. `auto` takes none below 4 cores, where
/// the engine's thread, the WAL writer and the clients already share the
/// cores, else one per further partition the cores can carry.
pub fn partition_threads(setting: Option<u32>, partitions: u32) -> u32 {
    let most = partitions.saturating_sub(1);
    match setting {
        Some(n) => n.min(most),
        None => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
            if cores < 4 {
                0
            } else {
                most.min(cores - 1)
            }
        }
    }
}

/// `N` (1 to `PARTITIONS_MAX`) or `auto`: the cores this process may use.
pub fn parse_partitions(value: &str) -> Result<u32, String> {
    let max = stoa_core::placement::PARTITIONS_MAX;
    if value == "auto" {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        return Ok(u32::try_from(cores).unwrap_or(max).clamp(1, max));
    }
    match value.parse::<u32>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected auto or a number of partitions from 1 to {max}"
        )),
    }
}

fn parse_bool(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Ok(true),
        "false" | "no" | "0" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_typical_zoo_cfg_and_warns_on_unknown_keys() {
        let dir = std::env::temp_dir().join(format!("stoa-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("zoo.cfg");
        std::fs::write(
            &path,
            "# comment\ntickTime=200\ndataDir=/tmp/x\nclientPort=3000\ninitLimit=5\nfoo.bar=1\n\
             minSessionTimeout=400\n4lw.commands.whitelist=ruok, srvr\n",
        )
        .unwrap();
        let (cfg, warnings) = ServerConfig::from_file(&path).unwrap();
        assert_eq!(cfg.tick_ms, 200);
        assert_eq!(cfg.client_port, 3000);
        assert_eq!(cfg.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(cfg.session_timeout_bounds_ms(), (400, 4000));
        assert!(cfg.four_letter_allowed("ruok") && !cfg.four_letter_allowed("dump"));
        // initLimit (in ZooKeeper's own template) passes quietly.
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("foo.bar"));
    }

    #[test]
    fn server_lines_make_an_ensemble_and_a_lone_line_stays_standalone() {
        let mut cfg = ServerConfig::default();
        cfg.set("server.1", "127.0.0.1:2888:3888").unwrap();
        assert_eq!(cfg.ensemble().unwrap(), None);
        cfg.set("server.2", "127.0.0.2:2888:3888;2181").unwrap();
        cfg.set("server.3", "127.0.0.3:2888:3888:observer").unwrap();
        let e = cfg.ensemble().unwrap().unwrap();
        assert_eq!(
            (e.voters.clone(), e.learners.clone(), e.me.id),
            (vec![1, 2], vec![3], 1)
        );
        cfg.server_id = 9;
        assert!(cfg.ensemble().unwrap_err().0.contains("no server.9 line"));
        assert!(cfg.set("server.4", "nonsense").is_err());
        assert!(cfg.set("peerType", "observer").is_ok() && cfg.observer);
    }

    #[test]
    fn rejects_bad_values_with_the_key_in_the_message() {
        let mut cfg = ServerConfig::default();
        let err = cfg.set("tickTime", "-3").unwrap_err();
        assert!(err.0.contains("tickTime"), "{err}");
        assert!(cfg.set("clientPort", "99999").is_err());
    }

    #[test]
    fn kerberos_name_keys_are_zookeepers_with_or_without_its_prefix() {
        let mut cfg = ServerConfig::default();
        assert!(!cfg.kerberos_remove_host && !cfg.kerberos_remove_realm);
        assert_eq!(
            cfg.set("kerberos.removeHostFromPrincipal", "true"),
            Ok(None)
        );
        cfg.set("zookeeper.kerberos.removeRealmFromPrincipal", "true")
            .unwrap();
        assert!(cfg.kerberos_remove_host && cfg.kerberos_remove_realm);
        let err = cfg
            .set("kerberos.removeRealmFromPrincipal", "maybe")
            .unwrap_err();
        assert!(err.0.contains("kerberos.removeRealmFromPrincipal"), "{err}");
    }

    #[test]
    fn the_quorum_kerberos_service_principal_defaults_to_zookeepers() {
        let mut cfg = ServerConfig::default();
        assert_eq!(
            cfg.quorum_sasl.kerberos_service_principal,
            "zkquorum/localhost"
        );
        cfg.set("quorum.auth.kerberos.servicePrincipal", "zkquorum/_HOST")
            .unwrap();
        assert_eq!(cfg.quorum_sasl.kerberos_service_principal, "zkquorum/_HOST");
        let err = cfg
            .set("quorum.auth.kerberos.servicePrincipal", "zkquorum")
            .unwrap_err();
        assert!(
            err.0.contains("quorum.auth.kerberos.servicePrincipal")
                && err.0.contains("not service/host"),
            "{err}"
        );
    }

    #[test]
    fn partition_threads_are_a_count_or_auto_below_the_partitions() {
        let mut cfg = ServerConfig::default();
        assert_eq!(cfg.partition_threads, None);
        cfg.set("partition.threads", "3").unwrap();
        assert_eq!(cfg.partition_threads, Some(3));
        assert_eq!(partition_threads(cfg.partition_threads, 8), 3);
        assert_eq!(partition_threads(cfg.partition_threads, 2), 1);
        assert_eq!(partition_threads(cfg.partition_threads, 1), 0);
        cfg.set("partition.threads", "auto").unwrap();
        assert_eq!(cfg.partition_threads, None);
        assert!(partition_threads(None, 4) <= 3);
        assert_eq!(partition_threads(None, 1), 0);
        for bad in ["-1", "x", "2000"] {
            let err = cfg.set("partition.threads", bad).unwrap_err();
            assert!(err.0.contains("partition.threads"), "{err}");
        }
    }

    #[test]
    fn partition_poll_is_bounded_microseconds() {
        let mut cfg = ServerConfig::default();
        assert_eq!(cfg.partition_poll_micros, 0);
        cfg.set("partition.pollMicros", "50").unwrap();
        assert_eq!(cfg.partition_poll_micros, 50);
        cfg.set("partition.pollMicros", &POLL_MICROS_MAX.to_string())
            .unwrap();
        for bad in ["-1", "10001", "50us", ""] {
            let err = cfg.set("partition.pollMicros", bad).unwrap_err();
            assert!(err.0.contains("partition.pollMicros"), "{err}");
        }
    }

    #[test]
    fn io_threads_are_a_count_or_auto() {
        let mut cfg = ServerConfig::default();
        assert_eq!(cfg.io_threads, 0);
        cfg.set("io.threads", "0").unwrap();
        assert_eq!(cfg.io_threads, 0);
        cfg.set("io.threads", "3").unwrap();
        assert_eq!(cfg.io_threads, 3);
        cfg.set("io.threads", "auto").unwrap();
        assert!(cfg.io_threads <= 4);
        for bad in ["-1", "65", "many", ""] {
            let err = cfg.set("io.threads", bad).unwrap_err();
            assert!(err.0.contains("io.threads"), "{err}");
        }
    }

    #[test]
    fn partitions_are_a_count_or_auto() {
        // Proves the key takes 1..=PARTITIONS_MAX or auto (at least one),
        // and refuses anything else naming the key.
        let mut cfg = ServerConfig::default();
        assert_eq!(cfg.partitions, 1);
        cfg.set("partitions", "4").unwrap();
        assert_eq!(cfg.partitions, 4);
        cfg.set("partitions", "auto").unwrap();
        assert!(cfg.partitions >= 1);
        for bad in ["0", "1025", "-1", "two", ""] {
            let err = cfg.set("partitions", bad).unwrap_err();
            assert!(err.0.contains("partitions"), "{err}");
        }
    }
}
