"""The dashboard on the AdminServer's port (`/`, `/dashboard`).

The page is rendered in a headless Chromium (Debian's `chromium`, which
scripts/setup-test-env installs): its DOM, after the page polled a few
times in virtual time, must show what the JSON commands say; must hold a
server's markup as text; and must say the server is unreachable once the
server is stopped. Every Chromium run is bounded and its process group
killed by PID.
"""

import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kazoo.client import KazooClient

import harness
from harness import free_port

CHROMIUM = shutil.which("chromium")
CHROMIUM_TIMEOUT_S = 60

pytestmark = pytest.mark.skipif(harness.target() != "stoa",
                                reason="Apache ZooKeeper's AdminServer has no dashboard")
needs_chromium = pytest.mark.skipif(CHROMIUM is None,
                                    reason="no chromium (scripts/setup-test-env installs it)")


def admin_cfg(port, **more):
    cfg = {"admin.enableServer": "true", "admin.serverAddress": "127.0.0.1",
           "admin.serverPort": port}
    cfg.update(more)
    return cfg


def start_server(request, port, ensemble=None, **cfg):
    """A Stoa server with its AdminServer on `port` (under
    STOA_TARGET=stoa-ensemble, unless ensemble=False, a 3-member ensemble
    whose follower m1 has that port)."""
    kw = {} if ensemble is None else {"ensemble": ensemble}
    srv = harness.Server(kind="stoa", extra_cfg=admin_cfg(port, **cfg), **kw)
    request.addfinalizer(srv.cleanup)
    srv.start()
    return srv


def get(url, method="GET", context=None):
    """(status, headers, body) of one request."""
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def command(port, name, command_url="/commands"):
    status, _, body = get("http://127.0.0.1:%d%s/%s" % (port, command_url, name))
    assert status == 200, (name, status, body)
    return json.loads(body)


# -------------------------------------------------------------------------
# The browser and its DOM

def render(url, budget_ms, *extra_args):
    """The DOM Chromium holds after `budget_ms` of virtual time on `url`."""
    profile = tempfile.mkdtemp(prefix="stoa-e2e-chromium-")
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--user-data-dir=" + profile,
            "--virtual-time-budget=%d" % budget_ms, *extra_args, "--dump-dom", url]
    # Its own process group: the renderer and helpers go with it.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=CHROMIUM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError("chromium did not finish in %ds" % CHROMIUM_TIMEOUT_S)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(profile, ignore_errors=True)
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    return Dom(out.decode())


class Element:
    def __init__(self, tag, attrs):
        self.tag, self.attrs, self.children = tag, attrs, []

    def text(self):
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def elements(self):
        for c in self.children:
            if isinstance(c, Element):
                yield c
                yield from c.elements()

    def cells(self):
        return [c.text() for c in self.children if isinstance(c, Element) and c.tag == "td"]


class Dom(HTMLParser):
    """The dumped DOM as a tree (text unescaped, as the page holds it)."""

    VOID = {"meta", "link", "br", "img", "input", "hr", "source"}

    def __init__(self, html):
        super().__init__(convert_charrefs=True)
        self.html = html
        self.root = Element("#document", {})
        self.stack = [self.root]
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        element = Element(tag, dict(attrs))
        self.stack[-1].children.append(element)
        if tag not in self.VOID:
            self.stack.append(element)

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        self.stack[-1].children.append(data)

    def by_id(self, id_):
        found = [e for e in self.root.elements() if e.attrs.get("id") == id_]
        assert len(found) == 1, (id_, self.html)
        return found[0]

    def text(self, id_):
        return self.by_id(id_).text()

    def rows(self, attr):
        return {e.attrs[attr]: e.cells() for e in self.root.elements() if attr in e.attrs}

    def body(self):
        return next(e for e in self.root.elements() if e.tag == "body")


def sparkline_points(dom, id_):
    line = [e for e in dom.by_id(id_).elements() if e.tag == "polyline"]
    return line[0].attrs["points"].split() if line else []


# -------------------------------------------------------------------------
# The route

