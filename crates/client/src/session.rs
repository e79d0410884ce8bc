//! The background task that owns the connection: it writes requests
//! (pipelined, one xid each), matches replies to them, pings, delivers
//! watch events, and moves the session to another server when the
//! connection is lost.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use stoa_proto::codes::ErrorCode;
use stoa_proto::frame::{decode_reply_frame, encode_connect_request, encode_request, FrameDecoder};
use stoa_proto::jute::{Reader, Record};
use stoa_proto::opcode::{
    EventType, KeeperState, OpCode, AUTH_XID, NOTIFICATION_XID, PING_XID, SET_WATCHES_XID,
};
use stoa_proto::records::{
    AuthPacket, ConnectRequest, ConnectResponse, RequestHeader, WatcherEvent,
};
use stoa_proto::request::Request;
use stoa_proto::response::Response;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::error::Error;
use crate::watch::{WatchKind, WatchTable, WatchedEvent};

/// Length of the session password ZooKeeper hands out; a new session sends
/// this many zero bytes.
const PASSWORD_BYTES: usize = 16;
/// At most this many queued calls go into one socket write.
const MAX_CALLS_PER_WRITE: usize = 1024;
/// Room made in the read buffer before each read.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// `SetWatches2` requests are split at this many bytes of paths, as
/// ZooKeeper's client does (`SET_WATCHES_MAX_LENGTH`).
const SET_WATCHES_MAX_BYTES: usize = 128 * 1024;
/// Pause after every host refused us, doubling up to the maximum.
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(50);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Where the session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    Connected,
    /// Lost the connection; trying the hosts again.
    Connecting,
    /// The server declared the session expired.
    Expired,
    /// The server refused our credentials and closed the session.
    AuthFailed,
    /// `close()` finished, or every `Client` handle was dropped.
    Closed,
}

/// State the task and the `Client` handles share. Never locked across an
/// await.
#[derive(Debug)]
pub(crate) struct Shared {
    inner: Mutex<SharedInner>,
}

#[derive(Debug)]
struct SharedInner {
    session_id: i64,
    password: Vec<u8>,
    negotiated_timeout: Duration,
    last_zxid: i64,
    state: SessionState,
    host: String,
    /// Credentials accepted by the server, sent again after reconnecting.
    auths: Vec<(String, Vec<u8>)>,
    watches: WatchTable,
    subscribers: Vec<mpsc::UnboundedSender<WatchedEvent>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, SharedInner> {
        // A panic while holding this lock leaves only plain data behind;
        // carrying on with it is safe.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn session_id(&self) -> i64 {
        self.lock().session_id
    }

    pub(crate) fn password(&self) -> Vec<u8> {
        self.lock().password.clone()
    }

    pub(crate) fn negotiated_timeout(&self) -> Duration {
        self.lock().negotiated_timeout
    }

    pub(crate) fn last_zxid(&self) -> i64 {
        self.lock().last_zxid
    }

    pub(crate) fn state(&self) -> SessionState {
        self.lock().state
    }

    pub(crate) fn host(&self) -> String {
        self.lock().host.clone()
    }

    pub(crate) fn subscribe(&self) -> mpsc::UnboundedReceiver<WatchedEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.add_subscriber(tx);
        rx
    }

    /// Sends this session's events to `tx` too. The task sends each event
    /// before it hands out the replies that follow it on the wire.
    pub(crate) fn add_subscriber(&self, tx: mpsc::UnboundedSender<WatchedEvent>) {
        self.lock().subscribers.push(tx);
    }

    /// The error for a call that cannot reach the task any more.
    pub(crate) fn terminal_error(&self, path: &str) -> Error {
        let path = path.to_owned();
        match self.state() {
            SessionState::Expired => Error::SessionExpired { path },
            SessionState::AuthFailed => Error::AuthFailed { path },
            SessionState::Closed => Error::Closed,
            SessionState::Connected | SessionState::Connecting => Error::ConnectionLoss { path },
        }
    }

    fn set_state(&self, state: SessionState, event_state: KeeperState) {
        let mut inner = self.lock();
        inner.state = state;
        broadcast(
            &mut inner.subscribers,
            WatchedEvent {
                event_type: EventType::None,
                state: event_state,
                path: String::new(),
                zxid: -1,
            },
        );
    }
}

