//! A client that uses several ensembles as one tree, consistently: ZooNet's
//! modular composition (Lev-Ari et al., "Modular Composition of
//! Coordination Services", USENIX ATC 2016), plus a virtual session.
//!
//! A [`MountTable`] gives each ensemble a subtree; [`ComposedClient`] sends
//! each call to the ensemble that owns its path, with the path unchanged
//! (so plain clients of that ensemble see the same paths). Each ensemble
//! alone is linearizable for updates and sequentially consistent for
//! reads; used naively together they are not (a client can read a new
//! value in one and then an old one in the other). The composed client
//! restores sequential consistency across all of them with Algorithm 1
//! (see `order`): it sends calls in the order they were made, never has
//! calls in flight to two ensembles at once, and sends a linearizable sync
//! to an ensemble before the read that switches to it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), stoa_client::Error> {
//! use stoa_client::{open_acl_unsafe, ClientOptions, ComposedClient, CreateMode, MountTable};
//! let table: MountTable = "/eu=eu1:2181,eu2:2181;/us=us1:2181".parse()?;
//! let client = ComposedClient::connect(table, ClientOptions::default()).await?;
//! client
//!     .create("/eu/config", b"v1", &open_acl_unsafe(), CreateMode::Persistent)
//!     .await?;
//! // Switching to /us for a read: a sync goes there first.
//! let (_data, _stat) = client.get_data("/us/leader", false).await?;
//! assert_eq!(client.stats().syncs_injected, 1);
//! client.close().await?;
//! # Ok(()) }
//! ```
//!
//! "The order the calls were made" is the order their futures are first
//! polled (`.await`ed, or polled by `join!` or a spawned task), not the
//! order in which the methods were called: a Rust future does nothing
//! until polled. A call counts as complete when its future returns (or is
//! dropped), so a started call must be driven to the end for calls to
//! other ensembles to go out: polling a call once and then awaiting a call
//! to another ensemble in the same task, without polling the first again,
//! never finishes.

mod mount;
mod order;

use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use stoa_proto::opcode::{AddWatchMode, CreateMode, KeeperState, WatcherType};
use stoa_proto::records::{Acl, Stat};
use stoa_proto::response::MultiResult;
use tokio::sync::{mpsc, oneshot};

use crate::acl::open_acl_unsafe;
use crate::client::{Client, ClientOptions};
use crate::error::Error;
use crate::op::Op;
use crate::session::SessionState;
use crate::watch::WatchedEvent;

pub use mount::{Mount, MountTable, SyncMode, DEFAULT_SYNC_NODE};
pub use order::ComposeStats;
use order::{Access, Admission, Dispatch, MountId, Sequencer, Ticket};

/// One session per mount, used as one.
///
/// Every method of [`Client`] that names a path is here with the same
/// signature; it runs on the session of the mount that owns the path.
/// Calls from any number of tasks may be in flight at once; see the module
/// documentation for the order they take effect in. Clone it to share it.
///
/// All member sessions are opened by [`ComposedClient::connect`], so a
/// missing ensemble is found at once rather than at the first call there.
///
/// The members form a virtual session: when one expires, the others are
/// closed (so their ephemeral nodes go too) and every later call fails
/// with `SessionExpired`.
#[derive(Debug, Clone)]
pub struct ComposedClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    table: MountTable,
    /// `members[i]` is the session with `table.mounts()[i]`.
    members: Vec<Client>,
    dispatcher: Mutex<Dispatcher>,
    expired: AtomicBool,
    closed: AtomicBool,
}

/// The sequencer and the held calls waiting for its go-ahead. Locked only
/// for short stretches without awaits.
#[derive(Debug, Default)]
struct Dispatcher {
    sequencer: Sequencer,
    waiters: HashMap<Ticket, oneshot::Sender<()>>,
}

impl Dispatcher {
    /// Wakes the held call that may now start, if any.
    fn wake_ready(&mut self) {
        if let Some(ticket) = self.sequencer.next_ready() {
            let waiter = self.waiters.remove(&ticket);
            assert!(waiter.is_some(), "ready call {ticket} has no waiter");
            if let Some(waiter) = waiter {
                // A waiter that is gone cancels its ticket when dropped,
                // which wakes the next one.
                let _ = waiter.send(());
            }
        }
    }
}

