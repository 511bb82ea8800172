"""The sans-IO 0-9-1 front end without sockets, driven through ``leveret.testing.CodecClient``."""

from __future__ import annotations

import struct

import pytest

from leveret.auth.authn import FAILURE_DELAY
from leveret.auth.users import UserStore
from leveret.convert.amqp091 import wire_message
from leveret.model.broker import Broker
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp091.channel import LARGE_BODY
from leveret.protocol.amqp091.connection import PACED_TURN_FRAMES, TURN_FRAMES, Limits
from leveret.server.amqp091 import handlers
from leveret.server.amqp091.channel import Channel
from leveret.testing import (
    DEFAULT_CAPABILITIES,
    CodecClient,
    Delivery,
    Heartbeat,
    MethodFrame,
    ProtocolHeader,
    amqplain_response,
)
from tests.queue_support import classic


def connected(
    *, broker: Broker | None = None, limits: Limits | None = None, **handshake: object
) -> CodecClient:
    client = CodecClient.connect(broker=broker, limits=limits)
    client.handshake(**handshake)  # type: ignore[arg-type]
    client.open_channel(1)
    return client


def expect_connection_close(
    client: CodecClient, code: int, *, desynced: bool = False
) -> m.ConnectionClose:
    """Expect connection.close ``code``, answer close-ok and check the connection ends.

    After a framing error (``desynced``) the byte stream cannot be trusted, so the close-ok
    may not be recognised: the connection must then end by the close timeout.
    """
    close = client.expect(0, m.ConnectionClose)
    assert close.reply_code == code, close
    client.send(0, m.ConnectionCloseOk())
    if desynced:
        client.tick(10)
    assert client.closed
    return close


def expect_channel_close(client: CodecClient, channel: int, code: int) -> m.ChannelClose:
    close = client.expect(channel, m.ChannelClose)
    assert close.reply_code == code, close
    return close


def declare(client: CodecClient, queue: str, channel: int = 1, *, exclusive: bool = False) -> None:
    client.send(channel, m.QueueDeclare(queue=queue, exclusive=exclusive))
    client.expect(channel, m.QueueDeclareOk)


# -- the handshake -------------------------------------------------------------------


def test_handshake_and_server_properties() -> None:
    client = CodecClient.connect(limits=Limits(channel_max=100, frame_max=65536, heartbeat=30))
    start = client.handshake(channel_max=10, frame_max=8192)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert set(start.mechanisms.split()) == {b"PLAIN", b"AMQPLAIN"}
    assert b"en_US" in start.locales.split()
    props = start.server_properties
    assert props["product"] == "Leveret"
    for key in ("version", "platform", "copyright", "information"):
        assert isinstance(props[key], str)
    capabilities = props["capabilities"]
    assert isinstance(capabilities, dict)
    for capability in (
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "authentication_failure_close",
        "per_consumer_qos",
    ):
        assert capabilities.get(capability) is True, capability
    assert client.tune == m.ConnectionTune(channel_max=100, frame_max=65536, heartbeat=30)
    assert client.conn.frame_max == 8192
    assert client.conn.channel_max == 10
    client.expect_nothing()
    assert not client.closed


def test_amqplain_login() -> None:
    client = CodecClient.connect()
    client.handshake(mechanism="AMQPLAIN")
    client.open_channel(1)
    assert client.shell.user is not None
    assert client.shell.user.name == "guest"


def test_amqplain_response_helper_matches_the_wire_format() -> None:
    raw = amqplain_response("u", "p")
    assert raw.startswith(b"\x05LOGINS\x00\x00\x00\x01u")


def test_wrong_password_with_authentication_failure_close_gets_403() -> None:
    client = CodecClient.connect()
    client.send_header()
    client.expect(0, m.ConnectionStart)
    client.start_ok(password="wrong")
    client.tick(FAILURE_DELAY)  # a refusal is answered after the delay
    close = expect_connection_close(client, 403)
    assert "ACCESS_REFUSED" in close.reply_text
    assert (close.class_id, close.method_id) == (0, 0)  # RabbitMQ 3.10.8 names no method


