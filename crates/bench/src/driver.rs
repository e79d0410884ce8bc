//! Runs one cell: opens the sessions, creates the keyspace (not measured),
//! then keeps `sessions x outstanding` calls in flight and records each
//! call's latency. The measuring part ([`measure`]: scheduling, warm-up,
//! histograms, CPU samples) is shared by every target; a [`Backend`] makes
//! the calls: [`Zk`] here through the project's ZooKeeper client (Apache
//! ZooKeeper and Stoa; with `--mounts`, its composed client over several
//! ensembles), `crate::etcd` through etcd's gRPC API.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use stoa_client::tokio;
use stoa_client::{
    open_acl_unsafe, Acl, Client, ClientOptions, ComposedClient, CreateMode, Error, MountTable,
    MultiResult, Op,
};

use crate::clock;
use crate::cpu;
use crate::mix::{OpKind, Rng};
use crate::options::Cell;
use crate::report::{CellResult, CpuUse};

/// Where the benchmark keeps its nodes (the mixes' unless `--root` moves
/// them; the scenarios' always).
pub const ROOT: &str = "/stoa-bench";

/// The mixes' nodes: the keyspace (`<root>/keys/k0000000` ..; the same
/// strings are the etcd keys) and where creates go (`<root>/w/<nonce>-
/// <worker>-<seq>`).
struct TreePaths {
    root: String,
    keys: String,
    writes: String,
}

impl TreePaths {
    fn under(root: &str) -> TreePaths {
        TreePaths {
            root: root.to_string(),
            keys: format!("{root}/keys"),
            writes: format!("{root}/w"),
        }
    }
}

/// Set once, by `--root`, before anything runs: the first root's paths
/// take the creates and `children`; the keyspace is spread over all.
static TREE_PATHS: std::sync::OnceLock<Vec<TreePaths>> = std::sync::OnceLock::new();

/// Moves the mixes' nodes under `roots` (`--root`, comma-separated):
/// several load generators, each with its own root, drive the groups of a
/// server of several partitions (docs/partitions.md); one generator with
/// several roots spreads its keyspace over their groups, key `i` under root
/// `i mod n`, and `--burst` says how many calls a session makes under one
/// root before it moves to the next (the cost of switching partitions).
pub fn set_root(roots: &str) -> Result<(), String> {
    let mut paths = Vec::new();
    for root in roots.split(',') {
        if !root.starts_with('/') || root.ends_with('/') || root.contains("//") {
            return Err(format!(
                "--root {root}: expected an absolute path such as /g1"
            ));
        }
        paths.push(TreePaths::under(root));
    }
    (TREE_PATHS.set(paths)).map_err(|_| "--root given twice".to_string())
}

fn all_tree_paths() -> &'static [TreePaths] {
    TREE_PATHS.get_or_init(|| vec![TreePaths::under(ROOT)])
}

fn tree_paths() -> &'static TreePaths {
    &all_tree_paths()[0]
}

/// How many roots the keyspace is spread over.
pub fn root_count() -> usize {
    all_tree_paths().len()
}

/// The keyspace's parent.
pub fn keys_dir() -> &'static str {
    &tree_paths().keys
}
/// Calls in flight while creating the keyspace.
pub const SETUP_WINDOW: usize = 256;
/// Largest latency the histograms hold (longer ones are clamped).
pub const LATENCY_US_MAX: u64 = 120_000_000;
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("static histogram bounds are valid")
}

