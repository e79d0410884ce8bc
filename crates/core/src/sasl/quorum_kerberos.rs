//! Kerberos between members, as ZooKeeper names and checks the principals
//! involved: the service a learner asks a ticket for
//! (`quorum.auth.kerberos.servicePrincipal`, `_HOST` standing for the
//! dialled member's host; its SecurityUtils) and which authenticated
//! learners the dialled member lets in (its
//! SaslQuorumServerCallbackHandler in 3.9: a principal `name/host@REALM`
//! whose `host` is one of the members' hosts, and no other).

use super::SaslRefusal;

/// `quorum.auth.kerberos.servicePrincipal`'s default.
pub const SERVICE_PRINCIPAL_DEFAULT: &str = "zkquorum/localhost";
/// What stands for the dialled member's host in the service principal.
pub const HOST_PATTERN: &str = "_HOST";

/// Checks `quorum.auth.kerberos.servicePrincipal`: `service/host` with an
/// optional `@REALM`, where `host` may be `_HOST`.
pub fn check_service_principal(configured: &str) -> Result<(), String> {
    let (names, realm) = match configured.split_once('@') {
        Some((names, realm)) => (names, Some(realm)),
        None => (configured, None),
    };
    let well_formed = match names.split_once('/') {
        Some((service, host)) => {
            !service.is_empty()
                && !host.is_empty()
                && !host.contains('/')
                && realm.is_none_or(|r| !r.is_empty() && !r.contains('@'))
        }
        None => false,
    };
    if !well_formed {
        return Err(format!(
            "not service/host or service/host@REALM (host may be {HOST_PATTERN})"
        ));
    }
    Ok(())
}

/// The principal a learner asks a ticket for when it dials the member on
/// `host` (as written in its `server.N` line). As ZooKeeper does, `_HOST`
/// is replaced (by `host` in lower case) only where the setting is exactly
/// `service/_HOST`, without a realm; a setting without a realm takes
/// `realm`, ZooKeeper's the learner's own.
pub fn service_principal(configured: &str, host: &str, realm: Option<&str>) -> String {
    let substituted = match configured.split('/').collect::<Vec<_>>()[..] {
        [service, HOST_PATTERN] => format!("{service}/{}", host.to_lowercase()),
        _ => configured.to_string(),
    };
    match realm {
        Some(realm) if !substituted.contains('@') => format!("{substituted}@{realm}"),
        _ => substituted,
    }
}

/// The realm of `principal` (`...@REALM`), if it names one.
pub fn realm_of(principal: &str) -> Option<&str> {
    principal.rsplit_once('@').map(|(_, realm)| realm)
}

/// Whether the member dialled lets in a learner that authenticated as
/// `authenticated` asking to act as `authzid` (empty: as itself). As
/// ZooKeeper 3.9's quorum callback handler does with Kerberos: the two
/// must be the same principal, of exactly three components
/// (`name/host@REALM`, cut at `/` and `@`), whose host is one of
/// `member_hosts`, the hosts of the `server.N` lines. The identity let in,
/// or why not.
pub fn authorize_learner(
    authenticated: &str,
    authzid: &str,
    member_hosts: &[String],
) -> Result<String, SaslRefusal> {
    let authzid = if authzid.is_empty() {
        authenticated
    } else {
        authzid
    };
    if authzid != authenticated {
        return Err(SaslRefusal(format!(
            "{authenticated} asked to act as {authzid}, another principal"
        )));
    }
    let [_, host, _] = java_split(authenticated)[..] else {
        return Err(SaslRefusal(format!(
            "{authenticated} is not authorized: a member's principal is NAME/HOST@REALM"
        )));
    };
    if !member_hosts.iter().any(|h| h == host) {
        return Err(SaslRefusal(format!(
            "{authenticated} is not authorized: {host} is not the host of a member \
             (server.N lines: {})",
            member_hosts.join(", ")
        )));
    }
    Ok(authenticated.to_string())
}

