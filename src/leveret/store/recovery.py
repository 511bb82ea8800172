"""Rebuild the model from what the store read back, before any client connects.

Runs with the broker's journal still the null one, so nothing is written again; the server
attaches the store afterwards. Order: exchanges, queues with their messages (in their
original order), bindings (queue and exchange-to-exchange), then the values of ``x-lvc``
exchanges (so that restoring a binding hands none of them out again).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, TypeAlias, cast

from leveret.errors import AMQPError
from leveret.model.delayed import STORE_PREFIX
from leveret.model.lvc import STORE_PREFIX as LVC_PREFIX
from leveret.model.queue import QueuedMessage
from leveret.store.segment_index import SegmentIndex, StoredMessages

if TYPE_CHECKING:
    from array import array
    from collections.abc import Callable, Iterable

    from leveret.model.broker import Broker
    from leveret.model.message import Message
    from leveret.model.queue import Queue
    from leveret.model.vhost import VirtualHost
    from leveret.store.disk import Recovered, RecoveredQueue

    # Rebuilds a stored message: exchange, routing key, raw properties, body, Message.format.
    MessageFactory: TypeAlias = Callable[[str, str, bytes, bytes, int], Message]

log = logging.getLogger("leveret.store")


class StoredPages:
    """The ``PageSource`` of recovered deep queues: their pages are runs of message ids
    whose records stay in the store's segments until the queue reaches them."""

    def __init__(self, index: SegmentIndex, make_message: MessageFactory) -> None:
        self.index = index
        self.make_message = make_message
        self.pages = 0

    def load(self, handle: object, first_seq: int) -> list[QueuedMessage]:
        mids, delivered = cast("tuple[array[int], bytes]", handle)
        entries = []
        make = self.make_message
        for i, (exchange, routing_key, props, body, _at, fmt) in enumerate(self.index.load(mids)):
            message = make(exchange, routing_key, props, body, fmt)
            message.store_id = mid = mids[i]
            entry = QueuedMessage(first_seq + i, message, bool(delivered[i]))
            entry.sid = mid
            entries.append(entry)
        return entries

    def discard(self, handle: object) -> None:
        self.pages -= 1
        if not self.pages:
            self.index.close()  # every recovered page was taken: drop the index


def _restore_messages(
    queue: Queue,
    messages: Iterable[tuple[int, str, str, bytes, bytes, bool, float, int]],
    make_message: MessageFactory,
    sources: dict[int, StoredPages],
) -> None:
    """The head as objects; a deep queue's rest as pages that point into the segments."""
    stored = messages if isinstance(messages, StoredMessages) else None
    pages = stored is not None and queue.pager is not None and not queue.config.special
    restored = 0
    for mid, exchange, routing_key, props, body, delivered, at, fmt in messages:
        if pages and restored == queue.resident_max:
            break
        message = make_message(exchange, routing_key, props, body, fmt)
        message.store_id = mid
        queue.restore(message, mid, delivered, enqueued_at=at)
        restored += 1
    else:
        return
    assert stored is not None
    source = sources.get(id(stored.index))
    if source is None:
        source = sources[id(stored.index)] = StoredPages(stored.index, make_message)
    for mids, seen in stored.runs(restored, queue.page_messages):
        if queue.uses_features:
            # A message of the head made the queue take the feature paths (a TTL, a
            # priority): those keep every message as an object.
            records = stored.index.load(mids)
            for mid, flag, (exchange, routing_key, props, body, at, fmt) in zip(
                mids, seen, records, strict=True
            ):
                message = make_message(exchange, routing_key, props, body, fmt)
                message.store_id = mid
                queue.restore(message, mid, bool(flag), enqueued_at=at)
            continue
        source.pages += 1
        queue.restore_page(source, (mids, seen), len(mids), mids)
    stored.release()


