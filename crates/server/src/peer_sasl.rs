//! SASL between members (ZooKeeper's `quorum.auth.*`): the member that
//! dials authenticates with its JAAS `QuorumLearner` login, the member it
//! dials checks it with its `QuorumServer` login. As in ZooKeeper, each
//! section's login module picks the mechanism:
//!
//! - DIGEST-MD5 (`DigestLoginModule`): the dialer's user and password are
//!   checked against the `QuorumServer` section's users, and the dialled
//!   member proves in turn that it knows the password (`rspauth`).
//! - Kerberos, SASL GSSAPI (`Krb5LoginModule`): the dialer asks the KDC
//!   for a ticket to `quorum.auth.kerberos.servicePrincipal` (`_HOST`: the
//!   dialled member's host), the dialled member accepts it with its
//!   keytab's key and proves it (mutual authentication), then lets the
//!   principal in as ZooKeeper does (`stoa_core::sasl::quorum_kerberos`).
//!
//! A dialer that authenticates opens with the SASL hello (`STOASASL`
//! instead of `STOAPEER`); the exchange then runs before any other frame.
//! The dialled member speaks first, and its first step says its mechanism:
//!
//! ```text
//! DIGEST-MD5                              Kerberos
//! acceptor -> dialer   challenge          acceptor -> dialer   gssapi
//! dialer   -> acceptor response           dialer   -> acceptor response(token)
//!                                         acceptor -> dialer   challenge(token)
//!                                         ...                  (RFC 4752's tokens)
//! acceptor -> dialer   success(rspauth)   acceptor -> dialer   success
//! ```
//!
//! (or, from the acceptor: not served here; at any point: failure(reason),
//! and it closes). A dialer that cannot go on (its login is of the other
//! mechanism, Kerberos failed on its side) sends failure(reason) too, so
//! both logs say why. Each step is `len:u32 kind:u8 payload`, at most
//! `FRAME_BYTES_MAX`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use stoa_core::sasl::gssapi::{GssAcceptor, GssapiExchange, GssapiStep};
use stoa_core::sasl::gssapi_initiator::{GssInitiator, GssapiInitiation, InitiatorStep};
use stoa_core::sasl::quorum_kerberos;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::peer::PeerError;

/// Large enough for a Kerberos ticket with its authorization data.
const FRAME_BYTES_MAX: usize = 64 * 1024;
const REFUSED_CREDENTIALS: &str = "SASL: the peer refused this member's credentials";

impl PeerError {
    /// The peer checked this member's SASL credentials and refused them
    /// (not a lost connection or a timeout).
    pub fn refused_credentials(&self) -> bool {
        self.0.starts_with(REFUSED_CREDENTIALS)
    }
}
const STEP_TIMEOUT: Duration = Duration::from_secs(5);
/// Tokens a Kerberos exchange may take from the dialer before it is cut
/// off (it takes three: AP-REQ, the empty answer to the AP-REP, the
/// choice).
const GSSAPI_TOKENS_MAX: usize = 8;

mod kind {
    pub const CHALLENGE: u8 = 1;
    pub const RESPONSE: u8 = 2;
    pub const SUCCESS: u8 = 3;
    pub const FAILURE: u8 = 4;
    pub const NOT_SERVED: u8 = 5;
    /// The acceptor authenticates members with Kerberos: the dialer's
    /// context tokens come next.
    pub const GSSAPI: u8 = 6;
}

/// This member's `quorum.auth.*` settings with the JAAS sections they name.
#[derive(Clone)]
pub struct PeerSasl {
    /// `QuorumLearner`: what this member dials with.
    pub learner: LearnerLogin,
    /// `QuorumServer`: what a dialing member is checked with.
    pub server: ServerLogin,
    /// `quorum.auth.learnerRequireSasl`: a peer that does not serve SASL
    /// is not talked to.
    pub learner_require: bool,
    /// `quorum.auth.serverRequireSasl`: a dialer that does not
    /// authenticate is refused.
    pub server_require: bool,
}

