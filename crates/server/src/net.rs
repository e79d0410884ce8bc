//! Client connections: a reader task that cuts frames (or spots a
//! four-letter word) and hands them to the engine loop by a channel, and a
//! writer. Where the connections live is the server's choice
//! ([`ConnThreads`]):
//!
//! - on the partition thread's own runtime (`io.threads=0`): replies are
//!   written by the engine loop straight into the socket, with a writer
//!   task for what the socket does not take at once;
//! - on a pool of I/O threads: each connection's reader and writer tasks
//!   run there, so the socket system calls, the frame cutting and the TLS
//!   work leave the engine's thread; the engine loop hands each reply
//!   batch to the connection's writer task.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use stoa_core::client_frame::{decode_frames, ClientFrame};
use stoa_proto::frame::{
    encode_frames, FrameDecoder, FrameError, OutgoingFrame, FRAME_LENGTH_BYTES,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, WriteHalf};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;

use crate::fourlw;
use crate::watch::ConnId;

/// Events from connection tasks to the engine loop.
pub enum NetEvent {
    Accepted {
        conn: ConnId,
        peer: SocketAddr,
        writer: ConnWriter,
        reader: tokio::task::AbortHandle,
        /// A TLS client certificate's subject (RFC 2253).
        client_certificate: Option<String>,
    },
    /// Every frame a read completed, in the order read, in one hand-off:
    /// decoded by the reader, but for the connection's first (its connect
    /// request), which the engine decodes in the handshake.
    Frames {
        conn: ConnId,
        frames: Vec<ClientFrame<'static>>,
    },
    FourLetter {
        conn: ConnId,
        word: String,
    },
    Closed {
        conn: ConnId,
    },
}

enum Outgoing {
    Bytes(Vec<u8>),
    /// Replies and events for the writer to encode.
    Frames(Vec<OutgoingFrame>),
    /// Flush and close.
    Close,
}

/// The sending side of a connection. On the partition thread, replies go
/// straight into the socket from the partition loop when it takes them
/// whole, the usual case: a hand-off to the connection's writer task cost
/// a wake-up and a copy per flush. What the socket does not take (its send
/// buffer full) goes to the writer task, and so does everything after it
/// until the task has written it all, so the bytes keep their order.
pub struct ConnWriter {
    /// The socket, for writes straight from the partition loop; `None`
    /// for TLS and for connections on the I/O threads, whose writes all
    /// go through the writer task.
    side: Option<Arc<WriteSide>>,
    tasks: mpsc::UnboundedSender<Outgoing>,
}

/// Shared by the partition loop and the connection's writer task, both on
/// the partition thread (an `Arc` only so that `NetEvent` may cross from
/// the I/O threads, whose connections never have one).
struct WriteSide {
    socket: OwnedWriteHalf,
    /// The writer task holds bytes not yet written: send through it.
    backlogged: AtomicBool,
}

impl ConnWriter {
    pub fn send(&self, mut bytes: Vec<u8>) {
        if let Some(side) = (self.side.as_ref()).filter(|s| !s.backlogged.load(Ordering::Relaxed)) {
            match side.socket.try_write(&bytes) {
                Ok(n) if n == bytes.len() => return,
                Ok(n) => {
                    bytes.drain(..n);
                }
                // Would block, or broken: the writer task waits, or meets
                // the error and ends.
                Err(_) => {}
            }
            side.backlogged.store(true, Ordering::Relaxed);
        }
        let _ = self.tasks.send(Outgoing::Bytes(bytes));
    }

    /// Hands the writer task frames to encode and write. Only a
    /// connection whose writes all go through its task (on the I/O
    /// threads) leaves the encoding to it; else they are encoded here.
    pub fn send_frames(&self, frames: Vec<OutgoingFrame>) {
        if self.side.is_some() {
            let mut bytes = Vec::new();
            encode_frames(&mut bytes, &frames);
            return self.send(bytes);
        }
        let _ = self.tasks.send(Outgoing::Frames(frames));
    }

