"""A minimal asyncio AMQP 0-9-1 client for the load generator, on the project's own codec.

Frames are cut by :class:`leveret.protocol.amqp091.framing.FrameDecoder` and methods are built
and decoded with the generated classes, in the client role.  The paths that run once per message
are hand-rolled on top of them: ``basic.deliver``, ``basic.ack`` and ``basic.nack`` are read
with one ``struct`` call each, a publish is a pre-encoded prefix + stamp + pre-encoded suffix,
and everything written while handling one ``data_received`` is sent in one ``write``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections import deque
from typing import TYPE_CHECKING, TypeVar, cast

from bench.stats import STAMP_SIZE
from leveret.errors import FrameError
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["AmqpError", "Connection", "PublishTemplate", "ack_frame", "connect"]

M = TypeVar("M", bound=m.Method)

_DELIVER = b"\x00\x3c\x00\x3c"  # basic.deliver (60, 60)
_ACK = b"\x00\x3c\x00\x50"  # basic.ack (60, 80)
_NACK = b"\x00\x3c\x00\x78"  # basic.nack (60, 120)
_QB = struct.Struct(">QB")
_Q = struct.Struct(">Q")
_ACK_FRAME = struct.Struct(">BHIHHQBB")  # method frame: header, 60, 80, tag, multiple, end
_FRAME_END = framing.FRAME_END


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
    ) -> None:
        if size < STAMP_SIZE:
            raise ValueError(f"body size {size} is smaller than the {STAMP_SIZE}-byte stamp")
        if 0 < frame_max < STAMP_SIZE + framing.FRAME_OVERHEAD:
            raise ValueError(f"frame_max {frame_max} is too small for the stamp")
        method = m.BasicPublish(exchange=exchange, routing_key=routing_key).encode()
        props = BasicProperties(delivery_mode=2 if persistent else 1).encode()
        marker = b"\xa5" * STAMP_SIZE
        whole = framing.encode_message_frames(
            channel, method, 60, marker + bytes(size - STAMP_SIZE), props, frame_max
        )
        # The stamp sits right after the first body frame's 7-byte header.
        at = (
            len(framing.encode_method_frame(channel, method))
            + framing.FRAME_HEADER_SIZE
            + 12
            + len(props)
            + 1
            + framing.FRAME_HEADER_SIZE
        )
        assert whole[at : at + STAMP_SIZE] == marker
        self.prefix = whole[:at]
        self.suffix = whole[at + STAMP_SIZE :]


def ack_frame(channel: int, delivery_tag: int, *, multiple: bool) -> bytes:
    """A basic.ack method frame."""
    return _ACK_FRAME.pack(
        framing.FRAME_METHOD, channel, 13, 60, 80, delivery_tag, int(multiple), _FRAME_END
    )


class Connection(asyncio.Protocol):
    """One client connection.  Set ``on_deliver`` / ``on_confirm`` before messages flow.

    ``on_deliver(delivery_tag, redelivered, stamp)`` runs per delivered message (``stamp`` is
    the first 16 bytes of the body); ``on_confirm(delivery_tag, multiple, ack)`` per basic.ack
    or basic.nack; ``after_data()`` once after each batch of frames (flush acks there).
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.frame_max = 131072
        self.out: list[bytes] = []
        self.error: str | None = None
        self.blocked = False
        self.writable = asyncio.Event()
        self.writable.set()
        self.lost = asyncio.get_running_loop().create_future()
        self.on_deliver: Callable[[int, int, bytes], None] | None = None
        self.on_confirm: Callable[[int, bool, bool], None] | None = None
        self.after_data: Callable[[], None] | None = None
        self.flow_changed: Callable[[], None] | None = None
        self._decoder = framing.FrameDecoder(frame_max=0)
        self._inbox: deque[tuple[int, m.Method]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._tag = 0
        self._redelivered = 0
        self._left = 0
        self._stamp = b""

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, but provide its methods.
        self.transport = transport = cast("asyncio.Transport", transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=1 << 20)
        transport.write(framing.PROTOCOL_HEADER)

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
            frames = self._decoder.feed(data)
        except FrameError as exc:
            self._fail(f"frame error from the broker: {exc}")
            return
        try:
            self._frames(frames)
        except Exception as exc:  # a bug here must fail the run, not vanish in a log line
            self._fail(f"client error: {type(exc).__name__}: {exc}")

    def _frames(self, frames: list[framing.Frame]) -> None:
        for ftype, channel, view in frames:
            payload = cast("bytes", view)  # the decoder hands out bytes slices (framing.py)
            if ftype == 1:
                if payload.startswith(_DELIVER):
                    self._tag, self._redelivered = _QB.unpack_from(payload, 5 + payload[4])
                elif payload.startswith(_ACK):
                    tag, flags = _QB.unpack_from(payload, 4)
                    if self.on_confirm is not None:
                        self.on_confirm(tag, bool(flags & 1), True)
                elif payload.startswith(_NACK):
                    tag, flags = _QB.unpack_from(payload, 4)
                    if self.on_confirm is not None:
                        self.on_confirm(tag, bool(flags & 1), False)
                else:
                    self._method(channel, m.decode_method(payload))
            elif ftype == 2:
                self._left = _Q.unpack_from(payload, 4)[0]
                self._stamp = b""
                if self._left == 0 and self.on_deliver is not None:
                    self.on_deliver(self._tag, self._redelivered, b"")
            elif ftype == 3:
                if len(self._stamp) < STAMP_SIZE:
                    self._stamp += payload[: STAMP_SIZE - len(self._stamp)]
                self._left -= len(payload)
                if self._left == 0 and self.on_deliver is not None:
                    self.on_deliver(self._tag, self._redelivered & 1, self._stamp)
        if self.after_data is not None:
            self.after_data()
        if self.out:
            self.flush()

    # -- output -------------------------------------------------------------------------

    def flush(self) -> None:
        out = self.out
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out) if len(out) > 1 else out[0])
        out.clear()

    def send(self, channel: int, method: m.Method) -> None:
        self.out.append(framing.encode_method_frame(channel, method.encode()))
        self.flush()

    # -- methods ------------------------------------------------------------------------

    def _method(self, channel: int, method: m.Method) -> None:
        if isinstance(method, m.ConnectionClose):
            self.send(0, m.ConnectionCloseOk())
            self._fail(f"connection.close {method.reply_code} {method.reply_text}")
        elif isinstance(method, m.ChannelClose):
            self.send(channel, m.ChannelCloseOk())
            self._fail(f"channel.close {method.reply_code} {method.reply_text} (ch {channel})")
        elif isinstance(method, m.ConnectionBlocked):
            self.blocked = True
        elif isinstance(method, m.ConnectionUnblocked):
            self.blocked = False
            if self.flow_changed is not None:
                self.flow_changed()
        elif isinstance(method, m.BasicCancel):
            self._fail(f"consumer {method.consumer_tag} cancelled by the broker")
        else:
            self._inbox.append((channel, method))
            self._wake()

    def _fail(self, error: str) -> None:
        if self.error is None:
            self.error = error
        self._wake()
        if self.transport is not None:
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

    async def open(self, user: str, password: str, vhost: str, frame_max: int = 131072) -> None:
        await self.expect(m.ConnectionStart)
        self.send(
            0,
            m.ConnectionStartOk(
                client_properties={
                    "product": "leveret-bench",
                    "capabilities": {
                        "publisher_confirms": True,
                        "basic.nack": True,
                        "connection.blocked": True,
                        "consumer_cancel_notify": True,
                    },
                },
                mechanism="PLAIN",
                response=b"\x00" + user.encode() + b"\x00" + password.encode(),
                locale="en_US",
            ),
        )
        tune = await self.expect(m.ConnectionTune)
        fm = min(tune.frame_max or frame_max, frame_max)
        self.frame_max = fm
        self.send(0, m.ConnectionTuneOk(channel_max=tune.channel_max, frame_max=fm, heartbeat=0))
        await self.call(0, m.ConnectionOpen(virtual_host=vhost), m.ConnectionOpenOk)

    async def close(self, within: float = 5.0) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if self.error is None:
            self.send(0, m.ConnectionClose(reply_code=200, reply_text="bye"))
            with contextlib.suppress(AmqpError, TimeoutError):
                await self.expect(m.ConnectionCloseOk, within=within)
        self.transport.close()


async def connect(
    host: str, port: int, user: str, password: str, vhost: str, *, channel: bool = True
) -> Connection:
    """Open a connection (and channel 1 unless ``channel`` is False)."""
    loop = asyncio.get_running_loop()
    _transport, conn = await loop.create_connection(Connection, host, port)
    await conn.open(user, password, vhost)
    if channel:
        await conn.call(1, m.ChannelOpen(), m.ChannelOpenOk)
    return conn
