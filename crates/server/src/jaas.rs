//! The JAAS login configuration ZooKeeper users already have: the
//! `Server` section's `org.apache.zookeeper.server.auth.DigestLoginModule`
//! lists the SASL DIGEST-MD5 users as `user_NAME="PASSWORD"` options; its
//! `com.sun.security.auth.module.Krb5LoginModule` names the keytab and
//! principal of the Kerberos service (SASL GSSAPI). The `QuorumServer` and
//! `QuorumLearner` sections name, with either module, what members
//! authenticate each other with.

use std::path::PathBuf;

const DIGEST_MODULE: &str = "org.apache.zookeeper.server.auth.DigestLoginModule";
const KRB5_MODULE: &str = "com.sun.security.auth.module.Krb5LoginModule";

/// A Krb5LoginModule's service login: the key of `principal`
/// (`zookeeper/HOST@REALM`, or `*` for any key of the keytab) in `keytab`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KerberosLogin {
    pub keytab: PathBuf,
    pub principal: String,
}

/// What the `Server` section serves clients: DIGEST-MD5 users, Kerberos,
/// or both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLogins {
    pub digest_users: Vec<(String, String)>,
    pub kerberos: Option<KerberosLogin>,
}

/// The `Server` section's DigestLoginModule users and Krb5LoginModule
/// login; one of them at least.
pub fn server_logins(text: &str) -> Result<ServerLogins, String> {
    let digest = module_options(text, "Server", DIGEST_MODULE)?;
    let kerberos = module_options(text, "Server", KRB5_MODULE)?;
    if digest.is_none() && kerberos.is_none() {
        return Err(format!(
            "the Server section has neither {DIGEST_MODULE} nor {KRB5_MODULE}"
        ));
    }
    Ok(ServerLogins {
        digest_users: match digest {
            Some(options) => users("Server", options)?,
            None => Vec::new(),
        },
        kerberos: kerberos
            .map(|options| kerberos_login("Server", options))
            .transpose()?,
    })
}

/// The Krb5LoginModule login of section `name` (`QuorumServer`,
/// `QuorumLearner`), if that is its module: ZooKeeper picks Kerberos for a
/// quorum section whose login yields a principal, DIGEST-MD5 otherwise.
/// Between members the principal is a named one (no `*`).
pub fn section_kerberos_login(text: &str, name: &str) -> Result<Option<KerberosLogin>, String> {
    let Some(options) = module_options(text, name, KRB5_MODULE)? else {
        return Ok(None);
    };
    let login = kerberos_login(name, options)?;
    if login.principal == "*" {
        return Err(format!(
            "the {name} section's {KRB5_MODULE} needs a named principal, not *"
        ));
    }
    Ok(Some(login))
}

/// A login from section `section`'s Krb5LoginModule options, which must
/// take the key from a keytab (`useKeyTab=true`, `keyTab`) for a named
/// `principal`.
fn kerberos_login(section: &str, options: Vec<(String, String)>) -> Result<KerberosLogin, String> {
    let get = |key: &str| {
        (options.iter())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    if get("useKeyTab") != Some("true") {
        return Err(format!(
            "the {section} section's {KRB5_MODULE} needs useKeyTab=true: the key comes \
             from a keytab"
        ));
    }
    let (Some(keytab), Some(principal)) = (get("keyTab"), get("principal")) else {
        return Err(format!(
            "the {section} section's {KRB5_MODULE} needs keyTab=\"FILE\" and \
             principal=\"NAME/HOST@REALM\""
        ));
    };
    Ok(KerberosLogin {
        keytab: PathBuf::from(keytab),
        principal: principal.to_string(),
    })
}

/// The users of the `Server` section's DigestLoginModule, (name, password).
pub fn server_digest_users(text: &str) -> Result<Vec<(String, String)>, String> {
    section_digest_users(text, "Server")
}

/// The users of section `name`'s DigestLoginModule (`user_NAME="PASSWORD"`),
/// as the `QuorumServer` section lists the members that may connect.
pub fn section_digest_users(text: &str, name: &str) -> Result<Vec<(String, String)>, String> {
    users(name, digest_options(text, name)?)
}

/// The `user_NAME="PASSWORD"` options of section `name`'s DigestLoginModule.
fn users(name: &str, options: Vec<(String, String)>) -> Result<Vec<(String, String)>, String> {
    let users: Vec<(String, String)> = options
        .into_iter()
        .filter_map(|(key, value)| Some((key.strip_prefix("user_")?.to_string(), value)))
        .collect();
    if users.is_empty() {
        return Err(format!(
            "the {name} section's DigestLoginModule lists no user_NAME"
        ));
    }
    Ok(users)
}

/// The `username` and `password` of section `name`'s DigestLoginModule, as
/// the `QuorumLearner` section gives a member's own credentials.
pub fn section_credentials(text: &str, name: &str) -> Result<(String, String), String> {
    let options = digest_options(text, name)?;
    let get = |key: &str| {
        options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("the {name} section's DigestLoginModule has no {key}"))
    };
    Ok((get("username")?, get("password")?))
}