impl ComposedClient {
    /// Opens a session with every mount's ensemble, with `options` for
    /// each. For [`SyncMode::Write`] mounts it creates the sync node (and
    /// the prefix above it) if missing. If any member fails to connect, the
    /// others are closed and its error returned.
    pub async fn connect(table: MountTable, options: ClientOptions) -> Result<Self, Error> {
        if options.session.is_some() {
            return Err(Error::InvalidArgument(
                "a composed client cannot resume a session: it has one per mount".into(),
            ));
        }
        let mut members: Vec<Client> = Vec::with_capacity(table.mounts().len());
        for mount in table.mounts() {
            match Self::connect_member(mount, &options).await {
                Ok(client) => members.push(client),
                Err(error) => {
                    for member in &members {
                        let _ = member.close().await;
                    }
                    return Err(match error {
                        // Say which mount could not be reached.
                        Error::Io(io) => Error::Io(std::io::Error::new(
                            io.kind(),
                            format!("mount {} ({}): {io}", mount.prefix, mount.hosts),
                        )),
                        other => other,
                    });
                }
            }
        }
        let inner = Arc::new(Inner {
            table,
            members,
            dispatcher: Mutex::default(),
            expired: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        for (mount, member) in inner.members.iter().enumerate() {
            tokio::spawn(watch_for_expiry(
                Arc::downgrade(&inner),
                mount,
                member.events(),
            ));
        }
        Ok(ComposedClient { inner })
    }

    async fn connect_member(mount: &Mount, options: &ClientOptions) -> Result<Client, Error> {
        let client = Client::connect(&mount.hosts, options.clone()).await?;
        if mount.sync_mode == SyncMode::Write {
            if let Err(error) = ensure_path(&client, &mount.sync_node).await {
                let _ = client.close().await;
                return Err(error);
            }
        }
        Ok(client)
    }

    /// The table this client was connected with.
    pub fn mount_table(&self) -> &MountTable {
        &self.inner.table
    }

    /// The session with the mount of exactly this prefix, for what the
    /// composed client does not offer (session ids, `whoami`). Calls made
    /// on it bypass the composed client's ordering.
    pub fn member(&self, prefix: &str) -> Option<&Client> {
        let index = self
            .inner
            .table
            .mounts()
            .iter()
            .position(|mount| mount.prefix == prefix)?;
        Some(&self.inner.members[index])
    }

    /// What Algorithm 1 has done so far.
    pub fn stats(&self) -> ComposeStats {
        self.inner.lock().sequencer.stats()
    }

    /// `Expired` once any member expired, `Closed` after `close`,
    /// `Connected` when every member is, else `Connecting`.
    pub fn state(&self) -> SessionState {
        if self.inner.expired.load(Ordering::Acquire) {
            return SessionState::Expired;
        }
        if self.inner.closed.load(Ordering::Acquire) {
            return SessionState::Closed;
        }
        let all_connected = self
            .inner
            .members
            .iter()
            .all(|member| member.state() == SessionState::Connected);
        if all_connected {
            SessionState::Connected
        } else {
            SessionState::Connecting
        }
    }

    /// A new stream of every member's watch events and state changes, from
    /// now on.
    ///
    /// Events of one ensemble come in that ensemble's order. Each event is
    /// on the stream before the reply to any call that follows it on its
    /// session: no composed read returns a state whose watch event is not
    /// already on the stream. Events of different ensembles that the
    /// client has not read come in the order they arrived. State events
    /// (empty path) do not say which mount they concern; on expiry the
    /// expired member's `Expired` comes first, then `Closed` from the
    /// others.
    pub fn events(&self) -> mpsc::UnboundedReceiver<WatchedEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        for member in &self.inner.members {
            member.forward_events(tx.clone());
        }
        rx
    }

    /// Closes every member session.
    pub async fn close(&self) -> Result<(), Error> {
        self.inner.closed.store(true, Ordering::Release);
        let mut first_error = None;
        for member in &self.inner.members {
            if let Err(error) = member.close().await {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Adds credentials to every member session, one after another, outside
    /// the ordering of other calls.
    pub async fn add_auth(&self, scheme: &str, auth: &[u8]) -> Result<(), Error> {
        self.inner.check_live("")?;
        for member in &self.inner.members {
            member.add_auth(scheme, auth).await?;
        }
        Ok(())
    }

    /// [`Client::create`] on the mount that owns `path`.
    pub async fn create(
        &self,
        path: &str,
        data: &[u8],
        acl: &[Acl],
        mode: CreateMode,
    ) -> Result<String, Error> {
        self.route(path, Access::Update, |c| c.create(path, data, acl, mode))
            .await
    }

    /// [`Client::create2`] on the mount that owns `path`.
    pub async fn create2(
        &self,
        path: &str,
        data: &[u8],
        acl: &[Acl],
        mode: CreateMode,
    ) -> Result<(String, Stat), Error> {
        self.route(path, Access::Update, |c| c.create2(path, data, acl, mode))
            .await
    }

    /// [`Client::create_ttl`] on the mount that owns `path`.
    pub async fn create_ttl(
        &self,
        path: &str,
        data: &[u8],
        acl: &[Acl],
        mode: CreateMode,
        ttl: Duration,
    ) -> Result<(String, Stat), Error> {
        self.route(path, Access::Update, |c| {
            c.create_ttl(path, data, acl, mode, ttl)
        })
        .await
    }

    /// [`Client::create_container`] on the mount that owns `path`.
    pub async fn create_container(
        &self,
        path: &str,
        data: &[u8],
        acl: &[Acl],
    ) -> Result<(String, Stat), Error> {
        self.route(path, Access::Update, |c| {
            c.create_container(path, data, acl)
        })
        .await
    }

    /// [`Client::delete`] on the mount that owns `path`.
    pub async fn delete(&self, path: &str, version: i32) -> Result<(), Error> {
        self.route(path, Access::Update, |c| c.delete(path, version))
            .await
    }

    /// [`Client::exists`] on the mount that owns `path`; a read.
    pub async fn exists(&self, path: &str, watch: bool) -> Result<Option<Stat>, Error> {
        self.route(path, Access::Read, |c| c.exists(path, watch))
            .await
    }

    /// [`Client::get_data`] on the mount that owns `path`; a read.
    pub async fn get_data(&self, path: &str, watch: bool) -> Result<(Vec<u8>, Stat), Error> {
        self.route(path, Access::Read, |c| c.get_data(path, watch))
            .await
    }

    /// [`Client::get_nullable_data`] on the mount that owns `path`; a read.
    pub async fn get_nullable_data(
        &self,
        path: &str,
        watch: bool,
    ) -> Result<(Option<Vec<u8>>, Stat), Error> {
        self.route(path, Access::Read, |c| c.get_nullable_data(path, watch))
            .await
    }

    /// [`Client::set_data`] on the mount that owns `path`.
    pub async fn set_data(&self, path: &str, data: &[u8], version: i32) -> Result<Stat, Error> {
        self.route(path, Access::Update, |c| c.set_data(path, data, version))
            .await
    }

    /// [`Client::get_acl`] on the mount that owns `path`; a read.
    pub async fn get_acl(&self, path: &str) -> Result<(Vec<Acl>, Stat), Error> {
        self.route(path, Access::Read, |c| c.get_acl(path)).await
    }

    /// [`Client::set_acl`] on the mount that owns `path`.
    pub async fn set_acl(&self, path: &str, acl: &[Acl], version: i32) -> Result<Stat, Error> {
        self.route(path, Access::Update, |c| c.set_acl(path, acl, version))
            .await
    }

    /// [`Client::get_children`] on the mount that owns `path`; a read. A
    /// mount nested below `path` does not appear unless its ensemble holds
    /// the node.
    pub async fn get_children(&self, path: &str, watch: bool) -> Result<Vec<String>, Error> {
        self.route(path, Access::Read, |c| c.get_children(path, watch))
            .await
    }

    /// [`Client::get_children2`] on the mount that owns `path`; a read.
    pub async fn get_children2(
        &self,
        path: &str,
        watch: bool,
    ) -> Result<(Vec<String>, Stat), Error> {
        self.route(path, Access::Read, |c| c.get_children2(path, watch))
            .await
    }

    /// Counts the nodes below `path` on its mount's ensemble only (mounts
    /// nested below it are not counted).
    pub async fn get_all_children_number(&self, path: &str) -> Result<usize, Error> {
        self.route(path, Access::Read, |c| c.get_all_children_number(path))
            .await
    }

    /// This session's ephemerals under `prefix` on the ensemble of the
    /// mount that owns `prefix`.
    pub async fn get_ephemerals(&self, prefix: &str) -> Result<Vec<String>, Error> {
        self.route(prefix, Access::Read, |c| c.get_ephemerals(prefix))
            .await
    }

    /// The ensemble's own `sync` for `path`'s mount (the composed client
    /// already syncs where consistency needs it). In [`SyncMode::Sync`] it
    /// is linearizable and counts as an update; in [`SyncMode::Write`] (for
    /// ZooKeeper, where it is not) as a read, so a sync is injected before
    /// it after a switch.
    pub async fn sync(&self, path: &str) -> Result<String, Error> {
        let mount = self.inner.route(path)?;
        let access = match self.inner.table.mounts()[mount].sync_mode {
            SyncMode::Sync => Access::Update,
            SyncMode::Write => Access::Read,
        };
        self.run(mount, path, access, |c| c.sync(path)).await
    }

    /// Atomic writes, all on one mount: ops on paths of several mounts are
    /// refused with [`Error::CrossMount`]. An empty multi returns no
    /// results without contacting any ensemble.
    pub async fn multi(&self, ops: Vec<Op>) -> Result<Vec<MultiResult>, Error> {
        let Some(mount) = self.inner.route_ops(&ops)? else {
            return Ok(Vec::new());
        };
        let path = ops[0].path().to_owned();
        self.run(mount, &path, Access::Update, |c| c.multi(ops))
            .await
    }

    /// Reads, all on one mount (else [`Error::CrossMount`]). An injected
    /// sync names the first op's path.
    pub async fn multi_read(&self, ops: Vec<Op>) -> Result<Vec<MultiResult>, Error> {
        let Some(mount) = self.inner.route_ops(&ops)? else {
            return Ok(Vec::new());
        };
        let path = ops[0].path().to_owned();
        self.run(mount, &path, Access::Read, |c| c.multi_read(ops))
            .await
    }

    /// A persistent watch on `path`'s mount. A recursive watch does not
    /// reach into mounts nested below `path`.
    pub async fn add_watch(&self, path: &str, mode: AddWatchMode) -> Result<(), Error> {
        self.route(path, Access::Read, |c| c.add_watch(path, mode))
            .await
    }

    /// [`Client::remove_watches`] on the mount that owns `path`.
    pub async fn remove_watches(&self, path: &str, kind: WatcherType) -> Result<(), Error> {
        self.route(path, Access::Update, |c| c.remove_watches(path, kind))
            .await
    }

    async fn route<'a, T, F>(
        &'a self,
        path: &str,
        access: Access,
        call: impl FnOnce(&'a Client) -> F,
    ) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>>,
    {
        let mount = self.inner.route(path)?;
        self.run(mount, path, access, call).await
    }

    /// Runs `call` on `mount`'s session when Algorithm 1 lets it go, after
    /// the injected sync when it says so.
    ///
    /// The decision and the sending happen under the dispatcher's lock: a
    /// member's calls are queued on its session in the order decided (a
    /// `Client` call queues its request in its first poll, done here
    /// synchronously). Nothing awaits under the lock.
    async fn run<'a, T, F>(
        &'a self,
        mount: MountId,
        path: &str,
        access: Access,
        call: impl FnOnce(&'a Client) -> F,
    ) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>>,
    {
        let inner = &*self.inner;
        inner.check_live(path)?;
        let mut call = pin!(call(&inner.members[mount]));
        let waker = poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;

        let admission = {
            let mut dispatcher = inner.lock();
            match dispatcher.sequencer.admit(mount, access) {
                Admission::Go(dispatch) => Ok(start(dispatch, &waker, inner, path, call.as_mut())),
                Admission::Hold(ticket) => {
                    let (tx, rx) = oneshot::channel();
                    dispatcher.waiters.insert(ticket, tx);
                    Err((ticket, rx))
                }
            }
        };
        let started = match admission {
            Ok(started) => started,
            Err((ticket, go_ahead)) => {
                let mut held = HeldCall {
                    inner,
                    ticket: Some(ticket),
                };
                // The sender lives in the dispatcher until it is used.
                let _ = go_ahead.await;
                // Expired while waiting: give the turn to the next call
                // (dropping `held` does) rather than reach a member the
                // expiry is closing.
                inner.check_live(path)?;
                // The context this future is polled in now.
                let waker = poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
                let mut dispatcher = inner.lock();
                held.ticket = None;
                let dispatch = dispatcher.sequencer.start_held(ticket);
                let started = start(dispatch, &waker, inner, path, call.as_mut());
                dispatcher.wake_ready();
                started
            }
        };

        let mut in_flight = InFlight {
            inner,
            mount,
            calls: started.dispatch.in_flight(),
            sync_unconfirmed: started.dispatch.sync_first,
        };
        let sync_result = match started.sync {
            None => Ok(()),
            Some(InjectedSync::Done(result)) => result,
            Some(InjectedSync::Pending(sync)) => sync.await,
        };
        in_flight.sync_unconfirmed = sync_result.is_err();
        let result = match started.call {
            Poll::Ready(result) => result,
            Poll::Pending => call.await,
        };
        drop(in_flight);
        // A read after a failed sync may be stale: it fails with the
        // sync's error.
        let result = sync_result.and(result);
        inner.observe(mount, path, result)
    }
}

/// What sending a dispatched call gave at once.
struct Started<'a, T> {
    dispatch: Dispatch,
    /// The injected sync, if one was sent.
    sync: Option<InjectedSync<'a>>,
    call: Poll<Result<T, Error>>,
}

/// An injected sync after its first poll. Boxed: it exists only when the
/// target changes, and keeps every other call's future small.
enum InjectedSync<'a> {
    Done(Result<(), Error>),
    Pending(Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>),
}

/// Sends the dispatched call (after its sync, if any) by polling each once.
fn start<'a, T>(
    dispatch: Dispatch,
    waker: &Waker,
    inner: &'a Inner,
    path: &'a str,
    call: Pin<&mut impl Future<Output = Result<T, Error>>>,
) -> Started<'a, T> {
    let mut cx = Context::from_waker(waker);
    let sync = dispatch.sync_first.then(|| {
        let mut sync = Box::pin(inner.linearize(dispatch.mount, path));
        match sync.as_mut().poll(&mut cx) {
            Poll::Ready(result) => InjectedSync::Done(result),
            Poll::Pending => InjectedSync::Pending(sync),
        }
    });
    let call = call.poll(&mut cx);
    Started {
        dispatch,
        sync,
        call,
    }
}

