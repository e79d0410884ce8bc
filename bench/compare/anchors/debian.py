"""Apache ZooKeeper and etcd from Debian's packages (zookeeper,
etcd-server), installed with apt-get where missing."""

import os
import shutil
import subprocess

from servers import DEBIAN_ZOOKEEPER, default_etcd_binary

from ..log import log
from . import AnchorUnavailable

APT_TIMEOUT_S = 900


def java_present():
    return shutil.which("java") is not None


def zookeeper_present():
    return DEBIAN_ZOOKEEPER.present() and java_present()


def etcd_present():
    return os.access(default_etcd_binary(), os.X_OK)


def apt_install(packages):
    """apt-get install of packages; AnchorUnavailable if that fails."""
    log("installing %s (apt-get)" % " ".join(packages))
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True, timeout=APT_TIMEOUT_S)
        # etcd-server's package may start a system etcd on 2379 where systemd
        # runs; ours uses its own ports and data dir, so that does not matter.
        subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "--no-install-recommends"]
                       + packages, check=True, env=env, timeout=APT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        raise AnchorUnavailable("apt-get install %s: %s" % (" ".join(packages), e))


def ensure(zookeeper, java, etcd, install):
    """Installs what is missing of Debian's ZooKeeper, a JRE (every
    ZooKeeper needs one) and Debian's etcd, of those asked for; returns
    {name: why} for those still missing (name: zookeeper, java, etcd)."""
    need = []
    if zookeeper and not zookeeper_present():
        need += ["zookeeper"]
    if (java or zookeeper) and not java_present():
        need += ["default-jre-headless"]
    if etcd and not etcd_present():
        need += ["etcd-server"]
    why = "not installed (apt-get install %s)" % " ".join(need)
    if need and install:
        try:
            apt_install(need)
        except AnchorUnavailable as e:
            why = str(e)
    missing = {}
    if zookeeper and not zookeeper_present():
        missing["zookeeper"] = why
    if (java or zookeeper) and not java_present():
        missing["java"] = why
    if etcd and not etcd_present():
        missing["etcd"] = why
    return missing
