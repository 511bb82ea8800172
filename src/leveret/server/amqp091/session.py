"""One AMQP 0-9-1 channel's semantics over the broker core: delivery tags and the unacked
deliveries behind them, QoS, ack/reject/nack/recover, publisher confirms, transactions,
direct reply-to, consumer ack timeouts. The core speaks in credit, deliveries and outcomes
(``model/consumer.py``, ``model/settle.py``, ``model/publisher.py``,
``model/transaction.py``); this module maps 0-9-1 onto them. It reports back through a
``SessionSink`` (deliveries, returns, confirms, server-side cancels) and never writes bytes.

QoS follows RabbitMQ: ``basic.qos(global=False)`` is a per-consumer limit, ``global=True``
limits the whole channel; both apply when both are set. A per-consumer limit is the
consumer's credit (prefetch minus its unacked deliveries). Unlike RabbitMQ, a per-consumer
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
from typing import TYPE_CHECKING, Final, Protocol

from leveret.errors import NotAllowed, NotFound, PreconditionFailed
from leveret.model import settle
from leveret.model.completion import Completion, every
from leveret.model.consumer import UNLIMITED, Consumer, ConsumerOwner
from leveret.model.publisher import NO_ROUTE, Publisher
from leveret.model.queues.args import consumer_priority, consumer_timeout
from leveret.model.router import REPLY_TO
from leveret.model.settle import Delivery
from leveret.model.transaction import ACCEPT, REJECT, RELEASE

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from leveret.model.entry import QueuedMessage
    from leveret.model.message import Message
    from leveret.model.queues.base import Queue
    from leveret.model.transaction import Transaction
    from leveret.model.vhost import VirtualHost

log = logging.getLogger("leveret.model")


class SessionSink(Protocol):
    """What a front end does with the session's output."""

    def deliver(
        self, consumer_tag: str, delivery_tag: int, redelivered: bool, message: Message
    ) -> None: ...

    def returned(self, reply_code: int, reply_text: str, message: Message) -> None: ...

    def confirm(self, delivery_tag: int, *, multiple: bool, ack: bool) -> None: ...

    def consumer_cancelled(self, consumer_tag: str) -> None: ...


# A NamedTuple's constructor is a Python-level lambda; calling tuple.__new__ directly with
# every field costs about half as much, which counts for the Delivery made per manual-ack
# delivery.
_new_tuple: Final = tuple.__new__


def _consumer_tag() -> str:
    # RabbitMQ's shape: 16 random bytes, base64url without padding (22 characters).
    return "amq.ctag-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


