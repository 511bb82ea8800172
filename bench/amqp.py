"""A minimal asyncio AMQP 0-9-1 client for the load generator, on the project's own codec.

The protocol is the client-role machine shared by every client-side user
(:class:`leveret.protocol.amqp091.client.ClientConnection`); this module adds the asyncio
transport and the load generator's callbacks. The machine appends every ``basic.deliver`` of
a read straight into its columns, and ``on_deliver`` runs over them; a publish is a
pre-encoded prefix + stamp + pre-encoded suffix (:class:`PublishTemplate`, from the machine's
encoder), many of them handed to the machine as one buffer; an ack is one ``struct`` call; and
everything queued while handling one ``data_received`` goes out in one ``write``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from typing import TYPE_CHECKING, TypeVar, cast

from bench.stamp_reader import StampReader
from bench.stats import STAMP_SIZE
from leveret.errors import AMQPError
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp091.client import (
    CLIENT_CAPABILITIES,
    ClientConnection,
    Deliveries,
    encode_ack,
    encode_publish,
)
from leveret.protocol.amqp091.client_events import MethodReceived, ProtocolHeaderReceived

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.protocol.amqp091.client_events import Event
    from leveret.protocol.amqp091.fieldtable import FieldValue

__all__ = [
    "CHANNEL",
    "AmqpError",
    "Connection",
    "PublishTemplate",
    "StampConnection",
    "ack_frame",
    "connect",
]

M = TypeVar("M", bound=m.Method)
T = TypeVar("T")

CHANNEL = 1  # every connection of the load generator uses one channel


class AmqpError(Exception):
    """The broker closed the connection or a channel, or the connection was lost."""


class PublishTemplate:
    """Pre-encoded frames of one publish; only the 16-byte stamp changes per message.

    ``prefix + stamp + suffix`` is the basic.publish method frame, the content header frame
    and the body frame(s) of a ``size``-byte body whose first 16 bytes are the stamp.
    """

    __slots__ = ("prefix", "suffix")

    def __init__(
        self,
        channel: int,
        exchange: str,
        routing_key: str,
        size: int,
        *,
        persistent: bool,
        frame_max: int,
        headers: dict[str, FieldValue] | None = None,
    ) -> None:
        if size < STAMP_SIZE:
            raise ValueError(f"body size {size} is smaller than the {STAMP_SIZE}-byte stamp")
        if 0 < frame_max < STAMP_SIZE + framing.FRAME_OVERHEAD:
            raise ValueError(f"frame_max {frame_max} is too small for the stamp")
        props = BasicProperties(delivery_mode=2 if persistent else 1, headers=headers).encode()
        marker = b"\xa5" * STAMP_SIZE
        whole = encode_publish(
            channel, exchange, routing_key, marker + bytes(size - STAMP_SIZE), props, frame_max
        )
        # The stamp sits right after the first body frame's 7-byte header.
        method_size = framing.FRAME_OVERHEAD + len(
            m.BasicPublish(exchange=exchange, routing_key=routing_key).encode()
        )
        at = method_size + framing.FRAME_HEADER_SIZE + 12 + len(props) + 1
        at += framing.FRAME_HEADER_SIZE
        assert whole[at : at + STAMP_SIZE] == marker
        self.prefix = whole[:at]
        self.suffix = whole[at + STAMP_SIZE :]


def ack_frame(channel: int, delivery_tag: int, *, multiple: bool) -> bytes:
    """A basic.ack method frame."""
    return encode_ack(channel, delivery_tag, multiple)


class Connection(asyncio.BaseProtocol):
    """One client connection.  Set ``on_deliver`` / ``on_confirm`` before messages flow.

    ``on_deliver(delivery_tag, redelivered, stamp)`` runs per delivered message (``stamp`` is
    the first 16 bytes of the body); ``on_confirm(delivery_tag, multiple, ack)`` per basic.ack
    or basic.nack; ``after_data()`` once after each batch of frames (queue acks there with
    :meth:`ack`; what is queued goes out right after it).

    A ``BaseProtocol`` with ``data_received`` (what ``asyncio.Protocol`` adds is only that
    method's name), so that :class:`StampConnection` can be a ``BufferedProtocol``.
    """

    def __init__(
        self,
        user: str = "guest",
        password: str = "guest",  # noqa: S107 - RabbitMQ's default user
        vhost: str = "/",
        frame_max: int = 131072,
    ) -> None:
        self.transport: asyncio.Transport | None = None
        self.deliveries = Deliveries()
        self.machine = ClientConnection(
            user,
            password,
            vhost,
            client_properties={
                "product": "leveret-bench",
                "capabilities": dict(CLIENT_CAPABILITIES),
            },
            frame_max=frame_max,
            deliveries=self.deliveries,
        )
        self.error: str | None = None
        self.writable = asyncio.Event()
        self.writable.set()
        self.lost = asyncio.get_running_loop().create_future()
        self.on_deliver: Callable[[int, int, bytes], None] | None = None
        self.on_confirm: Callable[[int, bool, bool], None] | None = None
        self.after_data: Callable[[], None] | None = None
        self.flow_changed: Callable[[], None] | None = None
        self._inbox: deque[tuple[int, m.Method]] = deque()
        self._waiter: asyncio.Future[None] | None = None

    @property
    def frame_max(self) -> int:
        return self.machine.frame_max

    @property
    def blocked(self) -> bool:
        """The broker sent connection.blocked (and not yet connection.unblocked)."""
        return self.machine.blocked

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, but provide its methods.
        self.transport = transport = cast("asyncio.Transport", transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=1 << 20)
        self.flush()  # the protocol header

    def connection_lost(self, exc: Exception | None) -> None:
        if self.error is None:
            self.error = f"connection lost: {exc}" if exc else "connection closed by the broker"
        if not self.lost.done():
            self.lost.set_result(None)
        self.writable.set()
        self._wake()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()
        if self.flow_changed is not None:
            self.flow_changed()

    def data_received(self, data: bytes) -> None:
        try:
            # Heartbeats are off (tune-ok asks for none), so the machine needs no clock.
            events = self.machine.receive_data(data, 0.0)
        except AMQPError as exc:
            self.flush()  # the connection.close the machine queued
            self._fail(f"protocol error from the broker: {exc.reply_code} {exc}")
            return
        try:
            d = self.deliveries
            if d.tags:
                on_deliver = self.on_deliver
                if on_deliver is not None:
                    for tag, redelivered, body in zip(d.tags, d.redelivered, d.bodies, strict=True):
                        on_deliver(tag, redelivered, body[:STAMP_SIZE])
                d.clear()
            for event in events:
                self._event(event)
            if self.after_data is not None:
                self.after_data()
        except Exception as exc:  # a bug here must fail the run, not vanish in a log line
            self._fail(f"client error: {type(exc).__name__}: {exc}")
        self.flush()

    def _machine_frame(self, frame: bytes) -> None:
        """One whole frame for the machine (outside :class:`StampConnection`'s fast path)."""
        for event in self.machine.receive_data(frame, 0.0):
            self._event(event)

    # -- output -------------------------------------------------------------------------

    def flush(self) -> None:
        """Write everything the machine has queued, in one ``write``."""
        data = self.machine.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def send(self, channel: int, method: m.Method) -> None:
        self.machine.send_method(channel, method)
        self.flush()

    def publish(self, data: bytes, count: int = 1) -> None:
        """Queue ``count`` encoded publishes (template copies) on channel 1; :meth:`flush`."""
        self.machine.publish_encoded(CHANNEL, data, count)

    def publish_parts(self, parts: list[bytes], count: int) -> None:
        """Write ``count`` encoded publishes on channel 1 given as pieces (a template's
        prefix and stamp, its shared suffix, ...) in one ``writelines``, after whatever the
        machine had queued: a large body's padding goes out from the one template object,
        never copied into a joined buffer (uvloop writes the pieces with one ``writev``)."""
        machine = self.machine
        # The machine counts the confirm tags; the bytes are the pieces, written here.
        machine.publish_encoded(CHANNEL, b"", count)
        queued = machine.data_to_send()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines([queued, *parts] if queued else parts)

    def ack(self, delivery_tag: int, *, multiple: bool) -> None:
        """Queue a basic.ack on channel 1 (sent after the current read, or by :meth:`flush`)."""
        self.machine.ack(CHANNEL, delivery_tag, multiple)

    # -- methods ------------------------------------------------------------------------

    def _event(self, event: Event) -> None:
        if isinstance(event, MethodReceived):
            channel, method = event.channel, event.method
            if isinstance(method, m.BasicAck | m.BasicNack):
                if self.on_confirm is not None:
                    self.on_confirm(
                        method.delivery_tag, method.multiple, isinstance(method, m.BasicAck)
                    )
            elif isinstance(method, m.ConnectionClose):
                self._fail(f"connection.close {method.reply_code} {method.reply_text}")
            elif isinstance(method, m.ChannelClose):
                self._fail(f"channel.close {method.reply_code} {method.reply_text} (ch {channel})")
            elif isinstance(method, m.ConnectionBlocked):
                pass  # the machine keeps the flag
            elif isinstance(method, m.ConnectionUnblocked):
                if self.flow_changed is not None:
                    self.flow_changed()
            elif isinstance(method, m.BasicCancel):
                self._fail(f"consumer {method.consumer_tag} cancelled by the broker")
            else:
                self._inbox.append((channel, method))
                self._wake()
        elif isinstance(event, ProtocolHeaderReceived):
            self._fail(f"the broker refused AMQP 0-9-1: {event.data!r}")

    def _fail(self, error: str) -> None:
        if self.error is None:
            self.error = error
        self._wake()
        if self.transport is not None:
            self.flush()  # a close-ok or close the machine queued
            self.transport.close()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def expect(self, cls: type[M], within: float = 30.0) -> M:
        """The next method the broker sent outside the per-message paths; must be ``cls``."""
        async with asyncio.timeout(within):
            while not self._inbox:
                if self.error is not None:
                    raise AmqpError(self.error)
                self._waiter = asyncio.get_running_loop().create_future()
                await self._waiter
        _channel, method = self._inbox.popleft()
        if not isinstance(method, cls):
            raise AmqpError(f"expected {cls.NAME}, got {method!r}")
        return method

    async def call(self, channel: int, method: m.Method, reply: type[M]) -> M:
        self.send(channel, method)
        return await self.expect(reply)

    async def open(self, within: float = 30.0) -> None:
        """Wait until the machine has run the handshake (start, tune and open are its own)."""
        await self.expect(m.ConnectionStart, within)
        await self.expect(m.ConnectionTune, within)
        await self.expect(m.ConnectionOpenOk, within)

    async def close(self, within: float = 5.0) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if self.error is None and self.machine.is_open:
            self.machine.close(200, "bye")
            self.flush()
            with contextlib.suppress(AmqpError, TimeoutError):
                await self.expect(m.ConnectionCloseOk, within=within)
        self.transport.close()


class StampConnection(Connection, asyncio.BufferedProtocol):
    """A connection that reads into one reused buffer (``BufferedProtocol``; uvloop takes a
    protocol for buffered only if it is not an ``asyncio.Protocol``).

    Until :meth:`read_stamps`, each read is handed to the machine as ``bytes``, as
    :class:`Connection` does; after it, a :class:`~bench.stamp_reader.StampReader` walks the
    reads in place: ``on_deliver`` gets each delivery of channel 1 with its stamp, its body
    never copied, and every other frame goes to the machine whole.
    """

    def __init__(
        self,
        user: str = "guest",
        password: str = "guest",  # noqa: S107 - RabbitMQ's default user
        vhost: str = "/",
        frame_max: int = 131072,
    ) -> None:
        super().__init__(user, password, vhost, frame_max)
        self.reader = StampReader(CHANNEL, frame_max, self._stamp, self._machine_frame)
        self.stamps = False

    def read_stamps(self) -> None:
        """Walk the reads with the stamp reader from now on. Call it between a reply and the
        next request (the machine then holds no part of a frame)."""
        self.reader = StampReader(
            CHANNEL, self.frame_max - framing.FRAME_OVERHEAD, self._stamp, self._machine_frame
        )
        self.stamps = True

    def _stamp(self, tag: int, redelivered: int, stamp: bytes) -> None:
        if self.on_deliver is not None:
            self.on_deliver(tag, redelivered, stamp)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        reader = self.reader
        if not self.stamps:
            data = bytes(reader.get_buffer()[:nbytes])
            self.data_received(data)
            return
        self._walk(reader.updated, nbytes)

    def data_received(self, data: bytes) -> None:
        """A read handed over as ``bytes`` (the tests; before :meth:`read_stamps`)."""
        if self.stamps:
            self._walk(self.reader.feed, data)
        else:
            super().data_received(data)

    def _walk(self, step: Callable[[T], None], arg: T) -> None:
        try:
            step(arg)
        except AMQPError as exc:
            self.flush()  # a connection.close the machine queued, if it raised
            self._fail(f"protocol error from the broker: {exc.reply_code} {exc}")
            return
        except Exception as exc:  # a bug here must fail the run, not vanish in a log line
            self._fail(f"client error: {type(exc).__name__}: {exc}")
            return
        try:
            if self.after_data is not None:
                self.after_data()
        except Exception as exc:
            self._fail(f"client error: {type(exc).__name__}: {exc}")
        self.flush()


async def connect(
    host: str,
    port: int,
    user: str,
    password: str,
    vhost: str,
    *,
    channel: bool = True,
    stamps: bool = False,
) -> Connection:
    """Open a connection (and channel 1 unless ``channel`` is False); a
    :class:`StampConnection` when ``stamps`` (call its ``read_stamps`` when it consumes)."""
    loop = asyncio.get_running_loop()
    factory = StampConnection if stamps else Connection
    _transport, conn = await loop.create_connection(
        lambda: factory(user, password, vhost), host, port
    )
    await conn.open()
    if channel:
        await conn.call(CHANNEL, m.ChannelOpen(), m.ChannelOpenOk)
    return conn
