//! One extension's Lua state: a stripped standard library, an instruction
//! budget per call, a memory cap, and the glue that exposes the call's
//! [`Overlay`] as the `zk` API table.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use mlua::{
    chunk::ChunkMode, Function, HookTriggers, IntoLuaMulti, Lua, LuaOptions, LuaString, MultiValue,
    StdLib, Table, Value, VmState,
};

use crate::overlay::{OpError, Overlay};
use crate::{ErrorCode, ExtError, ExtRequest, ExtensionKind, Limits, Stat};

/// How often (in VM instructions) the budget hook runs: often enough that a
/// call overruns its budget by at most this much, rarely enough that the
/// hook costs well under 1% of run time.
const HOOK_INSTRUCTION_STEP: u32 = 1_000;

/// The message Lua raises when its allocator fails (`LUA_ERRMEM`).
const LUA_MEMORY_ERROR: &str = "not enough memory";

/// Globals the sandbox removes: everything that reaches files, the process,
/// other code (load*, require, bytecode), the GC, or the debug interface;
/// `print`/`warn` write to the server's stdout/stderr; `xpcall` could run a
/// message handler that swallows a limit error. `coroutine` is never loaded
/// (a coroutine's errors are caught by `resume`, which would also swallow
/// limit errors).
const REMOVED_GLOBALS: &[&str] = &[
    "io",
    "os",
    "debug",
    "package",
    "require",
    "load",
    "loadfile",
    "dofile",
    "loadstring",
    "collectgarbage",
    "print",
    "warn",
    "xpcall",
    "coroutine",
];

/// Trusted glue, loaded before the extension's code. It replaces `pcall`
/// with one that cannot swallow limit errors, turns ZooKeeper errors into
/// Lua error objects (`{name=, code=}`) and back, and dispatches to the
/// handler.
const PRELUDE: &str = r#"
local fatal, codes_by_name, names_by_code = ...
local raw_pcall, raw_error, setmetatable, getmetatable = pcall, error, setmetatable, getmetatable
local type, tostring, lower = type, tostring, string.lower

local ZkError = {}
ZkError.__index = ZkError
ZkError.__tostring = function(e)
  return "ZooKeeper error " .. tostring(e.name) .. " (" .. tostring(e.code) .. ")"
end

local function new_error(code)
  return setmetatable({ code = code, name = names_by_code[code] }, ZkError)
end

local function resolve(x)
  if type(x) == "number" and names_by_code[x] then return x end
  if type(x) == "string" and codes_by_name[lower(x)] then return codes_by_name[lower(x)] end
  raw_error("unknown ZooKeeper error: " .. tostring(x), 3)
end

-- A limit error must reach the server even through the extension's pcall.
local function pass(ok, ...)
  if not ok and fatal((...)) then raw_error((...), 0) end
  return ok, ...
end
pcall = function(f, ...) return pass(raw_pcall(f, ...)) end

local function check(ok, ...)
  if ok then return ... end
  raw_error(new_error((...)), 0)
end

local OPS = { "create", "delete", "get", "set", "exists", "children", "default" }

local function make_api(raw, session)
  local zk = {
    session = session,
    PERSISTENT = 0, EPHEMERAL = 1, PERSISTENT_SEQUENTIAL = 2, EPHEMERAL_SEQUENTIAL = 3,
  }
  for _, k in ipairs(OPS) do
    local f = raw[k]
    if f then zk[k] = function(...) return check(f(...)) end end
  end
  if not zk.default then zk.default = function() return nil end end
  zk.fail = function(x) raw_error(new_error(resolve(x)), 0) end
  zk.code = function(x) return resolve(x) end
  return zk
end

local function finish(ok, ...)
  if ok then return true, (...) end
  local e = (...)
  if getmetatable(e) == ZkError and names_by_code[e.code] then return false, e.code end
  raw_error(e, 0)
end

local function invoke(entry, key, arg, zk)
  local h = entry
  if type(entry) == "table" then h = entry[key] end
  if h == nil then h = function(a, z) return z.default(a) end end
  return finish(raw_pcall(h, arg, zk))