def test_wrong_password_without_the_capability_just_closes() -> None:
    client = CodecClient.connect()
    client.send_header()
    client.expect(0, m.ConnectionStart)
    caps = {k: v for k, v in DEFAULT_CAPABILITIES.items() if k != "authentication_failure_close"}
    client.start_ok(password="wrong", capabilities=caps)
    assert client.frames() == []
    assert client.closed


def test_unknown_user_is_refused() -> None:
    client = CodecClient.connect()
    client.send_header()
    client.expect(0, m.ConnectionStart)
    client.start_ok(user="nobody", password="guest")
    client.tick(FAILURE_DELAY)
    expect_connection_close(client, 403)


def test_guest_is_refused_from_a_non_loopback_peer() -> None:
    client = CodecClient.connect(loopback=False, peer="192.0.2.7:4000")
    client.send_header()
    client.expect(0, m.ConnectionStart)
    client.start_ok()
    client.tick(FAILURE_DELAY)
    expect_connection_close(client, 403)


def test_other_users_may_connect_from_anywhere() -> None:
    users = UserStore.with_default_user()
    users.add("app", "secret")
    client = CodecClient.connect(users=users, loopback=False, peer="192.0.2.7:4000")
    client.handshake(user="app", password="secret")
    client.open_channel(1)


def test_unknown_vhost_is_530() -> None:
    client = CodecClient.connect()
    client.send_header()
    client.expect(0, m.ConnectionStart)
    client.start_ok()
    client.expect(0, m.ConnectionTune)
    client.send(0, m.ConnectionTuneOk(channel_max=2047, frame_max=131072, heartbeat=0))
    client.send(0, m.ConnectionOpen(virtual_host="/nope"))
    close = expect_connection_close(client, 530)
    assert (close.class_id, close.method_id) == (10, 40)


@pytest.mark.parametrize(
    "header",
    [b"AMQP\x00\x00\x09\x02", b"AMQP\x01\x01\x00\x09", b"GET / HTTP/1.1\r\n\r\n"],
)
def test_bad_protocol_header_gets_ours_back_then_close(header: bytes) -> None:
    client = CodecClient.connect()
    client.send_header(header)
    assert client.frames() == [ProtocolHeader(framing.PROTOCOL_HEADER)]
    assert client.closed


def test_protocol_header_in_pieces() -> None:
    client = CodecClient.connect()
    for byte in framing.PROTOCOL_HEADER:
        client.send_raw(bytes([byte]))
    client.expect(0, m.ConnectionStart)


@pytest.mark.parametrize(
    ("channel_max", "frame_max"),
    [
        (2047, 1024),  # below the minimum
        (2047, 16384),  # above the offer
        (2047, 0),  # "no limit" is above the offer
        (2048, 8192),  # channel_max above the offer
        (0, 8192),
    ],
)
def test_tune_ok_outside_the_offer_drops_the_socket(channel_max: int, frame_max: int) -> None:
    # RabbitMQ 3.10.8: no connection.close before the connection is open, the socket goes.
    client = CodecClient.connect(limits=Limits(frame_max=8192))
    client.send_header()
    client.expect(0, m.ConnectionStart)
    client.start_ok()
    client.expect(0, m.ConnectionTune)
    client.send(0, m.ConnectionTuneOk(channel_max=channel_max, frame_max=frame_max, heartbeat=0))
    assert client.frames() == []
    assert client.conn.should_close_transport


def test_channel_max_counts_open_channels_not_their_numbers() -> None:
    # RabbitMQ 3.10.8: any channel number opens while fewer than channel_max are open.
    client = CodecClient.connect()
    client.handshake(channel_max=2)
    client.open_channel(2)
    client.open_channel(65535)
    client.send(3, m.ChannelOpen())
    close = expect_connection_close(client, 530)
    assert (close.class_id, close.method_id) == (20, 10)
    assert "reached the negotiated channel_max (2)" in close.reply_text


