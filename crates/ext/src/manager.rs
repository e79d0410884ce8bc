//! The registry of extensions and the entry points the engine calls.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Instant;

use mlua::Value;

use crate::convert::{error_field, reply_from_table, Keys};
use crate::overlay::{is_within, parent_of, Overlay};
use crate::registration::validate_spec;
use crate::sandbox::{Produced, Sandbox};
use crate::{
    ErrorCode, EventType, ExtError, ExtOutcome, ExtReply, ExtRequest, ExtensionKind, ExtensionSpec,
    Limits, TreeView, TxnStamp, WriteOp,
};

/// Counters for one extension, since it was registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtMetrics {
    /// Handler runs (node calls, session events, watch events).
    pub calls: u64,
    /// Runs that failed with an [`ExtError`] (runtime error, bad reply,
    /// limit): the caller got an error and nothing was committed.
    pub errors: u64,
    /// Runs that ended in a ZooKeeper error code chosen by the extension.
    pub error_replies: u64,
    /// Wall-clock time spent in handlers, in microseconds.
    pub total_time_us: u64,
    /// Runs stopped by the instruction or memory limit (also in `errors`).
    pub limits_hit: u64,
}

/// What watchers hear of one event, as a watch extension decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The event as it fired.
    AsIs,
    /// Nothing.
    Suppressed,
    /// These events instead (each a type and a path; none is `Suppressed`).
    Instead(Vec<(EventType, String)>),
}

/// What a watch extension decided about one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchOutcome {
    pub delivery: Delivery,
    /// Writes to commit as one multi (empty if the extension failed with an
    /// error code).
    pub writes: Vec<WriteOp>,
}

struct Extension {
    spec: ExtensionSpec,
    sandbox: Sandbox,
    metrics: ExtMetrics,
}

/// The events a watch handler returned: one `{ type = ..., path = ... }`
/// table or a list of them. The types are ZooKeeper's four node events.
fn events_from_table(t: &mlua::Table) -> Result<Vec<(EventType, String)>, String> {
    let one = |t: &mlua::Table| -> Result<(EventType, String), String> {
        let kind: Option<String> = t.raw_get("type").map_err(|e| e.to_string())?;
        let path: Option<String> = t.raw_get("path").map_err(|e| e.to_string())?;
        let (Some(kind), Some(path)) = (kind, path) else {
            return Err("an event is { type = ..., path = ... }".into());
        };
        let kind = [
            EventType::NodeCreated,
            EventType::NodeDeleted,
            EventType::NodeDataChanged,
            EventType::NodeChildrenChanged,
        ]
        .into_iter()
        .find(|k| format!("{k:?}") == kind)
        .ok_or_else(|| {
            format!(
                "event type {kind:?}: one of NodeCreated, NodeDeleted, NodeDataChanged, \
                 NodeChildrenChanged"
            )
        })?;
        if crate::overlay::validate_path(&path).is_err() {
            return Err(format!("event path {path:?} is not a valid znode path"));
        }
        Ok((kind, path))
    };
    let has_type = !matches!(t.raw_get::<Value>("type"), Ok(Value::Nil));
    if has_type {
        return Ok(vec![one(t)?]);
    }
    let mut events = Vec::new();
    for entry in t.clone().pairs::<Value, Value>() {
        let (key, value) = entry.map_err(|e| e.to_string())?;
        let (Value::Integer(index), Value::Table(event)) = (key, value) else {
            return Err("a list of events holds { type = ..., path = ... } tables only".into());
        };
        events.push((index, one(&event)?));
    }
    events.sort_by_key(|(index, _)| *index);
    Ok(events.into_iter().map(|(_, event)| event).collect())
}

/// All registered extensions, each in its own Lua state.
pub struct ExtensionManager {
    defaults: Limits,
    extensions: BTreeMap<String, Extension>,
    /// Virtual node path -> node extension name, for the per-request lookup.
    node_paths: BTreeMap<String, String>,
    /// Creates may make TTL nodes (`zookeeper.extendedTypesEnabled`).
    ttl_enabled: bool,
}

impl ExtensionManager {
    pub fn new(defaults: Limits) -> Self {
        ExtensionManager {
            defaults,
            extensions: BTreeMap::new(),
            node_paths: BTreeMap::new(),
            ttl_enabled: false,
        }
    }

