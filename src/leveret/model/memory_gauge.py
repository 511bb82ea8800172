"""The broker-wide memory gauge: the bytes of message data every queue holds, added to by
each queue as messages come and go and read by the server's memory alarm
(``server/memory_alarm.py``), which compares it to its watermark.

A leaf: the broker, its vhosts and queues share one gauge; it imports nothing. Compiled
with the queue modules (``[tool.leveret.compiled]``), since they update it per message.
"""

from __future__ import annotations

__all__ = ["MemoryGauge"]


class MemoryGauge:
    """Bytes of message data held by queues; the server compares it to its watermark."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        self.bytes = 0
