"""A full garbage collection right after a storm of new connections (issue 26).

Boot's objects are frozen (``gc.freeze()`` in ``Server.start``), so the cyclic collector's
oldest generation starts nearly empty. A thousand clients connecting at once then put
their connections' objects there, and CPython walks all of them in one full collection as
soon as a tenth middle-generation collection finds them more than a quarter of what the
last full one kept: seconds later, under whatever traffic those clients bring by then.
Measured (``bench.loop_probe`` under ``bench.burst``: 1000 connections, a publish on each
at once every 0.3 s; the pure build, load 3.8): 20 ms of CPU and 72 ms of wall time, ten
seconds after they connected, in the middle of a burst of their messages.

This takes that collection at a moment of its own choosing instead: once at least
``storm`` connections were accepted since the last full collection (whoever ran it) and
none for ``quiet`` seconds. The clients of the storm are past their handshakes by then and
their traffic has not settled into a rhythm; the collection costs what CPython's own would
have, and the ones after it are rarer, since the generation it leaves holds the new
connections. A steady churn of connections (never ``quiet`` seconds without one) is left to
CPython's own rule.

Collections are spaced by what they cost, not by a fixed time: the next one waits at least
``spacing`` seconds and ``duty`` times as long as the last one took, so that storm
collections take at most one part in ``duty`` of the loop's time however connections come.
A fixed ten seconds, the earlier rule, put the second collection of a storm that came in two
waves (the Go load generator's 1000 publishers connected 0.5 s apart on a busy machine)
ten seconds on, inside the measured traffic (11 ms and 43 ms in two runs of scenario h);
a full collection of a thousand connections' objects takes 10 to 50 ms, so now it waits
0.5 to 2.5 s.

Sans-IO: the server passes the loop's clock and arms a timer for :meth:`due`; ``collect``
and ``full_collections`` are the ``gc`` module's unless a test passes its own.

The same traffic also meets the collector's youngest generation (:func:`raise_young_threshold`,
at boot). CPython collects it each time 700 more container objects are alive than at its
last collection; a burst of a thousand lone messages (scenario h: a message, its queue
entry, its unsettled delivery, ...) holds several thousand until their acks free them, so
the burst met two or three young collections, every tenth of them a middle one, each
walking what was alive then and promoting it: the messages reached the oldest generation
just before dying there, and their count brought on a full collection of every connection's
objects every 15 or 20 seconds, in the middle of a burst. Measured (``bench.burst``, 1000
connections, 40 bursts, the compiled build): 105 young, 10 middle and one full collection
(10.9 ms, 31.5 ms in the other run) during the bursts, 1.0 to 1.5 ms a burst in all. With
``YOUNG_THRESHOLD`` none at all: a burst's messages are freed before that many are alive.
A steady flow (scenario g) keeps few objects alive and is collected as rarely; a queue
that grows (a backlog) is collected ``YOUNG_THRESHOLD`` objects at a time, the same work
in fewer, longer steps.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "DUTY",
    "QUIET",
    "SPACING",
    "STORM",
    "YOUNG_THRESHOLD",
    "StormCollector",
    "raise_young_threshold",
]

log = logging.getLogger("leveret.gc")

STORM: Final = 100
QUIET: Final = 0.5
SPACING: Final = 1.0
DUTY: Final = 50.0
# Container objects alive beyond the last young collection before the next one (CPython's
# default is 700): more than a burst of a thousand lone messages holds.
YOUNG_THRESHOLD: Final = 10_000


def raise_young_threshold(threshold: int = YOUNG_THRESHOLD) -> None:
    """Collect the youngest generation only once ``threshold`` more objects are alive than
    at its last collection (see the module's doc); a higher threshold set already (the
    embedding program's) stays, and the older generations' thresholds are kept."""
    young, middle, old = gc.get_threshold()
    if 0 < young < threshold:
        gc.set_threshold(threshold, middle, old)


def _full_collections() -> int:
    return int(gc.get_stats()[2]["collections"])


def _collect() -> None:
    gc.collect()


class StormCollector:
    """Counts accepted connections and says when to collect (see the module's doc)."""

    def __init__(
        self,
        *,
        storm: int = STORM,
        quiet: float = QUIET,
        spacing: float = SPACING,
        duty: float = DUTY,
        collect: Callable[[], None] = _collect,
        full_collections: Callable[[], int] = _full_collections,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.storm = storm
        self.quiet = quiet
        self.spacing = spacing
        self.duty = duty
        self._timer = timer
        self._gap = spacing  # after the last collection: spacing, or duty times its cost
        self._collect = collect
        self._full_collections = full_collections
        # Accepted since the last full collection; the count of full collections then.
        self.pending = 0
        self._seen = full_collections()
        self._last_accept = 0.0
        self._last_collect: float | None = None
        self.collections = 0  # taken by this collector (management and tests read it)

    def accepted(self, now: float) -> float | None:
        """One connection accepted at ``now``: when to call :meth:`check` (None: no need)."""
        seen = self._full_collections()
        if seen != self._seen:  # CPython collected everything meanwhile: start counting anew
            self._seen = seen
            self.pending = 0
        self.pending += 1
        self._last_accept = now
        return self.due()

    def due(self) -> float | None:
        """When the storm may be over and collected, or None while it is too small."""
        if self.pending < self.storm:
            return None
        due = self._last_accept + self.quiet
        if self._last_collect is not None:
            due = max(due, self._last_collect + self._gap)
        return due

    def check(self, now: float) -> float | None:
        """Collect if the storm is over; else when to look again (None: nothing to do)."""
        due = self.due()
        if due is None:
            return None
        if now < due:
            return due
        if self._full_collections() != self._seen:
            # A full collection ran since the storm began: it has been walked already.
            self._seen = self._full_collections()
            self.pending = 0
            return None
        pending = self.pending
        started = self._timer()
        self._collect()
        took = self._timer() - started
        self._last_collect = now
        self._gap = max(self.spacing, self.duty * took)
        self.collections += 1
        self.pending = 0
        self._seen = self._full_collections()
        log.debug(
            "full collection after %d new connections: %.1f ms",
            pending,
            took * 1e3,
        )
        return None
