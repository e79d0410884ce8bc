//! SASL GSSAPI (RFC 4752) on the client's side, as a ZooKeeper learner
//! runs it when it dials another member with Kerberos: GSS-API context
//! tokens go back and forth until the context is established (the
//! initiator asks for mutual authentication, so the acceptor's last token
//! proves it holds the service's key), then the acceptor's wrapped
//! security-layer offer is answered, wrapped too, with "no security
//! layer" and the authorization identity. The connection itself is not
//! wrapped afterwards.
//!
//! Pure: the GSS-API calls go through `GssInitContext`, which the server
//! crate implements over MIT Kerberos (tests use a scripted one).

use super::gssapi::NO_SECURITY_LAYER;
use super::SaslRefusal;

/// What one call of `gss_init_sec_context` gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Initiated {
    /// GSS_S_CONTINUE_NEEDED: send this token, another one comes back.
    ContinueNeeded(Vec<u8>),
    /// GSS_S_COMPLETE: the context is established; this last token (empty
    /// when there is none) still goes to the acceptor.
    Complete(Vec<u8>),
}

/// One connection's GSS-API security context on the initiator's side (RFC
/// 2743), toward one target: the server crate's over MIT Kerberos. Errors
/// are GSS-API's own messages, for the log.
pub trait GssInitContext: Send {
    /// `gss_init_sec_context` with the acceptor's last token (empty for
    /// the first call).
    fn init(&mut self, token: &[u8]) -> Result<Initiated, String>;
    /// `gss_wrap` with integrity only (RFC 4752 wraps the negotiation so).
    fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, String>;
    /// `gss_unwrap`.
    fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, String>;
}

/// This side's Kerberos credentials, which make one initiator context per
/// exchange: the server crate's over MIT Kerberos.
pub trait GssInitiator: Send + Sync {
    /// The principal the credentials are of (`learner@REALM`).
    fn principal(&self) -> &str;
    /// A context toward `target` (`service/host@REALM`).
    fn new_context(&self, target: &str) -> Result<Box<dyn GssInitContext>, String>;
}

/// The acceptor's security-layer offer, unwrapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerOffer {
    /// The layers offered, one bit each.
    pub layers: u8,
    /// The largest message the acceptor takes (meaningless without a
    /// layer).
    pub max_message: u32,
}

/// Reads the acceptor's unwrapped offer: exactly four octets, the layer
/// bits then a 3-octet maximum message size (network order). "No security
/// layer" must be among the layers: it is the only one this side takes.
pub fn parse_server_offer(bytes: &[u8]) -> Result<ServerOffer, SaslRefusal> {
    let [layers, a, b, c] = bytes else {
        return Err(SaslRefusal(format!(
            "a security-layer offer of {} bytes instead of 4",
            bytes.len()
        )));
    };
    if layers & NO_SECURITY_LAYER == 0 {
        return Err(SaslRefusal(format!(
            "the acceptor does not offer \"no security layer\" (layers {layers:#04x})"
        )));
    }
    Ok(ServerOffer {
        layers: *layers,
        max_message: u32::from_be_bytes([0, *a, *b, *c]),
    })
}

/// The answer to the offer, before wrapping: "no security layer", a
/// maximum message size of 0 (RFC 4752: no layer, no size), then the
/// authorization identity.
pub fn client_choice(authzid: &str) -> Vec<u8> {
    let mut choice = vec![NO_SECURITY_LAYER, 0, 0, 0];
    choice.extend_from_slice(authzid.as_bytes());
    choice
}

/// Where an exchange stands.
enum Stage {
    /// Context tokens go back and forth.
    Establishing,
    /// The context is established; the acceptor's wrapped offer comes next.
    AwaitingOffer,
    /// The choice went out (the acceptor's verdict is not SASL's business),
    /// or the exchange was refused: nothing more is taken.
    Over,
}

/// One connection's GSSAPI exchange from the initiator's side. `start`
/// gives the first token; each token of the acceptor goes to `step`,
/// which gives the next one to send.
pub struct GssapiInitiation {
    context: Box<dyn GssInitContext>,
    authzid: String,
    stage: Stage,
}