class Session(ConsumerOwner):
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
        self.publisher = Publisher(vhost, self)
        self.consumers: dict[str, Consumer] = {}
        self.unacked: dict[int, Delivery] = {}
        self._next_tag = 1
        self.flow_active = True
        self.writable = True
        self.prefetch_count = 0  # for consumers created from now on
        self.global_prefetch_count = 0
        self.prefetch_size = 0
        self._consumer_unacked = 0
        self._unacked_bytes = 0
        self.last_queue = ""
        self.closed = False
        # Set by ``close``: done once the queues have let its consumers go (a queue led by
        # another node: once its leader has, ``Source.withdrawn``); None: at once.
        self.withdrawn: Completion[None] | None = None
        # Cancels of consumers whose queue a queue.delete of this channel is removing
        # through the cluster's metadata store: sent after its delete-ok (``hold_cancels``).
        self._held_cancels: list[str] | None = None
        # Direct reply-to: our consumer of amq.rabbitmq.reply-to (its key is the
        # publisher's reply_key).
        self.reply_consumer = ""
        # Whether this channel ever consumed from a queue whose deliveries cannot be
        # rejected (a stream: reject and nack must check).
        self._unrejectable = False
        # Management counters: plain increments, sampled on a timer (management/).
        self.n_deliver = 0
        self.n_deliver_no_ack = 0
        self.n_get = 0
        self.n_get_no_ack = 0
        self.n_ack = 0
        self.n_redeliver = 0
        self.n_get_empty = 0

    @property
    def confirm_mode(self) -> bool:
        return self.publisher.confirms is not None

    @property
    def tx_mode(self) -> bool:
        return self.publisher.tx is not None

    @property
    def feeds_backlog(self) -> bool:
        return self.publisher.feeds_backlog

    @feeds_backlog.setter
    def feeds_backlog(self, value: bool) -> None:
        self.publisher.feeds_backlog = value

    # -- ConsumerOwner -------------------------------------------------------------------

    def accepts(self, consumer: Consumer, size: int) -> bool:
        if not (self.flow_active and self.writable) or self.closed:
            return False
        if consumer.auto_settle:
            return True
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
        if entry.redelivered:
            self.n_redeliver += 1
        if consumer.auto_settle:
            self.n_deliver_no_ack += 1
        else:
            self.n_deliver += 1
            timers = self.vhost.timers
            self.unacked[tag] = _new_tuple(Delivery, (entry, consumer.queue, consumer, timers.now))
            consumer.credit -= 1
            consumer.unsettled += 1
            self._consumer_unacked += 1
            self._unacked_bytes += len(entry.message.body)
            if consumer.timeout is not None:
                consumer.pending.append(tag)
                if not consumer.armed:
                    consumer.armed = True
                    timers.schedule(timers.now + consumer.timeout, consumer)
        self.sink.deliver(consumer.tag, tag, entry.redelivered, entry.message)

    def consumer_removed(self, consumer: Consumer) -> None:
        """The vhost deleted the consumer's queue: drop it here and tell the client."""
        if self.consumers.get(consumer.tag) is consumer:
            del self.consumers[consumer.tag]
            if self._held_cancels is not None:
                self._held_cancels.append(consumer.tag)
            else:
                self.sink.consumer_cancelled(consumer.tag)

    def hold_cancels(self) -> None:
        """The queue removals from now on tell the client after ``release_cancels``: a
        deletion applied to the model before its delete-ok is sent (RabbitMQ sends
        delete-ok before the cancels, and py-amqp needs that order)."""
        self._held_cancels = []

    def release_cancels(self) -> None:
        held, self._held_cancels = self._held_cancels, None
        for tag in held or ():
            self.sink.consumer_cancelled(tag)

    def consumer_deadline(self, consumer: Consumer, now: float) -> None:
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
        consumer.queue.remove_consumer(consumer)
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
            consumer.queue.name,
            self.vhost.name,
            oldest,
            round(timeout * 1000),
            len(items),
        )
        gone = consumer.queue.withdrawn(consumer)
        if gone is None:
            self.sink.consumer_cancelled(tag)
        else:
            # A queue led by another node: the client is told once its leader let the
            # consumer go (as cancel-ok waits), so that a consume reaching the leader
            # another way right after the cancel is not refused for this one.
            gone.on_done(lambda _done: self._timed_out_cancel(tag))
        self._reject(items, True)

    def _timed_out_cancel(self, tag: str) -> None:
        """Tell the client its consumer ``tag`` timed out, unless the channel closed or the
        tag was taken again meanwhile (the cancel would name the new consumer)."""
        if not self.closed and tag not in self.consumers:
            self.sink.consumer_cancelled(tag)

    def _redispatch(self) -> None:
        consumers = self.consumers
        if len(consumers) == 1:
            # The common case, once per ack: one consumer, no set of queues to build.
            [consumer] = consumers.values()
            consumer.queue.dispatch()
            return
        for queue in {c.queue for c in consumers.values()}:
            queue.dispatch()

    # -- the channel's state --------------------------------------------------------------

    def set_qos(self, prefetch_size: int, prefetch_count: int, global_: bool) -> None:
        if global_:
            self.global_prefetch_count = prefetch_count
            self.prefetch_size = prefetch_size
        else:
            self.prefetch_count = prefetch_count
            self.prefetch_size = prefetch_size
            # RabbitMQ 3.10.8 lifts the channel-wide limit when a per-consumer one is set
            # (rabbit_limiter:unlimit_prefetch); a later global basic.qos sets it again.
            self.global_prefetch_count = 0
            # Deviation from RabbitMQ, which applies it to later consumers only: a client that
            # raises its prefetch at run time (Celery's ETA tasks, rabbitmq-server#11948)
            # means the consumers it already has.
            for consumer in self.consumers.values():
                if not consumer.auto_settle:
                    consumer.credit = (
                        prefetch_count - consumer.unsettled if prefetch_count else UNLIMITED
                    )
        self._redispatch()

    def set_flow(self, active: bool) -> None:
        self.flow_active = active
        if active:
            self._redispatch()

    def set_writable(self, writable: bool) -> None:
        self.writable = writable
        if writable:
            self._redispatch()

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
        queue.check_exclusive_use(exclusive)
        kind = queue.type
        # RabbitMQ's checks for a stream, in its order (406, then 540: the connection goes).
        if kind.needs_credit and not self.prefetch_count:
            raise PreconditionFailed(f"consumer prefetch count is not set for '{queue.resource}'")
        if no_ack and not kind.auto_settle:
            raise queue.unsupported("automatic acknowledgement")
        consumer = queue.consumer(
            consumer_tag,
            self,
            auto_settle=no_ack,
            exclusive=exclusive,
            credit=UNLIMITED if no_ack else self.prefetch_count or UNLIMITED,
            arguments=arguments,
            priority=priority,
            timeout=None if no_ack else timeout,
        )
        queue.add_consumer(consumer)
        if not kind.rejects:
            self._unrejectable = True
        self.consumers[consumer_tag] = consumer
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
        self.reply_consumer = consumer_tag
        self.publisher.reply_key = key
        self.vhost.router.reply_to[key] = self
        return consumer_tag

    def deliver_reply(self, message: Message) -> None:
        """A reply published to our direct reply-to address (the router's ReplyTarget)."""
        tag = self._next_tag
        self._next_tag = tag + 1
        self.sink.deliver(self.reply_consumer, tag, False, message)

    def cancel(self, consumer_tag: str) -> bool:
        """Cancel a consumer of this session; False if the tag is unknown (not an error)."""
        if consumer_tag and consumer_tag == self.reply_consumer:
            self.vhost.router.reply_to.pop(self.publisher.reply_key, None)
            self.reply_consumer = self.publisher.reply_key = ""
            return True
        consumer = self.consumers.pop(consumer_tag, None)
        if consumer is None:
            return False
        consumer.queue.remove_consumer(consumer)
        return True

    # -- publishing ----------------------------------------------------------------------

    def check_publish(self, exchange_name: str) -> None:
        self.publisher.check(exchange_name)

    def publish(
        self,
        exchange_name: str,
        routing_key: str,
        message: Message,
        *,
        mandatory: bool = False,
        immediate: bool = False,
    ) -> None:
        self.publisher.publish(
            exchange_name,
            routing_key,
            message,
            report_unroutable=mandatory,
            require_consumer=immediate,
        )

    def returned(self, reason: str, message: Message) -> None:
        """The publisher's sink: basic.return's code and text for why."""
        if reason == NO_ROUTE:
            self.sink.returned(312, "NO_ROUTE", message)
        else:
            self.sink.returned(313, "NO_CONSUMERS", message)

    def confirm(self, upto: int, *, multiple: bool, ack: bool) -> None:
        self.sink.confirm(upto, multiple=multiple, ack=ack)

    def flush_confirms(self) -> None:
        """Send the acks owed for publishes routed so far, coalesced with ``multiple``."""
        self.publisher.flush_confirms()

    def select_confirm(self) -> None:
        self.publisher.select_confirms()

    # -- basic.get -----------------------------------------------------------------------

    def get(self, queue_name: str, *, no_ack: bool) -> tuple[int, QueuedMessage, int] | None:
        """(delivery_tag, entry, messages left) or None when the queue is empty."""
        queue = self.vhost.queue(self.queue_name(queue_name), self.owner)
        if not queue.type.gets:
            raise queue.unsupported("basic.get")
        entry = queue.get(auto_settle=no_ack)
        return self._got(queue, entry, no_ack, queue.message_count)

    def fetch(
        self, queue: Queue, *, no_ack: bool
    ) -> Completion[tuple[int, QueuedMessage, int] | None]:
        """``get`` on a queue led by another node: answered when its leader answers."""
        if not queue.type.gets:
            raise queue.unsupported("basic.get")
        result: Completion[tuple[int, QueuedMessage, int] | None] = Completion()

        def answered(done: Completion[tuple[QueuedMessage | None, int]]) -> None:
            if done.error is not None:
                result.fail(done.error)
                return
            entry, remaining = done.result()
            if self.closed and entry is not None:
                if not no_ack:
                    queue.requeue([entry])  # the channel went while it waited
                result.resolve(None)
                return
            result.resolve(self._got(queue, entry, no_ack, remaining))

        queue.fetch(auto_settle=no_ack).on_done(answered)
        return result

    def _got(
        self, queue: Queue, entry: QueuedMessage | None, no_ack: bool, remaining: int
    ) -> tuple[int, QueuedMessage, int] | None:
        if entry is None:
            self.n_get_empty += 1
            return None
        tag = self._next_tag
        self._next_tag = tag + 1
        if no_ack:
            self.n_get_no_ack += 1
        else:
            self.n_get += 1
            self.unacked[tag] = Delivery(entry, queue, None)
        return tag, entry, remaining

    # -- settlement ----------------------------------------------------------------------

    def _take(self, delivery_tag: int, multiple: bool) -> list[tuple[int, Delivery]]:
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

    def _release(self, items: list[tuple[int, Delivery]]) -> None:
        """Give back the credit and the channel's window that ``items`` held."""
        for tag, item in items:
            self._release_one(tag, item)

    def _release_one(self, tag: int, item: Delivery) -> None:
        consumer = item.consumer
        if consumer is not None:
            consumer.credit += 1
            consumer.unsettled -= 1
            self._consumer_unacked -= 1
            self._unacked_bytes -= len(item.entry.message.body)
            pending = consumer.pending
            if pending and pending[0] == tag:
                # Acks in order keep the timeout's list short: drop settled heads.
                pending.popleft()
                unacked = self.unacked
                while pending and pending[0] not in unacked:
                    pending.popleft()

    def ack(self, delivery_tag: int, *, multiple: bool = False) -> None:
        if not multiple and self.publisher.tx is None:
            # One delivery acked on its own, as the Go tool's client and pika's do, a
            # thousand times in a burst (issue 26): no lists built for it. An unknown tag
            # takes the general path below for its error.
            item = self.unacked.pop(delivery_tag, None)
            if item is not None:
                self.n_ack += 1
                self._release_one(delivery_tag, item)
                item.queue.settle(item.entry)
                self._redispatch()
                return
        items = self._take(delivery_tag, multiple)
        self.n_ack += len(items)
        tx = self.publisher.tx
        if tx is not None:
            for tag, item in items:
                tx.settle(ACCEPT, item, tag)
            return
        self._settle(items)

    def reject(self, delivery_tag: int, *, multiple: bool = False, requeue: bool = True) -> None:
        if self._unrejectable:
            self._refuse_reject(delivery_tag, multiple)
        items = self._take(delivery_tag, multiple)
        tx = self.publisher.tx
        if tx is not None:
            for tag, item in items:
                tx.settle(RELEASE if requeue else REJECT, item, tag)
            return
        self._reject(items, requeue)

    def _refuse_reject(self, delivery_tag: int, multiple: bool) -> None:
        """RabbitMQ closes the connection (540) on a reject/nack of a delivery its queue
        cannot take back (a stream's)."""
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
            queue = item.queue
            if not queue.rejects():
                raise queue.unsupported("basic.nack and basic.reject")

    def _settle(self, items: list[tuple[int, Delivery]]) -> None:
        self._release(items)
        # A list, not a generator: once per ack, and a compiled generator is an object of
        # its own to build and step through.
        settle.accept([item for _tag, item in items])
        self._redispatch()

    def _reject(self, items: list[tuple[int, Delivery]], requeue: bool) -> None:
        self._release(items)
        if requeue:
            settle.release(item for _tag, item in items)
        else:
            settle.reject(item for _tag, item in items)
        self._redispatch()

    def recover(self, requeue: bool) -> None:
        items = list(self.unacked.items())
        self.unacked.clear()
        if requeue:
            self._reject(items, True)
            return
        # Spec: redeliver to the original recipient (RabbitMQ answers 540 instead).
        self._release(items)
        back_to_queue: list[tuple[int, Delivery]] = []
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
        self.publisher.select_tx()

    def _tx(self) -> Transaction:
        tx = self.publisher.tx
        if tx is None:
            raise PreconditionFailed("channel is not transactional")
        return tx

    def commit(self, done: Callable[[bool], None]) -> None:
        """Apply the transaction; ``done(ok)`` runs once what it stored is on disk (at once
        when it stored nothing), with ``ok`` False when the store failed to write it.
        Held settlements stay counted against prefetch until now, as in RabbitMQ."""
        self._tx().commit(
            self.publisher.route,
            self._apply,
            self.vhost.journal,
            done,
            self.publisher.take_remote,
        )

    def _apply(self, outcome: str, settlements: list[tuple[Delivery, object]]) -> None:
        items = [(tag, item) for item, tag in settlements if isinstance(tag, int)]
        if outcome == ACCEPT:
            self._settle(items)
        else:
            self._reject(items, outcome == RELEASE)

    def rollback(self) -> None:
        # Settlements that were not committed go back to unacked, in tag order.
        for item, tag in self._tx().rollback():
            if isinstance(tag, int):
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
        consumers = list(self.consumers.values())
        for consumer in consumers:
            self.cancel(consumer.tag)
        self.withdrawn = every(consumer.queue.withdrawn(consumer) for consumer in consumers)
        held = []
        tx = self.publisher.tx
        if tx is not None:
            held = [(tag, item) for item, tag in tx.rollback() if isinstance(tag, int)]
        self.publisher.close()
        items = sorted([*self.unacked.items(), *held], key=lambda ti: ti[0])
        self.unacked.clear()
        if items:
            self._reject(items, True)
