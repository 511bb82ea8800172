"""The wire itself, with a plain socket: protocol header negotiation, malformed and unexpected
frames, frame-max and channel-max enforcement, heartbeats and close handshakes.

The frames are written by hand with struct (a small client below), so nothing here depends on
Leveret's own codec. Every test passes against RabbitMQ (``LEVERET_TEST_AMQP_URL``); where
RabbitMQ's reply differs from the 0-9-1 text, the test asserts RabbitMQ's and says so.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.integration.conftest import Broker

pytestmark = pytest.mark.interop

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = b"\xce"
TIMEOUT = 5.0

# (class id, method id)
CONNECTION_START = (10, 10)
CONNECTION_START_OK = (10, 11)
CONNECTION_TUNE = (10, 30)
CONNECTION_TUNE_OK = (10, 31)
CONNECTION_OPEN = (10, 40)
CONNECTION_OPEN_OK = (10, 41)
CONNECTION_CLOSE = (10, 50)
CONNECTION_CLOSE_OK = (10, 51)
CHANNEL_OPEN = (20, 10)
CHANNEL_OPEN_OK = (20, 11)
CHANNEL_CLOSE = (20, 40)
CHANNEL_CLOSE_OK = (20, 41)
QUEUE_DECLARE = (50, 10)
QUEUE_DECLARE_OK = (50, 11)
BASIC_CONSUME = (60, 20)
BASIC_CONSUME_OK = (60, 21)
BASIC_PUBLISH = (60, 40)
BASIC_GET = (60, 70)
BASIC_GET_OK = (60, 71)
BASIC_GET_EMPTY = (60, 72)


# --------------------------------------------------------------------------- encoding


def shortstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack(">B", len(raw)) + raw


def longstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack(">I", len(raw)) + raw


def table(items: dict[str, bytes]) -> bytes:
    """A field table from already-encoded values (type octet + value)."""
    body = b"".join(shortstr(key) + value for key, value in items.items())
    return longstr(body)


def bool_field(value: bool) -> bytes:
    return b"t" + struct.pack(">B", value)


def str_field(value: str) -> bytes:
    return b"S" + longstr(value)


def frame(kind: int, channel: int, payload: bytes, end: bytes = FRAME_END) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + end


def method_frame(channel: int, method: tuple[int, int], args: bytes = b"") -> bytes:
    return frame(FRAME_METHOD, channel, struct.pack(">HH", *method) + args)


def header_frame(channel: int, body_size: int, flags: int = 0, props: bytes = b"") -> bytes:
    return frame(FRAME_HEADER, channel, struct.pack(">HHQH", 60, 0, body_size, flags) + props)


def publish_args(exchange: str, routing_key: str, mandatory: bool = False) -> bytes:
    return struct.pack(">H", 0) + shortstr(exchange) + shortstr(routing_key) + bytes([mandatory])


def queue_declare_args(queue: str, passive: bool = False, exclusive: bool = False) -> bytes:
    bits = passive | (exclusive << 2)
    return struct.pack(">H", 0) + shortstr(queue) + bytes([bits]) + table({})


def basic_get_args(queue: str, no_ack: bool = True) -> bytes:
    return struct.pack(">H", 0) + shortstr(queue) + bytes([no_ack])


# --------------------------------------------------------------------------- decoding


@dataclass
class Frame:
    kind: int
    channel: int
    payload: bytes

    @property
    def method(self) -> tuple[int, int]:
        assert self.kind == FRAME_METHOD, self
        class_id, method_id = struct.unpack_from(">HH", self.payload)
        return int(class_id), int(method_id)

    @property
    def args(self) -> bytes:
        return self.payload[4:]


@dataclass
class Close:
    """The arguments of connection.close or channel.close."""

    reply_code: int
    reply_text: str
    class_id: int
    method_id: int


def parse_close(args: bytes) -> Close:
    (code,) = struct.unpack_from(">H", args)
    text_len = args[2]
    text = args[3 : 3 + text_len].decode()
    class_id, method_id = struct.unpack_from(">HH", args, 3 + text_len)
    return Close(int(code), text, int(class_id), int(method_id))


def read_shortstr(data: bytes, offset: int) -> tuple[str, int]:
    length = data[offset]
    return data[offset + 1 : offset + 1 + length].decode(), offset + 1 + length


def read_longstr(data: bytes, offset: int) -> tuple[bytes, int]:
    (length,) = struct.unpack_from(">I", data, offset)
    start = offset + 4
    return data[start : start + length], start + length


# --------------------------------------------------------------------------- the client


class RawClient:
    """A blocking socket speaking just enough AMQP 0-9-1 to misbehave on purpose."""

    def __init__(self, broker: Broker, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection((broker.host, broker.port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.buffer = b""
        self.frame_max = 0
        self.heartbeats_seen = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, size: int) -> None:
        while len(self.buffer) < size:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError(f"socket closed with {self.buffer!r} buffered")
            self.buffer += chunk

    def read_bytes(self, size: int) -> bytes:
        self._fill(size)
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def read_frame(self) -> Frame:
        kind, channel, size = struct.unpack(">BHI", self.read_bytes(7))
        payload = self.read_bytes(size)
        assert self.read_bytes(1) == FRAME_END
        return Frame(int(kind), int(channel), payload)

    def read_non_heartbeat(self) -> Frame:
        while True:
            received = self.read_frame()
            if received.kind != FRAME_HEARTBEAT:
                return received
            self.heartbeats_seen += 1

    def expect(self, method: tuple[int, int], channel: int | None = None) -> Frame:
        received = self.read_non_heartbeat()
        assert received.method == method, received
        if channel is not None:
            assert received.channel == channel
        return received

    def is_closed_by_peer(self, timeout: float = TIMEOUT) -> bool:
        """Whether the peer closes the socket within ``timeout`` (data read meanwhile is
        dropped)."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if not self.sock.recv(65536):
                    return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        return False

    def start(self) -> Frame:
        """Send the protocol header and read connection.start."""
        self.send(PROTOCOL_HEADER)
        return self.expect(CONNECTION_START, channel=0)

    def start_ok(
        self,
        mechanism: str = "PLAIN",
        response: bytes = b"\x00guest\x00guest",
        capabilities_on: bool = True,
    ) -> None:
        """Send start-ok; ``capabilities_on=False`` advertises no client capabilities."""
        names = ("authentication_failure_close", "consumer_cancel_notify")
        capabilities = table({n: bool_field(True) for n in names} if capabilities_on else {})
        client_properties = table(
            {"product": str_field("leveret raw test"), "capabilities": b"F" + capabilities}
        )
        args = client_properties + shortstr(mechanism) + longstr(response) + shortstr("en_US")
        self.send(method_frame(0, CONNECTION_START_OK, args))

    def tune(self, channel_max: int = 0, frame_max: int = 131072, heartbeat: int = 0) -> Frame:
        """Read connection.tune and answer tune-ok with the smaller of each pair of values."""
        tune = self.expect(CONNECTION_TUNE, channel=0)
        server_channel_max, server_frame_max, _ = struct.unpack(">HIH", tune.args)
        if server_channel_max and (not channel_max or channel_max > server_channel_max):
            channel_max = int(server_channel_max)
        if server_frame_max and (not frame_max or frame_max > server_frame_max):
            frame_max = int(server_frame_max)
        self.frame_max = frame_max
        self.send(
            method_frame(
                0, CONNECTION_TUNE_OK, struct.pack(">HIH", channel_max, frame_max, heartbeat)
            )
        )
        return tune

    def open(self, vhost: str = "/") -> Frame:
        self.send(method_frame(0, CONNECTION_OPEN, shortstr(vhost) + shortstr("") + b"\x00"))
        return self.read_non_heartbeat()

    def handshake(
        self,
        channel_max: int = 0,
        frame_max: int = 131072,
        heartbeat: int = 0,
        capabilities_on: bool = True,
    ) -> None:
        self.start()
        self.start_ok(capabilities_on=capabilities_on)
        self.tune(channel_max, frame_max, heartbeat)
        assert self.open().method == CONNECTION_OPEN_OK

    def open_channel(self, channel: int) -> None:
        self.send(method_frame(channel, CHANNEL_OPEN, shortstr("")))
        self.expect(CHANNEL_OPEN_OK, channel=channel)

    def declare_queue(self, channel: int, queue: str = "", exclusive: bool = True) -> str:
        self.send(
            method_frame(channel, QUEUE_DECLARE, queue_declare_args(queue, exclusive=exclusive))
        )
        ok = self.expect(QUEUE_DECLARE_OK, channel=channel)
        name, _ = read_shortstr(ok.args, 0)
        return name

    def expect_connection_close(self) -> Close:
        """Read connection.close (skipping whatever precedes it), answer close-ok, and check that
        the broker then closes the socket."""
        while True:
            received = self.read_non_heartbeat()
            if received.kind == FRAME_METHOD and received.method == CONNECTION_CLOSE:
                break
        assert received.channel == 0
        close = parse_close(received.args)
        self.send(method_frame(0, CONNECTION_CLOSE_OK))
        assert self.is_closed_by_peer()
        return close


