"""The ``stream`` class (80) of AMQP 0-8 and 0-9 over the core: unreliable, rate-paced
streaming with drops by priority.

``stream.qos(prefetch-size, prefetch-count, consume-rate)`` sets the channel's streaming
QoS for the consumers it starts afterwards. A ``stream.consume`` is a core consumer that
settles as it takes (the class's automatic acknowledgement: the queue is emptied as fast as
messages come), in front of a ``Pacer``: the consumer's own backlog, sent on at most
``consume-rate`` octets per second (a token bucket of a tenth of a second, never less than
one message; 0 = as fast as the socket takes them). The backlog holds at most
``prefetch-count`` messages and ``prefetch-size`` octets (``BACKLOG`` messages when both are
0); past that limit a message is dropped rather than queued: the oldest of the lowest
priority present, so a high-priority message displaces low-priority ones (the draft's
"overflow-discard" and "drop-by-priority" rules). Higher priorities are sent first; within
a priority, in order. Messages dropped are counted (``Pacer.dropped``).

``stream.deliver`` carries the consumer tag, a delivery tag (the channel's; nothing to
acknowledge), the exchange and the queue. ``stream.publish`` publishes a transient message
(``convert/legacy.py``); what the core returns comes back as ``stream.return``.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import TYPE_CHECKING, Any

from leveret.convert.legacy import basic_properties, stream_message, stream_properties
from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp09._generated import methods as m09
from leveret.server.legacy.consume import (
    channel_extra,
    consume_queue,
    start_consumer,
    unused_tag,
)
from leveret.server.legacy.handlers import methods_of, properties_of, register, reply

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.server.legacy.channel import LegacyChannel

__all__ = ["BACKLOG", "CLASS_ID", "Pacer", "StreamChannel"]

CLASS_ID = 80
# The backlog of a consumer whose QoS sets no limit, in messages.
BACKLOG = 1000
# The token bucket holds this much time's worth of the rate.
BURST = 0.1
# How soon a pacer looks again while the socket is not taking output.
RETRY = 0.05

_seq = itertools.count()


class _Item:
    __slots__ = ("delivery_tag", "message", "priority", "seq", "size")

    def __init__(self, delivery_tag: int, message: Message, priority: int) -> None:
        self.delivery_tag = delivery_tag
        self.message = message
        self.priority = priority
        self.seq = next(_seq)
        self.size = len(message.body)


class Pacer:
    """One stream consumer's backlog and rate (see the module docstring)."""

    def __init__(
        self,
        channel: LegacyChannel,
        consumer_tag: str,
        queue_name: str,
        *,
        rate: int,
        max_count: int,
        max_size: int,
    ) -> None:
        self.channel = channel
        self.consumer_tag = consumer_tag
        self.queue_name = queue_name
        self.rate = rate
        self.max_count = max_count or (0 if max_size else BACKLOG)
        self.max_size = max_size
        # One deque per priority 0-9: sent highest first, dropped lowest first.
        self.levels: list[deque[_Item]] = [deque() for _ in range(10)]
        self.count = 0
        self.size = 0
        self.dropped = 0
        self.sent = 0
        timers = channel.session.vhost.timers
        self.capacity = max(rate * BURST, 1.0)
        self.tokens = self.capacity
        self.last = timers.now
        self.armed = False
        self.generation = 0
        self.closed = False

    # -- deliverer ---------------------------------------------------------------------

    def deliver(
        self,
        channel: LegacyChannel,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        message: Message,
    ) -> None:
        priority = basic_properties(message)[0].priority or 0
        item = _Item(delivery_tag, message, min(priority, 9))
        self.levels[item.priority].append(item)
        self.count += 1
        self.size += item.size
        self._trim()
        self._send(channel.session.vhost.timers.now)

    def cancelled(self, channel: LegacyChannel, consumer_tag: str) -> None:
        self.close()

    def close(self) -> None:
        self.closed = True
        self.generation += 1
        for level in self.levels:
            level.clear()
        self.count = self.size = 0

    # -- the backlog -------------------------------------------------------------------

    def _over(self) -> bool:
        return bool(
            (self.max_count and self.count > self.max_count)
            or (self.max_size and self.size > self.max_size)
        )

    def _trim(self) -> None:
        while self._over():
            level = next(level for level in self.levels if level)
            item = level.popleft()
            self.count -= 1
            self.size -= item.size
            self.dropped += 1

    def _next(self) -> deque[_Item] | None:
        for level in reversed(self.levels):
            if level:
                return level
        return None

    def _send(self, now: float) -> None:
        if self.closed:
            return
        channel = self.channel
        if self.rate:
            self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
        self.last = now
        while True:
            level = self._next()
            if level is None:
                return
            session = channel.session
            if not (session.writable and session.flow_active) or channel.closing:
                self._arm(now + RETRY)
                return
            item = level[0]
            if self.rate:
                # A message larger than the bucket goes once the bucket is full.
                need = min(item.size, self.capacity)
                if self.tokens < need:
                    self._arm(now + (need - self.tokens) / self.rate)
                    return
                self.tokens -= item.size
            level.popleft()
            self.count -= 1
            self.size -= item.size
            self._write(item)

    def _write(self, item: _Item) -> None:
        channel = self.channel
        props, body = stream_properties(properties_of(channel).StreamProperties, item.message)
        method = methods_of(channel).StreamDeliver(
            consumer_tag=self.consumer_tag,
            delivery_tag=item.delivery_tag,
            exchange=item.message.exchange,
            queue=self.queue_name,
        )
        channel.legacy.send_legacy_content(
            channel.id, method.encode(), CLASS_ID, props.encode(), body
        )
        self.sent += 1

    def _arm(self, when: float) -> None:
        if self.armed:
            return
        self.armed = True
        self.channel.session.vhost.timers.schedule(when, _Wake(self, self.generation))


