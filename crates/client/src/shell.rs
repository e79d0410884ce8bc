//! `stoa shell`: a zkCli-compatible command line. With a command it runs
//! that one and exits; without, it reads commands from stdin, one a line.
//! Output and error messages follow zkCli 3.9 (see docs/shell.md).

mod extensions;
mod groups;

use std::collections::HashMap;
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use tokio::runtime::Runtime;

use crate::acl::{open_acl_unsafe, parse_acl};
use crate::client::{Client, ClientOptions};
use crate::error::Error;
use crate::format::{format_acl_entry, format_list, format_stat};
use crate::session::SessionState;
use crate::{AddWatchMode, CreateMode, EventType, WatcherType};

/// zkCli's defaults.
const DEFAULT_SERVER: &str = "localhost:2181";
const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Exit status when a command fails.
const EXIT_FAILED: u8 = 1;
/// Exit status for a bad `stoa shell` command line.
const EXIT_USAGE: u8 = 2;

const USAGE: &str = "ZooKeeper -server host:port[,host:port] -timeout ms cmd args
\taddWatch [-m mode] path # optional mode is one of [PERSISTENT, PERSISTENT_RECURSIVE] - default is PERSISTENT_RECURSIVE
\taddauth scheme auth
\tclose 
\tconnect host:port
\tcreate [-s] [-e] [-c] [-t ttl] path [data] [acl]
\tdelete [-v version] path
\tdeleteall path
\tget [-s] [-w] path
\tgetAcl [-s] path
\tgetAllChildrenNumber path
\tgetEphemerals path
\tls [-s] [-w] [-R] path
\tquit 
\tremovewatches path [-c|-d|-a] [-l]
\tset [-s] [-v version] path data
\tsetAcl [-s] [-v version] [-R] path acl
\tstat [-w] path
\tsync path
\twhoami 
\tregisterExtension [-e] [-k node|watch|session] [-i instructions] [-m memoryBytes] name path file.lua
\tlistExtensions 
\tshowExtension name
\tremoveExtension name";

/// Runs `stoa shell` with the arguments after `shell`.
pub fn main(args: &[String]) -> ExitCode {
    let options = match parse_main_args(args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}\n{USAGE}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // One worker keeps the session's pings going while the shell blocks on
    // stdin between commands.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let interactive = options.command.is_empty() && std::io::stdin().is_terminal();
    let mut shell = Shell {
        runtime,
        server: options.server,
        timeout: options.timeout,
        client: None,
        // Event lines go to the terminal or the script's output, never in a
        // one-shot command (the process ends right after it).
        print_events: options.command.is_empty(),
        print_state_events: interactive,
        commands_run: 0,
    };
    if let Err(message) = shell.connect() {
        eprintln!("{message}");
        return ExitCode::from(EXIT_FAILED);
    }
    let status = if options.command.is_empty() {
        shell.run_lines(interactive)
    } else {
        match shell.execute(&options.command) {
            Ok(_) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("{message}");
                ExitCode::from(EXIT_FAILED)
            }
        }
    };
    shell.disconnect();
    status
}

#[derive(Debug, PartialEq, Eq)]
struct MainOptions {
    server: String,
    timeout: Duration,
    command: Vec<String>,
}

/// zkCli's options come first; the first word that is not one starts the
/// command.
fn parse_main_args(args: &[String]) -> Result<MainOptions, String> {
    let mut options = MainOptions {
        server: DEFAULT_SERVER.to_owned(),
        timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
        command: Vec::new(),
    };
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1);
        match (args[i].as_str(), value) {
            ("-server", Some(value)) => options.server = value.clone(),
            ("-timeout", Some(value)) => {
                let ms: u64 = value
                    .parse()
                    .map_err(|_| format!("-timeout expects milliseconds, got {value:?}"))?;
                options.timeout = Duration::from_millis(ms);
            }
            // Accepted for compatibility; a configuration file is not read.
            ("-client-configuration", Some(_)) => {}
            ("-r" | "-waitforconnection", _) => {
                i += 1;
                continue;
            }
            ("-server" | "-timeout" | "-client-configuration", None) => {
                return Err(format!("{} needs a value", args[i]));
            }
            _ => {
                options.command = args[i..].to_vec();
                break;
            }
        }
        i += 2;
    }
    Ok(options)
}