@pytest.fixture
def raw(broker: Broker) -> Iterator[RawClient]:
    client = RawClient(broker)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def ready(raw: RawClient) -> RawClient:
    """A raw client past connection.open with channel 1 open."""
    raw.handshake()
    raw.open_channel(1)
    return raw


# --------------------------------------------------------------------------- protocol header


@pytest.mark.parametrize(
    "header",
    # Versions nobody speaks (0-10 is AMQP 1 1 0 10 and 1.0 AMQP 0 1 0 0, both spoken).
    [b"AMQP\x00\x00\x09\x02", b"AMQP\x00\x00\x0a\x00", b"AMQP\x02\x01\x00\x00", b"HTTP/1.1"],
    ids=["0-9-2", "0-0-10-0", "protocol-2", "http"],
)
def test_unsupported_protocol_header_gets_ours_back(raw: RawClient, header: bytes) -> None:
    raw.send(header)
    assert raw.read_bytes(8) == PROTOCOL_HEADER
    assert raw.is_closed_by_peer()


def test_http_request_gets_protocol_header(raw: RawClient) -> None:
    raw.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert raw.read_bytes(8) == PROTOCOL_HEADER
    assert raw.is_closed_by_peer()


def test_connection_start(raw: RawClient) -> None:
    start = raw.start()
    major, minor = start.args[0], start.args[1]
    assert (major, minor) == (0, 9)
    server_properties, offset = read_longstr(start.args, 2)
    assert b"capabilities" in server_properties
    mechanisms, offset = read_longstr(start.args, offset)
    locales, _ = read_longstr(start.args, offset)
    assert {b"PLAIN", b"AMQPLAIN"} <= set(mechanisms.split())
    assert b"en_US" in locales.split()


