"""SASL GSSAPI (Kerberos) for clients, against an MIT KDC the test starts.

The realm (kdc.py) has the service principal zookeeper/localhost, whose key
the server reads from the keytab its JAAS `Server` section's
Krb5LoginModule names, and client principals with tickets in a cache
collection. kazoo (pure-sasl over pykerberos) authenticates with
`sasl_options={'mechanism': 'GSSAPI', ...}`, ZooKeeper 3.9.5's Java client
with its JAAS `Client` section's keytab; the principal becomes the
connection's `sasl` identity, shortened by zoo.cfg's
`kerberos.removeHostFromPrincipal` / `kerberos.removeRealmFromPrincipal`.

Runs against Stoa (standalone, or an ensemble's member under
STOA_TARGET=stoa-ensemble) and, under STOA_TARGET=zookeeper, against
Apache ZooKeeper 3.9.5 with the same JAAS file and keys, which is how the
expectations were checked.
"""

import os
import subprocess

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import ACL, Id, Permissions

import harness
import kdc
import servers

REALM = "STOA.TEST"
SERVICE = "zookeeper/localhost@" + REALM



@pytest.fixture(scope="module")
def realm():
    """A running KDC with the service's and the clients' principals; its
    variables (KRB5_CONFIG, KRB5CCNAME, ...) set for this process (kazoo)
    and the servers it starts."""
    why = kdc.unavailable_reason()
    if why is not None:
        pytest.skip(why)
    try:
        import kerberos  # noqa: F401  (pure-sasl's GSSAPI needs it)
    except ImportError:
        pytest.skip("the python kerberos package is missing (scripts/setup-test-env installs it)")
    with kdc.running(REALM) as k:
        k.add_principal("zookeeper/localhost")
        k.service_keytab = k.keytab(SERVICE)
        # Known to the KDC, so a client gets a ticket for it, but not in
        # the server's keytab.
        k.add_principal("zookeeper/127.0.0.1")
        for client in ("alice", "app/localhost", "app/localhost/extra"):
            k.kinit(k.add_principal(client))
        yield k


@pytest.fixture
def kerberos_server(request, realm, tmp_path):
    """start(principal=SERVICE, **zoo_cfg): a server (the target) whose
    JAAS Server section logs in as `principal` from the service keytab."""
    def start(principal=SERVICE, **cfg):
        jaas = tmp_path / "jaas.conf"
        jaas.write_text(kdc.jaas_section("Server", realm.service_keytab, principal))
        if harness.target() == "zookeeper":
            flags = servers.TEST_JVM_FLAGS + (
                "-Djava.security.auth.login.config=%s" % jaas,
                "-Djava.security.krb5.conf=%s" % realm.krb5_conf)
            extra = {"authProvider.1": "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"}
            extra.update(cfg)
            srv = harness.Server(kind="zookeeper", zookeeper=harness.zookeeper_395(),
                                 jvm_flags=flags, extra_cfg=extra)
        else:
            extra = {"jaasLoginConfig": str(jaas)}
            extra.update(cfg)
            srv = harness.Server(kind="stoa", extra_cfg=extra)
        request.addfinalizer(srv.cleanup)
        srv.start()
        return srv
    return start


def kerberos_client(srv, principal, host="localhost"):
    """kazoo with GSSAPI as `principal`, asking for a ticket to
    zookeeper/`host` (pure-sasl names the service after the host it dials)."""
    port = srv.hosts.rsplit(":", 1)[1]
    return KazooClient(hosts="%s:%s" % (host, port), timeout=10,
                       sasl_options={"mechanism": "GSSAPI", "service": "zookeeper",
                                     "principal": principal})


def identity(client, path):
    """The identity the server gave `client`, as an `auth` ACL records it."""
    client.create(path, b"", acl=[ACL(Permissions.ALL, Id("auth", ""))])
    acls, _ = client.get_acls(path)
    assert [a.id.scheme for a in acls] == ["sasl"], acls
    return acls[0].id.id


