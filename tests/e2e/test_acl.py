"""ACLs and authentication as ZooKeeper enforces them."""

import pytest
from kazoo.exceptions import (AuthFailedError, BadVersionError, InvalidACLError,
                              NoAuthError)
from kazoo.security import ACL, Id, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, Permissions, make_digest_acl

import harness as h
from harness import ERR, ZkError


def test_digest_acl_enforced(server, zk, make_client):
    """A digest-protected node refuses read/write/create/setACL to others (and exists from 3.9 on)."""
    owner = make_client()
    owner.add_auth("digest", "alice:secret")
    acl = [make_digest_acl("alice", "secret", all=True)]
    owner.create("/d", b"x", acl=acl)
    assert owner.get("/d")[0] == b"x"
    if server.version() >= (3, 9, 0):
        with pytest.raises(NoAuthError):          # 3.9 checks READ on exists
            zk.exists("/d")
    else:
        assert zk.exists("/d") is not None        # 3.8 does not

    with pytest.raises(NoAuthError):
        zk.get("/d")
    with pytest.raises(NoAuthError):
        zk.get_children("/d")
    with pytest.raises(NoAuthError):
        zk.set("/d", b"y")
    with pytest.raises(NoAuthError):
        zk.create("/d/child", b"")
    with pytest.raises(NoAuthError):
        zk.set_acls("/d", OPEN_ACL_UNSAFE)
    other = make_client()
    other.add_auth("digest", "alice:wrong")
    with pytest.raises(NoAuthError):
        other.get("/d")


def test_delete_checks_parent_acl(zk, make_client):
    """delete needs DELETE on the parent: a protected leaf under an open parent can be deleted by anyone."""
    owner = make_client()
    owner.add_auth("digest", "bob:pw")
    owner.create("/leaf", b"", acl=[make_digest_acl("bob", "pw", all=True)])
    zk.delete("/leaf")
    owner.create("/locked", b"", acl=[make_digest_acl("bob", "pw", all=True)])
    owner.create("/locked/kid", b"")
    with pytest.raises(NoAuthError):
        zk.delete("/locked/kid")
    owner.delete("/locked/kid")


def test_get_acl_permission(zk, make_client):
    """getACL on a node without READ/ADMIN for the caller is NoAuth; with them it returns ACL and stat."""
    owner = make_client()
    owner.add_auth("digest", "carol:pw")
    acl = [make_digest_acl("carol", "pw", all=True)]
    owner.create("/ga", b"", acl=acl)
    acls, st = owner.get_acls("/ga")
    assert acls == acl and st.aversion == 0
    with pytest.raises(NoAuthError):
        zk.get_acls("/ga")


def test_per_permission_bits(zk, make_client):
    """Each permission bit gates its own operation."""
    owner = make_client()
    owner.add_auth("digest", "dan:pw")
    me = make_digest_acl("dan", "pw", all=True)
    # world may read and create only
    owner.create("/perm", b"v", acl=[me, ACL(Permissions.READ | Permissions.CREATE, Id("world", "anyone"))])
    assert zk.get("/perm")[0] == b"v"
    zk.create("/perm/c", b"")
    with pytest.raises(NoAuthError):
        zk.set("/perm", b"w")
    with pytest.raises(NoAuthError):
        zk.delete("/perm/c")
    with pytest.raises(NoAuthError):
        zk.set_acls("/perm", OPEN_ACL_UNSAFE)
    # world read-only node
    zk.create("/ro", b"r", acl=READ_ACL_UNSAFE)
    assert zk.get("/ro")[0] == b"r"
    with pytest.raises(NoAuthError):
        zk.set("/ro", b"w")
    with pytest.raises(NoAuthError):
        zk.create("/ro/c", b"")


def test_ip_acl(zk):
    """ip ACLs match the client's address (127.0.0.1 here), also as a CIDR range."""
    zk.create("/ip-ok", b"1", acl=[ACL(Permissions.ALL, Id("ip", "127.0.0.1"))])
    assert zk.get("/ip-ok")[0] == b"1"
    zk.create("/ip-net", b"2", acl=[ACL(Permissions.ALL, Id("ip", "127.0.0.0/8"))])
    assert zk.get("/ip-net")[0] == b"2"
    zk.create("/ip-no", b"3", acl=[ACL(Permissions.ALL, Id("ip", "10.1.2.3"))])
    with pytest.raises(NoAuthError):
        zk.get("/ip-no")


def test_auth_scheme_acl(make_client, zk):
    """The 'auth' scheme expands to the creator's digest identities; without any it is InvalidACL."""
    with pytest.raises(InvalidACLError):
        zk.create("/auth-none", b"", acl=[ACL(Permissions.ALL, Id("auth", ""))])
    owner = make_client()
    owner.add_auth("digest", "erin:pw")
    owner.create("/auth-yes", b"", acl=[ACL(Permissions.ALL, Id("auth", ""))])
    acls, _ = owner.get_acls("/auth-yes")
    assert acls == [make_digest_acl("erin", "pw", all=True)]
    with pytest.raises(NoAuthError):
        zk.get("/auth-yes")