/// Splits a command line into words as zkCli does: `"..."` is one word
/// without its quotes, anything else splits at whitespace.
pub fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut rest = line.trim_start();
    while !rest.is_empty() {
        let quoted = rest
            .strip_prefix('"')
            .and_then(|after| after.find('"').map(|end| (after, end)));
        let (word, next) = match quoted {
            Some((after, end)) => (&after[..end], &after[end + 1..]),
            None => {
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            }
        };
        words.push(word.to_owned());
        rest = next.trim_start();
    }
    words
}

/// A command's words split into flags, flag values and the rest.
#[derive(Debug, Default, PartialEq, Eq)]
struct Args {
    flags: Vec<char>,
    values: HashMap<char, String>,
    positional: Vec<String>,
}

impl Args {
    fn has(&self, flag: char) -> bool {
        self.flags.contains(&flag)
    }

    /// The `i`th positional argument or the usage error.
    fn arg(&self, i: usize, usage: &str) -> Result<&str, String> {
        self.positional
            .get(i)
            .map(String::as_str)
            .ok_or_else(|| usage.to_owned())
    }

    fn version(&self) -> Result<i32, String> {
        match self.values.get(&'v') {
            None => Ok(-1),
            Some(v) => v
                .parse()
                .map_err(|_| format!("version {v:?} is not a number")),
        }
    }
}

/// Parses words with boolean flags (`-s`, or bundled as `-se`) and flags
/// that take a value (`-v 3`). A word like `-1` that is no known flag is a
/// positional argument, so data may start with a dash.
fn parse_args(words: &[String], bool_flags: &str, value_flags: &str) -> Result<Args, String> {
    let mut args = Args::default();
    let mut i = 0;
    while i < words.len() {
        let word = &words[i];
        let letters = word.strip_prefix('-').filter(|l| !l.is_empty());
        match letters {
            Some(l) if l.chars().all(|c| bool_flags.contains(c)) => args.flags.extend(l.chars()),
            Some(l) if l.len() == 1 && value_flags.contains(l) => {
                let value = words
                    .get(i + 1)
                    .ok_or_else(|| format!("option -{l} needs a value"))?;
                let flag = l.chars().next().unwrap_or_default();
                args.values.insert(flag, value.clone());
                i += 1;
            }
            _ => args.positional.push(word.clone()),
        }
        i += 1;
    }
    Ok(args)
}

/// zkCli's message for a failed call (`ZooKeeperMain`'s
/// `CliWrapperException.getMessage`).
pub fn error_message(error: &Error) -> String {
    match error {
        Error::NoNode { path } => format!("Node does not exist: {path}"),
        Error::NoChildrenForEphemerals { path } => {
            format!("Ephemerals cannot have children: {path}")
        }
        Error::NodeExists { path } => format!("Node already exists: {path}"),
        Error::NotEmpty { path } => format!("Node not empty: {path}"),
        Error::NotReadOnly { path } => format!("Not a read-only call: {path}"),
        Error::InvalidAcl { path } => format!("Acl is not valid : {path}"),
        Error::NoAuth { path } => format!("Insufficient permission : {path}"),
        Error::BadArguments { path } => format!("Argument error : {path}"),
        Error::BadVersion { path } => format!("version No is not valid : {path}"),
        other => other.to_string(),
    }
}

/// What the loop does after a command.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Quit,
}

struct Shell {
    runtime: Runtime,
    server: String,
    timeout: Duration,
    client: Option<Client>,
    print_events: bool,
    print_state_events: bool,
    commands_run: u64,
}

impl Shell {
    fn connect(&mut self) -> Result<(), String> {
        let options = ClientOptions {
            session_timeout: self.timeout,
            ..ClientOptions::default()
        };
        let client = self
            .runtime
            .block_on(Client::connect(&self.server, options))
            .map_err(|e| format!("Unable to connect to {}: {e}", self.server))?;
        if self.print_events {
            let mut events = client.events();
            let with_state = self.print_state_events;
            self.runtime.spawn(async move {
                while let Some(event) = events.recv().await {
                    if event.event_type != EventType::None || with_state {
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(out, "\nWATCHER::\n\n{event}");
                        let _ = out.flush();
                    }
                }
            });
        }
        self.client = Some(client);
        Ok(())
    }

