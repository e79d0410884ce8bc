//! The slice of etcd's v3 gRPC API the load generator uses (KV: Range, Put,
//! DeleteRange, Txn; Lease: LeaseGrant, LeaseRevoke), called through tonic's
//! client channel with prost's codec.
//!
//! The messages are declared here with prost's derive, field for field as
//! etcd's `etcdserverpb`/`mvccpb` API defines them (only the fields the load
//! generator sets or reads; prost skips the others when decoding), instead
//! of being generated from etcd's .proto files at build time: every crate
//! that does that (the `etcd-client` crate among them) needs `protoc`
//! installed, and this crate is linked into the `stoa` binary, so every
//! build of Stoa would. Each call is one HTTP/2 request on the session's
//! connection, exactly as a generated tonic client would send it.

use std::time::Duration;

use bytes::Bytes;
use http::uri::PathAndQuery;
use tonic::client::Grpc;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};
use tonic_prost::ProstCodec;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseHeader {
    #[prost(uint64, tag = "1")]
    pub cluster_id: u64,
    #[prost(uint64, tag = "2")]
    pub member_id: u64,
    #[prost(int64, tag = "3")]
    pub revision: i64,
    #[prost(uint64, tag = "4")]
    pub raft_term: u64,
}

/// `mvccpb.KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(int64, tag = "2")]
    pub create_revision: i64,
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
    #[prost(int64, tag = "4")]
    pub version: i64,
    #[prost(bytes = "bytes", tag = "5")]
    pub value: Bytes,
    #[prost(int64, tag = "6")]
    pub lease: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeRequest {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    /// Empty: just `key`; else the half-open range [key, range_end).
    #[prost(bytes = "bytes", tag = "2")]
    pub range_end: Bytes,
    #[prost(int64, tag = "3")]
    pub limit: i64,
    /// false (the default): a linearizable read, confirmed with the leader
    /// through raft's ReadIndex; true would let the member answer from its
    /// local state.
    #[prost(bool, tag = "7")]
    pub serializable: bool,
    /// Keys and their metadata, no values.
    #[prost(bool, tag = "8")]
    pub keys_only: bool,
    #[prost(bool, tag = "9")]
    pub count_only: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<KeyValue>,
    #[prost(bool, tag = "3")]
    pub more: bool,
    #[prost(int64, tag = "4")]
    pub count: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PutRequest {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
    /// 0: no lease.
    #[prost(int64, tag = "3")]
    pub lease: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PutResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteRangeRequest {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub range_end: Bytes,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteRangeResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(int64, tag = "2")]
    pub deleted: i64,
}

/// One operation of a transaction (`RequestOp`); only puts here.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RequestOp {
    #[prost(oneof = "request_op::Request", tags = "2")]
    pub request: Option<request_op::Request>,
}

pub mod request_op {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Request {
        #[prost(message, tag = "2")]
        RequestPut(super::PutRequest),
    }
}

/// A transaction; with no comparisons its `success` ops always apply.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnRequest {
    #[prost(message, repeated, tag = "2")]
    pub success: Vec<RequestOp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(bool, tag = "2")]
    pub succeeded: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseGrantRequest {
    #[prost(int64, tag = "1")]
    pub ttl: i64,
    /// 0: the server picks the id.
    #[prost(int64, tag = "2")]
    pub id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseGrantResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(int64, tag = "2")]
    pub id: i64,
    #[prost(int64, tag = "3")]
    pub ttl: i64,
    #[prost(string, tag = "4")]
    pub error: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseRevokeRequest {
    #[prost(int64, tag = "1")]
    pub id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseRevokeResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
}

