//! The lock experiments of "The Cost of Consensus: Synchronization in
//! Distributed Systems" (its Figs. 10-16): each client thinks for an
//! exponentially distributed time (mean `--think-ms`; with many clients,
//! Poisson arrivals of lock requests), acquires the lock, holds it for an
//! exponentially distributed critical section (mean `--hold-ms`), releases
//! it, and thinks again. The figure is the acquire latency: from the
//! request to the grant, waiting for other holders included.
//!
//! The primitives (`Primitive`), by name:
//! - `tas`: the client-side test-and-set lock (`TasLock::lock`): create the
//!   node; when taken, watch it and race again once it goes (the paper's
//!   synchronous TAS).
//! - `tas-async`: `TasLock::lock_polling`: a create every `--poll-ms` without
//!   waiting for the previous answer (the paper's asynchronous TAS).
//! - `queue`: the client-side queue lock (`QueueLock::acquire`): create a
//!   sequential node, list, watch the predecessor (the synchronous queue).
//! - `queue-async`: `QueueLock::acquire_pipelined`: the create and the first
//!   listing sent together (the asynchronous queue, minus its polling).
//! - `server`: the server-side FIFO lock, `examples/extensions/fifo_lock.lua`
//!   (Stoa only), registered by the run, through `recipes::server_side`:
//!   one create takes a ticket and its stat says whether it holds; a waiter
//!   watches its own ticket, which the release before it grants in the
//!   same transaction. Further server-side primitives are added by name
//!   here.
//!
//! The client-side ones run against any ZooKeeper-protocol server.
//!
//! Besides the acquire latency each cell reports its hand-offs
//! ([`Handoffs`]): the gap from a holder's release to the next grant, and
//! the mean of what the lock itself took per grant. Under high contention
//! the acquire latency is mostly waiting for other holders, which a short
//! cell draws by chance; the hand-off is the lock's own cost.
//! `--lock-trace FILE` writes each acquisition's timestamps.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;
use stoa_client::recipes::server_side::{FifoLock, Ticket};
use stoa_client::recipes::{QueueLock, TasLock};
use stoa_client::tokio;
use stoa_client::{open_acl_unsafe, Client, ClientOptions, CreateMode};

use crate::clock;
use crate::cpu;
use crate::driver::{error_name, new_histogram, LATENCY_US_MAX, ROOT};
use crate::ezk::{ensure, register, unregister};
use crate::mix::Rng;
use crate::options::Cell;
use crate::report::{CellResult, Latency, ScenarioStats};

/// The client-side locks: the TAS lock's node, the queue lock's directory.
pub const TAS_LOCK: &str = "/stoa-bench/prim-tas";
pub const QUEUE_LOCK: &str = "/stoa-bench/prim-queue";
/// Where the server-side lock extension is registered, and its lock.
pub const SERVER_ROOT: &str = "/prim-lock";
pub const SERVER_LOCK: &str = "/prim-lock/l";
const SERVER_TICKET: &str = "/prim-lock/l/w-";
const SERVER_EXTENSION: &str = "stoa-bench-fifo-lock";
const FIFO_LOCK_SOURCE: &str = include_str!("../../../examples/extensions/fifo_lock.lua");

const SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// An acquire begun in the window may finish after it, within this.
const ACQUIRE_GRACE: Duration = Duration::from_secs(30);

/// The locks measured, by scenario name (`prim-lock-<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primitive {
    Tas,
    TasAsync,
    Queue,
    QueueAsync,
    Server,
}

impl Primitive {
    pub const ALL: [Primitive; 5] = [
        Primitive::Tas,
        Primitive::TasAsync,
        Primitive::Queue,
        Primitive::QueueAsync,
        Primitive::Server,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Primitive::Tas => "tas",
            Primitive::TasAsync => "tas-async",
            Primitive::Queue => "queue",
            Primitive::QueueAsync => "queue-async",
            Primitive::Server => "server",
        }
    }

    pub fn parse(name: &str) -> Option<Primitive> {
        Primitive::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Runs inside the server (Stoa's extensions only).
    pub fn server_side(self) -> bool {
        self == Primitive::Server
    }
}

/// The lock figures of one cell.
#[derive(Debug, Clone, PartialEq)]
pub struct PrimStats {
    pub primitive: Primitive,
    pub clients: usize,
    pub think: Duration,
    pub hold: Duration,
    pub poll: Duration,
    /// Locks granted to requests made in the measured window.
    pub acquisitions: u64,
    /// Requests still not granted when their time ran out.
    pub timeouts: u64,
    pub acquire: Option<Latency>,
    /// The lock's own cost, apart from queueing: `Handoffs::of`.
    pub handoffs: Handoffs,
}

/// One acquisition as its client saw it: when it asked, when it learnt it
/// held, when it sent its release and when the release was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquisition {
    pub client: usize,
    pub measured: bool,
    pub began: Instant,
    pub granted: Instant,
    pub release_sent: Instant,
    pub released: Instant,
}