/// Whether the file has a section `name`.
pub fn has_section(text: &str, name: &str) -> bool {
    sections(text).is_ok_and(|sections| sections.iter().any(|(section, _)| section == name))
}

/// The file's sections, (name, body).
fn sections(text: &str) -> Result<Vec<(String, String)>, String> {
    let text = strip_comments(text);
    let mut rest = text.as_str();
    let mut out = Vec::new();
    while let Some(open) = rest.find('{') {
        let section = rest[..open].trim();
        let close = rest[open..]
            .find('}')
            .map(|i| open + i)
            .ok_or_else(|| format!("section {section}: no closing brace"))?;
        out.push((section.to_string(), rest[open + 1..close].to_string()));
        rest = rest[close + 1..].trim_start().trim_start_matches(';');
    }
    Ok(out)
}

/// The options of section `name`'s DigestLoginModule entry.
fn digest_options(text: &str, name: &str) -> Result<Vec<(String, String)>, String> {
    module_options(text, name, DIGEST_MODULE)?
        .ok_or_else(|| format!("the {name} section has no {DIGEST_MODULE}"))
}

/// The options of section `name`'s `module` entry; none when the section
/// has no such entry (an error when there is no such section).
fn module_options(
    text: &str,
    name: &str,
    module: &str,
) -> Result<Option<Vec<(String, String)>>, String> {
    let sections = sections(text)?;
    let (_, body) = (sections.iter())
        .find(|(section, _)| section == name)
        .ok_or_else(|| format!("no {name} section"))?;
    for entry in body.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let mut words = entry.splitn(3, char::is_whitespace);
        let found = words.next().unwrap_or_default();
        let _flag = words.next();
        if found == module {
            return options(words.next().unwrap_or_default()).map(Some);
        }
    }
    Ok(None)
}

