"""The ``message`` class (120) of AMQP 0-9 over the core: transfers whose fields are the
message's properties, bodies inline or built in references, checkpoints.

Correlation. The 0-9 XML has no request or response frames (Qpid's 0-9 had them), so a
request and its answer are matched by order, per channel and direction: every message-class
request is answered exactly once, and in the order the requests came (``ok``, ``empty``,
``reject`` or ``offset``). The broker answers a client's requests in order even when one of
them cannot be answered yet (a transfer whose reference is still open waits for the close,
and the answers behind it wait too); the client answers the broker's requests (transfers,
and the open/append/close of a large delivery) in order, so ``ok`` / ``reject`` from the
client settles the oldest transfer still unanswered.

Client to broker:

- ``transfer``: a publish to the exchange named by ``destination`` (write permission, and
  ``user-id`` as basic's) with the routing key; the other fields become the properties
  (``convert/legacy.py``). An inline body publishes at once; a reference body publishes when the
  reference is closed (the draft: not acknowledged before). Answered ``ok``, or ``reject``
  313 when ``immediate`` found no consumer (the core's return).
- ``open`` / ``append`` / ``close`` of references (an open reference again is 406, an
  unknown one 404, a reference larger than the configured maximum message size 311);
  ``checkpoint(reference, identifier)`` keeps the reference's content so far under the
  identifier (per broker, vhost and user, ``state.py``), and ``resume(reference,
  identifier)`` opens the reference again with that content and answers ``offset`` (its
  length; 0 for an identifier never checkpointed), so an upload whose connection dropped
  continues from its last checkpoint. References of a closed channel are dropped.
- ``consume(queue, destination)``: a consumer whose tag is the destination (read
  permission; no-ack and exclusive as basic's); ``cancel(destination)``; ``get(queue,
  destination)``: a transfer to the destination then ``ok``, or ``empty``; ``recover``,
  ``qos``: the channel's, as basic's.

Broker to client: a delivery is a ``transfer`` with ``destination`` the consumer's tag and
the message's exchange and routing key; a body too large for one frame is sent in a
reference of the broker's (``open``, ``append``s, the ``transfer``, ``close``). The
client's ``ok`` acknowledges the transfer (for a consumer that acknowledges), ``reject``
rejects it (not requeued: dead-lettered where the queue says, as the draft's "alternate
exchange" rule asks).
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import TYPE_CHECKING, Any

from leveret.convert.legacy import transfer_fields, transfer_message
from leveret.errors import ContentTooLarge, NotAllowed, NotFound, PreconditionFailed
from leveret.protocol.amqp09._generated import methods as m09
from leveret.protocol.amqp09.wiretypes import Content
from leveret.server.legacy.consume import channel_extra, consume_queue, start_consumer, unused_tag
from leveret.server.legacy.handlers import register
from leveret.server.legacy.state import owner_key, state_of

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.server.legacy.channel import LegacyChannel

__all__ = ["MessageChannel", "message_channel"]

# Octets of a method frame that are not an append's data (frame header and end, ids,
# reference name, long-string length): a broker reference's chunks leave room for them.
_APPEND_OVERHEAD = 8 + 4 + 256 + 4 + 16

_refs = itertools.count(1)


class _Answer:
    """The broker's answer to one client request, in the order the requests came."""

    __slots__ = ("payload",)

    def __init__(self, payload: bytes | None = None) -> None:
        self.payload = payload


