//! The partition thread: a current-thread runtime that hosts the client
//! listener, the connection and peer tasks and the engine loop around the
//! node driver (`stoa_core::node`). The engine, the tree, sessions and
//! watches are owned here alone; the WAL writer and the snapshot writer are
//! the long-lived other threads, reached by channels (the file log starts
//! short helper threads to zero and delete segments, and recovery reads the
//! WAL on one while the snapshot loads).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustc_hash::FxHashMap;
use std::collections::HashMap;
use stoa_core::ensemble::Member;
use stoa_core::node::{
    coalesce_snapshot_tasks, run_snapshot_task, write_snapshot, LogSink, Node, SnapshotDone,
    SnapshotSink, SnapshotSource, SnapshotTask, Transport,
};
use stoa_proto::frame::OutgoingFrame;
use stoa_wal::{Record, WalWriter};
use tokio::net::TcpListener;

use stoa_core::admin::AdminAnswer;
use tokio::sync::{mpsc, oneshot};

use crate::config::ServerConfig;
use crate::engine::forward::EngineMessage;
use crate::engine::{Engine, EngineConfig, Input};
use crate::net::{accept_loop, ConnThreads, ConnWriter, NetEvent};
use crate::peer::{PeerMessage, PeerNetwork};
use crate::storage::{self, FileSnapshotStore};
use crate::watch::ConnId;

/// Engine timer period: raft ticks, session expiry checks.
const TICK_MS: u64 = 50;
/// Inputs handled before the engine's output is flushed, so one busy
/// connection cannot delay everyone's replies.
const BATCH_INPUTS_MAX: usize = 1024;
/// Connection events queued toward the engine before readers wait.
const NET_QUEUE_EVENTS_MAX: usize = 8192;
/// Peer messages queued toward the engine before peer readers wait.
const PEER_INBOUND_MESSAGES_MAX: usize = 8192;

pub fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

struct ConnHandle {
    writer: ConnWriter,
    reader: tokio::task::AbortHandle,
    ip: IpAddr,
}

pub fn engine_config(config: &ServerConfig) -> EngineConfig {
    let (min, max) = config.session_timeout_bounds_ms();
    let conf_text = format!(
        "clientPort={}\nsecureClientPort={}\ndataDir={}\ndataDirSize=0\ndataLogDir={}\ndataLogSize=0\ntickTime={}\nmaxClientCnxns={}\nminSessionTimeout={}\nmaxSessionTimeout={}\nclientPortListenBacklog=-1\nserverId={}\n",
        config.client_port,
        config.secure_client_port.map_or(-1, i32::from),
        config.data_dir.display(),
        config.data_log_dir.as_ref().unwrap_or(&config.data_dir).display(),
        config.tick_ms,
        config.max_client_cnxns,
        min,
        max,
        config.server_id
    );
    EngineConfig {
        server_id: config.server_id,
        partitions: config.partitions,
        partition_groups: config.partition_groups.clone(),
        partition_auto: config.partition_auto,
        balance_interval_ms: (config.partition_balance_interval_ms > 0)
            .then_some(config.partition_balance_interval_ms),
        min_session_timeout_ms: min,
        max_session_timeout_ms: max,
        ttl_enabled: config.extended_types_enabled,
        container_check_interval_ms: config.container_check_interval_ms,
        super_digest: config.super_digest.clone(),
        snap_count: config.snap_count,
        read_only_enabled: config.read_only_enabled,
        voters: vec![config.server_id],
        learners: Vec::new(),
        members: Vec::new(),
        reconfig_enabled: config.reconfig_enabled,
        max_frame_bytes: config.max_frame_bytes,
        four_letter_whitelist: config.four_letter_whitelist.clone(),
        conf_text,
        host_name: std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into()),
        working_dir: std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
        fixed_election_ticks: None,
        zxid_counter_limit: None,
        sasl_users: Vec::new(),
        gssapi: None,
        enforce_auth_schemes: config
            .enforce_auth_enabled
            .then(|| config.enforce_auth_schemes.clone()),
        nonce_seed: crate::random_u64(),
        apply_by_partition: config.partition_owned && config.partitions > 1,
        apply_lag_seed: None,
        owned_threads_seed: None,
        // On the I/O threads each connection's writer encodes its replies.
        replies_encoded_by_writers: config.io_threads > 0,
    }
}

