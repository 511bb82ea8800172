"""The server role of RabbitMQ's stream protocol as a sans-IO machine: bytes in, commands
and events out, encoded frames written into an ``Output`` (``protocol/output.py``).

The broker's front end (``server/rabbitstream/``) drives it and keeps only the meaning of
the commands in the core; the connection's lifecycle (handshake deadline, the delay of a
refused login, heartbeats, turns) is the front-end shell's.

Theory of operation (``deps/rabbitmq_stream/docs/PROTOCOL.adoc``, "Connection set up"):

    PEER_PROPERTIES --peer-properties--> SASL (answered with the server's properties)
    SASL --sasl-handshake--> SASL (answered with the mechanisms offered)
    SASL --sasl-authenticate--> AUTHENTICATING: ``LoginRequested``, nothing more is read
        until ``accept_login`` (response OK and the server's tune --> TUNE) or
        ``refuse_login(code)`` (the response with that code --> CLOSED)
    TUNE --tune--> OPEN: ``Tuned`` with the lower non-zero frame_max and heartbeat
    OPEN --open--> OPENING: ``OpenRequested``, nothing more is read until ``accept_open``
        (--> RUNNING) or ``refuse_open(code)`` (--> CLOSED)
    RUNNING: every command of ``ACCEPTED[RUNNING]`` is returned as it is, for the broker
    any state --close--> CLOSED (answered OK); ``close`` --> CLOSING --its response--> CLOSED

A command a state does not take, and a frame the codec refuses, close the connection with
unknown-frame (or the codec's code): ``Closed``. Heartbeats are taken in every state and
returned to nobody (the shell sends ours and watches the peer's silence).

``next_event()`` returns one command or event at a time (None when nothing is ready or an
answer is awaited), so a turn can stop after any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto
from typing import TYPE_CHECKING, Final

from leveret.protocol.output import Output
from leveret.protocol.rabbitstream import commands as c
from leveret.protocol.rabbitstream.codec import Role, StreamCodec
from leveret.protocol.rabbitstream.constants import RESPONSE, Code, Key
from leveret.protocol.rabbitstream.errors import StreamProtocolError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ACCEPTED",
    "OUTPUT_HIGH_WATER",
    "Closed",
    "LoginRequested",
    "OpenRequested",
    "ServerConfig",
    "ServerConnection",
    "ServerState",
    "Tuned",
]

# Pending output (bytes of chunks) past which no more chunks are handed to the connection
# until it is written: a deep stream is never read into memory all at once.
OUTPUT_HIGH_WATER: Final = 1 << 20


class ServerState(Enum):
    PEER_PROPERTIES = auto()
    SASL = auto()
    AUTHENTICATING = auto()  # LoginRequested is out: the broker's answer is awaited
    TUNE = auto()
    OPEN = auto()
    OPENING = auto()  # OpenRequested is out: the broker's answer is awaited
    RUNNING = auto()
    CLOSING = auto()  # we sent close: waiting for its response
    CLOSED = auto()


# Which client commands each state takes (heartbeats and close are taken in every state
# but CLOSED).
ACCEPTED: dict[ServerState, frozenset[int]] = {
    ServerState.PEER_PROPERTIES: frozenset({Key.PEER_PROPERTIES}),
    ServerState.SASL: frozenset({Key.SASL_HANDSHAKE, Key.SASL_AUTHENTICATE}),
    ServerState.AUTHENTICATING: frozenset(),
    ServerState.TUNE: frozenset({Key.TUNE}),
    ServerState.OPEN: frozenset({Key.OPEN}),
    ServerState.OPENING: frozenset(),
    ServerState.RUNNING: frozenset(
        {
            Key.DECLARE_PUBLISHER,
            Key.PUBLISH,
            Key.QUERY_PUBLISHER_SEQUENCE,
            Key.DELETE_PUBLISHER,
            Key.SUBSCRIBE,
            Key.CREDIT,
            Key.STORE_OFFSET,
            Key.QUERY_OFFSET,
            Key.UNSUBSCRIBE,
            Key.CREATE,
            Key.DELETE,
            Key.METADATA,
            Key.ROUTE,
            Key.PARTITIONS,
            Key.EXCHANGE_COMMAND_VERSIONS,
            Key.STREAM_STATS,
            Key.CREATE_SUPER_STREAM,
            Key.DELETE_SUPER_STREAM,
            Key.CONSUMER_UPDATE,  # the response to ours
        }
    ),
    ServerState.CLOSING: frozenset(),
    ServerState.CLOSED: frozenset(),
}


@dataclass(frozen=True)
class ServerConfig:
    """What the server offers: its peer properties, SASL mechanisms, frame_max and heartbeat
    (seconds; 0 for none)."""

    properties: Mapping[str, str] = field(default_factory=dict)
    mechanisms: tuple[str, ...] = ("PLAIN",)
    frame_max: int = 1048576
    heartbeat: int = 60


@dataclass(frozen=True, slots=True)
class LoginRequested:
    """sasl-authenticate: answer with ``accept_login`` or ``refuse_login``."""

    mechanism: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Tuned:
    """The client's tune: the negotiated frame_max and heartbeat (0: none)."""

    frame_max: int
    heartbeat: int