# -- heartbeats ----------------------------------------------------------------------


def test_heartbeat_is_sent_when_idle() -> None:
    client = CodecClient.connect()
    client.handshake(heartbeat=10)
    client.tick(2)
    assert client.frames() == []
    client.tick(4)  # t = 6: more than half an interval since we last wrote
    assert client.frames() == [Heartbeat()]
    client.tick(1)
    assert client.frames() == []


def test_no_heartbeats_when_disabled() -> None:
    client = CodecClient.connect()
    client.handshake(heartbeat=0)
    client.tick(1000)
    assert client.frames() == []
    assert not client.closed


def test_silent_peer_is_closed_after_two_intervals() -> None:
    client = CodecClient.connect()
    client.handshake(heartbeat=10)
    client.tick(15)
    client.send_raw(framing.HEARTBEAT_FRAME)  # t = 15: alive
    client.tick(20)  # t = 35: 20 s of silence, not more
    assert not client.closed
    client.tick(1)  # t = 36
    assert client.closed


def test_heartbeat_on_a_channel_other_than_zero_is_505() -> None:
    client = connected()
    client.send_raw(framing.encode_frame(framing.FRAME_HEARTBEAT, 1, b""))
    close = expect_connection_close(client, 505)
    assert (close.class_id, close.method_id) == (0, 0)


# -- framing errors ------------------------------------------------------------------


def test_bad_frame_end_is_501() -> None:
    client = connected()
    frame = bytearray(client.encode(1, m.QueueDeclare(queue="q")))
    frame[-1] = 0x00
    client.send_raw(bytes(frame))
    expect_connection_close(client, 501, desynced=True)


def test_oversize_frame_is_501() -> None:
    client = connected(frame_max=4096)
    client.send(1, m.QueueDeclare(queue="q", arguments={"x-big": "x" * 5000}))
    expect_connection_close(client, 501, desynced=True)


def test_unknown_frame_type_is_501() -> None:
    client = connected()
    client.send_raw(framing.encode_frame(9, 1, b"xx"))
    expect_connection_close(client, 501, desynced=True)


def test_content_on_channel_zero_is_505() -> None:
    client = connected()
    header = framing.encode_content_frames(0, 60, b"x", BasicProperties().encode(), 131072)
    client.send_raw(header[0])
    close = expect_connection_close(client, 505)
    assert (close.class_id, close.method_id) == (0, 0)


def test_method_on_an_unopened_channel_is_504() -> None:
    client = connected()
    client.send(5, m.QueueDeclare(queue="q"))
    close = expect_connection_close(client, 504)
    assert (close.class_id, close.method_id) == (50, 10)


def test_body_without_header_is_505() -> None:
    client = connected()
    client.send(1, m.BasicPublish(exchange="", routing_key="q"))
    client.send_raw(framing.encode_frame(framing.FRAME_BODY, 1, b"body"))
    expect_connection_close(client, 505)


def test_header_without_publish_is_505() -> None:
    client = connected()
    frames = framing.encode_content_frames(1, 60, b"x", BasicProperties().encode(), 131072)
    client.send_raw(frames[0])
    expect_connection_close(client, 505)


def test_method_in_the_middle_of_content_is_505() -> None:
    client = connected()
    client.send(1, m.BasicPublish(exchange="", routing_key="q"))
    client.send(1, m.QueueDeclare(queue="q"))
    expect_connection_close(client, 505)


def test_malformed_method_is_a_connection_error() -> None:
    client = connected()
    client.send_raw(framing.encode_frame(framing.FRAME_METHOD, 1, struct.pack(">HH", 50, 10)))
    close = client.expect(0, m.ConnectionClose)
    assert close.reply_code in (501, 502)


def test_unknown_method_is_503() -> None:
    client = connected()
    client.send_raw(framing.encode_frame(framing.FRAME_METHOD, 1, struct.pack(">HH", 99, 1)))
    expect_connection_close(client, 503)