fn admin_site(
    config: &ServerConfig,
    ensemble: &Option<crate::ensemble::Ensemble>,
) -> crate::admin::AdminSite {
    crate::admin::AdminSite {
        address: SocketAddr::new(config.admin_address, config.admin_port),
        command_url: config.admin_command_url.clone(),
        data_dir: config.data_dir.clone(),
        log_dir: config.wal_dir(),
        initial_configuration: ensemble
            .is_none()
            .then(|| config.initial_configuration.clone())
            .flatten(),
        host_name: std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into()),
        transfers: crate::admin_transfer::TransferSettings::new(
            config.admin_snapshot_enabled,
            config.admin_restore_enabled,
            Duration::from_millis(config.admin_rate_limit_interval_ms),
            config.partitions as usize,
            !config.partition_groups.is_empty(),
        ),
    }
}

/// Recovers, then serves until a fatal error or a shutdown signal.
pub fn run(mut config: ServerConfig) -> Result<(), String> {
    if let Some(id) = crate::ensemble::read_myid(&config.data_dir).map_err(|e| e.to_string())? {
        config.server_id = id;
    }
    let ensemble = config.ensemble().map_err(|e| e.to_string())?;
    if config.partitions > 1 && config.reconfig_enabled {
        // A reconfig changes partition 0's raft configuration only so far.
        return Err(format!(
            "reconfigEnabled=true needs partitions=1: reconfiguring a server of {} partitions is \
             not supported yet",
            config.partitions
        ));
    }
    let (recovered, log) =
        storage::recover(&config.snapshot_dir(), &config.wal_dir(), config.partitions)?;
    crate::memory::return_free_memory();
    let mut engine_cfg = engine_config(&config);
    // Read once: clients' SASL and members' both come from it.
    let jaas = match &config.jaas_login_config {
        Some(path) => Some((
            path.as_path(),
            std::fs::read_to_string(path)
                .map_err(|e| format!("jaasLoginConfig {}: {e}", path.display()))?,
        )),
        None => None,
    };
    if let Some((path, text)) = &jaas {
        // A file for members' SASL alone may have no Server section.
        if !config.quorum_sasl.enable || crate::jaas::has_section(text, "Server") {
            let logins = crate::jaas::server_logins(text)
                .map_err(|e| format!("jaasLoginConfig {}: {e}", path.display()))?;
            engine_cfg.sasl_users = logins.digest_users;
            if !engine_cfg.sasl_users.is_empty() {
                log::info!(
                    "SASL DIGEST-MD5 for {} user(s) from {}",
                    engine_cfg.sasl_users.len(),
                    path.display()
                );
            }
            if let Some(login) = logins.kerberos {
                engine_cfg.gssapi = Some(
                    gssapi_service(&config, &login)
                        .map_err(|e| format!("jaasLoginConfig {}: {e}", path.display()))?,
                );
            }
        }
    }
    // Members' SASL, checked only where there are members (as before).
    let peer_sasl = match &ensemble {
        Some(e) => quorum_sasl(
            &config,
            jaas.as_ref().map(|(p, t)| (*p, t.as_str())),
            &e.members,
        )?,
        None => None,
    };
    if config.enforce_auth_enabled && config.enforce_auth_schemes.is_empty() {
        return Err("enforce.auth.enabled=true needs enforce.auth.schemes (e.g. sasl)".into());
    }
    if let Some(e) = &ensemble {
        engine_cfg.voters = e.voters.clone();
        engine_cfg.learners = e.learners.clone();
        engine_cfg.members = e.members.clone();
        log::info!(
            "server {} of an ensemble: participants {:?}, observers {:?}",
            e.me.id,
            e.voters,
            e.learners
        );
    }
    let mut engine = Engine::new(engine_cfg, recovered, wall_clock_ms())?;
    let threads = crate::config::partition_threads(config.partition_threads, config.partitions);
    if threads > 0 {
        let pool = crate::partition_workers::PartitionPool::start(threads)?;
        engine.lend_partitions(Box::new(pool));
        log::info!("partitions lent to {threads} thread(s) beside the engine's");
    }
    // Woken when a partition's thread has finished with its core.
    let returned = Arc::new(tokio::sync::Notify::new());
    if config.partition_owned && config.partitions > 1 {
        let poll = std::time::Duration::from_micros(config.partition_poll_micros.into());
        let threads = crate::partition_workers::OwnedThreads::start(
            config.partitions,
            returned.clone(),
            poll,
        )?;
        engine.own_partitions(Box::new(threads));
        log::info!(
            "each of the {} partitions owns a thread between turns, which looks for its next \
             job for {} µs before it parks",
            config.partitions,
            config.partition_poll_micros
        );
    }
    // Outlives the engine loop: dropped after `block_on` returns.
    let io_pool = start_io_threads(config.io_threads)?;
    let conn_threads = match &io_pool {
        Some(pool) => ConnThreads::Pool(pool.handle().clone()),
        None => ConnThreads::Partition,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start runtime: {e}"))?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let (durable_tx, durable_rx) = mpsc::unbounded_channel::<Result<u64, String>>();
        let wal = WalWriter::spawn(log, move |token, result| {
            let _ = durable_tx.send(result.map(|()| token).map_err(|e| e.to_string()));
        })
        .map_err(|e| format!("cannot start WAL writer: {e}"))?;
        let stores = (0..config.partitions)
            .map(|p| {
                let dir = storage::partition_snapshot_dir(&config.snapshot_dir(), p);
                FileSnapshotStore::open(&dir)
            })
            .collect::<Result<Vec<_>, String>>()?;
        let (snap_tx, snap_done_rx) = spawn_snapshot_writer(stores.clone());
        let (peer_tx, peer_rx) = mpsc::channel(PEER_INBOUND_MESSAGES_MAX);
        let peers = match &ensemble {
            None => None,
            Some(e) => {
                let listen = crate::ensemble::quorum_address(&e.me).map_err(|e| e.to_string())?;
                let mut others = Vec::new();
                for m in e.members.iter().filter(|m| m.id != e.me.id) {
                    others.push((
                        m.id,
                        crate::ensemble::quorum_address(m).map_err(|e| e.to_string())?,
                    ));
                }
                let tls = if config.ssl_quorum || config.quorum_port_unification {
                    Some(quorum_tls(&config)?)
                } else {
                    None
                };
                let network = PeerNetwork::start(e.me.id, listen, &others, peer_tx, tls, peer_sasl)
                    .await
                    .map_err(|e| e.to_string())?;
                log::info!("peers: listening on {listen}, dialing {others:?}");
                Some(network)
            }
        };
        let mut node = Node::new(
            engine,
            WalPort(wal),
            FileSnapshots {
                stores,
                tasks: snap_tx,
            },
        );
        let mut sockets = Sockets {
            conns: FxHashMap::default(),
            max_client_cnxns: config.max_client_cnxns,
            peers,
        };

        // Standalone replays what the WAL holds before anyone can connect:
        // the tree must be what clients were acknowledged. An ensemble member
        // catches up with its peers while serving (clients that saw a newer
        // zxid are refused until it has).
        let mut durable_rx = durable_rx;
        flush(&mut node, &mut sockets)?;
        while ensemble.is_none() && !node.engine().caught_up() {
            let token = durable_rx.recv().await.ok_or("WAL writer stopped")??;
            node.on_durable(token);
            flush(&mut node, &mut sockets)?;
        }

        let (net_tx, net_rx) = mpsc::channel(NET_QUEUE_EVENTS_MAX);
        let ids: crate::net::ConnIds = std::rc::Rc::new(std::cell::Cell::new(1));
        if config.serves_plain_clients() {
            let address = SocketAddr::new(config.client_address, config.client_port);
            let listener = TcpListener::bind(address)
                .await
                .map_err(|e| format!("cannot listen on {address}: {e}"))?;
            log::info!(
                "serving ZooKeeper clients on {} (data in {})",
                listener.local_addr().map_err(|e| e.to_string())?,
                config.data_dir.display()
            );
            let max_frame = config.max_frame_bytes;
            let ids = ids.clone();
            tokio::task::spawn_local(accept_loop(
                listener,
                net_tx.clone(),
                max_frame,
                ids,
                conn_threads.clone(),
            ));
        }
        if let Some(port) = config.secure_client_port {
            let tls = crate::tls::ReloadingConfig::new(config.tls.clone())?;
            let ip = config
                .secure_client_address
                .unwrap_or(config.client_address);
            let address = SocketAddr::new(ip, port);
            let listener = TcpListener::bind(address)
                .await
                .map_err(|e| format!("cannot listen on {address} (secureClientPort): {e}"))?;
            log::info!(
                "serving ZooKeeper clients over TLS on {} (ssl.clientAuth={:?})",
                listener.local_addr().map_err(|e| e.to_string())?,
                config.tls.client_auth
            );
            let max_frame = config.max_frame_bytes;
            tokio::task::spawn_local(crate::net::tls_accept_loop(
                listener,
                tls,
                net_tx.clone(),
                max_frame,
                ids,
                conn_threads.clone(),
            ));
        }
        drop(net_tx);
        let (scrape_tx, scrape_rx) = mpsc::channel(16);
        if config.metrics_port != 0 {
            let ip = config.metrics_address.unwrap_or(config.client_address);
            tokio::task::spawn_local(crate::metrics::serve(
                SocketAddr::new(ip, config.metrics_port),
                scrape_tx,
            ));
        }
        let (admin_tx, admin_rx) = mpsc::channel(16);
        if config.admin_enabled {
            let transport = match config.admin_tls() {
                None => crate::admin::AdminTransport::Http,
                Some(tls) if config.admin_force_https => crate::admin::AdminTransport::Https(tls),
                Some(tls) => crate::admin::AdminTransport::Both(tls),
            };
            let site = admin_site(&config, &ensemble);
            tokio::task::spawn_local(crate::admin::serve(site, admin_tx, transport));
        }
        let receivers = Receivers {
            net: net_rx,
            durable: durable_rx,
            snapshots: snap_done_rx,
            scrapes: scrape_rx,
            admin: admin_rx,
            peers: peer_rx,
            returned,
        };
        let result = serve(&mut node, &mut sockets, receivers).await;
        let (engine, wal, _) = node.into_parts();
        wal.0.shutdown();
        // Freeing a large tree node by node takes seconds (3 s at a million
        // znodes); the process is about to exit and the OS reclaims it at once.
        std::mem::forget(engine);
        result
    })
}

