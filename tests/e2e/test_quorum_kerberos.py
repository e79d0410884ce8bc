"""Members authenticating each other with Kerberos (quorum SASL, GSSAPI),
against an MIT KDC the test starts (kdc.py).

Each member's JAAS `QuorumLearner` section logs in with a
Krb5LoginModule keytab and principal and dials the others with a ticket
for `quorum.auth.kerberos.servicePrincipal` (default zkquorum/localhost;
`zkquorum/_HOST` stands for the dialled member's host as its server.N line
writes it); its `QuorumServer` section's key accepts the others' tickets.
As ZooKeeper 3.9 does, a learner is let in only as a principal
NAME/HOST@REALM whose HOST is the host of one of the server.N lines, and a
member whose key is not the KDC's does not start.

Runs 3-member Stoa ensembles under STOA_TARGET=stoa and, where marked,
Apache ZooKeeper 3.9.5 ensembles with the same JAAS file, keys and zoo.cfg
under STOA_TARGET=zookeeper, which is how the expectations were checked.
Ensembles of its own, so STOA_TARGET=stoa-ensemble skips it.
"""

import os
import shutil
import tempfile
import time

import pytest
from kazoo.client import KazooClient

import harness
import kdc
import servers

REALM = "STOA.TEST"

pytestmark = pytest.mark.skipif(harness.ensemble_target(), reason="starts its own ensembles")


QUORUM_SASL = {"quorum.auth.enableSasl": "true", "quorum.auth.learnerRequireSasl": "true",
               "quorum.auth.serverRequireSasl": "true", "reconfigEnabled": "false"}


@pytest.fixture(scope="module")
def realm():
    """A running KDC with the members' principals, its variables set for
    the servers this module starts."""
    with kdc.running(REALM) as k:
        for name in ("zkquorum/localhost", "zkquorum/127.0.0.1", "learner/127.0.0.1",
                     "learner", "zkquorum/elsewhere", "stale"):
            k.add_principal(name)
        # A keytab with stale's key of the moment, which then changes.
        k.keytab("stale@" + REALM)
        k.kadmin("cpw -randkey stale")
        yield k


def jaas(realm, path, server, learner, learner_keytab=None):
    """A JAAS file with QuorumServer logging in as `server` and
    QuorumLearner as `learner` (from `learner_keytab`, else its own)."""
    server, learner = server + "@" + REALM, learner + "@" + REALM
    path.write_text(kdc.jaas_section("QuorumServer", realm.keytab(server), server)
                    + kdc.jaas_section("QuorumLearner", learner_keytab or realm.keytab(learner),
                                      learner))
    return str(path)


def ensemble(request, realm, jaas_path, **cfg):
    """A started 3-member ensemble of the target's kind, every member with
    `jaas_path` and QUORUM_SASL plus `cfg`."""
    kind = harness.target()
    base = tempfile.mkdtemp(prefix="stoa-e2e-quorum-kerberos-")
    extra = dict(QUORUM_SASL, **cfg)
    if kind == "zookeeper":
        extra.update(initLimit=10, syncLimit=5)
        flags = servers.TEST_JVM_FLAGS + (
            "-Djava.security.auth.login.config=%s" % jaas_path,
            "-Djava.security.krb5.conf=%s" % realm.krb5_conf)
        ens = servers.Ensemble("zookeeper", base, extra_cfg=extra,
                               zookeeper=harness.zookeeper_395(), jvm_flags=flags)
    else:
        extra["jaasLoginConfig"] = jaas_path
        ens = servers.Ensemble("stoa", base, extra_cfg=extra)

    def cleanup():
        try:
            ens.stop()
        finally:
            if not os.environ.get("STOA_E2E_KEEP"):
                shutil.rmtree(base, ignore_errors=True)
    request.addfinalizer(cleanup)
    try:
        ens.start(timeout=90)
    except RuntimeError as e:
        raise RuntimeError("%s\n%s" % (e, "\n".join(
            "---- m%d ----\n%s" % (i + 1, m.log_tail(40)) for i, m in enumerate(ens.members))))
    return ens


def write_then_read_elsewhere(writer, reader, path):
    with harness.started_client(KazooClient(hosts=writer.hosts, timeout=10)) as c:
        c.create(path, b"1")
    with harness.started_client(KazooClient(hosts=reader.hosts, timeout=10)) as c:
        c.sync(path)
        assert c.get(path)[0] == b"1"


def replicates_and_survives_a_leader_kill(ens, path):
    leader = ens.members[ens.leader() - 1]
    followers = [m for m in ens.members if m is not leader]
    write_then_read_elsewhere(followers[0], followers[1], path)
    leader.kill9()
    harness.wait_until(lambda: sorted(servers.srvr_mode(m) or "" for m in followers)
                       == ["follower", "leader"], timeout=60, interval=0.1,
                       what="a new leader among the two left")
    write_then_read_elsewhere(followers[1], followers[0], path + "-after")


