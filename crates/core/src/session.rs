//! Per-session bookkeeping the partition thread keeps beside the replicated
//! session table: liveness deadline, attached connection, and the FIFO queue
//! that keeps a session's replies in request order.

use std::collections::VecDeque;

use stoa_proto::codes::ErrorCode;
use stoa_proto::request::Request;
use stoa_proto::response::Response;

use crate::watch::ConnId;

pub type SessionId = i64;

/// Length of a session password, as ZooKeeper's.
pub const PASSWORD_BYTES: usize = 16;
/// Mixed into passwords so they are not guessable from the id alone.
/// ZooKeeper uses a constant too (`superSecret`); durability of sessions across
/// restarts needs the password to be a pure function of the id.
const PASSWORD_SECRET: u64 = 0x5354_4f41_b341_5c00;

/// A request of the session still owed a reply, in arrival order.
#[derive(Debug)]
pub enum Pending {
    /// Proposed; replied once its transaction is applied. The request
    /// went on to the partition: the reply needs only its shape.
    Write {
        xid: i32,
        zxid: i64,
        shape: stoa_tree::ReplyShape,
        received_ms: i64,
    },
    /// Runs against the tree once every earlier write has been applied.
    Read {
        xid: i32,
        request: Request,
        received_ms: i64,
    },
    /// Decided now (an extension call), sent in turn once `after_zxid` is
    /// applied, so the client sees nothing that could still be lost.
    Decided {
        xid: i32,
        after_zxid: i64,
        err: ErrorCode,
        response: Response,
        /// The watch the call leaves (an extension's read with its watch
        /// flag set), registered as the reply goes out.
        watch: Option<(crate::watch::WatchKind, String)>,
    },
    /// An extension call sent to the leader (it writes); becomes `Decided`
    /// when the leader's answer arrives. `op` decodes that answer.
    Remote {
        xid: i32,
        op: stoa_proto::opcode::OpCode,
        /// The path a read asked to watch, if it did.
        watch: Option<String>,
    },
    /// Already decided (e.g. a write that failed validation); sent in turn.
    Reply {
        xid: i32,
        err: ErrorCode,
        response: Response,
    },
}

impl Pending {
    /// Whether this is the queued write of the transaction `zxid`, made
    /// for the session's request `cxid`: known here by its zxid, or, sent
    /// on to the leader (zxid 0, not known here), by its xid.
    pub fn is_write_of(&self, zxid: i64, cxid: i32) -> bool {
        matches!(self, Pending::Write { xid, zxid: z, .. } if *z == zxid || (*z == 0 && *xid == cxid))
    }
}

#[derive(Debug)]
pub struct Session {
    pub id: SessionId,
    pub timeout_ms: i32,
    pub conn: Option<ConnId>,
    /// Wall-clock ms after which the session expires without traffic.
    pub deadline_ms: i64,
    /// A closeSession is in flight; no new requests are accepted.
    pub closing: bool,
    /// Created by a read-only server cut off from the quorum: known only
    /// here, never replicated, gone when the quorum returns.
    pub local: bool,
    pub queue: VecDeque<Pending>,
}

impl Session {
    pub fn new(id: SessionId, timeout_ms: i32, now_ms: i64) -> Session {
        Session {
            id,
            timeout_ms,
            conn: None,
            deadline_ms: now_ms + timeout_ms as i64,
            closing: false,
            local: false,
            queue: VecDeque::new(),
        }
    }

    pub fn touch(&mut self, now_ms: i64) {
        self.deadline_ms = now_ms + self.timeout_ms as i64;
    }
}

/// The password a client must present to resume `id`.
pub fn password_for(id: SessionId) -> Vec<u8> {
    let mut state = (id as u64) ^ PASSWORD_SECRET;
    let mut out = Vec::with_capacity(PASSWORD_BYTES);
    while out.len() < PASSWORD_BYTES {
        state = splitmix64(state);
        out.extend_from_slice(&state.to_be_bytes());
    }
    out.truncate(PASSWORD_BYTES);
    out
}

pub(crate) fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// ZooKeeper's session id layout: server id in the top byte, then the
/// start time in ms, so ids stay unique across restarts.
pub fn initial_session_id(server_id: u64, now_ms: i64) -> SessionId {
    let time_part = ((now_ms as u64) << 24) >> 8;
    (time_part | (server_id << 56)) as i64
}

/// Clamps a requested timeout into the configured bounds.
pub fn negotiate_timeout(requested_ms: i32, min_ms: u32, max_ms: u32) -> i32 {
    (requested_ms.max(0) as i64).clamp(min_ms as i64, max_ms as i64) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_deterministic_and_distinct_per_session() {
        assert_eq!(password_for(42), password_for(42));
        assert_ne!(password_for(42), password_for(43));
        assert_eq!(password_for(1).len(), PASSWORD_BYTES);
    }

    #[test]
    fn timeouts_are_clamped_to_the_bounds() {
        assert_eq!(negotiate_timeout(100, 4000, 40000), 4000);
        assert_eq!(negotiate_timeout(100_000, 4000, 40000), 40000);
        assert_eq!(negotiate_timeout(10_000, 4000, 40000), 10_000);
        assert_eq!(negotiate_timeout(-5, 4000, 40000), 4000);
    }

    #[test]
    fn session_ids_carry_the_server_id_in_the_top_byte() {
        let id = initial_session_id(3, 1_700_000_000_000);
        assert_eq!((id as u64) >> 56, 3);
        assert!(initial_session_id(3, 1_700_000_000_001) > id);
    }
}
