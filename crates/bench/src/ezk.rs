//! The two experiments of the Extendable ZooKeeper paper (Distler et al.,
//! "Extensible Distributed Coordination", EuroSys 2015), each in two
//! variants: the server-side extension (Stoa only: `examples/extensions/`,
//! registered under `/extensions` by the run itself) and the client-side
//! recipe the paper compares it with (any ZooKeeper-protocol server).
//!
//! - Priority queue (paper 5.1): consumers dequeue. The extension takes one
//!   `getData /queue/next`; the recipe takes getChildren, getData of the
//!   smallest element and a versioned delete, and on NoNode/BadVersion moves
//!   to the next candidate, then to a fresh getChildren. One producer session
//!   (not counted as a client, its creates not counted as calls) keeps the
//!   queue at about `--queue-depth` elements (default 100).
//! - Quota (paper 5.2): each client allocates [`QUOTA_REQUEST`] of
//!   [`QUOTA_TOTAL`] and releases it, over and over. The extension takes one
//!   `setData /memory-quota <n>`; the recipe takes getData of the free
//!   amount and a versioned setData, retrying on BadVersion. A refusal for
//!   lack of quota is followed by a pause (`--backoff-ms`) and a retry.
//!
//! Every request a client sends is counted; the calls of a logical
//! operation (dequeue, allocation, release) that began in the measured
//! window count towards that operation's calls per operation.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;
use stoa_client::tokio;
use stoa_client::tokio::sync::Notify;
use stoa_client::{open_acl_unsafe, Client, ClientOptions, CreateMode, Error};

use crate::clock;
use crate::cpu;
use crate::driver::{error_name, new_histogram, LATENCY_US_MAX, ROOT};
use crate::mix::Rng;
use crate::options::{Cell, Workload};
use crate::report::{CellResult, Latency, ScenarioStats};

/// Where the benchmark registers `priority_queue.lua` (any path would do).
pub const QUEUE: &str = "/queue";
const QUEUE_NEXT: &str = "/queue/next";
/// Where the recipe keeps its queue (not under the extension's node, so an
/// extension registered by an earlier run does not route it).
pub const RECIPE_QUEUE: &str = "/stoa-bench/pq";
/// Where the benchmark registers `quota.lua`, and the node that path makes
/// it guard.
pub const QUOTA_NODE: &str = "/memory-quota";
pub const MEMORY: &str = "/memory";
/// The recipe's free-quota node.
pub const RECIPE_MEMORY: &str = "/stoa-bench/memory";
const EXTENSIONS: &str = "/extensions";
const PQ_EXTENSION: &str = "stoa-bench-pq";
const QUOTA_EXTENSION: &str = "stoa-bench-quota";

pub const QUOTA_TOTAL: i64 = 1500;
pub const QUOTA_REQUEST: i64 = 100;
/// Creates the producer keeps in flight.
const PRODUCER_WINDOW: usize = 64;
/// Priorities of the inserted elements: 0..PRIORITIES.
const PRIORITIES: u64 = 10;
/// Pause before looking again at a queue found empty.
const EMPTY_PAUSE: Duration = Duration::from_millis(1);
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on filling the queue before measuring.
const FILL_TIMEOUT: Duration = Duration::from_secs(30);

const PQ_SOURCE: &str = include_str!("../../../examples/extensions/priority_queue.lua");
const QUOTA_SOURCE: &str = include_str!("../../../examples/extensions/quota.lua");

/// What the calls of one kind of logical operation came to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Operations that succeeded (measured ones only).
    pub ok: u64,
    /// Requests sent for measured operations, successful or not.
    pub calls: u64,
    /// Recipe calls lost to a concurrent client (NoNode, BadVersion).
    pub conflicts: u64,
    /// Refusals for lack of quota (each followed by the backoff).
    pub short: u64,
    /// Queue found empty.
    pub empty: u64,
    /// Latency of the successful operations, retries included.
    pub latency: Option<Latency>,
}

