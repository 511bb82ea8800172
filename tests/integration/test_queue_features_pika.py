"""Queue features with pika: argument validation, dead-lettering, TTLs, length limits,
priorities, delivery limits, single active consumer, consumer priorities, direct reply-to
and sender-selected distribution, consumer ack timeouts. Every test but the consumer timeout
one (RabbitMQ 3.x closes the channel instead; `leveret_only`) also passes against RabbitMQ 3.10."""

from __future__ import annotations

import os
import time
from typing import Any

import pika
import pika.exceptions
import pytest

from tests.integration.conftest import URL_ENV, start_broker
from tests.integration.pika_support import (
    Opened,
    code_of,
    connect,
    count_is,
    passive_code,
    pump,
    settle,
)


def _get(ch: Any, queue: str) -> tuple[Any, Any, bytes] | None:
    method, props, body = ch.basic_get(queue, auto_ack=True)
    return None if method is None else (method, props, body)


def _dlx_pair(ch: Any, name: str, **source_args: Any) -> tuple[str, str]:
    """A source queue dead-lettering through a fanout exchange into a sink queue."""
    ch.exchange_declare(f"{name}.dlx", "fanout", auto_delete=True)
    ch.queue_declare(f"{name}.dead", auto_delete=False)
    ch.queue_bind(f"{name}.dead", f"{name}.dlx")
    ch.queue_declare(name, arguments={"x-dead-letter-exchange": f"{name}.dlx", **source_args})
    return name, f"{name}.dead"


@pytest.fixture
def cleanup(ch: Any, name: str) -> Any:
    yield
    if ch.is_open:
        for queue in (name, f"{name}.dead", f"{name}.b"):
            ch.queue_delete(queue)


# ---------------------------------------------------------------- argument validation


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({"x-message-ttl": "abc"}, "invalid arg 'x-message-ttl'"),
        ({"x-message-ttl": -1}, "{value_negative,-1}"),
        ({"x-expires": 0}, "{value_zero,0}"),
        ({"x-max-length": "a"}, '"expected integer, got longstr"'),
        ({"x-max-priority": 256}, "{max_value_exceeded,256}"),
        ({"x-overflow": "foo"}, "invalid_overflow"),
        ({"x-dead-letter-routing-key": "k"}, "routing_key_but_no_dlx_defined"),
        ({"x-single-active-consumer": "yes"}, "{unacceptable_type,longstr}"),
        ({"x-queue-type": "foo"}, "unsupported queue type 'foo'"),
        ({"x-queue-mode": "foo"}, "unsupported queue mode 'foo'"),
        ({"x-delivery-limit": 5}, "of queue type rabbit_classic_queue"),
    ],
)
def test_invalid_queue_arguments_are_refused(
    conn: Any, name: str, arguments: dict[str, Any], text: str
) -> None:
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_declare(name, arguments=arguments)
    assert code_of(exc) == 406
    assert text in exc.value.reply_text
    assert conn.is_open


def test_celery_and_faststream_quorum_arguments_are_accepted(ch: Any, name: str) -> None:
    args = {
        "x-queue-type": "quorum",
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-delivery-limit": 10,
        "x-dead-letter-exchange": "",
        "x-queue-leader-locator": "balanced",
        "x-quorum-initial-group-size": 3,
    }
    ch.queue_declare(name, durable=True, arguments=args)
    ch.queue_declare(name, durable=True, arguments=args)  # equivalent redeclare
    ch.queue_delete(name)
    ch.queue_declare(name, arguments={"x-queue-mode": "lazy", "x-queue-version": 2})
    ch.queue_delete(name)


def test_quorum_queue_must_be_durable(conn: Any, name: str) -> None:
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_declare(name, arguments={"x-queue-type": "quorum"})
    assert code_of(exc) == 406
    assert "invalid property 'non-durable'" in exc.value.reply_text


# ---------------------------------------------------------------- dead-lettering


def test_reject_dead_letters_with_x_death(ch: Any, name: str, cleanup: Any) -> None:
    source, dead = _dlx_pair(ch, name)
    ch.basic_publish("", source, b"m1", pika.BasicProperties(headers={"a": 1}))
    method, _props, _body = ch.basic_get(source)
    ch.basic_reject(method.delivery_tag, requeue=False)
    assert count_is(ch, dead, 1)
    got = _get(ch, dead)
    assert got is not None
    method, props, body = got
    assert body == b"m1"
    assert method.exchange == f"{name}.dlx"
    headers = props.headers
    assert headers["a"] == 1
    (death,) = headers["x-death"]
    assert death["count"] == 1
    assert death["reason"] == "rejected"
    assert death["queue"] == source
    assert death["exchange"] == ""
    assert death["routing-keys"] == [source]
    assert abs(death["time"].timestamp() - time.time()) < 60
    assert headers["x-first-death-queue"] == source
    assert headers["x-first-death-reason"] == "rejected"
    assert headers["x-first-death-exchange"] == ""


