"""Errors for what cannot be composed. They are kazoo exceptions, so code
that catches KazooException keeps working; ValueError too, because each one
is a mistake in the request, not a failure of an ensemble."""

from kazoo.exceptions import KazooException


class CompositionError(KazooException, ValueError):
    """A request the composed client cannot serve as asked."""


class NoMountError(CompositionError):
    """The path lies under no mount."""


class CrossMountError(CompositionError):
    """One operation (a transaction) touches paths of several mounts: each
    ensemble orders its own writes, so nothing makes them atomic together."""
