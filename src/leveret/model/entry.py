"""A message's place in one queue.

The leaf of the queue modules: ``queues/``, ``paging``, ``consumer`` and the
store import it; it imports only the message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from leveret.model.message import Message

__all__ = ["MESSAGE_OVERHEAD", "QueuedMessage"]

# Bytes a queued message costs beyond its body (objects, deque slot, index entries). Final:
# inlined where the compiled queue counts every message it takes or hands over.
MESSAGE_OVERHEAD: Final = 256


class QueuedMessage:
    """A message in one queue: its position there and whether it was delivered before."""

    __slots__ = ("deliveries", "expires", "message", "priority", "redelivered", "seq", "sid")

    def __init__(self, seq: int, message: Message, redelivered: bool = False) -> None:
        self.seq = seq
        self.sid = 0  # the store's message id when it is on disk for this queue
        self.message = message
        self.redelivered = redelivered
        self.expires: float | None = None  # monotonic deadline (TTL), None = never
        self.priority = 0
        self.deliveries = 0  # failed deliveries (returns), for quorum queues