    /// Shuts the sending side once everything before is written.
    pub fn close(&self) {
        let _ = self.tasks.send(Outgoing::Close);
    }
}

/// Bytes read from a socket at once: pipelined requests then cost one
/// `recv` for many frames instead of two per frame.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// A connection's read buffer is given back when a large frame left it
/// bigger than this.
const READ_BUFFER_KEPT_BYTES_MAX: usize = 4 * READ_BUFFER_BYTES;
/// Coalesce queued replies into one write up to this size.
const WRITE_COALESCE_BYTES_MAX: usize = 256 * 1024;

/// Hands out connection numbers to every listener of the thread.
pub type ConnIds = Rc<Cell<ConnId>>;

/// Where connections' tasks run: on the partition thread that accepted
/// them, or on the pool of I/O threads (`io.threads`).
#[derive(Clone)]
pub enum ConnThreads {
    Partition,
    Pool(tokio::runtime::Handle),
}

impl ConnThreads {
    /// Runs a connection's task where its connections live. The task
    /// needs `Send` for the pool; on the partition thread it runs local.
    fn spawn<F>(&self, task: F) -> tokio::task::AbortHandle
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        match self {
            ConnThreads::Partition => tokio::task::spawn_local(task).abort_handle(),
            ConnThreads::Pool(pool) => pool.spawn(task).abort_handle(),
        }
    }
}

fn next_id(ids: &ConnIds) -> ConnId {
    let conn = ids.get();
    ids.set(conn + 1);
    conn
}

/// The next connection a listener takes (a failed accept, such as one
/// over the descriptor limit, is retried shortly).
async fn accept_next(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                return (stream, peer);
            }
            Err(e) => {
                log::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

pub async fn accept_loop(
    listener: TcpListener,
    events: mpsc::Sender<NetEvent>,
    max_frame_bytes: usize,
    ids: ConnIds,
    threads: ConnThreads,
) {
    loop {
        let (stream, peer) = accept_next(&listener).await;
        let conn = next_id(&ids);
        let (read_half, write_half) = stream.into_split();
        let writer = spawn_writer(write_half, &threads);
        let connection = (conn, peer, None);
        spawn_reader(
            connection,
            read_half,
            writer,
            events.clone(),
            max_frame_bytes,
            &threads,
        )
        .await;
    }
}

/// A TLS handshake that has not finished in this time is dropped.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The `secureClientPort` listener: each connection's handshake runs on
/// its own task, then the connection is served as a plain one is.
pub async fn tls_accept_loop(
    listener: TcpListener,
    mut config: crate::tls::ReloadingConfig,
    events: mpsc::Sender<NetEvent>,
    max_frame_bytes: usize,
    ids: ConnIds,
    threads: ConnThreads,
) {
    loop {
        let (stream, peer) = accept_next(&listener).await;
        let acceptor = tokio_rustls::TlsAcceptor::from(config.current());
        let conn = next_id(&ids);
        let events = events.clone();
        let on = threads.clone();
        // The handshake runs where the connection will live.
        threads.spawn(async move {
            let stream =
                match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => {
                        return log::info!("TLS connection from {peer}: handshake failed: {e}")
                    }
                    Err(_) => return log::info!("TLS connection from {peer}: handshake timed out"),
                };
            let subject = (stream.get_ref().1.peer_certificates())
                .and_then(|chain| chain.first())
                .and_then(|cert| crate::tls::x509_subject(cert));
            let (read_half, write_half) = tokio::io::split(stream);
            let writer = spawn_tls_writer(write_half, &on);
            let connection = (conn, peer, subject);
            spawn_reader(connection, read_half, writer, events, max_frame_bytes, &on).await;
        });
    }
}

