//! SASL DIGEST-MD5 (RFC 2831) as ZooKeeper's server runs it for clients
//! whose JAAS `Client` section names a `DigestLoginModule`: service
//! `zookeeper`, server name and realm `zk-sasl-md5`, quality of protection
//! `auth`. The client opens with an empty token; the server answers a
//! challenge; the client's response proves it knows the user's password
//! and the server's `rspauth` proves the server does. Pure: the nonce is
//! given, the users are looked up through a closure. GSSAPI (Kerberos)
//! is `gssapi` (the acceptor) and `gssapi_initiator`, the identity a
//! principal becomes `kerberos_name`, the principals between members
//! `quorum_kerberos`.

use md5::{Digest, Md5};

pub mod gssapi;
pub mod gssapi_initiator;
pub mod kerberos_name;
pub mod quorum_kerberos;

/// SASL GSSAPI (Kerberos, RFC 4752) as the server is configured for it:
/// its acceptor (the JAAS `Server` section's Krb5LoginModule keytab and
/// principal, over MIT Kerberos in the server crate) and ZooKeeper's rules
/// for the identity a principal becomes.
#[derive(Clone)]
pub struct GssapiService {
    pub acceptor: std::sync::Arc<dyn gssapi::GssAcceptor>,
    pub names: kerberos_name::KerberosNames,
}

impl std::fmt::Debug for GssapiService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GssapiService")
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

/// A connection's SASL exchange between two of its tokens.
pub enum Exchange {
    DigestMd5(DigestMd5),
    Gssapi(gssapi::GssapiExchange),
}

/// ZooKeeper's fixed server name for DIGEST-MD5, which is also the realm.
pub const REALM: &str = "zk-sasl-md5";
const DIGEST_URI: &str = "zookeeper/zk-sasl-md5";

/// Why a client's response was refused (logged; the client is told
/// AuthFailed, as ZooKeeper does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslRefusal(pub String);

/// One connection's exchange, between the challenge and the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestMd5 {
    nonce: String,
}

impl DigestMd5 {
    /// Starts an exchange with `nonce` (unpredictable, unique per
    /// exchange): the challenge to send.
    pub fn start(nonce: String) -> (DigestMd5, Vec<u8>) {
        let challenge = format!(
            "realm=\"{REALM}\",nonce=\"{nonce}\",qop=\"auth\",charset=utf-8,algorithm=md5-sess"
        );
        (DigestMd5 { nonce }, challenge.into_bytes())
    }

    /// Checks the client's response. On success: the user it
    /// authenticated as and the `rspauth` token to send back.
    pub fn finish(
        &self,
        response: &[u8],
        password_of: impl Fn(&str) -> Option<String>,
    ) -> Result<(String, Vec<u8>), SaslRefusal> {
        let refuse = |why: &str| Err(SaslRefusal(why.to_string()));
        let text = std::str::from_utf8(response).map_err(|_| SaslRefusal("not UTF-8".into()))?;
        let fields = parse_fields(text).ok_or_else(|| SaslRefusal("malformed response".into()))?;
        let field = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        let (Some(user), Some(nonce), Some(cnonce), Some(nc), Some(theirs)) = (
            field("username"),
            field("nonce"),
            field("cnonce"),
            field("nc"),
            field("response"),
        ) else {
            return refuse("a required field is missing");
        };
        if nonce != self.nonce {
            return refuse("the nonce is not the one sent");
        }
        if field("qop").is_some_and(|q| q != "auth") {
            return refuse("only qop=auth is served");
        }
        let uri = field("digest-uri").unwrap_or_default();
        if uri != DIGEST_URI {
            return refuse("digest-uri is not zookeeper/zk-sasl-md5");
        }
        let realm = field("realm").unwrap_or(REALM);
        let authzid = field("authzid");
        if authzid.is_some_and(|a| a != user) {
            return refuse("an authorization id other than the user");
        }
        let Some(password) = password_of(user) else {
            return refuse("unknown user");
        };
        let a1 = a1(user, realm, &password, nonce, cnonce, authzid);
        let expected = kd(&a1, nonce, nc, cnonce, &format!("AUTHENTICATE:{uri}"));
        if !constant_time_eq(expected.as_bytes(), theirs.to_ascii_lowercase().as_bytes()) {
            return refuse("wrong password");
        }
        let rspauth = kd(&a1, nonce, nc, cnonce, &format!(":{uri}"));
        Ok((user.to_string(), format!("rspauth={rspauth}").into_bytes()))
    }
}

