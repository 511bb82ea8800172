"""Interop: kombu over py-amqp, and py-amqp on its own, against a real broker process.

The kombu tests follow kombu's documentation ("hello world" producer/consumer and SimpleQueue)
with only the URL and the names changed; the py-amqp tests drive its channel API directly.
"""

# kombu ships py.typed but leaves most of its API unannotated.
# mypy: disable-error-code="no-untyped-call"

from __future__ import annotations

import datetime
import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import amqp
import pytest
from amqp.exceptions import ChannelError, NotFound
from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from kombu.messaging import Consumer, Producer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from kombu.message import Message as KombuMessage

    from tests.integration.conftest import Broker

pytestmark = pytest.mark.interop

DRAIN_TIMEOUT = 10.0


@pytest.fixture
def conn(broker: Broker) -> Iterator[Connection]:
    """A kombu connection over py-amqp, closed after the test."""
    connection = Connection(broker.url, transport="pyamqp", connect_timeout=5)
    try:
        connection.connect()
        yield connection
    finally:
        connection.release()


@pytest.fixture
def amqp_conn(broker: Broker) -> Iterator[amqp.Connection]:
    """A bare py-amqp connection, closed after the test."""
    connection = amqp.Connection(host=f"{broker.host}:{broker.port}", connect_timeout=5)
    connection.connect()
    try:
        yield connection
    finally:
        connection.close()


def drain_until(conn: Connection, done: Callable[[], bool], timeout: float = DRAIN_TIMEOUT) -> None:
    """Drain events on ``conn`` until ``done()`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"condition not reached within {timeout} s")
        try:
            conn.drain_events(timeout=min(left, 1.0))
        except TimeoutError:
            pass


def drain_quietly(conn: Connection, seconds: float) -> None:
    """Drain whatever arrives within ``seconds`` (to prove that nothing more does)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            conn.drain_events(timeout=left)
        except TimeoutError:
            return


def test_url_connects_to_default_vhost(conn: Connection) -> None:
    assert conn.connected
    assert conn.transport_cls == "pyamqp"
    assert conn.virtual_host == "/"
    props = conn.connection.server_properties
    assert isinstance(props, dict)
    caps = props["capabilities"]
    # kombu and py-amqp look these up; confirm_publish needs publisher_confirms.
    for cap in ("publisher_confirms", "basic.nack", "consumer_cancel_notify"):
        assert caps.get(cap) is True, cap


def test_hello_world_example(conn: Connection, name: str) -> None:
    """kombu's documented "hello world": direct exchange, declare on publish, drain_events."""
    media_exchange = Exchange(f"{name}.media", "direct", durable=True)
    video_queue = Queue(f"{name}.video", exchange=media_exchange, routing_key="video")
    received: list[Any] = []

    def process_media(body: Any, message: KombuMessage) -> None:
        received.append(body)
        message.ack()

    try:
        # produce
        producer = conn.Producer(serializer="json")
        producer.publish(
            {"name": "/tmp/lolcat1.avi", "size": 1301013},
            exchange=media_exchange,
            routing_key="video",
            declare=[video_queue],
        )
        # consume
        with conn.Consumer(video_queue, callbacks=[process_media]):
            drain_until(conn, lambda: len(received) == 1)
        assert received == [{"name": "/tmp/lolcat1.avi", "size": 1301013}]
    finally:
        channel = conn.default_channel
        channel.queue_delete(video_queue.name)
        channel.exchange_delete(media_exchange.name)


def test_simple_queue_example(conn: Connection, name: str) -> None:
    """kombu's documented SimpleQueue put/get, with explicit acks."""
    queue = conn.SimpleQueue(name, queue_opts={"auto_delete": False})
    try:
        message = f"helloworld, sent at {datetime.datetime.today()}"
        queue.put(message)
        queue.put({"n": 2})
        first = queue.get(block=True, timeout=5)
        assert first.payload == message
        first.ack()
        second = queue.get(block=True, timeout=5)
        assert second.payload == {"n": 2}
        second.ack()
        with pytest.raises(queue.Empty):
            queue.get(block=True, timeout=0.5)
        assert queue.qsize() == 0
    finally:
        queue.close()  # cancel our consumer first: deleting under it makes the broker cancel it
        conn.default_channel.queue_delete(name)
        conn.default_channel.exchange_delete(name)  # SimpleQueue declares a same-named exchange


