"""A session is the model side of one AMQP channel: consumers, unacked deliveries, QoS,
publisher confirms and transactions. Front ends drive it; it reports back through a
``SessionSink`` (deliveries, returns, confirms, server-side cancels) and never writes bytes.

QoS follows RabbitMQ: ``basic.qos(global=False)`` is a per-consumer limit, ``global=True``
limits the whole channel; both apply when both are set. Unlike RabbitMQ, a per-consumer
limit also updates the channel's existing consumers, not only later ones.
``prefetch_size`` is honoured as the spec describes it (a byte window over unacked
deliveries, ignored while nothing is unacked), where RabbitMQ refuses it.

Consumer ack timeouts (RabbitMQ 4.3's rule, not 3.x's channel close): a consumer whose
oldest unacked delivery is older than its timeout is cancelled (``basic.cancel`` to clients
that asked for cancel notifications) and its unacked deliveries are requeued; the channel
stays open, and late acks or rejects of those deliveries are ignored. Each consumer keeps
its delivery tags in order (``Consumer.pending``, pruned as acks arrive in order), so only
its oldest delivery is looked at, and it has at most one deadline in ``Timers`` at a time.
"""

from __future__ import annotations

import base64
import logging
import os
from typing import TYPE_CHECKING, NamedTuple, Protocol

from leveret.errors import (
    AccessRefused,
    NotAllowed,
    NotFound,
    PreconditionFailed,
)
from leveret.model.message import HINT_EXPIRATION, HINT_HEADERS, HINT_REPLY_TO
from leveret.model.queue import Consumer, Queue, QueuedMessage
from leveret.model.queue_args import consumer_priority, consumer_timeout
from leveret.model.queue_features import parse_expiration
from leveret.model.stream import StreamConsumer, StreamQueue
from leveret.model.vhost import REPLY_TO, REPLY_TO_PREFIX

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from leveret.model.message import Message
    from leveret.model.vhost import Exchange, VirtualHost

log = logging.getLogger("leveret.model")


class SessionSink(Protocol):
    """What a front end does with the session's output."""

    def deliver(
        self, consumer_tag: str, delivery_tag: int, redelivered: bool, message: Message
    ) -> None: ...

    def returned(self, reply_code: int, reply_text: str, message: Message) -> None: ...

    def confirm(self, delivery_tag: int, *, multiple: bool, ack: bool) -> None: ...

    def consumer_cancelled(self, consumer_tag: str) -> None: ...


class Unacked(NamedTuple):
    entry: QueuedMessage
    queue: Queue
    consumer: Consumer | None
    at: float = 0.0  # when it was delivered (Timers.now), for consumer timeouts


class _Publish(NamedTuple):
    exchange: str
    routing_key: str
    mandatory: bool
    immediate: bool
    message: Message


# A NamedTuple's constructor is a Python-level lambda; calling tuple.__new__ directly with
# every field costs about half as much, which counts for the two made per message
# (_Publish on publish, Unacked on each manual-ack delivery).
_new_tuple = tuple.__new__


def _consumer_tag() -> str:
    return "amq.ctag-" + os.urandom(16).hex()