def refused(client):
    """Whether `client` failed to authenticate: kazoo gives up starting,
    or its session comes up and its first call says AuthFailed."""
    try:
        try:
            client.start(timeout=8)
        except (KazooTimeoutError, AuthFailedError):
            return True
        try:
            client.get("/")
        except AuthFailedError:
            return True
        return False
    finally:
        client.stop()
        client.close()


def test_a_kerberos_client_is_its_principal_in_the_sasl_scheme(kerberos_server):
    srv = kerberos_server()
    alice = "alice@" + REALM
    with harness.started_client(kerberos_client(srv, alice)) as c, \
            harness.started_client(KazooClient(hosts=srv.hosts, timeout=10)) as stranger:
        c.create("/alices", b"mine", acl=[ACL(Permissions.ALL, Id("sasl", alice))])
        assert c.get("/alices")[0] == b"mine"
        with pytest.raises(NoAuthError):
            stranger.get("/alices")
        assert identity(c, "/auth") == alice


@pytest.mark.parametrize("cfg, expected", [
    ({}, "app/localhost@" + REALM),
    ({"kerberos.removeHostFromPrincipal": "true"}, "app@" + REALM),
    ({"kerberos.removeRealmFromPrincipal": "true"}, "app/localhost"),
    ({"kerberos.removeHostFromPrincipal": "true",
      "kerberos.removeRealmFromPrincipal": "true"}, "app"),
])
def test_zoo_cfg_removes_the_host_and_the_realm_from_the_identity(kerberos_server, cfg, expected):
    srv = kerberos_server(**cfg)
    with harness.started_client(kerberos_client(srv, "app/localhost@" + REALM)) as c:
        assert identity(c, "/who") == expected
        c.create("/theirs", b"", acl=[ACL(Permissions.ALL, Id("sasl", expected))])
        assert c.get("/theirs")[0] == b""


def test_a_principal_of_three_components_is_refused(kerberos_server):
    # ZooKeeper's KerberosName takes name[/host]@REALM only.
    srv = kerberos_server()
    assert refused(kerberos_client(srv, "app/localhost/extra@" + REALM))


@pytest.mark.skipif(harness.target() != "stoa", reason="ZooKeeper serves GSSAPI alone then")
def test_with_digest_users_beside_kerberos_both_mechanisms_are_served(realm, request, tmp_path):
    jaas = tmp_path / "jaas.conf"
    jaas.write_text((kdc.jaas_section("Server", realm.service_keytab, SERVICE)).replace(
        "};", "org.apache.zookeeper.server.auth.DigestLoginModule required\n"
              "       user_bob=\"bobsecret\";\n};"))
    srv = harness.Server(kind="stoa", extra_cfg={"jaasLoginConfig": str(jaas)})
    request.addfinalizer(srv.cleanup)
    srv.start()
    bob = KazooClient(hosts=srv.hosts, timeout=10,
                      sasl_options={"mechanism": "DIGEST-MD5", "username": "bob",
                                    "password": "bobsecret"})
    with harness.started_client(bob), \
            harness.started_client(kerberos_client(srv, "alice@" + REALM)) as alice:
        assert identity(bob, "/bobs") == "bob"
        assert identity(alice, "/alices") == "alice@" + REALM


@pytest.mark.skipif(harness.target() != "stoa", reason="ZooKeeper needs a named principal")
def test_principal_star_takes_any_key_of_the_keytab(kerberos_server):
    srv = kerberos_server(principal="*")
    with harness.started_client(kerberos_client(srv, "alice@" + REALM)) as c:
        assert identity(c, "/any") == "alice@" + REALM


def test_a_ticket_for_a_principal_not_in_the_keytab_is_refused(kerberos_server):
    srv = kerberos_server()
    # Dialled as 127.0.0.1, pure-sasl asks the KDC for zookeeper/127.0.0.1,
    # which the server has no key for.
    assert refused(kerberos_client(srv, "alice@" + REALM, host="127.0.0.1"))
    if harness.target() == "stoa":
        assert "SASL authentication failed: GSS-API" in _logs(srv)
    # The right ticket still passes.
    with harness.started_client(kerberos_client(srv, "alice@" + REALM)) as c:
        c.get("/")