def test_simple_buffer_get_nowait(conn: Connection, name: str) -> None:
    """SimpleBuffer is no-ack and non-durable; get_nowait uses basic.get."""
    buf = conn.SimpleBuffer(name)
    try:
        for i in range(3):
            buf.put(f"msg-{i}")
        assert [buf.get_nowait().payload for _ in range(3)] == ["msg-0", "msg-1", "msg-2"]
        with pytest.raises(buf.Empty):
            buf.get_nowait()
    finally:
        buf.close()
        conn.default_channel.queue_delete(name)
        conn.default_channel.exchange_delete(name)


def test_topic_exchange_routing(conn: Connection, name: str) -> None:
    exchange = Exchange(f"{name}.topic", "topic", auto_delete=True)
    star = Queue(f"{name}.star", exchange=exchange, routing_key="logs.*", auto_delete=True)
    hash_ = Queue(f"{name}.hash", exchange=exchange, routing_key="#.error", auto_delete=True)
    per_queue: dict[str, list[str]] = {star.name: [], hash_.name: []}

    def collect(queue_name: str) -> Callable[[Any, KombuMessage], None]:
        def on_message(body: Any, message: KombuMessage) -> None:
            per_queue[queue_name].append(body)
            message.ack()

        return on_message

    channel = conn.channel()
    try:
        with (
            Consumer(channel, [star], callbacks=[collect(star.name)]),
            Consumer(channel, [hash_], callbacks=[collect(hash_.name)]),
        ):
            producer = Producer(channel, exchange=exchange, serializer="json")
            for key in ("logs.info", "logs.error", "app.db.error", "logs.a.b", "error", "other"):
                producer.publish(key, routing_key=key)
            drain_until(conn, lambda: sum(map(len, per_queue.values())) >= 5)
            drain_quietly(conn, 0.3)
        assert per_queue[star.name] == ["logs.info", "logs.error"]
        assert per_queue[hash_.name] == ["logs.error", "app.db.error", "error"]
    finally:
        channel.close()


def test_fanout_exchange_copies_to_every_queue(conn: Connection, name: str) -> None:
    exchange = Exchange(f"{name}.fan", "fanout", auto_delete=True)
    queues = [Queue(f"{name}.q{i}", exchange=exchange, auto_delete=True) for i in range(3)]
    seen: list[tuple[str, Any]] = []

    def on_message(body: Any, message: KombuMessage) -> None:
        seen.append((message.delivery_info["routing_key"], body))
        message.ack()

    with conn.Consumer(queues, callbacks=[on_message]):
        conn.Producer().publish({"hello": "all"}, exchange=exchange, routing_key="ignored")
        drain_until(conn, lambda: len(seen) == 3)
        drain_quietly(conn, 0.2)
    assert seen == [("ignored", {"hello": "all"})] * 3


def test_properties_and_headers_round_trip(conn: Connection, name: str) -> None:
    queue = Queue(name, exchange=Exchange(""), routing_key=name, auto_delete=True)
    stamp = datetime.datetime(2024, 5, 17, 12, 30, 45, tzinfo=datetime.UTC)
    headers: dict[str, Any] = {
        "str": "text ünïcode",
        "int": 42,
        "negative": -7,
        "big": 2**40,
        "float": 1.5,
        "true": True,
        "false": False,
        "none": None,
        "list": [1, "two", 3.0],
        "nested": {"inner": "value", "n": 1},
        "decimal": Decimal("12.34"),
        "when": stamp,
    }
    # py-amqp encodes an aware datetime as a timestamp and decodes it as naive UTC.
    expected_headers = {**headers, "when": stamp.replace(tzinfo=None)}
    received: list[KombuMessage] = []

    def on_message(body: Any, message: KombuMessage) -> None:
        received.append(message)
        message.ack()

    with conn.Consumer(queue, callbacks=[on_message]):
        conn.Producer().publish(
            b"\x00\x01binary\xff",
            routing_key=name,
            serializer=None,
            content_type="application/x-test",
            content_encoding="binary",
            headers=headers,
            delivery_mode=2,
            priority=7,
            correlation_id="corr-1",
            reply_to="reply.queue",
            expiration=60,  # kombu takes seconds; the wire carries "60000"
            message_id="msg-1",
            timestamp=1700000000,
            type="test.type",
            user_id="guest",
            app_id="leveret-tests",
        )
        drain_until(conn, lambda: len(received) == 1)
    message = received[0]
    assert message.body == b"\x00\x01binary\xff"
    assert message.content_type == "application/x-test"
    assert message.content_encoding == "binary"
    assert message.headers == expected_headers
    props = message.properties
    assert props["delivery_mode"] == 2
    assert props["priority"] == 7
    assert props["correlation_id"] == "corr-1"
    assert props["reply_to"] == "reply.queue"
    assert props["expiration"] == "60000"
    assert props["message_id"] == "msg-1"
    assert props["timestamp"] == 1700000000
    assert props["type"] == "test.type"
    assert props["user_id"] == "guest"
    assert props["app_id"] == "leveret-tests"
    assert message.delivery_info["redelivered"] is False
    assert message.delivery_info["exchange"] == ""
    assert message.delivery_info["routing_key"] == name


