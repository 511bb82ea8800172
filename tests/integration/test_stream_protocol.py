"""RabbitMQ's stream protocol against a real broker process, with RabbitMQ's own Python stream
clients (rstream, rbfly): publish with confirms and de-duplication (across a ``kill -9``),
consume from each offset specification, server-side offset tracking, single active
consumer, and the same streams over AMQP 0-9-1 (pika).

With ``LEVERET_TEST_STREAM_PORT`` set (and ``LEVERET_TEST_AMQP_URL`` for the 0-9-1 side) the
tests that apply run against that broker instead (RabbitMQ 3.10.8 here: port 5552); the
``leveret_only`` ones need a process the test starts and kills."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
import pytest
import rbfly.streams as rbs
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    amqp_decoder,
)
from rstream.schema import OffsetSpecification

from tests.integration.conftest import _DATA_ROOT, Broker, start_broker

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from rstream.utils import OnClosedErrorInfo

STREAM_PORT_ENV = "LEVERET_TEST_STREAM_PORT"
FIRST = rbs.Offset.FIRST  # type: ignore[misc]  # rbfly's enum-like class confuses mypy
_STREAM_LISTENING = re.compile(r"listening on rabbitmq-stream://127\.0\.0\.1:(\d+)")
TIMEOUT = 20.0


def stream_port_of(broker: Broker) -> int:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        for line in list(broker.log):
            match = _STREAM_LISTENING.search(line)
            if match:
                return int(match.group(1))
        time.sleep(0.05)
    raise AssertionError("no stream listener:\n" + broker.log_text())


class Target:
    """The broker a module's tests run against: Leveret started here (``broker``, and its
    ``data_dir`` when the test chose one) or an external broker (both None)."""

    def __init__(
        self,
        amqp_port: int,
        stream_port: int,
        broker: Broker | None,
        data_dir: Path | None = None,
    ) -> None:
        self.amqp_port = amqp_port
        self.stream_port = stream_port
        self.broker = broker
        self.data_dir = data_dir


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    external = os.environ.get(STREAM_PORT_ENV)
    if external:
        amqp_port = int(os.environ.get("LEVERET_TEST_AMQP_PORT", "5672"))
        yield Target(amqp_port, int(external), None)
        return
    broker = start_broker("--stream-port", "0")
    try:
        yield Target(broker.port, stream_port_of(broker), broker)
    finally:
        broker.stop()


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def consume(
    port: int,
    stream: str,
    spec: ConsumerOffsetSpecification,
    count: int,
    *,
    wait: float = 5.0,
    name: str | None = None,
) -> list[tuple[int, bytes]]:
    """Up to ``count`` (offset, body) from ``stream`` (rstream, AMQP 1.0 decoded)."""
    got: list[tuple[int, bytes]] = []
    enough = asyncio.Event()
    consumer = Consumer("127.0.0.1", port=port, username="guest", password="guest")
    await consumer.start()
    try:

        async def on_message(message: AMQPMessage, context: MessageContext) -> None:
            got.append((context.offset, bytes(message.body)))
            if len(got) >= count:
                enough.set()

        await consumer.subscribe(
            stream,
            on_message,
            decoder=amqp_decoder,
            offset_specification=spec,
            subscriber_name=name,
        )
        if count:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(enough.wait(), wait)
        else:
            await asyncio.sleep(wait)
    finally:
        await consumer.close()
    return got


async def publish(port: int, stream: str, bodies: list[bytes]) -> None:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        await producer.create_stream(stream, exists_ok=True)
        for body in bodies:
            await producer.send_wait(stream, AMQPMessage(body=body))


def test_rstream_publish_with_confirms_and_consume_from_each_offset_spec(target: Target) -> None:
    stream = unique("offsets")
    bodies = [b"m%d" % i for i in range(20)]
    run(publish(target.stream_port, stream, bodies))
    port = target.stream_port

    first = run(consume(port, stream, ConsumerOffsetSpecification(OffsetType.FIRST), 20))
    assert [b for _o, b in first] == bodies
    offsets = [o for o, _b in first]
    assert offsets == sorted(offsets)

    at = offsets[7]
    from_offset = run(consume(port, stream, ConsumerOffsetSpecification(OffsetType.OFFSET, at), 13))
    # Delivered from the chunk holding that offset; rstream skips what lies before it.
    assert [b for _o, b in from_offset] == bodies[7:]

    last = run(consume(port, stream, ConsumerOffsetSpecification(OffsetType.LAST), 1, wait=2))
    assert last
    assert last[-1] == first[-1]

    nxt = run(consume(port, stream, ConsumerOffsetSpecification(OffsetType.NEXT), 1, wait=1))
    assert nxt == []

    past = int(time.time() * 1000) - 60_000
    by_time = run(
        consume(port, stream, ConsumerOffsetSpecification(OffsetType.TIMESTAMP, past), 20)
    )
    assert [b for _o, b in by_time] == bodies
    future = int(time.time() * 1000) + 60_000
    later = run(
        consume(port, stream, ConsumerOffsetSpecification(OffsetType.TIMESTAMP, future), 1, wait=1)
    )
    assert later == []


def test_a_live_consumer_gets_new_messages(target: Target) -> None:
    stream = unique("live")
    run(publish(target.stream_port, stream, [b"old"]))

    async def scenario() -> list[tuple[int, bytes]]:
        task = asyncio.ensure_future(
            consume(target.stream_port, stream, ConsumerOffsetSpecification(OffsetType.NEXT), 3)
        )
        await asyncio.sleep(0.5)
        await publish(target.stream_port, stream, [b"n1", b"n2", b"n3"])
        return await task

    got = run(scenario())
    assert [b for _o, b in got] == [b"n1", b"n2", b"n3"]


def test_server_side_offset_tracking(target: Target) -> None:
    stream = unique("tracking")
    run(publish(target.stream_port, stream, [b"x%d" % i for i in range(5)]))

    async def scenario() -> tuple[int, int]:
        consumer = Consumer(
            "127.0.0.1", port=target.stream_port, username="guest", password="guest"
        )
        await consumer.start()
        try:
            await consumer.store_offset(stream, "app-1", 3)
            await asyncio.sleep(0.3)  # store offset has no answer
            first = await consumer.query_offset(stream, "app-1")
            await consumer.store_offset(stream, "app-1", 4)
            await asyncio.sleep(0.3)
            return first, await consumer.query_offset(stream, "app-1")
        finally:
            await consumer.close()

    assert run(scenario()) == (3, 4)


def test_rbfly_publishes_with_de_duplication(target: Target) -> None:
    stream = unique("rbfly")
    url = f"rabbitmq-stream://guest:guest@127.0.0.1:{target.stream_port}/"

    async def scenario() -> tuple[int, int, list[bytes]]:
        client = rbs.streams_client(url)
        try:
            await client.create_stream(stream)
            async with client.publisher(stream, name="rb-pub") as publisher:
                first_id = publisher.message_id
                for i in range(5):
                    await publisher.send(b"r%d" % i)
            async with client.publisher(stream, name="rb-pub") as publisher:
                next_id = publisher.message_id
                publisher.message_id = first_id + 3  # republish the last two: dropped
                await publisher.send(b"r3")
                await publisher.send(b"r4")
                await publisher.send(b"r5")
            got: list[bytes] = []

            async def read() -> None:
                async for message in client.subscribe(stream, offset=FIRST):
                    got.append(bytes(message))  # type: ignore[arg-type]
                    if len(got) == 6:
                        return

            await read()
            return first_id, next_id, got
        finally:
            await client.disconnect()

    first_id, next_id, got = run(scenario())
    assert next_id == first_id + 5
    assert got == [b"r%d" % i for i in range(6)]


def test_the_same_stream_over_0_9_1(target: Target) -> None:
    stream = unique("cross")
    run(publish(target.stream_port, stream, [b"from-stream"]))
    params = pika.ConnectionParameters("127.0.0.1", target.amqp_port)
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        ch.queue_declare(stream, passive=True)  # created over the stream protocol
        props = pika.BasicProperties(content_type="text/plain", headers={"h": "v"})
        ch.confirm_delivery()
        ch.basic_publish("", stream, b"from-0-9-1", props)
        ch.basic_qos(prefetch_count=10)
        got: list[tuple[bytes, Any]] = []
        ch.basic_consume(
            stream,
            lambda _c, method, properties, body: got.append((body, properties)),
            arguments={"x-stream-offset": "first"},
        )
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            conn.process_data_events(0.1)
    finally:
        conn.close()
    assert [b for b, _p in got] == [b"from-stream", b"from-0-9-1"]
    assert got[1][1].content_type == "text/plain"
    assert got[1][1].headers["h"] == "v"
    back = run(
        consume(target.stream_port, stream, ConsumerOffsetSpecification(OffsetType.FIRST), 2)
    )
    assert [b for _o, b in back] == [b"from-stream", b"from-0-9-1"]


@pytest.mark.leveret_only
def test_single_active_consumer_fails_over(target: Target) -> None:
    if target.broker is None:
        pytest.skip("single active consumer on streams needs RabbitMQ 3.11")
    stream = unique("sac")
    run(publish(target.stream_port, stream, [b"s%d" % i for i in range(3)]))

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        got: dict[str, list[bytes]] = {"a": [], "b": []}
        taken_over = asyncio.Event()
        consumers = []
        for label in ("a", "b"):
            consumer = Consumer(
                "127.0.0.1", port=target.stream_port, username="guest", password="guest"
            )
            await consumer.start()
            consumers.append(consumer)

            def on_message(label: str) -> Callable[[AMQPMessage, MessageContext], None]:
                def take(message: AMQPMessage, _ctx: MessageContext) -> None:
                    got[label].append(bytes(message.body))
                    if len(got["b"]) == 3:
                        taken_over.set()

                return take

            async def on_update(active: bool, _ctx: Any) -> OffsetSpecification:
                return OffsetSpecification(OffsetType.FIRST, 0)

            await consumer.subscribe(
                stream,
                on_message(label),
                decoder=amqp_decoder,
                properties={"single-active-consumer": "true", "name": "group-1"},
                consumer_update_listener=on_update,
                offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST),
            )
        await asyncio.sleep(1.0)
        await consumers[0].close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(taken_over.wait(), 5)
        await consumers[1].close()
        return got["a"], got["b"]

    a, b = run(scenario())
    assert a == [b"s0", b"s1", b"s2"]
    assert b == [b"s0", b"s1", b"s2"]  # the second took over, from where it asked


@pytest.mark.leveret_only
def test_de_duplication_survives_kill_9(target: Target) -> None:
    if target.broker is None:
        pytest.skip("kills a broker the test starts")
    data_dir = tempfile.mkdtemp(dir=_DATA_ROOT)
    broker = start_broker("--stream-port", "0", "--data-dir", data_dir)
    stream = unique("crash")
    try:
        url = f"rabbitmq-stream://guest:guest@127.0.0.1:{stream_port_of(broker)}/"

        async def before() -> int:
            client = rbs.streams_client(url)
            try:
                await client.create_stream(stream)
                async with client.publisher(stream, name="crash-pub") as publisher:
                    for i in range(50):
                        await publisher.send(b"c%d" % i)  # waits for the confirm
                    return publisher.message_id
            finally:
                await client.disconnect()

        next_id = run(before())
    finally:
        broker.stop(signal.SIGKILL)
    broker = start_broker("--stream-port", "0", "--data-dir", data_dir)
    try:
        url = f"rabbitmq-stream://guest:guest@127.0.0.1:{stream_port_of(broker)}/"

        async def after() -> tuple[int, list[bytes]]:
            client = rbs.streams_client(url)
            try:
                async with client.publisher(stream, name="crash-pub") as publisher:
                    resumed = publisher.message_id
                    publisher.message_id = resumed - 10  # the last ten again: dropped
                    for i in range(40, 55):
                        await publisher.send(b"c%d" % i)
                got: list[bytes] = []
                async for message in client.subscribe(stream, offset=FIRST):
                    got.append(bytes(message))  # type: ignore[arg-type]
                    if len(got) == 55:
                        break
                return resumed, got
            finally:
                await client.disconnect()

        resumed, got = run(after())
    finally:
        broker.stop()
    assert resumed == next_id
    assert got == [b"c%d" % i for i in range(55)]


JS_CLIENT = "rabbitmq-stream-js-client@1.0.0"


@pytest.fixture(scope="module")
def node_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RabbitMQ's Node.js stream client, installed with npm into a temporary directory."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    prefix = tmp_path_factory.mktemp("js")
    result = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix), JS_CLIENT],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"npm could not install {JS_CLIENT}: {result.stderr[-300:]}")
    return prefix / "node_modules"


def test_the_node_js_stream_client(target: Target, node_modules: Path) -> None:
    if target.broker is None:
        # RabbitMQ 3.10.8 closes the connection on exchange-command-versions (0x0d),
        # which this client sends right after open: it cannot talk to 3.10.8 at all.
        pytest.skip("rabbitmq-stream-js-client needs RabbitMQ 3.11 or later")
    stream = unique("js")
    script = Path(__file__).parent / "js" / "stream_client.js"
    result = subprocess.run(
        ["node", str(script), str(target.stream_port), stream],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NODE_PATH": str(node_modules)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {"got": [f"js-{i}" for i in range(10)], "sequence": 10}


async def told_of_deletion(
    port: int, stream: str, delete: Callable[[], None], *, wait: float = 10.0
) -> tuple[list[str], list[str]]:
    """An rstream producer of ``stream`` and an rstream consumer reading it (two
    connections to ``port``), then ``delete()`` run (blocking, in a thread): the streams
    each was told of by a metadata update (rstream's ``on_close_handler``, "Metadata
    Update") within ``wait`` seconds."""
    told: dict[str, list[str]] = {"producer": [], "consumer": []}
    both = asyncio.Event()

    def handler(who: str) -> Callable[[OnClosedErrorInfo], None]:
        def on_close(info: OnClosedErrorInfo) -> None:
            if info.reason == "Metadata Update":
                told[who].extend(info.streams)
                if told["producer"] and told["consumer"]:
                    both.set()

        return on_close

    producer = Producer(
        "127.0.0.1",
        port=port,
        username="guest",
        password="guest",
        on_close_handler=handler("producer"),
    )
    consumer = Consumer(
        "127.0.0.1",
        port=port,
        username="guest",
        password="guest",
        on_close_handler=handler("consumer"),
    )
    read = asyncio.Event()

    async def on_message(message: AMQPMessage, context: MessageContext) -> None:
        read.set()

    await producer.start()
    await consumer.start()
    try:
        await producer.send_wait(stream, AMQPMessage(body=b"before"))
        await consumer.subscribe(
            stream,
            on_message,
            decoder=amqp_decoder,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST),
        )
        await asyncio.wait_for(read.wait(), TIMEOUT)
        await asyncio.to_thread(delete)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(both.wait(), wait)
    finally:
        for client in (producer, consumer):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), 5)
    return told["producer"], told["consumer"]


def test_a_stream_deleted_over_0_9_1_tells_its_stream_clients(target: Target) -> None:
    """RabbitMQ tells a stream's publishers and readers on the stream protocol of its
    deletion (metadata_update, STREAM_NOT_AVAILABLE) whoever deleted it: here 0-9-1's
    queue.delete."""
    stream = unique("gone091")
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", target.amqp_port))
    try:
        ch = conn.channel()
        ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})

        def delete() -> None:
            ch.queue_delete(stream)

        told = run(told_of_deletion(target.stream_port, stream, delete))
    finally:
        conn.close()
    assert told == ([stream], [stream])
