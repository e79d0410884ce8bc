//! ZooKeeper's AdminServer commands as values: their names and aliases,
//! the JSON they answer (field names, types and order as ZooKeeper 3.9.5
//! writes them, docs/operations.md "The AdminServer") and the pretty
//! printing ZooKeeper's Jackson does. The HTTP side lives in
//! `stoa-server`; what a command reads from the engine is in
//! `engine/admin_commands.rs`.

use std::fmt::Write;

/// A JSON value, objects keeping their fields in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Int(i64),
    /// Written with a decimal point, as Java writes a double.
    Float(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    pub fn str(text: impl Into<String>) -> Json {
        Json::Str(text.into())
    }

    pub fn object(fields: Vec<(&str, Json)>) -> Json {
        Json::Object(
            fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        )
    }

    /// As ZooKeeper's AdminServer prints it (Jackson's default pretty
    /// printer): two-space indents, `" : "` between key and value, arrays
    /// on one line, `{ }` and `[ ]` when empty, no newline at the end.
    pub fn pretty(&self) -> String {
        let mut out = String::new();
        self.write_pretty(&mut out, 0);
        out
    }

    fn write_pretty(&self, out: &mut String, depth: usize) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Json::Float(x) => out.push_str(&java_double(*x)),
            Json::Str(s) => write_string(out, s),
            Json::Array(items) => {
                if items.is_empty() {
                    out.push_str("[ ]");
                    return;
                }
                out.push_str("[ ");
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    // Jackson indents an array's objects as if the array
                    // were not there.
                    item.write_pretty(out, depth);
                }
                out.push_str(" ]");
            }
            Json::Object(fields) => {
                if fields.is_empty() {
                    out.push_str("{ }");
                    return;
                }
                out.push('{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    indent(out, depth + 1);
                    write_string(out, key);
                    out.push_str(" : ");
                    value.write_pretty(out, depth + 1);
                }
                out.push('\n');
                indent(out, depth);
                out.push('}');
            }
        }
    }
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

/// Java's `Double.toString` for the values the commands print (latencies
/// in milliseconds): always a decimal point.
fn java_double(x: f64) -> String {
    if !x.is_finite() {
        return "null".into();
    }
    let text = format!("{x}");
    if text.contains('.') {
        text
    } else {
        format!("{text}.0")
    }
}

/// JSON escaping as Jackson does it: quotes, backslashes and control
/// characters escaped; other characters written as they are (UTF-8).
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The commands, by primary name, with their aliases; whether each needs
/// a serving server (ZooKeeper answers the others from a server that is
/// still electing). Sorted by primary name, as the listing shows them.
pub const COMMANDS: &[(&str, &[&str], bool)] = &[
    ("configuration", &["conf", "config"], true),
    ("connection_stat_reset", &["crst"], true),
    ("connections", &["cons"], true),
    ("dirs", &[], true),
    ("dump", &[], true),
    ("environment", &["env", "envi"], false),
    ("get_trace_mask", &["gtmk"], false),
    ("hash", &[], true),
    ("initial_configuration", &["icfg"], true),
    ("is_read_only", &["isro"], true),
    ("last_snapshot", &["lsnp"], true),
    ("leader", &["lead"], true),
    ("monitor", &["mntr"], false),
    ("observer_connection_stat_reset", &["orst"], true),
    ("observers", &["obsr"], true),
    ("restore", &["rest"], true),
    ("ruok", &[], true),
    ("server_stats", &["srvr"], true),
    ("set_trace_mask", &["stmk"], false),
    ("snapshot", &["snap"], true),
    ("stat_reset", &["srst"], true),
    ("stats", &["stat"], true),
    ("system_properties", &["sysp"], false),
    ("voting_view", &[], true),
    ("watch_summary", &["wchs"], true),
    ("watches", &["wchc"], true),
    ("watches_by_path", &["wchp"], true),
    ("zabstate", &[], false),
];

/// The primary name of a command called by any of its names, and whether
/// it needs a serving server.
pub fn resolve(name: &str) -> Option<(&'static str, bool)> {
    COMMANDS
        .iter()
        .find(|(primary, aliases, _)| *primary == name || aliases.contains(&name))
        .map(|(primary, _, needs_server)| (*primary, *needs_server))
}

/// The command listing ZooKeeper serves at `admin.commandURL`: a link per
/// primary name, each followed by a `<br/>` line.
pub fn listing(command_url: &str) -> String {
    let mut out = String::new();
    for (name, _, _) in COMMANDS {
        let _ = writeln!(out, "<a href=\"{command_url}/{name}\">{name}</a>");
        out.push_str("<br/>\n");
    }
    out
}

