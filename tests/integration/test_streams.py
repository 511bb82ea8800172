"""Stream queues over AMQP 0-9-1 with pika and aio-pika, checked against RabbitMQ 3.10 too.

Tests of what Leveret adds or does differently (passive declare gives the next offset, the
``x-stream-timestamp`` header, de-duplication, restarts) are ``leveret_only``.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

import aio_pika
import pika
import pika.exceptions
import pytest

from tests.integration.conftest import URL_ENV, Broker, start_broker
from tests.integration.pika_support import Opened, code_of, connect, pump

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

STREAM = {"x-queue-type": "stream"}

Got = list[tuple[int, bytes, dict[str, Any]]]


@pytest.fixture
def stream(conn: Any, name: str) -> Iterator[str]:
    """A stream declared for the test and deleted afterwards (RabbitMQ keeps them)."""
    conn.channel().queue_declare(name, durable=True, arguments=STREAM)
    yield name
    if conn.is_open:
        conn.channel().queue_delete(name)


def publish(conn: Any, queue: str, bodies: list[bytes], **props: Any) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", queue, body, pika.BasicProperties(**props))
    ch.close()


def consume(
    conn: Any,
    queue: str,
    count: int,
    offset: object = None,
    *,
    prefetch: int = 100,
    timeout: float = 5.0,
) -> Got:
    """Attach a consumer at ``offset``, take ``count`` deliveries, detach.

    Only as many are acked as keep the total sent at ``count`` at most: pika rejects the
    deliveries it holds when a channel closes, and a reject of a stream delivery closes the
    connection (540)."""
    ch = conn.channel()
    prefetch = min(prefetch, count)
    ch.basic_qos(prefetch_count=prefetch)
    got: Got = []

    def on_message(channel: Any, method: Any, props: Any, body: bytes) -> None:
        headers = props.headers or {}
        got.append((int(headers["x-stream-offset"]), body, headers))
        if len(got) <= count - prefetch:
            channel.basic_ack(method.delivery_tag)

    arguments = {} if offset is None else {"x-stream-offset": offset}
    ch.basic_consume(queue, on_message, arguments=arguments)
    pump(conn, lambda: len(got) >= count, timeout)
    ch.close()
    return got


def bodies(n: int, start: int = 0) -> list[bytes]:
    return [b"m%d" % i for i in range(start, start + n)]


# -- declaring ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "text"),
    [
        ({"durable": False}, "invalid property 'non-durable'"),
        ({"durable": True, "exclusive": True}, "invalid property 'exclusive-owner'"),
        ({"durable": True, "auto_delete": True}, "invalid property 'auto-delete'"),
    ],
)
def test_streams_must_be_durable_shared_and_kept(
    conn: Any, name: str, flags: dict[str, bool], text: str
) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        conn.channel().queue_declare(name, arguments=STREAM, **flags)
    assert code_of(info) == 406
    assert text in info.value.reply_text


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ({"x-max-age": "7X"}, "invalid arg 'x-max-age'"),
        ({"x-max-age": 7}, "{unacceptable_type,signedint}"),
        ({"x-stream-max-segment-size-bytes": "x"}, '"expected integer, got longstr"'),
        ({"x-stream-max-segment-size-bytes": -1}, "{value_negative,-1}"),
        ({"x-max-length": 5}, "of queue type rabbit_stream_queue"),
        ({"x-message-ttl": 5}, "of queue type rabbit_stream_queue"),
        ({"x-dead-letter-exchange": "x"}, "of queue type rabbit_stream_queue"),
    ],
)
def test_bad_stream_arguments_are_406(
    conn: Any, name: str, args: dict[str, object], text: str
) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        conn.channel().queue_declare(name, durable=True, arguments={**STREAM, **args})
    assert code_of(info) == 406
    assert text in info.value.reply_text


def test_retention_arguments_are_accepted(conn: Any, name: str) -> None:
    ch = conn.channel()
    args = {
        **STREAM,
        "x-max-age": "7D",
        "x-max-length-bytes": 10_000_000,
        "x-stream-max-segment-size-bytes": 1_000_000,
    }
    ch.queue_declare(name, durable=True, arguments=args)
    ch.queue_declare(name, durable=True, arguments=args)  # equivalent
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(name, durable=True, arguments={**args, "x-max-age": "1D"})
    assert code_of(info) == 406
    conn.channel().queue_delete(name)


# -- reading -----------------------------------------------------------------------------


def test_offsets_first_numeric_last_and_reading_does_not_remove(conn: Any, stream: str) -> None:
    publish(conn, stream, bodies(10))
    first = consume(conn, stream, 10, "first")
    assert [(o, b) for o, b, _h in first] == list(enumerate(bodies(10)))
    again = consume(conn, stream, 10, 0)
    assert [o for o, _b, _h in again] == list(range(10))
    assert [o for o, _b, _h in consume(conn, stream, 4, 6)] == [6, 7, 8, 9]
    # RabbitMQ attaches "last" at the start of the last chunk; Leveret at the last message.
    [(last, _b, _h)] = consume(conn, stream, 1, "last")
    assert last == 9 if not os.environ.get(URL_ENV) else 0 <= last <= 9
    assert isinstance(first[0][2]["x-stream-offset"], int)


def test_next_and_the_default_wait_for_new_messages(conn: Any, stream: str) -> None:
    publish(conn, stream, bodies(3))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    got: dict[str, list[int]] = {"next": [], "default": []}
    for key, arguments in (("next", {"x-stream-offset": "next"}), ("default", {})):

        def on_message(c: Any, m: Any, p: Any, b: bytes, key: str = key) -> None:
            got[key].append(p.headers["x-stream-offset"])
            c.basic_ack(m.delivery_tag)

        ch.basic_consume(stream, on_message, arguments=arguments)
    pump(conn, lambda: False, 0.3)
    assert got == {"next": [], "default": []}
    publish(conn, stream, bodies(2, 3))
    assert pump(conn, lambda: len(got["next"]) == 2 and len(got["default"]) == 2)
    assert got == {"next": [3, 4], "default": [3, 4]}


def test_timestamp_offset_starts_at_the_first_message_at_or_after(conn: Any, stream: str) -> None:
    publish(conn, stream, bodies(3))
    time.sleep(1.2)
    since = datetime.datetime.now(tz=datetime.UTC)
    time.sleep(1.2)
    publish(conn, stream, bodies(3, 3))
    got = consume(conn, stream, 3, since)
    assert [b for _o, b, _h in got] == bodies(3, 3)
    assert [b for _o, b, _h in consume(conn, stream, 6, "1h")] == bodies(6)


def test_many_concurrent_consumers_at_different_offsets(conn: Any, stream: str) -> None:
    publish(conn, stream, bodies(300))
    starts = [0, 50, 123, 299, "first", "last"]
    results: dict[int, list[int]] = {}
    channels = []
    for i, start in enumerate(starts):
        ch = conn.channel()
        ch.basic_qos(prefetch_count=7 + i)
        results[i] = []

        def on_message(c: Any, m: Any, p: Any, b: bytes, i: int = i) -> None:
            results[i].append(p.headers["x-stream-offset"])
            c.basic_ack(m.delivery_tag)

        ch.basic_consume(stream, on_message, arguments={"x-stream-offset": start})
        channels.append(ch)
    # A live publisher on another connection while they read.
    with Opened(connect_like(conn)) as other:
        publish(other, stream, bodies(100, 300))
    expected_first = [0, 50, 123, 299, 0, 299]
    assert pump(conn, lambda: all(r and r[-1] == 399 for r in results.values()), 15)
    for i, first in enumerate(expected_first):
        assert results[i] == list(range(first, 400)), starts[i]


def connect_like(conn: Any) -> Any:
    params = conn._impl.params
    return pika.BlockingConnection(params)


def test_prefetch_bounds_unacked_deliveries(conn: Any, stream: str) -> None:
    publish(conn, stream, bodies(20))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=5)
    got: list[Any] = []
    ch.basic_consume(
        stream, lambda c, m, p, b: got.append(m), arguments={"x-stream-offset": "first"}
    )
    pump(conn, lambda: len(got) >= 5)
    pump(conn, lambda: False, 0.3)
    assert len(got) == 5
    ch.basic_ack(got[-1].delivery_tag, multiple=True)
    assert pump(conn, lambda: len(got) == 10)
    pump(conn, lambda: False, 0.3)
    assert len(got) == 10


# -- what RabbitMQ refuses ------------------------------------------------------------------


def test_consume_without_qos_is_406(conn: Any, stream: str) -> None:
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(stream, lambda *a: None)
    assert code_of(info) == 406
    assert str(info.value.reply_text) == (
        f"PRECONDITION_FAILED - consumer prefetch count is not set for "
        f"'queue '{stream}' in vhost '/''"
    )


def test_global_qos_does_not_count(conn: Any, stream: str) -> None:
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10, global_qos=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(stream, lambda *a: None)
    assert code_of(info) == 406


def _closes_connection(broker: Broker, stream: str, action: Any) -> Any:
    with Opened(connect(broker)) as c:
        ch = c.channel()
        try:
            action(c, ch)
            pump(c, lambda: not c.is_open, 3)
        except pika.exceptions.ConnectionClosedByBroker as exc:
            return exc
    raise AssertionError("the connection stayed open")


def test_no_ack_get_and_purge_close_the_connection_540(broker: Broker, stream: str) -> None:
    def no_ack(c: Any, ch: Any) -> None:
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(stream, lambda *a: None, auto_ack=True)

    exc = _closes_connection(broker, stream, no_ack)
    assert exc.reply_code == 540
    assert "automatic acknowledgement not supported by stream queues" in exc.reply_text
    exc = _closes_connection(broker, stream, lambda c, ch: ch.basic_get(stream))
    assert exc.reply_code == 540
    assert f"basic.get not supported by stream queues queue '{stream}'" in exc.reply_text
    exc = _closes_connection(broker, stream, lambda c, ch: ch.queue_purge(stream))
    assert exc.reply_code == 540
    assert "queue.purge not supported by stream queues" in exc.reply_text


@pytest.mark.parametrize("how", ["reject", "nack"])
def test_reject_and_nack_close_the_connection_540(broker: Broker, stream: str, how: str) -> None:
    def settle_badly(c: Any, ch: Any) -> None:
        publish(c, stream, [b"x"])
        ch.basic_qos(prefetch_count=10)
        tags: list[int] = []
        ch.basic_consume(
            stream,
            lambda _c, m, p, b: tags.append(m.delivery_tag),
            arguments={"x-stream-offset": "first"},
        )
        pump(c, lambda: bool(tags))
        if how == "reject":
            ch.basic_reject(tags[0], requeue=True)
        else:
            ch.basic_nack(tags[0], requeue=False)

    exc = _closes_connection(broker, stream, settle_badly)
    assert exc.reply_code == 540
    assert "basic.nack and basic.reject not supported by stream queues" in exc.reply_text


def test_bad_offset_string_is_406(conn: Any, stream: str) -> None:
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(stream, lambda *a: None, arguments={"x-stream-offset": "5X"})
    assert code_of(info) == 406
    assert "invalid arg 'x-stream-offset'" in info.value.reply_text
    assert '{invalid_stream_offset_arg,{longstr,<<"5X">>}}' in info.value.reply_text


@pytest.mark.leveret_only
@pytest.mark.parametrize("value", [True, {"a": 1}, [1, 2]])
def test_bad_offset_types_are_406_not_541(conn: Any, stream: str, value: object) -> None:
    """RabbitMQ 3.10 crashes the channel process (541 connection close) on these."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(stream, lambda *a: None, arguments={"x-stream-offset": value})
    assert code_of(info) == 406
    assert "invalid_stream_offset_arg" in info.value.reply_text