def test_tune_proposal(raw: RawClient) -> None:
    raw.start()
    raw.start_ok()
    tune = raw.tune()
    channel_max, frame_max, heartbeat = struct.unpack(">HIH", tune.args)
    assert channel_max > 0
    assert frame_max >= 4096
    assert heartbeat >= 0
    assert raw.open().method == CONNECTION_OPEN_OK


def test_amqplain_login(raw: RawClient) -> None:
    raw.start()
    # AMQPLAIN's response is a field table without its length prefix.
    response = table({"LOGIN": str_field("guest"), "PASSWORD": str_field("guest")})[4:]
    raw.start_ok(mechanism="AMQPLAIN", response=response)
    raw.tune()
    assert raw.open().method == CONNECTION_OPEN_OK


# pure_only: auth/'s refusal, 3 s each (docs/architecture.md, "How it is tested")
@pytest.mark.pure_only
def test_plain_login_wrong_password_is_403(raw: RawClient) -> None:
    raw.start()
    raw.start_ok(response=b"\x00guest\x00wrong")
    close = raw.expect_connection_close()
    assert (
        close.reply_code == 403
    )  # ACCESS_REFUSED, as the client asked authentication_failure_close


# pure_only: auth/'s refusal, 3 s each (docs/architecture.md, "How it is tested")
@pytest.mark.pure_only
def test_wrong_password_without_capability_closes_silently(raw: RawClient) -> None:
    """A client that did not advertise authentication_failure_close just sees the socket close."""
    raw.start()
    raw.start_ok(response=b"\x00guest\x00wrong", capabilities_on=False)
    assert raw.is_closed_by_peer()
    assert raw.buffer == b""


