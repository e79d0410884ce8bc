"""The systems compared, by the keys that results.json and the report use.

`zookeeper` and `etcd` are Debian's packages (3.8 and 3.4 on bookworm),
the keys the first results had; `zookeeper-3.9` and `etcd-3.6` are the
newest releases beside them (anchors/). A system's family is the server
and protocol it is, what the runner and the measurements switch on; its
labels name the version measured (note_versions), so that every ratio in
the report says which ZooKeeper or etcd it is against."""

SYSTEMS = ("zookeeper", "zookeeper-3.9", "stoa", "etcd", "etcd-3.6")
FAMILY = {"zookeeper": "zookeeper", "zookeeper-3.9": "zookeeper", "stoa": "stoa",
          "etcd": "etcd", "etcd-3.6": "etcd"}
DEBIAN = ("zookeeper", "etcd")
COLORS = {"zookeeper": "tab:blue", "zookeeper-3.9": "tab:purple", "stoa": "tab:orange",
          "etcd": "tab:green", "etcd-3.6": "tab:olive"}
# --quick runs these on every cell, the others on a few (matrix.QUICK_CELLS).
QUICK_EVERY_CELL = ("zookeeper", "stoa")
_SHORT_NAME = {"zookeeper": "ZK", "stoa": "Stoa", "etcd": "etcd"}
_LONG_NAME = {"zookeeper": "ZooKeeper", "stoa": "Stoa", "etcd": "etcd"}
# Until a run says which version it measured.
_UNKNOWN_VERSION = {"zookeeper": "(Debian)", "zookeeper-3.9": "3.9", "etcd": "(Debian)",
                    "etcd-3.6": "3.6"}
_versions = {}


def family(system):
    return FAMILY[system]


def of_family(name, systems):
    """The systems of family `name` among `systems`, in SYSTEMS order."""
    return [k for k in SYSTEMS if k in systems and FAMILY[k] == name]


def note_versions(versions):
    """system -> version string ("3.8.0") of the servers the labels name."""
    _versions.clear()
    _versions.update({k: v for k, v in (versions or {}).items() if v and v != "?"})


def version(system):
    return _versions.get(system)


def short(system):
    """A table heading's name: ZK 3.8.0, ZK 3.9.5, Stoa, etcd 3.4.23, ..."""
    if system == "stoa":
        return "Stoa"
    return "%s %s" % (_SHORT_NAME[FAMILY[system]],
                      _versions.get(system) or _UNKNOWN_VERSION[system])


def long(system):
    """A sentence's name: ZooKeeper 3.8.0 (Debian), ZooKeeper 3.9.5, Stoa, ..."""
    if system == "stoa":
        return "Stoa"
    v = _versions.get(system)
    if v is None:
        return "%s %s" % (_LONG_NAME[FAMILY[system]], _UNKNOWN_VERSION[system])
    return "%s %s%s" % (_LONG_NAME[FAMILY[system]], v, " (Debian)" if system in DEBIAN else "")
