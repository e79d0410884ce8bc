//! The partition thread: a current-thread runtime that hosts the client
//! listener, the connection tasks and the engine loop. The engine, the tree,
//! sessions and watches are owned here alone; the WAL writer and snapshot
//! writer are the only other threads, reached by channels.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustc_hash::FxHashMap;
use stoa_wal::{Record, WalWriter};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::config::ServerConfig;
use crate::engine::forward::EngineMessage;
use crate::engine::{Engine, EngineConfig, Input, Output, SnapshotJob};
use crate::net::{accept_loop, ConnWriter, NetEvent};
use crate::peer::{PeerMessage, PeerNetwork};
use crate::storage;
use crate::watch::ConnId;

/// Engine timer period: raft ticks, session expiry checks.
const TICK_MS: u64 = 50;
/// Inputs handled before the engine's output is flushed, so one busy
/// connection cannot delay everyone's replies.
const BATCH_INPUTS_MAX: usize = 1024;
/// Connection events queued toward the engine before readers wait.
const NET_QUEUE_EVENTS_MAX: usize = 8192;
const PARTITION: u32 = 0;
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

/// Maps WAL tokens back to raft ready numbers (snapshot markers share the
/// token sequence but acknowledge no ready).
#[derive(Default)]
struct WalTokens {
    next: u64,
    in_flight: VecDeque<(u64, Option<u64>)>,
}

impl WalTokens {
    fn issue(&mut self, ready_number: Option<u64>) -> u64 {
        self.next += 1;
        self.in_flight.push_back((self.next, ready_number));
        self.next
    }

    /// A ready that needs no fsync of its own: it is done when the batch
    /// in flight is (readies complete in order), or now if none is.
    fn piggyback(&mut self, ready_number: u64) -> Option<u64> {
        match self.in_flight.back_mut() {
            Some((_, number)) => {
                *number = Some(ready_number);
                None
            }
            None => Some(ready_number),
        }
    }

    /// Highest ready number made durable by `token`.
    fn durable(&mut self, token: u64) -> Option<u64> {
        let mut number = None;
        while let Some(&(t, n)) = self.in_flight.front() {
            if t > token {
                break;
            }
            self.in_flight.pop_front();
            number = n.or(number);
        }
        number
    }
}

pub fn engine_config(config: &ServerConfig) -> EngineConfig {
    let (min, max) = config.session_timeout_bounds_ms();
    let conf_text = format!(
        "clientPort={}\nsecureClientPort=-1\ndataDir={}\ndataDirSize=0\ndataLogDir={}\ndataLogSize=0\ntickTime={}\nmaxClientCnxns={}\nminSessionTimeout={}\nmaxSessionTimeout={}\nclientPortListenBacklog=-1\nserverId={}\n",
        config.client_port,
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
        partition: PARTITION,
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
    }
}

/// Recovers, then serves until a fatal error or a shutdown signal.
pub fn run(mut config: ServerConfig) -> Result<(), String> {
    if let Some(id) = crate::ensemble::read_myid(&config.data_dir).map_err(|e| e.to_string())? {
        config.server_id = id;
    }
    let ensemble = config.ensemble().map_err(|e| e.to_string())?;
    let (recovered, log) = storage::recover(&config.snapshot_dir(), &config.wal_dir(), PARTITION)?;
    crate::memory::return_free_memory();
    let mut engine_cfg = engine_config(&config);
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
        let (snap_tx, snap_done_rx) = spawn_snapshot_writer(config.snapshot_dir());
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
                let network = PeerNetwork::start(e.me.id, listen, &others, peer_tx)
                    .await
                    .map_err(|e| e.to_string())?;
                log::info!("peers: listening on {listen}, dialing {others:?}");
                Some(network)
            }
        };
        let mut shell = Shell {
            wal,
            tokens: WalTokens::default(),
            conns: FxHashMap::default(),
            snap_tx,
            snapshot_dir: config.snapshot_dir(),
            max_client_cnxns: config.max_client_cnxns,
            peers,
        };

        // Standalone replays what the WAL holds before anyone can connect:
        // the tree must be what clients were acknowledged. An ensemble member
        // catches up with its peers while serving (clients that saw a newer
        // zxid are refused until it has).
        let mut durable_rx = durable_rx;
        shell.flush(&mut engine)?;
        while ensemble.is_none() && !engine.caught_up() {
            let token = durable_rx.recv().await.ok_or("WAL writer stopped")??;
            if let Some(number) = shell.tokens.durable(token) {
                engine.handle(Input::Persisted { number });
            }
            shell.flush(&mut engine)?;
        }

        let address = SocketAddr::new(config.client_address, config.client_port);
        let listener = TcpListener::bind(address)
            .await
            .map_err(|e| format!("cannot listen on {address}: {e}"))?;
        log::info!(
            "serving ZooKeeper clients on {} (data in {})",
            listener.local_addr().map_err(|e| e.to_string())?,
            config.data_dir.display()
        );
        let (net_tx, net_rx) = mpsc::channel(NET_QUEUE_EVENTS_MAX);
        tokio::task::spawn_local(accept_loop(listener, net_tx, config.max_frame_bytes));
        let (scrape_tx, scrape_rx) = mpsc::channel(16);
        if config.metrics_port != 0 {
            let ip = config.metrics_address.unwrap_or(config.client_address);
            tokio::task::spawn_local(crate::metrics::serve(
                SocketAddr::new(ip, config.metrics_port),
                scrape_tx,
            ));
        }
        let receivers = Receivers {
            net: net_rx,
            durable: durable_rx,
            snapshots: snap_done_rx,
            scrapes: scrape_rx,
            peers: peer_rx,
        };
        let result = serve(&mut engine, &mut shell, receivers).await;
        shell.wal.shutdown();
        // Freeing a large tree node by node takes seconds (3 s at a million
        // znodes); the process is about to exit and the OS reclaims it at once.
        std::mem::forget(engine);
        result
    })
}

