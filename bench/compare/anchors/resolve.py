"""Which of the systems asked for can run here, each installed first
(Debian's packages, Maven Central's jars, etcd built from the Go module
proxy) where it is missing."""

from servers import DEBIAN_ZOOKEEPER, default_etcd_binary

from ..log import log
from ..systems import of_family
from . import Anchor, AnchorUnavailable, debian, gobuild, maven


def _anchor(system, missing, install):
    if system == "stoa":
        return Anchor(system)
    if system == "zookeeper":
        if "zookeeper" in missing:
            raise AnchorUnavailable("Debian's zookeeper: " + missing["zookeeper"])
        return Anchor(system, zookeeper=DEBIAN_ZOOKEEPER)
    if system == "etcd":
        if "etcd" in missing:
            raise AnchorUnavailable("Debian's etcd-server: " + missing["etcd"])
        return Anchor(system, etcd_binary=default_etcd_binary())
    if system == "zookeeper-3.9":
        if "java" in missing:
            raise AnchorUnavailable("no java: " + missing["java"])
        jars, version = maven.zookeeper(download=install)
        return Anchor(system, zookeeper=jars, version=version)
    if system == "etcd-3.6":
        binary, version = gobuild.etcd(build=install)
        return Anchor(system, etcd_binary=binary, version=version)
    raise ValueError(system)


def resolve(systems, explicit, install):
    """{system: Anchor} of those of `systems` that can run here, installed
    first where missing (unless not `install`: then only what is there or
    cached). One that cannot be had is logged and left out; if it is in
    `explicit` (asked for by name), AnchorUnavailable."""
    missing = debian.ensure("zookeeper" in systems, bool(of_family("zookeeper", systems)),
                            "etcd" in systems, install)
    out = {}
    for system in systems:
        try:
            out[system] = _anchor(system, missing, install)
        except AnchorUnavailable as e:
            if system in explicit:
                raise AnchorUnavailable("%s, asked for by name: %s" % (system, e))
            log("LEFT OUT of this run: %s (%s)" % (system, e))
    return out
