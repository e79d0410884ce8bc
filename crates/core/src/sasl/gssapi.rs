//! SASL GSSAPI (RFC 4752) on the server's side, as ZooKeeper's server runs
//! it for Kerberos clients: GSS-API context tokens go back and forth until
//! the context is established, then the server offers its security layers
//! in a wrapped 4-byte token and the client answers with its choice,
//! wrapped too. Only "no security layer" is offered (ZooKeeper's `auth`
//! quality of protection): the session itself is not wrapped afterwards.
//!
//! Pure: the GSS-API calls go through `GssAcceptContext`, which the server
//! crate implements over MIT Kerberos (tests use a scripted one).

use super::SaslRefusal;

/// RFC 4752's security-layer bit for "no security layer".
pub const NO_SECURITY_LAYER: u8 = 0x01;

/// What one call of `gss_accept_sec_context` gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// GSS_S_CONTINUE_NEEDED: send this token, another one comes back.
    ContinueNeeded(Vec<u8>),
    /// GSS_S_COMPLETE: the context is established with `initiator` (its
    /// principal as `gss_display_name` writes it, `alice@EXAMPLE.COM`);
    /// `reply` (the AP-REP when the client asked for mutual
    /// authentication; else empty) still goes to the client.
    Complete { reply: Vec<u8>, initiator: String },
}

/// One connection's GSS-API security context on the acceptor's side (RFC
/// 2743): the server crate's over MIT Kerberos. Errors are GSS-API's own
/// messages, for the log.
pub trait GssAcceptContext: Send {
    /// `gss_accept_sec_context` with the client's next token.
    fn accept(&mut self, token: &[u8]) -> Result<Accepted, String>;
    /// `gss_wrap` with integrity only (RFC 4752 wraps the negotiation so).
    fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, String>;
    /// `gss_unwrap`.
    fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, String>;
}

/// Makes one acceptor context per SASL exchange, with the service's
/// credentials (its keytab).
pub trait GssAcceptor: Send + Sync {
    fn new_context(&self) -> Result<Box<dyn GssAcceptContext>, String>;
}

/// The server's security-layer offer, before wrapping: "no security
/// layer" and, as RFC 4752 asks when no other layer is offered, a maximum
/// message size of 0.
pub fn server_offer() -> [u8; 4] {
    [NO_SECURITY_LAYER, 0, 0, 0]
}

/// The client's answer to the offer, unwrapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientChoice {
    /// The security layer it chose (a single bit).
    pub layer: u8,
    /// The largest message it takes, meaningless without a layer.
    pub max_message: u32,
    /// The authorization identity it asked for (UTF-8; empty: none).
    pub authzid: String,
}

/// Reads the client's unwrapped answer: one octet with the chosen layer,
/// three with its maximum message size (network order), then the
/// authorization identity. Only "no security layer" may be chosen, the
/// only one offered.
pub fn parse_client_choice(bytes: &[u8]) -> Result<ClientChoice, SaslRefusal> {
    let refuse = |why: &str| Err(SaslRefusal(why.to_string()));
    let [layer, a, b, c, rest @ ..] = bytes else {
        return refuse("a security-layer answer shorter than 4 bytes");
    };
    if *layer != NO_SECURITY_LAYER {
        return refuse("the client chose a security layer that was not offered");
    }
    let Ok(authzid) = std::str::from_utf8(rest) else {
        return refuse("an authorization id that is not UTF-8");
    };
    Ok(ClientChoice {
        layer: *layer,
        max_message: u32::from_be_bytes([0, *a, *b, *c]),
        authzid: authzid.to_string(),
    })
}

/// Where an exchange stands.
enum Stage {
    /// Context tokens go back and forth.
    Establishing,
    /// The context's last token went out; the client answers it with an
    /// empty token before the offer.
    AwaitingEmpty { initiator: String },
    /// The offer went out; the client's wrapped choice comes next.
    AwaitingChoice { initiator: String },
    /// Authenticated or refused: nothing more is taken.
    Over,
}