# -- retention -----------------------------------------------------------------------------


def test_retention_moves_the_first_offset(conn: Any, name: str) -> None:
    args = {**STREAM, "x-max-length-bytes": 20_000, "x-stream-max-segment-size-bytes": 5_000}
    conn.channel().queue_declare(name, durable=True, arguments=args)
    try:
        payload = [b"%04d" % i + b"r" * 496 for i in range(400)]
        publish(conn, name, payload)
        time.sleep(0.5)
        ch = conn.channel()
        ch.basic_qos(prefetch_count=50)
        got: Got = []

        def on_message(channel: Any, method: Any, props: Any, body: bytes) -> None:
            got.append((int(props.headers["x-stream-offset"]), body, props.headers))
            channel.basic_ack(method.delivery_tag)

        ch.basic_consume(name, on_message, arguments={"x-stream-offset": 0})
        # Everything up to the last message, which is the end: nothing stays in flight.
        assert pump(conn, lambda: bool(got) and got[-1][1] == payload[-1], 10)
        ch.close()
        offsets = [o for o, _b, _h in got]
        assert offsets[0] > 0  # the head was dropped: the consumer starts at the first kept
        assert offsets == sorted(offsets)
        kept = [b for _o, b, _h in got]
        assert len(kept) < 400
        assert kept == payload[400 - len(kept) :]
        if not os.environ.get(URL_ENV):
            assert offsets == list(range(offsets[0], 400))  # no gaps in Leveret's own log
    finally:
        conn.channel().queue_delete(name)


