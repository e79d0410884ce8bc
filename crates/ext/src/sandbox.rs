//! One extension's Lua state: a stripped standard library, an instruction
//! budget per call, a memory cap, and the glue that exposes the call's
//! [`Overlay`] as the `zk` API table.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use mlua::{
    chunk::ChunkMode, Function, HookTriggers, Lua, LuaOptions, LuaString, MultiValue, StdLib,
    Table, Value, VmState,
};

use crate::api::Api;
use crate::convert::Keys;
use crate::overlay::Overlay;
use crate::{CreateMode, ErrorCode, ExtError, ExtOp, ExtRequest, ExtensionKind, Limits};

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
const PRELUDE: &str = r##"
local fatal, codes_by_name, names_by_code = ...
local raw_pcall, raw_error, setmetatable, getmetatable = pcall, error, setmetatable, getmetatable
local type, tostring, lower, next, ipairs, select = type, tostring, string.lower, next, ipairs, select

local ZkError = {}
ZkError.__index = ZkError
ZkError.__tostring = function(e)
  return "ZooKeeper error " .. tostring(e.name) .. " (" .. tostring(e.code) .. ")"
end

-- `index`: the failing operation's position, for zk.multi.
local function new_error(code, index)
  return setmetatable({ code = code, name = names_by_code[code], index = index }, ZkError)
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
  raw_error(new_error(...), 0)
end

-- The running call's dispatcher, a Rust function that lives only as long
-- as the call: every zk.* function goes through it, so the functions below
-- are built once per state instead of once per call.
local dispatch

local function api_function(name)
  return function(...) return check(dispatch(name, ...)) end
end

-- Stats come from Rust as 11 integers (convert.rs, STAT_FIELDS order):
-- building the table here is far cheaper than field by field from Rust.
local function stat(czxid, mzxid, ctime, mtime, version, cversion, aversion, ephemeral_owner,
                    data_length, num_children, pzxid)
  return { czxid = czxid, mzxid = mzxid, ctime = ctime, mtime = mtime, version = version,
           cversion = cversion, aversion = aversion, ephemeral_owner = ephemeral_owner,
           data_length = data_length, num_children = num_children, pzxid = pzxid }
end
local function first_and_stat(first, ...) return first, stat(...) end
local function stat_if_any(...)
  if select("#", ...) > 0 then return stat(...) end
  return nil
end

local BASE = {
  PERSISTENT = 0, EPHEMERAL = 1, PERSISTENT_SEQUENTIAL = 2, EPHEMERAL_SEQUENTIAL = 3,
  CONTAINER = 4, PERSISTENT_WITH_TTL = 5, PERSISTENT_SEQUENTIAL_WITH_TTL = 6,
  fail = function(x) raw_error(new_error(resolve(x)), 0) end,
  code = function(x) return resolve(x) end,
}
for _, k in ipairs({ "delete", "first_child", "multi" }) do
  BASE[k] = api_function(k)
end
-- Options are checked here, so a typo fails loudly and Rust gets plain values.
BASE.children = function(path, opts)
  local after, limit
  if opts ~= nil then
    if type(opts) ~= "table" then raw_error("zk.children: options must be a table", 2) end
    for k in next, opts do
      if k ~= "after" and k ~= "limit" then
        raw_error("zk.children: unknown option " .. tostring(k) .. " (after, limit)", 2)
      end
    end
    after, limit = opts.after, opts.limit
  end
  return check(dispatch("children", path, after, limit))
end
BASE.create = function(...) return first_and_stat(check(dispatch("create", ...))) end
BASE.get = function(...) return first_and_stat(check(dispatch("get", ...))) end
BASE.set = function(...) return stat(check(dispatch("set", ...))) end
BASE.exists = function(...) return stat_if_any(check(dispatch("exists", ...))) end
-- Node calls get zk.default; session and watch events a no-op in its place.
local NODE_API, EVENT_API = { default = api_function("default") }, { default = function() end }
for k, v in next, BASE do NODE_API[k], EVENT_API[k] = v, v end
-- Each call's `zk` is a fresh table that inherits the functions, so a
-- handler that changes its `zk` does not change the next call's; the
-- shared tables cannot be reached (`__metatable`), and a one-field table
-- per call is much cheaper than a copy.
local NODE_MT = { __index = NODE_API, __metatable = false }
local EVENT_MT = { __index = EVENT_API, __metatable = false }