/// What a step of the exchange gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GssapiStep {
    /// Send this token; the client's next one continues the exchange.
    Reply(Vec<u8>),
    /// Authenticated as `initiator` (the Kerberos principal, before
    /// ZooKeeper's name rules). The server answers with a null token, as
    /// ZooKeeper's does: its Java client takes that null for the end.
    Authenticated { initiator: String, authzid: String },
}

/// One connection's GSSAPI exchange.
pub struct GssapiExchange {
    context: Box<dyn GssAcceptContext>,
    stage: Stage,
}

impl GssapiExchange {
    pub fn new(context: Box<dyn GssAcceptContext>) -> GssapiExchange {
        GssapiExchange {
            context,
            stage: Stage::Establishing,
        }
    }

    /// Takes the client's next token. A refusal ends the exchange.
    pub fn step(&mut self, token: &[u8]) -> Result<GssapiStep, SaslRefusal> {
        let stage = std::mem::replace(&mut self.stage, Stage::Over);
        let gss = |e: String| SaslRefusal(format!("GSS-API: {e}"));
        match stage {
            Stage::Establishing => match self.context.accept(token).map_err(gss)? {
                Accepted::ContinueNeeded(reply) => {
                    self.stage = Stage::Establishing;
                    Ok(GssapiStep::Reply(reply))
                }
                // Without mutual authentication the context is complete
                // with nothing to send: the offer goes at once.
                Accepted::Complete { reply, initiator } if reply.is_empty() => {
                    self.offer(initiator)
                }
                Accepted::Complete { reply, initiator } => {
                    self.stage = Stage::AwaitingEmpty { initiator };
                    Ok(GssapiStep::Reply(reply))
                }
            },
            Stage::AwaitingEmpty { initiator } => {
                if !token.is_empty() {
                    return Err(SaslRefusal(
                        "a token where the empty answer to the context's last one belongs".into(),
                    ));
                }
                self.offer(initiator)
            }
            Stage::AwaitingChoice { initiator } => {
                let plain = self.context.unwrap(token).map_err(gss)?;
                let choice = parse_client_choice(&plain)?;
                Ok(GssapiStep::Authenticated {
                    initiator,
                    authzid: choice.authzid,
                })
            }
            Stage::Over => Err(SaslRefusal("a token after the exchange ended".into())),
        }
    }

    fn offer(&mut self, initiator: String) -> Result<GssapiStep, SaslRefusal> {
        let offer = self
            .context
            .wrap(&server_offer())
            .map_err(|e| SaslRefusal(format!("GSS-API: {e}")))?;
        self.stage = Stage::AwaitingChoice { initiator };
        Ok(GssapiStep::Reply(offer))
    }
}

/// The integrity layer of the scripted contexts tests use: a wrapped
/// message is `W` and the message.
#[cfg(test)]
pub(crate) mod scripted_layer {
    pub(crate) fn wrap(message: &[u8]) -> Result<Vec<u8>, String> {
        Ok([b"W".as_slice(), message].concat())
    }