fn broadcast(subscribers: &mut Vec<mpsc::UnboundedSender<WatchedEvent>>, event: WatchedEvent) {
    subscribers.retain(|tx| tx.send(event.clone()).is_ok());
}

/// One request on its way from a `Client` method to the task.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) request: Request,
    pub(crate) path: String,
    pub(crate) watch: Option<WatchKind>,
    pub(crate) reply: oneshot::Sender<Result<Response, Error>>,
}

/// A request sent on the current connection and not yet answered.
#[derive(Debug)]
struct Pending {
    xid: i32,
    opcode: OpCode,
    path: String,
    watch: Option<WatchKind>,
    /// None for requests the task sends on its own behalf.
    reply: Option<oneshot::Sender<Result<Response, Error>>>,
    auth: Option<(String, Vec<u8>)>,
}

/// Why `serve` stopped using a connection.
#[derive(Debug)]
enum End {
    Lost(String),
    Expired,
    AuthFailed,
    Closed,
    /// Every `Client` handle is gone.
    Dropped,
}

/// A parsed connection string.
#[derive(Debug, Clone)]
pub(crate) struct Hosts {
    addresses: Vec<String>,
    next: usize,
}

/// Port ZooKeeper clients assume when a host names none.
const DEFAULT_PORT: u16 = 2181;

impl Hosts {
    /// Parses `host:port[,host:port...]`. A chroot suffix is not supported.
    pub(crate) fn parse(text: &str) -> Result<Hosts, Error> {
        if text.contains('/') {
            return Err(Error::InvalidArgument(format!(
                "chroot paths are not supported in the connection string {text:?}"
            )));
        }
        let addresses: Vec<String> = text
            .split(',')
            .map(str::trim)
            .filter(|host| !host.is_empty())
            .map(|host| {
                let has_port = host
                    .rsplit_once(':')
                    .is_some_and(|(_, port)| port.parse::<u16>().is_ok());
                if has_port {
                    host.to_owned()
                } else {
                    format!("{host}:{DEFAULT_PORT}")
                }
            })
            .collect();
        if addresses.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "no host in connection string {text:?}"
            )));
        }
        Ok(Hosts { addresses, next: 0 })
    }

    pub(crate) fn len(&self) -> usize {
        self.addresses.len()
    }

    /// The next host, round robin.
    pub(crate) fn next(&mut self) -> String {
        let host = self.addresses[self.next % self.addresses.len()].clone();
        self.next = (self.next + 1) % self.addresses.len();
        host
    }
}

/// What a (re)connection attempt asks the server for.
#[derive(Debug, Clone)]
pub(crate) struct Handshake {
    pub(crate) session_id: i64,
    pub(crate) password: Vec<u8>,
    pub(crate) last_zxid: i64,
    pub(crate) timeout: Duration,
}

impl Handshake {
    pub(crate) fn new_session(timeout: Duration) -> Handshake {
        Handshake {
            session_id: 0,
            password: vec![0; PASSWORD_BYTES],
            last_zxid: 0,
            timeout,
        }
    }
}

/// Opens a TCP connection to `host` and runs the connect handshake, all
/// within `limit`.
pub(crate) async fn handshake(
    host: String,
    hello: Handshake,
    limit: Duration,
) -> Result<(TcpStream, ConnectResponse), Error> {
    let attempt = async {
        let mut stream = TcpStream::connect(&host).await?;
        stream.set_nodelay(true)?;
        let request = ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: hello.last_zxid,
            time_out: i32::try_from(hello.timeout.as_millis()).unwrap_or(i32::MAX),
            session_id: hello.session_id,
            passwd: hello.password,
            read_only: false,
        };
        let mut out = Vec::new();
        encode_connect_request(&mut out, &request);
        stream.write_all(&out).await?;
        let mut length = [0u8; 4];
        stream.read_exact(&mut length).await?;
        let length = usize::try_from(i32::from_be_bytes(length))
            .ok()
            .filter(|&n| n <= FrameDecoder::default().max_frame_bytes)
            .ok_or_else(|| Error::Protocol(format!("bad connect response length from {host}")))?;
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).await?;
        let (response, _) = ConnectResponse::decode_with_presence(&mut Reader::new(&body))
            .map_err(|e| Error::Protocol(format!("connect response from {host}: {e}")))?;
        Ok((stream, response))
    };
    match tokio::time::timeout(limit, attempt).await {
        Ok(result) => result,
        Err(_) => Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("connecting to {host} took longer than {limit:?}"),
        ))),
    }
}