@pytest.mark.leveret_only
def test_max_age_retention_runs_on_a_timer(conn: Any, name: str) -> None:
    args = {**STREAM, "x-max-age": "1s", "x-stream-max-segment-size-bytes": 1}
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments=args)
    try:
        publish(conn, name, bodies(5))  # each message closes its segment

        def first() -> int:
            ok = ch.queue_declare(name, passive=True, arguments={"x-stream-offset": "first"})
            return int(ok.method.message_count)

        assert first() == 0
        deadline = time.monotonic() + 10
        while first() < 5 and time.monotonic() < deadline:
            time.sleep(0.2)  # no publish, no consumer: only the timer can drop them
        assert first() == 5
        assert ch.queue_declare(name, passive=True).method.message_count == 5
        publish(conn, name, [b"new"])
        [(offset, body, _h)] = consume(conn, name, 1, 0)
        assert (offset, body) == (5, b"new")
    finally:
        conn.channel().queue_delete(name)


# -- Leveret's additions -------------------------------------------------------------------


@pytest.mark.leveret_only
def test_passive_declare_gives_the_next_offset(conn: Any, stream: str) -> None:
    ch = conn.channel()
    assert ch.queue_declare(stream, passive=True).method.message_count == 0
    publish(conn, stream, bodies(7))
    assert ch.queue_declare(stream, passive=True).method.message_count == 7
    consume(conn, stream, 7, "first")
    assert ch.queue_declare(stream, passive=True).method.message_count == 7


