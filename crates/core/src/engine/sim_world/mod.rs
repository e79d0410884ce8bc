//! The simulated world the engine's test rigs are made of: each part a
//! piece of the outside the production server has, without I/O.
//!
//! - `machine`: a server's machine: its node driver over the simulated
//!   log and snapshot store while up, its disk while down; boots through
//!   the production recovery and crashes as a machine does (unsynced
//!   data lost, a torn or damaged tail).
//! - `network`: peer links between servers, in order per link (as TCP),
//!   with partitions and loss.
//! - `wire`: the client's side of the ZooKeeper protocol: handshakes,
//!   requests with their xids, the frames a server sends back.
//! - `watch_log`: what a client heard (replies, events, watches set) in
//!   order, and the check of ZooKeeper's watch order against it.
//! - `rng`: the seeded random source every choice is drawn from, so that
//!   a seed replays exactly.
//!
//! The disk itself is `crate::node::sim_disk` (it serves the node
//! driver's own tests too). The rigs (`sim.rs`, `ensemble_sim.rs`,
//! `scenario_tests.rs`, `tests.rs`, `ensemble_tests.rs`) keep only their
//! workload and what they check.

pub(super) mod machine;
pub(super) mod network;
pub(super) mod rng;
pub(super) mod watch_log;
pub(super) mod wire;
