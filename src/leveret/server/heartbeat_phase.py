"""Each accepted connection's heartbeat phase: connections opened together send their
heartbeats apart (issue 26, scenario h).

A 0-9-1 connection whose output is idle sends a heartbeat half an interval after its last
write. A thousand publishers connected at once (the Go load generator's scenario h) had
their last write, the channel's open-ok, in the same few milliseconds, and each of them
starts its 1 s publishing ticker on that answer: every fifth second the broker found a
thousand heartbeat timers due, one write each, just ahead of the thousand publishes they
were in phase with, and that burst's messages waited for them.

Each connection waits ``phase`` times half the interval instead, ``phase`` between
``LOW`` and 1: the connection's number times the golden ratio, modulo 1 (the Weyl
sequence, whose first n values leave no gap wider than about 2.6/n of the range), so that
any number of connections opened together spread their heartbeats over a quarter of the
half-interval (1.25 s at the 10 s interval most clients ask for), and a connection's
heartbeats stay apart from the others' since their periods differ. An idle connection
sends at most a third more heartbeats than at exactly half the interval.
"""

from __future__ import annotations

import itertools
from typing import Final

__all__ = ["LOW", "heartbeat_phase", "next_heartbeat_phase"]

LOW: Final = 0.75
_GOLDEN: Final = 0.6180339887498949

_numbers = itertools.count()


def heartbeat_phase(number: int) -> float:
    """The phase of the ``number``-th connection: in (``LOW``, 1]."""
    return 1.0 - (1.0 - LOW) * ((number * _GOLDEN) % 1.0)


def next_heartbeat_phase() -> float:
    """The next accepted connection's phase (one counter for the process)."""
    return heartbeat_phase(next(_numbers))
