"""Quorum queues (``x-queue-type: quorum``, RabbitMQ's ``rabbit_quorum_queue``): durable only,
every message delivered with ``x-delivery-count`` (0 the first time), each failed delivery
(a release, a nack with requeue, a channel closed with the message unacked) counted, and a
message past ``x-delivery-limit`` dead-lettered (``delivery_limit``) instead of coming back.

This is where replication goes (issue 25: a leader and followers per queue, an epoch-stamped
log of every operation). The queue's state changes only through the operations of the
``Queue`` interface, and each one it keeps writes through ``self.store`` (``QueueStore``):
``enqueued``, ``delivered``, ``removed`` (settled), ``requeued`` (with the delivery count),
``dead_lettered`` (with the reason: rejected, expired, over a limit) and ``purged``. Today the
store is the broker's journal, which keeps every message of a quorum queue, the transient
ones too (``EVERY_MESSAGE_STORE``: RabbitMQ's quorum queues keep every message whatever
its delivery mode). A replicated quorum queue gives every entry a place in its log
(``entry.sid``) and a store that appends each of those calls to it, with
the leader's epoch; a follower rebuilds the queue by applying the same records in order,
without consumers (docs/architecture.md, "Adding a queue type").

**Serving.** A replicated queue's leader may deliver only while it can prove it still holds
its lease: a leader paused or cut off from etcd past its lease has been replaced, and what
it delivered or took acks for would be the new leader's to deliver again. The cluster gives
the queue ``serve_until``, an instant of the model clock (``Timers.now``) that it moves on
with each answered keepalive; every delivery (to a consumer or a get) compares the clock the
model was given with it, so no timer has to have run first (a process woken from a pause
reads its input before its keepalive task runs). Past it, the queue delivers nothing and
keeps the settles it is given until :meth:`QuorumQueue.serve` moves the instant on
(consumers wait, none is cancelled); a leader that was replaced never serves again (the
cluster drops this copy for the new leader's proxy). On one node it is +inf.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from leveret.model import dead_letter as dl
from leveret.model.queues.args import PLAIN
from leveret.model.queues.base import EVERY_MESSAGE_STORE, Queue, QueueType, register
from leveret.model.queues.classic import CLASSIC_ONLY
from leveret.model.queues.fifo import ClassicQueue

if TYPE_CHECKING:
    from collections.abc import Mapping

    from leveret.model.entry import QueuedMessage
    from leveret.model.memory_gauge import MemoryGauge
    from leveret.model.message import Message
    from leveret.model.queues.args import QueueConfig
    from leveret.model.queues.base import QueueHost
    from leveret.model.timers import Timers

__all__ = ["QUORUM", "QuorumQueue", "QuorumType"]

DELIVERY_COUNT = "x-delivery-count"


class QuorumType(QueueType):
    """RabbitMQ's ``rabbit_quorum_queue`` (on one node, for now)."""

    name = "quorum"
    durable_only = True
    refused: tuple[str, ...] = (
        *CLASSIC_ONLY,
        "x-max-age",
        "x-stream-max-segment-size-bytes",
        "x-initial-cluster-size",
    )
    policy_keys: tuple[str, ...] = (
        "expires",
        "message-ttl",
        "max-length",
        "max-length-bytes",
        "overflow",
        "dead-letter-exchange",
        "dead-letter-routing-key",
        "delivery-limit",
        "dead-letter-strategy",
        "min-in-sync",
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
        return QuorumQueue(
            host.name,
            name,
            durable=durable,
            arguments=arguments,
            gauge=host.gauge,
            config=config,
            host=host,
            timers=host.timers,
        )


QUORUM = register(QuorumType())


class QuorumQueue(ClassicQueue):
    """A quorum queue; see the module docstring. Its config always asks for the feature
    paths (``QueueConfig.special``), where the hooks below run."""

    def __init__(
        self,
        vhost_name: str,
        name: str,
        *,
        durable: bool = True,
        arguments: Mapping[str, object] | None = None,
        gauge: MemoryGauge | None = None,
        config: QueueConfig = PLAIN,
        host: QueueHost | None = None,
        timers: Timers | None = None,
    ) -> None:
        super().__init__(
            vhost_name,
            name,
            durable=durable,
            arguments=arguments,
            gauge=gauge,
            config=config,
            host=host,
            timers=timers,
            queue_type=QUORUM,
        )
        self.store = EVERY_MESSAGE_STORE
        self.serve_until = math.inf
        # Settles (None) and discards (the reason) taken while not serving, applied in
        # order once it serves again.
        self._held: list[tuple[QueuedMessage, str | None]] = []

    def serve(self, until: float) -> None:
        """Serve until ``until`` (model clock): -inf stops at once; while serving, the
        settles held meanwhile are applied and what waits is delivered."""
        self.serve_until = until
        if self.timers.now >= until or self.deleted:
            return
        held, self._held = self._held, []
        for entry, reason in held:
            if reason is None:
                super().settle(entry)
            else:
                super().discard(entry, reason)
        self.dispatch()

    def _deliver_special(self, entry: QueuedMessage) -> bool:
        if self.timers.now >= self.serve_until:
            return False
        return super()._deliver_special(entry)

    def get(self, *, auto_settle: bool) -> QueuedMessage | None:
        if self.timers.now >= self.serve_until:
            self.n_get_empty += 1
            return None
        return super().get(auto_settle=auto_settle)

    def acquire(self, entry: QueuedMessage) -> QueuedMessage | None:
        if self.timers.now >= self.serve_until:
            return None
        return super().acquire(entry)

    def settle(self, entry: QueuedMessage) -> None:
        if self.timers.now >= self.serve_until:
            self._held.append((entry, None))
            return
        super().settle(entry)

    def discard(self, entry: QueuedMessage, reason: str = dl.REJECTED) -> None:
        if self.timers.now >= self.serve_until:
            self._held.append((entry, reason))
            return
        super().discard(entry, reason)

    def _admit(self, message: Message) -> Message:
        # RabbitMQ's quorum queues deliver every message with x-delivery-count (0 first).
        return message.replace(headers={**(message.headers or {}), DELIVERY_COUNT: 0})

    def _returned(self, entry: QueuedMessage, redelivered: bool) -> bool:
        if not redelivered:
            return True
        entry.redelivered = True
        entry.deliveries += 1
        limit = self.config.delivery_limit
        if limit is not None and entry.deliveries > limit:
            self._drop(entry, dl.DELIVERY_LIMIT)
            return False
        entry.message = entry.message.replace(
            headers={**(entry.message.headers or {}), DELIVERY_COUNT: entry.deliveries}
        )
        return True

    def amend(
        self, entry: QueuedMessage, headers: Mapping[str, object] | None, failed: bool
    ) -> None:
        # A failed delivery is counted by the release itself (``_returned``).
        super().amend(entry, headers, False)
