"""Differential test: the same seeded random operations against Stoa and Apache
ZooKeeper, compared field by field.

Runs whatever STOA_TARGET says (it starts both servers itself). Skipped when
the Stoa binary is missing. STOA_DIFF_KIND=zookeeper compares ZooKeeper with
itself (a self-check of this test). STOA_DIFF_SEEDS=1,2,3 picks seeds;
STOA_DIFF_OPS the number of ops per seed.
"""

import os
import random

import pytest

import harness as h
from harness import CreateMode, OP, Perms, ZkError

KIND = os.environ.get("STOA_DIFF_KIND", "stoa")
SEEDS = [int(s) for s in os.environ.get("STOA_DIFF_SEEDS", "1,2,3").split(",") if s]
N_OPS = int(os.environ.get("STOA_DIFF_OPS", "400"))

PATHS = ["/d", "/d/a", "/d/b", "/d/a/x", "/d/a/y", "/d/b/z", "/d/b/z/q", "/e", "/e/f",
         "/d/s-", "/e/s-"]
ACLS = [
    h.OPEN_ACL_UNSAFE,
    [(Perms.READ, "world", "anyone")],
    [(Perms.READ | Perms.CREATE | Perms.DELETE, "world", "anyone")],
    [(Perms.ALL, "digest", h.digest("u", "p"))],
    [(Perms.ALL, "ip", "127.0.0.1")],
    [(Perms.ALL, "world", "anyone"), (Perms.ALL, "world", "anyone")],
    [(Perms.ALL, "digest", "malformed")],
]
MODES = [CreateMode.PERSISTENT, CreateMode.EPHEMERAL, CreateMode.PERSISTENT_SEQUENTIAL,
         CreateMode.EPHEMERAL_SEQUENTIAL, CreateMode.PERSISTENT_WITH_TTL]


def gen_ops(seed, n):
    rnd = random.Random(seed)
    ops = []
    for _ in range(n):
        ops.append(gen_op(rnd, allow_multi=True))
    return ops


def gen_write(rnd):
    kind = rnd.choice(["create", "create", "create", "delete", "set", "check"])
    path = rnd.choice(PATHS)
    version = rnd.choice([-1, -1, 0, 1, 2])
    if kind == "create":
        acl = rnd.choice(ACLS) if rnd.random() < 0.2 else h.OPEN_ACL_UNSAFE
        mode = rnd.choice(MODES[:4])
        return ("create", path, rnd.choice([b"", b"x", b"data%d" % rnd.randrange(100)]), acl, mode)
    if kind == "delete":
        return ("delete", path, version)
    if kind == "set":
        return ("set", path, b"v%d" % rnd.randrange(1000), version)
    return ("check", path, version)


def gen_op(rnd, allow_multi):
    r = rnd.random()
    if r < 0.35:
        op = gen_write(rnd)
        if op[0] == "check":
            return ("exists", op[1])
        if op[0] == "create" and rnd.random() < 0.1:
            return ("create_ttl", op[1], op[2], op[3], rnd.choice([CreateMode.PERSISTENT_WITH_TTL,
                                                                   CreateMode.PERSISTENT_SEQUENTIAL_WITH_TTL]),
                    rnd.choice([3600000, 0]))
        return op
    if r < 0.45:
        return ("exists", rnd.choice(PATHS))
    if r < 0.55:
        return ("get", rnd.choice(PATHS))
    if r < 0.65:
        return ("get_children", rnd.choice(PATHS + ["/"]))
    if r < 0.72:
        return ("get_acl", rnd.choice(PATHS))
    if r < 0.78:
        return ("set_acl", rnd.choice(PATHS), rnd.choice(ACLS), rnd.choice([-1, 0, 1]))
    if r < 0.80:
        return ("get_all_children_number", rnd.choice(PATHS + ["/"]))
    if r < 0.82:
        return ("get_ephemerals", rnd.choice(["/", "/d", "/e/"]))
    if allow_multi:
        return ("multi", [gen_write(rnd) for _ in range(rnd.randint(1, 4))])
    return ("exists", rnd.choice(PATHS))


