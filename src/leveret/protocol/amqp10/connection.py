"""The sans-IO AMQP 1.0 connection machine, server or client role (spec part 2, part 5.3).

Theory of operation
-------------------
Bytes in, events out; calls in, bytes out — h11/h2's contract, with time passed in as
aioquic does: ``receive_data(data, now)`` returns events, methods (``begin``, ``attach``,
``send_transfer``, ``settle``, …) queue frames, ``data_to_send(now)`` (or
``pieces_to_send(now)`` for ``writelines``) takes them, ``get_timer()``/``handle_timer(now)``
drive heartbeats, the idle time-out and the close time-out. There is no socket, loop or clock.

One machine per connection holds three layers of state::

    connection  START ─hdr→ [SASL ─init→ SASL_PENDING ─answer_sasl→ HEADER_WAIT ─hdr→]
                OPENING ─open→ OPENED ─close→ CLOSED      (close sent first: CLOSE_SENT)
    session     BEGIN_SENT ─begin→ MAPPED ─end→ (freed)   (end sent first: END_SENT)
    link        ATTACH_SENT ─attach→ ATTACHED ─detach→ (freed)
                ATTACH_RECEIVED ─accept_link→ ATTACHED    (refuse_link: attach + detach)

Channels and handles in method calls and events are always *ours* (the numbers this side
chose); the peer's are mapped on arrival. The server answers ``open``, ``begin``, ``end``,
``detach`` and ``close`` by itself (with ``broker_answers_closing``, the last three wait for
``answer_detach``, ``answer_end``, ``answer_close``: ``DETACH_RECEIVED``, ``END_RECEIVED``,
``CLOSE_RECEIVED``); an ``attach`` from the peer waits for ``accept_link`` or
``refuse_link`` (the broker resolves the address first), and SASL for ``answer_sasl``.

Errors. Anything the peer gets wrong ends the narrowest scope the spec allows, with the
spec's condition: a bad frame or performative closes the connection
(``amqp:connection:framing-error``, ``amqp:decode-error``, ``amqp:illegal-state``); a window
or handle error ends the session (``amqp:session:window-violation``, ``…:handle-in-use``,
``…:unattached-handle``); a credit or size error detaches the link
(``amqp:link:transfer-limit-exceeded``, ``…:message-size-exceeded``). Each emits its
``…Closed``/``…Ended``/``…Detached`` event at once, with ``local=True``. Misuse of the
methods raises :class:`~leveret.protocol.amqp10.errors.LocalProtocolError`.

Session flow control counts transfer frames: our incoming window is re-granted (a session
``flow``) when half of it is used; outgoing transfers beyond the peer's incoming window wait
in the session until its ``flow`` opens it. Link credit counts deliveries. Transfers are
encoded by a per-link :class:`~leveret.protocol.amqp10.transfer.TransferEncoder` and decoded
by :func:`~leveret.protocol.amqp10.transfer.decode_transfer` (the per-message path).

Only the 1.0 front end, clients and tests import this module (through the package).
"""

from __future__ import annotations

import enum
import struct
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from leveret.protocol.amqp10._generated.composites import (
    Accepted,
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Error,
    Flow,
    Open,
    SaslChallenge,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
    Source,
    Target,
)
from leveret.protocol.amqp10._generated.definitions import (
    AmqpErrorCondition,
    ConnectionErrorCondition,
    LinkErrorCondition,
    ReceiverSettleMode,
    Role,
    SaslCode,
    SenderSettleMode,
    SessionErrorCondition,
)
from leveret.protocol.amqp10.errors import AMQP10Error, LocalProtocolError
from leveret.protocol.amqp10.events import (
    ConnectionClosed,
    ConnectionOpened,
    CreditGranted,
    DispositionReceived,
    Event,
    FlowReceived,
    LinkAttached,
    LinkAttachRequested,
    LinkDetached,
    MessageReceived,
    SaslAuthRequested,
    SaslOutcomeReceived,
    SessionBegun,
    SessionEnded,
)
from leveret.protocol.amqp10.framing import (
    AMQP_HEADER,
    EMPTY_FRAME,
    FRAME_AMQP,
    FRAME_SASL,
    SASL_HEADER,
    Frame,
    FrameDecoder,
    ProtocolHeader,
    encode_frame,
)
from leveret.protocol.amqp10.sasl import SaslResponseError, parse_response, plain_response
from leveret.protocol.amqp10.session import (
    SEQUENCE_MASK,
    Link,
    LinkState,
    Session,
    SessionState,
    serial_diff,
)
from leveret.protocol.amqp10.transfer import TRANSFER_PREFIX, TransferEncoder, decode_transfer
from leveret.protocol.amqp10.types import Composite, decode_value

if TYPE_CHECKING:
    from leveret.protocol.amqp10.types import Value

__all__ = ["ECHO", "Connection", "ConnectionConfig", "ConnectionState", "Side"]

_MIN_MAX_FRAME_SIZE: Final = 512
_ACCEPTED_STATE: Final = Accepted()
_new_tuple = tuple.__new__


class Side(enum.Enum):
    CLIENT = "client"
    SERVER = "server"


class ConnectionState(enum.Enum):
    START = "start"
    SASL = "sasl"
    SASL_PENDING = "sasl-pending"  # server: SaslAuthRequested is out, answer_sasl is awaited
    HEADER_WAIT = "header-wait"  # SASL done: the AMQP header is next
    OPENING = "opening"  # AMQP headers exchanged (client: maybe not yet), opens in progress
    OPENED = "opened"
    CLOSE_SENT = "close-sent"
    CLOSE_RECEIVED = "close-received"  # the peer's close is in, ``answer_close`` is awaited
    CLOSED = "closed"


class _Echo:
    """The type of :data:`ECHO`."""

    def __repr__(self) -> str:
        return "ECHO"


ECHO: Final = _Echo()
"""``accept_link``'s default terminus: the one the peer asked for."""


@dataclass(frozen=True, slots=True)
class ConnectionConfig:
    """What this side offers. Sizes are bytes, windows transfer frames, time-outs as noted."""

    side: Side = Side.SERVER
    container_id: str = "leveret"
    hostname: str | None = None  # client: the open's hostname (RabbitMQ: "vhost:<name>")
    max_frame_size: int = 131072
    channel_max: int = 65535
    handle_max: int = 0xFFFFFFFF
    idle_time_out: int = 0  # milliseconds; 0: we never time the peer out
    incoming_window: int = 8192
    outgoing_window: int = 0x7FFFFFFF
    properties: dict[Value, Value] | None = None
    offered_capabilities: tuple[str, ...] | None = None
    # Server: the mechanisms offered (empty: no SASL layer); require_sasl refuses a client
    # that skips it. Client: the mechanism to use (None: no SASL layer) and its credentials.
    sasl_mechanisms: tuple[str, ...] = ()
    require_sasl: bool = True
    sasl_mechanism: str | None = None
    sasl_username: str = ""
    sasl_password: str = ""
    close_timeout: float = 5.0  # seconds to wait for the peer's close before giving up
    # Server: end a pass after each request the broker answers (the open, a begin, a peer's
    # attach), so that the frames after it see the answer as if they had come one at a time
    # (``backlogged``). Without it, a detach or end in the same read can withdraw a request
    # before the broker answers it.
    answer_before_more: bool = False
    # Server: the peer's detach, end and close are answered by the broker
    # (``answer_detach``, ``answer_end``, ``answer_close``), not here: it may answer once
    # what the link, session or connection held is let go elsewhere (a consumer of a queue
    # another node leads). Until then the link's handle, the session's channel stay ours.
    broker_answers_closing: bool = False