/// The pool of threads the client connections run on (`io.threads`);
/// none for 0, where they run on the engine's thread.
fn start_io_threads(threads: u32) -> Result<Option<tokio::runtime::Runtime>, String> {
    if threads == 0 {
        return Ok(None);
    }
    let pool = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads as usize)
        .thread_name("stoa-io")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start {threads} I/O thread(s): {e}"))?;
    log::info!("client connections on {threads} I/O thread(s)");
    Ok(Some(pool))
}

/// `sslQuorum=true`: TLS both ways between members, with the
/// `ssl.quorum.*` stores. `portUnification=true`: the quorum port takes
/// TLS and plain connections, and this member dials with TLS only if
/// `sslQuorum` is set too.
fn quorum_tls(config: &ServerConfig) -> Result<crate::peer::PeerTls, String> {
    let what = if config.ssl_quorum {
        "sslQuorum"
    } else {
        "portUnification"
    };
    let tls = &config.quorum_tls;
    if tls.key_store.location.is_none() || tls.trust_store.location.is_none() {
        return Err(format!(
            "{what}=true needs ssl.quorum.keyStore.location and ssl.quorum.trustStore.location"
        ));
    }
    let server = crate::tls::server_config(tls).map_err(|e| format!("{what}: {e}"))?;
    let client = crate::tls::client_config(tls).map_err(|e| format!("{what}: {e}"))?;
    Ok(crate::peer::PeerTls {
        acceptor: tokio_rustls::TlsAcceptor::from(server),
        connector: tokio_rustls::TlsConnector::from(client),
        dial_tls: config.ssl_quorum,
        accept_plain: config.quorum_port_unification,
    })
}

