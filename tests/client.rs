//! The Rust client against a real `stoa` server process: every method, its
//! errors, watches, pipelining, and a session surviving a server restart.

mod support;

use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use support::{free_port, spawn_server, start_on_free_port, test_data_dir, wait_until_serving};

use stoa_client::tokio;
use stoa_client::{
    multi_error, open_acl_unsafe, parse_acl, AddWatchMode, Client, ClientOptions, CreateMode,
    Error, EventType, KeeperState, MultiResult, Op, SessionState, WatchedEvent, WatcherType,
};

/// Every test finishes within this, or fails.
const TEST_LIMIT: Duration = Duration::from_secs(60);
/// How long to wait for one expected watch event.
const EVENT_LIMIT: Duration = Duration::from_secs(10);

/// A `stoa server` child process with its own port and data directory,
/// killed (by PID) and cleaned up on drop.
struct Server {
    child: Option<Child>,
    port: u16,
    data_dir: PathBuf,
    extra: Vec<String>,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        start_on_free_port(|port| {
            let mut server = Server {
                child: None,
                port,
                data_dir: test_data_dir("client", port),
                extra: extra.iter().map(|s| s.to_string()).collect(),
            };
            server.try_spawn().map(|()| server)
        })
    }

    /// Starts the process again on the same port and data directory.
    fn spawn(&mut self) {
        if let Err(why) = self.try_spawn() {
            panic!("server did not start again on port {}: {why}", self.port);
        }
    }

    fn try_spawn(&mut self) -> Result<(), support::NotServing> {
        // Kept even when it fails to serve, so drop kills a process still
        // starting.
        let child = self
            .child
            .insert(spawn_server(self.port, &self.data_dir, &self.extra));
        wait_until_serving(child, self.port)
    }

    /// kill -9, as a crash.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// Runs an async test body on a fresh runtime, bounded by `TEST_LIMIT`.
fn run<F: std::future::Future<Output = ()>>(body: F) {
    support::run_bounded(TEST_LIMIT, 2, body);
}

async fn next_node_event(
    events: &mut tokio::sync::mpsc::UnboundedReceiver<WatchedEvent>,
) -> WatchedEvent {
    loop {
        let event = tokio::time::timeout(EVENT_LIMIT, events.recv())
            .await
            .expect("no event in time")
            .expect("event stream ended");
        if event.event_type != EventType::None {
            return event;
        }
    }
}