impl Tally {
    pub fn calls_per_op(&self) -> f64 {
        if self.ok > 0 {
            self.calls as f64 / self.ok as f64
        } else {
            f64::NAN
        }
    }

    fn add(&mut self, other: &Tally) {
        self.ok += other.ok;
        self.calls += other.calls;
        self.conflicts += other.conflicts;
        self.short += other.short;
        self.empty += other.empty;
    }

    pub fn json(&self, elapsed: Duration) -> serde_json::Value {
        let secs = elapsed.as_secs_f64();
        json!({
            "ok": self.ok,
            "per_s": if secs > 0.0 { self.ok as f64 / secs } else { 0.0 },
            "calls": self.calls,
            "calls_per_op": nan_to_null(self.calls_per_op()),
            "conflicts": self.conflicts,
            "short": self.short,
            "empty": self.empty,
            "latency_us": self.latency.map(|l| l.json()),
        })
    }
}

fn nan_to_null(x: f64) -> serde_json::Value {
    if x.is_finite() {
        json!(x)
    } else {
        serde_json::Value::Null
    }
}

/// The EZK figures of one cell: dequeues for the queue, allocations and
/// releases for the quota.
#[derive(Debug, Clone, PartialEq)]
pub struct EzkStats {
    pub workload: Workload,
    pub clients: usize,
    /// Dequeues, or allocations.
    pub main: Tally,
    /// Releases (quota only).
    pub release: Option<Tally>,
}

impl EzkStats {
    pub fn json(&self, elapsed: Duration) -> serde_json::Value {
        let (experiment, approach) = match self.workload {
            Workload::PqExtension => ("priority-queue", "extension"),
            Workload::PqRecipe => ("priority-queue", "recipe"),
            Workload::QuotaExtension => ("quota", "extension"),
            _ => ("quota", "recipe"),
        };
        let mut v = json!({
            "scenario": self.workload.name(),
            "experiment": experiment,
            "approach": approach,
            "clients": self.clients,
        });
        let m = v.as_object_mut().expect("object");
        match &self.release {
            None => {
                m.insert("dequeues".into(), json!(self.main.ok));
                m.insert(
                    "calls_per_dequeue".into(),
                    nan_to_null(self.main.calls_per_op()),
                );
                m.insert("dequeue".into(), self.main.json(elapsed));
            }
            Some(release) => {
                m.insert("allocations".into(), json!(self.main.ok));
                m.insert("releases".into(), json!(release.ok));
                m.insert(
                    "calls_per_allocation".into(),
                    nan_to_null(self.main.calls_per_op()),
                );
                m.insert(
                    "calls_per_release".into(),
                    nan_to_null(release.calls_per_op()),
                );
                m.insert("allocation".into(), self.main.json(elapsed));
                m.insert("release".into(), release.json(elapsed));
            }
        }
        v
    }

    /// One line for the human-readable table.
    pub fn summary(&self, elapsed: Duration) -> String {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let t = &self.main;
        match &self.release {
            None => format!(
                "  {:.0} dequeues/s, {:.2} calls/dequeue, {} conflicts, {} empty\n",
                t.ok as f64 / secs,
                t.calls_per_op(),
                t.conflicts,
                t.empty
            ),
            Some(r) => format!(
                "  {:.0} allocs+releases/s, {:.2} calls/alloc, {:.2} calls/release, \
                 {} short, {} conflicts\n",
                (t.ok + r.ok) as f64 / secs,
                t.calls_per_op(),
                r.calls_per_op(),
                t.short,
                t.conflicts + r.conflicts
            ),
        }
    }
}

/// When logical operations may start and which of them are measured.
struct Window {
    warmup_end: Instant,
    /// Time mode: operations starting at or after this are not made.
    measure_end: Option<Instant>,
    /// Ops mode: measured operations left to hand out.
    tickets: AtomicU64,
}

