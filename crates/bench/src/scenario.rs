//! Named experiments from the papers, each a list of cells built from the
//! command line's flags (a flag the user gave wins over the scenario's
//! default, except for what defines the scenario).
//!
//! From Bagai et al., "Characterizing and Improving ZooKeeper Performance":
//! synchronous vs asynchronous creates, 10k ephemerals of 300 B,
//! producer-consumer create/delete pairs, a read-ratio sweep. From AGORA:
//! throughput against payload size, reads and writes separately. From
//! Extendable ZooKeeper (EZK): a priority queue and a quota service, each as
//! a server-side extension and as the client-side recipe (see `ezk.rs`),
//! swept over synchronous clients. From "The Cost of Consensus": the lock
//! primitives under Poisson arrivals and exponential critical sections
//! (`prim.rs`), one `prim-lock-<primitive>` each and `prim-locks` for all.

use std::time::Duration;

use crate::mix::{Mix, OpKind};
use crate::options::{Args, Cell, Workload};
use crate::prim::Primitive;

pub const NAMES: [&str; 16] = [
    "create-sync",
    "create-async",
    "ephemeral-300b",
    "producer-consumer",
    "read-ratio-sweep",
    "payload-sweep",
    "pq-extension",
    "pq-recipe",
    "quota-extension",
    "quota-recipe",
    "prim-lock-tas",
    "prim-lock-tas-async",
    "prim-lock-queue",
    "prim-lock-queue-async",
    "prim-lock-server",
    "prim-locks",
];

/// The lock scenarios' clients unless --sessions (the paper's contention
/// comes from the arrival rate and the critical section, not many clients).
pub const LOCK_CLIENTS: usize = 4;

/// Synchronous clients (consumers) of the EZK priority-queue sweep.
pub const PQ_CLIENTS: [usize; 6] = [1, 2, 4, 8, 16, 32];
/// The quota sweep adds the paper's 40 clients (its calls-per-allocation
/// point; 15 clients exhaust the quota).
pub const QUOTA_CLIENTS: [usize; 7] = [1, 2, 4, 8, 16, 32, 40];

const READ_RATIOS: [u32; 6] = [0, 25, 50, 75, 90, 100];
const PAYLOADS_BYTES: [usize; 5] = [8, 64, 256, 512, 1024];
const EPHEMERALS: u64 = 10_000;
/// Bagai et al. create 100k znodes synchronously and asynchronously.
const CREATES: u64 = 100_000;

pub fn cells(name: &str, args: &Args) -> Result<Vec<Cell>, String> {
    let base = args.cell();
    let prefix = match &args.label {
        Some(l) => format!("{l}/{name}"),
        None => name.to_owned(),
    };
    let cell = |suffix: &str, f: &dyn Fn(&mut Cell)| {
        let mut c = base.clone();
        c.label = if suffix.is_empty() {
            prefix.clone()
        } else {
            format!("{prefix}/{suffix}")
        };
        f(&mut c);
        c
    };
    let cells = match name {
        // The paper's count unless a duration is given (bench-compare
        // times them, like every cell of its matrix).
        "create-sync" => vec![cell("", &|c| {
            c.mix = Mix::only(OpKind::Create);
            c.sessions = 1;
            c.outstanding = 1;
            if args.duration.is_none() {
                c.ops = Some(args.ops.unwrap_or(CREATES));
            }
        })],
        "create-async" => vec![cell("", &|c| {
            c.mix = Mix::only(OpKind::Create);
            c.sessions = args.sessions.unwrap_or(1);
            c.outstanding = args.outstanding.unwrap_or(100);
            if args.duration.is_none() {
                c.ops = Some(args.ops.unwrap_or(CREATES));
            }
        })],
        "ephemeral-300b" => vec![cell("", &|c| {
            c.mix = Mix::only(OpKind::Create);
            c.ephemeral = true;
            c.payload_bytes = 300;
            c.sessions = args.sessions.unwrap_or(4);
            c.outstanding = args.outstanding.unwrap_or(16);
            if args.duration.is_none() {
                c.ops = Some(args.ops.unwrap_or(EPHEMERALS));
                c.warmup = args.warmup.unwrap_or(Duration::ZERO);
            }
        })],
        "producer-consumer" => vec![cell("", &|c| {
            c.mix = Mix::parse("create=1,delete=1").expect("static mix");
            c.sessions = args.sessions.unwrap_or(4);
        })],
        "read-ratio-sweep" => READ_RATIOS
            .iter()
            .map(|&r| {
                cell(&format!("r{r}"), &|c| {
                    c.mix = Mix::read_ratio(r).expect("static ratio");
                    c.sessions = args.sessions.unwrap_or(8);
                    c.outstanding = args.outstanding.unwrap_or(8);
                })
            })
            .collect(),
        "payload-sweep" => {
            let mut v = Vec::new();
            for (what, kind) in [("read", OpKind::Get), ("write", OpKind::Set)] {
                for &p in &PAYLOADS_BYTES {
                    v.push(cell(&format!("{what}-{p}b"), &|c| {
                        c.mix = Mix::only(kind);
                        c.payload_bytes = p;
                        c.sessions = args.sessions.unwrap_or(8);
                        c.outstanding = args.outstanding.unwrap_or(8);
                    }));
                }
            }
            v
        }
        "pq-extension" | "pq-recipe" | "quota-extension" | "quota-recipe" => {
            let (workload, sweep): (Workload, &[usize]) = match name {
                "pq-extension" => (Workload::PqExtension, &PQ_CLIENTS),
                "pq-recipe" => (Workload::PqRecipe, &PQ_CLIENTS),
                "quota-extension" => (Workload::QuotaExtension, &QUOTA_CLIENTS),
                _ => (Workload::QuotaRecipe, &QUOTA_CLIENTS),
            };
            let counts: Vec<usize> = match args.sessions {
                Some(n) => vec![n],
                None => sweep.to_vec(),
            };
            counts
                .into_iter()
                .map(|n| {
                    cell(&format!("c{n}"), &|c| {
                        c.workload = workload;
                        c.sessions = n;
                        c.outstanding = 1;
                    })
                })
                .collect()
        }
        "prim-locks" => Primitive::ALL
            .iter()
            .map(|&p| lock_cell(&cell, p, args))
            .collect(),
        _ if name.starts_with("prim-lock-") => {
            match Primitive::parse(&name["prim-lock-".len()..]) {
                Some(p) => {
                    let mut c = lock_cell(&cell, p, args);
                    c.label = prefix.clone();
                    vec![c]
                }
                None => {
                    return Err(format!(
                        "unknown scenario {name:?}; known: {}",
                        NAMES.join(", ")
                    ))
                }
            }
        }
        _ => {
            return Err(format!(
                "unknown scenario {name:?}; known: {}",
                NAMES.join(", ")
            ))
        }
    };
    Ok(cells)
}

