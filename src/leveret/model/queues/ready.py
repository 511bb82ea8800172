"""The ready messages of a queue built on the classic one: kept in sequence order
(``insert_by_seq`` puts a released entry back at its place), or in priority levels
(``PriorityReady``, a priority queue's: one FIFO per level, the highest served first).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from leveret.model.entry import QueuedMessage

__all__ = ["PriorityReady", "insert_by_seq"]


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

    def clear(self) -> None:
        for level in self.levels:
            level.clear()
        self._count = 0