class MessageChannel:
    """The message class's state on one channel (see the module docstring)."""

    def __init__(self, channel: LegacyChannel) -> None:
        self.channel = channel
        self.answers: deque[_Answer] = deque()
        # Our requests the client has not answered: the delivery tag of a transfer to be
        # settled by the answer, or None (no-ack transfers, open/append/close).
        self.awaiting: deque[int | None] = deque()
        self.references: dict[bytes, bytearray] = {}
        # Transfers waiting for their reference's close: (answer, method).
        self.waiting: dict[bytes, list[tuple[_Answer, Any]]] = {}
        # Consumer tag -> the destination its transfers name.
        self.destinations: dict[str, str] = {}

    # -- answers, in order ---------------------------------------------------------------

    def answer(self, method: Any) -> None:
        self.answers.append(_Answer(method.encode()))
        self.flush()

    def later(self) -> _Answer:
        slot = _Answer()
        self.answers.append(slot)
        return slot

    def flush(self) -> None:
        answers = self.answers
        legacy = self.channel.legacy
        while answers and answers[0].payload is not None:
            payload = answers.popleft().payload
            assert payload is not None
            legacy.send_legacy(self.channel.id, payload)

    # -- publishing ------------------------------------------------------------------------

    def publish(self, method: Any, body: bytes) -> bytes:
        """Route a client's transfer; its answer (ok, or reject when returned)."""
        channel = self.channel
        session = channel.session
        message = transfer_message(method, method.destination, body, session.vhost.timers.wall)
        returned: list[tuple[int, str]] = []
        channel.return_hook = lambda code, text, _message: returned.append((code, text))
        try:
            session.publish(
                method.destination, method.routing_key, message, immediate=method.immediate
            )
        finally:
            channel.return_hook = None
        channel.legacy.shell.published = True
        if returned:
            code, text = returned[0]
            return m09.MessageReject(code=code, text=text).encode()
        return m09.MessageOk().encode()

    # -- deliverer ---------------------------------------------------------------------------

    def deliver(
        self,
        channel: LegacyChannel,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        message: Message,
    ) -> None:
        consumer = channel.session.consumers.get(consumer_tag)
        settle = None if consumer is None or consumer.auto_settle else delivery_tag
        self.send_transfer(
            self.destinations.get(consumer_tag, consumer_tag), redelivered, message, settle
        )

    def send_transfer(
        self, destination: str, redelivered: bool, message: Message, settle: int | None
    ) -> None:
        fields, body = transfer_fields(message)
        legacy = self.channel.legacy
        send = legacy.send_legacy
        channel_id = self.channel.id
        inline = m09.MessageTransfer(
            destination=destination, redelivered=redelivered, body=Content(body), **fields
        ).encode()
        if len(inline) + 8 <= legacy.frame_max:
            send(channel_id, inline)
            self.awaiting.append(settle)
            return
        reference = b"leveret-%d" % next(_refs)
        send(channel_id, m09.MessageOpen(reference=reference).encode())
        self.awaiting.append(None)
        step = max(legacy.frame_max - _APPEND_OVERHEAD, 1)
        for start in range(0, len(body), step):
            chunk = body[start : start + step]
            send(channel_id, m09.MessageAppend(reference=reference, bytes_=chunk).encode())
            self.awaiting.append(None)
        transfer = m09.MessageTransfer(
            destination=destination,
            redelivered=redelivered,
            body=Content(reference, reference=True),
            **fields,
        )
        send(channel_id, transfer.encode())
        self.awaiting.append(settle)
        send(channel_id, m09.MessageClose(reference=reference).encode())
        self.awaiting.append(None)

    def cancelled(self, channel: LegacyChannel, consumer_tag: str) -> None:
        self.destinations.pop(consumer_tag, None)

    def answered(self, accept: bool) -> None:
        """The client's ok (``accept``) or reject of our oldest unanswered request."""
        if not self.awaiting:
            name = "ok" if accept else "reject"
            raise PreconditionFailed(f"message.{name} answers no request of the server")
        tag = self.awaiting.popleft()
        if tag is None:
            return
        if accept:
            self.channel.legacy._ack(self.channel, tag, False)
        else:
            self.channel.session.reject(tag, requeue=False)

    def close(self) -> None:
        self.references.clear()
        self.waiting.clear()
        self.answers.clear()
        self.awaiting.clear()


def message_channel(channel: LegacyChannel) -> MessageChannel:
    return channel_extra(channel, "message", MessageChannel, lambda: MessageChannel(channel))


# -- client requests --------------------------------------------------------------------


@register(m09.MessageTransfer)
def message_transfer(channel: LegacyChannel, method: m09.MessageTransfer) -> None:
    guard = channel.guard
    guard.publish(method.destination, method.routing_key, channel.session.publisher)
    if method.user_id:
        guard.check_user_id(method.user_id)
    extra = message_channel(channel)
    if not method.body.reference:
        extra.answers.append(_Answer(extra.publish(method, method.body.data)))
        extra.flush()
        return
    reference = method.body.data
    if reference not in extra.references:
        raise NotFound(f"message.transfer: reference '{reference.hex()}' is not open")
    extra.waiting.setdefault(reference, []).append((extra.later(), method))


@register(m09.MessageOpen)
def message_open(channel: LegacyChannel, method: m09.MessageOpen) -> None:
    extra = message_channel(channel)
    if method.reference in extra.references:
        raise PreconditionFailed(f"message.open: reference '{method.reference.hex()}' is open")
    extra.references[method.reference] = bytearray()
    extra.answer(m09.MessageOk())


def _open_reference(channel: LegacyChannel, reference: bytes) -> bytearray:
    data = message_channel(channel).references.get(reference)
    if data is None:
        raise NotFound(f"reference '{reference.hex()}' is not open")
    return data