class _Wake:
    __slots__ = ("generation", "pacer")

    def __init__(self, pacer: Pacer, generation: int) -> None:
        self.pacer = pacer
        self.generation = generation

    def on_deadline(self, now: float) -> None:
        pacer = self.pacer
        if self.generation != pacer.generation:
            return
        pacer.armed = False
        pacer._send(now)


class StreamChannel:
    """The stream class's QoS on one channel (for the consumers started afterwards)."""

    def __init__(self) -> None:
        self.rate = 0
        self.prefetch_count = 0
        self.prefetch_size = 0
        self.pacers: dict[str, Pacer] = {}

    def close(self) -> None:
        for pacer in self.pacers.values():
            pacer.close()
        self.pacers.clear()


def stream_channel(channel: LegacyChannel) -> StreamChannel:
    return channel_extra(channel, "stream", StreamChannel, StreamChannel)


@register(m08.StreamQos, m09.StreamQos)
def stream_qos(channel: LegacyChannel, method: Any) -> None:
    extra = stream_channel(channel)
    extra.rate = method.consume_rate
    extra.prefetch_count = method.prefetch_count
    extra.prefetch_size = method.prefetch_size
    reply(channel, methods_of(channel).StreamQosOk())


@register(m08.StreamConsume, m09.StreamConsume)
def stream_consume(channel: LegacyChannel, method: Any) -> None:
    queue_name = consume_queue(channel, method.queue)
    tag = unused_tag(channel, method.consumer_tag)
    extra = stream_channel(channel)
    pacer = Pacer(
        channel,
        tag,
        queue_name,
        rate=extra.rate,
        max_count=extra.prefetch_count,
        max_size=extra.prefetch_size,
    )
    # consume-ok goes before the first delivery
    consumer = start_consumer(
        channel,
        queue_name,
        tag,
        pacer,
        no_ack=True,
        exclusive=method.exclusive,
        arguments=getattr(method, "filter", None) or {},
    )
    extra.pacers[tag] = pacer
    if not method.nowait:
        reply(channel, methods_of(channel).StreamConsumeOk(consumer_tag=tag))
    consumer.queue.dispatch()


@register(m08.StreamCancel, m09.StreamCancel)
def stream_cancel(channel: LegacyChannel, method: Any) -> None:
    tag = method.consumer_tag
    channel.deliverers.pop(tag, None)
    pacer = stream_channel(channel).pacers.pop(tag, None)
    if pacer is not None:
        pacer.close()
    channel.session.cancel(tag)
    if not method.nowait:
        reply(channel, methods_of(channel).StreamCancelOk(consumer_tag=tag))


@register(m08.StreamPublish, m09.StreamPublish)
def stream_publish(channel: LegacyChannel, method: Any) -> None:
    session = channel.session
    channel.guard.publish(method.exchange, method.routing_key, session.publisher)
    mm = methods_of(channel)
    props_cls = properties_of(channel).StreamProperties

    def returned(reply_code: int, reply_text: str, message: Message) -> None:
        back, body = stream_properties(props_cls, message)
        channel.legacy.send_legacy_content(
            channel.id,
            mm.StreamReturn(
                reply_code=reply_code,
                reply_text=reply_text,
                exchange=message.exchange,
                routing_key=message.routing_key,
            ).encode(),
            CLASS_ID,
            back.encode(),
            body,
        )

    def done(raw: bytes, body: bytes) -> None:
        message = stream_message(method.exchange, method.routing_key, props_cls.decode(raw), body)
        channel.return_hook = returned
        try:
            session.publish(
                method.exchange,
                method.routing_key,
                message,
                mandatory=method.mandatory,
                immediate=method.immediate,
            )
        finally:
            channel.return_hook = None

    channel.start_assembly(CLASS_ID, method.METHOD_ID, done)
