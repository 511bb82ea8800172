"""The server side of an AMQP 0-9-1 connection as a sans-IO machine: bytes and ``now`` in,
encoded frames out (into an ``Output``, ``protocol/output.py``), what the connection means
to a broker left to a subclass.

It owns the protocol header, the connection class (start/start-ok, the SASL decision and
the refusal's answer left to the subclass; tune/tune-ok negotiation, open, close in both
directions, blocked/unblocked notifications, update-secret), heartbeats and the close
timeout (``tick(now)``), channel states (open, closing: everything but close/close-ok
dropped, as the spec asks), content assembly, input held per channel while the subclass
waits for an operation to complete (``hold_channel``), and the one place where an
``AMQPError`` becomes ``channel.close`` (soft) or ``connection.close`` (hard), filled in
with the class and method id of the command being handled. The two per-message methods,
basic.publish and basic.ack, are read straight from the frame in the common case.

Input comes in two steps, as the front-end shell (``server/shell/``) drives every protocol:
``receive`` decodes frames, ``run(budget)`` handles at most ``budget`` of them. What a turn
is, how much output is too much and when the broker's clock moves are the shell's.

Theory of operation (spec 0-9-1 section 4.2 and the connection class):

    HEADER --protocol header--> START --start-ok--> TUNE --tune-ok--> OPEN
    OPEN --connection.open--> RUNNING --hard error / we close--> CLOSING --close-ok--> CLOSED
    RUNNING --client connection.close--> CLOSED (after close-ok is written)
    START --refused start-ok--> CLOSED, handling nothing more, until the subclass calls
        ``answer_refusal`` (after the refusal's delay); then connection.close 403 -->
        CLOSING, or the transport is closed

Before tune-ok, frames are limited to the spec's minimum frame size (4096 octets, refused
at the header as the spec allows), so an unauthenticated peer cannot make the server buffer
a large frame; tune-ok raises the limit to the negotiated frame-max.

A subclass (the broker's front end, ``server/amqp091/connection.py``) supplies the meaning
through the hook methods at the end of the class: who may log in and open which vhost, what
a channel is, what each method does, where a completed publish goes. Hooks are methods of a
base class rather than events so that the compiled build calls them natively on the
per-message path.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum, auto
from typing import TYPE_CHECKING, Final, Protocol

from leveret.errors import (
    BY_CODE,
    AccessRefused,
    AMQPError,
    ChannelError,
    CommandInvalid,
    FrameError,
    InternalError,
    NotAllowed,
    SyntaxError_,
    UnexpectedFrame,
)
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.constants import FRAME_MIN_SIZE
from leveret.protocol.amqp091.framing import FRAME_END_BYTES, read_u64
from leveret.protocol.output import Output

if TYPE_CHECKING:
    from leveret.protocol.amqp091.channel import ChannelState, PendingPublish
    from leveret.protocol.amqp091.fieldtable import FieldTable

__all__ = [
    "CLOSE_TIMEOUT",
    "DEFAULT_LIMITS",
    "OUTPUT_HIGH_WATER",
    "PACED_TURN_FRAMES",
    "TURN_FRAMES",
    "Limits",
    "LoginOutcome",
    "ServerConnection",
    "State",
]

log = logging.getLogger("leveret.connection")

SUPPORTED_HEADER = framing.PROTOCOL_HEADER

# The class-id/method-id prefix of the per-message methods that _frame handles on a fast
# path (basic.publish 60/40, basic.ack 60/80).
_PUBLISH_HEAD: Final = b"\x00\x3c\x00\x28"
_ACK_HEAD: Final = b"\x00\x3c\x00\x50"


@dataclass(frozen=True)
class Limits:
    """Negotiation limits and defaults the server offers in connection.tune."""

    channel_max: int = 2047
    frame_max: int = 131072
    heartbeat: int = 60
    max_message_size: int = 128 * 1024 * 1024


DEFAULT_LIMITS = Limits()


class LoginOutcome(Protocol):
    """What the ``_login`` hook decides (``leveret.auth.authn.Login`` is one): the user, or a
    refusal, answered (``answer_refusal``, once ``delay`` has passed) with connection.close
    403 ``close_text`` to a client with the ``authentication_failure_close`` capability,
    else (or when ``close_text`` is None) by closing the socket."""

    @property
    def ok(self) -> bool: ...

    @property
    def username(self) -> str: ...

    @property
    def close_text(self) -> str | None: ...

    @property
    def delay(self) -> float: ...


class State(Enum):
    HEADER = auto()
    START = auto()
    TUNE = auto()
    OPEN = auto()
    RUNNING = auto()
    CLOSING = auto()
    CLOSED = auto()


# What the shell asks of this protocol (``server/shell/``): frames per turn, frames per turn
# of a paced publisher (one feeding queues whose consumers fall behind: it still runs every
# loop iteration, but the consumers' acks and deliveries get most of a saturated loop), and
# the message bytes waiting in the output past which deliveries pause until it is written.
TURN_FRAMES: Final = 300
PACED_TURN_FRAMES: Final = 30
OUTPUT_HIGH_WATER: Final = 256 * 1024

# How long connection.close waits for close-ok (RabbitMQ's).
CLOSE_TIMEOUT: Final = 5.0
# After our close-ok the client closes the socket (the spec: close-ok "tells the recipient
# that it is safe to ... close the socket"); RabbitMQ waits for it that long at most
# (rabbit_reader's ?CLOSING_TIMEOUT), or one heartbeat interval when that is shorter.
CLOSING_TIMEOUT: Final = 30.0
# Seconds past a deadline that ``tick`` tests with ``>`` (two missed heartbeat intervals):
# a tick at exactly the deadline would find nothing to do.
_PAST = 1e-3

# The states the per-frame code tests, as module constants: on CPython 3.11 reading an enum
# member off its class (State.RUNNING) goes through a descriptor and costs about 0.25 us,
# several times per message; a global costs a tenth of that.
_HEADER_STATE: Final = State.HEADER
_RUNNING: Final = State.RUNNING
_CLOSING: Final = State.CLOSING
_CLOSED: Final = State.CLOSED


class ServerConnection:
    """One client connection speaking AMQP 0-9-1, without I/O and without a broker."""

    def __init__(
        self,
        *,
        peer: str,
        limits: Limits = DEFAULT_LIMITS,
        now: float = 0.0,
        output: Output | None = None,
        heartbeat_phase: float = 1.0,
    ) -> None:
        self.peer = peer
        self.limits = limits
        self.state = State.HEADER
        self.output = output if output is not None else Output(OUTPUT_HIGH_WATER)
        self.decoder = framing.FrameDecoder(frame_max=FRAME_MIN_SIZE)
        self._header = bytearray()
        self.channels: dict[int, ChannelState] = {}
        self.user_name = ""
        self.client_properties: FieldTable = {}
        self.client_capabilities: FieldTable = {}
        self.channel_max = limits.channel_max
        self.frame_max = limits.frame_max
        self.heartbeat = 0
        # An idle connection sends a heartbeat ``heartbeat_phase`` times half the interval
        # after its last write (0.75 to 1; the server spreads it over its connections:
        # server/heartbeat_phase.py).
        self.heartbeat_phase = heartbeat_phase
        # How long an idle connection waits to send its heartbeat: set with the interval.
        self.heartbeat_idle = 0.0
        self.last_received = now
        self.last_sent = now
        self.close_deadline: float | None = None
        # A refused login waiting for its answer: the 403 text to send then ("" = close the
        # socket without a close method).
        self._refusal_text = ""
        self.refusing = False
        self.should_close_transport = False
        self.close_reason = ""
        self._pending: list[framing.Frame] = []
        self._pending_pos = 0
        # Input held while the subclass waits for an operation to complete: of some
        # channels, or (``_hold_all``) of the whole connection; one test per frame while
        # nothing is held (``holding``).
        self.holding = False
        self._hold_all = False
        self._held_channels: set[int] = set()
        self._held: list[framing.Frame] = []
        self.held_size = 0
        # The peer was told the connection is blocked (connection.blocked, when it asked):
        # it is not read meanwhile, so its silence is not held against it.
        self.blocked = False

    # -- output ----------------------------------------------------------------------

    def send_method(self, channel_id: int, method: m.Method) -> None:
        self.output.append(framing.encode_method_frame(channel_id, method.encode()))

    def output_mark(self) -> int:
        """Where the output stands now (see ``send_method_at``)."""
        return self.output.mark()

    def send_method_at(self, mark: int, channel_id: int, method: m.Method) -> None:
        """Send ``method`` before what was queued since ``mark``: a reply that must precede
        the frames its own handling produced (consume-ok before the first delivery,
        delete-ok before the cancels, recover-ok before the redeliveries)."""
        self.output.insert(mark, framing.encode_method_frame(channel_id, method.encode()))

    def send_content(
        self, channel_id: int, method_payload: bytes, raw_properties: bytes, body: bytes
    ) -> None:
        data = framing.encode_message_frames(
            channel_id, method_payload, 60, body, raw_properties, self.frame_max
        )
        self.output.add(data)

    def send_encoded(self, data: bytes, body: bytes = b"") -> None:
        """Queue frames with content that the caller encoded (the deliver fast path).
        A large ``body`` comes separately, followed by the frame end that closes it: the
        transport's writev takes it from the message itself instead of from a joined copy."""
        if len(body):
            self.output.add(data, body, FRAME_END_BYTES)
        else:
            self.output.add(data)

    def take_output(self, now: float) -> list[bytes]:
        out = self.output.take()
        if out:
            self.last_sent = now
        return out

    # -- input -----------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """Nothing more will be read: the transport is to be closed."""
        return self.state is _CLOSED or self.should_close_transport

    def receive(self, data: bytes, now: float) -> None:
        """Decode ``data``; the frames wait in ``pending`` for ``run``."""
        self.last_received = now
        # self.finished, without its property's call on every read
        if self.state is _CLOSED or self.should_close_transport:
            return
        if self.state is _HEADER_STATE:
            data = self._protocol_header(data)
            if not data:
                return
        try:
            frames = self.decoder.feed(data)
        except AMQPError as exc:
            self._undecodable(exc)
            return
        if self._pending_pos < len(self._pending):
            self._pending.extend(frames)
        else:
            self._pending, self._pending_pos = frames, 0

    def wants_views(self) -> bool:
        """Large frames came in the last read: the next ones are worth decoding in place
        (:meth:`receive_view`; ``FrameDecoder.wants_views``)."""
        return self.decoder.wants_views

    def receive_view(self, view: memoryview, now: float) -> None:
        """:meth:`receive` of a view of the adapter's read buffer, which is reused once
        this returns (``server/read_buffer.py``): the decoder copies each frame out of it
        (a large frame's payload then skips the read's whole copy). Before the protocol
        header, as one ``bytes``."""
        if self.state is _HEADER_STATE:
            self.receive(view.tobytes(), now)
            return
        self.last_received = now
        if self.state is _CLOSED or self.should_close_transport:
            return
        try:
            frames = self.decoder.feed_view(view)
        except AMQPError as exc:
            self._undecodable(exc)
            return
        if self._pending_pos < len(self._pending):
            self._pending.extend(frames)
        else:
            self._pending, self._pending_pos = frames, 0

    def _undecodable(self, exc: AMQPError) -> None:
        # The byte stream is desynchronised: no close-ok can be read after this, so the
        # transport closes once the close method is written.
        self._hard_close(exc)
        self.should_close_transport = True
        self._release()

    @property
    def pending(self) -> bool:
        """Frames are waiting for ``run``."""
        return self._pending_pos < len(self._pending) and not (
            self.state is _CLOSED or self.should_close_transport
        )

    def run(self, budget: int, now: float) -> None:
        """Handle up to ``budget`` waiting frames (the shell's fair share of a turn)."""
        frames, pos = self._pending, self._pending_pos
        end = min(len(frames), pos + budget)
        closed = _CLOSED
        while pos < end:
            frame = frames[pos]
            pos += 1
            if self.holding and self._hold(frame):
                continue
            # Called as a method, not through a local bound method: a native call in the
            # compiled build (the bound method went through a generic call per frame).
            self._frame(frame)
            # self.finished, without a property call per frame
            if self.state is closed or self.should_close_transport:
                break
        if pos >= len(frames):
            self._pending, self._pending_pos = [], 0
        else:
            self._pending_pos = pos

    def internal_error(self, now: float) -> None:
        """A bug of the subclass's was raised while handling input: 541, and nothing more
        is read."""
        self._pending, self._pending_pos = [], 0
        self._held, self.held_size = [], 0
        self._hard_close(InternalError("internal error; see the broker log"), now)
        self.should_close_transport = True
        self._release()

    # -- input held for an operation that completes later -------------------------------

    def hold_channel(self, channel_id: int) -> None:
        """Keep channel ``channel_id``'s frames aside (in order) until
        ``release_channel``; 0 holds every channel."""
        if channel_id == 0:
            self._hold_all = True
        else:
            self._held_channels.add(channel_id)
        self.holding = True

    def release_channel(self, channel_id: int) -> None:
        """Handle the frames held for ``channel_id`` (0: for every channel), in order, until
        one of them holds its channel again; then its frames flow again."""
        if channel_id == 0:
            self._hold_all = False
        else:
            self._held_channels.discard(channel_id)
        self.holding = self._hold_all or bool(self._held_channels)
        held, self._held = self._held, []
        left, self.held_size = self.held_size, 0  # the bytes of ``held`` not handled yet
        closed = _CLOSED
        for i, frame in enumerate(held):
            if self.finished or self.state is closed:
                break
            if self.holding:
                if self._hold_all:
                    # Held again by a frame just handled (a publisher paced by the link to
                    # another node: ``Publisher.wait``): the rest stays held as it is, the
                    # handled frames cut from its front, not held again a frame at a time.
                    # Publishers released together by the link's window (scenario e's
                    # ten) each make a publish or two before the window is full again,
                    # and each then held its input (up to ``HOLD_BOUND``) again.
                    del held[:i]
                    if self._held:
                        self._held += held
                    else:
                        self._held = held
                    self.held_size += left
                    break
                if self._hold(frame):
                    left -= len(frame[2])
                    continue
            left -= len(frame[2])
            self._frame(frame)

    def _hold(self, frame: framing.Frame) -> bool:
        """Keep ``frame`` aside if its channel is held (or every channel is)."""
        if self._hold_all or frame[1] in self._held_channels:
            self._held.append(frame)
            self.held_size += len(frame[2])
            return True
        return False

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
        self.output.append(SUPPORTED_HEADER)
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
                # RabbitMQ answers 505 (spec 4.2.7 would say 501).
                self._hard_close(UnexpectedFrame(f"heartbeat frame on channel {channel_id}"))
        else:
            self._content_frame(frame_type, channel_id, payload)

    def _fast_publish(self, channel_id: int, payload: bytes) -> bool:
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
            # bytes.decode, not str(..., "utf-8"): native in the compiled build, where the
            # str call was a generic call of the type.
            exchange = payload[7:ex_end].decode()
            routing_key = payload[ex_end + 1 : rk_end].decode()
        except UnicodeDecodeError:
            return False
        bits = payload[rk_end]
        try:
            self._check_publish(channel, exchange, routing_key)
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = 60, 40
            self._error(channel, exc)
            return True
        channel.start_publish(exchange, routing_key, bool(bits & 1), bool(bits & 2))
        return True

    def _fast_ack(self, channel_id: int, payload: bytes) -> bool:
        """basic.ack read straight from the payload; False leaves it to the generic path."""
        channel = self.channels.get(channel_id)
        if channel is None or channel.closing or channel.publish is not None:
            return False
        if len(payload) < 13:
            return False
        delivery_tag = read_u64(payload, 4)
        try:
            self._ack(channel, delivery_tag, bool(payload[12] & 1))
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = 60, 80
            self._error(channel, exc)
        return True

    def _content_frame(self, frame_type: int, channel_id: int, payload: bytes) -> None:
        if self.state is not _RUNNING or not channel_id:
            # Not the common case: the checks in their order (one test above for the rest).
            if self.state is _CLOSING:
                return
            if channel_id == 0:
                # RabbitMQ answers 505 (spec 4.2.6.1 would say 504).
                self._hard_close(UnexpectedFrame(f"type {frame_type} frame on channel 0"))
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
                publish, raw, body = channel.take_content()
                self._content(channel, publish, raw, body)
        except UnexpectedFrame as exc:
            # A frame out of place names the publish it interrupted, or nothing (RabbitMQ).
            self._hard_close(exc)
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = 60, 40
            self._error(channel, exc)

    # -- errors ----------------------------------------------------------------------

    def _error(self, channel: ChannelState | None, exc: AMQPError) -> None:
        if exc.hard or channel is None:
            self._hard_close(exc)
        else:
            self._close_channel(channel, exc)

    def fail_channel(self, channel: ChannelState, exc: AMQPError) -> None:
        """Close ``channel`` (soft errors) or the connection (hard ones) with ``exc``, from
        outside a method's handling (a commit that failed on disk, later)."""
        self._error(channel, exc)

    def _close_channel(self, channel: ChannelState, exc: AMQPError) -> None:
        log.debug("channel %d of %s closed: %s", channel.id, self.peer, exc.full_text())
        channel.drop_content()
        channel.closing = True
        self._channel_closed(channel)
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
        self.close_deadline = (now if now is not None else self.last_received) + CLOSE_TIMEOUT
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
        """Give back everything the connection held: the channels (the subclass also gives
        back what it held in the broker)."""
        self.channels.clear()

    def connection_lost(self) -> None:
        self.state = State.CLOSED
        self.refusing = False
        self._release()

    # -- flow control ----------------------------------------------------------------

    def notify_blocked(self, reason: str) -> None:
        """The broker stopped reading from us; tell a client that asked to be told."""
        self.blocked = True
        if self.client_capabilities.get("connection.blocked") is True:
            self.send_method(0, m.ConnectionBlocked(reason=reason))

    def notify_unblocked(self, now: float) -> None:
        self.blocked = False
        self.last_received = now  # we were not reading: the silence was ours
        if self.client_capabilities.get("connection.blocked") is True:
            self.send_method(0, m.ConnectionUnblocked())

    # -- heartbeats and timers ----------------------------------------------------------

    def next_tick(self, now: float) -> float | None:
        """When ``tick`` next has something to do (None: nothing until the state changes):
        the adapter sleeps until then instead of ticking at a fixed rate. Reading, writing
        and state changes only move it later, except those that produce output (a close, an
        open), after which the adapter asks again."""
        state = self.state
        if state is State.CLOSING or state is State.CLOSED:
            return None if self.should_close_transport else self.close_deadline
        heartbeat = self.heartbeat
        if not heartbeat or state is not State.RUNNING:
            return None
        # tick closes once the silence is longer than two intervals: just past that.
        return min(
            self.last_sent + self.heartbeat_idle,
            self.last_received + 2 * heartbeat + _PAST,
        )

    def tick(self, now: float) -> None:
        """Send a heartbeat when idle, close when the peer went silent (two intervals)."""
        if self.state is State.CLOSING or self.state is State.CLOSED:
            if self.close_deadline is not None and now >= self.close_deadline:
                self.state = State.CLOSED
                self.should_close_transport = True
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
        if now - self.last_sent >= self.heartbeat_idle:
            self.output.append(framing.HEARTBEAT_FRAME)
            self.last_sent = now

    # -- connection class ------------------------------------------------------------

    def _send_start(self) -> None:
        self.send_method(
            0,
            m.ConnectionStart(
                version_major=0,
                version_minor=9,
                server_properties=self._server_properties(),
                mechanisms=" ".join(self._mechanisms()).encode(),
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
                self.state = State.CLOSED
                mark = self.output_mark()
                self._release()
                self._connection_close_ok(mark)
                # The client closes the socket; we do only after a time-out (tick).
                wait = CLOSING_TIMEOUT
                if self.heartbeat and self.heartbeat < wait:
                    # float(): mypyc keeps a float variable unboxed and refuses an int.
                    wait = float(self.heartbeat)
                self.close_deadline = self.last_received + wait
            elif state is State.START and isinstance(method, m.ConnectionStartOk):
                self._start_ok(method)
            elif state is State.TUNE and isinstance(method, m.ConnectionTuneOk):
                self._tune_ok(method)
            elif state is State.OPEN and isinstance(method, m.ConnectionOpen):
                self._open(method)
            elif state is State.RUNNING and isinstance(
                method, m.ConnectionBlocked | m.ConnectionUnblocked
            ):
                pass
            elif state is State.RUNNING and isinstance(method, m.ConnectionUpdateSecret):
                self.send_method(0, m.ConnectionUpdateSecretOk())
            elif state is State.RUNNING:
                # Anything else on channel 0 of an open connection, a close-ok nobody asked
                # for included: RabbitMQ's 504.
                raise ChannelError(
                    "unexpected method in connection state running",
                    hard=True,
                    class_id=method.CLASS_ID,
                    method_id=method.METHOD_ID,
                )
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
        outcome = self._login(method.mechanism, method.response)
        if not outcome.ok:
            self._refuse_login(outcome)
            return
        self.user_name = outcome.username
        self.state = State.TUNE
        self.send_method(
            0,
            m.ConnectionTune(
                channel_max=self.limits.channel_max,
                frame_max=self.limits.frame_max,
                heartbeat=self.limits.heartbeat,
            ),
        )

    def _refuse_login(self, outcome: LoginOutcome) -> None:
        """Handle nothing more; the subclass answers (``answer_refusal``) once
        ``outcome.delay`` has passed, so that every guess costs the client that long."""
        text = outcome.close_text
        if text is None or self.client_capabilities.get("authentication_failure_close") is not True:
            text = ""
        self._refusal_text = text
        self.refusing = True
        self.close_reason = "login refused"
        self.state = State.CLOSED
        self._release()
        self._delay_refusal(outcome.delay)

    def answer_refusal(self, now: float) -> None:
        """Send the refused login's answer: connection.close 403, or close the socket."""
        if not self.refusing:
            return
        self.refusing = False
        text = self._refusal_text
        # Frames the client pipelined after its start-ok were never handled: drop them.
        self._pending, self._pending_pos = [], 0
        self._held, self.held_size = [], 0
        if not text:
            self.should_close_transport = True
            return
        # 10/11, the start-ok that failed, as the spec asks (RabbitMQ 3.10 sends 0/0).
        # RabbitMQ 3.10.8 names no method (0/0) in this close.
        refusal = AccessRefused(text, hard=True)
        self.send_method(
            0,
            m.ConnectionClose(
                reply_code=refusal.reply_code,
                reply_text=refusal.full_text(),
                class_id=refusal.class_id,
                method_id=refusal.method_id,
            ),
        )
        self.state = State.CLOSING
        self.close_deadline = now + CLOSE_TIMEOUT

    def _tune_ok(self, method: m.ConnectionTuneOk) -> None:
        limits = self.limits
        # 0 means "no limit", which is above any limit offered (RabbitMQ's reading).
        frame_max = method.frame_max or (1 << 32)
        channel_max = method.channel_max or (1 << 16)
        problem = ""
        if frame_max < 4096:
            problem = f"frame_max={frame_max} < 4096 min size"
        elif limits.frame_max and frame_max > limits.frame_max:
            problem = f"frame_max={method.frame_max} > {limits.frame_max} max size"
        elif limits.channel_max and channel_max > limits.channel_max:
            problem = f"channel_max={method.channel_max} > {limits.channel_max} max"
        if problem:
            # The connection is not open yet: RabbitMQ drops the socket, no close method.
            log.info("closing connection %s: %s", self.peer, problem)
            self.close_reason = problem
            self.state = State.CLOSED
            self.should_close_transport = True
            self._release()
            return
        frame_max = min(frame_max, limits.frame_max) if limits.frame_max else frame_max
        channel_max = min(channel_max, limits.channel_max) if limits.channel_max else channel_max
        self.frame_max = frame_max
        self.decoder.frame_max = frame_max
        self.channel_max = channel_max
        self.heartbeat = method.heartbeat
        self.heartbeat_idle = method.heartbeat / 2 * self.heartbeat_phase
        self.state = State.OPEN

    def _open(self, method: m.ConnectionOpen) -> None:
        self._open_vhost(method.virtual_host)
        self.state = State.RUNNING
        self.send_method(0, m.ConnectionOpenOk())
        log.info(
            "connection %s opened: user '%s', vhost '%s'",
            self.peer,
            self.user_name,
            method.virtual_host,
        )

    # -- channels --------------------------------------------------------------------

    def _channel_method(self, channel_id: int, method: m.Method) -> None:
        if self.state is _CLOSING:
            return
        if self.state is not _RUNNING:
            self._hard_close(
                UnexpectedFrame(f"channel method {method.NAME} before the connection is open")
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
            elif isinstance(method, m.ChannelOpen):
                self._hard_close(
                    ChannelError("second 'channel.open' seen", hard=True, class_id=20, method_id=10)
                )
            return
        if channel.expecting_content():
            # RabbitMQ names the publish whose content was interrupted.
            self._hard_close(UnexpectedFrame(channel.content_expected(), class_id=60, method_id=40))
            return
        try:
            if isinstance(method, m.ChannelClose):
                # close-ok goes before what the close causes on other channels (requeued
                # messages delivered there), as RabbitMQ orders them.
                mark = self.output_mark()
                self._channel_closed(channel)
                del self.channels[channel_id]
                self._channel_close_ok(channel, mark)
            elif isinstance(method, m.ChannelOpen):
                raise ChannelError("second 'channel.open' seen")
            elif isinstance(method, m.ChannelCloseOk):
                # We never sent channel.close on an open channel: RabbitMQ's 503.
                raise CommandInvalid("unimplemented method", hard=True)
            else:
                self._method(channel, method)
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = method.CLASS_ID, method.METHOD_ID
            self._error(channel, exc)

    def _open_channel(self, channel_id: int) -> None:
        # channel_max bounds how many channels are open at once, not their numbers
        # (RabbitMQ 3.10's reading; clients such as aiormq pick numbers up to 65535).
        if self.channel_max and len(self.channels) >= self.channel_max:
            count = len(self.channels)
            self._hard_close(
                NotAllowed(
                    f"number of channels opened ({count}) has reached the negotiated "
                    f"channel_max ({self.channel_max})",
                    hard=True,
                    class_id=20,
                    method_id=10,
                )
            )
            return
        try:
            channel = self._new_channel(channel_id)
        except AMQPError as exc:
            # A refusal of the broker (the user's channel limit): a connection error.
            if not exc.class_id:
                exc.class_id, exc.method_id = 20, 10
            self._hard_close(exc)
            return
        self.channels[channel_id] = channel
        self.send_method(channel_id, m.ChannelOpenOk())

    # -- hooks: what the connection means to a broker (a subclass supplies them) ---------

    def _server_properties(self) -> FieldTable:
        """connection.start's server-properties (product, version, capabilities...)."""
        raise NotImplementedError

    def _mechanisms(self) -> list[str]:
        """The SASL mechanisms connection.start offers, in preference order."""
        raise NotImplementedError

    def _login(self, mechanism: str, response: bytes) -> LoginOutcome:
        """Whether the start-ok's ``mechanism`` and ``response`` log in from this peer."""
        raise NotImplementedError

    def _delay_refusal(self, delay: float) -> None:
        """A login was refused: call ``answer_refusal`` once ``delay`` seconds have passed
        (reading nothing meanwhile)."""
        raise NotImplementedError

    def _open_vhost(self, name: str) -> None:
        """connection.open of vhost ``name``; raises the AMQP error that refuses it."""
        raise NotImplementedError

    def _new_channel(self, channel_id: int) -> ChannelState:
        """A channel was opened; raises the AMQP error that refuses it (a hard one)."""
        raise NotImplementedError

    def _channel_closed(self, channel: ChannelState) -> None:
        """``channel`` closed (by the client, or by us after an error)."""
        raise NotImplementedError

    def _channel_close_ok(self, channel: ChannelState, mark: int) -> None:
        """The client's channel.close of ``channel`` was handled (``_channel_closed``):
        its close-ok, before what the close caused (a subclass may send it later, once
        what it waits for is done)."""
        self.send_method_at(mark, channel.id, m.ChannelCloseOk())

    def _connection_close_ok(self, mark: int) -> None:
        """The client's connection.close was handled (``_release``): its close-ok (a
        subclass may send it later, once what it waits for is done)."""
        self.send_method_at(mark, 0, m.ConnectionCloseOk())

    def _method(self, channel: ChannelState, method: m.Method) -> None:
        """A method other than channel.open/close/close-ok arrived on an open channel."""
        raise NotImplementedError

    def _check_publish(self, channel: ChannelState, exchange: str, routing_key: str) -> None:
        """basic.publish to ``exchange`` with ``routing_key`` arrived; raises if it may not
        be published."""
        raise NotImplementedError

    def _content(
        self, channel: ChannelState, publish: PendingPublish, raw_properties: bytes, body: bytes
    ) -> None:
        """A published message is complete."""
        raise NotImplementedError

    def _ack(self, channel: ChannelState, delivery_tag: int, multiple: bool) -> None:
        """basic.ack (read on the fast path)."""
        raise NotImplementedError
