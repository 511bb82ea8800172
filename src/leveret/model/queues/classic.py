"""The classic type (``x-queue-type: classic``, the default; RabbitMQ's
``rabbit_classic_queue``): what its declarations may say, and which queue it makes: a
``ClassicQueue`` (``fifo.py``; with priority levels, ``priority.py``, when the arguments ask
for them), or a ``KeyedQueue`` (``keyed.py``) when they name a message-group or last-value
key (Qpid's ``qpid.group_header_key``, ``qpid.last_value_queue_key``).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, TypeGuard

from leveret.model.queues.base import Queue, QueueType, register
from leveret.model.queues.fifo import ClassicQueue
from leveret.model.queues.keyed import KeyedQueue

if TYPE_CHECKING:
    from collections.abc import Mapping

    from leveret.model.queues.args import QueueConfig
    from leveret.model.queues.base import QueueHost

__all__ = ["CLASSIC", "CLASSIC_ONLY", "ClassicType", "selectable"]

# Arguments that only a classic queue takes (RabbitMQ: "... of queue type rabbit_X_queue").
CLASSIC_ONLY = ("x-max-priority", "x-queue-mode", "x-queue-version", "x-queue-master-locator")


class ClassicType(QueueType):
    """RabbitMQ's ``rabbit_classic_queue``: any flags, every capability."""

    name = "classic"
    refused: tuple[str, ...] = (
        "x-dead-letter-strategy",
        "x-delivery-limit",
        "x-quorum-initial-group-size",
        "x-max-in-memory-length",
        "x-max-in-memory-bytes",
        "x-max-age",
        "x-stream-max-segment-size-bytes",
        "x-initial-cluster-size",
        "x-min-in-sync",
    )
    policy_keys: tuple[str, ...] = (
        "expires",
        "message-ttl",
        "max-length",
        "max-length-bytes",
        "overflow",
        "dead-letter-exchange",
        "dead-letter-routing-key",
        "queue-mode",
        "queue-version",
    )

    def create(
        self,
        host: QueueHost,
        name: str,
        *,
        durable: bool,
        exclusive_owner: object | None,
        auto_delete: bool,
        arguments: Mapping[str, object] | None,
        config: QueueConfig,
    ) -> Queue:
        kind = KeyedQueue if config.group_key or config.lvq_key else ClassicQueue
        return kind(
            host.name,
            name,
            durable=durable,
            exclusive_owner=exclusive_owner,
            auto_delete=auto_delete,
            arguments=arguments,
            gauge=host.gauge,
            config=config,
            host=host,
            timers=host.timers,
            queue_type=self,
        )


CLASSIC = register(ClassicType())


def selectable(queue: Queue) -> TypeGuard[ClassicQueue]:
    """Whether a consumer may take ready messages of ``queue`` from anywhere, in place
    (AMQP 1.0 selectors read ``ready`` by position: a FIFO, not priority levels)."""
    return isinstance(queue, ClassicQueue) and isinstance(queue.ready, deque)
