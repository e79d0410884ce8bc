"""ZooNet's Algorithm 1 (Lev-Ari et al., "Modular Composition of
Coordination Services", USENIX ATC 2016): the client-side state machine that
makes several independently ordered services one sequentially consistent
service.

It tracks the target the client talks to now. A request to another target
waits until every request to the current one has been answered, because two
services order requests independently and could otherwise apply them out of
program order. The first request to the new target, when it is a read, is
preceded by a linearizable sync to that target, so the read sees at least
everything that was complete when the switch happened. Requests behind a
waiting one wait too, so requests leave in program order.

Nothing here does I/O: a request carries a `send(done)` that sends it and
calls done() once when it is answered, and `inject_sync(target, path, done)`
sends a sync. The composed client supplies both.

The fast path (send_if_current): a request to the current target while
nothing is held needs neither a hold nor a sync, so it is sent at once and
its answer is not followed by a callback. The sequencer keeps the answer
and looks at it (answer.ready()) only when a request to another target
comes; the answers still unanswered then are counted as outstanding and
watched (`watch(answer, done)`, by default through the answer's
link_internal or rawlink) like any other. A client that stays on one
target thus pays for no completion callback and no extra thread hop.
"""

import collections
import threading

READ = "read"
UPDATE = "update"


class Request:
    """One client request on its way to `target` (any hashable id)."""

    __slots__ = ("target", "kind", "path", "send")

    def __init__(self, target, kind, path, send):
        if kind not in (READ, UPDATE):
            raise ValueError("kind must be READ or UPDATE, not %r" % (kind,))
        self.target = target
        self.kind = kind
        self.path = path
        self.send = send


class Sequencer:
    """Algorithm 1 for one client. Thread-safe; sends happen in submit order.

    stats (a dict shared with the caller) gets: requests (sent), reads,
    updates, switches (target changes), syncs_injected, requests_held
    (requests that could not leave when submitted).
    """

    def __init__(self, inject_sync, stats=None, watch=None):
        self._inject_sync = inject_sync
        self._watch = watch or _watch_answer
        self.stats = stats if stats is not None else {}
        for key in ("requests", "reads", "updates", "switches", "syncs_injected",
                    "requests_held"):
            self.stats.setdefault(key, 0)
        # Reentrant: a send may complete at once (a closed session fails
        # requests synchronously) and call done() from inside _dispatch.
        self.lock = threading.RLock()
        self._current = None
        self._outstanding = 0
        self._held = collections.deque()
        # Answers of requests sent by the fast path, not yet counted in
        # _outstanding (some may be answered already). Empty while any
        # request is held.
        self._unwatched = collections.deque()

    @property
    def current(self):
        return self._current

    @property
    def outstanding(self):
        with self.lock:
            return self._outstanding + sum(1 for a in self._unwatched if not a.ready())

    @property
    def held(self):
        return len(self._held)

    def send_if_current(self, target, kind, send):
        """The fast path: when `target` is the current target and nothing
        is held, sends the request by send() at once and returns what it
        returned, its answer (an object with ready(), as kazoo's async
        results, that `watch` can follow). Otherwise sends nothing and
        returns None: the caller then submit()s the request."""
        with self.lock:
            if target != self._current or self._held:
                return None
            stats = self.stats
            stats["requests"] += 1
            stats["reads" if kind == READ else "updates"] += 1
            answer = send()
            unwatched = self._unwatched
            # Forget what was answered (a session answers in order, so
            # from the left); this bounds the deque by what is in flight.
            while unwatched and unwatched[0].ready():
                unwatched.popleft()
            unwatched.append(answer)
            return answer

    def submit(self, request):
        with self.lock:
            if self._unwatched:
                self._watch_unanswered()
            if self._held or self._blocked(request):
                self.stats["requests_held"] += 1
            self._held.append(request)
            self._drain()

    def forget_target(self):
        """The next read goes out with a sync before it, whatever its target
        (after a new session, which may be on a server that is behind)."""
        with self.lock:
            self._current = None

    def _watch_unanswered(self):
        """Counts the fast path's unanswered requests as outstanding and
        watches them. All are counted before any is watched: one answered
        meanwhile may call _complete at once, which must not find 0."""
        pending = [a for a in self._unwatched if not a.ready()]
        self._unwatched.clear()
        self._outstanding += len(pending)
        for answer in pending:
            self._watch(answer, self._complete)

    def _blocked(self, request):
        return request.target != self._current and self._outstanding > 0

    def _drain(self):
        while self._held and not self._blocked(self._held[0]):
            self._dispatch(self._held.popleft())

    def _dispatch(self, request):
        # Both the sync and the request count as outstanding before either
        # is sent: a sync answered at once (inside _inject_sync) must not
        # bring the count to 0, or _drain would send the requests held
        # behind this one before it.
        sync = False
        if request.target != self._current:
            self._current = request.target
            self.stats["switches"] += 1
            sync = request.kind == READ
        self._outstanding += 2 if sync else 1
        self.stats["requests"] += 1
        self.stats["reads" if request.kind == READ else "updates"] += 1
        if sync:
            self.stats["syncs_injected"] += 1
            self._inject_sync(request.target, request.path, self._complete)
        request.send(self._complete)

    def _complete(self):
        with self.lock:
            self._outstanding -= 1
            assert self._outstanding >= 0, "more answers than requests"
            if self._outstanding == 0:
                self._drain()


def _watch_answer(answer, done):
    """The default `watch`: done() once `answer` is answered, through its
    link_internal when it has one (a member session's answer: then done()
    runs on that member's completion thread, not behind the application's
    callbacks), else through kazoo's rawlink."""
    link = getattr(answer, "link_internal", None) or answer.rawlink
    link(lambda _answer: done())
