//! The server-side primitives shipped as extensions (`examples/extensions/`)
//! through the Rust client's `recipes::server_side` types, each scenario on
//! a `stoa server` of its own: exclusion and FIFO hand-off, permits, holders
//! whose sessions expire (what they held passes on), the election's leader
//! and the read-write lock's sharing.

mod support;

use std::path::PathBuf;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{crash_while_holding, spawn_serving, start_on_free_port, test_data_dir, Occupancy};

use stoa_client::recipes::server_side::{Election, FifoLock, ReadWriteLock, Semaphore, Ticket};
use stoa_client::tokio;
use stoa_client::{open_acl_unsafe, Client, CreateMode, Error};

/// Every test finishes within this, or fails.
const TEST_LIMIT: Duration = Duration::from_secs(60);
/// How long a waiter may take to be granted: a crashed holder's session
/// timeout and then some.
const WAIT_LIMIT: Duration = Duration::from_secs(20);
/// Long enough for a wrong grant to have shown itself.
const SETTLE: Duration = Duration::from_millis(300);
/// The sessions of crashed holders (the server's minimum is 1 s).
const CRASH_SESSION_TIMEOUT: Duration = Duration::from_secs(2);
const SETTINGS: &[&str] = &["tickTime=500", "admin.enableServer=false"];

struct Server {
    child: Child,
    data_dir: PathBuf,
    address: String,
}

impl Server {
    fn start() -> Server {
        start_on_free_port(|port| {
            let data_dir = test_data_dir("server-primitives", port);
            let child = spawn_serving(port, &data_dir, SETTINGS)?;
            Ok(Server {
                child,
                data_dir,
                address: format!("127.0.0.1:{port}"),
            })
        })
    }

