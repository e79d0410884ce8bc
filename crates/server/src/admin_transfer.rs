//! The AdminServer's `snapshot` and `restore` over HTTP, as ZooKeeper 3.9
//! serves them (docs/operations.md, "Snapshot and restore"): an
//! `Authorization` header naming an identity with every right on `/`,
//! `admin.snapshot.enabled` / `admin.restore.enabled`, one of each per
//! `admin.rateLimiterIntervalInMS`. `snapshot` streams the whole server's
//! state (`GET …/snapshot?streaming=true`, with `last_zxid` and
//! `snapshot_size` headers); `restore` takes a snapshot as a POST body and
//! answers once it applied (`engine/admin_snapshots.rs` says how it
//! differs from ZooKeeper's). Serializing and parsing trees run off the
//! engine's thread.

use std::io::{Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stoa_core::admin::{self, AdminAnswer};
use stoa_core::node::server_snapshot;
use stoa_core::restore_image;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::admin::{ask_engine, header, write_response, AdminRequest, AdminSite, REQUEST_TIMEOUT};

/// Bytes a restore's body may hold. Its trees may take 60 MiB once
/// serialized (one raft entry), and a snapshot's bytes are about its
/// trees' size in either format, so a larger body cannot restore; twice
/// that leaves room for the formats' differences without parsing what
/// will be refused.
const RESTORE_BODY_BYTES_MAX: u64 = 128 << 20;
/// How long a restore waits for its members to apply it.
const RESTORE_WAIT: Duration = Duration::from_secs(60);
/// Bytes of the snapshot file sent per read.
const STREAM_CHUNK_BYTES: usize = 1 << 20;

/// Names requests and temporary files apart.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    Snapshot,
    Restore,
}

impl Transfer {
    fn name(self) -> &'static str {
        match self {
            Transfer::Snapshot => "snapshot",
            Transfer::Restore => "restore",
        }
    }
}

/// `snapshot` or `restore`, by any of their names.
pub fn transfer_of(requested: &str) -> Option<Transfer> {
    match admin::resolve(requested)?.0 {
        "snapshot" => Some(Transfer::Snapshot),
        "restore" => Some(Transfer::Restore),
        _ => None,
    }
}

/// ZooKeeper's limiter: one call per window of `interval`, a window
/// opening at the first call after the last one closed.
struct RateLimiter {
    interval: Duration,
    /// When the current window opened, and whether its call was taken.
    window: Mutex<(Option<Instant>, bool)>,
}

impl RateLimiter {
    fn new(interval: Duration) -> RateLimiter {
        RateLimiter {
            interval,
            window: Mutex::new((None, false)),
        }
    }

    fn allow(&self) -> bool {
        let now = Instant::now();
        let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        if window.0.is_none_or(|opened| now > opened + self.interval) {
            *window = (Some(now), false);
        }
        !std::mem::replace(&mut window.1, true)
    }
}

/// What the configuration says of `snapshot` and `restore`.
#[derive(Clone)]
pub struct TransferSettings {
    pub snapshot_enabled: bool,
    pub restore_enabled: bool,
    /// The server's partitions, and whether `partition.groups` places
    /// subtrees on partitions other than 0 (`restore_image::restore_parts`).
    pub partitions: usize,
    pub groups_configured: bool,
    snapshot_limiter: Arc<RateLimiter>,
    restore_limiter: Arc<RateLimiter>,
}

impl TransferSettings {
    pub fn new(
        snapshot_enabled: bool,
        restore_enabled: bool,
        rate_limit_interval: Duration,
        partitions: usize,
        groups_configured: bool,
    ) -> TransferSettings {
        TransferSettings {
            snapshot_enabled,
            restore_enabled,
            partitions,
            groups_configured,
            snapshot_limiter: Arc::new(RateLimiter::new(rate_limit_interval)),
            restore_limiter: Arc::new(RateLimiter::new(rate_limit_interval)),
        }
    }
}

/// A `snapshot` or `restore` request, its head read.
pub struct TransferRequest<'a> {
    pub transfer: Transfer,
    /// The name the request used.
    pub requested: &'a str,
    pub method: &'a str,
    pub args: &'a [(String, String)],
    pub head: &'a str,
    /// Bytes of the body read with the head.
    pub body_start: Vec<u8>,
    pub peer: Option<IpAddr>,
    /// The subject of the client certificate an HTTPS request showed.
    pub certificate: Option<String>,
}