    /// Whether extensions may create TTL nodes: as the server's
    /// `zookeeper.extendedTypesEnabled` (ZooKeeper answers `Unimplemented`
    /// otherwise).
    pub fn set_ttl_enabled(&mut self, enabled: bool) {
        self.ttl_enabled = enabled;
    }

    /// The limits a registration without `limits` gets.
    pub fn defaults(&self) -> &Limits {
        &self.defaults
    }

    /// [`crate::parse_registration`] with this manager's defaults.
    pub fn parse(&self, name: &str, json: &[u8]) -> Result<ExtensionSpec, ExtError> {
        crate::parse_registration(name, json, &self.defaults)
    }

    /// Everything `register` would refuse, without changing anything: the
    /// spec itself, a path overlapping another node extension's (an
    /// extension of the same name is being replaced, so it does not count),
    /// and the source compiling and returning a handler in a fresh sandbox.
    pub fn check(&self, spec: &ExtensionSpec) -> Result<(), ExtError> {
        self.check_static(spec)?;
        Sandbox::new(&spec.name, spec.path.as_deref(), &spec.source, spec.limits).map(|_| ())
    }

    fn check_static(&self, spec: &ExtensionSpec) -> Result<(), ExtError> {
        validate_spec(spec)?;
        if let (ExtensionKind::Node, Some(path)) = (spec.kind, spec.path.as_deref()) {
            for (other_path, other) in &self.node_paths {
                if *other != spec.name
                    && (is_within(path, other_path) || is_within(other_path, path))
                {
                    return Err(ExtError::PathConflict {
                        name: spec.name.clone(),
                        path: path.to_string(),
                        other: other.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Compiles the source in a fresh sandbox; a broken extension is refused
    /// and nothing changes. Registering an existing name replaces it (and
    /// resets its metrics and Lua state).
    pub fn register(&mut self, spec: ExtensionSpec) -> Result<(), ExtError> {
        self.check_static(&spec)?;
        let sandbox = Sandbox::new(&spec.name, spec.path.as_deref(), &spec.source, spec.limits)?;
        self.unregister(&spec.name);
        if let (ExtensionKind::Node, Some(path)) = (spec.kind, spec.path.as_ref()) {
            self.node_paths.insert(path.clone(), spec.name.clone());
        }
        self.extensions.insert(
            spec.name.clone(),
            Extension {
                spec,
                sandbox,
                metrics: ExtMetrics::default(),
            },
        );
        Ok(())
    }

    /// Removes an extension; false if there was none of that name.
    pub fn unregister(&mut self, name: &str) -> bool {
        match self.extensions.remove(name) {
            Some(ext) => {
                if let Some(path) = &ext.spec.path {
                    if ext.spec.kind == ExtensionKind::Node {
                        self.node_paths.remove(path);
                    }
                }
                true
            }
            None => false,
        }
    }

    /// Registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.extensions.keys().cloned().collect()
    }

    /// The spec an extension was registered with.
    pub fn spec(&self, name: &str) -> Option<&ExtensionSpec> {
        self.extensions.get(name).map(|e| &e.spec)
    }

    /// The paths node extensions are registered at.
    pub fn node_extension_paths(&self) -> impl Iterator<Item = &str> {
        self.node_paths.keys().map(String::as_str)
    }

    /// The node extension owning `path` (its virtual node or a node below
    /// it). Walks `path`'s ancestors, so the cost is its depth, not the
    /// number of extensions: this runs on every request.
    pub fn node_extension_for(&self, path: &str) -> Option<String> {
        if self.node_paths.is_empty() {
            return None;
        }
        let mut cur = Some(path);
        while let Some(p) = cur {
            if let Some(name) = self.node_paths.get(p) {
                return Some(name.clone());
            }
            cur = parent_of(p);
        }
        None
    }

    /// Runs a node extension. Runtime errors and exhausted limits become Err
    /// (ExtError); then the engine replies with an error code and commits
    /// nothing. The manager and other extensions stay usable. Stats of the
    /// nodes the call writes carry zxid and time 0; see
    /// [`ExtensionManager::call_stamped`].
    pub fn call(
        &mut self,
        name: &str,
        request: &ExtRequest,
        view: &dyn TreeView,
    ) -> Result<ExtOutcome, ExtError> {
        self.call_stamped(name, request, view, None)
    }

    /// [`ExtensionManager::call`] when the engine knows the zxid and time
    /// the call's writes will commit with (`stamp`): the stats the
    /// extension sees and replies with for the nodes it writes (and the
    /// pzxid of their parents) then carry them, as a client reading after
    /// the commit would see.
    pub fn call_stamped(
        &mut self,
        name: &str,
        request: &ExtRequest,
        view: &dyn TreeView,
        stamp: Option<TxnStamp>,
    ) -> Result<ExtOutcome, ExtError> {
        let ttl_enabled = self.ttl_enabled;
        let ext = self.get_mut(name, ExtensionKind::Node)?;
        let overlay = RefCell::new(
            Overlay::new(view, Some(request.session_id))
                .with_stamp(stamp)
                .with_ttl(ttl_enabled),
        );
        let started = Instant::now();
        let run = ext.sandbox.run(
            ExtensionKind::Node,
            request.op.name(),
            |sandbox| sandbox.request_table(request),
            &overlay,
            request.session_id,
        );
        let result = run.and_then(|produced| {
            node_reply(ext.sandbox.keys(), produced).map_err(|message| ExtError::BadReply {
                name: name.to_string(),
                message,
            })
        });
        let outcome = result.map(|reply| ExtOutcome {
            writes: if reply.is_ok() {
                overlay.into_inner().into_writes()
            } else {
                Vec::new()
            },
            reply,
        });
        record(&mut ext.metrics, started, &outcome, |o| o.reply.is_err());
        outcome
    }

    /// Session extensions: called on session start and end. Each extension
    /// runs against `view` on its own (they do not see each other's writes)
    /// and its writes are committed like a node call's, one multi per
    /// entry, in the returned (name) order. An extension that fails with an
    /// error code gets `Ok` with no writes.
    pub fn session_event(
        &mut self,
        started: bool,
        session_id: i64,
        view: &dyn TreeView,
    ) -> Vec<(String, Result<Vec<WriteOp>, ExtError>)> {
        let key = if started { "start" } else { "end" };
        // An ending session cannot own new ephemeral nodes.
        let owner = started.then_some(session_id);
        let ttl_enabled = self.ttl_enabled;
        let mut out = Vec::new();
        for (name, ext) in &mut self.extensions {
            if ext.spec.kind != ExtensionKind::Session {
                continue;
            }
            let overlay = RefCell::new(Overlay::new(view, owner).with_ttl(ttl_enabled));
            let t = Instant::now();
            let run = ext.sandbox.run(
                ExtensionKind::Session,
                key,
                |sandbox| {
                    let arg = sandbox.create_table()?;
                    arg.raw_set("event", key)?;
                    arg.raw_set("session", session_id)?;
                    Ok(arg)
                },
                &overlay,
                session_id,
            );
            let result = run.and_then(|produced| {
                match produced {
                    Ok(Value::Nil) => Ok(true),
                    Ok(Value::Table(t)) => match error_field(ext.sandbox.keys(), &t) {
                        Ok(None) => Ok(true),
                        Ok(Some(_)) => Ok(false),
                        Err(message) => Err(message),
                    },
                    Ok(other) => Err(format!(
                        "a session handler returns nothing or {{error=...}}, not a {}",
                        other.type_name()
                    )),
                    Err(_) => Ok(false),
                }
                .map_err(|message| ExtError::BadReply {
                    name: name.clone(),
                    message,
                })
            });
            let result = result.map(|commit| {
                if commit {
                    overlay.into_inner().into_writes()
                } else {
                    ext.metrics.error_replies += 1;
                    Vec::new()
                }
            });
            record(&mut ext.metrics, t, &result, |_| false);
            out.push((name.clone(), result));
        }
        out
    }

    /// Watch extensions: called when a watch event of `event_type` fires on
    /// `path`, for every watch extension whose path (if any) contains `path`.
    /// The handler returns nothing or `true` to deliver the event, `false`
    /// to suppress it, `{ type = ..., path = ... }` to deliver that event
    /// instead, or a list of such tables to deliver those; its writes
    /// commit in the transaction that made the event. On an ExtError the
    /// engine should deliver the event as if there were no extension.
    pub fn watch_event(
        &mut self,
        path: &str,
        event_type: EventType,
        view: &dyn TreeView,
    ) -> Vec<(String, Result<WatchOutcome, ExtError>)> {
        let type_name = format!("{event_type:?}");
        let ttl_enabled = self.ttl_enabled;
        let mut out = Vec::new();
        for (name, ext) in &mut self.extensions {
            if ext.spec.kind != ExtensionKind::Watch {
                continue;
            }
            if let Some(root) = &ext.spec.path {
                if !is_within(path, root) {
                    continue;
                }
            }
            let overlay = RefCell::new(Overlay::new(view, None).with_ttl(ttl_enabled));
            let t = Instant::now();
            let run = ext.sandbox.run(
                ExtensionKind::Watch,
                &type_name,
                |sandbox| {
                    let arg = sandbox.create_table()?;
                    arg.raw_set("type", type_name.as_str())?;
                    arg.raw_set("path", path)?;
                    Ok(arg)
                },
                &overlay,
                0,
            );
            let result = run.and_then(|produced| {
                let decided = match produced {
                    Ok(Value::Nil) | Ok(Value::Boolean(true)) => Ok(Some(Delivery::AsIs)),
                    Ok(Value::Boolean(false)) => Ok(Some(Delivery::Suppressed)),
                    Ok(Value::Table(t)) => match error_field(ext.sandbox.keys(), &t) {
                        Ok(None) => events_from_table(&t).map(|events| {
                            Some(if events.is_empty() {
                                Delivery::Suppressed
                            } else {
                                Delivery::Instead(events)
                            })
                        }),
                        Ok(Some(_)) => Ok(None),
                        Err(message) => Err(message),
                    },
                    Ok(other) => Err(format!(
                        "a watch handler returns nil, true, false, an event or a list of events, \
                         not a {}",
                        other.type_name()
                    )),
                    Err(_) => Ok(None),
                };
                decided.map_err(|message| ExtError::BadReply {
                    name: name.clone(),
                    message,
                })
            });
            let result = result.map(|decided| match decided {
                Some(delivery) => WatchOutcome {
                    delivery,
                    writes: overlay.into_inner().into_writes(),
                },
                None => {
                    ext.metrics.error_replies += 1;
                    WatchOutcome {
                        delivery: Delivery::AsIs,
                        writes: Vec::new(),
                    }
                }
            });
            record(&mut ext.metrics, t, &result, |_| false);
            out.push((name.clone(), result));
        }
        out
    }

    /// Per-extension counters, sorted by name.
    pub fn metrics(&self) -> Vec<(String, ExtMetrics)> {
        self.extensions
            .iter()
            .map(|(name, ext)| (name.clone(), ext.metrics))
            .collect()
    }

    fn get_mut(&mut self, name: &str, kind: ExtensionKind) -> Result<&mut Extension, ExtError> {
        let ext = self
            .extensions
            .get_mut(name)
            .ok_or_else(|| ExtError::UnknownExtension(name.to_string()))?;
        if ext.spec.kind != kind {
            return Err(ExtError::WrongKind {
                name: name.to_string(),
                expected: kind,
                found: ext.spec.kind,
            });
        }
        Ok(ext)
    }
}

fn record<T>(
    m: &mut ExtMetrics,
    started: Instant,
    result: &Result<T, ExtError>,
    is_error_reply: impl Fn(&T) -> bool,
) {
    m.calls += 1;
    m.total_time_us = m
        .total_time_us
        .saturating_add(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
    match result {
        Ok(v) => {
            if is_error_reply(v) {
                m.error_replies += 1;
            }
        }
        Err(e) => {
            m.errors += 1;
            if e.is_limit() {
                m.limits_hit += 1;
            }
        }
    }
}

/// Converts a node handler's result to the client's reply.
fn node_reply(keys: &Keys, produced: Produced) -> Result<Result<ExtReply, ErrorCode>, String> {
    let value = match produced {
        Ok(v) => v,
        Err(code) => return Ok(Err(code)),
    };
    match value {
        Value::Nil => Ok(Ok(ExtReply::default())),
        Value::String(s) => Ok(Ok(ExtReply {
            data: Some(s.as_bytes().to_vec()),
            ..ExtReply::default()
        })),
        Value::Table(t) => {
            if let Some(code) = error_field(keys, &t)? {
                return Ok(Err(code));
            }
            reply_from_table(keys, &t)
                .map(Ok)
                .map_err(|e| e.to_string())
        }
        other => Err(format!(
            "a node handler returns nil, a string or a reply table, not a {}",
            other.type_name()
        )),
    }
}