/// One call of the mix, in terms every target shares: keys are the
/// ZooKeeper paths, used as they are as etcd keys.
#[derive(Debug, Clone, Copy)]
pub enum Call<'a> {
    /// Read one key's data (ZooKeeper getData, etcd range).
    Get(&'a str),
    /// Read one key's metadata (ZooKeeper exists, etcd keys-only range).
    Exists(&'a str),
    /// Overwrite one key (ZooKeeper setData, etcd put).
    Set(&'a str),
    /// List the keyspace (ZooKeeper getChildren of [`keys_dir`], etcd
    /// keys-only prefix range).
    Children,
    /// Make a new key (ZooKeeper create, etcd put).
    Create(&'a str),
    /// Remove a key this worker created (ZooKeeper delete, etcd delete).
    Delete(&'a str),
    /// Overwrite two keys at once (ZooKeeper multi, etcd txn).
    Multi(&'a str, &'a str),
}

/// How one session of a target makes the mix's calls. Each worker (one
/// in-flight slot) gets its own clone of its session's value.
pub trait Backend: Clone + Send + Sync + 'static {
    type Error: Send + 'static;

    fn call<'a>(
        &'a self,
        call: Call<'a>,
        payload: &'a Bytes,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'a;

    /// Errors after which the session cannot make more calls.
    fn is_terminal(error: &Self::Error) -> bool;

    /// The name an error is counted under in the results.
    fn error_name(error: &Self::Error) -> String;

    /// The key a call named does not exist.
    fn is_not_found(error: &Self::Error) -> bool;
}

/// Latencies recorded per worker but a batch at a time: with each of 128
/// workers writing every call straight into its own histograms (about
/// 150 KiB of counters each), nearly every record missed the cache, 9% of
/// the load generator's CPU at 190k calls/s. A batch lands on warm lines.
struct Latencies {
    by_op: Vec<Histogram<u64>>,
    /// (operation index, microseconds) not yet in `by_op`.
    pending: Vec<(u8, u32)>,
}

/// Calls a worker buffers before writing them into its histograms.
const LATENCY_BATCH: usize = 256;

impl Latencies {
    fn new() -> Self {
        Latencies {
            by_op: OpKind::ALL.iter().map(|_| new_histogram()).collect(),
            pending: Vec::with_capacity(LATENCY_BATCH),
        }
    }

    fn record(&mut self, kind: OpKind, latency_us: u64) {
        let us = latency_us.clamp(1, LATENCY_US_MAX) as u32;
        self.pending.push((kind.index() as u8, us));
        if self.pending.len() == LATENCY_BATCH {
            self.flush();
        }
    }

    fn flush(&mut self) {
        for (kind, us) in self.pending.drain(..) {
            self.by_op[usize::from(kind)].saturating_record(u64::from(us));
        }
    }

    fn into_histograms(mut self) -> Vec<Histogram<u64>> {
        self.flush();
        self.by_op
    }
}

/// What one worker (one in-flight slot of one session) saw.
struct WorkerStats {
    latencies: Latencies,
    ok: u64,
    errors: BTreeMap<String, u64>,
    last_done: Option<Instant>,
    /// What this worker's creates made and its deletes did not remove.
    left: VecDeque<String>,
}

/// Shared by the workers of one run.
struct Plan {
    payload: Bytes,
    keys: Vec<String>,
    mix: crate::mix::Mix,
    warmup_end: Instant,
    /// Time mode: calls starting at or after this are not made.
    measure_end: Option<Instant>,
    /// Ops mode: measured calls left to hand out.
    tickets: AtomicU64,
    /// Per-worker interval between scheduled starts (open loop).
    interval: Option<Duration>,
    nonce: u64,
    /// Calls a session makes under one root before the next (0: each key
    /// at random over the whole keyspace).
    burst: usize,
}

/// A ZooKeeper-protocol session (Apache ZooKeeper or Stoa): a [`Client`],
/// or with `--mounts` a [`ComposedClient`] over several ensembles.
#[derive(Clone)]
pub struct Zk<C = Client> {
    client: C,
    acl: Vec<Acl>,
    create_mode: CreateMode,
}

/// The calls the mixes and the setup make, which the plain and the
/// composed client both have with the same signatures.
pub trait ZkSession: Clone + Send + Sync + 'static {
    fn get_data<'a>(
        &'a self,
        path: &'a str,
    ) -> impl Future<Output = Result<Vec<u8>, Error>> + Send + 'a;
    fn exists<'a>(&'a self, path: &'a str) -> impl Future<Output = Result<(), Error>> + Send + 'a;
    fn set_data<'a>(
        &'a self,
        path: &'a str,
        data: &'a [u8],
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a;
    fn get_children<'a>(
        &'a self,
        path: &'a str,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a;
    fn create<'a>(
        &'a self,
        path: &'a str,
        data: &'a [u8],
        acl: &'a [Acl],
        mode: CreateMode,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a;
    fn delete<'a>(&'a self, path: &'a str) -> impl Future<Output = Result<(), Error>> + Send + 'a;
    fn multi(
        &self,
        ops: Vec<Op>,
    ) -> impl Future<Output = Result<Vec<MultiResult>, Error>> + Send + '_;
    fn close(&self) -> impl Future<Output = Result<(), Error>> + Send + '_;
}

macro_rules! zk_session {
    ($client:ty) => {
        impl ZkSession for $client {
            async fn get_data<'a>(&'a self, path: &'a str) -> Result<Vec<u8>, Error> {
                <$client>::get_data(self, path, false)
                    .await
                    .map(|(data, _)| data)
            }
            async fn exists<'a>(&'a self, path: &'a str) -> Result<(), Error> {
                <$client>::exists(self, path, false).await.map(drop)
            }
            async fn set_data<'a>(&'a self, path: &'a str, data: &'a [u8]) -> Result<(), Error> {
                <$client>::set_data(self, path, data, -1).await.map(drop)
            }
            async fn get_children<'a>(&'a self, path: &'a str) -> Result<(), Error> {
                <$client>::get_children(self, path, false).await.map(drop)
            }
            async fn create<'a>(
                &'a self,
                path: &'a str,
                data: &'a [u8],
                acl: &'a [Acl],
                mode: CreateMode,
            ) -> Result<(), Error> {
                <$client>::create(self, path, data, acl, mode)
                    .await
                    .map(drop)
            }
            async fn delete<'a>(&'a self, path: &'a str) -> Result<(), Error> {
                <$client>::delete(self, path, -1).await
            }
            async fn multi(&self, ops: Vec<Op>) -> Result<Vec<MultiResult>, Error> {
                <$client>::multi(self, ops).await
            }
            async fn close(&self) -> Result<(), Error> {
                <$client>::close(self).await
            }
        }
    };
}

