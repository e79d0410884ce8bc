//! The AdminServer: ZooKeeper's HTTP command interface (`admin.*` keys,
//! `/commands/<name>` answering JSON), plus health endpoints for
//! orchestrators, and the dashboard (`crate::dashboard`). The commands run on the engine's thread
//! (`stoa_core::admin`); this side parses HTTP, answers what needs the
//! disk (`dirs`) and bounds how long a request may wait for the engine.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use stoa_core::admin::{self, AdminAnswer, AdminCall, Json};
use stoa_core::node::server_snapshot::ServerSnapshot;

use crate::dashboard;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

/// Work for the engine's thread, each answered on its `reply`.
pub enum AdminRequest {
    /// A command answered with JSON (or a health probe).
    Call {
        call: AdminCall,
        reply: oneshot::Sender<AdminAnswer>,
    },
    /// May the request run `requested` (`snapshot`, `restore`)? None: yes.
    Authorize {
        requested: String,
        authorization: Option<String>,
        peer: Option<IpAddr>,
        /// The subject of the client certificate an HTTPS request showed.
        certificate: Option<String>,
        reply: oneshot::Sender<Option<AdminAnswer>>,
    },
    /// The state now, for `snapshot` to write out.
    Snapshot {
        reply: oneshot::Sender<ServerSnapshot>,
    },
    /// `restore`: answered once every member applied it, or refused.
    Restore {
        token: u64,
        zxid: i64,
        parts: Vec<Vec<u8>>,
        reply: oneshot::Sender<AdminAnswer>,
    },
}

/// Bytes of a request head read before answering; a longer one is refused.
const REQUEST_HEAD_BYTES_MAX: usize = 16 * 1024;
/// How long a request waits for its head, and for the engine's answer.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may last: a snapshot or a restore moves a whole
/// tree through it.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(600);

/// What the AdminServer serves, from the configuration.
#[derive(Clone)]
pub struct AdminSite {
    pub address: SocketAddr,
    /// `admin.commandURL`, without a trailing slash.
    pub command_url: String,
    pub data_dir: PathBuf,
    pub log_dir: PathBuf,
    /// The zoo.cfg text a standalone server started from (ZooKeeper's
    /// `initial_configuration`; `None` in an ensemble, as ZooKeeper's
    /// QuorumPeerMain answers null).
    pub initial_configuration: Option<String>,
    pub host_name: String,
    /// `snapshot` and `restore`.
    pub transfers: crate::admin_transfer::TransferSettings,
}

/// ZooKeeper's trace mask (`get_trace_mask`, `set_trace_mask`): kept and
/// echoed, as Stoa's logging has levels rather than a mask.
static TRACE_MASK: AtomicI64 = AtomicI64::new(306);

/// How the AdminServer's port speaks (`admin.forceHttps`,
/// `admin.portUnification`).
pub enum AdminTransport {
    Http,
    /// HTTPS only.
    Https(crate::tls::TlsSettings),
    /// Both, told apart by a request's first byte (a TLS handshake's is
    /// 0x16).
    Both(crate::tls::TlsSettings),
}

/// The first byte of a TLS record carrying a handshake.
const TLS_HANDSHAKE_BYTE: u8 = 0x16;

pub async fn serve(site: AdminSite, engine: mpsc::Sender<AdminRequest>, transport: AdminTransport) {
    let (settings, https_only) = match transport {
        AdminTransport::Http => (None, false),
        AdminTransport::Https(settings) => (Some(settings), true),
        AdminTransport::Both(settings) => (Some(settings), false),
    };
    let mut tls = match settings.map(crate::tls::ReloadingConfig::new).transpose() {
        Ok(tls) => tls,
        Err(e) => {
            log::warn!("AdminServer: HTTPS cannot start, so neither does it: {e}");
            return;
        }
    };
    let listener = match TcpListener::bind(site.address).await {
        Ok(l) => l,
        Err(e) => {
            // ZooKeeper too goes on serving clients without its AdminServer.
            log::warn!(
                "AdminServer: cannot listen on {}: {e} (set admin.serverPort, or \
                 admin.enableServer=false)",
                site.address
            );
            return;
        }
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    log::info!(
        "AdminServer on {scheme}://{}{}",
        site.address,
        site.command_url
    );
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        let peer = Some(peer.ip());
        let (site, engine) = (site.clone(), engine.clone());
        let acceptor = tls
            .as_mut()
            .map(|t| tokio_rustls::TlsAcceptor::from(t.current()));
        tokio::task::spawn_local(async move {
            let served = async {
                let Some(acceptor) = acceptor else {
                    return answer(stream, &site, &engine, peer, None).await;
                };
                let mut first = [0u8; 1];
                let https = https_only
                    || matches!(stream.peek(&mut first).await, Ok(1) if first[0] == TLS_HANDSHAKE_BYTE);
                if !https {
                    return answer(stream, &site, &engine, peer, None).await;
                }
                match acceptor.accept(stream).await {
                    Ok(stream) => {
                        let certificate = (stream.get_ref().1.peer_certificates())
                            .and_then(|chain| chain.first())
                            .and_then(|cert| crate::tls::x509_subject(cert));
                        answer(stream, &site, &engine, peer, certificate).await
                    }
                    Err(e) => log::info!("AdminServer: TLS handshake failed: {e}"),
                }
            };
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, served).await;
        });
    }
}