def test_ack_reject_requeue(conn: Connection, name: str) -> None:
    queue = Queue(name, exchange=Exchange(""), routing_key=name, auto_delete=False)
    events: list[tuple[str, bool]] = []

    def on_message(body: Any, message: KombuMessage) -> None:
        redelivered = bool(message.delivery_info["redelivered"])
        events.append((body, redelivered))
        if body == "requeue-me" and not redelivered:
            message.requeue()  # basic.reject requeue=True
        elif body == "drop-me":
            message.reject()  # basic.reject requeue=False: gone
        else:
            message.ack()

    try:
        with conn.Consumer(queue, callbacks=[on_message]):
            producer = conn.Producer(serializer="json")
            for body in ("requeue-me", "drop-me", "keep-me"):
                producer.publish(body, routing_key=name)
            drain_until(conn, lambda: len(events) == 4)
            drain_quietly(conn, 0.3)
        assert sorted(events) == sorted(
            [("requeue-me", False), ("drop-me", False), ("keep-me", False), ("requeue-me", True)]
        )
        # Rejected messages are not redelivered, acked ones are gone: the queue is empty.
        _, count, consumers = conn.default_channel.queue_declare(name, passive=True)
        assert (count, consumers) == (0, 0)
    finally:
        conn.default_channel.queue_delete(name)


def test_unacked_messages_return_when_consumer_channel_closes(conn: Connection, name: str) -> None:
    queue = Queue(name, exchange=Exchange(""), routing_key=name, auto_delete=False)
    try:
        producer = conn.Producer(serializer="json")
        producer.publish("first", routing_key=name, declare=[queue])
        channel = conn.channel()
        got: list[KombuMessage] = []
        with Consumer(channel, [queue], callbacks=[lambda _b, m: got.append(m)]):
            drain_until(conn, lambda: len(got) == 1)
        channel.close()  # never acked: back to the queue, marked redelivered
        again = queue(conn.default_channel).get(no_ack=False)
        assert again is not None
        assert again.payload == "first"
        assert again.delivery_info["redelivered"] is True
        again.ack()
    finally:
        conn.default_channel.queue_delete(name)


def test_basic_qos_prefetch_limits_unacked(conn: Connection, name: str) -> None:
    queue = Queue(name, exchange=Exchange(""), routing_key=name, auto_delete=False)
    try:
        producer = conn.Producer(serializer="json")
        for i in range(3):
            producer.publish(i, routing_key=name, declare=[queue])
        conn.default_channel.basic_qos(0, 1, False)
        pending: list[KombuMessage] = []
        with conn.Consumer(queue, callbacks=[lambda _b, m: pending.append(m)]):
            drain_until(conn, lambda: len(pending) == 1)
            drain_quietly(conn, 0.5)
            assert [m.payload for m in pending] == [0]  # prefetch 1: nothing more until ack
            pending[0].ack()
            drain_until(conn, lambda: len(pending) == 2)
            drain_quietly(conn, 0.3)
            assert [m.payload for m in pending] == [0, 1]
            pending[1].ack()
            drain_until(conn, lambda: len(pending) == 3)
            pending[2].ack()
        assert [m.payload for m in pending] == [0, 1, 2]
    finally:
        conn.default_channel.queue_delete(name)


