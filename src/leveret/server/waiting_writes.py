"""Writes that one connection's read made for another, flushed within a bounded number of
reads (issue 26, scenario h).

A connection writes what its own read produced at the end of that read. What a read
produced for *another* connection (a delivery to a consumer, from a publisher's read) waits
for the event loop's next iteration: one ``call_soon`` for all of them, so a loop iteration
that read several publishers writes each consumer once. But one iteration reads every socket
that ``epoll_wait`` found ready, up to 1024 of them, before any ``call_soon`` callback runs:
when a thousand publishers' lone messages are all readable at once (``bench.burst``; the Go
load generator's h when its publishers tick together), the consumer's first deliveries were
written only once the whole burst was read, 5 to 7 ms of the compiled build's CPU later
(``bench.lone_read --consume``), and the consumer sat idle meanwhile.

So after every ``READS`` reads with writes waiting, the reading connection flushes them
itself (``read``), and the iteration's ``call_soon`` flushes what is left. A loop iteration
of a few reads (one publisher and one consumer, scenario b; ten of each, e) never reaches
``READS``, and writes exactly as before. What this does not shorten is the burst's last
deliveries: the queue is first in, first out, so they wait for the CPU of the whole burst's
publishes, deliveries and acks in any order (docs/benchmarks.md, "h's tail under the Go
tool").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

__all__ = ["READS", "WaitingWrites", "waiting_writes"]

log = logging.getLogger("leveret.connection")

# Reads in one loop iteration after which the writes waiting for its end are flushed: 32
# reads are 0.2 ms of a burst on the compiled build and 0.5 ms on the pure one, and the
# extra write costs a consumer about 0.3 µs a message of a 1000-message burst.
READS: Final = 32


class WaitingWrites:
    """The flushes that wait for the loop iteration's end, in the order they were asked."""

    __slots__ = ("_call_soon", "_every", "_reads", "_scheduled", "_waiting")

    def __init__(self, call_soon: Callable[[Callable[[], None]], object], every: int = READS):
        self._call_soon = call_soon
        self._every = every
        self._waiting: list[Callable[[], None]] = []
        self._reads = 0
        self._scheduled = False

    def add(self, flush: Callable[[], None]) -> None:
        """``flush`` runs at the iteration's end, or after ``every`` more reads if sooner."""
        self._waiting.append(flush)
        if not self._scheduled:
            self._scheduled = True
            self._call_soon(self._at_iteration_end)

    def read(self) -> None:
        """A connection read its socket and ran the turn; flush what waits every ``every``
        reads."""
        if self._waiting:
            self._reads += 1
            if self._reads >= self._every:
                self.flush()

    def flush(self) -> None:
        waiting = self._waiting
        self._waiting = []
        self._reads = 0
        # A flush may ask for another (its connection's output grew meanwhile): that one
        # goes to the fresh list, for the next flush or the iteration's end.
        for flush in waiting:
            # One connection's failure is its own: the others' flushes still run (and the
            # reading connection, whose read may have called this, is not closed for it).
            try:
                flush()
            except Exception:
                log.exception("flushing a connection's output failed")

    def _at_iteration_end(self) -> None:
        self._scheduled = False
        self.flush()


_per_loop: WeakKeyDictionary[asyncio.AbstractEventLoop, WaitingWrites] = WeakKeyDictionary()


def waiting_writes(loop: asyncio.AbstractEventLoop) -> WaitingWrites:
    """The loop's one ``WaitingWrites``: every connection on a loop shares it."""
    found = _per_loop.get(loop)
    if found is None:
        found = _per_loop[loop] = WaitingWrites(loop.call_soon)
    return found
