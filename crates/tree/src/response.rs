//! The reply ZooKeeper's `FinalRequestProcessor` builds for a write.

use stoa_proto::codes::ErrorCode;
use stoa_proto::records::{Create2Response, CreateResponse};
use stoa_proto::request::Request;
use stoa_proto::response::{MultiResult, Response};

use crate::apply::TxnResult;

/// What a write's reply needs of its request: its shape, not its data.
/// The request itself goes on into the partition (prepared, logged,
/// applied); whoever answers the client keeps only this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyShape {
    /// create: the reply names the created path.
    Create,
    /// create2, createContainer, createTTL: the path and the new stat.
    Create2,
    /// multi: one shape per op, in order.
    Multi(Vec<ReplyShape>),
    /// sync: answered with its own path once its no-op applies.
    Sync(String),
    /// reconfig: answered with the configuration it made.
    Reconfig,
    /// Any other write: its result alone decides (a stat or nothing).
    Other,
}

impl ReplyShape {
    pub fn of(req: &Request) -> ReplyShape {
        match req {
            Request::Create(_) => ReplyShape::Create,
            Request::Create2(_) | Request::CreateContainer(_) | Request::CreateTtl(_) => {
                ReplyShape::Create2
            }
            Request::Multi(ops) => ReplyShape::Multi(ops.iter().map(ReplyShape::of).collect()),
            Request::Sync(r) => ReplyShape::Sync(r.path.clone()),
            Request::Reconfig(_) => ReplyShape::Reconfig,
            _ => ReplyShape::Other,
        }
    }

    /// This op's entry in a multi's reply, given its applied `result`.
    pub fn multi_result(&self, result: &TxnResult) -> MultiResult {
        multi_result(self, result)
    }

    /// The reply given the applied `result`: `Err(code)` goes in the reply
    /// header with an empty body. A failed multi is `Ok`: its failure is in
    /// the per-op results and the header says 0.
    pub fn reply(&self, result: &TxnResult) -> Result<Response, ErrorCode> {
        match (self, result) {
            (_, TxnResult::Error(code)) => Err(*code),
            (ReplyShape::Create, TxnResult::Created { path, .. }) => {
                Ok(Response::Create(CreateResponse { path: path.clone() }))
            }
            (ReplyShape::Create2, TxnResult::Created { path, stat }) => {
                Ok(Response::Create2(Create2Response {
                    path: path.clone(),
                    stat: stat.clone(),
                }))
            }
            (_, TxnResult::SetData { stat } | TxnResult::SetAcl { stat }) => {
                Ok(Response::Stat(stat.clone()))
            }
            (ReplyShape::Multi(ops), TxnResult::Multi(results)) => Ok(Response::Multi(
                ops.iter()
                    .zip(results)
                    .map(|(o, r)| multi_result(o, r))
                    .collect(),
            )),
            _ => Ok(Response::Empty),
        }
    }
}

/// The reply ZooKeeper builds for `req` given its applied `result`
/// (see [`ReplyShape::reply`]).
pub fn reply_for(req: &Request, result: &TxnResult) -> Result<Response, ErrorCode> {
    ReplyShape::of(req).reply(result)
}

/// [`reply_for`] for callers that send errors separately: an error gives
/// `Response::Empty`.
pub fn response_for(req: &Request, result: &TxnResult) -> Response {
    reply_for(req, result).unwrap_or(Response::Empty)
}

fn multi_result(op: &ReplyShape, result: &TxnResult) -> MultiResult {
    match (op, result) {
        (_, TxnResult::Error(code)) => MultiResult::Error(*code),
        (ReplyShape::Create, TxnResult::Created { path, .. }) => MultiResult::Create(path.clone()),
        (_, TxnResult::Created { path, stat }) => MultiResult::Create2(path.clone(), stat.clone()),
        (_, TxnResult::Deleted) => MultiResult::Delete,
        (_, TxnResult::SetData { stat }) => MultiResult::SetData(stat.clone()),
        _ => MultiResult::Check,
    }
}
