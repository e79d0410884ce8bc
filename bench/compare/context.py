"""What the report says about the run: the machine, the versions."""

import os
import platform
import re
import subprocess

from . import REPO


def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20,
                              shell=isinstance(cmd, str)).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def workspace_version():
    m = re.search(r'^version\s*=\s*"([^"]+)"', open(os.path.join(REPO, "Cargo.toml")).read(), re.M)
    return m.group(1) if m else "?"


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = sh("awk '/MemTotal/ {printf \"%.1f GiB\", $2/1048576}' /proc/meminfo")
    return "%s, %d cores (%s), %s RAM, Linux %s" % (platform.machine(), os.cpu_count() or 0,
                                                   cpu, mem, platform.release())


def etcd_versions(binary):
    """(etcd version, Go version) from `etcd --version`."""
    text = sh([binary, "--version"])
    get = lambda prefix: next((line.split(":", 1)[1].strip() for line in text.splitlines()  # noqa: E731
                               if line.startswith(prefix)), "?")
    return get("etcd Version"), "Go " + get("Go Version").replace("go", "", 1)