def test_the_page_and_its_files_are_served_with_their_types_and_headers(request):
    port = free_port()
    start_server(request, port, ensemble=False)
    base = "http://127.0.0.1:%d" % port
    for path in ("/", "/dashboard", "/dashboard/", "/dashboard?x=1"):
        status, headers, body = get(base + path)
        assert status == 200, path
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        assert headers["Cache-Control"] == "no-cache"
        assert "connect-src 'self'" in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert '<meta name="stoa-command-url" content="/commands">' in body
    for path, content_type in (("/dashboard.js", "text/javascript; charset=utf-8"),
                               ("/dashboard.css", "text/css; charset=utf-8")):
        status, headers, body = get(base + path)
        assert (status, headers["Content-Type"]) == (200, content_type)
        assert len(body) > 1000
    status, headers, body = get(base + "/dashboard", method="HEAD")
    assert status == 200 and body == "" and int(headers["Content-Length"]) > 0
    assert get(base + "/dashboard/nosuch")[0] == 404
    # The commands are where they were, auth included.
    assert get(base + "/commands/ruok")[0] == 200
    assert get(base + "/commands/snapshot")[0] == 401


def test_a_command_url_at_dashboard_keeps_its_paths_and_the_page_keeps_the_root(request):
    port = free_port()
    start_server(request, port, ensemble=False, **{"admin.commandURL": "/dashboard"})
    base = "http://127.0.0.1:%d" % port
    status, headers, body = get(base + "/dashboard")
    assert status == 200 and headers.get("Content-Type") is None
    assert body.startswith('<a href="/dashboard/configuration">')
    status, headers, body = get(base + "/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert '<meta name="stoa-command-url" content="/dashboard">' in body
    assert get(base + "/dashboard.js")[0] == 200
    assert command(port, "ruok", command_url="/dashboard")["command"] == "ruok"


def self_signed_pem(directory):
    """A PEM key store (key, then certificate) for 127.0.0.1."""
    key, cert = os.path.join(directory, "key.pem"), os.path.join(directory, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    store = os.path.join(directory, "server.pem")
    with open(store, "w") as out:
        for part in (key, cert):
            with open(part) as f:
                out.write(f.read())
    return store


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make a certificate")
def test_over_https_with_another_command_url_the_page_polls_what_it_is_given(request, tmp_path):
    """admin.forceHttps and admin.commandURL=/zk: the page and its fetches
    go over HTTPS to /zk/..."""
    port = free_port()
    start_server(request, port, ensemble=False, **{
        "admin.forceHttps": "true", "admin.commandURL": "/zk",
        "ssl.quorum.keyStore.location": self_signed_pem(str(tmp_path))})
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    status, headers, body = get("https://127.0.0.1:%d/" % port, context=unverified)
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert '<meta name="stoa-command-url" content="/zk">' in body
    with pytest.raises(Exception):
        get("http://127.0.0.1:%d/" % port)
    if CHROMIUM is None:
        pytest.skip("no chromium (scripts/setup-test-env installs it)")
    dom = render("https://127.0.0.1:%d/dashboard" % port, 5000, "--ignore-certificate-errors")
    assert dom.body().attrs["data-state"] == "ok", dom.html
    assert dom.text("server_state") == "standalone"
    status, _, body = get("https://127.0.0.1:%d/zk/mntr" % port, context=unverified)
    assert dom.text("znode_count") == str(json.loads(body)["znode_count"])


# -------------------------------------------------------------------------
# What the page shows

@needs_chromium
def test_the_page_shows_what_the_commands_say(request):
    """After writes: the znode count, mode, zxid and epoch as the commands
    give them, a row per partition with its figures, the ensemble's voting
    members (under STOA_TARGET=stoa-ensemble: from a follower), and a
    sparkline of the polls."""
    port = free_port()
    srv = start_server(request, port)
    with harness.started_client(KazooClient(hosts=srv.hosts, timeout=10)) as client:
        client.create("/dashboard-test", b"x" * 100)
        for i in range(6):
            client.create("/dashboard-test/n%d" % i, b"y")
    # The session's close was a write too: read the figures after it.
    monitor = command(port, "mntr")
    stats = command(port, "srvr")
    dom = render("http://127.0.0.1:%d/" % port, 7000)

    assert dom.body().attrs["data-state"] == "ok", dom.html
    assert dom.by_id("banner").attrs.get("hidden") is not None
    assert dom.text("znode_count") == str(monitor["znode_count"])
    assert dom.text("server_state") == monitor["server_state"]
    assert dom.text("mode") == monitor["server_state"]
    zxid = stats["server_stats"]["last_processed_zxid"]
    assert dom.text("zxid") == hex(zxid)
    assert dom.text("epoch") == str(zxid >> 32)
    assert dom.text("version") == monitor["version"]
    assert dom.text("ephemerals_count") == str(monitor["ephemerals_count"])

    partitions = sorted({key.split("_")[2] for key in monitor
                         if key.startswith("stoa_partition_")}, key=int)
    assert len(partitions) == max(1, harness.stoa_partitions())
    rows = dom.rows("data-partition")
    assert sorted(rows, key=int) == partitions
    for p in partitions:
        figure = lambda name: str(monitor["stoa_partition_%s_%s" % (p, name)])  # noqa: E731
        number, term, leader, applied, last, last_zxid, znodes = rows[p]
        assert (number, term, leader, znodes) == \
            (p, figure("term"), figure("leader"), figure("znode_count"))
        assert int(applied) <= int(last)
        assert last_zxid == hex(monitor["stoa_partition_%s_last_zxid" % p])

    members = dom.rows("data-member")
    if monitor["server_state"] == "standalone":
        assert members == {}
        assert dom.text("members_note") == "Standalone: no ensemble."
        assert dom.text("leader") == "this server (standalone)"
    else:
        view = command(port, "voting_view")["current_config"]
        leader_id = str(command(port, "leader")["leader_id"])
        me = str(command(port, "conf")["server_id"])
        assert sorted(members) == sorted(view)
        for id_, (shown_id, role, learner_type, quorum, election, client_address) in \
                members.items():
            assert (shown_id, learner_type) == (id_, view[id_]["learner_type"])
            assert quorum == view[id_]["server_addresses"][0]
            # The page shows a dash where a value is empty.
            assert client_address == (view[id_]["client_address"] or "\u2013")
            assert role.startswith("leader" if id_ == leader_id else "follower")
            assert role.endswith("(this server)") == (id_ == me)
        assert dom.text("leader").startswith("id %s " % leader_id)
    # Polls 2 s apart in 7 s: at least two rates.
    assert len(sparkline_points(dom, "chart_rate")) >= 2
    assert len(sparkline_points(dom, "chart_latency")) >= 3


def member_admin_port(member):
    with open(member.cfg_path) as f:
        ports = [int(line.split("=", 1)[1]) for line in f if line.startswith("admin.serverPort=")]
    return ports[-1]


@needs_chromium
@pytest.mark.skipif(harness.ensemble_target(),
                    reason="starts its own ensemble (runs under STOA_TARGET=stoa)")
def test_on_the_leader_the_page_shows_its_followers_and_itself_leading(request):
    ensemble = harness.Ensemble(kind="stoa", extra_cfg=admin_cfg(free_port()))
    request.addfinalizer(ensemble.cleanup)
    ensemble.start()
    leader = ensemble.leader()
    leader_id = str(ensemble.members.index(leader) + 1)
    port = member_admin_port(leader)
    monitor = command(port, "mntr")
    dom = render("http://127.0.0.1:%d/dashboard" % port, 5000)

    assert dom.text("mode") == "leader"
    assert dom.text("leader") == "id %s (this server)" % leader_id
    assert dom.text("followers").startswith(
        "%d (%d synced" % (monitor["followers"], monitor["synced_followers"]))
    members = dom.rows("data-member")
    assert sorted(members) == ["1", "2", "3"]
    assert [id_ for id_, cells in members.items() if cells[1] == "leader (this server)"] == \
        [leader_id]
    assert all(cells[1] == "follower" for id_, cells in members.items() if id_ != leader_id)


# -------------------------------------------------------------------------
# Between the browser and the server: a proxy that rewrites answers or
# stops the server

class DashboardProxy:
    """An HTTP proxy to a server's AdminServer on a free port of its own.
    rewrite maps a command name to a function of its JSON answer; after
    `stop_after` answers to monitor, the next monitor request stops the
    server (by PID) and the browser gets no answer, as from a dead port.
    The dashboard's Content-Security-Policy is dropped on the way, so what
    is tested is the page's own escaping."""

    def __init__(self, upstream_port, rewrite=None, server=None, stop_after=None):
        self.upstream = "http://127.0.0.1:%d" % upstream_port
        self.rewrite = rewrite or {}
        self.server, self.stop_after = server, stop_after
        self.monitor_requests = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                proxy.handle(self)

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def handle(self, handler):
        name = handler.path.split("?")[0].rsplit("/", 1)[-1]
        if name == "monitor" and self.stop_after is not None:
            with self.lock:
                self.monitor_requests += 1
                if self.monitor_requests > self.stop_after and self.server.running():
                    self.server.stop()
        try:
            status, headers, body = get(self.upstream + handler.path)
        except OSError:
            handler.close_connection = True
            return
        if name in self.rewrite:
            body = json.dumps(self.rewrite[name](json.loads(body)))
        data = body.encode()
        handler.send_response(status)
        handler.send_header("Content-Type", headers.get("Content-Type") or "text/plain")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def close(self):
        self.http.shutdown()
        self.http.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def proxy(request):
    made = []

    def make(*args, **kw):
        p = DashboardProxy(*args, **kw)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


MARKUP = '<img src="x" onerror="document.body.dataset.injected=1"><b>bold</b>'


@needs_chromium
def test_markup_from_the_server_stays_text(request, proxy):
    port = free_port()
    start_server(request, port, ensemble=False)

    def monitor(answer):
        answer.update(version=MARKUP, server_state=MARKUP, znode_count=MARKUP,
                      stoa_partition_0_leader=MARKUP)
        answer["stoa_partition_<b>x</b>_term"] = 1
        return answer

    member = {"server_addresses": [MARKUP], "election_addresses": [MARKUP],
              "client_address": MARKUP, "learner_type": MARKUP}
    rewrite = {
        "monitor": monitor,
        "voting_view": lambda answer: dict(answer, current_config={"1": member}),
        "leader": lambda answer: {"is_leader": False, "leader_id": MARKUP,
                                  "leader_ip": MARKUP, "error": None},
        "server_stats": lambda answer: dict(answer, error=MARKUP),
    }
    through = proxy(port, rewrite=rewrite)
    dom = render("http://127.0.0.1:%d/dashboard" % through.port, 5000)

    assert dom.body().attrs["data-state"] == "ok", dom.html
    assert "data-injected" not in dom.body().attrs
    tags = {e.tag for e in dom.root.elements()}
    assert not tags & {"img", "b"}, dom.html
    for id_ in ("version", "server_state", "mode", "znode_count"):
        assert dom.text(id_) == MARKUP, id_
    assert dom.by_id("mode").attrs["class"] == "mode"
    assert dom.text("serving") == "no: " + MARKUP
    assert dom.text("leader") == "id %s (%s)" % (MARKUP, MARKUP)
    assert dom.rows("data-member")["1"][2:] == [MARKUP] * 4
    # The key that is not a partition's number is not a row.
    assert sorted(dom.rows("data-partition")) == \
        [str(p) for p in range(max(1, harness.stoa_partitions()))]
    assert dom.rows("data-partition")["0"][2] == MARKUP


@needs_chromium
def test_a_stopped_server_shows_as_unreachable_with_the_last_figures(request, proxy):
    port = free_port()
    srv = start_server(request, port, ensemble=False)
    znodes = str(command(port, "mntr")["znode_count"])
    through = proxy(port, server=srv, stop_after=2)
    dom = render("http://127.0.0.1:%d/" % through.port, 9000)

    assert not srv.running()
    assert dom.body().attrs["data-state"] == "unreachable", dom.html
    banner = dom.by_id("banner")
    assert banner.attrs.get("hidden") is None
    assert banner.text().startswith("Unreachable since "), banner.text()
    assert "the figures below are from " in banner.text()
    assert dom.text("znode_count") == znodes

