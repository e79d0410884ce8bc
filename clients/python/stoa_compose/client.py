"""ComposedClient: kazoo's client API over one session per mount, made one
sequentially consistent service by Algorithm 1 (sequencer.py), with one
virtual session across the ensembles and one queue for watch events."""

import functools
import logging
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import ConfigurationError, NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.handlers.threading import AsyncResult, SequentialThreadingHandler
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import Sync
from kazoo.protocol.states import KazooState, KeeperState
from kazoo.recipe.barrier import Barrier, DoubleBarrier
from kazoo.recipe.counter import Counter
from kazoo.recipe.election import Election
from kazoo.recipe.lease import MultiNonBlockingLease, NonBlockingLease
from kazoo.recipe.lock import Lock, ReadLock, Semaphore, WriteLock
from kazoo.recipe.party import Party, ShallowParty
from kazoo.recipe.partitioner import SetPartitioner
from kazoo.recipe.queue import LockingQueue, Queue
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from .mounts import MountTable
from .sequencer import READ, UPDATE, Request, Sequencer
from .transaction import ComposedTransaction

log = logging.getLogger(__name__)

# Phases of the virtual session.
STOPPED, RUNNING, RENEWING = "stopped", "running", "renewing"


class _MemberHandler(SequentialThreadingHandler):
    """The handler of one member session. Watch events go to the composed
    handler's single callback queue, in the order they arrive from the
    ensembles: one queue is what makes the delivery order across ensembles
    agree with what the client read (docs/compose.md, "Watches"). Its
    answers are _MemberResults."""

    def __init__(self, shared):
        super().__init__()
        self._shared = shared

    def dispatch_callback(self, callback):
        if self._shared.running:
            return self._shared.dispatch_callback(callback)
        return super().dispatch_callback(callback)

    def async_result(self):
        return _MemberResult(self)


class _MemberResult(AsyncResult):
    """An answer of a member session, which the composed client may return
    to the application as it is (the fast path of a client that stays on
    one mount). So that it behaves as every other result of the composed
    client, its rawlink callbacks run on the composed handler's completion
    thread. The composed client's own bookkeeping (link_internal: counting
    the answer, forwarding it to a composed result) runs on the member's
    completion thread instead, as before, never on the connection thread
    and never behind an application callback (which may wait for a held
    request that only this bookkeeping releases)."""

    def __init__(self, member_handler):
        super().__init__(member_handler._shared)
        self._member_handler = member_handler
        self._internal = []

    # _internal is read without the condition after it was set: a
    # link_internal either appended before the value was stored (under the
    # condition) or found the result ready and dispatched the callback itself.
    def set(self, value=None):
        super().set(value)
        if self._internal:
            self._run_internal()

    def set_exception(self, exception):
        super().set_exception(exception)
        if self._internal:
            self._run_internal()

    def link_internal(self, callback):
        """callback(self), once, on the member's completion thread, when
        answered (at once if it is)."""
        with self._condition:
            if not self.ready():
                self._internal.append(callback)
                return
        self._dispatch_internal(callback)

    def _run_internal(self):
        # Outside the condition: a callback may take the sequencer's lock,
        # which a submitting thread may hold while it links this answer.
        with self._condition:
            callbacks, self._internal = self._internal, []
        for callback in callbacks:
            self._dispatch_internal(callback)

    def _dispatch_internal(self, callback):
        handler = self._member_handler
        if handler.running:
            handler.completion_queue.put(functools.partial(callback, self))
        else:
            callback(self)


class _MemberClient(KazooClient):
    """A member session: a KazooClient whose sync answers like every other
    request. kazoo's own sync_async chains the server's answer to the result
    it returns through a rawlink, which for a member runs on the composed
    handler's completion thread: behind application callbacks, and after the
    answer of a request sent behind the sync may already have woken the
    application. Algorithm 1 counts an injected sync done from that result,
    so the count must be kept on the member's completion thread, in answer
    order, as for the request that follows it."""

    def sync_async(self, path):
        result = self.handler.async_result()
        self._call(Sync(_prefix_root(self.chroot, path)), _Unchrooted(self, result))
        return result


class _Unchrooted:
    """Where the connection thread puts a sync's answer: the path the server
    names, less the chroot, set on the member's own result at once."""

    def __init__(self, client, result):
        self._client = client
        self._result = result

    def set(self, value=None):
        self._result.set(self._client.unchroot(value))

    def set_exception(self, exception):
        self._result.set_exception(exception)


def _link_internal(answer, callback):
    link = getattr(answer, "link_internal", None)
    if link is None:   # not a member's answer (a test's stand-in)
        answer.rawlink(callback)
    else:
        link(callback)


