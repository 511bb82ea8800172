"""A sans-IO AMQP 0-8 / 0-9 client that drives the broker's legacy front end in memory, for
tests. It speaks the version's own codec (``protocol/amqp08``, ``protocol/amqp09``): methods
it sends are that version's generated classes, and the server's output is decoded with that
version's ``decode_method``, so a test checks the octets each version defines.

Typical use::

    client = LegacyClient.connect(AMQP09)
    client.handshake()
    client.open_channel(1)
    client.send(1, m09.QueueDeclare(queue="q"))
    client.expect(1, m09.QueueDeclareOk)

Content of any class (basic, file, stream, tunnel) comes back as :class:`LegacyContent`,
its properties decoded with the class's property class.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp08._generated import properties as p08
from leveret.protocol.amqp09._generated import methods as m09
from leveret.protocol.amqp09._generated import properties as p09
from leveret.protocol.amqp091 import framing
from leveret.server.frontend import choose
from leveret.server.legacy.connection import LegacyConnection
from leveret.testing.client import FakeClock, feed, new_shell, plain_response

if TYPE_CHECKING:
    from leveret.auth.users import UserStore
    from leveret.model.broker import Broker
    from leveret.protocol.amqp091.connection import Limits
    from leveret.server.legacy.dialects import Dialect
    from leveret.server.shell.shell import Shell

__all__ = ["LegacyClient", "LegacyContent", "LegacyMethod"]

T = TypeVar("T")


@dataclass(frozen=True)
class LegacyMethod:
    """A method without content, as the server sent it."""

    channel: int
    method: Any


@dataclass(frozen=True)
class LegacyContent:
    """A content-carrying method with its header and body."""

    channel: int
    method: Any
    properties: Any
    body: bytes


@dataclass
class _Content:
    method: Any
    class_id: int = 0
    size: int = -1
    properties: Any = None
    body: list[bytes] = field(default_factory=list)
    received: int = 0


class LegacyClient:
    """The client side of one in-memory 0-8 or 0-9 connection."""

    def __init__(self, shell: Shell, clock: FakeClock) -> None:
        conn = shell.front
        assert isinstance(conn, LegacyConnection)
        self.shell = shell
        self.conn = conn
        self.clock = clock
        self.dialect = conn.dialect
        self.methods: Any = m08 if conn.dialect.name == "0-8" else m09
        self.properties: Any = p08 if conn.dialect.name == "0-8" else p09
        self.frame_max = conn.limits.frame_max
        self._decoder = framing.FrameDecoder(frame_max=0)
        self._inbox: deque[LegacyMethod | LegacyContent] = deque()
        self._content: dict[int, _Content] = {}

    @classmethod
    def connect(
        cls,
        dialect: Dialect,
        broker: Broker | None = None,
        users: UserStore | None = None,
        *,
        clock: FakeClock | None = None,
        limits: Limits | None = None,
    ) -> LegacyClient:
        clock = clock if clock is not None else FakeClock()
        shell = new_shell(
            lambda shell: LegacyConnection(shell, dialect, choose=choose),
            broker,
            users,
            peer="127.0.0.1:50001",
            limits=limits,
            now=clock.now,
        )
        return cls(shell, clock)

    # -- sending -----------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        feed(self.shell, data, self.clock.now)

    def send(self, channel: int, method: Any) -> None:
        self.send_raw(framing.encode_method_frame(channel, method.encode()))

    def send_content(
        self, channel: int, method: Any, body: bytes, properties: Any = None, class_id: int = 60
    ) -> None:
        """A content-carrying method with its header and body frames."""
        if properties is None:
            properties = self.properties.PROPERTIES[class_id]()
        frames = framing.encode_content_frames(
            channel, class_id, body, properties.encode(), self.frame_max
        )
        self.send_raw(framing.encode_method_frame(channel, method.encode()) + b"".join(frames))

    # -- the handshake -----------------------------------------------------------------------

    def handshake(self, header: bytes | None = None, vhost: str = "/") -> Any:
        """Header, start, start-ok (PLAIN guest/guest), tune, tune-ok, open; the start."""
        mm = self.methods
        self.send_raw(header if header is not None else min(self.dialect.headers))
        start = self.expect(0, mm.ConnectionStart)
        self.send(
            0,
            mm.ConnectionStartOk(
                client_properties={"product": "leveret.testing.legacy"},
                mechanism="PLAIN",
                response=plain_response("guest", "guest"),
                locale="en_US",
            ),
        )
        tune = self.expect(0, mm.ConnectionTune)
        tune_ok = mm.ConnectionTuneOk(
            channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0
        )
        self.send(0, tune_ok)
        self.frame_max = tune.frame_max
        self.send(0, mm.ConnectionOpen(virtual_host=vhost))
        self.expect(0, mm.ConnectionOpenOk)
        return start

    def open_channel(self, channel: int) -> None:
        self.send(channel, self.methods.ChannelOpen())
        self.expect(channel, self.methods.ChannelOpenOk)

    # -- receiving ---------------------------------------------------------------------------

    def take_bytes(self) -> bytes:
        return b"".join(self.shell.take_output(self.clock.now))

    def _pump(self) -> None:
        data = self.take_bytes()
        for frame_type, channel, payload in self._decoder.feed(data):
            self._frame(frame_type, channel, bytes(payload))

    def _frame(self, frame_type: int, channel: int, payload: bytes) -> None:
        if frame_type == framing.FRAME_METHOD:
            method = self.methods.decode_method(payload)
            if method.HAS_CONTENT:
                self._content[channel] = _Content(method)
            else:
                self._inbox.append(LegacyMethod(channel, method))
            return
        content = self._content.get(channel)
        if content is None:
            raise AssertionError(f"content frame type {frame_type} on channel {channel}")
        if frame_type == framing.FRAME_HEADER:
            class_id, size, raw = framing.parse_content_header(payload)
            content.class_id = class_id
            content.size = size
            content.properties = self.properties.PROPERTIES[class_id].decode(raw)
        else:
            content.body.append(payload)
            content.received += len(payload)
        if content.size >= 0 and content.received >= content.size:
            del self._content[channel]
            self._inbox.append(
                LegacyContent(channel, content.method, content.properties, b"".join(content.body))
            )

    @property
    def closed(self) -> bool:
        return self.shell.finished or self.conn.finished

    def frames(self) -> list[LegacyMethod | LegacyContent]:
        self._pump()
        items = list(self._inbox)
        self._inbox.clear()
        return items

    def next(self) -> LegacyMethod | LegacyContent:
        self._pump()
        if not self._inbox:
            raise AssertionError("the server sent nothing")
        return self._inbox.popleft()

    def expect(self, channel: int, cls: type[T]) -> T:
        item = self.next()
        if item.channel != channel or not isinstance(item.method, cls):
            raise AssertionError(f"expected {cls.__name__} on channel {channel}, got {item!r}")
        return item.method

    def expect_content(self, channel: int, cls: type[Any]) -> LegacyContent:
        item = self.next()
        if not isinstance(item, LegacyContent) or item.channel != channel:
            raise AssertionError(f"expected {cls.__name__} content on {channel}, got {item!r}")
        if not isinstance(item.method, cls):
            raise AssertionError(f"expected {cls.__name__}, got {item.method!r}")
        return item

    def expect_nothing(self) -> None:
        items = self.frames()
        if items:
            raise AssertionError(f"expected no output, got {items!r}")
