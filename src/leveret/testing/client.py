"""A sans-IO AMQP 0-9-1 client that drives an ``AMQP091Connection`` in memory, for tests:
through the connection's shell (``server/shell/``), as the asyncio adapter does.

The client side is the protocol's one client-role machine
(:class:`leveret.protocol.amqp091.client.ClientConnection`) in ``manual`` mode: the test sends
every method itself (handshake steps and close-oks included, or deliberately wrong ones), and
the machine follows what was sent, checks and decodes what the server answers, and assembles
content (deliveries, get-ok, returns) into one :class:`Delivery`. A server that breaks the
protocol fails the test with an ``AssertionError``. Raw bytes (:meth:`CodecClient.send_raw`)
bypass the machine.

Typical use::

    client = CodecClient.connect()
    client.handshake()
    client.open_channel(1)
    client.send(1, m.QueueDeclare(queue="q"))
    client.expect(1, m.QueueDeclareOk)

Time is a :class:`FakeClock`: advance it and call :meth:`CodecClient.tick` to drive heartbeats.
:func:`new_shell` and :func:`feed` drive any front end's shell the same way.

For tests of the model alone, :class:`RecordingSink` is a ``SessionSink`` that records what a
session reports, and :func:`make_message` builds a ``Message`` without a front end.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from leveret.auth.users import UserStore
from leveret.convert.amqp091 import wire_message
from leveret.errors import AMQPError
from leveret.model.broker import Broker
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp091.client import (
    CLIENT_CAPABILITIES,
    ClientConnection,
    amqplain_response,
    plain_response,
)
from leveret.protocol.amqp091.client_events import (
    ContentReceived,
    HeartbeatReceived,
    MethodReceived,
    ProtocolHeaderReceived,
)
from leveret.server.amqp091 import AMQP091Connection, Limits
from leveret.server.shell.contract import ShellContext
from leveret.server.shell.shell import Shell

if TYPE_CHECKING:
    from collections.abc import Mapping

    from leveret.model.message import Message
    from leveret.protocol.amqp091.fieldtable import FieldTable, FieldValue
    from leveret.server.shell.shell import FrontEndFactory

__all__ = [
    "DEFAULT_CAPABILITIES",
    "CodecClient",
    "Delivery",
    "FakeClock",
    "Heartbeat",
    "MethodFrame",
    "ProtocolHeader",
    "Received",
    "RecordingSink",
    "SinkEvent",
    "amqplain_response",
    "feed",
    "make_message",
    "new_shell",
    "plain_response",
    "run_turns",
]

# Turns run for one input at most (an adapter runs them one loop iteration apart).
MAX_TURNS = 10_000


def new_shell(
    factory: FrontEndFactory | None = None,
    broker: Broker | None = None,
    users: UserStore | None = None,
    *,
    peer: str = "127.0.0.1:50000",
    loopback: bool = True,
    limits: Limits | None = None,
    now: float = 0.0,
    certificate_identity: str | None = None,
    heartbeat_phase: float = 1.0,
) -> Shell:
    """A connection's shell in memory (a new broker and guest/guest store unless given),
    with the front end ``factory`` makes attached when given (as if its first bytes had
    chosen it)."""
    shell = Shell(
        ShellContext(
            broker if broker is not None else Broker(),
            users if users is not None else UserStore.with_default_user(),
            limits if limits is not None else Limits(),
            peer,
            loopback,
            now,
            certificate_identity,
            heartbeat_phase,
        )
    )
    if factory is not None:
        shell.attach(factory)
    return shell


def feed(shell: Shell, data: bytes, now: float, *, all_turns: bool = True) -> None:
    """``data`` arrives on the connection at ``now``: handled as the adapter would, with
    the turns that follow (unless ``all_turns`` is False)."""
    shell.data_received(data, now)
    if all_turns:
        run_turns(shell, now)


def run_turns(shell: Shell, now: float) -> None:
    """The turns the shell wants (waiting input, a completed deferral), as the adapter runs
    them."""
    for _ in range(MAX_TURNS):
        if not shell.wants_turn:
            return
        shell.run_turn(now)


M = TypeVar("M", bound=m.Method)

DEFAULT_CAPABILITIES: dict[str, bool] = dict(CLIENT_CAPABILITIES)
"""The capabilities a modern client (pika, aio-pika) advertises in start-ok."""


@dataclass
class FakeClock:
    """A monotonic clock the test moves by hand."""

    now: float = 0.0

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@dataclass(frozen=True)
class MethodFrame:
    """A method without content, as the server sent it."""

    channel: int
    method: m.Method


@dataclass(frozen=True)
class Delivery:
    """A content-carrying method (deliver, get-ok, return) with its header and body."""

    channel: int
    method: m.Method
    properties: BasicProperties
    body: bytes


@dataclass(frozen=True)
class Heartbeat:
    """A heartbeat frame (always on channel 0)."""

    channel: int = 0


@dataclass(frozen=True)
class ProtocolHeader:
    """The server answered our protocol header with its own (unsupported version)."""

    data: bytes
    channel: int = 0


Received = MethodFrame | Delivery | Heartbeat | ProtocolHeader


class CodecClient:
    """The client side of one in-memory connection to an :class:`AMQP091Connection`."""

    def __init__(self, shell: Shell, clock: FakeClock | None = None) -> None:
        self.shell = shell
        conn = shell.front
        assert isinstance(conn, AMQP091Connection)
        self.conn = conn
        self.clock = clock if clock is not None else FakeClock()
        self.machine = ClientConnection(frame_max=conn.limits.frame_max, manual=True)
        self.start: m.ConnectionStart | None = None
        self.tune: m.ConnectionTune | None = None
        self._inbox: deque[Received] = deque()

    @classmethod
    def connect(
        cls,
        broker: Broker | None = None,
        users: UserStore | None = None,
        *,
        loopback: bool = True,
        limits: Limits | None = None,
        clock: FakeClock | None = None,
        peer: str = "127.0.0.1:50000",
        certificate_identity: str | None = None,
        heartbeat_phase: float = 1.0,
    ) -> CodecClient:
        """A fresh server connection (new broker and guest/guest store unless given);
        ``certificate_identity``: as if over TLS with a verified client certificate."""
        clock = clock if clock is not None else FakeClock()
        shell = new_shell(
            AMQP091Connection,
            broker,
            users,
            peer=peer,
            loopback=loopback,
            limits=limits,
            now=clock.now,
            certificate_identity=certificate_identity,
            heartbeat_phase=heartbeat_phase,
        )
        return cls(shell, clock)

    @property
    def frame_max(self) -> int:
        """The frame_max publishes are split at: the server's offer, then what we tuned."""
        return self.machine.frame_max

    # -- sending ---------------------------------------------------------------------

    def send_raw(self, data: bytes, *, all_turns: bool = True) -> None:
        """Feed bytes to the server as if they arrived on the socket now (no checks).

        The server handles a bounded number of frames per turn; like the asyncio adapter,
        this runs the remaining turns too unless ``all_turns`` is False.
        """
        feed(self.shell, data, self.clock.now, all_turns=all_turns)

    def _flush(self) -> None:
        data = self.machine.data_to_send()
        if data:
            self.send_raw(data)

    def send_header(self, header: bytes = framing.PROTOCOL_HEADER) -> None:
        self.send_raw(header)

    def encode(self, channel: int, method: m.Method) -> bytes:
        """One method frame, for tests that alter it before :meth:`send_raw`."""
        return framing.encode_method_frame(channel, method.encode())

    def send(self, channel: int, method: m.Method) -> None:
        """Send one method frame (content methods need :meth:`publish`)."""
        self.machine.send_method(channel, method)
        self._flush()

    def encode_publish(
        self,
        channel: int,
        exchange: str,
        routing_key: str,
        body: bytes,
        properties: BasicProperties | None = None,
        *,
        mandatory: bool = False,
        immediate: bool = False,
    ) -> bytes:
        props = (properties if properties is not None else BasicProperties()).encode()
        return self.machine.encode_publish(
            channel, exchange, routing_key, body, props, mandatory=mandatory, immediate=immediate
        )

    def publish(
        self,
        channel: int,
        exchange: str,
        routing_key: str,
        body: bytes,
        properties: BasicProperties | None = None,
        *,
        mandatory: bool = False,
        immediate: bool = False,
    ) -> None:
        """basic.publish + content header + body frames, split as frame-max requires."""
        data = self.encode_publish(
            channel,
            exchange,
            routing_key,
            body,
            properties,
            mandatory=mandatory,
            immediate=immediate,
        )
        self.machine.publish_encoded(channel, data)
        self._flush()

    # -- the handshake ---------------------------------------------------------------

    def start_ok(
        self,
        *,
        mechanism: str = "PLAIN",
        response: bytes | None = None,
        user: str = "guest",
        password: str = "guest",  # noqa: S107 - RabbitMQ's default user, for tests
        capabilities: Mapping[str, FieldValue] | None = None,
    ) -> None:
        """Send connection.start-ok (the header must have been sent and start received)."""
        if response is None:
            if mechanism == "AMQPLAIN":
                response = amqplain_response(user, password)
            else:
                response = plain_response(user, password)
        caps: FieldTable = dict(DEFAULT_CAPABILITIES if capabilities is None else capabilities)
        self.send(
            0,
            m.ConnectionStartOk(
                client_properties={"product": "leveret.testing", "capabilities": caps},
                mechanism=mechanism,
                response=response,
                locale="en_US",
            ),
        )

    def handshake(
        self,
        user: str = "guest",
        password: str = "guest",  # noqa: S107 - RabbitMQ's default user, for tests
        vhost: str = "/",
        *,
        heartbeat: int = 0,
        frame_max: int = 131072,
        channel_max: int | None = None,
        mechanism: str = "PLAIN",
        capabilities: Mapping[str, FieldValue] | None = None,
    ) -> m.ConnectionStart:
        """Header → start → start-ok → tune → tune-ok → open → open-ok; returns the start.
        ``channel_max`` None takes the server's offer (0 would mean "no limit", which a
        server refuses as above its offer)."""
        self.send_header()
        self.start = self.expect(0, m.ConnectionStart)
        self.start_ok(mechanism=mechanism, user=user, password=password, capabilities=capabilities)
        self.tune = self.expect(0, m.ConnectionTune)
        if channel_max is None:
            channel_max = self.tune.channel_max
        self.send(
            0, m.ConnectionTuneOk(channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat)
        )
        self.send(0, m.ConnectionOpen(virtual_host=vhost))
        self.expect(0, m.ConnectionOpenOk)
        return self.start

    def open_channel(self, channel: int) -> None:
        self.send(channel, m.ChannelOpen())
        self.expect(channel, m.ChannelOpenOk)

    # -- time ------------------------------------------------------------------------

    def tick(self, advance: float = 0.0) -> None:
        """Advance the clock by ``advance`` seconds and let the server's timers run."""
        self.clock.advance(advance)
        self.shell.tick(self.clock.now)
        run_turns(self.shell, self.clock.now)

    # -- receiving -------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """The server wants the transport closed (or already considers it closed)."""
        return self.shell.finished or self.conn.finished

    def take_bytes(self) -> bytes:
        """The server's raw, undecoded output since the last call (bypasses decoding)."""
        return b"".join(self.shell.take_output(self.clock.now))

    def _pump(self) -> None:
        # Deferrals that completed since (Shell.defer) get the turn an adapter gives them.
        run_turns(self.shell, self.clock.now)
        data = self.take_bytes()
        if not data:
            return
        try:
            events = self.machine.receive_data(data, self.clock.now)
        except AMQPError as exc:
            raise AssertionError(f"the server broke the protocol: {exc!r}") from exc
        inbox = self._inbox
        for event in events:
            if isinstance(event, MethodReceived):
                inbox.append(MethodFrame(event.channel, event.method))
            elif isinstance(event, ContentReceived):
                inbox.append(
                    Delivery(event.channel, event.method, event.decode_properties(), event.body)
                )
            elif isinstance(event, HeartbeatReceived):
                inbox.append(Heartbeat())
            elif isinstance(event, ProtocolHeaderReceived):
                inbox.append(ProtocolHeader(event.data))

    def frames(self) -> list[Received]:
        """Everything the server sent that was not consumed yet, oldest first."""
        self._pump()
        items = list(self._inbox)
        self._inbox.clear()
        return items

    def methods(self) -> list[tuple[int, m.Method]]:
        """Like :meth:`frames`, as ``(channel, method)`` pairs; heartbeats left out."""
        return [
            (item.channel, item.method)
            for item in self.frames()
            if isinstance(item, MethodFrame | Delivery)
        ]

    def next(self) -> Received:
        """Pop the next item, failing if the server sent nothing more."""
        self._pump()
        if not self._inbox:
            raise AssertionError("the server sent nothing")
        return self._inbox.popleft()

    def expect(self, channel: int, cls: type[M]) -> M:
        """Pop the next item and check it is ``cls`` on ``channel``; return the method."""
        item = self.next()
        if not isinstance(item, MethodFrame | Delivery):
            raise AssertionError(f"expected {cls.NAME} on channel {channel}, got {item!r}")
        if item.channel != channel or not isinstance(item.method, cls):
            raise AssertionError(
                f"expected {cls.NAME} on channel {channel}, got {item.method!r} "
                f"on channel {item.channel}"
            )
        return item.method

    def expect_content(self, channel: int, cls: type[m.Method] = m.BasicDeliver) -> Delivery:
        """Pop the next item and check it is content of method ``cls`` on ``channel``."""
        item = self.next()
        if not isinstance(item, Delivery) or item.channel != channel:
            raise AssertionError(f"expected {cls.NAME} content on channel {channel}, got {item!r}")
        if not isinstance(item.method, cls):
            raise AssertionError(f"expected {cls.NAME} on channel {channel}, got {item.method!r}")
        return item

    def expect_nothing(self) -> None:
        """Fail if the server sent anything not consumed yet."""
        items = self.frames()
        if items:
            raise AssertionError(f"expected no output, got {items!r}")


