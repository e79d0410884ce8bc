"""Membership changes through ZooKeeper's reconfig, driven by stock kazoo:
/zookeeper/config, growing an ensemble with a new participant and an
observer, removing a follower and the leader, refusals with ZooKeeper's
error codes, the membership surviving restarts, and a stopping leader handing
leadership over. Real server processes on 127.0.0.1."""

import concurrent.futures
import contextlib
import re
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadArgumentsError,
    BadVersionError,
    NoAuthError,
    UnimplementedError,
    ZookeeperError,
)

import harness as h

pytestmark = pytest.mark.skipif(h.target() != "stoa", reason="stoa-only: ensemble harness")

RECONFIG = {"reconfigEnabled": "true"}


class Member:
    """One server of a test ensemble: its process and its zoo.cfg line."""

    def __init__(self, sid, line, server):
        self.sid, self.line, self.server = sid, line, server

    @property
    def spec(self):
        """The server.N=... item a reconfig names it by (with client port)."""
        return "server.%d=%s;127.0.0.1:%d" % (self.sid, self.line, self.server.port)


def new_member(sid, lines, role="participant", extra=None):
    """A server `sid` whose zoo.cfg has `lines` plus its own line."""
    line = "127.0.0.1:%d:%d:%s" % (h.free_port(), h.free_port(), role)
    cfg = dict(lines, **{"server.%d" % sid: line}, **RECONFIG, **(extra or {}))
    if role == "observer":
        cfg["peerType"] = "observer"
    server = h.Server(kind="stoa", tick_time=200, extra_cfg=cfg)
    with open(server.data_dir + "/myid", "w") as f:
        f.write("%d\n" % sid)
    return Member(sid, line, server)


def start_ensemble(n, extra=None):
    lines = {"server.%d" % i: "127.0.0.1:%d:%d:participant" % (h.free_port(), h.free_port())
             for i in range(1, n + 1)}
    members = []
    for i in range(1, n + 1):
        cfg = dict(lines, **RECONFIG, **(extra or {}))
        server = h.Server(kind="stoa", tick_time=200, extra_cfg=cfg)
        with open(server.data_dir + "/myid", "w") as f:
            f.write("%d\n" % i)
        members.append(Member(i, lines["server.%d" % i], server))
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        list(pool.map(lambda m: m.server.start(timeout=60), members))
    return members, lines


@pytest.fixture
def trio():
    members, lines = start_ensemble(3)
    extra = []
    yield members, lines, extra
    for m in members + extra:
        m.server.cleanup()


def client(member, admin=True, read_only=False):
    auth = [("digest", "super:" + h.SUPER_PASSWORD)] if admin else None
    c = KazooClient(hosts=member.server.hosts, timeout=10, auth_data=auth,
                    read_only=read_only, connection_retry={"max_tries": 20, "delay": 0.1})
    c.start(timeout=30)
    return c


@contextlib.contextmanager
def connected(member, admin=True):
    c = client(member, admin=admin)
    try:
        yield c
    finally:
        c.stop()
        c.close()


def leader_and_others(members):
    h.wait_until(lambda: leader_of(members) is not None, timeout=30, what="a leader")
    leader = leader_of(members)
    return leader, [m for m in members if m is not leader]


def mode(member):
    try:
        text = member.server.four_letter("srvr")
    except OSError:
        return None
    if "not currently serving" in text:
        return "not serving"
    m = re.search(r"^Mode: (\S+)$", text, re.M)
    return m.group(1) if m else None


def leader_of(members):
    found = [m for m in members if m.server.running() and mode(m) == "leader"]
    return found[0] if len(found) == 1 else None


