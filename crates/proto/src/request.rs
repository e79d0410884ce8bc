//! Request bodies, keyed by the `type` of their `RequestHeader`.

use std::fmt;

use crate::jute::{DecodeError, Reader, Record};
use crate::opcode::{CreateMode, OpCode};
use crate::records::*;

/// One client request body, decoded according to its opcode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Create(CreateRequest),
    Create2(CreateRequest),
    CreateContainer(CreateRequest),
    CreateTtl(CreateTtlRequest),
    Delete(DeleteRequest),
    /// Clients may send it (ZooKeeper's `Request.isValid` accepts opcode 20);
    /// the server normally issues it itself to reap empty containers.
    DeleteContainer(DeleteContainerRequest),
    Exists(ExistsRequest),
    GetData(GetDataRequest),
    SetData(SetDataRequest),
    GetAcl(GetAclRequest),
    SetAcl(SetAclRequest),
    GetChildren(GetChildrenRequest),
    GetChildren2(GetChildren2Request),
    Sync(SyncRequest),
    Ping,
    /// Valid only as an op of a multi: ZooKeeper answers a top-level check
    /// with `Unimplemented` (see [`crate::frame::decode_request_frame`]).
    Check(CheckVersionRequest),
    /// Ops as decoded. ZooKeeper's decoder accepts the nine multi op kinds
    /// in either multi opcode and only refuses to mix reads
    /// (getData/getChildren) with writes; which kinds a multi may carry is
    /// for the server to judge.
    Multi(Vec<Request>),
    MultiRead(Vec<Request>),
    Reconfig(ReconfigRequest),
    CheckWatches(CheckWatchesRequest),
    RemoveWatches(RemoveWatchesRequest),
    GetAllChildrenNumber(GetAllChildrenNumberRequest),
    GetEphemerals(GetEphemeralsRequest),
    CloseSession,
    Auth(AuthPacket),
    SetWatches(SetWatches),
    SetWatches2(SetWatches2),
    AddWatch(AddWatchRequest),
    WhoAmI,
    Sasl(GetSaslRequest),
}

/// Why a request body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// The opcode is not one a client may send.
    UnknownOpcode(i32),
    /// The body does not decode as the opcode's record.
    Malformed(DecodeError),
}

impl From<DecodeError> for RequestError {
    fn from(error: DecodeError) -> Self {
        RequestError::Malformed(error)
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::UnknownOpcode(op) => write!(f, "unknown request opcode {op}"),
            RequestError::Malformed(error) => write!(f, "malformed request: {error}"),
        }
    }
}

impl std::error::Error for RequestError {}

/// Whether a multi op reads or writes; ZooKeeper refuses to mix them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Read,
    Write,
}

impl Request {
    pub fn opcode(&self) -> OpCode {
        match self {
            Request::Create(_) => OpCode::Create,
            Request::Create2(_) => OpCode::Create2,
            Request::CreateContainer(_) => OpCode::CreateContainer,
            Request::CreateTtl(_) => OpCode::CreateTtl,
            Request::Delete(_) => OpCode::Delete,
            Request::DeleteContainer(_) => OpCode::DeleteContainer,
            Request::Exists(_) => OpCode::Exists,
            Request::GetData(_) => OpCode::GetData,
            Request::SetData(_) => OpCode::SetData,
            Request::GetAcl(_) => OpCode::GetAcl,
            Request::SetAcl(_) => OpCode::SetAcl,
            Request::GetChildren(_) => OpCode::GetChildren,
            Request::GetChildren2(_) => OpCode::GetChildren2,
            Request::Sync(_) => OpCode::Sync,
            Request::Ping => OpCode::Ping,
            Request::Check(_) => OpCode::Check,
            Request::Multi(_) => OpCode::Multi,
            Request::MultiRead(_) => OpCode::MultiRead,
            Request::Reconfig(_) => OpCode::Reconfig,
            Request::CheckWatches(_) => OpCode::CheckWatches,
            Request::RemoveWatches(_) => OpCode::RemoveWatches,
            Request::GetAllChildrenNumber(_) => OpCode::GetAllChildrenNumber,
            Request::GetEphemerals(_) => OpCode::GetEphemerals,
            Request::CloseSession => OpCode::CloseSession,
            Request::Auth(_) => OpCode::Auth,
            Request::SetWatches(_) => OpCode::SetWatches,
            Request::SetWatches2(_) => OpCode::SetWatches2,
            Request::AddWatch(_) => OpCode::AddWatch,
            Request::WhoAmI => OpCode::WhoAmI,
            Request::Sasl(_) => OpCode::Sasl,
        }
    }

