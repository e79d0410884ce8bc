//! The seeded random source of the simulations (`crate::sim_rng`).

pub(crate) use crate::sim_rng::Rng;

/// The seeds a simulator runs when `STOA_SIM_SEED` names none:
/// `STOA_SIM_SEEDS=N` runs 0..N, `A..B` runs A to B-1, and without it
/// 0..`default`.
pub(crate) fn seed_range(default: u64) -> std::ops::Range<u64> {
    let seeds = std::env::var("STOA_SIM_SEEDS").unwrap_or_default();
    match seeds.split_once("..") {
        Some((a, b)) => a.parse().unwrap_or(0)..b.parse().unwrap_or(default),
        None => 0..seeds.parse().unwrap_or(default),
    }
}
