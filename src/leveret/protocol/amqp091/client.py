"""The client role of AMQP 0-9-1 as a sans-IO machine: bytes from the server in, events out.

Every client-side user of the protocol (the test client in ``leveret.testing``, the Spark
connector's blocking client, the benchmark's asyncio client) drives this one machine and keeps
only its own I/O. Anyone may import it; it imports only the codec beside it and
``leveret.errors``.

Theory of operation (the h11 contract; spec sections in brackets):

- ``receive_data(data, now)`` takes whatever the socket returned and gives back the events it
  completed (``client_events``), in order. ``data_to_send()`` gives back every byte the machine
  wants written: the protocol header, handshake replies, what the ``send_*`` / ``publish`` /
  ``ack`` calls queued, close-oks, heartbeats. No sockets, no clock: ``now`` is monotonic
  seconds, passed in.
- Handshake [2.2.4, 1.4.2]: header, start → start-ok (PLAIN, AMQPLAIN or EXTERNAL), tune → tune-ok
  (frame_max and channel_max the lower non-zero of both offers; heartbeat ours, capped by the
  server's when it offers one, 0 when we ask for none) → open → open-ok. Done by the machine
  itself unless it is ``manual``.
- Channels [1.5.2]: open → open-ok; our close → close-ok (a close crossing ours is answered
  and the wait goes on); the server's close is answered with close-ok. After a close is sent,
  everything but close and close-ok is discarded, content included [1.5.2.5].
- Connection close [1.4.2.7]: the server's close is answered with close-ok; after ours only
  close and close-ok count. The state is then ``CLOSED`` and the transport may go.
- Content [4.2.6]: a content method (deliver, get-ok, return), its header frame and the body
  frames that add up to the header's body size, per channel; any other frame of that channel
  in between is 505. With a :class:`Deliveries` (``deliveries=``), deliveries go straight into
  its columns (``client_frames.walk_frames``) and are not events.
- Publisher confirms: after ``confirm.select`` on a channel, each publish gets the next
  delivery tag; ``basic.ack`` / ``basic.nack`` (``multiple`` too) settle them, and
  :meth:`ClientConnection.unconfirmed` counts what is left.
- Heartbeats [4.2.7]: ``tick(now)`` queues a heartbeat when nothing was written for half the
  interval and reports :class:`HeartbeatMissed` after two silent intervals;
  :meth:`ClientConnection.next_deadline` says when to call it.
- The server breaking the protocol (bad frames, methods out of place, malformed arguments)
  raises the :class:`~leveret.errors.AMQPError` of the spec's reply code from
  ``receive_data``, after queueing the ``connection.close`` that says so; events completed
  before it are in :attr:`ClientConnection.salvaged`. Our own misuse of this API is a
  ``RuntimeError``; ``manual`` machines (test drivers that break the rules on purpose) skip
  those checks and send whatever they are told.
"""

from __future__ import annotations

import enum
import struct
from typing import TYPE_CHECKING

from leveret.errors import (
    AccessRefused,
    AMQPError,
    ChannelError,
    CommandInvalid,
    FrameError,
    NotAllowed,
    PreconditionFailed,
    SyntaxError_,
    UnexpectedFrame,
)
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091.client_events import (
    ContentReceived,
    Event,
    HeartbeatMissed,
    HeartbeatReceived,
    MethodReceived,
    ProtocolHeaderReceived,
)
from leveret.protocol.amqp091.client_frames import NO_LIMIT, Deliveries, walk_frames
from leveret.protocol.amqp091.fieldtable import encode_table

if TYPE_CHECKING:
    from leveret.protocol.amqp091.fieldtable import FieldTable

__all__ = [
    "CLIENT_CAPABILITIES",
    "ChannelState",
    "ClientConnection",
    "ConnectionState",
    "Deliveries",
    "amqplain_response",
    "encode_ack",
    "encode_publish",
    "plain_response",
]

CLIENT_CAPABILITIES: dict[str, bool] = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
}
"""The capabilities a modern client (pika, aio-pika) advertises in start-ok; this machine
handles each of them (cancels and blocked/unblocked are reported as methods)."""

FRAME_MIN_SIZE = 4096  # spec constant frame-min-size

_ACK_FRAME = struct.Struct(">BHIHHQBB")  # method frame header, 60, 80, tag, bits, frame end
_QB = struct.Struct(">QB")
_FRAME = struct.Struct(">BHI")
_HEADER_FRAME_PREFIX = struct.Struct(">BHIHHQ")
_ACK = b"\x00\x3c\x00\x50"  # basic.ack (60, 80)
_NACK = b"\x00\x3c\x00\x78"  # basic.nack (60, 120)
_EMPTY_PROPERTIES = b"\x00\x00"
_PUBLISH_CACHE_SIZE = 1024