def config_of(data):
    """(participants, observers, version) from /zookeeper/config text."""
    text = data.decode()
    roles = {}
    for sid, role in re.findall(r"^server\.(\d+)=[^:]+:\d+:\d+:(\w+)", text, re.M):
        roles[int(sid)] = role
    version = re.search(r"^version=([0-9a-f]+)$", text, re.M)
    assert version, text
    return (sorted(s for s, r in roles.items() if r == "participant"),
            sorted(s for s, r in roles.items() if r == "observer"),
            int(version.group(1), 16))


def digests_agree(members):
    hashes = {m.sid: m.server.four_letter("hash").strip() for m in members}
    return len(set(hashes.values())) == 1


def test_config_node_lists_the_ensemble_on_every_member(trio):
    members, _, _ = trio
    h.wait_until(lambda: leader_of(members) is not None, timeout=30, what="a leader")
    seen = []
    for m in members:
        c = client(m, admin=False)
        try:
            h.wait_until(lambda: c.get("/zookeeper/config")[0] != b"", timeout=20,
                         what="the leader recorded the membership")
            data, stat = c.get("/zookeeper/config")
            seen.append(data)
            assert config_of(data)[:2] == ([1, 2, 3], [])
            for other in members:
                # Their zoo.cfg lines (client ports are in clientPort keys).
                assert "server.%d=%s\n" % (other.sid, other.line) in data.decode(), data
            assert stat.version >= 1
        finally:
            c.stop()
            c.close()
    assert len(set(seen)) == 1, seen
    assert "server.2=" in members[0].server.four_letter("conf")


def test_refusals_carry_zookeepers_error_codes(trio):
    members, lines, _ = trio
    h.wait_until(lambda: leader_of(members) is not None, timeout=30, what="a leader")
    admin, anyone = client(members[0]), client(members[1], admin=False)
    try:
        h.wait_until(lambda: admin.get("/zookeeper/config")[0] != b"", timeout=20,
                     what="the membership recorded")
        with pytest.raises(NoAuthError):
            anyone.reconfig(joining=None, leaving="3", new_members=None)
        with pytest.raises(BadVersionError):
            admin.reconfig(joining=None, leaving="3", new_members=None, from_config=12345)
        with pytest.raises(BadArgumentsError):
            admin.reconfig(joining=None, leaving="9", new_members=None)
        with pytest.raises(BadArgumentsError):
            admin.reconfig(joining=None, leaving="3,9", new_members=None)
        with pytest.raises(BadArgumentsError):
            admin.reconfig(joining="server.7=not-a-spec", leaving=None, new_members=None)
        # With one member down, a fourth participant that is not running
        # would leave the new configuration with 2 of 4 in touch: refused
        # (once the leader has noticed the silence).
        members[2].server.kill9()
        time.sleep(2.0)
        ghost = "server.9=127.0.0.1:%d:%d:participant" % (h.free_port(), h.free_port())
        with pytest.raises(ZookeeperError) as refused:
            admin.reconfig(joining=ghost, leaving=None, new_members=None)
        assert type(refused.value).__name__ == "NewConfigNoQuorumError"
        # Nothing changed.
        assert config_of(admin.get("/zookeeper/config")[0])[:2] == ([1, 2, 3], [])
    finally:
        for c in (admin, anyone):
            c.stop()
            c.close()


def test_reconfig_is_disabled_unless_enabled_and_unimplemented_standalone(tmp_path):
    plain = h.Server(kind="stoa", extra_cfg={}, ensemble=False)
    enabled = h.Server(kind="stoa", extra_cfg=dict(RECONFIG), ensemble=False)
    try:
        for server, expected in ((plain, "ReconfigDisabled"), (enabled, UnimplementedError)):
            server.start()
            c = KazooClient(hosts=server.hosts, timeout=10,
                            auth_data=[("digest", "super:" + h.SUPER_PASSWORD)])
            c.start(timeout=30)
            try:
                with pytest.raises(ZookeeperError) as refused:
                    c.reconfig(joining=None, leaving="2", new_members=None)
                if isinstance(expected, str):
                    # kazoo has no class for -123; it keeps the code.
                    assert "-123" in str(refused.value) or expected in type(refused.value).__name__
                else:
                    assert isinstance(refused.value, expected)
            finally:
                c.stop()
                c.close()
    finally:
        plain.cleanup()
        enabled.cleanup()


