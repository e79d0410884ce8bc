//! `stoa shell` against a real `stoa` server: each command's output and
//! exit code as zkCli gives them, and a script read from stdin.

mod support;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use support::{free_port, spawn_server, start_on_free_port, test_data_dir, wait_until_serving};

/// How long one shell invocation may take.
const SHELL_LIMIT: Duration = Duration::from_secs(30);

/// A `stoa server` child process on a free port with its own data
/// directory, killed by PID and cleaned up on drop.
struct Server {
    child: Child,
    port: u16,
    data_dir: PathBuf,
}

impl Server {
    fn start() -> Server {
        start_on_free_port(|port| {
            let data_dir = test_data_dir("shell", port);
            let mut server = Server {
                child: spawn_server(port, &data_dir, &["extendedTypesEnabled=true"]),
                port,
                data_dir,
            };
            wait_until_serving(&mut server.child, port).map(|()| server)
        })
    }

    /// Runs `stoa shell -server 127.0.0.1:PORT <command>`.
    fn shell(&self, command: &str) -> Output {
        let mut args = vec!["shell".to_string(), "-server".into(), self.address()];
        args.extend(command.split(' ').map(str::to_owned));
        run_shell(&args, None)
    }

    /// Runs the shell with `script` on stdin.
    fn script(&self, script: &str) -> Output {
        run_shell(
            &["shell".into(), "-server".into(), self.address()],
            Some(script),
        )
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// Runs the binary with a time limit; a hung shell is killed and fails the
/// test.
fn run_shell(args: &[String], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stoa"))
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    drop(input);
    let pid = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let output = child.wait_with_output().unwrap();
        let _ = done_tx.send(());
        output
    });
    if done_rx.recv_timeout(SHELL_LIMIT).is_err() {
        // Kill by PID; the waiter then returns.
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("shell {args:?} did not finish within {SHELL_LIMIT:?}");
    }
    waiter.join().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts success and returns stdout.
#[track_caller]
fn ok(output: Output) -> String {
    assert!(output.status.success(), "failed: {output:?}");
    stdout(&output)
}

/// Asserts failure with `message` on stderr.
#[track_caller]
fn fails(output: Output, message: &str) {
    assert!(!output.status.success(), "succeeded: {output:?}");
    assert!(
        stderr(&output).contains(message),
        "stderr {:?} lacks {message:?}",
        stderr(&output)
    );
}

/// Checks a zkCli stat block and returns its fields.
#[track_caller]
fn stat_fields(text: &str) -> Vec<(String, String)> {
    let fields: Vec<(String, String)> = text
        .lines()
        .filter_map(|line| line.split_once(" = "))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let names: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "cZxid",
            "ctime",
            "mZxid",
            "mtime",
            "pZxid",
            "cversion",
            "dataVersion",
            "aclVersion",
            "ephemeralOwner",
            "dataLength",
            "numChildren"
        ],
        "{text}"
    );
    assert!(fields[0].1.starts_with("0x"));
    assert!(fields[1].1.contains(" UTC "), "{}", fields[1].1);
    fields
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    &fields.iter().find(|(k, _)| k == name).unwrap().1
}