@pytest.mark.leveret_only
def test_passive_declare_with_an_offset_argument_looks_the_offset_up(
    conn: Any, stream: str
) -> None:
    ch = conn.channel()
    publish(conn, stream, bodies(3))
    time.sleep(1.2)
    since = datetime.datetime.now(tz=datetime.UTC)
    time.sleep(1.2)
    publish(conn, stream, bodies(4, 3))

    def lookup(offset: object) -> int:
        ok = ch.queue_declare(stream, passive=True, arguments={"x-stream-offset": offset})
        return int(ok.method.message_count)

    assert [lookup(s) for s in ("first", "last", "next", 5, since, "1h")] == [0, 6, 7, 5, 3, 0]
    [(offset, _b, _h)] = consume(conn, stream, 1, since)
    assert offset == lookup(since)


@pytest.mark.leveret_only
def test_every_delivery_has_an_append_timestamp(conn: Any, stream: str) -> None:
    before = int(time.time() * 1000)
    publish(conn, stream, bodies(3), headers={"mine": "kept"})
    after = int(time.time() * 1000)
    got = consume(conn, stream, 3, "first")
    stamps = [h["x-stream-timestamp"] for _o, _b, h in got]
    assert all(before - 5 <= s <= after + 5 for s in stamps), (before, stamps, after)
    assert stamps == sorted(stamps)
    assert all(h["mine"] == "kept" for _o, _b, h in got)