impl Window {
    /// `None`: stop. `Some(measured)`: start an operation.
    fn begin(&self, now: Instant) -> Option<bool> {
        if let Some(end) = self.measure_end {
            if now >= end {
                return None;
            }
        } else if now >= self.warmup_end {
            return self.take_ticket().then_some(true);
        }
        Some(now >= self.warmup_end)
    }

    /// For an operation that must run anyway (a release): is it measured?
    fn measured(&self, now: Instant) -> bool {
        now >= self.warmup_end
            && match self.measure_end {
                Some(end) => now < end,
                None => self.take_ticket(),
            }
    }

    /// True once no more operations will start (a client still retrying
    /// gives up).
    fn over(&self, now: Instant) -> bool {
        match self.measure_end {
            Some(end) => now >= end,
            None => now >= self.warmup_end && self.tickets.load(Ordering::Relaxed) == 0,
        }
    }

    fn take_ticket(&self) -> bool {
        self.tickets
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_sub(1))
            .is_ok()
    }
}

/// The queue's producer and consumers share this.
struct Queue {
    /// Elements the producer keeps in the queue.
    target: i64,
    /// Inserted minus dequeued (as far as this process knows).
    depth: AtomicI64,
    wake: Notify,
    stop: AtomicBool,
}

/// What one client saw.
struct ClientStats {
    main: Tally,
    release: Tally,
    main_latency: Histogram<u64>,
    release_latency: Histogram<u64>,
    errors: BTreeMap<String, u64>,
    last_done: Option<Instant>,
}

impl ClientStats {
    fn new() -> ClientStats {
        ClientStats {
            main: Tally::default(),
            release: Tally::default(),
            main_latency: new_histogram(),
            release_latency: new_histogram(),
            errors: BTreeMap::new(),
            last_done: None,
        }
    }

    fn error(&mut self, e: &Error) {
        *self.errors.entry(error_name(e)).or_insert(0) += 1;
    }
}

/// How one logical operation ended.
enum Outcome {
    Ok,
    /// The window closed while it was still retrying.
    GaveUp,
    Failed(Error),
}

fn is_terminal(e: &Error) -> bool {
    matches!(
        e,
        Error::Closed | Error::SessionExpired { .. } | Error::AuthFailed { .. }
    )
}

