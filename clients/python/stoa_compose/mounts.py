"""The mount table: which ensemble owns a path.

A mount is a path prefix owned by one ensemble. A path belongs to the mount
with the longest prefix, compared by whole components ("/eu" owns "/eu" and
"/eu/x", not "/europe"). The ensemble sees the full path unchanged, so what
the composed client writes is at the same path for plain clients of that
ensemble.
"""

from .errors import NoMountError

SYNC_MODES = ("sync", "write")
# Outside every mount's subtree, so no composed read ever lists it (unless
# a mount is "/").
DEFAULT_SYNC_NODE = "/.stoa-compose-sync"
_MOUNT_KEYS = {"hosts", "sync", "sync_node"}


class Mount:
    """One prefix and the ensemble that owns it.

    sync: how a linearizable sync is made on that ensemble. "sync" sends the
    protocol's sync (linearizable on Stoa: it goes through the leader's
    log); "write" sends setData(sync_node, b"", -1), a no-op write, for
    Apache ZooKeeper, whose sync is not linearizable.
    """

    __slots__ = ("prefix", "hosts", "sync", "sync_node")

    def __init__(self, prefix, hosts, sync="sync", sync_node=DEFAULT_SYNC_NODE):
        self.prefix = prefix
        self.hosts = hosts
        self.sync = sync
        self.sync_node = sync_node

    def __repr__(self):
        return "Mount(%r, %r, sync=%r)" % (self.prefix, self.hosts, self.sync)


def _check_absolute(what, path):
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError("%s must be an absolute path, not %r" % (what, path))
    if path != "/" and (path.endswith("/") or "//" in path):
        raise ValueError("%s %r has an empty component" % (what, path))
    if any(part in (".", "..") for part in path.split("/")):
        raise ValueError("%s %r has a relative component" % (what, path))


def parse_mount(prefix, spec):
    """A Mount from one entry of the mounts dict: a hosts string, or a dict
    {"hosts": ..., "sync": "sync"|"write", "sync_node": path}."""
    _check_absolute("mount prefix", prefix)
    if isinstance(spec, str):
        spec = {"hosts": spec}
    if not isinstance(spec, dict):
        raise ValueError("mount %r: expected a hosts string or a dict, not %r" % (prefix, spec))
    unknown = set(spec) - _MOUNT_KEYS
    if unknown:
        raise ValueError("mount %r: unknown keys %s (known: %s)"
                         % (prefix, sorted(unknown), sorted(_MOUNT_KEYS)))
    hosts = spec.get("hosts")
    if not isinstance(hosts, str) or not hosts.strip():
        raise ValueError("mount %r: 'hosts' must be a non-empty string" % prefix)
    sync = spec.get("sync", "sync")
    if sync not in SYNC_MODES:
        raise ValueError("mount %r: 'sync' must be one of %s, not %r" % (prefix, SYNC_MODES, sync))
    sync_node = spec.get("sync_node", DEFAULT_SYNC_NODE)
    _check_absolute("mount %r: sync_node" % prefix, sync_node)
    if sync_node == "/":
        raise ValueError("mount %r: sync_node cannot be the root" % prefix)
    return Mount(prefix, hosts, sync, sync_node)


def owns(prefix, path):
    """Whether the mount at `prefix` holds `path`, by whole components."""
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


class MountTable:
    """Mounts by prefix; route(path) names the owner."""

    def __init__(self, mounts):
        if not isinstance(mounts, dict) or not mounts:
            raise ValueError("mounts must be a non-empty dict of path prefix -> hosts")
        self.mounts = {prefix: parse_mount(prefix, spec) for prefix, spec in mounts.items()}
        # Longest first: the first owner found is the deepest.
        self._by_depth = sorted(self.mounts.values(), key=lambda m: len(m.prefix), reverse=True)

    def __iter__(self):
        return iter(self.mounts.values())

    def __len__(self):
        return len(self.mounts)

    def names(self):
        return ", ".join(sorted(self.mounts))

    def route(self, path):
        """The Mount owning `path`; NoMountError when none does."""
        if not isinstance(path, str) or not path.startswith("/"):
            raise NoMountError("path %r is not absolute; mounts are %s" % (path, self.names()))
        for mount in self._by_depth:
            if owns(mount.prefix, path):
                return mount
        raise NoMountError("path %r is under no mount; mounts are %s" % (path, self.names()))