/// What the grants, in the order the clients learnt them, say about the
/// lock itself. A request made while another client held the lock waits
/// for that hold whatever the lock; what the lock adds is the hand-off:
/// from the holder's release (sent) to the next grant (learnt). Those are
/// a cell's figures that do not depend on how many requests happened to
/// queue: a real hand-off cost shows here, queueing noise does not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Handoffs {
    /// Measured grants to a request made before the previous holder
    /// released.
    pub count: u64,
    /// Their release-to-grant gaps.
    pub gap: Option<Latency>,
    /// Mean over measured grants of what the lock itself took: the gap for
    /// a hand-off, the whole acquire for a request that found it free.
    pub own_mean_us: f64,
    /// Grants learnt before the previous holder sent its release: mutual
    /// exclusion broken as the clients saw it (0 for a correct lock).
    pub overlaps: u64,
}

impl Handoffs {
    pub fn of(acquisitions: &[Acquisition]) -> Handoffs {
        let mut order: Vec<&Acquisition> = acquisitions.iter().collect();
        order.sort_by_key(|a| a.granted);
        let mut gaps = new_histogram();
        let (mut count, mut overlaps, mut own_us, mut measured) = (0, 0, 0.0, 0u64);
        let us = |d: Duration| d.as_micros() as u64;
        for (i, a) in order.iter().enumerate() {
            if !a.measured {
                continue;
            }
            measured += 1;
            let previous = i.checked_sub(1).map(|j| order[j]);
            match previous {
                Some(p) if a.granted < p.release_sent => {
                    overlaps += 1;
                }
                Some(p) if a.began < p.release_sent => {
                    count += 1;
                    let gap = us(a.granted - p.release_sent);
                    gaps.saturating_record(gap.clamp(1, LATENCY_US_MAX));
                    own_us += gap as f64;
                }
                _ => own_us += us(a.granted.saturating_duration_since(a.began)) as f64,
            }
        }
        Handoffs {
            count,
            gap: (!gaps.is_empty()).then(|| Latency::of(&gaps)),
            own_mean_us: if measured > 0 {
                own_us / measured as f64
            } else {
                0.0
            },
            overlaps,
        }
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "count": self.count,
            "gap_us": self.gap.map(|l| l.json()),
            "own_mean_us": self.own_mean_us,
            "overlaps": self.overlaps,
        })
    }
}

impl PrimStats {
    pub fn json(&self, elapsed: Duration) -> serde_json::Value {
        let secs = elapsed.as_secs_f64();
        json!({
            "primitive": self.primitive.name(),
            "server_side": self.primitive.server_side(),
            "clients": self.clients,
            "think_ms": self.think.as_secs_f64() * 1e3,
            "hold_ms": self.hold.as_secs_f64() * 1e3,
            "poll_ms": self.poll.as_secs_f64() * 1e3,
            "acquisitions": self.acquisitions,
            "acquisitions_per_s": if secs > 0.0 { self.acquisitions as f64 / secs } else { 0.0 },
            "timeouts": self.timeouts,
            "acquire_us": self.acquire.map(|l| l.json()),
            "handoffs": self.handoffs.json(),
        })
    }