pub async fn run(servers: &str, cell: &Cell) -> Result<CellResult, String> {
    let options = ClientOptions {
        session_timeout: SESSION_TIMEOUT,
        ..ClientOptions::default()
    };
    let admin = Client::connect(servers, options.clone())
        .await
        .map_err(|e| format!("cannot connect to {servers}: {e}"))?;
    let is_queue = matches!(cell.workload, Workload::PqExtension | Workload::PqRecipe);
    let queue = Arc::new(Queue {
        target: cell.queue_depth as i64,
        depth: AtomicI64::new(0),
        wake: Notify::new(),
        stop: AtomicBool::new(false),
    });
    let payload = vec![b'x'; cell.payload_bytes];
    let nonce = {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Rng::new(t ^ u64::from(std::process::id())).next_u64()
    };

    // Setup, not measured.
    let producer = match cell.workload {
        Workload::PqExtension | Workload::PqRecipe => {
            let dir = if cell.workload == Workload::PqExtension {
                register(&admin, PQ_EXTENSION, QUEUE, PQ_SOURCE).await?;
                ensure(&admin, QUEUE, b"").await?;
                QUEUE
            } else {
                ensure(&admin, ROOT, b"").await?;
                ensure(&admin, RECIPE_QUEUE, b"").await?;
                RECIPE_QUEUE
            };
            empty_queue(&admin, dir).await?;
            let producer = Client::connect(servers, options.clone())
                .await
                .map_err(|e| format!("cannot connect to {servers}: {e}"))?;
            let handle = tokio::spawn(produce(
                producer.clone(),
                dir,
                Arc::clone(&queue),
                payload.clone(),
                nonce,
            ));
            let filled = clock::now() + FILL_TIMEOUT;
            while queue.depth.load(Ordering::Relaxed) < queue.target {
                if clock::now() >= filled || handle.is_finished() {
                    queue.stop.store(true, Ordering::Relaxed);
                    queue.wake.notify_one();
                    let _ = producer.close().await;
                    return Err(format!("setup: cannot fill the queue {dir}"));
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            if cell.workload == Workload::PqExtension {
                // A server without extensions has no /queue/next.
                match admin.get_data(QUEUE_NEXT, false).await {
                    Ok(_) => {
                        queue.depth.fetch_sub(1, Ordering::Relaxed);
                        queue.wake.notify_one();
                    }
                    Err(e) => {
                        queue.stop.store(true, Ordering::Relaxed);
                        queue.wake.notify_one();
                        let _ = producer.close().await;
                        return Err(format!(
                            "setup: getData {QUEUE_NEXT} failed ({e}): this server does not \
                             run the priority-queue extension (server-side extensions are \
                             Stoa's; run pq-recipe against ZooKeeper)"
                        ));
                    }
                }
            }
            Some((producer, handle))
        }
        Workload::QuotaExtension => {
            set_or_create(&admin, MEMORY, QUOTA_TOTAL.to_string().as_bytes()).await?;
            register(&admin, QUOTA_EXTENSION, QUOTA_NODE, QUOTA_SOURCE).await?;
            match admin.get_data(QUOTA_NODE, false).await {
                Ok((data, _)) if data == QUOTA_TOTAL.to_string().as_bytes() => {}
                other => {
                    return Err(format!(
                        "setup: getData {QUOTA_NODE} gave {other:?}, not {QUOTA_TOTAL}: this \
                         server does not run the quota extension (server-side extensions are \
                         Stoa's; run quota-recipe against ZooKeeper)"
                    ))
                }
            }
            None
        }
        Workload::QuotaRecipe => {
            ensure(&admin, ROOT, b"").await?;
            set_or_create(&admin, RECIPE_MEMORY, QUOTA_TOTAL.to_string().as_bytes()).await?;
            None
        }
        Workload::Mix | Workload::Lock(_) => return Err("not an EZK scenario".into()),
    };

    let mut clients = Vec::with_capacity(cell.sessions);
    for _ in 0..cell.sessions {
        clients.push(
            Client::connect(servers, options.clone())
                .await
                .map_err(|e| format!("cannot connect to {servers}: {e}"))?,
        );
    }

    let start = clock::now();
    let warmup_end = start + cell.warmup;
    let window = Arc::new(Window {
        warmup_end,
        measure_end: match cell.ops {
            Some(_) => None,
            None => Some(warmup_end + cell.duration),
        },
        tickets: AtomicU64::new(cell.ops.unwrap_or(0)),
    });
    let cpu_window = cpu::Window::starting_at(warmup_end, &cell.server_pids);
    let mut handles = Vec::with_capacity(clients.len());
    for client in &clients {
        let client = client.clone();
        let window = Arc::clone(&window);
        let queue = Arc::clone(&queue);
        let workload = cell.workload;
        let backoff = cell.backoff;
        handles.push(tokio::spawn(async move {
            match workload {
                Workload::PqExtension | Workload::PqRecipe => {
                    consume(client, workload, window, queue).await
                }
                _ => allocate_release(client, workload, window, backoff).await,
            }
        }));
    }
    let (stats, cpu) = cpu_window.gather(handles, "client").await?;
    let mut producer_errors = BTreeMap::new();
    if let Some((producer, handle)) = producer {
        queue.stop.store(true, Ordering::Relaxed);
        queue.wake.notify_one();
        producer_errors = handle.await.map_err(|e| format!("producer failed: {e}"))?;
        let _ = producer.close().await;
    }
    for client in &clients {
        let _ = client.close().await;
    }
    // Unregister, so later runs (and other scenarios) see a server without
    // extensions; best effort.
    let registered = match cell.workload {
        Workload::PqExtension => Some(PQ_EXTENSION),
        Workload::QuotaExtension => Some(QUOTA_EXTENSION),
        _ => None,
    };
    if let Some(name) = registered {
        let _ = admin.delete(&format!("{EXTENSIONS}/{name}"), -1).await;
    }
    let _ = admin.close().await;

    // Merge.
    let mut main = Tally::default();
    let mut release = Tally::default();
    let mut main_latency = new_histogram();
    let mut release_latency = new_histogram();
    let mut all = new_histogram();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut last_done = warmup_end;
    for s in stats {
        main.add(&s.main);
        release.add(&s.release);
        main_latency
            .add(&s.main_latency)
            .expect("histograms share bounds");
        release_latency
            .add(&s.release_latency)
            .expect("histograms share bounds");
        for (k, n) in s.errors {
            *errors.entry(k).or_insert(0) += n;
        }
        if let Some(done) = s.last_done {
            last_done = last_done.max(done);
        }
    }
    for (k, n) in producer_errors {
        *errors.entry(format!("producer {k}")).or_insert(0) += n;
    }
    all.add(&main_latency).expect("histograms share bounds");
    all.add(&release_latency).expect("histograms share bounds");
    main.latency = (!main_latency.is_empty()).then(|| Latency::of(&main_latency));
    release.latency = (!release_latency.is_empty()).then(|| Latency::of(&release_latency));
    let ok = main.ok + release.ok;
    let ezk = EzkStats {
        workload: cell.workload,
        clients: cell.sessions,
        main,
        release: (!is_queue).then_some(release),
    };
    let elapsed = last_done.saturating_duration_since(warmup_end);
    Ok(CellResult::of_scenario(
        cell,
        servers,
        elapsed,
        ok,
        errors,
        Latency::of(&all),
        cpu,
        ScenarioStats::Ezk(ezk),
    ))
}

fn record(h: &mut Histogram<u64>, began: Instant, done: Instant) {
    let us = done.saturating_duration_since(began).as_micros() as u64;
    h.saturating_record(us.clamp(1, LATENCY_US_MAX));
}

// --------------------------------------------------------------------------
// setup

pub(crate) async fn ensure(client: &Client, path: &str, data: &[u8]) -> Result<(), String> {
    match client
        .create(path, data, &open_acl_unsafe(), CreateMode::Persistent)
        .await
    {
        Ok(_) | Err(Error::NodeExists { .. }) => Ok(()),
        Err(e) => Err(format!("setup: create {path}: {e}")),
    }
}

async fn set_or_create(client: &Client, path: &str, data: &[u8]) -> Result<(), String> {
    match client.set_data(path, data, -1).await {
        Ok(_) => Ok(()),
        Err(Error::NoNode { .. }) => client
            .create(path, data, &open_acl_unsafe(), CreateMode::Persistent)
            .await
            .map(|_| ())
            .map_err(|e| format!("setup: create {path}: {e}")),
        Err(e) => Err(format!("setup: setData {path}: {e}")),
    }
}

/// The registration document of `docs/extensions.md`.
pub fn registration(path: &str, source: &str) -> Vec<u8> {
    json!({ "kind": "node", "path": path, "source": source })
        .to_string()
        .into_bytes()
}

/// Registers (or re-registers, which resets the extension) a node extension.
pub(crate) async fn register(
    client: &Client,
    name: &str,
    path: &str,
    source: &str,
) -> Result<(), String> {
    ensure(client, EXTENSIONS, b"").await?;
    let node = format!("{EXTENSIONS}/{name}");
    let doc = registration(path, source);
    match client
        .create(&node, &doc, &open_acl_unsafe(), CreateMode::Persistent)
        .await
    {
        Ok(_) => Ok(()),
        Err(Error::NodeExists { .. }) => client
            .set_data(&node, &doc, -1)
            .await
            .map(|_| ())
            .map_err(|e| format!("setup: re-register {node}: {e}")),
        Err(e) => Err(format!("setup: register {node}: {e}")),
    }
}

/// Deletes a registration (best effort), so later runs see a server
/// without the extension.
pub(crate) async fn unregister(client: &Client, name: &str) {
    let _ = client.delete(&format!("{EXTENSIONS}/{name}"), -1).await;
}

/// Deletes what an earlier run left in the queue.
async fn empty_queue(client: &Client, dir: &str) -> Result<(), String> {
    let names = client
        .get_children(dir, false)
        .await
        .map_err(|e| format!("setup: getChildren {dir}: {e}"))?;
    let mut set = tokio::task::JoinSet::new();
    for name in names {
        if set.len() >= 256 {
            set.join_next().await;
        }
        let client = client.clone();
        let path = format!("{dir}/{name}");
        set.spawn(async move { client.delete(&path, -1).await });
    }
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(())) | Ok(Err(Error::NoNode { .. })) => {}
            Ok(Err(e)) => return Err(format!("setup: emptying {dir}: {e}")),
            Err(e) => return Err(format!("setup task failed: {e}")),
        }
    }
    Ok(())
}

