"""A throwaway MIT Kerberos KDC for the end-to-end tests (Debian's krb5-kdc,
krb5-admin-server and krb5-user, which scripts/setup-test-env installs).

Everything lives in one temporary directory: the realm's database, its
krb5.conf and kdc.conf (named to the tools by KRB5_CONFIG and
KRB5_KDC_PROFILE, never the machine's own), keytabs and ticket caches. The
KDC listens on 127.0.0.1 at a free port (TCP; clients are told to use TCP
only), runs in the foreground and is stopped by its PID; every wait is
bounded.
"""

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time

import servers

TOOLS = ("kdb5_util", "krb5kdc", "kadmin.local", "kinit")
SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


@contextlib.contextmanager
def running(realm):
    """A started KDC for `realm`, its variables set (KRB5_CONFIG and the
    rest) for the processes started meanwhile; stopped and removed after.
    Skips the test, saying why, where no KDC can run."""
    import pytest
    why = unavailable_reason()
    if why is not None:
        pytest.skip(why)
    k = Kdc(realm)
    with pytest.MonkeyPatch.context() as env:
        for key, value in k.env().items():
            env.setenv(key, value)
        try:
            k.start()
            yield k
        finally:
            k.cleanup()


def jaas_section(section, keytab, principal):
    """A JAAS section logging in with Kerberos from `keytab` as ZooKeeper's
    Java side reads it (Krb5LoginModule)."""
    return """%s {
       com.sun.security.auth.module.Krb5LoginModule required
       useKeyTab=true
       keyTab="%s"
       storeKey=true
       useTicketCache=false
       principal="%s";
};
""" % (section, keytab, principal)


def _tool(name):
    found = shutil.which(name)
    if found:
        return found
    for d in SBIN:
        path = os.path.join(d, name)
        if os.access(path, os.X_OK):
            return path
    return None


def unavailable_reason():
    """Why a KDC cannot be started here (None: it can)."""
    missing = [t for t in TOOLS if _tool(t) is None]
    if missing:
        return ("MIT Kerberos tools missing: %s (scripts/setup-test-env installs krb5-kdc, "
                "krb5-admin-server, krb5-user)" % ", ".join(missing))
    return None


KRB5_CONF = """\
[libdefaults]
  default_realm = {realm}
  dns_lookup_kdc = false
  dns_lookup_realm = false
  dns_canonicalize_hostname = false
  rdns = false
  udp_preference_limit = 1
  ticket_lifetime = 1h
[realms]
  {realm} = {{
    kdc = 127.0.0.1:{port}
  }}
[domain_realm]
  localhost = {realm}
  127.0.0.1 = {realm}
"""

KDC_CONF = """\
[kdcdefaults]
  kdc_listen = 127.0.0.1:{port}
  kdc_tcp_listen = 127.0.0.1:{port}
[realms]
  {realm} = {{
    database_name = {dir}/principal
    key_stash_file = {dir}/stash
    acl_file = {dir}/kadm5.acl
    max_life = 1h
  }}
[logging]
  kdc = FILE:{dir}/kdc.log
"""


class Kdc:
    """A realm with its KDC. env() is what a process needs to use it."""

    def __init__(self, realm="STOA.TEST"):
        self.realm = realm
        self.dir = tempfile.mkdtemp(prefix="stoa-e2e-kdc-")
        self.port = servers.free_port()
        self.krb5_conf = os.path.join(self.dir, "krb5.conf")
        self.kdc_conf = os.path.join(self.dir, "kdc.conf")
        # A collection of ticket caches, one per client principal kinit'ed.
        self.ccache = "DIR:" + os.path.join(self.dir, "ccaches")
        os.makedirs(os.path.join(self.dir, "ccaches"))
        os.makedirs(os.path.join(self.dir, "rcache"))
        fill = dict(realm=realm, port=self.port, dir=self.dir)
        with open(self.krb5_conf, "w") as f:
            f.write(KRB5_CONF.format(**fill))
        with open(self.kdc_conf, "w") as f:
            f.write(KDC_CONF.format(**fill))
        with open(os.path.join(self.dir, "kadm5.acl"), "w") as f:
            f.write("")
        self.proc = None
        self._log = None

    def env(self):
        """The variables that point Kerberos at this realm: its config,
        the ticket caches, a replay cache inside the directory."""
        return {"KRB5_CONFIG": self.krb5_conf, "KRB5_KDC_PROFILE": self.kdc_conf,
                "KRB5CCNAME": self.ccache,
                "KRB5RCACHEDIR": os.path.join(self.dir, "rcache")}

    def _run(self, argv, timeout=30):
        env = dict(os.environ)
        env.update(self.env())
        done = subprocess.run(argv, env=env, capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError("%s failed (%d): %s" % (
                " ".join(argv), done.returncode, (done.stdout + done.stderr).decode(errors="replace")))
        return done.stdout.decode(errors="replace")

    def start(self, timeout=20.0):
        self._run([_tool("kdb5_util"), "create", "-s", "-r", self.realm,
                   "-P", os.urandom(12).hex()])
        env = dict(os.environ)
        env.update(self.env())
        self._log = open(os.path.join(self.dir, "krb5kdc.out"), "ab")
        self.proc = subprocess.Popen([_tool("krb5kdc"), "-n", "-r", self.realm], env=env,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        with servers._LIVE_LOCK:  # killed at exit, with the servers, if a test leaves it
            servers._LIVE.add(self.proc)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("krb5kdc exited with %s: %s" % (self.proc.returncode, self.log_tail()))
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("krb5kdc not listening after %.0fs: %s" % (timeout, self.log_tail()))

    def kadmin(self, query):
        return self._run([_tool("kadmin.local"), "-r", self.realm, "-q", query])

    def add_principal(self, name):
        """A principal with a random key; its full name."""
        self.kadmin("addprinc -randkey %s" % name)
        return "%s@%s" % (name, self.realm)

    def keytab(self, principal):
        """A keytab with `principal`'s current keys (exported once, the
        keys not changed: -norandkey)."""
        path = os.path.join(self.dir, principal.replace("/", "_") + ".keytab")
        if not os.path.exists(path):
            self.kadmin("ktadd -norandkey -k %s %s" % (path, principal))
        return path

    def kinit(self, principal):
        """A ticket for `principal` in the cache collection, from its keytab."""
        self._run([_tool("kinit"), "-k", "-t", self.keytab(principal), principal])

    def log_tail(self, n=20):
        lines = []
        for name in ("krb5kdc.out", "kdc.log"):
            try:
                with open(os.path.join(self.dir, name), "rb") as f:
                    lines += f.read().decode("utf-8", "replace").splitlines()[-n:]
            except OSError:
                pass
        return "\n".join(lines)

    def stop(self, timeout=10.0):
        if self.proc is not None:
            servers.terminate(self.proc, timeout)
            with servers._LIVE_LOCK:
                servers._LIVE.discard(self.proc)
        if self._log:
            self._log.close()
            self._log = None

    def cleanup(self):
        self.stop()
        if not os.environ.get("STOA_E2E_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)
