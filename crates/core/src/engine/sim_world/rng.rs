//! The seeded random source of the simulations (`crate::sim_rng`).

pub(crate) use crate::sim_rng::Rng;