# -- content -------------------------------------------------------------------------


def test_publish_and_get_a_body_split_across_frames() -> None:
    client = connected(frame_max=4096)
    declare(client, "q")
    body = bytes(range(256)) * 40  # 10240 bytes: three body frames each way
    props = BasicProperties(content_type="application/octet-stream", headers={"k": 1})
    client.publish(1, "", "q", body, props)
    client.send(1, m.BasicGet(queue="q", no_ack=True))
    got = client.expect_content(1, m.BasicGetOk)
    assert got.body == body
    assert got.properties == props
    assert isinstance(got.method, m.BasicGetOk)
    assert got.method.message_count == 0


def test_message_larger_than_the_maximum_closes_the_channel_311_only() -> None:
    client = connected(limits=Limits(max_message_size=1000))
    declare(client, "q")
    client.publish(1, "", "q", b"x" * 1001)
    close = expect_channel_close(client, 1, 311)
    assert (close.class_id, close.method_id) == (60, 40)
    client.send(1, m.ChannelCloseOk())
    assert not client.closed
    client.open_channel(1)
    client.publish(1, "", "q", b"x" * 1000)
    client.send(1, m.BasicGet(queue="q", no_ack=True))
    assert client.expect_content(1, m.BasicGetOk).body == b"x" * 1000


def test_empty_body_message() -> None:
    client = connected()
    declare(client, "q")
    client.publish(1, "", "q", b"")
    client.send(1, m.BasicGet(queue="q", no_ack=True))
    assert client.expect_content(1, m.BasicGetOk).body == b""


def test_consume_ok_precedes_the_first_delivery() -> None:
    client = connected()
    declare(client, "q")
    client.publish(1, "", "q", b"waiting")
    client.send(1, m.BasicConsume(queue="q", consumer_tag="c"))
    assert client.expect(1, m.BasicConsumeOk).consumer_tag == "c"
    delivery = client.expect_content(1)
    assert delivery.body == b"waiting"
    assert delivery.method == m.BasicDeliver(
        consumer_tag="c", delivery_tag=1, redelivered=False, exchange="", routing_key="q"
    )


def test_deliveries_keep_their_fields_as_properties_and_names_change() -> None:
    # The deliver encoding keeps one struct per length of properties (16 at most, then it
    # starts again) and re-encodes the names when the exchange or routing key changes:
    # each delivery must still carry its own properties, names, tag and body.
    client = connected()
    declare(client, "q")
    client.send(1, m.ExchangeDeclare(exchange="x", type="direct"))
    client.expect(1, m.ExchangeDeclareOk)
    client.send(1, m.QueueBind(queue="q", exchange="x", routing_key="q"))
    client.expect(1, m.QueueBindOk)
    sent = []
    for i in range(40):
        properties = BasicProperties(message_id="m" * (i % 20), priority=i % 10)
        exchange = "x" if i % 7 == 3 else ""
        sent.append((exchange, properties, b"body %d" % i))
        client.publish(1, exchange, "q", b"body %d" % i, properties)
    client.send(1, m.BasicConsume(queue="q", consumer_tag="c", no_ack=True))
    client.expect(1, m.BasicConsumeOk)
    for tag, (exchange, properties, body) in enumerate(sent, 1):
        delivery = client.expect_content(1)
        assert delivery.method == m.BasicDeliver(
            consumer_tag="c", delivery_tag=tag, exchange=exchange, routing_key="q"
        )
        assert (delivery.properties, delivery.body) == (properties, body)


def test_get_empty() -> None:
    client = connected()
    declare(client, "q")
    client.send(1, m.BasicGet(queue="q"))
    client.expect(1, m.BasicGetEmpty)