# pure_only: auth/'s refusal, 3 s each (docs/architecture.md, "How it is tested")
@pytest.mark.pure_only
def test_unknown_mechanism_closes_without_reply(raw: RawClient) -> None:
    """The 0-9-1 text: a mechanism the server did not offer makes it close the connection
    without sending any further data (RabbitMQ closes the socket after a short delay)."""
    raw.start()
    raw.start_ok(mechanism="NO-SUCH-MECH", response=b"x")
    assert raw.is_closed_by_peer()
    assert raw.buffer == b""


def test_unknown_vhost_is_530(raw: RawClient, name: str) -> None:
    raw.start()
    raw.start_ok()
    raw.tune()
    raw.send(method_frame(0, CONNECTION_OPEN, shortstr(name) + shortstr("") + b"\x00"))
    close = raw.expect_connection_close()
    assert close.reply_code == 530  # NOT_ALLOWED
    assert (close.class_id, close.method_id) == CONNECTION_OPEN


# --------------------------------------------------------------------------- malformed frames


def test_bad_frame_end_is_501(ready: RawClient) -> None:
    ready.send(
        frame(
            FRAME_METHOD,
            1,
            struct.pack(">HH", *QUEUE_DECLARE) + queue_declare_args(""),
            end=b"\x00",
        )
    )
    close = ready.expect_connection_close()
    assert close.reply_code == 501  # FRAME_ERROR


def test_frame_larger_than_frame_max_is_501(raw: RawClient) -> None:
    raw.handshake(frame_max=4096)
    raw.open_channel(1)
    raw.send(method_frame(1, BASIC_PUBLISH, publish_args("", "nowhere")))
    raw.send(header_frame(1, 10000))
    raw.send(frame(FRAME_BODY, 1, b"x" * 10000))  # 10000 > 4096 - 8
    close = raw.expect_connection_close()
    assert close.reply_code == 501  # FRAME_ERROR


def test_frame_of_exactly_frame_max_is_accepted(raw: RawClient) -> None:
    raw.handshake(frame_max=4096)
    raw.open_channel(1)
    queue = raw.declare_queue(1)
    size = 4096 - 8  # a whole frame of 4096 octets
    raw.send(method_frame(1, BASIC_PUBLISH, publish_args("", queue)))
    raw.send(header_frame(1, size))
    raw.send(frame(FRAME_BODY, 1, b"y" * size))
    raw.send(method_frame(1, BASIC_GET, basic_get_args(queue)))
    raw.expect(BASIC_GET_OK, channel=1)
    header = raw.read_non_heartbeat()
    assert header.kind == FRAME_HEADER
    body = raw.read_non_heartbeat()
    assert (body.kind, body.payload) == (FRAME_BODY, b"y" * size)


def test_unknown_frame_type_is_501(ready: RawClient) -> None:
    ready.send(frame(7, 1, b"\x00\x00"))
    close = ready.expect_connection_close()
    assert close.reply_code == 501  # FRAME_ERROR


@pytest.mark.leveret_only
def test_content_header_on_channel_zero_is_505(ready: RawClient) -> None:
    # Spec 4.2.6.1 says 504 CHANNEL_ERROR; RabbitMQ 3.10.8 answers 505, and so do we.
    ready.send(header_frame(0, 3))
    close = ready.expect_connection_close()
    assert close.reply_code == 505


def test_method_on_unopened_channel_is_504(ready: RawClient) -> None:
    ready.send(method_frame(5, QUEUE_DECLARE, queue_declare_args("", exclusive=True)))
    close = ready.expect_connection_close()
    assert close.reply_code == 504  # CHANNEL_ERROR


def test_channel_open_twice_is_504(ready: RawClient) -> None:
    ready.send(method_frame(1, CHANNEL_OPEN, shortstr("")))
    close = ready.expect_connection_close()
    assert close.reply_code == 504  # CHANNEL_ERROR


def test_body_without_publish_is_505(ready: RawClient) -> None:
    ready.send(frame(FRAME_BODY, 1, b"stray"))
    close = ready.expect_connection_close()
    assert close.reply_code == 505  # UNEXPECTED_FRAME


def test_header_without_publish_is_505(ready: RawClient) -> None:
    ready.send(header_frame(1, 5))
    close = ready.expect_connection_close()
    assert close.reply_code == 505  # UNEXPECTED_FRAME


