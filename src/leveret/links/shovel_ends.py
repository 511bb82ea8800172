"""A shovel's two ends, one class per protocol and side: where messages come from
(:class:`Source091`, :class:`Source10`) and where they go (:class:`Dest091`,
:class:`Dest10`). What RabbitMQ's ``rabbit_amqp091_shovel`` and ``rabbit_amqp10_shovel``
do at each end, on this project's clients.

A source hands each message to its :class:`Forwarder` (the shovel) with the tag it will be
acknowledged by; a destination publishes it and reports confirms back by its own sequence
number. Neither end knows the other's protocol: a destination takes a message in either
form (``publish091``: exchange, routing key, raw properties, body; ``publish10``: a whole
1.0 message) and converts only when the two differ.
"""

from __future__ import annotations

import secrets
from collections import deque
from typing import TYPE_CHECKING, Protocol

from leveret.links.amqp091 import LinkError
from leveret.links.amqp10 import ACCEPTED, RELEASED
from leveret.links.messages import (
    amqp091_of_amqp10,
    amqp10_of_amqp091,
    prepend_table_header,
    rewrite_amqp10,
    set_publish_properties,
    timestamp_header,
)
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import Accepted, Role, parse_message

if TYPE_CHECKING:
    from leveret.links.amqp091 import Connection091
    from leveret.links.amqp10 import Connection10
    from leveret.links.shovel_config import DestSpec, SourceSpec
    from leveret.protocol.amqp091.client import Deliveries
    from leveret.protocol.amqp091.fieldtable import FieldTable
    from leveret.protocol.amqp10 import DispositionReceived, MessageReceived

__all__ = ["Dest091", "Dest10", "Forwarder", "Source091", "Source10", "ensure_queue"]


class Forwarder(Protocol):
    """What an end calls on its shovel."""

    def forward091(
        self, tag: int, exchange: str, routing_key: str, properties: bytes, body: bytes
    ) -> None: ...

    def forward10(self, tag: int, payload: bytes) -> None: ...

    def confirmed(self, seq: int, multiple: bool, ack: bool) -> None: ...

    def flow_changed(self) -> None: ...

    def after_source_read(self) -> None: ...

    def after_dest_read(self) -> None: ...


async def ensure_queue(conn: Connection091, queue: str, arguments: FieldTable) -> int:
    """RabbitMQ's ``ensure_queue``: a passive declare on a channel of its own; if the queue
    is missing (404), a durable declare with ``arguments``. Returns its message count."""
    try:
        ok = await conn.disposable_call(m.QueueDeclare(queue=queue, passive=True), m.QueueDeclareOk)
        return ok.message_count
    except LinkError as exc:
        if exc.code != 404 or conn.error is not None:
            raise
    ok = await conn.disposable_call(
        m.QueueDeclare(queue=queue, durable=True, arguments=arguments), m.QueueDeclareOk
    )
    return ok.message_count