end

return invoke, make_api
"#;

/// Per-call accounting shared with the hook and the `fatal` check.
#[derive(Default)]
struct Budget {
    used: Cell<u64>,
    max: Cell<u64>,
    instructions_hit: Cell<bool>,
    memory_hit: Cell<bool>,
}

impl Budget {
    fn reset(&self, max: u64) {
        self.used.set(0);
        self.max.set(max);
        self.instructions_hit.set(false);
        self.memory_hit.set(false);
    }
}

/// What a handler produced: a Lua value, or a ZooKeeper error code it raised
/// or returned.
pub(crate) type Produced = Result<Value, ErrorCode>;

pub(crate) struct Sandbox {
    name: String,
    lua: Lua,
    /// The handler function, or a table of handlers keyed by op/event name.
    entry: Value,
    invoke: Function,
    make_api: Function,
    budget: Rc<Budget>,
    limits: Limits,
}

impl Sandbox {
    /// Builds a fresh state, loads `source` as text and runs its top level
    /// under the limits; it must return a function or a table.
    pub(crate) fn new(name: &str, source: &str, limits: Limits) -> Result<Sandbox, ExtError> {
        let compile = |message: String| ExtError::Compile {
            name: name.to_string(),
            message,
        };
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::UTF8,
            LuaOptions::default(),
        )
        .map_err(|e| compile(format!("cannot create a Lua state: {e}")))?;
        let budget = Rc::new(Budget::default());
        let setup = || -> mlua::Result<(Function, Function)> {
            let globals = lua.globals();
            for g in REMOVED_GLOBALS {
                globals.raw_set(*g, Value::Nil)?;
            }
            // string.dump makes bytecode, which must never exist in the sandbox.
            let string: Table = globals.raw_get("string")?;
            string.raw_set("dump", Value::Nil)?;

            let fatal_budget = budget.clone();
            let fatal = lua.create_function(move |_, e: Value| {
                if let Value::String(s) = &e {
                    if s.as_bytes().as_ref() == LUA_MEMORY_ERROR.as_bytes() {
                        fatal_budget.memory_hit.set(true);
                    }
                }
                Ok(fatal_budget.instructions_hit.get() || fatal_budget.memory_hit.get())
            })?;
            let codes_by_name = lua.create_table()?;
            let names_by_code = lua.create_table()?;
            for code in ErrorCode::ALL {
                if *code == ErrorCode::Ok {
                    continue;
                }
                let name = format!("{code:?}");
                codes_by_name.raw_set(name.to_lowercase(), *code as i32)?;
                names_by_code.raw_set(*code as i32, name)?;
            }
            lua.load(PRELUDE)
                .set_name("=stoa-prelude")
                .set_mode(ChunkMode::Text)
                .call((fatal, codes_by_name, names_by_code))
        };
        let (invoke, make_api) =
            setup().map_err(|e| compile(format!("sandbox setup failed: {e}")))?;

