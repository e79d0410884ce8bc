"""A transaction through the composed client: all of its paths must be under
one mount, because only one ensemble can apply it atomically."""

from .errors import CrossMountError
from .sequencer import UPDATE


class ComposedTransaction:
    """kazoo's TransactionRequest interface (create, delete, set_data, check,
    commit, commit_async, with-block). The mount is fixed by the first
    operation; one under another mount raises CrossMountError at once."""

    def __init__(self, client):
        self._client = client
        self._mount = None
        self._first_path = None
        self._ops = []
        self.committed = False

    def _admit(self, path, name, *args, **kwargs):
        if self.committed:
            raise ValueError("Transaction already committed")
        mount = self._client.mounts.route(path)
        if self._mount is None:
            self._mount, self._first_path = mount, path
        elif mount.prefix != self._mount.prefix:
            raise CrossMountError(
                "a transaction runs on one ensemble: %r is under mount %r but %r is under "
                "mount %r (mounts are %s)" % (self._first_path, self._mount.prefix, path,
                                              mount.prefix, self._client.mounts.names()))
        self._ops.append((name, (path,) + args, kwargs))

    def create(self, path, value=b"", acl=None, ephemeral=False, sequence=False):
        self._admit(path, "create", value, acl, ephemeral, sequence)

    def delete(self, path, version=-1):
        self._admit(path, "delete", version)

    def set_data(self, path, value, version=-1):
        self._admit(path, "set_data", value, version)

    def check(self, path, version):
        self._admit(path, "check", version)

    def commit_async(self):
        if self.committed:
            raise ValueError("Transaction already committed")
        self.committed = True
        if not self._ops:
            result = self._client.handler.async_result()
            result.set([])
            return result

        def commit_on(member):
            transaction = member.transaction()
            for name, args, kwargs in self._ops:
                getattr(transaction, name)(*args, **kwargs)
            return transaction.commit_async()

        return self._client._submit(self._first_path, UPDATE, commit_on)

    def commit(self):
        return self.commit_async().get()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, exc_tb):
        if not exc_type:
            self.commit()
