//! Server-side extensions for Stoa, in the spirit of Extendable ZooKeeper
//! (EZK): users register small Lua programs that own a virtual node (node
//! extensions), customise watch events (watch extensions) or run on session
//! start and end (session extensions).
//!
//! This crate is pure with respect to the server: it never touches sockets or
//! files, reads the tree only through [`TreeView`], and hands back the writes
//! an extension made as a list of [`WriteOp`]s that the engine commits as one
//! multi transaction (all or nothing). See `docs/extensions.md` for the Lua API.

mod api;
mod children;
mod convert;
mod manager;
mod multi;
mod overlay;
mod registration;
mod sandbox;

use std::fmt;

pub use manager::{Delivery, ExtMetrics, ExtensionManager, WatchOutcome};
pub use registration::parse_registration;
pub use stoa_proto::codes::ErrorCode;
pub use stoa_proto::opcode::{CreateMode, EventType};
pub use stoa_proto::records::Stat;

/// Instructions one call may run when the registration names no limit. A
/// plain loop iteration is a handful of VM instructions, so this is on the
/// order of 100k iterations: plenty for a queue scan, and a runaway loop costs
/// the leader only a few milliseconds.
pub const DEFAULT_INSTRUCTIONS_MAX: u64 = 1_000_000;
/// Bytes one extension's Lua state may hold when the registration names no
/// limit. Counts everything: the standard library, the compiled code, its
/// globals and a call's temporaries.
pub const DEFAULT_MEMORY_BYTES_MAX: usize = 8 * 1024 * 1024;
/// The most instructions per call a registration may ask for (~1 s of CPU):
/// the leader runs calls inline, so one call must never stall it for long.
pub const INSTRUCTIONS_CEILING: u64 = 1_000_000_000;
/// The most memory a registration may ask for, in bytes.
pub const MEMORY_BYTES_CEILING: usize = 256 * 1024 * 1024;
/// The least memory a registration may ask for, in bytes: below this the
/// Lua standard library itself does not fit and every call would fail.
pub const MEMORY_BYTES_FLOOR: usize = 256 * 1024;

/// What an extension hooks into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtensionKind {
    /// Owns a virtual node and its subtree; intercepts every operation there.
    Node,
    /// Runs when a watch event fires; may suppress it.
    Watch,
    /// Runs when a session starts and when it ends.
    Session,
}

impl ExtensionKind {
    /// The name used in the registration document.
    pub fn as_str(self) -> &'static str {
        match self {
            ExtensionKind::Node => "node",
            ExtensionKind::Watch => "watch",
            ExtensionKind::Session => "session",
        }
    }
}

impl fmt::Display for ExtensionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Resource caps for one extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Lua VM instructions per call (checked every 1,000 instructions, so a
    /// call may overrun by at most one check interval).
    pub instructions_max: u64,
    /// Bytes the extension's whole Lua state may allocate.
    pub memory_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            instructions_max: DEFAULT_INSTRUCTIONS_MAX,
            memory_bytes_max: DEFAULT_MEMORY_BYTES_MAX,
        }
    }
}

/// A parsed registration: everything needed to build the extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtensionSpec {
    /// The name under `/extensions`.
    pub name: String,
    pub kind: ExtensionKind,
    /// Node extensions: the virtual node they own (required). Watch
    /// extensions: only events on this node or below reach it (optional).
    /// Session extensions: none.
    pub path: Option<String>,
    /// Lua source text (bytecode is refused).
    pub source: String,
    pub limits: Limits,
}

/// Read access to the leader's current tree (the engine guarantees no other
/// write interleaves during a call).
pub trait TreeView {
    fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), ErrorCode>;
    fn exists(&self, path: &str) -> Option<Stat>;
    /// Children names (not full paths); unsorted is fine.
    fn get_children(&self, path: &str) -> Result<Vec<String>, ErrorCode>;
    /// Up to `limit` children names of `path` that sort (bytewise) after
    /// `after`, or from the first when `None`, in that order. The default
    /// sorts [`TreeView::get_children`], O(n); a view over an ordered tree
    /// should answer in O(log n + limit), which is what keeps a priority
    /// queue's dequeue cheap however long the queue is.
    fn children_after(
        &self,
        path: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, ErrorCode> {
        let mut names = self.get_children(path)?;
        names.sort_unstable();
        let start = match after {
            Some(after) => names.partition_point(|n| n.as_str() <= after),
            None => 0,
        };
        Ok(names.into_iter().skip(start).take(limit).collect())
    }
    /// The suffix a sequential create under `parent` would get now
    /// (ZooKeeper's per-parent counter).
    fn next_sequence(&self, parent: &str) -> Result<i32, ErrorCode>;
}

/// The zxid and time the call's transaction will carry, when the engine
/// knows them before running the call (the leader proposes the call's writes
/// right after it, as the next transaction). With it, the stats an
/// extension sees and returns for nodes it writes are the ones a client
/// would read after the commit; without it their zxid and time fields are 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnStamp {
    pub zxid: i64,
    pub time_ms: i64,
}

/// The kind of node an extension's create makes (its sequence suffix, if
/// any, is already in the path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Persistent,
    /// Belongs to the calling session.
    Ephemeral,
    /// Deleted by the server once it had children and has none left.
    Container,
    /// Deleted by the server once unchanged and childless for `ttl_ms`.
    Ttl {
        ttl_ms: i64,
    },
}

