mod common;

use common::{node_spec, Harness, MemTree, CREATE};
use stoa_ext::{ExtError, ExtOp, ExtensionManager, Limits};

fn harness(src: &str) -> Harness {
    Harness::node("/x", src, MemTree::with(&[("/x", "")]))
}

#[test]
fn dangerous_globals_are_gone() {
    // Proves io, os, debug, package, require, load*, dofile, collectgarbage, string.dump etc. are absent.
    let src = r#"
      return function(req, zk)
        local found = {}
        for _, g in ipairs({"io", "os", "debug", "package", "require", "load", "loadfile",
                            "dofile", "loadstring", "collectgarbage", "print", "xpcall",
                            "coroutine", "warn"}) do
          if _G[g] ~= nil then found[#found + 1] = g end
        end
        if string.dump ~= nil then found[#found + 1] = "string.dump" end
        if ("").dump ~= nil then found[#found + 1] = "(''):dump" end
        return table.concat(found, ",")
      end"#;
    let mut h = harness(src);
    assert_eq!(h.get("/x").unwrap(), "");
}

#[test]
fn an_infinite_loop_hits_the_instruction_limit_and_the_next_call_works() {
    // Proves a runaway loop becomes InstructionLimit, commits nothing, and the extension runs again afterwards.
    let src = r#"
      return function(req, zk)
        if req.data == "loop" then zk.set("/x", "dirty"); while true do end end
        return "fine"
      end"#;
    let mut h = harness(src);
    let err = h.run(ExtOp::SetData, "/x", "loop", -1).unwrap_err();
    assert!(
        matches!(err, ExtError::InstructionLimit { limit, .. } if limit == Limits::default().instructions_max)
    );
    assert!(err.to_string().contains("instructions"));
    assert_eq!(h.tree.data("/x").as_deref(), Some(""));
    assert_eq!(h.get("/x").unwrap(), "fine");
    let m = &h.mgr.metrics()[0].1;
    assert_eq!((m.calls, m.errors, m.limits_hit), (2, 1, 1));
}

#[test]
fn pcall_cannot_swallow_the_instruction_limit() {
    // Proves a loop of pcall(looping function) still stops at the limit.
    let src = r#"
      return function(req, zk)
        while true do pcall(function() while true do end end) end
      end"#;
    let mut h = harness(src);
    let err = h.run(ExtOp::GetData, "/x", "", -1).unwrap_err();
    assert!(matches!(err, ExtError::InstructionLimit { .. }), "{err:?}");
}

#[test]
fn a_huge_allocation_hits_the_memory_limit_and_the_next_call_works() {
    // Proves string/table growth past memory_bytes_max becomes MemoryLimit, even under pcall, and leaves the state usable.
    let src = r#"
      return function(req, zk)
        if req.data == "rep" then return string.rep("x", 64 * 1024 * 1024) end
        if req.data == "table" then
          local t = {}
          pcall(function() for i = 1, 1e9 do t[i] = i end end)
          return "survived"
        end
        return "fine"
      end"#;
    let mut mgr = ExtensionManager::new(Limits::default());
    let mut spec = node_spec("ext", "/x", src);
    spec.limits = Limits {
        instructions_max: 100_000_000,
        memory_bytes_max: 2 * 1024 * 1024,
    };
    mgr.register(spec).unwrap();
    let mut h = Harness {
        mgr,
        tree: MemTree::with(&[("/x", "")]),
    };
    for kind in ["rep", "table"] {
        let err = h.run(ExtOp::SetData, "/x", kind, -1).unwrap_err();
        assert!(
            matches!(err, ExtError::MemoryLimit { limit, .. } if limit == 2 * 1024 * 1024),
            "{kind}: {err:?}"
        );
        assert_eq!(h.get("/x").unwrap(), "fine");
    }
}

#[test]
fn a_lua_error_is_a_runtime_error_with_its_message() {
    // Proves error("...") and type errors become ExtError::Runtime with Lua's message, committing nothing.
    let src = r#"
      return function(req, zk)
        zk.create("/x/a", "")
        if req.data == "nil" then local t = nil; return t.field end
        error("custom failure")
      end"#;
    let mut h = harness(src);
    match h.run(ExtOp::SetData, "/x", "", -1).unwrap_err() {
        ExtError::Runtime { message, .. } => {
            assert!(message.contains("custom failure"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    match h.run(ExtOp::SetData, "/x", "nil", -1).unwrap_err() {
        ExtError::Runtime { message, .. } => assert!(message.contains("nil value"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert!(!h.tree.nodes.contains_key("/x/a"));
}

#[test]
fn a_bad_reply_is_reported() {
    // Proves returning a non-reply value or an unknown error name is BadReply.
    let src = r#"
      return function(req, zk)
        if req.data == "num" then return 42 end
        return { error = "NoSuchThing" }
      end"#;
    let mut h = harness(src);
    assert!(matches!(
        h.run(ExtOp::SetData, "/x", "num", -1),
        Err(ExtError::BadReply { .. })
    ));
    assert!(matches!(
        h.run(ExtOp::SetData, "/x", "x", -1),
        Err(ExtError::BadReply { .. })
    ));
}

#[test]
fn other_extensions_keep_working_after_one_fails() {
    // Proves a failing extension does not disturb another one.
    let mut h = Harness::new(MemTree::with(&[("/a", "A"), ("/b", "B")]));
    h.mgr
        .register(node_spec(
            "loop",
            "/a",
            "return function() while true do end end",
        ))
        .unwrap();
    h.mgr
        .register(node_spec("plain", "/b", "return {}"))
        .unwrap();
    assert!(h.run(ExtOp::GetData, "/a", "", -1).is_err());
    assert_eq!(h.get("/b").unwrap(), "B");
    assert!(h.run(ExtOp::GetData, "/a", "", -1).is_err());
    assert_eq!(
        h.reply(CREATE, "/b/c", "").unwrap().path.as_deref(),
        Some("/b/c")
    );
}

#[test]
fn globals_persist_between_calls_of_one_extension_only() {
    // Proves each extension has its own Lua state (documented: keep durable state in the tree).
    let src =
        "calls = (calls or 0) + 1; return function() calls = calls + 1; return tostring(calls) end";
    let mut h = Harness::new(MemTree::with(&[("/a", ""), ("/b", "")]));
    h.mgr.register(node_spec("a", "/a", src)).unwrap();
    h.mgr.register(node_spec("b", "/b", src)).unwrap();
    assert_eq!(h.get("/a").unwrap(), "2");
    assert_eq!(h.get("/a").unwrap(), "3");
    assert_eq!(h.get("/b").unwrap(), "2");
}

#[test]
fn odd_error_values_are_runtime_errors() {
    // Proves error({}), error(nil) and an error object whose __tostring loops all end as clean ExtErrors.
    let src = r#"
      return function(req, zk)
        if req.data == "table" then error({}) end
        if req.data == "nil" then error(nil) end
        error(setmetatable({}, { __tostring = function() while true do end end }))
      end"#;
    let mut h = harness(src);
    for data in ["table", "nil", "loop"] {
        let err = h.run(ExtOp::SetData, "/x", data, -1).unwrap_err();
        assert!(
            matches!(
                err,
                ExtError::Runtime { .. } | ExtError::InstructionLimit { .. }
            ),
            "{data}: {err:?}"
        );
    }
}

#[test]
fn the_budget_is_per_call() {
    // Proves a loop that fits the budget runs every time (the counter resets) while a low budget stops a bigger one.
    let src = r#"
      return function(req, zk)
        local n = 0
        for i = 1, tonumber(req.data) do n = n + i end
        return tostring(n)
      end"#;
    let mut mgr = ExtensionManager::new(Limits::default());
    let mut spec = node_spec("ext", "/x", src);
    spec.limits.instructions_max = 50_000;
    mgr.register(spec).unwrap();
    let mut h = Harness {
        mgr,
        tree: MemTree::with(&[("/x", "")]),
    };
    for _ in 0..20 {
        let out = h.run(ExtOp::SetData, "/x", "5000", -1).unwrap();
        assert_eq!(out.reply.unwrap().data.as_deref(), Some(&b"12502500"[..]));
    }
    let err = h.run(ExtOp::SetData, "/x", "100000", -1).unwrap_err();
    assert!(matches!(
        err,
        ExtError::InstructionLimit { limit: 50_000, .. }
    ));
}
