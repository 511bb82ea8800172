"""Settling deliveries, in the core's words; every front end maps its protocol onto these.

A delivery is an entry a queue handed out unsettled (to a consumer, or to a get). Its owner
settles it with one of four outcomes (AMQP 1.0's names; 0-9-1's ack is ``accept``, a reject
or nack with requeue is ``release``, without requeue ``reject``):

- ``accept``: it leaves the queue;
- ``reject``: it leaves the queue for good, dead-lettered (``rejected``) where the queue says;
- ``release``: it goes back to its place in the queue, marked redelivered (a quorum queue
  counts a failed delivery; past ``x-delivery-limit`` it is dropped or dead-lettered);
- ``modify``: release or reject with changes (1.0's ``modified``): headers merged into the
  message (a 1.0 message's ``x-`` headers are its message annotations), a failed delivery
  counted or not, and ``undeliverable`` dead-letters it as ``reject`` does (RabbitMQ 4).

A delivery whose queue was deleted meanwhile is simply gone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

# Imported at run time although only the annotations of Delivery name them: the compiled
# build (mypyc) builds the NamedTuple from its field types when the module loads, and
# crashes (SIGSEGV, not an ImportError) if they were never imported.
from leveret.model.consumer import Consumer, Source  # noqa: TC001
from leveret.model.entry import QueuedMessage  # noqa: TC001

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["Delivery", "accept", "modify", "reject", "release"]


class Delivery(NamedTuple):
    """An unsettled delivery: the entry, its queue, the consumer it went to (None for a
    get) and when it went (``Timers.now``, for settlement timeouts)."""

    entry: QueuedMessage
    queue: Source
    consumer: Consumer | None
    at: float = 0.0


def accept(deliveries: Iterable[Delivery]) -> None:
    for delivery in deliveries:
        delivery.queue.settle(delivery.entry)


def reject(deliveries: Iterable[Delivery]) -> None:
    for delivery in deliveries:
        queue = delivery.queue
        if queue.deleted:
            queue.settle(delivery.entry)
        else:
            queue.discard(delivery.entry)


def release(deliveries: Iterable[Delivery], *, redelivered: bool = True) -> None:
    """Requeue, one call per queue so that each queue restores its order once; marked
    redelivered unless ``redelivered`` is False (0-10's release without set-redelivered)."""
    by_queue: dict[Source, list[QueuedMessage]] = {}
    for delivery in deliveries:
        by_queue.setdefault(delivery.queue, []).append(delivery.entry)
    for queue, entries in by_queue.items():
        if queue.deleted:
            for entry in entries:
                queue.settle(entry)
        else:
            queue.requeue(entries, redelivered)


def modify(
    deliveries: Iterable[Delivery],
    *,
    headers: Mapping[str, object] | None = None,
    failed: bool = False,
    undeliverable: bool = False,
) -> None:
    """Give the deliveries back changed: each queue amends its entry (``Source.amend``:
    ``headers`` merged into its copy, a failed delivery counted; a stream's log is never
    changed), then ``reject`` when ``undeliverable``, else ``release``."""
    held = list(deliveries)
    for delivery in held:
        queue = delivery.queue
        if not queue.deleted:
            queue.amend(delivery.entry, headers, failed)
    if undeliverable:
        reject(held)
    else:
        release(held)
