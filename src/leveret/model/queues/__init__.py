"""Queue types of the broker core: the interface (``base.py``) and one module per type.

- ``classic.py``: ``x-queue-type: classic`` (the default); its queue, ``fifo.py``: FIFO,
  paging, the features of ``features.py`` (TTLs, limits, single active consumer, consumer
  priorities, ``x-expires``); its priority levels, ``priority.py``; its keyed variant
  (message groups, last values), ``keyed.py``;
- ``quorum.py``: ``x-queue-type: quorum``, delivery counts and limits; where replication goes;
- ``stream.py`` (its log in ``stream_log.py``): ``x-queue-type: stream``, read by offset;
- ``delayed.py``: the store of a delayed-message exchange (a queue no client declares).

Importing this package registers every declarable type in :data:`TYPES`; :func:`type_of`
finds the one a declaration's arguments ask for.
"""

from __future__ import annotations

from leveret.model.queues.base import (
    TYPES,
    Browsed,
    Queue,
    QueueHost,
    QueueStore,
    QueueType,
    parse_queue_args,
    type_of,
)
from leveret.model.queues.classic import CLASSIC, selectable
from leveret.model.queues.delayed import DelayQueue
from leveret.model.queues.fifo import ClassicQueue
from leveret.model.queues.keyed import KeyedQueue
from leveret.model.queues.quorum import QUORUM, QuorumQueue
from leveret.model.queues.stream import STREAM, StreamQueue

__all__ = [
    "CLASSIC",
    "QUORUM",
    "STREAM",
    "TYPES",
    "Browsed",
    "ClassicQueue",
    "DelayQueue",
    "KeyedQueue",
    "Queue",
    "QueueHost",
    "QueueStore",
    "QueueType",
    "QuorumQueue",
    "StreamQueue",
    "parse_queue_args",
    "selectable",
    "type_of",
]
