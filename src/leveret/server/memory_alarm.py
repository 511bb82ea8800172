"""Memory flow control: block publishers while queued messages hold too much memory.

As RabbitMQ's memory alarm: once the bytes held by queues pass the high watermark, every
connection that publishes stops being read (and gets ``connection.blocked`` if it asked
for it); consumers keep being served so the queues drain. When the bytes fall below the
low watermark (80% of the high one) every blocked connection is unblocked.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from leveret.model.memory_gauge import MemoryGauge

log = logging.getLogger("leveret.flow")

LOW_WATERMARK_RATIO = 0.8


def default_high_watermark() -> int:
    """30% of physical memory, counted in queued message bytes."""
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        page_size = os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 1 << 30
    return int(pages * page_size * 0.3)


class Blockable(Protocol):
    def block(self, reason: str) -> None: ...

    def unblock(self) -> None: ...


class MemoryAlarm:
    """The broker-wide alarm and the connections it blocked."""

    def __init__(self, gauge: MemoryGauge, high_watermark: int) -> None:
        self.gauge = gauge
        self.high = high_watermark
        self.low = int(high_watermark * LOW_WATERMARK_RATIO)
        self.active = False
        self.blocked: set[Blockable] = set()

    def published(self, conn: Blockable) -> None:
        """``conn`` published; block it if memory is short."""
        if not self.high:
            return
        if not self.active and self.gauge.bytes > self.high:
            self.active = True
            log.warning(
                "memory alarm: queued messages hold %d bytes, above the watermark %d; "
                "blocking publishers",
                self.gauge.bytes,
                self.high,
            )
        if self.active and conn not in self.blocked:
            self.blocked.add(conn)
            conn.block("low on memory")

    def check(self) -> None:
        """Clear the alarm once enough was consumed."""
        if self.active and self.gauge.bytes <= self.low:
            self.active = False
            log.info("memory alarm cleared: %d bytes queued", self.gauge.bytes)
            blocked, self.blocked = self.blocked, set()
            for conn in blocked:
                conn.unblock()

    def forget(self, conn: Blockable) -> None:
        self.blocked.discard(conn)
