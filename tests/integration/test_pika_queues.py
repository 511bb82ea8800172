"""The queue class end to end with pika's BlockingConnection: declare (server-named, passive,
equivalence, exclusive, auto-delete), bind/unbind, purge and delete with the counts the replies
carry.

Every test here passes against RabbitMQ (``LEVERET_TEST_AMQP_URL``).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest

from tests.integration.pika_support import (
    Opened,
    code_of,
    connect,
    count_is,
    eventually,
    passive_code,
    pump,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.integration.conftest import Broker

pytestmark = pytest.mark.interop


def declare_ok(ch: Any, queue: str) -> Any:
    return ch.queue_declare(queue=queue, passive=True).method


def exists(conn: Any, queue: str) -> bool:
    code = passive_code(conn, queue)
    assert code in (0, 404), code
    return code == 0


@pytest.fixture
def other_conn(broker: Broker) -> Iterator[Any]:
    with Opened(connect(broker)) as c:
        yield c


@pytest.fixture
def queue(broker: Broker, name: str) -> Iterator[str]:
    """The name of a queue the test declares itself; deleted afterwards if still there."""
    yield name
    with Opened(connect(broker)) as c, contextlib.suppress(pika.exceptions.AMQPError):
        c.channel().queue_delete(queue=name)


# --------------------------------------------------------------------------- declare


def test_server_named_queue(ch: Any) -> None:
    first = ch.queue_declare(queue="", exclusive=True).method
    second = ch.queue_declare(queue="", exclusive=True).method
    assert first.queue.startswith("amq.gen-")
    assert second.queue.startswith("amq.gen-")
    assert first.queue != second.queue
    assert (first.message_count, first.consumer_count) == (0, 0)
    ch.basic_publish(exchange="", routing_key=first.queue, body=b"x")
    assert count_is(ch, first.queue, 1)


def test_declare_ok_echoes_name(ch: Any, queue: str) -> None:
    ok = ch.queue_declare(queue=queue).method
    assert ok.queue == queue
    assert (ok.message_count, ok.consumer_count) == (0, 0)


def test_declare_ok_counts_ready_messages_and_consumers(conn: Any, ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue)
    for i in range(5):
        ch.basic_publish(exchange="", routing_key=queue, body=b"%d" % i)
    assert count_is(ch, queue, 5)
    consumer_ch = conn.channel()
    consumer_ch.basic_qos(prefetch_count=2)
    got: list[bytes] = []
    consumer_ch.basic_consume(queue=queue, on_message_callback=lambda _c, _m, _p, b: got.append(b))
    assert pump(conn, lambda: len(got) == 2)
    # Unacknowledged messages are not counted; a non-passive redeclare reports the same counts.
    assert count_is(ch, queue, 3)
    ok = ch.queue_declare(queue=queue).method
    assert (ok.message_count, ok.consumer_count) == (3, 1)


def test_redeclare_same_properties_is_ok(ch: Any, queue: str) -> None:
    args = {"x-message-ttl": 60000, "x-max-length": 10}
    ch.queue_declare(queue=queue, durable=True, arguments=args)
    ok = ch.queue_declare(queue=queue, durable=True, arguments=dict(args)).method
    assert ok.queue == queue


def test_passive_declare_of_missing_queue_is_404(conn: Any, ch: Any, name: str) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_declare(queue=name, passive=True)
    assert code_of(exc) == 404
    assert conn.is_open  # a soft error: only the channel closes


def test_passive_declare_ignores_other_flags(ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue)
    ok = ch.queue_declare(
        queue=queue, passive=True, durable=True, arguments={"x-message-ttl": 5}
    ).method
    assert ok.queue == queue


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"durable": False}, {"durable": True}),
        ({"durable": True}, {"durable": False}),
        ({"auto_delete": True}, {"auto_delete": False}),
        ({"arguments": {"x-message-ttl": 1000}}, {"arguments": {"x-message-ttl": 2000}}),
        ({"arguments": {"x-message-ttl": 1000}}, {}),
        ({}, {"arguments": {"x-max-length": 5}}),
        (
            {"arguments": {"x-dead-letter-exchange": "a"}},
            {"arguments": {"x-dead-letter-exchange": "b"}},
        ),
    ],
    ids=[
        "durable",
        "not-durable",
        "auto-delete",
        "ttl-value",
        "ttl-missing",
        "max-len-added",
        "dlx",
    ],
)
def test_inequivalent_redeclare_is_406(
    conn: Any, ch: Any, queue: str, first: dict[str, Any], second: dict[str, Any]
) -> None:
    ch.queue_declare(queue=queue, **first)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_declare(queue=queue, **second)
    assert code_of(exc) == 406  # PRECONDITION_FAILED
    assert conn.is_open
    # The original queue is untouched.
    assert exists(conn, queue)


def test_reserved_amq_prefix_is_403(ch: Any) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_declare(queue="amq.leveret-test")
    assert code_of(exc) == 403  # ACCESS_REFUSED


def test_passive_declare_of_amq_name_is_404(ch: Any) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_declare(queue="amq.leveret-test-missing", passive=True)
    assert code_of(exc) == 404


# --------------------------------------------------------------------------- exclusive


def test_exclusive_queue_locked_to_its_connection(ch: Any, other_conn: Any, queue: str) -> None:
    ch.queue_declare(queue=queue, exclusive=True)
    operations: dict[str, Callable[[Any], Any]] = {
        "declare": lambda c: c.queue_declare(queue=queue),
        "passive": lambda c: c.queue_declare(queue=queue, passive=True),
        "consume": lambda c: c.basic_consume(queue=queue, on_message_callback=lambda *a: None),
        "get": lambda c: c.basic_get(queue=queue),
        "purge": lambda c: c.queue_purge(queue=queue),
        "bind": lambda c: c.queue_bind(queue=queue, exchange="amq.direct", routing_key="k"),
        "delete": lambda c: c.queue_delete(queue=queue),
    }
    codes = {}
    for label, operation in operations.items():
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            operation(other_conn.channel())
        codes[label] = code_of(exc)
    assert codes == dict.fromkeys(operations, 405)  # RESOURCE_LOCKED
    assert other_conn.is_open
    # The owner still uses it freely.
    ch.queue_bind(queue=queue, exchange="amq.direct", routing_key=queue)
    ch.basic_get(queue=queue)


def test_publish_to_exclusive_queue_from_other_connection(
    ch: Any, other_conn: Any, queue: str
) -> None:
    """Exclusivity restricts queue operations, not routing: others may publish to it."""
    ch.queue_declare(queue=queue, exclusive=True)
    other_conn.channel().basic_publish(exchange="", routing_key=queue, body=b"hi")
    assert eventually(lambda: ch.basic_get(queue=queue, auto_ack=True)[2] == b"hi")


def test_exclusive_redeclare_non_exclusive_same_connection_is_405(ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue, exclusive=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_declare(queue=queue, exclusive=False)
    assert code_of(exc) == 405


def test_exclusive_queue_shared_across_channels_of_owner(conn: Any, ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue, exclusive=True)
    other = conn.channel()
    assert other.queue_declare(queue=queue, passive=True).method.queue == queue


def test_exclusive_queue_deleted_when_connection_closes(
    broker: Broker, conn: Any, name: str
) -> None:
    owner = connect(broker)
    try:
        owner.channel().queue_declare(queue=name, exclusive=True)
        assert passive_code(conn, name) == 405
    finally:
        owner.close()
    assert eventually(lambda: passive_code(conn, name) == 404)


def test_exclusive_queue_survives_channel_close(conn: Any, queue: str) -> None:
    owner = conn.channel()
    owner.queue_declare(queue=queue, exclusive=True)
    owner.close()
    assert exists(conn, queue)


# --------------------------------------------------------------------------- auto-delete


def test_auto_delete_when_last_consumer_cancels(conn: Any, ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue, auto_delete=True)
    first = ch.basic_consume(queue=queue, on_message_callback=lambda *a: None)
    second = ch.basic_consume(queue=queue, on_message_callback=lambda *a: None)
    ch.basic_cancel(first)
    time.sleep(0.2)
    assert exists(conn, queue)
    ch.basic_cancel(second)
    assert eventually(lambda: not exists(conn, queue))


def test_auto_delete_when_consumer_channel_closes(conn: Any, ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue, auto_delete=True)
    consumer_ch = conn.channel()
    consumer_ch.basic_consume(queue=queue, on_message_callback=lambda *a: None)
    consumer_ch.close()
    assert eventually(lambda: not exists(conn, queue))


def test_auto_delete_queue_without_consumers_stays(conn: Any, ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue, auto_delete=True)
    ch.basic_publish(exchange="", routing_key=queue, body=b"x")
    ch.basic_get(queue=queue, auto_ack=True)
    time.sleep(0.2)
    assert exists(conn, queue)


# --------------------------------------------------------------------------- bind / unbind


def test_bind_routes_and_unbind_stops(ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue)
    ch.queue_bind(queue=queue, exchange="amq.direct", routing_key="rk")
    ch.basic_publish(exchange="amq.direct", routing_key="rk", body=b"1")
    ch.basic_publish(exchange="amq.direct", routing_key="other", body=b"no")
    assert count_is(ch, queue, 1)
    ch.queue_unbind(queue=queue, exchange="amq.direct", routing_key="rk")
    ch.basic_publish(exchange="amq.direct", routing_key="rk", body=b"2")
    assert ch.basic_get(queue=queue, auto_ack=True)[2] == b"1"
    time.sleep(0.1)
    assert ch.basic_get(queue=queue, auto_ack=True) == (None, None, None)


def test_bind_twice_is_idempotent(ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue)
    ch.queue_bind(queue=queue, exchange="amq.direct", routing_key="rk")
    ch.queue_bind(queue=queue, exchange="amq.direct", routing_key="rk")
    ch.basic_publish(exchange="amq.direct", routing_key="rk", body=b"once")
    assert count_is(ch, queue, 1)


def test_bind_with_empty_routing_key(ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue)
    ch.queue_bind(queue=queue, exchange="amq.direct", routing_key="")  # pika's None means the name
    ch.basic_publish(exchange="amq.direct", routing_key="", body=b"x")
    assert count_is(ch, queue, 1)


def test_bind_to_missing_exchange_is_404(ch: Any, queue: str, name: str) -> None:
    ch.queue_declare(queue=queue)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_bind(queue=queue, exchange=name + ".missing", routing_key="k")
    assert code_of(exc) == 404


def test_bind_missing_queue_is_404(ch: Any, name: str) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_bind(queue=name, exchange="amq.direct", routing_key="k")
    assert code_of(exc) == 404


def test_bind_to_default_exchange_is_403(ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_bind(queue=queue, exchange="", routing_key="k")
    assert code_of(exc) == 403


def test_unbind_of_missing_binding_is_ok(ch: Any, queue: str, name: str) -> None:
    """RabbitMQ answers unbind-ok for a binding, or even an exchange, that does not exist
    (the 0-9-1 text asks for 404 on a missing exchange)."""
    ch.queue_declare(queue=queue)
    ch.queue_unbind(queue=queue, exchange="amq.direct", routing_key="never-bound")
    ch.queue_unbind(queue=queue, exchange=name + ".missing", routing_key="k")
    assert ch.is_open


# --------------------------------------------------------------------------- purge


def test_purge_returns_count_and_keeps_unacked(conn: Any, ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue)
    for i in range(5):
        ch.basic_publish(exchange="", routing_key=queue, body=b"%d" % i)
    assert count_is(ch, queue, 5)
    getter = conn.channel()
    getter.basic_get(queue=queue)  # one unacked: purge leaves it alone
    assert ch.queue_purge(queue=queue).method.message_count == 4
    assert declare_ok(ch, queue).message_count == 0
    getter.close()  # the unacked one comes back
    assert count_is(ch, queue, 1)
    assert ch.queue_purge(queue=queue).method.message_count == 1
    assert ch.queue_purge(queue=queue).method.message_count == 0


def test_purge_missing_queue_is_404(ch: Any, name: str) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_purge(queue=name)
    assert code_of(exc) == 404


# --------------------------------------------------------------------------- delete


def test_delete_returns_message_count(conn: Any, ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue)
    for _ in range(3):
        ch.basic_publish(exchange="", routing_key=queue, body=b"x")
    assert count_is(ch, queue, 3)
    assert ch.queue_delete(queue=queue).method.message_count == 3
    assert not exists(conn, queue)


def test_delete_if_unused_with_consumer_is_406(conn: Any, ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue)
    ch.basic_consume(queue=queue, on_message_callback=lambda *a: None)
    other = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        other.queue_delete(queue=queue, if_unused=True)
    assert code_of(exc) == 406
    assert exists(conn, queue)


def test_delete_if_unused_without_consumer(conn: Any, ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue)
    ch.basic_publish(exchange="", routing_key=queue, body=b"x")
    assert count_is(ch, queue, 1)
    assert ch.queue_delete(queue=queue, if_unused=True).method.message_count == 1
    assert not exists(conn, queue)


def test_delete_if_empty_with_messages_is_406(conn: Any, ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue)
    ch.basic_publish(exchange="", routing_key=queue, body=b"x")
    assert count_is(ch, queue, 1)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_delete(queue=queue, if_empty=True)
    assert code_of(exc) == 406
    assert exists(conn, queue)


def test_delete_if_empty_on_empty_queue(conn: Any, ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue)
    assert ch.queue_delete(queue=queue, if_empty=True).method.message_count == 0
    assert not exists(conn, queue)


def test_delete_if_empty_ignores_unacked(conn: Any, ch: Any, queue: str) -> None:
    """Only ready messages make a queue non-empty (RabbitMQ); unacked ones go with it."""
    ch.queue_declare(queue=queue)
    ch.basic_publish(exchange="", routing_key=queue, body=b"x")
    getter = conn.channel()
    assert eventually(lambda: getter.basic_get(queue=queue)[0] is not None)
    assert ch.queue_delete(queue=queue, if_empty=True).method.message_count == 0
    assert not exists(conn, queue)


def test_delete_missing_queue_is_ok(ch: Any, name: str) -> None:
    """RabbitMQ makes queue.delete idempotent: delete-ok with count 0 for a missing queue
    (the 0-9-1 text has 404 NOT_FOUND)."""
    assert ch.queue_delete(queue=name).method.message_count == 0
    assert ch.is_open


def test_delete_cancels_consumers_and_drops_bindings(conn: Any, ch: Any, queue: str) -> None:
    ch.queue_declare(queue=queue)
    ch.queue_bind(queue=queue, exchange="amq.direct", routing_key=queue)
    ch.queue_delete(queue=queue)
    ch.queue_declare(queue=queue)  # same name again: a new, unbound queue
    ch.basic_publish(exchange="amq.direct", routing_key=queue, body=b"x")
    time.sleep(0.1)
    assert declare_ok(ch, queue).message_count == 0