/// `key="value"` (or `key=value`) options separated by white space.
fn options(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once('=')
            .ok_or_else(|| format!("option without a value near {rest:?}"))?;
        let after = after.trim_start();
        let (value, tail) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted
                    .find('"')
                    .ok_or_else(|| format!("unterminated value of {}", key.trim()))?;
                (&quoted[..end], &quoted[end + 1..])
            }
            None => {
                let end = after.find(char::is_whitespace).unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        out.push((key.trim().to_string(), value.to_string()));
        rest = tail.trim_start();
    }
    Ok(out)
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |i| &after[i..]);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |i| &after[i + 2..]);
        } else {
            let c = rest.chars().next().unwrap_or_default();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_server_sections_digest_users() {
        let text = r#"
            // ZooKeeper's own example
            Server {
                   org.apache.zookeeper.server.auth.DigestLoginModule required
                   user_super="adminsecret"
                   user_bob="bobsecret";
            };
            /* the client side, not ours */
            Client {
                   org.apache.zookeeper.server.auth.DigestLoginModule required
                   username="bob"
                   password="bobsecret";
            };
        "#;
        let users = server_digest_users(text).unwrap();
        assert_eq!(
            users,
            vec![
                ("super".to_string(), "adminsecret".to_string()),
                ("bob".to_string(), "bobsecret".to_string())
            ]
        );
        assert!(server_digest_users("Client { x required a=\"b\"; };").is_err());
        assert_eq!(
            section_credentials(text, "Client").unwrap(),
            ("bob".to_string(), "bobsecret".to_string())
        );
        assert!(section_credentials(text, "QuorumLearner").is_err());
        assert!(has_section(text, "Server") && has_section(text, "Client"));
        assert!(!has_section(text, "QuorumServer"));
        assert!(server_digest_users(
            "Server { org.apache.zookeeper.server.auth.DigestLoginModule required user_a=\"x; };"
        )
        .is_err());
        let logins = server_logins(text).unwrap();
        assert_eq!((logins.digest_users.len(), logins.kerberos), (2, None));
    }

    #[test]
    fn reads_the_server_sections_kerberos_login() {
        let text = r#"
            Server {
                   com.sun.security.auth.module.Krb5LoginModule required
                   useKeyTab=true
                   keyTab="/etc/zookeeper/zk.keytab"
                   storeKey=true
                   useTicketCache=false
                   principal="zookeeper/zk1.example.com@EXAMPLE.COM";
            };
        "#;
        let logins = server_logins(text).unwrap();
        assert!(logins.digest_users.is_empty());
        assert_eq!(
            logins.kerberos,
            Some(KerberosLogin {
                keytab: PathBuf::from("/etc/zookeeper/zk.keytab"),
                principal: "zookeeper/zk1.example.com@EXAMPLE.COM".into(),
            })
        );
        let both = text.replace(
            "};",
            "org.apache.zookeeper.server.auth.DigestLoginModule required user_bob=\"s\"; };",
        );
        let logins = server_logins(&both).unwrap();
        assert_eq!(logins.digest_users.len(), 1);
        assert!(logins.kerberos.is_some());
        for refused in [
            text.replace("useKeyTab=true", "useKeyTab=false"),
            text.replace("keyTab=\"/etc/zookeeper/zk.keytab\"", ""),
            text.replace("principal=", "principalName="),
            "Server { other.Module required a=\"b\"; };".to_string(),
        ] {
            assert!(server_logins(&refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn reads_the_quorum_sections_kerberos_logins() {
        let text = r#"
            QuorumServer {
                   com.sun.security.auth.module.Krb5LoginModule required
                   useKeyTab=true
                   keyTab="/etc/zookeeper/quorum.keytab"
                   storeKey=true
                   principal="zkquorum/zk1.example.com@EXAMPLE.COM";
            };
            QuorumLearner {
                   org.apache.zookeeper.server.auth.DigestLoginModule required
                   username="member"
                   password="s3cret";
            };
        "#;
        assert_eq!(
            section_kerberos_login(text, "QuorumServer").unwrap(),
            Some(KerberosLogin {
                keytab: PathBuf::from("/etc/zookeeper/quorum.keytab"),
                principal: "zkquorum/zk1.example.com@EXAMPLE.COM".into(),
            })
        );
        assert_eq!(section_kerberos_login(text, "QuorumLearner").unwrap(), None);
        assert!(section_kerberos_login(text, "Elsewhere").is_err());
        let star = text.replace("zkquorum/zk1.example.com@EXAMPLE.COM", "*");
        let e = section_kerberos_login(&star, "QuorumServer").unwrap_err();
        assert!(
            e.contains("QuorumServer section's") && e.contains("not *"),
            "{e}"
        );
        let no_keytab = text.replace("useKeyTab=true", "");
        let e = section_kerberos_login(&no_keytab, "QuorumServer").unwrap_err();
        assert!(e.contains("the QuorumServer section's"), "{e}");
    }
}
