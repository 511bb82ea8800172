"""The delayed-message exchange through pika against a real broker.

The first tests describe the behaviour of RabbitMQ's rabbitmq-delayed-message-exchange
plugin as its README and sources define it (the plugin is not installed in the RabbitMQ on
this machine, and Debian does not package it): README.md ("Usage", "Routing",
"Performance Impact", "Limitations") and src/rabbit_exchange_type_delayed_message.erl,
src/rabbit_delayed_message.erl, src/rabbit_delayed_message_utils.erl of
github.com/rabbitmq/rabbitmq-delayed-message-exchange. With ``LEVERET_TEST_AMQP_URL`` they
run against another broker, and are skipped if it does not know the exchange type. The
``leveret_only`` tests are what the plugin never had (cancelling, the store surviving
``kill -9``) and the plugin's documented limitations Leveret does not share.
"""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest

from tests.integration.conftest import URL_ENV, start_broker
from tests.integration.pika_support import Opened, connect, pump

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.integration.conftest import Broker

DELAYED = "x-delayed-message"


def declare(ch: Any, name: str, inner: str = "direct", durable: bool = False) -> None:
    try:
        ch.exchange_declare(name, DELAYED, durable=durable, arguments={"x-delayed-type": inner})
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code == 503 and "unknown exchange type" in exc.reply_text:
            pytest.skip("the broker has no delayed-message exchange type")
        raise


def bound_queue(ch: Any, exchange: str, queue: str, key: str = "k", durable: bool = False) -> None:
    ch.queue_declare(queue, durable=durable, auto_delete=not durable)
    ch.queue_bind(queue, exchange, key)


def delayed(ms: object, **props: Any) -> Any:
    headers = dict(props.pop("headers", {}))
    headers["x-delay"] = ms
    return pika.BasicProperties(headers=headers, **props)


def collect(
    conn: Any, ch: Any, queue: str, count: int, timeout: float, *, auto_ack: bool = False
) -> list[tuple[float, Any, bytes]]:
    """(arrival wall time, properties, body) of ``count`` messages, or fewer at the timeout."""
    got: list[tuple[float, Any, bytes]] = []

    def on_message(c: Any, method: Any, props: Any, body: bytes) -> None:
        got.append((time.time(), props, body))
        if not auto_ack:
            c.basic_ack(method.delivery_tag)

    ch.basic_consume(queue, on_message, auto_ack=auto_ack)
    pump(conn, lambda: len(got) >= count, timeout)
    return got


def test_messages_arrive_after_their_delay_in_due_order(conn: Any, ch: Any, name: str) -> None:
    declare(ch, name)
    bound_queue(ch, name, name)
    sent = time.time()
    ch.basic_publish(name, "k", b"delayed payload", delayed(900))
    ch.basic_publish(name, "k", b"more delayed payload", delayed(300))
    got = collect(conn, ch, name, 2, 5.0)
    assert [body for _t, _p, body in got] == [b"more delayed payload", b"delayed payload"]
    assert got[0][0] - sent >= 0.3 - 0.01
    assert got[1][0] - sent >= 0.9 - 0.01
    # Routed with x-delay negated (rabbit_delayed_message_utils:swap_delay_header/1).
    assert [p.headers["x-delay"] for _t, p, _b in got] == [-300, -900]


def test_without_a_positive_delay_a_message_is_routed_at_once(
    conn: Any, ch: Any, name: str
) -> None:
    declare(ch, name)
    bound_queue(ch, name, name)
    ch.basic_publish(name, "k", b"plain")
    ch.basic_publish(name, "k", b"zero", delayed(0))
    ch.basic_publish(name, "k", b"negative", delayed(-1000))
    ch.basic_publish(name, "k", b"string", delayed("150"))
    got = collect(conn, ch, name, 4, 5.0)
    assert [body for _t, _p, body in got] == [b"plain", b"zero", b"negative", b"string"]


def test_the_type_argument_is_required_and_must_exist(conn: Any, name: str) -> None:
    ch = conn.channel()
    declare(ch, name)  # skips on a broker without the type
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.exchange_declare(name + ".bad", DELAYED)
    assert excinfo.value.reply_code == 406
    assert "x-delayed-type" in excinfo.value.reply_text
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        ch.exchange_declare(name + ".bad", DELAYED, arguments={"x-delayed-type": "nope"})
    assert closed.value.reply_code == 503


def test_routing_follows_x_delayed_type(conn: Any, ch: Any, name: str) -> None:
    declare(ch, name, "topic")
    bound_queue(ch, name, name, "orders.*")
    ch.basic_publish(name, "orders.created", b"yes", delayed(100))
    ch.basic_publish(name, "invoices.created", b"no", delayed(100))
    got = collect(conn, ch, name, 1, 5.0)
    time.sleep(0.3)
    conn.process_data_events(0)
    assert [body for _t, _p, body in got] == [b"yes"]