def test_nack_dead_letters_with_routing_key(ch: Any, name: str, cleanup: Any) -> None:
    ch.queue_declare(f"{name}.dead")
    ch.queue_declare(
        name,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": f"{name}.dead"},
    )
    ch.basic_publish("", name, b"x")
    method, _p, _b = ch.basic_get(name)
    ch.basic_nack(method.delivery_tag, requeue=False)
    assert count_is(ch, f"{name}.dead", 1)
    method, props, _body = _get(ch, f"{name}.dead")  # type: ignore[misc]
    assert method.routing_key == f"{name}.dead"
    assert props.headers["x-death"][0]["routing-keys"] == [name]


def test_retry_loop_counts_deaths_per_queue_and_reason(ch: Any, name: str, cleanup: Any) -> None:
    """Reject -> wait queue (TTL) -> back: x-death counts per (queue, reason), Celery-style."""
    ch.queue_declare(
        name,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": f"{name}.b"},
    )
    ch.queue_declare(
        f"{name}.b",
        arguments={
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": name,
            "x-message-ttl": 50,
        },
    )
    ch.basic_publish("", name, b"job")
    for round_ in (1, 2, 3):
        assert pump(ch.connection, lambda: count_is(ch, name, 1, timeout=0.1), timeout=5)
        method, props, _body = ch.basic_get(name)
        if round_ > 1:
            deaths = {(d["queue"], d["reason"]): d["count"] for d in props.headers["x-death"]}
            assert deaths == {(name, "rejected"): round_ - 1, (f"{name}.b", "expired"): round_ - 1}
            assert props.headers["x-death"][0]["reason"] == "expired"
        ch.basic_reject(method.delivery_tag, requeue=False)


def test_missing_dead_letter_exchange_drops(ch: Any, name: str, cleanup: Any) -> None:
    ch.queue_declare(name, arguments={"x-dead-letter-exchange": f"{name}.none"})
    ch.basic_publish("", name, b"x")
    method, _p, _b = ch.basic_get(name)
    ch.basic_reject(method.delivery_tag, requeue=False)
    assert count_is(ch, name, 0)


def test_expiry_cycle_is_dropped(ch: Any, name: str, cleanup: Any) -> None:
    """A queue dead-lettering expired messages to itself: RabbitMQ drops the cycle."""
    ch.queue_declare(
        name,
        arguments={"x-dead-letter-exchange": "", "x-message-ttl": 20},
    )
    ch.basic_publish("", name, b"loop")
    settle(ch.connection, 0.5)
    assert count_is(ch, name, 0)


# ---------------------------------------------------------------- TTL


def test_queue_ttl_expires_and_dead_letters(ch: Any, name: str, cleanup: Any) -> None:
    source, dead = _dlx_pair(ch, name, **{"x-message-ttl": 100})
    ch.basic_publish("", source, b"old")
    assert count_is(ch, source, 1, timeout=0.05)
    assert count_is(ch, dead, 1, timeout=3)
    assert count_is(ch, source, 0)
    _m, props, body = _get(ch, dead)  # type: ignore[misc]
    assert body == b"old"
    assert props.headers["x-death"][0]["reason"] == "expired"


def test_per_message_expiration(ch: Any, name: str, cleanup: Any) -> None:
    source, dead = _dlx_pair(ch, name)
    ch.basic_publish("", source, b"short", pika.BasicProperties(expiration="100"))
    assert count_is(ch, dead, 1, timeout=3)
    _m, props, _b = _get(ch, dead)  # type: ignore[misc]
    assert props.expiration is None
    assert props.headers["x-death"][0]["original-expiration"] == "100"


def test_ttl_zero_delivers_to_waiting_consumer_or_drops(conn: Any, ch: Any, name: str) -> None:
    ch.queue_declare(name, auto_delete=True, arguments={"x-message-ttl": 0})
    ch.basic_publish("", name, b"dropped")
    assert count_is(ch, name, 0)
    got: list[bytes] = []
    ch.basic_consume(name, lambda c, m, p, b: got.append(b), auto_ack=True)
    ch.basic_publish("", name, b"delivered")
    assert pump(conn, lambda: got == [b"delivered"])


def test_invalid_expiration_closes_channel(conn: Any, name: str) -> None:
    ch = conn.channel()
    ch.queue_declare(name, auto_delete=True)
    ch.basic_publish("", name, b"x", pika.BasicProperties(expiration="abc"))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_declare(name, passive=True)
    assert code_of(exc) == 406
    assert "invalid expiration 'abc'" in exc.value.reply_text