/// A write an extension made; the engine turns all of a call's writes into
/// ONE multi transaction (all or nothing), in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// `path` is final: any sequence suffix is already applied. `acl` is
    /// checked already (never empty; open unless the extension gave one).
    Create {
        path: String,
        data: Vec<u8>,
        kind: NodeKind,
        acl: Vec<stoa_proto::records::Acl>,
    },
    /// `version` is what the extension passed (-1 = any); it already held
    /// against the call's view, so it holds in the multi too.
    Delete { path: String, version: i32 },
    SetData {
        path: String,
        data: Vec<u8>,
        version: i32,
    },
}

impl WriteOp {
    pub fn path(&self) -> &str {
        match self {
            WriteOp::Create { path, .. }
            | WriteOp::Delete { path, .. }
            | WriteOp::SetData { path, .. } => path,
        }
    }
}

/// The client operation a node extension intercepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtOp {
    Create { flags: i32 },
    Delete,
    GetData,
    SetData,
    Exists,
    GetChildren,
}

impl ExtOp {
    /// The name Lua sees as `req.op`, and the key of a handler table.
    pub fn name(self) -> &'static str {
        match self {
            ExtOp::Create { .. } => "create",
            ExtOp::Delete => "delete",
            ExtOp::GetData => "getData",
            ExtOp::SetData => "setData",
            ExtOp::Exists => "exists",
            ExtOp::GetChildren => "getChildren",
        }
    }
}

/// A client request routed to a node extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtRequest {
    pub op: ExtOp,
    pub path: String,
    /// Create and setData payload; empty otherwise.
    pub data: Vec<u8>,
    /// Delete and setData expected version (-1 = any); ignored otherwise.
    pub version: i32,
    pub session_id: i64,
}

/// What the caller gets back: exactly one of a result or an error code, plus
/// the writes to commit. When `reply` is an error, `writes` is empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtOutcome {
    pub writes: Vec<WriteOp>,
    pub reply: Result<ExtReply, ErrorCode>,
}

/// The parts of a reply the extension chose to fill; the engine uses what the
/// client's operation needs (e.g. `path` for create, `data`+`stat` for
/// getData) and defaults for the rest. Stats of nodes written during the call
/// carry the [`TxnStamp`]'s zxid and time, or 0 where the engine passed none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExtReply {
    pub data: Option<Vec<u8>>,
    pub stat: Option<Stat>,
    pub path: Option<String>,
    pub children: Option<Vec<String>>,
}

/// Why registering or running an extension failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtError {
    /// The registration document or spec is malformed.
    BadRegistration { name: String, reason: String },
    /// The Lua source does not compile, or its top level fails or does not
    /// return a handler. `message` is Lua's.
    Compile { name: String, message: String },
    /// No extension of that name is registered.
    UnknownExtension(String),
    /// The extension exists but is of another kind than the call needs.
    WrongKind {
        name: String,
        expected: ExtensionKind,
        found: ExtensionKind,
    },
    /// A node extension's path equals, contains or lies inside another's.
    PathConflict {
        name: String,
        path: String,
        other: String,
    },
    /// The handler raised a Lua error (not a ZooKeeper error code).
    Runtime { name: String, message: String },
    /// The handler returned something that is not a valid reply.
    BadReply { name: String, message: String },
    /// The call ran more than `limit` VM instructions.
    InstructionLimit { name: String, limit: u64 },
    /// The extension's Lua state needed more than `limit` bytes.
    MemoryLimit { name: String, limit: usize },
}

impl ExtError {
    /// Whether a resource cap stopped the extension.
    pub fn is_limit(&self) -> bool {
        matches!(
            self,
            ExtError::InstructionLimit { .. } | ExtError::MemoryLimit { .. }
        )
    }

    /// A suggestion for the code the engine replies with: registration
    /// problems are the client's (BadArguments), a missing extension looks
    /// like a missing node, and failures inside the extension are the
    /// server's (SystemError).
    pub fn error_code(&self) -> ErrorCode {
        match self {
            ExtError::BadRegistration { .. }
            | ExtError::Compile { .. }
            | ExtError::PathConflict { .. } => ErrorCode::BadArguments,
            ExtError::UnknownExtension(_) => ErrorCode::NoNode,
            ExtError::WrongKind { .. }
            | ExtError::Runtime { .. }
            | ExtError::BadReply { .. }
            | ExtError::InstructionLimit { .. }
            | ExtError::MemoryLimit { .. } => ErrorCode::SystemError,
        }
    }
}

impl fmt::Display for ExtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExtError::BadRegistration { name, reason } => {
                write!(f, "extension {name:?}: bad registration: {reason}")
            }
            ExtError::Compile { name, message } => {
                write!(f, "extension {name:?} does not load: {message}")
            }
            ExtError::UnknownExtension(name) => write!(f, "no extension named {name:?}"),
            ExtError::WrongKind {
                name,
                expected,
                found,
            } => write!(
                f,
                "extension {name:?} is a {found} extension, not a {expected} extension"
            ),
            ExtError::PathConflict { name, path, other } => write!(
                f,
                "extension {name:?}: path {path} overlaps the virtual node of extension {other:?}"
            ),
            ExtError::Runtime { name, message } => {
                write!(f, "extension {name:?} failed: {message}")
            }
            ExtError::BadReply { name, message } => {
                write!(f, "extension {name:?} returned a bad reply: {message}")
            }
            ExtError::InstructionLimit { name, limit } => write!(
                f,
                "extension {name:?} exceeded its limit of {limit} instructions per call"
            ),
            ExtError::MemoryLimit { name, limit } => write!(
                f,
                "extension {name:?} exceeded its memory limit of {limit} bytes"
            ),
        }
    }
}

impl std::error::Error for ExtError {}