pub async fn serve(
    request: TransferRequest<'_>,
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    site: &AdminSite,
    engine: &mpsc::Sender<AdminRequest>,
) {
    let name = request.transfer.name();
    let answer = match (request.transfer, request.method) {
        (Transfer::Snapshot, "GET" | "HEAD") => match take_snapshot(&request, site, engine).await {
            Ok(file) => {
                let head_only = request.method == "HEAD";
                let sent = send_snapshot(&mut stream, &file, head_only).await;
                if let Err(e) = sent {
                    log::info!("AdminServer: snapshot not sent whole: {e}");
                }
                let _ = std::fs::remove_file(&file.path);
                return;
            }
            Err(answer) => answer,
        },
        (Transfer::Restore, "POST") => restore(request, &mut stream, site, engine).await,
        (Transfer::Snapshot, _) => AdminAnswer::error(405, name, "snapshot is read with GET"),
        (Transfer::Restore, _) => AdminAnswer::error(
            405,
            name,
            "restore takes the snapshot as the body of a POST",
        ),
    };
    let _ = write_response(&mut stream, &answer, false, "").await;
}

/// ZooKeeper's answer with a status and no error text.
fn bare(status: u16, command: &str) -> AdminAnswer {
    AdminAnswer::json(status, &admin::response(command, Vec::new(), None))
}

/// Asks the engine whether the request's identity may run the command.
async fn authorize(
    request: &TransferRequest<'_>,
    engine: &mpsc::Sender<AdminRequest>,
) -> Option<AdminAnswer> {
    let authorization = header(request.head, "authorization").map(str::to_string);
    let requested = request.requested.to_string();
    let peer = request.peer;
    let certificate = request.certificate.clone();
    let make = |reply| AdminRequest::Authorize {
        requested,
        authorization,
        peer,
        certificate,
        reply,
    };
    (ask_engine(engine, make, REQUEST_TIMEOUT).await)
        .unwrap_or_else(|why| Some(AdminAnswer::error(503, request.transfer.name(), why)))
}

/// A snapshot written to a temporary file, ready to stream.
struct SnapshotFile {
    path: PathBuf,
    zxid: i64,
    size: u64,
    /// `streaming=false`: the headers alone.
    streaming: bool,
}

async fn take_snapshot(
    request: &TransferRequest<'_>,
    site: &AdminSite,
    engine: &mpsc::Sender<AdminRequest>,
) -> Result<SnapshotFile, AdminAnswer> {
    let name = "snapshot";
    if let Some(refusal) = authorize(request, engine).await {
        return Err(refusal);
    }
    let settings = &site.transfers;
    if !settings.snapshot_enabled {
        return Err(bare(503, name));
    }
    if !settings.snapshot_limiter.allow() {
        return Err(bare(429, name));
    }
    // Java's Boolean.parseBoolean: "true" in any case, else false.
    let streaming = (request.args.iter().rev())
        .find(|(key, _)| key == "streaming")
        .is_none_or(|(_, value)| value.eq_ignore_ascii_case("true"));
    let make = |reply| AdminRequest::Snapshot { reply };
    let snapshot = (ask_engine(engine, make, REQUEST_TIMEOUT).await)
        .map_err(|why| AdminAnswer::error(503, name, why))?;
    let zxid = snapshot.zxid;
    let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
    let path = site
        .data_dir
        .join(format!("snapshot-for-admin-{token}.tmp"));
    let target = path.clone();
    let written = tokio::task::spawn_blocking(move || write_file(&target, &snapshot))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    match written {
        Ok(size) => Ok(SnapshotFile {
            path,
            zxid,
            size,
            streaming,
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            let error = format!("the snapshot could not be written: {e}");
            log::warn!("AdminServer: {error}");
            Err(AdminAnswer::error(500, name, &error))
        }
    }
}

fn write_file(path: &Path, snapshot: &server_snapshot::ServerSnapshot) -> std::io::Result<u64> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    server_snapshot::write_server_snapshot(snapshot, &mut file)?;
    file.flush()?;
    Ok(file.get_ref().metadata()?.len())
}

