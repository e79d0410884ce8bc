//! SASL on a client connection (opcode 102): DIGEST-MD5 against the JAAS
//! `Server` section's users (`crate::sasl`), GSSAPI (Kerberos) through the
//! acceptor the server crate gives (`crate::sasl::gssapi`), and ZooKeeper 3.9's
//! `enforce.auth.enabled`, which closes a connection that asks for
//! anything before authenticating with a required scheme.

use stoa_proto::codes::ErrorCode;
use stoa_proto::records::{Id, SetSaslResponse};
use stoa_proto::request::Request;
use stoa_proto::response::Response;

use super::Engine;
use crate::sasl::gssapi::{GssapiExchange, GssapiStep};
use crate::sasl::{DigestMd5, Exchange};
use crate::watch::ConnId;

impl Engine {
    /// A SASL token. The first of an exchange picks the mechanism, as the
    /// client's first token shows it: DIGEST-MD5 opens with an empty one
    /// (the challenge goes back), GSSAPI with its first context token.
    /// A failure is AuthFailed and the connection closes, as ZooKeeper
    /// does.
    pub(super) fn on_sasl(&mut self, conn: ConnId, xid: i32, token: &[u8]) {
        let Some(c) = self.gate.conns.get_mut(&conn) else {
            return;
        };
        match c.sasl.take() {
            Some(Exchange::DigestMd5(exchange)) => self.finish_digest(conn, xid, &exchange, token),
            Some(Exchange::Gssapi(exchange)) => self.step_gssapi(conn, xid, exchange, token),
            None => self.start_sasl(conn, xid, token),
        }
    }

    fn start_sasl(&mut self, conn: ConnId, xid: i32, token: &[u8]) {
        let digest = !self.config.sasl_users.is_empty();
        match &self.config.gssapi {
            Some(gssapi) if !token.is_empty() || !digest => match gssapi.acceptor.new_context() {
                Ok(context) => self.step_gssapi(conn, xid, GssapiExchange::new(context), token),
                Err(e) => self.refuse_sasl(conn, xid, &format!("GSS-API: {e}")),
            },
            _ if digest => {
                let nonce = self.next_nonce();
                let (exchange, challenge) = DigestMd5::start(nonce);
                if let Some(c) = self.gate.conns.get_mut(&conn) {
                    c.sasl = Some(Exchange::DigestMd5(exchange));
                }
                self.sasl_reply(conn, xid, Some(challenge));
            }
            _ => {
                log::warn!(
                    "connection {conn}: SASL asked for, but no JAAS Server section is configured"
                );
                self.fail_auth(conn, xid);
            }
        }
    }

    fn finish_digest(&mut self, conn: ConnId, xid: i32, exchange: &DigestMd5, token: &[u8]) {
        let users = &self.config.sasl_users;
        let password_of = |user: &str| {
            (users.iter())
                .find(|(name, _)| name == user)
                .map(|(_, password)| password.clone())
        };
        match exchange.finish(token, password_of) {
            Ok((user, rspauth)) => {
                log::info!("connection {conn}: SASL DIGEST-MD5 authenticated {user}");
                self.add_sasl_identity(conn, user);
                self.sasl_reply(conn, xid, Some(rspauth));
            }
            Err(refusal) => self.refuse_sasl(conn, xid, &refusal.0),
        }
    }

    fn step_gssapi(&mut self, conn: ConnId, xid: i32, mut exchange: GssapiExchange, token: &[u8]) {
        let step = exchange.step(token);
        let names = self.config.gssapi.as_ref().map(|g| &g.names);
        match step {
            Ok(GssapiStep::Reply(reply)) => {
                if let Some(c) = self.gate.conns.get_mut(&conn) {
                    c.sasl = Some(Exchange::Gssapi(exchange));
                }
                self.sasl_reply(conn, xid, Some(reply));
            }
            Ok(GssapiStep::Authenticated { initiator, authzid }) => {
                match names.map(|n| n.sasl_id(&initiator)) {
                    Some(Ok(id)) => {
                        // ZooKeeper names the connection after the principal
                        // whatever authorization id the client asks for
                        // (its Java client sends its own principal).
                        log::info!(
                        "connection {conn}: SASL GSSAPI authenticated {initiator} as sasl:{id} \
                         (authorization id {authzid:?})"
                    );
                        self.add_sasl_identity(conn, id);
                        self.sasl_reply(conn, xid, None);
                    }
                    Some(Err(refusal)) => self.refuse_sasl(conn, xid, &refusal.0),
                    None => self.refuse_sasl(conn, xid, "GSSAPI is not configured"),
                }
            }
            Err(refusal) => self.refuse_sasl(conn, xid, &refusal.0),
        }
    }

    fn add_sasl_identity(&mut self, conn: ConnId, name: String) {
        let id = Id {
            scheme: "sasl".into(),
            id: name,
        };
        self.gate.add_identity(conn, id, false);
    }

    fn refuse_sasl(&mut self, conn: ConnId, xid: i32, why: &str) {
        log::warn!("connection {conn}: SASL authentication failed: {why}");
        self.stats.auth_failures += 1;
        self.fail_auth(conn, xid);
    }

    fn sasl_reply(&mut self, conn: ConnId, xid: i32, token: Option<Vec<u8>>) {
        let response = Response::Sasl(SetSaslResponse { token });
        self.queue_reply(conn, xid, ErrorCode::Ok, response);
    }

    /// AuthFailed, then the connection closes.
    pub(super) fn fail_auth(&mut self, conn: ConnId, xid: i32) {
        self.refuse_and_close(conn, xid, ErrorCode::AuthFailed);
    }

    /// Answers `xid` with `error` at once (ahead of anything queued, as
    /// ZooKeeper answers an authentication failure) and closes `conn`.
    fn refuse_and_close(&mut self, conn: ConnId, xid: i32, error: ErrorCode) {
        let zxid = self.applied_zxid();
        self.gate
            .send_reply(conn, xid, zxid, error, Response::Empty);
        self.out.closes.push(conn);
    }

    /// A nonce no one can guess without the seed (the OS's randomness at
    /// start), unique per exchange.
    fn next_nonce(&mut self) -> String {
        self.gate.sasl_nonces += 1;
        let n = self.gate.sasl_nonces;
        let seed = self.config.nonce_seed;
        let a = crate::session::splitmix64(seed ^ n.rotate_left(17));
        let b = crate::session::splitmix64(a ^ seed.rotate_left(31) ^ n);
        format!("{a:016x}{b:016x}")
    }

    /// `enforce.auth.enabled`: false (and the connection is told
    /// SessionClosedRequireSaslAuth and closed) when `request` needs an
    /// authenticated connection and this one is not.
    pub(super) fn auth_enforced(&mut self, conn: ConnId, xid: i32, request: &Request) -> bool {
        let Some(schemes) = &self.config.enforce_auth_schemes else {
            return true;
        };
        if matches!(request, Request::Auth(_) | Request::Sasl(_)) {
            return true;
        }
        let authenticated = self
            .gate
            .conns
            .get(&conn)
            .is_some_and(|c| (c.identity.ids.iter()).any(|id| schemes.contains(&id.scheme)));
        if authenticated {
            return true;
        }
        log::warn!(
            "connection {conn}: a request before authenticating with {schemes:?} \
             (enforce.auth.enabled); closing"
        );
        self.refuse_and_close(conn, xid, ErrorCode::SessionClosedRequireSaslAuth);
        false
    }
}