#[test]
fn every_method_works_and_reports_zookeeper_errors() {
    let server = Server::start(&["extendedTypesEnabled=true"]);
    run(async {
        let client = Client::connect(&server.address(), support::client_options())
            .await
            .unwrap();
        assert_ne!(client.session_id(), 0);
        assert!(client.negotiated_timeout() > Duration::ZERO);
        let acl = open_acl_unsafe();

        assert_eq!(
            client
                .create("/a", b"one", &acl, CreateMode::Persistent)
                .await
                .unwrap(),
            "/a"
        );
        let error = client
            .create("/a", b"", &acl, CreateMode::Persistent)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, Error::NodeExists { path } if path == "/a"),
            "{error}"
        );
        assert_eq!(error.to_string(), "KeeperErrorCode = NodeExists for /a");
        let (path, stat) = client
            .create2("/a/b", b"two", &acl, CreateMode::Persistent)
            .await
            .unwrap();
        assert_eq!(path, "/a/b");
        assert_eq!(stat.data_length, 3);
        let seq = client
            .create("/a/s-", b"", &acl, CreateMode::PersistentSequential)
            .await
            .unwrap();
        assert_eq!(seq, "/a/s-0000000001");
        assert!(matches!(
            client
                .create("/missing/x", b"", &acl, CreateMode::Persistent)
                .await,
            Err(Error::NoNode { .. })
        ));
        assert!(matches!(
            client
                .create("bad", b"", &acl, CreateMode::Persistent)
                .await,
            Err(Error::InvalidPath { .. })
        ));

        let (data, stat) = client.get_data("/a", false).await.unwrap();
        assert_eq!(data, b"one");
        assert_eq!(stat.version, 0);
        assert_eq!(stat.num_children, 2);
        let stat = client.set_data("/a", b"uno", 0).await.unwrap();
        assert_eq!(stat.version, 1);
        assert!(matches!(
            client.set_data("/a", b"x", 0).await,
            Err(Error::BadVersion { .. })
        ));
        assert_eq!(
            client.exists("/a", false).await.unwrap().map(|s| s.version),
            Some(1)
        );
        assert_eq!(client.exists("/nope", false).await.unwrap(), None);
        assert!(
            matches!(client.get_data("/nope", false).await, Err(Error::NoNode { path }) if path == "/nope")
        );

        let mut children = client.get_children("/a", false).await.unwrap();
        children.sort();
        assert_eq!(children, ["b", "s-0000000001"]);
        let (children, stat) = client.get_children2("/a", false).await.unwrap();
        assert_eq!(children.len(), 2);
        assert_eq!(stat.num_children, 2);
        assert_eq!(client.get_all_children_number("/a").await.unwrap(), 2);

        let (got_acl, _) = client.get_acl("/a").await.unwrap();
        assert_eq!(got_acl, acl);
        let read_only = parse_acl("world:anyone:r").unwrap();
        let stat = client.set_acl("/a/b", &read_only, -1).await.unwrap();
        assert_eq!(stat.aversion, 1);
        assert!(matches!(
            client.set_data("/a/b", b"x", -1).await,
            Err(Error::NoAuth { .. })
        ));
        assert!(matches!(
            client.set_acl("/a/b", &acl, -1).await,
            Err(Error::NoAuth { .. })
        ));
        assert!(matches!(
            client.set_acl("/a", &acl, 5).await,
            Err(Error::BadVersion { .. })
        ));

        assert!(matches!(
            client.delete("/a", -1).await,
            Err(Error::NotEmpty { .. })
        ));
        assert!(matches!(
            client.delete("/a/s-0000000001", 5).await,
            Err(Error::BadVersion { .. })
        ));
        client.delete("/a/s-0000000001", 0).await.unwrap();

        client
            .create("/e", b"", &acl, CreateMode::Ephemeral)
            .await
            .unwrap();
        assert!(matches!(
            client
                .create("/e/child", b"", &acl, CreateMode::Persistent)
                .await,
            Err(Error::NoChildrenForEphemerals { .. })
        ));
        assert_eq!(client.get_ephemerals("/").await.unwrap(), ["/e"]);
        assert_eq!(
            client.get_ephemerals("/x").await.unwrap(),
            Vec::<String>::new()
        );

        let (path, _) = client.create_container("/c", b"", &acl).await.unwrap();
        assert_eq!(path, "/c");
        let (path, stat) = client
            .create_ttl(
                "/t",
                b"ttl",
                &acl,
                CreateMode::PersistentWithTtl,
                Duration::from_secs(3600),
            )
            .await
            .unwrap();
        assert_eq!((path.as_str(), stat.data_length), ("/t", 3));

        assert_eq!(client.sync("/a").await.unwrap(), "/a");
        let who = client.whoami().await.unwrap();
        assert!(who.iter().any(|info| info.auth_scheme == "ip"), "{who:?}");
        client.close().await.unwrap();
        assert_eq!(client.state(), SessionState::Closed);
        assert!(matches!(
            client.get_data("/a", false).await,
            Err(Error::Closed)
        ));

        // The ephemeral went with the session.
        let other = Client::connect(&server.address(), support::client_options())
            .await
            .unwrap();
        assert_eq!(other.exists("/e", false).await.unwrap(), None);
        other.close().await.unwrap();
    });
}

#[test]
fn multi_is_atomic_and_multi_read_reads_in_one_trip() {
    let server = Server::start(&[]);
    run(async {
        let client = Client::connect(&server.address(), support::client_options())
            .await
            .unwrap();
        let acl = open_acl_unsafe();
        let results = client
            .multi(vec![
                Op::create("/m", b"0", &acl, CreateMode::Persistent),
                Op::create2("/m/a", b"", &acl, CreateMode::Persistent),
                Op::set_data("/m", b"1", 0),
                Op::check("/m", 1),
            ])
            .await
            .unwrap();
        assert!(matches!(&results[0], MultiResult::Create(p) if p == "/m"));
        assert!(matches!(&results[1], MultiResult::Create2(p, _) if p == "/m/a"));
        assert!(matches!(&results[2], MultiResult::SetData(s) if s.version == 1));
        assert_eq!(results[3], MultiResult::Check);
        assert!(multi_error(&["/m", "/m/a", "/m", "/m"], &results).is_none());

        let ops = vec![Op::delete("/m/a", -1), Op::check("/m", 7)];
        let results = client.multi(ops).await.unwrap();
        let error = multi_error(&["/m/a", "/m"], &results).unwrap();
        assert!(
            matches!(&error, Error::BadVersion { path } if path == "/m"),
            "{error}"
        );
        assert!(
            client.exists("/m/a", false).await.unwrap().is_some(),
            "a failed multi changed nothing"
        );

        let results = client
            .multi_read(vec![
                Op::get_data("/m"),
                Op::get_children("/m"),
                Op::get_data("/none"),
            ])
            .await
            .unwrap();
        assert!(matches!(&results[0], MultiResult::GetData(Some(d), _) if d == b"1"));
        assert_eq!(results[1], MultiResult::GetChildren(vec!["a".to_string()]));
        assert_eq!(
            results[2],
            MultiResult::Error(stoa_client::ErrorCode::NoNode)
        );
        assert!(matches!(
            client.multi_read(vec![Op::delete("/m", -1)]).await,
            Err(Error::InvalidArgument(_))
        ));
        client.close().await.unwrap();
    });
}

