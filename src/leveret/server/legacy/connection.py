"""The broker's AMQP 0-8 and 0-9 front ends: the 0-9-1 front end with a translating edge.

``LegacyConnection`` is an ``AMQP091Connection`` (same machine, sessions and handlers) for a
client that sent an older protocol header. Everything the versions share with 0-9-1 octet for
octet goes through the 0-9-1 code unchanged; what differs is in the connection's
``Dialect`` (``dialects.py``) and is translated here, at the edge, frame by frame:

- inbound method frames: a renamed id is rewritten to 0-9-1's, a short argument list padded,
  a refused id answered with 541 as RabbitMQ does, and a method of the version's own
  (``access``, ``file``, ``stream``, ``message``, ``channel.ping``...) decoded with the
  version's codec and handed to ``handlers.py``;
- outbound methods: ``send_method`` encodes the few replies whose form differs with the
  version's codec (0-8's ``connection.close`` 10/60, its field-less ``channel.open-ok``);
- content frames of the ``file``, ``stream`` and ``tunnel`` classes (class ids 70, 80, 110),
  which the 0-9-1 assembly refuses, are assembled by the channel (``channel.py``);
- a channel selected for ``dtx`` sees its tx methods, acks and rejects go to ``dtx.py``
  (they act on the channel's branch), everything else is 0-9-1's;
- a connection's tunnels (``tunnel.py``) tick with it and close with it;
- ``connection.start`` names the version (8-0 or 0-9), with RabbitMQ's empty capabilities
  table for 0-8.

Sans-IO like the machine it extends; ``server/frontend.py`` picks it from the header.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, cast

from leveret.errors import (
    AMQPError,
    ChannelError,
    FrameError,
    InternalError,
    SyntaxError_,
    UnexpectedFrame,
)
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091.connection import State
from leveret.server.legacy import classes  # noqa: F401 - registers the classes' handlers
from leveret.server.legacy.channel import LegacyChannel
from leveret.server.legacy.connection_base import LegacyConnectionBase
from leveret.server.legacy.handlers import LEGACY_HANDLERS, not_implemented

if TYPE_CHECKING:
    from leveret.protocol.amqp091.channel import ChannelState
    from leveret.protocol.amqp091.fieldtable import FieldTable

__all__ = ["LegacyConnection"]

log = logging.getLogger("leveret.connection")

_METHOD: Final = framing.FRAME_METHOD
_HEADER: Final = framing.FRAME_HEADER
_BODY: Final = framing.FRAME_BODY


class LegacyConnection(LegacyConnectionBase):
    """One client connection speaking AMQP 0-8 or 0-9 to the broker, without I/O."""

    # -- the protocol header and connection.start ------------------------------------------

    def _protocol_header(self, data: bytes) -> bytes:
        needed = 8 - len(self._header)
        self._header += data[:needed]
        rest = data[needed:]
        if len(self._header) < 8:
            return b""
        if bytes(self._header) not in self.dialect.headers:
            # The front end is chosen by the header, so this is a bug of the caller.
            raise RuntimeError(f"header {bytes(self._header)!r} is not {self.dialect.name}'s")
        self.state = State.START
        self._send_start()
        return rest

    def _send_start(self) -> None:
        dialect = self.dialect
        self.send_method(
            0,
            m.ConnectionStart(
                version_major=dialect.version_major,
                version_minor=dialect.version_minor,
                server_properties=self._server_properties(),
                # RabbitMQ's order on these headers (its 0-9-1 answer lists the same two).
                mechanisms=b"AMQPLAIN PLAIN",
                locales=b"en_US",
            ),
        )

    def _server_properties(self) -> FieldTable:
        properties = super()._server_properties()
        if not self.dialect.capabilities:
            # 0-8 field tables have no boolean; RabbitMQ sends an empty table.
            properties["capabilities"] = {}
        return properties

    # -- input -----------------------------------------------------------------------------

    def _frame(self, frame: framing.Frame) -> None:
        frame_type, channel_id, payload = frame
        if frame_type == _METHOD:
            if len(payload) >= 4:
                key = int.from_bytes(payload[:4], "big")
                dialect = self.dialect
                if key in dialect.own:
                    self._own_method(channel_id, payload)
                    return
                if key in dialect.renamed:
                    renamed = dialect.renamed[key]
                    payload = renamed.to_bytes(4, "big") + payload[4:]
                    frame = (frame_type, channel_id, payload)
                elif key in dialect.padded:
                    frame = (frame_type, channel_id, payload + dialect.padded[key])
                elif key in dialect.refused:
                    # RabbitMQ 3.10.8's answer to the other version's connection.close
                    # (tests/data/rabbitmq-headers): 541, class 0, method 0.
                    self._hard_close(InternalError())
                    return
        elif frame_type in (_HEADER, _BODY) and channel_id:
            channel = self.channels.get(channel_id)
            if isinstance(channel, LegacyChannel) and channel.assembling() and not channel.closing:
                self._legacy_content(channel, frame_type, payload)
                return
        super()._frame(frame)

    def _own_method(self, channel_id: int, payload: bytes | memoryview) -> None:
        """A method only the older version has: decoded with its codec, then handled."""
        try:
            method = self.dialect.decode(payload)
        except SyntaxError_ as exc:
            self._hard_close(FrameError(str(exc), class_id=exc.class_id, method_id=exc.method_id))
            return
        except AMQPError as exc:
            self._hard_close(exc)
            return
        class_id: int = method.CLASS_ID
        method_id: int = method.METHOD_ID
        name: str = method.NAME
        if self.state is State.CLOSING:
            return
        if channel_id == 0 or self.state is not State.RUNNING:
            self._hard_close(
                UnexpectedFrame(
                    f"method {name} is not allowed on channel {channel_id} now",
                    class_id=class_id,
                    method_id=method_id,
                )
            )
            return
        channel = self.channels.get(channel_id)
        if channel is None:
            self._hard_close(
                ChannelError(
                    f"expected 'channel.open' on channel {channel_id}",
                    class_id=class_id,
                    method_id=method_id,
                )
            )
            return
        if channel.closing:
            return
        if channel.expecting_content() or cast("LegacyChannel", channel).assembling():
            self._hard_close(
                UnexpectedFrame(
                    f"expected content on channel {channel_id}, got {name}",
                    class_id=class_id,
                    method_id=method_id,
                )
            )
            return
        handler = LEGACY_HANDLERS.get(type(method), not_implemented)
        try:
            handler(cast("LegacyChannel", channel), method)
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = class_id, method_id
            self._error(channel, exc)

    def _legacy_content(
        self, channel: LegacyChannel, frame_type: int, payload: bytes | memoryview
    ) -> None:
        try:
            if frame_type == _HEADER:
                channel.legacy_header(payload, self.limits.max_message_size)
            else:
                channel.legacy_body(payload)
            if channel.legacy_complete():
                channel.finish_content()
                self.shell.published = True
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = channel.content_method()
            self._error(channel, exc)

    # -- channels --------------------------------------------------------------------------

    def _new_channel(self, channel_id: int) -> ChannelState:
        shell = self.shell
        client = shell.client
        guard = shell.guard
        assert client is not None
        assert guard is not None
        shell.open_channel()
        return LegacyChannel(self, channel_id, client, self.broker.consumer_timeout, guard)

    def _channel_closed(self, channel: ChannelState) -> None:
        cast("LegacyChannel", channel).close_legacy()
        super()._channel_closed(channel)

    def _release(self) -> None:
        # The machine forgets its channels without closing them one by one: what the older
        # classes hold on each (tunnels, dtx associations, staging) is let go here first.
        for channel in list(self.channels.values()):
            cast("LegacyChannel", channel).close_legacy()
        super()._release()

    def _method(self, channel: ChannelState, method: m.Method) -> None:
        extras = cast("LegacyChannel", channel).extras
        if extras:
            dtx = extras.get("dtx")
            if dtx is not None and dtx.method(channel, method):
                return
        super()._method(channel, method)

    def _ack(self, channel: ChannelState, delivery_tag: int, multiple: bool) -> None:
        extras = cast("LegacyChannel", channel).extras
        if extras:
            dtx = extras.get("dtx")
            if dtx is not None and dtx.ack(channel, delivery_tag, multiple):
                return
        super()._ack(channel, delivery_tag, multiple)

    def take_output(self, now: float) -> list[bytes]:
        # What tunnelled connections wrote goes out in tunnel.requests, taken now.
        for channel in list(self.channels.values()):
            extras = cast("LegacyChannel", channel).extras
            tunnels = extras.get("tunnel") if extras else None
            if tunnels is not None:
                tunnels.flush(now)
        return super().take_output(now)

    def next_tick(self, now: float) -> float | None:
        due = super().next_tick(now)
        for channel in self.channels.values():
            extras = cast("LegacyChannel", channel).extras
            tunnels = extras.get("tunnel") if extras else None
            when = tunnels.next_tick(now) if tunnels is not None else None
            if when is not None and (due is None or when < due):
                due = when
        return due

    def tick(self, now: float) -> None:
        super().tick(now)
        for channel in list(self.channels.values()):
            extras = cast("LegacyChannel", channel).extras
            tunnels = extras.get("tunnel") if extras else None
            if tunnels is not None:
                tunnels.tick(now)