zk_session!(Client);
zk_session!(ComposedClient);

pub async fn run(servers: &str, cell: &Cell) -> Result<CellResult, String> {
    if cell.composed {
        let clients = connect_composed(servers, cell.sessions).await?;
        return run_sessions(servers, cell, clients).await;
    }
    let clients = connect_all(servers, cell.sessions).await?;
    if let Some(words) = &cell.fast {
        opt_into_fast(&clients, words).await?;
    }
    run_sessions(servers, cell, clients).await
}

/// Sets up the keyspace through the first of `clients`, measures them all
/// and closes them.
async fn run_sessions<C: ZkSession>(
    servers: &str,
    cell: &Cell,
    clients: Vec<C>,
) -> Result<CellResult, String> {
    let payload = vec![b'x'; cell.payload_bytes];
    let result = match setup(&clients[0], cell.keys, &payload).await {
        Ok(()) => {
            let create_mode = if cell.ephemeral {
                CreateMode::Ephemeral
            } else {
                CreateMode::Persistent
            };
            let sessions: Vec<Zk<C>> = clients
                .iter()
                .map(|client| Zk {
                    client: client.clone(),
                    acl: open_acl_unsafe(),
                    create_mode,
                })
                .collect();
            measure(&sessions, cell, servers).await
        }
        Err(e) => Err(e),
    };
    for client in &clients {
        // Not measured; ephemerals go with the session.
        let _ = client.close().await;
    }
    result
}

/// Keeps `cell.sessions x cell.outstanding` calls in flight over
/// `sessions` (one value per session, already set up) for the cell's
/// warm-up and measured window, and merges what the workers saw.
pub async fn measure<B: Backend>(
    sessions: &[B],
    cell: &Cell,
    servers: &str,
) -> Result<CellResult, String> {
    let workers = sessions.len() * cell.outstanding;
    let start = clock::now();
    let warmup_end = start + cell.warmup;
    let plan = Arc::new(Plan {
        payload: Bytes::from(vec![b'x'; cell.payload_bytes]),
        keys: (0..cell.keys).map(key_path).collect(),
        mix: cell.mix.clone(),
        warmup_end,
        measure_end: match cell.ops {
            Some(_) => None,
            None => Some(warmup_end + cell.duration),
        },
        tickets: AtomicU64::new(cell.ops.unwrap_or(0)),
        interval: cell
            .rate_ops_s
            .map(|rate| Duration::from_secs_f64(workers as f64 / rate)),
        nonce: nonce(),
        burst: cell.burst,
    });

    // CPU time over the measured window: sampled at its start and end.
    let cpu_window = cpu::Window::starting_at(warmup_end, &cell.server_pids);
    let mut handles = Vec::with_capacity(workers);
    for (s, session) in sessions.iter().enumerate() {
        let roots = root_count().min(plan.keys.len()).max(1);
        let keys = Arc::new(KeyChooser::new(roots, plan.nonce, s));
        for k in 0..cell.outstanding {
            let id = (s * cell.outstanding + k) as u64;
            let session = session.clone();
            let plan = Arc::clone(&plan);
            let keys = Arc::clone(&keys);
            handles.push(tokio::spawn(worker(session, plan, keys, id, start)));
        }
    }
    let (mut stats, cpu) = cpu_window.gather(handles, "worker").await?;
    if cell.clean_up {
        // After the CPU sample: none of it is counted.
        let left = stats.iter_mut().map(|s| std::mem::take(&mut s.left));
        clean_up(sessions, cell.outstanding, left.collect()).await?;
    }
    Ok(merge(cell, servers, warmup_end, stats, cpu))
}

