//! The `Client` handle: one async method per ZooKeeper operation. Handles
//! are cheap to clone and share one session; any number of calls may be in
//! flight at once, and they take effect in the order they were made.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use stoa_proto::opcode::{AddWatchMode, CreateMode, WatcherType};
use stoa_proto::records::*;
use stoa_proto::request::Request;
use stoa_proto::response::{MultiResult, Response};
use tokio::sync::{mpsc, oneshot};

use crate::error::Error;
use crate::op::{duration_ms, Op};
use crate::path::validate_path;
use crate::session::{handshake, new_shared, Call, Handshake, Hosts, SessionState, Shared, Task};
use crate::watch::{WatchKind, WatchedEvent};

/// How to connect.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Asked of the server, which bounds it (by default to 2 to 20 ticks).
    pub session_timeout: Duration,
    /// Limit for one TCP connect plus handshake to one host.
    pub connect_timeout: Duration,
    /// Resume this session (id, password from [`Client::session_id`] and
    /// [`Client::session_password`]) instead of opening a new one.
    pub session: Option<(i64, Vec<u8>)>,
}

/// Session timeout zkCli asks for by default.
const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            session: None,
        }
    }
}

/// A ZooKeeper session. Clone it to share the session between tasks.
/// Dropping every handle without [`Client::close`] leaves the session to
/// expire on the server.
#[derive(Debug, Clone)]
pub struct Client {
    tx: mpsc::UnboundedSender<Call>,
    shared: Arc<Shared>,
}