class ConnectionState(enum.IntEnum):
    """Where the connection is; the order is the handshake's."""

    AWAIT_START = 0  # header sent, connection.start not yet received
    STARTING = 1  # start received, start-ok not sent (manual machines)
    AWAIT_TUNE = 2  # start-ok sent
    TUNING = 3  # tune received, tune-ok not sent (manual machines)
    AWAIT_OPEN = 4  # tune-ok sent, open not sent (manual machines)
    AWAIT_OPEN_OK = 5  # open sent
    OPEN = 6
    CLOSING = 7  # we sent connection.close; waiting for close-ok
    PEER_CLOSED = 8  # the server sent connection.close; close-ok not sent (manual machines)
    CLOSED = 9


class ChannelState(enum.IntEnum):
    OPENING = 0  # channel.open sent
    OPEN = 1
    CLOSING = 2  # we sent channel.close; waiting for close-ok
    PEER_CLOSED = 3  # the server sent channel.close; close-ok not sent (manual machines)


def plain_response(user: str, password: str) -> bytes:
    """The SASL PLAIN response: authzid NUL authcid NUL password."""
    return b"\x00" + user.encode() + b"\x00" + password.encode()


def amqplain_response(user: str, password: str) -> bytes:
    """The AMQPLAIN response: a field table without its length prefix."""
    return encode_table({"LOGIN": user, "PASSWORD": password})[4:]


def encode_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """A whole ``basic.ack`` method frame, with one ``struct`` call."""
    return _ACK_FRAME.pack(
        framing.FRAME_METHOD, channel, 13, 60, 80, delivery_tag, multiple, framing.FRAME_END
    )


def encode_publish(
    channel: int,
    exchange: str,
    routing_key: str,
    body: bytes | memoryview,
    properties: bytes,
    frame_max: int,
    *,
    mandatory: bool = False,
    immediate: bool = False,
) -> bytes:
    """basic.publish + content header + body frames (split at ``frame_max``) in one buffer."""
    method = m.BasicPublish(
        exchange=exchange, routing_key=routing_key, mandatory=mandatory, immediate=immediate
    ).encode()
    return framing.encode_message_frames(channel, method, 60, body, properties, frame_max)


def _negotiate(ours: int, theirs: int) -> int:
    """The lower of two limits where 0 means none."""
    if ours == 0:
        return theirs
    if theirs == 0:
        return ours
    return min(ours, theirs)


class _Channel:
    """One channel's state, confirm bookkeeping included."""

    __slots__ = ("confirmed_upto", "confirming", "nacked", "next_tag", "settled", "state")

    def __init__(self) -> None:
        self.state = ChannelState.OPENING
        self.confirming = False
        self.next_tag = 1  # the tag the next publish gets in confirm mode
        self.confirmed_upto = 0  # every tag up to this one is settled
        self.settled: set[int] = set()  # settled tags above confirmed_upto
        self.nacked = 0

    def unconfirmed(self) -> int:
        return self.next_tag - 1 - self.confirmed_upto - len(self.settled)

    def settle(self, tag: int, multiple: bool) -> int:
        """Settle ``tag`` (and every tag below it if ``multiple``); returns how many."""
        before = self.unconfirmed()
        if multiple:
            if tag == 0:
                tag = self.next_tag - 1  # 0 with multiple: everything published so far
            if tag > self.confirmed_upto:
                self.confirmed_upto = tag
            if self.settled:
                self.settled = {t for t in self.settled if t > tag}
        elif tag > self.confirmed_upto:
            self.settled.add(tag)
        upto = self.confirmed_upto
        settled = self.settled
        while upto + 1 in settled:
            upto += 1
            settled.discard(upto)
        self.confirmed_upto = upto
        return before - self.unconfirmed()


class _Content:
    """A content method waiting for its header and body frames."""

    __slots__ = ("body", "body_size", "discard", "method", "properties", "received")

    def __init__(self, method: m.Method, discard: bool) -> None:
        self.method = method
        self.discard = discard  # the channel is closing: read the frames, report nothing
        self.body_size = -1  # until the header frame arrives
        self.properties = b""
        self.body: list[bytes] = []
        self.received = 0