        let step = u32::try_from(limits.instructions_max)
            .unwrap_or(u32::MAX)
            .clamp(1, HOOK_INSTRUCTION_STEP);
        let hook_budget = budget.clone();
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(step),
            move |_, _| {
                let used = hook_budget.used.get().saturating_add(u64::from(step));
                hook_budget.used.set(used);
                if used > hook_budget.max.get() {
                    hook_budget.instructions_hit.set(true);
                    return Err(mlua::Error::RuntimeError(
                        "instruction limit exceeded".into(),
                    ));
                }
                Ok(VmState::Continue)
            },
        )
        .map_err(|e| compile(format!("cannot install the instruction hook: {e}")))?;
        lua.set_memory_limit(limits.memory_bytes_max)
            .map_err(|e| compile(format!("cannot set the memory limit: {e}")))?;

        let mut sandbox = Sandbox {
            name: name.to_string(),
            lua,
            entry: Value::Nil,
            invoke,
            make_api,
            budget,
            limits,
        };
        budget_reset(&sandbox);
        let chunk = sandbox
            .lua
            .load(source)
            .set_name(format!("={name}"))
            .set_mode(ChunkMode::Text)
            .into_function()
            .map_err(|e| compile(root_message(&e)))?;
        let entry: Value = chunk.call(()).map_err(|e| match sandbox.classify(e) {
            ExtError::Runtime { message, .. } => compile(message),
            other => other,
        })?;
        if !matches!(entry, Value::Function(_) | Value::Table(_)) {
            return Err(compile(format!(
                "the chunk must return a handler function or a table of handlers, not a {}",
                entry.type_name()
            )));
        }
        sandbox.entry = entry;
        Ok(sandbox)
    }

    /// Runs the handler for `key` with `arg_of(lua)` and the `zk` API over
    /// `overlay`. Only node extensions get `zk.default`.
    pub(crate) fn run(
        &self,
        kind: ExtensionKind,
        key: &str,
        arg_of: impl FnOnce(&Lua) -> mlua::Result<Table>,
        overlay: &RefCell<Overlay<'_>>,
        session: i64,
    ) -> Result<Produced, ExtError> {
        budget_reset(self);
        let budget = &self.budget;
        let result = self.lua.scope(|scope| {
            let raw = self.lua.create_table()?;
            raw.raw_set(
                "create",
                scope.create_function(
                    |lua, (path, data, flags): (String, Option<LuaString>, Option<i32>)| {
                        let r = overlay
                            .borrow_mut()
                            .create(&path, bytes(data), flags.unwrap_or(0));
                        let r = match r {
                            Ok((p, stat)) => Ok((p, stat_table(lua, &stat)?)),
                            Err(e) => Err(e),
                        };
                        zk_result(lua, budget, r)
                    },
                )?,
            )?;
            raw.raw_set(
                "delete",
                scope.create_function(|lua, (path, version): (String, Option<i32>)| {
                    let r = overlay.borrow_mut().delete(&path, version.unwrap_or(-1));
                    zk_result(lua, budget, r)
                })?,
            )?;
            raw.raw_set(
                "get",
                scope.create_function(|lua, path: String| {
                    let r = overlay.borrow().get_data(&path);
                    let r = match r {
                        Ok((data, stat)) => {
                            Ok((lua.create_string(&data)?, stat_table(lua, &stat)?))
                        }
                        Err(e) => Err(e),
                    };
                    zk_result(lua, budget, r)
                })?,
            )?;
            raw.raw_set(
                "set",
                scope.create_function(
                    |lua, (path, data, version): (String, Option<LuaString>, Option<i32>)| {
                        let r = overlay.borrow_mut().set_data(
                            &path,
                            bytes(data),
                            version.unwrap_or(-1),
                        );
                        let r = match r {
                            Ok(stat) => Ok(stat_table(lua, &stat)?),
                            Err(e) => Err(e),
                        };
                        zk_result(lua, budget, r)
                    },
                )?,
            )?;
            raw.raw_set(
                "exists",
                scope.create_function(|lua, path: String| {
                    if crate::overlay::validate_path(&path).is_err() {
                        return zk_result::<()>(lua, budget, Err(ErrorCode::BadArguments.into()));
                    }
                    let stat = overlay.borrow().exists(&path);
                    let r = match stat {
                        Some(stat) => Value::Table(stat_table(lua, &stat)?),
                        None => Value::Nil,
                    };
                    zk_result(lua, budget, Ok(r))
                })?,
            )?;
            raw.raw_set(
                "children",
                scope.create_function(|lua, path: String| {
                    let r = overlay.borrow().children(&path);
                    let r = match r {
                        Ok(names) => Ok(lua.create_sequence_from(names)?),
                        Err(e) => Err(e),
                    };
                    zk_result(lua, budget, r)
                })?,
            )?;
            if kind == ExtensionKind::Node {
                raw.raw_set(
                    "default",
                    scope.create_function(|lua, req: Table| {
                        let r = default_op(lua, &mut overlay.borrow_mut(), &req)?;
                        zk_result(lua, budget, r)
                    })?,
                )?;
            }
            let api: Table = self.make_api.call((raw, session))?;
            let arg = arg_of(&self.lua)?;
            let (ok, value): (bool, Value) =
                self.invoke.call((self.entry.clone(), key, arg, api))?;
            if ok {
                return Ok(Ok(value));
            }
            let code = match value {
                Value::Integer(c) => i32::try_from(c).ok().and_then(ErrorCode::from_i32),
                _ => None,
            };
            Ok(Err(code.unwrap_or(ErrorCode::SystemError)))
        });
        match result {
            Ok(produced) => Ok(produced),
            Err(e) => {
                let err = self.classify(e);
                if err.is_limit() {
                    // Reclaim the aborted call's garbage now, so the next call
                    // starts with the whole memory budget. A failure here
                    // only means the next call may hit the limit again.
                    let _ = self.lua.gc_collect();
                }
                Err(err)
            }
        }
    }

    /// Maps a Lua failure to an ExtError, trusting the budget flags over the
    /// error's text (the extension cannot forge a flag).
    fn classify(&self, e: mlua::Error) -> ExtError {
        let name = self.name.clone();
        if self.budget.instructions_hit.get() {
            return ExtError::InstructionLimit {
                name,
                limit: self.limits.instructions_max,
            };
        }
        if self.budget.memory_hit.get() || is_memory_error(&e) {
            return ExtError::MemoryLimit {
                name,
                limit: self.limits.memory_bytes_max,
            };
        }
        ExtError::Runtime {
            name,
            message: root_message(&e),
        }
    }
}

