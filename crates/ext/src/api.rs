//! The Rust side of the `zk` API. The prelude builds the Lua functions once
//! per state; each call creates a single scoped dispatcher over its overlay,
//! and every `zk.*` function goes through it with its name first. (Building
//! a dozen scoped callbacks and wrapper closures per call cost more than the
//! handlers themselves.)
//!
//! Every function answers in the convention the prelude's `check` expects:
//! `true, results...` or `false, code[, index]`.

use std::cell::{Ref, RefCell, RefMut};

use mlua::{IntoLuaMulti, Lua, LuaString, MultiValue, Table, Value};

use crate::convert::{reply_table, Keys, StatValues};
use crate::multi;
use crate::overlay::{validate_path, CreateOptions, OpError, Overlay};
use crate::sandbox::{is_memory_error, Budget};
use crate::{ErrorCode, ExtReply, ExtensionKind};

/// One call's view of the API: what the dispatcher works on.
pub(crate) struct Api<'a, 'v> {
    pub(crate) overlay: &'a RefCell<Overlay<'v>>,
    pub(crate) budget: &'a Budget,
    pub(crate) keys: &'a Keys,
    pub(crate) kind: ExtensionKind,
}

impl<'v> Api<'_, 'v> {
    /// Runs `zk.<op>(args...)`.
    pub(crate) fn dispatch(
        &self,
        lua: &Lua,
        op: &[u8],
        args: MultiValue,
    ) -> mlua::Result<MultiValue> {
        match op {
            b"create" => self.create(lua, lua.unpack_multi(args)?),
            b"delete" => self.delete(lua, lua.unpack_multi(args)?),
            b"get" => self.get(lua, lua.unpack_multi(args)?),
            b"set" => self.set(lua, lua.unpack_multi(args)?),
            b"exists" => self.exists(lua, lua.unpack_multi(args)?),
            b"children" => self.children(lua, lua.unpack_multi(args)?),
            b"first_child" => self.first_child(lua, lua.unpack_multi(args)?),
            b"multi" => self.multi(lua, lua.unpack_multi(args)?),
            b"default" if self.kind == ExtensionKind::Node => {
                self.default(lua, lua.unpack_multi(args)?)
            }
            other => Err(mlua::Error::RuntimeError(format!(
                "no zk function {:?}",
                String::from_utf8_lossy(other)
            ))),
        }
    }

    /// The overlay, unless a zk function is already running: a Lua
    /// finalizer (`__gc`) may call one while the Rust side of another is
    /// mid-way, which must be an error in the extension, not a panic.
    fn overlay(&self) -> mlua::Result<Ref<'_, Overlay<'v>>> {
        self.overlay.try_borrow().map_err(|_| reentered())
    }

    fn overlay_mut(&self) -> mlua::Result<RefMut<'_, Overlay<'v>>> {
        self.overlay.try_borrow_mut().map_err(|_| reentered())
    }

    fn create(
        &self,
        lua: &Lua,
        (path, data, flags, options): (String, Option<LuaString>, Option<i32>, Option<Table>),
    ) -> mlua::Result<MultiValue> {
        let options = match options {
            None => CreateOptions::default(),
            Some(t) => create_options_from(&t)
                .map_err(|e| mlua::Error::RuntimeError(format!("zk.create: options: {e}")))?,
        };
        let r =
            (self.overlay.borrow_mut()).create(&path, bytes(data), flags.unwrap_or(0), &options);
        let r = match r {
            Ok((p, stat)) => Ok((p, StatValues(stat))),
            Err(e) => Err(e),
        };
        self.result(lua, r)
    }

    fn delete(
        &self,
        lua: &Lua,
        (path, version): (String, Option<i32>),
    ) -> mlua::Result<MultiValue> {
        let r = self
            .overlay
            .borrow_mut()
            .delete(&path, version.unwrap_or(-1));
        self.result(lua, r)
    }

    fn get(&self, lua: &Lua, path: String) -> mlua::Result<MultiValue> {
        let r = self.overlay()?.get_data(&path);
        let r = match r {
            Ok((data, stat)) => Ok((lua.create_string(&data)?, StatValues(stat))),
            Err(e) => Err(e),
        };
        self.result(lua, r)
    }

    fn set(
        &self,
        lua: &Lua,
        (path, data, version): (String, Option<LuaString>, Option<i32>),
    ) -> mlua::Result<MultiValue> {
        let r = self
            .overlay
            .borrow_mut()
            .set_data(&path, bytes(data), version.unwrap_or(-1));
        self.result(lua, r.map(StatValues))
    }

    fn exists(&self, lua: &Lua, path: String) -> mlua::Result<MultiValue> {
        if validate_path(&path).is_err() {
            return self.result::<()>(lua, Err(ErrorCode::BadArguments.into()));
        }
        let stat = self.overlay()?.exists(&path);
        match stat {
            Some(stat) => self.result(lua, Ok(StatValues(stat))),
            None => self.result(lua, Ok(())),
        }
    }

    fn children(
        &self,
        lua: &Lua,
        (path, after, limit): (String, Option<String>, Option<i64>),
    ) -> mlua::Result<MultiValue> {
        let limit = match limit {
            None => usize::MAX,
            Some(n) => usize::try_from(n).map_err(|_| {
                mlua::Error::RuntimeError(format!("zk.children: limit {n} is negative"))
            })?,
        };
        let r = self
            .overlay()?
            .children_after(&path, after.as_deref(), limit);
        let r = match r {
            Ok(names) => Ok(lua.create_sequence_from(names)?),
            Err(e) => Err(e),
        };
        self.result(lua, r)
    }

    fn first_child(&self, lua: &Lua, path: String) -> mlua::Result<MultiValue> {
        let r = self.overlay()?.children_after(&path, None, 1);
        self.result(lua, r.map(|names| names.into_iter().next()))
    }

    fn multi(&self, lua: &Lua, ops: Table) -> mlua::Result<MultiValue> {
        let ops = multi::ops_from_lua(&ops)?;
        let r = self.overlay_mut()?.multi(&ops);
        match r {
            Ok(results) => self.result(lua, Ok(multi::results_to_lua(lua, self.keys, &results)?)),
            // The position tells the extension which operation failed, as
            // ZooKeeper's per-operation results do.
            Err((index, OpError::Code(code))) => {
                (false, code as i32, index + 1).into_lua_multi(lua)
            }
            Err((_, fatal)) => self.result::<()>(lua, Err(fatal)),
        }
    }

    fn default(&self, lua: &Lua, req: Table) -> mlua::Result<MultiValue> {
        let req = DefaultRequest::from_lua(&req)?;
        // The overlay is released before any Lua value is built.
        let r = default_op(&mut *self.overlay_mut()?, req)?;
        let r = match r {
            Ok(reply) => Ok(reply_table(lua, self.keys, reply)?),
            Err(e) => Err(e),
        };
        self.result(lua, r)
    }

    /// An overlay result in the prelude's convention. Fatal errors raise.
    fn result<T: IntoLuaMulti>(
        &self,
        lua: &Lua,
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
                self.budget.memory_hit.set(true);
            }
        }
        out
    }
}

