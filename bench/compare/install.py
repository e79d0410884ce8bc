"""Installing what a run needs and is missing: the plotting venv and the
stoa binary (the servers: anchors/)."""

import os
import subprocess
import sys

from . import REPO
from .log import log

VENV = os.path.join(REPO, "target", "bench-venv")
REQUIREMENTS = os.path.join(REPO, "bench", "requirements.txt")
ENTRY_POINT = os.path.join(REPO, "scripts", "bench-compare")


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