def test_empty_acl_raw(raw):
    """An empty ACL list is InvalidACL (sent raw: kazoo substitutes its default ACL)."""
    with pytest.raises(ZkError) as ei:
        raw.create("/empty-acl", acl=[])
    assert ei.value.code == ERR.INVALID_ACL
    raw.create("/e2")
    with pytest.raises(ZkError) as ei:
        raw.set_acl("/e2", [])
    assert ei.value.code == ERR.INVALID_ACL


@pytest.mark.parametrize("acl", [
    [ACL(Permissions.ALL, Id("digest", "no-colon"))],
    [ACL(Permissions.ALL, Id("nosuchscheme", "x"))],
    [ACL(Permissions.ALL, Id("ip", "not-an-ip"))],
    [ACL(Permissions.ALL, Id("world", "someone"))],
])
def test_invalid_acl(zk, acl):
    """Malformed or empty ACLs are refused with InvalidACLError on create and setACL."""
    with pytest.raises(InvalidACLError):
        zk.create("/bad-acl", b"", acl=acl)
    zk.create("/good", b"")
    with pytest.raises(InvalidACLError):
        zk.set_acls("/good", acl)


def test_set_acls_versions(zk):
    """setACL bumps aversion (not version) and honours the expected aversion."""
    zk.create("/av", b"")
    st = zk.set_acls("/av", READ_ACL_UNSAFE + [ACL(Permissions.ADMIN, Id("world", "anyone"))], version=0)
    assert st.aversion == 1 and st.version == 0
    with pytest.raises(BadVersionError):
        zk.set_acls("/av", OPEN_ACL_UNSAFE, version=0)
    st2 = zk.set_acls("/av", OPEN_ACL_UNSAFE, version=-1)
    assert st2.aversion == 2
    acls, st3 = zk.get_acls("/av")
    assert acls == OPEN_ACL_UNSAFE and st3.aversion == 2


def test_duplicate_acl_entries_collapsed(zk):
    """Duplicate ACL entries are stored once."""
    zk.create("/dup", b"", acl=OPEN_ACL_UNSAFE + OPEN_ACL_UNSAFE)
    assert zk.get_acls("/dup")[0] == OPEN_ACL_UNSAFE


def test_super_digest_bypasses_acls(zk, make_client):
    """An authenticated super user (superDigest) may do anything regardless of ACLs."""
    owner = make_client()
    owner.add_auth("digest", "frank:pw")
    owner.create("/sec", b"s", acl=[make_digest_acl("frank", "pw", all=True)])
    owner.create("/sec/kid", b"")
    root = make_client()
    root.add_auth("digest", "super:" + h.SUPER_PASSWORD)
    assert root.get("/sec")[0] == b"s"
    root.set("/sec", b"t")
    root.delete("/sec/kid")
    root.set_acls("/sec", OPEN_ACL_UNSAFE)
    assert zk.get("/sec")[0] == b"t"


def test_bad_auth_scheme_fails_session(make_client):
    """add_auth with an unknown scheme fails with AuthFailedError."""
    c = make_client()
    with pytest.raises(AuthFailedError):
        c.add_auth("nosuchscheme", "x")


def test_digest_auth_takes_credentials_without_a_colon(make_client):
    """addauth digest with no colon succeeds, as in ZooKeeper: the id is the whole text and its hash."""
    owner = make_client()
    owner.add_auth("digest", "blah")
    acl = [ACL(Permissions.ALL, Id("digest", "blah:W/H9kn37hnlJai5s8Ay+UMHIcUU="))]
    owner.create("/nocolon", b"mine", acl=acl)
    assert owner.get("/nocolon")[0] == b"mine"
    stranger = make_client()
    with pytest.raises(NoAuthError):
        stranger.get("/nocolon")
    stranger.add_auth("digest", "blah")
    assert stranger.get("/nocolon")[0] == b"mine"


def test_ip_auth_is_accepted(make_client):
    """addauth ip succeeds (ZooKeeper adds the connection's own address) and the session goes on."""
    c = make_client()
    c.add_auth("ip", "anything")
    assert c.exists("/") is not None


def test_whoami(raw):
    """whoAmI lists the connection's identities: ip, then digest ones added by auth."""
    assert raw.whoami() == [("ip", "127.0.0.1")]
    raw.add_auth("digest", b"gina:pw")
    assert sorted(raw.whoami()) == sorted([("ip", "127.0.0.1"), ("digest", "gina")])


def test_acl_on_create_multi(zk, make_client):
    """ACL checks apply inside a multi and abort it."""
    owner = make_client()
    owner.add_auth("digest", "hank:pw")
    owner.create("/mp", b"", acl=[make_digest_acl("hank", "pw", all=True)])
    tx = zk.transaction()
    tx.create("/free", b"")
    tx.create("/mp/x", b"")
    res = tx.commit()
    assert isinstance(res[1], NoAuthError)
    assert zk.exists("/free") is None