async fn send_snapshot(
    stream: &mut (impl AsyncWrite + Unpin),
    file: &SnapshotFile,
    head_only: bool,
) -> std::io::Result<()> {
    // ZooKeeper's headers: the zxid as "0x" and hex digits, the size.
    let headers = format!(
        "last_zxid: 0x{:x}\r\nsnapshot_size: {}\r\n",
        file.zxid as u64, file.size
    );
    if !file.streaming {
        let answer = bare(200, "snapshot");
        return write_response(stream, &answer, head_only, &headers).await;
    }
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n{headers}Content-Length: \
         {}\r\nConnection: close\r\n\r\n",
        file.size
    );
    stream.write_all(head.as_bytes()).await?;
    if head_only {
        return stream.shutdown().await;
    }
    let mut source = std::fs::File::open(&file.path)?;
    loop {
        let (back, chunk) = tokio::task::spawn_blocking(move || {
            let mut chunk = vec![0; STREAM_CHUNK_BYTES];
            let read = source.read(&mut chunk);
            (
                source,
                read.map(|n| {
                    chunk.truncate(n);
                    chunk
                }),
            )
        })
        .await
        .map_err(std::io::Error::other)?;
        source = back;
        let chunk = chunk?;
        if chunk.is_empty() {
            break;
        }
        stream.write_all(&chunk).await?;
    }
    stream.shutdown().await
}

async fn restore(
    request: TransferRequest<'_>,
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    site: &AdminSite,
    engine: &mpsc::Sender<AdminRequest>,
) -> AdminAnswer {
    let name = "restore";
    if let Some(refusal) = authorize(&request, engine).await {
        return refusal;
    }
    let settings = &site.transfers;
    if !settings.restore_enabled {
        return bare(503, name);
    }
    let length = match header(request.head, "content-length").map(str::parse::<u64>) {
        Some(Ok(length)) => length,
        Some(Err(_)) => return AdminAnswer::error(400, name, "Content-Length is not a number"),
        None if header(request.head, "transfer-encoding").is_some() => {
            return AdminAnswer::error(411, name, "send the snapshot with a Content-Length");
        }
        None => return AdminAnswer::error(400, name, "restore takes a snapshot as the body"),
    };
    if length > RESTORE_BODY_BYTES_MAX {
        let error = format!("a snapshot of {length} bytes; restore takes {RESTORE_BODY_BYTES_MAX}");
        return AdminAnswer::error(413, name, &error);
    }
    if !settings.restore_limiter.allow() {
        return bare(429, name);
    }
    // curl asks before sending a large body, and waits a second unless told.
    let expects_go_ahead =
        header(request.head, "expect").is_some_and(|e| e.eq_ignore_ascii_case("100-continue"));
    if expects_go_ahead
        && stream
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .is_err()
    {
        return bare(400, name);
    }
    let mut body = request.body_start;
    body.truncate(length as usize);
    let mut rest = (&mut *stream).take(length - body.len() as u64);
    if rest.read_to_end(&mut body).await.is_err() || body.len() as u64 != length {
        return AdminAnswer::error(400, name, "the body ended before its Content-Length");
    }
    let (partitions, groups) = (settings.partitions, settings.groups_configured);
    let parsed = tokio::task::spawn_blocking(move || {
        let image = restore_image::read_restore_image(&body)?;
        let parts = restore_image::restore_parts(&image, partitions, groups)?;
        Ok::<_, String>((image.zxid, image.kind, parts))
    })
    .await;
    let (zxid, kind, parts) = match parsed {
        Ok(Ok(parsed)) => parsed,
        Ok(Err(e)) => {
            log::warn!("AdminServer: restore refused: {e}");
            return AdminAnswer::error(500, name, &e);
        }
        Err(e) => return AdminAnswer::error(500, name, &e.to_string()),
    };
    log::info!("AdminServer: restoring {kind} holding zxids up to {zxid:#x}");
    let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
    let make = |reply| AdminRequest::Restore {
        token,
        zxid,
        parts,
        reply,
    };
    (ask_engine(engine, make, RESTORE_WAIT).await).unwrap_or_else(|why| {
        let error = format!("{why}: the restore may still apply (last_snapshot and mntr say)");
        AdminAnswer::error(504, name, &error)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_call_per_window() {
        let limiter = RateLimiter::new(Duration::from_millis(200));
        assert!(limiter.allow());
        assert!(!limiter.allow());
        std::thread::sleep(Duration::from_millis(250));
        assert!(limiter.allow());
        assert!(!limiter.allow());
    }

    #[test]
    fn the_names_are_zookeepers() {
        assert_eq!(transfer_of("snap"), Some(Transfer::Snapshot));
        assert_eq!(transfer_of("snapshot"), Some(Transfer::Snapshot));
        assert_eq!(transfer_of("rest"), Some(Transfer::Restore));
        assert_eq!(transfer_of("mntr"), None);
    }
}
