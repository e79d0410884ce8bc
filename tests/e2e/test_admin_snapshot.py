"""The AdminServer's `snapshot` and `restore` (ZooKeeper 3.9's commands).

Auth, switches and rate limits as ZooKeeper's; a snapshot streamed from one
server and posted to another (or back to the same) brings back every znode,
stat and ACL; the restore's zxid is above every zxid in the snapshot, so
clients never see zxids go back; an ensemble restores on every member,
whichever member took it; and a snapshot streamed from ZooKeeper 3.9.5's
own AdminServer restores into Stoa (a migration).
"""

import json
import os
import socket
import urllib.error
import urllib.request

import pytest
from kazoo.security import make_digest_acl

import harness
import servers
from harness import free_port

pytestmark = pytest.mark.skipif(harness.target() != "stoa" or harness.ensemble_target(),
                                reason="starts its own Stoa servers (and ZooKeeper 3.9.5)")

SUPER = "digest super:" + servers.SUPER_PASSWORD


def admin_cfg(port, interval_ms=0, **extra):
    cfg = {"admin.enableServer": "true", "admin.serverAddress": "127.0.0.1",
           "admin.serverPort": port, "admin.rateLimiterIntervalInMS": interval_ms}
    cfg.update(extra)
    return cfg


def call(port, path, method="GET", body=None, auth=SUPER):
    """(status, headers, body bytes)."""
    headers = {"Authorization": auth} if auth else {}
    if body is not None:
        headers["Content-Type"] = "application/octet-stream"
    request = urllib.request.Request("http://127.0.0.1:%d/commands/%s" % (port, path),
                                     method=method, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def snapshot(port, auth=SUPER):
    status, headers, body = call(port, "snapshot?streaming=true", auth=auth)
    assert status == 200, (status, body)
    assert int(headers["snapshot_size"]) == len(body)
    return int(headers["last_zxid"], 16), body


def restore(port, body, auth=SUPER):
    status, _, answer = call(port, "restore", method="POST", body=body, auth=auth)
    assert status == 200, (status, answer)
    answer = json.loads(answer)
    assert answer["command"] == "restore" and answer["error"] is None
    return answer["last_zxid"]


def everything(client, root="/"):
    """Every znode under root but /zookeeper: path -> (data, stat fields, ACLs).
    Retried across the reconnect a restore causes."""
    out = {}

    def visit(path):
        data, stat = client.retry(client.get, path)
        acls, _ = client.retry(client.get_acls, path)
        out[path] = (data, stat.czxid, stat.mzxid, stat.pzxid, stat.version, stat.cversion,
                     stat.aversion, stat.ephemeralOwner, stat.numChildren,
                     sorted((a.perms, a.id.scheme, a.id.id) for a in acls))
        for child in sorted(client.retry(client.get_children, path)):
            full = path.rstrip("/") + "/" + child
            if full != "/zookeeper":
                visit(full)

    visit(root)
    return out


def as_super(make_client, hosts):
    """A client that reads every znode (the super user)."""
    return make_client(hosts=hosts, auth_data=[("digest", "super:" + servers.SUPER_PASSWORD)])


def some_state(client):
    client.create("/app", b"root data")
    client.create("/app/null")
    client.create("/app/seq-", b"s", sequence=True)
    client.create("/app/seq-", b"s", sequence=True)
    client.create("/locked", b"secret", acl=[make_digest_acl("bob", "pw", all=True)])
    client.create("/app/e", b"ephemeral", ephemeral=True)
    client.set("/app", b"root data v2")


def start(request, extra):
    port = free_port()
    srv = harness.Server(kind="stoa", extra_cfg=admin_cfg(port, **extra))
    srv.start()
    request.addfinalizer(srv.cleanup)
    return srv, port


def test_auth_switches_and_rate_limit_are_zookeepers(request, make_client):
    srv, port = start(request, {})
    client = make_client(hosts=srv.hosts)
    status, _, body = call(port, "snap", auth=None)
    assert status == 401
    assert json.loads(body) == {"command": "snap", "error": "Auth info is missing for the command"}
    status, _, body = call(port, "snapshot", auth="kerberos x")
    assert (status, json.loads(body)["error"]) == (401, "Not authenticated")
    # The root is world:anyone with every right: any identity may.
    assert call(port, "snapshot", auth="digest anyone:pw")[0] == 200
    assert call(port, "snapshot", auth="ip")[0] == 200
    client.add_auth("digest", "super:" + servers.SUPER_PASSWORD)
    client.set_acls("/", [make_digest_acl("admin", "pw", all=True)])
    status, _, body = call(port, "snapshot", auth="digest other:pw")
    assert (status, json.loads(body)["error"]) == (403, "Not authorized")
    assert call(port, "snapshot", auth="digest admin:pw")[0] == 200
    assert call(port, "snapshot")[0] == 200  # super
    assert call(port, "restore", method="GET")[0] == 405
    status, _, body = call(port, "restore", method="POST", body=b"no snapshot at all")
    assert status == 500 and "not a snapshot" in json.loads(body)["error"]
    # A body too large to restore is refused from its head, before it is sent.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /commands/restore HTTP/1.1\r\nAuthorization: " + SUPER.encode()
                  + b"\r\nContent-Length: 1000000000\r\nExpect: 100-continue\r\n\r\n")
        assert s.recv(200).startswith(b"HTTP/1.1 413")

    limited, limited_port = start(request, {"admin.rateLimiterIntervalInMS": 300000,
                                            "admin.restore.enabled": "false"})
    assert call(limited_port, "snapshot?streaming=false")[0] == 200
    status, _, body = call(limited_port, "snapshot")
    assert status == 429 and json.loads(body) == {"command": "snapshot", "error": None}
    status, _, body = call(limited_port, "restore", method="POST", body=b"x")
    assert status == 503 and json.loads(body) == {"command": "restore", "error": None}


