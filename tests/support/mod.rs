//! What the integration tests that start a real `stoa server` share:
//! choosing its port and waiting until it serves.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a started server may take to accept connections.
const SERVER_START_LIMIT: Duration = Duration::from_secs(20);
/// Fresh ports a server start may try: the port is free when chosen, but
/// another process may bind it before the server does.
const START_ATTEMPTS: usize = 3;

/// Ports handed out in this test process. Tests run in parallel threads,
/// and the kernel may offer a port it just gave (and saw closed) again; two
/// servers given one port would have one fail to start while the other's
/// listener answered for it.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A 127.0.0.1 port free now and not handed out before in this process.
pub fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut handed_out = HANDED_OUT.lock().unwrap();
        if handed_out.get_or_insert_with(HashSet::new).insert(port) {
            return port;
        }
    }
}

/// Why a started server is not serving.
#[derive(Debug)]
pub enum NotServing {
    /// The process ended first (a port taken by someone else, a bad flag).
    Exited(std::process::ExitStatus),
    TimedOut,
}

impl std::fmt::Display for NotServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotServing::Exited(status) => write!(f, "the server exited first ({status})"),
            NotServing::TimedOut => write!(f, "the server did not accept connections in time"),
        }
    }
}

/// A fresh data directory for a test server on `port`, named by the test
/// file (`what`), this process and the port.
pub fn test_data_dir(what: &str, port: u16) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stoa-{what}-test-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Starts `stoa server` on 127.0.0.1:`port` over `data_dir`, with a
/// `--set` for each of `settings`. Its warnings and errors reach the
/// test's output: what a server that stopped serving said about it.
pub fn spawn_server<S: AsRef<OsStr>>(port: u16, data_dir: &Path, settings: &[S]) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stoa"));
    command
        .arg("server")
        .arg("--bind")
        .arg("127.0.0.1")
        .arg("--port")
        .arg(port.to_string())
        .arg("--data-dir")
        .arg(data_dir);
    for setting in settings {
        command.arg("--set").arg(setting);
    }
    command
        .env("STOA_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// What `start` returns for the first free port it serves on, trying up to
/// `START_ATTEMPTS` ports; `start` cleans up after a port that failed.
pub fn start_on_free_port<T>(mut start: impl FnMut(u16) -> Result<T, NotServing>) -> T {
    let mut last = None;
    for _ in 0..START_ATTEMPTS {
        let port = free_port();
        match start(port) {
            Ok(started) => return started,
            Err(why) => last = Some(format!("port {port}: {why}")),
        }
    }
    panic!(
        "no server started in {START_ATTEMPTS} attempts; last, {}",
        last.unwrap_or_default()
    );
}

/// Waits until `child` accepts connections on 127.0.0.1:`port`.
///
/// A connection whose two ends are the same address is the kernel's TCP
/// self-connect (possible when the port is in the ephemeral range and
/// nobody listens), not the server, so it does not count.
pub fn wait_until_serving(child: &mut Child, port: u16) -> Result<(), NotServing> {
    let deadline = Instant::now() + SERVER_START_LIMIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Err(NotServing::Exited(status));
        }
        if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
            if stream.local_addr().unwrap() != stream.peer_addr().unwrap() {
                return Ok(());
            }
        }
        if Instant::now() >= deadline {
            return Err(NotServing::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