# -- model-level helpers ---------------------------------------------------------------


def make_message(
    body: bytes = b"",
    routing_key: str = "",
    exchange: str = "",
    properties: BasicProperties | None = None,
) -> Message:
    """A ``Message`` as the 0-9-1 front end builds it (properties kept encoded)."""
    raw = (properties if properties is not None else BasicProperties()).encode()
    return wire_message(exchange, routing_key, raw, body)


@dataclass(frozen=True)
class SinkEvent:
    """One call a session made on its sink; ``kind`` is the method name."""

    kind: str
    consumer_tag: str = ""
    delivery_tag: int = 0
    redelivered: bool = False
    multiple: bool = False
    ack: bool = True
    reply_code: int = 0
    message: Message | None = None

    @property
    def body(self) -> bytes:
        return self.message.body if self.message is not None else b""


@dataclass
class RecordingSink:
    """A ``SessionSink`` that records every call in order."""

    events: list[SinkEvent] = field(default_factory=list)

    def deliver(
        self, consumer_tag: str, delivery_tag: int, redelivered: bool, message: Message
    ) -> None:
        self.events.append(
            SinkEvent(
                "deliver",
                consumer_tag=consumer_tag,
                delivery_tag=delivery_tag,
                redelivered=redelivered,
                message=message,
            )
        )

    def returned(self, reply_code: int, reply_text: str, message: Message) -> None:
        self.events.append(SinkEvent("returned", reply_code=reply_code, message=message))

    def confirm(self, delivery_tag: int, *, multiple: bool, ack: bool) -> None:
        self.events.append(
            SinkEvent("confirm", delivery_tag=delivery_tag, multiple=multiple, ack=ack)
        )

    def consumer_cancelled(self, consumer_tag: str) -> None:
        self.events.append(SinkEvent("consumer_cancelled", consumer_tag=consumer_tag))

    def take(self, kind: str | None = None) -> list[SinkEvent]:
        """Remove and return the recorded events (only those of ``kind`` if given)."""
        if kind is None:
            taken, self.events = self.events, []
            return taken
        taken = [e for e in self.events if e.kind == kind]
        self.events = [e for e in self.events if e.kind != kind]
        return taken

    def deliveries(self) -> list[SinkEvent]:
        """Remove and return the recorded deliveries."""
        return self.take("deliver")
