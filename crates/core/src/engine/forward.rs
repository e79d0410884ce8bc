//! What servers of an ensemble tell each other besides raft: a follower
//! forwards its clients' writes and session starts/ends to the leader (which
//! prepares them, as ZooKeeper's followers do), and reports which of its
//! sessions are alive. Replies need no message back: the transaction
//! carries the session and xid, and the server holding the client answers
//! when it applies it.

use stoa_proto::jute::{write_bool, write_buffer, write_i32, write_i64, write_string, Reader};
use stoa_proto::records::Id;
use stoa_proto::request::Request;

/// Sessions in one liveness report at most (a report is per tick).
const TOUCH_SESSIONS_MAX: usize = 1 << 20;
const IDS_MAX: usize = 64;
/// Partitions a forwarded restore may carry.
const PARTS_MAX: usize = crate::placement::PARTITIONS_MAX as usize;

#[derive(Debug, Clone, PartialEq)]
pub enum EngineMessage {
    /// A client write received by a follower, with the client's identity
    /// so the leader checks ACLs as the client.
    /// `conn` is the client's connection at the sender and `seq` numbers
    /// that connection's forwards from 1, so the leader can tell a lost
    /// forward (a gap) and refuse what follows it.
    Forward {
        session_id: i64,
        conn: u64,
        seq: u64,
        xid: i32,
        ids: Vec<Id>,
        is_super: bool,
        request: Request,
        /// Whether the sender's session waits for a node extension's
        /// answer (true) or the transaction (false); None from a server
        /// that does not say (it ends the message when present).
        via_extension: Option<bool>,
    },
    /// A session the follower allocated (its id carries the follower's id)
    /// for the client on `conn`.
    CreateSession {
        session_id: i64,
        conn: u64,
        timeout_ms: i32,
    },
    /// Sessions with traffic at the sender since its last report.
    Touch { sessions: Vec<i64> },
    /// A client resumed its session on `conn` at the sender: the leader
    /// makes that connection the session's owner.
    Attach { session_id: i64, conn: u64 },
    /// The leader's answer to `Attach`: the sender completes the handshake
    /// once it has applied `after_zxid` (everything the leader proposed for
    /// the session's earlier connections), or refuses it when not `valid`.
    Attached {
        session_id: i64,
        conn: u64,
        valid: bool,
        after_zxid: i64,
    },
    /// The leader refused a forward of `conn` (not the session's owner, or
    /// a gap in its sequence): the sender drops that connection.
    Rejected { session_id: i64, conn: u64 },
    /// The leader ran a forwarded request's node extension: the answer for
    /// the client, sent once `after_zxid` is applied at the sender.
    ExtensionReply {
        session_id: i64,
        conn: u64,
        xid: i32,
        after_zxid: i64,
        err: i32,
        /// The encoded response body (empty on error).
        response: Vec<u8>,
    },
    /// The AdminServer's `restore` taken by a follower: the snapshot's
    /// trees, one per partition (`crate::restore_image`), and the highest
    /// zxid they hold. The leader proposes them; the sender answers its
    /// request `token` when it applies the restore, or on `RestoreRefused`.
    Restore {
        token: u64,
        zxid: i64,
        parts: Vec<Vec<u8>>,
    },
    /// The leader could not take the restore `token`: the HTTP status and
    /// why.
    RestoreRefused {
        token: u64,
        status: u16,
        error: String,
    },
}

mod tag {
    pub const FORWARD: u8 = 1;
    pub const CREATE_SESSION: u8 = 2;
    pub const TOUCH: u8 = 3;
    pub const ATTACH: u8 = 4;
    pub const ATTACHED: u8 = 5;
    pub const REJECTED: u8 = 6;
    pub const EXTENSION_REPLY: u8 = 7;
    pub const RESTORE: u8 = 8;
    pub const RESTORE_REFUSED: u8 = 9;
}

