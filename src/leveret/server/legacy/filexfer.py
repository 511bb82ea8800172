"""The ``file`` class (70) of AMQP 0-8 and 0-9 over the core: staged, restartable transfer
of large messages, both ways.

Publishing (client to broker): ``file.open(identifier, content-size)`` opens (or finds) the
staging area of that identifier, kept per broker, vhost and user (``state.py``), and
``open-ok`` answers how many octets are staged already; ``file.stage`` carries the content
from that offset (its content header's body size is what this stage sends, so staged +
sent = content-size), and every body frame is kept as it arrives, so a sender whose
connection dropped mid-stage opens the same identifier again and continues from where the
broker's copy ends. ``file.publish(identifier)`` routes the staged message through the core
(a persistent message, ``convert/legacy.py``) and forgets the staging area; an identifier that is
not staged is 404, one still incomplete 406. A mandatory or immediate publish the core
returns comes back as ``file.return`` with the content.

Consuming (broker to client): ``file.consume`` makes a core consumer (read permission,
``no-ack`` and ``exclusive`` as for basic); each delivery is offered with ``file.open``
(identifier: the SHA-1 of the message's properties and body, so a redelivery after a
dropped connection has the same identifier), and once the client's ``open-ok`` says how much
it holds already, ``file.stage`` sends the rest and ``file.deliver`` names it. One transfer
is in flight per channel at a time (open-ok must come before stage); a no-ack consumer is
given at most ``WINDOW`` messages ahead of it. ``file.ack`` / ``file.reject`` settle by
delivery tag (the channel's, shared with basic); ``file.qos`` is the channel's QoS;
``file.cancel`` requeues what was not offered yet.
"""

from __future__ import annotations

import hashlib
from collections import deque
from typing import TYPE_CHECKING, Any

from leveret.convert.legacy import file_message, file_properties
from leveret.errors import (
    CommandInvalid,
    ContentTooLarge,
    NotFound,
    PreconditionFailed,
)
from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp09._generated import methods as m09
from leveret.server.legacy.consume import (
    channel_extra,
    consume_queue,
    start_consumer,
    unused_tag,
)
from leveret.server.legacy.handlers import methods_of, properties_of, register, reply
from leveret.server.legacy.state import Staged, owner_key, state_of

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.server.legacy.channel import LegacyChannel

__all__ = ["CLASS_ID", "WINDOW", "FileChannel", "message_identifier"]

CLASS_ID = 70
# Deliveries a no-ack file consumer may have waiting for their turn on the channel.
WINDOW = 8


def message_identifier(raw_properties: bytes, body: bytes) -> str:
    """The staging identifier of a delivery: stable for the same message (the draft's
    suggestion: a SHA-1 of the message properties data)."""
    digest = hashlib.sha1(raw_properties, usedforsecurity=False)
    digest.update(body)
    return digest.hexdigest()


class _Transfer:
    __slots__ = (
        "body",
        "consumer_tag",
        "delivery_tag",
        "exchange",
        "identifier",
        "properties",
        "redelivered",
        "routing_key",
    )

    def __init__(
        self,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        properties: bytes,
        body: bytes,
    ) -> None:
        self.consumer_tag = consumer_tag
        self.delivery_tag = delivery_tag
        self.redelivered = redelivered
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties = properties
        self.body = body
        self.identifier = message_identifier(properties, body)