def test_grow_with_a_participant_and_an_observer_then_remove_a_follower(trio):
    members, lines, extra = trio
    h.wait_until(lambda: leader_of(members) is not None, timeout=30, what="a leader")
    admin = client(members[0])
    try:
        admin.create("/before", b"v1")
        fourth = new_member(4, lines)
        extra.append(fourth)
        fourth.server.start(timeout=60, serving=False)
        # Not a member yet: it serves nobody.
        assert mode(fourth) == "not serving"
        data, stat = admin.reconfig(joining=fourth.spec, leaving=None, new_members=None)
        participants, observers, version = config_of(data)
        assert (participants, observers) == ([1, 2, 3, 4], [])
        assert version == stat.mzxid, (hex(version), stat)
        h.wait_until(lambda: mode(fourth) == "follower", timeout=30, what="server 4 following")
        c4 = client(fourth, admin=False)
        try:
            h.wait_until(lambda: c4.exists("/before") is not None, timeout=20,
                         what="server 4 caught up")
            assert c4.get("/before")[0] == b"v1"
            c4.create("/from-4", b"x")
            # Another session's write: admin's member may not have applied
            # it yet (ZooKeeper orders each session, not across them).
            admin.sync("/")
            assert admin.get("/from-4")[0] == b"x"
            # An observer joins too: it serves reads and forwards writes.
            lines4 = dict(lines, **{"server.4": fourth.line})
            obs = new_member(5, lines4, role="observer")
            extra.append(obs)
            obs.server.start(timeout=60, serving=False)
            data, _ = admin.reconfig(joining=obs.spec, leaving=None, new_members=None,
                                     from_config=version)
            participants, observers, version = config_of(data)
            assert (participants, observers) == ([1, 2, 3, 4], [5])
            h.wait_until(lambda: mode(obs) == "observer", timeout=30, what="server 5 observing")
            c5 = client(obs, admin=False)
            try:
                c5.create("/from-observer", b"o")
                c5.sync("/")
                assert c5.get("/from-4")[0] == b"x"
            finally:
                c5.stop()
                c5.close()
            # Four participants tolerate one failure: kill a follower and
            # write on, then remove it from the ensemble.
            leader = leader_of(members + [fourth])
            victim = next(m for m in members[1:] if m is not leader)
            victim.server.kill9()
            c4.create("/one-down", b"y")
            data, _ = admin.reconfig(joining=None, leaving=str(victim.sid), new_members=None)
            participants, _, _ = config_of(data)
            assert victim.sid not in participants and len(participants) == 3
            alive = [m for m in members + [fourth, obs] if m is not victim]
            h.wait_until(lambda: digests_agree(alive), timeout=30, what="equal trees")
            # The membership outlives a restart of the new member (its
            # zoo.cfg still lists the original three plus itself).
            c4.stop()
            c4.close()
            fourth.server.stop()
            fourth.server.start(timeout=60)
            h.wait_until(lambda: mode(fourth) in ("follower", "leader"), timeout=30,
                         what="server 4 back")
            c4 = client(fourth, admin=False)
            assert config_of(c4.get("/zookeeper/config")[0])[:2] == (participants, [5])
            c4.create("/after-restart", b"z")
            h.wait_until(lambda: digests_agree(alive), timeout=30, what="equal trees")
        finally:
            c4.stop()
            c4.close()
    finally:
        admin.stop()
        admin.close()


