//! TLS for clients (`secureClientPort`) and between members (`sslQuorum`,
//! with the `ssl.quorum.*` keys: each member presents its certificate both
//! as the server and as the dialing client), configured with ZooKeeper's keys:
//! `ssl.keyStore.*` (this server's key and certificate chain),
//! `ssl.trustStore.*` (the CAs client certificates must chain to),
//! `ssl.clientAuth`, `ssl.enabledProtocols`, `ssl.ciphersuites`. Stores are
//! PEM or PKCS12 files, as ZooKeeper 3.9 reads them. The files are read
//! again when they change, so a renewed certificate takes effect for the
//! next connection without a restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme,
    SupportedProtocolVersion,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// `ssl.clientAuth`: whether a client must present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// ZooKeeper's default: a certificate signed by the trust store's CAs.
    Need,
    /// Checked when presented.
    Want,
    None,
}

/// A key or trust store as zoo.cfg names it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoreSettings {
    pub location: Option<PathBuf>,
    pub password: String,
    /// `PEM`, `PKCS12` (also `JKS`, refused with a way out); inferred
    /// from the file's extension when unset, as ZooKeeper does.
    pub kind: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub key_store: StoreSettings,
    pub trust_store: StoreSettings,
    pub client_auth: ClientAuth,
    /// `ssl.enabledProtocols` (`TLSv1.2`, `TLSv1.3`); empty: both.
    pub protocols: Vec<String>,
    /// `ssl.ciphersuites` by their IANA (Java) names; empty: rustls's.
    pub cipher_suites: Vec<String>,
    /// `ssl.quorum.hostnameVerification`: a dialed member's certificate
    /// must name the address dialed (ZooKeeper's default).
    pub hostname_verification: bool,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            key_store: StoreSettings::default(),
            trust_store: StoreSettings::default(),
            client_auth: ClientAuth::Need,
            protocols: Vec::new(),
            cipher_suites: Vec::new(),
            hostname_verification: true,
        }
    }
}

pub fn parse_client_auth(value: &str) -> Result<ClientAuth, String> {
    match value.to_ascii_lowercase().as_str() {
        "need" => Ok(ClientAuth::Need),
        "want" => Ok(ClientAuth::Want),
        "none" => Ok(ClientAuth::None),
        _ => Err("expected need, want or none".into()),
    }
}

/// Builds the rustls configuration the settings describe; the error says
/// which file or key is wrong.
pub fn server_config(settings: &TlsSettings) -> Result<Arc<ServerConfig>, String> {
    let (provider, versions) = provider_and_versions(settings)?;
    let (chain, key) = key_store(&settings.key_store)?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match settings.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        auth => {
            let roots = trust_store(&settings.trust_store)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match auth {
                ClientAuth::Want => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|e| format!("ssl.trustStore: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("ssl.keyStore: {e}"))?;
    Ok(Arc::new(config))
}

/// The crypto provider with `ssl.ciphersuites` applied, and the protocol
/// versions of `ssl.enabledProtocols`.
fn provider_and_versions(
    settings: &TlsSettings,
) -> Result<(Arc<CryptoProvider>, Vec<&'static SupportedProtocolVersion>), String> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !settings.cipher_suites.is_empty() {
        let wanted: Vec<String> = (settings.cipher_suites.iter())
            .map(|s| iana_name(s.trim()))
            .collect();
        provider.cipher_suites.retain(|suite| {
            let name = suite.suite().as_str().map(iana_name).unwrap_or_default();
            wanted.contains(&name)
        });
        if provider.cipher_suites.is_empty() {
            return Err(format!(
                "ssl.ciphersuites: none of {:?} is supported",
                settings.cipher_suites
            ));
        }
    }
    Ok((Arc::new(provider), protocol_versions(&settings.protocols)?))
}

/// The side of a member that dials another (`sslQuorum`): its own
/// certificate (members authenticate each other), the trust store's CAs,
/// and the dialed address checked against the peer's certificate unless
/// `ssl.quorum.hostnameVerification=false`.
pub fn client_config(settings: &TlsSettings) -> Result<Arc<ClientConfig>, String> {
    let (provider, versions) = provider_and_versions(settings)?;
    let roots = Arc::new(trust_store(&settings.trust_store)?);
    let (chain, key) = key_store(&settings.key_store)?;
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = if settings.hostname_verification {
        builder.with_root_certificates(roots)
    } else {
        let chain_only = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| format!("ssl.trustStore: {e}"))?;
        (builder.dangerous()).with_custom_certificate_verifier(Arc::new(AnyName(chain_only)))
    };
    let config = builder
        .with_client_auth_cert(chain, key)
        .map_err(|e| format!("ssl.keyStore: {e}"))?;
    Ok(Arc::new(config))
}

/// A server certificate verifier that checks the chain and not the name
/// (`hostnameVerification=false`).
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        match (self.0).verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                NotValidForName | NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Java names TLS 1.3 suites `TLS_AES_128_GCM_SHA256`, rustls
/// `TLS13_AES_128_GCM_SHA256`; both read as the former.
fn iana_name(name: &str) -> String {
    let upper = name.to_ascii_uppercase();
    match upper.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => upper,
    }
}