/// The `QuorumLearner` section's login.
#[derive(Clone)]
pub enum LearnerLogin {
    /// DigestLoginModule: (user, password).
    Digest(String, String),
    Kerberos(KerberosLearner),
}

/// The `QuorumServer` section's login.
#[derive(Clone)]
pub enum ServerLogin {
    /// DigestLoginModule: the (user, password) a dialer may authenticate as.
    Digest(Vec<(String, String)>),
    Kerberos(KerberosServer),
}

/// Kerberos as a dialer: this member's credentials and the service it
/// asks tickets for.
#[derive(Clone)]
pub struct KerberosLearner {
    pub initiator: Arc<dyn GssInitiator>,
    /// `quorum.auth.kerberos.servicePrincipal`, `_HOST` unsubstituted.
    pub service_principal: String,
    /// The realm a service principal without one is in: the learner's own
    /// (or the default realm), as ZooKeeper assumes.
    pub realm: Option<String>,
    /// The host of each member's `server.N` line, for `_HOST`.
    pub member_hosts: BTreeMap<u64, String>,
}

/// Kerberos as the dialled member: its service key and the hosts a
/// learner's principal may name.
#[derive(Clone)]
pub struct KerberosServer {
    pub acceptor: Arc<dyn GssAcceptor>,
    /// The hosts of the `server.N` lines when this member started (as
    /// ZooKeeper's `authzHosts`).
    pub member_hosts: Vec<String>,
}

impl LearnerLogin {
    fn mechanism(&self) -> &'static str {
        match self {
            LearnerLogin::Digest(..) => "DIGEST-MD5",
            LearnerLogin::Kerberos(_) => "Kerberos (GSSAPI)",
        }
    }
}

impl KerberosLearner {
    /// The principal to ask a ticket for to dial `peer` at `address`.
    fn target(&self, peer: u64, address: SocketAddr) -> String {
        let host = match self.member_hosts.get(&peer) {
            Some(host) => host.clone(),
            // A member a reconfiguration added since this one started.
            None => address.ip().to_string(),
        };
        quorum_kerberos::service_principal(&self.service_principal, &host, self.realm.as_deref())
    }
}

impl std::fmt::Debug for PeerSasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let server = match &self.server {
            ServerLogin::Digest(_) => "DIGEST-MD5",
            ServerLogin::Kerberos(_) => "Kerberos (GSSAPI)",
        };
        f.debug_struct("PeerSasl")
            .field("learner", &self.learner.mechanism())
            .field("server", &server)
            .field("learner_require", &self.learner_require)
            .field("server_require", &self.server_require)
            .finish()
    }
}

/// 128 unpredictable bits as hex, for nonces.
fn random_token() -> String {
    format!("{:016x}{:016x}", crate::random_u64(), crate::random_u64())
}

async fn write_step<W: AsyncWrite + Unpin>(
    to: &mut W,
    kind: u8,
    payload: &[u8],
) -> Result<(), PeerError> {
    let mut frame = Vec::with_capacity(5 + payload.len());
    frame.extend_from_slice(&(payload.len() as u32 + 1).to_be_bytes());
    frame.push(kind);
    frame.extend_from_slice(payload);
    to.write_all(&frame)
        .await
        .map_err(|e| PeerError(format!("SASL: {e}")))?;
    to.flush()
        .await
        .map_err(|e| PeerError(format!("SASL: {e}")))
}

async fn read_step<R: AsyncRead + Unpin>(from: &mut R) -> Result<(u8, Vec<u8>), PeerError> {
    let read = async {
        let mut len = [0u8; 4];
        from.read_exact(&mut len).await?;
        let len = u32::from_be_bytes(len) as usize;
        if len == 0 || len > FRAME_BYTES_MAX {
            return Err(std::io::Error::other(format!("a SASL step of {len} bytes")));
        }
        let mut body = vec![0u8; len];
        from.read_exact(&mut body).await?;
        Ok(body)
    };
    let body = tokio::time::timeout(STEP_TIMEOUT, read)
        .await
        .map_err(|_| PeerError("SASL: no answer in time".into()))?
        .map_err(|e| PeerError(format!("SASL: {e}")))?;
    Ok((body[0], body[1..].to_vec()))
}

