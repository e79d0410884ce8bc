"""A linearizability checker for one versioned register (a znode's data and
version), after Wing & Gong with Lowe's memoisation: search for an order of
the operations that respects real time (an operation that returned before
another was invoked comes first) and the register's sequential behaviour.

Operations whose outcome the client never learned (connection lost
mid-call) are indeterminate: they may have taken effect at any point after
their invocation, or not at all.

Several registers (znodes) are checked one at a time (check_per_key):
linearizability is local (Herlihy & Wing), so a history is linearizable iff
each register's sub-history is. corrupt_stale_read/corrupt_duplicate_version
turn a history into one that is certainly not linearizable (a read one
version stale; two updates reporting the same version), to show that a
check of a recorded history could have failed.
"""

import copy
import math

READ, WRITE, CAS = "read", "write", "cas"


class Op:
    """kind: READ (result: (value, version)), WRITE (arg: value; result: new
    version), CAS (arg: (expected version, value); result: new version or
    None for BadVersion). `end` is math.inf when indeterminate."""

    __slots__ = ("kind", "arg", "result", "start", "end", "client")

    def __init__(self, kind, arg, result, start, end, client):
        self.kind, self.arg, self.result = kind, arg, result
        self.start, self.end, self.client = start, end, client

    @property
    def indeterminate(self):
        return self.end == math.inf

    def __repr__(self):
        return "Op(%s %r -> %r, [%.4f, %s], c%d)" % (self.kind, self.arg, self.result, self.start,
                                                     "?" if self.indeterminate else "%.4f" % self.end,
                                                     self.client)


def step(op, state):
    """The register's sequential spec: (ok, next state) for op in state."""
    value, version = state
    if op.kind == READ:
        return (op.result == (value, version)), state
    if op.kind == WRITE:
        nxt = (op.arg, version + 1)
        return (op.indeterminate or op.result == nxt[1]), nxt
    expected, new_value = op.arg
    if expected == version:
        nxt = (new_value, version + 1)
        return (op.indeterminate or op.result == nxt[1]), nxt
    return (op.indeterminate or op.result is None), state


def check(ops, initial, budget=2_000_000):
    """True if the history is linearizable; raises if the search exceeds
    `budget` steps (then the history is too large to decide, not wrong)."""
    ops = sorted(ops, key=lambda o: o.start)
    n = len(ops)
    full = (1 << n) - 1
    seen = set()
    steps = [0]

    def search(done, state):
        if done == full:
            return True
        key = (done, state)
        if key in seen:
            return False
        steps[0] += 1
        if steps[0] > budget:
            raise RuntimeError("linearizability search exceeded %d steps" % budget)
        pending = [i for i in range(n) if not done >> i & 1]
        if all(ops[i].indeterminate for i in pending):
            return True  # the rest may never have happened
        first_end = min(ops[i].end for i in pending)
        for i in pending:
            op = ops[i]
            if op.start > first_end:
                break  # sorted by start: nothing later can go first
            ok, nxt = step(op, state)
            if ok and search(done | 1 << i, nxt):
                return True
            if op.indeterminate and search(done | 1 << i, state):
                return True  # it never took effect
        seen.add(key)
        return False

    import sys
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10 * n + 100))
    try:
        return search(0, initial)
    finally:
        sys.setrecursionlimit(old)


def check_per_key(history, initial, budget=2_000_000):
    """history: {key: [Op]}, every register starting in `initial`. Returns
    the keys whose sub-history is not linearizable (empty: all are)."""
    return sorted(k for k, ops in history.items() if not check(ops, initial, budget=budget))


def _determinate_updates(ops):
    return [o for o in ops if o.kind in (WRITE, CAS) and not o.indeterminate and o.result is not None]


def corrupt_stale_read(ops, initial):
    """A copy of ops in which a completed read that began after an
    acknowledged update to version k had returned now says it saw version
    k-1 (with the value version k-1 had): one acknowledged write lost to
    that read. Versions never go down, so that copy is not linearizable.
    The first such read whose version k-1 value is known (written by an
    acknowledged update, or `initial`); None when there is none."""
    updates = _determinate_updates(ops)
    value_at = {initial[1]: initial[0]}
    for u in updates:
        value_at[u.result] = u.arg if u.kind == WRITE else u.arg[1]
    for i, r in sorted(enumerate(ops), key=lambda p: p[1].start):
        if r.kind != READ or r.indeterminate:
            continue
        done = [u.result for u in updates if u.end < r.start]
        if not done:
            continue
        k = max(done)
        if k - 1 in value_at:
            out = copy.copy(ops)
            out[i] = Op(READ, None, (value_at[k - 1], k - 1), r.start, r.end, r.client)
            return out
    return None


def corrupt_duplicate_version(ops):
    """A copy of ops in which an acknowledged update reports the version of
    another acknowledged update that returned before it began: two updates
    cannot both make the same version, so that copy is not linearizable.
    None when the history has no such pair."""
    updates = sorted(_determinate_updates(ops), key=lambda o: o.start)
    for later in updates:
        earlier = next((u for u in updates if u.end < later.start), None)
        if earlier is not None:
            i = ops.index(later)
            out = copy.copy(ops)
            out[i] = Op(later.kind, later.arg, earlier.result, later.start, later.end, later.client)
            return out
    return None


def _selftest():
    t = lambda k, a, r, s, e: Op(k, a, r, s, e, 0)
    # Two overlapping writes, a read after both sees one of them: fine.
    assert check([t(WRITE, "a", 1, 0, 2), t(WRITE, "b", 2, 1, 3), t(READ, None, ("b", 2), 4, 5)], ("", 0))
    # A read that returns an older value after a newer write completed: not linearizable.
    assert not check([t(WRITE, "a", 1, 0, 1), t(WRITE, "b", 2, 2, 3), t(READ, None, ("a", 1), 4, 5)], ("", 0))
    # A CAS that succeeded on a stale version: not linearizable.
    assert not check([t(WRITE, "a", 1, 0, 1), t(CAS, (0, "x"), 1, 2, 3)], ("", 0))
    # An indeterminate write may or may not have happened.
    assert check([t(WRITE, "a", None, 0, math.inf), t(READ, None, ("", 0), 1, 2)], ("", 0))
    assert check([t(WRITE, "a", None, 0, math.inf), t(READ, None, ("a", 1), 1, 2)], ("", 0))
    # Per key: each register on its own.
    ok = [t(WRITE, "a", 1, 0, 1), t(READ, None, ("a", 1), 2, 3)]
    assert check_per_key({"/x": ok, "/y": ok}, ("", 0)) == []
    assert check_per_key({"/x": ok, "/y": corrupt_stale_read(ok, ("", 0))}, ("", 0)) == ["/y"]
    assert not check(corrupt_duplicate_version(ok + [t(WRITE, "b", 2, 4, 5)]), ("", 0))


_selftest()
