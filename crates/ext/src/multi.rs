//! `zk.multi`: ZooKeeper's multi inside an extension call. The operations
//! run in order against the call's overlay; if one fails, the ones before it
//! are undone and the caller gets that error (and its position), so the
//! group is all or nothing within the call, as a multi is in ZooKeeper.

use mlua::{Lua, LuaString, Table, Value};

use crate::convert::{stat_table, Keys};
use crate::overlay::{CreateOptions, OpError, Overlay};
use crate::Stat;

/// One operation of a multi, as the extension wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MultiOp {
    Create {
        path: String,
        data: Vec<u8>,
        flags: i32,
        options: CreateOptions,
    },
    Delete {
        path: String,
        version: i32,
    },
    Set {
        path: String,
        data: Vec<u8>,
        version: i32,
    },
    Check {
        path: String,
        version: i32,
    },
}

/// What one successful operation gave back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MultiResult {
    Create { path: String, stat: Stat },
    Delete,
    Set { stat: Stat },
    Check,
}

/// A failed multi: the 0-based position of the first failing operation
/// and why it failed.
pub(crate) type MultiError = (usize, OpError);

impl Overlay<'_> {
    /// Runs `ops` in order; on the first failure undoes the earlier ones.
    pub(crate) fn multi(&mut self, ops: &[MultiOp]) -> Result<Vec<MultiResult>, MultiError> {
        self.begin_atomic();
        let mut results = Vec::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            match self.run_one(op) {
                Ok(result) => results.push(result),
                Err(e) => {
                    self.rollback_atomic();
                    return Err((index, e));
                }
            }
        }
        self.commit_atomic();
        Ok(results)
    }

    fn run_one(&mut self, op: &MultiOp) -> Result<MultiResult, OpError> {
        Ok(match op {
            MultiOp::Create {
                path,
                data,
                flags,
                options,
            } => {
                let (path, stat) = self.create(path, data.clone(), *flags, options)?;
                MultiResult::Create { path, stat }
            }
            MultiOp::Delete { path, version } => {
                self.delete(path, *version)?;
                MultiResult::Delete
            }
            MultiOp::Set {
                path,
                data,
                version,
            } => MultiResult::Set {
                stat: self.set_data(path, data.clone(), *version)?,
            },
            MultiOp::Check { path, version } => {
                self.check(path, *version)?;
                MultiResult::Check
            }
        })
    }
}

/// The fields each kind of operation table may have (beyond `op`); any
/// other field is a typo that would otherwise be silently ignored.
fn allowed_fields(op: &str) -> Option<&'static [&'static str]> {
    Some(match op {
        "create" => &["path", "data", "flags", "acl", "ttl"],
        "delete" | "check" => &["path", "version"],
        "set" => &["path", "data", "version"],
        _ => return None,
    })
}

/// Reads `zk.multi`'s argument: an array of tables such as
/// `{ op = "create", path = "/a", data = "x", flags = zk.PERSISTENT }`.
/// A malformed operation is a bug in the extension, so it raises a Lua
/// error before anything runs.
pub(crate) fn ops_from_lua(ops: &Table) -> mlua::Result<Vec<MultiOp>> {
    let mut out = Vec::new();
    for (i, t) in ops.sequence_values::<Value>().enumerate() {
        let op = match t? {
            Value::Table(t) => op_from_table(&t),
            other => Err(format!("is a {}, not a table", other.type_name())),
        };
        out.push(op.map_err(|e| {
            mlua::Error::RuntimeError(format!("zk.multi: operation {}: {e}", i + 1))
        })?);
    }
    Ok(out)
}

fn op_from_table(t: &Table) -> Result<MultiOp, String> {
    let kind: String = t
        .raw_get::<Option<String>>("op")
        .map_err(|e| e.to_string())?
        .ok_or("has no op")?;
    let allowed = allowed_fields(&kind)
        .ok_or_else(|| format!("unknown op {kind:?} (create, delete, set or check)"))?;
    for pair in t.pairs::<Value, Value>() {
        let (key, _) = pair.map_err(|e| e.to_string())?;
        let name = match &key {
            Value::String(k) => k.to_string_lossy(),
            other => return Err(format!("has a {} key", other.type_name())),
        };
        if name != "op" && !allowed.contains(&name.as_str()) {
            return Err(format!("unknown field {name:?} for op {kind:?}"));
        }
    }
    let field_err = |e: mlua::Error| e.to_string();
    let path: String = t
        .raw_get::<Option<String>>("path")
        .map_err(field_err)?
        .ok_or("has no path")?;
    let data = || -> Result<Vec<u8>, String> {
        Ok(t.raw_get::<Option<LuaString>>("data")
            .map_err(field_err)?
            .map(|s| s.as_bytes().to_vec())
            .unwrap_or_default())
    };
    let int = |key: &str, default: i32| -> Result<i32, String> {
        Ok(t.raw_get::<Option<i32>>(key)
            .map_err(field_err)?
            .unwrap_or(default))
    };
    Ok(match kind.as_str() {
        "create" => MultiOp::Create {
            path,
            data: data()?,
            flags: int("flags", 0)?,
            options: crate::convert::create_options(
                t.raw_get::<Option<Table>>("acl").map_err(field_err)?,
                t.raw_get::<Option<i64>>("ttl").map_err(field_err)?,
            )?,
        },
        "delete" => MultiOp::Delete {
            path,
            version: int("version", -1)?,
        },
        "set" => MultiOp::Set {
            path,
            data: data()?,
            version: int("version", -1)?,
        },
        _ => MultiOp::Check {
            path,
            version: int("version", -1)?,
        },
    })
}

/// The array `zk.multi` returns: one table per operation, with `op` and
/// what that operation gives (`path` and `stat` for a create, `stat` for a
/// set).
pub(crate) fn results_to_lua(
    lua: &Lua,
    keys: &Keys,
    results: &[MultiResult],
) -> mlua::Result<Table> {
    let out = lua.create_table_with_capacity(results.len(), 0)?;
    for result in results {
        let t = lua.create_table()?;
        match result {
            MultiResult::Create { path, stat } => {
                t.raw_set("op", "create")?;
                t.raw_set("path", path.as_str())?;
                t.raw_set("stat", stat_table(lua, keys, stat)?)?;
            }
            MultiResult::Delete => t.raw_set("op", "delete")?,
            MultiResult::Set { stat } => {
                t.raw_set("op", "set")?;
                t.raw_set("stat", stat_table(lua, keys, stat)?)?;
            }
            MultiResult::Check => t.raw_set("op", "check")?,
        }
        out.raw_push(t)?;
    }
    Ok(out)
}