def test_a_snapshot_restores_every_znode_above_every_zxid_and_survives_a_restart(request,
                                                                                make_client):
    source, source_port = start(request, {})
    # Restarts raise the source's epoch above a fresh server's.
    for _ in range(3):
        source.restart()
    client = as_super(make_client, source.hosts)
    some_state(client)
    client.create("/app/null2", None)
    before = everything(client)
    zxid, body = snapshot(source_port)
    assert zxid >= max(v[2] for v in before.values())
    ephemeral_owner = before["/app/e"][7]

    target, target_port = start(request, {})
    other = as_super(make_client, target.hosts)
    other.create("/replaced", b"goes away")
    restored_at = restore(target_port, body)
    assert restored_at > zxid, "the restore's zxid is above the snapshot's"
    assert restored_at >> 32 > zxid >> 32
    after = everything(other)
    assert after == before
    assert after["/app/null2"][0] is None, "null data stays null"
    # The source's session came along: its ephemeral stays while it lives.
    assert after["/app/e"][7] == ephemeral_owner
    stat = other.retry(other.set, "/app", b"after")
    assert stat.mzxid > restored_at
    target.kill9()
    target.start()
    again = as_super(make_client, target.hosts)
    assert again.get("/app")[0] == b"after"
    assert not again.exists("/replaced")
    assert again.get("/locked")[1].czxid == before["/locked"][1]


def test_an_ensemble_restores_on_every_member_through_a_follower(request, make_client):
    source, source_port = start(request, {})
    some_state(make_client(hosts=source.hosts))
    before = everything(as_super(make_client, source.hosts))
    _, body = snapshot(source_port)

    ensemble = harness.Ensemble(kind="stoa", extra_cfg=admin_cfg(free_port()))
    request.addfinalizer(ensemble.cleanup)
    ensemble.start()
    follower = ensemble.client_member  # always a follower
    with open(follower.cfg_path) as f:
        port = [int(line.split("=", 1)[1]) for line in f
                if line.startswith("admin.serverPort=")][-1]
    make_client(hosts=ensemble.hosts).create("/replaced", b"")
    restored_at = restore(port, body)
    for member in ensemble.members:
        c = as_super(make_client, member.hosts)
        c.sync("/")
        harness.wait_until(lambda: c.retry(c.exists, "/replaced") is None,
                           what="restore applied")
        assert everything(c) == before, member
    c = make_client(hosts=ensemble.hosts)
    assert c.retry(c.set, "/app", b"x").mzxid > restored_at


def test_a_zookeeper_snapshot_from_its_admin_server_restores_into_stoa(request, make_client):
    if not os.path.exists("/usr/bin/java"):
        pytest.skip("no java")
    jars = harness.zookeeper_395(admin=True)
    zk_port = free_port()
    zk = harness.Server(kind="zookeeper", extra_cfg=admin_cfg(zk_port), zookeeper=jars)
    zk.start()
    request.addfinalizer(zk.cleanup)
    zk_client = as_super(make_client, zk.hosts)
    some_state(zk_client)
    zk_client.create("/app/null2", None)
    before = everything(zk_client)
    _, body = snapshot(zk_port)
    assert body[:4] == b"ZKSN"

    stoa, stoa_port = start(request, {})
    restore(stoa_port, body)
    client = as_super(make_client, stoa.hosts)
    harness.wait_until(lambda: client.retry(client.exists, "/app") is not None, what="restored")
    assert everything(client) == before
