"""The anchors: the servers Stoa is measured against, and where each comes
from. Debian's packages (ZooKeeper 3.8, etcd 3.4) as before, and beside
them the newest releases: ZooKeeper 3.9 from Maven Central (maven.py),
etcd 3.6 built from the Go module proxy (gobuild.py), both cached under
target/anchors/.

An anchor that cannot be had is reported and left out of the run, unless
it was asked for by name (--systems), which makes the run stop
(resolve.py).
"""

import os

from .. import REPO

CACHE = os.path.join(REPO, "target", "anchors")


class AnchorUnavailable(Exception):
    """An anchor could not be installed; the message says why."""


class Anchor:
    """How to run one system here: a ZooKeeper's jars, or an etcd binary,
    and the version, where known before it runs."""

    def __init__(self, system, zookeeper=None, etcd_binary=None, version=None):
        self.system = system
        self.zookeeper = zookeeper
        self.etcd_binary = etcd_binary
        self.version = version
