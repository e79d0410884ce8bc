"""Several ZooKeeper-protocol ensembles used as one, sequentially consistent
(ZooNet's Algorithm 1 over kazoo). See docs/compose.md."""

from .client import ComposedClient
from .errors import CompositionError, CrossMountError, NoMountError
from .mounts import DEFAULT_SYNC_NODE, Mount, MountTable
from .sequencer import READ, UPDATE, Request, Sequencer

__all__ = ["ComposedClient", "CompositionError", "CrossMountError", "NoMountError",
           "DEFAULT_SYNC_NODE", "Mount", "MountTable", "READ", "UPDATE", "Request", "Sequencer"]
