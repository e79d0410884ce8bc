"""The AdminServer: ZooKeeper's HTTP commands (`/commands/<name>`, JSON).

Stoa's answers are checked on their own (status, headers, values that
follow the tree), and side by side with Apache ZooKeeper 3.9.5's for the
same state: every command and alias answers the same field names with the
same JSON types (its jars and the AdminServer's Jetty and Jackson come from
Maven Central; the comparison skips, saying why, where they cannot be had).
"""

import json
import os
import socket
import urllib.error
import urllib.request

import pytest

import harness
from harness import free_port

pytestmark = pytest.mark.skipif(harness.target() != "stoa" or harness.ensemble_target(),
                                reason="starts its own Stoa servers and ZooKeeper 3.9.5")

# Every name ZooKeeper 3.9.5 serves but snapshot/restore (which need auth,
# test_admin_snapshot.py), primary names and aliases.
COMMANDS = [
    "configuration", "conf", "config", "connection_stat_reset", "crst", "connections", "cons",
    "dirs", "dump", "environment", "env", "envi", "get_trace_mask", "gtmk", "hash",
    "initial_configuration", "icfg", "is_read_only", "isro", "last_snapshot", "lsnp", "leader",
    "lead", "monitor", "mntr", "observer_connection_stat_reset", "orst", "observers", "obsr",
    "ruok", "server_stats", "srvr", "stat_reset", "srst", "stats", "stat", "voting_view",
    "watch_summary", "wchs", "watches", "wchc", "watches_by_path", "wchp", "zabstate",
]


def admin_cfg(port):
    return {"admin.enableServer": "true", "admin.serverAddress": "127.0.0.1",
            "admin.serverPort": port}


def get(port, path, method="GET", headers=None):
    """(status, headers, body) of one request."""
    request = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method,
                                     headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def command(port, name):
    status, headers, body = get(port, "/commands/" + name)
    assert status == 200, (name, status, body)
    assert headers.get("Content-Type") == "application/json", (name, headers)
    return json.loads(body)