class ClientConnection:
    """One client connection's protocol state; see the module docstring.

    Args:
        username, password, vhost: what the handshake logs in with and opens.
        mechanism: ``PLAIN``, ``AMQPLAIN`` or ``EXTERNAL`` (the identity is the transport's:
            a TLS client certificate; the response is empty).
        client_properties: sent in start-ok (default: product ``leveret`` and
            :data:`CLIENT_CAPABILITIES`).
        frame_max, channel_max, heartbeat: what we ask for in tune-ok (0: no limit / none);
            the server's offer may lower the first two.
        deliveries: deliveries go into these columns instead of being events.
        manual: the user sends every handshake step and close-ok itself (``send_method``) and
            nothing is checked on the way out; the machine still follows what is sent.
    """

    def __init__(
        self,
        username: str = "guest",
        password: str = "guest",  # noqa: S107 - RabbitMQ's default user
        vhost: str = "/",
        *,
        mechanism: str = "PLAIN",
        client_properties: FieldTable | None = None,
        locale: str = "en_US",
        frame_max: int = 131072,
        channel_max: int = 2047,
        heartbeat: int = 0,
        deliveries: Deliveries | None = None,
        manual: bool = False,
    ) -> None:
        if mechanism not in ("PLAIN", "AMQPLAIN", "EXTERNAL"):
            raise ValueError(f"unsupported SASL mechanism {mechanism!r}")
        if 0 < frame_max < FRAME_MIN_SIZE and not manual:
            raise ValueError(f"frame_max {frame_max} is below the minimum {FRAME_MIN_SIZE}")
        self.username = username
        self.password = password
        self.vhost = vhost
        self.mechanism = mechanism
        self.client_properties: FieldTable = (
            client_properties
            if client_properties is not None
            else {"product": "leveret", "capabilities": dict(CLIENT_CAPABILITIES)}
        )
        self.locale = locale
        self.manual = manual
        self.deliveries = deliveries
        self.state = ConnectionState.AWAIT_START
        # Asked for, then (after tune-ok) in force.
        self.frame_max = frame_max
        self.channel_max = channel_max
        self.heartbeat = heartbeat
        self.start: m.ConnectionStart | None = None
        self.tune: m.ConnectionTune | None = None
        self.blocked = False
        self.close_reason: m.ConnectionClose | None = None  # whoever closed, and why
        self.error: AMQPError | None = None  # the server broke the protocol
        self.salvaged: list[Event] = []
        self._channels: dict[int, _Channel] = {}
        # Channels whose deliveries may take the column path: open, no content in progress.
        self._fast: set[int] = set()
        self._content: dict[int, _Content] = {}
        self._limit = NO_LIMIT  # largest payload accepted: frame_max - 8 once tuned
        self._out: list[bytes] = []
        self._out_size = 0
        self._pending: list[bytes] = []  # received bytes not parsed yet
        self._pending_size = 0
        self._want = 0  # parse again once this many bytes are pending
        self._seen_data = False
        self._restart = False
        self._events: list[Event] = []
        self._now = 0.0
        self._last_received = 0.0
        self._last_sent = 0.0
        self._publish_methods: dict[tuple[str, str, bool, bool], bytes] = {}
        if not manual:
            self._emit(framing.PROTOCOL_HEADER)

    # -- what the server sends -------------------------------------------------------

    @property
    def server_properties(self) -> FieldTable:
        return self.start.server_properties if self.start is not None else {}

    @property
    def is_open(self) -> bool:
        return self.state is ConnectionState.OPEN

    @property
    def closed(self) -> bool:
        """Nothing more will be read or sent: drop the transport once the output is written."""
        return self.state is ConnectionState.CLOSED

    def receive_data(self, data: bytes | bytearray | memoryview, now: float) -> list[Event]:
        """Feed what the server sent; returns the events it completed, oldest first.

        Raises:
            AMQPError: the server broke the protocol (the subclass of the reply code); a
                ``connection.close`` saying so is queued, and the machine is closing.
        """
        self._now = now
        self._last_received = now
        if self.state is ConnectionState.CLOSED or not data:
            return []
        if type(data) is not bytes:
            data = bytes(data)
        if self._pending:
            self._pending.append(data)
            self._pending_size += len(data)
            if self._pending_size < self._want:
                return []
            data = b"".join(self._pending)
            self._pending = []
            self._pending_size = 0
        events: list[Event] = []
        self._events = events
        try:
            if not self._seen_data:
                if data[0] == ord("A"):
                    if len(data) < 8:
                        self._keep(data)
                        self._want = 8
                        return events
                    self.state = ConnectionState.CLOSED
                    events.append(ProtocolHeaderReceived(data[:8]))
                    return events
                self._seen_data = True
            off = 0
            n = len(data)
            while True:
                self._restart = False
                off = walk_frames(data, off, self.deliveries, self._fast, self._limit, self._frame)
                if not self._restart or off >= n or self.closed:
                    break
            if off < n and not self.closed:
                self._keep(data[off:] if off else data)
        except AMQPError as exc:
            self._fail(exc)
            self.salvaged = events
            raise
        finally:
            self._events = []
        return events

    def _keep(self, rest: bytes) -> None:
        """Hold an incomplete tail back until at least the bytes it needs have arrived."""
        self._pending = [rest]
        self._pending_size = len(rest)
        self._want = self._needed(rest)

    def _needed(self, rest: bytes) -> int:
        """A lower bound of the bytes the next frame (or whole delivery) needs."""
        if len(rest) < framing.FRAME_HEADER_SIZE:
            return framing.FRAME_OVERHEAD
        ftype, channel, size = _FRAME.unpack_from(rest, 0)
        need: int = size + framing.FRAME_OVERHEAD
        if (
            self.deliveries is not None
            and ftype == framing.FRAME_METHOD
            and rest.startswith(b"\x00\x3c\x00\x3c", 7)
            and len(rest) >= need + 19
        ):
            htype, hch, hsize, _cls, _w, body_size = _HEADER_FRAME_PREFIX.unpack_from(rest, need)
            if htype == framing.FRAME_HEADER and hch == channel:
                need += hsize + framing.FRAME_OVERHEAD
                if body_size:
                    need += body_size + framing.FRAME_OVERHEAD
        return need

    def _frame(self, frame_type: int, channel: int, payload: bytes) -> bool:
        """One frame the column path did not take; True stops the walk (the frame limit
        changed, or the connection closed)."""
        if self.state >= ConnectionState.CLOSING and (
            channel != 0 or frame_type != framing.FRAME_METHOD
        ):
            return self.state is ConnectionState.CLOSED  # discarded [1.4.2.7]
        if frame_type == framing.FRAME_METHOD:
            if channel in self._content:
                raise UnexpectedFrame(
                    f"method frame on channel {channel} while content was expected"
                )
            if channel == 0:
                self._restart = self._connection_method(m.decode_method(payload))
                return self._restart
            ch = self._channels.get(channel)
            if ch is None:
                method = m.decode_method(payload)
                raise ChannelError(
                    f"{method.NAME} on channel {channel}, which is not open",
                    class_id=method.CLASS_ID,
                    method_id=method.METHOD_ID,
                )
            if ch.state is ChannelState.OPEN and (
                payload.startswith(_ACK) or payload.startswith(_NACK)
            ):
                self._confirm(channel, ch, payload)
                return False
            self._channel_method(channel, ch, m.decode_method(payload))
            return False
        if frame_type == framing.FRAME_HEARTBEAT:
            if channel != 0:
                raise FrameError(f"heartbeat frame on channel {channel}")
            self._events.append(HeartbeatReceived())
            return False
        content = self._content.get(channel)
        if content is None:
            if channel == 0 or channel not in self._channels:
                raise ChannelError(f"content frame (type {frame_type}) on channel {channel}")
            raise UnexpectedFrame(
                f"content frame (type {frame_type}) on channel {channel} without a content method"
            )
        if frame_type == framing.FRAME_HEADER:
            if content.body_size != -1:
                raise UnexpectedFrame(f"second content header on channel {channel}")
            class_id, body_size, raw = framing.parse_content_header(payload)
            if class_id != content.method.CLASS_ID:
                raise UnexpectedFrame(
                    f"content header of class {class_id} after {content.method.NAME}"
                )
            content.body_size = body_size
            content.properties = raw
        else:
            if content.body_size == -1:
                raise UnexpectedFrame(f"body frame before the content header on channel {channel}")
            content.body.append(payload)
            content.received += len(payload)
            if content.received > content.body_size:
                raise FrameError(
                    f"body of {content.received}+ bytes on channel {channel}, the content"
                    f" header announced {content.body_size}"
                )
        if content.received == content.body_size:
            self._content_done(channel, content)
        return False

    def _content_done(self, channel: int, content: _Content) -> None:
        del self._content[channel]
        ch = self._channels.get(channel)
        if ch is not None and ch.state is ChannelState.OPEN:
            self._fast.add(channel)
        if content.discard:
            return
        body = b"".join(content.body)
        method = content.method
        out = self.deliveries
        if out is not None and isinstance(method, m.BasicDeliver):
            out.channels.append(channel)
            out.tags.append(method.delivery_tag)
            out.redelivered.append(int(method.redelivered))
            out.exchanges.append(method.exchange.encode())
            out.routing_keys.append(method.routing_key.encode())
            out.properties.append(content.properties)
            out.bodies.append(body)
            return
        self._events.append(ContentReceived(channel, method, content.properties, body))

    def _connection_method(self, method: m.Method) -> bool:
        """A method on channel 0; True when the walk must stop (frame limit or state)."""
        state = self.state
        events = self._events
        t = type(method)
        if t is m.ConnectionClose:
            assert isinstance(method, m.ConnectionClose)
            if state < ConnectionState.AWAIT_TUNE:
                raise CommandInvalid("connection.close before start-ok", class_id=10, method_id=50)
            self.close_reason = method
            events.append(MethodReceived(0, method))
            self._drop_channels()
            if self.manual:
                self.state = ConnectionState.PEER_CLOSED
                return False
            self._emit_method(0, m.ConnectionCloseOk())
            self.state = ConnectionState.CLOSED
            return True
        if t is m.ConnectionCloseOk:
            if state is not ConnectionState.CLOSING:
                raise CommandInvalid(
                    "connection.close-ok without a connection.close", class_id=10, method_id=51
                )
            events.append(MethodReceived(0, method))
            self.state = ConnectionState.CLOSED
            return True
        if state >= ConnectionState.CLOSING:
            return state is ConnectionState.CLOSED  # discarded [1.4.2.7]
        if t is m.ConnectionStart and state is ConnectionState.AWAIT_START:
            assert isinstance(method, m.ConnectionStart)
            self.start = method
            self.state = ConnectionState.STARTING
            events.append(MethodReceived(0, method))
            if not self.manual:
                self._start_ok(method)
            return False
        if t is m.ConnectionTune and state is ConnectionState.AWAIT_TUNE:
            assert isinstance(method, m.ConnectionTune)
            self.tune = method
            self.state = ConnectionState.TUNING
            events.append(MethodReceived(0, method))
            if not self.manual:
                self._tune_ok(method)
                return True  # the frame limit changed
            return False
        if t is m.ConnectionSecure and state is ConnectionState.AWAIT_TUNE:
            if not self.manual:
                raise NotAllowed(
                    f"connection.secure: {self.mechanism} has no challenge",
                    class_id=10,
                    method_id=20,
                )
            events.append(MethodReceived(0, method))
            return False
        if t is m.ConnectionOpenOk and state is ConnectionState.AWAIT_OPEN_OK:
            self.state = ConnectionState.OPEN
            events.append(MethodReceived(0, method))
            return False
        if t is m.ConnectionBlocked or t is m.ConnectionUnblocked:
            if state >= ConnectionState.AWAIT_OPEN_OK:
                self.blocked = t is m.ConnectionBlocked
                events.append(MethodReceived(0, method))
                return False
        elif t is m.ConnectionUpdateSecretOk and state is ConnectionState.OPEN:
            events.append(MethodReceived(0, method))
            return False
        if method.CLASS_ID != 10:
            raise ChannelError(
                f"{method.NAME} on channel 0",
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            )
        raise CommandInvalid(
            f"{method.NAME} while the connection is {state.name}",
            class_id=method.CLASS_ID,
            method_id=method.METHOD_ID,
        )

    def _channel_method(self, channel: int, ch: _Channel, method: m.Method) -> None:
        events = self._events
        state = ch.state
        t = type(method)
        if method.CLASS_ID == 10:
            raise CommandInvalid(
                f"{method.NAME} on channel {channel}",
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            )
        if state is ChannelState.OPEN:
            if method.HAS_CONTENT:
                self._content[channel] = _Content(method, discard=False)
                self._fast.discard(channel)
                return
            if t is m.ChannelClose:
                self._peer_closed_channel(channel, ch, method)
                return
            if t is m.ChannelFlow:
                assert isinstance(method, m.ChannelFlow)
                events.append(MethodReceived(channel, method))
                if not self.manual:
                    self._emit_method(channel, m.ChannelFlowOk(active=method.active))
                return
            if t is not m.ChannelOpenOk and t is not m.ChannelCloseOk:
                events.append(MethodReceived(channel, method))
                return
        elif state is ChannelState.OPENING:
            if t is m.ChannelOpenOk:
                ch.state = ChannelState.OPEN
                self._fast.add(channel)
                events.append(MethodReceived(channel, method))
                return
            if t is m.ChannelClose:
                self._peer_closed_channel(channel, ch, method)
                return
        elif state is ChannelState.CLOSING:
            if t is m.ChannelCloseOk:
                del self._channels[channel]
                events.append(MethodReceived(channel, method))
                return
            if t is m.ChannelClose:
                # Crossing closes: answer theirs, keep waiting for the close-ok of ours.
                events.append(MethodReceived(channel, method))
                if not self.manual:
                    self._emit_method(channel, m.ChannelCloseOk())
                return
            if method.HAS_CONTENT:
                self._content[channel] = _Content(method, discard=True)
            return  # discarded [1.5.2.5]
        else:  # PEER_CLOSED: the server sends nothing more until our close-ok
            if method.HAS_CONTENT:
                self._content[channel] = _Content(method, discard=True)
            return
        raise CommandInvalid(
            f"{method.NAME} on channel {channel} while it is {state.name}",
            class_id=method.CLASS_ID,
            method_id=method.METHOD_ID,
        )

    def _peer_closed_channel(self, channel: int, ch: _Channel, method: m.Method) -> None:
        self._events.append(MethodReceived(channel, method))
        self._fast.discard(channel)
        if self.manual:
            ch.state = ChannelState.PEER_CLOSED
            return
        del self._channels[channel]
        self._emit_method(channel, m.ChannelCloseOk())

    def _confirm(self, channel: int, ch: _Channel, payload: bytes) -> None:
        """A publisher confirm (basic.ack or basic.nack from the server)."""
        ack = payload.startswith(_ACK)
        name, method_id = ("basic.ack", 80) if ack else ("basic.nack", 120)
        try:
            tag, bits = _QB.unpack_from(payload, 4)
        except struct.error as exc:
            raise SyntaxError_(
                f"malformed {name} arguments: {exc}", class_id=60, method_id=method_id
            ) from exc
        multiple = bool(bits & 1)
        if not ch.confirming:
            raise CommandInvalid(
                f"{name} on channel {channel}, which is not in confirm mode",
                class_id=60,
                method_id=method_id,
            )
        if not self.manual and tag >= ch.next_tag:
            raise PreconditionFailed(
                f"{name} of delivery tag {tag} on channel {channel}; only"
                f" {ch.next_tag - 1} were published",
                class_id=60,
                method_id=method_id,
                hard=True,
            )
        settled = ch.settle(tag, multiple)
        if ack:
            method: m.Method = m.BasicAck(tag, multiple)
        else:
            ch.nacked += settled
            method = m.BasicNack(tag, multiple, bool(bits & 2))
        self._events.append(MethodReceived(channel, method))

    def _drop_channels(self) -> None:
        self._fast.clear()
        self._content.clear()

    def _fail(self, exc: AMQPError) -> None:
        """The server broke the protocol: say so with connection.close [1.4.2.7]."""
        self.error = exc
        self._drop_channels()
        state = self.state
        if state is ConnectionState.CLOSED:
            return
        if ConnectionState.AWAIT_TUNE <= state < ConnectionState.CLOSING:
            close = m.ConnectionClose(
                reply_code=exc.reply_code,
                reply_text=str(exc)[:255],
                class_id=exc.class_id,
                method_id=exc.method_id,
            )
            self.close_reason = close
            self._emit_method(0, close)
            # After a framing error the byte stream cannot be trusted: stop reading.
            if not isinstance(exc, FrameError):
                self.state = ConnectionState.CLOSING
                return
        self.state = ConnectionState.CLOSED

    # -- the handshake -----------------------------------------------------------------

    def _start_ok(self, start: m.ConnectionStart) -> None:
        if (start.version_major, start.version_minor) != (0, 9):
            self.state = ConnectionState.CLOSED
            raise NotAllowed(
                f"the server speaks {start.version_major}-{start.version_minor}, not 0-9-1",
                class_id=10,
                method_id=10,
            )
        if self.mechanism.encode() not in start.mechanisms.split():
            self.state = ConnectionState.CLOSED
            offered = start.mechanisms.decode("utf-8", "replace")
            raise AccessRefused(
                f"the server offers {offered!r}, not {self.mechanism}",
                class_id=10,
                method_id=10,
                hard=True,
            )
        if self.mechanism == "AMQPLAIN":
            response = amqplain_response(self.username, self.password)
        elif self.mechanism == "EXTERNAL":
            response = b""
        else:
            response = plain_response(self.username, self.password)
        self.send_method(
            0,
            m.ConnectionStartOk(
                client_properties=self.client_properties,
                mechanism=self.mechanism,
                response=response,
                locale=self.locale,
            ),
        )

    def _tune_ok(self, tune: m.ConnectionTune) -> None:
        if 0 < tune.frame_max < FRAME_MIN_SIZE:
            raise NotAllowed(
                f"the server offers frame_max {tune.frame_max}, below {FRAME_MIN_SIZE}",
                class_id=10,
                method_id=30,
            )
        heartbeat = _negotiate(self.heartbeat, tune.heartbeat) if self.heartbeat else 0
        self.send_method(
            0,
            m.ConnectionTuneOk(
                channel_max=_negotiate(self.channel_max, tune.channel_max),
                frame_max=_negotiate(self.frame_max, tune.frame_max),
                heartbeat=heartbeat,
            ),
        )
        self.send_method(0, m.ConnectionOpen(virtual_host=self.vhost))

    # -- what we send --------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """Every byte queued since the last call, to be written in order."""
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self._out_size = 0
        # The latest time we were told of: never later than the write (heartbeats early at
        # worst, never late).
        self._last_sent = self._now
        return data

    @property
    def output_size(self) -> int:
        """Bytes queued and not yet taken by :meth:`data_to_send`."""
        return self._out_size

    def _emit(self, data: bytes) -> None:
        self._out.append(data)
        self._out_size += len(data)

    def _emit_method(self, channel: int, method: m.Method) -> None:
        self._emit(framing.encode_method_frame(channel, method.encode()))

    def _misuse(self, message: str) -> None:
        if not self.manual:
            raise RuntimeError(message)

    def send_method(self, channel: int, method: m.Method) -> None:
        """Queue one method frame and follow what it does to the connection or the channel.

        Content methods need :meth:`publish`. Unless the machine is ``manual``, a method the
        state does not allow raises ``RuntimeError`` and nothing is queued.
        """
        t = type(method)
        state = self.state
        if method.HAS_CONTENT:
            self._misuse(f"{method.NAME} carries content: use publish()")
        if channel == 0:
            if method.CLASS_ID != 10:
                self._misuse(f"{method.NAME} on channel 0")
            elif t is m.ConnectionStartOk:
                if state is not ConnectionState.STARTING:
                    self._misuse(f"connection.start-ok while {state.name}")
                self.state = ConnectionState.AWAIT_TUNE
            elif t is m.ConnectionTuneOk:
                assert isinstance(method, m.ConnectionTuneOk)
                if state is not ConnectionState.TUNING:
                    self._misuse(f"connection.tune-ok while {state.name}")
                self.frame_max = method.frame_max
                self.channel_max = method.channel_max
                self.heartbeat = method.heartbeat
                self._limit = (
                    method.frame_max - framing.FRAME_OVERHEAD
                    if method.frame_max > framing.FRAME_OVERHEAD
                    else NO_LIMIT
                )
                self._last_sent = self._last_received = self._now
                self.state = ConnectionState.AWAIT_OPEN
            elif t is m.ConnectionOpen:
                if state is not ConnectionState.AWAIT_OPEN:
                    self._misuse(f"connection.open while {state.name}")
                self.state = ConnectionState.AWAIT_OPEN_OK
            elif t is m.ConnectionClose:
                if not ConnectionState.AWAIT_TUNE <= state <= ConnectionState.OPEN:
                    self._misuse(f"connection.close while {state.name}")
                assert isinstance(method, m.ConnectionClose)
                self.close_reason = method
                self._drop_channels()
                if state is not ConnectionState.PEER_CLOSED:
                    self.state = ConnectionState.CLOSING
            elif t is m.ConnectionCloseOk:
                if state is not ConnectionState.PEER_CLOSED:
                    self._misuse(f"connection.close-ok while {state.name}")
                self.state = ConnectionState.CLOSED
            elif state is not ConnectionState.OPEN:
                self._misuse(f"{method.NAME} while {state.name}")
        else:
            self._channel_sent(channel, method, t)
        self._emit_method(channel, method)

    def _channel_sent(self, channel: int, method: m.Method, t: type[m.Method]) -> None:
        if self.state is not ConnectionState.OPEN:
            self._misuse(f"{method.NAME} on channel {channel} while {self.state.name}")
        ch = self._channels.get(channel)
        if t is m.ChannelOpen:
            if ch is not None:
                self._misuse(f"channel {channel} is already {ch.state.name}")
            if not 0 < channel <= (self.channel_max or 0xFFFF):
                self._misuse(f"channel {channel} is beyond channel_max {self.channel_max}")
            self._channels[channel] = _Channel()
            self._fast.discard(channel)
            return
        if ch is None:
            self._misuse(f"{method.NAME} on channel {channel}, which is not open")
            return
        if t is m.ChannelClose:
            if ch.state is ChannelState.CLOSING:
                self._misuse(f"channel {channel} is already closing")
            ch.state = ChannelState.CLOSING
            self._fast.discard(channel)
        elif t is m.ChannelCloseOk:
            if ch.state is not ChannelState.PEER_CLOSED:
                self._misuse(f"channel.close-ok on channel {channel} while {ch.state.name}")
            del self._channels[channel]
            self._content.pop(channel, None)
        elif ch.state > ChannelState.OPEN:
            self._misuse(f"{method.NAME} on channel {channel} while {ch.state.name}")
        elif t is m.ConfirmSelect:
            ch.confirming = True

    def open_channel(self, channel: int | None = None) -> int:
        """Queue channel.open (on the lowest free channel unless given); returns the channel.

        It is open once ``channel.open-ok`` arrives (:meth:`channel_state`).
        """
        if channel is None:
            channel = 1
            while channel in self._channels:
                channel += 1
        self.send_method(channel, m.ChannelOpen())
        return channel

    def close_channel(self, channel: int, reply_code: int = 200, reply_text: str = "") -> None:
        """Queue channel.close; the channel is gone once ``channel.close-ok`` arrives."""
        self.send_method(channel, m.ChannelClose(reply_code=reply_code, reply_text=reply_text))

    def close(self, reply_code: int = 200, reply_text: str = "") -> None:
        """Queue connection.close; :attr:`closed` once ``connection.close-ok`` arrives."""
        self.send_method(0, m.ConnectionClose(reply_code=reply_code, reply_text=reply_text))

    def channel_state(self, channel: int) -> ChannelState | None:
        """The channel's state, None when it is not open (nor opening or closing)."""
        ch = self._channels.get(channel)
        return ch.state if ch is not None else None

    def encode_publish(
        self,
        channel: int,
        exchange: str,
        routing_key: str,
        body: bytes | memoryview,
        properties: bytes = _EMPTY_PROPERTIES,
        *,
        mandatory: bool = False,
        immediate: bool = False,
    ) -> bytes:
        """basic.publish + content header + body frames (split at frame_max) in one buffer.

        ``properties`` is encoded property flags + list (``BasicProperties(...).encode()``).
        Nothing is queued: :meth:`publish_encoded` sends it (or a template built from it).
        """
        key = (exchange, routing_key, mandatory, immediate)
        method = self._publish_methods.get(key)
        if method is None:
            if len(self._publish_methods) >= _PUBLISH_CACHE_SIZE:
                self._publish_methods.clear()
            method = self._publish_methods[key] = m.BasicPublish(
                exchange=exchange, routing_key=routing_key, mandatory=mandatory, immediate=immediate
            ).encode()
        return framing.encode_message_frames(channel, method, 60, body, properties, self.frame_max)

    def publish(
        self,
        channel: int,
        exchange: str,
        routing_key: str,
        body: bytes | memoryview,
        properties: bytes = _EMPTY_PROPERTIES,
        *,
        mandatory: bool = False,
        immediate: bool = False,
    ) -> int:
        """Queue one publish; returns its delivery tag in confirm mode, else 0."""
        data = self.encode_publish(
            channel,
            exchange,
            routing_key,
            body,
            properties,
            mandatory=mandatory,
            immediate=immediate,
        )
        return self.publish_encoded(channel, data)

    def publish_encoded(self, channel: int, data: bytes, count: int = 1) -> int:
        """Queue ``count`` publishes already encoded (by :meth:`encode_publish` or a template
        made from its output) as one buffer; returns the first one's delivery tag in confirm
        mode, else 0."""
        ch = self._channels.get(channel)
        if ch is None or ch.state > ChannelState.OPEN:
            self._misuse(f"publish on channel {channel}, which is not open")
        self._out.append(data)
        self._out_size += len(data)
        if ch is not None and ch.confirming:
            tag = ch.next_tag
            ch.next_tag = tag + count
            return tag
        return 0

    def ack(self, channel: int, delivery_tag: int, multiple: bool = False) -> None:
        """Queue a basic.ack (one ``struct`` call: the consumer's per-message path)."""
        if channel not in self._fast and not self.manual:
            ch = self._channels.get(channel)
            if ch is None or ch.state > ChannelState.OPEN:
                raise RuntimeError(f"basic.ack on channel {channel}, which is not open")
        self._out.append(
            _ACK_FRAME.pack(
                framing.FRAME_METHOD, channel, 13, 60, 80, delivery_tag, multiple, framing.FRAME_END
            )
        )
        self._out_size += 21

    def unconfirmed(self, channel: int) -> int:
        """Publishes on ``channel`` not yet acked or nacked (0 outside confirm mode)."""
        ch = self._channels.get(channel)
        return ch.unconfirmed() if ch is not None else 0

    def nacked(self, channel: int) -> int:
        """How many publishes on ``channel`` the server nacked."""
        ch = self._channels.get(channel)
        return ch.nacked if ch is not None else 0

    # -- time ------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When :meth:`tick` has something to do next (None: heartbeats are off)."""
        hb = self.heartbeat
        if not hb or not ConnectionState.AWAIT_OPEN <= self.state <= ConnectionState.OPEN:
            return None
        return min(self._last_sent + hb / 2, self._last_received + 2 * hb)

    def tick(self, now: float) -> list[Event]:
        """Heartbeats: queue one when idle for half the interval; report a silent server."""
        hb = self.heartbeat
        if not hb or not ConnectionState.AWAIT_OPEN <= self.state <= ConnectionState.OPEN:
            return []
        self._now = now
        if self._out:
            self._last_sent = now  # about to be written
        silent = now - self._last_received
        if silent > 2 * hb:
            self.state = ConnectionState.CLOSED
            self._drop_channels()
            return [HeartbeatMissed(silent)]
        if now - self._last_sent >= hb / 2:
            self._emit(framing.HEARTBEAT_FRAME)
            self._last_sent = now
        return []