/// Tells the peer why this side gives up (best effort: it may be gone),
/// and gives the error to log here.
async fn give_up<S: AsyncWrite + Unpin>(stream: &mut S, why: String) -> PeerError {
    let _ = write_step(stream, kind::FAILURE, why.as_bytes()).await;
    PeerError(format!("SASL: {why}"))
}

/// The dialing side, right after its SASL hello, toward member `peer` at
/// `address`.
pub async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    sasl: &PeerSasl,
    peer: u64,
    address: SocketAddr,
) -> Result<(), PeerError> {
    let (step, challenge) = read_step(stream).await?;
    match (step, &sasl.learner) {
        (kind::CHALLENGE, LearnerLogin::Digest(user, password)) => {
            authenticate_digest(stream, &challenge, user, password).await
        }
        (kind::GSSAPI, LearnerLogin::Kerberos(kerberos)) => {
            authenticate_kerberos(stream, kerberos, kerberos.target(peer, address)).await
        }
        (kind::CHALLENGE | kind::GSSAPI, learner) => {
            let theirs = if step == kind::CHALLENGE {
                "DIGEST-MD5"
            } else {
                "Kerberos (GSSAPI)"
            };
            let why = format!(
                "the dialled member authenticates members with {theirs}, this one's \
                 QuorumLearner login is {}",
                learner.mechanism()
            );
            Err(give_up(stream, why).await)
        }
        (kind::NOT_SERVED, _) if sasl.learner_require => Err(PeerError(
            "SASL: the peer does not serve it (quorum.auth.learnerRequireSasl is set here)".into(),
        )),
        (kind::NOT_SERVED, _) => Ok(()),
        (kind::FAILURE, _) => Err(PeerError(format!(
            "SASL: the peer refused the exchange ({})",
            String::from_utf8_lossy(&challenge)
        ))),
        (other, _) => Err(PeerError(format!(
            "SASL: step {other} instead of a challenge"
        ))),
    }
}

async fn authenticate_digest<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    challenge: &[u8],
    user: &str,
    password: &str,
) -> Result<(), PeerError> {
    let (response, expected) =
        stoa_core::sasl::client_response(challenge, user, password, &random_token())
            .map_err(|e| PeerError(format!("SASL: {}", e.0)))?;
    write_step(stream, kind::RESPONSE, &response).await?;
    match read_step(stream).await? {
        (kind::SUCCESS, rspauth) if rspauth == expected => Ok(()),
        (kind::SUCCESS, _) => Err(PeerError(
            "SASL: the peer does not know this member's password (wrong rspauth)".into(),
        )),
        (kind::FAILURE, why) => Err(PeerError(format!(
            "{REFUSED_CREDENTIALS} ({})",
            String::from_utf8_lossy(&why)
        ))),
        (other, _) => Err(PeerError(format!(
            "SASL: step {other} instead of an outcome"
        ))),
    }
}

/// Runs a step of the initiator's exchange off this thread: MIT may ask
/// the KDC for a ticket, which blocks.
async fn off_thread<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, PeerError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| PeerError(format!("SASL: the Kerberos call failed: {e}")))
}

