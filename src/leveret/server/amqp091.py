"""The AMQP 0-9-1 front end: turns frames into model calls and model output into frames.

It is sans-IO: ``data_received(bytes, now)`` feeds it, encoded frames collect in ``out``
for the asyncio adapter (server/connection.py) to write, and time comes in as ``now``.
Only this module turns an ``AMQPError`` into ``channel.close`` or ``connection.close``,
filling in the class and method id of the command being handled.

Theory of operation (spec 0-9-1 section 4.2 and the connection class):

    HEADER --protocol header--> START --start-ok--> TUNE --tune-ok--> OPEN
    OPEN --connection.open--> RUNNING --hard error / we close--> CLOSING --close-ok--> CLOSED
    RUNNING --client connection.close--> CLOSED (after close-ok is written)

A channel is OPEN after channel.open, CLOSING after we sent channel.close (everything but
close/close-ok is dropped, as the spec asks), and free again after close-ok.
"""

from __future__ import annotations

import logging
import platform
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, auto
from typing import TYPE_CHECKING, Any

from leveret import __version__
from leveret.errors import (
    BY_CODE,
    AccessRefused,
    AMQPError,
    ChannelError,
    CommandInvalid,
    FrameError,
    InternalError,
    NotAllowed,
    PreconditionFailed,
    SyntaxError_,
    UnexpectedFrame,
)
from leveret.model.stream import StreamQueue
from leveret.model.vhost import REPLY_TO
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091.fieldtable import FieldTable, decode_table
from leveret.protocol.amqp091.framing import FRAME_END_BYTES
from leveret.server.amqp091_channel import Channel

if TYPE_CHECKING:
    from leveret.auth.users import User, UserStore
    from leveret.model.broker import Broker, Client
    from leveret.model.message import (
        Message,
    )
    from leveret.model.session import Session

log = logging.getLogger("leveret.connection")

SUPPORTED_HEADER = framing.PROTOCOL_HEADER
# The user-id property's bit in the low octet of the property flags (spec order: 11th of 14).
_USER_ID_FLAG = 0x10

# The class-id/method-id prefix of the per-message methods that _frame handles on a fast
# path (basic.publish 60/40, basic.ack 60/80), and basic.ack's arguments after it.
_PUBLISH_HEAD = b"\x00\x3c\x00\x28"
_ACK_HEAD = b"\x00\x3c\x00\x50"
_ACK_ARGS = struct.Struct(">QB")  # delivery-tag, bits (multiple)


@dataclass(frozen=True)
class Limits:
    """Negotiation limits and defaults the server offers in connection.tune."""

    channel_max: int = 2047
    frame_max: int = 131072
    heartbeat: int = 60
    max_message_size: int = 128 * 1024 * 1024


class State(Enum):
    HEADER = auto()
    START = auto()
    TUNE = auto()
    OPEN = auto()
    RUNNING = auto()
    CLOSING = auto()
    CLOSED = auto()


# Frames one connection may handle per event-loop turn before the others get theirs.
TURN_FRAMES = 300
# A publisher whose last turn fed a queue that its consumers are falling behind
# (Queue.falling_behind) gets turns of this size instead: it still runs every loop
# iteration, but the consumers' acks and deliveries get most of a saturated loop.
PACED_TURN_FRAMES = 30

# Pending output (bytes) past which a connection takes no more deliveries until flushed.
OUTPUT_HIGH_WATER = 256 * 1024

# RabbitMQ's handshake_timeout: a connection must be open this long after it was accepted.
HANDSHAKE_TIMEOUT = 10.0
_HANDSHAKE_STATES = frozenset((State.HEADER, State.START, State.TUNE, State.OPEN))

# The states the per-frame code tests, as module constants: on CPython 3.11 reading an enum
# member off its class (State.RUNNING) goes through a descriptor and costs about 0.25 us,
# several times per message; a global costs a tenth of that.
_HEADER_STATE = State.HEADER
_RUNNING = State.RUNNING
_CLOSING = State.CLOSING
_CLOSED = State.CLOSED


Handler = Callable[[Channel, Any], None]


