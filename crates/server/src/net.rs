//! Client connections: a reader task that cuts frames (or spots a
//! four-letter word) and a writer task that drains replies. Both run on the
//! partition thread's runtime; they talk to the engine loop by channels.

use std::net::SocketAddr;

use stoa_proto::frame::FRAME_LENGTH_BYTES;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::fourlw;
use crate::watch::ConnId;

/// Events from connection tasks to the engine loop.
pub enum NetEvent {
    Accepted {
        conn: ConnId,
        peer: SocketAddr,
        writer: mpsc::UnboundedSender<Outgoing>,
        reader: tokio::task::AbortHandle,
    },
    Frame {
        conn: ConnId,
        body: Vec<u8>,
    },
    FourLetter {
        conn: ConnId,
        word: String,
    },
    Closed {
        conn: ConnId,
    },
}

pub enum Outgoing {
    Bytes(Vec<u8>),
    /// Flush and close.
    Close,
}

/// Bytes read from a socket at once: pipelined requests then cost one
/// `recv` for many frames instead of two per frame.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Coalesce queued replies into one write up to this size.
const WRITE_COALESCE_BYTES_MAX: usize = 256 * 1024;

pub async fn accept_loop(
    listener: TcpListener,
    events: mpsc::Sender<NetEvent>,
    max_frame_bytes: usize,
) {
    let mut next_conn: ConnId = 1;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                log::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let conn = next_conn;
        next_conn += 1;
        spawn_connection(conn, stream, peer, events.clone(), max_frame_bytes).await;
    }
}

async fn spawn_connection(
    conn: ConnId,
    stream: TcpStream,
    peer: SocketAddr,
    events: mpsc::Sender<NetEvent>,
    max_frame_bytes: usize,
) {
    let (read_half, write_half) = stream.into_split();
    let (writer_tx, writer_rx) = mpsc::unbounded_channel();
    tokio::task::spawn_local(write_loop(write_half, writer_rx));
    let reader_events = events.clone();
    let reader = tokio::task::spawn_local(async move {
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
        writer: writer_tx,
        reader: reader.abort_handle(),
    };
    if events.send(accepted).await.is_err() {
        reader.abort();
    }
}

enum ReadEnd {
    FourLetterWord,
}

async fn read_loop(
    conn: ConnId,
    socket: OwnedReadHalf,
    events: &mpsc::Sender<NetEvent>,
    max_frame_bytes: usize,
) -> Result<ReadEnd, String> {
    let mut socket = tokio::io::BufReader::with_capacity(READ_BUFFER_BYTES, socket);
    let mut first = true;
    loop {
        let mut len_bytes = [0u8; FRAME_LENGTH_BYTES];
        if let Err(e) = socket.read_exact(&mut len_bytes).await {
            return Err(if e.kind() == std::io::ErrorKind::UnexpectedEof {
                "closed by peer".into()
            } else {
                e.to_string()
            });
        }
        if first {
            first = false;
            if let Some(word) = fourlw::recognise(len_bytes) {
                let _ = events
                    .send(NetEvent::FourLetter {
                        conn,
                        word: word.to_string(),
                    })
                    .await;
                return Ok(ReadEnd::FourLetterWord);
            }
        }
        let len = i32::from_be_bytes(len_bytes);
        if len < 0 || len as usize > max_frame_bytes {
            return Err(format!(
                "frame length {len} outside 0..={max_frame_bytes} (jute.maxbuffer); closing connection"
            ));
        }
        let mut body = vec![0u8; len as usize];
        socket
            .read_exact(&mut body)
            .await
            .map_err(|e| format!("reading a frame: {e}"))?;
        if events.send(NetEvent::Frame { conn, body }).await.is_err() {
            return Err("server shutting down".into());
        }
    }
}

async fn write_loop(mut socket: OwnedWriteHalf, mut outgoing: mpsc::UnboundedReceiver<Outgoing>) {
    let mut buf = Vec::new();
    while let Some(first) = outgoing.recv().await {
        let mut close = false;
        let mut next = Some(first);
        while let Some(item) = next.take() {
            match item {
                Outgoing::Bytes(bytes) => buf.extend_from_slice(&bytes),
                Outgoing::Close => {
                    close = true;
                    break;
                }
            }
            if buf.len() < WRITE_COALESCE_BYTES_MAX {
                next = outgoing.try_recv().ok();
            }
        }
        if !buf.is_empty() {
            if socket.write_all(&buf).await.is_err() {
                return;
            }
            buf.clear();
        }
        if close {
            let _ = socket.shutdown().await;
            return;
        }
    }
}