def test_user_id_must_match_the_authenticated_user() -> None:
    client = connected()
    declare(client, "q")
    client.publish(1, "", "q", b"ok", BasicProperties(user_id="guest"))
    client.expect_nothing()
    client.publish(1, "", "q", b"bad", BasicProperties(user_id="mallory"))
    close = expect_channel_close(client, 1, 406)
    assert (close.class_id, close.method_id) == (60, 40)
    client.send(1, m.ChannelCloseOk())
    client.open_channel(1)
    client.send(1, m.QueueDeclare(queue="q", passive=True))
    assert client.expect(1, m.QueueDeclareOk).message_count == 1


def test_mandatory_return_and_confirms_on_the_wire() -> None:
    client = connected()
    declare(client, "q")
    client.send(1, m.ConfirmSelect())
    client.expect(1, m.ConfirmSelectOk)
    data = b"".join(
        [
            client.encode_publish(1, "", "q", b"1"),
            client.encode_publish(1, "", "nowhere", b"2", mandatory=True),
            client.encode_publish(1, "", "q", b"3"),
        ]
    )
    client.send_raw(data)
    returned = client.expect_content(1, m.BasicReturn)
    assert isinstance(returned.method, m.BasicReturn)
    assert (returned.method.reply_code, returned.body) == (312, b"2")
    assert client.expect(1, m.BasicAck) == m.BasicAck(delivery_tag=3, multiple=True)
    client.expect_nothing()


def test_unknown_delivery_tag_closes_the_channel_406() -> None:
    client = connected()
    client.send(1, m.BasicAck(delivery_tag=42))
    close = expect_channel_close(client, 1, 406)
    assert (close.class_id, close.method_id) == (60, 80)


# -- consumers and cancel notification -----------------------------------------------


def test_server_sent_cancel_only_to_clients_that_asked_for_it() -> None:
    broker = Broker()
    caps = {k: v for k, v in DEFAULT_CAPABILITIES.items() if k != "consumer_cancel_notify"}
    notified = connected(broker=broker)
    silent = connected(broker=broker, capabilities=caps)
    declare(notified, "q")
    for client, tag in ((notified, "n"), (silent, "s")):
        client.send(1, m.BasicConsume(queue="q", consumer_tag=tag))
        client.expect(1, m.BasicConsumeOk)
    admin = connected(broker=broker)
    admin.send(1, m.QueueDelete(queue="q"))
    admin.expect(1, m.QueueDeleteOk)
    assert notified.frames() == [MethodFrame(1, m.BasicCancel(consumer_tag="n", no_wait=True))]
    assert silent.frames() == []


def test_exclusive_queue_of_another_connection_is_405() -> None:
    broker = Broker()
    owner = connected(broker=broker)
    declare(owner, "mine", exclusive=True)
    other = connected(broker=broker)
    other.send(1, m.BasicConsume(queue="mine"))
    close = expect_channel_close(other, 1, 405)
    assert (close.class_id, close.method_id) == (60, 20)


def test_duplicate_consumer_tag_is_a_connection_error_530() -> None:
    client = connected()
    declare(client, "q")
    client.send(1, m.BasicConsume(queue="q", consumer_tag="c"))
    client.expect(1, m.BasicConsumeOk)
    client.send(1, m.BasicConsume(queue="q", consumer_tag="c"))
    expect_connection_close(client, 530)


# -- channel close, soft and hard errors ---------------------------------------------


def test_client_initiated_channel_close() -> None:
    client = connected()
    declare(client, "q")
    client.send(1, m.BasicConsume(queue="q", consumer_tag="c"))
    client.expect(1, m.BasicConsumeOk)
    client.publish(1, "", "q", b"1")
    assert client.expect_content(1).body == b"1"
    client.send(1, m.ChannelClose(reply_code=200, reply_text="bye"))
    client.expect(1, m.ChannelCloseOk)
    client.open_channel(1)
    client.send(1, m.BasicGet(queue="q", no_ack=True))
    got = client.expect_content(1, m.BasicGetOk)
    assert got.body == b"1"
    assert isinstance(got.method, m.BasicGetOk)
    assert got.method.redelivered