/// A command's answer: its data fields, then `command` and `error`.
/// ZooKeeper keeps an `error` the command set itself where the command
/// put it, ahead of `command`.
pub fn response(command: &str, mut data: Vec<(String, Json)>, error: Option<&str>) -> Json {
    let error_set = data.iter().any(|(key, _)| key == "error");
    data.push(("command".into(), Json::str(command)));
    if !error_set {
        data.push(("error".into(), error.map_or(Json::Null, Json::str)));
    }
    Json::Object(data)
}

/// What the HTTP side asks of the engine's thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminCall {
    /// A command by any of its names, with its query arguments.
    Command {
        name: String,
        args: Vec<(String, String)>,
    },
    /// Ready: serving clients.
    Ready,
    /// Alive: the engine's thread answers.
    Live,
}

/// Who sent an AdminServer request, for the commands that ask
/// (`snapshot`, `restore`).
#[derive(Debug, Clone, Copy, Default)]
pub struct AdminCaller<'a> {
    /// The `Authorization` header.
    pub authorization: Option<&'a str>,
    /// The connection's address.
    pub peer: Option<std::net::IpAddr>,
    /// The subject of the client certificate an HTTPS request showed.
    pub certificate: Option<&'a str>,
}

/// An HTTP answer from the engine's thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminAnswer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl AdminAnswer {
    pub fn json(status: u16, value: &Json) -> AdminAnswer {
        AdminAnswer {
            status,
            content_type: "application/json",
            body: value.pretty(),
        }
    }

    /// `{"command": .., "error": ..}` alone.
    pub fn error(status: u16, command: &str, error: &str) -> AdminAnswer {
        AdminAnswer::json(status, &response(command, Vec::new(), Some(error)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_as_zookeepers_jackson_does() {
        // The bytes ZooKeeper 3.9.5's `hash` answered, digits changed.
        let value = Json::object(vec![
            (
                "digests",
                Json::Array(vec![
                    Json::object(vec![
                        ("zxid", Json::Int(128)),
                        ("digest_version", Json::Int(2)),
                    ]),
                    Json::object(vec![("zxid", Json::Int(256))]),
                ]),
            ),
            ("empty", Json::Array(vec![])),
            ("none", Json::Object(vec![])),
            ("paths", Json::Array(vec![Json::str("/a"), Json::str("/b")])),
            ("avg", Json::Float(0.0)),
            ("command", Json::str("hash")),
            ("error", Json::Null),
        ]);
        let want = "{\n  \"digests\" : [ {\n    \"zxid\" : 128,\n    \"digest_version\" : 2\n  }, {\n    \"zxid\" : 256\n  } ],\n  \"empty\" : [ ],\n  \"none\" : { },\n  \"paths\" : [ \"/a\", \"/b\" ],\n  \"avg\" : 0.0,\n  \"command\" : \"hash\",\n  \"error\" : null\n}";
        assert_eq!(value.pretty(), want);
    }

    #[test]
    fn strings_escape_quotes_and_controls_and_keep_other_characters() {
        let text = Json::str("a\"b\\c\nd\u{1}é").pretty();
        assert_eq!(text, "\"a\\\"b\\\\c\\nd\\u0001é\"");
        assert_eq!(Json::Float(1.5).pretty(), "1.5");
        assert_eq!(Json::Float(3.0).pretty(), "3.0");
    }

    #[test]
    fn every_name_resolves_to_its_primary_and_the_listing_is_sorted() {
        for (primary, aliases, _) in COMMANDS {
            assert_eq!(resolve(primary).map(|r| r.0), Some(*primary));
            for alias in *aliases {
                assert_eq!(resolve(alias).map(|r| r.0), Some(*primary));
            }
        }
        assert_eq!(resolve("synced_observers"), None);
        let names: Vec<&str> = COMMANDS.iter().map(|c| c.0).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        let listing = listing("/commands");
        assert!(
            listing.starts_with("<a href=\"/commands/configuration\">configuration</a>\n<br/>\n")
        );
        assert_eq!(listing.lines().count(), 2 * COMMANDS.len());
    }

    #[test]
    fn an_error_the_command_set_comes_before_the_command() {
        let set = response("leader", vec![("error".into(), Json::str("no"))], None);
        assert_eq!(
            set.pretty(),
            "{\n  \"error\" : \"no\",\n  \"command\" : \"leader\"\n}"
        );
        let plain = response("ruok", vec![], None);
        assert_eq!(
            plain.pretty(),
            "{\n  \"command\" : \"ruok\",\n  \"error\" : null\n}"
        );
    }
}