// --------------------------------------------------------------------------
// priority queue

/// Keeps the queue at about `queue.target` elements with pipelined creates of
/// `<dir>/node-<prio>-` (sequential). Returns its errors.
async fn produce(
    client: Client,
    dir: &'static str,
    queue: Arc<Queue>,
    payload: Vec<u8>,
    nonce: u64,
) -> BTreeMap<String, u64> {
    let mut rng = Rng::new(nonce ^ 0x5eed);
    let mut errors = BTreeMap::new();
    let mut in_flight = tokio::task::JoinSet::new();
    let acl = open_acl_unsafe();
    loop {
        if queue.stop.load(Ordering::Relaxed) {
            break;
        }
        while in_flight.len() < PRODUCER_WINDOW
            && queue.depth.load(Ordering::Relaxed) + (in_flight.len() as i64) < queue.target
        {
            let client = client.clone();
            let path = format!("{dir}/node-{}-", rng.below(PRIORITIES));
            let payload = payload.clone();
            let acl = acl.clone();
            in_flight.spawn(async move {
                client
                    .create(&path, &payload, &acl, CreateMode::PersistentSequential)
                    .await
            });
        }
        tokio::select! {
            _ = queue.wake.notified() => {}
            Some(r) = in_flight.join_next(), if !in_flight.is_empty() => match r {
                Ok(Ok(_)) => {
                    queue.depth.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Err(e)) => {
                    let terminal = is_terminal(&e);
                    *errors.entry(error_name(&e)).or_insert(0) += 1;
                    if terminal {
                        break;
                    }
                }
                Err(_) => break,
            },
        }
    }
    while in_flight.join_next().await.is_some() {}
    errors
}

