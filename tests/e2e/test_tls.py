"""TLS for clients: `secureClientPort` with ZooKeeper's `ssl.*` keys.

Certificates are made here with openssl: a CA, the server's key and
certificate, and a client's. kazoo connects over TLS (use_ssl) with and
without a client certificate; the official Java client (ZooKeeper 3.9.5,
its Netty socket, `zookeeper.client.secure=true`) does too where its jars
can be had. The `x509` ACL scheme takes the client certificate's subject.
"""

import os
import shutil
import socket
import ssl
import subprocess
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id, Permissions

import harness
from harness import free_port

pytestmark = [
    pytest.mark.skipif(harness.target() != "stoa" or harness.ensemble_target(),
                       reason="starts its own Stoa servers"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make certificates"),
]

CLIENT_SUBJECT = "CN=client,O=Stoa"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_cert(d, name, subject, ca=True):
    """name.key and name.crt, signed by the CA (or the CA itself)."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out",
            name + ".csr", "-subj", subject, cwd=d)
    if not ca:
        openssl("x509", "-req", "-in", name + ".csr", "-signkey", name + ".key", "-out",
                name + ".crt", "-days", "2", "-extfile", "ca.ext", cwd=d)
        return
    ext = name + ".ext"
    with open(os.path.join(d, ext), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", name + ".crt", "-days", "2", "-extfile", ext, cwd=d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tls"))
    with open(os.path.join(d, "ca.ext"), "w") as f:
        f.write("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n")
    make_cert(d, "ca", "/CN=Stoa test CA", ca=False)
    make_cert(d, "server", "/CN=localhost/O=Stoa")
    make_cert(d, "client", "/O=Stoa/CN=client")
    make_cert(d, "other", "/O=Stoa/CN=other")
    for name in ("server", "client", "other"):
        # PEM key stores as ZooKeeper reads them: the key and its chain.
        with open(os.path.join(d, name + ".pem"), "w") as out:
            for part in (".key", ".crt"):
                with open(os.path.join(d, name + part)) as f:
                    out.write(f.read())
    openssl("pkcs12", "-export", "-in", "server.crt", "-inkey", "server.key", "-out", "server.p12",
            "-passout", "pass:secret", cwd=d)
    return d


def tls_server(certs, **cfg):
    port = free_port()
    extra = {"secureClientPort": port, "ssl.keyStore.location": os.path.join(certs, "server.pem"),
             "ssl.trustStore.location": os.path.join(certs, "ca.crt")}
    extra.update(cfg)
    srv = harness.Server(kind="stoa", extra_cfg=extra)
    return srv, port


def tls_client(certs, port, cert="client", **kw):
    args = dict(use_ssl=True, verify_certs=True, ca=os.path.join(certs, "ca.crt"))
    if cert:
        args.update(certfile=os.path.join(certs, cert + ".crt"),
                    keyfile=os.path.join(certs, cert + ".key"))
    client = KazooClient(hosts="127.0.0.1:%d" % port, timeout=10, **args, **kw)
    return client


@pytest.fixture
def started(request):
    def start(srv):
        srv.start()
        request.addfinalizer(srv.cleanup)
        return srv
    return start


def test_a_client_with_a_certificate_works_over_tls_beside_the_plain_port(certs, started):
    srv, port = tls_server(certs)
    started(srv)
    secure = tls_client(certs, port)
    secure.start(timeout=10)
    try:
        secure.create("/tls", b"over tls")
        plain = KazooClient(hosts=srv.hosts, timeout=10)
        plain.start(timeout=10)
        try:
            assert plain.get("/tls")[0] == b"over tls"
        finally:
            plain.stop()
            plain.close()
    finally:
        secure.stop()
        secure.close()


def test_clientauth_need_refuses_a_client_without_a_certificate(certs, started):
    srv, port = tls_server(certs)
    started(srv)
    bare = tls_client(certs, port, cert=None)
    with pytest.raises(Exception):
        bare.start(timeout=4)
    bare.stop()
    bare.close()
    assert "handshake failed" in srv.log_tail(200)


def test_clientauth_want_lets_it_in(certs, started):
    srv, port = tls_server(certs, **{"ssl.clientAuth": "want"})
    started(srv)
    with harness.started_client(tls_client(certs, port, cert=None)) as bare:
        bare.create("/wanted", b"")


def test_the_x509_scheme_is_the_client_certificates_subject(certs, started):
    srv, port = tls_server(certs)
    started(srv)
    owner = tls_client(certs, port)
    owner.start(timeout=10)
    other = tls_client(certs, port, cert="other")
    other.start(timeout=10)
    try:
        owner.create("/mine", b"secret", acl=[ACL(Permissions.ALL, Id("x509", CLIENT_SUBJECT))])
        assert owner.get("/mine")[0] == b"secret"
        with pytest.raises(NoAuthError):
            other.get("/mine")
        # `auth` takes the certificate's identity, as a digest's.
        owner.create("/auth", b"", acl=[ACL(Permissions.ALL, Id("auth", ""))])
        assert owner.get_acls("/auth")[0] == [ACL(Permissions.ALL, Id("x509", CLIENT_SUBJECT))]
    finally:
        for c in (owner, other):
            c.stop()
            c.close()


def test_a_pkcs12_key_store_and_only_the_secure_port(certs, started):
    srv, port = tls_server(certs, **{"ssl.keyStore.location": os.path.join(certs, "server.p12"),
                                     "ssl.keyStore.password": "secret"})
    # Only secureClientPort: no plain listener.
    with open(srv.cfg_path) as f:
        lines = [line for line in f if not line.startswith("clientPort=")]
    with open(srv.cfg_path, "w") as f:
        f.writelines(lines)
    srv.port = port
    srv.hosts = "127.0.0.1:%d" % port
    srv.launch()
    try:
        client = tls_client(certs, port)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.start(timeout=3)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
        try:
            client.create("/p12", b"")
        finally:
            client.stop()
            client.close()
        assert "serving ZooKeeper clients on" not in srv.log_tail(200)
    finally:
        srv.cleanup()


def test_a_bad_store_stops_the_server_with_a_clear_message(certs, tmp_path):
    jks = tmp_path / "keys.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed")
    srv, _ = tls_server(certs, **{"ssl.keyStore.location": str(jks)})
    log = refused_start_log(srv)
    assert "JKS is not read" in log and "PKCS12" in log


def refused_start_log(srv):
    """Launches `srv`, which must stop by itself within 20 s; its log's tail."""
    srv.launch()
    try:
        deadline = time.monotonic() + 20
        while srv.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not srv.running()
        return srv.log_tail(50)
    finally:
        srv.cleanup()


def served_certificate_subject(port):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw) as s:
            der = s.getpeercert(binary_form=True)
    text = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-subject"], input=der,
                          capture_output=True, check=True, timeout=30).stdout.decode()
    return text