def test_server_initiated_channel_close_waits_for_close_ok() -> None:
    client = connected()
    client.send(1, m.QueueDeclare(queue="missing", passive=True))
    close = expect_channel_close(client, 1, 404)
    assert (close.class_id, close.method_id) == (50, 10)
    assert "NOT_FOUND" in close.reply_text
    client.send(1, m.QueueDeclare(queue="q"))  # ignored while closing
    client.expect_nothing()
    client.send(1, m.ChannelCloseOk())
    client.open_channel(1)
    declare(client, "q")


def test_channel_close_crossing_ours_is_answered() -> None:
    client = connected()
    client.send(1, m.QueueDeclare(queue="missing", passive=True))
    expect_channel_close(client, 1, 404)
    client.send(1, m.ChannelClose(reply_code=200, reply_text="bye"))
    client.expect(1, m.ChannelCloseOk)


def test_soft_error_closes_only_its_channel() -> None:
    client = connected()
    client.open_channel(2)
    client.send(2, m.ExchangeDeclare(exchange="amq.mine", type="direct"))
    close = expect_channel_close(client, 2, 403)
    assert (close.class_id, close.method_id) == (40, 10)
    declare(client, "still-fine", channel=1)
    assert not client.closed


def test_channel_open_twice_is_504() -> None:
    client = connected()
    client.send(1, m.ChannelOpen())
    expect_connection_close(client, 504)


def test_client_initiated_connection_close() -> None:
    client = connected()
    declare(client, "q", exclusive=True)
    broker = client.conn.broker
    client.send(0, m.ConnectionClose(reply_code=200, reply_text="bye"))
    client.expect(0, m.ConnectionCloseOk)
    assert client.closed
    assert "q" not in broker.vhosts["/"].queues


@pytest.mark.parametrize(("heartbeat", "wait"), [(0, 30.0), (60, 30.0), (10, 10.0)])
def test_after_close_ok_the_client_closes_the_socket(heartbeat: int, wait: float) -> None:
    # The spec leaves the socket to close-ok's recipient; RabbitMQ waits for the client,
    # at most its heartbeat interval or 30 s (aio-pika's robust reconnect races with a
    # broker that closes first). Nothing the client sends meanwhile is read.
    client = connected(heartbeat=heartbeat)
    client.send(0, m.ConnectionClose(reply_code=200, reply_text="bye"))
    client.expect(0, m.ConnectionCloseOk)
    assert not client.conn.should_close_transport
    client.send(1, m.ChannelOpen())
    client.expect_nothing()
    client.tick(wait - 0.5)
    assert not client.conn.should_close_transport
    client.tick(0.5)
    assert client.conn.should_close_transport


def test_after_a_hard_error_only_close_ok_matters() -> None:
    client = connected()
    client.send(5, m.QueueDeclare(queue="q"))
    client.expect(0, m.ConnectionClose)
    client.send(1, m.QueueDeclare(queue="q"))
    client.expect_nothing()
    client.send(0, m.ConnectionCloseOk())
    assert client.closed


def test_unanswered_close_times_out() -> None:
    client = connected()
    client.send(5, m.QueueDeclare(queue="q"))
    client.expect(0, m.ConnectionClose)
    client.tick(10)
    assert client.closed


def test_frames_returns_each_item_once() -> None:
    client = connected()
    declare(client, "q")
    client.publish(1, "", "q", b"1")
    client.send(1, m.BasicGet(queue="q", no_ack=True))
    items = client.frames()
    assert len(items) == 1
    assert isinstance(items[0], Delivery)
    assert client.frames() == []


# -- fairness ------------------------------------------------------------------------


def test_a_burst_of_frames_is_handled_in_bounded_turns() -> None:
    client = connected()
    declare(client, "q")
    burst = b"".join(client.encode_publish(1, "", "q", b"m") for _ in range(TURN_FRAMES))
    client.send_raw(burst, all_turns=False)  # 3 frames per publish: three turns' worth
    waiting = [client.shell.wants_turn]
    while waiting[-1]:
        client.shell.run_turn(client.clock.now)
        waiting.append(client.shell.wants_turn)
    assert waiting == [True, True, False]
    client.send(1, m.QueueDeclare(queue="q", passive=True))
    assert client.expect(1, m.QueueDeclareOk).message_count == TURN_FRAMES