#[test]
fn node_commands_print_like_zkcli() {
    let server = Server::start();
    assert_eq!(ok(server.shell("create /a hello")), "Created /a\n");
    fails(server.shell("create /a again"), "Node already exists: /a");
    assert_eq!(
        ok(server.shell("create -s /a/s- x")),
        "Created /a/s-0000000000\n"
    );
    assert_eq!(ok(server.shell("create -c /c")), "Created /c\n");
    assert_eq!(ok(server.shell("create -t 60000 /t")), "Created /t\n");
    fails(
        server.shell("create -c -e /bad"),
        "-c cannot be combined with -s or -e",
    );
    fails(server.shell("create /x/y"), "Node does not exist: /x/y");
    fails(
        server.shell("create bad"),
        "Path must start with / character",
    );

    assert_eq!(ok(server.shell("get /a")), "hello\n");
    let out = ok(server.shell("get -s /a"));
    let (data, stat) = out.split_once('\n').unwrap();
    assert_eq!(data, "hello");
    let fields = stat_fields(stat);
    assert_eq!(field(&fields, "dataLength"), "5");
    assert_eq!(field(&fields, "numChildren"), "1");
    fails(server.shell("get /nope"), "Node does not exist: /nope");

    assert_eq!(ok(server.shell("set /a world")), "");
    let fields = stat_fields(&ok(server.shell("set -s -v 1 /a again")));
    assert_eq!(field(&fields, "dataVersion"), "2");
    fails(
        server.shell("set -v 0 /a x"),
        "version No is not valid : /a",
    );
    let fields = stat_fields(&ok(server.shell("stat /a")));
    assert_eq!(field(&fields, "dataVersion"), "2");
    fails(server.shell("stat /nope"), "Node does not exist: /nope");

    assert_eq!(ok(server.shell("ls /")), "[a, c, t, zookeeper]\n");
    let out = ok(server.shell("ls -s /a"));
    assert!(out.starts_with("[s-0000000000]\ncZxid = 0x"), "{out}");
    stat_fields(&out);
    assert_eq!(ok(server.shell("ls -R /a")), "/a\n/a/s-0000000000\n");
    fails(server.shell("ls /nope"), "Node does not exist: /nope");
    assert_eq!(ok(server.shell("getAllChildrenNumber /a")), "1\n");

    fails(server.shell("delete /a"), "Node not empty: /a");
    fails(
        server.shell("delete -v 3 /a/s-0000000000"),
        "version No is not valid : /a/s-0000000000",
    );
    assert_eq!(ok(server.shell("delete -v 0 /a/s-0000000000")), "");
    fails(
        server.shell("delete /a/s-0000000000"),
        "Node does not exist: /a/s-0000000000",
    );
    ok(server.shell("create /a/b"));
    ok(server.shell("create /a/b/c"));
    assert_eq!(ok(server.shell("deleteall /a")), "");
    assert_eq!(ok(server.shell("ls /")), "[c, t, zookeeper]\n");
    fails(server.shell("deleteall /a"), "Node does not exist: /a");
}

#[test]
fn acl_auth_and_session_commands_print_like_zkcli() {
    let server = Server::start();
    ok(server.shell("create /p data"));
    assert_eq!(ok(server.shell("getAcl /p")), "'world,'anyone\n: cdrwa\n");
    let out = ok(server.shell("getAcl -s /p"));
    assert!(out.starts_with("'world,'anyone\n: cdrwa\ncZxid"), "{out}");
    assert_eq!(ok(server.shell("setAcl /p world:anyone:r")), "");
    assert_eq!(ok(server.shell("getAcl /p")), "'world,'anyone\n: r\n");
    fails(server.shell("set /p x"), "Insufficient permission : /p");
    fails(
        server.shell("setAcl /p world:anyone:cdrwa"),
        "Insufficient permission : /p",
    );
    fails(
        server.shell("setAcl /p world:anyone"),
        "does not have the form scheme:id:perm",
    );

    ok(server.shell("create /q"));
    ok(server.shell("create /q/r"));
    let fields = stat_fields(&ok(server.shell("setAcl -s -v 0 /q world:anyone:cdra")));
    assert_eq!(field(&fields, "aclVersion"), "1");
    fails(
        server.shell("setAcl -v 0 /q world:anyone:cdra"),
        "version No is not valid : /q",
    );
    assert_eq!(ok(server.shell("setAcl -R /q world:anyone:rwa")), "");
    assert_eq!(ok(server.shell("getAcl /q/r")), "'world,'anyone\n: rwa\n");

    assert_eq!(ok(server.shell("sync /")), "Sync is OK\n");
    assert_eq!(
        ok(server.shell("whoami")),
        "Auth scheme: User\nip: 127.0.0.1\n"
    );
    assert_eq!(ok(server.shell("getEphemerals")), "[]\n");
    assert!(ok(server.shell("help")).contains("setAcl [-s] [-v version] [-R] path acl"));
    fails(server.shell("frobnicate /"), "Unknown command: frobnicate");
    fails(server.shell("get"), "get [-s] [-w] path");
}