# ---------------------------------------------------------------- length limits


def test_max_length_drop_head_dead_letters_maxlen(ch: Any, name: str, cleanup: Any) -> None:
    source, dead = _dlx_pair(ch, name, **{"x-max-length": 2})
    for i in range(4):
        ch.basic_publish("", source, str(i).encode())
    assert count_is(ch, source, 2)
    assert count_is(ch, dead, 2)
    assert [_get(ch, source)[2], _get(ch, source)[2]] == [b"2", b"3"]  # type: ignore[index]
    _m, props, body = _get(ch, dead)  # type: ignore[misc]
    assert body == b"0"
    assert props.headers["x-death"][0]["reason"] == "maxlen"


def test_max_length_bytes(ch: Any, name: str, cleanup: Any) -> None:
    ch.queue_declare(name, arguments={"x-max-length-bytes": 10})
    for body in (b"aaaa", b"bbbb", b"cccc"):
        ch.basic_publish("", name, body)
    assert count_is(ch, name, 2)
    assert _get(ch, name)[2] == b"bbbb"  # type: ignore[index]


def test_reject_publish_dlx(ch: Any, name: str, cleanup: Any) -> None:
    source, dead = _dlx_pair(ch, name, **{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    ch.basic_publish("", source, b"kept")
    ch.basic_publish("", source, b"refused")
    assert count_is(ch, dead, 1)
    assert _get(ch, source)[2] == b"kept"  # type: ignore[index]
    _m, props, body = _get(ch, dead)  # type: ignore[misc]
    assert body == b"refused"
    assert props.headers["x-death"][0]["reason"] == "maxlen"


# ---------------------------------------------------------------- queue TTL


def test_unused_queue_expires(ch: Any, name: str) -> None:
    """Unused = no consumers, no basic.get, no (even passive) redeclare for the period."""
    ch.queue_declare(name, arguments={"x-expires": 300})
    time.sleep(0.2)
    assert passive_code(ch.connection, name) == 0  # a passive declare is a use too
    time.sleep(0.2)
    assert passive_code(ch.connection, name) == 0
    time.sleep(1.0)
    assert passive_code(ch.connection, name) == 404


def test_queue_with_consumer_does_not_expire(conn: Any, ch: Any, name: str) -> None:
    ch.queue_declare(name, arguments={"x-expires": 200})
    ch.basic_consume(name, lambda *a: None, auto_ack=True)
    settle(conn, 0.6)
    assert passive_code(conn, name) == 0
    ch.queue_delete(name)


# ---------------------------------------------------------------- priorities


def test_priority_queue_orders_and_requeues(ch: Any, name: str, cleanup: Any) -> None:
    ch.queue_declare(name, arguments={"x-max-priority": 5})
    for body, priority in ((b"low", 1), (b"none", None), (b"high", 5), (b"over", 9)):
        ch.basic_publish("", name, body, pika.BasicProperties(priority=priority))
    assert count_is(ch, name, 4)
    method, _p, body = ch.basic_get(name)
    assert body == b"high"
    ch.basic_reject(method.delivery_tag, requeue=True)
    bodies = [_get(ch, name)[2] for _ in range(4)]  # type: ignore[index]
    assert bodies == [b"high", b"over", b"low", b"none"]


# ---------------------------------------------------------------- delivery limit


def test_quorum_delivery_limit_and_count(ch: Any, name: str) -> None:
    ch.queue_declare(f"{name}.dead", auto_delete=False)
    ch.queue_declare(
        name,
        durable=True,
        arguments={
            "x-queue-type": "quorum",
            "x-delivery-limit": 1,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": f"{name}.dead",
        },
    )
    try:
        ch.basic_publish("", name, b"poison")
        assert count_is(ch, name, 1)
        counts = []
        for _ in range(2):
            method, props, _b = ch.basic_get(name)
            counts.append(props.headers["x-delivery-count"])
            ch.basic_reject(method.delivery_tag, requeue=True)
        assert counts == [0, 1]
        assert count_is(ch, f"{name}.dead", 1)
        _m, props, _b = _get(ch, f"{name}.dead")  # type: ignore[misc]
        assert props.headers["x-death"][0]["reason"] == "delivery_limit"
    finally:
        ch.queue_delete(name)
        ch.queue_delete(f"{name}.dead")


# ---------------------------------------------------------------- consumers


def test_single_active_consumer_fails_over(conn: Any, ch: Any, name: str, cleanup: Any) -> None:
    ch.queue_declare(name, arguments={"x-single-active-consumer": True})
    got: dict[str, list[bytes]] = {"a": [], "b": []}
    ch.basic_consume(name, lambda c, m, p, b: got["a"].append(b), auto_ack=True, consumer_tag="a")
    ch.basic_consume(name, lambda c, m, p, b: got["b"].append(b), auto_ack=True, consumer_tag="b")
    for i in range(4):
        ch.basic_publish("", name, str(i).encode())
    assert pump(conn, lambda: len(got["a"]) == 4)
    ch.basic_cancel("a")
    ch.basic_publish("", name, b"after")
    assert pump(conn, lambda: got["b"] == [b"after"])


def test_consumer_priorities(conn: Any, ch: Any, name: str, cleanup: Any) -> None:
    ch.queue_declare(name)
    got: dict[str, list[bytes]] = {"low": [], "high": []}
    ch.basic_consume(name, lambda c, m, p, b: got["low"].append(b), auto_ack=True)
    ch.basic_consume(
        name,
        lambda c, m, p, b: got["high"].append(b),
        auto_ack=True,
        arguments={"x-priority": 10},
    )
    for i in range(5):
        ch.basic_publish("", name, str(i).encode())
    assert pump(conn, lambda: len(got["high"]) == 5)
    assert got["low"] == []


# ---------------------------------------------------------------- direct reply-to


def test_direct_reply_to(conn: Any, ch: Any, name: str) -> None:
    server = conn.channel()
    server.queue_declare(name, auto_delete=True)
    replies: list[bytes] = []
    ch.basic_consume("amq.rabbitmq.reply-to", lambda c, m, p, b: replies.append(b), auto_ack=True)

    def serve(c: Any, method: Any, props: Any, body: bytes) -> None:
        assert props.reply_to.startswith("amq.rabbitmq.reply-to.")
        assert passive_code(conn, props.reply_to) == 0
        c.basic_publish("", props.reply_to, body.upper())

    server.basic_consume(name, serve, auto_ack=True)
    ch.basic_publish("", name, b"ping", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
    assert pump(conn, lambda: replies == [b"PING"])


def test_direct_reply_to_rules(conn: Any, name: str) -> None:
    ch = conn.channel()
    ch.basic_publish("", name, b"x", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_declare(f"{name}.x", passive=True)
    assert code_of(exc) == 406
    assert "fast reply consumer does not exist" in exc.value.reply_text
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.basic_consume("amq.rabbitmq.reply-to", lambda *a: None, auto_ack=False)
    assert code_of(exc) == 406


# ---------------------------------------------------------------- CC / BCC


def test_sender_selected_distribution(ch: Any, name: str) -> None:
    queues = [f"{name}.{i}" for i in range(3)]
    for queue in queues:
        ch.queue_declare(queue, auto_delete=False)
    try:
        headers = {"CC": [queues[1]], "BCC": [queues[2]]}
        ch.basic_publish("", queues[0], b"x", pika.BasicProperties(headers=headers))
        for queue in queues:
            assert count_is(ch, queue, 1)
            _m, props, _b = _get(ch, queue)  # type: ignore[misc]
            assert props.headers == {"CC": [queues[1]]}
    finally:
        for queue in queues:
            ch.queue_delete(queue)


# ---------------------------------------------------------------- consumer ack timeout


@pytest.mark.leveret_only  # RabbitMQ 3.x closes the whole channel with 406 instead
def test_consumer_timeout_cancels_only_the_late_consumer() -> None:
    if os.environ.get(URL_ENV):
        pytest.skip("needs a broker started with --consumer-timeout")
    broker = start_broker("--consumer-timeout", "500")
    try:
        with Opened(connect(broker)) as conn:
            late = conn.channel()
            late.queue_declare("ct")
            late.basic_qos(prefetch_count=1)
            cancelled: list[Any] = []
            got: list[tuple[str, bytes, bool]] = []
            late.add_on_cancel_callback(cancelled.append)
            late.basic_consume(
                "ct",
                lambda _c, m, _p, body: got.append(("late", body, m.redelivered)),
                consumer_tag="late",
            )
            late.basic_publish("", "ct", b"job")
            assert pump(conn, lambda: len(got) == 1)
            other = conn.channel()

            def on_other(c: Any, m: Any, _p: Any, body: bytes) -> None:
                got.append(("other", body, m.redelivered))
                c.basic_ack(m.delivery_tag)

            other.basic_consume("ct", on_other, consumer_tag="other")
            assert pump(conn, lambda: len(got) == 2 and bool(cancelled), timeout=5)
            assert got == [("late", b"job", False), ("other", b"job", True)]
            assert cancelled[0].method.consumer_tag == "late"
            # The late channel stays open and usable; a late ack is ignored.
            late.basic_ack(1)
            assert late.is_open
            assert late.queue_declare("ct", passive=True).method.consumer_count == 1
            settle(conn, 0.1)
            assert late.is_open
            assert conn.is_open
        assert "timed out" in broker.log_text()
    finally:
        broker.stop()
