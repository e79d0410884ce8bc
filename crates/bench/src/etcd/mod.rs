//! `stoa bench --target etcd --endpoints host:port[,..]`: the ZooKeeper
//! cells against etcd's v3 API, with the same sessions, calls in flight,
//! mix, payload, keyspace, timing, warm-up and outputs, measured by the same
//! code (`driver::measure`).
//!
//! - A session is one etcd client with its own connection (HTTP/2; its
//!   calls in flight are multiplexed on it), session `i` on endpoint
//!   `i mod n` as a ZooKeeper client picks one server of its list.
//! - The keys are the ZooKeeper paths (`/stoa-bench/keys/k0000042`), put
//!   before measuring (not measured).
//! - create and setData are puts (a create's key is new, as in ZooKeeper);
//!   getData is a range of the one key, exists the same keys-only (the
//!   metadata, as ZooKeeper's Stat), both linearizable (`serializable =
//!   false`, etcd's default: the member confirms with the leader through
//!   ReadIndex before answering, as a ZooKeeper read after `sync` would;
//!   `--serializable` asks for serializable reads instead, answered from
//!   the member's local state as ZooKeeper answers reads);
//!   getChildren is a keys-only prefix range over the keyspace; delete is a
//!   delete of a key the worker created; multi (two setData) is a txn of two
//!   puts.
//! - `--ephemeral`: each session grants a lease (TTL past the run) its
//!   creates are attached to, revoked when the run ends, as a ZooKeeper
//!   session's close removes its ephemerals.
//! - A get or delete of a missing key counts as a `KeyNotFound` error (a
//!   ZooKeeper NoNode); gRPC failures count under their status code.

pub mod rpc;

use std::time::Duration;

use bytes::Bytes;
use stoa_client::tokio;

use crate::driver::{self, keys_dir, Backend, Call, SETUP_WINDOW};
use crate::options::Cell;
use crate::report::CellResult;
use rpc::{DeleteRangeRequest, EtcdClient, PutRequest, RangeRequest, RequestOp, TxnRequest};

/// Where `--target etcd` connects by default.
pub const DEFAULT_ENDPOINT: &str = "127.0.0.1:2379";
/// Lease TTL beyond the run's planned length (`--ephemeral`).
const LEASE_MARGIN: Duration = Duration::from_secs(300);
/// Lease TTL of a run timed by op count.
const LEASE_TTL_OPS: Duration = Duration::from_secs(3600);

/// One etcd session: a connection and, with `--ephemeral`, its lease.
#[derive(Clone, Debug)]
pub struct Etcd {
    client: EtcdClient,
    /// 0: none.
    lease: i64,
    /// Reads with `serializable = true` (`--serializable`).
    serializable: bool,
    children_prefix: Bytes,
    children_end: Bytes,
}

#[derive(Debug)]
pub enum EtcdError {
    Status(tonic::Status),
    /// A get or delete found no key.
    NotFound,
}

impl From<tonic::Status> for EtcdError {
    fn from(status: tonic::Status) -> EtcdError {
        EtcdError::Status(status)
    }
}

/// The endpoints of `--endpoints a:2379,b:2379`.
fn endpoints(list: &str) -> Result<Vec<String>, String> {
    let v: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if v.is_empty() {
        return Err(format!("no etcd endpoint in {list:?}"));
    }
    Ok(v)
}

pub async fn run(endpoint_list: &str, cell: &Cell) -> Result<CellResult, String> {
    if cell.workload.is_ezk() {
        return Err(format!(
            "{} is a ZooKeeper-protocol experiment; --target etcd runs the op mixes only",
            cell.workload.name()
        ));
    }
    let addrs = endpoints(endpoint_list)?;
    let mut pending = Vec::with_capacity(cell.sessions);
    for s in 0..cell.sessions {
        let addr = addrs[s % addrs.len()].clone();
        pending.push(tokio::spawn(
            async move { EtcdClient::connect(&addr).await },
        ));
    }
    let mut clients = Vec::with_capacity(cell.sessions);
    for p in pending {
        clients.push(p.await.map_err(|e| format!("connect task failed: {e}"))??);
    }
    setup(&clients[0], cell.keys, cell.payload_bytes).await?;

    let prefix = format!("{}/", keys_dir());
    let children_end = rpc::prefix_end(prefix.as_bytes());
    let mut sessions = Vec::with_capacity(clients.len());
    for client in clients {
        let lease = if cell.ephemeral {
            let ttl = match cell.ops {
                Some(_) => cell.warmup + LEASE_TTL_OPS,
                None => cell.warmup + cell.duration + LEASE_MARGIN,
            };
            let granted = client
                .lease_grant(ttl)
                .await
                .map_err(|e| format!("setup: lease grant: {}", status_text(&e)))?;
            if !granted.error.is_empty() {
                return Err(format!("setup: lease grant: {}", granted.error));
            }
            granted.id
        } else {
            0
        };
        sessions.push(Etcd {
            client,
            lease,
            serializable: cell.serializable,
            children_prefix: Bytes::from(prefix.clone()),
            children_end: children_end.clone(),
        });
    }
    let result = driver::measure(&sessions, cell, endpoint_list).await;
    // Not measured; the session's "ephemerals" go with its lease.
    for s in &sessions {
        if s.lease != 0 {
            let _ = s.client.lease_revoke(s.lease).await;
        }
    }
    result
}

