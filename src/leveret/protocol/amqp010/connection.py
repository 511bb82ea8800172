"""The sans-IO AMQP 0-10 connection machine (server role, and client role for tests and tools).

Imported by a 0-10 front end (server/) and by tests; it imports only the amqp010 package.

Theory of operation
-------------------
The h11/h2 contract: :meth:`Connection.receive_data` takes bytes and the time, returns
:class:`~leveret.protocol.amqp010.events.Event` values; the owner answers through methods
(``accept_auth``, ``open_ok``, ``send_command``, ``complete``, ...), which only queue bytes;
:meth:`Connection.data_to_send` hands them over.  Time comes in as ``now`` (monotonic
seconds): :meth:`next_timer` says when :meth:`handle_timer` wants to run.

Connection states (spec class ``connection``; C = client, S = server)::

    AWAIT_HEADER --header--> S: AWAIT_START_OK        C: AWAIT_START
    AWAIT_START_OK --start-ok--> AUTHENTICATING       (owner: accept_auth / challenge / close)
    AUTHENTICATING --challenge()--> AWAIT_SECURE_OK --secure-ok--> AUTHENTICATING
    AUTHENTICATING --accept_auth()--> AWAIT_TUNE_OK --tune-ok--> AWAIT_OPEN
    AWAIT_OPEN --open--> OPENING --open_ok()--> OPEN  (owner may close(402) instead)
    C: AWAIT_START --start--> STARTING --start_ok()--> AWAIT_TUNE (secure handled there too)
    C: AWAIT_TUNE --tune--> (tune-ok and open sent) AWAIT_OPEN_OK --open-ok--> OPEN
    any --close sent--> CLOSING --close-ok--> CLOSED;  any --close received--> CLOSED
    S with ``broker_answers_close``: OPEN --close received--> CLOSE_RECEIVED (every session
        detached) --answer_close()--> CLOSED (close-ok sent)

Sessions (spec class ``session``) are attached to channels only while OPEN; their state is
:class:`~leveret.protocol.amqp010.session.Session`, kept in a
:class:`~leveret.protocol.amqp010.session.SessionTable` so that a session detached with a
non-zero timeout can be resumed from another connection.  On every (re)attachment the
sending side sends ``command-point`` and replays the commands the peer had not reported
complete; the receiving side discards ids it has already seen, so nothing runs twice.

What the machine does itself: ``execution.sync`` (complete once every earlier command is),
``session.completed`` when a command with the ``sync`` bit completes and in answer to
``session.flush``, ``known-completed`` echoes, ``session.timeout`` grants, heartbeats, and the
framing-error close on malformed input.  Everything with meaning for the broker becomes an
event.  Two simplifications: a command is replayed whole (``command-point`` offsets other
than 0 are refused), and ``session.expected``/``confirmed`` are only answered, not used.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from leveret.protocol.amqp010._generated import controls as C
from leveret.protocol.amqp010._generated.commands import (
    ExecutionException,
    ExecutionResult,
    ExecutionSync,
)
from leveret.protocol.amqp010._generated.constants import (
    MIN_MAX_FRAME_SIZE,
    ConnectionCloseCode,
    ExecutionErrorCode,
    SessionDetachCode,
)
from leveret.protocol.amqp010.errors import DecodeError, LocalProtocolError, ProtocolViolation
from leveret.protocol.amqp010.events import (
    CommandReceived,
    CommandsCompleted,
    ConnectionClosed,
    ConnectionFailed,
    ConnectionOpened,
    Event,
    ExceptionReceived,
    OpenRequested,
    Redirected,
    ResultReceived,
    SecureOkReceived,
    SecureReceived,
    SessionAttached,
    SessionDetached,
    StartOkReceived,
    StartReceived,
    Tuned,
)
from leveret.protocol.amqp010.framing import (
    MAX_FRAME_SIZE,
    PROTOCOL_HEADER,
    SEGMENT_CONTROL,
    Assembler,
    Assembly,
    FrameDecoder,
    encode_command,
    encode_control,
)
from leveret.protocol.amqp010.ops import decode_command, decode_control, encode_header, peek_code
from leveret.protocol.amqp010.sequence import SequenceSet, serial_add, serial_lt
from leveret.protocol.amqp010.session import Sent, Session, SessionTable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from leveret.protocol.amqp010.types import Buffer, Command, Control, Struct, Value

__all__ = ["Connection", "ConnectionConfig", "ConnectionState", "Role"]


class Role(enum.Enum):
    CLIENT = "client"
    SERVER = "server"


class ConnectionState(enum.Enum):
    AWAIT_HEADER = enum.auto()
    AWAIT_START = enum.auto()
    STARTING = enum.auto()
    AWAIT_START_OK = enum.auto()
    AUTHENTICATING = enum.auto()
    AWAIT_SECURE_OK = enum.auto()
    AWAIT_TUNE = enum.auto()
    AWAIT_TUNE_OK = enum.auto()
    AWAIT_OPEN = enum.auto()
    OPENING = enum.auto()
    AWAIT_OPEN_OK = enum.auto()
    OPEN = enum.auto()
    CLOSING = enum.auto()
    CLOSE_RECEIVED = enum.auto()  # the peer's close is in, ``answer_close`` is awaited
    CLOSED = enum.auto()


@dataclass(slots=True)
class ConnectionConfig:
    """What this end offers or asks for.  Server: ``mechanisms`` .. ``heartbeat_max``;
    client: ``virtual_host``, ``heartbeat``; both: ``channel_max``, ``max_frame_size``."""

    mechanisms: tuple[str, ...] = ("PLAIN", "ANONYMOUS")
    locales: tuple[str, ...] = ("en_US",)
    server_properties: dict[str, Value] = field(
        default_factory=lambda: {"product": "leveret", "platform": "Python"}
    )
    client_properties: dict[str, Value] = field(default_factory=lambda: {"product": "leveret"})
    channel_max: int = 2047
    max_frame_size: int = MAX_FRAME_SIZE
    heartbeat_min: int = 0
    heartbeat_max: int = 600
    heartbeat: int | None = None
    virtual_host: str = ""
    session_timeout_max: int = 3600
    max_assembly_size: int = 1 << 27
    # Server: the peer's session.detach is answered (session.detached) by ``answer_detach``,
    # not at once: the broker may answer once what the session held is let go elsewhere (a
    # subscription of a queue another node leads); it holds its input until then.
    broker_answers_detach: bool = False
    # Server: the peer's connection.close on an open connection is answered (close-ok) by
    # ``answer_close``, not at once: its sessions are detached first (``SessionDetached``
    # events before ``ConnectionClosed``), and the broker may answer once what they held is
    # let go elsewhere. Input after the close is ignored, as after close-ok.
    broker_answers_close: bool = False


_FRAMING_ERROR = int(ConnectionCloseCode.FRAMING_ERROR)
_NORMAL = int(ConnectionCloseCode.NORMAL)


class Connection:
    """One AMQP 0-10 connection (see the module docstring)."""

    def __init__(
        self,
        role: Role,
        config: ConnectionConfig | None = None,
        sessions: SessionTable | None = None,
    ) -> None:
        self.role = role
        self.config = config or ConnectionConfig()
        self.sessions = sessions if sessions is not None else SessionTable()
        self.state = ConnectionState.AWAIT_HEADER
        self.principal = ""
        self.channel_max = self.config.channel_max
        self.max_frame_size = MIN_MAX_FRAME_SIZE
        self.heartbeat = 0
        self._out: list[bytes] = []
        self._events: list[Event] = []
        self._header = b""
        self._decoder = FrameDecoder()
        self._assembler = Assembler(self.config.max_assembly_size)
        self._channels: dict[int, Session] = {}
        self._detaching: set[int] = set()
        # The peer's detaches the broker answers (``broker_answers_detach``): by channel.
        self._unanswered: dict[int, bytes] = {}
        self._known_completed: dict[int, SequenceSet] = {}
        self._last_received: float | None = None
        self._next_heartbeat: float | None = None
        self._sent_since_tick = False

    # -- I/O -----------------------------------------------------------------------------------

    def initiate(self) -> None:
        """Client: send the protocol header (the server waits for the client's)."""
        if self.role is not Role.CLIENT or self.state is not ConnectionState.AWAIT_HEADER:
            raise LocalProtocolError("only a new client connection initiates")
        self._write(PROTOCOL_HEADER)

    def data_to_send(self) -> bytes:
        """Everything queued for the peer since the last call."""
        data = b"".join(self._out)
        self._out.clear()
        return data

    def receive_data(self, data: Buffer, now: float) -> list[Event]:
        """Feed bytes received at ``now``; return what they meant."""
        if self.state in (ConnectionState.CLOSED, ConnectionState.CLOSE_RECEIVED):
            return self._take_events()
        self._last_received = now
        try:
            self._receive(bytes(data), now)
        except ProtocolViolation as exc:
            self._fail_with_close(exc.close_code, exc.text)
        self._flush_known_completed()
        return self._take_events()

    def connection_lost(self, now: float) -> list[Event]:
        """The transport is gone: detach every session (kept for resume per its timeout)."""
        for channel in list(self._channels):
            session = self._unbind(channel, now)
            self._events.append(
                SessionDetached(channel, session.name, int(SessionDetachCode.NORMAL), True)
            )
        self.state = ConnectionState.CLOSED
        return self._take_events()

    def next_timer(self) -> float | None:
        """When :meth:`handle_timer` should next run (``None``: no timer needed)."""
        if not self.heartbeat or self.state is ConnectionState.CLOSED:
            return None
        assert self._next_heartbeat is not None
        assert self._last_received is not None
        return min(self._next_heartbeat, self._last_received + 2 * self.heartbeat)

    def handle_timer(self, now: float) -> list[Event]:
        """Send a heartbeat if we have been quiet, and give up on a silent peer (spec:
        twice the heartbeat delay without traffic)."""
        if not self.heartbeat or self.state is ConnectionState.CLOSED:
            return self._take_events()
        assert self._next_heartbeat is not None
        assert self._last_received is not None
        if now - self._last_received >= 2 * self.heartbeat:
            self.state = ConnectionState.CLOSED
            self._events.append(ConnectionFailed("heartbeat timeout"))
            return self._take_events()
        if now >= self._next_heartbeat:
            if not self._sent_since_tick:
                self._control(0, C.ConnectionHeartbeat())
            self._sent_since_tick = False
            self._next_heartbeat = now + self.heartbeat
        return self._take_events()

    # -- connection negotiation (owner's answers) -----------------------------------------------

    def accept_auth(self, principal: str) -> None:
        """Server: authentication succeeded as ``principal``; send ``tune``."""
        self._expect(Role.SERVER, ConnectionState.AUTHENTICATING)
        self.principal = principal
        cfg = self.config
        self._control(
            0,
            C.ConnectionTune(
                channel_max=cfg.channel_max,
                max_frame_size=cfg.max_frame_size,
                heartbeat_min=cfg.heartbeat_min,
                heartbeat_max=cfg.heartbeat_max,
            ),
        )
        self.state = ConnectionState.AWAIT_TUNE_OK

    def challenge(self, data: bytes) -> None:
        """Server: send a SASL challenge (``connection.secure``)."""
        self._expect(Role.SERVER, ConnectionState.AUTHENTICATING)
        self._control(0, C.ConnectionSecure(challenge=data))
        self.state = ConnectionState.AWAIT_SECURE_OK

    def open_ok(self, known_hosts: Sequence[str] = ()) -> list[Event]:
        """Server: accept ``connection.open``."""
        self._expect(Role.SERVER, ConnectionState.OPENING)
        self._control(0, C.ConnectionOpenOk(known_hosts=list(known_hosts)))
        self.state = ConnectionState.OPEN
        return [ConnectionOpened(list(known_hosts))]

    def start_ok(
        self,
        mechanism: str,
        response: bytes,
        client_properties: dict[str, Value] | None = None,
        locale: str = "en_US",
    ) -> None:
        """Client: choose a mechanism and send its initial response."""
        self._expect(Role.CLIENT, ConnectionState.STARTING)
        props = self.config.client_properties if client_properties is None else client_properties
        self._control(
            0,
            C.ConnectionStartOk(
                client_properties=props, mechanism=mechanism, response=response, locale=locale
            ),
        )
        self.state = ConnectionState.AWAIT_TUNE

    def secure_ok(self, response: bytes) -> None:
        """Client: answer a challenge."""
        self._expect(Role.CLIENT, ConnectionState.AWAIT_TUNE)
        self._control(0, C.ConnectionSecureOk(response=response))

    def close(self, reply_code: int = _NORMAL, reply_text: str = "") -> None:
        """Start the close handshake (the owner may do so in any state but CLOSED); with
        the peer's close unanswered, answer it instead."""
        if self.state is ConnectionState.CLOSE_RECEIVED:
            self.answer_close()
            return
        if self.state in (ConnectionState.CLOSING, ConnectionState.CLOSED):
            return
        if self.state is ConnectionState.AWAIT_HEADER and self.role is Role.SERVER:
            self._write(PROTOCOL_HEADER)
        self._control(0, C.ConnectionClose(reply_code=reply_code, reply_text=reply_text))
        self.state = ConnectionState.CLOSING

    # -- sessions (owner's actions) ---------------------------------------------------------

    def session(self, channel: int) -> Session | None:
        """The session attached to ``channel``, if any."""
        return self._channels.get(channel)

    def attach(
        self, channel: int, name: bytes, *, force: bool = False, session: Session | None = None
    ) -> Session:
        """Client: attach ``name`` to ``channel`` (pass ``session`` to resume its state)."""
        self._expect(Role.CLIENT, ConnectionState.OPEN)
        if channel in self._channels:
            raise LocalProtocolError(f"channel {channel} already has a session")
        ssn = session if session is not None else Session(name)
        self._bind(ssn, channel)
        self._control(channel, C.SessionAttach(name=name, force=force))
        return ssn

    def detach(self, channel: int) -> None:
        """Ask the peer to detach the session on ``channel`` (SessionDetached follows)."""
        ssn = self._attached(channel)
        self._detaching.add(channel)
        self._control(channel, C.SessionDetach(name=ssn.name))

    def request_timeout(self, channel: int, seconds: int) -> None:
        """Ask the peer to keep this session's state ``seconds`` after a detach."""
        self._attached(channel)
        self._control(channel, C.SessionRequestTimeout(timeout=seconds))

    def send_command(
        self,
        channel: int,
        command: Command,
        *,
        sync: bool = False,
        header: Sequence[Struct] | bytes | None = None,
        body: bytes | None = None,
    ) -> int:
        """Send a command on the session of ``channel``; return its command id."""
        ssn = self._attached(channel)
        header_bytes = (
            header if header is None or isinstance(header, bytes) else encode_header(header)
        )
        sent = Sent(command.encode(sync), header_bytes, body)
        if ssn.needs_command_point:
            self._control(channel, C.SessionCommandPoint(command_id=ssn.next_out, command_offset=0))
            ssn.needs_command_point = False
        command_id = ssn.next_out
        ssn.next_out = serial_add(command_id, 1)
        ssn.unacked[command_id] = sent
        self._send_sent(channel, sent)
        return command_id

    def send_result(self, channel: int, command_id: int, value: Struct) -> int:
        """Send ``execution.result`` for the received command ``command_id``."""
        return self.send_command(channel, ExecutionResult(command_id=command_id, value=value))

    def send_exception(
        self,
        channel: int,
        error_code: int,
        description: str = "",
        *,
        command_id: int | None = None,
        command: Command | None = None,
        field_index: int | None = None,
        error_info: dict[str, Value] | None = None,
    ) -> int:
        """Send ``execution.exception``; the session then ignores further commands (as Qpid
        brokers do) until it is detached."""
        ssn = self._attached(channel)
        code = command.CODE if command is not None else None
        exc = ExecutionException(
            error_code=error_code,
            command_id=command_id,
            class_code=None if code is None else code >> 8,
            command_code=None if code is None else code & 0xFF,
            field_index=field_index,
            description=description,
            error_info=error_info,
        )
        ssn.errored = True
        return self.send_command(channel, exc)

    def complete(self, channel: int, command_id: int) -> None:
        """Mark the received command ``command_id`` complete (``session.completed`` follows at
        once if it had the ``sync`` bit, and for any ``execution.sync`` it unblocks)."""
        ssn = self._attached(channel)
        if command_id not in ssn.incomplete:
            raise LocalProtocolError(f"command {command_id} is not awaiting completion")
        ssn.incomplete.remove(command_id)
        ssn.completed.add(command_id)
        notify = command_id in ssn.sync_requested
        ssn.sync_requested.discard(command_id)
        if self._release_syncs(ssn) or notify:
            self._control(channel, self._completed_control(ssn))

    @staticmethod
    def _completed_control(ssn: Session) -> C.SessionCompleted:
        # timely-reply: the peer answers with known-completed at once, which keeps the
        # completed set short (peers such as Qpid's clients send it only when asked).
        return C.SessionCompleted(commands=ssn.completed.copy(), timely_reply=True)

    def send_completed(self, channel: int, *, timely_reply: bool = False) -> None:
        """Report every completed command the peer does not yet know about."""
        ssn = self._attached(channel)
        self._control(
            channel, C.SessionCompleted(commands=ssn.completed.copy(), timely_reply=timely_reply)
        )

    def flush(
        self,
        channel: int,
        *,
        expected: bool = False,
        confirmed: bool = False,
        completed: bool = True,
    ) -> None:
        """Ask the peer for its command sets (``session.flush``)."""
        self._attached(channel)
        self._control(
            channel, C.SessionFlush(expected=expected, confirmed=confirmed, completed=completed)
        )

    # -- internals: output --------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        self._out.append(data)
        self._sent_since_tick = True

    def _control(self, channel: int, control: Control) -> None:
        self._write(encode_control(channel, control, self.max_frame_size))

    def _send_sent(self, channel: int, sent: Sent) -> None:
        self._write(
            encode_command(
                channel,
                sent.segment,
                header=sent.header,
                body=sent.body,
                max_frame_size=self.max_frame_size,
            )
        )

    def _take_events(self) -> list[Event]:
        events, self._events = self._events, []
        return events

    def _expect(self, role: Role, state: ConnectionState) -> None:
        if self.role is not role or self.state is not state:
            raise LocalProtocolError(
                f"not allowed for a {self.role.value} in state {self.state.name}"
            )

    def _attached(self, channel: int) -> Session:
        if self.state is not ConnectionState.OPEN:
            raise LocalProtocolError(f"connection is {self.state.name}, not OPEN")
        ssn = self._channels.get(channel)
        if ssn is None:
            raise LocalProtocolError(f"no session on channel {channel}")
        return ssn

    def _fail_with_close(self, code: int, text: str) -> None:
        if self.state in (
            ConnectionState.CLOSING,
            ConnectionState.CLOSED,
            ConnectionState.CLOSE_RECEIVED,
        ):
            return
        if self.state in (ConnectionState.AWAIT_HEADER, ConnectionState.AWAIT_START):
            # No frames can be exchanged before both headers: just go (spec 4.2).
            self.state = ConnectionState.CLOSED
            self._events.append(ConnectionFailed(text))
            return
        self._control(0, C.ConnectionClose(reply_code=code, reply_text=text[:255]))
        self.state = ConnectionState.CLOSING

    # -- internals: input ---------------------------------------------------------------------

    def _receive(self, data: bytes, now: float) -> None:
        if self.state is ConnectionState.AWAIT_HEADER:
            self._header += data
            if len(self._header) < len(PROTOCOL_HEADER):
                return
            header, data = self._header[:8], self._header[8:]
            self._header = b""
            if header != PROTOCOL_HEADER:
                if self.role is Role.SERVER:
                    self._write(PROTOCOL_HEADER)  # tell the client what we speak
                self.state = ConnectionState.CLOSED
                self._events.append(ConnectionFailed(f"unsupported protocol header {header!r}"))
                return
            if self.role is Role.SERVER:
                cfg = self.config
                self._write(PROTOCOL_HEADER)
                self._control(
                    0,
                    C.ConnectionStart(
                        server_properties=cfg.server_properties,
                        mechanisms=list(cfg.mechanisms),
                        locales=list(cfg.locales),
                    ),
                )
                self.state = ConnectionState.AWAIT_START_OK
            else:
                self.state = ConnectionState.AWAIT_START
        try:
            frames = self._decoder.feed(data)
        except ProtocolViolation as exc:
            # Frame boundaries are lost: nothing more can be read, so no close-ok either.
            self._fail_with_close(exc.close_code, exc.text)
            self.state = ConnectionState.CLOSED
            self._events.append(ConnectionFailed(exc.text))
            return
        for frame in frames:
            if self.state in (ConnectionState.CLOSED, ConnectionState.CLOSE_RECEIVED):
                return
            assembly = self._assembler.add(frame)
            if assembly is not None:
                self._dispatch(assembly, now)

    def _dispatch(self, assembly: Assembly, now: float) -> None:
        if assembly.segment_type == SEGMENT_CONTROL:
            try:
                control = decode_control(assembly.payload)
            except DecodeError as exc:
                raise ProtocolViolation(str(exc)) from exc
            if isinstance(control, _CONNECTION_CONTROLS):
                self._on_connection_control(control, now)
            elif self.state is ConnectionState.CLOSING:
                return  # after close, only close-ok matters
            elif self.state is not ConnectionState.OPEN:
                raise ProtocolViolation(f"{control.NAME} before the connection is open")
            else:
                self._on_session_control(assembly.channel, control, now)
        elif self.state is ConnectionState.CLOSING:
            return
        elif self.state is not ConnectionState.OPEN:
            raise ProtocolViolation("command before the connection is open")
        else:
            self._on_command(assembly)

    def _on_connection_control(self, control: Control, now: float) -> None:
        state = self.state
        if isinstance(control, C.ConnectionClose):
            if (
                state is ConnectionState.OPEN
                and self.role is Role.SERVER
                and self.config.broker_answers_close
            ):
                self._close_received(control, now)
                return
            if state is not ConnectionState.CLOSING:
                self._control(0, C.ConnectionCloseOk())
            self.state = ConnectionState.CLOSED
            self._events.append(
                ConnectionClosed(control.reply_code or 0, control.reply_text or "", True)
            )
        elif isinstance(control, C.ConnectionCloseOk):
            if state is not ConnectionState.CLOSING:
                raise ProtocolViolation("close-ok without close")
            self.state = ConnectionState.CLOSED
            self._events.append(ConnectionClosed(_NORMAL, "", False))
        elif state is ConnectionState.CLOSING or isinstance(control, C.ConnectionHeartbeat):
            return
        elif self.role is Role.SERVER:
            self._on_server_negotiation(control)
        else:
            self._on_client_negotiation(control)

    def _on_server_negotiation(self, control: Control) -> None:
        state = self.state
        if isinstance(control, C.ConnectionStartOk) and state is ConnectionState.AWAIT_START_OK:
            mechanism = control.mechanism or ""
            if mechanism not in self.config.mechanisms:
                # Spec rule connection.start-ok.mechanism "validity": close without a word.
                self.state = ConnectionState.CLOSED
                self._events.append(ConnectionFailed(f"mechanism {mechanism!r} not offered"))
                return
            self.state = ConnectionState.AUTHENTICATING
            self._events.append(
                StartOkReceived(
                    mechanism,
                    control.response or b"",
                    control.client_properties or {},
                    control.locale or "",
                )
            )
        elif isinstance(control, C.ConnectionSecureOk) and state is ConnectionState.AWAIT_SECURE_OK:
            self.state = ConnectionState.AUTHENTICATING
            self._events.append(SecureOkReceived(control.response or b""))
        elif isinstance(control, C.ConnectionTuneOk) and state is ConnectionState.AWAIT_TUNE_OK:
            self._apply_tune_ok(control)
            self.state = ConnectionState.AWAIT_OPEN
        elif isinstance(control, C.ConnectionOpen) and state is ConnectionState.AWAIT_OPEN:
            self.state = ConnectionState.OPENING
            self._events.append(
                OpenRequested(
                    control.virtual_host or "", control.capabilities or [], control.insist
                )
            )
        else:
            raise ProtocolViolation(f"unexpected {control.NAME} in state {state.name}")

    def _apply_tune_ok(self, control: C.ConnectionTuneOk) -> None:
        cfg = self.config
        channel_max = control.channel_max or cfg.channel_max
        frame_size = control.max_frame_size or cfg.max_frame_size
        heartbeat = control.heartbeat or 0
        if channel_max > cfg.channel_max:
            raise ProtocolViolation(f"tune-ok channel-max {channel_max} above {cfg.channel_max}")
        if not MIN_MAX_FRAME_SIZE <= frame_size <= cfg.max_frame_size:
            raise ProtocolViolation(f"tune-ok max-frame-size {frame_size} out of range")
        if heartbeat and not cfg.heartbeat_min <= heartbeat <= cfg.heartbeat_max:
            raise ProtocolViolation(f"tune-ok heartbeat {heartbeat} out of range")
        self._tuned(channel_max, frame_size, heartbeat)

    def _tuned(self, channel_max: int, frame_size: int, heartbeat: int) -> None:
        self.channel_max = channel_max
        self.max_frame_size = frame_size
        self._decoder.max_frame_size = frame_size
        self.heartbeat = heartbeat
        if heartbeat:
            assert self._last_received is not None
            self._next_heartbeat = self._last_received + heartbeat
        self._events.append(Tuned(channel_max, frame_size, heartbeat))

    def _on_client_negotiation(self, control: Control) -> None:
        state = self.state
        cfg = self.config
        if isinstance(control, C.ConnectionStart) and state is ConnectionState.AWAIT_START:
            self.state = ConnectionState.STARTING
            self._events.append(
                StartReceived(
                    control.server_properties or {},
                    control.mechanisms or [],
                    control.locales or [],
                )
            )
        elif isinstance(control, C.ConnectionSecure) and state is ConnectionState.AWAIT_TUNE:
            self._events.append(SecureReceived(control.challenge or b""))
        elif isinstance(control, C.ConnectionTune) and state is ConnectionState.AWAIT_TUNE:
            channel_max = min(cfg.channel_max, control.channel_max or cfg.channel_max)
            frame_size = min(cfg.max_frame_size, control.max_frame_size or cfg.max_frame_size)
            heartbeat = 0
            if cfg.heartbeat and control.heartbeat_min is not None:
                low, high = control.heartbeat_min, control.heartbeat_max or cfg.heartbeat
                heartbeat = max(low, min(high, cfg.heartbeat))
            self._control(
                0,
                C.ConnectionTuneOk(
                    channel_max=channel_max,
                    max_frame_size=frame_size,
                    heartbeat=heartbeat or None,
                ),
            )
            self._tuned(channel_max, frame_size, heartbeat)
            self._control(0, C.ConnectionOpen(virtual_host=cfg.virtual_host))
            self.state = ConnectionState.AWAIT_OPEN_OK
        elif isinstance(control, C.ConnectionOpenOk) and state is ConnectionState.AWAIT_OPEN_OK:
            self.state = ConnectionState.OPEN
            self._events.append(ConnectionOpened(control.known_hosts or []))
        elif isinstance(control, C.ConnectionRedirect) and state is ConnectionState.AWAIT_OPEN_OK:
            self.close(_NORMAL, "redirected")
            self._events.append(Redirected(control.host or "", control.known_hosts or []))
        else:
            raise ProtocolViolation(f"unexpected {control.NAME} in state {state.name}")

    # -- internals: sessions ------------------------------------------------------------------

    def _bind(self, ssn: Session, channel: int) -> None:
        ssn.connection = self
        ssn.channel = channel
        ssn.detached_at = None
        ssn.needs_command_point = True
        ssn.next_in = None
        self._channels[channel] = ssn

    def _unbind(self, channel: int, now: float) -> Session:
        ssn = self._channels.pop(channel)
        self._detaching.discard(channel)
        self._known_completed.pop(channel, None)
        self._assembler.discard(channel)
        ssn.connection = None
        ssn.channel = None
        if ssn.timeout > 0:
            ssn.detached_at = now
            self.sessions.add(ssn)
        else:
            self.sessions.discard(ssn)
        return ssn

    def _close_received(self, control: C.ConnectionClose, now: float) -> None:
        """The peer's close, left to ``answer_close``: its sessions detach first (kept for
        resume per their timeout, as when the transport goes), then the close is reported."""
        self.state = ConnectionState.CLOSE_RECEIVED
        self._unanswered.clear()
        for channel in list(self._channels):
            ssn = self._unbind(channel, now)
            self._events.append(
                SessionDetached(channel, ssn.name, int(SessionDetachCode.NORMAL), True)
            )
        self._events.append(
            ConnectionClosed(control.reply_code or 0, control.reply_text or "", True)
        )

    def answer_close(self) -> None:
        """Server with ``broker_answers_close``: answer the peer's connection.close (its
        ``ConnectionClosed``) with close-ok; nothing once answered."""
        if self.state is ConnectionState.CLOSE_RECEIVED:
            self._control(0, C.ConnectionCloseOk())
            self.state = ConnectionState.CLOSED

    def answer_detach(self, channel: int) -> None:
        """Server with ``broker_answers_detach``: answer the peer's session.detach on
        ``channel`` (its ``SessionDetached``); nothing when none waits, or once closed."""
        name = self._unanswered.pop(channel, None)
        if name is not None and self.state is ConnectionState.OPEN:
            code = int(SessionDetachCode.NORMAL)
            self._control(channel, C.SessionDetached(name=name, code=code))

    def take_over(self, channel: int, now: float) -> None:
        """Another connection force-attached the session on ``channel`` (``Attachment``)."""
        ssn = self._unbind(channel, now)
        code = int(SessionDetachCode.SESSION_BUSY)
        self._control(channel, C.SessionDetached(name=ssn.name, code=code))
        self._events.append(SessionDetached(channel, ssn.name, code, False))

    def pending_events(self) -> list[Event]:
        """Events raised on this connection by another one (a forced session takeover)."""
        return self._take_events()

    def _replay(self, ssn: Session, channel: int) -> None:
        """Resend, from a command-point, every command the peer has not completed."""
        if not ssn.unacked:
            return
        first = min(ssn.unacked, key=lambda i: (i - ssn.next_out) & 0xFFFFFFFF)
        expected: int | None = None
        for command_id in sorted(ssn.unacked, key=lambda i: (i - first) & 0xFFFFFFFF):
            # Commands completed out of order leave gaps: each one needs a new command-point,
            # or the receiver would number what follows it wrongly.
            if command_id != expected:
                self._control(
                    channel, C.SessionCommandPoint(command_id=command_id, command_offset=0)
                )
            self._send_sent(channel, ssn.unacked[command_id])
            expected = serial_add(command_id, 1)
        ssn.needs_command_point = expected != ssn.next_out

    def _on_session_control(self, channel: int, control: Control, now: float) -> None:
        if isinstance(control, C.SessionAttach):
            self._on_attach(channel, control, now)
            return
        ssn = self._channels.get(channel)
        if isinstance(control, C.SessionDetached):
            if ssn is not None and (control.name or b"") == ssn.name:
                by_peer = channel not in self._detaching
                self._unbind(channel, now)
                code = control.code if control.code is not None else 0
                self._events.append(SessionDetached(channel, ssn.name, code, by_peer))
            return
        if ssn is None:
            # Spec rule session "attachment": discard, and say the transport is not attached
            # (an attached for a session we gave up on needs no answer).
            if not isinstance(control, C.SessionAttached):
                name = control.name if isinstance(control, C.SessionDetach) else None
                code = int(SessionDetachCode.NOT_ATTACHED)
                self._control(channel, C.SessionDetached(name=name, code=code))
            return
        if isinstance(control, C.SessionAttached):
            resumed = bool(ssn.unacked) or ssn.highest_in is not None
            self._events.append(SessionAttached(channel, ssn.name, resumed))
            self._replay(ssn, channel)
        elif isinstance(control, C.SessionDetach):
            if self.role is Role.SERVER and self.config.broker_answers_detach:
                self._unanswered[channel] = ssn.name
            else:
                self._control(
                    channel,
                    C.SessionDetached(name=ssn.name, code=int(SessionDetachCode.NORMAL)),
                )
            self._unbind(channel, now)
            self._events.append(
                SessionDetached(channel, ssn.name, int(SessionDetachCode.NORMAL), True)
            )
        elif isinstance(control, C.SessionRequestTimeout):
            wanted = control.timeout
            limit = self.config.session_timeout_max
            ssn.timeout = limit if wanted is None else min(wanted, limit)
            self._control(channel, C.SessionTimeout(timeout=ssn.timeout))
        elif isinstance(control, C.SessionTimeout):
            ssn.timeout = control.timeout or 0
        elif isinstance(control, C.SessionCommandPoint):
            if control.command_offset:
                raise ProtocolViolation("command-point with a non-zero offset is not supported")
            ssn.next_in = control.command_id or 0
        elif isinstance(control, C.SessionCompleted):
            done = control.commands or SequenceSet()
            ssn.unacked = {i: s for i, s in ssn.unacked.items() if i not in done}
            if done:
                self._events.append(CommandsCompleted(channel, done))
                if control.timely_reply:
                    # Only when asked: Qpid's qpid.messaging client has no handler for an
                    # unsolicited known-completed and fails its connection on one.
                    self._known_completed.setdefault(channel, SequenceSet()).add_set(done)
        elif isinstance(control, C.SessionKnownCompleted):
            ssn.completed.remove_set(control.commands or SequenceSet())
        elif isinstance(control, C.SessionFlush):
            if control.expected:
                expected = SequenceSet()
                if ssn.next_in is not None:
                    expected.add(ssn.next_in)
                self._control(channel, C.SessionExpected(commands=expected))
            if control.confirmed:
                self._control(channel, C.SessionConfirmed(commands=ssn.completed.copy()))
            if control.completed:
                self._control(channel, self._completed_control(ssn))
        elif isinstance(control, C.SessionGap):
            for lower, upper in control.commands or SequenceSet():
                ssn.completed.add_range(lower, upper)
                ssn.incomplete.remove_range(lower, upper)
                if ssn.next_in is not None and ssn.next_in in SequenceSet([(lower, upper)]):
                    ssn.next_in = serial_add(upper, 1)
        # session.expected and session.confirmed need no answer (see the module docstring).

    def _on_attach(self, channel: int, control: C.SessionAttach, now: float) -> None:
        name = control.name or b""
        busy = int(SessionDetachCode.TRANSPORT_BUSY)
        if channel >= self.channel_max:
            raise ProtocolViolation(f"channel {channel} beyond channel-max {self.channel_max}")
        current = self._channels.get(channel)
        if current is not None:
            if current.name == name:
                self._control(channel, C.SessionAttached(name=name))  # idempotent
            else:
                self._control(channel, C.SessionDetached(name=name, code=busy))
            return
        ssn = self.sessions.get(self.principal, name)
        resumed = False
        if ssn is not None and ssn.connection is not None:
            if not control.force:
                code = int(SessionDetachCode.SESSION_BUSY)
                self._control(channel, C.SessionDetached(name=name, code=code))
                return
            assert ssn.channel is not None
            ssn.connection.take_over(ssn.channel, now)
        if ssn is None:
            ssn = Session(name, principal=self.principal)
        else:
            resumed = True
        self.sessions.add(ssn)
        self._bind(ssn, channel)
        self._control(channel, C.SessionAttached(name=name))
        self._events.append(SessionAttached(channel, name, resumed))
        self._replay(ssn, channel)

    def _on_command(self, assembly: Assembly) -> None:
        channel = assembly.channel
        ssn = self._channels.get(channel)
        if ssn is None:
            self._control(channel, C.SessionDetached(code=int(SessionDetachCode.NOT_ATTACHED)))
            return
        if ssn.next_in is None:
            # Spec rule session.command-point "newly-attached-transports".
            code = int(SessionDetachCode.UNKNOWN_IDS)
            self._control(channel, C.SessionDetached(name=ssn.name, code=code))
            self._unbind(channel, self._last_received or 0.0)
            self._events.append(SessionDetached(channel, ssn.name, code, False))
            return
        command_id = ssn.next_in
        ssn.next_in = serial_add(command_id, 1)
        if ssn.is_duplicate(command_id):
            return  # replayed after a resume: already executed (or being executed)
        ssn.highest_in = command_id
        if ssn.errored:
            return
        try:
            command, sync = decode_command(assembly.payload)
        except DecodeError as exc:
            code = peek_code(assembly.payload) or 0
            self._receive_exception(ssn, channel, command_id, code, str(exc))
            return
        ssn.incomplete.add(command_id)
        if sync:
            ssn.sync_requested.add(command_id)
        if isinstance(command, ExecutionSync):
            ssn.incomplete.remove(command_id)
            ssn.pending_syncs.append(command_id)
            if self._release_syncs(ssn):
                self._control(channel, self._completed_control(ssn))
            return
        if isinstance(command, ExecutionResult):
            self._events.append(ResultReceived(channel, command.command_id or 0, command.value))
            self.complete(channel, command_id)
            return
        if isinstance(command, ExecutionException):
            self._events.append(ExceptionReceived(channel, command))
            self.complete(channel, command_id)
            return
        self._events.append(
            CommandReceived(channel, command_id, command, sync, assembly.header, assembly.body)
        )

    def _receive_exception(
        self, ssn: Session, channel: int, command_id: int, code: int, text: str
    ) -> None:
        exc = ExecutionException(
            error_code=int(ExecutionErrorCode.COMMAND_INVALID),
            command_id=command_id,
            class_code=code >> 8,
            command_code=code & 0xFF,
            description=text[:65535],
        )
        ssn.errored = True
        self.send_command(channel, exc)

    def _release_syncs(self, ssn: Session) -> bool:
        """Complete the execution.syncs no earlier incomplete command holds back; return
        whether any of them asked (sync bit) to be told."""
        notify = False
        first = ssn.incomplete.first()
        keep: list[int] = []
        for sync_id in ssn.pending_syncs:
            if first is None or not serial_lt(first, sync_id):
                ssn.completed.add(sync_id)
                if sync_id in ssn.sync_requested:
                    ssn.sync_requested.discard(sync_id)
                    notify = True
            else:
                keep.append(sync_id)
        ssn.pending_syncs = keep
        return notify

    def _flush_known_completed(self) -> None:
        # One known-completed per channel per batch of input, echoing what was completed.
        for channel, done in self._known_completed.items():
            if channel in self._channels:
                self._control(channel, C.SessionKnownCompleted(commands=done))
        self._known_completed.clear()


_CONNECTION_CONTROLS = (
    C.ConnectionStart,
    C.ConnectionStartOk,
    C.ConnectionSecure,
    C.ConnectionSecureOk,
    C.ConnectionTune,
    C.ConnectionTuneOk,
    C.ConnectionOpen,
    C.ConnectionOpenOk,
    C.ConnectionRedirect,
    C.ConnectionHeartbeat,
    C.ConnectionClose,
    C.ConnectionCloseOk,
)