fn reentered() -> mlua::Error {
    mlua::Error::RuntimeError("a zk function was called while another was running".into())
}

fn bytes(s: Option<LuaString>) -> Vec<u8> {
    s.map(|s| s.as_bytes().to_vec()).unwrap_or_default()
}

/// A request table's fields, as `zk.default` reads them.
struct DefaultRequest {
    op: String,
    path: String,
    data: Vec<u8>,
    version: i32,
    flags: i32,
}

impl DefaultRequest {
    fn from_lua(req: &Table) -> mlua::Result<Self> {
        Ok(DefaultRequest {
            op: req.get("op")?,
            path: req.get("path")?,
            data: bytes(req.get::<Option<LuaString>>("data")?),
            version: req.get::<Option<i32>>("version")?.unwrap_or(-1),
            flags: req.get::<Option<i32>>("flags")?.unwrap_or(0),
        })
    }
}

/// The regular ZooKeeper behaviour of a request (`zk.default(req)`) against
/// the overlay: what a handler would reply.
fn default_op(
    overlay: &mut Overlay<'_>,
    req: DefaultRequest,
) -> mlua::Result<Result<ExtReply, OpError>> {
    let path = req.path.as_str();
    let reply = match req.op.as_str() {
        "create" => overlay
            .create(path, req.data, req.flags, &CreateOptions::default())
            .map(|(p, stat)| ExtReply {
                path: Some(p),
                stat: Some(stat),
                ..ExtReply::default()
            }),
        "delete" => overlay
            .delete(path, req.version)
            .map(|()| ExtReply::default()),
        "getData" => overlay.get_data(path).map(|(d, stat)| ExtReply {
            data: Some(d),
            stat: Some(stat),
            ..ExtReply::default()
        }),
        "setData" => overlay
            .set_data(path, req.data, req.version)
            .map(|stat| ExtReply {
                stat: Some(stat),
                ..ExtReply::default()
            }),
        "exists" => overlay
            .exists(path)
            .map(|stat| ExtReply {
                stat: Some(stat),
                ..ExtReply::default()
            })
            .ok_or(OpError::Code(ErrorCode::NoNode)),
        "getChildren" => overlay.children(path).and_then(|names| {
            let stat = overlay
                .exists(path)
                .ok_or(OpError::Code(ErrorCode::NoNode))?;
            Ok(ExtReply {
                stat: Some(stat),
                children: Some(names),
                ..ExtReply::default()
            })
        }),
        other => {
            return Err(mlua::Error::RuntimeError(format!(
                "zk.default: unknown op {other:?}"
            )))
        }
    };
    Ok(reply)
}

/// `zk.create`'s fourth argument: `{ acl = {...}, ttl = ms }`.
fn create_options_from(t: &Table) -> Result<CreateOptions, String> {
    for pair in t.pairs::<Value, Value>() {
        let (key, _) = pair.map_err(|e| e.to_string())?;
        match &key {
            Value::String(k) if ["acl", "ttl"].contains(&&*k.to_string_lossy()) => {}
            other => return Err(format!("unknown field {other:?} (acl, ttl)")),
        }
    }
    let acl = t
        .raw_get::<Option<Table>>("acl")
        .map_err(|e| format!("acl: {e}"))?;
    let ttl = t
        .raw_get::<Option<i64>>("ttl")
        .map_err(|e| format!("ttl: {e}"))?;
    crate::convert::create_options(acl, ttl)
}
