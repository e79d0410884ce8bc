//! The client's recipes (`stoa_client::recipes`) through real servers:
//! each scenario starts its own `stoa server`, or, when `STOA_RECIPES_ZK`
//! names a running server (`host:port`, Apache ZooKeeper for one), runs
//! there under a path of its own.

mod support;

use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::{
    crash_while_holding, spawn_server, spawn_serving, start_on_free_port, test_data_dir,
    wait_until_serving, Occupancy,
};

use stoa_client::recipes::{
    Barrier, Counter, DistributedQueue, DoubleBarrier, LeaderElection, PriorityQueue, QueueLock,
    ReadWriteLock, Semaphore, TasLock,
};
use stoa_client::tokio;
use stoa_client::{Client, ClientOptions, Error};

/// Every test finishes within this, or fails.
const TEST_LIMIT: Duration = Duration::from_secs(60);
/// How long any waiter may take to get what it waits for: a session
/// timeout (a crashed holder's) and then some.
const WAIT_LIMIT: Duration = Duration::from_secs(20);
/// Long enough for a wrongly granted acquire to have shown itself.
const SETTLE: Duration = Duration::from_millis(300);
/// Asked for the sessions of crashed holders; servers raise it to their
/// minimum (1 s for the test server, 4 s for ZooKeeper at tickTime 2000).
const CRASH_SESSION_TIMEOUT: Duration = Duration::from_secs(2);
/// The test server's: a short tick for a short minimum session timeout.
const SETTINGS: &[&str] = &["tickTime=500", "admin.enableServer=false"];

/// Where a test runs: its own server, or the one `STOA_RECIPES_ZK` names.
struct Target {
    server: Option<(Child, PathBuf)>,
    port: u16,
    address: String,
    /// A path no other test (or earlier run) uses.
    base: String,
}

impl Target {
    fn start(test: &str) -> Target {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let base = format!("/recipes-test/{test}-{}-{nanos}", std::process::id());
        if let Ok(address) = std::env::var("STOA_RECIPES_ZK") {
            return Target {
                server: None,
                port: 0,
                address,
                base,
            };
        }
        start_on_free_port(|port| {
            let data_dir = test_data_dir("recipes", port);
            let child = spawn_serving(port, &data_dir, SETTINGS)?;
            Ok(Target {
                server: Some((child, data_dir)),
                port,
                address: format!("127.0.0.1:{port}"),
                base: base.clone(),
            })
        })
    }

    /// Whether this test started the server (and so may restart it).
    fn owns_server(&self) -> bool {
        self.server.is_some()
    }

    /// kill -9 and start again on the same port and data: the sessions
    /// survive, their connections do not.
    fn restart(&mut self) {
        let (child, data_dir) = self.server.as_mut().expect("a server of our own");
        let _ = child.kill();
        let _ = child.wait();
        *child = spawn_server(self.port, data_dir, SETTINGS);
        if let Err(why) = wait_until_serving(child, self.port) {
            panic!(
                "the server did not start again on port {}: {why}",
                self.port
            );
        }
    }

    fn path(&self, name: &str) -> String {
        format!("{}/{name}", self.base)
    }

    async fn client(&self) -> Client {
        self.client_with(Duration::from_secs(10)).await
    }

    async fn client_with(&self, session_timeout: Duration) -> Client {
        let options = ClientOptions {
            session_timeout,
            connect_timeout: Duration::from_secs(5),
            session: None,
        };
        Client::connect(&self.address, options).await.unwrap()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some((mut child, data_dir)) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(data_dir);
        }
    }
}

/// Runs an async test body on a fresh runtime, bounded by `TEST_LIMIT`.
fn run<F: std::future::Future<Output = ()>>(body: F) {
    support::run_bounded(TEST_LIMIT, 4, body);
}

async fn children(client: &Client, path: &str) -> usize {
    client.get_children(path, false).await.unwrap().len()
}