/// Deletes what each worker's creates left, through the worker's own
/// session and with as many calls in flight as the run had. A node
/// already gone (an ephemeral's session closed) is not a failure.
async fn clean_up<B: Backend>(
    sessions: &[B],
    outstanding: usize,
    left: Vec<VecDeque<String>>,
) -> Result<(), String> {
    let mut tasks = Vec::with_capacity(left.len());
    for (id, paths) in left.into_iter().enumerate() {
        let session = sessions[id / outstanding].clone();
        tasks.push(tokio::spawn(async move {
            let payload = Bytes::new();
            for path in paths {
                if let Err(e) = session.call(Call::Delete(&path), &payload).await {
                    if !B::is_not_found(&e) {
                        return Err(format!("clean-up: delete {path}: {}", B::error_name(&e)));
                    }
                }
            }
            Ok(())
        }));
    }
    for task in tasks {
        task.await
            .map_err(|e| format!("clean-up task failed: {e}"))??;
    }
    Ok(())
}

/// The `i`th key of the keyspace, under root `i mod n`.
pub fn key_path(i: usize) -> String {
    let roots = all_tree_paths();
    format!("{}/k{i:07}", roots[i % roots.len()].keys)
}

fn nonce() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    Rng::new(t ^ u64::from(std::process::id())).next_u64() & 0xffff_ffff
}

/// Each session creates its flag node under `/zookeeper/fast` (and the
/// first, the parent, if missing).
async fn opt_into_fast(clients: &[Client], words: &str) -> Result<(), String> {
    const FAST: &str = "/zookeeper/fast";
    let acl = open_acl_unsafe();
    let failed = |e| format!("cannot opt into fast {words}: {e}");
    match clients[0]
        .create(FAST, b"", &acl, CreateMode::Persistent)
        .await
    {
        Ok(_) | Err(Error::NodeExists { .. }) => {}
        Err(e) => return Err(failed(e)),
    }
    for client in clients {
        let path = format!("{FAST}/{:x}", client.session_id());
        (client
            .create(&path, words.as_bytes(), &acl, CreateMode::Ephemeral)
            .await)
            .map_err(failed)?;
    }
    Ok(())
}

async fn connect_all(servers: &str, sessions: usize) -> Result<Vec<Client>, String> {
    let options = ClientOptions {
        session_timeout: SESSION_TIMEOUT,
        ..ClientOptions::default()
    };
    let mut pending = Vec::with_capacity(sessions);
    for s in 0..sessions {
        let servers = rotated(servers, s);
        let options = options.clone();
        pending.push(tokio::spawn(async move {
            Client::connect(&servers, options).await
        }));
    }
    let mut clients = Vec::with_capacity(sessions);
    for p in pending {
        let client = p
            .await
            .map_err(|e| format!("connect task failed: {e}"))?
            .map_err(|e| format!("cannot connect to {servers}: {e}"))?;
        clients.push(client);
    }
    Ok(clients)
}

/// `sessions` composed clients over the mount table `table` (`--mounts`):
/// each opens a session with every mount's ensemble, session `s` at member
/// `s mod n` of each (as [`rotated`]).
async fn connect_composed(table: &str, sessions: usize) -> Result<Vec<ComposedClient>, String> {
    let table: MountTable = table.parse().map_err(|e| format!("--mounts: {e}"))?;
    let options = ClientOptions {
        session_timeout: SESSION_TIMEOUT,
        ..ClientOptions::default()
    };
    let mut clients = Vec::with_capacity(sessions);
    for s in 0..sessions {
        let table = table.with_hosts(|mount| rotated(&mount.hosts, s));
        let client = ComposedClient::connect(table, options.clone()).await;
        clients.push(client.map_err(|e| format!("cannot connect to the mounts: {e}"))?);
    }
    Ok(clients)
}

