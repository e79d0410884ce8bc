mod common;

use common::{Harness, MemTree};
use stoa_ext::{ErrorCode, ExtError, ExtOp};

fn harness(src: &str) -> Harness {
    Harness::node(
        "/x",
        src,
        MemTree::with(&[
            ("/x", ""),
            ("/x/b", ""),
            ("/x/d", ""),
            ("/x/f", ""),
            ("/x/d/deep", ""),
        ]),
    )
}

fn run(src: &str) -> Result<String, ErrorCode> {
    harness(src).get("/x")
}

#[test]
fn a_cursor_pages_through_children_in_byte_order() {
    // Proves children(path, {after, limit}) pages in name order and first_child is the smallest name.
    let src = r#"
      return function(req, zk)
        local pages, after = {}, nil
        repeat
          local page = zk.children("/x", { after = after, limit = 2 })
          pages[#pages + 1] = table.concat(page, ",")
          after = page[#page]
        until #page < 2
        return table.concat(pages, "|") .. " " .. zk.first_child("/x")
          .. " " .. #zk.children("/x", { after = "c" }) .. " " .. #zk.children("/x", { limit = 0 })
      end"#;
    assert_eq!(run(src).unwrap(), "b,d|f b 2 0");
}

#[test]
fn the_cursor_sees_the_calls_own_creates_and_deletes() {
    // Proves pending creates appear and pending deletes vanish from pages and first_child, also when the deleted child was the head.
    let src = r#"
      return function(req, zk)
        zk.delete("/x/b")
        zk.create("/x/a", "")
        zk.create("/x/e", "")
        zk.delete("/x/f")
        local out = { zk.first_child("/x") }
        out[#out + 1] = table.concat(zk.children("/x", { after = "a", limit = 2 }), ",")
        zk.delete("/x/a")
        out[#out + 1] = zk.first_child("/x")
        out[#out + 1] = table.concat(zk.children("/x", { after = "d" }), ",")
        return table.concat(out, " ")
      end"#;
    assert_eq!(run(src).unwrap(), "a d,e d e");
}

#[test]
fn a_recreated_parent_lists_only_its_new_children() {
    // Proves that after deleting a node and creating it again in the same call, the view's old children are not listed under it.
    let src = r#"
      return function(req, zk)
        zk.delete("/x/d/deep")
        zk.delete("/x/d")
        zk.create("/x/d", "")
        local empty = zk.first_child("/x/d") == nil
        zk.create("/x/d/new", "")
        return tostring(empty) .. " " .. zk.first_child("/x/d")
          .. " " .. table.concat(zk.children("/x/d", { limit = 5 }), ",")
      end"#;
    assert_eq!(run(src).unwrap(), "true new new");
}

#[test]
fn cursor_errors_are_zookeepers_or_the_extensions() {
    // Proves a missing node is NoNode (catchable), while unknown options or a negative limit are bugs in the extension.
    let src = r#"
      return function(req, zk)
        local ok, e = pcall(zk.first_child, "/x/none")
        local ok2, e2 = pcall(zk.children, "/x/none", { limit = 1 })
        return e.name .. " " .. e2.name
      end"#;
    assert_eq!(run(src).unwrap(), "NoNode NoNode");
    for (opts, needle) in [
        ("{ limt = 1 }", "unknown option"),
        ("{ limit = -1 }", "limit -1 is negative"),
    ] {
        let src = format!("return function(req, zk) return zk.children('/x', {opts}) end");
        match harness(&src).run(ExtOp::GetData, "/x", "", -1) {
            Err(ExtError::Runtime { message, .. }) => {
                assert!(message.contains(needle), "{message}")
            }
            other => panic!("{opts}: {other:?}"),
        }
    }
}