/// `text` cut at each `/` and `@`, trailing empty pieces dropped, as
/// Java's `String.split("[/@]")` cuts it.
fn java_split(text: &str) -> Vec<&str> {
    let mut pieces: Vec<&str> = text.split(['/', '@']).collect();
    while pieces.len() > 1 && pieces.last() == Some(&"") {
        pieces.pop();
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_is_substituted_only_in_service_slash_host() {
        let realm = Some("EXAMPLE.COM");
        assert_eq!(
            service_principal("zkquorum/_HOST", "ZK1.Example.com", realm),
            "zkquorum/zk1.example.com@EXAMPLE.COM"
        );
        assert_eq!(
            service_principal(SERVICE_PRINCIPAL_DEFAULT, "zk1", realm),
            "zkquorum/localhost@EXAMPLE.COM"
        );
        // With a realm, ZooKeeper's split at `/` leaves "_HOST@REALM",
        // which is not the pattern: the setting is taken as it is.
        assert_eq!(
            service_principal("zkquorum/_HOST@OTHER.ORG", "zk1", realm),
            "zkquorum/_HOST@OTHER.ORG"
        );
        assert_eq!(
            service_principal("zkquorum/_HOST", "zk1", None),
            "zkquorum/zk1"
        );
        assert_eq!(realm_of("learner@EXAMPLE.COM"), Some("EXAMPLE.COM"));
        assert_eq!(realm_of("learner"), None);
    }

    #[test]
    fn the_service_principal_setting_must_name_a_service_and_a_host() {
        for good in [
            "zkquorum/localhost",
            "zkquorum/_HOST",
            "zkquorum/zk1.example.com@EXAMPLE.COM",
        ] {
            assert!(check_service_principal(good).is_ok(), "{good}");
        }
        for bad in [
            "zkquorum",
            "zkquorum@EXAMPLE.COM",
            "/localhost",
            "zkquorum/",
            "a/b/c",
            "zkquorum/localhost@",
            "",
        ] {
            let e = check_service_principal(bad).unwrap_err();
            assert!(e.starts_with("not service/host"), "{bad}: {e}");
        }
    }

    #[test]
    fn learners_are_let_in_as_zookeeper_lets_them_in() {
        let hosts = vec!["127.0.0.1".to_string(), "zk2.example.com".to_string()];
        assert_eq!(
            authorize_learner("zkquorum/zk2.example.com@EXAMPLE.COM", "", &hosts).unwrap(),
            "zkquorum/zk2.example.com@EXAMPLE.COM"
        );
        assert!(authorize_learner(
            "zkquorum/127.0.0.1@EXAMPLE.COM",
            "zkquorum/127.0.0.1@EXAMPLE.COM",
            &hosts
        )
        .is_ok());
        let e = authorize_learner("zkquorum/elsewhere@EXAMPLE.COM", "", &hosts).unwrap_err();
        assert!(
            e.0.contains("elsewhere is not the host of a member")
                && e.0.contains("127.0.0.1, zk2.example.com"),
            "{e:?}"
        );
        let e = authorize_learner(
            "zkquorum/127.0.0.1@EXAMPLE.COM",
            "admin@EXAMPLE.COM",
            &hosts,
        )
        .unwrap_err();
        assert!(e.0.contains("asked to act as admin@EXAMPLE.COM"), "{e:?}");
        // Not NAME/HOST@REALM: no host to let in.
        for principal in [
            "learner@EXAMPLE.COM",
            "a/127.0.0.1/c@EXAMPLE.COM",
            "a/127.0.0.1",
            "a/127.0.0.1@",
        ] {
            let e = authorize_learner(principal, "", &hosts).unwrap_err();
            assert!(
                e.0.contains("a member's principal is NAME/HOST@REALM"),
                "{e:?}"
            );
        }
        assert_eq!(java_split("a/b@"), vec!["a", "b"]);
    }
}
