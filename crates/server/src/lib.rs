//! The Stoa server: a ZooKeeper-protocol coordination service. The pure
//! core (`stoa-core`: the engine and the node driver) is driven here by one
//! thread per partition that owns its sockets; the WAL and snapshot writers
//! are the long-lived other threads.

pub mod admin;
pub mod admin_transfer;
pub mod config;
pub mod dashboard;
pub mod ensemble;
pub mod gssapi;
pub mod import;
pub mod jaas;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod net;
pub mod paced_file;
pub mod partition;
pub mod partition_workers;
pub mod peer;
pub mod peer_sasl;
pub mod storage;
pub mod tls;

pub use config::{ConfigError, ServerConfig};
pub use partition::run;
pub use stoa_core::{engine, fourlw, membership, raft_log, session, stats, watch};

/// 64 unpredictable bits, for nonces and seeds: std's hasher keys come from
/// the OS's randomness, and each `RandomState` is keyed anew.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}