local function new_api(mt, session)
  return setmetatable({ session = session }, mt)
end

local function pass_through(req, zk) return zk.default(req) end

local function finish(ok, ...)
  dispatch = nil
  if ok then return true, (...) end
  local e = (...)
  if getmetatable(e) == ZkError and names_by_code[e.code] then return false, e.code end
  raw_error(e, 0)
end

local function invoke(entry, key, arg, call_dispatch, session, node)
  dispatch = call_dispatch
  local h = entry
  if type(entry) == "table" then h = entry[key] end
  if h == nil then h = pass_through end
  return finish(raw_pcall(h, arg, new_api(node and NODE_MT or EVENT_MT, session)))
end

-- A node call's `req`, built here from its fields (cheaper than field by
-- field from Rust).
local function request(op, path, data, version, session, flags, ephemeral, sequential)
  return { op = op, path = path, data = data, version = version, session = session,
           flags = flags, ephemeral = ephemeral, sequential = sequential }
end

return invoke, request
"##;

/// Per-call accounting shared with the hook and the `fatal` check.
#[derive(Default)]
pub(crate) struct Budget {
    used: Cell<u64>,
    max: Cell<u64>,
    instructions_hit: Cell<bool>,
    pub(crate) memory_hit: Cell<bool>,
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
    /// Builds a node call's `req` from its fields.
    request: Function,
    keys: Keys,
    budget: Rc<Budget>,
    limits: Limits,
}

impl Sandbox {
    /// Builds a fresh state, loads `source` as text and runs its top level
    /// under the limits; it must return a function or a table. The global
    /// `EXTENSION` tells the source its name and the path it was
    /// registered at (nil for none), so one source serves any path, and
    /// the same source at two paths two independent instances.
    pub(crate) fn new(
        name: &str,
        path: Option<&str>,
        source: &str,
        limits: Limits,
    ) -> Result<Sandbox, ExtError> {
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
            let extension = lua.create_table()?;
            extension.raw_set("name", name)?;
            extension.raw_set("path", path)?;
            globals.raw_set("EXTENSION", extension)?;

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
        let (invoke, request) =
            setup().map_err(|e| compile(format!("sandbox setup failed: {e}")))?;
        let keys = Keys::new(&lua).map_err(|e| compile(format!("sandbox setup failed: {e}")))?;

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
            request,
            keys,
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
        arg_of: impl FnOnce(&Sandbox) -> mlua::Result<Table>,
        overlay: &RefCell<Overlay<'_>>,
        session: i64,
    ) -> Result<Produced, ExtError> {
        budget_reset(self);
        let budget = &self.budget;
        let result = self.lua.scope(|scope| {
            let api = Api {
                overlay,
                budget,
                keys: &self.keys,
                kind,
            };
            let dispatch =
                scope.create_function(move |lua, (op, args): (LuaString, MultiValue)| {
                    api.dispatch(lua, &op.as_bytes(), args)
                })?;
            let arg = arg_of(self)?;
            let node = kind == ExtensionKind::Node;
            let (ok, value): (bool, Value) =
                self.invoke
                    .call((&self.entry, key, arg, dispatch, session, node))?;
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

    /// The `req` table of a node call.
    pub(crate) fn request_table(&self, r: &ExtRequest) -> mlua::Result<Table> {
        let (flags, ephemeral, sequential) = match r.op {
            ExtOp::Create { flags } => {
                let mode = CreateMode::from_flags(flags);
                (
                    Some(flags),
                    Some(mode.is_some_and(|m| m.is_ephemeral())),
                    Some(mode.is_some_and(|m| m.is_sequential())),
                )
            }
            _ => (None, None, None),
        };
        let data = self.lua.create_string(&r.data)?;
        self.request.call((
            r.op.name(),
            r.path.as_str(),
            data,
            r.version,
            r.session_id,
            flags,
            ephemeral,
            sequential,
        ))
    }

    /// A fresh table, for an event's argument.
    pub(crate) fn create_table(&self) -> mlua::Result<Table> {
        self.lua.create_table()
    }

    /// The field names of this state, for reading a handler's reply.
    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
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

pub(crate) fn is_memory_error(e: &mlua::Error) -> bool {
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