/// Waits (bounded) until `path` has `count` children.
async fn until_children(client: &Client, path: &str, count: usize) {
    let deadline = Instant::now() + WAIT_LIMIT;
    while children(client, path).await != count {
        assert!(
            Instant::now() < deadline,
            "{path} never had {count} children"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn queue_lock_excludes_and_grants_in_request_order() {
    let target = Target::start("queue-fifo");
    run(async {
        let path = target.path("lock");
        let watcher = target.client().await;
        let mut first = QueueLock::new(target.client().await, &path).unwrap();
        assert!(first.acquire(Some(WAIT_LIMIT)).await.unwrap());
        let occupancy = Occupancy::default();
        occupancy.enter();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for id in 1..=5usize {
            let client = target.client().await;
            let (lock_path, order, occupancy) = (path.clone(), order.clone(), occupancy.clone());
            waiters.push(tokio::spawn(async move {
                let mut lock = QueueLock::new(client, &lock_path).unwrap();
                // Odd waiters take the asynchronous road.
                let acquired = if id % 2 == 1 {
                    lock.acquire(Some(WAIT_LIMIT)).await.unwrap()
                } else {
                    lock.acquire_pipelined(Some(WAIT_LIMIT)).await.unwrap()
                };
                assert!(acquired, "waiter {id} never got the lock");
                occupancy.enter();
                order.lock().unwrap().push(id);
                tokio::time::sleep(Duration::from_millis(20)).await;
                occupancy.leave();
                lock.release().await.unwrap();
            }));
            // The next request is made only once this one is queued.
            until_children(&watcher, &path, id + 1).await;
        }
        tokio::time::sleep(SETTLE).await;
        assert!(order.lock().unwrap().is_empty(), "granted while held");
        occupancy.leave();
        first.release().await.unwrap();
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [1, 2, 3, 4, 5]);
        assert_eq!(occupancy.most(), 1);
        assert_eq!(children(&watcher, &path).await, 0, "nodes left behind");
    });
}

#[test]
fn queue_lock_under_contention_wakes_every_waiter() {
    let target = Target::start("queue-contention");
    run(async {
        let path = target.path("lock");
        let occupancy = Occupancy::default();
        let acquisitions = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for worker in 0..6 {
            let client = target.client().await;
            let (path, occupancy, acquisitions) =
                (path.clone(), occupancy.clone(), acquisitions.clone());
            workers.push(tokio::spawn(async move {
                for round in 0..5 {
                    let mut lock = QueueLock::new(client.clone(), &path).unwrap();
                    let acquired = if (worker + round) % 2 == 0 {
                        lock.acquire(Some(WAIT_LIMIT)).await.unwrap()
                    } else {
                        let pending = lock.lock_async(Some(WAIT_LIMIT));
                        match pending.wait().await.unwrap() {
                            Some(held) => {
                                lock = held;
                                true
                            }
                            None => panic!("worker {worker}'s async acquire timed out"),
                        }
                    };
                    assert!(acquired, "worker {worker} round {round} timed out");
                    occupancy.enter();
                    acquisitions.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    occupancy.leave();
                    lock.release().await.unwrap();
                }
            }));
        }
        for worker in workers {
            worker.await.unwrap();
        }
        assert_eq!(acquisitions.load(Ordering::SeqCst), 30);
        assert_eq!(occupancy.most(), 1);
    });
}

#[test]
fn queue_lock_passes_on_when_its_holder_crashes_or_closes() {
    let target = Target::start("queue-crash");
    run(async {
        let path = target.path("lock");
        let watcher = target.client().await;
        let crash_path = path.clone();
        crash_while_holding(
            target.address.clone(),
            CRASH_SESSION_TIMEOUT,
            move |client| {
                Box::pin(async move {
                    let mut lock = QueueLock::new(client, &crash_path).unwrap();
                    assert!(lock.acquire(Some(WAIT_LIMIT)).await.unwrap());
                    lock
                })
            },
            |_| (),
        );
        assert_eq!(
            children(&watcher, &path).await,
            1,
            "the crashed holder's node"
        );
        let mut next = QueueLock::new(target.client().await, &path).unwrap();
        let started = Instant::now();
        assert!(next.acquire(Some(WAIT_LIMIT)).await.unwrap());
        assert!(started.elapsed() < WAIT_LIMIT);

        // A holder that closes its session hands over at once.
        let waiter_client = target.client().await;
        let waiter_path = path.clone();
        let waiter = tokio::spawn(async move {
            let mut lock = QueueLock::new(waiter_client, &waiter_path).unwrap();
            assert!(lock.acquire(Some(WAIT_LIMIT)).await.unwrap());
            lock
        });
        until_children(&watcher, &path, 2).await;
        tokio::time::sleep(SETTLE).await;
        assert!(!waiter.is_finished());
        next.client().close().await.unwrap();
        let mut lock = waiter.await.unwrap();
        assert!(lock.is_held());
        lock.release().await.unwrap();
    });
}

#[test]
fn a_waiter_keeps_its_place_across_a_server_restart() {
    let mut target = Target::start("queue-restart");
    if !target.owns_server() {
        eprintln!("skipped: restarts the server, which STOA_RECIPES_ZK's is not ours to do");
        return;
    }
    let path = target.path("lock");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (mut holder, waiter) = runtime.block_on(async {
        let watcher = target.client().await;
        let mut holder = QueueLock::new(target.client().await, &path).unwrap();
        assert!(holder.acquire(None).await.unwrap());
        let mut lock = QueueLock::new(target.client().await, &path).unwrap();
        let waiter = tokio::spawn(async move {
            assert!(lock.acquire(Some(WAIT_LIMIT)).await.unwrap());
            lock
        });
        until_children(&watcher, &path, 2).await;
        (holder, waiter)
    });
    target.restart();
    runtime.block_on(async {
        tokio::time::timeout(TEST_LIMIT, async {
            tokio::time::sleep(SETTLE).await;
            assert!(!waiter.is_finished(), "granted while held");
            holder.release().await.unwrap();
            let mut lock = waiter.await.unwrap();
            lock.release().await.unwrap();
        })
        .await
        .expect("test timed out");
    });
}

#[test]
fn queue_lock_timeouts_and_cancellation_leave_no_node() {
    let target = Target::start("queue-cancel");
    run(async {
        let path = target.path("lock");
        let watcher = target.client().await;
        let mut holder = QueueLock::new(target.client().await, &path).unwrap();
        assert!(holder.acquire(None).await.unwrap());
        assert!(matches!(
            holder.acquire(None).await,
            Err(Error::InvalidArgument(_))
        ));

        let mut late = QueueLock::new(target.client().await, &path).unwrap();
        let started = Instant::now();
        assert!(!late.acquire(Some(SETTLE)).await.unwrap());
        assert!(started.elapsed() >= SETTLE);
        assert!(!late.is_held());
        assert_eq!(children(&watcher, &path).await, 1, "timed-out node left");
        assert!(matches!(
            late.release().await,
            Err(Error::InvalidArgument(_))
        ));

        let pending = QueueLock::new(target.client().await, &path)
            .unwrap()
            .lock_async(None);
        until_children(&watcher, &path, 2).await;
        pending.cancel();
        until_children(&watcher, &path, 1).await;

        // A dropped acquire future: the object finds its node again.
        let mut dropped = QueueLock::new(target.client().await, &path).unwrap();
        let _ = tokio::time::timeout(SETTLE, dropped.acquire(None)).await;
        assert_eq!(children(&watcher, &path).await, 2);
        holder.release().await.unwrap();
        assert!(dropped.acquire(Some(WAIT_LIMIT)).await.unwrap());
        assert_eq!(children(&watcher, &path).await, 1, "one node per object");
        drop(dropped);
        until_children(&watcher, &path, 0).await;
    });
}

#[test]
fn tas_lock_excludes_with_watches_and_with_polling() {
    let target = Target::start("tas");
    run(async {
        let path = target.path("tas");
        let occupancy = Occupancy::default();
        let mut workers = Vec::new();
        for worker in 0..4 {
            let client = target.client().await;
            let (path, occupancy) = (path.clone(), occupancy.clone());
            workers.push(tokio::spawn(async move {
                let mut lock = TasLock::new(client, &path).unwrap();
                for round in 0..5 {
                    let acquired = if worker % 2 == 0 {
                        lock.lock(Some(WAIT_LIMIT)).await.unwrap()
                    } else {
                        let interval = Duration::from_millis(5);
                        lock.lock_polling(interval, Some(WAIT_LIMIT)).await.unwrap()
                    };
                    assert!(acquired, "worker {worker} round {round} timed out");
                    occupancy.enter();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    occupancy.leave();
                    lock.release().await.unwrap();
                }
            }));
        }
        for worker in workers {
            worker.await.unwrap();
        }
        assert_eq!(occupancy.most(), 1);

        let mut holder = TasLock::new(target.client().await, &path).unwrap();
        assert!(holder.try_lock().await.unwrap());
        let mut other = TasLock::new(target.client().await, &path).unwrap();
        assert!(!other.try_lock().await.unwrap());
        assert!(!other.lock(Some(SETTLE)).await.unwrap());
        let polled = other.lock_polling(Duration::from_millis(10), Some(SETTLE));
        assert!(!polled.await.unwrap());
        assert!(matches!(
            other.lock_polling(Duration::ZERO, None).await,
            Err(Error::InvalidArgument(_))
        ));
        let waiting = tokio::spawn(async move {
            assert!(other.lock(Some(WAIT_LIMIT)).await.unwrap());
            other
        });
        tokio::time::sleep(SETTLE).await;
        assert!(!waiting.is_finished());
        holder.client().close().await.unwrap();
        let other = waiting.await.unwrap();
        // Dropped while held: the lock is deleted for the next.
        drop(other);
        // Sooner than its session (10 s) could expire.
        let mut last = TasLock::new(target.client().await, &path).unwrap();
        assert!(last.lock(Some(Duration::from_secs(5))).await.unwrap());
        last.release().await.unwrap();
    });
}

#[test]
fn tas_lock_passes_on_when_its_holder_crashes() {
    let target = Target::start("tas-crash");
    run(async {
        let path = target.path("tas");
        let crash_path = path.clone();
        crash_while_holding(
            target.address.clone(),
            CRASH_SESSION_TIMEOUT,
            move |client| {
                Box::pin(async move {
                    let mut lock = TasLock::new(client, &crash_path).unwrap();
                    assert!(lock.try_lock().await.unwrap());
                    lock
                })
            },
            |_| (),
        );
        let mut next = TasLock::new(target.client().await, &path).unwrap();
        assert!(!next.try_lock().await.unwrap(), "the crashed holder's node");
        let polled = next.lock_polling(Duration::from_millis(50), Some(WAIT_LIMIT));
        assert!(polled.await.unwrap());
        next.release().await.unwrap();
    });
}

#[test]
fn read_write_lock_shares_reads_and_excludes_writes_in_order() {
    let target = Target::start("rw");
    run(async {
        let path = target.path("rw");
        let watcher = target.client().await;
        let rw = ReadWriteLock::new(target.client().await, &path).unwrap();
        let mut reader_a = rw.read_lock();
        let mut reader_b = rw.read_lock();
        assert!(reader_a.acquire(Some(WAIT_LIMIT)).await.unwrap());
        assert!(reader_b.acquire(Some(WAIT_LIMIT)).await.unwrap());
        let mut blocked = rw.write_lock();
        assert!(!blocked.acquire(Some(SETTLE)).await.unwrap());

        let other = ReadWriteLock::new(target.client().await, &path).unwrap();
        let mut writer = other.write_lock();
        let writing = tokio::spawn(async move {
            assert!(writer.acquire(Some(WAIT_LIMIT)).await.unwrap());
            writer
        });
        until_children(&watcher, &path, 3).await;
        // A reader behind a queued writer waits for it.
        let mut late_reader = other.read_lock();
        let reading = tokio::spawn(async move {
            assert!(late_reader.acquire(Some(WAIT_LIMIT)).await.unwrap());
            late_reader
        });
        until_children(&watcher, &path, 4).await;
        tokio::time::sleep(SETTLE).await;
        assert!(!writing.is_finished() && !reading.is_finished());

        reader_a.release().await.unwrap();
        tokio::time::sleep(SETTLE).await;
        assert!(!writing.is_finished(), "a writer beside a reader");
        reader_b.release().await.unwrap();
        let mut writer = writing.await.unwrap();
        tokio::time::sleep(SETTLE).await;
        assert!(!reading.is_finished(), "a reader beside a writer");
        writer.release().await.unwrap();
        let mut late_reader = reading.await.unwrap();
        late_reader.release().await.unwrap();
        assert_eq!(children(&watcher, &path).await, 0);
    });
}

#[test]
fn semaphore_admits_at_most_its_permits() {
    let target = Target::start("semaphore");
    run(async {
        let path = target.path("sem");
        let occupancy = Occupancy::default();
        let mut workers = Vec::new();
        for worker in 0..5 {
            let client = target.client().await;
            let (path, occupancy) = (path.clone(), occupancy.clone());
            workers.push(tokio::spawn(async move {
                for round in 0..3 {
                    let mut permit = Semaphore::new(client.clone(), &path, 2).unwrap();
                    let acquired = permit.acquire(Some(WAIT_LIMIT)).await.unwrap();
                    assert!(acquired, "worker {worker} round {round} timed out");
                    occupancy.enter();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    occupancy.leave();
                    permit.release().await.unwrap();
                }
            }));
        }
        for worker in workers {
            worker.await.unwrap();
        }
        assert_eq!(occupancy.most(), 2, "two permits, five contenders");
        assert!(matches!(
            Semaphore::new(target.client().await, &path, 0),
            Err(Error::InvalidArgument(_))
        ));
    });
}

#[test]
fn semaphore_permit_of_a_crashed_holder_returns() {
    let target = Target::start("semaphore-crash");
    run(async {
        let path = target.path("sem");
        let mut kept = Semaphore::new(target.client().await, &path, 2).unwrap();
        assert!(kept.acquire(Some(WAIT_LIMIT)).await.unwrap());
        let crash_path = path.clone();
        crash_while_holding(
            target.address.clone(),
            CRASH_SESSION_TIMEOUT,
            move |client| {
                Box::pin(async move {
                    let mut permit = Semaphore::new(client, &crash_path, 2).unwrap();
                    assert!(permit.acquire(Some(WAIT_LIMIT)).await.unwrap());
                    permit
                })
            },
            |_| (),
        );
        let mut next = Semaphore::new(target.client().await, &path, 2).unwrap();
        assert!(next.acquire(Some(WAIT_LIMIT)).await.unwrap());
        let mut third = Semaphore::new(target.client().await, &path, 2).unwrap();
        assert!(!third.acquire(Some(SETTLE)).await.unwrap());
        kept.release().await.unwrap();
        assert!(third.acquire(Some(WAIT_LIMIT)).await.unwrap());
    });
}

#[test]
fn barrier_holds_until_lowered_then_releases_everyone() {
    let target = Target::start("barrier");
    run(async {
        let path = target.path("barrier");
        let coordinator = Barrier::new(target.client().await, &path).unwrap();
        assert!(
            coordinator.wait(Some(SETTLE)).await.unwrap(),
            "not raised yet"
        );
        coordinator.raise().await.unwrap();
        coordinator.raise().await.unwrap();
        let released = Arc::new(AtomicUsize::new(0));
        let mut waiters = Vec::new();
        for _ in 0..3 {
            let barrier = Barrier::new(target.client().await, &path).unwrap();
            let released = released.clone();
            waiters.push(tokio::spawn(async move {
                assert!(barrier.wait(Some(WAIT_LIMIT)).await.unwrap());
                released.fetch_add(1, Ordering::SeqCst);
            }));
        }
        assert!(!coordinator.wait(Some(SETTLE)).await.unwrap());
        assert_eq!(released.load(Ordering::SeqCst), 0);
        coordinator.lower().await.unwrap();
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(released.load(Ordering::SeqCst), 3);
    });
}

#[test]
fn double_barrier_enters_and_leaves_together() {
    let target = Target::start("double-barrier");
    run(async {
        let path = target.path("db");
        const SIZE: usize = 3;
        let entered = Arc::new(AtomicUsize::new(0));
        let left = Arc::new(AtomicUsize::new(0));
        let mut participants = Vec::new();
        let (go_tx, _) = tokio::sync::broadcast::channel::<()>(1);
        let leave_now = Arc::new(tokio::sync::Notify::new());
        for id in 0..SIZE {
            let client = target.client().await;
            let (path, entered, left) = (path.clone(), entered.clone(), left.clone());
            let mut go = go_tx.subscribe();
            let leave_now = leave_now.clone();
            participants.push(tokio::spawn(async move {
                let mut barrier = DoubleBarrier::new(client, &path, SIZE).unwrap();
                if id == SIZE - 1 {
                    go.recv().await.unwrap();
                }
                assert!(barrier.enter(Some(WAIT_LIMIT)).await.unwrap());
                entered.fetch_add(1, Ordering::SeqCst);
                if id == SIZE - 1 {
                    leave_now.notified().await;
                }
                assert!(barrier.leave(Some(WAIT_LIMIT)).await.unwrap());
                left.fetch_add(1, Ordering::SeqCst);
            }));
        }
        tokio::time::sleep(SETTLE).await;
        assert_eq!(entered.load(Ordering::SeqCst), 0, "entered before all came");
        go_tx.send(()).unwrap();
        let deadline = Instant::now() + WAIT_LIMIT;
        while entered.load(Ordering::SeqCst) < SIZE {
            assert!(Instant::now() < deadline, "not everyone entered");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(SETTLE).await;
        assert_eq!(left.load(Ordering::SeqCst), 0, "left before all left");
        leave_now.notify_one();
        for participant in participants {
            participant.await.unwrap();
        }
        assert_eq!(left.load(Ordering::SeqCst), SIZE);
        let watcher = target.client().await;
        assert_eq!(children(&watcher, &path).await, 0, "members or ready left");

        let mut alone = DoubleBarrier::new(target.client().await, &path, 2).unwrap();
        assert!(!alone.enter(Some(SETTLE)).await.unwrap());
        assert_eq!(children(&watcher, &path).await, 0, "a withdrawn member");
        assert!(DoubleBarrier::new(watcher, &path, 0).is_err());
    });
}

#[test]
fn election_follows_resignation_and_death() {
    let target = Target::start("election");
    run(async {
        let path = target.path("election");
        let observer = target.client().await;
        assert_eq!(
            LeaderElection::current_leader(&observer, &path)
                .await
                .unwrap(),
            None
        );
        let mut first = LeaderElection::new(target.client().await, &path, b"one").unwrap();
        assert!(first.campaign(Some(WAIT_LIMIT)).await.unwrap());
        assert!(first.is_leader());
        let mut candidates = Vec::new();
        for id in [b"two", b"six"] {
            let mut candidate = LeaderElection::new(target.client().await, &path, id).unwrap();
            candidates.push(tokio::spawn(async move {
                assert!(candidate.campaign(Some(WAIT_LIMIT)).await.unwrap());
                candidate
            }));
            until_children(&observer, &path, candidates.len() + 1).await;
        }
        assert_eq!(first.leader().await.unwrap().as_deref(), Some(&b"one"[..]));
        first.resign().await.unwrap();
        assert!(!first.is_leader());
        let mut candidates = candidates.into_iter();
        let second = candidates.next().unwrap().await.unwrap();
        assert!(second.is_leader());
        let leader = LeaderElection::current_leader(&observer, &path).await;
        assert_eq!(leader.unwrap().as_deref(), Some(&b"two"[..]));
        let third = candidates.next().unwrap();
        tokio::time::sleep(SETTLE).await;
        assert!(!third.is_finished(), "two leaders");
        // The leader dies: its session closes without resigning.
        second.client().close().await.unwrap();
        let third = third.await.unwrap();
        assert!(third.is_leader());
        let leader = LeaderElection::current_leader(&observer, &path).await;
        assert_eq!(leader.unwrap().as_deref(), Some(&b"six"[..]));
    });
}

#[test]
fn counter_loses_no_concurrent_increment() {
    let target = Target::start("counter");
    run(async {
        let path = target.path("counter");
        let mut adders = Vec::new();
        for _ in 0..4 {
            let counter = Counter::new(target.client().await, &path).unwrap();
            adders.push(tokio::spawn(async move {
                for _ in 0..25 {
                    counter.increment().await.unwrap();
                }
            }));
        }
        for adder in adders {
            adder.await.unwrap();
        }
        let counter = Counter::new(target.client().await, &path).unwrap();
        assert_eq!(counter.get().await.unwrap(), 100);
        assert_eq!(counter.add(-10).await.unwrap(), 90);
        assert!(matches!(
            counter.add(i64::MAX).await,
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(counter.get().await.unwrap(), 90);
        let client = target.client().await;
        client.set_data(&path, b"ninety", -1).await.unwrap();
        assert!(matches!(
            counter.get().await,
            Err(Error::InvalidArgument(_))
        ));
    });
}

#[test]
fn queue_hands_out_each_item_once_in_fifo_order() {
    let target = Target::start("queue");
    run(async {
        let path = target.path("queue");
        let producer = DistributedQueue::new(target.client().await, &path).unwrap();
        assert_eq!(producer.poll().await.unwrap(), None);
        for item in 0..12u8 {
            producer.offer(&[item]).await.unwrap();
        }
        assert_eq!(producer.len().await.unwrap(), 12);
        let mut consumers = Vec::new();
        for _ in 0..3 {
            let queue = DistributedQueue::new(target.client().await, &path).unwrap();
            consumers.push(tokio::spawn(async move {
                let mut taken = Vec::new();
                while let Some(item) = queue.poll().await.unwrap() {
                    taken.push(item[0]);
                }
                taken
            }));
        }
        let mut all = Vec::new();
        for consumer in consumers {
            let taken = consumer.await.unwrap();
            assert!(taken.windows(2).all(|w| w[0] < w[1]), "{taken:?}");
            all.extend(taken);
        }
        all.sort();
        assert_eq!(all, (0..12).collect::<Vec<u8>>());

        let started = Instant::now();
        assert_eq!(producer.take(Some(SETTLE)).await.unwrap(), None);
        assert!(started.elapsed() >= SETTLE);
        let consumer = DistributedQueue::new(target.client().await, &path).unwrap();
        let taking = tokio::spawn(async move { consumer.take(Some(WAIT_LIMIT)).await.unwrap() });
        tokio::time::sleep(SETTLE).await;
        producer.offer(b"late").await.unwrap();
        assert_eq!(taking.await.unwrap().as_deref(), Some(&b"late"[..]));
    });
}

#[test]
fn priority_queue_orders_by_priority_then_arrival() {
    let target = Target::start("priority-queue");
    run(async {
        let path = target.path("pq");
        let queue = PriorityQueue::new(target.client().await, &path).unwrap();
        for (priority, item) in [(5, "e1"), (1, "a1"), (5, "e2"), (0, "z1"), (1, "a2")] {
            queue.offer(priority, item.as_bytes()).await.unwrap();
        }
        let mut taken = Vec::new();
        while let Some(item) = queue.poll().await.unwrap() {
            taken.push(String::from_utf8(item).unwrap());
        }
        assert_eq!(taken, ["z1", "a1", "a2", "e1", "e2"]);
    });
}

#[test]
fn recipes_refuse_bad_paths() {
    let target = Target::start("bad-input");
    run(async {
        let client = target.client().await;
        assert!(matches!(
            QueueLock::new(client.clone(), "/"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            TasLock::new(client.clone(), "relative"),
            Err(Error::InvalidPath { .. })
        ));
        assert!(matches!(
            Counter::new(client, "/trailing/"),
            Err(Error::InvalidPath { .. })
        ));
    });
}