/// The shared state of a session the handshake just opened.
pub(crate) fn new_shared(response: &ConnectResponse, host: String) -> Arc<Shared> {
    Arc::new(Shared {
        inner: Mutex::new(SharedInner {
            session_id: response.session_id,
            password: response.passwd.clone(),
            negotiated_timeout: timeout_of(response),
            last_zxid: 0,
            state: SessionState::Connected,
            host,
            auths: Vec::new(),
            watches: WatchTable::default(),
            subscribers: Vec::new(),
        }),
    })
}

fn timeout_of(response: &ConnectResponse) -> Duration {
    Duration::from_millis(u64::try_from(response.time_out).unwrap_or(0))
}

/// The background task of one session.
pub(crate) struct Task {
    pub(crate) shared: Arc<Shared>,
    pub(crate) hosts: Hosts,
    pub(crate) requested_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) rx: mpsc::UnboundedReceiver<Call>,
    pub(crate) next_xid: i32,
    /// Calls that arrived while disconnected, with their arrival time.
    pub(crate) backlog: VecDeque<(Instant, Call)>,
    pub(crate) rx_closed: bool,
}

impl Task {
    pub(crate) async fn run(mut self, mut stream: TcpStream) {
        let end = loop {
            match self.serve(stream).await {
                End::Lost(reason) => {
                    log::info!("connection to {} lost: {reason}", self.shared.host());
                    self.shared
                        .set_state(SessionState::Connecting, KeeperState::Disconnected);
                    match self.reconnect().await {
                        Ok(next) => stream = next,
                        Err(end) => break end,
                    }
                }
                end => break end,
            }
        };
        let (state, event) = match end {
            End::Expired => (SessionState::Expired, KeeperState::Expired),
            End::AuthFailed => (SessionState::AuthFailed, KeeperState::AuthFailed),
            End::Closed | End::Dropped | End::Lost(_) => {
                (SessionState::Closed, KeeperState::Closed)
            }
        };
        self.shared.set_state(state, event);
        // Calls still queued learn the session's fate from the state; the
        // receiver is dropped when the task returns.
        while let Some((_, call)) = self.backlog.pop_front() {
            let _ = call.reply.send(Err(self.shared.terminal_error(&call.path)));
        }
        self.rx.close();
        while let Ok(call) = self.rx.try_recv() {
            let _ = call.reply.send(Err(self.shared.terminal_error(&call.path)));
        }
    }

    fn take_xid(&mut self, request: &Request) -> i32 {
        match request {
            Request::Auth(_) => AUTH_XID,
            Request::SetWatches2(_) | Request::SetWatches(_) => SET_WATCHES_XID,
            Request::Ping => PING_XID,
            _ => {
                let xid = self.next_xid;
                // xids stay positive: the negative ones are reserved.
                self.next_xid = if xid == i32::MAX { 1 } else { xid + 1 };
                xid
            }
        }
    }

    fn encode(
        &mut self,
        out: &mut Vec<u8>,
        pending: &mut VecDeque<Pending>,
        request: Request,
        path: String,
        watch: Option<WatchKind>,
        reply: Option<oneshot::Sender<Result<Response, Error>>>,
    ) {
        let xid = self.take_xid(&request);
        let opcode = request.opcode();
        let header = RequestHeader {
            xid,
            kind: opcode.as_i32(),
        };
        encode_request(out, &header, &request);
        let auth = match &request {
            Request::Auth(packet) => Some((packet.scheme.clone(), packet.auth.clone())),
            _ => None,
        };
        pending.push_back(Pending {
            xid,
            opcode,
            path,
            watch,
            reply,
            auth,
        });
    }