/// Starts the reader of a connection (number, peer, client certificate
/// subject) and tells the engine loop of it.
async fn spawn_reader(
    (conn, peer, client_certificate): (ConnId, SocketAddr, Option<String>),
    read_half: impl AsyncRead + Send + Unpin + 'static,
    writer: ConnWriter,
    events: mpsc::Sender<NetEvent>,
    max_frame_bytes: usize,
    threads: &ConnThreads,
) {
    let reader_events = events.clone();
    // The engine must hear of the connection before its first frames: on
    // the I/O threads the reader could otherwise read and hand them over
    // before `Accepted` is queued.
    let (announced, wait_announced) = tokio::sync::oneshot::channel::<()>();
    let reader = threads.spawn(async move {
        if wait_announced.await.is_err() {
            return;
        }
        match read_loop(conn, read_half, &reader_events, max_frame_bytes).await {
            // The engine answers the word and closes the connection itself.
            Ok(ReadEnd::FourLetterWord) => return,
            Err(reason) => log::info!("connection {conn} from {peer}: {reason}"),
        }
        let _ = reader_events.send(NetEvent::Closed { conn }).await;
    });
    let accepted = NetEvent::Accepted {
        conn,
        peer,
        writer,
        reader: reader.clone(),
        client_certificate,
    };
    if events.send(accepted).await.is_err() {
        reader.abort();
        return;
    }
    let _ = announced.send(());
}

enum ReadEnd {
    FourLetterWord,
}