class FileChannel:
    """The file class's state on one channel: what it is staging, and the deliveries
    waiting for their turn (a ``deliverer`` of the channel for each file consumer)."""

    def __init__(self, channel: LegacyChannel) -> None:
        self.channel = channel
        # The identifier this channel's client is staging (file.open seen, stage pending).
        self.staging: tuple[str, str, str] | None = None
        self.outgoing: deque[_Transfer] = deque()
        self.offered: _Transfer | None = None  # file.open sent, open-ok awaited

    # -- deliverer ---------------------------------------------------------------------

    def deliver(
        self,
        channel: LegacyChannel,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        message: Message,
    ) -> None:
        consumer = channel.session.consumers.get(consumer_tag)
        if consumer is not None and consumer.auto_settle:
            consumer.credit -= 1  # the window of a no-ack consumer, given back once sent
        props, body = file_properties(properties_of(channel).FileProperties, message)
        self.outgoing.append(
            _Transfer(
                consumer_tag,
                delivery_tag,
                redelivered,
                message.exchange,
                message.routing_key,
                props.encode(),
                body,
            )
        )
        self._offer()

    def cancelled(self, channel: LegacyChannel, consumer_tag: str) -> None:
        """The consumer is gone: what it was given but not offered yet goes back."""
        session = channel.session
        kept: deque[_Transfer] = deque()
        for transfer in self.outgoing:
            if transfer.consumer_tag != consumer_tag:
                kept.append(transfer)
            elif transfer.delivery_tag in session.unacked:
                session.reject(transfer.delivery_tag, requeue=True)
        self.outgoing = kept

    def _offer(self) -> None:
        if self.offered is not None or not self.outgoing:
            return
        transfer = self.offered = self.outgoing.popleft()
        mm = methods_of(self.channel)
        reply(
            self.channel,
            mm.FileOpen(identifier=transfer.identifier, content_size=len(transfer.body)),
        )

    def opened(self, staged_size: int) -> None:
        """The client's open-ok: stage the rest, deliver, offer the next."""
        transfer = self.offered
        if transfer is None:
            raise CommandInvalid("file.open-ok without a file.open of the server")
        if not 0 <= staged_size <= len(transfer.body):
            raise PreconditionFailed(
                f"file.open-ok: {staged_size} octets staged of a {len(transfer.body)}-octet "
                f"message '{transfer.identifier}'"
            )
        self.offered = None
        channel = self.channel
        mm = methods_of(channel)
        legacy = channel.legacy
        legacy.send_legacy_content(
            channel.id,
            mm.FileStage().encode(),
            CLASS_ID,
            transfer.properties,
            transfer.body[staged_size:],
        )
        reply(
            channel,
            mm.FileDeliver(
                consumer_tag=transfer.consumer_tag,
                delivery_tag=transfer.delivery_tag,
                redelivered=transfer.redelivered,
                exchange=transfer.exchange,
                routing_key=transfer.routing_key,
                identifier=transfer.identifier,
            ),
        )
        consumer = channel.session.consumers.get(transfer.consumer_tag)
        if consumer is not None and consumer.auto_settle:
            consumer.credit += 1
            consumer.queue.dispatch()
        self._offer()

    def close(self) -> None:
        """The channel closed: the session requeues what was not acknowledged."""
        self.outgoing.clear()
        self.offered = None


def file_channel(channel: LegacyChannel) -> FileChannel:
    return channel_extra(channel, "file", FileChannel, lambda: FileChannel(channel))


# -- QoS and consumers ------------------------------------------------------------------


@register(m08.FileQos, m09.FileQos)
def file_qos(channel: LegacyChannel, method: Any) -> None:
    channel.session.set_qos(method.prefetch_size, method.prefetch_count, method.global_)
    reply(channel, methods_of(channel).FileQosOk())


@register(m08.FileConsume, m09.FileConsume)
def file_consume(channel: LegacyChannel, method: Any) -> None:
    queue_name = consume_queue(channel, method.queue)
    tag = unused_tag(channel, method.consumer_tag)
    # Nothing is handed over until the consumer's window is set and consume-ok is out.
    consumer = start_consumer(
        channel,
        queue_name,
        tag,
        file_channel(channel),
        no_ack=method.no_ack,
        exclusive=method.exclusive,
        arguments=getattr(method, "filter", None) or {},
    )
    if method.no_ack:
        consumer.credit = WINDOW
    if not method.nowait:
        reply(channel, methods_of(channel).FileConsumeOk(consumer_tag=tag))
    consumer.queue.dispatch()


@register(m08.FileCancel, m09.FileCancel)
def file_cancel(channel: LegacyChannel, method: Any) -> None:
    tag = method.consumer_tag
    extra = channel.deliverers.pop(tag, None)
    channel.session.cancel(tag)
    if isinstance(extra, FileChannel):
        extra.cancelled(channel, tag)
    if not method.nowait:
        reply(channel, methods_of(channel).FileCancelOk(consumer_tag=tag))