def type_of(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def shape(value):
    """Field names and JSON types, nested objects and arrays of objects
    included (map keys that are data, such as session ids, are not)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [shape(value[0])]
    return type_of(value)


def compatible(ours, theirs):
    """Equal shapes, where an empty array matches an array of anything
    (ZooKeeper's `hash` lists digests only every 128 zxids)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(compatible(ours[k], theirs[k]) for k in ours)
    if "array" in (ours, theirs) and all(o == "array" or isinstance(o, list) for o in (ours, theirs)):
        return True
    if isinstance(ours, list) and isinstance(theirs, list):
        return compatible(ours[0], theirs[0])
    return ours == theirs


def same_state(client):
    """The state both servers are compared in: an ephemeral, a node with
    data and children, a data watch and a child watch."""
    client.create("/e", b"x", ephemeral=True)
    client.create("/p", b"persistent-data")
    client.create("/p/c1", b"")
    client.get("/p", watch=lambda event: None)
    client.get_children("/p", watch=lambda event: None)


@pytest.fixture
def stoa_admin(request, make_client):
    port = free_port()
    srv = harness.Server(kind="stoa", extra_cfg=admin_cfg(port))
    srv.start()
    request.addfinalizer(srv.cleanup)
    client = make_client(hosts=srv.hosts)
    return srv, port, client


def test_the_listing_names_every_command_with_a_link(stoa_admin):
    _, port, _ = stoa_admin
    for path in ("/commands", "/commands/", "/commands?x=1"):
        status, headers, body = get(port, path)
        assert status == 200 and headers.get("Content-Type") is None
        lines = body.splitlines()
        assert lines[0] == '<a href="/commands/configuration">configuration</a>'
        assert lines[1] == "<br/>"
        names = [line.split(">")[1].split("<")[0] for line in lines[0::2]]
        assert names == sorted(names) and len(names) == 28 and "zabstate" in names


def test_commands_answer_zookeepers_envelope_and_follow_the_tree(stoa_admin):
    srv, port, client = stoa_admin
    same_state(client)
    ruok = get(port, "/commands/ruok")[2]
    assert ruok == '{\n  "command" : "ruok",\n  "error" : null\n}'
    assert command(port, "conf")["command"] == "configuration"
    assert command(port, "conf")["client_port"] == srv.port
    unknown = command(port, "nosuch")
    assert unknown == {"command": "nosuch", "error": "Unknown command: nosuch"}
    session = client.client_id[0]
    dump = command(port, "dump")
    assert dump["session_id_to_ephemeral_paths"] == {str(session): ["/e"]}
    assert [session] in dump["expiry_time_to_session_ids"].values()
    assert command(port, "wchp")["path_to_session_ids"]["/p"] == [session]
    before = command(port, "mntr")["znode_count"]
    client.create("/q", b"")
    assert command(port, "mntr")["znode_count"] == before + 1
    assert command(port, "srvr")["node_count"] == before + 1
    assert command(port, "leader") == {"error": "server is not initialized", "command": "leader"}
    assert command(port, "stmk?traceMask=9")["tracemask"] == 9
    assert command(port, "gtmk")["tracemask"] == 9
    assert "error" in command(port, "stmk?traceMask=0x10")
    assert command(port, "isro")["read_only"] is False
    cons = command(port, "cons")["connections"]
    assert [c["session_id"] for c in cons] == [session]


def test_snapshot_and_restore_need_auth(stoa_admin):
    """The rest of snapshot and restore is in test_admin_snapshot.py."""
    _, port, _ = stoa_admin
    status, _, body = get(port, "/commands/snap")
    assert status == 401
    assert json.loads(body) == {"command": "snap", "error": "Auth info is missing for the command"}
    status, _, body = get(port, "/commands/rest", method="POST")
    assert status == 401


def test_http_details(stoa_admin):
    _, port, _ = stoa_admin
    status, headers, body = get(port, "/commands/stat", method="HEAD")
    assert status == 200 and body == "" and int(headers["Content-Length"]) > 0
    assert get(port, "/commands/stat", method="PUT")[0] == 405
    assert get(port, "/nosuch")[0] == 404
    assert get(port, "/commands/%73tat")[0] == 200
    assert get(port, "/health/live")[0] == 200
    status, _, body = get(port, "/health/ready")
    assert status == 200 and json.loads(body)["ready"] is True
    # A request that never ends its head is cut off, not held forever.
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(b"GET /commands/ruok HTTP/1.1\r\n" + b"X: " + b"y" * 20000)
        assert s.recv(100).startswith(b"HTTP/1.1 431")


def test_a_port_already_taken_leaves_the_server_serving(make_client):
    """As ZooKeeper: the AdminServer failing to bind is a warning."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        srv = harness.Server(kind="stoa", extra_cfg=admin_cfg(port))
        srv.start()
        try:
            client = make_client(hosts=srv.hosts)
            client.create("/up", b"")
            assert "AdminServer: cannot listen" in srv.log_tail(200)
        finally:
            srv.cleanup()


def test_every_command_has_zookeeper_3_9_5s_fields_and_types(request, make_client):
    """Differential: the same state on Stoa and on ZooKeeper 3.9.5, every
    command and alias; field names and JSON types must match (`monitor`:
    every field both have has the same type, and ZooKeeper's mntr keys are
    all there; `environment`: the same keys)."""
    if not os.path.exists("/usr/bin/java"):
        pytest.skip("no java")
    jars = harness.zookeeper_395(admin=True)
    ports = {}
    for kind in ("stoa", "zookeeper"):
        port = free_port()
        srv = harness.Server(kind=kind, extra_cfg=admin_cfg(port),
                             zookeeper=jars if kind == "zookeeper" else None)
        srv.start()
        request.addfinalizer(srv.cleanup)
        same_state(make_client(hosts=srv.hosts))
        ports[kind] = port
    mntr_keys = ("version", "server_state", "avg_latency", "max_latency", "min_latency",
                 "packets_received", "packets_sent", "num_alive_connections",
                 "outstanding_requests", "znode_count", "watch_count", "ephemerals_count",
                 "approximate_data_size", "global_sessions", "local_sessions", "uptime",
                 "auth_failed_count")
    differences = []
    for name in COMMANDS:
        ours, theirs = (command(ports[k], name) for k in ("stoa", "zookeeper"))
        if name in ("monitor", "mntr"):
            for key in mntr_keys:
                if key not in ours:
                    differences.append("%s: no %s" % (name, key))
            for key in set(ours) & set(theirs):
                if type_of(ours[key]) != type_of(theirs[key]):
                    differences.append("%s.%s: %s, ZooKeeper %s"
                                       % (name, key, type_of(ours[key]), type_of(theirs[key])))
            continue
        if name in ("dump", "watches", "wchc", "watches_by_path", "wchp"):
            # Keys are session ids and paths: compare the values' types.
            for field in ours:
                inner = [type_of(v) for v in ours[field].values()] \
                    if isinstance(ours[field], dict) else []
                want = [type_of(v) for v in theirs[field].values()] \
                    if isinstance(theirs.get(field), dict) else []
                if sorted(set(inner)) != sorted(set(want)):
                    differences.append("%s.%s values: %s, ZooKeeper %s"
                                       % (name, field, inner, want))
            if list(ours) != list(theirs):
                differences.append("%s: fields %s, ZooKeeper %s" % (name, list(ours), list(theirs)))
            continue
        if not compatible(shape(ours), shape(theirs)):
            differences.append("%s: %s\n  ZooKeeper: %s" % (name, shape(ours), shape(theirs)))
    assert not differences, "\n".join(differences)


def member_admin_port(member):
    with open(member.cfg_path) as f:
        ports = [int(line.split("=", 1)[1]) for line in f if line.startswith("admin.serverPort=")]
    return ports[-1]


def test_an_ensemble_member_reports_the_leader_the_voters_and_its_zab_state(request):
    """leader, voting_view, zabstate, monitor and readiness on every member
    of a 3-member ensemble agree on one leader."""
    ensemble = harness.Ensemble(kind="stoa", extra_cfg=admin_cfg(free_port()))
    request.addfinalizer(ensemble.cleanup)
    ensemble.start()
    leader = ensemble.leader()
    leader_id = ensemble.members.index(leader) + 1
    for i, member in enumerate(ensemble.members):
        port = member_admin_port(member)
        lead = command(port, "lead")
        assert (lead["is_leader"], lead["leader_id"], lead["leader_ip"]) == \
            (member is leader, leader_id, "127.0.0.1")
        view = command(port, "voting_view")["current_config"]
        assert sorted(view) == ["1", "2", "3"]
        assert all(v["learner_type"] == "participant" for v in view.values())
        zab = command(port, "zabstate")
        assert (zab["myid"], zab["voting"], zab["zabstate"]) == (i + 1, True, "broadcast")
        mntr = command(port, "mntr")
        role = "leader" if member is leader else "follower"
        assert (mntr["server_state"], mntr["peer_state"]) == (role, role[:-2] + "ing - broadcast")
        assert get(port, "/health/ready")[0] == 200
        assert command(port, "conf")["server_id"] == i + 1
        assert ("proposal_stats" in command(port, "srvr")) == (member is leader)
