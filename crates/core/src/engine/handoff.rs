//! The values that pass between the session gate and a partition core.
//!
//! Everything the gate hands a core (an admitted request, a read) and
//! everything a core hands back (what it did with a request, a read's
//! outcome, an applied write's outcome) is one of these: owned, `Send`,
//! borrowing nothing from either side. With one partition the engine
//! passes them by plain calls on one thread; with several, each crosses a
//! bounded queue between the gate's thread and the core's, and neither
//! side changes (the assertion at the end holds them to that).

use std::sync::Arc;

use stoa_proto::codes::ErrorCode;
use stoa_proto::records::Id;
use stoa_proto::request::Request;
use stoa_proto::response::Response;
use stoa_tree::TxnResult;

use crate::session::SessionId;
use crate::watch::{ChangeKind, ConnId};

/// The client connection a request came from: the server holding it and
/// the connection there.
pub(crate) type Origin = (u64, ConnId);

/// Who is asking: the identities a connection authenticated as (its ip
/// always, digests after auth) and whether one is the super user. Shared,
/// not copied, with every request the connection sends: its identities
/// change only on auth, which replaces them.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub ids: Arc<[Id]>,
    pub is_super: bool,
}

impl Identity {
    pub fn new(ids: Vec<Id>, is_super: bool) -> Identity {
        Identity {
            ids: ids.into(),
            is_super,
        }
    }
}

/// A client request a leader admits into its partition (a write, a sync, a
/// close, an extension call), whatever its origin: its own client, a
/// follower's forward, or a write held until the leader may prepare.
#[derive(Debug)]
pub(crate) struct Admission {
    pub origin: Origin,
    pub session_id: SessionId,
    pub xid: i32,
    pub identity: Identity,
    pub request: Request,
    /// What the origin's session queue waits for: a node extension's
    /// answer (true) or the transaction (false), as the origin routed the
    /// request by the extensions it had applied; None from a server that
    /// does not say. The leader refuses a request it routes otherwise.
    pub via_extension: Option<bool>,
}

/// What the leader did with an admitted request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admitted {
    /// Proposed as the transaction with this zxid: the origin answers
    /// when it applies there.
    Proposed(i64),
    /// Held until this leader may prepare (`may_prepare`).
    Held,
    /// A node extension's call, answered to its origin now.
    Answered,
    /// Not from the connection that owns the session: its origin must not
    /// see it answered (a local connection is closed; a remote one was
    /// told by `accept_forward` or lost its session).
    Refused,
}

/// A change to a session's life that a leader admits into its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionCall {
    /// A new session (its id allocated by the origin's server) for the
    /// origin's connection, which owns it.
    Create {
        origin: Origin,
        session_id: SessionId,
        timeout_ms: i32,
    },
    /// The origin's connection resumes the session and owns it from now
    /// on: the session's writes are accepted from it alone.
    Attach {
        origin: Origin,
        session_id: SessionId,
    },
    /// The session's time ran out (the leader's gate decides).
    Expire { session_id: SessionId },
}

/// What the leader did with a `SessionCall`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionAdmitted {
    /// Proposed as the transaction with this zxid (create, expire).
    Proposed(i64),
    /// The origin owns the session now. Every write of its earlier
    /// connections has a zxid up to `after_zxid`: the origin answers the
    /// client once that is applied there.
    Attached { after_zxid: i64 },
    /// No such session, or it is closing: the client must start over.
    Unknown,
    /// Asked again later: an attach while a new leader has not applied
    /// its predecessors' log, which may hold the session's creation
    /// (`Engine::release_held_attaches`); a creation while the leader may
    /// not prepare (`Engine::release_held_session_creates`).
    Held,
}

/// A read handed from the gate to the core, once every earlier write of
/// its session is applied (`engine/core_read.rs`).
#[derive(Debug, Clone)]
pub(crate) struct ReadCall {
    pub conn: ConnId,
    pub session: SessionId,
    pub identity: Identity,
    pub request: Request,
}

/// What a read decided: the answer, the zxid it reflects, and the watch
/// events it fired at once (a setWatches for changes the client missed),
/// which go out before the answer.
#[derive(Debug)]
pub(crate) struct ReadOutcome {
    pub zxid: i64,
    pub result: Result<Response, ErrorCode>,
    pub fired: Vec<(ChangeKind, String)>,
}

/// What applying one transaction decided, handed from the partition core
/// to the gate: the session and the xid its transaction carries (the
/// client's request it answers), its zxid and its result. The gate matches
/// it to the request at the head of the session's queue and builds the
/// reply from the request's shape and the result. Every transaction has
/// one, the server's own (expiry, container cleanup) included: the gate
/// learns from it how far the partition has applied.
#[derive(Debug)]
pub(crate) struct WriteOutcome {
    pub session: SessionId,
    pub cxid: i32,
    pub zxid: i64,
    pub result: TxnResult,
    /// The configuration after a transaction that changed it: a reconfig
    /// is answered with it, as getData of /zookeeper/config would.
    pub config: Option<Vec<u8>>,
    /// The session began or ended with this transaction.
    pub session_change: Option<SessionChange>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionChange {
    Created { timeout_ms: i32 },
    Closed,
}

/// What the core hands the gate as it applies, in apply order: the watch
/// events a transaction fired, then its outcome.
#[derive(Debug)]
pub(crate) enum Applied {
    /// These connections' watches on `path` fired.
    Fired {
        conns: Vec<ConnId>,
        zxid: i64,
        change: ChangeKind,
        path: String,
    },
    Outcome(WriteOutcome),
}

// Held at compile time: the hand-off can become a queue between threads.
const _: fn() = || {
    fn crosses_threads<T: Send + 'static>() {}
    crosses_threads::<Admission>();
    crosses_threads::<Admitted>();
    crosses_threads::<SessionCall>();
    crosses_threads::<SessionAdmitted>();
    crosses_threads::<ReadCall>();
    crosses_threads::<ReadOutcome>();
    crosses_threads::<Applied>();
};
