"""etcd 3.6 built from the Go module proxy: a wrapper module whose main
calls etcd's own (go.etcd.io/etcd/server/v3/etcdmain), the newest v3.6.x
release the proxy has, built once into target/anchors/etcd-<version>/etcd.
(`go install` of etcd's module refuses: its go.mod has replace directives.)"""

import glob
import os
import shutil
import subprocess
import time

from ..log import log
from . import CACHE, AnchorUnavailable

ETCD_MODULE = "go.etcd.io/etcd/server/v3"
# A version prefix: go get takes the newest release that starts with it.
ETCD_SERIES = "v3.6"
GO_FALLBACK = "/usr/local/go/bin/go"
# Bounds on the module download and the build (a fresh machine's first
# build, 2 cores, compiles some 600 packages).
GO_GET_TIMEOUT_S = 900
GO_BUILD_TIMEOUT_S = 1800

MAIN_GO = """\
// The etcd server: etcd's own main, from its module at the version go.mod names.
package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


def go_binary():
    go = shutil.which("go") or (GO_FALLBACK if os.access(GO_FALLBACK, os.X_OK) else None)
    if go is None:
        raise AnchorUnavailable("no Go toolchain (go on PATH or %s)" % GO_FALLBACK)
    return go


def cached():
    """(binary, version) of the newest etcd 3.6 built before, or None."""
    best = None
    for path in glob.glob(os.path.join(CACHE, "etcd-3.6.*", "etcd")):
        version = os.path.basename(os.path.dirname(path))[len("etcd-"):]
        key = tuple(int(x) for x in version.split(".") if x.isdigit())
        if os.access(path, os.X_OK) and (best is None or key > best[0]):
            best = (key, path, version)
    return best[1:] if best else None


def _go(go, args, cwd, timeout):
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod")
    try:
        p = subprocess.run([go] + args, cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AnchorUnavailable("go %s: still running after %d s" % (" ".join(args), timeout))
    if p.returncode != 0:
        raise AnchorUnavailable("go %s failed (%d): %s"
                                % (" ".join(args), p.returncode, p.stderr.strip()[-2000:]))
    return p.stdout.strip()


def etcd(build=True):
    """(binary, version) of etcd 3.6, built first if none is cached (and
    `build`)."""
    have = cached()
    if have:
        return have
    if not build:
        raise AnchorUnavailable("none built in %s (and --no-install)" % CACHE)
    go = go_binary()
    work = os.path.join(CACHE, "build-etcd-3.6")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    t0 = time.monotonic()
    log("building etcd %s.x from the Go module proxy in %s (minutes on a fresh machine)"
        % (ETCD_SERIES, work))
    with open(os.path.join(work, "main.go"), "w") as f:
        f.write(MAIN_GO)
    _go(go, ["mod", "init", "stoa-bench/etcd"], work, 60)
    _go(go, ["get", "%s@%s" % (ETCD_MODULE, ETCD_SERIES)], work, GO_GET_TIMEOUT_S)
    _go(go, ["mod", "tidy"], work, GO_GET_TIMEOUT_S)
    version = _go(go, ["list", "-m", "-f", "{{.Version}}", ETCD_MODULE], work, 60).lstrip("v")
    dest = os.path.join(CACHE, "etcd-" + version)
    os.makedirs(dest, exist_ok=True)
    _go(go, ["build", "-trimpath", "-o", os.path.join(dest, "etcd.part"), "."], work,
        GO_BUILD_TIMEOUT_S)
    os.replace(os.path.join(dest, "etcd.part"), os.path.join(dest, "etcd"))
    shutil.rmtree(work, ignore_errors=True)
    log("built etcd %s in %.0f s: %s" % (version, time.monotonic() - t0, dest))
    return os.path.join(dest, "etcd"), version