    /// Decodes the body that follows a `RequestHeader` whose type is `op`.
    /// Trailing bytes are ignored, as ZooKeeper ignores them.
    pub fn decode(op: i32, r: &mut Reader<'_>) -> Result<Request, RequestError> {
        let Some(opcode) = OpCode::from_i32(op) else {
            return Err(RequestError::UnknownOpcode(op));
        };
        let request = match opcode {
            OpCode::Create => Request::Create(Record::decode(r)?),
            OpCode::Create2 => Request::Create2(Record::decode(r)?),
            OpCode::CreateContainer => Request::CreateContainer(Record::decode(r)?),
            OpCode::CreateTtl => Request::CreateTtl(Record::decode(r)?),
            OpCode::Delete => Request::Delete(Record::decode(r)?),
            OpCode::DeleteContainer => Request::DeleteContainer(Record::decode(r)?),
            OpCode::Exists => Request::Exists(Record::decode(r)?),
            OpCode::GetData => Request::GetData(Record::decode(r)?),
            OpCode::SetData => Request::SetData(Record::decode(r)?),
            OpCode::GetAcl => Request::GetAcl(Record::decode(r)?),
            OpCode::SetAcl => Request::SetAcl(Record::decode(r)?),
            OpCode::GetChildren => Request::GetChildren(Record::decode(r)?),
            OpCode::GetChildren2 => Request::GetChildren2(Record::decode(r)?),
            OpCode::Sync => Request::Sync(Record::decode(r)?),
            OpCode::Ping => Request::Ping,
            OpCode::Check => Request::Check(Record::decode(r)?),
            OpCode::Multi => Request::Multi(decode_ops(r)?),
            OpCode::MultiRead => Request::MultiRead(decode_ops(r)?),
            OpCode::Reconfig => Request::Reconfig(Record::decode(r)?),
            OpCode::CheckWatches => Request::CheckWatches(Record::decode(r)?),
            OpCode::RemoveWatches => Request::RemoveWatches(Record::decode(r)?),
            OpCode::GetAllChildrenNumber => Request::GetAllChildrenNumber(Record::decode(r)?),
            OpCode::GetEphemerals => Request::GetEphemerals(Record::decode(r)?),
            OpCode::CloseSession => Request::CloseSession,
            OpCode::Auth => Request::Auth(Record::decode(r)?),
            OpCode::SetWatches => Request::SetWatches(Record::decode(r)?),
            OpCode::SetWatches2 => Request::SetWatches2(Record::decode(r)?),
            OpCode::AddWatch => Request::AddWatch(Record::decode(r)?),
            OpCode::WhoAmI => Request::WhoAmI,
            OpCode::Sasl => Request::Sasl(Record::decode(r)?),
            OpCode::Notification | OpCode::CreateSession | OpCode::Error => {
                return Err(RequestError::UnknownOpcode(op));
            }
        };
        Ok(request)
    }

    /// Writes the body only; the caller writes the `RequestHeader`.
    ///
    /// Panics if a multi holds an op that cannot be part of a multi: that
    /// is a bug in the caller, and the bytes could not be decoded back.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Request::Create(record)
            | Request::Create2(record)
            | Request::CreateContainer(record) => record.encode(out),
            Request::CreateTtl(record) => record.encode(out),
            Request::Delete(record) => record.encode(out),
            Request::DeleteContainer(record) => record.encode(out),
            Request::Exists(record) => record.encode(out),
            Request::GetData(record) => record.encode(out),
            Request::SetData(record) => record.encode(out),
            Request::GetAcl(record) => record.encode(out),
            Request::SetAcl(record) => record.encode(out),
            Request::GetChildren(record) => record.encode(out),
            Request::GetChildren2(record) => record.encode(out),
            Request::Sync(record) => record.encode(out),
            Request::Check(record) => record.encode(out),
            Request::Multi(ops) | Request::MultiRead(ops) => encode_ops(out, ops),
            Request::Reconfig(record) => record.encode(out),
            Request::CheckWatches(record) => record.encode(out),
            Request::RemoveWatches(record) => record.encode(out),
            Request::GetAllChildrenNumber(record) => record.encode(out),
            Request::GetEphemerals(record) => record.encode(out),
            Request::Auth(record) => record.encode(out),
            Request::SetWatches(record) => record.encode(out),
            Request::SetWatches2(record) => record.encode(out),
            Request::AddWatch(record) => record.encode(out),
            Request::Sasl(record) => record.encode(out),
            Request::Ping | Request::CloseSession | Request::WhoAmI => {}
        }
    }

    /// The znode path the request names, if it names exactly one.
    pub fn path(&self) -> Option<&str> {
        let path = match self {
            Request::Create(record)
            | Request::Create2(record)
            | Request::CreateContainer(record) => &record.path,
            Request::CreateTtl(record) => &record.path,
            Request::Delete(record) => &record.path,
            Request::DeleteContainer(record) => &record.path,
            Request::Exists(record) => &record.path,
            Request::GetData(record) => &record.path,
            Request::SetData(record) => &record.path,
            Request::GetAcl(record) => &record.path,
            Request::SetAcl(record) => &record.path,
            Request::GetChildren(record) => &record.path,
            Request::GetChildren2(record) => &record.path,
            Request::Sync(record) => &record.path,
            Request::Check(record) => &record.path,
            Request::CheckWatches(record) => &record.path,
            Request::RemoveWatches(record) => &record.path,
            Request::GetAllChildrenNumber(record) => &record.path,
            Request::GetEphemerals(record) => &record.prefix_path,
            Request::AddWatch(record) => &record.path,
            Request::Multi(_)
            | Request::MultiRead(_)
            | Request::Reconfig(_)
            | Request::Ping
            | Request::CloseSession
            | Request::Auth(_)
            | Request::SetWatches(_)
            | Request::SetWatches2(_)
            | Request::WhoAmI
            | Request::Sasl(_) => return None,
        };
        Some(path)
    }

    /// Whether the request changes replicated state (goes through the log).
    pub fn is_write(&self) -> bool {
        self.creates_or_deletes()
            || matches!(
                self,
                Request::SetData(_)
                    | Request::SetAcl(_)
                    | Request::Check(_)
                    | Request::Multi(_)
                    | Request::Reconfig(_)
                    | Request::CloseSession
            )
    }

    /// Whether the request creates or deletes a node (adds it to or removes
    /// it from its parent's children).
    pub fn creates_or_deletes(&self) -> bool {
        matches!(
            self,
            Request::Create(_)
                | Request::Create2(_)
                | Request::CreateContainer(_)
                | Request::CreateTtl(_)
                | Request::Delete(_)
                | Request::DeleteContainer(_)
        )
    }

    /// Whether the request may be an op of a multi, and of which kind.
    fn multi_op_kind(&self) -> Option<OpKind> {
        match self {
            Request::Create(_)
            | Request::Create2(_)
            | Request::CreateContainer(_)
            | Request::CreateTtl(_)
            | Request::Delete(_)
            | Request::SetData(_)
            | Request::Check(_) => Some(OpKind::Write),
            Request::GetData(_) | Request::GetChildren(_) => Some(OpKind::Read),
            _ => None,
        }
    }
}