def test_method_instead_of_content_header_is_505(ready: RawClient) -> None:
    ready.send(method_frame(1, BASIC_PUBLISH, publish_args("", "nowhere")))
    ready.send(method_frame(1, QUEUE_DECLARE, queue_declare_args("", exclusive=True)))
    close = ready.expect_connection_close()
    assert close.reply_code == 505  # UNEXPECTED_FRAME


def test_body_longer_than_declared_size_is_505(ready: RawClient) -> None:
    ready.send(method_frame(1, BASIC_PUBLISH, publish_args("", "nowhere")))
    ready.send(header_frame(1, 3))
    ready.send(frame(FRAME_BODY, 1, b"abc"))
    ready.send(frame(FRAME_BODY, 1, b"def"))  # the message was complete already
    close = ready.expect_connection_close()
    assert close.reply_code == 505  # UNEXPECTED_FRAME


@pytest.mark.leveret_only
def test_heartbeat_on_nonzero_channel_is_505(ready: RawClient) -> None:
    # Spec 4.2.7 says 501 FRAME_ERROR; RabbitMQ 3.10.8 answers 505, and so do we.
    ready.send(frame(FRAME_HEARTBEAT, 1, b""))
    close = ready.expect_connection_close()
    assert close.reply_code == 505


def test_channel_beyond_channel_max_is_530(raw: RawClient) -> None:
    raw.handshake(channel_max=2)
    raw.open_channel(1)
    raw.open_channel(2)
    raw.send(method_frame(3, CHANNEL_OPEN, shortstr("")))
    close = raw.expect_connection_close()
    # RabbitMQ: 530 NOT_ALLOWED (it counts open channels); the 0-9-1 text does not name a code.
    assert close.reply_code == 530


@pytest.mark.parametrize("method", [(60, 999), (99, 10)], ids=["method", "class"])
def test_unknown_method_ends_connection(ready: RawClient, method: tuple[int, int]) -> None:
    ready.send(method_frame(1, method))
    # RabbitMQ drops the TCP connection at once without connection.close; the spec's answer
    # would be connection.close 540 NOT_IMPLEMENTED (or 503 COMMAND_INVALID). Accept either.
    try:
        close = ready.expect_connection_close()
    except (EOFError, ConnectionResetError):
        return
    assert close.reply_code in (503, 540)


def test_truncated_method_arguments_is_501(ready: RawClient) -> None:
    ready.send(method_frame(1, QUEUE_DECLARE, b"\x00"))
    close = ready.expect_connection_close()
    # RabbitMQ: 501 FRAME_ERROR naming the method (the spec's 502 SYNTAX_ERROR would fit too).
    assert close.reply_code == 501
    assert (close.class_id, close.method_id) == QUEUE_DECLARE


def test_method_before_connection_open_is_505(raw: RawClient) -> None:
    raw.start()
    raw.start_ok()
    raw.tune()
    raw.send(method_frame(1, CHANNEL_OPEN, shortstr("")))
    close = raw.expect_connection_close()
    assert close.reply_code == 505  # UNEXPECTED_FRAME (RabbitMQ; the spec names no code)


# --------------------------------------------------------------------------- close handshakes


def test_soft_error_channel_close_carries_offending_method(ready: RawClient, name: str) -> None:
    ready.send(method_frame(1, QUEUE_DECLARE, queue_declare_args(name, passive=True)))
    received = ready.expect(CHANNEL_CLOSE, channel=1)
    close = parse_close(received.args)
    assert close.reply_code == 404
    assert close.reply_text.startswith("NOT_FOUND")
    assert (close.class_id, close.method_id) == QUEUE_DECLARE
    ready.send(method_frame(1, CHANNEL_CLOSE_OK))
    # The channel number is free again and the connection carries on.
    ready.open_channel(1)
    ready.declare_queue(1)


def test_client_channel_close(ready: RawClient) -> None:
    ready.send(
        method_frame(
            1, CHANNEL_CLOSE, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0)
        )
    )
    ready.expect(CHANNEL_CLOSE_OK, channel=1)
    ready.open_channel(1)