@register(m09.MessageAppend)
def message_append(channel: LegacyChannel, method: m09.MessageAppend) -> None:
    data = _open_reference(channel, method.reference)
    limit = channel.legacy.limits.max_message_size
    if limit and len(data) + len(method.bytes_) > limit:
        raise ContentTooLarge(
            f"reference '{method.reference.hex()}' would be larger than the configured max "
            f"size {limit}"
        )
    data += method.bytes_
    message_channel(channel).answer(m09.MessageOk())


@register(m09.MessageClose)
def message_close(channel: LegacyChannel, method: m09.MessageClose) -> None:
    data = _open_reference(channel, method.reference)
    extra = message_channel(channel)
    del extra.references[method.reference]
    body = bytes(data)
    for answer, transfer in extra.waiting.pop(method.reference, []):
        answer.payload = extra.publish(transfer, body)
    extra.answer(m09.MessageOk())


@register(m09.MessageCheckpoint)
def message_checkpoint(channel: LegacyChannel, method: m09.MessageCheckpoint) -> None:
    data = _open_reference(channel, method.reference)
    legacy = channel.legacy
    state = state_of(legacy.broker)
    now = legacy.broker.timers.now
    state.sweep(now)
    state.checkpoints[owner_key(channel.legacy.client, method.identifier)] = (bytes(data), now)
    message_channel(channel).answer(m09.MessageOk())


@register(m09.MessageResume)
def message_resume(channel: LegacyChannel, method: m09.MessageResume) -> None:
    extra = message_channel(channel)
    if method.reference in extra.references:
        raise PreconditionFailed(f"message.resume: reference '{method.reference.hex()}' is open")
    state = state_of(channel.legacy.broker)
    saved = state.checkpoints.get(owner_key(channel.legacy.client, method.identifier))
    data = bytearray(saved[0]) if saved is not None else bytearray()
    extra.references[method.reference] = data
    extra.answer(m09.MessageOffset(value=len(data)))


@register(m09.MessageQos)
def message_qos(channel: LegacyChannel, method: m09.MessageQos) -> None:
    channel.session.set_qos(method.prefetch_size, method.prefetch_count, method.global_)
    message_channel(channel).answer(m09.MessageOk())


@register(m09.MessageConsume)
def message_consume(channel: LegacyChannel, method: m09.MessageConsume) -> None:
    queue_name = consume_queue(channel, method.queue)
    destination = method.destination
    extra = message_channel(channel)
    if destination and destination in extra.destinations.values():
        raise NotAllowed(f"attempt to reuse destination '{destination}'")
    tag = unused_tag(channel, destination)
    extra.destinations[tag] = destination
    try:
        # the answer goes before the first delivery
        consumer = start_consumer(
            channel,
            queue_name,
            tag,
            extra,
            no_ack=method.no_ack,
            exclusive=method.exclusive,
            arguments=method.filter,
        )
    except BaseException:
        extra.destinations.pop(tag, None)
        raise
    extra.answer(m09.MessageOk())
    consumer.queue.dispatch()


def _tag_of(extra: MessageChannel, destination: str) -> str | None:
    for tag, named in extra.destinations.items():
        if named == destination:
            return tag
    return None


@register(m09.MessageCancel)
def message_cancel(channel: LegacyChannel, method: m09.MessageCancel) -> None:
    extra = message_channel(channel)
    tag = _tag_of(extra, method.destination)
    if tag is not None:
        channel.deliverers.pop(tag, None)
        extra.destinations.pop(tag, None)
        channel.session.cancel(tag)
    extra.answer(m09.MessageOk())


@register(m09.MessageGet)
def message_get(channel: LegacyChannel, method: m09.MessageGet) -> None:
    session = channel.session
    queue_name = session.queue_name(method.queue)
    channel.guard.get(queue_name)
    extra = message_channel(channel)
    result = session.get(queue_name, no_ack=method.no_ack)
    if result is None:
        extra.answer(m09.MessageEmpty())
        return
    delivery_tag, entry, _remaining = result
    extra.send_transfer(
        method.destination,
        entry.redelivered,
        entry.message,
        None if method.no_ack else delivery_tag,
    )
    extra.answer(m09.MessageOk())


@register(m09.MessageRecover)
def message_recover(channel: LegacyChannel, method: m09.MessageRecover) -> None:
    extra = message_channel(channel)
    # Every unanswered transfer is given back (or sent again as a new request): the old
    # requests need no answer any more, and an answer sent for one after this is refused.
    extra.awaiting.clear()
    channel.session.recover(method.requeue)
    extra.answer(m09.MessageOk())


# -- client answers to the broker's requests ----------------------------------------------


@register(m09.MessageOk)
def message_ok(channel: LegacyChannel, method: m09.MessageOk) -> None:
    message_channel(channel).answered(True)


@register(m09.MessageReject)
def message_reject(channel: LegacyChannel, method: m09.MessageReject) -> None:
    message_channel(channel).answered(False)
