"""The Rust client's recipes (tests/recipes.rs, crates/client/src/recipes)
against the server under test, and against Apache ZooKeeper 3.9.5 (Debian's
3.8 when 3.9.5's jars cannot be had): the compiled test binary, pointed at
a running server by STOA_RECIPES_ZK, runs every scenario there."""

import json
import os
import sys
import shutil
import subprocess

import pytest

import harness
import servers

# The binary's own tests are bounded (60 s each, run two at a time).
RUN_LIMIT_S = 100
BUILD_LIMIT_S = 600

_binary = []


def recipes_binary():
    """The compiled tests/recipes.rs, built (a no-op after scripts/test's
    cargo test) where cargo puts it; skips where there is no cargo."""
    if _binary:
        return _binary[0]
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.skip("no cargo to build tests/recipes.rs")
    built = subprocess.run(
        [cargo, "test", "--release", "--test", "recipes", "--no-run", "--message-format=json"],
        cwd=harness.REPO_ROOT, capture_output=True, text=True, timeout=BUILD_LIMIT_S)
    assert built.returncode == 0, built.stderr[-4000:]
    for line in built.stdout.splitlines():
        message = json.loads(line)
        if (message.get("reason") == "compiler-artifact"
                and message["target"]["name"] == "recipes" and message.get("executable")):
            _binary.append(message["executable"])
            return message["executable"]
    pytest.fail("cargo built no recipes test binary")


def run_recipes(hosts):
    env = dict(os.environ, STOA_RECIPES_ZK=hosts, RUST_BACKTRACE="1")
    result = subprocess.run([recipes_binary()], env=env, capture_output=True, text=True,
                            timeout=RUN_LIMIT_S)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    assert "test result: ok" in output, output[-8000:]


def test_rust_recipes_against_the_server_under_test(server):
    """Every pass: standalone Stoa, a follower of a Stoa ensemble,
    partitions=2, or the ZooKeeper target."""
    run_recipes(server.hosts)


def zookeeper_jars():
    """3.9.5 from Maven (cached under target/anchors), else Debian's 3.8."""
    if shutil.which("java") is None and not os.path.exists("/usr/bin/java"):
        pytest.skip("no java for ZooKeeper")
    if harness.REPO_ROOT not in sys.path:
        sys.path.insert(0, harness.REPO_ROOT)
    from bench.compare.anchors import AnchorUnavailable, maven
    try:
        jars, _ = maven.zookeeper()
        return jars
    except AnchorUnavailable as why:
        if servers.DEBIAN_ZOOKEEPER.present():
            return servers.DEBIAN_ZOOKEEPER
        pytest.skip("neither ZooKeeper 3.9.5 (%s) nor Debian's 3.8 is here" % why)


def test_rust_recipes_against_apache_zookeeper(request):
    """Once, in the plain Stoa pass: the scenarios do not depend on the
    target, and the ZooKeeper target's pass covers 3.8 already."""
    if harness.target_name() != "stoa" or harness.stoa_partitions() != 1:
        pytest.skip("runs in the plain stoa pass (STOA_TARGET=stoa, partitions=1)")
    srv = harness.Server(kind="zookeeper", zookeeper=zookeeper_jars())
    request.addfinalizer(srv.cleanup)
    srv.start()
    run_recipes(srv.hosts)
