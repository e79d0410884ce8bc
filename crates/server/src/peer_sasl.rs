//! SASL DIGEST-MD5 between members (ZooKeeper's `quorum.auth.*`): the
//! member that dials authenticates with its JAAS `QuorumLearner`
//! credentials, the member it dials checks them against its
//! `QuorumServer` section's users and proves in turn that it knows the
//! password (`rspauth`).
//!
//! A dialer that authenticates opens with the SASL hello (`STOASASL`
//! instead of `STOAPEER`); the exchange then runs before any other frame:
//!
//! ```text
//! acceptor -> dialer   challenge          (or: not served here)
//! dialer   -> acceptor response
//! acceptor -> dialer   success(rspauth)   (or: failure(reason), and it closes)
//! ```
//!
//! Each step is `len:u32 kind:u8 payload`, at most `FRAME_BYTES_MAX`.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::peer::PeerError;

const FRAME_BYTES_MAX: usize = 4096;
const REFUSED_CREDENTIALS: &str = "SASL: the peer refused this member's credentials";

impl PeerError {
    /// The peer checked this member's SASL credentials and refused them
    /// (not a lost connection or a timeout).
    pub fn refused_credentials(&self) -> bool {
        self.0.starts_with(REFUSED_CREDENTIALS)
    }
}
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

mod kind {
    pub const CHALLENGE: u8 = 1;
    pub const RESPONSE: u8 = 2;
    pub const SUCCESS: u8 = 3;
    pub const FAILURE: u8 = 4;
    pub const NOT_SERVED: u8 = 5;
}

/// This member's `quorum.auth.*` settings with the JAAS sections they name.
#[derive(Debug, Clone)]
pub struct PeerSasl {
    /// `QuorumLearner`: the (user, password) this member dials with.
    pub learner: (String, String),
    /// `QuorumServer`: the users a dialing member may authenticate as.
    pub server_users: Vec<(String, String)>,
    /// `quorum.auth.learnerRequireSasl`: a peer that does not serve SASL
    /// is not talked to.
    pub learner_require: bool,
    /// `quorum.auth.serverRequireSasl`: a dialer that does not
    /// authenticate is refused.
    pub server_require: bool,
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

/// The dialing side, right after its SASL hello.
pub async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    sasl: &PeerSasl,
) -> Result<(), PeerError> {
    let (step, challenge) = read_step(stream).await?;
    match step {
        kind::CHALLENGE => {}
        kind::NOT_SERVED if sasl.learner_require => {
            return Err(PeerError(
                "SASL: the peer does not serve it (quorum.auth.learnerRequireSasl is set here)"
                    .into(),
            ))
        }
        kind::NOT_SERVED => return Ok(()),
        other => {
            return Err(PeerError(format!(
                "SASL: step {other} instead of a challenge"
            )))
        }
    }
    let (user, password) = &sasl.learner;
    let (response, expected) =
        stoa_core::sasl::client_response(&challenge, user, password, &random_token())
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

/// The accepting side, once the hello said whether the dialer
/// authenticates: Ok to go on with the connection (the user the dialer
/// authenticated as, if it did), Err to drop it.
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
        (Some(sasl), true) => {
            let (exchange, challenge) = stoa_core::sasl::DigestMd5::start(random_token());
            write_step(stream, kind::CHALLENGE, &challenge).await?;
            let (step, response) = read_step(stream).await?;
            if step != kind::RESPONSE {
                return Err(PeerError(format!(
                    "SASL: step {step} instead of a response"
                )));
            }
            let password_of = |user: &str| {
                (sasl.server_users.iter())
                    .find(|(name, _)| name == user)
                    .map(|(_, password)| password.clone())
            };
            match exchange.finish(&response, password_of) {
                Ok((user, rspauth)) => {
                    write_step(stream, kind::SUCCESS, &rspauth).await?;
                    Ok(Some(user))
                }
                Err(refusal) => {
                    let _ = write_step(stream, kind::FAILURE, refusal.0.as_bytes()).await;
                    Err(PeerError(format!("SASL: {}", refusal.0)))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(password: &str) -> PeerSasl {
        PeerSasl {
            learner: ("member".into(), password.into()),
            server_users: vec![("member".into(), "s3cret".into())],
            learner_require: true,
            server_require: true,
        }
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
                    Some(sasl) => authenticate(&mut a, sasl).await,
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
}