/// SASL GSSAPI for clients: the JAAS Server section's Krb5LoginModule key,
/// from its keytab, through MIT Kerberos.
fn gssapi_service(
    config: &ServerConfig,
    login: &crate::jaas::KerberosLogin,
) -> Result<stoa_core::sasl::GssapiService, String> {
    let acceptor = crate::gssapi::KerberosAcceptor::new(&login.principal, &login.keytab)?;
    let names = stoa_core::sasl::kerberos_name::KerberosNames {
        default_realm: crate::gssapi::default_realm(),
        remove_host: config.kerberos_remove_host,
        remove_realm: config.kerberos_remove_realm,
    };
    log::info!(
        "SASL GSSAPI (Kerberos) as {} from keytab {} (default realm {:?}, \
         kerberos.removeHostFromPrincipal={}, kerberos.removeRealmFromPrincipal={})",
        login.principal,
        login.keytab.display(),
        names.default_realm,
        names.remove_host,
        names.remove_realm
    );
    Ok(stoa_core::sasl::GssapiService {
        acceptor: std::sync::Arc::new(acceptor),
        names,
    })
}

/// `quorum.auth.enableSasl=true`: the JAAS file's (path, text) learner and
/// server sections, as ZooKeeper checks the keys against each other;
/// `members` are the `server.N` lines.
fn quorum_sasl(
    config: &ServerConfig,
    jaas: Option<(&std::path::Path, &str)>,
    members: &[stoa_core::ensemble::Member],
) -> Result<Option<crate::peer_sasl::PeerSasl>, String> {
    let settings = &config.quorum_sasl;
    if !settings.enable {
        if settings.learner_require || settings.server_require {
            return Err(
                "quorum.auth.enableSasl is disabled, so quorum.auth.learnerRequireSasl \
                        and quorum.auth.serverRequireSasl cannot be enabled"
                    .into(),
            );
        }
        return Ok(None);
    }
    if settings.server_require && !settings.learner_require {
        return Err("quorum.auth.learnerRequireSasl is disabled, so \
                    quorum.auth.serverRequireSasl cannot be enabled"
            .into());
    }
    let Some((path, text)) = jaas else {
        return Err(
            "quorum.auth.enableSasl=true needs jaasLoginConfig (a JAAS file with the \
                    QuorumServer and QuorumLearner sections)"
                .into(),
        );
    };
    let in_file = |e: String| format!("jaasLoginConfig {}: {e}", path.display());
    Ok(Some(crate::peer_sasl::PeerSasl {
        learner: quorum_learner_login(settings, text, members).map_err(in_file)?,
        server: quorum_server_login(settings, text, members).map_err(in_file)?,
        learner_require: settings.learner_require,
        server_require: settings.server_require,
    }))
}