class Connection:
    """One AMQP 1.0 connection end (see the module docstring)."""

    def __init__(self, config: ConnectionConfig | None = None) -> None:
        self.config = config or ConnectionConfig()
        if self.config.max_frame_size < _MIN_MAX_FRAME_SIZE:
            raise ValueError(f"max_frame_size below {_MIN_MAX_FRAME_SIZE}")
        self.side = self.config.side
        self.state = ConnectionState.START
        self._decoder = FrameDecoder(self.config.max_frame_size)
        self._out: list[bytes | memoryview] = []
        # Events so far; receive_data/handle_timer hand them over (those queued by a method
        # call, such as a refused SASL answer, come with the next call).
        self._events: list[Event] = []
        self._held = bytearray()  # input that arrived while SASL_PENDING
        # Server: frames decoded but not processed because a request the broker answers
        # (an open, a begin, a peer's attach) ended the pass; ``receive_data(b"")`` goes on.
        self._backlog: list[Frame | ProtocolHeader] = []
        self._answers = self.side is Side.SERVER and self.config.answer_before_more
        self._answer_due = False
        self._open_sent = False
        self._header_received = False
        self._close_error: Error | None = None
        self._close_reported = False
        self._close_started: float | None = None
        self._sasl_mechanism = ""
        self.peer_max_frame_size = _MIN_MAX_FRAME_SIZE
        self.peer_channel_max = 0
        self.peer_idle_time_out = 0
        self.peer_container_id: str | None = None
        self.peer_hostname: str | None = None
        self._last_received: float | None = None
        self._last_sent: float | None = None
        self._sessions: dict[int, Session] = {}  # by our channel
        self._by_remote: dict[int, Session] = {}  # by the peer's channel
        self._pending: dict[tuple[int, int], Attach] = {}  # peer attaches awaiting an answer
        self._detach_errors: dict[tuple[int, int], Error | None] = {}  # our detaches' errors
        # The peer's detaches the broker answers (``broker_answers_closing``): their closed.
        self._detaches: dict[tuple[int, int], bool] = {}
        self._broker_closes = self.side is Side.SERVER and self.config.broker_answers_closing

    # -- I/O ----------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once nothing more will be received (flush the output, then close the socket)."""
        return self.state is ConnectionState.CLOSED

    def initiate(self) -> None:
        """Client: send the protocol header (SASL's first when a mechanism is configured)."""
        if self.side is not Side.CLIENT or self.state is not ConnectionState.START:
            raise LocalProtocolError("initiate() is for a client that has not started")
        if self.config.sasl_mechanism is not None:
            self._out.append(SASL_HEADER)
            self.state = ConnectionState.SASL
        else:
            self._start_amqp()

    @property
    def backlogged(self) -> bool:
        """Server with ``answer_before_more``: frames wait behind a request the broker was
        to answer first (an open, a begin, an attach of the peer's): call
        ``receive_data(b"", now)`` once it has, so that what follows sees the answer, as if
        the frames had come one at a time."""
        return bool(self._backlog) and self.state is not ConnectionState.CLOSED

    def receive_data(self, data: bytes | bytearray | memoryview, now: float) -> list[Event]:
        """Feed bytes from the peer; return the events they complete, in order (with
        ``answer_before_more``, up to the first that asks for an answer: ``backlogged``)."""
        if data:
            self._last_received = now
        if self.state is ConnectionState.SASL_PENDING:
            self._held += data
        elif self.state not in (ConnectionState.CLOSED, ConnectionState.CLOSE_RECEIVED):
            if self._held:
                data = bytes(self._held) + bytes(data)
                self._held.clear()
            try:
                self._process(data)
            except AMQP10Error as error:
                self._connection_error(error)
        events, self._events = self._events, []
        return events

    def _process(self, data: bytes | bytearray | memoryview) -> None:
        items = self._decoder.feed(data)
        if self._backlog:
            items = self._backlog + items
            self._backlog = []
        opened = ConnectionState.OPENED
        while items:
            for item in items:
                # The per-message path: a transfer frame on an open connection goes straight
                # to _on_transfer (which never closes the connection: it raises instead).
                if type(item) is Frame and item[0] == FRAME_AMQP and self.state is opened:
                    body = item[2]
                    if body[:3] == TRANSFER_PREFIX:
                        self._on_transfer(item[1], body)
                        continue
                self._handle(item)
                if self.state in (ConnectionState.CLOSED, ConnectionState.CLOSE_RECEIVED):
                    self._backlog = []
                    return
                if self._answer_due:
                    # The broker answers before the next frame is looked at (a detach or an
                    # end later in this read must find the link or session it answered).
                    self._answer_due = False
                    self._backlog = _after(items, item)
                    return
            if self.state is ConnectionState.SASL_PENDING or not self._decoder.buffered:
                return
            items = self._decoder.feed(b"")

    def data_to_send(self, now: float) -> bytes:
        """Everything queued for the peer, as one ``bytes``."""
        return b"".join(self.pieces_to_send(now))

    def pieces_to_send(self, now: float) -> list[bytes | memoryview]:
        """Everything queued for the peer, as pieces for ``transport.writelines``."""
        out = self._out
        if out:
            self._out = []
            self._last_sent = now
        if self.state is ConnectionState.CLOSE_SENT and self._close_started is None:
            self._close_started = now
        return out

    def get_timer(self) -> float | None:
        """When ``handle_timer`` next has something to do (monotonic seconds), or None."""
        deadlines = []
        if self.state is ConnectionState.OPENED:
            if self.peer_idle_time_out and self._last_sent is not None:
                deadlines.append(self._last_sent + self.peer_idle_time_out / 2000)
            if self.config.idle_time_out and self._last_received is not None:
                deadlines.append(self._last_received + self.config.idle_time_out / 1000)
        if self.state is ConnectionState.CLOSE_SENT and self._close_started is not None:
            deadlines.append(self._close_started + self.config.close_timeout)
        return min(deadlines) if deadlines else None

    def handle_timer(self, now: float) -> list[Event]:
        """Send a heartbeat, time the peer out, or give up waiting for its close."""
        self._timer(now)
        events, self._events = self._events, []
        return events

    def _timer(self, now: float) -> None:
        if self.state is ConnectionState.OPENED:
            idle = self.config.idle_time_out
            if (
                idle
                and self._last_received is not None
                and now >= self._last_received + idle / 1000
            ):
                self._connection_error(
                    AMQP10Error(
                        AmqpErrorCondition.RESOURCE_LIMIT_EXCEEDED,
                        f"local-idle-timeout expired: nothing received for {idle} ms",
                    )
                )
                return
            peer = self.peer_idle_time_out
            if peer and self._last_sent is not None and now >= self._last_sent + peer / 2000:
                if not self._out:
                    self._out.append(EMPTY_FRAME)
                self._last_sent = now
        elif (
            self.state is ConnectionState.CLOSE_SENT
            and self._close_started is not None
            and now >= self._close_started + self.config.close_timeout
        ):
            self._finish_close(local=True)

    # -- frame dispatch -----------------------------------------------------------------------

    def _handle(self, item: Frame | ProtocolHeader) -> None:
        if type(item) is Frame:
            if item.frame_type == FRAME_AMQP:
                self._amqp_frame(item.channel, item.body)
            else:
                self._sasl_frame(item.body)
        else:
            assert isinstance(item, ProtocolHeader)
            self._on_header(item.raw)

    def _on_header(self, raw: bytes) -> None:
        state = self.state
        server = self.side is Side.SERVER
        if raw == SASL_HEADER and state in (ConnectionState.START, ConnectionState.SASL):
            if server:
                if not self.config.sasl_mechanisms:
                    self._refuse_header("this server has no SASL layer", AMQP_HEADER)
                    return
                self._out.append(SASL_HEADER)
                self._send_sasl(SaslMechanisms(sasl_server_mechanisms=self.config.sasl_mechanisms))
                self.state = ConnectionState.SASL
            elif state is not ConnectionState.SASL:
                self._refuse_header("unexpected SASL header", AMQP_HEADER)
            return
        if raw == AMQP_HEADER and (
            (server and state in (ConnectionState.START, ConnectionState.HEADER_WAIT))
            or (not server and state is ConnectionState.OPENING and not self._header_received)
        ):
            if (
                server
                and state is ConnectionState.START
                and self.config.sasl_mechanisms
                and self.config.require_sasl
            ):
                self._refuse_header("authentication required: use SASL", SASL_HEADER)
                return
            self._header_received = True
            if server:
                self._out.append(AMQP_HEADER)
                self.state = ConnectionState.OPENING
            return
        ours = SASL_HEADER if server and self.config.sasl_mechanisms else AMQP_HEADER
        self._refuse_header(f"unsupported or unexpected protocol header {raw!r}", ours)

    def _refuse_header(self, why: str, ours: bytes) -> None:
        # Spec 2.2: answer with the header we do support, then close the socket.
        if self.side is Side.SERVER:
            self._out.append(ours)
        self._close_error = Error(condition=ConnectionErrorCondition.FRAMING_ERROR, description=why)
        self._finish_close(local=True)

    def _amqp_frame(self, channel: int, body: bytes) -> None:
        state = self.state
        if state is ConnectionState.OPENED:
            if not body:
                return  # an empty frame: the peer is alive, nothing else
            if body[:3] == TRANSFER_PREFIX:
                self._on_transfer(channel, body)
                return
        elif state is ConnectionState.CLOSE_SENT:
            if body and not body.startswith(TRANSFER_PREFIX):
                perf, _ = decode_value(body)
                if type(perf) is Close:
                    self._finish_close(local=True)
            return
        elif state is not ConnectionState.OPENING or (
            self.side is Side.CLIENT and not self._header_received
        ):
            raise AMQP10Error(
                ConnectionErrorCondition.FRAMING_ERROR, f"AMQP frame in state {state.value}"
            )
        elif not body:
            return
        perf, end = decode_value(body)
        if end != len(body):
            raise AMQP10Error(
                AmqpErrorCondition.DECODE_ERROR, f"{len(body) - end} bytes after the performative"
            )
        kind = type(perf)
        if kind is Open:
            assert isinstance(perf, Open)
            self._on_open(perf)
        elif kind is Close:
            assert isinstance(perf, Close)
            self._on_close(perf)
        elif state is not ConnectionState.OPENED:
            raise AMQP10Error(AmqpErrorCondition.ILLEGAL_STATE, f"{_name(perf)} before open")
        elif kind is Begin:
            assert isinstance(perf, Begin)
            self._on_begin(channel, perf)
        else:
            session = self._by_remote.get(channel)
            if session is None:
                raise AMQP10Error(
                    AmqpErrorCondition.ILLEGAL_STATE, f"{_name(perf)} on unmapped channel {channel}"
                )
            if session.state is SessionState.END_RECEIVED or (
                session.state is SessionState.END_SENT and kind is not End
            ):
                return
            if kind is Flow:
                assert isinstance(perf, Flow)
                self._on_flow(session, perf)
            elif kind is Disposition:
                assert isinstance(perf, Disposition)
                last = perf.first if perf.last is None else perf.last
                self._events.append(
                    _new_tuple(
                        DispositionReceived,
                        (
                            session.channel,
                            perf.role,
                            perf.first,
                            last,
                            perf.settled,
                            perf.state,
                            perf.batchable,
                        ),
                    )
                )
            elif kind is Attach:
                assert isinstance(perf, Attach)
                self._on_attach(session, perf)
            elif kind is Detach:
                assert isinstance(perf, Detach)
                self._on_detach(session, perf)
            elif kind is End:
                assert isinstance(perf, End)
                self._on_end(session, perf)
            else:
                raise AMQP10Error(
                    AmqpErrorCondition.ILLEGAL_STATE, f"{_name(perf)} is not an AMQP performative"
                )

    # -- SASL ---------------------------------------------------------------------------------

    def _send_sasl(self, perf: Composite) -> None:
        self._out.append(encode_frame(0, perf.encode(), FRAME_SASL))

    def _sasl_frame(self, body: bytes) -> None:
        if self.state is not ConnectionState.SASL:
            raise AMQP10Error(
                ConnectionErrorCondition.FRAMING_ERROR, f"SASL frame in state {self.state.value}"
            )
        perf, end = decode_value(body)
        if end != len(body):
            raise AMQP10Error(AmqpErrorCondition.DECODE_ERROR, "bytes after a SASL frame body")
        if self.side is Side.SERVER:
            if type(perf) is SaslInit:
                assert isinstance(perf, SaslInit)
                self._sasl_mechanism = perf.mechanism
                self.peer_hostname = perf.hostname
                if perf.mechanism not in self.config.sasl_mechanisms:
                    self._sasl_fail(f"mechanism {perf.mechanism!r} not offered")
                elif perf.mechanism == "PLAIN" and perf.initial_response is None:
                    self._send_sasl(SaslChallenge(challenge=b""))
                else:
                    self._sasl_request(perf.initial_response)
            elif type(perf) is SaslResponse and self._sasl_mechanism:
                assert isinstance(perf, SaslResponse)
                self._sasl_request(perf.response)
            else:
                raise AMQP10Error(AmqpErrorCondition.ILLEGAL_STATE, f"unexpected {_name(perf)}")
            return
        if type(perf) is SaslMechanisms:
            assert isinstance(perf, SaslMechanisms)
            mech = self.config.sasl_mechanism
            assert mech is not None
            if mech not in perf.sasl_server_mechanisms:
                self._close_error = Error(
                    condition=AmqpErrorCondition.NOT_IMPLEMENTED,
                    description=f"server does not offer {mech}",
                )
                self._finish_close(local=True)
                return
            response = None
            if mech == "PLAIN":
                response = plain_response(self.config.sasl_username, self.config.sasl_password)
            elif mech == "ANONYMOUS":
                response = b"leveret"
            self._send_sasl(
                SaslInit(mechanism=mech, initial_response=response, hostname=self.config.hostname)
            )
        elif type(perf) is SaslChallenge:
            self._send_sasl(SaslResponse(response=b""))
        elif type(perf) is SaslOutcome:
            assert isinstance(perf, SaslOutcome)
            self._events.append(SaslOutcomeReceived(perf.code, perf.additional_data))
            if perf.code != SaslCode.OK:
                self._close_error = Error(
                    condition=AmqpErrorCondition.UNAUTHORIZED_ACCESS,
                    description=f"SASL outcome {perf.code}",
                )
                self._finish_close(local=False)
                return
            self._decoder.expect_header = True
            self._start_amqp()
        else:
            raise AMQP10Error(AmqpErrorCondition.ILLEGAL_STATE, f"unexpected {_name(perf)}")

    def _sasl_request(self, response: bytes | None) -> None:
        try:
            fields = parse_response(self._sasl_mechanism, response)
        except SaslResponseError as exc:
            self._sasl_fail(str(exc))
            return
        self.state = ConnectionState.SASL_PENDING
        self._events.append(
            SaslAuthRequested(mechanism=self._sasl_mechanism, hostname=self.peer_hostname, **fields)
        )

    def _sasl_fail(self, why: str) -> None:
        self._send_sasl(SaslOutcome(code=SaslCode.AUTH))
        self._close_error = Error(condition=AmqpErrorCondition.UNAUTHORIZED_ACCESS, description=why)
        self._finish_close(local=True)

    def answer_sasl(self, ok: bool, *, code: int | None = None) -> None:
        """Server: the broker's verdict on ``SaslAuthRequested``. Then call
        ``receive_data(b"", now)`` to process input that arrived meanwhile."""
        if self.state is not ConnectionState.SASL_PENDING:
            raise LocalProtocolError("answer_sasl() without a pending SaslAuthRequested")
        if ok:
            self._send_sasl(SaslOutcome(code=SaslCode.OK))
            self._decoder.expect_header = True
            self.state = ConnectionState.HEADER_WAIT
        else:
            self._send_sasl(SaslOutcome(code=SaslCode.AUTH if code is None else code))
            self._close_error = Error(
                condition=AmqpErrorCondition.UNAUTHORIZED_ACCESS,
                description=f"authentication with {self._sasl_mechanism} failed",
            )
            self._finish_close(local=True)
            self._held.clear()

    # -- connection ---------------------------------------------------------------------------

    def _start_amqp(self) -> None:
        """Client: the AMQP header and our open, pipelined."""
        self._out.append(AMQP_HEADER)
        self.state = ConnectionState.OPENING
        self._send_open()

    def _send_open(self) -> None:
        c = self.config
        self._open_sent = True
        self._send(
            0,
            Open(
                container_id=c.container_id,
                hostname=c.hostname if self.side is Side.CLIENT else None,
                max_frame_size=c.max_frame_size,
                channel_max=c.channel_max,
                idle_time_out=c.idle_time_out or None,
                offered_capabilities=c.offered_capabilities,
                properties=c.properties,
            ),
        )

    def _on_open(self, perf: Open) -> None:
        if self.peer_container_id is not None:
            raise AMQP10Error(AmqpErrorCondition.ILLEGAL_STATE, "a second open")
        if perf.max_frame_size < _MIN_MAX_FRAME_SIZE:
            raise AMQP10Error(
                AmqpErrorCondition.FRAME_SIZE_TOO_SMALL,
                f"max-frame-size {perf.max_frame_size} is below {_MIN_MAX_FRAME_SIZE}",
            )
        self.peer_container_id = perf.container_id
        self.peer_hostname = perf.hostname or self.peer_hostname
        self.peer_max_frame_size = perf.max_frame_size
        self.peer_channel_max = perf.channel_max
        self.peer_idle_time_out = perf.idle_time_out or 0
        if not self._open_sent:
            self._send_open()
        self.state = ConnectionState.OPENED
        self._answer_due = self._answers
        self._events.append(
            ConnectionOpened(
                container_id=perf.container_id,
                hostname=perf.hostname,
                max_frame_size=perf.max_frame_size,
                channel_max=perf.channel_max,
                idle_time_out=perf.idle_time_out,
                offered_capabilities=perf.offered_capabilities,
                desired_capabilities=perf.desired_capabilities,
                properties=perf.properties,
            )
        )

    def _on_close(self, perf: Close) -> None:
        if not self._open_sent:
            self._send_open()
        self._close_error = perf.error
        if self._broker_closes:
            self.state = ConnectionState.CLOSE_RECEIVED
            self._stop_all_links()
            self._report_close(local=False)
            return
        self._send(0, Close())
        self._finish_close(local=False)

    def answer_close(self, error: Error | None = None) -> None:
        """Server with ``broker_answers_closing``: answer the peer's close (its
        ``ConnectionClosed``); nothing once answered."""
        if self.state is ConnectionState.CLOSE_RECEIVED:
            self._send(0, Close(error=error))
            self.state = ConnectionState.CLOSED

    def close(self, error: Error | None = None) -> None:
        """Close the connection (``ConnectionClosed`` comes with the peer's answer)."""
        if self.state is ConnectionState.CLOSE_RECEIVED:
            self.answer_close(error)
            return
        if self.state in (ConnectionState.CLOSE_SENT, ConnectionState.CLOSED):
            return
        if self.state not in (ConnectionState.OPENING, ConnectionState.OPENED):
            self._close_error = error
            self._finish_close(local=True)
            return
        if not self._open_sent:
            self._send_open()
        self._send(0, Close(error=error))
        self._close_error = error
        self.state = ConnectionState.CLOSE_SENT
        self._stop_all_links()

    def _connection_error(self, error: AMQP10Error) -> None:
        err = Error(condition=error.condition, description=error.description or None)
        if self.state in (ConnectionState.OPENING, ConnectionState.OPENED):
            if not self._open_sent:
                self._send_open()  # spec 2.4.5: a refusal is an open followed by a close
            self._send(0, Close(error=err))
            self._close_error = err
            self.state = ConnectionState.CLOSE_SENT
            self._stop_all_links()
            self._report_close(local=True)
        else:
            self._close_error = err
            self._finish_close(local=True)

    def _report_close(self, *, local: bool) -> None:
        if not self._close_reported:
            self._close_reported = True
            self._events.append(ConnectionClosed(error=self._close_error, local=local))

    def _finish_close(self, *, local: bool) -> None:
        self.state = ConnectionState.CLOSED
        self._stop_all_links()
        self._report_close(local=local)

    def _stop_all_links(self) -> None:
        for session in self._sessions.values():
            _stop_links(session)

    # -- sessions -----------------------------------------------------------------------------

    def _send(self, channel: int, perf: Composite) -> None:
        self._out.append(encode_frame(channel, perf.encode()))

    def _require_open(self) -> None:
        if self.state is not ConnectionState.OPENED and not (
            self.state is ConnectionState.OPENING and self._open_sent
        ):
            raise LocalProtocolError(f"connection is {self.state.value}")

    def _free_channel(self) -> int:
        limit = self.peer_channel_max if self.state is ConnectionState.OPENED else 65535
        for channel in range(min(limit, self.config.channel_max) + 1):
            if channel not in self._sessions:
                return channel
        raise LocalProtocolError("no free channel within channel-max")

    def begin(self, *, properties: dict[Value, Value] | None = None) -> int:
        """Start a session; returns its channel (``SessionBegun`` on the peer's answer)."""
        self._require_open()
        channel = self._free_channel()
        c = self.config
        session = Session(
            channel, SessionState.BEGIN_SENT, c.incoming_window, c.outgoing_window, c.handle_max
        )
        self._sessions[channel] = session
        self._send(
            channel,
            Begin(
                next_outgoing_id=0,
                incoming_window=c.incoming_window,
                outgoing_window=c.outgoing_window,
                handle_max=c.handle_max,
                properties=properties,
            ),
        )
        return channel

    def _on_begin(self, channel: int, perf: Begin) -> None:
        if channel > self.config.channel_max:
            raise AMQP10Error(
                ConnectionErrorCondition.FRAMING_ERROR,
                f"channel {channel} is above channel-max {self.config.channel_max}",
            )
        if channel in self._by_remote:
            raise AMQP10Error(AmqpErrorCondition.ILLEGAL_STATE, f"channel {channel} is in use")
        if perf.remote_channel is None:
            c = self.config
            session = Session(
                self._free_channel(),
                SessionState.MAPPED,
                c.incoming_window,
                c.outgoing_window,
                c.handle_max,
            )
            self._sessions[session.channel] = session
            self._send(
                session.channel,
                Begin(
                    remote_channel=channel,
                    next_outgoing_id=0,
                    incoming_window=c.incoming_window,
                    outgoing_window=c.outgoing_window,
                    handle_max=c.handle_max,
                ),
            )
        else:
            found = self._sessions.get(perf.remote_channel)
            if found is None or found.state is not SessionState.BEGIN_SENT:
                raise AMQP10Error(
                    AmqpErrorCondition.ILLEGAL_STATE,
                    f"begin answers channel {perf.remote_channel}, which began no session",
                )
            session = found
            session.state = SessionState.MAPPED
        session.remote_channel = channel
        session.next_incoming_id = perf.next_outgoing_id
        session.remote_incoming_window = perf.incoming_window
        session.remote_outgoing_window = perf.outgoing_window
        session.remote_handle_max = perf.handle_max
        self._by_remote[channel] = session
        self._answer_due = self._answers and perf.remote_channel is None
        self._events.append(
            SessionBegun(
                channel=session.channel,
                remote_channel=channel,
                incoming_window=perf.incoming_window,
                outgoing_window=perf.outgoing_window,
                handle_max=perf.handle_max,
                properties=perf.properties,
            )
        )

    def _session(self, channel: int) -> Session:
        session = self._sessions.get(channel)
        if session is None or session.state in (SessionState.END_SENT, SessionState.END_RECEIVED):
            raise LocalProtocolError(f"no session on channel {channel}")
        return session

    def end(self, channel: int, error: Error | None = None) -> None:
        """End a session (``SessionEnded`` on the peer's answer)."""
        session = self._session(channel)
        self._drop_pending(session)
        self._send(channel, End(error=error))
        session.state = SessionState.END_SENT
        session.end_error = error
        _stop_links(session)

    def _session_error(self, session: Session, condition: str, description: str) -> None:
        err = Error(condition=condition, description=description)
        self._drop_pending(session)
        _stop_links(session)
        self._send(session.channel, End(error=err))
        session.state = SessionState.END_SENT
        session.end_error = err
        session.reported = True
        self._events.append(SessionEnded(channel=session.channel, error=err, local=True))

    def _on_end(self, session: Session, perf: End) -> None:
        if session.state is SessionState.END_SENT:
            local = True
            error = session.end_error
        elif self._broker_closes:
            # Answered by ``answer_end``: the channel stays ours (and the peer's mapped:
            # nothing on it is taken) until then.
            session.state = SessionState.END_RECEIVED
            self._drop_pending(session)
            _stop_links(session)
            self._answer_due = self._answers
            self._events.append(
                SessionEnded(channel=session.channel, error=perf.error, local=False)
            )
            return
        else:
            self._send(session.channel, End())
            local = False
            error = perf.error
        self._free_session(session)
        if not session.reported:
            self._events.append(SessionEnded(channel=session.channel, error=error, local=local))

    def answer_end(self, channel: int) -> None:
        """Server with ``broker_answers_closing``: answer the peer's end of the session on
        ``channel`` (its ``SessionEnded``); nothing once answered or closed."""
        session = self._sessions.get(channel)
        if session is None or session.state is not SessionState.END_RECEIVED:
            return
        if self.state is ConnectionState.OPENED:
            self._send(channel, End())
        self._free_session(session)

    def _free_session(self, session: Session) -> None:
        del self._sessions[session.channel]
        _stop_links(session)
        if session.remote_channel is not None:
            self._by_remote.pop(session.remote_channel, None)
        channel = session.channel
        for table in (self._pending, self._detach_errors, self._detaches):
            for key in [k for k in table if k[0] == channel]:
                del table[key]

    # -- links --------------------------------------------------------------------------------

    def link(self, channel: int, handle: int) -> Link | None:
        """Our end of a link (None: none). Its ``sending`` and ``credit`` say whether a
        transfer can go out on it now: ``sending`` turns False as soon as the machine
        detaches it, its session ends or the connection closes, even while the events that
        say so still wait to be handled."""
        session = self._sessions.get(channel)
        return None if session is None else session.links.get(handle)

    def _link(self, channel: int, handle: int) -> tuple[Session, Link]:
        session = self._session(channel)
        link = session.links.get(handle)
        if link is None or link.state in (LinkState.DETACH_SENT, LinkState.DETACH_RECEIVED):
            raise LocalProtocolError(f"no link {handle} on channel {channel}")
        return session, link

    def attach(
        self,
        channel: int,
        name: str,
        role: bool,
        *,
        source: Source | None = None,
        target: Target | Composite | None = None,
        snd_settle_mode: int = SenderSettleMode.MIXED,
        rcv_settle_mode: int = ReceiverSettleMode.FIRST,
        max_message_size: int | None = None,
        properties: dict[Value, Value] | None = None,
        desired_capabilities: tuple[str, ...] | None = None,
    ) -> int:
        """Attach a link where we play ``role``; returns our handle (``LinkAttached`` on the
        peer's answer)."""
        session = self._session(channel)
        if any(link.name == name and link.role == role for link in session.links.values()):
            raise LocalProtocolError(f"link {name!r} is already attached on channel {channel}")
        handle = session.free_handle()
        if handle > session.remote_handle_max:
            raise LocalProtocolError("no free handle within the peer's handle-max")
        link = Link(name, handle, role, LinkState.ATTACH_SENT)
        link.max_message_size = max_message_size
        session.links[handle] = link
        self._send(
            channel,
            Attach(
                name=name,
                handle=handle,
                role=role,
                snd_settle_mode=snd_settle_mode,
                rcv_settle_mode=rcv_settle_mode,
                source=source,
                target=target,
                initial_delivery_count=0 if role == Role.SENDER else None,
                max_message_size=max_message_size,
                properties=properties,
                desired_capabilities=desired_capabilities,
            ),
        )
        return handle

    def _on_attach(self, session: Session, perf: Attach) -> None:
        if perf.handle > session.handle_max:
            raise AMQP10Error(
                ConnectionErrorCondition.FRAMING_ERROR,
                f"handle {perf.handle} is above handle-max {session.handle_max}",
            )
        if perf.handle in session.by_remote:
            self._session_error(
                session, SessionErrorCondition.HANDLE_IN_USE, f"handle {perf.handle} is in use"
            )
            return
        our_role = not perf.role
        link = next(
            (
                lk
                for lk in session.links.values()
                if lk.name == perf.name
                and lk.role == our_role
                and lk.state is LinkState.ATTACH_SENT
            ),
            None,
        )
        if link is not None:
            link.remote_handle = perf.handle
            link.peer_max_message_size = perf.max_message_size
            session.by_remote[perf.handle] = link
            link.state = LinkState.ATTACHED
            if our_role == Role.RECEIVER:
                link.delivery_count = perf.initial_delivery_count or 0
            else:
                link.encoder = TransferEncoder(
                    session.channel, link.handle, self.peer_max_frame_size
                )
            self._events.append(
                LinkAttached(
                    channel=session.channel,
                    handle=link.handle,
                    name=perf.name,
                    role=our_role,
                    source=perf.source if isinstance(perf.source, Source) else None,
                    target=perf.target,
                    snd_settle_mode=perf.snd_settle_mode,
                    rcv_settle_mode=perf.rcv_settle_mode,
                    max_message_size=perf.max_message_size,
                    properties=perf.properties,
                )
            )
            return
        if perf.source is not None and not isinstance(perf.source, Source):
            raise AMQP10Error(AmqpErrorCondition.DECODE_ERROR, "attach: source is not a source")
        handle = session.free_handle()
        link = Link(perf.name, handle, our_role, LinkState.ATTACH_RECEIVED)
        link.remote_handle = perf.handle
        link.peer_max_message_size = perf.max_message_size
        if our_role == Role.RECEIVER:
            link.delivery_count = perf.initial_delivery_count or 0
        session.links[handle] = link
        session.by_remote[perf.handle] = link
        self._pending[(session.channel, handle)] = perf
        self._answer_due = self._answers
        self._events.append(
            LinkAttachRequested(
                channel=session.channel,
                handle=handle,
                name=perf.name,
                role=our_role,
                source=perf.source,
                target=perf.target,
                snd_settle_mode=perf.snd_settle_mode,
                rcv_settle_mode=perf.rcv_settle_mode,
                initial_delivery_count=perf.initial_delivery_count,
                max_message_size=perf.max_message_size,
                properties=perf.properties,
                desired_capabilities=perf.desired_capabilities,
            )
        )

    def accept_link(
        self,
        channel: int,
        handle: int,
        *,
        source: Source | _Echo | None = ECHO,
        target: Target | Composite | _Echo | None = ECHO,
        snd_settle_mode: int | None = None,
        rcv_settle_mode: int | None = None,
        max_message_size: int | None = None,
        properties: dict[Value, Value] | None = None,
        offered_capabilities: tuple[str, ...] | None = None,
        credit: int = 0,
        auto_credit: bool = False,
    ) -> None:
        """Answer a ``LinkAttachRequested``: attach our end (termini echo the peer's unless
        given; settle modes too). A receiving link may grant ``credit`` at once and, with
        ``auto_credit``, keep it topped up as messages arrive."""
        _, link = self._link(channel, handle)
        perf = self._pending.pop((channel, handle), None)
        if link.state is not LinkState.ATTACH_RECEIVED or perf is None:
            raise LocalProtocolError(f"link {handle} on channel {channel} awaits no answer")
        link.state = LinkState.ATTACHED
        link.max_message_size = max_message_size
        if link.role == Role.SENDER:
            link.encoder = TransferEncoder(channel, handle, self.peer_max_frame_size)
        self._send(
            channel,
            Attach(
                name=link.name,
                handle=handle,
                role=link.role,
                snd_settle_mode=perf.snd_settle_mode
                if snd_settle_mode is None
                else snd_settle_mode,
                rcv_settle_mode=perf.rcv_settle_mode
                if rcv_settle_mode is None
                else rcv_settle_mode,
                source=perf.source if isinstance(source, _Echo) else source,
                target=perf.target if isinstance(target, _Echo) else target,
                initial_delivery_count=link.delivery_count if link.role == Role.SENDER else None,
                max_message_size=max_message_size,
                offered_capabilities=offered_capabilities,
                properties=properties,
            ),
        )
        if link.role == Role.RECEIVER and credit:
            link.auto_credit = credit if auto_credit else 0
            self.grant_credit(channel, handle, credit)

    def refuse_link(self, channel: int, handle: int, error: Error) -> None:
        """Answer a ``LinkAttachRequested`` with a refusal: an attach with no terminus, then a
        detach carrying ``error`` (spec 2.6.3). ``LinkDetached`` comes on the peer's answer."""
        _, link = self._link(channel, handle)
        perf = self._pending.pop((channel, handle), None)
        if perf is None:
            raise LocalProtocolError(f"link {handle} on channel {channel} awaits no answer")
        self._send(
            channel,
            Attach(
                name=link.name,
                handle=handle,
                role=link.role,
                source=perf.source if link.role == Role.RECEIVER else None,
                target=perf.target if link.role == Role.SENDER else None,
                initial_delivery_count=0 if link.role == Role.SENDER else None,
            ),
        )
        self._send(channel, Detach(handle=handle, closed=True, error=error))
        link.state = LinkState.DETACH_SENT
        self._detach_errors[(channel, handle)] = error

    def detach(
        self, channel: int, handle: int, *, closed: bool = True, error: Error | None = None
    ) -> None:
        """Detach (``closed``: close) a link; ``LinkDetached`` comes on the peer's answer."""
        session, link = self._link(channel, handle)
        self._pending.pop((channel, handle), None)
        self._drop_pending(session, handle)
        self._send(channel, Detach(handle=handle, closed=closed, error=error))
        link.state = LinkState.DETACH_SENT
        self._detach_errors[(channel, handle)] = error

    def _link_error(self, session: Session, link: Link, condition: str, description: str) -> None:
        err = Error(condition=condition, description=description)
        self._drop_pending(session, link.handle)
        self._send(session.channel, Detach(handle=link.handle, closed=True, error=err))
        link.state = LinkState.DETACH_SENT
        link.parts = None
        link.reported = True
        self._detach_errors[(session.channel, link.handle)] = err
        self._events.append(
            LinkDetached(
                channel=session.channel, handle=link.handle, closed=True, error=err, local=True
            )
        )

    def _on_detach(self, session: Session, perf: Detach) -> None:
        link = session.by_remote.get(perf.handle)
        if link is None:
            self._session_error(
                session,
                SessionErrorCondition.UNATTACHED_HANDLE,
                f"detach of unattached handle {perf.handle}",
            )
            return
        key = (session.channel, link.handle)
        held = False
        if link.state is LinkState.DETACH_SENT:
            local = True
            error = self._detach_errors.pop(key, None)
            closed = True
        else:
            self._drop_pending(session, link.handle)
            held = self._broker_closes
            if held:
                self._detaches[key] = perf.closed
                self._answer_due = self._answers
            else:
                self._send(session.channel, Detach(handle=link.handle, closed=perf.closed))
            local = False
            error = perf.error
            closed = perf.closed
        self._pending.pop(key, None)
        # The peer's detach unmaps its handle (spec 2.7.4); ours stays in use until our
        # detach goes (``answer_detach``): a new attach is not given it meanwhile.
        del session.by_remote[perf.handle]
        if held:
            link.state = LinkState.DETACH_RECEIVED
        else:
            del session.links[link.handle]
            link.state = LinkState.DETACH_SENT  # nothing more goes out on it
        if not link.reported:
            self._events.append(
                LinkDetached(
                    channel=session.channel,
                    handle=link.handle,
                    closed=closed,
                    error=error,
                    local=local,
                )
            )

    def answer_detach(self, channel: int, handle: int) -> None:
        """Server with ``broker_answers_closing``: answer the peer's detach of our link
        ``handle`` (its ``LinkDetached``), which frees the handle; nothing once answered,
        or once the session's end or the connection's close went (they answer it)."""
        closed = self._detaches.pop((channel, handle), None)
        session = self._sessions.get(channel)
        if closed is None or session is None:
            return
        link = session.links.get(handle)
        if link is None or link.state is not LinkState.DETACH_RECEIVED:
            return
        del session.links[handle]
        link.state = LinkState.DETACH_SENT
        if session.state is SessionState.MAPPED and self.state is ConnectionState.OPENED:
            self._send(channel, Detach(handle=handle, closed=closed))

    # -- flow ---------------------------------------------------------------------------------

    def _session_flow(self, session: Session) -> Flow:
        return Flow(
            next_incoming_id=session.next_incoming_id,
            incoming_window=session.incoming_window,
            next_outgoing_id=session.next_outgoing_id,
            outgoing_window=session.outgoing_window,
        )

    def _link_flow(self, session: Session, link: Link, *, echo: bool = False) -> None:
        flow = self._session_flow(session)
        flow.handle = link.handle
        flow.delivery_count = link.delivery_count
        flow.link_credit = link.credit
        flow.drain = link.drain
        flow.echo = echo
        self._send(session.channel, flow)

    def grant_credit(self, channel: int, handle: int, credit: int, *, drain: bool = False) -> None:
        """Receiver: let the sender send ``credit`` more messages (``drain``: or say it has
        none)."""
        session, link = self._link(channel, handle)
        if link.role != Role.RECEIVER:
            raise LocalProtocolError("grant_credit() on a sending link")
        if not 0 <= credit <= SEQUENCE_MASK:
            raise LocalProtocolError(f"credit {credit} out of range")
        link.credit = credit
        link.drain = drain
        self._link_flow(session, link)

    def drained(self, channel: int, handle: int) -> None:
        """Sender: nothing more to send for a drain request: give up the remaining credit."""
        session, link = self._link(channel, handle)
        if link.role != Role.SENDER:
            raise LocalProtocolError("drained() on a receiving link")
        link.delivery_count = (link.delivery_count + link.credit) & SEQUENCE_MASK
        link.credit = 0
        self._link_flow(session, link)
        link.drain = False

    def send_flow(self, channel: int, handle: int | None = None, *, echo: bool = False) -> None:
        """Send our session (and, with ``handle``, link) flow state, asking for the peer's
        with ``echo``."""
        session = self._session(channel)
        if handle is None:
            flow = self._session_flow(session)
            flow.echo = echo
            self._send(channel, flow)
            return
        _, link = self._link(channel, handle)
        self._link_flow(session, link, echo=echo)

    def set_incoming_window(self, channel: int, window: int) -> None:
        """Change how many transfer frames the peer may send on the session from now on, and
        tell it (a flow). 0 stops the session's incoming transfers: the broker's back-pressure
        on a publisher; a peer that sends anyway ends the session with window-violation."""
        session = self._session(channel)
        if not 0 <= window <= SEQUENCE_MASK:
            raise LocalProtocolError(f"incoming window {window} out of range")
        session.incoming_window_size = window
        session.incoming_window = window
        self._send(channel, self._session_flow(session))

    def credit(self, channel: int, handle: int) -> int:
        """The link's credit as this side sees it."""
        return self._link(channel, handle)[1].credit

    def _on_flow(self, session: Session, perf: Flow) -> None:
        base = 0 if perf.next_incoming_id is None else perf.next_incoming_id
        session.remote_incoming_window = serial_diff(
            (base + perf.incoming_window) & SEQUENCE_MASK, session.next_outgoing_id
        )
        session.remote_outgoing_window = perf.outgoing_window
        if session.pending:
            self._flush_pending(session)
        if perf.handle is None:
            if perf.echo:
                self._send(session.channel, self._session_flow(session))
            return
        link = session.by_remote.get(perf.handle)
        if link is None:
            self._session_error(
                session,
                SessionErrorCondition.UNATTACHED_HANDLE,
                f"flow for unattached handle {perf.handle}",
            )
            return
        if link.state is LinkState.DETACH_SENT:
            return
        if link.role == Role.SENDER:
            rcv_count = (
                link.initial_delivery_count if perf.delivery_count is None else perf.delivery_count
            )
            credit = serial_diff(
                (rcv_count + (perf.link_credit or 0)) & SEQUENCE_MASK, link.delivery_count
            )
            link.credit = max(credit, 0)
            link.drain = perf.drain
            self._events.append(
                CreditGranted(
                    channel=session.channel,
                    handle=link.handle,
                    credit=link.credit,
                    drain=perf.drain,
                )
            )
        else:
            if perf.delivery_count is not None:
                link.delivery_count = perf.delivery_count
            if perf.link_credit is not None:
                link.credit = perf.link_credit
            self._events.append(
                FlowReceived(
                    channel=session.channel,
                    handle=link.handle,
                    delivery_count=link.delivery_count,
                    credit=link.credit,
                    available=perf.available,
                    drain=perf.drain,
                )
            )
        if perf.echo:
            self._link_flow(session, link)

    # -- transfers ----------------------------------------------------------------------------

    def send_transfer(
        self,
        channel: int,
        handle: int,
        payload: bytes | memoryview,
        *,
        delivery_tag: bytes | None = None,
        settled: bool = False,
        message_format: int = 0,
    ) -> int:
        """Send one message on our sending link; returns its delivery-id. Needs credit (see
        ``CreditGranted``); frames beyond the peer's session window wait for its flow."""
        session = self._sessions.get(channel)
        link = None if session is None else session.links.get(handle)
        if session is None or link is None or not link.sending:
            if link is not None and link.role == Role.RECEIVER:
                raise LocalProtocolError("send_transfer() on a receiving link")
            raise LocalProtocolError(f"no attached sending link {handle} on channel {channel}")
        if link.credit <= 0:
            raise LocalProtocolError(f"link {handle} on channel {channel} has no credit")
        encoder = link.encoder
        assert encoder is not None
        limit = link.peer_max_message_size
        if limit and len(payload) > limit:
            raise LocalProtocolError(
                f"message of {len(payload)} bytes exceeds the peer's max-message-size"
            )
        delivery_id = session.next_delivery_id
        session.next_delivery_id = (delivery_id + 1) & SEQUENCE_MASK
        if delivery_tag is None:
            delivery_tag = _TAG.pack(delivery_id)
        pieces = encoder.encode(delivery_id, delivery_tag, payload, settled, message_format)
        frames = 1 if len(pieces) == 2 else (len(pieces) + 1) // 3
        link.credit -= 1
        link.delivery_count = (link.delivery_count + 1) & SEQUENCE_MASK
        if not session.pending and session.remote_incoming_window >= frames:
            session.remote_incoming_window -= frames
            session.next_outgoing_id = (session.next_outgoing_id + frames) & SEQUENCE_MASK
            self._out += pieces
        else:
            # Frame by frame from here: the window may open a few frames at a time.
            session.pending.append((handle, pieces[:2]))
            session.pending.extend((handle, pieces[i : i + 3]) for i in range(2, len(pieces), 3))
            self._flush_pending(session)
        return delivery_id

    @staticmethod
    def _drop_pending(session: Session, handle: int | None = None) -> None:
        """Forget the frames still waiting for the window (all, or one link's): once a detach
        or an end has gone out, frames sent after it would reach a freed (or reused) handle."""
        if session.pending:
            if handle is None:
                session.pending.clear()
            else:
                session.pending = deque(p for p in session.pending if p[0] != handle)

    def _flush_pending(self, session: Session) -> None:
        pending = session.pending
        while pending and session.remote_incoming_window > 0:
            self._out += pending.popleft()[1]
            session.remote_incoming_window -= 1
            session.next_outgoing_id = (session.next_outgoing_id + 1) & SEQUENCE_MASK

    def settle(
        self,
        channel: int,
        first: int,
        last: int | None = None,
        *,
        role: bool,
        state: Value = _ACCEPTED_STATE,
        settled: bool = True,
        batchable: bool = False,
    ) -> None:
        """Send a disposition for deliveries ``first``..``last`` of the session; ``role`` is
        ours for them (``Role.RECEIVER`` for messages we received)."""
        self._session(channel)
        self._send(
            channel,
            Disposition(
                role=role,
                first=first,
                last=None if last == first else last,
                settled=settled,
                state=state,
                batchable=batchable,
            ),
        )

    def _on_transfer(self, channel: int, body: bytes) -> None:
        session = self._by_remote.get(channel)
        if session is None:
            raise AMQP10Error(
                AmqpErrorCondition.ILLEGAL_STATE, f"transfer on unmapped channel {channel}"
            )
        if session.state is not SessionState.MAPPED:
            return  # our end is out, or the peer's is in: nothing more is taken
        handle, delivery_id, tag, fmt, settled, more, _rsm, state, aborted, off = decode_transfer(
            body
        )
        window = session.incoming_window
        if window <= 0:
            self._session_error(
                session, SessionErrorCondition.WINDOW_VIOLATION, "transfer beyond incoming-window"
            )
            return
        session.incoming_window = window = window - 1
        session.next_incoming_id = (session.next_incoming_id + 1) & SEQUENCE_MASK
        if window <= session.incoming_window_size >> 1:
            session.incoming_window = session.incoming_window_size
            self._send(session.channel, self._session_flow(session))
        link = session.by_remote.get(handle)
        # The common case in one test: a whole message, on a receiving link with credit.
        if (
            link is not None
            and link.receiving
            and link.parts is None
            and not more
            and not aborted
            and delivery_id is not None
            and tag is not None
            and link.credit > 0
            and (not link.max_message_size or len(body) - off <= link.max_message_size)
        ):
            credit = link.credit - 1
            link.credit = credit
            link.delivery_count = (link.delivery_count + 1) & SEQUENCE_MASK
            self._events.append(
                _new_tuple(
                    MessageReceived,
                    (
                        session.channel,
                        link.handle,
                        delivery_id,
                        tag,
                        settled is True,
                        body[off:],
                        fmt,
                        state,
                    ),
                )
            )
            if link.auto_credit and credit <= link.auto_credit >> 1:
                link.credit = link.auto_credit
                self._link_flow(session, link)
            return
        if link is None:
            self._session_error(
                session,
                SessionErrorCondition.UNATTACHED_HANDLE,
                f"transfer on unattached handle {handle}",
            )
            return
        state_now = link.state
        if state_now is not LinkState.ATTACHED:
            if state_now is LinkState.DETACH_SENT:
                return
            self._link_error(
                session, link, AmqpErrorCondition.ILLEGAL_STATE, "transfer before attach"
            )
            return
        if link.role != Role.RECEIVER:
            self._link_error(
                session, link, AmqpErrorCondition.ILLEGAL_STATE, "transfer to a sending link"
            )
            return
        payload = body[off:]
        parts = link.parts
        if parts is None:
            if delivery_id is None or tag is None:
                self._link_error(
                    session,
                    link,
                    AmqpErrorCondition.INVALID_FIELD,
                    "first transfer of a delivery without delivery-id or delivery-tag",
                )
                return
            if link.credit <= 0:
                self._link_error(
                    session,
                    link,
                    LinkErrorCondition.TRANSFER_LIMIT_EXCEEDED,
                    "transfer without link credit",
                )
                return
            link.credit -= 1
            link.delivery_count = (link.delivery_count + 1) & SEQUENCE_MASK
            if aborted:
                return
            limit = link.max_message_size
            if limit and len(payload) > limit:
                self._link_error(
                    session,
                    link,
                    LinkErrorCondition.MESSAGE_SIZE_EXCEEDED,
                    f"message over max-message-size {limit}",
                )
                return
            if more:
                link.parts = [payload]
                link.part_size = len(payload)
                link.part_id = delivery_id
                link.part_tag = tag
                link.part_settled = bool(settled)
                link.part_format = fmt
                link.part_state = state
            else:
                self._events.append(
                    _new_tuple(
                        MessageReceived,
                        (
                            session.channel,
                            link.handle,
                            delivery_id,
                            tag,
                            bool(settled),
                            payload,
                            fmt,
                            state,
                        ),
                    )
                )
        else:
            if delivery_id is not None and delivery_id != link.part_id:
                self._link_error(
                    session,
                    link,
                    AmqpErrorCondition.INVALID_FIELD,
                    f"continuation of delivery {link.part_id} carries delivery-id {delivery_id}",
                )
                return
            if aborted:
                link.parts = None
                return
            parts.append(payload)
            link.part_size += len(payload)
            limit = link.max_message_size
            if limit and link.part_size > limit:
                self._link_error(
                    session,
                    link,
                    LinkErrorCondition.MESSAGE_SIZE_EXCEEDED,
                    f"message over max-message-size {limit}",
                )
                return
            if settled:
                link.part_settled = True
            if state is not None:
                link.part_state = state
            if not more:
                link.parts = None
                self._events.append(
                    _new_tuple(
                        MessageReceived,
                        (
                            session.channel,
                            link.handle,
                            link.part_id,
                            link.part_tag,
                            link.part_settled,
                            b"".join(parts),
                            link.part_format,
                            link.part_state,
                        ),
                    )
                )
        if link.auto_credit and link.credit <= link.auto_credit >> 1:
            link.credit = link.auto_credit
            self._link_flow(session, link)


_TAG = struct.Struct(">I")


def _stop_links(session: Session) -> None:
    """``session`` ends: none of its links takes a transfer any more."""
    for link in session.links.values():
        if link.state is LinkState.ATTACHED:
            link.state = LinkState.DETACH_SENT


def _after(
    items: list[Frame | ProtocolHeader], item: Frame | ProtocolHeader
) -> list[Frame | ProtocolHeader]:
    """The items after ``item`` (found by identity: equal frames may repeat)."""
    for index, candidate in enumerate(items):
        if candidate is item:
            return items[index + 1 :]
    return []


def _name(perf: Value) -> str:
    return perf.NAME if isinstance(perf, Composite) else type(perf).__name__
