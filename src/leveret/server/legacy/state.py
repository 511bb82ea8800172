"""What the older classes keep beyond one connection, per broker: the ``file`` class's
staging areas (content staged so far, by identifier, so that a sender whose connection
dropped restarts from the octet it reached) and the ``message`` class's checkpoints of
references. Both are kept per vhost and user (another user cannot read or continue them),
in memory, and dropped when untouched for ``HOLD`` seconds (the draft lets the recipient
decide how long to keep partial content). Owned by the legacy front end's class modules.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.model.broker import Broker, Client

__all__ = ["HOLD", "Key", "LegacyState", "Staged", "owner_key", "state_of"]

# Seconds a staging area or checkpoint is kept without being used.
HOLD = 3600.0

# (vhost, user, identifier)
Key = tuple[str, str, str]


def owner_key(client: Client | None, identifier: str) -> Key:
    """Where the connection's user keeps ``identifier`` in its vhost."""
    assert client is not None  # the class methods come after connection.open
    return (client.vhost.name, client.user, identifier)


class Staged:
    """A file message being staged (or staged, waiting for its file.publish)."""

    __slots__ = ("content_size", "data", "properties", "touched")

    def __init__(self, content_size: int, now: float) -> None:
        self.content_size = content_size
        self.properties = b""
        self.data = bytearray()
        self.touched = now

    @property
    def complete(self) -> bool:
        return len(self.data) == self.content_size


class LegacyState:
    """The staging areas and checkpoints of one broker."""

    def __init__(self) -> None:
        self.staged: dict[Key, Staged] = {}
        # A checkpointed reference: its content, and when it was last used.
        self.checkpoints: dict[Key, tuple[bytes, float]] = {}

    def sweep(self, now: float) -> None:
        """Forget what was not used for ``HOLD`` seconds."""
        for key in [k for k, s in self.staged.items() if now - s.touched > HOLD]:
            del self.staged[key]
        for key in [k for k, (_d, t) in self.checkpoints.items() if now - t > HOLD]:
            del self.checkpoints[key]


_STATES: weakref.WeakKeyDictionary[Broker, LegacyState] = weakref.WeakKeyDictionary()


def state_of(broker: Broker) -> LegacyState:
    state = _STATES.get(broker)
    if state is None:
        state = _STATES[broker] = LegacyState()
    return state