    pub fn summary(&self, elapsed: Duration) -> String {
        let secs = elapsed.as_secs_f64().max(1e-9);
        format!(
            "  lock {}: {} clients, think {:.0} ms, hold {:.0} ms: {:.2} acquisitions/s, \
             mean acquire {:.2} ms ({:.2} ms the lock's own), {} hand-offs of median {:.2} ms, \
             {} timed out{}\n",
            self.primitive.name(),
            self.clients,
            self.think.as_secs_f64() * 1e3,
            self.hold.as_secs_f64() * 1e3,
            self.acquisitions as f64 / secs,
            self.acquire.map(|l| l.mean_us / 1e3).unwrap_or(f64::NAN),
            self.handoffs.own_mean_us / 1e3,
            self.handoffs.count,
            self.handoffs
                .gap
                .map(|l| l.p50_us as f64 / 1e3)
                .unwrap_or(f64::NAN),
            self.timeouts,
            if self.handoffs.overlaps > 0 {
                format!(", {} OVERLAPPING GRANTS", self.handoffs.overlaps)
            } else {
                String::new()
            }
        )
    }
}

/// An exponentially distributed duration of mean `mean`.
pub fn exponential(rng: &mut Rng, mean: Duration) -> Duration {
    if mean.is_zero() {
        return Duration::ZERO;
    }
    // u in (0, 1]: -ln(u) is finite.
    let u = ((rng.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    // Bounded at 20 means (a chance of e^-20), so no sleep runs away.
    Duration::from_secs_f64(mean.as_secs_f64() * (-u.ln()).min(20.0))
}

struct ClientStats {
    acquisitions_seen: Vec<Acquisition>,
    latency: Histogram<u64>,
    acquisitions: u64,
    timeouts: u64,
    errors: BTreeMap<String, u64>,
}

pub async fn run(servers: &str, cell: &Cell, primitive: Primitive) -> Result<CellResult, String> {
    if cell.ops.is_some() {
        return Err("the lock scenarios are timed: give --duration, not --ops".into());
    }
    let options = ClientOptions {
        session_timeout: SESSION_TIMEOUT,
        ..ClientOptions::default()
    };
    let admin = Client::connect(servers, options.clone())
        .await
        .map_err(|e| format!("cannot connect to {servers}: {e}"))?;
    // Setup, not measured: the paths exist before the first request.
    match primitive {
        Primitive::Server => {
            register(&admin, SERVER_EXTENSION, SERVER_ROOT, FIFO_LOCK_SOURCE).await?;
            // One ticket taken and given back creates the lock node and shows
            // the extension runs.
            let ticket = admin
                .create(
                    SERVER_TICKET,
                    b"",
                    &open_acl_unsafe(),
                    CreateMode::EphemeralSequential,
                )
                .await
                .map_err(|e| format!("setup: create {SERVER_TICKET}: {e}"))?;
            let holder = admin.get_data(SERVER_LOCK, false).await;
            let _ = admin.delete(&ticket, -1).await;
            match holder {
                Ok((data, _)) if ticket.ends_with(&*String::from_utf8_lossy(&data)) => {}
                other => {
                    return Err(format!(
                        "setup: getData {SERVER_LOCK} gave {other:?}, not the ticket {ticket}: \
                         this server does not run the FIFO lock extension (server-side \
                         primitives are Stoa's; run the client-side ones against ZooKeeper)"
                    ))
                }
            }
        }
        _ => {
            ensure(&admin, ROOT, b"").await?;
            ensure(&admin, QUEUE_LOCK, b"").await?;
        }
    }
    let mut clients = Vec::with_capacity(cell.sessions);
    for _ in 0..cell.sessions {
        clients.push(
            Client::connect(servers, options.clone())
                .await
                .map_err(|e| format!("cannot connect to {servers}: {e}"))?,
        );
    }
    let nonce = {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        t ^ u64::from(std::process::id())
    };
    let start = clock::now();
    let warmup_end = start + cell.warmup;
    let measure_end = warmup_end + cell.duration;
    let cpu_window = cpu::Window::starting_at(warmup_end, &cell.server_pids);
    let mut handles = Vec::with_capacity(clients.len());
    for (i, client) in clients.iter().enumerate() {
        let client = client.clone();
        let rng = Rng::new(nonce ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9));
        let (think, hold, poll) = (cell.think, cell.hold, cell.poll);
        handles.push(tokio::spawn(async move {
            lock_loop(
                i,
                client,
                primitive,
                rng,
                (think, hold, poll),
                warmup_end,
                measure_end,
            )
            .await
        }));
    }
    let (stats, cpu) = cpu_window.gather(handles, "client").await?;
    for client in &clients {
        let _ = client.close().await;
    }
    if primitive.server_side() {
        unregister(&admin, SERVER_EXTENSION).await;
    }
    let _ = admin.close().await;

    let mut all = new_histogram();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let (mut acquisitions, mut timeouts) = (0, 0);
    let seen: Vec<Acquisition> = stats
        .iter()
        .flat_map(|s| s.acquisitions_seen.iter().copied())
        .collect();
    if let Some(path) = &cell.lock_trace {
        write_trace(path, &seen, warmup_end)?;
    }
    for s in stats {
        all.add(&s.latency).expect("histograms share bounds");
        acquisitions += s.acquisitions;
        timeouts += s.timeouts;
        for (k, n) in s.errors {
            *errors.entry(k).or_insert(0) += n;
        }
    }
    let latency = Latency::of(&all);
    let prim = PrimStats {
        primitive,
        clients: cell.sessions,
        think: cell.think,
        hold: cell.hold,
        poll: cell.poll,
        acquisitions,
        timeouts,
        acquire: (!all.is_empty()).then_some(latency),
        handoffs: Handoffs::of(&seen),
    };
    // Throughput over the window requests were made in (grants of requests
    // made in it that came after it are few and counted).
    Ok(CellResult::of_scenario(
        cell,
        servers,
        cell.duration,
        acquisitions,
        errors,
        latency,
        cpu,
        ScenarioStats::Prim(prim),
    ))
}

/// `--lock-trace`: the measured acquisitions in grant order, one a line:
/// `client began granted release_sent released`, µs from `zero`.
fn write_trace(path: &std::path::Path, seen: &[Acquisition], zero: Instant) -> Result<(), String> {
    let mut order: Vec<&Acquisition> = seen.iter().filter(|a| a.measured).collect();
    order.sort_by_key(|a| a.granted);
    let us = |t: Instant| t.saturating_duration_since(zero).as_micros();
    let mut text = String::from("# client began_us granted_us release_sent_us released_us\n");
    for a in order {
        text.push_str(&format!(
            "{} {} {} {} {}\n",
            a.client,
            us(a.began),
            us(a.granted),
            us(a.release_sent),
            us(a.released)
        ));
    }
    std::fs::write(path, text).map_err(|e| format!("--lock-trace {}: {e}", path.display()))
}

async fn lock_loop(
    index: usize,
    client: Client,
    primitive: Primitive,
    mut rng: Rng,
    (think, hold, poll): (Duration, Duration, Duration),
    warmup_end: Instant,
    measure_end: Instant,
) -> ClientStats {
    let mut stats = ClientStats {
        acquisitions_seen: Vec::new(),
        latency: new_histogram(),
        acquisitions: 0,
        timeouts: 0,
        errors: BTreeMap::new(),
    };
    let mut tas = match TasLock::new(client.clone(), TAS_LOCK) {
        Ok(t) => t,
        Err(e) => {
            stats.errors.insert(error_name(&e), 1);
            return stats;
        }
    };
    loop {
        // Think, but start no request after the window.
        let wake = clock::now() + exponential(&mut rng, think);
        if wake >= measure_end {
            break;
        }
        tokio::time::sleep_until(wake.into()).await;
        let began = clock::now();
        let measured = began >= warmup_end;
        let timeout = (measure_end + ACQUIRE_GRACE).saturating_duration_since(began);
        let outcome = match primitive {
            Primitive::Tas => tas.lock(Some(timeout)).await.map(|ok| ok.then_some(None)),
            Primitive::TasAsync => tas
                .lock_polling(poll, Some(timeout))
                .await
                .map(|ok| ok.then_some(None)),
            Primitive::Queue | Primitive::QueueAsync => {
                match QueueLock::new(client.clone(), QUEUE_LOCK) {
                    Ok(mut q) => {
                        let r = if primitive == Primitive::Queue {
                            q.acquire(Some(timeout)).await
                        } else {
                            q.acquire_pipelined(Some(timeout)).await
                        };
                        r.map(|ok| ok.then_some(Some(Held::Queue(q))))
                    }
                    Err(e) => Err(e),
                }
            }
            // One create takes a ticket and says whether it holds; a
            // waiter watches its own ticket, which the release before it
            // grants (`recipes::server_side`).
            Primitive::Server => match FifoLock::new(client.clone(), SERVER_LOCK) {
                Ok(lock) => (lock.acquire(Some(timeout)).await)
                    .map(|t| t.map(|ticket| Some(Held::Ticket(ticket)))),
                Err(e) => Err(e),
            },
        };
        let done = clock::now();
        let held = match outcome {
            Ok(Some(held)) => held,
            Ok(None) => {
                if measured {
                    stats.timeouts += 1;
                }
                break;
            }
            Err(e) => {
                *stats.errors.entry(error_name(&e)).or_insert(0) += 1;
                break;
            }
        };
        if measured {
            stats.acquisitions += 1;
            let us = done.saturating_duration_since(began).as_micros() as u64;
            stats.latency.saturating_record(us.clamp(1, LATENCY_US_MAX));
        }
        tokio::time::sleep(exponential(&mut rng, hold)).await;
        let release_sent = clock::now();
        let released = match held {
            None => tas.release().await,
            Some(Held::Queue(mut q)) => q.release().await,
            Some(Held::Ticket(ticket)) => ticket.release().await,
        };
        // Every grant, the warm-up's too: a measured hand-off may follow
        // one made in it.
        stats.acquisitions_seen.push(Acquisition {
            client: index,
            measured,
            began,
            granted: done,
            release_sent,
            released: clock::now(),
        });
        if let Err(e) = released {
            *stats
                .errors
                .entry(format!("release {}", error_name(&e)))
                .or_insert(0) += 1;
            break;
        }
    }
    stats
}

enum Held {
    Queue(QueueLock),
    Ticket(Ticket),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_have_names() {
        for p in Primitive::ALL {
            assert_eq!(Primitive::parse(p.name()), Some(p));
        }
        assert_eq!(Primitive::parse("nope"), None);
        assert!(Primitive::Server.server_side() && !Primitive::Queue.server_side());
    }

    /// Acquisitions at these times (ms from one instant):
    /// (client, measured, began, granted, release sent).
    fn acquisitions(times: &[(usize, bool, f64, f64, f64)]) -> Vec<Acquisition> {
        let zero = Instant::now();
        let at = |ms: f64| zero + Duration::from_secs_f64(ms / 1e3);
        times
            .iter()
            .map(|&(client, measured, began, granted, sent)| Acquisition {
                client,
                measured,
                began: at(began),
                granted: at(granted),
                release_sent: at(sent),
                released: at(sent + 1.0),
            })
            .collect()
    }

    #[test]
    fn handoffs_are_the_locks_own_cost() {
        let h = Handoffs::of(&acquisitions(&[
            // Found free in the warm-up: not counted, but the next one
            // queued behind it.
            (0, false, 0.0, 1.0, 100.0),
            // Asked while 0 held: a hand-off of 2 ms after its release.
            (1, true, 50.0, 102.0, 200.0),
            // Asked while 1 held: 10 ms.
            (2, true, 150.0, 210.0, 250.0),
            // Found it free: its whole acquire (3 ms) is the lock's.
            (0, true, 400.0, 403.0, 450.0),
        ]));
        assert_eq!(h.count, 2);
        assert_eq!(h.overlaps, 0);
        let gap = h.gap.expect("two gaps");
        assert!((1900..=2100).contains(&gap.p50_us), "{gap:?}");
        assert!((9900..=10100).contains(&gap.max_us), "{gap:?}");
        assert!((h.own_mean_us - 5000.0).abs() < 50.0, "{}", h.own_mean_us);
    }

    #[test]
    fn handoffs_see_overlapping_grants() {
        // 1 learnt its grant before 0 sent its release.
        let h = Handoffs::of(&acquisitions(&[
            (0, true, 0.0, 1.0, 100.0),
            (1, true, 10.0, 50.0, 120.0),
        ]));
        assert_eq!((h.overlaps, h.count), (1, 0));
        assert!(h.gap.is_none());
        assert_eq!(Handoffs::of(&[]).own_mean_us, 0.0);
    }

    #[test]
    fn exponential_has_its_mean() {
        let mut rng = Rng::new(7);
        let mean = Duration::from_millis(10);
        let n = 20_000;
        let total: f64 = (0..n)
            .map(|_| exponential(&mut rng, mean).as_secs_f64())
            .sum();
        let got = total / n as f64;
        assert!((got - 0.010).abs() < 0.0005, "{got}");
        assert_eq!(exponential(&mut rng, Duration::ZERO), Duration::ZERO);
    }
}