    async fn client(&self) -> Client {
        Client::connect(&self.address, support::client_options())
            .await
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

fn run<F: std::future::Future<Output = ()>>(body: F) {
    support::run_bounded(TEST_LIMIT, 4, body);
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Registers the shipped `file` as node extension `name` at `path`.
async fn register(client: &Client, name: &str, path: &str, file: &str) {
    let source = std::fs::read_to_string(format!(
        "{}/examples/extensions/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    match client
        .create(
            "/extensions",
            b"",
            &open_acl_unsafe(),
            CreateMode::Persistent,
        )
        .await
    {
        Ok(_) | Err(Error::NodeExists { .. }) => {}
        Err(e) => panic!("/extensions: {e}"),
    }
    let doc = format!(
        "{{\"kind\":\"node\",\"path\":{},\"source\":{}}}",
        json_string(path),
        json_string(&source)
    );
    client
        .create(
            &format!("/extensions/{name}"),
            doc.as_bytes(),
            &open_acl_unsafe(),
            CreateMode::Persistent,
        )
        .await
        .unwrap();
}

#[test]
fn fifo_lock_excludes_and_hands_off_in_request_order() {
    let server = Server::start();
    run(async {
        let admin = server.client().await;
        register(&admin, "lock", "/lock", "fifo_lock.lua").await;
        let first = FifoLock::new(server.client().await, "/lock/jobs").unwrap();
        let held = first.request().await.unwrap();
        assert!(held.is_granted(), "a free lock is held in one call");
        assert_eq!(first.holder().await.unwrap().as_deref(), Some(held.name()));
        let occupancy = Occupancy::default();
        occupancy.enter();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for id in 1..=5usize {
            let lock = FifoLock::new(server.client().await, "/lock/jobs").unwrap();
            // Queued here, in this order; each waits on a task of its own.
            let mut ticket = lock.request().await.unwrap();
            assert!(!ticket.is_granted(), "waiter {id} granted while held");
            let (order, occupancy) = (order.clone(), occupancy.clone());
            waiters.push(tokio::spawn(async move {
                assert!(ticket.wait(Some(WAIT_LIMIT)).await.unwrap(), "waiter {id}");
                occupancy.enter();
                order.lock().unwrap().push(id);
                tokio::time::sleep(Duration::from_millis(20)).await;
                occupancy.leave();
                ticket.release().await.unwrap();
            }));
        }
        tokio::time::sleep(SETTLE).await;
        assert!(order.lock().unwrap().is_empty(), "granted while held");
        occupancy.leave();
        held.release().await.unwrap();
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [1, 2, 3, 4, 5]);
        assert_eq!(occupancy.most(), 1);
        assert_eq!(first.holder().await.unwrap(), None);
        // A timed-out acquire cancels its request and leaves the queue as it was.
        let holding = first.acquire(Some(WAIT_LIMIT)).await.unwrap().unwrap();
        let other = FifoLock::new(admin.clone(), "/lock/jobs").unwrap();
        assert!(other
            .acquire(Some(Duration::from_millis(200)))
            .await
            .unwrap()
            .is_none());
        assert_eq!(
            admin.get_children("/lock/jobs", false).await.unwrap().len(),
            1
        );
        holding.release().await.unwrap();
    });
}

#[test]
fn fifo_lock_passes_on_when_its_holders_session_expires() {
    let server = Server::start();
    run(async {
        let admin = server.client().await;
        register(&admin, "lock", "/lock", "fifo_lock.lua").await;
        let (dead, granted) = crash_while_holding(
            server.address.clone(),
            CRASH_SESSION_TIMEOUT,
            |client| {
                Box::pin(async move {
                    let lock = FifoLock::new(client, "/lock/l").unwrap();
                    lock.acquire(Some(WAIT_LIMIT)).await.unwrap().unwrap()
                })
            },
            |ticket: &Ticket| (ticket.path().to_owned(), ticket.is_granted()),
        );
        assert!(granted);
        let lock = FifoLock::new(server.client().await, "/lock/l").unwrap();
        let mut mine = lock.request().await.unwrap();
        assert!(
            !mine.is_granted(),
            "granted while the crashed holder's session lives"
        );
        assert!(
            mine.wait(Some(WAIT_LIMIT)).await.unwrap(),
            "never handed over"
        );
        assert_eq!(lock.holder().await.unwrap().as_deref(), Some(mine.name()));
        assert!(admin.exists(&dead, false).await.unwrap().is_none());
        mine.release().await.unwrap();
    });
}

#[test]
fn semaphore_grants_its_permits_in_order_and_an_expired_holders_permit_passes_on() {
    let server = Server::start();
    run(async {
        let admin = server.client().await;
        register(&admin, "sem", "/sem", "semaphore.lua").await;
        let sem = Semaphore::new(admin.clone(), "/sem/pool").unwrap();
        assert!(matches!(
            sem.acquire(Some(WAIT_LIMIT)).await,
            Err(Error::NoNode { .. })
        ));
        sem.create(2).await.unwrap();
        let (_, granted) = crash_while_holding(
            server.address.clone(),
            CRASH_SESSION_TIMEOUT,
            |client| {
                Box::pin(async move {
                    let sem = Semaphore::new(client, "/sem/pool").unwrap();
                    sem.request().await.unwrap()
                })
            },
            |ticket: &Ticket| (ticket.path().to_owned(), ticket.is_granted()),
        );
        assert!(granted);
        let second = sem.request().await.unwrap();
        assert!(second.is_granted());
        let mut waiters = Vec::new();
        for _ in 0..2 {
            let s = Semaphore::new(server.client().await, "/sem/pool").unwrap();
            let ticket = s.request().await.unwrap();
            assert!(!ticket.is_granted());
            waiters.push(ticket);
        }
        let mut second_waiter = waiters.pop().unwrap();
        let mut first_waiter = waiters.pop().unwrap();
        // The crashed holder's expiry grants the oldest waiter only.
        assert!(first_waiter.wait(Some(WAIT_LIMIT)).await.unwrap());
        assert!(!second_waiter.wait(Some(SETTLE)).await.unwrap());
        second.release().await.unwrap();
        assert!(second_waiter.wait(Some(WAIT_LIMIT)).await.unwrap());
        first_waiter.release().await.unwrap();
        second_waiter.release().await.unwrap();

        // Under contention: never more than the permits.
        let occupancy = Occupancy::default();
        let mut workers = Vec::new();
        for _ in 0..5 {
            let s = Semaphore::new(server.client().await, "/sem/pool").unwrap();
            let occupancy = occupancy.clone();
            workers.push(tokio::spawn(async move {
                for _ in 0..3 {
                    let ticket = s.acquire(Some(WAIT_LIMIT)).await.unwrap().unwrap();
                    occupancy.enter();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    occupancy.leave();
                    ticket.release().await.unwrap();
                }
            }));
        }
        for worker in workers {
            worker.await.unwrap();
        }
        assert_eq!(occupancy.most(), 2);
    });
}

#[test]
fn election_and_read_write_lock_hand_over() {
    let server = Server::start();
    run(async {
        let admin = server.client().await;
        register(&admin, "election", "/election", "election.lua").await;
        register(&admin, "rw", "/rw", "rwlock.lua").await;

        let a = server.client().await;
        let first = Election::new(a.clone(), "/election/e").unwrap();
        let leader = first.join(b"host-a").await.unwrap();
        assert!(leader.is_granted());
        let second = Election::new(server.client().await, "/election/e").unwrap();
        let mut next = second.join(b"host-b").await.unwrap();
        assert!(!next.is_granted());
        assert_eq!(
            second.leader(false).await.unwrap(),
            Some((leader.name().to_owned(), b"host-a".to_vec()))
        );
        a.close().await.unwrap();
        assert!(next.wait(Some(WAIT_LIMIT)).await.unwrap(), "no new leader");
        assert_eq!(
            second.leader(false).await.unwrap(),
            Some((next.name().to_owned(), b"host-b".to_vec()))
        );
        drop(leader);

        let rw = ReadWriteLock::new(admin.clone(), "/rw/l").unwrap();
        let r1 = rw.read(Some(WAIT_LIMIT)).await.unwrap().unwrap();
        let r2 = rw.read(Some(WAIT_LIMIT)).await.unwrap().unwrap();
        let writer = ReadWriteLock::new(server.client().await, "/rw/l").unwrap();
        let pending = tokio::spawn(async move { writer.write(Some(WAIT_LIMIT)).await });
        tokio::time::sleep(SETTLE).await;
        assert!(!pending.is_finished(), "a writer got in with readers");
        // A reader behind the waiting writer waits too.
        assert!(rw.read(Some(SETTLE)).await.unwrap().is_none());
        r1.release().await.unwrap();
        r2.release().await.unwrap();
        let w = pending
            .await
            .unwrap()
            .unwrap()
            .expect("the writer after the readers");
        w.release().await.unwrap();
    });
}