/// `node-<prio>-<seq>` -> (prio, seq), the order the queue serves.
pub fn queue_order(name: &str) -> Option<(i64, u64)> {
    let rest = name.strip_prefix("node-")?;
    let (prio, seq) = rest.rsplit_once('-')?;
    Some((prio.parse().ok()?, seq.parse().ok()?))
}

/// The recipe's candidates, head first.
pub fn candidates(names: Vec<String>) -> Vec<String> {
    let mut keyed: Vec<((i64, u64), String)> = names
        .into_iter()
        .filter_map(|n| queue_order(&n).map(|k| (k, n)))
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, n)| n).collect()
}

async fn consume(
    client: Client,
    workload: Workload,
    window: Arc<Window>,
    queue: Arc<Queue>,
) -> ClientStats {
    let mut stats = ClientStats::new();
    loop {
        let began = clock::now();
        let Some(measured) = window.begin(began) else {
            break;
        };
        let mut t = Tally::default();
        let outcome = match workload {
            Workload::PqExtension => dequeue_extension(&client, &window, &mut t).await,
            _ => dequeue_recipe(&client, &window, &mut t).await,
        };
        let done = clock::now();
        if let Outcome::Ok = outcome {
            queue.depth.fetch_sub(1, Ordering::Relaxed);
            queue.wake.notify_one();
        }
        if !measured {
            if let Outcome::Failed(e) = &outcome {
                if is_terminal(e) {
                    break;
                }
            }
            continue;
        }
        stats.main.add(&t);
        stats.last_done = Some(done);
        match outcome {
            Outcome::Ok => {
                stats.main.ok += 1;
                record(&mut stats.main_latency, began, done);
            }
            Outcome::GaveUp => {}
            Outcome::Failed(e) => {
                stats.error(&e);
                if is_terminal(&e) {
                    break;
                }
            }
        }
    }
    stats
}

