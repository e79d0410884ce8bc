"""`stoa import`: a stopped ZooKeeper's data directory into Stoa.

ZooKeeper (Debian's 3.8 and 3.9.5 from Maven Central) is loaded through
kazoo with persistent, sequential, ephemeral, container and TTL nodes,
null and binary data, ACLs, deletes and multis, a snapshot taken midway
(a small snapCount) and more writes after it; every znode is read back
(data, stat, ACL) and ZooKeeper is stopped; `stoa import` converts its
directory; Stoa started on the result must show every znode the same.
"""

import os
import re
import subprocess
import time

import pytest
from kazoo.client import KazooClient
from kazoo.security import ACL, Id, Permissions

import harness

pytestmark = pytest.mark.skipif(harness.target() != "stoa" or harness.ensemble_target(),
                                reason="starts its own ZooKeeper and Stoa")

STAT_FIELDS = ("czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion",
               "ephemeralOwner", "dataLength", "numChildren", "pzxid")


def load(client):
    """A varied tree; writes past the first snapshot (snapCount is small)."""
    client.create("/app", b"root data")
    client.create("/app/null", None)
    client.create("/app/binary", bytes(range(256)))
    for i in range(30):
        client.create("/app/seq-", b"%d" % i, sequence=True)
    client.create("/locked", b"", acl=[ACL(Permissions.READ, Id("world", "anyone")),
                                        ACL(Permissions.ALL, Id("digest", "u:cGFzcw=="))])
    client.create("/app/eph", b"mine", ephemeral=True)
    client.create("/box", b"")
    client.create("/box/item", b"")
    client.set("/app", b"changed", version=0)
    client.delete("/app/seq-0000000003")
    t = client.transaction()
    t.create("/app/multi-a", b"a")
    t.set_data("/app", b"by multi")
    t.commit()
    client.set_acls("/app/binary", [ACL(Permissions.ALL, Id("world", "anyone"))])
    for i in range(40):
        client.create("/after/%d" % i if i else "/after", b"x" * i)


def snapshot_of(client, path="/"):
    """Every znode under `path`: data, stat fields and ACL."""
    out = {}
    stack = [path]
    while stack:
        p = stack.pop()
        data, stat = client.get(p)
        acl, _ = client.get_acls(p)
        out[p] = (data, {f: getattr(stat, f) for f in STAT_FIELDS},
                  sorted((a.perms, a.id.scheme, a.id.id) for a in acl))
        for child in client.get_children(p):
            stack.append(p.rstrip("/") + "/" + child)
    return out


def latest_snapshot_zxid(zk):
    names = os.listdir(os.path.join(zk.data_dir, "version-2"))
    zxids = [int(n.split(".", 1)[1], 16) for n in names if n.startswith("snapshot.")]
    return max(zxids, default=None)


def write_past_the_last_snapshot(client, zk):
    """ZooKeeper snapshots at a random count between snapCount/2 and
    snapCount, so its last snapshot can fall on the last write, leaving no
    log to replay. Write until a snapshot is on disk with three logged
    writes after it, so the import exercises both halves."""
    for i in range(60):
        last = client.create("/tail/%d" % i, b"", makepath=True)
        last_zxid = client.exists(last).czxid
        time.sleep(0.1)  # lets a snapshot begun at this write name its file
        snapped = latest_snapshot_zxid(zk)
        if snapped is not None and 0 < snapped <= last_zxid - 3:
            return
    raise AssertionError("ZooKeeper took no snapshot within 60 writes of snapCount 20")


def run_import(zk, target):
    argv = [harness.stoa_bin(), "import", "--zk-data-dir", zk.data_dir, "--data-dir", target]
    done = subprocess.run(argv, capture_output=True, timeout=120)
    return done.returncode, (done.stdout + done.stderr).decode()


@pytest.mark.parametrize("zookeeper", ["debian-3.8", "3.9.5"])
def test_every_znode_comes_across(zookeeper, tmp_path, request):
    jars = harness.zookeeper_395() if zookeeper == "3.9.5" else None
    if jars is None and not harness.servers.DEBIAN_ZOOKEEPER.present():
        pytest.skip("Debian's ZooKeeper is not installed")
    zk = harness.Server(kind="zookeeper", zookeeper=jars, extra_cfg={"snapCount": 20})
    zk.start()
    request.addfinalizer(zk.cleanup)
    client = KazooClient(hosts=zk.hosts, timeout=10)
    client.start(timeout=10)
    load(client)
    # What kazoo cannot send: a container and a TTL node.
    raw = harness.RawClient(zk.hosts)
    raw.create("/cont", mode=harness.CreateMode.CONTAINER)
    raw.create("/cont/child")
    raw.create("/ttl", b"t", mode=harness.CreateMode.PERSISTENT_WITH_TTL, ttl=600_000)
    raw.close()
    write_past_the_last_snapshot(client, zk)
    session = client.client_id[0]
    before = snapshot_of(client)
    # The session stays open (a clean close would delete /app/eph): the
    # server stops under it, as in a migration with clients still up.
    zk.stop()
    client.stop()
    client.close()
    target = str(tmp_path / "stoa-data")
    code, output = run_import(zk, target)
    assert code == 0, output
    # Both halves of a restore: a snapshot taken midway, and the log after it.
    replayed = re.search(r"snapshot\.[0-9a-f]+, then (\d+) logged transactions", output)
    assert replayed and int(replayed.group(1)) > 0, output
    stoa = harness.Server(kind="stoa", extra_cfg={"dataDir": target})
    stoa.start()
    request.addfinalizer(stoa.cleanup)
    with harness.started_client(KazooClient(hosts=stoa.hosts, timeout=10)) as check:
        after = snapshot_of(check)
        ephemeral = check.get("/app/eph")[1].ephemeralOwner
        # Stoa's own writes come after ZooKeeper's.
        check.create("/new", b"")
        assert check.get("/new")[1].czxid > max(v[1]["mzxid"] for v in before.values())
    assert ephemeral == session
    differences = [p for p in set(before) | set(after) if before.get(p) != after.get(p)]
    assert not differences, "\n".join(
        "%s:\n  ZooKeeper %r\n  Stoa      %r" % (p, before.get(p), after.get(p))
        for p in sorted(differences)[:10])


def test_a_damaged_directory_is_refused_and_nothing_is_written(tmp_path):
    zk_dir = tmp_path / "zk" / "version-2"
    zk_dir.mkdir(parents=True)
    (zk_dir / "snapshot.100").write_bytes(b"ZKSN" + b"\0" * 40)
    target = tmp_path / "stoa-data"

    class Fake:
        data_dir = str(tmp_path / "zk")
    code, output = run_import(Fake, str(target))
    assert code != 0 and "no snapshot" in output, output
    assert not os.path.exists(target / "snapshots") or not os.listdir(target / "snapshots")