struct Shell {
    wal: WalWriter,
    tokens: WalTokens,
    conns: FxHashMap<ConnId, ConnHandle>,
    snap_tx: std::sync::mpsc::Sender<SnapshotTask>,
    snapshot_dir: std::path::PathBuf,
    max_client_cnxns: u32,
    /// The ensemble's transport; `None` standalone.
    peers: Option<PeerNetwork>,
}

impl Shell {
    fn on_net(&mut self, engine: &mut Engine, event: NetEvent) {
        match event {
            NetEvent::Accepted {
                conn,
                peer,
                writer,
                reader,
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
            }
            NetEvent::Frames { conn, bytes } => engine.handle(Input::Frames { conn, bytes }),
            NetEvent::FourLetter { conn, word } => engine.handle(Input::FourLetter { conn, word }),
            NetEvent::Closed { conn } => {
                self.conns.remove(&conn);
                engine.handle(Input::Closed { conn });
            }
        }
    }

    /// Carries out everything the engine asked for.
    fn flush(&mut self, engine: &mut Engine) -> Result<(), String> {
        // Acknowledging a ready that needed no fsync can make more output
        // (its committed entries); keep going until the engine is quiet.
        while let Some(number) = self.flush_once(engine)? {
            engine.handle(Input::Persisted { number });
        }
        Ok(())
    }

    /// Carries out one batch of output; returns a ready number that is
    /// already done (needed no fsync and nothing was in flight).
    fn flush_once(&mut self, engine: &mut Engine) -> Result<Option<u64>, String> {
        let mut done_now = None;
        let Output {
            sends,
            closes,
            persists,
            snapshots,
            snapshot_to_ship,
            members,
            messages,
            engine_messages,
            fatal,
            memory_freed,
        } = engine.take_output();
        if let Some(reason) = fatal {
            return Err(reason);
        }
        if memory_freed {
            let started = std::time::Instant::now();
            crate::memory::return_free_memory();
            log::info!(
                "returned freed memory to the system in {:.1} ms",
                started.elapsed().as_secs_f64() * 1e3
            );
        }
        for job in &persists {
            if let Some(s) = &job.installed {
                // Rare (a follower far behind), so written here, before the
                // WAL marker that makes recovery rely on it.
                storage::write_snapshot_bytes(&self.snapshot_dir, s.index, s.term, &s.data)?;
            }
            if !job.must_sync {
                if let Some(number) = self.tokens.piggyback(job.number) {
                    done_now = Some(number);
                }
                continue;
            }
            let records: Vec<Record> = storage::persist_job_records(PARTITION, job);
            let token = self.tokens.issue(Some(job.number));
            self.wal
                .submit(token, records)
                .map_err(|e| format!("WAL: {e}"))?;
        }
        if let (Some(peers), Some((version, members))) = (&mut self.peers, members) {
            peers.set_peers(version, &peer_addresses(&members));
        }
        if let Some(peers) = &self.peers {
            // A full queue drops the message; raft retransmits.
            for m in messages {
                peers.send(m.to, PeerMessage::Raft(m));
            }
            for (to, m) in engine_messages {
                peers.send(to, PeerMessage::Engine(m.encode()));
            }
        }
        for (conn, bytes) in sends {
            if let Some(handle) = self.conns.get(&conn) {
                handle.writer.send(bytes);
            }
        }
        for conn in closes {
            if let Some(handle) = self.conns.remove(&conn) {
                handle.reader.abort();
                handle.writer.close();
                engine.handle(Input::Closed { conn });
            }
        }
        for job in snapshots {
            let _ = self.snap_tx.send(SnapshotTask::Write(job));
        }
        if let Some(job) = snapshot_to_ship {
            let _ = self.snap_tx.send(SnapshotTask::Ship(job));
        }
        Ok(done_now)
    }
}