#[test]
fn watches_deliver_events_and_can_be_removed() {
    let server = Server::start(&[]);
    run(async {
        let watcher = Client::connect(&server.address(), support::client_options())
            .await
            .unwrap();
        let writer = Client::connect(&server.address(), support::client_options())
            .await
            .unwrap();
        let mut events = watcher.events();
        let acl = open_acl_unsafe();

        assert_eq!(watcher.exists("/w", true).await.unwrap(), None);
        writer
            .create("/w", b"", &acl, CreateMode::Persistent)
            .await
            .unwrap();
        let event = next_node_event(&mut events).await;
        assert_eq!(
            (event.event_type, event.path.as_str()),
            (EventType::NodeCreated, "/w")
        );
        assert_eq!(event.state, KeeperState::SyncConnected);
        assert!(event.zxid > 0);

        watcher.get_data("/w", true).await.unwrap();
        watcher.get_children("/w", true).await.unwrap();
        writer.set_data("/w", b"x", -1).await.unwrap();
        let event = next_node_event(&mut events).await;
        assert_eq!(
            (event.event_type, event.path.as_str()),
            (EventType::NodeDataChanged, "/w")
        );
        writer
            .create("/w/c", b"", &acl, CreateMode::Persistent)
            .await
            .unwrap();
        let event = next_node_event(&mut events).await;
        assert_eq!(
            (event.event_type, event.path.as_str()),
            (EventType::NodeChildrenChanged, "/w")
        );

        watcher
            .add_watch("/w", AddWatchMode::PersistentRecursive)
            .await
            .unwrap();
        for round in 0..2 {
            writer
                .set_data("/w/c", format!("{round}").as_bytes(), -1)
                .await
                .unwrap();
            let event = next_node_event(&mut events).await;
            assert_eq!(
                (event.event_type, event.path.as_str()),
                (EventType::NodeDataChanged, "/w/c")
            );
        }
        watcher
            .remove_watches("/w", WatcherType::Any)
            .await
            .unwrap();
        assert!(matches!(
            watcher.remove_watches("/w", WatcherType::Data).await,
            Err(Error::NoWatcher { .. })
        ));
        writer.close().await.unwrap();
        watcher.close().await.unwrap();
    });
}

#[test]
fn a_thousand_pipelined_requests_complete_in_order() {
    let server = Server::start(&[]);
    run(async {
        const REQUESTS: usize = 1000;
        let client = Client::connect(&server.address(), support::client_options())
            .await
            .unwrap();
        let acl = open_acl_unsafe();
        client
            .create("/p", b"", &acl, CreateMode::Persistent)
            .await
            .unwrap();
        let calls = (0..REQUESTS).map(|i| {
            let client = client.clone();
            let acl = acl.clone();
            async move {
                let path = client
                    .create(
                        "/p/n-",
                        format!("{i}").as_bytes(),
                        &acl,
                        CreateMode::PersistentSequential,
                    )
                    .await
                    .unwrap();
                (i, path)
            }
        });
        let started = Instant::now();
        let results = join_all(calls.collect()).await;
        let elapsed = started.elapsed();
        // Sequence numbers follow the order the calls were issued: FIFO.
        for (i, path) in results {
            assert_eq!(path, format!("/p/n-{i:010}"));
        }
        assert_eq!(
            client.get_all_children_number("/p").await.unwrap(),
            REQUESTS
        );
        eprintln!("{REQUESTS} pipelined creates took {elapsed:?}");
        client.close().await.unwrap();
    });
}

/// Polls every future concurrently from one task, in index order, so the
/// requests are issued in that order.
async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for future in futures {
        set.push(Box::pin(future));
    }
    let mut outputs: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (future, output) in set.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|o| o.expect("every future finished"))
        .collect()
}