fn protocol_versions(
    names: &[String],
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    if names.is_empty() {
        return Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12]);
    }
    let mut versions = Vec::new();
    for name in names {
        match name.trim() {
            "TLSv1.3" => versions.push(&rustls::version::TLS13),
            "TLSv1.2" => versions.push(&rustls::version::TLS12),
            other => {
                return Err(format!(
                    "ssl.enabledProtocols: {other} is not served (TLSv1.2 and TLSv1.3 are)"
                ))
            }
        }
    }
    Ok(versions)
}

/// The store's type: as set, else from the file's extension.
fn store_kind(store: &StoreSettings, path: &Path, key: &str) -> Result<String, String> {
    if let Some(kind) = &store.kind {
        return Ok(kind.to_ascii_uppercase());
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    match ext.to_ascii_lowercase().as_str() {
        "pem" | "crt" | "key" => Ok("PEM".into()),
        "p12" | "pfx" | "pkcs12" => Ok("PKCS12".into()),
        "jks" => Ok("JKS".into()),
        _ => Err(format!(
            "{key}.type is not set and {} has no extension that names one (.pem, .p12, .jks)",
            path.display()
        )),
    }
}

fn read(path: &Path, key: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{key}.location {}: {e}", path.display()))
}

type KeyPair = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn key_store(store: &StoreSettings) -> Result<KeyPair, String> {
    const KEY: &str = "ssl.keyStore";
    let path = store
        .location
        .as_deref()
        .ok_or("secureClientPort needs ssl.keyStore.location")?;
    let bytes = read(path, KEY)?;
    match store_kind(store, path, KEY)?.as_str() {
        "PEM" => {
            let chain = pem_certificates(&bytes, KEY, path)?;
            let key = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
                format!(
                    "{KEY} {}: no unencrypted private key ({e}); an encrypted PEM key is not \
                     read, use PKCS12",
                    path.display()
                )
            })?;
            if chain.is_empty() {
                return Err(format!("{KEY} {}: no certificate", path.display()));
            }
            Ok((chain, key))
        }
        "PKCS12" => {
            let store = pkcs12(&bytes, store, KEY, path)?;
            let (_, pair) = store
                .private_key_chain()
                .ok_or_else(|| format!("{KEY} {}: no private key", path.display()))?;
            let chain = (pair.chain().iter())
                .map(|c| CertificateDer::from(c.as_der().to_vec()))
                .collect();
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pair.key().to_vec()));
            Ok((chain, key))
        }
        other => Err(unsupported(KEY, other)),
    }
}

fn trust_store(store: &StoreSettings) -> Result<RootCertStore, String> {
    const KEY: &str = "ssl.trustStore";
    let path = store.location.as_deref().ok_or(
        "ssl.clientAuth need or want checks client certificates: set ssl.trustStore.location \
         (or ssl.clientAuth=none)",
    )?;
    let bytes = read(path, KEY)?;
    let certs: Vec<CertificateDer<'static>> = match store_kind(store, path, KEY)?.as_str() {
        "PEM" => pem_certificates(&bytes, KEY, path)?,
        "PKCS12" => {
            let store = pkcs12(&bytes, store, KEY, path)?;
            (store.entries())
                .filter_map(|(_, entry)| match entry {
                    p12_keystore::KeyStoreEntry::Certificate(c) => {
                        Some(CertificateDer::from(c.as_der().to_vec()))
                    }
                    _ => None,
                })
                .collect()
        }
        other => return Err(unsupported(KEY, other)),
    };
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!("{KEY} {}: no CA certificate", path.display()));
    }
    Ok(roots)
}

