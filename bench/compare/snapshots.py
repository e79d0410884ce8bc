"""Where each server keeps its newest snapshot, and what one holds."""

import os


def newest_snapshot(kind, data_dir):
    """(path, position) of the newest complete snapshot file, or (None, None):
    Stoa's snapshots/snap-<raft index>-<term>, ZooKeeper's
    version-2/snapshot.<zxid>; etcd's state is its bbolt backend,
    member/snap/db (its raft .snap files hold only membership and the v2
    store; a member behind is sent the db)."""
    if kind == "etcd":
        path = os.path.join(data_dir, "member", "snap", "db")
        return (path, 0) if os.path.exists(path) else (None, None)
    if kind == "stoa":
        d, prefix = os.path.join(data_dir, "snapshots"), "snap-"
        pos = lambda n: int(n.split("-")[1])  # noqa: E731
    else:
        d, prefix = os.path.join(data_dir, "version-2"), "snapshot."
        pos = lambda n: int(n.split(".")[1], 16)  # noqa: E731
    best = None
    try:
        for name in os.listdir(d):
            if not name.startswith(prefix) or name.endswith(".tmp"):
                continue
            try:
                p = pos(name)
            except (ValueError, IndexError):
                continue
            if best is None or p > best[1]:
                best = (os.path.join(d, name), p)
    except OSError:
        pass
    return best or (None, None)


def stoa_snapshot_nodes(path):
    """node_count from a Stoa snapshot's END chunk (docs/format-snapshot.md):
    kind u8 = 4, count u32, len u32 = 28, payload (node_count u64, ...), crc."""
    import struct
    try:
        with open(path, "rb") as f:
            f.seek(-41, os.SEEK_END)
            tail = f.read(41)
        kind, _, length, nodes = struct.unpack(">BIIQ", tail[:17])
        return nodes if kind == 4 and length == 28 else None
    except (OSError, struct.error):
        return None