/// The members' quorum addresses; one that does not resolve is left out
/// (and logged) until the membership changes again.
fn peer_addresses(members: &[crate::ensemble::Member]) -> Vec<(u64, SocketAddr)> {
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
    peers: mpsc::Receiver<(u64, PeerMessage)>,
}

async fn serve(engine: &mut Engine, shell: &mut Shell, receivers: Receivers) -> Result<(), String> {
    let Receivers {
        net: mut net_rx,
        durable: mut durable_rx,
        snapshots: mut snap_done_rx,
        mut scrapes,
        peers: mut peer_rx,
    } = receivers;
    let mut ticker = tokio::time::interval(Duration::from_millis(TICK_MS));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut shutdown = Box::pin(shutdown_signal());
    // A leader asked to stop first hands leadership over (rolling
    // restarts): the ensemble then does not wait out an election timeout.
    let mut stopping: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            event = net_rx.recv() => {
                let Some(event) = event else { return Err("listener stopped".into()) };
                engine.set_time(wall_clock_ms());
                shell.on_net(engine, event);
                take_queued(&mut net_rx, |event| shell.on_net(engine, event));
            }
            durable = durable_rx.recv() => {
                let token = durable.ok_or("WAL writer stopped")??;
                engine.set_time(wall_clock_ms());
                engine.set_wal_sync_stats(shell.wal.sync_stats());
                if let Some(number) = shell.tokens.durable(token) {
                    engine.handle(Input::Persisted { number });
                }
            }
            _ = ticker.tick() => {
                engine.set_time(wall_clock_ms());
                engine.tick();
            }
            done = snap_done_rx.recv() => {
                match done {
                    Some(Ok(SnapshotDone::Shipped { index, term, data })) => {
                        engine.handle(Input::SnapshotBuilt { index, term, data });
                    }
                    Some(Ok(SnapshotDone::Written { index, term, compact_to })) => {
                        log::info!("snapshot at raft index {index} (term {term}) written");
                        if let Some(upto) = compact_to {
                            let token = shell.tokens.issue(None);
                            let marker = Record::snapshot(PARTITION, term, upto, Vec::new());
                            shell.wal.submit(token, vec![marker]).map_err(|e| format!("WAL: {e}"))?;
                        }
                    }
                    // A failed snapshot loses nothing (the WAL still holds every
                    // entry); the next one retries.
                    Some(Err(e)) => log::error!("snapshot failed: {e}"),
                    None => return Err("snapshot writer stopped".into()),
                }
            }
            Some((from, message)) = peer_rx.recv() => {
                engine.set_time(wall_clock_ms());
                on_peer(engine, from, message);
                // Raft runs once for the whole batch: a leader's proposals
                // and acknowledgements then go out as one append per peer,
                // and a follower persists a run of appends as one job.
                take_queued(&mut peer_rx, |(from, message)| on_peer(engine, from, message));
            }
            Some(reply) = scrapes.recv() => {
                engine.set_time(wall_clock_ms());
                let _ = reply.send(crate::metrics::render(&crate::fourlw::monitor(engine)));
            }
            _ = &mut shutdown, if stopping.is_none() => {
                if !engine.transfer_leadership() {
                    log::info!("shutting down");
                    return Ok(());
                }
                stopping = Some(tokio::time::Instant::now() + LEADER_HANDOVER_WAIT);
            }
        }
        shell.flush(engine)?;
        if let Some(deadline) = stopping {
            // raft abandons a transfer the successor does not take up
            // within an election timeout (e.g. it is stopping too).
            let settled = !engine.is_leader() || !engine.transferring_leadership();
            if settled || tokio::time::Instant::now() >= deadline {
                log::info!("shutting down (leader now: server {})", engine.leader_id());
                return Ok(());
            }
        }
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
        PeerMessage::Raft(m) => engine.handle(Input::Raft(m)),
        PeerMessage::Engine(bytes) => match EngineMessage::decode(&bytes) {
            Ok(message) => engine.handle(Input::Peer { from, message }),
            Err(e) => log::warn!("server {from} sent a bad engine message: {e}"),
        },
        PeerMessage::Refused { membership_version } => engine.handle(Input::RefusedByPeer {
            from,
            membership_version,
        }),
        PeerMessage::Knocked => engine.handle(Input::Knocked { from }),
    }
}