def test_a_bug_in_a_handler_closes_only_that_connection_with_541(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = Broker()
    victim = connected(broker=broker)
    bystander = connected(broker=broker)

    def broken(channel: object, method: object) -> None:
        raise RuntimeError("boom")

    with monkeypatch.context() as patch:
        patch.setitem(handlers.HANDLERS, m.QueueDeclare.INDEX, broken)
        victim.send(1, m.QueueDeclare(queue="q"))
        close = victim.expect(0, m.ConnectionClose)
    assert close.reply_code == 541
    assert "boom" in caplog.text
    declare(bystander, "q")


# -- the per-message fast paths (basic.publish, basic.ack, basic.deliver) -----------------


def _publish_payload(exchange: bytes, routing_key: bytes, bits: int = 0) -> bytes:
    return (
        struct.pack(">HHHB", 60, 40, 0, len(exchange))
        + exchange
        + bytes((len(routing_key),))
        + routing_key
        + bytes((bits,))
    )


@pytest.mark.parametrize("cut", range(4, 14))
def test_a_truncated_publish_is_501_with_its_class_and_method(cut: int) -> None:
    client = connected()
    payload = _publish_payload(b"amq.direct", b"rk", 1)[:cut]
    client.send_raw(framing.encode_frame(framing.FRAME_METHOD, 1, payload))
    close = expect_connection_close(client, 501)
    assert (close.class_id, close.method_id) == (60, 40)


def test_a_publish_with_a_non_utf8_name_is_501() -> None:
    client = connected()
    payload = _publish_payload(b"", b"\xff\xfe")
    client.send_raw(framing.encode_frame(framing.FRAME_METHOD, 1, payload))
    close = expect_connection_close(client, 501)
    assert (close.class_id, close.method_id) == (60, 40)


def test_publish_to_a_missing_exchange_closes_the_channel_404_with_60_40() -> None:
    client = connected()
    client.send_raw(framing.encode_frame(framing.FRAME_METHOD, 1, _publish_payload(b"no", b"")))
    close = expect_channel_close(client, 1, 404)
    assert (close.class_id, close.method_id) == (60, 40)
    # The channel is closing: a later publish and ack on it are dropped, not answered.
    client.send_raw(framing.encode_frame(framing.FRAME_METHOD, 1, _publish_payload(b"", b"q")))
    client.send(1, m.BasicAck(delivery_tag=1))
    client.expect_nothing()


def test_publish_flags_and_trailing_bytes_read_as_the_generic_decoder_does() -> None:
    client = connected()
    client.send(1, m.ConfirmSelect())
    client.expect(1, m.ConfirmSelectOk)
    # mandatory, to no queue: returned; a trailing byte after the bits is ignored.
    payload = _publish_payload(b"", b"nowhere", 1) + b"\x00"
    raw = framing.encode_frame(framing.FRAME_METHOD, 1, payload)
    raw += b"".join(framing.encode_content_frames(1, 60, b"x", b"\x00\x00", 131072))
    client.send_raw(raw)
    returned = client.expect_content(1, m.BasicReturn).method
    assert isinstance(returned, m.BasicReturn)
    assert (returned.reply_code, returned.routing_key) == (312, "nowhere")
    client.expect(1, m.BasicAck)


def test_ack_errors_keep_their_class_and_method() -> None:
    client = connected()
    client.send(1, m.BasicAck(delivery_tag=7))
    close = expect_channel_close(client, 1, 406)
    assert (close.class_id, close.method_id) == (60, 80)


def test_a_truncated_ack_is_501() -> None:
    client = connected()
    payload = struct.pack(">HHQ", 60, 80, 1)  # no bits octet
    client.send_raw(framing.encode_frame(framing.FRAME_METHOD, 1, payload))
    close = expect_connection_close(client, 501)
    assert (close.class_id, close.method_id) == (60, 80)


def test_ack_while_content_is_expected_is_505() -> None:
    client = connected()
    client.send(1, m.BasicPublish(exchange="", routing_key="q"))
    client.send(1, m.BasicAck(delivery_tag=1))
    expect_connection_close(client, 505)


@pytest.mark.parametrize(
    ("consumer_tag", "exchange", "routing_key"),
    [("c", "", "q"), ("amq.ctag-" + "a" * 32, "amq.direct", "k" * 255), ("é", "x", "ü")],
)
@pytest.mark.parametrize("size", [0, 1, 4088, 4089, 10000])
@pytest.mark.parametrize("redelivered", [False, True])
def test_deliver_fast_path_encodes_as_the_generic_encoder(
    consumer_tag: str, exchange: str, routing_key: str, size: int, redelivered: bool
) -> None:
    client = connected(frame_max=4096)
    channel = client.conn.channels[1]
    assert isinstance(channel, Channel)
    client.take_bytes()
    raw = BasicProperties(content_type="text/plain", delivery_mode=2).encode()
    for props in (raw, b"\x00\x00"):
        message = wire_message(exchange, routing_key, props, b"b" * size)
        for delivery_tag in (1, 2**40):
            channel.deliver(consumer_tag, delivery_tag, redelivered, message)
            expected = framing.encode_message_frames(
                1,
                m.BasicDeliver(
                    consumer_tag=consumer_tag,
                    delivery_tag=delivery_tag,
                    redelivered=redelivered,
                    exchange=exchange,
                    routing_key=routing_key,
                ).encode(),
                60,
                message.body,
                props,
                4096,
            )
            assert client.take_bytes() == expected


@pytest.mark.parametrize("size", [LARGE_BODY - 1, LARGE_BODY, 65536, 131064])
def test_a_large_body_is_written_from_the_message_itself(size: int) -> None:
    client = connected(frame_max=131072)
    channel = client.conn.channels[1]
    assert isinstance(channel, Channel)
    client.take_bytes()
    props = BasicProperties(delivery_mode=2).encode()
    message = wire_message(
        "ex", "rk", props, bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    )
    channel.deliver("c", 7, False, message)
    handed_as_is = any(part is message.body for part in client.shell.output.frames)
    method = m.BasicDeliver(consumer_tag="c", delivery_tag=7, exchange="ex", routing_key="rk")
    expected = framing.encode_message_frames(1, method.encode(), 60, message.body, props, 131072)
    assert client.take_bytes() == expected
    assert handed_as_is == (size >= LARGE_BODY)


def test_a_publisher_feeding_a_queue_its_consumers_fall_behind_gets_short_turns() -> None:
    broker = Broker()
    consumer = connected(broker=broker)
    declare(consumer, "q")
    consumer.send(1, m.BasicQos(prefetch_size=0, prefetch_count=1, global_=False))
    consumer.expect(1, m.BasicQosOk)
    consumer.send(1, m.BasicConsume(queue="q", consumer_tag="c"))
    consumer.expect(1, m.BasicConsumeOk)
    queue = classic(broker.vhosts["/"].queues["q"])
    queue.backlog_pace = 5
    publisher = connected(broker=broker)
    burst = b"".join(publisher.encode_publish(1, "", "q", b"m") for _ in range(TURN_FRAMES))
    publisher.send_raw(burst, all_turns=False)
    # The first turn is a full one (nothing fell behind yet); once the queue is past its
    # pace, each turn handles PACED_TURN_FRAMES frames and says it was paced.
    assert publisher.shell.paced
    handled = []
    while publisher.conn.pending:
        before = queue.message_count
        publisher.shell.run_turn(publisher.clock.now)
        handled.append(queue.message_count - before)
        assert publisher.shell.paced
    assert handled[:-1] == [PACED_TURN_FRAMES // 3] * (len(handled) - 1)
    assert queue.message_count + queue.unacked_count == TURN_FRAMES