/// The client's side of the same exchange (a member authenticating to
/// another with its JAAS `QuorumLearner` credentials): the response to
/// `challenge`, and the `rspauth` token the server must answer with, which
/// proves it knows the password too. `cnonce` must be unpredictable.
pub fn client_response(
    challenge: &[u8],
    user: &str,
    password: &str,
    cnonce: &str,
) -> Result<(Vec<u8>, Vec<u8>), SaslRefusal> {
    let text = std::str::from_utf8(challenge).map_err(|_| SaslRefusal("not UTF-8".into()))?;
    let fields = parse_fields(text).ok_or_else(|| SaslRefusal("malformed challenge".into()))?;
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let nonce = field("nonce").ok_or_else(|| SaslRefusal("a challenge without a nonce".into()))?;
    if field("qop").is_some_and(|q| !q.split(',').any(|q| q.trim() == "auth")) {
        return Err(SaslRefusal("the server offers no qop=auth".into()));
    }
    let realm = field("realm").unwrap_or(REALM);
    let nc = "00000001";
    let a1 = a1(user, realm, password, nonce, cnonce, None);
    let response = kd(
        &a1,
        nonce,
        nc,
        cnonce,
        &format!("AUTHENTICATE:{DIGEST_URI}"),
    );
    let rspauth = kd(&a1, nonce, nc, cnonce, &format!(":{DIGEST_URI}"));
    let quoted = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"");
    let text = format!(
        "username=\"{}\",realm=\"{}\",nonce=\"{}\",cnonce=\"{}\",nc={nc},qop=auth,\
         digest-uri=\"{DIGEST_URI}\",response={response},charset=utf-8",
        quoted(user),
        quoted(realm),
        quoted(nonce),
        quoted(cnonce),
    );
    Ok((text.into_bytes(), format!("rspauth={rspauth}").into_bytes()))
}

/// H(user:realm:password) ":" nonce ":" cnonce [":" authzid], hashed.
fn a1(
    user: &str,
    realm: &str,
    password: &str,
    nonce: &str,
    cnonce: &str,
    authzid: Option<&str>,
) -> String {
    let secret = Md5::digest(format!("{user}:{realm}:{password}").as_bytes());
    let mut a1 = secret.to_vec();
    a1.extend_from_slice(format!(":{nonce}:{cnonce}").as_bytes());
    if let Some(authzid) = authzid {
        a1.extend_from_slice(format!(":{authzid}").as_bytes());
    }
    hex(&Md5::digest(&a1))
}

