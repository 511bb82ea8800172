"""Priority queues: a classic queue declared with ``x-max-priority`` (RabbitMQ's classic
priority queue; not a type of its own, ``CLASSIC`` makes one). Its ready messages are one FIFO
per priority level (``ready.PriorityReady``), the highest served first; a message without a
priority is at level 0, one above the maximum at the maximum. It always runs the feature
paths, so it never pages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.model.message import HINT_PRIORITY
from leveret.model.queues.args import PLAIN
from leveret.model.queues.fifo import ClassicQueue
from leveret.model.queues.ready import PriorityReady

if TYPE_CHECKING:
    from collections.abc import Mapping

    from leveret.model.entry import QueuedMessage
    from leveret.model.memory_gauge import MemoryGauge
    from leveret.model.queues.args import QueueConfig
    from leveret.model.queues.base import QueueHost, QueueType
    from leveret.model.timers import Timers

__all__ = ["PriorityQueue"]


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
        queue_type: QueueType,
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
