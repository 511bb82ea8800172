"""The broker-wide memory gauge: the bytes of message data every queue holds, added to by
each queue as messages come and go and read by the server's memory alarm
(``server/memory_alarm.py``), which compares it to its watermark.

A leaf: the broker, its vhosts and queues share one gauge; it imports nothing. Compiled
with the queue modules (``build_info.HOT_PATH_MODULES``), since they update it per message.
"""

from __future__ import annotations

__all__ = ["MemoryGauge"]


class MemoryGauge:
    """Bytes of message data held by queues; the server compares it to its watermark.

    ``paging_level``: the bytes past which a queue pages large bodies too, not only its
    count of small ones (``ClassicQueue._pages``); the server sets it from the watermark.
    0, the model's default, pages by count alone."""

    __slots__ = ("bytes", "paging_level")

    def __init__(self) -> None:
        self.bytes = 0
        self.paging_level = 0
