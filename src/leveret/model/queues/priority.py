"""Priority queues: a classic queue declared with ``x-max-priority`` (RabbitMQ's classic
priority queue: not a type of its own) or Qpid's ``qpid.priorities`` keeps its ready messages
in priority levels (``PriorityReady``: one FIFO per level, the highest served first; with
``qpid.fairshare``, ``FairshareReady``: each level takes its turn). ``make_ready`` picks a
queue's ready list; ``insert_by_seq`` puts a released entry back at its place in either.
A message without a priority is at level 0, one above the maximum at the maximum (Qpid's
levels: its own mapping, ``model/qpid_args.py``). A priority queue always runs the feature
paths, so it never pages.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from leveret.model.entry import QueuedMessage
    from leveret.model.queues.args import QueueConfig

__all__ = ["FairshareReady", "PriorityReady", "insert_by_seq", "make_ready"]


def insert_by_seq(ready: deque[QueuedMessage], entry: QueuedMessage) -> None:
    """Put ``entry`` back at its original position (entries are in seq order)."""
    if not ready or entry.seq < ready[0].seq:
        ready.appendleft(entry)
    else:
        ready.insert(bisect_left(ready, entry.seq, key=lambda e: e.seq), entry)


class PriorityReady:
    """Ready entries of a priority queue: one FIFO per priority, highest served first."""

    __slots__ = ("_count", "levels")

    def __init__(self, max_priority: int) -> None:
        self.levels: list[deque[QueuedMessage]] = [deque() for _ in range(max_priority + 1)]
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[QueuedMessage]:
        for level in reversed(self.levels):
            yield from level

    def __getitem__(self, index: int) -> QueuedMessage:
        if index != 0:
            raise IndexError("only the head of a priority queue can be read")
        for level in reversed(self.levels):
            if level:
                return level[0]
        raise IndexError("empty queue")

    def append(self, entry: QueuedMessage) -> None:
        self.levels[entry.priority].append(entry)
        self._count += 1

    def popleft(self) -> QueuedMessage:
        for level in reversed(self.levels):
            if level:
                self._count -= 1
                return level.popleft()
        raise IndexError("empty queue")

    def remove(self, entry: QueuedMessage) -> bool:
        """Take ``entry`` out wherever it is; False when it is not here."""
        level = self.levels[entry.priority]
        i = bisect_left(level, entry.seq, key=lambda e: e.seq)
        if i >= len(level) or level[i] is not entry:
            return False
        del level[i]
        self._count -= 1
        return True

    def put_back(self, entry: QueuedMessage) -> None:
        insert_by_seq(self.levels[entry.priority], entry)
        self._count += 1

    def pop_lowest(self) -> QueuedMessage:
        """The oldest entry of the lowest priority (what a Qpid ring drops first)."""
        for level in self.levels:
            if level:
                self._count -= 1
                return level.popleft()
        raise IndexError("empty queue")

    def clear(self) -> None:
        for level in self.levels:
            level.clear()
        self._count = 0


class FairshareReady(PriorityReady):
    """A priority queue with Qpid's fair shares: a level hands out at most its limit
    (0: no limit) before the next lower level with messages gets a turn; when every level
    with messages has had its share, a new round starts from the top."""

    __slots__ = ("_given", "limits")

    def __init__(self, max_priority: int, limits: tuple[int, ...]) -> None:
        super().__init__(max_priority)
        self.limits = limits
        self._given = [0] * len(self.levels)

    def _turn(self) -> int:
        """The level whose head goes next."""
        levels, limits, given = self.levels, self.limits, self._given
        top = -1
        for i in range(len(levels) - 1, -1, -1):
            if levels[i]:
                if top < 0:
                    top = i
                if not limits[i] or given[i] < limits[i]:
                    return i
        if top < 0:
            raise IndexError("empty queue")
        for i in range(len(given)):
            given[i] = 0  # every level had its share: a new round
        return top

    def __iter__(self) -> Iterator[QueuedMessage]:
        # Browsing order: by level as a plain priority queue (the shares are a delivery
        # matter; a browser sees every message all the same).
        return super().__iter__()

    def __getitem__(self, index: int) -> QueuedMessage:
        if index != 0:
            raise IndexError("only the head of a priority queue can be read")
        return self.levels[self._turn()][0]

    def popleft(self) -> QueuedMessage:
        level = self._turn()
        self._given[level] += 1
        self._count -= 1
        return self.levels[level].popleft()


def make_ready(config: QueueConfig) -> deque[QueuedMessage] | PriorityReady:
    """The list of a classic queue's ready entries for ``config``."""
    if config.max_priority is None:
        return deque()
    if config.fairshare is not None:
        return FairshareReady(config.max_priority, config.fairshare)
    return PriorityReady(config.max_priority)
