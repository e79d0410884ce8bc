//! The `sasl` ACL identity of a Kerberos principal, as ZooKeeper's server
//! derives it (its SaslServerCallbackHandler and KerberosName, with the
//! DEFAULT `auth_to_local` rule): a principal of the server's default realm
//! `name/host@REALM` is `name`, then `/host` unless zoo.cfg's
//! `kerberos.removeHostFromPrincipal=true`, then `@REALM` unless
//! `kerberos.removeRealmFromPrincipal=true`. A principal of another realm
//! keeps its full name (no rule shortens it).

use super::SaslRefusal;

/// The server's settings for turning principals into identities.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KerberosNames {
    /// The Kerberos library's default realm (krb5.conf `default_realm`);
    /// none: no principal is shortened.
    pub default_realm: Option<String>,
    /// `kerberos.removeHostFromPrincipal`.
    pub remove_host: bool,
    /// `kerberos.removeRealmFromPrincipal`.
    pub remove_realm: bool,
}

impl KerberosNames {
    /// The `sasl` identity of `principal` (`name[/host]@REALM`). A name of
    /// more than two components is refused, as ZooKeeper's KerberosName
    /// refuses it.
    pub fn sasl_id(&self, principal: &str) -> Result<String, SaslRefusal> {
        let Some((components, realm)) = principal.rsplit_once('@') else {
            // No realm: already a short name.
            return Ok(principal.to_string());
        };
        let (name, host) = match components.split_once('/') {
            Some((name, host)) => (name, Some(host)),
            None => (components, None),
        };
        if host.is_some_and(|h| h.contains('/')) || components.contains('@') {
            return Err(SaslRefusal(format!("malformed Kerberos name {principal}")));
        }
        if self.default_realm.as_deref() != Some(realm) {
            return Ok(principal.to_string());
        }
        let mut id = name.to_string();
        if let Some(host) = host.filter(|_| !self.remove_host) {
            id.push('/');
            id.push_str(host);
        }
        if !self.remove_realm {
            id.push('@');
            id.push_str(realm);
        }
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(remove_host: bool, remove_realm: bool) -> KerberosNames {
        KerberosNames {
            default_realm: Some("EXAMPLE.COM".into()),
            remove_host,
            remove_realm,
        }
    }

    #[test]
    fn host_and_realm_are_kept_unless_zoo_cfg_removes_them() {
        let cases = [
            ((false, false), "alice@EXAMPLE.COM", "alice@EXAMPLE.COM"),
            (
                (false, false),
                "app/web1@EXAMPLE.COM",
                "app/web1@EXAMPLE.COM",
            ),
            ((true, false), "app/web1@EXAMPLE.COM", "app@EXAMPLE.COM"),
            ((false, true), "app/web1@EXAMPLE.COM", "app/web1"),
            ((true, true), "app/web1@EXAMPLE.COM", "app"),
            ((true, true), "alice@EXAMPLE.COM", "alice"),
        ];
        for ((host, realm), principal, id) in cases {
            assert_eq!(
                names(host, realm).sasl_id(principal).unwrap(),
                id,
                "{principal}"
            );
        }
    }

    #[test]
    fn another_realms_principal_keeps_its_full_name() {
        for settings in [names(true, true), KerberosNames::default()] {
            assert_eq!(
                settings.sasl_id("app/web1@OTHER.ORG").unwrap(),
                "app/web1@OTHER.ORG"
            );
        }
    }

    #[test]
    fn odd_names() {
        assert_eq!(names(true, true).sasl_id("plain").unwrap(), "plain");
        assert!(names(false, false).sasl_id("a/b/c@EXAMPLE.COM").is_err());
        assert_eq!(
            names(false, false).sasl_id("@EXAMPLE.COM").unwrap(),
            "@EXAMPLE.COM"
        );
    }
}
