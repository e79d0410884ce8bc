//! What the integration tests that start a real `stoa server` share:
//! choosing its port and waiting until it serves.

use std::collections::HashSet;
use std::net::{TcpListener, TcpStream};
use std::process::Child;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

/// Waits until `child` accepts connections on 127.0.0.1:`port`.
///
/// A connection whose two ends are the same address is the kernel's TCP
/// self-connect (possible when the port is in the ephemeral range and
/// nobody listens), not the server, so it does not count.
pub fn wait_until_serving(child: &mut Child, port: u16, limit: Duration) -> Result<(), NotServing> {
    let deadline = Instant::now() + limit;
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
