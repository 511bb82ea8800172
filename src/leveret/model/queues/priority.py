"""Priority queues: a classic queue declared with ``x-max-priority`` (RabbitMQ's classic
priority queue; not a type of its own, ``CLASSIC`` makes one). Its ready messages are one FIFO
per priority level, the highest served first; a message without a priority is at level 0,
one above the maximum at the maximum. It always runs the feature paths, so it never pages.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from typing import TYPE_CHECKING

from leveret.model.message import HINT_PRIORITY
from leveret.model.queues.args import PLAIN
from leveret.model.queues.classic import CLASSIC, ClassicQueue
from leveret.model.queues.features import insert_by_seq

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from leveret.model.entry import QueuedMessage
    from leveret.model.memory_gauge import MemoryGauge
    from leveret.model.queues.args import QueueConfig
    from leveret.model.queues.base import QueueHost, QueueType
    from leveret.model.timers import Timers

__all__ = ["PriorityQueue", "PriorityReady"]


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


class PriorityQueue(ClassicQueue):
    """A classic queue with priority levels; see the module docstring."""

    def __init__(
        self,
        vhost_name: str,
        name: str,
        *,
        durable: bool = False,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        arguments: Mapping[str, object] | None = None,
        gauge: MemoryGauge | None = None,
        config: QueueConfig = PLAIN,
        host: QueueHost | None = None,
        timers: Timers | None = None,
        queue_type: QueueType = CLASSIC,
    ) -> None:
        super().__init__(
            vhost_name,
            name,
            durable=durable,
            exclusive_owner=exclusive_owner,
            auto_delete=auto_delete,
            arguments=arguments,
            gauge=gauge,
            config=config,
            host=host,
            timers=timers,
            queue_type=queue_type,
        )
        assert config.max_priority is not None
        self.max_priority = config.max_priority
        self.levels = PriorityReady(config.max_priority)
        self.ready = self.levels

    def _rank(self, entry: QueuedMessage) -> None:
        message = entry.message
        if message.hints & HINT_PRIORITY:
            entry.priority = min(message.properties.priority or 0, self.max_priority)

    def _put_back(self, entry: QueuedMessage) -> None:
        self.levels.put_back(entry)

    def _remove_ready(self, entry: QueuedMessage) -> bool:
        return self.levels.remove(entry)

    def acquire(self, entry: QueuedMessage) -> QueuedMessage | None:
        if not self.levels.remove(entry):
            return None
        self._acquired(entry)
        return entry

    def browse_after(self, seq: int, limit: int) -> list[QueuedMessage]:
        return sorted((e for e in self.levels if e.seq > seq), key=lambda e: e.seq)[:limit]