def test_a_forged_token_is_auth_failed_and_the_connection_closes(kerberos_server):
    srv = kerberos_server()
    raw = harness.RawClient(srv.hosts)
    try:
        # An initial context token's framing (RFC 2743 3.1) around nonsense.
        forged = b"\x60\x0d\x06\x09\x2a\x86\x48\x86\xf7\x12\x01\x02\x02\x01\x00"
        reply = raw.request(harness.OP.SASL, harness.W().buffer(forged).b)
        assert reply.err == harness.ERR.AUTH_FAILED
        harness.wait_until(lambda: raw.lost, timeout=10, what="the connection to close")
    finally:
        raw.close()


def test_enforce_auth_takes_gssapi_as_the_sasl_scheme(kerberos_server):
    srv = kerberos_server(**{"enforce.auth.enabled": "true", "enforce.auth.schemes": "sasl"})
    harness.assert_enforce_auth_refuses_a_plain_client(srv)
    with harness.started_client(kerberos_client(srv, "alice@" + REALM)) as c:
        c.create("/through", b"")


def test_the_java_client_authenticates_with_its_jaas_client_section(kerberos_server, realm,
                                                                    tmp_path):
    if not os.path.exists("/usr/bin/java"):
        pytest.skip("no java")
    jars = harness.zookeeper_395(cli=True)
    srv = kerberos_server(**{"enforce.auth.enabled": "true", "enforce.auth.schemes": "sasl"})
    alice = "alice@" + REALM
    client_jaas = tmp_path / "client.jaas"
    client_jaas.write_text(
        'Client {\n com.sun.security.auth.module.Krb5LoginModule required\n'
        ' useKeyTab=true\n keyTab="%s"\n storeKey=true\n useTicketCache=false\n'
        ' principal="%s";\n};\n' % (realm.keytab(alice), alice))
    port = srv.hosts.rsplit(":", 1)[1]
    # The ACL `auth` becomes the identity the server gave the connection.
    argv = ["/usr/bin/java", "-Djava.security.auth.login.config=%s" % client_jaas,
            "-Djava.security.krb5.conf=%s" % realm.krb5_conf,
            "-Dzookeeper.sasl.client.canonicalize.hostname=false",
            "-cp", ":".join(jars.classpath), "org.apache.zookeeper.ZooKeeperMain",
            "-server", "localhost:%s" % port, "create", "/from-java-kerberos", "hi", "auth::cdrwa"]
    done = subprocess.run(argv, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    output = (done.stdout + done.stderr).decode(errors="replace")
    assert "Created /from-java-kerberos" in output, output[-3000:]
    with harness.started_client(kerberos_client(srv, alice)) as c:
        assert c.get("/from-java-kerberos")[0] == b"hi"
        assert c.get_acls("/from-java-kerberos")[0] == [ACL(Permissions.ALL, Id("sasl", alice))]


@pytest.mark.skipif(harness.target() != "stoa", reason="Stoa's start-up message")
def test_a_principal_missing_from_the_keytab_stops_the_server_saying_so(realm, tmp_path):
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(kdc.jaas_section("Server", realm.service_keytab, "zookeeper/elsewhere@" + REALM))
    srv = harness.Server(kind="stoa", ensemble=False, extra_cfg={"jaasLoginConfig": str(jaas)})
    srv.launch()
    try:
        harness.wait_until(lambda: not srv.running(), timeout=20, what="the server to stop")
        tail = srv.log_tail(20)
        assert "zookeeper/elsewhere@%s from keyTab %s" % (REALM, realm.service_keytab) in tail, tail
    finally:
        srv.cleanup()


def _logs(srv):
    if hasattr(srv, "log_tails"):
        return srv.log_tails(200)
    return srv.log_tail(200)