#[test]
fn a_script_on_stdin_runs_in_one_session() {
    let server = Server::start();
    let script = "\
create /s one
# a comment, then a blank line

create -e /s/eph
getEphemerals /s
addauth digest alice:secret
whoami
create /s/private secret auth::cdrwa
get /s/private
get -w /s
set /s \"two words\"
get /s
get /missing
close
get /s
";
    let output = server.script(script);
    assert!(
        !output.status.success(),
        "a failed command fails the script"
    );
    let out = stdout(&output);
    let err = stderr(&output);
    assert!(
        out.contains("Created /s\nCreated /s/eph\n[/s/eph]\n"),
        "{out}"
    );
    assert!(
        out.contains("Auth scheme: User\nip: 127.0.0.1\ndigest: alice\n"),
        "{out}"
    );
    assert!(out.contains("Created /s/private\nsecret\none\n"), "{out}");
    assert!(out.contains("two words\n"), "{out}");
    assert!(
        out.contains("WatchedEvent state:SyncConnected type:NodeDataChanged path:/s zxid: "),
        "{out}"
    );
    assert!(err.contains("Node does not exist: /missing"), "{err}");
    assert!(err.contains("Not connected"), "{err}");

    // The ephemeral went with the closed session; another session is not
    // alice and cannot read her node.
    assert_eq!(ok(server.shell("ls /s")), "[private]\n");
    fails(
        server.shell("get /s/private"),
        "Insufficient permission : /s/private",
    );
    let output = server.script("addauth digest alice:secret\nget /s/private\nquit\nget /nope\n");
    assert_eq!(ok(output), "secret\n");
}

#[test]
fn an_unreachable_server_fails_with_a_message() {
    let port = free_port();
    let args: Vec<String> = ["shell", "-server", &format!("127.0.0.1:{port}"), "ls", "/"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    fails(run_shell(&args, None), "Unable to connect to 127.0.0.1:");
    let bad: Vec<String> = vec!["shell".into(), "-timeout".into()];
    fails(run_shell(&bad, None), "-timeout needs a value");
}

#[test]
fn extension_commands_register_list_show_and_remove() {
    // Registering the shipped priority queue through the shell makes it serve
    // /queue/next; a broken source is refused with a message.
    let server = Server::start();
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/extensions");
    let queue = format!("{examples}/priority_queue.lua");
    let out = ok(server.shell(&format!("registerExtension -i 200000 pq /queue {queue}")));
    assert!(out.contains("Registered extension pq on /queue"), "{out}");
    ok(server.shell("create -s /queue/node-2- b"));
    ok(server.shell("create -s /queue/node-1- a"));
    assert_eq!(ok(server.shell("get /queue/next")), "a\n");
    assert_eq!(ok(server.shell("listExtensions")), "pq\tnode\t/queue\n");
    let shown = ok(server.shell("showExtension pq"));
    assert!(
        shown.contains("kind = node") && shown.contains("\"instructions\":200000"),
        "{shown}"
    );
    assert!(shown.contains("local QUEUE"), "source is shown");
    let broken = std::env::temp_dir().join(format!("stoa-broken-{}.lua", std::process::id()));
    std::fs::write(&broken, "this is not lua").unwrap();
    fails(
        server.shell(&format!("registerExtension bad /bad {}", broken.display())),
        "was refused",
    );
    std::fs::remove_file(&broken).unwrap();
    ok(server.shell("removeExtension pq"));
    assert_eq!(ok(server.shell("listExtensions")), "");
}