    fn disconnect(&mut self) {
        if let Some(client) = self.client.take() {
            // The session ends either way; a failed close only means the
            // server times it out instead.
            let _ = self.runtime.block_on(client.close());
        }
    }

    fn prompt(&self) -> String {
        let state = match self.client.as_ref().map(Client::state) {
            Some(SessionState::Connected) => "CONNECTED",
            Some(SessionState::Connecting) => "CONNECTING",
            Some(SessionState::AuthFailed) => "AUTH_FAILED",
            Some(SessionState::Expired) | Some(SessionState::Closed) | None => "CLOSED",
        };
        format!("[zk: {}({state}) {}] ", self.server, self.commands_run)
    }

    /// Reads commands from stdin until EOF or `quit`. Fails if any
    /// command failed.
    fn run_lines(&mut self, interactive: bool) -> ExitCode {
        let stdin = std::io::stdin();
        let mut lines = stdin.lock().lines();
        let mut failed = false;
        loop {
            if interactive {
                let mut out = std::io::stdout().lock();
                let _ = write!(out, "{}", self.prompt());
                let _ = out.flush();
            }
            let Some(Ok(line)) = lines.next() else { break };
            let words = split_words(&line);
            if words.is_empty() || words[0].starts_with('#') {
                continue;
            }
            self.commands_run += 1;
            match self.execute(&words) {
                Ok(Flow::Continue) => {}
                Ok(Flow::Quit) => break,
                Err(message) => {
                    failed = true;
                    eprintln!("{message}");
                }
            }
        }
        if failed {
            ExitCode::from(EXIT_FAILED)
        } else {
            ExitCode::SUCCESS
        }
    }

    /// Runs one command, printing its output; the error is the message
    /// to print on stderr.
    fn execute(&mut self, words: &[String]) -> Result<Flow, String> {
        let Some((name, rest)) = words.split_first() else {
            return Ok(Flow::Continue);
        };
        match name.as_str() {
            "quit" => return Ok(Flow::Quit),
            "help" => {
                println!("{USAGE}");
                return Ok(Flow::Continue);
            }
            "close" => {
                self.disconnect();
                return Ok(Flow::Continue);
            }
            "connect" => {
                self.disconnect();
                if let Some(server) = rest.first() {
                    self.server = server.clone();
                }
                self.connect()?;
                return Ok(Flow::Continue);
            }
            _ => {}
        }
        let client = match &self.client {
            Some(client) if client.state() != SessionState::Closed => client.clone(),
            _ => return Err("Not connected".to_owned()),
        };
        let output = self.runtime.block_on(run_command(&client, name, rest))?;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(output.as_bytes());
        let _ = out.flush();
        Ok(Flow::Continue)
    }
}

const LS_USAGE: &str = "ls [-s] [-w] [-R] path";
const GET_USAGE: &str = "get [-s] [-w] path";
const SET_USAGE: &str = "set [-s] [-v version] path data";
const CREATE_USAGE: &str = "create [-s] [-e] [-c] [-t ttl] path [data] [acl]";
const DELETE_USAGE: &str = "delete [-v version] path";
const DELETEALL_USAGE: &str = "deleteall path";
const STAT_USAGE: &str = "stat [-w] path";
const GETACL_USAGE: &str = "getAcl [-s] path";
const SETACL_USAGE: &str = "setAcl [-s] [-v version] [-R] path acl";
const ADDAUTH_USAGE: &str = "addauth scheme auth";
const SYNC_USAGE: &str = "sync path";
const CHILDREN_NUMBER_USAGE: &str = "getAllChildrenNumber path";
const ADDWATCH_USAGE: &str = "addWatch [-m mode] path";
const REMOVEWATCHES_USAGE: &str = "removewatches path [-c|-d|-a] [-l]";