def _restore_delayed(vhost: VirtualHost, q: RecoveredQueue, make_message: MessageFactory) -> None:
    """The pending messages of a durable delayed exchange (its hidden store queue; the
    stored time of each is its due time)."""
    exchange = vhost.exchanges.get(q.name[len(STORE_PREFIX) :])
    store = vhost.delay_store(exchange) if exchange is not None else None
    if store is None or not exchange or not exchange.durable:
        # The exchange's deletion removes this queue first, in the same batch: not reached
        # unless the definitions were edited by hand.
        log.warning("store: pending messages of a missing delayed exchange ignored: %s", q.name)
        if isinstance(q.messages, StoredMessages):
            q.messages.release()
        return
    store.store_id = q.qid
    count = 0
    for mid, exchange_name, routing_key, props, body, _delivered, at, fmt in q.messages:
        message = make_message(exchange_name, routing_key, props, body, fmt)
        store.restore(message, mid, False, enqueued_at=at)
        count += 1
    if isinstance(q.messages, StoredMessages):
        q.messages.release()
    store.arm()
    if count:
        log.info("store: %d pending messages of delayed exchange '%s'", count, exchange.name)


def _restore_values(vhost: VirtualHost, q: RecoveredQueue, make_message: MessageFactory) -> None:
    """The last values of a durable ``x-lvc`` exchange (its hidden store queue; each
    record's routing key is the key it is kept under). After the bindings: a restored
    binding hands nothing out again."""
    exchange = vhost.exchanges.get(q.name[len(LVC_PREFIX) :])
    store = vhost.lvc_store(exchange) if exchange is not None else None
    if store is None or exchange is None or not exchange.durable:
        log.warning("store: last values of a missing x-lvc exchange ignored: %s", q.name)
        if isinstance(q.messages, StoredMessages):
            q.messages.release()
        return
    store.store_id = q.qid
    for mid, exchange_name, routing_key, props, body, _delivered, _at, fmt in q.messages:
        message = make_message(exchange_name, routing_key, props, body, fmt)
        message.store_id = mid
        store.restore(message, mid)
    if isinstance(q.messages, StoredMessages):
        q.messages.release()


def restore(
    broker: Broker,
    recovered: Recovered,
    make_message: MessageFactory,
) -> None:
    for rec in recovered.exchanges:
        vhost = broker.add_vhost(rec["v"])
        try:
            vhost.declare_exchange(
                rec["n"],
                rec["t"],
                durable=True,
                auto_delete=rec["ad"],
                internal=rec["i"],
                arguments=rec["a"],
            )
        except AMQPError as exc:
            log.error("store: cannot restore exchange '%s': %s", rec["n"], exc.reply_text)
    sources: dict[int, StoredPages] = {}
    indexes: dict[int, SegmentIndex] = {}
    values: list[RecoveredQueue] = []
    for q in recovered.queues:
        if isinstance(q.messages, StoredMessages):
            indexes[id(q.messages.index)] = q.messages.index
        vhost = broker.add_vhost(q.vhost)
        if q.name.startswith(STORE_PREFIX):
            _restore_delayed(vhost, q, make_message)
            continue
        if q.name.startswith(LVC_PREFIX):
            values.append(q)
            continue
        try:
            queue = vhost.declare_queue(
                q.name, owner=None, durable=True, auto_delete=q.auto_delete, arguments=q.arguments
            )
        except AMQPError as exc:
            log.error("store: cannot restore queue '%s': %s", q.name, exc.reply_text)
            continue
        queue.store_id = q.qid
        _restore_messages(queue, q.messages, make_message, sources)
    for rec in recovered.bindings:
        vhost = broker.add_vhost(rec["v"])
        try:
            if rec["q"]:
                vhost.bind_queue(rec["d"], rec["s"], rec["k"], rec["a"], owner=None)
            else:
                vhost.bind_exchange(rec["d"], rec["s"], rec["k"], rec["a"])
        except AMQPError as exc:
            log.error(
                "store: cannot restore binding of '%s' to '%s': %s",
                rec["d"],
                rec["s"],
                exc.reply_text,
            )
    for q in values:
        _restore_values(broker.add_vhost(q.vhost), q, make_message)
    for key, index in indexes.items():
        source = sources.get(key)
        if source is None or not source.pages:
            index.close()  # no page points into the segments: nothing needs the index