class Session:
    """The state of one channel of one client connection."""

    def __init__(
        self,
        vhost: VirtualHost,
        owner: object,
        sink: SessionSink,
        *,
        consumer_timeout: float | None = None,
    ) -> None:
        self.vhost = vhost
        # The broker's default consumer ack timeout in seconds (None = off).
        self.consumer_timeout = consumer_timeout
        # Delivery tags requeued by a consumer timeout: a late ack/reject of one is ignored.
        self._timed_out: set[int] = set()
        self.owner = owner
        self.sink = sink
        self.consumers: dict[str, Consumer] = {}
        self.unacked: dict[int, Unacked] = {}
        self._next_tag = 1
        self.flow_active = True
        self.writable = True
        self.prefetch_count = 0  # for consumers created from now on
        self.global_prefetch_count = 0
        self.prefetch_size = 0
        self._consumer_unacked = 0
        self._unacked_bytes = 0
        self.last_queue = ""
        self.confirm_mode = False
        # Set when a publish went to a queue whose consumers fall behind (Queue.backlog_pace);
        # the front end reads and clears it to pace this publisher's reading.
        self.feeds_backlog = False
        self._publish_seq = 0
        self._confirmed_upto = 0
        self._pending_upto = 0
        # The last publish whose confirm waits for the store's commit, and how many confirm
        # sends are waiting for one (later confirms queue behind them, to stay in order).
        self._sync_upto = 0
        self._confirms_waiting = 0
        self.tx_mode = False
        self._tx_publishes: list[_Publish] = []
        # Settlements held until commit; requeue is None for an ack.
        self._held: list[tuple[int, Unacked, bool | None]] = []
        self.closed = False
        # Direct reply-to: our consumer of amq.rabbitmq.reply-to and its routing key.
        self.reply_consumer = ""
        self.reply_key = ""
        # Whether this channel ever consumed from a stream (reject/nack must check).
        self._streams = False

    # -- credit --------------------------------------------------------------------------

    @property
    def deliverable(self) -> bool:
        return self.flow_active and self.writable and not self.closed

    def has_credit(self, size: int) -> bool:
        if self.global_prefetch_count and self._consumer_unacked >= self.global_prefetch_count:
            return False
        return not (
            self.prefetch_size
            and self._unacked_bytes
            and self._unacked_bytes + size > self.prefetch_size
        )

    def deliver(self, consumer: Consumer, entry: QueuedMessage) -> None:
        """Called by a queue that hands ``entry`` to ``consumer``."""
        tag = self._next_tag
        self._next_tag = tag + 1
        if not consumer.no_ack:
            if entry.sid and not entry.redelivered:
                queue = consumer.queue
                queue.journal.delivered(queue.store_id, entry.sid)
            timers = self.vhost.timers
            self.unacked[tag] = _new_tuple(Unacked, (entry, consumer.queue, consumer, timers.now))
            consumer.unacked += 1
            self._consumer_unacked += 1
            self._unacked_bytes += len(entry.message.body)
            if consumer.timeout is not None:
                consumer.pending.append(tag)
                if not consumer.armed:
                    consumer.armed = True
                    timers.schedule(timers.now + consumer.timeout, consumer)
        self.sink.deliver(consumer.tag, tag, entry.redelivered, entry.message)

    def _redispatch(self) -> None:
        consumers = self.consumers
        if len(consumers) == 1:
            # The common case, once per ack: one consumer, no set of queues to build.
            [consumer] = consumers.values()
            consumer.queue.dispatch()
            return
        for queue in {c.queue for c in consumers.values()}:
            queue.dispatch()

    def set_qos(self, prefetch_size: int, prefetch_count: int, global_: bool) -> None:
        if global_:
            self.global_prefetch_count = prefetch_count
            self.prefetch_size = prefetch_size
        else:
            self.prefetch_count = prefetch_count
            self.prefetch_size = prefetch_size
            # Deviation from RabbitMQ, which applies it to later consumers only: a client that
            # raises its prefetch at run time (Celery's ETA tasks, rabbitmq-server#11948)
            # means the consumers it already has.
            for consumer in self.consumers.values():
                consumer.prefetch_count = prefetch_count
        self._redispatch()

    def set_flow(self, active: bool) -> None:
        self.flow_active = active
        if active:
            self._redispatch()

    def set_writable(self, writable: bool) -> None:
        self.writable = writable
        if writable:
            self._redispatch()

    # -- names ---------------------------------------------------------------------------

    def queue_name(self, name: str) -> str:
        """Resolve the empty queue name to the channel's last declared queue (spec rule)."""
        if name:
            return name
        if not self.last_queue:
            raise NotFound("no previously declared queue")
        return self.last_queue

    # -- consumers -----------------------------------------------------------------------

    def consume(
        self,
        queue_name: str,
        consumer_tag: str,
        *,
        no_ack: bool,
        exclusive: bool,
        arguments: Mapping[str, object],
    ) -> str:
        if queue_name == REPLY_TO:
            return self._consume_replies(consumer_tag, no_ack=no_ack)
        queue = self.vhost.queue(self.queue_name(queue_name), self.owner)
        if not consumer_tag:
            consumer_tag = _consumer_tag()
        elif consumer_tag in self.consumers or consumer_tag == self.reply_consumer:
            raise NotAllowed(f"attempt to reuse consumer tag '{consumer_tag}'")
        priority = consumer_priority(arguments)
        # The consumer's own x-consumer-timeout, else the queue's, else the broker's.
        timeout = consumer_timeout(arguments)
        if timeout is None:
            timeout = queue.config.consumer_timeout
        if timeout is None:
            timeout = self.consumer_timeout
        if queue.has_exclusive_consumer() or (exclusive and queue.consumers):
            raise AccessRefused(
                f"queue '{queue.name}' in vhost '{self.vhost.name}' in exclusive use"
            )
        consumer: Consumer
        if isinstance(queue, StreamQueue):
            spec = queue.check_consumer(
                no_ack=no_ack, prefetch_count=self.prefetch_count, arguments=arguments
            )
            self._streams = True
            consumer = StreamConsumer(
                consumer_tag,
                queue,
                self,
                spec=spec,
                exclusive=exclusive,
                prefetch_count=self.prefetch_count,
                arguments=arguments,
                priority=priority,
                timeout=timeout,
            )
        else:
            consumer = Consumer(
                consumer_tag,
                queue,
                self,
                no_ack=no_ack,
                exclusive=exclusive,
                prefetch_count=self.prefetch_count,
                arguments=arguments,
                priority=priority,
                timeout=None if no_ack else timeout,
            )
        self.consumers[consumer_tag] = consumer
        queue.add_consumer(consumer)
        return consumer_tag

    def _consume_replies(self, consumer_tag: str, *, no_ack: bool) -> str:
        """basic.consume on amq.rabbitmq.reply-to (RabbitMQ's direct reply-to rules)."""
        if not no_ack:
            raise PreconditionFailed("reply consumer cannot acknowledge")
        if self.reply_consumer:
            raise PreconditionFailed("reply consumer already set")
        if not consumer_tag:
            consumer_tag = _consumer_tag()
        elif consumer_tag in self.consumers:
            raise NotAllowed(f"attempt to reuse consumer tag '{consumer_tag}'")
        key = base64.urlsafe_b64encode(os.urandom(18)).decode()
        self.reply_consumer, self.reply_key = consumer_tag, key
        self.vhost.reply_to[key] = self
        return consumer_tag

    def _deliver_reply(self, message: Message) -> None:
        tag = self._next_tag
        self._next_tag = tag + 1
        self.sink.deliver(self.reply_consumer, tag, False, message)

    def cancel(self, consumer_tag: str) -> bool:
        """Cancel a consumer of this session; False if the tag is unknown (not an error)."""
        if consumer_tag and consumer_tag == self.reply_consumer:
            self.vhost.reply_to.pop(self.reply_key, None)
            self.reply_consumer = self.reply_key = ""
            return True
        consumer = self.consumers.pop(consumer_tag, None)
        if consumer is None:
            return False
        queue = consumer.queue
        queue.remove_consumer(consumer)
        if queue.unused_after_cancel():
            self.vhost.remove_queue(queue)
        return True

    def check_consumer_timeout(self, consumer: Consumer, now: float) -> None:
        """``consumer``'s deadline came: time it out, or wait for its oldest delivery."""
        if self.closed or self.consumers.get(consumer.tag) is not consumer:
            return
        timeout = consumer.timeout
        pending = consumer.pending
        unacked = self.unacked
        while pending:
            item = unacked.get(pending[0])
            if item is not None and item.consumer is consumer:
                break
            pending.popleft()
        if not pending or timeout is None:
            return
        oldest = pending[0]
        due = unacked[oldest].at + timeout
        if now < due:
            consumer.armed = True
            self.vhost.timers.schedule(due, consumer)
            return
        # Cancel this consumer only, then requeue what it holds (RabbitMQ 4.3).
        tag = consumer.tag
        del self.consumers[tag]
        queue = consumer.queue
        queue.remove_consumer(consumer)
        items = []
        for delivery_tag in pending:
            item = unacked.get(delivery_tag)
            if item is not None and item.consumer is consumer:
                del unacked[delivery_tag]
                items.append((delivery_tag, item))
        pending.clear()
        self._timed_out.update(t for t, _ in items)
        log.warning(
            "consumer '%s' of queue '%s' in vhost '%s' timed out waiting for an ack of "
            "delivery tag %d (timeout %d ms): cancelled, %d message(s) requeued",
            tag,
            queue.name,
            self.vhost.name,
            oldest,
            round(timeout * 1000),
            len(items),
        )
        self.sink.consumer_cancelled(tag)
        self._reject(items, True)
        if queue.unused_after_cancel():
            self.vhost.remove_queue(queue)

    def queue_deleted(self, queue: Queue) -> None:
        """The vhost deleted ``queue``: drop its consumers here and tell the client."""
        for tag, consumer in list(self.consumers.items()):
            if consumer.queue is queue:
                del self.consumers[tag]
                self.sink.consumer_cancelled(tag)

    # -- publishing ----------------------------------------------------------------------

    def check_publish(self, exchange_name: str) -> None:
        """Validate the target before the content arrives (RabbitMQ checks at publish)."""
        exchange = self.vhost.exchange(exchange_name)
        if exchange.internal:
            raise AccessRefused(
                f"cannot publish to internal exchange '{exchange_name}' "
                f"in vhost '{self.vhost.name}'"
            )

    def publish(
        self,
        exchange_name: str,
        routing_key: str,
        message: Message,
        *,
        mandatory: bool = False,
        immediate: bool = False,
    ) -> None:
        if message.hints & (HINT_EXPIRATION | HINT_REPLY_TO):
            message = self._check_properties(message)
        if self.confirm_mode:
            self._publish_seq += 1
        publish = _new_tuple(_Publish, (exchange_name, routing_key, mandatory, immediate, message))
        if self.tx_mode:
            self.check_publish(exchange_name)
            self._tx_publishes.append(publish)
            return
        if not self.confirm_mode:
            self._route(publish)  # nothing to confirm: no need to watch the store's writes
            return
        journal = self.vhost.journal
        writes = journal.writes
        accepted = self._route(publish)
        if journal.writes != writes:
            if journal.ok:
                self._sync_upto = self._publish_seq  # stored: confirm once on disk
            else:
                accepted = False  # the store is failing (disk full): nack at once
        if accepted:
            self._pending_upto = self._publish_seq
        else:
            # A queue refused it (x-overflow reject-publish), or the store is failing:
            # nack this one alone.
            self.flush_confirms()
            seq = self._confirmed_upto = self._pending_upto = self._publish_seq
            if self._confirms_waiting:
                self._confirms_waiting += 1
                journal.after_commit(lambda: self._send_confirm(seq, False, False))
            else:
                self.sink.confirm(seq, multiple=False, ack=False)

    def _check_properties(self, message: Message) -> Message:
        """Validate ``expiration`` and rewrite a direct reply-to ``reply_to`` (RabbitMQ)."""
        properties = message.properties
        if message.hints & HINT_EXPIRATION and properties.expiration is not None:
            parse_expiration(properties.expiration)
        if message.hints & HINT_REPLY_TO and properties.reply_to == REPLY_TO:
            if not self.reply_consumer:
                raise PreconditionFailed("fast reply consumer does not exist")
            message = message.replace(reply_to=REPLY_TO_PREFIX + self.reply_key)
        return message

    def _route(self, publish: _Publish) -> bool:
        """Route and enqueue; False when a queue refused the message (reject-publish)."""
        vhost = self.vhost
        exchange = vhost.exchanges.get(publish.exchange)
        if exchange is None:
            # The exchange went between check_publish and the body: as RabbitMQ, 404.
            raise NotFound(f"no exchange '{publish.exchange}' in vhost '{vhost.name}'")
        message = publish.message
        routing_key = publish.routing_key
        if not exchange.name and routing_key.startswith(REPLY_TO_PREFIX):
            requester = vhost.reply_to.get(routing_key[len(REPLY_TO_PREFIX) :])
            if requester is not None:
                requester._deliver_reply(message)  # at most once; dropped once it has gone
            return True
        if message.hints & HINT_HEADERS:
            queues, message = self._route_cc(exchange, routing_key, message)
        else:
            queues = vhost.route(exchange, routing_key, message)
        if not queues:
            if publish.mandatory:
                self.sink.returned(312, "NO_ROUTE", message)
            return True
        if publish.immediate:
            queues = [q for q in queues if q.can_deliver_now(message)]
            if not queues:
                self.sink.returned(313, "NO_CONSUMERS", message)
                return True
        accepted = True
        for queue in queues:
            if not queue.enqueue(message):
                accepted = False
            if queue.consumers and queue.falling_behind():
                self.feeds_backlog = True
        return accepted

    def _route_cc(
        self, exchange: Exchange, routing_key: str, message: Message
    ) -> tuple[list[Queue], Message]:
        """Sender-selected distribution: also route to the ``CC`` and ``BCC`` keys; ``BCC``
        is removed from what is delivered."""
        vhost = self.vhost
        headers = message.headers or {}
        if "CC" not in headers and "BCC" not in headers:
            return vhost.route(exchange, routing_key, message), message
        keys = [routing_key]
        for name in ("CC", "BCC"):
            values = headers.get(name)
            if isinstance(values, list):
                for value in values:
                    if isinstance(value, bytes):
                        value = value.decode(errors="replace")
                    if isinstance(value, str):
                        keys.append(value)
        if "BCC" in headers:
            message = message.replace(headers={k: v for k, v in headers.items() if k != "BCC"})
        queues: dict[Queue, None] = {}
        for key in keys:
            for queue in vhost.route(exchange, key, message):
                queues[queue] = None
        return list(queues), message

    def flush_confirms(self) -> None:
        """Send the acks owed for publishes routed so far, coalesced with ``multiple``."""
        upto = self._pending_upto
        if upto > self._confirmed_upto:
            multiple = upto - self._confirmed_upto > 1
            if self._sync_upto > self._confirmed_upto or self._confirms_waiting:
                # Some of these publishes are being written: confirm after the commit
                # (and so do later ones, so that a multiple ack never overtakes them).
                self._confirms_waiting += 1
                self.vhost.journal.after_commit(lambda: self._send_confirm(upto, multiple, True))
            else:
                self.sink.confirm(upto, multiple=multiple, ack=True)
            self._confirmed_upto = upto

    def _send_confirm(self, upto: int, multiple: bool, ack: bool) -> None:
        """A confirm that waited for the store's commit; a nack if the commit failed (the
        store's ``ok`` is False while the callbacks of a failed batch run)."""
        self._confirms_waiting -= 1
        if not self.closed:
            self.sink.confirm(upto, multiple=multiple, ack=ack and self.vhost.journal.ok)

    def select_confirm(self) -> None:
        if self.tx_mode:
            raise PreconditionFailed("cannot switch from tx to confirm mode")
        self.confirm_mode = True

    # -- basic.get -----------------------------------------------------------------------

    def get(self, queue_name: str, *, no_ack: bool) -> tuple[int, QueuedMessage, int] | None:
        """(delivery_tag, entry, messages left) or None when the queue is empty."""
        queue = self.vhost.queue(self.queue_name(queue_name), self.owner)
        entry = queue.get(no_ack=no_ack)
        if entry is None:
            return None
        tag = self._next_tag
        self._next_tag = tag + 1
        if not no_ack:
            if entry.sid and not entry.redelivered:
                queue.journal.delivered(queue.store_id, entry.sid)
            self.unacked[tag] = Unacked(entry, queue, None)
        return tag, entry, queue.message_count

    # -- settlement ----------------------------------------------------------------------

    def _take(self, delivery_tag: int, multiple: bool) -> list[tuple[int, Unacked]]:
        unacked = self.unacked
        timed_out = self._timed_out
        if multiple:
            if delivery_tag == 0:
                taken = list(unacked.items())
                unacked.clear()
                timed_out.clear()
                return taken
            if delivery_tag not in unacked and delivery_tag not in timed_out:
                raise PreconditionFailed(f"unknown delivery tag {delivery_tag}")
            if timed_out:
                self._timed_out = {t for t in timed_out if t > delivery_tag}
            # Tags are in delivery order: look only at those up to delivery_tag, no copy.
            tags = []
            for tag in unacked:
                if tag > delivery_tag:
                    break
                tags.append(tag)
            return [(tag, unacked.pop(tag)) for tag in tags]
        item = unacked.pop(delivery_tag, None)
        if item is None:
            if delivery_tag in timed_out:
                timed_out.discard(delivery_tag)  # requeued by a consumer timeout: ignore
                return []
            raise PreconditionFailed(f"unknown delivery tag {delivery_tag}")
        return [(delivery_tag, item)]

    def _release(self, items: list[tuple[int, Unacked]]) -> None:
        unacked = self.unacked
        for tag, item in items:
            consumer = item.consumer
            if consumer is not None:
                consumer.unacked -= 1
                self._consumer_unacked -= 1
                self._unacked_bytes -= len(item.entry.message.body)
                pending = consumer.pending
                if pending and pending[0] == tag:
                    # Acks in order keep the timeout's list short: drop settled heads.
                    pending.popleft()
                    while pending and pending[0] not in unacked:
                        pending.popleft()

    def ack(self, delivery_tag: int, *, multiple: bool = False) -> None:
        items = self._take(delivery_tag, multiple)
        if self.tx_mode:
            self._tx_hold(items, None)
            return
        self._settle(items)

    def reject(self, delivery_tag: int, *, multiple: bool = False, requeue: bool = True) -> None:
        if self._streams:
            self._refuse_stream_reject(delivery_tag, multiple)
        items = self._take(delivery_tag, multiple)
        if self.tx_mode:
            self._tx_hold(items, requeue)
            return
        self._reject(items, requeue)

    def _refuse_stream_reject(self, delivery_tag: int, multiple: bool) -> None:
        """RabbitMQ closes the connection (540) on a reject/nack of a stream delivery."""
        if multiple:
            items = [
                item
                for tag, item in self.unacked.items()
                if delivery_tag == 0 or tag <= delivery_tag
            ]
        else:
            item = self.unacked.get(delivery_tag)
            items = [] if item is None else [item]
        for item in items:
            if isinstance(item.queue, StreamQueue):
                raise item.queue.reject_refused()

    def _settle(self, items: list[tuple[int, Unacked]]) -> None:
        self._release(items)
        for _tag, item in items:
            item.queue.settle(item.entry)
        self._redispatch()

    def _reject(self, items: list[tuple[int, Unacked]], requeue: bool) -> None:
        self._release(items)
        if not requeue:
            for _tag, item in items:
                queue = item.queue
                if queue.config.dead_letter_exchange is not None and not queue.deleted:
                    queue.dead_letter_unacked(item.entry)
                else:
                    queue.settle(item.entry)
            self._redispatch()
            return
        by_queue: dict[Queue, list[QueuedMessage]] = {}
        for _tag, item in items:
            by_queue.setdefault(item.queue, []).append(item.entry)
        for queue, entries in by_queue.items():
            if queue.deleted:
                for entry in entries:
                    queue.settle(entry)
            else:
                queue.requeue(entries)
        self._redispatch()

    def recover(self, requeue: bool) -> None:
        items = list(self.unacked.items())
        self.unacked.clear()
        if requeue:
            self._reject(items, True)
            return
        # Spec: redeliver to the original recipient (RabbitMQ answers 540 instead).
        self._release(items)
        back_to_queue: list[tuple[int, Unacked]] = []
        for tag, item in items:
            consumer = item.consumer
            if consumer is None or self.consumers.get(consumer.tag) is not consumer:
                back_to_queue.append((tag, item))
                continue
            item.entry.redelivered = True
            self.deliver(consumer, item.entry)
        if back_to_queue:
            self._reject([(t, i._replace(consumer=None)) for t, i in back_to_queue], True)

    # -- transactions --------------------------------------------------------------------

    def select_tx(self) -> None:
        if self.confirm_mode:
            raise PreconditionFailed("cannot switch from confirm to tx mode")
        self.tx_mode = True

    def _tx_hold(self, items: list[tuple[int, Unacked]], requeue: bool | None) -> None:
        # Held settlements stay counted against prefetch until commit, as in RabbitMQ.
        self._held.extend((tag, item, requeue) for tag, item in items)

    def commit(self, done: Callable[[bool], None]) -> None:
        """Apply the transaction; ``done(ok)`` runs once what it stored is on disk (at once
        when it stored nothing), with ``ok`` False when the store failed to write it."""
        if not self.tx_mode:
            raise PreconditionFailed("channel is not transactional")
        publishes, self._tx_publishes = self._tx_publishes, []
        held, self._held = self._held, []
        for publish in publishes:
            self._route(publish)
        acks = [(t, i) for t, i, r in held if r is None]
        if acks:
            self._settle(acks)
        for requeue in (True, False):
            rejects = [(t, i) for t, i, r in held if r is requeue]
            if rejects:
                self._reject(rejects, requeue)
        if publishes or held:
            journal = self.vhost.journal
            journal.after_commit(lambda: done(journal.ok))
        else:
            done(True)

    def rollback(self) -> None:
        if not self.tx_mode:
            raise PreconditionFailed("channel is not transactional")
        self._tx_publishes = []
        held, self._held = self._held, []
        # Settlements that were not committed go back to unacked, in tag order.
        for tag, item, _requeue in held:
            self.unacked[tag] = item
        self.unacked = dict(sorted(self.unacked.items()))

    # -- teardown ------------------------------------------------------------------------

    def close(self) -> None:
        """The channel closed: cancel its consumers and requeue what it had not acked."""
        if self.closed:
            return
        self.closed = True
        if self.reply_consumer:
            self.cancel(self.reply_consumer)
        for tag in list(self.consumers):
            self.cancel(tag)
        held = [(t, i) for t, i, _r in self._held]
        self._held = []
        items = sorted([*self.unacked.items(), *held], key=lambda ti: ti[0])
        self.unacked.clear()
        self._tx_publishes = []
        if items:
            self._reject(items, True)