/// Puts the keyspace, each key holding `payload_bytes` bytes.
async fn setup(client: &EtcdClient, keys: usize, payload_bytes: usize) -> Result<(), String> {
    let payload = Bytes::from(vec![b'x'; payload_bytes]);
    let mut in_flight = tokio::task::JoinSet::new();
    for i in 0..keys {
        if in_flight.len() >= SETUP_WINDOW {
            driver::join_one(&mut in_flight).await?;
        }
        let client = client.clone();
        let key = driver::key_path(i);
        let request = PutRequest {
            key: Bytes::from(key.clone()),
            value: payload.clone(),
            lease: 0,
        };
        in_flight.spawn(async move {
            client
                .put(request)
                .await
                .map(|_| ())
                .map_err(|e| format!("setup: put {key}: {}", status_text(&e)))
        });
    }
    while !in_flight.is_empty() {
        driver::join_one(&mut in_flight).await?;
    }
    Ok(())
}

fn key(k: &str) -> Bytes {
    Bytes::copy_from_slice(k.as_bytes())
}

fn status_text(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

impl Backend for Etcd {
    type Error = EtcdError;

    async fn call<'a>(&'a self, call: Call<'a>, payload: &'a Bytes) -> Result<(), EtcdError> {
        let client = &self.client;
        match call {
            Call::Get(k) => {
                let response = client
                    .range(RangeRequest {
                        key: key(k),
                        serializable: self.serializable,
                        ..RangeRequest::default()
                    })
                    .await?;
                if response.kvs.is_empty() {
                    return Err(EtcdError::NotFound);
                }
            }
            Call::Exists(k) => {
                client
                    .range(RangeRequest {
                        key: key(k),
                        keys_only: true,
                        serializable: self.serializable,
                        ..RangeRequest::default()
                    })
                    .await?;
            }
            Call::Set(k) => {
                client
                    .put(PutRequest {
                        key: key(k),
                        value: payload.clone(),
                        lease: 0,
                    })
                    .await?;
            }
            Call::Children => {
                client
                    .range(RangeRequest {
                        key: self.children_prefix.clone(),
                        range_end: self.children_end.clone(),
                        keys_only: true,
                        serializable: self.serializable,
                        ..RangeRequest::default()
                    })
                    .await?;
            }
            Call::Create(k) => {
                client
                    .put(PutRequest {
                        key: key(k),
                        value: payload.clone(),
                        lease: self.lease,
                    })
                    .await?;
            }
            Call::Delete(k) => {
                let response = client
                    .delete_range(DeleteRangeRequest {
                        key: key(k),
                        range_end: Bytes::new(),
                    })
                    .await?;
                if response.deleted == 0 {
                    return Err(EtcdError::NotFound);
                }
            }
            Call::Multi(a, b) => {
                let put = |k: &str| RequestOp {
                    request: Some(rpc::request_op::Request::RequestPut(PutRequest {
                        key: key(k),
                        value: payload.clone(),
                        lease: 0,
                    })),
                };
                client
                    .txn(TxnRequest {
                        success: vec![put(a), put(b)],
                    })
                    .await?;
            }
        }
        Ok(())
    }

    /// None: tonic reconnects the channel, so a session can always try again.
    fn is_terminal(_error: &EtcdError) -> bool {
        false
    }

    fn is_not_found(error: &EtcdError) -> bool {
        matches!(error, EtcdError::NotFound)
    }

    /// The gRPC status code, with etcd's own reason when it gives one
    /// (`ResourceExhausted: mvcc: database space exceeded`).
    fn error_name(error: &EtcdError) -> String {
        match error {
            EtcdError::NotFound => "KeyNotFound".to_owned(),
            EtcdError::Status(s) => {
                let code = format!("{:?}", s.code());
                match s.message().strip_prefix("etcdserver: ") {
                    Some(reason) => format!("{code}: {reason}"),
                    None => code,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_lists() {
        assert_eq!(
            endpoints("a:1, b:2,").unwrap(),
            vec!["a:1".to_owned(), "b:2".to_owned()]
        );
        assert!(endpoints(" , ").is_err());
    }

    #[test]
    fn error_names() {
        assert_eq!(Etcd::error_name(&EtcdError::NotFound), "KeyNotFound");
        let nospace =
            tonic::Status::resource_exhausted("etcdserver: mvcc: database space exceeded");
        assert_eq!(
            Etcd::error_name(&EtcdError::Status(nospace)),
            "ResourceExhausted: mvcc: database space exceeded"
        );
        let down = tonic::Status::unavailable("connection refused");
        assert_eq!(Etcd::error_name(&EtcdError::Status(down)), "Unavailable");
    }
}