def test_client_connection_close(ready: RawClient) -> None:
    ready.send(
        method_frame(
            0, CONNECTION_CLOSE, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0)
        )
    )
    ready.expect(CONNECTION_CLOSE_OK, channel=0)
    # The peer that sent connection.close closes the socket once close-ok is in (RabbitMQ waits
    # for that rather than closing first).


def test_frames_after_server_close_are_discarded(ready: RawClient) -> None:
    """After sending connection.close the server ignores everything but close-ok."""
    ready.send(frame(FRAME_HEARTBEAT, 1, b""))  # provokes connection.close
    ready.send(method_frame(1, QUEUE_DECLARE, queue_declare_args("", exclusive=True)))
    close = ready.expect_connection_close()  # no declare-ok before it, and the socket closes
    assert close.reply_code in (501, 505)  # the spec's 501; RabbitMQ's 505


# --------------------------------------------------------------------------- heartbeats


def read_until_hangup(raw: RawClient, limit: float) -> tuple[bool, int]:
    """Read frames without ever writing, for up to ``limit`` seconds. Returns whether the peer
    hung up, and how many heartbeat frames it sent before that."""
    raw.sock.settimeout(limit)
    started = time.monotonic()
    heartbeats = 0
    try:
        while time.monotonic() - started < limit:
            received = raw.read_frame()
            assert (received.kind, received.channel) == (FRAME_HEARTBEAT, 0), received
            heartbeats += 1
    except (EOFError, ConnectionResetError):
        return True, heartbeats
    return False, heartbeats


def test_silent_client_is_disconnected(raw: RawClient) -> None:
    """heartbeat=1 negotiated and the client never writes: the broker hangs up after about two
    intervals (RabbitMQ: ~3 s, without a connection.close)."""
    raw.handshake(heartbeat=1)
    started = time.monotonic()
    hung_up, heartbeats = read_until_hangup(raw, limit=8)
    elapsed = time.monotonic() - started
    assert hung_up
    assert 1.0 <= elapsed <= 6.0, elapsed
    assert heartbeats >= 1


def test_server_sends_heartbeats(raw: RawClient) -> None:
    raw.handshake(heartbeat=1)
    deadline = time.monotonic() + 2.0
    seen = 0
    while time.monotonic() < deadline:
        raw.send(frame(FRAME_HEARTBEAT, 0, b""))  # keep ourselves alive
        raw.sock.settimeout(0.5)
        try:
            received = raw.read_frame()
        except TimeoutError:
            continue
        assert (received.kind, received.channel, received.payload) == (FRAME_HEARTBEAT, 0, b"")
        seen += 1
    assert seen >= 1


@pytest.mark.leveret_only
def test_connections_opened_together_send_their_heartbeats_apart(broker: Broker) -> None:
    """Each connection's first heartbeat comes 0.75 to 1 times half the interval after
    the broker's last write (server/heartbeat_phase.py), not all at half of it: twenty
    connections opened one after another spread theirs over most of that quarter."""
    clients = [RawClient(broker) for _ in range(20)]
    try:
        opened = []
        for client in clients:
            client.handshake(heartbeat=2)
            opened.append(time.monotonic())
        # Each socket's first bytes timed as they arrive, whichever comes first.
        arrived: dict[int, float] = {}
        deadline = time.monotonic() + 5.0
        while len(arrived) < len(clients) and time.monotonic() < deadline:
            waiting = [c.sock for i, c in enumerate(clients) if i not in arrived]
            readable, _, _ = select.select(waiting, [], [], 0.5)
            now = time.monotonic()
            for sock in readable:
                arrived[next(i for i, c in enumerate(clients) if c.sock is sock)] = now
        assert len(arrived) == len(clients)
        for client in clients:
            assert client.read_frame().kind == FRAME_HEARTBEAT
        offsets = [arrived[i] - at for i, at in enumerate(opened)]
    finally:
        for client in clients:
            client.close()
    # Half the interval is 1 s: each first heartbeat in (0.75, 1] s, late by at most
    # what a busy machine adds; and spread, where one phase for all gives about 1 s each.
    assert all(0.7 <= offset <= 1.3 for offset in offsets), offsets
    assert max(offsets) - min(offsets) >= 0.12, offsets


