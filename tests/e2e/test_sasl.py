"""SASL DIGEST-MD5 with the JAAS file ZooKeeper users already have.

The server reads the `Server` section of a JAAS file (`jaasLoginConfig`);
kazoo (through pure-sasl) and ZooKeeper 3.9.5's own Java client (its JAAS
`Client` section) authenticate against it; the `sasl` ACL scheme names
the user; `enforce.auth.enabled` closes a connection that asks for
anything before authenticating.
"""

import os
import subprocess
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import ACL, Id, Permissions

import harness

pytestmark = pytest.mark.skipif(harness.target() != "stoa" or harness.ensemble_target(),
                                reason="starts its own Stoa servers")

JAAS = """
Server {
       org.apache.zookeeper.server.auth.DigestLoginModule required
       user_super="adminsecret"
       user_bob="bobsecret";
};
"""


@pytest.fixture
def sasl_server(request, tmp_path):
    def start(**cfg):
        jaas = tmp_path / "jaas.conf"
        jaas.write_text(JAAS)
        extra = {"jaasLoginConfig": str(jaas)}
        extra.update(cfg)
        srv = harness.Server(kind="stoa", extra_cfg=extra)
        srv.start()
        request.addfinalizer(srv.cleanup)
        return srv
    return start


def sasl_client(srv, user="bob", password="bobsecret"):
    return KazooClient(hosts=srv.hosts, timeout=10,
                       sasl_options={"mechanism": "DIGEST-MD5", "username": user,
                                     "password": password})


def test_digest_md5_authenticates_and_the_sasl_scheme_names_the_user(sasl_server):
    srv = sasl_server()
    bob = sasl_client(srv)
    bob.start(timeout=10)
    stranger = KazooClient(hosts=srv.hosts, timeout=10)
    stranger.start(timeout=10)
    try:
        bob.create("/bobs", b"mine", acl=[ACL(Permissions.ALL, Id("sasl", "bob"))])
        assert bob.get("/bobs")[0] == b"mine"
        with pytest.raises(NoAuthError):
            stranger.get("/bobs")
        bob.create("/auth", b"", acl=[ACL(Permissions.ALL, Id("auth", ""))])
        assert bob.get_acls("/auth")[0] == [ACL(Permissions.ALL, Id("sasl", "bob"))]
    finally:
        for c in (bob, stranger):
            c.stop()
            c.close()


def test_a_wrong_password_fails_authentication(sasl_server):
    srv = sasl_server()
    guess = sasl_client(srv, password="guess")
    try:
        # kazoo may report its session before the exchange fails (then
        # calls fail), or give up starting.
        try:
            guess.start(timeout=5)
        except KazooTimeoutError:
            pass
        else:
            with pytest.raises(AuthFailedError):
                guess.get("/")
    finally:
        guess.stop()
        guess.close()
    assert "SASL authentication failed: wrong password" in srv.log_tail(200)


def test_enforce_auth_closes_a_connection_that_did_not_authenticate(sasl_server):
    srv = sasl_server(**{"enforce.auth.enabled": "true", "enforce.auth.schemes": "sasl"})
    harness.assert_enforce_auth_refuses_a_plain_client(srv)
    assert "enforce.auth.enabled" in srv.log_tail(200)
    with harness.started_client(sasl_client(srv)) as bob:
        bob.create("/through", b"")


def test_the_java_client_authenticates_with_its_jaas_client_section(sasl_server, tmp_path):
    if not os.path.exists("/usr/bin/java"):
        pytest.skip("no java")
    jars = harness.zookeeper_395(cli=True)
    srv = sasl_server(**{"enforce.auth.enabled": "true", "enforce.auth.schemes": "sasl"})
    client_jaas = tmp_path / "client.jaas"
    client_jaas.write_text(
        'Client {\n org.apache.zookeeper.server.auth.DigestLoginModule required\n'
        ' username="bob"\n password="bobsecret";\n};\n')
    # ZooKeeper 3.9 turns DIGEST-MD5 off in its FIPS mode (on by default).
    argv = ["/usr/bin/java", "-Dzookeeper.fips-mode=false",
            "-Djava.security.auth.login.config=%s" % client_jaas,
            "-cp", ":".join(jars.classpath), "org.apache.zookeeper.ZooKeeperMain",
            "-server", srv.hosts, "create", "/from-java-sasl", "hi"]
    done = subprocess.run(argv, capture_output=True, timeout=120)
    output = (done.stdout + done.stderr).decode(errors="replace")
    assert "Created /from-java-sasl" in output, output[-3000:]
    with harness.started_client(sasl_client(srv)) as bob:
        assert bob.get("/from-java-sasl")[0] == b"hi"


