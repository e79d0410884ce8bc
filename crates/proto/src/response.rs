//! Reply bodies: what follows a `ReplyHeader` whose `err` is 0.

use crate::codes::ErrorCode;
use crate::jute::{
    write_i32, write_nullable_buffer, write_string, write_vec, DecodeError, Reader, Record,
};
use crate::opcode::OpCode;
use crate::records::*;
use crate::request::MULTI_END;

/// The outcome of one op of a multi, as `MultiResponse` carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiResult {
    Create(String),
    Create2(String, Stat),
    Delete,
    SetData(Stat),
    Check,
    GetData(Option<Vec<u8>>, Stat),
    GetChildren(Vec<String>),
    /// A failed multi reports every op as an error: `Ok` before the op that
    /// failed, its code, then `RuntimeInconsistency`. A multiRead reports
    /// each failed read this way and the others normally.
    Error(ErrorCode),
}

impl MultiResult {
    /// The `type` of the `MultiHeader` that precedes this result.
    pub fn opcode(&self) -> OpCode {
        match self {
            MultiResult::Create(_) => OpCode::Create,
            MultiResult::Create2(..) => OpCode::Create2,
            MultiResult::Delete => OpCode::Delete,
            MultiResult::SetData(_) => OpCode::SetData,
            MultiResult::Check => OpCode::Check,
            MultiResult::GetData(..) => OpCode::GetData,
            MultiResult::GetChildren(_) => OpCode::GetChildren,
            MultiResult::Error(_) => OpCode::Error,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let err = match self {
            MultiResult::Error(code) => code.as_i32(),
            _ => ErrorCode::Ok.as_i32(),
        };
        let header = MultiHeader {
            kind: self.opcode().as_i32(),
            done: false,
            err,
        };
        header.encode(out);
        match self {
            MultiResult::Create(path) => write_string(out, path),
            MultiResult::Create2(path, stat) => {
                write_string(out, path);
                stat.encode(out);
            }
            MultiResult::Delete | MultiResult::Check => {}
            MultiResult::SetData(stat) => stat.encode(out),
            MultiResult::GetData(data, stat) => {
                write_nullable_buffer(out, data.as_deref());
                stat.encode(out);
            }
            MultiResult::GetChildren(children) => {
                write_vec(out, children, |out, child| write_string(out, child));
            }
            MultiResult::Error(code) => write_i32(out, code.as_i32()),
        }
    }

    /// Decodes the body after `header`; the header's `err` is ignored except
    /// through the `ErrorResponse` body, as ZooKeeper's client does.
    fn decode(header: &MultiHeader, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let result = match OpCode::from_i32(header.kind) {
            Some(OpCode::Create) => MultiResult::Create(CreateResponse::decode(r)?.path),
            Some(OpCode::Create2) => {
                let response = Create2Response::decode(r)?;
                MultiResult::Create2(response.path, response.stat)
            }
            Some(OpCode::Delete) => MultiResult::Delete,
            Some(OpCode::SetData) => MultiResult::SetData(SetDataResponse::decode(r)?.stat),
            Some(OpCode::Check) => MultiResult::Check,
            Some(OpCode::GetData) => {
                let response = GetDataResponse::decode(r)?;
                MultiResult::GetData(response.data, response.stat)
            }
            Some(OpCode::GetChildren) => {
                MultiResult::GetChildren(GetChildrenResponse::decode(r)?.children)
            }
            Some(OpCode::Error) => {
                let err = ErrorResponse::decode(r)?.err;
                let code = ErrorCode::from_i32(err).ok_or_else(|| {
                    DecodeError::new(format!("unknown error code {err} in multi"))
                })?;
                MultiResult::Error(code)
            }
            _ => {
                return Err(DecodeError::new(format!(
                    "invalid multi result type {}",
                    header.kind
                )))
            }
        };
        Ok(result)
    }
}

/// One reply body, shaped by the opcode of the request it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// No body: delete, check, ping, auth, closeSession, setWatches,
    /// removeWatches, checkWatches, and every reply whose `err` is not 0.
    Empty,
    Create(CreateResponse),
    /// create2, createTtl and createContainer.
    Create2(Create2Response),
    /// exists, setData and setAcl answer with a bare `Stat`.
    Stat(Stat),
    /// getData, and reconfig (the new configuration and its stat).
    GetData(GetDataResponse),
    GetAcl(GetAclResponse),
    GetChildren(GetChildrenResponse),
    GetChildren2(GetChildren2Response),
    Sync(SyncResponse),
    /// multi and multiRead. A failed multi still has `err` 0 in its header:
    /// the failure is in the results.
    Multi(Vec<MultiResult>),
    GetAllChildrenNumber(GetAllChildrenNumberResponse),
    GetEphemerals(GetEphemeralsResponse),
    WhoAmI(WhoAmIResponse),
    /// addWatch: ZooKeeper answers with an `ErrorResponse` whose `err` is 0
    /// (four zero bytes), not an empty body.
    AddWatch(ErrorResponse),
    /// sasl: the server's next token.
    Sasl(SetSaslResponse),
}