@pytest.mark.leveret_only
def test_publish_deduplication(conn: Any, stream: str) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    for producer, seq in (("a", 0), ("a", 1), ("a", 1), ("b", 0), ("a", 0), ("a", 2)):
        props = pika.BasicProperties(
            headers={"x-stream-producer": producer, "x-stream-sequence": seq}
        )
        ch.basic_publish("", stream, f"{producer}{seq}".encode(), props)  # every one confirmed
    ch.basic_publish("", stream, b"plain")
    ch.basic_publish("", stream, b"plain")
    got = consume(conn, stream, 6, "first")
    assert [b for _o, b, _h in got] == [b"a0", b"a1", b"b0", b"a2", b"plain", b"plain"]


@pytest.mark.leveret_only
def test_deduplication_and_cc_read_from_the_header_bytes(conn: Any, stream: str) -> None:
    """The broker reads CC and the de-duplication headers from the property bytes (no
    decode): a CC copy still goes to its queue, a duplicate is still dropped, and the
    stream gives each message's properties back as published."""
    ch = conn.channel()
    ch.confirm_delivery()
    other = ch.queue_declare("", exclusive=True).method.queue
    for seq, cc in ((0, None), (1, other), (1, None), (2, None)):
        headers: dict[str, Any] = {"x-stream-producer": "p", "x-stream-sequence": seq}
        if cc:
            headers["CC"] = [cc]
        props = pika.BasicProperties(headers=headers, message_id=f"p-{seq}", delivery_mode=2)
        ch.basic_publish("", stream, f"p{seq}".encode(), props)
    got = consume(conn, stream, 3, "first")
    assert [b for _o, b, _h in got] == [b"p0", b"p1", b"p2"]
    assert [h["x-stream-sequence"] for _o, _b, h in got] == [0, 1, 2]
    copied = ch.basic_get(other, auto_ack=True)
    # A table header with a name a 1.0 symbol cannot hold is stored too (it closed the
    # connection with 541), and read back as published.
    nested = {"x-nested": {"é": 1}}
    ch.basic_publish("", stream, b"t", pika.BasicProperties(headers=nested))
    assert consume(conn, stream, 4, "first")[3][2]["x-nested"] == {"é": 1}
    assert copied[2] == b"p1"
    assert copied[1].message_id == "p-1"


# -- restarts ------------------------------------------------------------------------------


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    if os.environ.get(URL_ENV):
        pytest.skip("needs a broker process the test controls")
    return str(tmp_path / "data")


@pytest.mark.leveret_only
@pytest.mark.parametrize(
    "sig", [pytest.param(signal.SIGTERM, id="sigterm"), pytest.param(signal.SIGKILL, id="sigkill")]
)
def test_stream_offsets_and_dedup_state_survive_restarts(data_dir: str, sig: int) -> None:
    node = start_broker("--data-dir", data_dir)
    try:
        with Opened(connect(node)) as c:
            c.channel().queue_declare("s", durable=True, arguments={**STREAM, **SMALL})
            ch = c.channel()
            ch.confirm_delivery()
            for seq in range(300):
                props = pika.BasicProperties(
                    headers={"x-stream-producer": "p", "x-stream-sequence": seq}
                )
                ch.basic_publish("", "s", b"%d" % seq + b"." * 200, props)
        node.stop(sig)  # confirmed, so on disk even for SIGKILL
        node = start_broker("--data-dir", data_dir)
        with Opened(connect(node)) as c:
            ch = c.channel()
            assert ch.queue_declare("s", passive=True).method.message_count == 300
            got = consume(c, "s", 300, "first")
            assert [o for o, _b, _h in got] == list(range(300))
            assert [b.split(b".")[0] for _o, b, _h in got] == [b"%d" % i for i in range(300)]
            assert [o for o, _b, _h in consume(c, "s", 10, 150)][:10] == list(range(150, 160))
            ch = c.channel()
            ch.confirm_delivery()
            for seq in (0, 150, 299, 300):  # only 300 is new
                props = pika.BasicProperties(
                    headers={"x-stream-producer": "p", "x-stream-sequence": seq}
                )
                ch.basic_publish("", "s", b"again %d" % seq, props)
            assert ch.queue_declare("s", passive=True).method.message_count == 301
            [(offset, body, _h)] = consume(c, "s", 1, "last")
            assert (offset, body) == (300, b"again 300")
    finally:
        node.stop()


