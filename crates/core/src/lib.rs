//! Stoa's pure core: the engine (one partition's whole pipeline as a state
//! machine) and what it is made of: sessions, watches, membership, raft's
//! storage, the statistics and four-letter words it reports. It is fed time
//! and input and hands back what it wants done; sockets, files, threads and
//! clocks belong to the `stoa-server` crate, which is why this crate has no
//! tokio or libc among its dependencies (`tests/no_io.rs`).

pub mod admin;
pub mod apply_order;
pub mod client_frame;
pub mod closed_watermarks;
pub mod engine;
pub mod ensemble;
pub mod fourlw;
pub mod import;
pub mod membership;
pub mod monitor;
pub mod node;
pub mod order_model;
pub mod placement;
pub mod raft_log;
pub mod restore_image;
pub mod sasl;
pub mod session;
mod sim_rng;
pub mod stats;
pub mod vector_stamps;
pub mod watch;
pub mod zxid;
