mod common;

use common::{Harness, MemTree};
use stoa_ext::{ErrorCode, ExtError, ExtOp, NodeKind, WriteOp};
use stoa_proto::records::Acl;

fn harness(src: &str) -> Harness {
    Harness::node(
        "/x",
        src,
        MemTree::with(&[("/x", "root"), ("/x/old", "o"), ("/x/v", "v")]),
    )
}

fn reply_text(h: &mut Harness) -> String {
    h.get("/x").unwrap()
}

#[test]
fn multi_runs_every_operation_in_order_and_returns_their_results() {
    // Proves create/set/check/delete run in order, later ops see earlier ones, and each result carries op, path and stat as ZooKeeper's would.
    let src = r#"
      return function(req, zk)
        local r = zk.multi({
          { op = "create", path = "/x/a", data = "1" },
          { op = "create", path = "/x/a/s-", data = "2", flags = zk.PERSISTENT_SEQUENTIAL },
          { op = "set", path = "/x/a", data = "11", version = 0 },
          { op = "check", path = "/x/a", version = 1 },
          { op = "delete", path = "/x/old", version = 0 },
        })
        assert(#r == 5)
        assert(r[1].op == "create" and r[1].path == "/x/a" and r[1].stat.data_length == 1)
        assert(r[2].path == "/x/a/s-0000000000", r[2].path)
        assert(r[3].op == "set" and r[3].stat.version == 1 and r[3].stat.num_children == 1)
        assert(r[4].op == "check" and r[5].op == "delete")
        assert(zk.get("/x/a") == "11" and zk.exists("/x/old") == nil)
        return "ok"
      end"#;
    let mut h = harness(src);
    let out = h.run(ExtOp::GetData, "/x", "", -1).unwrap();
    assert_eq!(out.reply.unwrap().data.as_deref(), Some(&b"ok"[..]));
    assert_eq!(
        out.writes.len(),
        4,
        "check writes nothing: {:?}",
        out.writes
    );
    assert_eq!(h.tree.data("/x/a").as_deref(), Some("11"));
    assert_eq!(h.tree.data("/x/a/s-0000000000").as_deref(), Some("2"));
    assert!(!h.tree.nodes.contains_key("/x/old"));
}

#[test]
fn a_failed_multi_changes_nothing_and_raises_the_first_error_with_its_position() {
    // Proves a caught multi error leaves the overlay as before the multi (nodes, children, counts, sequence numbers) while earlier writes of the call stay.
    let src = r#"
      return function(req, zk)
        zk.create("/x/before", "")
        local _, root0 = zk.get("/x")
        local ok, e = pcall(zk.multi, {
          { op = "create", path = "/x/b", data = "" },
          { op = "create", path = "/x/q-", data = "", flags = zk.PERSISTENT_SEQUENTIAL },
          { op = "set", path = "/x/v", data = "changed" },
          { op = "delete", path = "/x/old" },
          { op = "check", path = "/x/v", version = 0 },
          { op = "create", path = "/x/old", data = "" },
        })
        assert(not ok)
        local _, root1 = zk.get("/x")
        assert(zk.exists("/x/b") == nil and zk.exists("/x/old") ~= nil)
        assert(zk.get("/x/v") == "v")
        assert(root1.num_children == root0.num_children and root1.cversion == root0.cversion)
        local kids = table.concat(zk.children("/x"), ",")
        local seq = zk.create("/x/q-", "", zk.PERSISTENT_SEQUENTIAL)
        return string.format("%s %d %d %s %s", e.name, e.code, e.index, kids, seq)
      end"#;
    let mut h = harness(src);
    let out = h.run(ExtOp::GetData, "/x", "", -1).unwrap();
    let text = String::from_utf8(out.reply.unwrap().data.unwrap()).unwrap();
    // The set made /x/v version 1, so the check (op 5) fails; the create of
    // /x/old (op 6) would have succeeded after op 4's delete.
    assert_eq!(text, "BadVersion -103 5 before,old,v /x/q-0000000003");
    assert_eq!(
        out.writes,
        vec![
            WriteOp::Create {
                path: "/x/before".into(),
                data: vec![],
                kind: NodeKind::Persistent,
                acl: vec![Acl::open_unsafe()]
            },
            WriteOp::Create {
                path: "/x/q-0000000003".into(),
                data: vec![],
                kind: NodeKind::Persistent,
                acl: vec![Acl::open_unsafe()]
            },
        ]
    );
}

#[test]
fn an_uncaught_multi_error_is_the_reply_and_discards_the_call() {
    // Proves a multi error that is not caught reaches the client as the first failing op's code, with nothing committed.
    let src = r#"
      return function(req, zk)
        zk.create("/x/a", "")
        zk.multi({
          { op = "create", path = "/x/b", data = "" },
          { op = "delete", path = "/x/missing" },
        })
      end"#;
    let mut h = harness(src);
    let out = h.run(ExtOp::GetData, "/x", "", -1).unwrap();
    assert_eq!(out.reply, Err(ErrorCode::NoNode));
    assert!(out.writes.is_empty());
    assert!(!h.tree.nodes.contains_key("/x/a"));
}

#[test]
fn multi_checks_each_operation_against_the_earlier_ones() {
    // Proves ZooKeeper's rules apply within the multi: deleting a node given a child earlier in it is NotEmpty, reserved paths are NoAuth, an empty multi is fine.
    let src = r#"
      local function fails(zk, ops)
        local ok, e = pcall(zk.multi, ops)
        return ok and "ok" or (e.name .. "@" .. e.index)
      end
      return function(req, zk)
        local r = {}
        r[#r + 1] = fails(zk, {
          { op = "create", path = "/x/p", data = "" },
          { op = "create", path = "/x/p/c", data = "" },
          { op = "delete", path = "/x/p" },
        })
        r[#r + 1] = fails(zk, { { op = "check", path = "/x/v" }, { op = "delete", path = "/extensions" } })
        r[#r + 1] = fails(zk, { { op = "check", path = "/x/none" } })
        r[#r + 1] = fails(zk, { { op = "create", path = "bad", data = "" } })
        r[#r + 1] = #zk.multi({}) == 0 and "empty" or "?"
        return table.concat(r, " ")
      end"#;
    let mut h = harness(src);
    assert_eq!(
        reply_text(&mut h),
        "NotEmpty@3 NoAuth@2 NoNode@1 BadArguments@1 empty"
    );
}

#[test]
fn malformed_multi_operations_are_errors_in_the_extension() {
    // Proves an unknown op, a misspelt field, a missing path or a non-table entry stop the call with a message naming the operation, before anything runs.
    for (ops, needle) in [
        (
            r#"{ { op = "rename", path = "/x/a" } }"#,
            "operation 1: unknown op",
        ),
        (
            r#"{ { op = "check", path = "/x/v" }, { op = "set", path = "/x/v", verison = 1 } }"#,
            "operation 2: unknown field \"verison\"",
        ),
        (r#"{ { op = "delete" } }"#, "operation 1: has no path"),
        (r#"{ "create" }"#, "operation 1: is a string, not a table"),
    ] {
        let src = format!("return function(req, zk) zk.create('/x/side', '') zk.multi({ops}) end");
        let mut h = harness(&src);
        match h.run(ExtOp::GetData, "/x", "", -1) {
            Err(ExtError::Runtime { message, .. }) => {
                assert!(message.contains(needle), "{message} lacks {needle}")
            }
            other => panic!("{ops}: {other:?}"),
        }
        assert!(!h.tree.nodes.contains_key("/x/side"));
    }
}