class AMQP091Connection:
    """One client connection speaking AMQP 0-9-1, without I/O."""

    def __init__(
        self,
        broker: Broker,
        users: UserStore,
        *,
        peer: str,
        loopback: bool,
        limits: Limits = Limits(),
        now: float = 0.0,
    ) -> None:
        self.broker = broker
        self.users = users
        self.peer = peer
        self.loopback = loopback
        self.limits = limits
        self.state = State.HEADER
        self.out: list[bytes] = []
        self._out_size = 0
        self._out_full = False
        self._transport_paused = False
        self.decoder = framing.FrameDecoder(frame_max=limits.frame_max)
        self._header = bytearray()
        self.channels: dict[int, Channel] = {}
        self.client: Client | None = None
        self.user: User | None = None
        self.client_properties: FieldTable = {}
        self.client_capabilities: FieldTable = {}
        self.channel_max = limits.channel_max
        self.frame_max = limits.frame_max
        self.heartbeat = 0
        self.last_received = now
        self.last_sent = now
        self.created = now
        self.close_deadline: float | None = None
        self.should_close_transport = False
        self.close_reason = ""
        self._confirming: set[Session] = set()
        # Set by the adapter: called when output appears outside data_received.
        self.on_output: Callable[[], None] | None = None
        self._in_receive = False
        self._pending: list[framing.Frame] = []
        self._pending_pos = 0
        # Whether a message was published since the adapter last looked (memory alarm).
        self.published = False
        # A publish of the last turn went to a queue whose consumers fall behind: the
        # adapter paces this connection's next turn (server/connection.py).
        self.paced = False
        self.blocked = False
        self._handlers: dict[int, Handler] = self._build_handlers()

    # -- output ----------------------------------------------------------------------

    def _wrote(self) -> None:
        if not self._in_receive and self.on_output is not None:
            self.on_output()

    def send_method(self, channel_id: int, method: m.Method) -> None:
        self.out.append(framing.encode_method_frame(channel_id, method.encode()))
        self._wrote()

    def send_content(self, channel_id: int, method_payload: bytes, message: Message) -> None:
        data = framing.encode_message_frames(
            channel_id,
            method_payload,
            60,
            message.body,
            message.raw_properties,
            self.frame_max,
        )
        self.send_encoded(data)

    def send_encoded(self, data: bytes, body: bytes = b"") -> None:
        """Queue frames with content that the caller encoded (Channel.deliver's fast path).
        A large ``body`` comes separately, followed by the frame end that closes it: the
        transport's writev takes it from the message itself instead of from a joined copy."""
        out = self.out
        out.append(data)
        if body:
            out.append(body)
            out.append(FRAME_END_BYTES)
        self._out_size += len(data) + len(body)
        if self._out_size > OUTPUT_HIGH_WATER and not self._out_full:
            # Stop taking deliveries until this output is handed to the transport, so a
            # deep queue is not encoded into memory all at once.
            self._out_full = True
            self._update_writable()
        self._wrote()

    def take_output(self, now: float) -> list[bytes]:
        out = self.out
        if out:
            self.out = []
            self._out_size = 0
            self.last_sent = now
            if self._out_full:
                self._out_full = False
                self._update_writable()
        return out

    def set_writable(self, writable: bool) -> None:
        """The transport's buffer crossed its high (False) or low (True) water mark."""
        self._transport_paused = not writable
        self._update_writable()

    def _update_writable(self) -> None:
        writable = not (self._transport_paused or self._out_full)
        client = self.client
        if client is not None and client.writable != writable:
            client.set_writable(writable)

    # -- input -----------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """Nothing more will be read: the transport is to be closed."""
        return self.state is _CLOSED or self.should_close_transport

    def data_received(self, data: bytes, now: float) -> None:
        """Decode ``data``; frames beyond one turn's share wait in ``pending``."""
        self.last_received = now
        self.broker.timers.now = now
        if self.finished:
            return
        if self.state is _HEADER_STATE:
            data = self._protocol_header(data)
            if not data:
                return
        try:
            frames = self.decoder.feed(data)
        except AMQPError as exc:
            # The byte stream is desynchronised: no close-ok can be read after this, so
            # the transport closes once the close method is written.
            self._hard_close(exc)
            self.should_close_transport = True
            self._release()
            return
        if self._pending_pos < len(self._pending):
            self._pending.extend(frames)
        else:
            self._pending, self._pending_pos = frames, 0
        self.run_turn()

    @property
    def pending(self) -> bool:
        """Frames are waiting for the next turn (the adapter stops reading meanwhile)."""
        return self._pending_pos < len(self._pending) and not self.finished

    def run_turn(self) -> None:
        """Handle up to ``TURN_FRAMES`` waiting frames, so that one busy publisher cannot
        starve the other connections (consumers acking) of the same event loop."""
        self._in_receive = True
        try:
            frames, pos = self._pending, self._pending_pos
            end = min(len(frames), pos + (PACED_TURN_FRAMES if self.paced else TURN_FRAMES))
            handle = self._frame
            closed = _CLOSED
            try:
                while pos < end:
                    handle(frames[pos])
                    pos += 1
                    # self.finished, without a property call per frame
                    if self.state is closed or self.should_close_transport:
                        break
            except Exception:
                # A bug of ours must cost this connection, never the broker: 541 + traceback.
                log.exception("internal error on connection %s", self.peer)
                self._hard_close(InternalError("internal error; see the broker log"))
                self.should_close_transport = True
                self._release()
                pos = len(frames)
            self._pending_pos = pos
            if pos >= len(frames):
                self._pending, self._pending_pos = [], 0
            for session in self._confirming:
                session.flush_confirms()
            self._confirming.clear()
            paced = False
            if self.published:
                for channel in self.channels.values():
                    session = channel.session
                    if session.feeds_backlog:
                        session.feeds_backlog = False
                        paced = True
            self.paced = paced
        finally:
            self._in_receive = False

    def _protocol_header(self, data: bytes) -> bytes:
        needed = 8 - len(self._header)
        self._header += data[:needed]
        rest = data[needed:]
        if len(self._header) < 8:
            if not SUPPORTED_HEADER.startswith(bytes(self._header)):
                self._reject_header()
            return b""
        if bytes(self._header) != SUPPORTED_HEADER:
            self._reject_header()
            return b""
        self.state = State.START
        self._send_start()
        return rest

    def _reject_header(self) -> None:
        log.info("connection from %s: unsupported protocol header %r", self.peer, self._header)
        self.out.append(SUPPORTED_HEADER)
        self.state = State.CLOSED
        self.should_close_transport = True

    def _frame(self, frame: framing.Frame) -> None:
        frame_type, channel_id, payload = frame
        if frame_type == framing.FRAME_METHOD:
            # The per-message methods skip the generic decode (a dataclass per frame) and
            # dispatch when the common case holds; anything unusual (a closed or closing
            # channel, content pending, a malformed frame) takes the generic path below,
            # which makes every check and gives every error.
            if channel_id and self.state is _RUNNING:
                head = payload[:4]
                if head == _PUBLISH_HEAD:
                    if self._fast_publish(channel_id, payload):
                        return
                elif head == _ACK_HEAD and self._fast_ack(channel_id, payload):
                    return
            try:
                method = m.decode_method(payload)
            except SyntaxError_ as exc:
                # Undecodable arguments: a malformed frame (spec 501, as RabbitMQ answers).
                self._hard_close(
                    FrameError(str(exc), class_id=exc.class_id, method_id=exc.method_id)
                )
                return
            except AMQPError as exc:
                self._hard_close(exc)
                return
            if channel_id == 0:
                self._connection_method(method)
            else:
                self._channel_method(channel_id, method)
        elif frame_type == framing.FRAME_HEARTBEAT:
            if channel_id != 0:
                self._hard_close(FrameError("heartbeat frame on a non-zero channel"))
        else:
            self._content_frame(frame_type, channel_id, payload)

    def _fast_publish(self, channel_id: int, payload: bytes | memoryview) -> bool:
        """basic.publish read straight from the payload (reserved short, exchange shortstr,
        routing-key shortstr, bits); False leaves it to the generic path."""
        channel = self.channels.get(channel_id)
        if channel is None or channel.closing or channel.publish is not None:
            return False
        size = len(payload)
        if size < 9:  # the shortest publish: both names empty
            return False
        ex_end = 7 + payload[6]
        if ex_end + 2 > size:
            return False
        rk_end = ex_end + 1 + payload[ex_end]
        if rk_end >= size:
            return False
        try:
            exchange = str(payload[7:ex_end], "utf-8")
            routing_key = str(payload[ex_end + 1 : rk_end], "utf-8")
        except UnicodeDecodeError:
            return False
        bits = payload[rk_end]
        try:
            channel.session.check_publish(exchange)
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = 60, 40
            self._error(channel, exc)
            return True
        channel.start_publish(exchange, routing_key, bool(bits & 1), bool(bits & 2))
        return True

    def _fast_ack(self, channel_id: int, payload: bytes | memoryview) -> bool:
        """basic.ack read with one struct call; False leaves it to the generic path."""
        channel = self.channels.get(channel_id)
        if channel is None or channel.closing or channel.publish is not None:
            return False
        if len(payload) < 13:
            return False
        delivery_tag, bits = _ACK_ARGS.unpack_from(payload, 4)
        try:
            channel.session.ack(delivery_tag, multiple=bool(bits & 1))
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = 60, 80
            self._error(channel, exc)
        return True

    def _content_frame(self, frame_type: int, channel_id: int, payload: bytes | memoryview) -> None:
        if self.state is not _RUNNING or not channel_id:
            # Not the common case: the checks in their order (one test above for the rest).
            if self.state is _CLOSING:
                return
            if channel_id == 0:
                self._hard_close(ChannelError("content frame on channel 0"))
                return
            self._hard_close(UnexpectedFrame("content frame before the connection is open"))
            return
        channel = self.channels.get(channel_id)
        if channel is None:
            self._hard_close(ChannelError(f"content frame on closed channel {channel_id}"))
            return
        if channel.closing:
            return
        try:
            if frame_type == framing.FRAME_HEADER:
                complete = channel.content_header(payload, self.limits.max_message_size)
            else:
                complete = channel.content_body(payload)
            if complete:
                publish, message = channel.take_content()
                raw = message.raw_properties
                if len(raw) > 1 and raw[1] & _USER_ID_FLAG:
                    self._check_user_id(message)
                channel.session.publish(
                    publish.exchange,
                    publish.routing_key,
                    message,
                    mandatory=publish.mandatory,
                    immediate=publish.immediate,
                )
                self.published = True
                if channel.session.confirm_mode:
                    self._confirming.add(channel.session)
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = 60, 40
            self._error(channel, exc)

    def _check_user_id(self, message: Message) -> None:
        user_id = message.properties.user_id
        name = self.user.name if self.user is not None else ""
        if user_id is not None and user_id != name:
            raise PreconditionFailed(
                f"user_id property set to '{user_id}' but authenticated user was '{name}'"
            )

    # -- errors ----------------------------------------------------------------------

    def _error(self, channel: Channel | None, exc: AMQPError) -> None:
        if exc.hard or channel is None:
            self._hard_close(exc)
        else:
            self._close_channel(channel, exc)

    def _close_channel(self, channel: Channel, exc: AMQPError) -> None:
        log.debug("channel %d of %s closed: %s", channel.id, self.peer, exc.full_text())
        channel.drop_content()
        channel.closing = True
        channel.session.close()
        self._confirming.discard(channel.session)
        self.send_method(
            channel.id,
            m.ChannelClose(
                reply_code=exc.reply_code,
                reply_text=exc.full_text(),
                class_id=exc.class_id,
                method_id=exc.method_id,
            ),
        )

    def _hard_close(self, exc: AMQPError, now: float | None = None) -> None:
        if self.state in (State.CLOSING, State.CLOSED):
            return
        log.info("closing connection %s: %s", self.peer, exc.full_text())
        self.close_reason = exc.full_text()
        if self.state in (State.HEADER, State.START) or (
            self.state is State.TUNE and not isinstance(exc, NotAllowed)
        ):
            # Before tune-ok the peer may not cope with a close; RabbitMQ drops the socket.
            self.state = State.CLOSED
            self.should_close_transport = True
            self._release()
            return
        self.send_method(
            0,
            m.ConnectionClose(
                reply_code=exc.reply_code,
                reply_text=exc.full_text(),
                class_id=exc.class_id,
                method_id=exc.method_id,
            ),
        )
        self.state = State.CLOSING
        self.close_deadline = (now if now is not None else self.last_received) + 5.0
        self._release()

    def close(self, reply_code: int, reply_text: str, now: float) -> None:
        """Close from the server side (shutdown: 320 CONNECTION_FORCED)."""
        if self.state is State.RUNNING or self.state is State.OPEN:
            self._hard_close(BY_CODE.get(reply_code, InternalError)(reply_text, hard=True), now)
        else:
            self.state = State.CLOSED
            self.should_close_transport = True
            self._release()

    def _release(self) -> None:
        """Give back everything the connection held in the model."""
        client = self.client
        self.client = None
        self.channels.clear()
        if client is not None:
            client.close()

    def connection_lost(self) -> None:
        self.state = State.CLOSED
        self._release()

    # -- flow control ----------------------------------------------------------------

    def block(self, reason: str) -> None:
        """The adapter stopped reading from us; tell a client that asked to be told."""
        self.blocked = True
        if self.client_capabilities.get("connection.blocked") is True:
            self.send_method(0, m.ConnectionBlocked(reason=reason))

    def unblock(self, now: float) -> None:
        self.blocked = False
        self.last_received = now  # we were not reading: the silence was ours
        if self.client_capabilities.get("connection.blocked") is True:
            self.send_method(0, m.ConnectionUnblocked())

    # -- heartbeats and timers ----------------------------------------------------------

    def tick(self, now: float) -> None:
        """Send a heartbeat when idle, close when the peer went silent (two intervals)."""
        if self.state is State.CLOSING:
            if self.close_deadline is not None and now >= self.close_deadline:
                self.state = State.CLOSED
                self.should_close_transport = True
            return
        if self.state in _HANDSHAKE_STATES:
            if now - self.created > HANDSHAKE_TIMEOUT:
                log.info("closing connection %s: handshake timeout", self.peer)
                self.close_reason = "handshake timeout"
                self.state = State.CLOSED
                self.should_close_transport = True
                self._release()
            return
        if not self.heartbeat or self.state is not State.RUNNING:
            return
        if self.blocked:
            self.last_received = now  # not reading while blocked: heartbeats cannot arrive
        if now - self.last_received > 2 * self.heartbeat:
            log.info(
                "closing connection %s: missed heartbeats from client, timeout: %ds",
                self.peer,
                self.heartbeat,
            )
            self.close_reason = "missed heartbeats"
            self.state = State.CLOSED
            self.should_close_transport = True
            self._release()
            return
        if now - self.last_sent >= self.heartbeat / 2:
            self.out.append(framing.HEARTBEAT_FRAME)
            self.last_sent = now
            self._wrote()

    # -- connection class ------------------------------------------------------------

    def _server_properties(self) -> FieldTable:
        capabilities: FieldTable = {
            "publisher_confirms": True,
            "exchange_exchange_bindings": True,
            "basic.nack": True,
            "consumer_cancel_notify": True,
            "connection.blocked": True,
            "authentication_failure_close": True,
            "per_consumer_qos": True,
            "consumer_priorities": True,
            "direct_reply_to": True,
        }
        return {
            "product": "Leveret",
            "version": __version__,
            "platform": f"Python {platform.python_version()}",
            "copyright": "Copyright the Leveret authors",
            "information": "Licensed under the Apache License 2.0",
            "cluster_name": f"leveret@{socket.gethostname()}",
            "capabilities": capabilities,
        }

    def _send_start(self) -> None:
        self.send_method(
            0,
            m.ConnectionStart(
                version_major=0,
                version_minor=9,
                server_properties=self._server_properties(),
                mechanisms=b"PLAIN AMQPLAIN",
                locales=b"en_US",
            ),
        )

    def _connection_method(self, method: m.Method) -> None:
        state = self.state
        if state is State.CLOSING:
            if isinstance(method, m.ConnectionCloseOk):
                self.state = State.CLOSED
                self.should_close_transport = True
            elif isinstance(method, m.ConnectionClose):
                self.send_method(0, m.ConnectionCloseOk())
                self.state = State.CLOSED
                self.should_close_transport = True
            return
        try:
            if isinstance(method, m.ConnectionClose):
                self.send_method(0, m.ConnectionCloseOk())
                self.state = State.CLOSED
                self.should_close_transport = True
                self._release()
            elif state is State.START and isinstance(method, m.ConnectionStartOk):
                self._start_ok(method)
            elif state is State.TUNE and isinstance(method, m.ConnectionTuneOk):
                self._tune_ok(method)
            elif state is State.OPEN and isinstance(method, m.ConnectionOpen):
                self._open(method)
            elif state is State.RUNNING and isinstance(method, m.ConnectionCloseOk):
                pass  # a close-ok nobody asked for: ignore, as RabbitMQ does
            elif state is State.RUNNING and isinstance(
                method, m.ConnectionBlocked | m.ConnectionUnblocked
            ):
                pass
            elif state is State.RUNNING and isinstance(method, m.ConnectionUpdateSecret):
                self.send_method(0, m.ConnectionUpdateSecretOk())
            elif method.CLASS_ID == m.ConnectionStart.CLASS_ID:
                raise CommandInvalid(
                    f"unexpected method {method.NAME} in state {state.name.lower()}",
                    class_id=method.CLASS_ID,
                    method_id=method.METHOD_ID,
                )
            else:
                raise CommandInvalid(
                    f"method {method.NAME} is not allowed on channel 0",
                    class_id=method.CLASS_ID,
                    method_id=method.METHOD_ID,
                )
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = method.CLASS_ID, method.METHOD_ID
            self._hard_close(exc)

    def _start_ok(self, method: m.ConnectionStartOk) -> None:
        self.client_properties = method.client_properties
        caps = method.client_properties.get("capabilities")
        self.client_capabilities = caps if isinstance(caps, dict) else {}
        username, password = self._credentials(method.mechanism, method.response)
        user = self.users.authenticate(username, password, loopback=self.loopback)
        if user is None:
            log.warning(
                "connection from %s: login refused for user '%s' with mechanism %s",
                self.peer,
                username,
                method.mechanism,
            )
            text = (
                f"Login was refused using authentication mechanism {method.mechanism}. "
                "For details see the broker logfile."
            )
            if self.client_capabilities.get("authentication_failure_close") is True:
                self.state = State.OPEN  # so that _hard_close sends the close method
                self._hard_close(AccessRefused(text, hard=True, class_id=10, method_id=11))
            else:
                self.state = State.CLOSED
                self.should_close_transport = True
            return
        self.user = user
        self.state = State.TUNE
        self.send_method(
            0,
            m.ConnectionTune(
                channel_max=self.limits.channel_max,
                frame_max=self.limits.frame_max,
                heartbeat=self.limits.heartbeat,
            ),
        )

    def _credentials(self, mechanism: str, response: bytes) -> tuple[str, str]:
        try:
            if mechanism == "PLAIN":
                parts = response.split(b"\x00")
                if len(parts) != 3:
                    raise SyntaxError_("malformed PLAIN response")
                return parts[1].decode(), parts[2].decode()
            if mechanism == "AMQPLAIN":
                table, _ = decode_table(len(response).to_bytes(4, "big") + response, 0)
                login, password = table.get("LOGIN"), table.get("PASSWORD")
                if not isinstance(login, str) or not isinstance(password, str):
                    raise SyntaxError_("AMQPLAIN response without LOGIN and PASSWORD")
                return login, password
        except UnicodeDecodeError as exc:
            raise SyntaxError_("credentials are not UTF-8") from exc
        raise AccessRefused(f"unsupported authentication mechanism '{mechanism}'", hard=True)

    def _tune_ok(self, method: m.ConnectionTuneOk) -> None:
        limits = self.limits
        frame_max = method.frame_max or limits.frame_max
        if frame_max < 4096:
            raise NotAllowed(f"frame_max={frame_max} < 4096 min size")
        if limits.frame_max and frame_max > limits.frame_max:
            raise NotAllowed(f"frame_max={frame_max} > {limits.frame_max} max size")
        channel_max = method.channel_max or limits.channel_max
        if limits.channel_max and channel_max > limits.channel_max:
            raise NotAllowed(f"channel_max={channel_max} > {limits.channel_max} max")
        self.frame_max = frame_max
        self.decoder.frame_max = frame_max
        self.channel_max = channel_max
        self.heartbeat = method.heartbeat
        self.state = State.OPEN

    def _open(self, method: m.ConnectionOpen) -> None:
        assert self.user is not None
        vhost = self.broker.vhosts.get(method.virtual_host)
        if vhost is None:
            raise NotAllowed(f"vhost {method.virtual_host} not found")
        if method.virtual_host not in self.user.vhosts:
            raise AccessRefused(
                f"access to vhost '{method.virtual_host}' refused for user '{self.user.name}'",
                hard=True,
            )
        product = self.client_properties.get("product", "")
        self.client = self.broker.connect(vhost, self.user.name, f"{self.peer} ({product!s})")
        self.client.writable = not (self._transport_paused or self._out_full)
        self.state = State.RUNNING
        self.send_method(0, m.ConnectionOpenOk())
        log.info(
            "connection %s opened: user '%s', vhost '%s'",
            self.peer,
            self.user.name,
            method.virtual_host,
        )

    # -- channels --------------------------------------------------------------------

    def _channel_method(self, channel_id: int, method: m.Method) -> None:
        if self.state is _CLOSING:
            return
        if self.state is not _RUNNING:
            self._hard_close(
                UnexpectedFrame(
                    f"channel method {method.NAME} before the connection is open",
                    class_id=method.CLASS_ID,
                    method_id=method.METHOD_ID,
                )
            )
            return
        channel = self.channels.get(channel_id)
        if channel is None:
            if isinstance(method, m.ChannelOpen):
                self._open_channel(channel_id)
            else:
                self._hard_close(
                    ChannelError(
                        f"expected 'channel.open' on channel {channel_id}",
                        class_id=method.CLASS_ID,
                        method_id=method.METHOD_ID,
                    )
                )
            return
        if channel.closing:
            if isinstance(method, m.ChannelCloseOk):
                del self.channels[channel_id]
            elif isinstance(method, m.ChannelClose):
                self.send_method(channel_id, m.ChannelCloseOk())
            return
        if channel.expecting_content():
            self._hard_close(
                UnexpectedFrame(
                    f"expected content header on channel {channel_id}, got {method.NAME}",
                    class_id=method.CLASS_ID,
                    method_id=method.METHOD_ID,
                )
            )
            return
        handler = self._handlers.get(method.INDEX)
        try:
            if handler is None:
                raise CommandInvalid(f"method {method.NAME} is not allowed from a client")
            handler(channel, method)
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = method.CLASS_ID, method.METHOD_ID
            self._error(channel, exc)

    def _open_channel(self, channel_id: int) -> None:
        if channel_id > self.channel_max:
            self._hard_close(
                NotAllowed(
                    f"channel number {channel_id} exceeds channel_max {self.channel_max}",
                    class_id=20,
                    method_id=10,
                )
            )
            return
        assert self.client is not None
        self.channels[channel_id] = Channel(self, channel_id, self.client)
        self.send_method(channel_id, m.ChannelOpenOk())

    # -- method handlers -------------------------------------------------------------

    def _build_handlers(self) -> dict[int, Handler]:
        table: dict[type[m.Method], Handler] = {
            m.ChannelOpen: self._channel_reopen,
            m.ChannelClose: self._channel_close,
            m.ChannelCloseOk: self._channel_close_ok,
            m.ChannelFlow: self._channel_flow,
            m.ChannelFlowOk: self._ignore,
            m.ExchangeDeclare: self._exchange_declare,
            m.ExchangeDelete: self._exchange_delete,
            m.ExchangeBind: self._exchange_bind,
            m.ExchangeUnbind: self._exchange_unbind,
            m.QueueDeclare: self._queue_declare,
            m.QueueBind: self._queue_bind,
            m.QueueUnbind: self._queue_unbind,
            m.QueuePurge: self._queue_purge,
            m.QueueDelete: self._queue_delete,
            m.BasicQos: self._basic_qos,
            m.BasicConsume: self._basic_consume,
            m.BasicCancel: self._basic_cancel,
            m.BasicPublish: self._basic_publish,
            m.BasicGet: self._basic_get,
            m.BasicAck: self._basic_ack,
            m.BasicReject: self._basic_reject,
            m.BasicNack: self._basic_nack,
            m.BasicRecover: self._basic_recover,
            m.BasicRecoverAsync: self._basic_recover_async,
            m.TxSelect: self._tx_select,
            m.TxCommit: self._tx_commit,
            m.TxRollback: self._tx_rollback,
            m.ConfirmSelect: self._confirm_select,
        }
        return {cls.INDEX: handler for cls, handler in table.items()}

    def _ignore(self, channel: Channel, method: Any) -> None:
        pass

    def _channel_reopen(self, channel: Channel, method: m.ChannelOpen) -> None:
        raise ChannelError("second 'channel.open' seen")

    def _channel_close(self, channel: Channel, method: m.ChannelClose) -> None:
        channel.session.close()
        self._confirming.discard(channel.session)
        assert self.client is not None
        self.client.close_session(channel.id)
        del self.channels[channel.id]
        self.send_method(channel.id, m.ChannelCloseOk())

    def _channel_close_ok(self, channel: Channel, method: m.ChannelCloseOk) -> None:
        pass  # we never sent channel.close on an open channel

    def _channel_flow(self, channel: Channel, method: m.ChannelFlow) -> None:
        channel.session.set_flow(method.active)
        self.send_method(channel.id, m.ChannelFlowOk(active=method.active))

    def _exchange_declare(self, channel: Channel, method: m.ExchangeDeclare) -> None:
        channel.session.vhost.declare_exchange(
            method.exchange,
            method.type,
            passive=method.passive,
            durable=method.durable,
            auto_delete=method.auto_delete,
            internal=method.internal,
            arguments=method.arguments,
        )
        if not method.no_wait:
            self.send_method(channel.id, m.ExchangeDeclareOk())

    def _exchange_delete(self, channel: Channel, method: m.ExchangeDelete) -> None:
        channel.session.vhost.delete_exchange(method.exchange, if_unused=method.if_unused)
        if not method.no_wait:
            self.send_method(channel.id, m.ExchangeDeleteOk())

    def _exchange_bind(self, channel: Channel, method: m.ExchangeBind) -> None:
        channel.session.vhost.bind_exchange(
            method.destination, method.source, method.routing_key, method.arguments
        )
        if not method.no_wait:
            self.send_method(channel.id, m.ExchangeBindOk())

    def _exchange_unbind(self, channel: Channel, method: m.ExchangeUnbind) -> None:
        channel.session.vhost.unbind_exchange(
            method.destination, method.source, method.routing_key, method.arguments
        )
        if not method.no_wait:
            self.send_method(channel.id, m.ExchangeUnbindOk())

    def _queue_declare(self, channel: Channel, method: m.QueueDeclare) -> None:
        session = channel.session
        queue = session.vhost.declare_queue(
            method.queue,
            owner=session.owner,
            passive=method.passive,
            durable=method.durable,
            exclusive=method.exclusive,
            auto_delete=method.auto_delete,
            arguments=method.arguments,
        )
        session.last_queue = queue.name
        count = queue.message_count
        if method.passive and isinstance(queue, StreamQueue):
            count = queue.lookup(method.arguments)  # a Leveret addition: offset lookups
        if not method.no_wait:
            self.send_method(
                channel.id,
                m.QueueDeclareOk(
                    queue=queue.name,
                    message_count=count,
                    consumer_count=queue.consumer_count,
                ),
            )

    def _queue_bind(self, channel: Channel, method: m.QueueBind) -> None:
        session = channel.session
        queue = session.queue_name(method.queue)
        routing_key = method.routing_key or (queue if not method.queue else "")
        session.vhost.bind_queue(
            queue, method.exchange, routing_key, method.arguments, owner=session.owner
        )
        if not method.no_wait:
            self.send_method(channel.id, m.QueueBindOk())

    def _queue_unbind(self, channel: Channel, method: m.QueueUnbind) -> None:
        session = channel.session
        queue = session.queue_name(method.queue)
        routing_key = method.routing_key or (queue if not method.queue else "")
        session.vhost.unbind_queue(
            queue, method.exchange, routing_key, method.arguments, owner=session.owner
        )
        self.send_method(channel.id, m.QueueUnbindOk())

    def _queue_purge(self, channel: Channel, method: m.QueuePurge) -> None:
        session = channel.session
        count = session.vhost.purge_queue(session.queue_name(method.queue), owner=session.owner)
        if not method.no_wait:
            self.send_method(channel.id, m.QueuePurgeOk(message_count=count))

    def _queue_delete(self, channel: Channel, method: m.QueueDelete) -> None:
        session = channel.session
        count = session.vhost.delete_queue(
            session.queue_name(method.queue),
            owner=session.owner,
            if_unused=method.if_unused,
            if_empty=method.if_empty,
        )
        if not method.no_wait:
            self.send_method(channel.id, m.QueueDeleteOk(message_count=count))

    def _basic_qos(self, channel: Channel, method: m.BasicQos) -> None:
        channel.session.set_qos(method.prefetch_size, method.prefetch_count, method.global_)
        self.send_method(channel.id, m.BasicQosOk())

    def _basic_consume(self, channel: Channel, method: m.BasicConsume) -> None:
        session = channel.session
        # consume-ok must precede the first delivery, so register after replying.
        queue_name = session.queue_name(method.queue)
        if queue_name != REPLY_TO:
            queue_name = session.vhost.queue(queue_name, session.owner).name
        tag = method.consumer_tag
        if tag and tag in session.consumers:
            raise NotAllowed(f"attempt to reuse consumer tag '{tag}'")
        out_index = len(self.out)
        tag = session.consume(
            queue_name,
            tag,
            no_ack=method.no_ack,
            exclusive=method.exclusive,
            arguments=method.arguments,
        )
        if not method.no_wait:
            self.out.insert(
                out_index,
                framing.encode_method_frame(
                    channel.id, m.BasicConsumeOk(consumer_tag=tag).encode()
                ),
            )

    def _basic_cancel(self, channel: Channel, method: m.BasicCancel) -> None:
        channel.session.cancel(method.consumer_tag)
        if not method.no_wait:
            self.send_method(channel.id, m.BasicCancelOk(consumer_tag=method.consumer_tag))

    def _basic_publish(self, channel: Channel, method: m.BasicPublish) -> None:
        channel.session.check_publish(method.exchange)
        channel.start_content(method)

    def _basic_get(self, channel: Channel, method: m.BasicGet) -> None:
        result = channel.session.get(method.queue, no_ack=method.no_ack)
        if result is None:
            self.send_method(channel.id, m.BasicGetEmpty())
            return
        delivery_tag, entry, remaining = result
        message = entry.message
        get_ok = m.BasicGetOk(
            delivery_tag=delivery_tag,
            redelivered=entry.redelivered,
            exchange=message.exchange,
            routing_key=message.routing_key,
            message_count=remaining,
        )
        self.send_content(channel.id, get_ok.encode(), message)

    def _basic_ack(self, channel: Channel, method: m.BasicAck) -> None:
        channel.session.ack(method.delivery_tag, multiple=method.multiple)

    def _basic_reject(self, channel: Channel, method: m.BasicReject) -> None:
        channel.session.reject(method.delivery_tag, requeue=method.requeue)

    def _basic_nack(self, channel: Channel, method: m.BasicNack) -> None:
        channel.session.reject(
            method.delivery_tag, multiple=method.multiple, requeue=method.requeue
        )

    def _basic_recover(self, channel: Channel, method: m.BasicRecover) -> None:
        channel.session.recover(method.requeue)
        self.send_method(channel.id, m.BasicRecoverOk())

    def _basic_recover_async(self, channel: Channel, method: m.BasicRecoverAsync) -> None:
        channel.session.recover(method.requeue)

    def _tx_select(self, channel: Channel, method: m.TxSelect) -> None:
        channel.session.select_tx()
        self.send_method(channel.id, m.TxSelectOk())

    def _tx_commit(self, channel: Channel, method: m.TxCommit) -> None:
        def done(ok: bool) -> None:
            # commit-ok only once the transaction is on disk (it may come a loop turn
            # later, from the store's writer); the channel may have gone meanwhile.
            if self.channels.get(channel.id) is not channel or channel.closing:
                return
            if ok:
                self.send_method(channel.id, m.TxCommitOk())
            else:
                # The transaction is applied but not durable: the client must not believe
                # it committed, and 541 is the spec's code for a failure of the server.
                self._error(
                    channel,
                    InternalError(
                        "tx.commit failed: the store could not write to disk",
                        class_id=method.CLASS_ID,
                        method_id=method.METHOD_ID,
                    ),
                )

        channel.session.commit(done)

    def _tx_rollback(self, channel: Channel, method: m.TxRollback) -> None:
        channel.session.rollback()
        self.send_method(channel.id, m.TxRollbackOk())

    def _confirm_select(self, channel: Channel, method: m.ConfirmSelect) -> None:
        channel.session.select_confirm()
        if not method.nowait:
            self.send_method(channel.id, m.ConfirmSelectOk())
