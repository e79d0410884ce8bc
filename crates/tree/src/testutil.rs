//! A leader in miniature for tests: prepare, commit (errors included),
//! apply, reply.

use stoa_proto::codes::ErrorCode;
use stoa_proto::opcode::perms;
use stoa_proto::records::*;
use stoa_proto::request::Request;
use stoa_proto::response::Response;

use crate::apply::Applied;
use crate::prep::{PrepContext, Preparer};
use crate::response::reply_for;
use crate::tree::DataTree;
use crate::txn::Txn;

pub(crate) struct World {
    pub tree: DataTree,
    pub prep: Preparer,
    pub zxid: i64,
    pub time_ms: i64,
    pub ttl_enabled: bool,
    pub last: Option<Applied<'static>>,
}

impl World {
    pub fn new() -> Self {
        World {
            tree: DataTree::new(),
            prep: Preparer::new(),
            zxid: 0,
            time_ms: 1_000,
            ttl_enabled: true,
            last: None,
        }
    }

    pub fn ctx<'a>(&mut self, session_id: i64, ids: &'a [Id]) -> PrepContext<'a> {
        self.zxid += 1;
        self.time_ms += 10;
        PrepContext {
            session_id,
            cxid: 1,
            zxid: self.zxid,
            time_ms: self.time_ms,
            ids,
            is_super: false,
            ttl_enabled: self.ttl_enabled,
        }
    }

    /// Prepares `req` as the committed txn (error txns included).
    pub fn prepare(&mut self, session: i64, ids: &[Id], req: &Request) -> Txn {
        let ctx = self.ctx(session, ids);
        self.prep.prepare_txn(&self.tree, &ctx, req)
    }

    pub fn commit(&mut self, txn: &Txn) -> Applied<'static> {
        let applied = self.tree.apply(txn).into_owned();
        self.prep.applied(txn.header.zxid);
        self.last = Some(applied.clone());
        applied
    }

    pub fn run_as(
        &mut self,
        session: i64,
        ids: &[Id],
        req: &Request,
    ) -> Result<Response, ErrorCode> {
        let txn = self.prepare(session, ids, req);
        let applied = self.commit(&txn);
        reply_for(req, &applied.result)
    }

    pub fn run(&mut self, req: &Request) -> Result<Response, ErrorCode> {
        self.run_as(1, &[], req)
    }

    pub fn read_as(&self, ids: &[Id], req: &Request) -> Result<Response, ErrorCode> {
        self.tree.execute_read(ids, false, 1, req)
    }

    pub fn stat(&self, path: &str) -> Stat {
        self.tree.node(path).map(|n| n.stat()).unwrap_or_default()
    }
}

pub(crate) fn open() -> Vec<Acl> {
    vec![Acl::open_unsafe()]
}

pub(crate) fn acl(p: i32, scheme: &str, id: &str) -> Vec<Acl> {
    vec![Acl {
        perms: p,
        id: Id {
            scheme: scheme.into(),
            id: id.into(),
        },
    }]
}

pub(crate) fn create_req(path: &str, flags: i32) -> CreateRequest {
    CreateRequest {
        path: path.into(),
        data: Some(b"d".to_vec()),
        acl: open(),
        flags,
    }
}

pub(crate) fn create(path: &str) -> Request {
    Request::Create(create_req(path, 0))
}

pub(crate) fn create_mode(path: &str, flags: i32) -> Request {
    Request::Create(create_req(path, flags))
}

pub(crate) fn create_acl(path: &str, acl: Vec<Acl>) -> Request {
    Request::Create(CreateRequest {
        path: path.into(),
        data: Some(vec![]),
        acl,
        flags: 0,
    })
}

pub(crate) fn delete(path: &str, version: i32) -> Request {
    Request::Delete(DeleteRequest {
        path: path.into(),
        version,
    })
}

pub(crate) fn set_data(path: &str, data: &[u8], version: i32) -> Request {
    Request::SetData(SetDataRequest {
        path: path.into(),
        data: Some(data.to_vec()),
        version,
    })
}

pub(crate) fn set_acl(path: &str, acl: Vec<Acl>, version: i32) -> Request {
    Request::SetAcl(SetAclRequest {
        path: path.into(),
        acl,
        version,
    })
}

pub(crate) fn check(path: &str, version: i32) -> Request {
    Request::Check(CheckVersionRequest {
        path: path.into(),
        version,
    })
}

pub(crate) fn get_data(path: &str) -> Request {
    Request::GetData(GetDataRequest {
        path: path.into(),
        watch: false,
    })
}

pub(crate) fn created_path(r: Result<Response, ErrorCode>) -> String {
    match r {
        Ok(Response::Create(c)) => c.path,
        Ok(Response::Create2(c)) => c.path,
        other => panic!("not a create reply: {other:?}"),
    }
}

pub(crate) const ALL: i32 = perms::ALL;