async fn dequeue_extension(client: &Client, window: &Window, t: &mut Tally) -> Outcome {
    loop {
        t.calls += 1;
        match client.get_data(QUEUE_NEXT, false).await {
            Ok(_) => return Outcome::Ok,
            Err(Error::NoNode { .. }) => {
                t.empty += 1;
                if window.over(clock::now()) {
                    return Outcome::GaveUp;
                }
                tokio::time::sleep(EMPTY_PAUSE).await;
            }
            Err(e) => return Outcome::Failed(e),
        }
    }
}

async fn dequeue_recipe(client: &Client, window: &Window, t: &mut Tally) -> Outcome {
    loop {
        t.calls += 1;
        let names = match client.get_children(RECIPE_QUEUE, false).await {
            Ok(names) => names,
            Err(e) => return Outcome::Failed(e),
        };
        let names = candidates(names);
        if names.is_empty() {
            t.empty += 1;
            if window.over(clock::now()) {
                return Outcome::GaveUp;
            }
            tokio::time::sleep(EMPTY_PAUSE).await;
            continue;
        }
        for name in names {
            let path = format!("{RECIPE_QUEUE}/{name}");
            t.calls += 1;
            let version = match client.get_data(&path, false).await {
                Ok((_, stat)) => stat.version,
                Err(Error::NoNode { .. }) => {
                    t.conflicts += 1;
                    continue;
                }
                Err(e) => return Outcome::Failed(e),
            };
            t.calls += 1;
            match client.delete(&path, version).await {
                Ok(()) => return Outcome::Ok,
                Err(Error::NoNode { .. } | Error::BadVersion { .. }) => t.conflicts += 1,
                Err(e) => return Outcome::Failed(e),
            }
        }
        if window.over(clock::now()) {
            return Outcome::GaveUp;
        }
    }
}

// --------------------------------------------------------------------------
// quota

async fn allocate_release(
    client: Client,
    workload: Workload,
    window: Arc<Window>,
    backoff: Duration,
) -> ClientStats {
    let mut stats = ClientStats::new();
    loop {
        let began = clock::now();
        let Some(measured) = window.begin(began) else {
            break;
        };
        let mut t = Tally::default();
        let outcome = quota_call(&client, workload, QUOTA_REQUEST, &window, backoff, &mut t).await;
        let done = clock::now();
        if measured {
            stats.main.add(&t);
            stats.last_done = Some(done);
        }
        match outcome {
            Outcome::Ok => {
                if measured {
                    stats.main.ok += 1;
                    record(&mut stats.main_latency, began, done);
                }
            }
            Outcome::GaveUp => break,
            Outcome::Failed(e) => {
                if measured {
                    stats.error(&e);
                }
                if is_terminal(&e) {
                    break;
                }
                continue;
            }
        }
        // Release what was granted, measured or not, so the next run starts
        // with the whole quota.
        let began = clock::now();
        let measured = window.measured(began);
        let mut t = Tally::default();
        let outcome = quota_call(&client, workload, -QUOTA_REQUEST, &window, backoff, &mut t).await;
        let done = clock::now();
        if measured {
            stats.release.add(&t);
            stats.last_done = Some(done);
        }
        match outcome {
            Outcome::Ok => {
                if measured {
                    stats.release.ok += 1;
                    record(&mut stats.release_latency, began, done);
                }
            }
            Outcome::GaveUp => break,
            Outcome::Failed(e) => {
                stats.error(&e);
                break;
            }
        }
    }
    stats
}

