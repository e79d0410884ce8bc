//! The read rules of partitions on threads of their own, compared
//! (`stoa_core::order_model`; docs/partitions.md, "Three read rules,
//! compared"): for each rule and partition count, how many seeded runs keep
//! one order (sequential consistency) and causality, how often and how long
//! reads wait, how long an entry in hand waits to be applied, and (closed
//! watermarks) how long its events wait for every partition to close its
//! zxid; then what
//! each rule's bookkeeping costs per read on this machine.
//!
//!     cargo run --release -p stoa-core --example order_model
//!     SEEDS=200 PARTITIONS=2,4,8,16 cargo run --release -p stoa-core --example order_model

use std::hint::black_box;
use std::time::Instant;

use stoa_core::closed_watermarks::ClosedWatermarks;
use stoa_core::order_model::{run, Config, Scheme};
use stoa_core::vector_stamps::{VectorReplica, VectorSequencer, VectorStamp};

fn env_list(name: &str, default: &str) -> Vec<usize> {
    let text = std::env::var(name).unwrap_or_else(|_| default.to_string());
    (text
        .split(',')
        .map(|n| n.trim().parse().expect("a list of numbers")))
    .collect()
}

fn main() {
    let seeds = env_list("SEEDS", "50")[0] as u64;
    let partitions = env_list("PARTITIONS", "2,4,8");
    println!("{seeds} seeded runs per cell: 8 sessions x 100 calls, 30% writes (a fifth of them a multi over two partitions; a new leader before 2%), 2 keys per partition; reconnects: the share of calls a session moves to the other server before");
    println!(
        "{:<22} {:>3} {:>10} {:>10} {:>8} {:>12} {:>16} {:>18} {:>18}",
        "rule",
        "P",
        "reconnects",
        "one order",
        "causal",
        "reads waited",
        "read wait, steps",
        "apply wait, steps",
        "event wait, steps"
    );
    for &p in &partitions {
        for (scheme, reconnect_percent) in Scheme::ALL.into_iter().flat_map(|s| [(s, 0), (s, 5)]) {
            let mut sequential = 0;
            let mut causal = 0;
            let (mut reads, mut waited, mut wait_steps) = (0, 0, 0);
            let (mut applies, mut apply_steps) = (0, 0);
            let (mut events, mut event_steps) = (0, 0);
            for seed in 0..seeds {
                let result = run(&Config {
                    scheme,
                    partitions: p,
                    keys: 2 * p,
                    sessions: 8,
                    calls_per_session: 100,
                    write_percent: 30,
                    multi_percent: 20,
                    new_leader_percent: 2,
                    reconnect_percent,
                    seed,
                });
                sequential += result.history.sequentially_consistent().is_ok() as u64;
                causal += result.history.causally_consistent().is_ok() as u64;
                let f = result.figures;
                reads += f.reads;
                waited += f.reads_waited;
                wait_steps += f.read_wait_steps;
                applies += f.applies;
                apply_steps += f.apply_wait_steps;
                events += f.events;
                event_steps += f.event_wait_steps;
            }
            println!(
                "{:<22} {:>3} {:>9}% {:>6}/{:<3} {:>4}/{:<3} {:>11.1}% {:>16.2} {:>18.2} {:>18}",
                scheme.name(),
                p,
                reconnect_percent,
                sequential,
                seeds,
                causal,
                seeds,
                100.0 * waited as f64 / reads as f64,
                wait_steps as f64 / reads as f64,
                apply_steps as f64 / applies as f64,
                match (scheme, events) {
                    (Scheme::OneOrder, _) => "0 (at apply)".to_string(),
                    (_, 0) => "-".to_string(),
                    _ => format!("{:.2}", event_steps as f64 / events as f64),
                },
            );
        }
    }
    println!();
    println!("bookkeeping per read (a session's view checked and advanced), ns on this machine; per-entry and per-session state in bytes");
    println!(
        "{:>3} {:>18} {:>14} {:>8} {:>22}",
        "P", "closed watermarks", "vector stamps", "ratio", "vector stamp, bytes"
    );
    for &p in &partitions {
        let watermarks = time_watermarks(p);
        let vectors = time_vectors(p);
        println!(
            "{p:>3} {watermarks:>18.1} {vectors:>14.1} {:>8.2} {:>22}",
            vectors / watermarks,
            8 * p
        );
    }
}

const READS: u64 = 2_000_000;

/// Partitions that each applied every P-th zxid, read by sessions that
/// have seen recent zxids.
fn time_watermarks(partitions: usize) -> f64 {
    let mut marks = ClosedWatermarks::new(partitions, 0);
    for zxid in 1..=4_000 {
        let p = (zxid as usize) % partitions;
        let previous = marks.applied(p);
        marks.committed(p, zxid, previous);
        marks.apply(p, zxid);
    }
    let mut seen = 3_900i64;
    let start = Instant::now();
    for i in 0..READS {
        let p = (i as usize) % partitions;
        if let Some(zxid) = marks.serve(black_box(p), black_box(seen)) {
            seen = black_box(zxid) - 50 + (i % 100) as i64;
        }
    }
    black_box(seen);
    start.elapsed().as_nanos() as f64 / READS as f64
}

fn time_vectors(partitions: usize) -> f64 {
    let mut leader = VectorSequencer::new(partitions);
    let mut replica = VectorReplica::new(partitions);
    let mut writer = VectorStamp::zero(partitions);
    for i in 0..4_000 {
        let p = i % partitions;
        let stamp = leader.stamp(&[p], &writer);
        replica.apply(p, &stamp);
        writer = stamp;
    }
    let mut seen = VectorStamp::zero(partitions);
    let start = Instant::now();
    for i in 0..READS {
        let p = (i as usize) % partitions;
        if let Some(stamp) = replica.serve(black_box(p), black_box(&seen)) {
            seen = black_box(stamp);
        }
    }
    black_box(seen);
    start.elapsed().as_nanos() as f64 / READS as f64
}