async fn authenticate_kerberos<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    kerberos: &KerberosLearner,
    target: String,
) -> Result<(), PeerError> {
    let initiator = kerberos.initiator.clone();
    let started = off_thread(move || {
        let context = initiator
            .new_context(&target)
            .map_err(|e| (target.clone(), e))?;
        GssapiInitiation::start(context, initiator.principal()).map_err(|e| (target, e.0))
    })
    .await?;
    let (mut initiation, token) = match started {
        Ok(started) => started,
        Err((target, e)) => {
            let why = format!(
                "{} could not start Kerberos toward {target}: {e}",
                kerberos.initiator.principal()
            );
            return Err(give_up(stream, why).await);
        }
    };
    write_step(stream, kind::RESPONSE, &token).await?;
    for _ in 0..GSSAPI_TOKENS_MAX {
        match read_step(stream).await? {
            (kind::CHALLENGE, token) => {
                let (back, step) = off_thread(move || {
                    let step = initiation.step(&token);
                    (initiation, step)
                })
                .await?;
                initiation = back;
                match step {
                    Ok(InitiatorStep::Send(token)) => {
                        write_step(stream, kind::RESPONSE, &token).await?
                    }
                    Ok(InitiatorStep::SendLast(token)) => {
                        write_step(stream, kind::RESPONSE, &token).await?;
                        return kerberos_outcome(stream).await;
                    }
                    Err(e) => {
                        let why = format!("the dialled member's Kerberos token: {}", e.0);
                        return Err(give_up(stream, why).await);
                    }
                }
            }
            (kind::FAILURE, why) => {
                return Err(PeerError(format!(
                    "{REFUSED_CREDENTIALS} ({})",
                    String::from_utf8_lossy(&why)
                )))
            }
            (other, _) => {
                return Err(PeerError(format!(
                    "SASL: step {other} instead of a Kerberos token"
                )))
            }
        }
    }
    Err(give_up(stream, "the Kerberos exchange did not end".into()).await)
}

async fn kerberos_outcome<S: AsyncRead + Unpin>(stream: &mut S) -> Result<(), PeerError> {
    match read_step(stream).await? {
        (kind::SUCCESS, _) => Ok(()),
        (kind::FAILURE, why) => Err(PeerError(format!(
            "{REFUSED_CREDENTIALS} ({})",
            String::from_utf8_lossy(&why)
        ))),
        (other, _) => Err(PeerError(format!(
            "SASL: step {other} instead of an outcome"
        ))),
    }
}

/// The accepting side, once the hello said whether the dialer
/// authenticates: Ok to go on with the connection (the user or principal
/// the dialer authenticated as, if it did), Err to drop it.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    sasl: Option<&PeerSasl>,
    dialer_authenticates: bool,
) -> Result<Option<String>, PeerError> {
    match (sasl, dialer_authenticates) {
        (None, false) => Ok(None),
        (None, true) => {
            write_step(stream, kind::NOT_SERVED, &[]).await?;
            Ok(None)
        }
        (Some(sasl), false) if sasl.server_require => Err(PeerError(
            "it did not authenticate (quorum.auth.serverRequireSasl is set here)".into(),
        )),
        (Some(_), false) => Ok(None),
        (Some(sasl), true) => match &sasl.server {
            ServerLogin::Digest(users) => accept_digest(stream, users).await.map(Some),
            ServerLogin::Kerberos(kerberos) => accept_kerberos(stream, kerberos).await.map(Some),
        },
    }
}

/// What the dialer sent where a response belongs: the response, or why
/// it gave up.
fn response(step: u8, payload: Vec<u8>) -> Result<Vec<u8>, PeerError> {
    match step {
        kind::RESPONSE => Ok(payload),
        kind::FAILURE => Err(PeerError(format!(
            "SASL: the dialer gave up: {}",
            String::from_utf8_lossy(&payload)
        ))),
        other => Err(PeerError(format!(
            "SASL: step {other} instead of a response"
        ))),
    }
}

async fn accept_digest<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    users: &[(String, String)],
) -> Result<String, PeerError> {
    let (exchange, challenge) = stoa_core::sasl::DigestMd5::start(random_token());
    write_step(stream, kind::CHALLENGE, &challenge).await?;
    let (step, payload) = read_step(stream).await?;
    let response = response(step, payload)?;
    let password_of = |user: &str| {
        (users.iter())
            .find(|(name, _)| name == user)
            .map(|(_, password)| password.clone())
    };
    match exchange.finish(&response, password_of) {
        Ok((user, rspauth)) => {
            write_step(stream, kind::SUCCESS, &rspauth).await?;
            Ok(user)
        }
        Err(refusal) => Err(give_up(stream, refusal.0).await),
    }
}

