//! Shell commands for server-side extensions. An extension is registered by
//! writing its JSON declaration to `/extensions/<name>` (docs/extensions.md);
//! these commands build, list, show and remove those nodes.

use serde_json::{json, Value};
use stoa_proto::opcode::CreateMode;

use crate::{open_acl_unsafe, Client, Error};

const ROOT: &str = "/extensions";
pub const REGISTER_USAGE: &str =
    "registerExtension [-e] [-k node|watch|session] [-i instructions] [-m memoryBytes] name path file.lua";
const SHOW_USAGE: &str = "showExtension name";
const REMOVE_USAGE: &str = "removeExtension name";

pub struct Options {
    pub ephemeral: bool,
    pub kind: Option<String>,
    pub instructions: Option<String>,
    pub memory_bytes: Option<String>,
}

pub fn is_command(name: &str) -> bool {
    matches!(
        name,
        "registerExtension" | "listExtensions" | "showExtension" | "removeExtension"
    )
}

pub async fn run(
    client: &Client,
    name: &str,
    args: &[String],
    options: Options,
) -> Result<String, String> {
    let failed = |e: Error| super::error_message(&e);
    match name {
        "registerExtension" => {
            let [name, path, file] = args else {
                return Err(REGISTER_USAGE.to_string());
            };
            let source =
                std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))?;
            let document = declaration(&options, path, &source)?;
            if client.exists(ROOT, false).await.map_err(failed)?.is_none() {
                match client
                    .create(ROOT, b"", &open_acl_unsafe(), CreateMode::Persistent)
                    .await
                {
                    Ok(_) | Err(Error::NodeExists { .. }) => {}
                    Err(e) => return Err(failed(e)),
                }
            }
            let mode = if options.ephemeral {
                CreateMode::Ephemeral
            } else {
                CreateMode::Persistent
            };
            let node = format!("{ROOT}/{name}");
            match client.create(&node, document.as_bytes(), &open_acl_unsafe(), mode).await {
                Ok(_) => Ok(format!("Registered extension {name} on {path}\n")),
                // The server compiles the source and refuses a broken one.
                Err(Error::BadArguments { .. }) => Err(format!(
                    "Extension {name} was refused: its declaration or Lua source is invalid (the server log has the compiler's message)"
                )),
                Err(e) => Err(failed(e)),
            }
        }
        "listExtensions" => {
            let mut names = match client.get_children(ROOT, false).await {
                Ok(names) => names,
                Err(Error::NoNode { .. }) => Vec::new(),
                Err(e) => return Err(failed(e)),
            };
            names.sort();
            let mut out = String::new();
            for name in names {
                let (data, _) = client
                    .get_data(&format!("{ROOT}/{name}"), false)
                    .await
                    .map_err(failed)?;
                let doc: Value = serde_json::from_slice(&data).unwrap_or(Value::Null);
                let field = |k: &str| {
                    doc.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_string()
                };
                out.push_str(&format!("{name}\t{}\t{}\n", field("kind"), field("path")));
            }
            Ok(out)
        }
        "showExtension" => {
            let [name] = args else {
                return Err(SHOW_USAGE.to_string());
            };
            let (data, stat) = client
                .get_data(&format!("{ROOT}/{name}"), false)
                .await
                .map_err(failed)?;
            let doc: Value = serde_json::from_slice(&data)
                .map_err(|e| format!("{name}: not a JSON declaration: {e}"))?;
            let mut out = String::new();
            for key in ["kind", "path"] {
                if let Some(v) = doc.get(key).and_then(Value::as_str) {
                    out.push_str(&format!("{key} = {v}\n"));
                }
            }
            if let Some(limits) = doc.get("limits") {
                out.push_str(&format!("limits = {limits}\n"));
            }
            let owner = if stat.ephemeral_owner != 0 {
                format!("{:#x}", stat.ephemeral_owner)
            } else {
                "none".into()
            };
            out.push_str(&format!("ephemeralOwner = {owner}\n"));
            out.push_str("source:\n");
            out.push_str(doc.get("source").and_then(Value::as_str).unwrap_or(""));
            if !out.ends_with('\n') {
                out.push('\n');
            }
            Ok(out)
        }
        "removeExtension" => {
            let [name] = args else {
                return Err(REMOVE_USAGE.to_string());
            };
            client
                .delete(&format!("{ROOT}/{name}"), -1)
                .await
                .map_err(failed)?;
            Ok(String::new())
        }
        _ => Err(format!("unknown extension command {name}")),
    }
}

fn declaration(options: &Options, path: &str, source: &str) -> Result<String, String> {
    let kind = options.kind.as_deref().unwrap_or("node");
    let mut doc = json!({ "kind": kind, "source": source });
    if kind == "node" {
        doc["path"] = json!(path);
    }
    let mut limits = serde_json::Map::new();
    if let Some(n) = &options.instructions {
        let n: u64 = n
            .parse()
            .map_err(|_| format!("-i expects a number of instructions, got {n}"))?;
        limits.insert("instructions".into(), json!(n));
    }
    if let Some(n) = &options.memory_bytes {
        let n: u64 = n
            .parse()
            .map_err(|_| format!("-m expects a number of bytes, got {n}"))?;
        limits.insert("memory_bytes".into(), json!(n));
    }
    if !limits.is_empty() {
        doc["limits"] = Value::Object(limits);
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_carry_kind_path_source_and_limits() {
        let options = Options {
            ephemeral: false,
            kind: None,
            instructions: Some("5000".into()),
            memory_bytes: None,
        };
        let doc: Value =
            serde_json::from_str(&declaration(&options, "/q", "return {}").unwrap()).unwrap();
        assert_eq!(doc["kind"], "node");
        assert_eq!(doc["path"], "/q");
        assert_eq!(doc["source"], "return {}");
        assert_eq!(doc["limits"]["instructions"], 5000);
        let bad = Options {
            instructions: Some("many".into()),
            ..options
        };
        assert!(declaration(&bad, "/q", "").is_err());
    }
}