/// A held call; dropping it before it starts takes it out of the queue.
struct HeldCall<'a> {
    inner: &'a Inner,
    /// None once started.
    ticket: Option<Ticket>,
}

impl Drop for HeldCall<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket {
            let mut dispatcher = self.inner.lock();
            dispatcher.sequencer.cancel(ticket);
            dispatcher.waiters.remove(&ticket);
            dispatcher.wake_ready();
        }
    }
}

/// Calls in flight for one composed call. Dropping it completes them: a
/// call whose future is dropped counts as complete at that moment.
struct InFlight<'a> {
    inner: &'a Inner,
    mount: MountId,
    calls: usize,
    /// The injected sync was sent and has not (yet) succeeded.
    sync_unconfirmed: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut dispatcher = self.inner.lock();
        if self.sync_unconfirmed {
            dispatcher.sequencer.sync_failed(self.mount);
        }
        for _ in 0..self.calls {
            dispatcher.sequencer.complete();
        }
        dispatcher.wake_ready();
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Dispatcher> {
        // Plain data; a panic elsewhere leaves it usable.
        self.dispatcher
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn route(&self, path: &str) -> Result<MountId, Error> {
        self.table.route(path).ok_or_else(|| Error::NoMount {
            path: path.to_owned(),
            mounts: self.table.prefixes(),
        })
    }

    /// The one mount all `ops` name (None for no ops).
    fn route_ops(&self, ops: &[Op]) -> Result<Option<MountId>, Error> {
        let mut mounts: Vec<MountId> = Vec::new();
        for op in ops {
            let mount = self.route(op.path())?;
            if !mounts.contains(&mount) {
                mounts.push(mount);
            }
        }
        if mounts.len() > 1 {
            return Err(Error::CrossMount {
                mounts: mounts
                    .iter()
                    .map(|&m| self.table.mounts()[m].prefix.clone())
                    .collect(),
            });
        }
        Ok(mounts.first().copied())
    }

    fn check_live(&self, path: &str) -> Result<(), Error> {
        if self.expired.load(Ordering::Acquire) {
            return Err(Error::SessionExpired {
                path: path.to_owned(),
            });
        }
        Ok(())
    }

    /// Makes `mount`'s ensemble linearize before a read of `path`: its
    /// sync on that path (with partitions, Stoa orders a sync in the
    /// partition that owns the path), or a no-op write.
    async fn linearize(&self, mount: MountId, path: &str) -> Result<(), Error> {
        let member = &self.members[mount];
        let spec = &self.table.mounts()[mount];
        match spec.sync_mode {
            SyncMode::Sync => member.sync(path).await.map(drop),
            SyncMode::Write => match member.set_data(&spec.sync_node, b"", -1).await {
                Ok(_) => Ok(()),
                // Someone deleted the node. The refused write was still
                // ordered by the leader (ZooKeeper and Stoa commit it as an
                // error transaction), so the sync held; make the node again
                // for the next one.
                Err(Error::NoNode { .. }) => {
                    if let Err(error) = ensure_path(member, &spec.sync_node).await {
                        log::warn!("recreating sync node {}: {error}", spec.sync_node);
                    }
                    Ok(())
                }
                Err(error) => Err(error),
            },
        }
    }

    /// A call's result, seen by the virtual session: a member's expiry
    /// expires the composite, and after that every failure reads as
    /// `SessionExpired`.
    fn observe<T>(&self, mount: MountId, path: &str, result: Result<T, Error>) -> Result<T, Error> {
        if let Err(Error::SessionExpired { .. }) = result {
            self.expire(mount);
        }
        match result {
            Err(_) if self.expired.load(Ordering::Acquire) => Err(Error::SessionExpired {
                path: path.to_owned(),
            }),
            other => other,
        }
    }

    /// Ends the virtual session because member `cause` expired: the other
    /// members are closed, so their ephemeral nodes go too.
    fn expire(&self, cause: MountId) {
        if self.expired.swap(true, Ordering::AcqRel) {
            return;
        }
        log::info!(
            "composed session expired: the session with {} expired; closing the others",
            self.table.mounts()[cause].prefix
        );
        for (index, member) in self.members.iter().enumerate() {
            if index != cause {
                tokio::spawn(close_member(member.clone()));
            }
        }
    }
}