fn budget_reset(sandbox: &Sandbox) {
    sandbox.budget.reset(sandbox.limits.instructions_max);
}

fn is_memory_error(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } => is_memory_error(cause),
        mlua::Error::RuntimeError(msg) => msg == LUA_MEMORY_ERROR,
        _ => false,
    }
}

/// The innermost message of a (possibly nested) callback error, without
/// Rust-side tracebacks: what a user needs to fix their script.
fn root_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::CallbackError { cause, .. } => root_message(cause),
        mlua::Error::RuntimeError(msg) | mlua::Error::SyntaxError { message: msg, .. } => {
            msg.clone()
        }
        mlua::Error::MemoryError(msg) => msg.clone(),
        other => other.to_string(),
    }
}

fn bytes(s: Option<LuaString>) -> Vec<u8> {
    s.map(|s| s.as_bytes().to_vec()).unwrap_or_default()
}

/// Turns an overlay result into the raw API convention the prelude expects:
/// `true, results...` or `false, code`. Fatal errors raise.
fn zk_result<T: IntoLuaMulti>(
    lua: &Lua,
    budget: &Budget,
    r: Result<T, OpError>,
) -> mlua::Result<MultiValue> {
    let out = match r {
        Ok(v) => v.into_lua_multi(lua).map(|mut m| {
            m.push_front(Value::Boolean(true));
            m
        }),
        Err(OpError::Code(code)) => (false, code as i32).into_lua_multi(lua),
        Err(OpError::Fatal(msg)) => Err(mlua::Error::RuntimeError(msg)),
    };
    if let Err(e) = &out {
        if is_memory_error(e) {
            budget.memory_hit.set(true);
        }
    }
    out
}