def run_op(c, op):
    """Run one op; return a comparable result (tuple) with raw stats inside."""
    kind = op[0]
    try:
        if kind == "create":
            path, st = c.create(op[1], op[2], acl=op[3], mode=op[4])
            return ("ok", path, st)
        if kind == "create_ttl":
            path, st = c.create(op[1], op[2], acl=op[3], mode=op[4], ttl=op[5])
            return ("ok", path, st)
        if kind == "delete":
            c.delete(op[1], op[2])
            return ("ok",)
        if kind == "set":
            return ("ok", c.set(op[1], op[2], op[3]))
        if kind == "exists":
            return ("ok", c.exists(op[1]))
        if kind == "get":
            return ("ok",) + tuple(c.get(op[1]))
        if kind == "get_children":
            ch, st = c.get_children(op[1])
            return ("ok", sorted(ch), st)
        if kind == "get_acl":
            acl, st = c.get_acl(op[1])
            return ("ok", sorted(acl), st)
        if kind == "set_acl":
            return ("ok", c.set_acl(op[1], op[2], op[3]))
        if kind == "get_all_children_number":
            return ("ok", c.get_all_children_number(op[1]))
        if kind == "get_ephemerals":
            return ("ok", sorted(c.get_ephemerals(op[1])))
        if kind == "multi":
            err, res = c.multi(op[1])
            norm = []
            for r in res:
                if r[0] == "create":
                    norm.append(("create", r[1]))   # 3.8 omits the stat of create2 in multi
                else:
                    norm.append(r)
            return ("multi", err, norm)
    except ZkError as e:
        return ("err", e.code)
    raise ValueError(kind)


STAT_ZXIDS = ("czxid", "mzxid", "pzxid")


def normalize(results, session_id):
    """Drop ctime/mtime, map ephemeralOwner to 'self', zxids to ranks."""
    zx = set()

    def collect(x):
        if isinstance(x, dict) and "czxid" in x:
            for k in STAT_ZXIDS:
                zx.add(x[k])
        elif isinstance(x, (list, tuple)):
            for y in x:
                collect(y)

    collect(results)
    rank = {z: i for i, z in enumerate(sorted(zx))}

    def conv(x):
        if isinstance(x, dict) and "czxid" in x:
            d = dict(x)
            d.pop("ctime")
            d.pop("mtime")
            for k in STAT_ZXIDS:
                d[k] = rank[d[k]]
            if d["ephemeralOwner"] == session_id:
                d["ephemeralOwner"] = "self"
            return d
        if isinstance(x, tuple):
            return tuple(conv(y) for y in x)
        if isinstance(x, list):
            return [conv(y) for y in x]
        return x

    return [conv(r) for r in results]


def dump_tree(c):
    out = []

    def walk(path):
        data, st = c.get(path)
        acl, _ = c.get_acl(path)
        out.append((path, data, st, sorted(acl)))
        ch, _ = c.get_children(path)
        for n in sorted(ch):
            walk(path.rstrip("/") + "/" + n)

    for n in sorted(c.get_children("/")[0]):
        if n != "zookeeper":
            walk("/" + n)
    return out


@pytest.fixture(scope="module")
def pair(request):
    if KIND == "stoa" and not os.access(h.stoa_bin(), os.X_OK):
        pytest.skip("Stoa binary missing at %s" % h.stoa_bin())
    servers = []
    try:
        for kind in (KIND, "zookeeper"):
            s = h.Server(kind=kind)
            servers.append(s)
            s.start()
        yield servers
    finally:
        for s in servers:
            s.cleanup()


def _super(c):
    c.add_auth("digest", ("super:" + h.SUPER_PASSWORD).encode())


def _wipe(c):
    def rm(p):
        for n in c.get_children(p)[0]:
            rm(p.rstrip("/") + "/" + n)
        if p != "/":
            c.delete(p)

    for n in c.get_children("/")[0]:
        if n != "zookeeper":
            rm("/" + n)


@pytest.mark.parametrize("seed", SEEDS)
def test_differential(pair, seed):
    """Seeded random ops give identical results and trees on Stoa and ZooKeeper."""
    print("differential seed=%d ops=%d kind=%s" % (seed, N_OPS, KIND))
    ops = gen_ops(seed, N_OPS)
    sides = []
    for srv in pair:
        admin = h.RawClient(srv.hosts)
        _super(admin)
        _wipe(admin)
        c = h.RawClient(srv.hosts)
        results = [run_op(c, op) for op in ops]
        sides.append((srv, c, results))
        admin.close()
    (sa, ca, ra), (sb, cb, rb) = sides
    na, nb = normalize(ra, ca.session_id), normalize(rb, cb.session_id)
    for i, (x, y) in enumerate(zip(na, nb)):
        assert x == y, "seed %d op #%d %r:\n  %s: %r\n  zookeeper: %r" % (seed, i, ops[i], sa.kind, x, y)
    # final trees, read as super so ACLs do not hide anything
    trees = []
    for srv, c, _ in sides:
        admin = h.RawClient(srv.hosts)
        _super(admin)
        trees.append(normalize([tuple(t) for t in dump_tree(admin)], c.session_id))
        admin.close()
    assert [t[0] for t in trees[0]] == [t[0] for t in trees[1]], "tree paths differ (seed %d)" % seed
    for x, y in zip(*trees):
        assert x == y, "seed %d final node differs:\n  %s: %r\n  zookeeper: %r" % (seed, sa.kind, x, y)
    for _, c, _ in sides:
        c.close()
    print("seed %d: %d ops, %d errors, %d nodes" % (seed, len(ops), sum(1 for r in ra if r[0] == "err"),
                                                   len(trees[0])))