/// Runs one ZooKeeper command and returns what it prints.
async fn run_command(client: &Client, name: &str, words: &[String]) -> Result<String, String> {
    let failed = |e: Error| error_message(&e);
    let mut out = String::new();
    match name {
        "ls" => {
            let args = parse_args(words, "swR", "")?;
            let path = args.arg(0, LS_USAGE)?;
            if args.has('R') {
                for node in subtree(client, path).await.map_err(failed)? {
                    out.push_str(&node);
                    out.push('\n');
                }
            } else {
                let (mut children, stat) = client
                    .get_children2(path, args.has('w'))
                    .await
                    .map_err(failed)?;
                children.sort();
                out.push_str(&format_list(&children));
                out.push('\n');
                if args.has('s') {
                    out.push_str(&format_stat(&stat));
                }
            }
        }
        "get" => {
            let args = parse_args(words, "sw", "")?;
            let path = args.arg(0, GET_USAGE)?;
            let (data, stat) = client
                .get_nullable_data(path, args.has('w'))
                .await
                .map_err(failed)?;
            // zkCli prints null data as "null".
            match data {
                Some(data) => out.push_str(&String::from_utf8_lossy(&data)),
                None => out.push_str("null"),
            }
            out.push('\n');
            if args.has('s') {
                out.push_str(&format_stat(&stat));
            }
        }
        "set" => {
            let args = parse_args(words, "s", "v")?;
            let (path, data) = (args.arg(0, SET_USAGE)?, args.arg(1, SET_USAGE)?);
            let stat = client
                .set_data(path, data.as_bytes(), args.version()?)
                .await
                .map_err(failed)?;
            if args.has('s') {
                out.push_str(&format_stat(&stat));
            }
        }
        "create" => out = create(client, words).await?,
        "delete" => {
            let args = parse_args(words, "", "v")?;
            let path = args.arg(0, DELETE_USAGE)?;
            client.delete(path, args.version()?).await.map_err(failed)?;
        }
        "deleteall" | "rmr" => {
            let args = parse_args(words, "", "b")?;
            let path = args.arg(0, DELETEALL_USAGE)?;
            delete_all(client, path).await.map_err(failed)?;
        }
        "stat" => {
            let args = parse_args(words, "w", "")?;
            let path = args.arg(0, STAT_USAGE)?;
            match client.exists(path, args.has('w')).await.map_err(failed)? {
                Some(stat) => out.push_str(&format_stat(&stat)),
                None => {
                    return Err(failed(Error::NoNode {
                        path: path.to_owned(),
                    }))
                }
            }
        }
        "getAcl" => {
            let args = parse_args(words, "s", "")?;
            let path = args.arg(0, GETACL_USAGE)?;
            let (acl, stat) = client.get_acl(path).await.map_err(failed)?;
            for entry in &acl {
                out.push_str(&format_acl_entry(entry));
                out.push('\n');
            }
            if args.has('s') {
                out.push_str(&format_stat(&stat));
            }
        }
        "setAcl" => {
            let args = parse_args(words, "sR", "v")?;
            let (path, acl_text) = (args.arg(0, SETACL_USAGE)?, args.arg(1, SETACL_USAGE)?);
            let acl = parse_acl(acl_text)?;
            if args.has('R') {
                for node in subtree(client, path).await.map_err(failed)? {
                    client.set_acl(&node, &acl, -1).await.map_err(failed)?;
                }
            } else {
                let stat = client
                    .set_acl(path, &acl, args.version()?)
                    .await
                    .map_err(failed)?;
                if args.has('s') {
                    out.push_str(&format_stat(&stat));
                }
            }
        }
        "addauth" => {
            let args = parse_args(words, "", "")?;
            let scheme = args.arg(0, ADDAUTH_USAGE)?;
            let auth = args
                .positional
                .get(1)
                .map(String::as_bytes)
                .unwrap_or_default();
            client.add_auth(scheme, auth).await.map_err(failed)?;
        }
        "sync" => {
            let path = parse_args(words, "", "")?.arg(0, SYNC_USAGE)?.to_owned();
            match client.sync(&path).await {
                Ok(_) => out.push_str("Sync is OK\n"),
                Err(e) => {
                    return Err(format!(
                        "Sync has failed. rc={}",
                        e.code().map_or(0, |c| c.as_i32())
                    ))
                }
            }
        }
        "whoami" => {
            out.push_str("Auth scheme: User\n");
            for info in client.whoami().await.map_err(failed)? {
                out.push_str(&format!("{}: {}\n", info.auth_scheme, info.user));
            }
        }
        "getEphemerals" => {
            let args = parse_args(words, "", "")?;
            let prefix = args.positional.first().map_or("/", String::as_str);
            let ephemerals = client.get_ephemerals(prefix).await.map_err(failed)?;
            out.push_str(&format_list(&ephemerals));
            out.push('\n');
        }
        "getAllChildrenNumber" => {
            let path = parse_args(words, "", "")?
                .arg(0, CHILDREN_NUMBER_USAGE)?
                .to_owned();
            let count = client
                .get_all_children_number(&path)
                .await
                .map_err(failed)?;
            out.push_str(&format!("{count}\n"));
        }
        "addWatch" => {
            let args = parse_args(words, "", "m")?;
            let path = args.arg(0, ADDWATCH_USAGE)?;
            let mode = match args.values.get(&'m').map(String::as_str) {
                None | Some("PERSISTENT_RECURSIVE") => AddWatchMode::PersistentRecursive,
                Some("PERSISTENT") => AddWatchMode::Persistent,
                Some(other) => return Err(format!("Unsupported mode: {other}")),
            };
            client.add_watch(path, mode).await.map_err(failed)?;
        }
        "removewatches" => {
            let args = parse_args(words, "cdal", "")?;
            let path = args.arg(0, REMOVEWATCHES_USAGE)?;
            let kind = if args.has('c') {
                WatcherType::Children
            } else if args.has('d') {
                WatcherType::Data
            } else {
                WatcherType::Any
            };
            client.remove_watches(path, kind).await.map_err(failed)?;
        }
        name if groups::is_command(name) => {
            let args = parse_args(words, "", "")?;
            out.push_str(&groups::run(client, name, &args.positional).await?);
        }
        name if extensions::is_command(name) => {
            let args = parse_args(words, "e", "kim")?;
            let options = extensions::Options {
                ephemeral: args.has('e'),
                kind: args.values.get(&'k').cloned(),
                instructions: args.values.get(&'i').cloned(),
                memory_bytes: args.values.get(&'m').cloned(),
            };
            out.push_str(&extensions::run(client, name, &args.positional, options).await?);
        }
        other => return Err(format!("Unknown command: {other}\n{USAGE}")),
    }
    Ok(out)
}