def test_a_renewed_certificate_is_served_without_a_restart(certs, started, tmp_path):
    store = tmp_path / "server.pem"
    shutil.copy(os.path.join(certs, "server.pem"), store)
    srv, port = tls_server(certs, **{"ssl.keyStore.location": str(store),
                                     "ssl.clientAuth": "none"})
    started(srv)
    assert "CN = localhost" in served_certificate_subject(port)
    make_cert(certs, "renewed", "/CN=renewed/O=Stoa")
    with open(store, "w") as out:
        for part in (".key", ".crt"):
            with open(os.path.join(certs, "renewed" + part)) as f:
                out.write(f.read())
    harness.wait_until(lambda: "CN = renewed" in served_certificate_subject(port), timeout=15,
                       what="the renewed certificate served")


def test_the_java_client_over_netty_tls(certs, started):
    """ZooKeeper 3.9.5's own client (ClientCnxnSocketNetty) with PEM stores."""
    if not os.path.exists("/usr/bin/java"):
        pytest.skip("no java")
    jars = harness.zookeeper_395(cli=True)
    srv, port = tls_server(certs)
    started(srv)
    props = {
        "zookeeper.client.secure": "true",
        "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
        "zookeeper.ssl.keyStore.location": os.path.join(certs, "client.pem"),
        "zookeeper.ssl.keyStore.type": "PEM",
        "zookeeper.ssl.trustStore.location": os.path.join(certs, "ca.crt"),
        "zookeeper.ssl.trustStore.type": "PEM",
        "zookeeper.ssl.hostnameVerification": "false",
    }
    argv = ["/usr/bin/java"] + ["-D%s=%s" % kv for kv in props.items()] + [
        "-cp", ":".join(jars.classpath), "org.apache.zookeeper.ZooKeeperMain",
        "-server", "127.0.0.1:%d" % port, "create", "/from-java", "hello"]
    done = subprocess.run(argv, capture_output=True, timeout=120)
    output = (done.stdout + done.stderr).decode(errors="replace")
    assert "Created /from-java" in output, output[-3000:]
    with harness.started_client(KazooClient(hosts=srv.hosts, timeout=10)) as check:
        assert check.get("/from-java")[0] == b"hello"