/// How long a stopping leader waits for its successor before it exits
/// anyway (the others then elect one after their timeout).
const LEADER_HANDOVER_WAIT: Duration = Duration::from_secs(3);

/// Work for the snapshot thread: serializing a tree is slow for large
/// trees, so the partition thread never does it.
enum SnapshotTask {
    /// Write to the snapshot directory (then the WAL may be compacted).
    Write(SnapshotJob),
    /// Serialize in memory for a lagging peer.
    Ship(SnapshotJob),
}

enum SnapshotDone {
    Written {
        index: u64,
        term: u64,
        compact_to: Option<u64>,
    },
    Shipped {
        index: u64,
        term: u64,
        data: bytes::Bytes,
    },
}

fn spawn_snapshot_writer(
    dir: std::path::PathBuf,
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
                    let done = run_snapshot_task(&dir, task);
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

/// The tasks waiting for the snapshot thread, to run now: every Ship (a
/// peer waits for each) and only the newest Write. Under a heavy load the
/// engine asks for a snapshot faster than a large tree is written (every
/// 1.3 s at 78k creates/s, while 800k znodes take longer): the queue grew,
/// each queued job holding a tree copy alive, and the newest snapshot fell
/// further behind, leaving more WAL to replay at a restart.
fn coalesce_snapshot_tasks(tasks: Vec<SnapshotTask>) -> Vec<SnapshotTask> {
    let mut out = Vec::with_capacity(tasks.len());
    let mut newest_write: Option<SnapshotJob> = None;
    for task in tasks {
        match task {
            SnapshotTask::Write(job) => {
                if let Some(older) = newest_write.replace(job) {
                    log::debug!(
                        "snapshot at raft index {} skipped: a newer one is queued",
                        older.index
                    );
                }
            }
            ship @ SnapshotTask::Ship(_) => out.push(ship),
        }
    }
    out.extend(newest_write.map(SnapshotTask::Write));
    out
}

fn run_snapshot_task(dir: &std::path::Path, task: SnapshotTask) -> Result<SnapshotDone, String> {
    match task {
        SnapshotTask::Write(job) => storage::write_snapshot(dir, &job.tree, job.index, job.term)
            .map(|compact_to| SnapshotDone::Written {
                index: job.index,
                term: job.term,
                compact_to,
            }),
        SnapshotTask::Ship(job) => {
            let mut data = Vec::new();
            stoa_tree::write_snapshot(&job.tree, &mut data)
                .map(|()| SnapshotDone::Shipped {
                    index: job.index,
                    term: job.term,
                    data: data.into(),
                })
                .map_err(|e| format!("serializing a snapshot for a peer: {e}"))
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_tokens_map_back_to_the_highest_ready_number() {
        let mut t = WalTokens::default();
        let a = t.issue(Some(1));
        let _marker = t.issue(None);
        let c = t.issue(Some(2));
        assert_eq!(t.durable(a), Some(1));
        assert_eq!(t.durable(c), Some(2));
        assert_eq!(t.durable(c), None);
        assert_eq!(t.piggyback(3), Some(3), "nothing in flight: done now");
        let d = t.issue(Some(4));
        assert_eq!(t.piggyback(5), None, "waits for the batch in flight");
        assert_eq!(t.durable(d), Some(5));
    }

    #[test]
    fn queued_snapshot_tasks_keep_every_ship_and_the_newest_write() {
        let job = |index| SnapshotJob {
            tree: stoa_tree::DataTree::new(),
            index,
            term: 1,
        };
        let tasks = vec![
            SnapshotTask::Write(job(100)),
            SnapshotTask::Ship(job(150)),
            SnapshotTask::Write(job(200)),
            SnapshotTask::Ship(job(250)),
            SnapshotTask::Write(job(300)),
        ];
        let kept: Vec<(bool, u64)> = coalesce_snapshot_tasks(tasks)
            .into_iter()
            .map(|t| match t {
                SnapshotTask::Write(j) => (true, j.index),
                SnapshotTask::Ship(j) => (false, j.index),
            })
            .collect();
        assert_eq!(kept, vec![(false, 150), (false, 250), (true, 300)]);
        assert!(coalesce_snapshot_tasks(Vec::new()).is_empty());
    }
}