/// `servers` (`"h1,h2,h3"`) starting at host `s mod n`: the client connects
/// to the first host that answers, so session `s` lands on member `s mod n`
/// of an ensemble (and keeps the others to fail over to), as etcd's session
/// `s` uses endpoint `s mod n`.
fn rotated(servers: &str, s: usize) -> String {
    let hosts: Vec<&str> = servers
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    if hosts.len() < 2 {
        return servers.to_owned();
    }
    let k = s % hosts.len();
    hosts[k..]
        .iter()
        .chain(&hosts[..k])
        .copied()
        .collect::<Vec<_>>()
        .join(",")
}

/// Creates the directories and the keyspace, each key holding `payload`
/// (rewritten when a previous run left another size).
async fn setup<C: ZkSession>(client: &C, keys: usize, payload: &[u8]) -> Result<(), String> {
    let acl = open_acl_unsafe();
    let mut dirs: Vec<&str> = Vec::new();
    for paths in all_tree_paths() {
        // The root's ancestors first, where it is nested.
        let ancestors = (paths.root.match_indices('/').skip(1)).map(|(at, _)| &paths.root[..at]);
        dirs.extend(ancestors.chain([&*paths.root, &paths.keys, &paths.writes]));
    }
    for dir in dirs {
        match client.create(dir, b"", &acl, CreateMode::Persistent).await {
            Ok(()) | Err(Error::NodeExists { .. }) => {}
            Err(e) => return Err(format!("setup: create {dir}: {e}")),
        }
    }
    let mut in_flight = tokio::task::JoinSet::new();
    for i in 0..keys {
        if in_flight.len() >= SETUP_WINDOW {
            join_one(&mut in_flight).await?;
        }
        let client = client.clone();
        let acl = acl.clone();
        let payload = payload.to_vec();
        in_flight.spawn(async move {
            let path = key_path(i);
            match client
                .create(&path, &payload, &acl, CreateMode::Persistent)
                .await
            {
                Ok(()) => Ok(()),
                Err(Error::NodeExists { .. }) => match client.get_data(&path).await {
                    Ok(data) if data.len() == payload.len() => Ok(()),
                    Ok(_) => client.set_data(&path, &payload).await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            }
            .map_err(|e| format!("setup: key {path}: {e}"))
        });
    }
    while !in_flight.is_empty() {
        join_one(&mut in_flight).await?;
    }
    Ok(())
}

/// Waits for one setup call of `set`.
pub async fn join_one(set: &mut tokio::task::JoinSet<Result<(), String>>) -> Result<(), String> {
    match set.join_next().await {
        Some(Ok(r)) => r,
        Some(Err(e)) => Err(format!("setup task failed: {e}")),
        None => Ok(()),
    }
}

async fn worker<B: Backend>(
    session: B,
    plan: Arc<Plan>,
    keys: Arc<KeyChooser>,
    id: u64,
    start: Instant,
) -> WorkerStats {
    let mut rng = Rng::new(plan.nonce ^ (id + 1).wrapping_mul(0x1000_0001));
    let mut stats = WorkerStats {
        latencies: Latencies::new(),
        ok: 0,
        errors: BTreeMap::new(),
        last_done: None,
        left: VecDeque::new(),
    };
    let mut created: VecDeque<String> = VecDeque::new();
    let mut seq: u64 = 0;
    // Open loop: spread the workers' first starts over one interval.
    let mut scheduled = plan
        .interval
        .map(|iv| start + iv.mul_f64(rng.below(1000) as f64 / 1000.0));
    loop {
        if let Some(at) = scheduled {
            tokio::time::sleep_until(at.into()).await;
        }
        let now = clock::now();
        let began = scheduled.unwrap_or(now);
        if let Some(end) = plan.measure_end {
            if began >= end {
                break;
            }
        } else if began >= plan.warmup_end
            && plan
                .tickets
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_sub(1))
                .is_err()
        {
            break;
        }
        let mut kind = plan.mix.pick(rng.next_u64());
        if kind == OpKind::Delete && created.is_empty() {
            kind = OpKind::Create;
        }
        let key = keys.next(plan.keys.len(), plan.burst, &mut rng);
        let result = call(
            &session,
            &plan,
            kind,
            key,
            &mut rng,
            &mut created,
            id,
            &mut seq,
        )
        .await;
        let done = clock::now();
        if let Some(iv) = plan.interval {
            scheduled = Some(began + iv);
        }
        let terminal = result.as_ref().err().is_some_and(B::is_terminal);
        if began < plan.warmup_end {
            if terminal {
                break;
            }
            continue;
        }
        let latency_us = done.saturating_duration_since(began).as_micros() as u64;
        stats.latencies.record(kind, latency_us);
        stats.last_done = Some(done);
        match &result {
            Ok(()) => stats.ok += 1,
            Err(e) => *stats.errors.entry(B::error_name(e)).or_insert(0) += 1,
        }
        if terminal {
            break;
        }
    }
    stats.left = created;
    stats
}