async fn create(client: &Client, words: &[String]) -> Result<String, String> {
    let args = parse_args(words, "esc", "t")?;
    let path = args.arg(0, CREATE_USAGE)?;
    let data = args
        .positional
        .get(1)
        .map(String::as_bytes)
        .unwrap_or_default();
    let acl = match args.positional.get(2) {
        Some(text) => parse_acl(text)?,
        None => open_acl_unsafe(),
    };
    let (ephemeral, sequential, container) = (args.has('e'), args.has('s'), args.has('c'));
    if container && (ephemeral || sequential) {
        return Err(
            "-c cannot be combined with -s or -e. Containers cannot be ephemeral or sequential."
                .into(),
        );
    }
    let created = if let Some(ttl) = args.values.get(&'t') {
        if ephemeral {
            return Err("TTLs cannot be used with Ephemeral znodes".into());
        }
        if container {
            return Err("TTLs cannot be used with Container znodes".into());
        }
        let ttl_ms: u64 = ttl
            .parse()
            .map_err(|_| format!("ttl {ttl:?} is not a number"))?;
        let mode = if sequential {
            CreateMode::PersistentSequentialWithTtl
        } else {
            CreateMode::PersistentWithTtl
        };
        client
            .create_ttl(path, data, &acl, mode, Duration::from_millis(ttl_ms))
            .await
            .map(|(p, _)| p)
    } else {
        let mode = match (container, ephemeral, sequential) {
            (true, _, _) => CreateMode::Container,
            (false, true, true) => CreateMode::EphemeralSequential,
            (false, true, false) => CreateMode::Ephemeral,
            (false, false, true) => CreateMode::PersistentSequential,
            (false, false, false) => CreateMode::Persistent,
        };
        client.create(path, data, &acl, mode).await
    };
    created
        .map(|p| format!("Created {p}\n"))
        .map_err(|e| error_message(&e))
}