impl Client {
    /// Connects to the first host of `hosts` (`"h1:p1,h2:p2"`) that
    /// answers and opens a new session. Must run inside a tokio runtime:
    /// the session's background task is spawned on it.
    pub async fn connect(hosts: &str, options: ClientOptions) -> Result<Client, Error> {
        let mut hosts = Hosts::parse(hosts)?;
        let mut last_error = None;
        for _ in 0..hosts.len() {
            let host = hosts.next();
            let mut hello = Handshake::new_session(options.session_timeout);
            if let Some((session_id, password)) = &options.session {
                hello.session_id = *session_id;
                hello.password = password.clone();
            }
            match handshake(host.clone(), hello, options.connect_timeout).await {
                Ok((_, response)) if response.time_out <= 0 => {
                    return Err(Error::SessionExpired {
                        path: String::new(),
                    });
                }
                Ok((stream, response)) => {
                    log::debug!(
                        "session {:#x} opened on {host}, timeout {} ms",
                        response.session_id,
                        response.time_out
                    );
                    let shared = new_shared(&response, host);
                    let (tx, rx) = mpsc::unbounded_channel();
                    let task = Task {
                        shared: Arc::clone(&shared),
                        hosts,
                        requested_timeout: options.session_timeout,
                        connect_timeout: options.connect_timeout,
                        rx,
                        next_xid: 1,
                        backlog: VecDeque::new(),
                        rx_closed: false,
                    };
                    tokio::spawn(task.run(stream));
                    return Ok(Client { tx, shared });
                }
                Err(e) => {
                    log::debug!("connecting to {host} failed: {e}");
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| Error::InvalidArgument("no hosts".into())))
    }

    pub fn session_id(&self) -> i64 {
        self.shared.session_id()
    }

    pub fn session_password(&self) -> Vec<u8> {
        self.shared.password()
    }

    /// The session timeout the server granted.
    pub fn negotiated_timeout(&self) -> Duration {
        self.shared.negotiated_timeout()
    }

    /// The zxid of the last reply: the newest state this client has seen.
    pub fn last_zxid(&self) -> i64 {
        self.shared.last_zxid()
    }

    pub fn state(&self) -> SessionState {
        self.shared.state()
    }

    /// `host:port` of the server currently (or last) connected to.
    pub fn connected_host(&self) -> String {
        self.shared.host()
    }

    /// A new stream of this session's watch events and connection state
    /// changes, from now on. Each call gets its own copy of every event.
    pub fn events(&self) -> mpsc::UnboundedReceiver<WatchedEvent> {
        self.shared.subscribe()
    }

    /// Sends this session's events to `tx` as well: how a composed
    /// client merges its members' events into one stream.
    pub(crate) fn forward_events(&self, tx: mpsc::UnboundedSender<WatchedEvent>) {
        self.shared.add_subscriber(tx);
    }

    // Every method sends its request to the session task in its first poll
    // (nothing before `tx.send` awaits): `compose` relies on this to queue
    // calls on a member session in the order it decided.
    async fn call(
        &self,
        path: &str,
        request: Request,
        watch: Option<WatchKind>,
    ) -> Result<Response, Error> {
        let (reply, answer) = oneshot::channel();
        let call = Call {
            request,
            path: path.to_owned(),
            watch,
            reply,
        };
        if self.tx.send(call).is_err() {
            return Err(self.shared.terminal_error(path));
        }
        match answer.await {
            Ok(result) => result,
            Err(_) => Err(self.shared.terminal_error(path)),
        }
    }

    fn unexpected(path: &str, response: Response) -> Error {
        Error::Protocol(format!("unexpected reply {response:?} for {path}"))
    }

    /// Creates a node and returns its path (with the sequence number for
    /// sequential modes). `Container` sends a createContainer request, as
    /// ZooKeeper's client does; TTL modes need [`Client::create_ttl`].
    pub async fn create(
        &self,
        path: &str,
        data: &[u8],
        acl: &[Acl],
        mode: CreateMode,
    ) -> Result<String, Error> {
        validate_path(path, mode.is_sequential())?;
        let request = create_request(path, data, acl, mode, false)?;
        match self.call(path, request, None).await? {
            Response::Create(r) => Ok(r.path),
            Response::Create2(r) => Ok(r.path),
            other => Err(Self::unexpected(path, other)),
        }
    }

    /// Creates a node and returns its path and stat.
    pub async fn create2(
        &self,
        path: &str,
        data: &[u8],
        acl: &[Acl],
        mode: CreateMode,
    ) -> Result<(String, Stat), Error> {
        validate_path(path, mode.is_sequential())?;
        let request = create_request(path, data, acl, mode, true)?;
        self.created(path, request).await
    }

    /// Creates a node that the server deletes once it has had no children
    /// and no changes for `ttl` (`mode`: `PersistentWithTtl` or
    /// `PersistentSequentialWithTtl`).
    pub async fn create_ttl(
        &self,
        path: &str,
        data: &[u8],
        acl: &[Acl],
        mode: CreateMode,
        ttl: Duration,
    ) -> Result<(String, Stat), Error> {
        validate_path(path, mode.is_sequential())?;
        let request = Request::CreateTtl(CreateTtlRequest {
            path: path.to_owned(),
            data: Some(data.to_vec()),
            acl: acl.to_vec(),
            flags: mode.flags(),
            ttl: duration_ms(ttl),
        });
        self.created(path, request).await
    }

    /// Creates a container node: the server deletes it once its last child
    /// is gone.
    pub async fn create_container(
        &self,
        path: &str,
        data: &[u8],
        acl: &[Acl],
    ) -> Result<(String, Stat), Error> {
        validate_path(path, false)?;
        let request = create_request(path, data, acl, CreateMode::Container, true)?;
        self.created(path, request).await
    }

    async fn created(&self, path: &str, request: Request) -> Result<(String, Stat), Error> {
        match self.call(path, request, None).await? {
            Response::Create2(r) => Ok((r.path, r.stat)),
            other => Err(Self::unexpected(path, other)),
        }
    }

    /// Deletes a node if its version matches (`-1`: any version).
    pub async fn delete(&self, path: &str, version: i32) -> Result<(), Error> {
        validate_path(path, false)?;
        let request = Request::Delete(DeleteRequest {
            path: path.to_owned(),
            version,
        });
        self.call(path, request, None).await.map(drop)
    }

    /// The node's stat, or `None` if it does not exist. With `watch`, the
    /// next creation, change or deletion of the node is sent as an event.
    pub async fn exists(&self, path: &str, watch: bool) -> Result<Option<Stat>, Error> {
        validate_path(path, false)?;
        let request = Request::Exists(ExistsRequest {
            path: path.to_owned(),
            watch,
        });
        match self
            .call(path, request, watch.then_some(WatchKind::Exists))
            .await
        {
            Ok(Response::Stat(stat)) => Ok(Some(stat)),
            Ok(other) => Err(Self::unexpected(path, other)),
            Err(Error::NoNode { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The node's data and stat; with `watch`, its next change or deletion
    /// is sent as an event.
    pub async fn get_data(&self, path: &str, watch: bool) -> Result<(Vec<u8>, Stat), Error> {
        let (data, stat) = self.get_nullable_data(path, watch).await?;
        Ok((data.unwrap_or_default(), stat))
    }

    /// As `get_data`, with null data (a znode a client created or set with
    /// null data) as None rather than empty.
    pub async fn get_nullable_data(
        &self,
        path: &str,
        watch: bool,
    ) -> Result<(Option<Vec<u8>>, Stat), Error> {
        validate_path(path, false)?;
        let request = Request::GetData(GetDataRequest {
            path: path.to_owned(),
            watch,
        });
        match self
            .call(path, request, watch.then_some(WatchKind::Data))
            .await?
        {
            Response::GetData(r) => Ok((r.data, r.stat)),
            other => Err(Self::unexpected(path, other)),
        }
    }

    /// Sets the node's data if its version matches (`-1`: any version).
    pub async fn set_data(&self, path: &str, data: &[u8], version: i32) -> Result<Stat, Error> {
        validate_path(path, false)?;
        let request = Request::SetData(SetDataRequest {
            path: path.to_owned(),
            data: Some(data.to_vec()),
            version,
        });
        self.stat_reply(path, request).await
    }

    pub async fn get_acl(&self, path: &str) -> Result<(Vec<Acl>, Stat), Error> {
        validate_path(path, false)?;
        let request = Request::GetAcl(GetAclRequest {
            path: path.to_owned(),
        });
        match self.call(path, request, None).await? {
            Response::GetAcl(r) => Ok((r.acl, r.stat)),
            other => Err(Self::unexpected(path, other)),
        }
    }

    /// Replaces the node's ACL if its ACL version matches (`-1`: any).
    pub async fn set_acl(&self, path: &str, acl: &[Acl], version: i32) -> Result<Stat, Error> {
        validate_path(path, false)?;
        let request = Request::SetAcl(SetAclRequest {
            path: path.to_owned(),
            acl: acl.to_vec(),
            version,
        });
        self.stat_reply(path, request).await
    }

    async fn stat_reply(&self, path: &str, request: Request) -> Result<Stat, Error> {
        match self.call(path, request, None).await? {
            Response::Stat(stat) => Ok(stat),
            other => Err(Self::unexpected(path, other)),
        }
    }

    /// The node's children, unsorted; with `watch`, the next change to the
    /// list (or the node's deletion) is sent as an event.
    pub async fn get_children(&self, path: &str, watch: bool) -> Result<Vec<String>, Error> {
        validate_path(path, false)?;
        let request = Request::GetChildren(GetChildrenRequest {
            path: path.to_owned(),
            watch,
        });
        match self
            .call(path, request, watch.then_some(WatchKind::Child))
            .await?
        {
            Response::GetChildren(r) => Ok(r.children),
            other => Err(Self::unexpected(path, other)),
        }
    }

    /// The node's children and its stat.
    pub async fn get_children2(
        &self,
        path: &str,
        watch: bool,
    ) -> Result<(Vec<String>, Stat), Error> {
        validate_path(path, false)?;
        let request = Request::GetChildren2(GetChildren2Request {
            path: path.to_owned(),
            watch,
        });
        match self
            .call(path, request, watch.then_some(WatchKind::Child))
            .await?
        {
            Response::GetChildren2(r) => Ok((r.children, r.stat)),
            other => Err(Self::unexpected(path, other)),
        }
    }

    /// How many nodes lie below `path` (all depths, `path` excluded).
    pub async fn get_all_children_number(&self, path: &str) -> Result<usize, Error> {
        validate_path(path, false)?;
        let request = Request::GetAllChildrenNumber(GetAllChildrenNumberRequest {
            path: path.to_owned(),
        });
        match self.call(path, request, None).await? {
            Response::GetAllChildrenNumber(r) => usize::try_from(r.total_number).map_err(|_| {
                Error::Protocol(format!(
                    "negative child count {} for {path}",
                    r.total_number
                ))
            }),
            other => Err(Self::unexpected(path, other)),
        }
    }

    /// Paths of this session's ephemeral nodes that start with `prefix`
    /// (`/` for all).
    pub async fn get_ephemerals(&self, prefix: &str) -> Result<Vec<String>, Error> {
        let request = Request::GetEphemerals(GetEphemeralsRequest {
            prefix_path: prefix.to_owned(),
        });
        match self.call(prefix, request, None).await? {
            Response::GetEphemerals(r) => Ok(r.ephemerals),
            other => Err(Self::unexpected(prefix, other)),
        }
    }

    /// Waits until the server this client reads from has every write the
    /// leader committed before the sync.
    pub async fn sync(&self, path: &str) -> Result<String, Error> {
        validate_path(path, false)?;
        let request = Request::Sync(SyncRequest {
            path: path.to_owned(),
        });
        match self.call(path, request, None).await? {
            Response::Sync(r) => Ok(r.path),
            other => Err(Self::unexpected(path, other)),
        }
    }

    /// Runs write ops atomically. The results say per op what happened; a
    /// failed multi has every result as `MultiResult::Error` (the failing
    /// op's code, `Ok` before it, `RuntimeInconsistency` after); see
    /// [`multi_error`].
    pub async fn multi(&self, ops: Vec<Op>) -> Result<Vec<MultiResult>, Error> {
        self.run_ops(ops, false).await
    }

    /// Runs read ops (`Op::get_data`, `Op::get_children`) in one round
    /// trip; each may fail on its own as `MultiResult::Error`.
    pub async fn multi_read(&self, ops: Vec<Op>) -> Result<Vec<MultiResult>, Error> {
        self.run_ops(ops, true).await
    }

    async fn run_ops(&self, ops: Vec<Op>, read: bool) -> Result<Vec<MultiResult>, Error> {
        for op in &ops {
            op.validate()?;
            if op.is_read() != read {
                let kind = if read {
                    "multi_read takes only read ops"
                } else {
                    "multi takes only write ops"
                };
                return Err(Error::InvalidArgument(format!("{kind}: {}", op.path())));
            }
        }
        let requests: Vec<Request> = ops.into_iter().map(Op::into_request).collect();
        let request = if read {
            Request::MultiRead(requests)
        } else {
            Request::Multi(requests)
        };
        match self.call("", request, None).await? {
            Response::Multi(results) => Ok(results),
            other => Err(Self::unexpected("", other)),
        }
    }

    /// Adds a persistent (optionally recursive) watch on `path`: every
    /// change is sent as an event until it is removed.
    pub async fn add_watch(&self, path: &str, mode: AddWatchMode) -> Result<(), Error> {
        validate_path(path, false)?;
        let request = Request::AddWatch(AddWatchRequest {
            path: path.to_owned(),
            mode: mode.as_i32(),
        });
        let kind = match mode {
            AddWatchMode::Persistent => WatchKind::Persistent,
            AddWatchMode::PersistentRecursive => WatchKind::PersistentRecursive,
        };
        self.call(path, request, Some(kind)).await.map(drop)
    }

    /// Removes this session's watches of `kind` on `path` (`NoWatcher` if
    /// there are none).
    pub async fn remove_watches(&self, path: &str, kind: WatcherType) -> Result<(), Error> {
        validate_path(path, false)?;
        let request = Request::RemoveWatches(RemoveWatchesRequest {
            path: path.to_owned(),
            kind: kind.as_i32(),
        });
        self.call(path, request, Some(WatchKind::Remove(kind)))
            .await
            .map(drop)
    }

    /// Adds credentials to the session (`digest` with `user:password`). A
    /// refused scheme ends the session with `AuthFailed`, as in ZooKeeper.
    pub async fn add_auth(&self, scheme: &str, auth: &[u8]) -> Result<(), Error> {
        let request = Request::Auth(AuthPacket {
            kind: 0,
            scheme: scheme.to_owned(),
            auth: auth.to_vec(),
        });
        self.call("", request, None).await.map(drop)
    }

    /// The identities the server knows this session by.
    pub async fn whoami(&self) -> Result<Vec<ClientInfo>, Error> {
        match self.call("", Request::WhoAmI, None).await? {
            Response::WhoAmI(r) => Ok(r.client_info),
            other => Err(Self::unexpected("", other)),
        }
    }

    /// Ends the session: its ephemeral nodes go, and every handle's later
    /// calls fail with `Error::Closed`.
    pub async fn close(&self) -> Result<(), Error> {
        match self.state() {
            SessionState::Closed | SessionState::Expired | SessionState::AuthFailed => {
                return Ok(())
            }
            SessionState::Connected | SessionState::Connecting => {}
        }
        match self.call("", Request::CloseSession, None).await {
            Ok(_) | Err(Error::Closed) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// The create request for `mode`: containers have their own opcode, TTL
/// modes need a TTL (and so `create_ttl`).
fn create_request(
    path: &str,
    data: &[u8],
    acl: &[Acl],
    mode: CreateMode,
    with_stat: bool,
) -> Result<Request, Error> {
    if mode.is_ttl() {
        return Err(Error::InvalidArgument(format!(
            "{mode:?} needs create_ttl: {path}"
        )));
    }
    let record = CreateRequest {
        path: path.to_owned(),
        data: Some(data.to_vec()),
        acl: acl.to_vec(),
        flags: mode.flags(),
    };
    Ok(if mode.is_container() {
        Request::CreateContainer(record)
    } else if with_stat {
        Request::Create2(record)
    } else {
        Request::Create(record)
    })
}

/// The error of a failed multi: the first result that is neither `Ok` nor
/// the `RuntimeInconsistency` that follows the failing op, with its op's
/// path. `None` when the multi succeeded.
pub fn multi_error(paths: &[&str], results: &[MultiResult]) -> Option<Error> {
    use stoa_proto::codes::ErrorCode;
    results
        .iter()
        .enumerate()
        .find_map(|(i, result)| match result {
            MultiResult::Error(code)
                if !matches!(code, ErrorCode::Ok | ErrorCode::RuntimeInconsistency) =>
            {
                Some(Error::from_code(
                    *code,
                    paths.get(i).copied().unwrap_or_default(),
                ))
            }
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoa_proto::codes::ErrorCode;

    /// `compose` orders calls on a member session by polling each once:
    /// that first poll must queue the request.
    #[test]
    fn every_call_queues_its_request_in_its_first_poll() {
        use std::future::Future;
        use std::task::{Context, Poll};
        let (tx, mut rx) = mpsc::unbounded_channel();
        let response = ConnectResponse {
            protocol_version: 0,
            time_out: 10_000,
            session_id: 1,
            passwd: vec![0; 16],
            read_only: false,
        };
        let client = Client {
            tx,
            shared: new_shared(&response, "test".into()),
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let acl = crate::acl::open_acl_unsafe();
        let mut queued = 0;
        let mut first_poll = |call: &mut dyn FnMut() -> Poll<()>| {
            assert!(call().is_pending());
            assert!(rx.try_recv().is_ok(), "call {queued} queued nothing");
            queued += 1;
        };
        macro_rules! poll_once {
            ($call:expr) => {{
                let mut future = std::pin::pin!($call);
                first_poll(&mut || future.as_mut().poll(&mut cx).map(drop));
            }};
        }
        poll_once!(client.create("/a", b"", &acl, CreateMode::Persistent));
        poll_once!(client.set_data("/a", b"", -1));
        poll_once!(client.get_data("/a", false));
        poll_once!(client.exists("/a", true));
        poll_once!(client.get_children2("/a", false));
        poll_once!(client.sync("/a"));
        poll_once!(client.multi(vec![Op::delete("/a", -1)]));
        poll_once!(client.multi_read(vec![Op::get_data("/a")]));
        poll_once!(client.add_watch("/a", AddWatchMode::Persistent));
    }

    #[test]
    fn multi_error_names_the_failing_op() {
        let results = [
            MultiResult::Error(ErrorCode::Ok),
            MultiResult::Error(ErrorCode::BadVersion),
            MultiResult::Error(ErrorCode::RuntimeInconsistency),
        ];
        let error = multi_error(&["/a", "/b", "/c"], &results).unwrap();
        assert!(matches!(&error, Error::BadVersion { path } if path == "/b"));
        assert!(multi_error(&["/a"], &[MultiResult::Delete]).is_none());
    }
}
