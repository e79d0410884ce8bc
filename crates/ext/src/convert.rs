//! Conversions between the crate's values and the Lua tables extensions
//! see: stats and the handler's reply.
//!
//! With a memory limit set, every Lua allocation mlua makes from Rust runs
//! in a protected call, and a key given as a Rust `&str` is such an
//! allocation each time. So the field names are made once per state
//! ([`Keys`]), and the `zk` functions hand stats to the prelude as plain
//! integers ([`StatValues`]), which builds the table in Lua.

use mlua::{IntoLuaMulti, Lua, LuaString, MultiValue, Table, Value};

use crate::overlay::CreateOptions;
use crate::{ErrorCode, ExtReply, Stat};
use stoa_proto::opcode::perms;
use stoa_proto::records::{Acl, Id};

/// `Stat`'s fields, in the order of [`stat_values`] and of the prelude's
/// `stat` function.
const STAT_FIELDS: [&str; 11] = [
    "czxid",
    "mzxid",
    "ctime",
    "mtime",
    "version",
    "cversion",
    "aversion",
    "ephemeral_owner",
    "data_length",
    "num_children",
    "pzxid",
];

/// The field names the Rust side reads and writes, as Lua strings.
pub(crate) struct Keys {
    stat_fields: Vec<LuaString>,
    path: LuaString,
    data: LuaString,
    stat: LuaString,
    children: LuaString,
    error: LuaString,
}

impl Keys {
    pub(crate) fn new(lua: &Lua) -> mlua::Result<Keys> {
        let s = |name: &str| lua.create_string(name);
        Ok(Keys {
            stat_fields: STAT_FIELDS.iter().map(|f| s(f)).collect::<Result<_, _>>()?,
            path: s("path")?,
            data: s("data")?,
            stat: s("stat")?,
            children: s("children")?,
            error: s("error")?,
        })
    }
}

/// A stat's fields in [`STAT_FIELDS`] order.
fn stat_values(s: &Stat) -> [i64; 11] {
    [
        s.czxid,
        s.mzxid,
        s.ctime,
        s.mtime,
        i64::from(s.version),
        i64::from(s.cversion),
        i64::from(s.aversion),
        s.ephemeral_owner,
        i64::from(s.data_length),
        i64::from(s.num_children),
        s.pzxid,
    ]
}

/// A stat passed to Lua as its 11 fields, for the prelude's `stat`.
pub(crate) struct StatValues(pub(crate) Stat);

impl IntoLuaMulti for StatValues {
    fn into_lua_multi(self, _: &Lua) -> mlua::Result<MultiValue> {
        Ok(stat_values(&self.0)
            .into_iter()
            .map(Value::Integer)
            .collect())
    }
}

/// The Lua table of a stat; field names are `Stat`'s.
pub(crate) fn stat_table(lua: &Lua, keys: &Keys, s: &Stat) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(0, STAT_FIELDS.len())?;
    for (key, value) in keys.stat_fields.iter().zip(stat_values(s)) {
        t.raw_set(key, value)?;
    }
    Ok(t)
}

/// A stat from a table; missing fields are 0, and a field out of its
/// type's range is an error.
pub(crate) fn stat_from_table(keys: &Keys, t: &Table) -> mlua::Result<Stat> {
    let f = &keys.stat_fields;
    let long = |i: usize| Ok::<_, mlua::Error>(t.raw_get::<Option<i64>>(&f[i])?.unwrap_or(0));
    let int = |i: usize| Ok::<_, mlua::Error>(t.raw_get::<Option<i32>>(&f[i])?.unwrap_or(0));
    Ok(Stat {
        czxid: long(0)?,
        mzxid: long(1)?,
        ctime: long(2)?,
        mtime: long(3)?,
        version: int(4)?,
        cversion: int(5)?,
        aversion: int(6)?,
        ephemeral_owner: long(7)?,
        data_length: int(8)?,
        num_children: int(9)?,
        pzxid: long(10)?,
    })
}

/// The reply table a handler would return for `reply` (`zk.default`).
pub(crate) fn reply_table(lua: &Lua, keys: &Keys, reply: ExtReply) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(0, 4)?;
    if let Some(path) = reply.path {
        t.raw_set(&keys.path, path)?;
    }
    if let Some(stat) = reply.stat {
        t.raw_set(&keys.stat, stat_table(lua, keys, &stat)?)?;
    }
    if let Some(data) = reply.data {
        t.raw_set(&keys.data, lua.create_string(&data)?)?;
    }
    if let Some(children) = reply.children {
        t.raw_set(&keys.children, lua.create_sequence_from(children)?)?;
    }
    Ok(t)
}

