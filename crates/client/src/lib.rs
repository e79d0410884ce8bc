//! A ZooKeeper 3.9 protocol client for Stoa (and any ZooKeeper server), and
//! the `stoa shell` command built on it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), stoa_client::Error> {
//! use stoa_client::{Client, ClientOptions, CreateMode, open_acl_unsafe};
//! let client = Client::connect("127.0.0.1:2181", ClientOptions::default()).await?;
//! client.create("/a", b"hello", &open_acl_unsafe(), CreateMode::Persistent).await?;
//! let (data, stat) = client.get_data("/a", false).await?;
//! # let _ = (data, stat);
//! client.close().await?;
//! # Ok(()) }
//! ```
//!
//! One background task per session owns the socket: calls from any number
//! of tasks are pipelined on it (one xid each, replies matched in order),
//! it pings every third of the session timeout, and after a lost
//! connection it moves the session to the next host, re-sending
//! credentials and watches (`SetWatches2` from the last zxid seen).

pub mod acl;
mod client;
pub mod compose;
mod error;
pub mod format;
mod op;
mod path;
pub mod recipes;
mod session;
pub mod shell;
mod watch;

pub use acl::{open_acl_unsafe, parse_acl, perms_to_string};
pub use client::{multi_error, Client, ClientOptions};
pub use compose::{ComposeStats, ComposedClient, Mount, MountTable, SyncMode};
pub use error::Error;
pub use op::Op;
pub use path::validate_path;
pub use session::SessionState;
pub use watch::WatchedEvent;

pub use stoa_proto::codes::ErrorCode;
pub use stoa_proto::opcode::{AddWatchMode, CreateMode, EventType, KeeperState, WatcherType};
pub use stoa_proto::records::{Acl, ClientInfo, Id, Stat};
pub use stoa_proto::response::MultiResult;

/// The runtime the client runs on, for callers without their own tokio
/// dependency (the `stoa` binary's integration tests, for one).
pub use tokio;
