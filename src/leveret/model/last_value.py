"""Last-value queues (Qpid's ``qpid.last_value_queue_key``): the key index of one queue.

A message whose key header (the queue's ``lvq_key``) has a value replaces the ready message
with the same value, which leaves the queue; the new one goes to the back of the queue, as
Qpid C++ does (a browser that has seen the old one sees the new one later). Only a ready
message is replaced: one handed out and not settled yet stays with its consumer, and if it
is released while a newer one with its key is ready, it is the stale one and goes. A message
without the header is queued as usual.

The index maps a key to its ready entry and back; ``model/keyed_queue.py`` tells it when an
entry becomes ready and when one leaves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.model.entry import QueuedMessage
    from leveret.model.message import Message

__all__ = ["LastValueIndex", "value_key"]


def value_key(message: Message, key: str) -> str | None:
    """The last-value key of ``message`` on a queue keyed by header ``key`` (None: none)."""
    headers = message.headers
    value = headers.get(key) if headers else None
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else repr(value)


class LastValueIndex:
    """The ready entry of each key of one last-value queue."""

    __slots__ = ("_by_entry", "_by_key", "key")

    def __init__(self, key: str) -> None:
        self.key = key
        self._by_key: dict[str, QueuedMessage] = {}
        self._by_entry: dict[QueuedMessage, str] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def replaces(self, entry: QueuedMessage) -> QueuedMessage | None:
        """``entry`` arrives: the ready entry it replaces (which the queue removes), if any;
        ``entry`` is its key's ready entry from now on."""
        value = value_key(entry.message, self.key)
        if value is None:
            return None
        old = self._by_key.get(value)
        if old is not None:
            del self._by_entry[old]
        self._by_key[value] = entry
        self._by_entry[entry] = value
        return old

    def back(self, entry: QueuedMessage) -> bool:
        """A handed-out entry is back in the queue (released); False if a newer entry with
        its key is ready, so it is stale and must go."""
        value = value_key(entry.message, self.key)
        if value is None:
            return True
        if value in self._by_key:
            return False
        self._by_key[value] = entry
        self._by_entry[entry] = value
        return True

    def left(self, entry: QueuedMessage) -> None:
        """``entry`` is not ready any more (handed out, expired, dropped, purged)."""
        value = self._by_entry.pop(entry, None)
        if value is not None and self._by_key.get(value) is entry:
            del self._by_key[value]

    def cleared(self) -> None:
        self._by_key.clear()
        self._by_entry.clear()