class Source091:
    """Consumes a queue (or an exchange through a queue of its own) over 0-9-1."""

    protocol = "amqp091"

    def __init__(self, spec: SourceSpec, conn: Connection091, shovel: Forwarder) -> None:
        self.spec = spec
        self.conn = conn
        self.shovel = shovel
        self.channel = 0
        self.queue = spec.queue or ""
        self.paused = False

    async def start(self, *, no_ack: bool) -> int | None:
        """Declare, bind, set the prefetch and consume. Returns the queue's length when
        ``src-delete-after`` is ``queue-length`` (measured before consuming), else None."""
        conn, spec = self.conn, self.spec
        if spec.queue is not None:
            await ensure_queue(conn, spec.queue, spec.queue_args)
        self.channel = channel = await conn.open_channel()
        conn.on_channel_close = self._channel_closed
        if spec.queue is None:
            ok = await conn.call(channel, m.QueueDeclare(exclusive=True), m.QueueDeclareOk)
            self.queue = ok.queue
            await conn.call(
                channel,
                m.QueueBind(
                    queue=self.queue, exchange=spec.exchange or "", routing_key=spec.exchange_key
                ),
                m.QueueBindOk,
            )
        if not no_ack:
            await conn.call(channel, m.BasicQos(prefetch_count=spec.prefetch), m.BasicQosOk)
        length: int | None = None
        if spec.delete_after == "queue-length":
            ok = await conn.call(
                channel, m.QueueDeclare(queue=self.queue, passive=True), m.QueueDeclareOk
            )
            length = ok.message_count
        return length

    async def consume(self, *, no_ack: bool) -> None:
        self.conn.on_deliveries = self._deliveries
        self.conn.on_read = self.shovel.after_source_read
        self.conn.on_cancel = self._cancelled
        await self.conn.call(
            self.channel,
            m.BasicConsume(queue=self.queue, no_ack=no_ack, arguments=self.spec.consumer_args),
            m.BasicConsumeOk,
        )

    def _channel_closed(self, channel: int, error: LinkError) -> None:
        if channel == self.channel:
            raise error

    def _cancelled(self, channel: int, tag: str) -> None:
        raise LinkError("the source broker cancelled the consumer (basic.cancel)")

    def _deliveries(self, d: Deliveries) -> None:
        forward = self.shovel.forward091
        for tag, exchange, key, props, body in zip(
            d.tags, d.exchanges, d.routing_keys, d.properties, d.bodies, strict=True
        ):
            forward(tag, exchange.decode(), key.decode(), props, body)

    def ack(self, tag: int, multiple: bool) -> None:
        self.conn.ack(self.channel, tag, multiple)

    def nack(self, tag: int, multiple: bool) -> None:
        self.conn.nack(self.channel, tag, multiple, True)

    def flush(self) -> None:
        self.conn.flush()

    def pause(self) -> None:
        if not self.paused:
            self.paused = True
            self.conn.pause_reading()

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            self.conn.resume_reading()

    def refill(self, room: bool) -> None:
        """0-9-1 flow is the prefetch window and pausing the socket: nothing to do here."""


class Source10:
    """Receives from a 1.0 address; credit is the prefetch minus what is unsettled."""

    protocol = "amqp10"

    def __init__(self, spec: SourceSpec, conn: Connection10, shovel: Forwarder) -> None:
        self.spec = spec
        self.conn = conn
        self.shovel = shovel
        self.handle = -1
        self.settled_mode = False
        self.unsettled: deque[int] = deque()  # delivery ids not yet settled, in order
        self.acked: set[int] = set()  # settled out of order, above the head
        self.fixed_credit = isinstance(spec.delete_after, int) and not isinstance(
            spec.delete_after, bool
        )
        self.paused = False

    async def start(self, *, no_ack: bool) -> int | None:
        self.settled_mode = no_ack
        name = f"{self.spec.address}_{secrets.token_hex(8)}_receiver"
        self.handle = await self.conn.attach_receiver(name, self.spec.address or "", settled=no_ack)
        return None

    async def consume(self, *, no_ack: bool) -> None:
        self.conn.on_message = self._message
        self.conn.on_read = self.shovel.after_source_read
        self.conn.on_detach = self._detached
        delete_after = self.spec.delete_after
        credit = (
            int(delete_after)
            if self.fixed_credit and not isinstance(delete_after, str)
            else self.spec.prefetch
        )
        self.conn.grant(self.handle, credit)
        self.conn.flush()

    def _detached(self, handle: int, reason: str) -> None:
        if handle == self.handle:
            raise LinkError(reason)

    def _message(self, event: MessageReceived) -> None:
        if not event.settled:
            self.unsettled.append(event.delivery_id)
        self.shovel.forward10(event.delivery_id, event.payload)

    def ack(self, tag: int, multiple: bool) -> None:
        self._settle(tag, multiple, ACCEPTED)

    def nack(self, tag: int, multiple: bool) -> None:
        self._settle(tag, multiple, RELEASED)

    def _settle(self, tag: int, multiple: bool, state: Accepted | object) -> None:
        pending = self.unsettled
        ranges: list[tuple[int, int]] = []
        if multiple:
            while pending and pending[0] <= tag:
                first = last = pending.popleft()
                while pending and pending[0] == last + 1 and pending[0] <= tag:
                    last = pending.popleft()
                ranges.append((first, last))
        elif pending and pending[0] == tag:
            pending.popleft()
            ranges.append((tag, tag))
        else:
            try:
                pending.remove(tag)
            except ValueError:
                return
            ranges.append((tag, tag))
        for first, last in ranges:
            self.conn.settle(first, last, state)  # type: ignore[arg-type]

    def flush(self) -> None:
        self.conn.flush()

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            self.refill(True)

    def refill(self, room: bool) -> None:
        """Top the link's credit up to the prefetch minus what is unsettled, when at least
        half of that is used and the destination can take more."""
        if self.fixed_credit or self.handle < 0 or self.paused or not room:
            return
        want = self.spec.prefetch - (0 if self.settled_mode else len(self.unsettled))
        if want > 0 and self.conn.credit(self.handle) <= want // 2:
            self.conn.grant(self.handle, want)


