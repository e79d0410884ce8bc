//! Reads as ZooKeeper's `FinalRequestProcessor` serves them, ACL checks
//! included.

use stoa_proto::codes::ErrorCode;
use stoa_proto::opcode::perms;
use stoa_proto::records::*;
use stoa_proto::request::Request;
use stoa_proto::response::{MultiResult, Response};

use crate::acl::{self, Caller};
use crate::node::NodeRef;
use crate::path;
use crate::tree::DataTree;

impl DataTree {
    /// Serves a read request. `session_id` is the caller's session (for
    /// getEphemerals). A multiRead never fails as a whole: each op's error
    /// is its result.
    pub fn execute_read(
        &self,
        ids: &[Id],
        is_super: bool,
        session_id: i64,
        req: &Request,
    ) -> Result<Response, ErrorCode> {
        let caller = Caller { ids, is_super };
        match req {
            Request::Exists(r) => {
                // Unlike the other reads, exists rejects a NUL explicitly.
                if r.path.contains('\0') {
                    return Err(ErrorCode::BadArguments);
                }
                let n = self.node(&r.path).ok_or(ErrorCode::NoNode)?;
                acl::check(n.acl(), perms::READ, caller)?;
                Ok(Response::Stat(n.stat()))
            }
            Request::GetData(r) => {
                let n = self.readable(&r.path, caller)?;
                Ok(Response::GetData(GetDataResponse {
                    data: n.nullable_data().map(<[u8]>::to_vec),
                    stat: n.stat(),
                }))
            }
            Request::GetChildren(r) => {
                let n = self.readable(&r.path, caller)?;
                Ok(Response::GetChildren(GetChildrenResponse {
                    children: child_names(n),
                }))
            }
            Request::GetChildren2(r) => {
                let n = self.readable(&r.path, caller)?;
                let children = child_names(n);
                Ok(Response::GetChildren2(GetChildren2Response {
                    children,
                    stat: n.stat(),
                }))
            }
            Request::GetAcl(r) => self.get_acl(&r.path, caller),
            Request::GetAllChildrenNumber(r) => {
                self.readable(&r.path, caller)?;
                let total_number = self.all_children_number(&r.path) as i32;
                Ok(Response::GetAllChildrenNumber(
                    GetAllChildrenNumberResponse { total_number },
                ))
            }
            Request::GetEphemerals(r) => {
                let prefix = r.prefix_path.as_str();
                let all = prefix.trim().is_empty() || prefix.trim() == path::ROOT;
                let ephemerals = self
                    .ephemerals(session_id)
                    .filter(|p| all || p.starts_with(prefix))
                    .map(str::to_owned)
                    .collect();
                Ok(Response::GetEphemerals(GetEphemeralsResponse {
                    ephemerals,
                }))
            }
            Request::MultiRead(ops) => {
                let mut results = Vec::with_capacity(ops.len());
                for op in ops {
                    let result = match op {
                        Request::GetChildren(r) => self
                            .readable(&r.path, caller)
                            .map(|n| MultiResult::GetChildren(child_names(n))),
                        Request::GetData(r) => self.readable(&r.path, caller).map(|n| {
                            MultiResult::GetData(n.nullable_data().map(<[u8]>::to_vec), n.stat())
                        }),
                        // ZooKeeper fails the whole request on other kinds.
                        _ => return Err(ErrorCode::MarshallingError),
                    };
                    results.push(result.unwrap_or_else(MultiResult::Error));
                }
                Ok(Response::Multi(results))
            }
            _ => Err(ErrorCode::Unimplemented),
        }
    }

    /// The node, if it exists and the caller may READ it.
    fn readable(&self, p: &str, caller: Caller<'_>) -> Result<NodeRef<'_>, ErrorCode> {
        let n = self.node(p).ok_or(ErrorCode::NoNode)?;
        acl::check(n.acl(), perms::READ, caller)?;
        Ok(n)
    }

    /// getACL needs READ or ADMIN; without ADMIN digest hashes are masked.
    fn get_acl(&self, p: &str, caller: Caller<'_>) -> Result<Response, ErrorCode> {
        let n = self.node(p).ok_or(ErrorCode::NoNode)?;
        acl::check(n.acl(), perms::READ | perms::ADMIN, caller)?;
        let stat = n.stat();
        let mut list = n.acl().to_vec();
        if acl::check(n.acl(), perms::ADMIN, caller).is_err() {
            for a in list.iter_mut().filter(|a| a.id.scheme == "digest") {
                // Java's replaceAll(":.*", ":x"); `.` stops at line ends.
                if let Some(colon) = a.id.id.find(':') {
                    let rest = &a.id.id[colon..];
                    let end = rest.find(['\n', '\r']).map_or(rest.len(), |i| i);
                    a.id.id = format!("{}:x{}", &a.id.id[..colon], &rest[end..]);
                }
            }
        }
        Ok(Response::GetAcl(GetAclResponse { acl: list, stat }))
    }

    /// `DataTree.getAllChildrenNumber`: every descendant. For `/` ZooKeeper
    /// counts all nodes but the root; for its alias `""` it counts all.
    pub fn all_children_number(&self, p: &str) -> usize {
        match p {
            path::ROOT => self.node_count() - 1,
            "" => self.node_count(),
            _ => {
                let mut count = 0usize;
                let mut stack = vec![p.to_owned()];
                while let Some(cur) = stack.pop() {
                    if let Some(n) = self.node(&cur) {
                        count += n.child_count();
                        stack.extend(n.children().map(|c| path::join(&cur, &c)));
                    }
                }
                count
            }
        }
    }
}

fn child_names(n: NodeRef<'_>) -> Vec<String> {
    n.children().map(String::from).collect()
}