class ComposedClient:
    """A KazooClient-compatible client over several ensembles.

    mounts: {prefix: hosts} or {prefix: {"hosts": ..., "sync": "sync"|"write",
    "sync_node": path}}. A path goes to the mount with the longest prefix
    (by whole components) and reaches that ensemble unchanged. kazoo_args go
    to every member KazooClient (timeout, connection_retry, auth_data, ...);
    `handler`, when given, must be a SequentialThreadingHandler.
    """

    def __init__(self, mounts, **kazoo_args):
        if "hosts" in kazoo_args:
            raise ConfigurationError("ComposedClient takes hosts per mount, not hosts=")
        handler = kazoo_args.pop("handler", None) or SequentialThreadingHandler()
        if not isinstance(handler, SequentialThreadingHandler):
            raise ConfigurationError(
                "ComposedClient needs a SequentialThreadingHandler instance, not %r" % (handler,))
        self.handler = handler
        self.mounts = MountTable(mounts)
        self.logger = kazoo_args.get("logger") or log
        self.members = {}
        for mount in self.mounts:
            args = dict(kazoo_args)
            # A KazooRetry carries per-client state (kazoo sets its interrupt).
            for key in ("connection_retry", "command_retry"):
                if isinstance(args.get(key), KazooRetry):
                    args[key] = args[key].copy()
            member = _MemberClient(hosts=mount.hosts, handler=_MemberHandler(handler), **args)
            member.add_listener(functools.partial(self._on_member_state, mount.prefix))
            self.members[mount.prefix] = member
        self.stats = {"sync_failures": 0, "sessions_expired": 0}
        self._sequencer = Sequencer(self._inject_sync, self.stats)
        command_retry = next(iter(self.members.values()))._retry
        self.retry = lambda *args, **kwargs: command_retry.copy()(*args, **kwargs)
        self.chroot = None
        self.state = KazooState.LOST
        self.state_listeners = set()
        self._state_lock = threading.RLock()
        self._phase = STOPPED
        for name, recipe in (("Barrier", Barrier), ("Counter", Counter),
                             ("DoubleBarrier", DoubleBarrier), ("ChildrenWatch", ChildrenWatch),
                             ("DataWatch", DataWatch), ("Election", Election),
                             ("NonBlockingLease", NonBlockingLease),
                             ("MultiNonBlockingLease", MultiNonBlockingLease), ("Lock", Lock),
                             ("ReadLock", ReadLock), ("WriteLock", WriteLock), ("Party", Party),
                             ("Queue", Queue), ("LockingQueue", LockingQueue),
                             ("SetPartitioner", SetPartitioner), ("Semaphore", Semaphore),
                             ("ShallowParty", ShallowParty)):
            setattr(self, name, functools.partial(recipe, self))

    def __repr__(self):
        return "<ComposedClient %s>" % ", ".join(
            "%s=%s" % (m.prefix, m.hosts) for m in self.mounts)

    # ------------------------------------------------------------ session

    @property
    def connected(self):
        return self._phase == RUNNING and all(m.connected for m in self.members.values())

    @property
    def client_state(self):
        if self._phase != RUNNING:
            return KeeperState.EXPIRED_SESSION if self._phase == RENEWING else KeeperState.CLOSED
        for member in self.members.values():
            if member.client_state != KeeperState.CONNECTED:
                return member.client_state
        return KeeperState.CONNECTED

    @property
    def current_mount(self):
        """The prefix of the mount Algorithm 1 targets now (None before the
        first request and after a new session)."""
        return self._sequencer.current

    @property
    def client_ids(self):
        """{prefix: (session id, password)} of the member sessions."""
        return {prefix: m.client_id for prefix, m in self.members.items()}

    def add_listener(self, listener):
        """Called with the composite KazooState: CONNECTED when every member
        session is, SUSPENDED while any is disconnected, LOST when the
        virtual session ended (one member expired, or stop())."""
        if not (listener and callable(listener)):
            raise ConfigurationError("listener must be callable")
        self.state_listeners.add(listener)

    def remove_listener(self, listener):
        self.state_listeners.discard(listener)

    def start(self, timeout=15):
        event = self.start_async()
        event.wait(timeout=timeout)
        if not self.connected:
            waiting = sorted(p for p, m in self.members.items() if not m.connected)
            self.stop()
            self.close()
            raise self.handler.timeout_exception(
                "Connection time-out: mounts %s did not connect" % ", ".join(waiting))
        self._prepare_sync_nodes()

    def start_async(self):
        """Starts every member session; the returned event is set once all
        are connected."""
        with self._state_lock:
            self._phase = RUNNING
        self.handler.start()
        self._sequencer.forget_target()
        started = [m.start_async() for m in self.members.values()]
        all_live = self.handler.event_object()

        def wait_all():
            for event in started:
                while not event.wait(0.5):
                    if self._phase != RUNNING:
                        return  # stopped before it connected
            all_live.set()

        if all(e.is_set() for e in started):
            all_live.set()
        else:
            threading.Thread(target=wait_all, name="stoa-compose-start", daemon=True).start()
        return all_live

    def stop(self):
        """Ends every member session (their ephemerals go) and reports LOST."""
        with self._state_lock:
            self._phase = STOPPED
        for member in self.members.values():
            try:
                member.stop()
            except Exception:
                self.logger.exception("stopping a member session")
        self.handler.stop()
        with self._state_lock:
            self._set_state(KazooState.LOST)

    def restart(self):
        self.stop()
        self.start()

    def close(self):
        for member in self.members.values():
            member.close()

    def add_auth(self, scheme, credential):
        """Adds the identity to every member session."""
        for member in self.members.values():
            member.add_auth(scheme, credential)
        return True

    def _prepare_sync_nodes(self):
        for mount in self.mounts:
            if mount.sync == "write":
                try:
                    self.members[mount.prefix].create(mount.sync_node, b"", makepath=True)
                except NodeExistsError:
                    pass

    def _on_member_state(self, prefix, state):
        # Called on the member's connection thread: must not block.
        with self._state_lock:
            if state == KazooState.LOST and self._phase == RUNNING:
                self._phase = RENEWING
                threading.Thread(target=self._renew_virtual_session, args=(prefix,),
                                 name="stoa-compose-expiry", daemon=True).start()
            self._refresh_state()

    def _renew_virtual_session(self, expired_prefix):
        """One member session ended: the virtual session ends everywhere.
        The other sessions are closed so their ephemerals go too, then every
        member gets a new session, as one KazooClient would after LOST."""
        self.logger.warning("member session of mount %s ended: expiring the composed session",
                            expired_prefix)
        with self._sequencer.lock:
            self.stats["sessions_expired"] += 1
        for member in self.members.values():
            try:
                member.stop()
            except Exception:
                self.logger.exception("closing a member session after expiry")
        self._sequencer.forget_target()
        with self._state_lock:
            if self._phase != RENEWING:
                return  # stop() came meanwhile
            self._phase = RUNNING
        # Outside the lock: a member's connection thread takes it to report.
        for member in self.members.values():
            member.start_async()
        with self._state_lock:
            stopped_meanwhile = self._phase == STOPPED
            self._refresh_state()
        if stopped_meanwhile:
            # stop() ran while the members started: end them again (outside
            # the lock, which their connection threads may be waiting for).
            for member in self.members.values():
                member.stop()

    def _refresh_state(self):
        if self._phase != RUNNING:
            self._set_state(KazooState.LOST)
            return
        states = [m.state for m in self.members.values()]
        if KazooState.LOST in states:
            # Before the first CONNECTED this is start-up; kazoo stays LOST then too.
            self._set_state(KazooState.LOST)
        elif KazooState.SUSPENDED in states:
            self._set_state(KazooState.SUSPENDED)
        else:
            self._set_state(KazooState.CONNECTED)

    def _set_state(self, state):
        if state == self.state:
            return
        self.state = state
        for listener in list(self.state_listeners):
            try:
                if listener(state) is True:
                    self.remove_listener(listener)
            except Exception:
                self.logger.exception("Error in connection state listener")

    # ------------------------------------------------------- sequencing

    def _submit(self, path, kind, call):
        """Sends call(member) to the owner of `path` through Algorithm 1;
        returns an async result set once the member answered: the member's
        own when the request could leave at once to the current target
        (the fast path), else one of the composed handler."""
        mount = self.mounts.route(path)
        member = self.members[mount.prefix]
        if self._phase == RENEWING:
            result = self.handler.async_result()
            result.set_exception(SessionExpiredError(
                "the composed session expired (mounts %s); a new one is being opened"
                % self.mounts.names()))
            return result

        def send_now():
            try:
                return call(member)
            except Exception as exc:
                failed = self.handler.async_result()
                failed.set_exception(exc)
                return failed

        answer = self._sequencer.send_if_current(mount.prefix, kind, send_now)
        if answer is not None:
            return answer
        result = self.handler.async_result()

        def send(done):
            try:
                answer = call(member)
            except Exception as exc:
                done()
                result.set_exception(exc)
                return

            def forward(answered):
                # Count the answer first, so a caller woken by `result`
                # finds the sequencer already past this request.
                done()
                if answered.successful():
                    result.set(answered.value)
                else:
                    result.set_exception(answered.exception)

            _link_internal(answer, forward)

        self._sequencer.submit(Request(mount.prefix, kind, path, send))
        return result

    def _inject_sync(self, prefix, path, done):
        mount = self.mounts.mounts[prefix]
        member = self.members[prefix]
        try:
            if mount.sync == "sync":
                answer = member.sync_async(path)
            else:
                answer = member.set_async(mount.sync_node, b"", -1)
        except Exception:
            self._count_sync_failure(mount, None)
            done()
            return

        def finished(answered):
            if not answered.successful():
                self._count_sync_failure(mount, answered.exception)
            done()

        _link_internal(answer, finished)

    def _count_sync_failure(self, mount, exception):
        with self._sequencer.lock:
            self.stats["sync_failures"] += 1
        if mount.sync == "write" and isinstance(exception, NoNodeError):
            # Someone deleted the sync node. The failed write still went
            # through the leader (ZooKeeper logs an error transaction), so
            # this sync held; make the node again for the next one.
            self.members[mount.prefix].create_async(mount.sync_node, b"", makepath=True)

    # ------------------------------------------------------- operations

    def create_async(self, path, value=b"", acl=None, ephemeral=False, sequence=False,
                     makepath=False, include_data=False):
        return self._submit(path, UPDATE, lambda m: m.create_async(
            path, value, acl=acl, ephemeral=ephemeral, sequence=sequence, makepath=makepath,
            include_data=include_data))

    def create(self, path, value=b"", acl=None, ephemeral=False, sequence=False,
               makepath=False, include_data=False):
        return self.create_async(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence,
                                 makepath=makepath, include_data=include_data).get()

    def ensure_path_async(self, path, acl=None):
        return self._submit(path, UPDATE, lambda m: m.ensure_path_async(path, acl))

    def ensure_path(self, path, acl=None):
        return self.ensure_path_async(path, acl).get()

    def exists_async(self, path, watch=None):
        return self._submit(path, READ, lambda m: m.exists_async(path, watch=watch))

    def exists(self, path, watch=None):
        return self.exists_async(path, watch=watch).get()

    def get_async(self, path, watch=None):
        return self._submit(path, READ, lambda m: m.get_async(path, watch=watch))

    def get(self, path, watch=None):
        return self.get_async(path, watch=watch).get()

    def get_children_async(self, path, watch=None, include_data=False):
        return self._submit(path, READ, lambda m: m.get_children_async(
            path, watch=watch, include_data=include_data))

    def get_children(self, path, watch=None, include_data=False):
        return self.get_children_async(path, watch=watch, include_data=include_data).get()

    def get_acls_async(self, path):
        return self._submit(path, READ, lambda m: m.get_acls_async(path))

    def get_acls(self, path):
        return self.get_acls_async(path).get()

    def set_acls_async(self, path, acls, version=-1):
        return self._submit(path, UPDATE, lambda m: m.set_acls_async(path, acls, version))

    def set_acls(self, path, acls, version=-1):
        return self.set_acls_async(path, acls, version).get()

    def set_async(self, path, value, version=-1):
        return self._submit(path, UPDATE, lambda m: m.set_async(path, value, version))

    def set(self, path, value, version=-1):
        return self.set_async(path, value, version).get()

    def delete_async(self, path, version=-1):
        return self._submit(path, UPDATE, lambda m: m.delete_async(path, version))

    def delete(self, path, version=-1, recursive=False):
        if not recursive:
            return self.delete_async(path, version).get()
        self._delete_tree(path)
        return True

    def _delete_tree(self, path):
        try:
            children = self.get_children(path)
        except NoNodeError:
            return
        for child in children:
            self._delete_tree(path.rstrip("/") + "/" + child)
        if path != "/":
            try:
                self.delete(path)
            except NoNodeError:
                pass

    def sync_async(self, path):
        # A linearizable sync orders like an update; ZooKeeper's is only a
        # read, and then Algorithm 1 puts a real sync in front of it.
        mount = self.mounts.route(path)
        kind = UPDATE if mount.sync == "sync" else READ
        return self._submit(path, kind, lambda m: m.sync_async(path))

    def sync(self, path):
        return self.sync_async(path).get()

    def transaction(self):
        """A transaction on one mount (CrossMountError for paths of two)."""
        return ComposedTransaction(self)
