//! What the integration tests that start a real `stoa server` share:
//! choosing its port and waiting until it serves.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a started server may take to accept connections.
const SERVER_START_LIMIT: Duration = Duration::from_secs(20);
/// Fresh ports a server start may try: the port is free when chosen, but
/// another process may bind it before the server does.
const START_ATTEMPTS: usize = 3;
/// How long a readiness probe waits for the server's answer.
const PROBE_LIMIT: Duration = Duration::from_secs(5);

/// Ports handed out in this test process. Tests run in parallel threads,
/// and the kernel may offer a port it just gave (and saw closed) again; two
/// servers given one port would have one fail to start while the other's
/// listener answered for it.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A 127.0.0.1 port free now and not handed out before in this process.
///
/// The port is found by binding a socket that never listens. A listening
/// one (what `TcpListener::bind` makes) would, when the kernel offers an
/// already handed-out port again, accept another test's readiness probe for
/// the moment it exists, while that test's server failed to bind.
pub fn free_port() -> u16 {
    use socket2::{Domain, Socket, Type};
    let any_port = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    loop {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        socket.bind(&any_port.into()).unwrap();
        let port = socket
            .local_addr()
            .unwrap()
            .as_socket()
            .expect("an IPv4 address")
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

/// Waits until `child` serves on 127.0.0.1:`port`: it answers the `srvr`
/// four-letter word (allowed by default; a server that refuses it still
/// answers with why).
///
/// Accepting a connection is not enough. The kernel completes a connection
/// for any listener on the port, and for a socket connected to itself (when
/// the port is in the ephemeral range and nobody listens); neither answers.
pub fn wait_until_serving(child: &mut Child, port: u16) -> Result<(), NotServing> {
    let deadline = Instant::now() + SERVER_START_LIMIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Err(NotServing::Exited(status));
        }
        if answers_srvr(port) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(NotServing::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether whoever listens on 127.0.0.1:`port` answers `srvr` with text.
fn answers_srvr(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    if stream.local_addr().ok() == stream.peer_addr().ok() {
        return false;
    }
    let mut answer = Vec::new();
    stream.set_read_timeout(Some(PROBE_LIMIT)).is_ok()
        && stream.write_all(b"srvr").is_ok()
        && stream.read_to_end(&mut answer).is_ok()
        && !answer.is_empty()
}

/// A `stoa server` started on `port` with `settings` and serving, or the
/// reason it is not; one that does not serve is killed and its data
/// directory removed.
#[allow(dead_code)] // not every test binary starts its servers this way
pub fn spawn_serving<S: AsRef<OsStr>>(
    port: u16,
    data_dir: &Path,
    settings: &[S],
) -> Result<Child, NotServing> {
    let mut child = spawn_server(port, data_dir, settings);
    match wait_until_serving(&mut child, port) {
        Ok(()) => Ok(child),
        Err(why) => {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(data_dir);
            Err(why)
        }
    }
}

/// Runs an async test body on a fresh runtime of `workers` threads, failing
/// the test if it takes longer than `limit`.
#[allow(dead_code)] // the shell's tests run no async body
pub fn run_bounded<F: std::future::Future<Output = ()>>(limit: Duration, workers: usize, body: F) {
    let runtime = stoa_client::tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        stoa_client::tokio::time::timeout(limit, body)
            .await
            .expect("test timed out");
    });
}

/// The client options the tests connect with: a 10 s session, 5 s to connect.
#[allow(dead_code)] // the shell's tests drive the binary, not the library
pub fn client_options() -> stoa_client::ClientOptions {
    stoa_client::ClientOptions {
        session_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
        session: None,
    }
}

/// How many hold something at once, and the most there ever were.
#[allow(dead_code)] // used by the recipes' tests only
#[derive(Debug, Default, Clone)]
pub struct Occupancy {
    now: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    most: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

#[allow(dead_code)] // used by the recipes' tests only
impl Occupancy {
    pub fn enter(&self) {
        use std::sync::atomic::Ordering;
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
    }

    pub fn leave(&self) {
        self.now.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn most(&self) -> usize {
        self.most.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Runs `acquire` on a session of its own (with `session_timeout`) in a
/// runtime of its own, notes what `seen` says of what it acquired, then
/// drops the runtime: the connection goes without a close and without any
/// clean-up, as when the holder's process dies.
#[allow(dead_code)] // used by the recipes' tests only
pub fn crash_while_holding<T: Send + 'static, R: Send + 'static>(
    address: String,
    session_timeout: Duration,
    acquire: impl FnOnce(
            stoa_client::Client,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>
        + Send
        + 'static,
    seen: impl FnOnce(&T) -> R + Send + 'static,
) -> R {
    std::thread::spawn(move || {
        let runtime = stoa_client::tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (held, client) = runtime.block_on(async move {
            let options = stoa_client::ClientOptions {
                session_timeout,
                connect_timeout: Duration::from_secs(5),
                session: None,
            };
            let client = stoa_client::Client::connect(&address, options)
                .await
                .unwrap();
            (acquire(client.clone()).await, client)
        });
        drop(runtime);
        let noted = seen(&held);
        // Outside any runtime: the drops below can spawn no clean-up.
        drop(held);
        drop(client);
        noted
    })
    .join()
    .unwrap()
}