const RANGE: &str = "/etcdserverpb.KV/Range";
const PUT: &str = "/etcdserverpb.KV/Put";
const DELETE_RANGE: &str = "/etcdserverpb.KV/DeleteRange";
const TXN: &str = "/etcdserverpb.KV/Txn";
const LEASE_GRANT: &str = "/etcdserverpb.Lease/LeaseGrant";
const LEASE_REVOKE: &str = "/etcdserverpb.Lease/LeaseRevoke";

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection to one etcd member; clones share it (HTTP/2 multiplexes
/// their calls).
#[derive(Clone, Debug)]
pub struct EtcdClient {
    grpc: Grpc<Channel>,
}

impl EtcdClient {
    /// Connects to `addr` (`host:port`, or a full `http://` URL).
    pub async fn connect(addr: &str) -> Result<EtcdClient, String> {
        let url = if addr.contains("://") {
            addr.to_owned()
        } else {
            format!("http://{addr}")
        };
        let endpoint = Endpoint::from_shared(url.clone())
            .map_err(|e| format!("bad etcd endpoint {addr:?}: {e}"))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| format!("cannot connect to etcd at {url}: {e}"))?;
        Ok(EtcdClient {
            grpc: Grpc::new(channel),
        })
    }

    async fn unary<Q, A>(&self, path: &'static str, request: Q) -> Result<A, Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = self.grpc.clone();
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(format!("etcd connection not ready: {e}")))?;
        let codec: ProstCodec<Q, A> = ProstCodec::default();
        let response = grpc
            .unary(
                Request::new(request),
                PathAndQuery::from_static(path),
                codec,
            )
            .await?;
        Ok(response.into_inner())
    }

    pub async fn range(&self, request: RangeRequest) -> Result<RangeResponse, Status> {
        self.unary(RANGE, request).await
    }

    pub async fn put(&self, request: PutRequest) -> Result<PutResponse, Status> {
        self.unary(PUT, request).await
    }

    pub async fn delete_range(
        &self,
        request: DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, Status> {
        self.unary(DELETE_RANGE, request).await
    }

    pub async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, Status> {
        self.unary(TXN, request).await
    }

    pub async fn lease_grant(&self, ttl: Duration) -> Result<LeaseGrantResponse, Status> {
        let request = LeaseGrantRequest {
            ttl: ttl.as_secs().max(1) as i64,
            id: 0,
        };
        self.unary(LEASE_GRANT, request).await
    }

    pub async fn lease_revoke(&self, id: i64) -> Result<LeaseRevokeResponse, Status> {
        self.unary(LEASE_REVOKE, LeaseRevokeRequest { id }).await
    }
}

/// The end of the range of every key that starts with `prefix`: the prefix
/// with its last byte below 0xff incremented and what follows dropped
/// (`"\0"`, every key, when there is no such byte).
pub fn prefix_end(prefix: &[u8]) -> Bytes {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Bytes::from(end);
        }
    }
    Bytes::from_static(b"\0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn prefix_end_increments_the_last_byte_below_0xff() {
        assert_eq!(&prefix_end(b"/stoa-bench/keys/")[..], b"/stoa-bench/keys0");
        assert_eq!(&prefix_end(b"a\xff\xff")[..], b"b");
        assert_eq!(&prefix_end(b"\xff")[..], b"\0");
    }

    #[test]
    fn messages_use_etcds_field_numbers() {
        // RangeRequest{key: "k", keys_only: true}: field 1 (bytes), field 8 (varint).
        let range = RangeRequest {
            key: Bytes::from_static(b"k"),
            keys_only: true,
            ..RangeRequest::default()
        };
        assert_eq!(range.encode_to_vec(), [0x0a, 1, b'k', 0x40, 1]);
        // The default serializable = false is not sent: a linearizable read.
        assert!(!range.serializable);
        // A transaction's put is RequestOp field 2 inside TxnRequest field 2.
        let txn = TxnRequest {
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: Bytes::from_static(b"k"),
                    value: Bytes::from_static(b"v"),
                    lease: 0,
                })),
            }],
        };
        assert_eq!(
            txn.encode_to_vec(),
            [0x12, 8, 0x12, 6, 0x0a, 1, b'k', 0x12, 1, b'v']
        );
        // A response with fields this file leaves out still decodes.
        let mut bytes = RangeResponse {
            count: 3,
            ..RangeResponse::default()
        }
        .encode_to_vec();
        bytes.extend_from_slice(&[0x98, 0x01, 7]); // field 19, varint 7
        assert_eq!(RangeResponse::decode(&bytes[..]).unwrap().count, 3);
    }
}