#[test]
fn the_session_survives_a_server_restart() {
    let mut server = Server::start(&[]);
    run(async {
        let client = Client::connect(&server.address(), support::client_options())
            .await
            .unwrap();
        let mut events = client.events();
        let acl = open_acl_unsafe();
        client.add_auth("digest", b"alice:secret").await.unwrap();
        let mine = parse_acl("auth::cdrwa").unwrap();
        client
            .create("/r", b"before", &mine, CreateMode::Persistent)
            .await
            .unwrap();
        client
            .create("/eph", b"", &acl, CreateMode::Ephemeral)
            .await
            .unwrap();
        client.get_data("/r", true).await.unwrap();
        let session = client.session_id();

        server.kill();
        // Wait until the client noticed, so the next call is not sent on
        // the dead connection (it would fail with ConnectionLoss).
        loop {
            let event = tokio::time::timeout(EVENT_LIMIT, events.recv())
                .await
                .unwrap()
                .unwrap();
            if event.state == KeeperState::Disconnected {
                break;
            }
        }
        server.spawn();

        // The call waits for the reconnection, then runs on the same session
        // with the credentials re-sent (the node is readable only by alice).
        let (data, _) = client.get_data("/r", false).await.unwrap();
        assert_eq!(data, b"before");
        assert_eq!(client.session_id(), session);
        assert_eq!(client.state(), SessionState::Connected);
        assert!(
            client.exists("/eph", false).await.unwrap().is_some(),
            "ephemeral kept"
        );
        let mut saw_reconnect = false;
        while let Ok(event) = events.try_recv() {
            saw_reconnect |=
                event.state == KeeperState::SyncConnected && event.event_type == EventType::None;
        }
        assert!(saw_reconnect);

        // The data watch was re-registered with SetWatches2.
        let writer = Client::connect(&server.address(), support::client_options())
            .await
            .unwrap();
        writer.add_auth("digest", b"alice:secret").await.unwrap();
        writer.set_data("/r", b"after", -1).await.unwrap();
        let event = next_node_event(&mut events).await;
        assert_eq!(
            (event.event_type, event.path.as_str()),
            (EventType::NodeDataChanged, "/r")
        );
        writer.close().await.unwrap();
        client.close().await.unwrap();
    });
}

#[test]
fn a_refused_scheme_ends_the_session_with_auth_failed() {
    let server = Server::start(&[]);
    run(async {
        let client = Client::connect(&server.address(), support::client_options())
            .await
            .unwrap();
        let error = client.add_auth("nosuchscheme", b"x").await.unwrap_err();
        assert!(matches!(error, Error::AuthFailed { .. }), "{error}");
        assert_eq!(client.state(), SessionState::AuthFailed);
        assert!(matches!(
            client.exists("/", false).await,
            Err(Error::AuthFailed { .. })
        ));
    });
}

/// The readiness probe the other tests rely on: a port whose listener
/// accepts and says nothing (as another test's socket could, for a moment)
/// is not a server, so a start on it is retried rather than trusted.
#[test]
fn a_listener_that_does_not_answer_is_not_taken_for_a_server() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let probing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let still_probing = std::sync::Arc::clone(&probing);
    let silent = std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(10);
        let mut accepted = 0;
        while still_probing.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < until {
            match listener.accept() {
                Ok((stream, _)) => {
                    accepted += 1;
                    drop(stream);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        accepted
    });
    // Stands for a server process that never serves and exits.
    let mut child = std::process::Command::new("sleep")
        .arg("0.5")
        .spawn()
        .unwrap();
    let outcome = wait_until_serving(&mut child, port);
    probing.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(
        matches!(outcome, Err(support::NotServing::Exited(_))),
        "{outcome:?}"
    );
    assert!(silent.join().unwrap() > 0, "the probe reached the listener");
}

#[test]
fn connecting_to_nothing_fails_promptly() {
    run(async {
        let port = free_port();
        let error = Client::connect(&format!("127.0.0.1:{port}"), support::client_options())
            .await
            .unwrap_err();
        assert!(matches!(error, Error::Io(_)), "{error}");
        assert!(matches!(
            Client::connect("", support::client_options()).await,
            Err(Error::InvalidArgument(_))
        ));
    });
}

#[test]
fn a_session_closed_elsewhere_surfaces_as_session_expired() {
    let server = Server::start(&[]);
    run(async {
        let first = Client::connect(&server.address(), support::client_options())
            .await
            .unwrap();
        let mut events = first.events();
        first
            .create("/x", b"", &open_acl_unsafe(), CreateMode::Ephemeral)
            .await
            .unwrap();
        let resume = ClientOptions {
            session: Some((first.session_id(), first.session_password())),
            ..support::client_options()
        };
        let second = Client::connect(&server.address(), resume).await.unwrap();
        assert_eq!(second.session_id(), first.session_id());
        // The two handles take the session from each other as each
        // reconnects (the server closes the older connection), so a call
        // may meet ConnectionLoss; the close eventually lands.
        loop {
            match second.close().await {
                Ok(()) => break,
                Err(Error::ConnectionLoss { .. }) => continue,
                Err(e) => panic!("close failed: {e}"),
            }
        }

        // The first handle's connection is gone with the session; when it
        // reconnects the server says the session expired.
        loop {
            let event = tokio::time::timeout(EVENT_LIMIT, events.recv())
                .await
                .unwrap()
                .unwrap();
            if event.state == KeeperState::Expired {
                break;
            }
        }
        assert_eq!(first.state(), SessionState::Expired);
        let error = first.get_data("/", false).await.unwrap_err();
        assert!(matches!(error, Error::SessionExpired { .. }), "{error}");
    });
}