    pub(crate) fn unwrap(token: &[u8]) -> Result<Vec<u8>, String> {
        token
            .strip_prefix(b"W")
            .map(<[u8]>::to_vec)
            .ok_or_else(|| "bad MIC".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A context that "wraps" by prefixing `W` and completes after
    /// `rounds` tokens, replying `mutual` on the last one.
    struct Scripted {
        rounds: usize,
        mutual: Vec<u8>,
    }

    impl GssAcceptContext for Scripted {
        fn accept(&mut self, token: &[u8]) -> Result<Accepted, String> {
            if token.is_empty() {
                return Err("defective token".into());
            }
            self.rounds -= 1;
            Ok(if self.rounds == 0 {
                Accepted::Complete {
                    reply: self.mutual.clone(),
                    initiator: "alice@EXAMPLE.COM".into(),
                }
            } else {
                Accepted::ContinueNeeded(b"more".to_vec())
            })
        }
        fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, String> {
            super::scripted_layer::wrap(message)
        }
        fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, String> {
            super::scripted_layer::unwrap(token)
        }
    }

    fn exchange(rounds: usize, mutual: &[u8]) -> GssapiExchange {
        GssapiExchange::new(Box::new(Scripted {
            rounds,
            mutual: mutual.to_vec(),
        }))
    }

    fn authenticated(step: GssapiStep) -> (String, String) {
        match step {
            GssapiStep::Authenticated { initiator, authzid } => (initiator, authzid),
            other => panic!("not authenticated: {other:?}"),
        }
    }

    #[test]
    fn with_mutual_authentication_the_offer_follows_the_clients_empty_answer() {
        let mut ex = exchange(2, b"ap-rep");
        assert_eq!(ex.step(b"t1").unwrap(), GssapiStep::Reply(b"more".to_vec()));
        assert_eq!(
            ex.step(b"t2").unwrap(),
            GssapiStep::Reply(b"ap-rep".to_vec())
        );
        assert_eq!(
            ex.step(b"").unwrap(),
            GssapiStep::Reply(b"W\x01\x00\x00\x00".to_vec())
        );
        let answer = b"W\x01\x00\x00\x00alice@EXAMPLE.COM";
        let (who, authzid) = authenticated(ex.step(answer).unwrap());
        assert_eq!(
            (who.as_str(), authzid.as_str()),
            ("alice@EXAMPLE.COM", "alice@EXAMPLE.COM")
        );
        assert!(ex.step(b"").is_err(), "nothing after the end");
    }

    #[test]
    fn without_mutual_authentication_the_offer_goes_at_once() {
        let mut ex = exchange(1, b"");
        assert_eq!(
            ex.step(b"t1").unwrap(),
            GssapiStep::Reply(b"W\x01\x00\x00\x00".to_vec())
        );
        let (who, authzid) = authenticated(ex.step(b"W\x01\x00\x10\x00").unwrap());
        assert_eq!((who.as_str(), authzid.as_str()), ("alice@EXAMPLE.COM", ""));
    }

    #[test]
    fn bad_tokens_end_the_exchange() {
        assert!(exchange(1, b"").step(b"").is_err(), "an empty first token");
        let mut ex = exchange(1, b"ap-rep");
        ex.step(b"t1").unwrap();
        assert!(ex.step(b"not empty").is_err());
        assert!(ex.step(b"").is_err(), "a refusal is final");
        let mut ex = exchange(1, b"");
        ex.step(b"t1").unwrap();
        assert!(ex.step(b"\x01\x00\x00\x00").is_err(), "not wrapped");
        let mut ex = exchange(1, b"");
        ex.step(b"t1").unwrap();
        assert!(
            ex.step(b"W\x04\x00\x00\x00").is_err(),
            "confidentiality was not offered"
        );
    }

    #[test]
    fn the_client_choice_is_read_as_rfc_4752_writes_it() {
        assert_eq!(
            parse_client_choice(b"\x01\x01\x00\x00bob").unwrap(),
            ClientChoice {
                layer: 1,
                max_message: 65536,
                authzid: "bob".into()
            }
        );
        for refused in [
            &b""[..],
            b"\x01\x00\x00",
            b"\x02\x00\x00\x00",
            b"\x03\x00\x00\x00",
            b"\x01\x00\x00\x00\xff",
        ] {
            assert!(parse_client_choice(refused).is_err(), "{refused:?}");
        }
        assert_eq!(server_offer(), [1, 0, 0, 0]);
    }

    proptest! {
        #[test]
        fn random_answers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let parsed = parse_client_choice(&bytes);
            prop_assert_eq!(parsed.is_ok(), bytes.len() >= 4 && bytes[0] == NO_SECURITY_LAYER
                && std::str::from_utf8(&bytes[4..]).is_ok());
            let mut ex = exchange(1, b"");
            let _ = ex.step(b"t1");
            let _ = ex.step(&bytes);
        }
    }
}