def test_heartbeating_client_stays_connected(raw: RawClient) -> None:
    raw.handshake(heartbeat=1)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        raw.send(frame(FRAME_HEARTBEAT, 0, b""))
        time.sleep(0.4)
    raw.sock.settimeout(TIMEOUT)
    raw.open_channel(1)
    raw.declare_queue(1)


# --------------------------------------------------------------------------- consumers and content


def test_empty_consumer_tag_gets_server_generated_one(ready: RawClient) -> None:
    queue = ready.declare_queue(1)
    tags = []
    for _ in range(2):
        args = struct.pack(">H", 0) + shortstr(queue) + shortstr("") + b"\x02" + table({})  # no-ack
        ready.send(method_frame(1, BASIC_CONSUME, args))
        ok = ready.expect(BASIC_CONSUME_OK, channel=1)
        tag, _ = read_shortstr(ok.args, 0)
        tags.append(tag)
    assert all(tag.startswith("amq.ctag-") for tag in tags)
    assert tags[0] != tags[1]


# Every field type the issue lists, in RabbitMQ's reading of the 0-9-1 errata ("s" is a signed
# 16-bit integer, "u" unsigned 16-bit; "i" unsigned 32-bit).
ALL_FIELD_TYPES: dict[str, bytes] = {
    "t": b"t\x01",
    "b": b"b" + struct.pack(">b", -5),
    "B": b"B" + struct.pack(">B", 250),
    "s": b"s" + struct.pack(">h", -300),
    "u": b"u" + struct.pack(">H", 60000),
    "I": b"I" + struct.pack(">i", -70000),
    "i": b"i" + struct.pack(">I", 4000000000),
    "l": b"l" + struct.pack(">q", -(2**40)),
    "f": b"f" + struct.pack(">f", 1.5),
    "d": b"d" + struct.pack(">d", -2.25),
    "D": b"D" + struct.pack(">Bi", 2, 314),
    "S": b"S" + longstr("héllo"),
    "x": b"x" + longstr(b"\x00\xff\x01"),
    "A": b"A" + longstr(b"I" + struct.pack(">i", 1) + b"S" + longstr("two") + b"V"),
    "T": b"T" + struct.pack(">Q", 1_700_000_000),
    "F": b"F" + table({"inner": b"t\x00"}),
    "V": b"V",
}


def test_every_field_type_round_trips_byte_identical(ready: RawClient) -> None:
    queue = ready.declare_queue(1)
    # Properties: content-type (bit 15) and headers (bit 13).
    props = shortstr("application/octet-stream") + table(ALL_FIELD_TYPES)
    flags = (1 << 15) | (1 << 13)
    ready.send(method_frame(1, BASIC_PUBLISH, publish_args("", queue)))
    ready.send(header_frame(1, 4, flags, props))
    ready.send(frame(FRAME_BODY, 1, b"body"))
    ready.send(method_frame(1, BASIC_GET, basic_get_args(queue)))
    ready.expect(BASIC_GET_OK, channel=1)
    header = ready.read_non_heartbeat()
    assert header.kind == FRAME_HEADER
    class_id, weight, size, got_flags = struct.unpack_from(">HHQH", header.payload)
    assert (class_id, weight, size, got_flags) == (60, 0, 4, flags)
    assert header.payload[14:] == props
    body = ready.read_non_heartbeat()
    assert (body.kind, body.payload) == (FRAME_BODY, b"body")


def test_zero_length_body_has_no_body_frame(ready: RawClient) -> None:
    queue = ready.declare_queue(1)
    ready.send(method_frame(1, BASIC_PUBLISH, publish_args("", queue)))
    ready.send(header_frame(1, 0))
    ready.send(method_frame(1, BASIC_GET, basic_get_args(queue)))
    ready.expect(BASIC_GET_OK, channel=1)
    header = ready.read_non_heartbeat()
    assert header.kind == FRAME_HEADER
    # The next frame is the reply to the next request, not an empty body frame.
    ready.send(method_frame(1, BASIC_GET, basic_get_args(queue)))
    ready.expect(BASIC_GET_EMPTY, channel=1)


def test_body_split_into_many_small_frames(ready: RawClient) -> None:
    queue = ready.declare_queue(1)
    body = bytes(range(256)) * 4
    ready.send(method_frame(1, BASIC_PUBLISH, publish_args("", queue)))
    ready.send(header_frame(1, len(body)))
    for offset in range(0, len(body), 7):
        ready.send(frame(FRAME_BODY, 1, body[offset : offset + 7]))
    assert _get_body(ready, queue, len(body)) == body