def test_members_authenticate_with_kerberos_and_survive_a_leader_kill(request, realm, tmp_path):
    """The QuorumServer key of zkquorum/localhost (the default
    quorum.auth.kerberos.servicePrincipal), every member dialling as
    learner/127.0.0.1@REALM (127.0.0.1: the host of the server.N lines)."""
    path = jaas(realm, tmp_path / "quorum.conf", "zkquorum/localhost", "learner/127.0.0.1")
    ens = ensemble(request, realm, path)
    replicates_and_survives_a_leader_kill(ens, "/over-kerberos")
    if harness.target() == "stoa":
        log = ens.members[0].log_tail(400)
        assert "dialling members with Kerberos as learner/127.0.0.1@%s" % REALM in log, log


def test_host_in_the_service_principal_is_the_dialled_members_host(request, realm, tmp_path):
    """servicePrincipal zkquorum/_HOST: a member dialling 127.0.0.1 asks for
    zkquorum/127.0.0.1, the only key the members accept with; the learners'
    principal names 127.0.0.1, the host of every server.N line."""
    path = jaas(realm, tmp_path / "quorum.conf", "zkquorum/127.0.0.1", "zkquorum/127.0.0.1")
    ens = ensemble(request, realm, path,
                   **{"quorum.auth.kerberos.servicePrincipal": "zkquorum/_HOST"})
    replicates_and_survives_a_leader_kill(ens, "/host-substituted")


@pytest.mark.skipif(harness.target() != "stoa", reason="Stoa's log messages")
def test_a_member_the_others_do_not_accept_stays_out_and_both_sides_say_why(
        request, realm, tmp_path):
    """A learner principal naming no member's host (zkquorum/elsewhere), or
    no host at all (learner@REALM): the others refuse it (ZooKeeper's
    authorized hosts) and it stays out while they go on writing; back as
    learner/127.0.0.1@REALM it joins."""
    good = jaas(realm, tmp_path / "quorum.conf", "zkquorum/localhost", "learner/127.0.0.1")
    ens = ensemble(request, realm, good)
    leader = ens.members[ens.leader() - 1]
    member = [m for m in ens.members if m is not leader][0]
    other = [m for m in ens.members if m is not leader and m is not member][0]
    for learner, why in (("zkquorum/elsewhere", "elsewhere is not the host of a member"),
                         ("learner", "a member's principal is NAME/HOST@REALM")):
        member.stop()
        stranger = jaas(realm, tmp_path / ("%s.conf" % learner.replace("/", "_")),
                        "zkquorum/localhost", learner)
        harness.set_member_cfg(member, {"jaasLoginConfig": stranger})
        member.start(serving=False)
        time.sleep(3)  # several election timeouts: long enough to join, were it let in
        assert servers.srvr_mode(member) not in ("follower", "leader"), learner
        path = "/while-refused-" + learner.replace("/", "-")
        write_then_read_elsewhere(other, leader, path)
        refused = "%s@%s is not authorized: %s" % (learner, REALM, why)
        harness.wait_until(lambda: refused in leader.log_tail(400) + other.log_tail(400),
                           timeout=10, what="the others to log why they refuse %s" % learner)
        assert "refused this member's credentials (%s" % refused in member.log_tail(400)

    member.stop()
    harness.set_member_cfg(member, {"jaasLoginConfig": good})
    member.start(serving=False)
    harness.wait_until(lambda: servers.srvr_mode(member) == "follower", timeout=30,
                       interval=0.1, what="the member back as learner/127.0.0.1@REALM")
    with harness.started_client(KazooClient(hosts=member.hosts, timeout=10)) as c:
        c.sync("/while-refused-learner")
        assert c.exists("/while-refused-learner")


@pytest.mark.skipif(harness.target() != "stoa", reason="Stoa's start-up messages")
@pytest.mark.parametrize("section, principal, expected", [
    ("QuorumLearner", "stale", "a ticket for stale@%s with its key from keyTab" % REALM),
    ("QuorumServer", "stale", "the QuorumServer section: a ticket for stale@%s" % REALM),
    ("QuorumLearner", "nobody", "nobody@%s" % REALM),
])
def test_a_member_without_valid_keys_does_not_start_and_says_why(realm, tmp_path, section,
                                                                 principal, expected):
    """As ZooKeeper's JAAS login fails at start: a keytab whose key the KDC
    no longer has (stale), or that lacks the principal (nobody)."""
    keytab = realm.keytab("stale@" + REALM)
    sections = {"QuorumServer": ("zkquorum/localhost", realm.keytab("zkquorum/localhost@" + REALM)),
                "QuorumLearner": ("learner/127.0.0.1",
                                  realm.keytab("learner/127.0.0.1@" + REALM))}
    sections[section] = (principal, keytab)
    path = tmp_path / "quorum.conf"
    path.write_text("".join(kdc.jaas_section(name, tab, who + "@" + REALM)
                            for name, (who, tab) in sections.items()))
    srv = harness.Server(kind="stoa", ensemble=False, extra_cfg={
        **QUORUM_SASL, "jaasLoginConfig": str(path),
        "server.1": "127.0.0.1:%d:%d" % (harness.free_port(), harness.free_port()),
        "server.2": "127.0.0.1:%d:%d" % (harness.free_port(), harness.free_port())})
    servers.write_myid(srv.data_dir, 1)
    srv.launch()
    try:
        harness.wait_until(lambda: not srv.running(), timeout=20, what="the member to stop")
        tail = srv.log_tail(30)
        assert expected in tail and section in tail, tail
    finally:
        srv.cleanup()