async fn accept_kerberos<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    kerberos: &KerberosServer,
) -> Result<String, PeerError> {
    let context = match kerberos.acceptor.new_context() {
        Ok(context) => context,
        Err(e) => return Err(give_up(stream, format!("GSS-API: {e}")).await),
    };
    let mut exchange = GssapiExchange::new(context);
    write_step(stream, kind::GSSAPI, &[]).await?;
    for _ in 0..GSSAPI_TOKENS_MAX {
        let (step, payload) = read_step(stream).await?;
        let token = response(step, payload)?;
        match exchange.step(&token) {
            Ok(GssapiStep::Reply(reply)) => write_step(stream, kind::CHALLENGE, &reply).await?,
            Ok(GssapiStep::Authenticated { initiator, authzid }) => {
                return match quorum_kerberos::authorize_learner(
                    &initiator,
                    &authzid,
                    &kerberos.member_hosts,
                ) {
                    Ok(principal) => {
                        write_step(stream, kind::SUCCESS, &[]).await?;
                        Ok(principal)
                    }
                    Err(refusal) => Err(give_up(stream, refusal.0).await),
                };
            }
            Err(refusal) => return Err(give_up(stream, refusal.0).await),
        }
    }
    Err(give_up(stream, "the Kerberos exchange did not end".into()).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(password: &str) -> PeerSasl {
        PeerSasl {
            learner: LearnerLogin::Digest("member".into(), password.into()),
            server: ServerLogin::Digest(vec![("member".into(), "s3cret".into())]),
            learner_require: true,
            server_require: true,
        }
    }

    const DIALLED: u64 = 2;

    fn dialled_address() -> SocketAddr {
        "127.0.0.1:2888".parse().unwrap()
    }

    fn run<F: std::future::Future>(body: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(body)
    }

    /// Both sides over an in-memory pipe: (dialer's outcome, acceptor's).
    fn exchange(
        dialer: Option<PeerSasl>,
        acceptor: Option<PeerSasl>,
    ) -> (Result<(), PeerError>, Result<Option<String>, PeerError>) {
        run(async {
            let (mut a, mut b) = tokio::io::duplex(8192);
            let authenticates = dialer.is_some();
            let dial = async {
                match &dialer {
                    Some(sasl) => authenticate(&mut a, sasl, DIALLED, dialled_address()).await,
                    None => Ok(()),
                }
            };
            let take = accept(&mut b, acceptor.as_ref(), authenticates);
            tokio::join!(dial, take)
        })
    }

    #[test]
    fn the_right_password_authenticates_both_ways() {
        let (dialed, accepted) = exchange(Some(settings("s3cret")), Some(settings("s3cret")));
        assert!(dialed.is_ok(), "{dialed:?}");
        assert_eq!(accepted.unwrap().as_deref(), Some("member"));
    }

    #[test]
    fn a_wrong_password_is_refused_on_both_sides() {
        let (dialed, accepted) = exchange(Some(settings("guess")), Some(settings("s3cret")));
        assert!(dialed
            .unwrap_err()
            .0
            .contains("refused this member's credentials"));
        assert!(accepted.unwrap_err().0.contains("wrong password"));
    }

    #[test]
    fn the_require_settings_decide_what_a_missing_side_means() {
        // A dialer that does not authenticate, to one that requires it.
        let (_, accepted) = exchange(None, Some(settings("s3cret")));
        assert!(accepted.unwrap_err().0.contains("serverRequireSasl"));
        let mut lenient = settings("s3cret");
        lenient.server_require = false;
        assert_eq!(exchange(None, Some(lenient)).1.unwrap(), None);
        // A dialer that authenticates, to one that does not serve SASL.
        let (dialed, accepted) = exchange(Some(settings("s3cret")), None);
        assert!(dialed.unwrap_err().0.contains("learnerRequireSasl"));
        assert_eq!(accepted.unwrap(), None);
        let mut optional = settings("s3cret");
        optional.learner_require = false;
        assert!(exchange(Some(optional), None).0.is_ok());
    }

    /// A scripted Kerberos: the initiator's AP-REQ is
    /// `principal|target|key`; the acceptor takes it when the target is
    /// its principal and the key its key, and answers `ap-rep`.
    mod scripted {
        use stoa_core::sasl::gssapi::{Accepted, GssAcceptContext, GssAcceptor};
        use stoa_core::sasl::gssapi_initiator::{GssInitContext, GssInitiator, Initiated};

        fn wrap(message: &[u8]) -> Result<Vec<u8>, String> {
            Ok([b"W".as_slice(), message].concat())
        }

        fn unwrap(token: &[u8]) -> Result<Vec<u8>, String> {
            (token.strip_prefix(b"W").map(<[u8]>::to_vec)).ok_or_else(|| "bad MIC".to_string())
        }

        pub struct Initiator {
            pub principal: String,
            pub key: String,
        }

        struct InitContext {
            ap_req: String,
            sent: bool,
        }

        impl GssInitiator for Initiator {
            fn principal(&self) -> &str {
                &self.principal
            }
            fn new_context(&self, target: &str) -> Result<Box<dyn GssInitContext>, String> {
                Ok(Box::new(InitContext {
                    ap_req: format!("{}|{target}|{}", self.principal, self.key),
                    sent: false,
                }))
            }
        }

        impl GssInitContext for InitContext {
            fn init(&mut self, token: &[u8]) -> Result<Initiated, String> {
                if !self.sent {
                    self.sent = true;
                    return Ok(Initiated::ContinueNeeded(self.ap_req.clone().into_bytes()));
                }
                match token {
                    b"ap-rep" => Ok(Initiated::Complete(Vec::new())),
                    _ => Err("the acceptor did not prove the service's key".into()),
                }
            }
            fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, String> {
                wrap(message)
            }
            fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, String> {
                unwrap(token)
            }
        }

        pub struct Acceptor {
            pub principal: String,
            pub key: String,
        }

        struct AcceptContext {
            principal: String,
            key: String,
        }

        impl GssAcceptor for Acceptor {
            fn new_context(&self) -> Result<Box<dyn GssAcceptContext>, String> {
                Ok(Box::new(AcceptContext {
                    principal: self.principal.clone(),
                    key: self.key.clone(),
                }))
            }
        }

        impl GssAcceptContext for AcceptContext {
            fn accept(&mut self, token: &[u8]) -> Result<Accepted, String> {
                let text = String::from_utf8_lossy(token);
                match text.split('|').collect::<Vec<_>>()[..] {
                    [who, target, key] if target == self.principal && key == self.key => {
                        Ok(Accepted::Complete {
                            reply: b"ap-rep".to_vec(),
                            initiator: who.to_string(),
                        })
                    }
                    [_, target, _] if target != self.principal => {
                        Err(format!("Wrong principal in request ({target})"))
                    }
                    _ => Err("Decrypt integrity check failed".into()),
                }
            }
            fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, String> {
                wrap(message)
            }
            fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, String> {
                unwrap(token)
            }
        }
    }

    /// Members with Kerberos both ways: the dialer as `principal` with
    /// `key`, toward `service_principal`; the dialled member as
    /// zkquorum/zk2@EXAMPLE.COM with the KDC's key.
    fn kerberos(principal: &str, key: &str, service_principal: &str) -> PeerSasl {
        let hosts = BTreeMap::from([(1, "zk1".to_string()), (DIALLED, "ZK2".to_string())]);
        PeerSasl {
            learner: LearnerLogin::Kerberos(KerberosLearner {
                initiator: Arc::new(scripted::Initiator {
                    principal: principal.into(),
                    key: key.into(),
                }),
                service_principal: service_principal.into(),
                realm: Some("EXAMPLE.COM".into()),
                member_hosts: hosts.clone(),
            }),
            server: ServerLogin::Kerberos(KerberosServer {
                acceptor: Arc::new(scripted::Acceptor {
                    principal: "zkquorum/zk2@EXAMPLE.COM".into(),
                    key: "kdc-key".into(),
                }),
                member_hosts: hosts.into_values().collect(),
            }),
            learner_require: true,
            server_require: true,
        }
    }

    #[test]
    fn kerberos_authenticates_the_learner_toward_the_dialled_members_host() {
        for learner in ["learner/zk1@EXAMPLE.COM", "zkquorum/ZK2@EXAMPLE.COM"] {
            let me = kerberos(learner, "kdc-key", "zkquorum/_HOST");
            let (dialed, accepted) = exchange(Some(me.clone()), Some(me));
            assert!(dialed.is_ok(), "{dialed:?}");
            assert_eq!(accepted.unwrap().as_deref(), Some(learner));
        }
    }

    #[test]
    fn a_wrong_key_or_service_is_refused_on_both_sides() {
        let (dialed, accepted) = exchange(
            Some(kerberos(
                "learner/zk1@EXAMPLE.COM",
                "stale",
                "zkquorum/_HOST",
            )),
            Some(kerberos(
                "learner/zk1@EXAMPLE.COM",
                "kdc-key",
                "zkquorum/_HOST",
            )),
        );
        let dialed = dialed.unwrap_err();
        assert!(dialed.refused_credentials(), "{dialed:?}");
        assert!(
            dialed.0.contains("Decrypt integrity check failed"),
            "{dialed:?}"
        );
        assert!(accepted.unwrap_err().0.contains("GSS-API: Decrypt"));
        // The default service principal names another host's service.
        let me = kerberos("learner/zk1@EXAMPLE.COM", "kdc-key", "zkquorum/localhost");
        let (dialed, accepted) = exchange(Some(me.clone()), Some(me));
        assert!(dialed
            .unwrap_err()
            .0
            .contains("zkquorum/localhost@EXAMPLE.COM"));
        assert!(accepted.unwrap_err().0.contains("Wrong principal"));
    }

    #[test]
    fn a_learner_principal_of_no_members_host_is_refused_on_both_sides() {
        let me = kerberos("learner/zk1@EXAMPLE.COM", "kdc-key", "zkquorum/_HOST");
        for (stranger, why) in [
            (
                "zkquorum/elsewhere@EXAMPLE.COM",
                "elsewhere is not the host of a member",
            ),
            (
                "learner@EXAMPLE.COM",
                "a member's principal is NAME/HOST@REALM",
            ),
        ] {
            let stranger = kerberos(stranger, "kdc-key", "zkquorum/_HOST");
            let (dialed, accepted) = exchange(Some(stranger), Some(me.clone()));
            let dialed = dialed.unwrap_err();
            assert!(dialed.refused_credentials(), "{dialed:?}");
            assert!(dialed.0.contains(why), "{dialed:?}");
            assert!(accepted.unwrap_err().0.contains("is not authorized"));
        }
    }

    #[test]
    fn different_mechanisms_on_the_two_sides_are_named_on_both() {
        let krb = kerberos("learner/zk1@EXAMPLE.COM", "kdc-key", "zkquorum/_HOST");
        let (dialed, accepted) = exchange(Some(krb.clone()), Some(settings("s3cret")));
        let dialed = dialed.unwrap_err();
        assert!(
            dialed.0.contains("authenticates members with DIGEST-MD5")
                && dialed.0.contains("QuorumLearner login is Kerberos"),
            "{dialed:?}"
        );
        let accepted = accepted.unwrap_err();
        assert!(accepted.0.contains("the dialer gave up"), "{accepted:?}");
        let (dialed, accepted) = exchange(Some(settings("s3cret")), Some(krb));
        assert!(dialed
            .unwrap_err()
            .0
            .contains("authenticates members with Kerberos (GSSAPI)"));
        assert!(accepted.unwrap_err().0.contains("the dialer gave up"));
    }
}