def _get_body(ready: RawClient, queue: str, size: int) -> bytes:
    """``basic.get`` of ``queue``'s head: its body of ``size`` octets, from its frames."""
    ready.send(method_frame(1, BASIC_GET, basic_get_args(queue)))
    ready.expect(BASIC_GET_OK, channel=1)
    assert ready.read_non_heartbeat().kind == FRAME_HEADER
    received = b""
    while len(received) < size:
        chunk = ready.read_non_heartbeat()
        assert chunk.kind == FRAME_BODY
        received += chunk.payload
    return received


def test_a_large_body_frame_dribbled_over_many_reads(ready: RawClient) -> None:
    """A 64 KiB body frame and the publish after it, written in pieces of many sizes with
    a pause between them (each a read of its own, or a few: the broker holds the frame
    across them, tiny pieces and large), arrive whole and in order."""
    ready.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    queue = ready.declare_queue(1)
    bodies = [bytes(range(251)) * 261 + bytes(range(25)), b"after"]  # 65,536 octets, then 5
    data = b"".join(
        method_frame(1, BASIC_PUBLISH, publish_args("", queue))
        + header_frame(1, len(body))
        + frame(FRAME_BODY, 1, body)
        for body in bodies
    )
    offset = 0
    for size in (3, 1, 5, 9000, 2, 1, 30000, 4095, 4097, 7):
        ready.send(data[offset : offset + size])
        offset += size
        time.sleep(0.005)
    ready.send(data[offset:])
    for body in bodies:
        assert _get_body(ready, queue, len(body)) == body


def test_interleaved_content_on_two_channels(ready: RawClient) -> None:
    ready.open_channel(2)
    queue = ready.declare_queue(1)
    for channel in (1, 2):
        ready.send(method_frame(channel, BASIC_PUBLISH, publish_args("", queue)))
    for channel in (1, 2):
        ready.send(header_frame(channel, 2))
    ready.send(frame(FRAME_BODY, 2, b"b2"))
    ready.send(frame(FRAME_BODY, 1, b"a1"))
    bodies = set()
    for _ in range(2):
        ready.send(method_frame(1, BASIC_GET, basic_get_args(queue)))
        ready.expect(BASIC_GET_OK, channel=1)
        assert ready.read_non_heartbeat().kind == FRAME_HEADER
        bodies.add(ready.read_non_heartbeat().payload)
    assert bodies == {b"a1", b"b2"}


BASIC_CANCEL = (60, 30)
QUEUE_DELETE = (50, 40)
QUEUE_DELETE_OK = (50, 41)


@pytest.mark.parametrize("notify", [True, False], ids=["capable", "not-capable"])
def test_server_cancel_only_to_capable_clients(raw: RawClient, notify: bool) -> None:
    """basic.cancel from the server goes only to clients advertising consumer_cancel_notify."""
    raw.handshake(capabilities_on=notify)
    raw.open_channel(1)
    raw.open_channel(2)
    queue = raw.declare_queue(1, exclusive=False)
    args = struct.pack(">H", 0) + shortstr(queue) + shortstr("c1") + b"\x02" + table({})
    raw.send(method_frame(1, BASIC_CONSUME, args))
    raw.expect(BASIC_CONSUME_OK, channel=1)
    raw.send(method_frame(2, QUEUE_DELETE, struct.pack(">H", 0) + shortstr(queue) + b"\x00"))
    seen = []
    while True:
        received = raw.read_non_heartbeat()
        seen.append((received.channel, received.method))
        if received.method == QUEUE_DELETE_OK:
            break
    # Anything sent before delete-ok is there; give a late cancel a moment too.
    raw.send(method_frame(1, QUEUE_DECLARE, queue_declare_args("", exclusive=True)))
    while True:
        received = raw.read_non_heartbeat()
        seen.append((received.channel, received.method))
        if received.method == QUEUE_DECLARE_OK:
            break
    cancels = [entry for entry in seen if entry == (1, BASIC_CANCEL)]
    assert len(cancels) == (1 if notify else 0)