/// The `QuorumLearner` section's login: with Kerberos, this member's
/// ticket-granting ticket now (as ZooKeeper's learner logs in at start,
/// so a missing library, principal or key stops the member here).
fn quorum_learner_login(
    settings: &crate::config::QuorumSaslSettings,
    text: &str,
    members: &[stoa_core::ensemble::Member],
) -> Result<crate::peer_sasl::LearnerLogin, String> {
    use crate::peer_sasl::{KerberosLearner, LearnerLogin};
    let section = &settings.learner_context;
    let Some(login) = crate::jaas::section_kerberos_login(text, section)? else {
        let (user, password) = crate::jaas::section_credentials(text, section)?;
        return Ok(LearnerLogin::Digest(user, password));
    };
    let initiator = crate::gssapi::KerberosInitiator::new(&login.principal, &login.keytab)
        .map_err(|e| format!("the {section} section: {e}"))?;
    let realm = match stoa_core::sasl::quorum_kerberos::realm_of(&login.principal) {
        Some(realm) => Some(realm.to_string()),
        None => crate::gssapi::default_realm(),
    };
    log::info!(
        "quorum SASL: dialling members with Kerberos as {} from keytab {}, asking tickets \
         for {} (quorum.auth.kerberos.servicePrincipal)",
        login.principal,
        login.keytab.display(),
        settings.kerberos_service_principal
    );
    Ok(LearnerLogin::Kerberos(KerberosLearner {
        initiator: std::sync::Arc::new(initiator),
        service_principal: settings.kerberos_service_principal.clone(),
        realm,
        member_hosts: members.iter().map(|m| (m.id, m.host.clone())).collect(),
    }))
}

/// The `QuorumServer` section's login: with Kerberos, the service key to
/// accept members' tickets with, checked with the KDC now (as ZooKeeper's
/// server section logs in at start).
fn quorum_server_login(
    settings: &crate::config::QuorumSaslSettings,
    text: &str,
    members: &[stoa_core::ensemble::Member],
) -> Result<crate::peer_sasl::ServerLogin, String> {
    use crate::peer_sasl::{KerberosServer, ServerLogin};
    let section = &settings.server_context;
    let Some(login) = crate::jaas::section_kerberos_login(text, section)? else {
        return Ok(ServerLogin::Digest(crate::jaas::section_digest_users(
            text, section,
        )?));
    };
    let in_section = |e: String| format!("the {section} section: {e}");
    let acceptor = crate::gssapi::KerberosAcceptor::new(&login.principal, &login.keytab)
        .map_err(in_section)?;
    // A key the keytab holds may still be an old one: a ticket of the
    // principal's own, got with it, proves it is the KDC's.
    drop(
        crate::gssapi::KerberosInitiator::new(&login.principal, &login.keytab)
            .map_err(in_section)?,
    );
    let member_hosts: Vec<String> = members.iter().map(|m| m.host.clone()).collect();
    log::info!(
        "quorum SASL: accepting members' Kerberos tickets for {} from keytab {}; a learner \
         principal NAME/HOST@REALM must name one of the hosts {member_hosts:?}",
        login.principal,
        login.keytab.display()
    );
    Ok(ServerLogin::Kerberos(KerberosServer {
        acceptor: std::sync::Arc::new(acceptor),
        member_hosts,
    }))
}

/// The node as this runtime builds it: the WAL writer thread over the
/// file log, the snapshot thread over the snapshot directory.
type ServerNode = Node<WalPort, FileSnapshots>;

/// The WAL writer thread as the node's log.
struct WalPort(WalWriter<stoa_wal::FileLog>);

impl LogSink for WalPort {
    fn submit(&mut self, token: u64, records: Vec<Record>) -> Result<(), String> {
        self.0.submit(token, records).map_err(|e| e.to_string())
    }

