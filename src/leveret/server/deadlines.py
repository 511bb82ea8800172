"""The one broker-wide timer: wakes the model at its next deadline (message TTL, x-expires,
consumer timeouts).

The model keeps its deadlines in ``model.timers.Timers``; this arms a single
``loop.call_at`` for the earliest one, re-arms when the model schedules an earlier deadline
(``Timers.on_earlier``), and after each expiry run arms for the next. No task or timer per
message or per queue.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

    from leveret.model.timers import Timers


class DeadlineTimer:
    def __init__(self, loop: asyncio.AbstractEventLoop, timers: Timers) -> None:
        self.loop = loop
        self.timers = timers
        self._handle: asyncio.TimerHandle | None = None
        self._when = 0.0
        timers.now = loop.time()
        # A loop may keep its own wall clock (the test clock's moves with its advances,
        # across restarts too: leveret.testing.clock).
        wall = getattr(loop, "wall_clock", time.time)
        timers.wall_offset = wall() - timers.now
        timers.on_earlier = self.arm
        pending = timers.next_deadline()
        if pending is not None:
            self.arm(pending)

    def arm(self, when: float) -> None:
        if self._handle is not None:
            if when >= self._when:
                return
            self._handle.cancel()
        self._when = when
        self._handle = self.loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle = None
        try:
            self.timers.expire(self.loop.time())
        finally:
            # A target that raised (a bug, logged by the loop) must not leave every later
            # deadline of the broker unarmed.
            following = self.timers.next_deadline()
            if following is not None:
                self.arm(following)

    def close(self) -> None:
        self.timers.on_earlier = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
