"""The one broker-wide timer: wakes the model at its next deadline (message TTL, x-expires,
consumer timeouts).

The model keeps its deadlines in ``model.timers.Timers``; this arms a single
``loop.call_at`` for the earliest one, re-arms when the model schedules an earlier deadline
(``Timers.on_earlier``), and after each expiry run arms for the next. No task or timer per
message or per queue.

It also keeps the model's wall clock true: ``Timers.wall`` is the loop's monotonic clock plus
an offset, and the two clocks drift apart (NTP slews the wall clock, a VM's clocks are
corrected at different times), so a broker up for hours would stamp stream entries and
x-death times off by the accumulated drift. The offset is read again every second; not on
a loop that keeps its own wall clock (the test clock), whose wall moves with its advances and
whose long advances must stay a few loop steps (tests/integration/test_long_advance.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from leveret.model.timers import Timers


WALL_RESYNC_S = 1.0


class DeadlineTimer:
    def __init__(self, loop: asyncio.AbstractEventLoop, timers: Timers) -> None:
        self.loop = loop
        self.timers = timers
        self._handle: asyncio.TimerHandle | None = None
        self._when = 0.0
        timers.now = loop.time()
        # A loop may keep its own wall clock (the test clock's moves with its advances,
        # across restarts too: leveret.testing.clock).
        own = getattr(loop, "wall_clock", None)
        self._wall: Callable[[], float] = time.time if own is None else own
        self._resync: asyncio.TimerHandle | None = None
        self._drifts = own is None
        self._sync_wall()
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

    def _sync_wall(self) -> None:
        # Taken around one read of the monotonic clock, as timers.now is at each input.
        self.timers.wall_offset = self._wall() - self.loop.time()
        if self._drifts:
            self._resync = self.loop.call_later(WALL_RESYNC_S, self._sync_wall)

    def close(self) -> None:
        self.timers.on_earlier = None
        if self._resync is not None:
            self._resync.cancel()
            self._resync = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
