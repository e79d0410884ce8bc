"""Installing what a run needs and is missing: the servers from Debian's
packages, the plotting venv, the stoa binary."""

import os
import shutil
import subprocess
import sys

from . import REPO
from .log import log
from servers import default_etcd_binary

VENV = os.path.join(REPO, "target", "bench-venv")
REQUIREMENTS = os.path.join(REPO, "bench", "requirements.txt")
ENTRY_POINT = os.path.join(REPO, "scripts", "bench-compare")


def ensure_servers(install, etcd):
    """Apache ZooKeeper (and a JRE) and etcd, from Debian's packages."""
    need = []
    if not (os.path.exists("/usr/share/java/zookeeper.jar") and shutil.which("java")):
        need += ["zookeeper", "default-jre-headless"]
    if etcd and not os.access(default_etcd_binary(), os.X_OK):
        need += ["etcd-server"]
    if not need:
        return
    if not install:
        sys.exit("bench-compare: missing %s (apt-get install %s%s)"
                 % (", ".join(need), " ".join(need),
                    "; or --no-etcd" if "etcd-server" in need else ""))
    log("installing %s (apt-get)" % " ".join(need))
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True)
    # etcd-server's package may start a system etcd on 2379 where systemd
    # runs; ours uses its own ports and data dir, so that does not matter.
    subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + need,
                   check=True, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def ensure_plotting_venv(install):
    """Re-exec inside target/bench-venv (created from bench/requirements.txt)."""
    if os.environ.get("BENCH_COMPARE_IN_VENV") == "1" or not install:
        return
    py = os.path.join(VENV, "bin", "python")
    stamp = os.path.join(VENV, ".requirements")
    want = open(REQUIREMENTS).read()
    try:
        if not os.path.exists(py) or open(stamp).read() != want:
            log("creating %s" % VENV)
            subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
            subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            "-r", REQUIREMENTS], check=True)
            with open(stamp, "w") as f:
                f.write(want)
    except (subprocess.CalledProcessError, OSError) as e:
        log("no plotting venv (%s); tables only" % e)
        return
    os.environ["BENCH_COMPARE_IN_VENV"] = "1"
    os.execv(py, [py, ENTRY_POINT] + sys.argv[1:])


def stoa_binary(build):
    if os.environ.get("STOA_BIN"):
        return os.environ["STOA_BIN"]
    # Where cargo puts it: CARGO_TARGET_DIR (relative to the workspace) or target/.
    target = os.path.join(REPO, os.environ.get("CARGO_TARGET_DIR") or "target")
    if build:
        log("cargo build --release -p stoa")
        subprocess.run(["cargo", "build", "--release", "-p", "stoa"], cwd=REPO, check=True)
    return os.path.join(target, "release", "stoa")
