"""Fixtures for the end-to-end tests.

STOA_TARGET=stoa (default) or zookeeper picks the server under test;
STOA_TARGET=stoa-ensemble runs the standalone suite against a 3-member Stoa
ensemble with the clients on a follower (harness.Ensemble). There, tests
marked @pytest.mark.standalone_only("reason") are skipped, and so are the
modules that start their own ensembles (ENSEMBLE_TARGET_SKIPPED_MODULES,
and any netns/partition module).
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import harness  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402

_SERVERS = []

# Under STOA_TARGET=stoa-ensemble: modules that start their own ensembles (the
# target would only run them again), by file name, with the reason shown by -rs.
ENSEMBLE_TARGET_SKIPPED_MODULES = {
    "test_ensemble.py": "starts its own ensemble (runs under STOA_TARGET=stoa)",
    "test_linearizability.py": "starts its own ensemble (runs under STOA_TARGET=stoa)",
    "test_regions.py": "starts its own ensemble (runs under STOA_TARGET=stoa)",
}


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "standalone_only(reason): skipped under STOA_TARGET=stoa-ensemble, because the test "
        "checks what legitimately differs in a ZooKeeper ensemble (reason says what)")


def pytest_collection_modifyitems(config, items):
    if harness.stoa_partitions() > 1 and harness.target() == "stoa":
        for item in items:
            if os.path.basename(str(item.fspath)) == "test_reconfig.py":
                item.add_marker(pytest.mark.skip(
                    reason="partitions>1: reconfig needs one partition so far (issue 23)"))
    if not harness.ensemble_target():
        return
    for item in items:
        name = os.path.basename(str(item.fspath))
        reason = ENSEMBLE_TARGET_SKIPPED_MODULES.get(name)
        if reason is None and ("partition" in name or "netns" in name):
            reason = "network partition test: starts its own ensemble"
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason="stoa-ensemble: " + reason))
            continue
        mark = item.get_closest_marker("standalone_only")
        if mark is not None:
            why = mark.args[0] if mark.args else mark.kwargs.get("reason", "standalone only")
            item.add_marker(pytest.mark.skip(reason="standalone only: " + why))


def _new_server(request, **kw):
    srv = harness.Server(**kw)
    _SERVERS.append(srv)
    try:
        srv.start()
    except Exception:
        srv.cleanup()
        raise
    return srv


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and call.when in ("setup", "call"):
        tails = []
        for srv in list(_SERVERS):
            if hasattr(srv, "log_tails"):   # an Ensemble: every member's tail
                tails.append("---- %r ----\n%s" % (srv, srv.log_tails(40)))
                continue
            tails.append("---- %r log tail (%s) ----\n%s" % (srv, srv.log_path, srv.log_tail(40)))
        if tails:
            rep.sections.append(("server logs", "\n".join(tails)))


def _finish(srv):
    try:
        srv.cleanup()
    finally:
        if srv in _SERVERS:
            _SERVERS.remove(srv)


@pytest.fixture(scope="module")
def namespaces_allowed():
    """Skips the module's tests, with the reason, where network namespaces
    (netns.py) cannot be used; sweeps what killed earlier runs left behind."""
    import netns
    why = netns.unavailable_reason()
    if why is not None:
        pytest.skip("network namespaces unavailable: %s" % why)


@pytest.fixture(scope="module")
def module_server(request):
    """One server for a test module; tests wipe the tree via the zk fixture."""
    srv = _new_server(request)
    yield srv
    _finish(srv)


@pytest.fixture
def fresh_server(request):
    """A fresh server for a single test (where state matters)."""
    srv = _new_server(request)
    yield srv
    _finish(srv)


@pytest.fixture
def server_factory(request):
    """Start servers with custom zoo.cfg options; all stopped at teardown."""
    started = []

    def make(**kw):
        srv = _new_server(request, **kw)
        started.append(srv)
        return srv

    yield make
    for srv in started:
        _finish(srv)


def _wipe(server):
    """Delete everything but /zookeeper, as the super user (ACLs may protect nodes)."""
    c = harness.RawClient(server.hosts)
    try:
        c.add_auth("digest", ("super:" + harness.SUPER_PASSWORD).encode())

        def rm(path):
            children, _ = c.get_children(path)
            for ch in children:
                rm(path.rstrip("/") + "/" + ch)
            if path != "/":
                try:
                    c.delete(path)
                except harness.ZkError as e:
                    if e.code != harness.ERR.NO_NODE:
                        raise

        for ch in c.get_children("/")[0]:
            if ch != "zookeeper":
                rm("/" + ch)
    finally:
        c.close()


@pytest.fixture
def server(module_server):
    return module_server


@pytest.fixture
def make_client(server):
    """Factory of connected KazooClients on `server` (or hosts=...)."""
    clients = []

    def make(hosts=None, timeout=10.0, start=True, **kw):
        c = KazooClient(hosts=hosts or server.hosts, timeout=timeout,
                        connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5},
                        **kw)
        clients.append(c)
        if start:
            c.start(timeout=15)
        return c

    yield make
    for c in clients:
        try:
            c.stop()
        except Exception:
            pass
        try:
            c.close()
        except Exception:
            pass


@pytest.fixture
def zk(server, make_client):
    """A connected KazooClient on a server whose tree holds only /zookeeper."""
    _wipe(server)
    return make_client()


@pytest.fixture
def make_raw(server):
    """Factory of RawClients on `server`, closed at teardown."""
    clients = []

    def make(hosts=None, **kw):
        c = harness.RawClient(hosts or server.hosts, **kw)
        clients.append(c)
        return c

    yield make
    for c in clients:
        try:
            c.close(timeout=2)
        except Exception:
            pass


@pytest.fixture
def raw(zk, make_raw):
    """A RawClient on a wiped server (depends on zk for the wipe)."""
    return make_raw()


def is_zookeeper():
    return harness.target() == "zookeeper"