@register(m08.FileOpenOk, m09.FileOpenOk)
def file_open_ok(channel: LegacyChannel, method: Any) -> None:
    file_channel(channel).opened(method.staged_size)


@register(m08.FileAck, m09.FileAck)
def file_ack(channel: LegacyChannel, method: Any) -> None:
    channel.legacy._ack(channel, method.delivery_tag, method.multiple)


@register(m08.FileReject, m09.FileReject)
def file_reject(channel: LegacyChannel, method: Any) -> None:
    channel.session.reject(method.delivery_tag, requeue=method.requeue)


# -- staging and publishing -------------------------------------------------------------


@register(m08.FileOpen, m09.FileOpen)
def file_open(channel: LegacyChannel, method: Any) -> None:
    legacy = channel.legacy
    limit = legacy.limits.max_message_size
    if limit and method.content_size > limit:
        raise ContentTooLarge(
            f"file '{method.identifier}' of {method.content_size} octets is larger than "
            f"the configured max size {limit}"
        )
    state = state_of(legacy.broker)
    now = legacy.broker.timers.now
    state.sweep(now)
    key = owner_key(channel.legacy.client, method.identifier)
    staged = state.staged.get(key)
    if staged is None or staged.content_size != method.content_size:
        # A new message, or another content under an old identifier: start again.
        staged = state.staged[key] = Staged(method.content_size, now)
    staged.touched = now
    file_channel(channel).staging = key
    reply(channel, methods_of(channel).FileOpenOk(staged_size=len(staged.data)))


@register(m08.FileStage, m09.FileStage)
def file_stage(channel: LegacyChannel, method: Any) -> None:
    extra = file_channel(channel)
    key = extra.staging
    if key is None:
        raise CommandInvalid("file.stage without file.open")
    staged = state_of(channel.legacy.broker).staged.get(key)
    if staged is None:
        raise CommandInvalid(f"file.stage: staging of '{key[2]}' was dropped")
    extra.staging = None

    def header(properties: bytes, size: int) -> None:
        if len(staged.data) + size != staged.content_size:
            raise PreconditionFailed(
                f"file.stage of '{key[2]}': {size} octets from offset {len(staged.data)} do "
                f"not make the {staged.content_size} announced"
            )
        staged.properties = properties

    def body(chunk: bytes) -> None:
        staged.data += chunk
        staged.touched = channel.legacy.broker.timers.now

    channel.start_assembly(
        CLASS_ID, method.METHOD_ID, lambda _p, _b: None, on_header=header, on_body=body
    )


@register(m08.FilePublish, m09.FilePublish)
def file_publish(channel: LegacyChannel, method: Any) -> None:
    session = channel.session
    channel.guard.publish(method.exchange, method.routing_key, session.publisher)
    state = state_of(channel.legacy.broker)
    key = owner_key(channel.legacy.client, method.identifier)
    staged = state.staged.get(key)
    if staged is None:
        raise NotFound(f"no file staged as '{method.identifier}'")
    if not staged.complete:
        raise PreconditionFailed(
            f"file '{method.identifier}' is staged up to {len(staged.data)} of "
            f"{staged.content_size} octets"
        )
    del state.staged[key]
    props = properties_of(channel).FileProperties.decode(staged.properties)
    message = file_message(method.exchange, method.routing_key, props, bytes(staged.data))
    mm = methods_of(channel)

    def returned(reply_code: int, reply_text: str, returned_message: Message) -> None:
        back, body = file_properties(properties_of(channel).FileProperties, returned_message)
        channel.legacy.send_legacy_content(
            channel.id,
            mm.FileReturn(
                reply_code=reply_code,
                reply_text=reply_text,
                exchange=returned_message.exchange,
                routing_key=returned_message.routing_key,
            ).encode(),
            CLASS_ID,
            back.encode(),
            body,
        )

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
    channel.legacy.shell.published = True