/// Errors after which a ZooKeeper session cannot make more calls.
fn is_terminal(error: &Error) -> bool {
    matches!(
        error,
        Error::Closed | Error::SessionExpired { .. } | Error::AuthFailed { .. }
    )
}

pub fn error_name(e: &Error) -> String {
    match e.code() {
        Some(code) => format!("{code:?}"),
        None => match e {
            Error::InvalidPath { .. } => "InvalidPath".into(),
            Error::InvalidArgument(_) => "InvalidArgument".into(),
            Error::Io(_) => "Io".into(),
            Error::Protocol(_) => "Protocol".into(),
            _ => "Closed".into(),
        },
    }
}

/// Which key a session's next call takes: any at random, or, with a
/// burst, one at random under the session's current root, `burst` calls
/// running before the session moves to the next root. The session's
/// workers (one per call in flight) share it, so a pipelining session
/// makes `burst` consecutive calls under one root as a synchronous one
/// does; with a chooser per worker it hopped roots on nearly every call.
struct KeyChooser {
    /// Roots that hold keys (fewer keys than roots leave some empty).
    roots: usize,
    first_root: usize,
    /// Calls the session has taken a key for.
    calls: AtomicU64,
}

impl KeyChooser {
    /// The chooser of `session`, with keys spread over `roots` roots.
    fn new(roots: usize, nonce: u64, session: usize) -> KeyChooser {
        assert!(roots >= 1);
        let mut rng = Rng::new(nonce ^ (session as u64 + 1).wrapping_mul(0x9E37_79B9));
        KeyChooser {
            roots,
            first_root: rng.below(roots as u64) as usize,
            calls: AtomicU64::new(0),
        }
    }

    /// One of `n` keys for the session's next call.
    fn next(&self, n: usize, burst: usize, rng: &mut Rng) -> usize {
        let roots = self.roots;
        if burst == 0 || roots == 1 {
            return rng.below(n as u64) as usize;
        }
        let call = self.calls.fetch_add(1, Ordering::Relaxed) as usize;
        let root = (self.first_root + call / burst) % roots;
        // Keys root, root + roots, root + 2 roots, ...: all under one root.
        let under = (n - root).div_ceil(roots);
        root + roots * rng.below(under as u64) as usize
    }
}

/// Makes a call of `kind` on key `key` (and, for a multi, one more at
/// random) through `session`.
#[allow(clippy::too_many_arguments)]
async fn call<B: Backend>(
    session: &B,
    plan: &Plan,
    kind: OpKind,
    key: usize,
    rng: &mut Rng,
    created: &mut VecDeque<String>,
    id: u64,
    seq: &mut u64,
) -> Result<(), B::Error> {
    let key = &plan.keys[key];
    let payload = &plan.payload;
    match kind {
        OpKind::Get => session.call(Call::Get(key), payload).await,
        OpKind::Exists => session.call(Call::Exists(key), payload).await,
        OpKind::Set => session.call(Call::Set(key), payload).await,
        OpKind::Children => session.call(Call::Children, payload).await,
        OpKind::Create => {
            *seq += 1;
            let path = format!("{}/{:08x}-{id}-{seq}", tree_paths().writes, plan.nonce);
            session.call(Call::Create(&path), payload).await?;
            created.push_back(path);
            Ok(())
        }
        OpKind::Delete => {
            let path = created
                .pop_front()
                .expect("delete is only picked after a create");
            session.call(Call::Delete(&path), payload).await
        }
        OpKind::Multi => {
            let other = &plan.keys[rng.below(plan.keys.len() as u64) as usize];
            session.call(Call::Multi(key, other), payload).await
        }
    }
}

impl<C: ZkSession> Backend for Zk<C> {
    type Error = Error;