@dataclass(frozen=True, slots=True)
class OpenRequested:
    """open: answer with ``accept_open`` or ``refuse_open``."""

    virtual_host: str


@dataclass(frozen=True, slots=True)
class Closed:
    """The connection is closed (``by_peer``: the client's close); write what is queued,
    then close the socket."""

    code: int
    reason: str
    by_peer: bool


Event = c.Command | LoginRequested | Tuned | OpenRequested | Closed


def negotiate(ours: int, theirs: int) -> int:
    """The lower non-zero of two limits (0 = none)."""
    if not ours:
        return theirs
    if not theirs:
        return ours
    return min(ours, theirs)


class ServerConnection:
    """The server side of one stream-protocol connection; see the module docstring."""

    def __init__(self, config: ServerConfig, output: Output | None = None) -> None:
        self.config = config
        self.output = output if output is not None else Output(OUTPUT_HIGH_WATER)
        self.codec = StreamCodec(Role.SERVER)
        self.state = ServerState.PEER_PROPERTIES
        self.client_properties: dict[str, str] = {}
        self.frame_max = 0
        self.heartbeat = 0
        self.mechanism = ""
        # Nothing more is read: write what is queued, then close the socket.
        self.finished = False
        self._backlog: list[c.Command] = []
        self._pos = 0
        self._correlation = 0
        self._login_correlation = 0
        self._open_correlation = 0

    # -- input ---------------------------------------------------------------------------

    @property
    def pending(self) -> bool:
        """Commands wait for ``next_event`` (and no answer is awaited)."""
        if self.finished or self.state in _AWAITING:
            return False
        return self._pos < len(self._backlog)

    def receive_data(self, data: bytes | bytearray | memoryview) -> Closed | None:
        """Decode ``data``; the commands wait for ``next_event``. A frame the codec refuses
        closes the connection (the returned ``Closed``)."""
        if self.finished:
            return None
        try:
            commands = self.codec.receive(data)
        except StreamProtocolError as exc:
            return self.fail(exc.code, str(exc))
        if self._pos < len(self._backlog):
            self._backlog.extend(commands)
        else:
            self._backlog, self._pos = commands, 0
        return None

    def next_event(self) -> Event | None:
        """The next command for the broker, or an event of the connection's set-up; None
        when nothing is ready or an answer is awaited."""
        while self.pending:
            command = self._backlog[self._pos]
            self._pos += 1
            if self._pos >= len(self._backlog):
                self._backlog, self._pos = [], 0
            event = self._command(command)
            if event is not None:
                return event
        return None

    def _command(self, command: c.Command) -> Event | None:
        if type(command) is c.Heartbeat:
            return None
        if type(command) is c.Close:
            assert isinstance(command, c.Close)
            self.send(c.Response(Key.CLOSE, command.correlation_id, Code.OK))
            return self._closed(command.code, f"client closed: {command.reason}", by_peer=True)
        if type(command) is c.Response:
            assert isinstance(command, c.Response)
            if command.key == Key.CLOSE:
                if self.state is ServerState.CLOSING:
                    return self._closed(Code.OK, "closed", by_peer=False)
                return None
        key = command.KEY if not isinstance(command, c.Response) else RESPONSE | command.key
        state = self.state
        if key & ~RESPONSE not in ACCEPTED[state]:
            return self.fail(Code.UNKNOWN_FRAME, f"command 0x{key:04x} not expected now")
        if state is ServerState.RUNNING:
            return command
        if isinstance(command, c.PeerProperties):
            self.client_properties = dict(command.properties)
            self.send(
                c.PeerPropertiesResponse(
                    command.correlation_id, Code.OK, dict(self.config.properties)
                )
            )
            self.state = ServerState.SASL
        elif isinstance(command, c.SaslHandshake):
            self.send(
                c.SaslHandshakeResponse(
                    command.correlation_id, Code.OK, list(self.config.mechanisms)
                )
            )
        elif isinstance(command, c.SaslAuthenticate):
            self._login_correlation = command.correlation_id
            self.mechanism = command.mechanism
            self.state = ServerState.AUTHENTICATING
            return LoginRequested(command.mechanism, command.data or b"")
        elif isinstance(command, c.Tune):
            self.frame_max = negotiate(self.config.frame_max, command.frame_max)
            self.heartbeat = negotiate(self.config.heartbeat, command.heartbeat)
            self.codec.frame_max = self.frame_max
            self.state = ServerState.OPEN
            return Tuned(self.frame_max, self.heartbeat)
        elif isinstance(command, c.Open):
            self._open_correlation = command.correlation_id
            self.state = ServerState.OPENING
            return OpenRequested(command.virtual_host or "/")
        return None

    # -- the broker's answers --------------------------------------------------------------

    def accept_login(self) -> None:
        """The last ``LoginRequested`` logs in: its response, then the server's tune."""
        self._expect(ServerState.AUTHENTICATING)
        self.send(c.SaslAuthenticateResponse(self._login_correlation, Code.OK))
        self.send(c.Tune(self.config.frame_max, self.config.heartbeat))
        self.state = ServerState.TUNE

    def refuse_login(self, code: int) -> None:
        """The last ``LoginRequested`` is refused with ``code``; the connection ends."""
        self._expect(ServerState.AUTHENTICATING)
        self.send(c.SaslAuthenticateResponse(self._login_correlation, code))
        self._closed(code, "login refused", by_peer=False)

    def accept_open(self, properties: Mapping[str, str]) -> None:
        self._expect(ServerState.OPENING)
        self.send(c.OpenResponse(self._open_correlation, Code.OK, dict(properties)))
        self.state = ServerState.RUNNING

    def refuse_open(self, code: int) -> None:
        self._expect(ServerState.OPENING)
        self.send(c.OpenResponse(self._open_correlation, code))
        self._closed(code, "open refused", by_peer=False)

    # -- output ----------------------------------------------------------------------------

    def send(self, command: c.Command) -> None:
        self.output.append(command.encode())

    def deliver(self, subscription_id: int, chunk: bytes, committed: int | None) -> None:
        """A chunk as its stored bytes after a deliver prefix (two pieces, no copy)."""
        self.output.add(c.deliver_prefix(subscription_id, len(chunk), committed), chunk)

    def next_correlation(self) -> int:
        """A correlation id for a request of the server's (consumer update, close)."""
        self._correlation += 1
        return self._correlation

    # -- closing ---------------------------------------------------------------------------

    def close(self, code: int, reason: str) -> None:
        """Close from the broker's side: close with ``code``, then wait for the response
        (only a running connection is told; one in its set-up is dropped)."""
        if self.finished or self.state in (ServerState.CLOSING, ServerState.CLOSED):
            return
        if self.state is not ServerState.RUNNING:
            self._closed(code, reason, by_peer=False)
            return
        self.send(c.Close(self.next_correlation(), code, reason))
        self.state = ServerState.CLOSING

    def fail(self, code: int, reason: str) -> Closed:
        """The peer broke the protocol (or the broker cannot go on): close at once with
        ``code``, telling a running connection why."""
        if self.state is ServerState.RUNNING:
            self.send(c.Close(self.next_correlation(), code, reason))
        return self._closed(code, reason, by_peer=False)

    def _closed(self, code: int, reason: str, *, by_peer: bool) -> Closed:
        self.state = ServerState.CLOSED
        self.finished = True
        self._backlog, self._pos = [], 0
        return Closed(code, reason, by_peer)

    def _expect(self, state: ServerState) -> None:
        if self.state is not state:
            raise RuntimeError(f"not {state.name.lower()} but {self.state.name.lower()}")


_AWAITING = frozenset((ServerState.AUTHENTICATING, ServerState.OPENING))
