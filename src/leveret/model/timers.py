"""Deadlines of the whole broker in one heap, and the model's notion of time.

The model never reads a clock. The server sets ``Timers.now`` (monotonic seconds) before it
hands input to the model and ``wall_offset`` once at boot (wall clock = now + offset, used
for the x-death ``time``). Model objects that need waking up (a queue whose head message
expires, an unused queue with ``x-expires``, a session with a consumer timeout) call
``schedule(when, target)``; the server runs ONE timer for the broker: it asks
``next_deadline()``, sleeps until then and calls ``expire(now)``, which wakes each due target
through ``target.on_deadline(now)``. Targets re-check their own state when woken (an entry
may be stale) and schedule again if they still need to, so nothing is ever scanned.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable


class DeadlineTarget(Protocol):
    def on_deadline(self, now: float) -> None: ...


class Timers:
    """A heap of (deadline, sequence, target); ``on_earlier`` tells the server to re-arm."""

    def __init__(self) -> None:
        self.now = 0.0
        self.wall_offset = 0.0
        self._heap: list[tuple[float, int, DeadlineTarget]] = []
        self._seq = 0
        self.on_earlier: Callable[[float], None] | None = None

    @property
    def wall(self) -> float:
        """Wall-clock seconds since the epoch, as the server told the model."""
        return self.now + self.wall_offset

    def schedule(self, when: float, target: DeadlineTarget) -> None:
        self._seq += 1
        heap = self._heap
        earliest = heap[0][0] if heap else None
        heapq.heappush(heap, (when, self._seq, target))
        if (earliest is None or when < earliest) and self.on_earlier is not None:
            self.on_earlier(when)

    def next_deadline(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def expire(self, now: float) -> None:
        """Wake every target whose deadline has come."""
        self.now = now
        heap = self._heap
        while heap and heap[0][0] <= now:
            _when, _seq, target = heapq.heappop(heap)
            target.on_deadline(now)

    def __len__(self) -> int:
        return len(self._heap)