    /// After a reconnect: credentials, then watches, then the backlog.
    fn prime(&mut self, out: &mut Vec<u8>, pending: &mut VecDeque<Pending>) {
        let (auths, set_watches) = {
            let inner = self.shared.lock();
            (
                inner.auths.clone(),
                inner
                    .watches
                    .set_watches(inner.last_zxid, SET_WATCHES_MAX_BYTES),
            )
        };
        for (scheme, auth) in auths {
            let packet = AuthPacket {
                kind: 0,
                scheme,
                auth,
            };
            // Not recorded again on success: it is already in the list.
            self.encode(
                out,
                pending,
                Request::Auth(packet),
                String::new(),
                None,
                None,
            );
            if let Some(last) = pending.back_mut() {
                last.auth = None;
            }
        }
        for request in set_watches {
            self.encode(
                out,
                pending,
                Request::SetWatches2(request),
                String::new(),
                None,
                None,
            );
        }
        while let Some((_, call)) = self.backlog.pop_front() {
            self.encode(
                out,
                pending,
                call.request,
                call.path,
                call.watch,
                Some(call.reply),
            );
        }
    }

    async fn serve(&mut self, stream: TcpStream) -> End {
        let (mut reader, writer) = stream.into_split();
        let (write_tx, write_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let mut write_task = tokio::spawn(write_loop(writer, write_rx));
        let mut pending = VecDeque::new();
        let mut out = Vec::new();
        self.prime(&mut out, &mut pending);
        let timeout = self
            .shared
            .negotiated_timeout()
            .max(Duration::from_millis(3));
        // As ZooKeeper's client: ping every third of the timeout, and give
        // the server up when silent for two thirds of it.
        let ping_period = timeout / 3;
        let read_timeout = timeout * 2 / 3;
        let mut ping = tokio::time::interval_at(Instant::now() + ping_period, ping_period);
        let mut last_read = Instant::now();
        let mut buffer: Vec<u8> = Vec::with_capacity(READ_CHUNK_BYTES);
        let end = loop {
            if !out.is_empty() && write_tx.send(std::mem::take(&mut out)).is_err() {
                break End::Lost("writer stopped".into());
            }
            buffer.reserve(READ_CHUNK_BYTES);
            tokio::select! {
                read = reader.read_buf(&mut buffer) => match read {
                    Ok(0) => break End::Lost("server closed the connection".into()),
                    Err(e) => break End::Lost(format!("read failed: {e}")),
                    Ok(_) => {
                        last_read = Instant::now();
                        match self.on_bytes(&mut buffer, &mut pending) {
                            Ok(None) => {}
                            Ok(Some(end)) => break end,
                            Err(reason) => break End::Lost(reason),
                        }
                    }
                },
                call = self.rx.recv(), if !self.rx_closed => match call {
                    None => {
                        self.rx_closed = true;
                        break End::Dropped;
                    }
                    Some(call) => {
                        self.encode(&mut out, &mut pending, call.request, call.path, call.watch, Some(call.reply));
                        // Coalesce whatever else is queued into one write.
                        for _ in 1..MAX_CALLS_PER_WRITE {
                            let Ok(call) = self.rx.try_recv() else { break };
                            self.encode(&mut out, &mut pending, call.request, call.path, call.watch, Some(call.reply));
                        }
                    }
                },
                _ = ping.tick() => {
                    if last_read.elapsed() > read_timeout {
                        break End::Lost(format!("no bytes from the server for {:?}", last_read.elapsed()));
                    }
                    let header = RequestHeader { xid: PING_XID, kind: OpCode::Ping.as_i32() };
                    encode_request(&mut out, &header, &Request::Ping);
                }
                result = &mut write_task => {
                    break End::Lost(match result {
                        Ok(Err(e)) => format!("write failed: {e}"),
                        _ => "writer stopped".into(),
                    });
                }
            }
        };
        write_task.abort();
        for p in pending {
            if let Some(reply) = p.reply {
                let error = match end {
                    End::Expired => Error::SessionExpired { path: p.path },
                    End::AuthFailed => Error::AuthFailed { path: p.path },
                    _ => Error::ConnectionLoss { path: p.path },
                };
                let _ = reply.send(Err(error));
            }
        }
        end
    }

    /// Handles every complete frame in `buffer` and drops them from it.
    fn on_bytes(
        &mut self,
        buffer: &mut Vec<u8>,
        pending: &mut VecDeque<Pending>,
    ) -> Result<Option<End>, String> {
        let decoder = FrameDecoder::default();
        let mut consumed = 0;
        let mut end = None;
        while end.is_none() {
            let Some((length, body)) = decoder
                .decode(&buffer[consumed..])
                .map_err(|e| e.to_string())?
            else {
                break;
            };
            end = self.on_frame(body, pending)?;
            consumed += length;
        }
        buffer.drain(..consumed);
        Ok(end)
    }

    fn on_frame(
        &mut self,
        body: &[u8],
        pending: &mut VecDeque<Pending>,
    ) -> Result<Option<End>, String> {
        let (header, rest) =
            decode_reply_frame(body).map_err(|e| format!("bad reply header: {e}"))?;
        match header.xid {
            NOTIFICATION_XID => {
                let event = WatcherEvent::decode(&mut Reader::new(rest))
                    .map_err(|e| format!("bad watch event: {e}"))?;
                self.on_event(event, header.zxid);
                return Ok(None);
            }
            PING_XID => return Ok(None),
            _ => {}
        }
        if header.zxid > 0 {
            self.shared.lock().last_zxid = header.zxid;
        }
        // Replies come in request order, so the match is almost always the
        // first entry; the search only matters for special xids.
        let index = pending
            .iter()
            .position(|p| p.xid == header.xid)
            .ok_or_else(|| format!("reply to xid {} that was not sent", header.xid))?;
        let Some(p) = pending.remove(index) else {
            return Err(format!("pending entry {index} vanished"));
        };
        let code = ErrorCode::from_i32(header.err);
        let result = match code {
            Some(ErrorCode::Ok) => Response::decode(p.opcode, &mut Reader::new(rest))
                .map_err(|e| Error::Protocol(format!("bad {:?} reply: {e}", p.opcode))),
            Some(code) => Err(Error::from_code(code, &p.path)),
            None => Err(Error::Protocol(format!(
                "unknown error code {} for {}",
                header.err, p.path
            ))),
        };
        let mut end = None;
        {
            let mut inner = self.shared.lock();
            if let Some(kind) = p.watch {
                match (&result, code) {
                    (Ok(_), _) => inner.watches.register(kind, &p.path, true),
                    (Err(_), Some(ErrorCode::NoNode)) => {
                        inner.watches.register(kind, &p.path, false)
                    }
                    _ => {}
                }
            }
            if let (Some(auth), Ok(_)) = (p.auth, &result) {
                inner.auths.push(auth);
            }
        }
        if code == Some(ErrorCode::AuthFailed) && p.xid == AUTH_XID {
            end = Some(End::AuthFailed);
        }
        if p.opcode == OpCode::CloseSession {
            end = Some(End::Closed);
        }
        if code == Some(ErrorCode::SessionExpired) {
            end = Some(End::Expired);
        }
        // The caller must see the session's end once its call returns;
        // `run` announces it to subscribers afterwards.
        let final_state = match end {
            Some(End::Closed) => Some(SessionState::Closed),
            Some(End::AuthFailed) => Some(SessionState::AuthFailed),
            Some(End::Expired) => Some(SessionState::Expired),
            _ => None,
        };
        if let Some(state) = final_state {
            self.shared.lock().state = state;
        }
        if let Some(reply) = p.reply {
            // The caller may have stopped waiting; nothing to do then.
            let _ = reply.send(result);
        }
        Ok(end)
    }

    fn on_event(&mut self, event: WatcherEvent, zxid: i64) {
        let (Some(event_type), Some(state)) = (
            EventType::from_i32(event.kind),
            KeeperState::from_i32(event.state),
        ) else {
            log::warn!(
                "ignoring watch event of unknown type {} state {}",
                event.kind,
                event.state
            );
            return;
        };
        let mut inner = self.shared.lock();
        inner.watches.fire(event_type, &event.path);
        broadcast(
            &mut inner.subscribers,
            WatchedEvent {
                event_type,
                state,
                path: event.path,
                zxid,
            },
        );
    }

    /// Tries the hosts in turn until one takes the session back. Calls
    /// made meanwhile wait in the backlog, for at most the session timeout.
    async fn reconnect(&mut self) -> Result<TcpStream, End> {
        let mut backoff = RECONNECT_BACKOFF_MIN;
        let mut failures_this_round = 0;
        loop {
            if self.rx_closed && self.backlog.is_empty() {
                return Err(End::Dropped);
            }
            let host = self.hosts.next();
            let hello = {
                let inner = self.shared.lock();
                Handshake {
                    session_id: inner.session_id,
                    password: inner.password.clone(),
                    last_zxid: inner.last_zxid,
                    timeout: self.requested_timeout,
                }
            };
            let limit = self.connect_timeout.min(self.requested_timeout);
            match self.collecting(handshake(host.clone(), hello, limit)).await {
                Ok((_, response)) if response.time_out <= 0 => {
                    log::info!(
                        "session {:#x} expired (told by {host})",
                        self.shared.session_id()
                    );
                    return Err(End::Expired);
                }
                Ok((stream, response)) => {
                    {
                        let mut inner = self.shared.lock();
                        inner.negotiated_timeout = timeout_of(&response);
                        inner.host = host.clone();
                    }
                    log::info!(
                        "session {:#x} reconnected to {host}",
                        self.shared.session_id()
                    );
                    self.shared
                        .set_state(SessionState::Connected, KeeperState::SyncConnected);
                    return Ok(stream);
                }
                Err(e) => {
                    log::debug!("reconnecting to {host} failed: {e}");
                    self.expire_backlog();
                    failures_this_round += 1;
                    if failures_this_round >= self.hosts.len() {
                        failures_this_round = 0;
                        self.collecting(tokio::time::sleep(backoff)).await;
                        backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
                    }
                }
            }
        }
    }

    /// Runs `work` while queueing the calls that arrive meanwhile.
    async fn collecting<F: std::future::Future>(&mut self, work: F) -> F::Output {
        tokio::pin!(work);
        loop {
            tokio::select! {
                output = &mut work => return output,
                call = self.rx.recv(), if !self.rx_closed => match call {
                    Some(call) => self.backlog.push_back((Instant::now(), call)),
                    None => self.rx_closed = true,
                },
            }
        }
    }

    /// Fails the calls that have waited a whole session timeout for a
    /// connection.
    fn expire_backlog(&mut self) {
        while let Some((since, _)) = self.backlog.front() {
            if since.elapsed() < self.requested_timeout {
                break;
            }
            if let Some((_, call)) = self.backlog.pop_front() {
                let _ = call
                    .reply
                    .send(Err(Error::ConnectionLoss { path: call.path }));
            }
        }
    }
}

async fn write_loop(
    mut writer: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
) -> std::io::Result<()> {
    while let Some(mut bytes) = rx.recv().await {
        // Join what else is queued: fewer, larger writes.
        while let Ok(more) = rx.try_recv() {
            bytes.extend_from_slice(&more);
        }
        writer.write_all(&bytes).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_strings_parse_with_default_ports() {
        let mut hosts = Hosts::parse("a:1, b ,c:3").unwrap();
        assert_eq!(hosts.len(), 3);
        assert_eq!(hosts.next(), "a:1");
        assert_eq!(hosts.next(), "b:2181");
        assert_eq!(hosts.next(), "c:3");
        assert_eq!(hosts.next(), "a:1");
        assert!(Hosts::parse("").is_err());
        assert!(Hosts::parse("a:1/chroot").is_err());
    }
}