/// What a step of the initiator's exchange gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitiatorStep {
    /// Send this token; the acceptor answers it.
    Send(Vec<u8>),
    /// Send this token, the last: the wrapped choice. The acceptor's
    /// verdict follows.
    SendLast(Vec<u8>),
}

impl GssapiInitiation {
    /// Starts an exchange that asks to act as `authzid` (ZooKeeper's
    /// learner gives its own principal): the first token to send.
    pub fn start(
        mut context: Box<dyn GssInitContext>,
        authzid: &str,
    ) -> Result<(GssapiInitiation, Vec<u8>), SaslRefusal> {
        let (stage, token) = match context.init(&[]).map_err(gss)? {
            Initiated::ContinueNeeded(token) => (Stage::Establishing, token),
            Initiated::Complete(token) => (Stage::AwaitingOffer, token),
        };
        if token.is_empty() {
            return Err(SaslRefusal(
                "GSS-API: no initial context token to send".into(),
            ));
        }
        let initiation = GssapiInitiation {
            context,
            authzid: authzid.to_string(),
            stage,
        };
        Ok((initiation, token))
    }

    /// Takes the acceptor's next token. A refusal ends the exchange.
    pub fn step(&mut self, token: &[u8]) -> Result<InitiatorStep, SaslRefusal> {
        match std::mem::replace(&mut self.stage, Stage::Over) {
            Stage::Establishing => match self.context.init(token).map_err(gss)? {
                Initiated::ContinueNeeded(reply) => {
                    self.stage = Stage::Establishing;
                    Ok(InitiatorStep::Send(reply))
                }
                // RFC 4752: with nothing left to send, an empty token
                // tells the acceptor the context is established here too.
                Initiated::Complete(reply) => {
                    self.stage = Stage::AwaitingOffer;
                    Ok(InitiatorStep::Send(reply))
                }
            },
            Stage::AwaitingOffer => {
                let offer = self.context.unwrap(token).map_err(gss)?;
                parse_server_offer(&offer)?;
                let choice = self
                    .context
                    .wrap(&client_choice(&self.authzid))
                    .map_err(gss)?;
                Ok(InitiatorStep::SendLast(choice))
            }
            Stage::Over => Err(SaslRefusal("a token after the exchange ended".into())),
        }
    }
}

fn gss(e: String) -> SaslRefusal {
    SaslRefusal(format!("GSS-API: {e}"))
}

#[cfg(test)]
mod tests {
    use super::super::gssapi::{
        scripted_layer, Accepted, GssAcceptContext, GssapiExchange, GssapiStep,
    };
    use super::*;
    use proptest::prelude::*;

    /// An initiator whose context needs `rounds` tokens from the acceptor
    /// (the first call takes none), wrapping as `scripted_layer` does.
    struct ScriptedInit {
        calls: usize,
        rounds: usize,
    }

    impl GssInitContext for ScriptedInit {
        fn init(&mut self, token: &[u8]) -> Result<Initiated, String> {
            if self.calls > 0 && token.is_empty() {
                return Err("defective token".into());
            }
            self.calls += 1;
            Ok(match (self.calls > self.rounds, self.calls) {
                (true, 1) => Initiated::Complete(b"ap-req".to_vec()),
                (true, _) => Initiated::Complete(Vec::new()),
                (false, _) => Initiated::ContinueNeeded(format!("i{}", self.calls).into_bytes()),
            })
        }
        fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, String> {
            scripted_layer::wrap(message)
        }
        fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, String> {
            scripted_layer::unwrap(token)
        }
    }

    /// The acceptor's side of the same script: it completes on the
    /// initiator's `rounds`-th token, answering `mutual` then.
    struct ScriptedAccept {
        rounds: usize,
        mutual: Vec<u8>,
    }

    impl GssAcceptContext for ScriptedAccept {
        fn accept(&mut self, _token: &[u8]) -> Result<Accepted, String> {
            self.rounds -= 1;
            Ok(if self.rounds == 0 {
                Accepted::Complete {
                    reply: self.mutual.clone(),
                    initiator: "learner@EXAMPLE.COM".into(),
                }
            } else {
                Accepted::ContinueNeeded(b"a".to_vec())
            })
        }
        fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, String> {
            scripted_layer::wrap(message)
        }
        fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, String> {
            scripted_layer::unwrap(token)
        }
    }