QUORUM_JAAS = """
QuorumServer {
       org.apache.zookeeper.server.auth.DigestLoginModule required
       user_member="memberSecret";
};
QuorumLearner {
       org.apache.zookeeper.server.auth.DigestLoginModule required
       username="member"
       password="%s";
};
"""


def test_members_authenticate_to_each_other_and_one_that_cannot_stays_out(request, tmp_path):
    """quorum.auth.*: each member dials the others with its JAAS QuorumLearner credentials and checks theirs
    against its QuorumServer section (DIGEST-MD5, both ways). The ensemble elects and replicates; a member with
    the wrong password, or one that does not authenticate at all, never joins while the others go on writing."""
    jaas = tmp_path / "quorum.conf"
    jaas.write_text(QUORUM_JAAS % "memberSecret")
    sasl = {"jaasLoginConfig": str(jaas), "reconfigEnabled": "false",
            "quorum.auth.enableSasl": "true", "quorum.auth.learnerRequireSasl": "true",
            "quorum.auth.serverRequireSasl": "true"}
    ens = harness.Ensemble(kind="stoa", extra_cfg=sasl)
    request.addfinalizer(ens.cleanup)
    _, other = harness.ensemble_replicates(ens, "/over-sasl")

    wrong = tmp_path / "wrong.conf"
    wrong.write_text(QUORUM_JAAS % "guess")
    for change, what in (({"jaasLoginConfig": str(wrong)}, "a wrong password"),
                         ({"jaasLoginConfig": None, "quorum.auth.enableSasl": None,
                           "quorum.auth.learnerRequireSasl": None,
                           "quorum.auth.serverRequireSasl": None}, "no SASL")):
        ens.client_member.stop()
        harness.set_member_cfg(ens.client_member, change)
        ens.client_member.start(serving=False)
        time.sleep(3)  # several election timeouts: long enough to join, were it let in
        assert harness.srvr_mode(ens.client_member) not in ("follower", "leader"), what
        with harness.started_client(KazooClient(hosts=other.hosts, timeout=10)) as c2:
            c2.create("/while-refused-" + what.replace(" ", "-"), b"")
        harness.set_member_cfg(ens.client_member, {"jaasLoginConfig": str(jaas), **{
            k: v for k, v in sasl.items() if k.startswith("quorum.")}})
    # The members it dialled refused it (the client member may have led before it was restarted).
    assert any("sasl" in m.log_tail(400).lower() for m in ens.members if m is not ens.client_member)
    # Back with the right password, it joins and catches up.
    ens.client_member.stop()
    ens.client_member.start(serving=False)
    harness.wait_until(lambda: harness.srvr_mode(ens.client_member) == "follower", timeout=30,
                       interval=0.1, what="the member back with the right password")


def test_quorum_sasl_settings_are_checked_against_each_other_as_zookeeper_does(tmp_path):
    jaas = tmp_path / "quorum.conf"
    jaas.write_text(QUORUM_JAAS % "memberSecret")
    for cfg, expected in (({"quorum.auth.serverRequireSasl": "true"}, "quorum.auth.enableSasl is disabled"),
                          ({"quorum.auth.enableSasl": "true", "quorum.auth.serverRequireSasl": "true"},
                           "quorum.auth.learnerRequireSasl is disabled"),
                          ({"quorum.auth.enableSasl": "true"}, "needs jaasLoginConfig")):
        srv = harness.Server(kind="stoa", extra_cfg={
            **cfg, "server.1": "127.0.0.1:%d:%d" % (harness.free_port(), harness.free_port()),
            "server.2": "127.0.0.1:%d:%d" % (harness.free_port(), harness.free_port())})
        harness.servers.write_myid(srv.data_dir, 1)
        srv.launch()
        try:
            harness.wait_until(lambda: not srv.running(), timeout=20, what="the server to stop")
            assert expected in srv.log_tail(50), cfg
        finally:
            srv.cleanup()