class Dest091:
    """Publishes over 0-9-1: to the destination queue, exchange, or the message's own."""

    protocol = "amqp091"

    def __init__(
        self,
        spec: DestSpec,
        conn: Connection091,
        shovel: Forwarder,
        forward_headers: FieldTable | None,
        src_headers: list[tuple[str, str]],
    ) -> None:
        self.spec = spec
        self.conn = conn
        self.shovel = shovel
        self.channel = 0
        self.confirming = False
        self.exchange = "" if spec.queue is not None else spec.exchange
        self.routing_key = spec.queue if spec.queue is not None else spec.exchange_key
        # The forward-headers table without the URIs, which are added per connection.
        self.forward_headers = forward_headers
        self.src_headers = src_headers
        self.rewrites = bool(
            forward_headers is not None or spec.add_timestamp_header or spec.publish_properties
        )

    async def start(self, *, confirm: bool) -> None:
        conn, spec = self.conn, self.spec
        if spec.queue is not None:
            await ensure_queue(conn, spec.queue, spec.queue_args)
        self.channel = channel = await conn.open_channel()
        conn.on_channel_close = self._channel_closed
        conn.on_cancel = self._cancelled
        conn.on_read = self.shovel.after_dest_read
        conn.on_flow = self.shovel.flow_changed
        if confirm:
            conn.on_confirm = self._confirm
            await conn.call(channel, m.ConfirmSelect(), m.ConfirmSelectOk)
            self.confirming = True

    def _channel_closed(self, channel: int, error: LinkError) -> None:
        if channel == self.channel:
            raise error

    def _cancelled(self, channel: int, tag: str) -> None:
        raise LinkError("basic.cancel from the destination")

    def _confirm(self, channel: int, tag: int, multiple: bool, ack: bool) -> None:
        if channel == self.channel:
            self.shovel.confirmed(tag, multiple, ack)

    @property
    def writable(self) -> bool:
        return self.conn.writable

    def _props(self, props: BasicProperties) -> bytes:
        spec = self.spec
        if spec.publish_properties:
            set_publish_properties(props, spec.publish_properties)
        if self.forward_headers is not None:
            props.headers = prepend_table_header(props.headers, "x-shovelled", self.forward_headers)
        if spec.add_timestamp_header:
            timestamp_header(props)
        return props.encode()

    def publish091(self, exchange: str, routing_key: str, properties: bytes, body: bytes) -> int:
        if self.rewrites:
            properties = self._props(BasicProperties.decode(properties))
        return self.conn.publish(
            self.channel,
            exchange if self.exchange is None else self.exchange,
            routing_key if self.routing_key is None else self.routing_key,
            body,
            properties,
        )

    def publish10(self, payload: bytes) -> int:
        props, body = amqp091_of_amqp10(payload)
        routing_key = self.routing_key
        if routing_key is None:
            # No destination key: the 1.0 message's own routing key annotation, if any.
            key = parse_message(payload).message_annotations().get("x-routing-key")
            routing_key = key if isinstance(key, str) else ""
        return self.conn.publish(
            self.channel, self.exchange or "", routing_key, body, self._props(props)
        )

    def flush(self) -> None:
        self.conn.flush()

    def drain_pending(self) -> None:
        """0-9-1 publishing needs no credit: nothing is ever held back here."""