/// Every certificate of a PEM file.
fn pem_certificates(
    bytes: &[u8],
    key: &str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, String> {
    CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{key} {}: {e}", path.display()))
}

/// A PKCS12 file opened with the store's password.
fn pkcs12(
    bytes: &[u8],
    store: &StoreSettings,
    key: &str,
    path: &Path,
) -> Result<p12_keystore::KeyStore, String> {
    p12_keystore::KeyStore::from_pkcs12(bytes, &store.password)
        .map_err(|e| format!("{key} {}: {e}", path.display()))
}

fn unsupported(key: &str, kind: &str) -> String {
    match kind {
        "JKS" => format!(
            "{key}.type JKS is not read: convert it with `keytool -importkeystore -srckeystore \
             FILE.jks -destkeystore FILE.p12 -deststoretype PKCS12` and use PKCS12"
        ),
        other => format!("{key}.type {other} is not read (PEM and PKCS12 are)"),
    }
}

/// The rustls configuration, read again when a store file changes (looked
/// at for new connections at most once a second). A store that no longer
/// reads keeps the last good configuration and says why.
pub struct ReloadingConfig {
    settings: TlsSettings,
    current: Arc<ServerConfig>,
    stamps: Vec<Option<SystemTime>>,
    looked_at: Instant,
}

const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(1);

impl ReloadingConfig {
    pub fn new(settings: TlsSettings) -> Result<ReloadingConfig, String> {
        let current = server_config(&settings)?;
        let stamps = stamps(&settings);
        Ok(ReloadingConfig {
            settings,
            current,
            stamps,
            looked_at: Instant::now(),
        })
    }

    pub fn current(&mut self) -> Arc<ServerConfig> {
        if self.looked_at.elapsed() >= RELOAD_CHECK_INTERVAL {
            self.looked_at = Instant::now();
            let now = stamps(&self.settings);
            if now != self.stamps {
                self.stamps = now;
                match server_config(&self.settings) {
                    Ok(config) => {
                        log::info!("TLS: key or trust store changed; reloaded");
                        self.current = config;
                    }
                    Err(e) => log::warn!("TLS: reloading the stores failed, keeping the last: {e}"),
                }
            }
        }
        Arc::clone(&self.current)
    }
}

fn stamps(settings: &TlsSettings) -> Vec<Option<SystemTime>> {
    [&settings.key_store, &settings.trust_store]
        .iter()
        .map(|s| {
            let path = s.location.as_ref()?;
            std::fs::metadata(path).and_then(|m| m.modified()).ok()
        })
        .collect()
}

/// The subject of a client certificate as Java's `X500Principal.getName()`
/// writes it (RFC 2253: most specific first, `CN=a,O=b`): the id of the
/// `x509` ACL scheme, as ZooKeeper's X509AuthenticationProvider takes it.
pub fn x509_subject(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let registry = x509_parser::objects::oid_registry();
    let mut rdns: Vec<String> = Vec::new();
    for rdn in cert.subject().iter() {
        let parts: Vec<String> = rdn
            .iter()
            .map(|attr| {
                let oid = attr.attr_type();
                let name = match x509_parser::objects::oid2abbrev(oid, registry) {
                    Ok(abbrev) if RFC2253_KEYWORDS.contains(&abbrev) => abbrev.to_string(),
                    _ => oid.to_id_string(),
                };
                let value = attr
                    .as_str()
                    .map(rfc2253_escape)
                    .unwrap_or_else(|_| format!("#{}", hex(attr.attr_value().data)));
                format!("{name}={value}")
            })
            .collect();
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

/// The attribute names `X500Principal.getName()` writes as keywords.
const RFC2253_KEYWORDS: &[&str] = &["CN", "C", "L", "ST", "O", "OU", "STREET", "DC", "UID"];

fn rfc2253_escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_read_as_zookeeper_reads_them() {
        assert_eq!(parse_client_auth("NEED"), Ok(ClientAuth::Need));
        assert!(parse_client_auth("maybe").is_err());
        assert_eq!(
            iana_name("TLS13_AES_128_GCM_SHA256"),
            "TLS_AES_128_GCM_SHA256"
        );
        assert_eq!(rfc2253_escape("a,b+c"), "a\\,b\\+c");
        assert_eq!(rfc2253_escape(" x "), "\\ x\\ ");
        assert!(protocol_versions(&["SSLv3".into()]).is_err());
        let jks = StoreSettings {
            location: Some("/nonexistent/keys.jks".into()),
            ..Default::default()
        };
        assert_eq!(
            store_kind(&jks, Path::new("/x/keys.jks"), "k"),
            Ok("JKS".into())
        );
        assert!(unsupported("ssl.keyStore", "JKS").contains("PKCS12"));
        let missing = TlsSettings::default();
        assert!(server_config(&missing)
            .unwrap_err()
            .contains("ssl.keyStore.location"));
    }
}