impl Response {
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Response::Empty => {}
            Response::Create(record) => record.encode(out),
            Response::Create2(record) => record.encode(out),
            Response::Stat(record) => record.encode(out),
            Response::GetData(record) => record.encode(out),
            Response::GetAcl(record) => record.encode(out),
            Response::GetChildren(record) => record.encode(out),
            Response::GetChildren2(record) => record.encode(out),
            Response::Sync(record) => record.encode(out),
            Response::Multi(results) => {
                for result in results {
                    result.encode(out);
                }
                MULTI_END.encode(out);
            }
            Response::GetAllChildrenNumber(record) => record.encode(out),
            Response::GetEphemerals(record) => record.encode(out),
            Response::WhoAmI(record) => record.encode(out),
            Response::AddWatch(record) => record.encode(out),
            Response::Sasl(record) => record.encode(out),
        }
    }

    /// Decodes the body of a successful (`err` 0) reply to a request of
    /// type `op`. Notifications (xid -1) carry a `WatcherEvent` instead and
    /// are not decoded here.
    pub fn decode(op: OpCode, r: &mut Reader<'_>) -> Result<Response, DecodeError> {
        let response = match op {
            OpCode::Create => Response::Create(Record::decode(r)?),
            OpCode::Create2 | OpCode::CreateTtl | OpCode::CreateContainer => {
                Response::Create2(Record::decode(r)?)
            }
            OpCode::Exists | OpCode::SetData | OpCode::SetAcl => Response::Stat(Record::decode(r)?),
            OpCode::GetData | OpCode::Reconfig => Response::GetData(Record::decode(r)?),
            OpCode::GetAcl => Response::GetAcl(Record::decode(r)?),
            OpCode::GetChildren => Response::GetChildren(Record::decode(r)?),
            OpCode::GetChildren2 => Response::GetChildren2(Record::decode(r)?),
            OpCode::Sync => Response::Sync(Record::decode(r)?),
            OpCode::Multi | OpCode::MultiRead => Response::Multi(decode_results(r)?),
            OpCode::GetAllChildrenNumber => Response::GetAllChildrenNumber(Record::decode(r)?),
            OpCode::GetEphemerals => Response::GetEphemerals(Record::decode(r)?),
            OpCode::WhoAmI => Response::WhoAmI(Record::decode(r)?),
            OpCode::AddWatch => Response::AddWatch(Record::decode(r)?),
            OpCode::Sasl => Response::Sasl(Record::decode(r)?),
            OpCode::Delete
            | OpCode::DeleteContainer
            | OpCode::Check
            | OpCode::Ping
            | OpCode::Auth
            | OpCode::CloseSession
            | OpCode::SetWatches
            | OpCode::SetWatches2
            | OpCode::CheckWatches
            | OpCode::RemoveWatches => Response::Empty,
            OpCode::Notification | OpCode::CreateSession | OpCode::Error => {
                return Err(DecodeError::new(format!("{op:?} has no reply body")));
            }
        };
        Ok(response)
    }
}

/// Decodes multi results up to the `done` header; each round consumes at
/// least a 9-byte header, so the loop is bounded by the input.
fn decode_results(r: &mut Reader<'_>) -> Result<Vec<MultiResult>, DecodeError> {
    let mut results = Vec::new();
    loop {
        let header = MultiHeader::decode(r)?;
        if header.done {
            return Ok(results);
        }
        results.push(MultiResult::decode(&header, r)?);
    }
}