    fn write_now(&mut self, token: u64, records: &[Record]) -> Result<bool, String> {
        self.0.write_now(token, records).map_err(|e| e.to_string())
    }
}

/// The snapshot thread as the node's snapshot writer; installed snapshots
/// are written on the partition thread (rare: a follower far behind).
struct FileSnapshots {
    /// By partition.
    stores: Vec<FileSnapshotStore>,
    tasks: std::sync::mpsc::Sender<SnapshotTask>,
}

impl SnapshotSink for FileSnapshots {
    fn install(
        &mut self,
        partition: u32,
        index: u64,
        term: u64,
        data: &[u8],
    ) -> Result<(), String> {
        let store = (self.stores.get_mut(partition as usize))
            .ok_or_else(|| format!("a snapshot of partition {partition}, which is not run here"))?;
        write_snapshot(store, index, term, SnapshotSource::Bytes(data)).map(|_| ())
    }

    fn submit(&mut self, task: SnapshotTask) {
        // A stopped snapshot thread is reported through its done channel.
        let _ = self.tasks.send(task);
    }
}

/// Client connections and the peer transport, as the node's network.
struct Sockets {
    conns: FxHashMap<ConnId, ConnHandle>,
    max_client_cnxns: u32,
    /// The ensemble's transport; `None` standalone.
    peers: Option<PeerNetwork>,
}

impl Transport for Sockets {
    fn send(&mut self, conn: ConnId, bytes: Vec<u8>) {
        if let Some(handle) = self.conns.get(&conn) {
            handle.writer.send(bytes);
        }
    }

    fn send_frames(&mut self, conn: ConnId, frames: Vec<OutgoingFrame>) {
        if let Some(handle) = self.conns.get(&conn) {
            handle.writer.send_frames(frames);
        }
    }

    fn close(&mut self, conn: ConnId) -> bool {
        let Some(handle) = self.conns.remove(&conn) else {
            return false;
        };
        handle.reader.abort();
        handle.writer.close();
        true
    }

    fn send_raft(&mut self, partition: u32, message: raft::eraftpb::Message) {
        if let Some(peers) = &self.peers {
            peers.send(message.to, PeerMessage::Raft { partition, message });
        }
    }

    fn send_engine(&mut self, to: u64, message: EngineMessage) {
        if let Some(peers) = &self.peers {
            peers.send(to, PeerMessage::Engine(message.encode()));
        }
    }

    fn set_members(&mut self, version: i64, members: &[Member]) {
        if let Some(peers) = &mut self.peers {
            peers.set_peers(version, &peer_addresses(members));
        }
    }
}

impl Sockets {
    fn on_net(&mut self, engine: &mut Engine, event: NetEvent) {
        match event {
            NetEvent::Accepted {
                conn,
                peer,
                writer,
                reader,
                client_certificate,
            } => {
                let from_ip = self.conns.values().filter(|c| c.ip == peer.ip()).count();
                if self.max_client_cnxns > 0 && from_ip >= self.max_client_cnxns as usize {
                    log::warn!(
                        "too many connections from {} - max is {}",
                        peer.ip(),
                        self.max_client_cnxns
                    );
                    reader.abort();
                    writer.close();
                    return;
                }
                self.conns.insert(
                    conn,
                    ConnHandle {
                        writer,
                        reader,
                        ip: peer.ip(),
                    },
                );
                engine.handle(Input::Accepted { conn, peer });
                if let Some(subject) = client_certificate {
                    engine.handle(Input::ClientCertificate { conn, subject });
                }
            }
            NetEvent::Frames { conn, frames } => engine.handle(Input::Requests { conn, frames }),
            NetEvent::FourLetter { conn, word } => engine.handle(Input::FourLetter { conn, word }),
            NetEvent::Closed { conn } => {
                self.conns.remove(&conn);
                engine.handle(Input::Closed { conn });
            }
        }
    }
}

