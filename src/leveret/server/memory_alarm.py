"""Memory flow control: block publishers while queued messages hold too much memory.

As RabbitMQ's memory alarm: once the bytes held by queues pass the high watermark, every
connection that publishes stops being read (and gets ``connection.blocked`` if it asked
for it); consumers keep being served so the queues drain. When the bytes fall below the
low watermark (80% of the high one) every blocked connection is unblocked.

In a cluster the alarm is cluster-wide, as RabbitMQ's: a node's own alarm goes into its
record (``on_local``), and while any node's is set, publishers on every node are blocked
(``remote_alarm``).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

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
        # This node's own alarm (its queues past the watermark), the other nodes of the
        # cluster whose alarms are set, and either: publishers are blocked.
        self.local = False
        self.remote: set[str] = set()
        self.active = False
        self.blocked: set[Blockable] = set()
        # Told each time this node's own alarm sets (True) or clears.
        self.on_local: Callable[[bool], None] | None = None

    def published(self, conn: Blockable) -> None:
        """``conn`` published; block it if memory is short here or on another node."""
        if not self.local and self.high and self.gauge.bytes > self.high:
            log.warning(
                "memory alarm: queued messages hold %d bytes, above the watermark %d; "
                "blocking publishers",
                self.gauge.bytes,
                self.high,
            )
            self._set_local(True)
        if self.active and conn not in self.blocked:
            self.blocked.add(conn)
            conn.block("low on memory")

    def check(self) -> None:
        """Clear this node's alarm once enough was consumed."""
        if self.local and self.gauge.bytes <= self.low:
            log.info("memory alarm cleared: %d bytes queued", self.gauge.bytes)
            self._set_local(False)

    def remote_alarm(self, node: str, on: bool) -> None:
        """Whether ``node``'s memory alarm is set (its record says so; a node that is gone
        holds none)."""
        if on == (node in self.remote):
            return
        if on:
            self.remote.add(node)
            log.warning("memory alarm on cluster node '%s': blocking publishers", node)
        else:
            self.remote.discard(node)
            log.info("memory alarm on cluster node '%s' cleared", node)
        self._update()

    def forget(self, conn: Blockable) -> None:
        self.blocked.discard(conn)

    def _set_local(self, on: bool) -> None:
        self.local = on
        self._update()
        if self.on_local is not None:
            self.on_local(on)

    def _update(self) -> None:
        active = self.local or bool(self.remote)
        if active == self.active:
            return
        self.active = active
        if not active:
            blocked, self.blocked = self.blocked, set()
            for conn in blocked:
                conn.unblock()
