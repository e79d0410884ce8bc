//! The registration document: the data of `/extensions/<name>`.

use serde::Deserialize;

use crate::overlay::{is_reserved, validate_path};
use crate::{
    ExtError, ExtensionKind, ExtensionSpec, Limits, INSTRUCTIONS_CEILING, MEMORY_BYTES_CEILING,
    MEMORY_BYTES_FLOOR,
};

/// Longest extension name, in bytes (ZooKeeper has no per-name limit; this
/// keeps metrics labels and error messages readable).
const NAME_BYTES_MAX: usize = 128;

// Unknown fields are refused so a typo ("limit", "souce") fails loudly at
// registration instead of silently running with defaults.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    kind: String,
    #[serde(default)]
    path: Option<String>,
    source: String,
    #[serde(default)]
    limits: Option<LimitsDocument>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsDocument {
    #[serde(default)]
    instructions: Option<u64>,
    #[serde(default)]
    memory_bytes: Option<usize>,
}

/// Parses the data of `/extensions/<name>`:
/// `{"kind": "node"|"watch"|"session", "path": "/queue", "source": "...lua...",
///   "limits": {"instructions": N, "memory_bytes": N}}`.
/// `limits` and either of its fields may be left out (then `defaults` apply).
/// Only the document is checked here; the source is compiled by
/// [`crate::ExtensionManager::check`].
pub fn parse_registration(
    name: &str,
    json: &[u8],
    defaults: &Limits,
) -> Result<ExtensionSpec, ExtError> {
    let bad = |reason: String| ExtError::BadRegistration {
        name: name.to_string(),
        reason,
    };
    let doc: Document =
        serde_json::from_slice(json).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    let kind = match doc.kind.as_str() {
        "node" => ExtensionKind::Node,
        "watch" => ExtensionKind::Watch,
        "session" => ExtensionKind::Session,
        other => {
            return Err(bad(format!(
                "kind must be \"node\", \"watch\" or \"session\", not {other:?}"
            )))
        }
    };
    let limits = match doc.limits {
        None => *defaults,
        Some(l) => Limits {
            instructions_max: l.instructions.unwrap_or(defaults.instructions_max),
            memory_bytes_max: l.memory_bytes.unwrap_or(defaults.memory_bytes_max),
        },
    };
    let spec = ExtensionSpec {
        name: name.to_string(),
        kind,
        path: doc.path,
        source: doc.source,
        limits,
    };
    validate_spec(&spec)?;
    Ok(spec)
}

/// Checks everything about a spec that does not need Lua: the name, the path
/// for its kind, and the limits.
pub(crate) fn validate_spec(spec: &ExtensionSpec) -> Result<(), ExtError> {
    let bad = |reason: String| ExtError::BadRegistration {
        name: spec.name.clone(),
        reason,
    };
    let name = spec.name.as_str();
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(bad(format!(
            "the name must have 1 to {NAME_BYTES_MAX} bytes"
        )));
    }
    if name.contains('/') || name == "." || name == ".." || name.contains('\0') {
        return Err(bad("the name must be a single path component".into()));
    }
    match (spec.kind, spec.path.as_deref()) {
        (ExtensionKind::Node, None) => {
            return Err(bad("a node extension needs a \"path\"".into()));
        }
        (ExtensionKind::Session, Some(_)) => {
            return Err(bad("a session extension takes no \"path\"".into()));
        }
        (ExtensionKind::Node, Some(path)) => {
            validate_path(path).map_err(|why| bad(format!("path {path:?}: {why}")))?;
            // The root would capture /extensions itself (and with it the
            // only way to unregister); reserved subtrees belong to the server.
            if path == "/" || is_reserved(path) {
                return Err(bad(format!(
                    "path {path} is reserved and cannot be a virtual node"
                )));
            }
        }
        (ExtensionKind::Watch, Some(path)) => {
            validate_path(path).map_err(|why| bad(format!("path {path:?}: {why}")))?;
        }
        (ExtensionKind::Watch | ExtensionKind::Session, None) => {}
    }
    let l = &spec.limits;
    if l.instructions_max == 0 || l.instructions_max > INSTRUCTIONS_CEILING {
        return Err(bad(format!(
            "limits.instructions must be 1 to {INSTRUCTIONS_CEILING}, not {}",
            l.instructions_max
        )));
    }
    if l.memory_bytes_max < MEMORY_BYTES_FLOOR || l.memory_bytes_max > MEMORY_BYTES_CEILING {
        return Err(bad(format!(
            "limits.memory_bytes must be {MEMORY_BYTES_FLOOR} to {MEMORY_BYTES_CEILING}, not {}",
            l.memory_bytes_max
        )));
    }
    Ok(())
}
