"""Apache ZooKeeper 3.9 (and 3.5, for one benchmark) from Maven Central:
its jar and the jars it needs at run time, each checked against Maven
Central's .sha1, cached under target/anchors/zookeeper-<version>/."""

import hashlib
import os
import urllib.error
import urllib.request

from servers import ZooKeeperJars

from ..log import log
from . import CACHE, AnchorUnavailable

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
ZOOKEEPER_VERSION = "3.9.5"
DOWNLOAD_TIMEOUT_S = 120

# (group, artifact, version): the compile-scope dependencies of
# org.apache.zookeeper:zookeeper:3.9.5's POM and theirs, versions from its
# parent POM, less what only TLS or the Netty connection factory load
# (netty-tcnative-boringssl-static, netty-transport-native-epoll), which a
# server on 127.0.0.1 with the default NIO factory never does; plus
# logback (the POM's optional runtime logging backend, as upstream's
# tarball ships it), metrics-core and snappy-java (the POM says provided,
# but the server's metrics need the one, and its snapshot streams load the
# other's classes, at start).
ZOOKEEPER_ARTIFACTS = (
    ("org.apache.zookeeper", "zookeeper", ZOOKEEPER_VERSION),
    ("org.apache.zookeeper", "zookeeper-jute", ZOOKEEPER_VERSION),
    ("org.apache.yetus", "audience-annotations", "0.12.0"),
    ("io.netty", "netty-handler", "4.1.130.Final"),
    ("io.netty", "netty-common", "4.1.130.Final"),
    ("io.netty", "netty-resolver", "4.1.130.Final"),
    ("io.netty", "netty-buffer", "4.1.130.Final"),
    ("io.netty", "netty-transport", "4.1.130.Final"),
    ("io.netty", "netty-transport-native-unix-common", "4.1.130.Final"),
    ("io.netty", "netty-codec", "4.1.130.Final"),
    ("org.slf4j", "slf4j-api", "2.0.13"),
    ("ch.qos.logback", "logback-classic", "1.3.15"),
    ("ch.qos.logback", "logback-core", "1.3.15"),
    ("commons-io", "commons-io", "2.17.0"),
    ("io.dropwizard.metrics", "metrics-core", "4.1.12.1"),
    ("org.xerial.snappy", "snappy-java", "1.1.10.5"),
)

# What ZooKeeper's AdminServer loads besides (its POM says "provided"):
# Jetty and Jackson at the versions of ZooKeeper 3.9.5's parent POM. Only
# the AdminServer's differential test asks for them.
JETTY_VERSION = "9.4.58.v20250814"
JACKSON_VERSION = "2.15.2"
ADMIN_ARTIFACTS = tuple(
    [("org.eclipse.jetty", a, JETTY_VERSION)
     for a in ("jetty-server", "jetty-servlet", "jetty-http", "jetty-io", "jetty-util",
               "jetty-security", "jetty-util-ajax")]
    + [("javax.servlet", "javax.servlet-api", "3.1.0")]
    + [("com.fasterxml.jackson.core", a, JACKSON_VERSION)
       for a in ("jackson-databind", "jackson-core", "jackson-annotations")])
# What its command-line client (ZooKeeperMain) loads besides: commons-cli,
# at the parent POM's version, and Netty's epoll classes. Only the TLS
# test's Java client asks.
CLI_ARTIFACTS = (("commons-cli", "commons-cli", "1.5.0"),
                 # Its Netty socket (for TLS) looks for epoll's classes.
                 ("io.netty", "netty-transport-classes-epoll", "4.1.130.Final"))


def artifact_url(group, artifact, version):
    return "%s/%s/%s/%s/%s-%s.jar" % (MAVEN_CENTRAL, group.replace(".", "/"), artifact,
                                      version, artifact, version)


def _get(url):
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as r:
        return r.read()