def test_bindings_are_those_of_the_due_time(conn: Any, ch: Any, name: str) -> None:
    declare(ch, name)
    ch.basic_publish(name, "k", b"m", delayed(400))
    bound_queue(ch, name, name)  # bound after the publish, before the due time
    got = collect(conn, ch, name, 1, 5.0)
    assert [body for _t, _p, body in got] == [b"m"]


@pytest.mark.leveret_only
def test_mandatory_delayed_messages_are_not_returned(conn: Any, name: str) -> None:
    """The plugin's README: "the mandatory flag is not supported"; it answers every delayed
    mandatory publish with basic.return (its route is empty). Leveret holds the message,
    so nothing is returned."""
    ch = conn.channel()
    ch.confirm_delivery()
    declare(ch, name)
    bound_queue(ch, name, name)
    returned: list[bytes] = []
    ch.add_on_return_callback(lambda _c, _m, _p, body: returned.append(body))
    ch.basic_publish(name, "k", b"m", delayed(200), mandatory=True)
    got = collect(conn, ch, name, 1, 5.0)
    assert [body for _t, _p, body in got] == [b"m"]
    assert returned == []


@pytest.mark.leveret_only
def test_cancel_over_amqp_and_the_reply(conn: Any, ch: Any, name: str) -> None:
    declare(ch, name)
    bound_queue(ch, name, name)
    replies = ch.queue_declare("", exclusive=True).method.queue
    for i in range(3):
        ch.basic_publish(name, "k", b"job %d" % i, delayed(500, message_id=f"job-{i}"))
    ch.basic_publish(
        name,
        "",
        b"",
        pika.BasicProperties(
            headers={"x-delayed-cancel": "job-1"}, reply_to=replies, correlation_id="r1"
        ),
    )
    method, props, _body = None, None, b""
    deadline = time.monotonic() + 5
    while method is None and time.monotonic() < deadline:
        method, props, _body = ch.basic_get(replies, auto_ack=True)
    assert props is not None
    assert props.headers == {"x-delayed-cancelled": 1}
    assert props.correlation_id == "r1"
    got = collect(conn, ch, name, 2, 5.0)
    assert sorted(body for _t, _p, body in got) == [b"job 0", b"job 2"]


@pytest.mark.leveret_only
def test_cancelling_at_the_due_time_cancels_or_delivers_never_both(
    conn: Any, ch: Any, name: str
) -> None:
    """Each message is cancelled exactly at its due time: it is then either delivered (the
    cancel finds nothing) or cancelled (never delivered)."""
    count = 200
    declare(ch, name)
    bound_queue(ch, name, name)
    replies = ch.queue_declare("", exclusive=True).method.queue
    start = time.time()
    for i in range(count):
        ch.basic_publish(name, "k", b"%d" % i, delayed(500 + i, message_id=str(i)))
    delivered: list[bytes] = []
    answers: dict[str, int] = {}

    def on_message(c: Any, method: Any, props: Any, body: bytes) -> None:
        delivered.append(body)
        c.basic_ack(method.delivery_tag)

    def on_reply(c: Any, method: Any, props: Any, body: bytes) -> None:
        answers[props.correlation_id] = props.headers["x-delayed-cancelled"]

    ch.basic_consume(name, on_message)
    ch.basic_consume(replies, on_reply, auto_ack=True)
    for i in range(count):
        wait = start + (500 + i) / 1000 - time.time()
        if wait > 0:
            conn.process_data_events(time_limit=wait)
        props = pika.BasicProperties(
            headers={"x-delayed-cancel": str(i)}, reply_to=replies, correlation_id=str(i)
        )
        ch.basic_publish(name, "", b"", props)
    pump(conn, lambda: len(answers) == count, 10.0)
    time.sleep(0.2)
    conn.process_data_events(0)
    assert len(answers) == count
    cancelled = {int(k) for k, n in answers.items() if n == 1}
    got = {int(b) for b in delivered}
    assert len(delivered) == len(got)  # none twice
    assert cancelled.isdisjoint(got)
    assert cancelled | got == set(range(count))


# -- restarts: the store ---------------------------------------------------------------------


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    if os.environ.get(URL_ENV):
        pytest.skip("needs a broker process the test controls")
    return str(tmp_path / "data")


@pytest.fixture
def node(data_dir: str) -> Iterator[list[Broker]]:
    brokers = [start_broker("--data-dir", data_dir)]
    try:
        yield brokers
    finally:
        for b in brokers:
            if b.process is not None and b.process.poll() is None:
                b.stop()