    async fn call<'a>(&'a self, call: Call<'a>, payload: &'a Bytes) -> Result<(), Error> {
        let client = &self.client;
        match call {
            Call::Get(key) => client.get_data(key).await.map(drop),
            Call::Exists(key) => client.exists(key).await,
            Call::Set(key) => client.set_data(key, payload).await,
            Call::Children => client.get_children(keys_dir()).await,
            Call::Create(path) => (client.create(path, payload, &self.acl, self.create_mode)).await,
            Call::Delete(path) => client.delete(path).await,
            Call::Multi(key, other) => {
                let ops = vec![
                    Op::set_data(key, payload, -1),
                    Op::set_data(other, payload, -1),
                ];
                let results = client.multi(ops).await?;
                match stoa_client::multi_error(&[key, other], &results) {
                    Some(e) => Err(e),
                    None => Ok(()),
                }
            }
        }
    }

    fn is_terminal(error: &Error) -> bool {
        is_terminal(error)
    }

    fn error_name(error: &Error) -> String {
        error_name(error)
    }

    fn is_not_found(error: &Error) -> bool {
        matches!(error, Error::NoNode { .. })
    }
}

fn merge(
    cell: &Cell,
    servers: &str,
    warmup_end: Instant,
    stats: Vec<WorkerStats>,
    cpu: CpuUse,
) -> CellResult {
    let mut by_op: Vec<Histogram<u64>> = OpKind::ALL.iter().map(|_| new_histogram()).collect();
    let mut ok = 0;
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut last_done = warmup_end;
    for s in stats {
        for (into, from) in by_op.iter_mut().zip(&s.latencies.into_histograms()) {
            into.add(from).expect("histograms share bounds");
        }
        ok += s.ok;
        for (name, n) in s.errors {
            *errors.entry(name).or_insert(0) += n;
        }
        if let Some(done) = s.last_done {
            last_done = last_done.max(done);
        }
    }
    let elapsed = last_done.saturating_duration_since(warmup_end);
    CellResult::new(cell, servers, elapsed, ok, errors, by_op, cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_start_at_successive_servers() {
        assert_eq!(rotated("a:1,b:2,c:3", 0), "a:1,b:2,c:3");
        assert_eq!(rotated("a:1,b:2,c:3", 1), "b:2,c:3,a:1");
        assert_eq!(rotated("a:1, b:2,c:3", 5), "c:3,a:1,b:2");
        assert_eq!(rotated("a:1", 3), "a:1");
    }

    #[test]
    fn a_sessions_calls_in_flight_take_turns_in_its_bursts() {
        let chooser = KeyChooser::new(3, 7, 0);
        let mut rngs: Vec<Rng> = (0..4).map(Rng::new).collect();
        // Four workers of one session, taking keys in turn: 10 keys over 3
        // roots (key i under root i mod 3), bursts of 5.
        let roots: Vec<usize> = (0..30)
            .map(|call| chooser.next(10, 5, &mut rngs[call % 4]) % 3)
            .collect();
        for (burst, calls) in roots.chunks(5).enumerate() {
            let root = (chooser.first_root + burst) % 3;
            assert_eq!(calls, [root; 5], "burst {burst}: {roots:?}");
        }
        // Without a burst, keys anywhere.
        let spread = (0..200).map(|_| chooser.next(10, 0, &mut rngs[0]));
        assert_eq!(spread.collect::<std::collections::BTreeSet<_>>().len(), 10);
    }

    #[test]
    fn batched_latencies_all_reach_their_histograms() {
        let mut latencies = Latencies::new();
        let calls = 3 * LATENCY_BATCH + 7;
        for i in 0..calls {
            let kind = if i % 3 == 0 { OpKind::Get } else { OpKind::Set };
            latencies.record(kind, i as u64);
        }
        latencies.record(OpKind::Delete, u64::MAX);
        let by_op = latencies.into_histograms();
        assert_eq!(by_op[OpKind::Get.index()].len(), calls.div_ceil(3) as u64);
        assert_eq!(
            by_op[OpKind::Set.index()].len(),
            (calls - calls.div_ceil(3)) as u64
        );
        // Out-of-range latencies are clamped, not dropped.
        assert_eq!(by_op[OpKind::Get.index()].min(), 1);
        let delete = &by_op[OpKind::Delete.index()];
        assert_eq!(delete.len(), 1);
        assert!(delete.max() >= LATENCY_US_MAX);
    }
}