def test_one_reconfig_replaces_the_leader_with_a_newcomer(trio):
    """Two servers in one reconfig (as ZooKeeper allows): a newcomer joins as a
    participant and the leader leaves; the client gets the final configuration,
    the leader hands over, and nothing written before or after is lost."""
    members, lines, extra = trio
    leader, rest = leader_and_others(members)
    fourth = new_member(4, lines)
    extra.append(fourth)
    fourth.server.start(timeout=60, serving=False)
    with connected(rest[0]) as admin:
        admin.create("/before", b"1")
        _, before = admin.get("/zookeeper/config")
        data, stat = admin.reconfig(joining=fourth.spec, leaving=str(leader.sid),
                                    new_members=None)
        participants, observers, version = config_of(data)
        expected = sorted([m.sid for m in rest] + [4])
        assert (participants, observers) == (expected, []), data
        assert version == stat.mzxid
        # One configuration change, not one per server.
        assert stat.version == before.version + 1, (before, stat)
        now = rest + [fourth]
        h.wait_until(lambda: leader_of(now) is not None, timeout=30, what="a leader among the new three")
        h.wait_until(lambda: mode(leader) == "not serving", timeout=30,
                     what="the replaced leader stops serving")
        admin.create("/after", b"2")
        for m in now:
            with connected(m, admin=False) as c:
                h.wait_until(lambda: c.exists("/after") is not None, timeout=20,
                             what="server %d caught up" % m.sid)
                assert c.get("/before")[0] == b"1"
                assert config_of(c.get("/zookeeper/config")[0])[:2] == (expected, [])
        h.wait_until(lambda: digests_agree(now), timeout=30, what="equal trees")


def test_two_followers_replaced_at_once_in_one_joint_change(trio):
    """Two newcomers take two followers' places in one reconfig: raft's joint
    configuration (old and new majorities both), so the ensemble never runs
    with four or five participants, nor with two old and one new; one new
    /zookeeper/config version, seen by a watcher as one change. Writes go on
    through it and after it, on the new members."""
    members, lines, extra = trio
    leader, (gone_a, gone_b) = leader_and_others(members)
    newcomers = []
    for sid in (4, 5):
        m = new_member(sid, lines)
        extra.append(m)
        newcomers.append(m)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda m: m.server.start(timeout=60, serving=False), newcomers))
    with connected(leader) as admin:
        admin.create("/before", b"1")
        _, before = admin.get("/zookeeper/config")
        changes = []
        admin.get("/zookeeper/config", watch=changes.append)
        data, stat = admin.reconfig(
            joining=",".join(m.spec for m in newcomers),
            leaving="%d,%d" % (gone_a.sid, gone_b.sid), new_members=None)
        participants, observers, version = config_of(data)
        assert (participants, observers) == ([leader.sid, 4, 5], []), data
        assert stat.version == before.version + 1, (before, stat)
        assert version == stat.mzxid
        h.wait_until(lambda: len(changes) == 1, timeout=10, what="the config watch")
        admin.create("/after", b"2")
    now = [leader] + newcomers
    for m in (gone_a, gone_b):
        h.wait_until(lambda: mode(m) == "not serving", timeout=30,
                     what="server %d stops serving" % m.sid)
    for m in newcomers:
        h.wait_until(lambda: mode(m) == "follower", timeout=30, what="server %d following" % m.sid)
        with connected(m, admin=False) as c:
            h.wait_until(lambda: c.exists("/after") is not None, timeout=20,
                         what="server %d caught up" % m.sid)
            assert c.get("/before")[0] == b"1"
            assert config_of(c.get("/zookeeper/config")[0])[:2] == ([leader.sid, 4, 5], [])
    # The two old followers are out: with both stopped the new three still
    # commit.
    for m in (gone_a, gone_b):
        m.server.kill9()
    with connected(newcomers[0], admin=False) as c:
        c.create("/without-the-old", b"3")
    h.wait_until(lambda: digests_agree(now), timeout=30, what="equal trees")