/// Takes `amount` from the free quota (negative gives back). Retries a
/// refusal for lack of quota after `backoff` until the window closes;
/// the recipe also retries on BadVersion, at once.
async fn quota_call(
    client: &Client,
    workload: Workload,
    amount: i64,
    window: &Window,
    backoff: Duration,
    t: &mut Tally,
) -> Outcome {
    loop {
        let granted = if workload == Workload::QuotaExtension {
            t.calls += 1;
            match client
                .set_data(QUOTA_NODE, amount.to_string().as_bytes(), -1)
                .await
            {
                Ok(_) => true,
                Err(Error::QuotaExceeded { .. }) => false,
                Err(e) => return Outcome::Failed(e),
            }
        } else {
            t.calls += 1;
            let (data, stat) = match client.get_data(RECIPE_MEMORY, false).await {
                Ok(r) => r,
                Err(e) => return Outcome::Failed(e),
            };
            let Some(free) = std::str::from_utf8(&data)
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
            else {
                return Outcome::Failed(Error::DataInconsistency {
                    path: RECIPE_MEMORY.into(),
                });
            };
            if free < amount {
                false
            } else {
                t.calls += 1;
                match client
                    .set_data(
                        RECIPE_MEMORY,
                        (free - amount).to_string().as_bytes(),
                        stat.version,
                    )
                    .await
                {
                    Ok(_) => return Outcome::Ok,
                    Err(Error::BadVersion { .. }) => {
                        t.conflicts += 1;
                        continue;
                    }
                    Err(e) => return Outcome::Failed(e),
                }
            }
        };
        if granted {
            return Outcome::Ok;
        }
        t.short += 1;
        if window.over(clock::now()) {
            return Outcome::GaveUp;
        }
        if !backoff.is_zero() {
            tokio::time::sleep(backoff).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recipe_orders_candidates_like_the_extension() {
        let names = vec![
            "node-3-0000000001".to_owned(),
            "node-1-0000000007".to_owned(),
            "node--2-0000000009".to_owned(),
            "node-1-0000000002".to_owned(),
            "other".to_owned(),
        ];
        assert_eq!(
            candidates(names),
            [
                "node--2-0000000009",
                "node-1-0000000002",
                "node-1-0000000007",
                "node-3-0000000001"
            ]
        );
    }

    #[test]
    fn the_registration_is_the_documented_json() {
        let doc: serde_json::Value =
            serde_json::from_slice(&registration(QUEUE, PQ_SOURCE)).unwrap();
        assert_eq!(doc["kind"], "node");
        assert_eq!(doc["path"], QUEUE);
        // The examples take their paths from where they are registered.
        assert!(doc["source"].as_str().unwrap().contains("EXTENSION.path"));
        assert!(QUOTA_SOURCE.contains("%-quota$"));
        assert_eq!(QUOTA_NODE.strip_suffix("-quota"), Some(MEMORY));
        assert_eq!(QUEUE_NEXT, format!("{QUEUE}/next"));
    }

    #[test]
    fn calls_per_op_of_nothing_is_not_a_number() {
        let t = Tally {
            ok: 4,
            calls: 10,
            ..Tally::default()
        };
        assert_eq!(t.calls_per_op(), 2.5);
        assert!(Tally::default().calls_per_op().is_nan());
    }
}
