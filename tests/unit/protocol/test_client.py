"""The client-role machine against the broker's 0-9-1 front end in memory, and against
hand-made server output where the broker cannot be made to misbehave."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import pytest

from leveret.auth.authn import FAILURE_DELAY
from leveret.errors import (
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
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp091.client import (
    ChannelState,
    ClientConnection,
    ConnectionState,
    Deliveries,
    encode_ack,
)
from leveret.protocol.amqp091.client_events import (
    ContentReceived,
    Event,
    HeartbeatMissed,
    HeartbeatReceived,
    MethodReceived,
    ProtocolHeaderReceived,
)
from leveret.server.amqp091 import AMQP091Connection, Limits
from leveret.testing import CodecClient, FakeClock
from leveret.testing.client import feed

if TYPE_CHECKING:
    from leveret.model.broker import Broker


class Pair:
    """A client machine wired to a server connection in memory."""

    def __init__(
        self,
        client: ClientConnection | None = None,
        *,
        limits: Limits | None = None,
        broker: Broker | None = None,
        certificate_identity: str | None = None,
    ) -> None:
        self.clock = FakeClock()
        self.client = client if client is not None else ClientConnection()
        codec = CodecClient.connect(
            broker=broker,
            limits=limits if limits is not None else Limits(heartbeat=0),
            certificate_identity=certificate_identity,
        )
        self.shell = codec.shell
        self.server: AMQP091Connection = codec.conn

    def pump(self) -> list[Event]:
        """Move bytes both ways until neither side has anything to say."""
        events: list[Event] = []
        now = self.clock.now
        for _ in range(1000):
            out = self.client.data_to_send()
            if out:
                feed(self.shell, out, now)
            back = b"".join(self.shell.take_output(now))
            if back:
                events += self.client.receive_data(back, now)
            if not out and not back:
                return events
        raise AssertionError("the two sides never went quiet")

    def methods(self) -> list[tuple[int, m.Method]]:
        return [(e.channel, e.method) for e in self.pump() if isinstance(e, MethodReceived)]


def opened(
    client: ClientConnection | None = None, *, limits: Limits | None = None, channel: bool = True
) -> Pair:
    pair = Pair(client, limits=limits)
    pair.pump()
    assert pair.client.is_open
    if channel:
        pair.client.open_channel(1)
        assert pair.methods() == [(1, m.ChannelOpenOk())]
        assert pair.client.channel_state(1) is ChannelState.OPEN
    return pair


def method_frame(channel: int, method: m.Method) -> bytes:
    return framing.encode_method_frame(channel, method.encode())


def deliver(
    tag: int,
    body: bytes,
    *,
    channel: int = 1,
    frame_max: int = 131072,
    properties: BasicProperties | None = None,
    redelivered: bool = False,
) -> bytes:
    method = m.BasicDeliver(
        consumer_tag="ctag",
        delivery_tag=tag,
        redelivered=redelivered,
        exchange="ex",
        routing_key="rk",
    ).encode()
    raw = (properties or BasicProperties()).encode()
    return framing.encode_message_frames(channel, method, 60, body, raw, frame_max)


# -- the handshake ---------------------------------------------------------------------


def test_handshake_negotiates_the_lower_limits() -> None:
    pair = Pair(
        ClientConnection(frame_max=131072, channel_max=100, heartbeat=0),
        limits=Limits(frame_max=65536, channel_max=2047, heartbeat=60),
    )
    events = pair.pump()
    assert [type(e.method) for e in events if isinstance(e, MethodReceived)] == [
        m.ConnectionStart,
        m.ConnectionTune,
        m.ConnectionOpenOk,
    ]
    client = pair.client
    assert client.state is ConnectionState.OPEN
    assert (client.frame_max, client.channel_max, client.heartbeat) == (65536, 100, 0)
    assert (pair.server.frame_max, pair.server.channel_max) == (65536, 100)
    assert client.server_properties["product"] == "Leveret"


@pytest.mark.parametrize(
    ("ours", "theirs", "agreed"), [(0, 60, 0), (10, 30, 10), (60, 30, 30), (10, 0, 10)]
)
def test_heartbeat_is_ours_capped_by_the_servers_offer(ours: int, theirs: int, agreed: int) -> None:
    pair = Pair(ClientConnection(heartbeat=ours), limits=Limits(heartbeat=theirs))
    pair.pump()
    assert pair.client.heartbeat == agreed
    assert pair.client.next_deadline() == (agreed / 2 if agreed else None)


def test_amqplain_login() -> None:
    pair = Pair(ClientConnection(mechanism="AMQPLAIN"))
    pair.pump()
    assert pair.client.is_open


def test_external_login_takes_the_transports_identity() -> None:
    pair = Pair(ClientConnection(username="", mechanism="EXTERNAL"), certificate_identity="guest")
    pair.pump()
    assert pair.client.is_open


def test_external_login_without_an_identity_is_not_offered() -> None:
    # No certificate: the server does not offer EXTERNAL, and the machine says so.
    pair = Pair(ClientConnection(mechanism="EXTERNAL"))
    with pytest.raises(AMQPError, match="not EXTERNAL"):
        pair.pump()
    assert pair.client.closed


def test_a_refused_login_is_answered_and_closes() -> None:
    pair = Pair(ClientConnection(password="wrong"))
    pair.pump()
    # The server answers a refused login only once its delay has passed.
    pair.clock.advance(FAILURE_DELAY)
    pair.shell.tick(pair.clock.now)
    events = pair.pump()
    close = events[-1]
    assert isinstance(close, MethodReceived)
    assert isinstance(close.method, m.ConnectionClose)
    assert close.method.reply_code == 403
    assert pair.client.closed
    assert pair.client.close_reason == close.method
    assert pair.server.finished  # it got our close-ok


def test_an_unknown_vhost_is_530() -> None:
    pair = Pair(ClientConnection(vhost="nope"))
    pair.pump()
    assert pair.client.closed
    assert pair.client.close_reason is not None
    assert pair.client.close_reason.reply_code == 530
    assert pair.server.finished


@pytest.mark.parametrize("cut", [1, 4, 7, 8])
def test_a_protocol_header_back_means_the_server_refused_us(cut: int) -> None:
    client = ClientConnection()
    assert client.data_to_send() == framing.PROTOCOL_HEADER
    reply = b"AMQP\x00\x00\x09\x01"
    events = client.receive_data(reply[:cut], 0) + client.receive_data(reply[cut:], 0)
    assert events == [ProtocolHeaderReceived(reply)]
    assert client.closed


def test_a_server_without_our_mechanism_is_refused() -> None:
    client = ClientConnection()
    start = m.ConnectionStart(version_major=0, version_minor=9, mechanisms=b"EXTERNAL")
    with pytest.raises(AMQPError, match="EXTERNAL"):
        client.receive_data(method_frame(0, start), 0)
    assert client.closed


def test_a_tiny_frame_max_offer_is_refused_with_530() -> None:
    client = ClientConnection()
    client.receive_data(method_frame(0, m.ConnectionStart(0, 9, {}, b"PLAIN", b"en_US")), 0)
    client.data_to_send()
    with pytest.raises(NotAllowed, match="frame_max"):
        client.receive_data(method_frame(0, m.ConnectionTune(0, 1024, 0)), 0)
    close = m.decode_method(client.data_to_send()[7:-1])
    assert isinstance(close, m.ConnectionClose)
    assert (close.reply_code, close.class_id, close.method_id) == (530, 10, 30)


# -- channels and closes ---------------------------------------------------------------


def test_open_and_close_channels() -> None:
    pair = opened()
    client = pair.client
    assert client.open_channel() == 2
    assert pair.methods() == [(2, m.ChannelOpenOk())]
    client.close_channel(1)
    assert client.channel_state(1) is ChannelState.CLOSING
    assert pair.methods() == [(1, m.ChannelCloseOk())]
    assert client.channel_state(1) is None
    assert client.open_channel() == 1
    pair.pump()
    assert client.channel_state(1) is ChannelState.OPEN


def test_a_server_channel_close_is_answered_with_close_ok() -> None:
    pair = opened()
    pair.client.send_method(1, m.QueueDeclare(queue="missing", passive=True))
    [(channel, close)] = pair.methods()
    assert channel == 1
    assert isinstance(close, m.ChannelClose)
    assert close.reply_code == 404
    assert pair.client.channel_state(1) is None
    # The server got our close-ok: channel 1 may be opened again.
    pair.client.open_channel(1)
    assert pair.methods() == [(1, m.ChannelOpenOk())]


def test_a_close_crossing_ours_is_answered_and_ours_completes() -> None:
    pair = opened()
    client = pair.client
    client.close_channel(1)
    events = client.receive_data(method_frame(1, m.ChannelClose(406, "crossed", 60, 40)), 0)
    assert [type(e.method) for e in events if isinstance(e, MethodReceived)] == [m.ChannelClose]
    assert client.data_to_send().endswith(method_frame(1, m.ChannelCloseOk()))
    assert client.channel_state(1) is ChannelState.CLOSING
    client.receive_data(method_frame(1, m.ChannelCloseOk()), 0)
    assert client.channel_state(1) is None


def test_after_our_channel_close_only_close_ok_counts() -> None:
    pair = opened()
    client = pair.client
    client.close_channel(1)
    late = deliver(1, b"late") + method_frame(1, m.BasicCancel(consumer_tag="c"))
    assert client.receive_data(late, 0) == []
    assert client.receive_data(method_frame(1, m.ChannelCloseOk()), 0) == [
        MethodReceived(1, m.ChannelCloseOk())
    ]


def test_a_server_connection_close_is_answered_with_close_ok() -> None:
    pair = opened()
    pair.client.send_method(1, m.QueueDeclare(queue="q"))
    pair.client.send_method(1, m.BasicConsume(queue="q", consumer_tag="c"))
    pair.client.send_method(1, m.BasicConsume(queue="q", consumer_tag="c"))
    methods = pair.methods()
    assert isinstance(methods[-1][1], m.ConnectionClose)
    assert methods[-1][1].reply_code == 530
    assert pair.client.closed
    assert pair.server.finished


def test_our_connection_close_waits_for_close_ok_and_discards_the_rest() -> None:
    pair = opened()
    client = pair.client
    client.close()
    assert client.state is ConnectionState.CLOSING
    assert client.receive_data(deliver(1, b"late") + framing.HEARTBEAT_FRAME, 0) == []
    client.receive_data(method_frame(0, m.ConnectionCloseOk()), 0)
    assert client.closed
    assert client.receive_data(b"anything at all", 0) == []


def test_channel_flow_is_answered() -> None:
    pair = opened()
    events = pair.client.receive_data(method_frame(1, m.ChannelFlow(active=False)), 0)
    assert events == [MethodReceived(1, m.ChannelFlow(active=False))]
    assert pair.client.data_to_send() == method_frame(1, m.ChannelFlowOk(active=False))


def test_blocked_and_unblocked_are_followed() -> None:
    pair = opened()
    client = pair.client
    client.receive_data(method_frame(0, m.ConnectionBlocked(reason="low on memory")), 0)
    assert client.blocked
    client.receive_data(method_frame(0, m.ConnectionUnblocked()), 0)
    assert not client.blocked


# -- content -----------------------------------------------------------------------------


def test_publish_splits_at_frame_max_and_get_ok_is_assembled() -> None:
    pair = opened(ClientConnection(frame_max=4096))
    client = pair.client
    client.send_method(1, m.QueueDeclare(queue="q"))
    pair.pump()
    body = bytes(range(256)) * 40  # 10240 bytes: three body frames each way
    props = BasicProperties(content_type="application/octet-stream", headers={"k": 1})
    assert client.publish(1, "", "q", body, props.encode()) == 0
    client.send_method(1, m.BasicGet(queue="q", no_ack=True))
    [got] = pair.pump()
    assert isinstance(got, ContentReceived)
    assert isinstance(got.method, m.BasicGetOk)
    assert (got.body, got.decode_properties()) == (body, props)


def test_deliveries_as_events_and_into_columns() -> None:
    for columns in (None, Deliveries()):
        pair = opened(ClientConnection(frame_max=4096, deliveries=columns))
        client = pair.client
        client.send_method(1, m.QueueDeclare(queue="q"))
        client.send_method(1, m.BasicConsume(queue="q", consumer_tag="c", no_ack=True))
        pair.pump()
        bodies = [b"", b"small", b"x" * 10000]
        for body in bodies:
            client.publish(1, "", "q", body, BasicProperties(priority=1).encode())
        events = pair.pump()
        if columns is None:
            assert [e.body for e in events if isinstance(e, ContentReceived)] == bodies
        else:
            assert events == []
            assert columns.bodies == bodies
            assert columns.tags == [1, 2, 3]
            assert columns.channels == [1, 1, 1]
            assert columns.routing_keys == [b"q"] * 3
            assert columns.exchanges == [b""] * 3
            assert {BasicProperties.decode(p).priority for p in columns.properties} == {1}


def test_content_of_two_channels_interleaved_is_assembled_per_channel() -> None:
    for columns in (None, Deliveries()):
        pair = opened(ClientConnection(deliveries=columns))
        client = pair.client
        client.open_channel(2)
        pair.pump()
        one = deliver(1, b"one", channel=1)
        two = deliver(2, b"two", channel=2)
        method_end = one.index(b"\xce\x02\x00\x01") + 1  # ch 1: method | header | body
        header_end = one.index(b"\xce\x03\x00\x01") + 1
        data = one[:header_end] + two + one[header_end:]
        assert method_end < header_end
        events = client.receive_data(data, 0)
        if columns is None:
            got = [(e.channel, e.body) for e in events if isinstance(e, ContentReceived)]
        else:
            assert events == []
            got = list(zip(columns.channels, columns.bodies, strict=True))
        assert got == [(2, b"two"), (1, b"one")]


def test_mandatory_return_and_confirms() -> None:
    pair = opened()
    client = pair.client
    client.send_method(1, m.QueueDeclare(queue="q"))
    client.send_method(1, m.ConfirmSelect())
    pair.pump()
    assert client.publish(1, "", "q", b"1") == 1
    assert client.publish(1, "", "nowhere", b"2", mandatory=True) == 2
    assert client.publish(1, "", "q", b"3") == 3
    assert client.unconfirmed(1) == 3
    events = pair.pump()
    returned = [e for e in events if isinstance(e, ContentReceived)]
    assert len(returned) == 1
    assert isinstance(returned[0].method, m.BasicReturn)
    assert (returned[0].method.reply_code, returned[0].body) == (312, b"2")
    assert client.unconfirmed(1) == 0
    assert client.nacked(1) == 0


def test_acks_go_out_as_one_struct_each() -> None:
    pair = opened()
    client = pair.client
    client.send_method(1, m.QueueDeclare(queue="q"))
    client.send_method(1, m.BasicConsume(queue="q", consumer_tag="c"))
    pair.pump()
    client.publish(1, "", "q", b"a")
    client.publish(1, "", "q", b"b")
    pair.pump()
    client.ack(1, 2, multiple=True)
    data = client.data_to_send()
    assert data == encode_ack(1, 2, True) == method_frame(1, m.BasicAck(2, True))
    feed(pair.shell, data, 0)
    client.close_channel(1)  # unacked deliveries would go back to the queue
    client.open_channel(2)
    client.send_method(2, m.QueueDeclare(queue="q", passive=True))
    ok = pair.methods()[-1][1]
    assert isinstance(ok, m.QueueDeclareOk)
    assert ok.message_count == 0


def test_confirm_bookkeeping_with_holes_multiple_and_nacks() -> None:
    pair = opened()
    client = pair.client
    client.send_method(1, m.ConfirmSelect())
    client.receive_data(method_frame(1, m.ConfirmSelectOk()), 0)
    assert client.publish_encoded(1, b"", count=10) == 1
    client.data_to_send()
    assert client.unconfirmed(1) == 10

    def confirm(method: m.Method) -> None:
        assert client.receive_data(method_frame(1, method), 0) == [MethodReceived(1, method)]

    confirm(m.BasicAck(3, multiple=True))
    confirm(m.BasicAck(5))
    assert client.unconfirmed(1) == 6
    confirm(m.BasicNack(4, requeue=False))
    assert (client.unconfirmed(1), client.nacked(1)) == (5, 1)
    confirm(m.BasicNack(8, multiple=True))
    assert (client.unconfirmed(1), client.nacked(1)) == (2, 4)
    confirm(m.BasicAck(0, multiple=True))
    assert client.unconfirmed(1) == 0
    with pytest.raises(PreconditionFailed, match="delivery tag 11"):
        client.receive_data(method_frame(1, m.BasicAck(11)), 0)


# -- heartbeats -----------------------------------------------------------------------


def test_heartbeats_keep_an_idle_connection_alive() -> None:
    pair = Pair(ClientConnection(heartbeat=10), limits=Limits(heartbeat=10))
    pair.pump()
    client = pair.client
    clock = pair.clock
    for _ in range(10):  # 40 s: the server would drop a silent peer after 20
        clock.advance(4)
        assert client.next_deadline() is not None
        assert client.tick(clock.now) == []
        pair.server.tick(clock.now)
        events = pair.pump()
        assert all(isinstance(e, HeartbeatReceived) for e in events)
    assert not pair.server.finished
    assert client.is_open


def test_a_heartbeat_is_sent_only_when_idle_for_half_the_interval() -> None:
    pair = Pair(ClientConnection(heartbeat=10), limits=Limits(heartbeat=10))
    pair.pump()
    client = pair.client
    client.tick(4)
    assert client.data_to_send() == b""
    client.tick(5)
    assert client.data_to_send() == framing.HEARTBEAT_FRAME
    client.receive_data(framing.HEARTBEAT_FRAME, 7)
    client.open_channel(1)  # something else written at 7
    client.tick(7)
    assert client.data_to_send() == method_frame(1, m.ChannelOpen())
    assert client.next_deadline() == 12
    client.tick(11)
    assert client.data_to_send() == b""
    client.tick(12)
    assert client.data_to_send() == framing.HEARTBEAT_FRAME


def test_a_silent_server_is_reported_after_two_intervals() -> None:
    pair = Pair(ClientConnection(heartbeat=10), limits=Limits(heartbeat=10))
    pair.pump()
    client = pair.client
    client.receive_data(framing.HEARTBEAT_FRAME, 5)
    assert client.tick(25) == []
    assert client.tick(25.5) == [HeartbeatMissed(20.5)]
    assert client.closed


# -- the server breaking the protocol ------------------------------------------------------

_BAD_INPUT = {
    "frame end": (deliver(1, b"x")[:-1] + b"\x00", FrameError),
    "unknown frame type": (framing.encode_frame(9, 1, b"xx"), FrameError),
    "oversized frame": (framing.encode_frame(1, 1, b"\x00" * 5000)[:20], FrameError),
    "heartbeat on a channel": (framing.encode_frame(framing.FRAME_HEARTBEAT, 1, b""), FrameError),
    "short content header": (
        method_frame(1, m.BasicGetOk(1, False, "", "q", 0))
        + framing.encode_frame(framing.FRAME_HEADER, 1, b"\x00\x3c"),
        FrameError,
    ),
    "body longer than announced": (
        method_frame(1, m.BasicGetOk(1, False, "", "q", 0))
        + framing.encode_content_frames(1, 60, b"ab", b"\x00\x00", 4096)[0]
        + framing.encode_frame(framing.FRAME_BODY, 1, b"abc"),
        FrameError,
    ),
    "body without a content method": (framing.encode_frame(3, 1, b"body"), UnexpectedFrame),
    "method inside content": (
        method_frame(1, m.BasicGetOk(1, False, "", "q", 0)) + method_frame(1, m.BasicQosOk()),
        UnexpectedFrame,
    ),
    "header of another class": (
        method_frame(1, m.BasicGetOk(1, False, "", "q", 0))
        + framing.encode_content_frames(1, 50, b"", b"\x00\x00", 4096)[0],
        UnexpectedFrame,
    ),
    "method on a channel never opened": (method_frame(7, m.QueueDeclareOk("q")), ChannelError),
    "content on channel 0": (framing.encode_frame(2, 0, b"\x00" * 14), ChannelError),
    "channel method on channel 0": (method_frame(0, m.QueueDeclareOk("q")), ChannelError),
    "connection method on a channel": (method_frame(1, m.ConnectionOpenOk()), CommandInvalid),
    "open-ok of an open channel": (method_frame(1, m.ChannelOpenOk()), CommandInvalid),
    "close-ok never asked for": (method_frame(0, m.ConnectionCloseOk()), CommandInvalid),
    "second tune": (method_frame(0, m.ConnectionTune(0, 0, 0)), CommandInvalid),
    "ack outside confirm mode": (method_frame(1, m.BasicAck(1)), CommandInvalid),
    "unknown method": (framing.encode_frame(1, 1, struct.pack(">HH", 99, 1)), CommandInvalid),
    "malformed method": (framing.encode_frame(1, 1, struct.pack(">HH", 50, 11)), SyntaxError_),
    "truncated ack": (framing.encode_frame(1, 1, struct.pack(">HHQ", 60, 80, 1)), SyntaxError_),
    "malformed deliver": (
        framing.encode_frame(1, 1, b"\x00\x3c\x00\x3c\xff")
        + b"".join(framing.encode_content_frames(1, 60, b"x", b"\x00\x00", 4096)),
        SyntaxError_,
    ),
    "deliver with a 30-byte exchange name in 10 bytes": (
        framing.encode_frame(1, 1, b"\x00\x3c\x00\x3c\x00" + bytes(9) + b"\x1e")
        + b"".join(framing.encode_content_frames(1, 60, b"x", b"\x00\x00", 4096)),
        SyntaxError_,
    ),
}


@pytest.mark.parametrize("case", sorted(_BAD_INPUT))
@pytest.mark.parametrize("columns", [False, True])
def test_bad_server_input_is_the_specs_error_and_a_close(case: str, columns: bool) -> None:
    data, error = _BAD_INPUT[case]
    client = opened(
        ClientConnection(frame_max=4096, deliveries=Deliveries() if columns else None)
    ).client
    if case == "truncated ack":
        client.send_method(1, m.ConfirmSelect())
    client.data_to_send()
    with pytest.raises(AMQPError) as excinfo:
        client.receive_data(data, 0)
    assert type(excinfo.value) is error
    close = m.decode_method(client.data_to_send()[7:-1])
    assert isinstance(close, m.ConnectionClose)
    assert close.reply_code == error.reply_code
    assert client.state is (
        ConnectionState.CLOSED if error is FrameError else ConnectionState.CLOSING
    )
    assert client.receive_data(deliver(1, b"late"), 0) == []


def test_events_before_an_error_are_salvaged() -> None:
    client = opened().client
    with pytest.raises(FrameError):
        client.receive_data(framing.HEARTBEAT_FRAME + b"\x09" + b"\x00" * 7, 0)
    assert client.salvaged == [HeartbeatReceived()]


# -- our own misuse ------------------------------------------------------------------------


def test_misuse_is_a_runtime_error_and_sends_nothing() -> None:
    fresh = ClientConnection()
    fresh.data_to_send()
    with pytest.raises(RuntimeError, match="AWAIT_START"):
        fresh.open_channel(1)
    client = opened().client
    client.data_to_send()
    with pytest.raises(RuntimeError, match="not open"):
        client.publish(2, "", "q", b"")
    with pytest.raises(RuntimeError, match="not open"):
        client.ack(2, 1)
    with pytest.raises(RuntimeError, match="content"):
        client.send_method(1, m.BasicPublish())
    with pytest.raises(RuntimeError, match="channel_max"):
        client.open_channel(5000)
    with pytest.raises(RuntimeError, match="already OPEN"):
        client.open_channel(1)
    with pytest.raises(RuntimeError, match="close-ok"):
        client.send_method(1, m.ChannelCloseOk())
    assert client.data_to_send() == b""
    with pytest.raises(ValueError, match="frame_max"):
        ClientConnection(frame_max=1024)
    with pytest.raises(ValueError, match="mechanism"):
        ClientConnection(mechanism="GSSAPI")