/// The regular ZooKeeper behaviour of a request table (`zk.default(req)`),
/// against the overlay; returns a reply table like a handler would.
fn default_op(
    lua: &Lua,
    overlay: &mut Overlay<'_>,
    req: &Table,
) -> mlua::Result<Result<Table, OpError>> {
    let op: String = req.get("op")?;
    let path: String = req.get("path")?;
    let data = bytes(req.get::<Option<LuaString>>("data")?);
    let version: i32 = req.get::<Option<i32>>("version")?.unwrap_or(-1);
    let reply = lua.create_table()?;
    let r = match op.as_str() {
        "create" => {
            let flags: i32 = req.get::<Option<i32>>("flags")?.unwrap_or(0);
            overlay
                .create(&path, data, flags)
                .map(|(p, stat)| (Some(p), Some(stat), None, None))
        }
        "delete" => overlay
            .delete(&path, version)
            .map(|()| (None, None, None, None)),
        "getData" => overlay
            .get_data(&path)
            .map(|(d, stat)| (None, Some(stat), Some(d), None)),
        "setData" => overlay
            .set_data(&path, data, version)
            .map(|stat| (None, Some(stat), None, None)),
        "exists" => overlay
            .exists(&path)
            .map(|stat| (None, Some(stat), None, None))
            .ok_or(OpError::Code(ErrorCode::NoNode)),
        "getChildren" => overlay.children(&path).and_then(|names| {
            let stat = overlay
                .exists(&path)
                .ok_or(OpError::Code(ErrorCode::NoNode))?;
            Ok((None, Some(stat), None, Some(names)))
        }),
        other => {
            return Err(mlua::Error::RuntimeError(format!(
                "zk.default: unknown op {other:?}"
            )))
        }
    };
    match r {
        Ok((p, stat, d, names)) => {
            if let Some(p) = p {
                reply.raw_set("path", p)?;
            }
            if let Some(stat) = stat {
                reply.raw_set("stat", stat_table(lua, &stat)?)?;
            }
            if let Some(d) = d {
                reply.raw_set("data", lua.create_string(&d)?)?;
            }
            if let Some(names) = names {
                reply.raw_set("children", lua.create_sequence_from(names)?)?;
            }
            Ok(Ok(reply))
        }
        Err(e) => Ok(Err(e)),
    }
}

/// The Lua table of a stat; field names are `Stat`'s.
pub(crate) fn stat_table(lua: &Lua, s: &Stat) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("czxid", s.czxid)?;
    t.raw_set("mzxid", s.mzxid)?;
    t.raw_set("ctime", s.ctime)?;
    t.raw_set("mtime", s.mtime)?;
    t.raw_set("version", s.version)?;
    t.raw_set("cversion", s.cversion)?;
    t.raw_set("aversion", s.aversion)?;
    t.raw_set("ephemeral_owner", s.ephemeral_owner)?;
    t.raw_set("data_length", s.data_length)?;
    t.raw_set("num_children", s.num_children)?;
    t.raw_set("pzxid", s.pzxid)?;
    Ok(t)
}

/// A stat from a table; missing fields are 0.
pub(crate) fn stat_from_table(t: &Table) -> mlua::Result<Stat> {
    Ok(Stat {
        czxid: t.get::<Option<i64>>("czxid")?.unwrap_or(0),
        mzxid: t.get::<Option<i64>>("mzxid")?.unwrap_or(0),
        ctime: t.get::<Option<i64>>("ctime")?.unwrap_or(0),
        mtime: t.get::<Option<i64>>("mtime")?.unwrap_or(0),
        version: t.get::<Option<i32>>("version")?.unwrap_or(0),
        cversion: t.get::<Option<i32>>("cversion")?.unwrap_or(0),
        aversion: t.get::<Option<i32>>("aversion")?.unwrap_or(0),
        ephemeral_owner: t.get::<Option<i64>>("ephemeral_owner")?.unwrap_or(0),
        data_length: t.get::<Option<i32>>("data_length")?.unwrap_or(0),
        num_children: t.get::<Option<i32>>("num_children")?.unwrap_or(0),
        pzxid: t.get::<Option<i64>>("pzxid")?.unwrap_or(0),
    })
}

/// The `req` table of a node call.
pub(crate) fn request_table(lua: &Lua, r: &ExtRequest) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("op", r.op.name())?;
    t.raw_set("path", r.path.as_str())?;
    t.raw_set("data", lua.create_string(&r.data)?)?;
    t.raw_set("version", r.version)?;
    t.raw_set("session", r.session_id)?;
    if let crate::ExtOp::Create { flags } = r.op {
        t.raw_set("flags", flags)?;
        let mode = crate::CreateMode::from_flags(flags);
        t.raw_set("ephemeral", mode.is_some_and(|m| m.is_ephemeral()))?;
        t.raw_set("sequential", mode.is_some_and(|m| m.is_sequential()))?;
    }
    Ok(t)
}