def test_removing_the_leader_hands_leadership_over(trio):
    leader, rest = leader_and_others(trio[0])
    with connected(rest[0]) as admin:
        admin.create("/kept", b"1")
        data, _ = admin.reconfig(joining=None, leaving=str(leader.sid), new_members=None)
        assert leader.sid not in config_of(data)[0]
        h.wait_until(lambda: leader_of(rest) is not None, timeout=30,
                     what="a leader among the remaining two")
        h.wait_until(lambda: mode(leader) == "not serving", timeout=30,
                     what="the removed leader stops serving")
        admin.create("/after", b"2")
        assert admin.get("/kept")[0] == b"1"
        h.wait_until(lambda: digests_agree(rest), timeout=30, what="equal trees")
        # Its clients are refused: a session there cannot be established.
        with pytest.raises(Exception):
            h.RawClient(leader.server.hosts, timeout_ms=4000, connect_timeout=2.0)


def test_a_stopping_leader_hands_over_without_an_election_timeout(trio):
    leader, rest = leader_and_others(trio[0])
    with connected(rest[0]) as admin:
        admin.create("/a", b"1")
        started = time.monotonic()
        leader.server.stop()
        h.wait_until(lambda: leader_of(rest) is not None, timeout=30, what="a new leader")
        assert "transferring leadership" in leader.server.log_tail(200)
        admin.create("/b", b"2")
        assert time.monotonic() - started < 20


def test_a_server_removed_while_down_learns_it_when_it_comes_back():
    """A follower is removed while it is down, so it never sees the change
    commit; restarted with its old configuration, it learns of its removal
    from a member refusing its connection and stops serving, read-only
    clients included (with readonlymode.enabled it would otherwise serve
    them its stale tree for good)."""
    members, lines = start_ensemble(3, extra={"readonlymode.enabled": "true"})
    try:
        leader, rest = leader_and_others(members)
        victim, survivor = rest
        with connected(leader) as admin:
            admin.create("/before", b"1")
            victim.server.kill9()
            data, _ = admin.reconfig(joining=None, leaving=str(victim.sid), new_members=None)
            assert victim.sid not in config_of(data)[0]
            admin.create("/after", b"2")
        victim.server.start(timeout=60, serving=False)
        h.wait_until(lambda: "removed, or not added yet" in victim.server.log_tail(400), timeout=30,
                     what="the removed server to learn of its removal")
        assert mode(victim) == "not serving"
        ro = KazooClient(hosts=victim.server.hosts, timeout=4.0, read_only=True,
                         connection_retry={"max_tries": 1, "delay": 0.1})
        try:
            with pytest.raises(Exception):
                ro.start(timeout=5)
        finally:
            ro.stop()
            ro.close()
        # The members go on, and do not count it.
        with connected(survivor, admin=False) as c:
            c.create("/still-writable", b"3")
            assert c.get("/after")[0] == b"2"
    finally:
        for m in members:
            m.server.cleanup()


def test_a_follower_removed_by_its_own_clients_reconfig_answers_it(trio):
    """The client sits on the follower it removes: as on ZooKeeper, the removed follower applies its own removal and
    answers the reconfig with the new configuration before it stops serving (go-zookeeper's TestIntegration_Reconfig)."""
    members, _, _ = trio
    leader, others = leader_and_others(members)
    removed = others[0]
    admin = KazooClient(hosts=removed.server.hosts, timeout=10, auth_data=[("digest", "super:" + h.SUPER_PASSWORD)],
                        connection_retry={"max_tries": 0})
    admin.start(timeout=30)
    try:
        data, stat = admin.reconfig(joining=None, leaving=str(removed.sid), new_members=None)
        participants, observers, version = config_of(data)
        assert removed.sid not in participants and len(participants) == 2
        assert version == stat.mzxid
    finally:
        admin.stop()
        admin.close()
    rest = [m for m in members if m is not removed]
    with connected(rest[0]) as c:
        assert config_of(c.get("/zookeeper/config")[0])[0] == sorted(m.sid for m in rest)