class Dest10:
    """Sends to a 1.0 address; messages wait here while the link has no credit."""

    protocol = "amqp10"

    def __init__(
        self,
        spec: DestSpec,
        conn: Connection10,
        shovel: Forwarder,
        forward_properties: dict[str, str] | None,
        src_headers: list[tuple[str, str]],
    ) -> None:
        self.spec = spec
        self.conn = conn
        self.shovel = shovel
        self.handle = -1
        self.settled = False
        self.pending: deque[tuple[bytes, int]] = deque()  # (payload, our sequence number)
        self.next_seq = 1
        self.ids: dict[int, int] = {}  # delivery-id -> our sequence number
        app = dict(spec.application_properties)
        # RabbitMQ 3.10 adds the 0-9-1 source's queue or exchange as application properties.
        app.update(src_headers)
        if forward_properties:
            app.update(forward_properties)
        self.app = app
        self.rewrites = bool(
            app or spec.properties or spec.message_annotations or spec.add_timestamp_header
        )

    async def start(self, *, confirm: bool) -> None:
        self.settled = not confirm
        conn = self.conn
        name = f"{self.spec.address}_{secrets.token_hex(8)}_sender"
        conn.on_disposition = self._disposition
        conn.on_credit = self._credit
        conn.on_read = self.shovel.after_dest_read
        conn.on_flow = self.shovel.flow_changed
        conn.on_detach = self._detached
        self.handle = await conn.attach_sender(name, self.spec.address or "", settled=not confirm)

    def _detached(self, handle: int, reason: str) -> None:
        if handle == self.handle:
            raise LinkError(reason)

    @property
    def writable(self) -> bool:
        return self.conn.writable and len(self.pending) < 1000

    def _rewrite(self, payload: bytes) -> bytes:
        spec = self.spec
        properties = dict(spec.properties)
        if spec.add_timestamp_header:
            import time

            properties["creation_time"] = int(time.time() * 1000)
        return rewrite_amqp10(
            payload,
            properties=properties,
            application_properties=self.app,
            message_annotations=spec.message_annotations,
        )

    def publish091(self, exchange: str, routing_key: str, properties: bytes, body: bytes) -> int:
        return self.publish10(amqp10_of_amqp091(properties, body))

    def publish10(self, payload: bytes) -> int:
        if self.rewrites:
            payload = self._rewrite(payload)
        seq = self.next_seq
        self.next_seq = seq + 1
        if self.pending or self.conn.credit(self.handle) <= 0:
            self.pending.append((payload, seq))
        else:
            self._send(payload, seq)
        return seq

    def _send(self, payload: bytes, seq: int) -> None:
        delivery_id = self.conn.send(self.handle, payload, settled=self.settled)
        if not self.settled:
            self.ids[delivery_id] = seq

    def _credit(self, handle: int, credit: int) -> None:
        if handle == self.handle:
            self.drain_pending()

    def drain_pending(self) -> None:
        pending = self.pending
        while pending and self.conn.credit(self.handle) > 0:
            payload, seq = pending.popleft()
            self._send(payload, seq)
        self.shovel.flow_changed()

    def _disposition(self, event: DispositionReceived) -> None:
        if event.role != Role.RECEIVER:
            return
        ack = isinstance(event.state, Accepted)
        ids = self.ids
        for delivery_id in range(event.first, event.last + 1):
            seq = ids.pop(delivery_id, None)
            if seq is not None:
                self.shovel.confirmed(seq, False, ack)

    def flush(self) -> None:
        self.conn.flush()