def test_amqp_publish_and_get(amqp_conn: amqp.Connection, name: str) -> None:
    ch = amqp_conn.channel()
    try:
        queue, count, consumers = ch.queue_declare(name, auto_delete=False)
        assert (queue, count, consumers) == (name, 0, 0)
        for i in range(3):
            ch.basic_publish(
                amqp.Message(f"body-{i}", content_type="text/plain", application_headers={"i": i}),
                exchange="",
                routing_key=name,
            )
        msg = ch.basic_get(name, no_ack=False)
        assert msg is not None
        assert msg.body == "body-0"  # py-amqp decodes text/plain bodies
        assert msg.properties["content_type"] == "text/plain"
        assert msg.headers == {"i": 0}
        assert msg.delivery_info["message_count"] == 2
        assert msg.delivery_info["redelivered"] is False
        ch.basic_ack(msg.delivery_tag)
        rest = [ch.basic_get(name, no_ack=True) for _ in range(2)]
        assert [m.body if m else None for m in rest] == ["body-1", "body-2"]
        assert ch.basic_get(name) is None  # get-empty
        assert ch.queue_delete(name) == 0
    finally:
        ch.close()


def test_amqp_basic_get_on_missing_queue_closes_channel(
    amqp_conn: amqp.Connection, name: str
) -> None:
    ch = amqp_conn.channel()
    with pytest.raises(NotFound) as excinfo:
        ch.basic_get(f"{name}.missing")
    assert excinfo.value.reply_code == 404
    # The connection survives a soft error.
    ch2 = amqp_conn.channel()
    assert ch2.is_open
    ch2.close()


def test_amqp_consume_and_drain_events(amqp_conn: amqp.Connection, name: str) -> None:
    ch = amqp_conn.channel()
    try:
        ch.queue_declare(name, auto_delete=True)
        got: list[amqp.Message] = []

        def on_message(message: amqp.Message) -> None:
            got.append(message)
            message.channel.basic_ack(message.delivery_tag)

        tag = ch.basic_consume(name, callback=on_message)
        assert tag.startswith("amq.ctag-")
        for i in range(5):
            ch.basic_publish(amqp.Message(f"m{i}".encode()), exchange="", routing_key=name)
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while len(got) < 5 and time.monotonic() < deadline:
            try:
                amqp_conn.drain_events(timeout=1)
            except TimeoutError:
                pass
        assert [m.body for m in got] == [f"m{i}".encode() for i in range(5)]
        assert [m.delivery_info["consumer_tag"] for m in got] == [tag] * 5
        assert [m.delivery_tag for m in got] == [1, 2, 3, 4, 5]
        ch.basic_cancel(tag)
    finally:
        ch.close()


def test_amqp_server_cancels_consumer_of_deleted_queue(
    amqp_conn: amqp.Connection, name: str
) -> None:
    """consumer_cancel_notify: deleting a queue sends basic.cancel to its consumers."""
    ch = amqp_conn.channel()
    other = amqp_conn.channel()
    try:
        ch.queue_declare(name, auto_delete=False)
        cancelled: list[str] = []
        tag = ch.basic_consume(name, callback=lambda _m: None, on_cancel=cancelled.append)
        assert other.queue_delete(name) == 0
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while not cancelled and time.monotonic() < deadline:
            try:
                amqp_conn.drain_events(timeout=1)
            except TimeoutError:
                pass
        assert cancelled == [tag]
        assert ch.is_open  # the channel stays usable
        ch.queue_declare(f"{name}.after", exclusive=True)
    finally:
        other.close()
        ch.close()


def test_amqp_confirm_publish(broker: Broker, name: str) -> None:
    connection = amqp.Connection(
        host=f"{broker.host}:{broker.port}", confirm_publish=True, connect_timeout=5
    )
    connection.connect()
    try:
        ch = connection.channel()
        ch.queue_declare(name, auto_delete=False)
        for i in range(10):  # each publish waits for its basic.ack
            ch.basic_publish(amqp.Message(str(i)), exchange="", routing_key=name, timeout=5)
        _, count, _ = ch.queue_declare(name, passive=True)
        assert count == 10
        # Unroutable + mandatory: basic.return (312 NO_ROUTE) comes before the ack.
        with pytest.raises(ChannelError) as excinfo:
            ch.basic_publish(
                amqp.Message("lost"),
                exchange="",
                routing_key=f"{name}.nowhere",
                mandatory=True,
                timeout=5,
            )
        assert excinfo.value.reply_code == 312
        # Unroutable without mandatory: silently dropped, but still confirmed.
        ch.basic_publish(amqp.Message("dropped"), exchange="", routing_key=f"{name}.nowhere")
        assert ch.queue_delete(name) == 10
    finally:
        connection.close()