    #[test]
    fn with_mutual_authentication_both_sides_of_the_exchange_agree() {
        // Kerberos with mutual authentication: AP-REQ, AP-REP, the
        // initiator's empty token, the offer, the choice.
        let (mut initiation, mut token) = GssapiInitiation::start(
            Box::new(ScriptedInit {
                calls: 0,
                rounds: 1,
            }),
            "learner@EXAMPLE.COM",
        )
        .unwrap();
        let mut acceptor = GssapiExchange::new(Box::new(ScriptedAccept {
            rounds: 1,
            mutual: b"ap-rep".to_vec(),
        }));
        let mut sent = vec![token.clone()];
        // Bounded: the script takes four tokens from the initiator.
        for _ in 0..4 {
            match acceptor.step(&token).unwrap() {
                GssapiStep::Reply(reply) => match initiation.step(&reply).unwrap() {
                    InitiatorStep::Send(next) | InitiatorStep::SendLast(next) => {
                        sent.push(next.clone());
                        token = next;
                    }
                },
                GssapiStep::Authenticated { initiator, authzid } => {
                    assert_eq!(initiator, "learner@EXAMPLE.COM");
                    assert_eq!(authzid, "learner@EXAMPLE.COM");
                    assert_eq!(
                        sent,
                        vec![
                            b"i1".to_vec(),
                            Vec::new(),
                            b"W\x01\x00\x00\x00learner@EXAMPLE.COM".to_vec()
                        ]
                    );
                    return;
                }
            }
        }
        panic!("the exchange did not end: {sent:?}");
    }

    #[test]
    fn a_context_complete_at_once_waits_for_the_offer() {
        let (mut initiation, first) = GssapiInitiation::start(
            Box::new(ScriptedInit {
                calls: 0,
                rounds: 0,
            }),
            "",
        )
        .unwrap();
        assert_eq!(first, b"ap-req");
        assert_eq!(
            initiation.step(b"W\x07\x00\x10\x00").unwrap(),
            InitiatorStep::SendLast(b"W\x01\x00\x00\x00".to_vec())
        );
        assert!(initiation.step(b"").is_err(), "nothing after the choice");
    }

    #[test]
    fn a_bad_offer_or_token_ends_the_exchange() {
        let start = || {
            GssapiInitiation::start(
                Box::new(ScriptedInit {
                    calls: 0,
                    rounds: 0,
                }),
                "me",
            )
            .unwrap()
            .0
        };
        let e = start().step(b"\x01\x00\x00\x00").unwrap_err();
        assert!(e.0.starts_with("GSS-API: bad MIC"), "{e:?}");
        let e = start().step(b"W\x04\x00\x00\x00").unwrap_err();
        assert!(
            e.0.contains("does not offer \"no security layer\""),
            "{e:?}"
        );
        let e = start().step(b"W\x01\x00\x00").unwrap_err();
        assert!(e.0.contains("of 3 bytes instead of 4"), "{e:?}");
        let mut establishing = GssapiInitiation::start(
            Box::new(ScriptedInit {
                calls: 0,
                rounds: 2,
            }),
            "me",
        )
        .unwrap()
        .0;
        assert!(establishing.step(b"").is_err(), "an empty acceptor token");
        assert!(establishing.step(b"t").is_err(), "a refusal is final");
    }

    #[test]
    fn the_choice_is_written_as_rfc_4752_reads_it() {
        assert_eq!(client_choice("bob"), b"\x01\x00\x00\x00bob");
        assert_eq!(
            super::super::gssapi::parse_client_choice(&client_choice("bob")).unwrap(),
            super::super::gssapi::ClientChoice {
                layer: NO_SECURITY_LAYER,
                max_message: 0,
                authzid: "bob".into()
            }
        );
    }

    proptest! {
        #[test]
        fn any_offer_is_taken_exactly_when_it_allows_no_layer(
            bytes in proptest::collection::vec(any::<u8>(), 0..8)
        ) {
            let parsed = parse_server_offer(&bytes);
            prop_assert_eq!(parsed.is_ok(), bytes.len() == 4 && bytes[0] & NO_SECURITY_LAYER != 0);
        }
    }
}