/// Header that follows the last op of a multi request or reply.
pub(crate) const MULTI_END: MultiHeader = MultiHeader {
    kind: -1,
    done: true,
    err: -1,
};

fn encode_ops(out: &mut Vec<u8>, ops: &[Request]) {
    for op in ops {
        assert!(
            op.multi_op_kind().is_some(),
            "{:?} cannot be an op of a multi",
            op.opcode()
        );
        let header = MultiHeader {
            kind: op.opcode().as_i32(),
            done: false,
            err: -1,
        };
        header.encode(out);
        op.encode(out);
    }
    MULTI_END.encode(out);
}

/// Decodes multi ops up to the `done` header. Every iteration consumes at
/// least a 9-byte header, so the loop ends within `remaining / 9` rounds.
fn decode_ops(r: &mut Reader<'_>) -> Result<Vec<Request>, RequestError> {
    let mut ops = Vec::new();
    let mut ops_kind = None;
    loop {
        let header = MultiHeader::decode(r)?;
        if header.done {
            return Ok(ops);
        }
        let op = match OpCode::from_i32(header.kind) {
            Some(OpCode::Create) => Request::Create(decode_create(r)?),
            Some(OpCode::Create2) => Request::Create2(decode_create(r)?),
            Some(OpCode::CreateContainer) => Request::CreateContainer(decode_create(r)?),
            Some(OpCode::CreateTtl) => Request::CreateTtl(Record::decode(r)?),
            Some(OpCode::Delete) => Request::Delete(Record::decode(r)?),
            Some(OpCode::SetData) => Request::SetData(Record::decode(r)?),
            Some(OpCode::Check) => Request::Check(Record::decode(r)?),
            Some(OpCode::GetChildren) => Request::GetChildren(Record::decode(r)?),
            Some(OpCode::GetData) => Request::GetData(Record::decode(r)?),
            _ => {
                return Err(
                    DecodeError::new(format!("invalid multi op type {}", header.kind)).into(),
                );
            }
        };
        let kind = op.multi_op_kind();
        if ops_kind.is_some() && ops_kind != kind {
            return Err(DecodeError::new("multi mixes read and write ops").into());
        }
        ops_kind = kind;
        ops.push(op);
    }
}

/// ZooKeeper's multi decoder rejects a create whose flags name no
/// `CreateMode` (the server then answers `MarshallingError`).
fn decode_create(r: &mut Reader<'_>) -> Result<CreateRequest, DecodeError> {
    let create = CreateRequest::decode(r)?;
    if CreateMode::from_flags(create.flags).is_none() {
        return Err(DecodeError::new(format!(
            "invalid create flags {} in multi",
            create.flags
        )));
    }
    Ok(create)
}