async fn answer(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    site: &AdminSite,
    engine: &mpsc::Sender<AdminRequest>,
    peer: Option<IpAddr>,
    certificate: Option<String>,
) {
    let mut received = Vec::new();
    let mut buf = [0u8; 2048];
    let read_head = async {
        loop {
            if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
                return Some(end + 4);
            }
            if received.len() > REQUEST_HEAD_BYTES_MAX {
                return None;
            }
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return Some(0),
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    };
    let head_end = match tokio::time::timeout(REQUEST_TIMEOUT, read_head).await {
        Ok(Some(0)) | Err(_) => return,
        Ok(Some(end)) => end,
        Ok(None) => {
            let _ = write_response(&mut stream, &too_large(), false, "").await;
            return;
        }
    };
    // What came after the head: the start of a request's body.
    let body_start = received.split_off(head_end);
    let head = String::from_utf8_lossy(&received);
    let request_line = head.lines().next().unwrap_or_default();
    let (response, head_only, headers) = match parse_request_line(request_line) {
        Some((method, target)) => {
            let route = route(site, &method, &target);
            if let Route::Command { name, args } = &route {
                if let Some(transfer) = crate::admin_transfer::transfer_of(name) {
                    let request = crate::admin_transfer::TransferRequest {
                        transfer,
                        requested: name,
                        method: &method,
                        args,
                        head: &head,
                        body_start,
                        peer,
                        certificate,
                    };
                    crate::admin_transfer::serve(request, stream, site, engine).await;
                    return;
                }
            }
            let headers = match route {
                Route::Dashboard(_) => dashboard::HEADERS,
                _ => "",
            };
            (
                respond(route, site, engine).await,
                method == "HEAD",
                headers,
            )
        }
        None => (
            AdminAnswer::error(400, "", "malformed request line"),
            false,
            "",
        ),
    };
    let _ = write_response(&mut stream, &response, head_only, headers).await;
}

/// The value of the head's header `name` (any case), trimmed.
pub(crate) fn header<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines()
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .find(|(key, _)| key.trim().eq_ignore_ascii_case(name))
        .map(|(_, value)| value.trim())
}

fn too_large() -> AdminAnswer {
    AdminAnswer::error(431, "", "request head too large")
}

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// The list of commands (`admin.commandURL` itself).
    Listing,
    /// `OPTIONS`: the methods served.
    Options,
    Command {
        name: String,
        args: Vec<(String, String)>,
    },
    /// Alive: the process answers.
    Live,
    /// Ready: serving clients (a leader known, or standalone and caught up).
    Ready,
    /// A file of the dashboard.
    Dashboard(dashboard::Asset),
    NotFound,
    MethodNotAllowed,
}

/// `METHOD target HTTP/x.y` → (method, target).
pub fn parse_request_line(line: &str) -> Option<(String, String)> {
    let mut parts = line.split(' ');
    let method = parts.next()?;
    let target = parts.next()?;
    let version = parts.next()?;
    if parts.next().is_some() || !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return None;
    }
    Some((method.to_string(), target.to_string()))
}

