"""etcd's keys over its HTTP gateway (JSON, base64 keys and values), for
the resource section's marker and counts; the load itself goes through
`stoa bench --target etcd` (gRPC)."""

import base64


def _b64(b):
    return base64.b64encode(b).decode()


def put(srv, key, value, timeout=10.0):
    srv.call("/v3/kv/put", body={"key": _b64(key.encode()), "value": _b64(value)},
             timeout=timeout)


def read(srv, key, timeout=2.0):
    """The value of key (a linearizable range), or None."""
    r = srv.call("/v3/kv/range", body={"key": _b64(key.encode())}, timeout=timeout)
    kvs = r.get("kvs") or []
    return base64.b64decode(kvs[0].get("value", "")) if kvs else None


def key_count(srv, timeout=30.0):
    """Keys in the keyspace (a count-only range over all of it), or None."""
    try:
        r = srv.call("/v3/kv/range", body={"key": "AA==", "range_end": "AA==",
                                           "count_only": True}, timeout=timeout)
        return int(r.get("count", 0))
    except (OSError, ValueError):
        return None


def db_size(srv):
    """Bytes of the backend database (etcd's Maintenance.Status), or None."""
    try:
        return int(srv.call("/v3/maintenance/status", body={}).get("dbSize", 0))
    except (OSError, ValueError):
        return None