def admin_get(port, https, ca):
    """The AdminServer's `ruok` over HTTP or HTTPS (status, body)."""
    import urllib.request
    context = ssl.create_default_context(cafile=ca) if https else None
    url = "%s://127.0.0.1:%d/commands/ruok" % ("https" if https else "http", port)
    with urllib.request.urlopen(url, timeout=10, context=context) as r:
        return r.status, r.read().decode()


def test_the_admin_server_over_https_with_the_quorum_keys(certs, started):
    """admin.forceHttps: HTTPS only, with ssl.quorum.* stores as ZooKeeper
    takes them; admin.portUnification: HTTP and HTTPS on one port."""
    ca = os.path.join(certs, "ca.crt")
    for unification in (False, True):
        admin_port = free_port()
        mode = {"admin.portUnification": "true"} if unification else {"admin.forceHttps": "true"}
        srv = harness.Server(kind="stoa", extra_cfg=dict(
            mode, **{"admin.enableServer": "true", "admin.serverAddress": "127.0.0.1",
                     "admin.serverPort": admin_port,
                     "ssl.quorum.keyStore.location": os.path.join(certs, "server.pem")}))
        started(srv)
        status, body = admin_get(admin_port, True, ca)
        assert status == 200 and '"command" : "ruok"' in body
        if unification:
            assert admin_get(admin_port, False, ca)[0] == 200
        else:
            with pytest.raises(Exception):
                admin_get(admin_port, False, ca)


def test_admin_snapshot_takes_the_x509_identity_of_the_client_certificate(certs, started):
    """`Authorization: x509` on the AdminServer over HTTPS with
    admin.needClientAuth: the client certificate's subject is the identity
    checked against the root's ACL (ZooKeeper's x509 scheme)."""
    import json
    import urllib.error
    import urllib.request
    admin_port = free_port()
    srv = harness.Server(kind="stoa", extra_cfg={
        "admin.enableServer": "true", "admin.serverAddress": "127.0.0.1",
        "admin.serverPort": admin_port, "admin.forceHttps": "true",
        "admin.needClientAuth": "true", "admin.rateLimiterIntervalInMS": "0",
        "ssl.quorum.keyStore.location": os.path.join(certs, "server.pem"),
        "ssl.quorum.trustStore.location": os.path.join(certs, "ca.crt")})
    started(srv)
    with harness.started_client(KazooClient(hosts=srv.hosts, timeout=10)) as c:
        c.set_acls("/", [ACL(Permissions.ALL, Id("x509", CLIENT_SUBJECT))])

    def snapshot(cert):
        context = ssl.create_default_context(cafile=os.path.join(certs, "ca.crt"))
        context.load_cert_chain(os.path.join(certs, cert + ".crt"), os.path.join(certs, cert + ".key"))
        request = urllib.request.Request(
            "https://127.0.0.1:%d/commands/snapshot?streaming=false" % admin_port,
            headers={"Authorization": "x509"})
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    status, headers, _ = snapshot("client")
    assert status == 200 and headers["last_zxid"].startswith("0x")
    status, _, body = snapshot("other")
    assert (status, json.loads(body)["error"]) == (403, "Not authorized")


def quorum_tls_cfg(certs, key_store="server.pem"):
    return {"sslQuorum": "true", "reconfigEnabled": "false",
            "ssl.quorum.keyStore.location": os.path.join(certs, key_store),
            "ssl.quorum.trustStore.location": os.path.join(certs, "ca.crt")}


def rogue_key_store(certs):
    """A key store whose certificate a CA of its own signed: the ensemble's
    trust store does not know it."""
    d = os.path.join(certs, "rogue")
    if not os.path.exists(os.path.join(d, "rogue.pem")):
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "ca.ext"), "w") as f:
            f.write("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n")
        make_cert(d, "ca", "/CN=Rogue CA", ca=False)
        make_cert(d, "rogue", "/CN=localhost/O=Rogue")
        with open(os.path.join(d, "rogue.pem"), "w") as out:
            for part in (".key", ".crt"):
                with open(os.path.join(d, "rogue" + part)) as f:
                    out.write(f.read())
    return os.path.join(d, "rogue.pem")


def restart_member_with(member, replace):
    """Stops `member`, rewrites its zoo.cfg with `replace` (old line to new
    line, or to None to drop it) and starts it without waiting for a leader."""
    member.stop()
    with open(member.cfg_path) as f:
        lines = f.read().splitlines()
    out = []
    for line in lines:
        key = line.split("=", 1)[0]
        if key in replace:
            if replace[key] is not None:
                out.append("%s=%s" % (key, replace[key]))
        else:
            out.append(line)
    with open(member.cfg_path, "w") as f:
        f.write("\n".join(out) + "\n")
    member.start(serving=False)