/// Expires the composite when member `mount` reports its session expired.
async fn watch_for_expiry(
    inner: Weak<Inner>,
    mount: MountId,
    mut events: mpsc::UnboundedReceiver<WatchedEvent>,
) {
    while let Some(event) = events.recv().await {
        if event.state == KeeperState::Expired {
            if let Some(inner) = inner.upgrade() {
                inner.expire(mount);
            }
            return;
        }
    }
}

/// Pause between attempts to close a member that lost its connection.
const CLOSE_RETRY: Duration = Duration::from_millis(100);

/// Closes a member of an expired virtual session. While its connection is
/// down, close fails with ConnectionLoss; it is tried again until it lands
/// or the session timeout has passed (by then the ensemble expires the
/// session itself, ephemerals included).
async fn close_member(member: Client) {
    let deadline = tokio::time::Instant::now() + member.negotiated_timeout();
    loop {
        match member.close().await {
            Err(Error::ConnectionLoss { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(CLOSE_RETRY).await;
            }
            Ok(()) => return,
            Err(error) => {
                log::warn!("closing a member of an expired composed session: {error}");
                return;
            }
        }
    }
}

/// Creates `path` and its missing ancestors (empty, open ACL).
async fn ensure_path(client: &Client, path: &str) -> Result<(), Error> {
    let mut end = 0;
    while end < path.len() {
        end = path[end + 1..]
            .find('/')
            .map_or(path.len(), |i| end + 1 + i);
        let prefix = &path[..end];
        match client
            .create(prefix, b"", &open_acl_unsafe(), CreateMode::Persistent)
            .await
        {
            Ok(_) | Err(Error::NodeExists { .. }) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}