def fetch(group, artifact, version, dest_dir):
    """The jar's path in dest_dir, downloaded first if missing. A jar is
    written only once its SHA-1 matches Maven Central's, so one present is
    one checked."""
    path = os.path.join(dest_dir, "%s-%s.jar" % (artifact, version))
    if os.path.exists(path):
        return path
    url = artifact_url(group, artifact, version)
    try:
        data = _get(url)
        want = _get(url + ".sha1").decode("ascii", "replace").split()[0].lower()
    except (OSError, urllib.error.URLError, IndexError) as e:
        raise AnchorUnavailable("downloading %s: %s" % (url, e))
    got = hashlib.sha1(data).hexdigest()
    if got != want:
        raise AnchorUnavailable("%s: SHA-1 %s, Maven Central says %s" % (url, got, want))
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path


def zookeeper(download=True, admin=False, cli=False):
    """(ZooKeeperJars, version) of Apache ZooKeeper ZOOKEEPER_VERSION,
    fetched into the cache if need be (and `download`); with `admin`, also
    the jars its AdminServer needs; with `cli`, those of ZooKeeperMain."""
    artifacts = (ZOOKEEPER_ARTIFACTS + (ADMIN_ARTIFACTS if admin else ())
                 + (CLI_ARTIFACTS if cli else ()))
    jars = _fetch_all(ZOOKEEPER_VERSION, artifacts, download)
    return ZooKeeperJars(jars, "logback"), ZOOKEEPER_VERSION


# Apache ZooKeeper 3.5, the last line before ZOOKEEPER-2024 (3.6.0): its
# commit processor holds every session's reads behind any write in flight,
# the server *without* ZooNet's per-session isolation (the paper's Fig. 4
# baseline). The compile-scope dependencies of its POM, versions from its
# parent POM, Netty without the epoll transport (NIO is the default), and
# reload4j through slf4j as the log4j 1.2 backend it was tested with.
ZOOKEEPER_35_VERSION = "3.5.10"
ZOOKEEPER_35_ARTIFACTS = (
    ("org.apache.zookeeper", "zookeeper", ZOOKEEPER_35_VERSION),
    ("org.apache.zookeeper", "zookeeper-jute", ZOOKEEPER_35_VERSION),
    ("org.apache.yetus", "audience-annotations", "0.5.0"),
    ("io.netty", "netty-handler", "4.1.77.Final"),
    ("io.netty", "netty-common", "4.1.77.Final"),
    ("io.netty", "netty-resolver", "4.1.77.Final"),
    ("io.netty", "netty-buffer", "4.1.77.Final"),
    ("io.netty", "netty-transport", "4.1.77.Final"),
    ("io.netty", "netty-transport-native-unix-common", "4.1.77.Final"),
    ("io.netty", "netty-codec", "4.1.77.Final"),
    ("org.slf4j", "slf4j-api", "1.7.36"),
    ("org.slf4j", "slf4j-reload4j", "1.7.36"),
    ("ch.qos.reload4j", "reload4j", "1.2.19"),
)


def zookeeper_35(download=True):
    """(ZooKeeperJars, version) of Apache ZooKeeper ZOOKEEPER_35_VERSION."""
    jars = _fetch_all(ZOOKEEPER_35_VERSION, ZOOKEEPER_35_ARTIFACTS, download)
    return ZooKeeperJars(jars, "log4j"), ZOOKEEPER_35_VERSION


def _fetch_all(version, artifacts, download):
    dest = os.path.join(CACHE, "zookeeper-" + version)
    os.makedirs(dest, exist_ok=True)
    missing = [a for a in artifacts
               if not os.path.exists(os.path.join(dest, "%s-%s.jar" % a[1:]))]
    if missing and not download:
        raise AnchorUnavailable("%d jars not in %s (and --no-install)" % (len(missing), dest))
    if missing:
        log("fetching ZooKeeper %s from Maven Central: %d jars into %s"
            % (version, len(missing), dest))
    return [fetch(g, a, v, dest) for g, a, v in artifacts]