/// The fields of a handler's reply table.
pub(crate) fn reply_from_table(keys: &Keys, t: &Table) -> mlua::Result<ExtReply> {
    Ok(ExtReply {
        data: t
            .raw_get::<Option<LuaString>>(&keys.data)?
            .map(|s| s.as_bytes().to_vec()),
        stat: match t.raw_get::<Option<Table>>(&keys.stat)? {
            Some(st) => Some(stat_from_table(keys, &st)?),
            None => None,
        },
        path: t.raw_get::<Option<String>>(&keys.path)?,
        children: t.raw_get::<Option<Vec<String>>>(&keys.children)?,
    })
}

/// `t.error`, as a code: a name ("NoNode", any case) or a number.
pub(crate) fn error_field(keys: &Keys, t: &Table) -> Result<Option<ErrorCode>, String> {
    let v: Value = t.raw_get(&keys.error).map_err(|e| e.to_string())?;
    let code = match v {
        Value::Nil => return Ok(None),
        Value::Integer(c) => i32::try_from(c).ok().and_then(ErrorCode::from_i32),
        Value::String(s) => {
            let s = s.to_string_lossy();
            ErrorCode::ALL
                .iter()
                .copied()
                .find(|c| format!("{c:?}").eq_ignore_ascii_case(&s))
        }
        _ => None,
    };
    match code {
        Some(ErrorCode::Ok) | None => Err("error must name a ZooKeeper error code".into()),
        Some(code) => Ok(Some(code)),
    }
}

/// A create's options from Lua: an ACL, a list of `{ scheme = "digest",
/// id = "user:hash", perms = "rwcda" | bits }` entries (`perms` as
/// zkCli writes them, or as ZooKeeper's bits), and a TTL node's `ttl` in
/// ms. Malformed (wrong types, unknown fields or permission letters) is a
/// bug in the extension: an error naming what is wrong. Whether the ACL
/// is valid (a known scheme, a well-formed id) is the create's to say.
pub(crate) fn create_options(
    acl: Option<Table>,
    ttl_ms: Option<i64>,
) -> Result<CreateOptions, String> {
    let acl = match acl {
        None => None,
        Some(entries) => {
            let mut out = Vec::new();
            for (i, entry) in entries.sequence_values::<Value>().enumerate() {
                let entry = match entry.map_err(|e| e.to_string())? {
                    Value::Table(t) => t,
                    other => return Err(format!("acl entry {} is a {}", i + 1, other.type_name())),
                };
                out.push(acl_entry(&entry).map_err(|e| format!("acl entry {}: {e}", i + 1))?);
            }
            Some(out)
        }
    };
    Ok(CreateOptions { acl, ttl_ms })
}

fn acl_entry(t: &Table) -> Result<Acl, String> {
    for pair in t.pairs::<Value, Value>() {
        let (key, _) = pair.map_err(|e| e.to_string())?;
        let name = match &key {
            Value::String(k) => k.to_string_lossy(),
            other => return Err(format!("has a {} key", other.type_name())),
        };
        if !["scheme", "id", "perms"].contains(&name.as_str()) {
            return Err(format!("unknown field {name:?} (scheme, id, perms)"));
        }
    }
    let text = |key: &str| -> Result<String, String> {
        t.raw_get::<Option<String>>(key)
            .map_err(|e| format!("{key}: {e}"))?
            .ok_or_else(|| format!("has no {key}"))
    };
    let perms = match t.raw_get::<Value>("perms").map_err(|e| e.to_string())? {
        Value::Integer(bits) if (0..=i64::from(perms::ALL)).contains(&bits) => bits as i32,
        Value::String(letters) => perms_from_letters(&letters.to_string_lossy())?,
        Value::Nil => return Err("has no perms".into()),
        other => return Err(format!("perms is a {}", other.type_name())),
    };
    Ok(Acl {
        perms,
        id: Id {
            scheme: text("scheme")?,
            id: text("id")?,
        },
    })
}

/// zkCli's permission letters: r, w, c, d, a in any order.
fn perms_from_letters(letters: &str) -> Result<i32, String> {
    letters.chars().try_fold(0, |bits, c| {
        Ok(bits
            | match c {
                'r' => perms::READ,
                'w' => perms::WRITE,
                'c' => perms::CREATE,
                'd' => perms::DELETE,
                'a' => perms::ADMIN,
                other => return Err(format!("unknown permission {other:?} (r, w, c, d, a)")),
            })
    })
}