/// Carries out everything the engine asked for.
fn flush(node: &mut ServerNode, sockets: &mut Sockets) -> Result<(), String> {
    let flushed = node.flush(sockets)?;
    if flushed.wrote_inline {
        copy_wal_sync_stats(node);
    }
    if flushed.memory_freed {
        let started = std::time::Instant::now();
        crate::memory::return_free_memory();
        log::info!(
            "returned freed memory to the system in {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(())
}

/// The WAL's write and sync timings (the writer's counters) into the
/// engine, for `mntr`: after each durable report and each batch the loop
/// wrote itself.
fn copy_wal_sync_stats(node: &mut ServerNode) {
    let stats = node.log().0.sync_stats();
    node.engine_mut().set_wal_sync_stats(stats);
}

/// The members' quorum addresses; one that does not resolve is left out
/// (and logged) until the membership changes again.
fn peer_addresses(members: &[Member]) -> Vec<(u64, SocketAddr)> {
    let mut out = Vec::with_capacity(members.len());
    for m in members {
        match crate::ensemble::quorum_address(m) {
            Ok(address) => out.push((m.id, address)),
            Err(e) => log::error!("{e}"),
        }
    }
    out
}

/// Everything the engine loop waits on besides its timer.
struct Receivers {
    net: mpsc::Receiver<NetEvent>,
    durable: mpsc::UnboundedReceiver<Result<u64, String>>,
    snapshots: mpsc::UnboundedReceiver<Result<SnapshotDone, String>>,
    scrapes: mpsc::Receiver<crate::metrics::ScrapeRequest>,
    admin: mpsc::Receiver<crate::admin::AdminRequest>,
    peers: mpsc::Receiver<(u64, PeerMessage)>,
    /// A partition's thread has finished with its core (`partition.owned`).
    returned: Arc<tokio::sync::Notify>,
}

async fn serve(
    node: &mut ServerNode,
    sockets: &mut Sockets,
    receivers: Receivers,
) -> Result<(), String> {
    let Receivers {
        net: mut net_rx,
        durable: mut durable_rx,
        snapshots: mut snap_done_rx,
        mut scrapes,
        admin: mut admin_rx,
        peers: mut peer_rx,
        returned,
    } = receivers;
    let mut ticker = tokio::time::interval(Duration::from_millis(TICK_MS));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut shutdown = Box::pin(shutdown_signal());
    // A leader asked to stop first hands leadership over (rolling
    // restarts): the ensemble then does not wait out an election timeout.
    let mut stopping: Option<tokio::time::Instant> = None;
    // The AdminServer's restores waiting to apply, by token.
    let mut restores: HashMap<u64, oneshot::Sender<AdminAnswer>> = HashMap::new();
    loop {
        tokio::select! {
            event = net_rx.recv() => {
                let Some(event) = event else { return Err("listener stopped".into()) };
                let engine = node.engine_mut();
                engine.set_time(wall_clock_ms());
                sockets.on_net(engine, event);
                take_queued(&mut net_rx, |event| sockets.on_net(engine, event));
            }
            durable = durable_rx.recv() => {
                let token = durable.ok_or("WAL writer stopped")??;
                node.engine_mut().set_time(wall_clock_ms());
                copy_wal_sync_stats(node);
                node.on_durable(token);
            }
            _ = ticker.tick() => {
                let engine = node.engine_mut();
                engine.set_time(wall_clock_ms());
                engine.tick();
            }
            done = snap_done_rx.recv() => {
                let done = done.ok_or("snapshot writer stopped")?;
                node.on_snapshot_done(done)?;
            }
            Some((from, message)) = peer_rx.recv() => {
                let engine = node.engine_mut();
                engine.set_time(wall_clock_ms());
                on_peer(engine, from, message);
                // Raft runs once for the whole batch: a leader's proposals
                // and acknowledgements then go out as one append per peer,
                // and a follower persists a run of appends as one job.
                take_queued(&mut peer_rx, |(from, message)| on_peer(engine, from, message));
            }
            _ = returned.notified() => {
                let engine = node.engine_mut();
                engine.set_time(wall_clock_ms());
                if !engine.take_returned() {
                    // An input took it back first: this loop's last output
                    // went out after that, and nothing changed since.
                    continue;
                }
            }
            Some(request) = admin_rx.recv() => {
                let engine = node.engine_mut();
                engine.set_time(wall_clock_ms());
                on_admin(engine, request, &mut restores);
            }
            Some(reply) = scrapes.recv() => {
                let engine = node.engine_mut();
                engine.set_time(wall_clock_ms());
                let _ = reply.send(crate::metrics::render(&crate::fourlw::mntr(&engine.monitor())));
            }
            _ = &mut shutdown, if stopping.is_none() => {
                if !node.engine_mut().transfer_leadership() {
                    log::info!("shutting down");
                    return Ok(());
                }
                stopping = Some(tokio::time::Instant::now() + LEADER_HANDOVER_WAIT);
            }
        }
        // Nothing else waits: this thread may as well sync a batch itself.
        node.set_host_idle(net_rx.is_empty() && peer_rx.is_empty());
        flush(node, sockets)?;
        for (token, answer) in node.engine_mut().take_admin_answers() {
            if let Some(reply) = restores.remove(&token) {
                let _ = reply.send(answer);
            }
        }
        if let Some(deadline) = stopping {
            // raft abandons a transfer the successor does not take up
            // within an election timeout (e.g. it is stopping too).
            let engine = node.engine();
            let settled = !engine.leads_any_group() || !engine.transferring_leadership();
            if settled || tokio::time::Instant::now() >= deadline {
                match (engine.is_leader(), engine.leader_id()) {
                    (true, _) => log::info!(
                        "shutting down as leader: no successor took over within {LEADER_HANDOVER_WAIT:?}"
                    ),
                    (false, 0) => log::info!(
                        "shutting down: leadership handed over, its successor's election under way"
                    ),
                    (false, leader) => log::info!("shutting down: server {leader} leads now"),
                }
                return Ok(());
            }
        }
    }
}

/// An AdminServer request on the engine's thread.
fn on_admin(
    engine: &mut Engine,
    request: crate::admin::AdminRequest,
    restores: &mut HashMap<u64, oneshot::Sender<AdminAnswer>>,
) {
    use crate::admin::AdminRequest;
    match request {
        AdminRequest::Call { call, reply } => {
            let _ = reply.send(engine.admin(call));
        }
        AdminRequest::Authorize {
            requested,
            authorization,
            peer,
            certificate,
            reply,
        } => {
            let who = stoa_core::admin::AdminCaller {
                authorization: authorization.as_deref(),
                peer,
                certificate: certificate.as_deref(),
            };
            let _ = reply.send(engine.admin_authorize(&requested, who));
        }
        AdminRequest::Snapshot { reply } => {
            let _ = reply.send(engine.admin_snapshot());
        }
        AdminRequest::Restore {
            token,
            zxid,
            parts,
            reply,
        } => match engine.admin_restore(token, zxid, parts) {
            Some(refused) => {
                let _ = reply.send(refused);
            }
            None => {
                restores.insert(token, reply);
            }
        },
    }
}

/// Hands `handle` what is already queued on `rx`, up to a batch (the one
/// just received counts), without waiting: the engine's output is then
/// flushed once for all of them.
fn take_queued<T>(rx: &mut mpsc::Receiver<T>, mut handle: impl FnMut(T)) {
    for _ in 1..BATCH_INPUTS_MAX {
        match rx.try_recv() {
            Ok(item) => handle(item),
            Err(_) => break,
        }
    }
}

fn on_peer(engine: &mut Engine, from: u64, message: PeerMessage) {
    match message {
        PeerMessage::Raft { partition, message } => {
            engine.handle(Input::Raft { partition, message })
        }
        PeerMessage::Engine(bytes) => match EngineMessage::decode(&bytes) {
            Ok(message) => engine.handle(Input::Peer { from, message }),
            Err(e) => log::warn!("server {from} sent a bad engine message: {e}"),
        },
        PeerMessage::Refused { membership_version } => engine.handle(Input::RefusedByPeer {
            from,
            membership_version,
        }),
        PeerMessage::Knocked => engine.handle(Input::Knocked { from }),
        PeerMessage::Lost => engine.handle(Input::PeerLost { from }),
    }
}

/// How long a stopping leader waits for its successor before it exits
/// anyway (the others then elect one after their timeout).
const LEADER_HANDOVER_WAIT: Duration = Duration::from_secs(3);

/// The snapshot thread: runs what the node queued, the coalescing and
/// retention rules of `stoa_core::node` over the snapshot directory.
fn spawn_snapshot_writer(
    mut stores: Vec<FileSnapshotStore>,
) -> (
    std::sync::mpsc::Sender<SnapshotTask>,
    mpsc::UnboundedReceiver<Result<SnapshotDone, String>>,
) {
    let (job_tx, job_rx) = std::sync::mpsc::channel::<SnapshotTask>();
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let spawned = std::thread::Builder::new()
        .name("stoa-snapshot".into())
        .spawn(move || {
            while let Ok(first) = job_rx.recv() {
                let mut waiting = vec![first];
                waiting.extend(job_rx.try_iter());
                for task in coalesce_snapshot_tasks(waiting) {
                    let partition = task.partition();
                    let done = match stores.get_mut(partition as usize) {
                        Some(store) => run_snapshot_task(store, task),
                        None => Err(format!("a snapshot of partition {partition}, not run here")),
                    };
                    // Its buffers and the tree copy's unshared nodes are
                    // gone: off the partition thread, a good moment.
                    crate::memory::return_free_memory();
                    if done_tx.send(done).is_err() {
                        return;
                    }
                }
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot start snapshot writer: {e}");
    }
    (job_tx, done_rx)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
