//! Ops of a `multi` (atomic writes) or `multi_read` (a batch of reads).

use std::time::Duration;

use stoa_proto::opcode::CreateMode;
use stoa_proto::records::{
    Acl, CheckVersionRequest, CreateRequest, CreateTtlRequest, DeleteRequest, GetChildrenRequest,
    GetDataRequest, SetDataRequest,
};
use stoa_proto::request::Request;

use crate::error::Error;
use crate::path::validate_path;

/// One op of a multi. Build with the constructors; write ops go to
/// [`crate::Client::multi`], read ops to [`crate::Client::multi_read`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    request: Request,
}

impl Op {
    /// Creates a node; its result is `MultiResult::Create(path)`.
    pub fn create(path: &str, data: &[u8], acl: &[Acl], mode: CreateMode) -> Op {
        Op {
            request: Request::Create(CreateRequest {
                path: path.to_owned(),
                data: Some(data.to_vec()),
                acl: acl.to_vec(),
                flags: mode.flags(),
            }),
        }
    }

    /// Creates a node and returns its stat (`MultiResult::Create2`).
    pub fn create2(path: &str, data: &[u8], acl: &[Acl], mode: CreateMode) -> Op {
        let mut op = Op::create(path, data, acl, mode);
        if let Request::Create(record) = op.request {
            op.request = Request::Create2(record);
        }
        op
    }

    /// Creates a TTL node (`mode` one of the `*WithTtl` modes).
    pub fn create_ttl(path: &str, data: &[u8], acl: &[Acl], mode: CreateMode, ttl: Duration) -> Op {
        Op {
            request: Request::CreateTtl(CreateTtlRequest {
                path: path.to_owned(),
                data: Some(data.to_vec()),
                acl: acl.to_vec(),
                flags: mode.flags(),
                ttl: duration_ms(ttl),
            }),
        }
    }

    /// Deletes a node if its version matches (`-1`: any version).
    pub fn delete(path: &str, version: i32) -> Op {
        Op {
            request: Request::Delete(DeleteRequest {
                path: path.to_owned(),
                version,
            }),
        }
    }

    /// Sets a node's data if its version matches (`-1`: any version).
    pub fn set_data(path: &str, data: &[u8], version: i32) -> Op {
        Op {
            request: Request::SetData(SetDataRequest {
                path: path.to_owned(),
                data: Some(data.to_vec()),
                version,
            }),
        }
    }

    /// Fails the multi unless the node's version matches.
    pub fn check(path: &str, version: i32) -> Op {
        Op {
            request: Request::Check(CheckVersionRequest {
                path: path.to_owned(),
                version,
            }),
        }
    }

    /// Reads a node's data (multi_read only).
    pub fn get_data(path: &str) -> Op {
        Op {
            request: Request::GetData(GetDataRequest {
                path: path.to_owned(),
                watch: false,
            }),
        }
    }

    /// Lists a node's children (multi_read only).
    pub fn get_children(path: &str) -> Op {
        Op {
            request: Request::GetChildren(GetChildrenRequest {
                path: path.to_owned(),
                watch: false,
            }),
        }
    }

    /// The path the op names.
    pub fn path(&self) -> &str {
        self.request.path().unwrap_or_default()
    }

    /// Whether this op reads (allowed in `multi_read`) rather than writes.
    pub fn is_read(&self) -> bool {
        matches!(self.request, Request::GetData(_) | Request::GetChildren(_))
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        let sequential = match &self.request {
            Request::Create(r) | Request::Create2(r) => is_sequential(r.flags),
            Request::CreateTtl(r) => is_sequential(r.flags),
            _ => false,
        };
        validate_path(self.path(), sequential)
    }

    pub(crate) fn into_request(self) -> Request {
        self.request
    }
}

fn is_sequential(flags: i32) -> bool {
    CreateMode::from_flags(flags).is_some_and(CreateMode::is_sequential)
}

/// A duration in whole milliseconds, saturating at `i64::MAX`.
pub(crate) fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoa_proto::opcode::OpCode;

    #[test]
    fn ops_build_the_matching_requests() {
        let acl = [Acl::open_unsafe()];
        let create = Op::create("/a", b"x", &acl, CreateMode::EphemeralSequential);
        assert_eq!(create.path(), "/a");
        assert!(!create.is_read());
        match create.clone().into_request() {
            Request::Create(r) => {
                assert_eq!(r.flags, 3);
                assert_eq!(r.data.as_deref(), Some(&b"x"[..]));
            }
            other => panic!("unexpected {other:?}"),
        }
        let opcodes: Vec<OpCode> = [
            Op::create2("/a", b"", &acl, CreateMode::Persistent),
            Op::create_ttl(
                "/t",
                b"",
                &acl,
                CreateMode::PersistentWithTtl,
                Duration::from_secs(2),
            ),
            Op::delete("/a", 3),
            Op::set_data("/a", b"y", -1),
            Op::check("/a", 1),
            Op::get_data("/a"),
            Op::get_children("/a"),
        ]
        .into_iter()
        .map(|op| op.into_request().opcode())
        .collect();
        assert_eq!(
            opcodes,
            [
                OpCode::Create2,
                OpCode::CreateTtl,
                OpCode::Delete,
                OpCode::SetData,
                OpCode::Check,
                OpCode::GetData,
                OpCode::GetChildren
            ]
        );
        assert!(Op::get_data("/a").is_read());
        match Op::create_ttl(
            "/t",
            b"",
            &acl,
            CreateMode::PersistentWithTtl,
            Duration::from_secs(2),
        )
        .into_request()
        {
            Request::CreateTtl(r) => assert_eq!(r.ttl, 2000),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn sequential_creates_may_end_in_a_slash() {
        let acl = [Acl::open_unsafe()];
        assert!(
            Op::create("/q/", b"", &acl, CreateMode::PersistentSequential)
                .validate()
                .is_ok()
        );
        assert!(Op::create("/q/", b"", &acl, CreateMode::Persistent)
            .validate()
            .is_err());
        assert!(Op::delete("q", -1).validate().is_err());
    }
}