SMALL = {"x-stream-max-segment-size-bytes": 4096}


@pytest.mark.leveret_only
def test_a_deleted_stream_leaves_no_files_and_a_new_one_starts_at_zero(data_dir: str) -> None:
    node = start_broker("--data-dir", data_dir)
    try:
        with Opened(connect(node)) as c:
            c.channel().queue_declare("s", durable=True, arguments=STREAM)
            publish(c, "s", bodies(5))
            c.channel().queue_delete("s")
            c.channel().queue_declare("s", durable=True, arguments=STREAM)
            publish(c, "s", bodies(2))
        node.stop(signal.SIGKILL)
        node = start_broker("--data-dir", data_dir)
        with Opened(connect(node)) as c:
            got = consume(c, "s", 2, "first")
            assert [(o, b) for o, b, _h in got] == [(0, b"m0"), (1, b"m1")]
    finally:
        node.stop()
    assert len(os.listdir(os.path.join(data_dir, "streams"))) == 1


# -- other clients -------------------------------------------------------------------------


def test_aio_pika_stream_consumer(broker: Broker, conn: Any, stream: str) -> None:
    publish(conn, stream, bodies(50))

    async def main() -> list[int]:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=10)
            queue = await channel.declare_queue(
                stream, durable=True, arguments={"x-queue-type": "stream"}
            )
            seen: list[int] = []
            async with queue.iterator(arguments={"x-stream-offset": 20}) as messages:
                async for message in messages:
                    await message.ack()
                    seen.append(int(message.headers["x-stream-offset"]))  # type: ignore[arg-type]
                    if len(seen) == 30:
                        break
            return seen

    seen = asyncio.run(asyncio.wait_for(main(), 20))
    assert seen == list(range(20, 50))


def test_a_threaded_publisher_and_a_live_tail(broker: Broker, conn: Any, stream: str) -> None:
    def producer() -> None:
        with Opened(connect(broker)) as other:
            for i in range(5):
                publish(other, stream, bodies(20, i * 20))

    thread = threading.Thread(target=producer)
    thread.start()
    got = consume(conn, stream, 100, "first", prefetch=3, timeout=15)
    thread.join()
    assert [o for o, _b, _h in got] == list(range(100))
    assert [b for _o, b, _h in got] == bodies(100)


@pytest.mark.leveret_only
def test_publishers_outrunning_the_disk_are_blocked_then_released(name: str) -> None:
    """Unsynced stream bytes count in the memory alarm; each sync re-checks it, so a blocked
    publisher is released even when nothing else happens on the broker."""
    if os.environ.get(URL_ENV):
        pytest.skip("needs a broker process the test controls")
    node = start_broker("--memory-high-watermark", "100000")
    events: list[str] = []
    try:
        with Opened(connect(node)) as conn:
            conn.add_on_connection_blocked_callback(lambda *_: events.append("blocked"))
            conn.add_on_connection_unblocked_callback(lambda *_: events.append("unblocked"))
            ch = conn.channel()
            ch.queue_declare(name, durable=True, arguments=STREAM)
            body = b"z" * 50_000
            for _ in range(200):  # 10 MB, unconfirmed
                ch.basic_publish("", name, body)
            ch.confirm_delivery()
            ch.basic_publish("", name, b"last")  # confirmed once all before it is synced
            assert ch.queue_declare(name, passive=True).method.message_count == 201
            pump(conn, lambda: False, 0.5)  # pika runs the blocked callbacks in here
            pump(conn, lambda: bool(events) and events[-1] == "unblocked", 10)
        assert "blocked" in events
        assert events == ["blocked", "unblocked"] * (len(events) // 2)
    finally:
        node.stop()