impl EngineMessage {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            EngineMessage::Forward {
                session_id,
                conn,
                seq,
                xid,
                ids,
                is_super,
                request,
                via_extension,
            } => {
                out.push(tag::FORWARD);
                write_i64(&mut out, *session_id);
                write_i64(&mut out, *conn as i64);
                write_i64(&mut out, *seq as i64);
                write_i32(&mut out, *xid);
                write_i32(&mut out, ids.len() as i32);
                for id in ids {
                    write_string(&mut out, &id.scheme);
                    write_string(&mut out, &id.id);
                }
                write_bool(&mut out, *is_super);
                write_i32(&mut out, request.opcode() as i32);
                request.encode(&mut out);
                if let Some(via_extension) = via_extension {
                    write_bool(&mut out, *via_extension);
                }
            }
            EngineMessage::CreateSession {
                session_id,
                conn,
                timeout_ms,
            } => {
                out.push(tag::CREATE_SESSION);
                write_i64(&mut out, *session_id);
                write_i64(&mut out, *conn as i64);
                write_i32(&mut out, *timeout_ms);
            }
            EngineMessage::Attach { session_id, conn } => {
                out.push(tag::ATTACH);
                write_i64(&mut out, *session_id);
                write_i64(&mut out, *conn as i64);
            }
            EngineMessage::Attached {
                session_id,
                conn,
                valid,
                after_zxid,
            } => {
                out.push(tag::ATTACHED);
                write_i64(&mut out, *session_id);
                write_i64(&mut out, *conn as i64);
                write_bool(&mut out, *valid);
                write_i64(&mut out, *after_zxid);
            }
            EngineMessage::Rejected { session_id, conn } => {
                out.push(tag::REJECTED);
                write_i64(&mut out, *session_id);
                write_i64(&mut out, *conn as i64);
            }
            EngineMessage::ExtensionReply {
                session_id,
                conn,
                xid,
                after_zxid,
                err,
                response,
            } => {
                out.push(tag::EXTENSION_REPLY);
                write_i64(&mut out, *session_id);
                write_i64(&mut out, *conn as i64);
                write_i32(&mut out, *xid);
                write_i64(&mut out, *after_zxid);
                write_i32(&mut out, *err);
                write_buffer(&mut out, response);
            }
            EngineMessage::Restore { token, zxid, parts } => {
                out.push(tag::RESTORE);
                write_i64(&mut out, *token as i64);
                write_i64(&mut out, *zxid);
                write_i32(&mut out, parts.len() as i32);
                for part in parts {
                    write_buffer(&mut out, part);
                }
            }
            EngineMessage::RestoreRefused {
                token,
                status,
                error,
            } => {
                out.push(tag::RESTORE_REFUSED);
                write_i64(&mut out, *token as i64);
                write_i32(&mut out, i32::from(*status));
                write_string(&mut out, error);
            }
            EngineMessage::Touch { sessions } => {
                out.push(tag::TOUCH);
                write_i32(&mut out, sessions.len() as i32);
                for s in sessions {
                    write_i64(&mut out, *s);
                }
            }
        }
        out
    }

    /// Decodes bytes from a peer; anything malformed is an error, never a
    /// panic or an allocation beyond the input's size.
    pub fn decode(bytes: &[u8]) -> Result<EngineMessage, String> {
        let (&kind, rest) = bytes.split_first().ok_or("empty engine message")?;
        let mut r = Reader::new(rest);
        let e = |e: stoa_proto::jute::DecodeError| e.to_string();
        let count =
            |n: i32, max: usize, each_min: usize, remaining: usize| -> Result<usize, String> {
                let n = usize::try_from(n).map_err(|_| format!("negative count {n}"))?;
                if n > max || n.saturating_mul(each_min) > remaining {
                    return Err(format!("count {n} exceeds the message"));
                }
                Ok(n)
            };
        match kind {
            tag::FORWARD => {
                let session_id = r.read_i64().map_err(e)?;
                let conn = r.read_i64().map_err(e)? as u64;
                let seq = r.read_i64().map_err(e)? as u64;
                let xid = r.read_i32().map_err(e)?;
                let n = count(r.read_i32().map_err(e)?, IDS_MAX, 8, r.remaining())?;
                let mut ids = Vec::with_capacity(n);
                for _ in 0..n {
                    ids.push(Id {
                        scheme: r.read_string().map_err(e)?,
                        id: r.read_string().map_err(e)?,
                    });
                }
                let is_super = r.read_bool().map_err(e)?;
                let op = r.read_i32().map_err(e)?;
                let request = Request::decode(op, &mut r)
                    .map_err(|err| format!("forwarded request: {err}"))?;
                let via_extension = if r.remaining() > 0 {
                    Some(r.read_bool().map_err(e)?)
                } else {
                    None
                };
                Ok(EngineMessage::Forward {
                    session_id,
                    conn,
                    seq,
                    xid,
                    ids,
                    is_super,
                    request,
                    via_extension,
                })
            }
            tag::CREATE_SESSION => Ok(EngineMessage::CreateSession {
                session_id: r.read_i64().map_err(e)?,
                conn: r.read_i64().map_err(e)? as u64,
                timeout_ms: r.read_i32().map_err(e)?,
            }),
            tag::ATTACH => Ok(EngineMessage::Attach {
                session_id: r.read_i64().map_err(e)?,
                conn: r.read_i64().map_err(e)? as u64,
            }),
            tag::ATTACHED => Ok(EngineMessage::Attached {
                session_id: r.read_i64().map_err(e)?,
                conn: r.read_i64().map_err(e)? as u64,
                valid: r.read_bool().map_err(e)?,
                after_zxid: r.read_i64().map_err(e)?,
            }),
            tag::REJECTED => Ok(EngineMessage::Rejected {
                session_id: r.read_i64().map_err(e)?,
                conn: r.read_i64().map_err(e)? as u64,
            }),
            tag::EXTENSION_REPLY => Ok(EngineMessage::ExtensionReply {
                session_id: r.read_i64().map_err(e)?,
                conn: r.read_i64().map_err(e)? as u64,
                xid: r.read_i32().map_err(e)?,
                after_zxid: r.read_i64().map_err(e)?,
                err: r.read_i32().map_err(e)?,
                response: r.read_buffer().map_err(e)?,
            }),
            tag::RESTORE => {
                let token = r.read_i64().map_err(e)? as u64;
                let zxid = r.read_i64().map_err(e)?;
                let n = count(r.read_i32().map_err(e)?, PARTS_MAX, 4, r.remaining())?;
                let mut parts = Vec::with_capacity(n);
                for _ in 0..n {
                    parts.push(r.read_buffer().map_err(e)?);
                }
                Ok(EngineMessage::Restore { token, zxid, parts })
            }
            tag::RESTORE_REFUSED => Ok(EngineMessage::RestoreRefused {
                token: r.read_i64().map_err(e)? as u64,
                status: u16::try_from(r.read_i32().map_err(e)?)
                    .map_err(|_| "restore refusal: status out of range".to_string())?,
                error: r.read_string().map_err(e)?,
            }),
            tag::TOUCH => {
                let n = count(
                    r.read_i32().map_err(e)?,
                    TOUCH_SESSIONS_MAX,
                    8,
                    r.remaining(),
                )?;
                let mut sessions = Vec::with_capacity(n);
                for _ in 0..n {
                    sessions.push(r.read_i64().map_err(e)?);
                }
                Ok(EngineMessage::Touch { sessions })
            }
            other => Err(format!("unknown engine message kind {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use stoa_proto::records::{Acl, CreateRequest};

    #[test]
    fn every_message_round_trips() {
        let create = Request::Create(CreateRequest {
            path: "/a".into(),
            data: Some(b"x".to_vec()),
            acl: vec![Acl::open_unsafe()],
            flags: 1,
        });
        let ids = vec![Id {
            scheme: "ip".into(),
            id: "127.0.0.1".into(),
        }];
        for m in [
            EngineMessage::Forward {
                session_id: 7,
                conn: 11,
                seq: 2,
                xid: 3,
                ids,
                is_super: false,
                request: create.clone(),
                via_extension: Some(true),
            },
            EngineMessage::Forward {
                session_id: 7,
                conn: 11,
                seq: 3,
                xid: 4,
                ids: vec![],
                is_super: true,
                request: create,
                via_extension: None,
            },
            EngineMessage::CreateSession {
                session_id: 9,
                conn: 4,
                timeout_ms: 4000,
            },
            EngineMessage::Attach {
                session_id: 9,
                conn: 5,
            },
            EngineMessage::Attached {
                session_id: 9,
                conn: 5,
                valid: true,
                after_zxid: 0x1_0000_0007,
            },
            EngineMessage::Rejected {
                session_id: 9,
                conn: 5,
            },
            EngineMessage::ExtensionReply {
                session_id: 9,
                conn: 5,
                xid: 12,
                after_zxid: 0x2_0000_0001,
                err: 0,
                response: b"body".to_vec(),
            },
            EngineMessage::Touch {
                sessions: vec![1, 2, 3],
            },
            EngineMessage::Restore {
                token: 3,
                zxid: 0x7_0000_0002,
                parts: vec![b"tree 0".to_vec(), vec![]],
            },
            EngineMessage::RestoreRefused {
                token: 3,
                status: 503,
                error: "not the leader".into(),
            },
        ] {
            assert_eq!(EngineMessage::decode(&m.encode()).unwrap(), m);
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = EngineMessage::decode(&bytes);
        }
    }
}