@pytest.mark.leveret_only
def test_pending_messages_survive_a_clean_restart(data_dir: str, node: list[Broker]) -> None:
    with Opened(connect(node[0])) as conn:
        ch = conn.channel()
        declare(ch, "sched", durable=True)
        bound_queue(ch, "sched", "sched.q", durable=True)
        ch.basic_publish("sched", "k", b"transient too", delayed(1500, delivery_mode=1))
    node[0].stop(signal.SIGTERM)
    node.append(start_broker("--data-dir", data_dir))
    with Opened(connect(node[-1])) as conn:
        got = collect(conn, conn.channel(), "sched.q", 1, 10.0)
    assert [body for _t, _p, body in got] == [b"transient too"]


def on_disk(conn: Any) -> None:
    """Wait until what ``conn`` published so far is on disk: a confirmed persistent publish
    on another channel of the same connection is written after it (one socket, read in
    order; one store, committed in order). (Not tx: a delay counts from the commit.)"""
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("sync.marker", durable=True)
    ch.basic_publish("", "sync.marker", b"", pika.BasicProperties(delivery_mode=2))
    ch.queue_purge("sync.marker")
    ch.close()


def _lateness(arrivals: list[tuple[float, Any, bytes]]) -> list[float]:
    """Milliseconds each message arrived after its due time (the body says when)."""
    return [t * 1000 - int(body.split(b" ")[1]) for t, _p, body in arrivals]


@pytest.mark.leveret_only
@pytest.mark.serial  # its lateness bounds count the client's pace too: not beside other tests
def test_ten_thousand_pending_messages_survive_kill_9_and_arrive_once_on_time(
    data_dir: str, node: list[Broker]
) -> None:
    count = 10_000
    # Every message is due in [start + LEAD, start + LEAD + 5 s], in an order unrelated to
    # the order of publishing, after the publishing, the kill and the restart are over.
    lead = 15_000
    start = int(time.time() * 1000)
    with Opened(connect(node[0])) as conn:
        ch = conn.channel()
        declare(ch, "sched", durable=True)
        bound_queue(ch, "sched", "sched.q", durable=True)
        for i in range(count):
            due = start + lead + (i * 7919) % 5000
            delay = due - int(time.time() * 1000)
            ch.basic_publish("sched", "k", b"%d %d" % (i, due), delayed(delay, delivery_mode=2))
        on_disk(conn)
    published = time.time() * 1000 - start
    node[0].stop(signal.SIGKILL)
    node.append(start_broker("--data-dir", data_dir))
    listening = time.time() * 1000 - start
    assert "10000 pending messages of delayed exchange 'sched'" in node[-1].log_text()
    with Opened(connect(node[-1])) as conn:
        ch = conn.channel()
        # No acks: the test's client must keep up with 2000 messages a second.
        got = collect(conn, ch, "sched.q", count, lead / 1000 + 30.0, auto_ack=True)
    ids = [int(body.split(b" ")[0]) for _t, _p, body in got]
    assert sorted(ids) == list(range(count))  # every one, once
    assert listening < lead, "the machine is too slow for this test's schedule"
    late = sorted(_lateness(got))
    p50, p99 = late[len(late) // 2], late[int(len(late) * 0.99)]
    print(
        f"published in {published:.0f} ms, listening again at {listening:.0f} ms; lateness "
        f"ms: min {late[0]:.1f} p50 {p50:.1f} p99 {p99:.1f} max {late[-1]:.1f} "
        f"mean {statistics.mean(late):.1f}"
    )
    assert late[0] >= -5  # never early (the client's clock read before the broker's)
    # Measured with a few runs at load 6-10 on 2 cores: p50 3-30 ms, p99 27-670 ms (the
    # figures are in docs/benchmarks.md). The bounds catch a scheduler that is wrong
    # (seconds late, or late in bulk) without failing on a machine shared with other work.
    assert p50 <= 100
    assert p99 <= 1500
    assert late[-1] <= 3000


@pytest.mark.leveret_only
def test_kill_9_while_due_messages_are_routed_loses_and_doubles_nothing(
    data_dir: str, node: list[Broker]
) -> None:
    """Messages move from the store to a durable queue nobody consumes while the broker is
    killed: afterwards each is in exactly one of the two places."""
    count = 3000
    with Opened(connect(node[0])) as conn:
        ch = conn.channel()
        declare(ch, "sched", durable=True)
        bound_queue(ch, "sched", "sched.q", durable=True)
        for i in range(count):
            ch.basic_publish("sched", "k", b"%d" % i, delayed(300 + i, delivery_mode=2))
        on_disk(conn)
    killer = threading.Timer(0.3 + count / 2000, node[0].stop, (signal.SIGKILL,))
    killer.start()
    killer.join()
    node.append(start_broker("--data-dir", data_dir))
    with Opened(connect(node[-1])) as conn:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1000)
        got = collect(conn, ch, "sched.q", count, 30.0)
    ids = sorted(int(body) for _t, _p, body in got)
    assert ids == list(range(count))