pub fn route(site: &AdminSite, method: &str, target: &str) -> Route {
    match method {
        "GET" | "HEAD" | "POST" => {}
        "OPTIONS" => return Route::Options,
        _ => return Route::MethodNotAllowed,
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    match path {
        "/health/live" => return Route::Live,
        "/health/ready" => return Route::Ready,
        _ => {}
    }
    if let Some(asset) = dashboard::asset(path, &site.command_url) {
        return Route::Dashboard(asset);
    }
    let Some(rest) = path.strip_prefix(site.command_url.as_str()) else {
        return Route::NotFound;
    };
    match rest {
        "" | "/" => Route::Listing,
        _ => match rest.strip_prefix('/') {
            Some(name) if !name.contains('/') => Route::Command {
                name: percent_decode(name),
                args: parse_query(query),
            },
            _ => Route::NotFound,
        },
    }
}

/// `a=1&b=2` → pairs, percent-decoded (`+` is a space).
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (
                percent_decode(&k.replace('+', " ")),
                percent_decode(&v.replace('+', " ")),
            )
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn respond(
    route: Route,
    site: &AdminSite,
    engine: &mpsc::Sender<AdminRequest>,
) -> AdminAnswer {
    match route {
        Route::Listing => AdminAnswer {
            status: 200,
            // ZooKeeper sends its listing with no Content-Type.
            content_type: "",
            body: admin::listing(&site.command_url),
        },
        Route::Options => AdminAnswer {
            status: 200,
            content_type: "",
            body: String::new(),
        },
        Route::Command { name, args } => {
            if let Some(answer) = answer_here(site, &name, &args) {
                return answer;
            }
            let call = AdminCall::Command { name, args };
            ask(engine, call).await
        }
        Route::Dashboard(asset) => {
            let (content_type, body) = dashboard::content(asset, &site.command_url);
            AdminAnswer {
                status: 200,
                content_type,
                body,
            }
        }
        Route::Live => ask(engine, AdminCall::Live).await,
        Route::Ready => ask(engine, AdminCall::Ready).await,
        Route::NotFound => AdminAnswer::error(404, "", "not found"),
        Route::MethodNotAllowed => AdminAnswer::error(405, "", "method not allowed"),
    }
}

/// Runs `call` on the engine's thread; a stopped or stuck engine is a 503.
async fn ask(engine: &mpsc::Sender<AdminRequest>, call: AdminCall) -> AdminAnswer {
    let asked = ask_engine(
        engine,
        |reply| AdminRequest::Call { call, reply },
        REQUEST_TIMEOUT,
    );
    asked
        .await
        .unwrap_or_else(|why| AdminAnswer::error(503, "", why))
}

/// Sends the engine's thread the request `make` builds around a reply
/// channel, and waits up to `wait` for the reply.
pub(crate) async fn ask_engine<T>(
    engine: &mpsc::Sender<AdminRequest>,
    make: impl FnOnce(oneshot::Sender<T>) -> AdminRequest,
    wait: Duration,
) -> Result<T, &'static str> {
    let (reply, answer) = oneshot::channel();
    let asked = async {
        engine
            .send(make(reply))
            .await
            .map_err(|_| "the server is stopping")?;
        answer.await.map_err(|_| "the server is stopping")
    };
    (tokio::time::timeout(wait, asked).await).unwrap_or(Err("the server did not answer in time"))
}

/// The commands about the process and its disk rather than the engine.
fn answer_here(site: &AdminSite, name: &str, args: &[(String, String)]) -> Option<AdminAnswer> {
    let (command, _) = admin::resolve(name)?;
    let data: Vec<(String, Json)> = match command {
        // Bytes in the snapshot and WAL directories, as ZooKeeper counts
        // its snapshot and transaction log directories.
        "dirs" => vec![
            (
                "datadir_size".into(),
                Json::Int(dir_bytes(&site.data_dir.join("snapshots")) as i64),
            ),
            (
                "logdir_size".into(),
                Json::Int(dir_bytes(&site.log_dir) as i64),
            ),
        ],
        "environment" => environment(site)
            .into_iter()
            .map(|(k, v)| (k.to_string(), Json::str(v)))
            .collect(),
        "system_properties" => {
            let mut pairs = environment(site);
            pairs.push(("stoa.version", env!("CARGO_PKG_VERSION").to_string()));
            pairs.sort();
            pairs
                .into_iter()
                .map(|(k, v)| (k.to_string(), Json::str(v)))
                .collect()
        }
        "get_trace_mask" => vec![(
            "tracemask".into(),
            Json::Int(TRACE_MASK.load(Ordering::Relaxed)),
        )],
        "set_trace_mask" => match args.iter().find(|(k, _)| k == "traceMask") {
            None => vec![(
                "error".into(),
                Json::str("setTraceMask requires long traceMask argument"),
            )],
            Some((_, value)) => match value.parse::<i64>() {
                Ok(mask) => {
                    TRACE_MASK.store(mask, Ordering::Relaxed);
                    vec![("tracemask".into(), Json::Int(mask))]
                }
                Err(_) => vec![(
                    "error".into(),
                    Json::str(format!(
                        "setTraceMask requires long traceMask argument, got {value}"
                    )),
                )],
            },
        },
        "initial_configuration" => vec![(
            "initial_configuration".into(),
            site.initial_configuration
                .clone()
                .map_or(Json::Null, Json::Str),
        )],
        _ => return None,
    };
    Some(AdminAnswer::json(
        200,
        &admin::response(command, data, None),
    ))
}

