//! The Stoa server: a ZooKeeper-protocol coordination service. A partition
//! engine (pure state machine) driven by one thread per partition; the WAL
//! and snapshot writers are the only other threads.

pub mod config;
pub mod engine;
pub mod ensemble;
pub mod fourlw;
pub mod logging;
pub mod membership;
pub mod memory;
pub mod metrics;
pub mod net;
pub mod paced_file;
pub mod partition;
pub mod peer;
pub mod raft_log;
pub mod session;
pub mod stats;
pub mod storage;
pub mod watch;

pub use config::{ConfigError, ServerConfig};
pub use partition::run;
