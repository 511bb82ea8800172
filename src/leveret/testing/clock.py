"""A controllable clock for an asyncio event loop: the broker's test clock.

The server reads time in one place only, the event loop's clock: every ``now`` handed to a
front end, the model's ``Timers.now`` and ``wall_offset`` (``server/deadlines.py``), the
one broker-wide deadline timer (``loop.call_at``) and each connection's heartbeat tick
(``loop.call_later``). So a loop whose ``time()`` the test moves is a clock for all of them
at once, with no hook on the broker's hot paths: :class:`ClockedEventLoop` is a plain
selector loop whose clock reads ``time.monotonic() + offset`` (and its wall clock, read at
boot and once per store batch, ``time.time() + offset``: below).

:meth:`ClockedEventLoop.advance` moves the clock forward the way waiting would, only
without the wait. While an advance is under way the loop's selector (:class:`_WarpSelector`)
never sleeps: whenever the loop is idle (nothing ready, no I/O) and would sleep until its
next timer, the selector adds that sleep to the offset instead and returns at once, so the
timer is due. Timers therefore fire one after another in the order and at the times they
would have, each seeing the clock at its own due time — a message that expires at +10 s
and is dead-lettered into a queue with a 60 s TTL expires there at +70 s within the same
advance — and a timer that re-arms itself (a heartbeat tick) runs as often as it would
have. When the loop is idle at the target time the advance is done. The clock moves only
while the loop is idle: bytes waiting on a socket (a publish sent just before the advance)
are handled first, at the time they came, and a client that kept the loop busy without a
pause would hold the advance up until it paused. Real time keeps running underneath: a
test that never advances sees an ordinary loop. Timeouts that run on this loop
(``asyncio.wait_for`` in the broker) are timers like any other and fire when passed.

The wall clock: the broker takes its wall clock (``x-death`` times, stream timestamps, the
enqueue time the store keeps for TTLs across a restart) from ``wall_clock()`` where the loop
has one (``server/deadlines.py``, ``store/disk.py``), else ``time.time()``. Here it is
``time.time() + offset``: the advances survive a restart, so a message with an hour's TTL
published, advanced 50 minutes, the broker restarted, advanced 11 minutes, has expired.

Imported by ``leveret.testing.embedded``; nothing in the broker imports it.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ClockedEventLoop"]


class _WarpSelector(selectors.DefaultSelector):
    """The platform's selector, which skips the loop's idle waits during an advance."""

    def __init__(self) -> None:
        super().__init__()
        # Set by the loop while an advance is under way: moves the clock instead of a wait.
        self.warp: Callable[[float | None], None] | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        warp = self.warp
        if warp is None or timeout == 0:
            # No advance, or callbacks are ready: the loop does not mean to wait.
            return super().select(timeout)
        # Pending I/O (a client's frames, a store thread's wake-up) runs first, at the
        # current time; only an idle loop's wait is skipped.
        events = super().select(0)
        if not events:
            warp(timeout)
        return events


class ClockedEventLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose clock the test moves forward (``advance``).

    ``time()`` is ``time.monotonic() + offset``; ``offset`` only grows. ``advance`` runs
    on the loop (from another thread: ``asyncio.run_coroutine_threadsafe``).
    """

    def __init__(self) -> None:
        self._warp_selector = _WarpSelector()
        super().__init__(self._warp_selector)
        self.offset = 0.0
        self._target: float | None = None
        self._done: list[asyncio.Future[None]] = []
        # Idle waits skipped by advances so far: what a long advance costs, in loop steps
        # (one per deadline on the way; a test may bound it).
        self.jumps = 0

    def time(self) -> float:
        return time.monotonic() + self.offset

    def wall_clock(self) -> float:
        """Wall-clock seconds moved by the same offset: the broker reads it where a loop
        provides one (the model's wall offset at boot, the store's enqueue stamps), so its
        wall clock keeps every advance, across a restart on a new loop too."""
        return time.time() + self.offset

    async def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward, running every timer that falls due on the
        way at its own time; return when the loop is idle at the new time. ``advance(0)``
        runs what is due now (and what that makes ready) and returns when the loop is idle.
        """
        if seconds < 0:
            raise ValueError(f"the clock cannot go back ({seconds} s)")
        target = self.time() + seconds
        done: asyncio.Future[None] = self.create_future()
        # Advances asked for at once end together, at the furthest target.
        self._target = target if self._target is None else max(self._target, target)
        self._done.append(done)
        self._warp_selector.warp = self._step
        await done

    def _step(self, sleep: float | None) -> None:
        """The loop is idle and would sleep ``sleep`` seconds (None: until woken): move the
        clock by that much, up to the target; idle at the target, end the advance (the
        waiters' callbacks are then ready, so the loop does not wait this turn either)."""
        target = self._target
        assert target is not None
        remaining = target - self.time()
        if remaining > 0:
            self.offset += remaining if sleep is None else min(sleep, remaining)
            self.jumps += 1
            return
        self._target = None
        self._warp_selector.warp = None
        done, self._done = self._done, []
        for future in done:
            if not future.done():
                future.set_result(None)