/// ZooKeeper's `environment` keys, with what this process has for them
/// (`<NA>` where the key is about a JVM).
fn environment(site: &AdminSite) -> Vec<(&'static str, String)> {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| "<NA>".into());
    let na = || "<NA>".to_string();
    let os_version = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|_| na());
    vec![
        ("zookeeper.version", stoa_core::stats::version_line()),
        ("host.name", site.host_name.clone()),
        ("java.version", na()),
        ("java.vendor", na()),
        ("java.home", na()),
        ("java.class.path", na()),
        ("java.library.path", na()),
        ("java.io.tmpdir", std::env::temp_dir().display().to_string()),
        ("java.compiler", na()),
        ("os.name", std::env::consts::OS.to_string()),
        ("os.arch", std::env::consts::ARCH.to_string()),
        ("os.version", os_version),
        ("user.name", var("USER")),
        ("user.home", var("HOME")),
        (
            "user.dir",
            std::env::current_dir().map_or_else(|_| na(), |d| d.display().to_string()),
        ),
        ("os.memory.free", na()),
        ("os.memory.max", na()),
        ("os.memory.total", na()),
    ]
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return 0;
    };
    listing
        .flatten()
        .map(|item| match item.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&item.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

pub(crate) async fn write_response(
    stream: &mut (impl AsyncWrite + Unpin),
    response: &AdminAnswer,
    head_only: bool,
    extra_headers: &str,
) -> std::io::Result<()> {
    let reason = match response.status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Server Error",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    };
    let content_type = match response.content_type {
        "" => String::new(),
        t => format!("Content-Type: {t}\r\n"),
    };
    let allow = "Allow: GET, HEAD, POST, OPTIONS\r\n";
    let mut out = format!(
        "HTTP/1.1 {} {reason}\r\n{content_type}{allow}{extra_headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        response.status,
        response.body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(response.body.as_bytes());
    }
    stream.write_all(&out).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> AdminSite {
        AdminSite {
            address: "127.0.0.1:8080".parse().unwrap(),
            command_url: "/commands".into(),
            data_dir: PathBuf::from("data"),
            log_dir: PathBuf::from("data/wal"),
            initial_configuration: None,
            host_name: "h".into(),
            transfers: crate::admin_transfer::TransferSettings::new(
                true,
                true,
                Duration::from_secs(1),
                1,
                false,
            ),
        }
    }

    #[test]
    fn requests_route_as_zookeepers_servlet_maps_them() {
        let s = site();
        assert_eq!(route(&s, "GET", "/commands"), Route::Listing);
        assert_eq!(route(&s, "GET", "/commands/?x=1"), Route::Listing);
        let stat = |args: Vec<(String, String)>| Route::Command {
            name: "stat".into(),
            args,
        };
        assert_eq!(route(&s, "GET", "/commands/%73tat"), stat(vec![]));
        assert_eq!(
            route(&s, "HEAD", "/commands/stat?a=1&b=x+y%21&a=2"),
            stat(vec![
                ("a".into(), "1".into()),
                ("b".into(), "x y!".into()),
                ("a".into(), "2".into())
            ])
        );
        assert_eq!(route(&s, "GET", "/commands/stat/extra"), Route::NotFound);
        assert_eq!(route(&s, "GET", "/commandsX"), Route::NotFound);
        assert_eq!(route(&s, "GET", "/x"), Route::NotFound);
        let page = Route::Dashboard(dashboard::Asset::Page);
        assert_eq!(route(&s, "GET", "/"), page);
        assert_eq!(route(&s, "HEAD", "/dashboard?x=1"), page);
        assert_eq!(route(&s, "PUT", "/commands/stat"), Route::MethodNotAllowed);
        assert_eq!(route(&s, "OPTIONS", "/commands/stat"), Route::Options);
        assert_eq!(route(&s, "GET", "/health/ready"), Route::Ready);
        assert_eq!(
            parse_request_line("GET /commands HTTP/1.1"),
            Some(("GET".into(), "/commands".into()))
        );
        for bad in [
            "GET /commands",
            "GET commands HTTP/1.1",
            "GET / HTTP/2 x",
            "",
        ] {
            assert_eq!(parse_request_line(bad), None, "{bad}");
        }
    }

    #[test]
    fn percent_decoding_keeps_what_is_not_an_escape() {
        assert_eq!(percent_decode("a%2Fb%zz%4"), "a/b%zz%4");
    }

    #[test]
    fn the_trace_mask_commands_check_their_argument() {
        let s = site();
        let ask = |args: &[(&str, &str)]| {
            let args: Vec<(String, String)> = args
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            answer_here(&s, "stmk", &args).expect("answered here").body
        };
        assert!(ask(&[]).contains("requires long traceMask argument"));
        assert!(ask(&[("traceMask", "0x1")]).contains("got 0x1"));
        assert!(ask(&[("traceMask", "-5")]).contains("\"tracemask\" : -5"));
        assert!(answer_here(&s, "ruok", &[]).is_none());
    }
}
