//! The reply ZooKeeper's `FinalRequestProcessor` builds for a write.

use stoa_proto::codes::ErrorCode;
use stoa_proto::records::{Create2Response, CreateResponse};
use stoa_proto::request::Request;
use stoa_proto::response::{MultiResult, Response};

use crate::apply::TxnResult;

/// The reply to `req` given its applied `result`: `Err(code)` goes in the
/// reply header with an empty body. A failed multi is `Ok`: its failure is
/// in the per-op results and the header says 0.
pub fn reply_for(req: &Request, result: &TxnResult) -> Result<Response, ErrorCode> {
    match (req, result) {
        (_, TxnResult::Error(code)) => Err(*code),
        (Request::Create(_), TxnResult::Created { path, .. }) => {
            Ok(Response::Create(CreateResponse { path: path.clone() }))
        }
        (
            Request::Create2(_) | Request::CreateContainer(_) | Request::CreateTtl(_),
            TxnResult::Created { path, stat },
        ) => Ok(Response::Create2(Create2Response {
            path: path.clone(),
            stat: stat.clone(),
        })),
        (_, TxnResult::SetData { stat } | TxnResult::SetAcl { stat }) => {
            Ok(Response::Stat(stat.clone()))
        }
        (Request::Multi(ops), TxnResult::Multi(results)) => Ok(Response::Multi(
            ops.iter()
                .zip(results)
                .map(|(o, r)| multi_result(o, r))
                .collect(),
        )),
        _ => Ok(Response::Empty),
    }
}

/// [`reply_for`] for callers that send errors separately: an error gives
/// `Response::Empty`.
pub fn response_for(req: &Request, result: &TxnResult) -> Response {
    reply_for(req, result).unwrap_or(Response::Empty)
}

fn multi_result(op: &Request, result: &TxnResult) -> MultiResult {
    match (op, result) {
        (_, TxnResult::Error(code)) => MultiResult::Error(*code),
        (Request::Create(_), TxnResult::Created { path, .. }) => MultiResult::Create(path.clone()),
        (_, TxnResult::Created { path, stat }) => MultiResult::Create2(path.clone(), stat.clone()),
        (_, TxnResult::Deleted) => MultiResult::Delete,
        (_, TxnResult::SetData { stat }) => MultiResult::SetData(stat.clone()),
        _ => MultiResult::Check,
    }
}