def test_an_ensemble_talks_over_tls_and_refuses_members_without_a_trusted_certificate(
        certs, request):
    """sslQuorum=true: the members elect a leader and replicate over mutual TLS with the
    ssl.quorum.* stores. A member whose certificate the trust store does not know, or that
    speaks plain TCP, never joins: it serves no session, the others go on writing."""
    ens = harness.Ensemble(kind="stoa", extra_cfg=quorum_tls_cfg(certs))
    request.addfinalizer(ens.cleanup)
    _, other = harness.ensemble_replicates(ens, "/over-tls")

    for replace, what in (({"ssl.quorum.keyStore.location": rogue_key_store(certs)},
                           "a certificate of another CA"),
                          ({"sslQuorum": None}, "plain TCP")):
        restart_member_with(ens.client_member, replace)
        time.sleep(3)  # several election timeouts: long enough to join, were it let in
        assert harness.srvr_mode(ens.client_member) not in ("follower", "leader"), what
        with harness.started_client(KazooClient(hosts=other.hosts, timeout=10)) as c2:
            c2.create("/while-refused-" + what.replace(" ", "-"), b"")
    # The members it dialled refused it (the client member may have led before it was restarted).
    assert any("TLS" in m.log_tail(400) for m in ens.members if m is not ens.client_member)


def test_a_rolling_switch_to_sslquorum_through_port_unification(certs, request):
    """portUnification=true: the quorum port takes TLS and plain connections side by side, so a running
    ensemble switches to sslQuorum one member at a time without losing its quorum, as ZooKeeper's guide
    does it: every member restarts with portUnification, then each with sslQuorum (dialing TLS while the
    others still dial plain), then each without portUnification. Writes go on between every restart and
    every member holds them all; at the end a member dialing plain TCP is refused."""
    stores = quorum_tls_cfg(certs)
    del stores["sslQuorum"]
    ens = harness.Ensemble(kind="stoa", extra_cfg=stores)
    request.addfinalizer(ens.cleanup)
    ens.start()
    written = []

    def write_and_check(tag):
        with harness.started_client(KazooClient(hosts=",".join(m.hosts for m in ens.members),
                                                timeout=10)) as c:
            c.create("/rolling-" + tag, b"")
        written.append("/rolling-" + tag)
        for m in ens.members:
            with harness.started_client(KazooClient(hosts=m.hosts, timeout=10)) as r:
                r.sync("/")
                assert all(r.exists(p) for p in written), (m, tag)

    write_and_check("start")
    for step, change in enumerate(({"portUnification": "true"}, {"sslQuorum": "true"},
                                   {"portUnification": None})):
        for i, m in enumerate(ens.members):
            m.stop()
            harness.set_member_cfg(m, change)
            m.start(serving=False)
            harness.wait_until(lambda: harness.srvr_mode(m) in ("follower", "leader"), timeout=30,
                               interval=0.1, what="member %d back after step %d" % (i + 1, step))
            write_and_check("%d-%d" % (step, i))
    # Every member now dials and accepts TLS only: one that dials plain TCP stays out.
    plain = ens.client_member
    plain.stop()
    harness.set_member_cfg(plain, {"sslQuorum": None})
    plain.start(serving=False)
    time.sleep(3)  # several election timeouts: long enough to join, were it let in
    assert harness.srvr_mode(plain) not in ("follower", "leader")


def test_sslquorum_without_its_stores_stops_the_server_with_a_clear_message(certs):
    srv = harness.Server(kind="stoa", extra_cfg={
        "sslQuorum": "true", "server.1": "127.0.0.1:%d:%d" % (free_port(), free_port()),
        "server.2": "127.0.0.1:%d:%d" % (free_port(), free_port())})
    harness.servers.write_myid(srv.data_dir, 1)
    assert "ssl.quorum.keyStore.location" in refused_start_log(srv)
    srv = harness.Server(kind="stoa", extra_cfg={
        "portUnification": "true", "server.1": "127.0.0.1:%d:%d" % (free_port(), free_port()),
        "server.2": "127.0.0.1:%d:%d" % (free_port(), free_port())})
    harness.servers.write_myid(srv.data_dir, 1)
    assert "portUnification=true needs ssl.quorum.keyStore.location" in refused_start_log(srv)