/// Reads into one buffer and hands the engine every complete frame a read
/// brought as one event: one copy, allocation and channel send per read
/// rather than per frame (pipelined clients send many frames at once).
async fn read_loop(
    conn: ConnId,
    mut socket: impl AsyncRead + Unpin,
    events: &mpsc::Sender<NetEvent>,
    max_frame_bytes: usize,
) -> Result<ReadEnd, String> {
    let decoder = FrameDecoder::new(max_frame_bytes);
    let mut buf: Vec<u8> = Vec::with_capacity(READ_BUFFER_BYTES);
    let mut first = true;
    // The connection's first frame, its connect request, is not decoded here.
    let mut first_frame = true;
    // Bytes the frame at the front of `buf` needs in all, once known.
    let mut wanted = FRAME_LENGTH_BYTES;
    loop {
        buf.reserve(wanted.saturating_sub(buf.len()).max(READ_BUFFER_BYTES / 4));
        match socket.read_buf(&mut buf).await {
            Ok(0) if buf.is_empty() => return Err("closed by peer".into()),
            Ok(0) => return Err("closed by peer in the middle of a frame".into()),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
        if first {
            let Some(&head) = buf.first_chunk::<FRAME_LENGTH_BYTES>() else {
                continue;
            };
            first = false;
            if let Some(word) = fourlw::recognise(head) {
                let _ = events
                    .send(NetEvent::FourLetter {
                        conn,
                        word: word.to_string(),
                    })
                    .await;
                return Ok(ReadEnd::FourLetterWord);
            }
        }
        let (complete, next) = whole_frames(&buf, &decoder)
            .map_err(|e| format!("{e} (jute.maxbuffer); closing connection"))?;
        wanted = next;
        if complete == 0 {
            continue;
        }
        // Decoding a request is pure: it leaves the engine's thread here.
        let frames = decode_frames(&decoder, &buf[..complete], first_frame);
        first_frame = false;
        buf.drain(..complete);
        if buf.capacity() > READ_BUFFER_KEPT_BYTES_MAX && buf.len() < READ_BUFFER_BYTES {
            buf.shrink_to(READ_BUFFER_BYTES);
        }
        if events
            .send(NetEvent::Frames { conn, frames })
            .await
            .is_err()
        {
            return Err("server shutting down".into());
        }
    }
}

/// How many bytes at the front of `buf` are whole frames, and how many
/// bytes the frame after them takes in all (prefix included) as far as
/// known: its length once its prefix is there, else just the prefix.
fn whole_frames(buf: &[u8], decoder: &FrameDecoder) -> Result<(usize, usize), FrameError> {
    let mut complete = 0;
    while let Some((consumed, _)) = decoder.decode(&buf[complete..])? {
        complete += consumed;
    }
    let next = match buf[complete..].first_chunk::<FRAME_LENGTH_BYTES>() {
        // The decoder has checked it: not negative, not over the maximum.
        Some(&prefix) => FRAME_LENGTH_BYTES + i32::from_be_bytes(prefix) as usize,
        None => FRAME_LENGTH_BYTES,
    };
    Ok((complete, next))
}

/// A connection's sending side and its writer task: on the partition
/// thread, with the socket shared for direct writes; on the pool, with the
/// socket the task's alone.
fn spawn_writer(socket: OwnedWriteHalf, threads: &ConnThreads) -> ConnWriter {
    let (tasks, outgoing) = mpsc::unbounded_channel();
    match threads {
        ConnThreads::Partition => {
            let side = Arc::new(WriteSide {
                socket,
                backlogged: AtomicBool::new(false),
            });
            tokio::task::spawn_local(shared_write_loop(Arc::clone(&side), outgoing));
            ConnWriter {
                side: Some(side),
                tasks,
            }
        }
        ConnThreads::Pool(_) => {
            threads.spawn(write_loop(Sink::Plain(socket), outgoing));
            ConnWriter { side: None, tasks }
        }
    }
}

/// A TLS connection's sending side: every write goes through its task.
fn spawn_tls_writer(socket: WriteHalf<TlsStream<TcpStream>>, threads: &ConnThreads) -> ConnWriter {
    let (tasks, outgoing) = mpsc::unbounded_channel();
    threads.spawn(write_loop(Sink::Tls(socket), outgoing));
    ConnWriter { side: None, tasks }
}

/// What a writer task writes into, its alone.
enum Sink {
    Plain(OwnedWriteHalf),
    Tls(WriteHalf<TlsStream<TcpStream>>),
}

/// Puts in `buf` the bytes to write next: `first`'s own buffer when nothing
/// else waits, else it and what is queued after it, up to the coalescing
/// bound. True when the connection closes after them.
fn gather(
    first: Outgoing,
    outgoing: &mut mpsc::UnboundedReceiver<Outgoing>,
    buf: &mut Vec<u8>,
) -> bool {
    let mut next = Some(first);
    while let Some(item) = next.take() {
        match item {
            Outgoing::Bytes(bytes) if buf.is_empty() => *buf = bytes,
            Outgoing::Bytes(bytes) => buf.extend_from_slice(&bytes),
            Outgoing::Frames(frames) => encode_frames(buf, &frames),
            Outgoing::Close => return true,
        }
        if buf.len() < WRITE_COALESCE_BYTES_MAX {
            next = outgoing.try_recv().ok();
        }
    }
    false
}

/// Writes everything handed to a connection, in order. Dropping the
/// write half shuts the sending side of the socket (TLS: after its
/// close_notify).
async fn write_loop(mut sink: Sink, mut outgoing: mpsc::UnboundedReceiver<Outgoing>) {
    let mut buf = Vec::new();
    while let Some(first) = outgoing.recv().await {
        let close = gather(first, &mut outgoing, &mut buf);
        if !buf.is_empty() {
            let written = match &mut sink {
                Sink::Plain(socket) => write_all(socket, &buf).await,
                Sink::Tls(socket) => match socket.write_all(&buf).await {
                    Ok(()) => socket.flush().await,
                    Err(e) => Err(e),
                },
            };
            if written.is_err() {
                return;
            }
            buf.clear();
        }
        if close {
            if let Sink::Tls(socket) = &mut sink {
                let _ = socket.shutdown().await;
            }
            return;
        }
    }
}

/// Writes what [`ConnWriter::send`] could not, in order; clears the
/// backlog mark once nothing waits. Dropping the last reference to the
/// write half shuts the sending side of the socket.
async fn shared_write_loop(side: Arc<WriteSide>, mut outgoing: mpsc::UnboundedReceiver<Outgoing>) {
    let mut buf = Vec::new();
    while let Some(first) = outgoing.recv().await {
        let close = gather(first, &mut outgoing, &mut buf);
        if !buf.is_empty() {
            if write_all(&side.socket, &buf).await.is_err() {
                return;
            }
            buf.clear();
        }
        if close {
            return;
        }
        // No await between this check and the mark: the partition loop,
        // on this same thread, cannot send in between.
        if outgoing.is_empty() {
            side.backlogged.store(false, Ordering::Relaxed);
        }
    }
}

async fn write_all(socket: &OwnedWriteHalf, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        socket.writable().await?;
        match socket.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn framed(bodies: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for body in bodies {
            out.extend_from_slice(&(body.len() as i32).to_be_bytes());
            out.extend_from_slice(body);
        }
        out
    }

    proptest! {
        /// However the stream is cut into reads, the hand-offs carry the
        /// frames whole and in order, and nothing is left over.
        #[test]
        fn reads_cut_anywhere_hand_off_whole_frames_in_order(
            bodies in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..12),
            cuts in prop::collection::vec(1usize..200, 1..40),
        ) {
            let stream = framed(&bodies);
            let decoder = FrameDecoder::new(1000);
            let (mut buf, mut handed, mut at) = (Vec::new(), Vec::new(), 0);
            for cut in cuts.iter().cycle() {
                if at == stream.len() {
                    break;
                }
                let end = (at + cut).min(stream.len());
                buf.extend_from_slice(&stream[at..end]);
                at = end;
                let (complete, wanted) = whole_frames(&buf, &decoder).unwrap();
                prop_assert!(wanted >= FRAME_LENGTH_BYTES);
                if buf.len() > complete + FRAME_LENGTH_BYTES {
                    prop_assert!(wanted > buf.len() - complete, "a whole frame was left behind");
                }
                handed.extend(buf.drain(..complete));
            }
            prop_assert!(buf.is_empty());
            prop_assert_eq!(handed, stream);
        }
    }

    #[test]
    fn a_frame_over_the_maximum_or_negative_is_refused_from_its_prefix() {
        let decoder = FrameDecoder::new(100);
        assert_eq!(whole_frames(&[0, 0], &decoder).unwrap(), (0, 4));
        assert_eq!(whole_frames(&[0, 0, 0, 100], &decoder).unwrap(), (0, 104));
        assert!(whole_frames(&[0, 0, 0, 101], &decoder).is_err());
        assert!(whole_frames(&(-1i32).to_be_bytes(), &decoder).is_err());
        let two = framed(&[vec![7; 3], vec![8; 5]]);
        assert_eq!(whole_frames(&two, &decoder).unwrap(), (two.len(), 4));
        assert_eq!(whole_frames(&two[..10], &decoder).unwrap(), (7, 4));
        assert_eq!(whole_frames(&two[..11], &decoder).unwrap(), (7, 9));
    }

    /// A connected pair on loopback, the accepted side's send buffer and
    /// the peer's receive buffer small, so a burst fills them (loopback's
    /// grow to MiBs): (accepted, peer).
    async fn small_buffered_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let peer = TcpStream::connect(addr).await.expect("connect");
        let (stream, _) = listener.accept().await.expect("accept");
        socket2::SockRef::from(&stream)
            .set_send_buffer_size(32 * 1024)
            .expect("SO_SNDBUF");
        socket2::SockRef::from(&peer)
            .set_recv_buffer_size(32 * 1024)
            .expect("SO_RCVBUF");
        (stream, peer)
    }

    /// Reads everything the peer gets, a little at a time, to the end.
    async fn read_slowly(mut peer: TcpStream) -> Vec<u8> {
        let mut got = Vec::new();
        let mut piece = vec![0u8; 8 * 1024];
        loop {
            let n = peer.read(&mut piece).await.expect("read");
            if n == 0 {
                return got;
            }
            got.extend_from_slice(&piece[..n]);
            tokio::task::yield_now().await;
        }
    }

    /// The stream `reader` got ends within 30 s and holds the words 0 to
    /// `words`, each once, in order.
    async fn assert_words_in_order(reader: tokio::task::JoinHandle<Vec<u8>>, words: u32) {
        let got = tokio::time::timeout(std::time::Duration::from_secs(30), reader)
            .await
            .expect("the stream ends after the close")
            .expect("reader");
        assert_eq!(got.len(), words as usize * 4);
        for (i, word) in got.chunks_exact(4).enumerate() {
            let word = u32::from_be_bytes(word.try_into().expect("four bytes"));
            assert_eq!(word, i as u32, "word {i}");
        }
    }

    /// A peer that reads slowly: the socket's buffer fills, sends queue
    /// behind the writer task, and while the peer drains the buffer the
    /// sends after them keep queuing until the task has caught up; the
    /// peer gets every byte once, in order, and then the end of the stream.
    #[test]
    fn sends_past_a_full_socket_buffer_arrive_whole_and_in_order() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let local = tokio::task::LocalSet::new();
        local.block_on(&runtime, async {
            let (stream, peer) = small_buffered_pair().await;
            let (_read_half, write_half) = stream.into_split();
            let writer = spawn_writer(write_half, &ConnThreads::Partition);
            // Sends numbered 4-byte words; the peer reads a little at a
            // time, so the buffer fills and drains many times over.
            let words = 4_000_000u32;
            let reader = tokio::task::spawn_local(read_slowly(peer));
            let (mut queued, mut direct_after_backlog) = (0, 0);
            let mut next = 0u32;
            let mut send = |count: u32| {
                let end = (next + count).min(words);
                let bytes: Vec<u8> = (next..end).flat_map(u32::to_be_bytes).collect();
                let was_backlogged = writer
                    .side
                    .as_ref()
                    .unwrap()
                    .backlogged
                    .load(Ordering::Relaxed);
                writer.send(bytes);
                if writer
                    .side
                    .as_ref()
                    .unwrap()
                    .backlogged
                    .load(Ordering::Relaxed)
                {
                    queued += 1;
                } else if queued > 0 && !was_backlogged {
                    direct_after_backlog += 1;
                }
                next = end;
            };
            // Bursts the peer cannot keep up with, then a trickle it can.
            for _ in 0..words / 500_000 {
                for _ in 0..25 {
                    send(16_000);
                }
                for k in 0..200 {
                    send(100);
                    for _ in 0..k % 4 {
                        tokio::task::yield_now().await;
                    }
                }
            }
            send(words);
            assert!(queued > 0, "the socket buffer never filled");
            assert!(direct_after_backlog > 0, "the writer task never caught up");
            writer.close();
            drop(writer);
            assert_words_in_order(reader, words).await;
        });
    }

    /// On the I/O threads every send goes through the connection's writer
    /// task, on another thread than the sender: the peer, reading slowly,
    /// still gets every byte once, in order, then the end of the stream.
    #[test]
    fn sends_from_another_thread_arrive_whole_and_in_order() {
        let pool = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("pool");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let threads = ConnThreads::Pool(pool.handle().clone());
        let local = tokio::task::LocalSet::new();
        local.block_on(&runtime, async {
            let (stream, peer) = small_buffered_pair().await;
            let (_read_half, write_half) = stream.into_split();
            let writer = spawn_writer(write_half, &threads);
            assert!(
                writer.side.is_none(),
                "no direct writes from another thread"
            );
            let words = 2_000_000u32;
            let reader = tokio::task::spawn_local(read_slowly(peer));
            let mut next = 0u32;
            for k in 0.. {
                let end = (next + [3, 100, 16_000][k % 3]).min(words);
                writer.send((next..end).flat_map(u32::to_be_bytes).collect());
                next = end;
                if next == words {
                    break;
                }
                if k % 7 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            writer.close();
            drop(writer);
            assert_words_in_order(reader, words).await;
        });
    }
}