/// HEX(KD(HEX(H(A1)), nonce:nc:cnonce:auth:HEX(H(A2)))).
fn kd(a1_hex: &str, nonce: &str, nc: &str, cnonce: &str, a2: &str) -> String {
    let a2_hex = hex(&Md5::digest(a2.as_bytes()));
    hex(&Md5::digest(
        format!("{a1_hex}:{nonce}:{nc}:{cnonce}:auth:{a2_hex}").as_bytes(),
    ))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `key=value` pairs separated by commas; values quoted (with `\`
/// escapes) or bare.
fn parse_fields(text: &str) -> Option<Vec<(String, String)>> {
    let mut fields = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let key = key.trim().to_string();
        let after = after.trim_start();
        let (value, tail) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => value.push(chars.next()?.1),
                    '"' => {
                        end = Some(i + 1);
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &quoted[end?..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        fields.push((key, value));
        rest = tail.trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
        if fields.len() > 64 {
            return None;
        }
    }
    Some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's response computed independently (RFC 2831's formulas
    /// written out again), for user `bob`, password `secret`.
    fn response(nonce: &str, password: &str) -> String {
        let cnonce = "OA6MHXh6VqTrRk";
        let ha1 = {
            let mut a1 = Md5::digest(format!("bob:{REALM}:{password}")).to_vec();
            a1.extend_from_slice(format!(":{nonce}:{cnonce}").as_bytes());
            hex(&Md5::digest(a1))
        };
        let ha2 = hex(&Md5::digest(format!("AUTHENTICATE:{DIGEST_URI}")));
        let digest = hex(&Md5::digest(format!(
            "{ha1}:{nonce}:00000001:{cnonce}:auth:{ha2}"
        )));
        format!(
            "username=\"bob\",realm=\"{REALM}\",nonce=\"{nonce}\",cnonce=\"{cnonce}\",\
             nc=00000001,qop=auth,digest-uri=\"{DIGEST_URI}\",response={digest},charset=utf-8"
        )
    }

    fn users(user: &str) -> Option<String> {
        (user == "bob").then(|| "secret".to_string())
    }

    #[test]
    fn the_client_side_answers_the_server_side() {
        let (server, challenge) = DigestMd5::start("n0nce-2".into());
        let (response, expected) =
            client_response(&challenge, "bob", "secret", "c\"n0nce").unwrap();
        let (user, rspauth) = server.finish(&response, users).unwrap();
        assert_eq!(user, "bob");
        assert_eq!(rspauth, expected, "the server proves it knows the password");
        let (wrong, _) = client_response(&challenge, "bob", "guess", "cn").unwrap();
        assert!(server.finish(&wrong, users).is_err());
        assert!(client_response(b"realm=\"x\"", "bob", "secret", "cn").is_err());
        assert!(client_response(b"nonce=\"n\",qop=\"auth-conf\"", "bob", "secret", "cn").is_err());
    }

    #[test]
    fn the_right_password_passes_and_the_server_proves_it_knows_it() {
        let (server, challenge) = DigestMd5::start("n0nce".into());
        let challenge = String::from_utf8(challenge).unwrap();
        assert!(challenge.contains("nonce=\"n0nce\"") && challenge.contains("qop=\"auth\""));
        let (user, rspauth) = server
            .finish(response("n0nce", "secret").as_bytes(), users)
            .unwrap();
        assert_eq!(user, "bob");
        let rspauth = String::from_utf8(rspauth).unwrap();
        assert!(rspauth.starts_with("rspauth=") && rspauth.len() == 8 + 32);
    }

    #[test]
    fn a_wrong_password_an_old_nonce_or_garbage_is_refused() {
        let (server, _) = DigestMd5::start("n0nce".into());
        assert!(server
            .finish(response("n0nce", "guess").as_bytes(), users)
            .is_err());
        assert!(server
            .finish(response("other", "secret").as_bytes(), users)
            .is_err());
        let unknown = response("n0nce", "secret").replace("bob", "eve");
        assert!(server.finish(unknown.as_bytes(), users).is_err());
        for garbage in ["", "x", "a=\"unterminated", "=,=", "\u{0}"] {
            assert!(
                server.finish(garbage.as_bytes(), users).is_err(),
                "{garbage:?}"
            );
        }
    }

    #[test]
    fn fields_parse_quoted_escaped_and_bare() {
        let fields = parse_fields(r#"a="x\"y", b=2,c="" "#).unwrap();
        let want = [("a", "x\"y"), ("b", "2"), ("c", "")];
        assert_eq!(fields.len(), 3);
        for ((k, v), (wk, wv)) in fields.iter().zip(want) {
            assert_eq!((k.as_str(), v.as_str()), (wk, wv));
        }
    }
}