fn child_path(parent: &str, child: &str) -> String {
    if parent == "/" {
        format!("/{child}")
    } else {
        format!("{parent}/{child}")
    }
}

/// `path` and every node below it, parents before children, siblings
/// sorted (zkCli's `ZKUtil.visitSubTreeDFS` order).
async fn subtree(client: &Client, path: &str) -> Result<Vec<String>, Error> {
    let mut nodes = Vec::new();
    let mut stack = vec![path.to_owned()];
    while let Some(node) = stack.pop() {
        let mut children = client.get_children(&node, false).await?;
        children.sort();
        stack.extend(children.iter().rev().map(|child| child_path(&node, child)));
        nodes.push(node);
    }
    Ok(nodes)
}

/// Deletes `path` and everything below it, children first. The root and
/// the `/zookeeper` system tree are kept, as the server refuses them.
async fn delete_all(client: &Client, path: &str) -> Result<(), Error> {
    let nodes = subtree(client, path).await?;
    for node in nodes.iter().rev() {
        if node == "/" || node == "/zookeeper" || node.starts_with("/zookeeper/") {
            continue;
        }
        match client.delete(node, -1).await {
            // Gone already (an ephemeral whose session ended): fine.
            Ok(()) | Err(Error::NoNode { .. }) if node != path => {}
            result => result?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        split_words(line)
    }

    #[test]
    fn words_split_like_zkcli_with_double_quotes() {
        assert_eq!(
            words("  set /a  \"hello world\" "),
            ["set", "/a", "hello world"]
        );
        assert_eq!(words("create /a \"\""), ["create", "/a", ""]);
        assert_eq!(words("get /a\"b"), ["get", "/a\"b"]);
        assert!(words("   ").is_empty());
    }

    #[test]
    fn flags_bundle_take_values_and_leave_dashed_data_alone() {
        let args = parse_args(&words("-es /a -1 -v 3"), "esc", "v").unwrap();
        assert_eq!(args.flags, ['e', 's']);
        assert_eq!(args.values.get(&'v').map(String::as_str), Some("3"));
        assert_eq!(args.positional, ["/a", "-1"]);
        assert_eq!(args.version(), Ok(3));
        assert!(parse_args(&words("/a -v"), "", "v").is_err());
        assert_eq!(parse_args(&words("/a"), "", "v").unwrap().version(), Ok(-1));
    }

    #[test]
    fn main_options_come_before_the_command() {
        let args: Vec<String> = words("-server h:1 -timeout 5000 ls -s /");
        let options = parse_main_args(&args).unwrap();
        assert_eq!(options.server, "h:1");
        assert_eq!(options.timeout, Duration::from_millis(5000));
        assert_eq!(options.command, ["ls", "-s", "/"]);
        assert!(parse_main_args(&words("-timeout x")).is_err());
        assert_eq!(parse_main_args(&[]).unwrap().server, DEFAULT_SERVER);
    }

    #[test]
    fn errors_read_like_zkcli() {
        let message = |e| error_message(&e);
        assert_eq!(
            message(Error::NoNode { path: "/x".into() }),
            "Node does not exist: /x"
        );
        assert_eq!(
            message(Error::NodeExists { path: "/x".into() }),
            "Node already exists: /x"
        );
        assert_eq!(
            message(Error::BadVersion { path: "/x".into() }),
            "version No is not valid : /x"
        );
        assert_eq!(
            message(Error::NoAuth { path: "/x".into() }),
            "Insufficient permission : /x"
        );
        assert_eq!(
            message(Error::NotEmpty { path: "/x".into() }),
            "Node not empty: /x"
        );
        assert_eq!(
            message(Error::SessionExpired { path: "/x".into() }),
            "KeeperErrorCode = Session expired for /x"
        );
        assert_eq!(child_path("/", "a"), "/a");
        assert_eq!(child_path("/a", "b"), "/a/b");
    }
}