/// Builds a cell named by its suffix (the scenario's `cell` closure).
type MakeCell<'a> = &'a dyn Fn(&str, &dyn Fn(&mut Cell)) -> Cell;

/// One lock primitive's cell: timed, synchronous clients.
fn lock_cell(cell: MakeCell<'_>, p: Primitive, args: &Args) -> Cell {
    cell(p.name(), &|c| {
        c.workload = Workload::Lock(p);
        c.sessions = args.sessions.unwrap_or(LOCK_CLIENTS);
        c.outstanding = 1;
        c.ops = None;
        c.warmup = args.warmup.unwrap_or(Duration::from_millis(500));
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_scenario_builds() {
        let args = Args::default();
        for name in NAMES {
            assert!(!cells(name, &args).unwrap().is_empty(), "{name}");
        }
        assert!(cells("nope", &args).is_err());
    }

    #[test]
    fn sweeps_cover_their_points_and_flags_win() {
        let args = Args {
            sessions: Some(2),
            ..Args::default()
        };
        let sweep = cells("read-ratio-sweep", &args).unwrap();
        assert_eq!(sweep.len(), READ_RATIOS.len());
        assert!(sweep.iter().all(|c| c.sessions == 2));
        assert_eq!(sweep[4].mix.to_string(), "set=10,get=90");
        let eph = cells("ephemeral-300b", &args).unwrap();
        assert_eq!((eph[0].ops, eph[0].payload_bytes), (Some(EPHEMERALS), 300));
        assert!(eph[0].ephemeral);
        for name in ["create-sync", "create-async"] {
            assert_eq!(cells(name, &args).unwrap()[0].ops, Some(CREATES), "{name}");
            let timed = Args {
                duration: Some(Duration::from_secs(1)),
                ..Args::default()
            };
            assert_eq!(cells(name, &timed).unwrap()[0].ops, None, "{name}");
        }
    }

    #[test]
    fn ezk_scenarios_sweep_synchronous_clients_unless_sessions_given() {
        let pq = cells("pq-recipe", &Args::default()).unwrap();
        assert_eq!(
            pq.iter().map(|c| c.sessions).collect::<Vec<_>>(),
            PQ_CLIENTS
        );
        assert!(pq
            .iter()
            .all(|c| c.outstanding == 1 && c.workload == Workload::PqRecipe));
        assert_eq!(pq[0].label, "pq-recipe/c1");
        let quota = cells("quota-extension", &Args::default()).unwrap();
        assert_eq!(quota.last().unwrap().sessions, 40);
        let args = Args {
            sessions: Some(3),
            ..Args::default()
        };
        let one = cells("quota-recipe", &args).unwrap();
        assert_eq!((one.len(), one[0].sessions), (1, 3));
        assert_eq!(one[0].workload, Workload::QuotaRecipe);
    }

    #[test]
    fn lock_scenarios_name_their_primitive() {
        let args = Args {
            think: Some(Duration::from_millis(200)),
            ..Args::default()
        };
        let one = cells("prim-lock-queue-async", &args).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].label, "prim-lock-queue-async");
        assert_eq!(one[0].workload, Workload::Lock(Primitive::QueueAsync));
        assert_eq!(one[0].workload.name(), "prim-lock-queue-async");
        assert_eq!(
            (one[0].sessions, one[0].think),
            (LOCK_CLIENTS, Duration::from_millis(200))
        );
        let all = cells("prim-locks", &Args::default()).unwrap();
        assert_eq!(all.len(), Primitive::ALL.len());
        assert_eq!(all[4].label, "prim-locks/server");
        assert!(cells("prim-lock-nope", &args).is_err());
    }
}
