"""Super streams against a real broker process, with rstream's ``SuperStreamProducer`` (hash
routing, murmur3, and key routing) and ``SuperStreamConsumer`` (single active consumer
across partitions, fail-over), pika (a super stream declared and published to over
AMQP 0-9-1), Qpid Proton (sent to over AMQP 1.0), the management API and ``leveret ctl
add_super_stream`` / ``delete_super_stream``. (rbfly 0.x has no super stream support.)

With ``LEVERET_TEST_STREAM_PORT`` set (and ``LEVERET_TEST_AMQP_PORT`` for the 0-9-1 side)
the tests that apply run against that broker instead (RabbitMQ 3.10.8 here: 5552 / 5672).
It answers route and partitions with the request's key (no response bit), which rstream
1.1.1 cannot read, and has neither create_super_stream nor single active consumer: only
the 0-9-1 test runs there."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from typing import TYPE_CHECKING, Any

import mmh3
import pika
import pytest
import requests
from proton import Message
from proton.utils import BlockingConnection
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    RouteType,
    SuperStreamConsumer,
    SuperStreamProducer,
    amqp_decoder,
    schema,
)
from rstream.exceptions import StreamAlreadyExists
from rstream.schema import OffsetSpecification

from tests.integration.conftest import start_broker
from tests.integration.ctl_support import ctl, new_data_dir
from tests.integration.mgmt_support import AUTH, start_mgmt_broker
from tests.integration.test_stream_protocol import STREAM_PORT_ENV, Target, stream_port_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator


TIMEOUT = 30.0
STREAM_DOES_NOT_EXIST = 2  # the protocol's response code


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    external = os.environ.get(STREAM_PORT_ENV)
    if external:
        amqp_port = int(os.environ.get("LEVERET_TEST_AMQP_PORT", "5672"))
        yield Target(amqp_port, int(external), None, None)
        return
    data_dir = new_data_dir()
    broker = start_broker("--data-dir", str(data_dir))
    try:
        yield Target(broker.port, stream_port_of(broker), broker, data_dir)
    finally:
        broker.stop()


def leveret_only(target: Target, why: str) -> None:
    if target.broker is None:
        pytest.skip(why)


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def declare_over_0_9_1(target: Target, name: str, keys: list[str]) -> list[str]:
    """A super stream made by hand over AMQP 0-9-1, as RabbitMQ's plugin makes one."""
    streams = [f"{name}-{key}" for key in keys]
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", target.amqp_port))
    try:
        ch = conn.channel()
        ch.exchange_declare(name, "direct", durable=True, arguments={"x-super-stream": True})
        for index, (stream, key) in enumerate(zip(streams, keys, strict=True)):
            ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
            ch.queue_bind(stream, name, key, arguments={"x-stream-partition-order": index})
    finally:
        conn.close()
    return streams


def delete_over_0_9_1(target: Target, name: str, streams: list[str]) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", target.amqp_port))
    try:
        ch = conn.channel()
        for stream in streams:
            ch.queue_delete(stream)
        ch.exchange_delete(name)
    finally:
        conn.close()


async def read_all(port: int, stream: str, count: int, wait: float = 5.0) -> list[bytes]:
    """Up to ``count`` bodies of ``stream`` from the first offset."""
    got: list[bytes] = []
    enough = asyncio.Event()
    consumer = Consumer("127.0.0.1", port=port, username="guest", password="guest")
    await consumer.start()
    try:

        async def on_message(message: AMQPMessage, _context: MessageContext) -> None:
            got.append(bytes(message.body))
            if len(got) >= count:
                enough.set()

        await consumer.subscribe(
            stream,
            on_message,
            decoder=amqp_decoder,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST),
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(enough.wait(), wait if count else 0.5)
    finally:
        await consumer.close()
    return got


def hash_partition(key: str, count: int) -> int:
    """rstream's (and the Java client's) hash routing: murmur3 of the key's UTF-16."""
    digest = mmh3.hash_bytes(bytes(key, "UTF-16"), 104729)
    return int.from_bytes(digest, "little", signed=False) % count


async def key_of(message: AMQPMessage) -> str:
    return str(message.application_properties["key"])


async def superstream_send(
    port: int, name: str, routing: RouteType, messages: list[tuple[str, bytes]]
) -> None:
    producer = SuperStreamProducer(
        "127.0.0.1",
        port=port,
        super_stream=name,
        routing=routing,
        routing_extractor=key_of,
        username="guest",
        password="guest",
    )
    await producer.start()
    try:
        for key, body in messages:
            message = AMQPMessage(body=body, application_properties={"key": key})
            await producer.send(message)
    finally:
        await producer.close()  # sends what rstream's batching still holds


OLD_RESPONSES = (
    "RabbitMQ 3.10.8 answers route and partitions with the request's key (0x0018/0x0019, "
    "no response bit): rstream 1.1.1 cannot read them"
)


def test_0_9_1_publishes_to_a_super_stream_land_in_its_partitions(target: Target) -> None:
    name = unique("via091")
    streams = declare_over_0_9_1(target, name, ["0", "1", "2"])
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", target.amqp_port))
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            for key in ("1", "2", "1", "nowhere"):
                ch.basic_publish(name, key, b"to-" + key.encode())
        finally:
            conn.close()
        expected = [[], [b"to-1", b"to-1"], [b"to-2"]]
        got = [
            run(read_all(target.stream_port, s, len(e)))
            for s, e in zip(streams, expected, strict=True)
        ]
        assert got == expected
    finally:
        delete_over_0_9_1(target, name, streams)


def test_hash_and_key_routing_to_a_super_stream_made_over_0_9_1(target: Target) -> None:
    leveret_only(target, OLD_RESPONSES)
    name = unique("invoices")
    keys = ["0", "1", "2"]
    streams = declare_over_0_9_1(target, name, keys)
    port = target.stream_port
    try:
        # Hash routing: the client picks partitions[murmur3(key) % n] from the partitions.
        hashed = [(f"customer-{i}", b"h%d" % i) for i in range(12)]
        run(superstream_send(port, name, RouteType.Hash, hashed))
        expected: dict[str, list[bytes]] = {s: [] for s in streams}
        for key, body in hashed:
            expected[streams[hash_partition(key, 3)]].append(body)
        assert len([s for s in streams if expected[s]]) > 1  # the keys spread
        # Key routing: the server's route answer. rstream 1.1.1 keeps the first answer for
        # later keys too, so one producer per key.
        for key in keys:
            run(superstream_send(port, name, RouteType.Key, [(key, b"k" + key.encode())]))
            expected[f"{name}-{key}"].append(b"k" + key.encode())
        # Over 0-9-1, publishing to the exchange with a partition's key.
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", target.amqp_port))
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish(name, "1", b"from-0-9-1")
        finally:
            conn.close()
        expected[f"{name}-1"].append(b"from-0-9-1")
        for stream in streams:
            got = run(read_all(port, stream, len(expected[stream])))
            assert got == expected[stream], stream
    finally:
        delete_over_0_9_1(target, name, streams)


def test_route_and_partitions_answers(target: Target) -> None:
    leveret_only(target, OLD_RESPONSES)
    name = unique("orders")
    streams = declare_over_0_9_1(target, name, ["amer", "emea", "apac"])

    async def scenario() -> tuple[Any, ...]:
        producer = Producer(
            "127.0.0.1", port=target.stream_port, username="guest", password="guest"
        )
        await producer.start()
        try:
            client = await producer.default_client
            answers = (
                await client.partitions(name),
                await client.route("emea", name),
                await client.route("nowhere", name),
            )
            missing = [
                await client.sync_request(request, resp_schema=response, raise_exception=False)
                for request, response in (
                    (
                        schema.SuperStreamPartitions(1_000_001, super_stream=unique("none")),
                        schema.SuperStreamPartitionsResponse,
                    ),
                    (
                        schema.SuperStreamRoute(
                            1_000_002, routing_key="0", super_stream=name + "x"
                        ),
                        schema.SuperStreamRouteResponse,
                    ),
                )
            ]
            codes = [
                (getattr(m, "response_code", None), getattr(m, "streams", None)) for m in missing
            ]
            return (*answers, codes)
        finally:
            await producer.close()

    try:
        partitions, emea, nowhere, missing = run(scenario())
        assert partitions == streams
        assert emea == [f"{name}-emea"]
        assert nowhere == []
        assert missing == [(STREAM_DOES_NOT_EXIST, []), (STREAM_DOES_NOT_EXIST, [])]
    finally:
        delete_over_0_9_1(target, name, streams)


def test_create_and_delete_super_stream_over_the_stream_protocol(target: Target) -> None:
    leveret_only(target, "create/delete_super_stream need RabbitMQ 3.13")
    name, regions = unique("created"), unique("regions")

    async def scenario() -> tuple[Any, ...]:
        consumer = SuperStreamConsumer(
            "127.0.0.1",
            port=target.stream_port,
            super_stream=name,
            username="guest",
            password="guest",
        )
        await consumer.create_super_stream(name, n_partitions=3, arguments={"max-age": "1D"})
        await consumer.create_super_stream(regions, binding_keys=["eu", "us"])
        again = None
        try:
            await consumer.create_super_stream(name, n_partitions=3)
        except StreamAlreadyExists:
            again = "already exists"
        producer = Producer(
            "127.0.0.1", port=target.stream_port, username="guest", password="guest"
        )
        await producer.start()
        try:
            client = await producer.default_client
            made = (await client.partitions(name), await client.partitions(regions))
            await consumer.delete_super_stream(name)
            gone = await client.partitions(name)  # rstream gives [] for an error
            await consumer.delete_super_stream(regions)
        finally:
            await producer.close()
            await consumer.close()
        return made, again, gone

    made, again, gone = run(scenario())
    assert made == ([f"{name}-0", f"{name}-1", f"{name}-2"], [f"{regions}-eu", f"{regions}-us"])
    assert again == "already exists"
    assert gone == []
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", target.amqp_port))
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            conn.channel().exchange_declare(name, passive=True)
        assert refused.value.reply_code == 404
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            conn.channel().queue_declare(f"{name}-0", passive=True)
        assert refused.value.reply_code == 404
    finally:
        conn.close()


async def until(condition: Callable[[], bool], changed: asyncio.Event) -> None:
    """Wait (5 s at most) until ``condition`` holds, checked whenever ``changed`` is set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(5):
            while not condition():
                await changed.wait()
                changed.clear()


def test_single_active_consumer_across_partitions_fails_over(target: Target) -> None:
    leveret_only(target, "single active consumer on streams needs RabbitMQ 3.11")
    name = unique("sac")
    streams = declare_over_0_9_1(target, name, ["0", "1", "2"])
    port = target.stream_port

    async def scenario() -> tuple[dict[str, set[bytes]], dict[str, set[bytes]]]:
        # What each consumer received, before and after a's close.
        seen: dict[str, set[bytes]] = {"a": set(), "b": set()}
        after: dict[str, set[bytes]] = {"a": set(), "b": set()}
        closed, changed = asyncio.Event(), asyncio.Event()
        consumers = []
        producer = Producer("127.0.0.1", port=port, username="guest", password="guest")
        await producer.start()
        for label in ("a", "b"):
            consumer = SuperStreamConsumer(
                "127.0.0.1", port=port, super_stream=name, username="guest", password="guest"
            )
            await consumer.start()
            consumers.append(consumer)

            def take(label: str) -> Any:
                async def on_message(message: AMQPMessage, context: MessageContext) -> None:
                    (after if closed.is_set() else seen)[label].add(bytes(message.body))
                    changed.set()

                return on_message

            async def on_update(active: bool, _context: Any) -> OffsetSpecification:
                return OffsetSpecification(OffsetType.FIRST, 0)

            await consumer.subscribe(
                take(label),
                decoder=amqp_decoder,
                properties={"single-active-consumer": "true", "name": "app", "super-stream": name},
                consumer_update_listener=on_update,
            )
        await asyncio.sleep(0.5)  # b's turn on partition 1 comes after a has stepped down
        try:
            for key in ("0", "1", "2"):
                await producer.send_wait(f"{name}-{key}", AMQPMessage(body=b"x" + key.encode()))
            await until(lambda: len(seen["a"]) + len(seen["b"]) >= 3, changed)
            # From here on deliveries count as after a's close (b's re-reads come during it).
            closed.set()
            await consumers[0].close()
            for key in ("0", "1", "2"):
                await producer.send_wait(f"{name}-{key}", AMQPMessage(body=b"y" + key.encode()))
            await until(lambda: {b"y0", b"y1", b"y2"} <= after["b"], changed)
        finally:
            await consumers[1].close()
            await producer.close()
        return seen, after

    try:
        seen, after = run(scenario())
    finally:
        delete_over_0_9_1(target, name, streams)
    # Two consumers: partition i goes to the member i mod 2, a on 0 and 2, b on 1.
    assert seen == {"a": {b"x0", b"x2"}, "b": {b"x1"}}
    # a gone: b is active on every partition (and re-reads 0 and 2 from where it asks).
    assert after == {"a": set(), "b": {b"x0", b"x2", b"y0", b"y1", b"y2"}}


def test_ctl_add_and_delete_super_stream(target: Target) -> None:
    leveret_only(target, "runs leveret ctl against the broker the test starts")
    assert target.data_dir is not None
    name = unique("ctl")
    done = ctl(target.data_dir, "add_super_stream", name, "--partitions", "2", "--max-age", "1h")
    assert done.returncode == 0, done.stderr
    keyed = ctl(target.data_dir, "add_super_stream", name + "-k", "--binding-keys", "a, b")
    assert keyed.returncode == 0, keyed.stderr
    again = ctl(target.data_dir, "add_super_stream", name, "--partitions", "2")
    assert again.returncode == 70
    assert "already" in again.stderr
    both = ctl(target.data_dir, "add_super_stream", "x", "--partitions", "2", "--binding-keys", "a")
    assert both.returncode == 64
    exchanges = ctl(target.data_dir, "-q", "list_exchanges", "name", "arguments").stdout
    assert f'{name}\t{{"x-super-stream":true}}' in exchanges.replace(" ", "")
    bindings = ctl(target.data_dir, "-q", "list_bindings").stdout
    assert f"{name}-k-b" in bindings
    queues = ctl(target.data_dir, "-q", "list_queues", "name", "arguments").stdout
    assert f"{name}-1" in queues
    assert "1h" in queues

    async def partitions() -> list[str]:
        producer = Producer(
            "127.0.0.1", port=target.stream_port, username="guest", password="guest"
        )
        await producer.start()
        try:
            return list(await (await producer.default_client).partitions(name + "-k"))
        finally:
            await producer.close()

    assert run(partitions()) == [f"{name}-k-a", f"{name}-k-b"]
    for super_stream in (name, name + "-k"):
        deleted = ctl(target.data_dir, "delete_super_stream", super_stream)
        assert deleted.returncode == 0, deleted.stderr
    queues = ctl(target.data_dir, "-q", "list_queues", "name").stdout
    assert name not in queues
    missing = ctl(target.data_dir, "delete_super_stream", name)
    assert missing.returncode == 65


@pytest.mark.leveret_only
def test_a_super_stream_survives_a_restart() -> None:
    data_dir = new_data_dir()
    broker = start_broker("--data-dir", str(data_dir))
    try:
        done = ctl(data_dir, "add_super_stream", "kept", "--binding-keys", "b,a")
        assert done.returncode == 0, done.stderr
    finally:
        broker.stop()
    mgmt = start_mgmt_broker("--data-dir", str(data_dir))
    broker = mgmt.broker
    try:
        port = stream_port_of(broker)

        async def answers() -> tuple[list[str], list[str]]:
            producer = Producer("127.0.0.1", port=port, username="guest", password="guest")
            await producer.start()
            try:
                client = await producer.default_client
                return await client.partitions("kept"), await client.route("a", "kept")
            finally:
                await producer.close()

        # The order is the binding argument's, not the names'.
        assert run(answers()) == (["kept-b", "kept-a"], ["kept-a"])
        exchanges = ctl(data_dir, "-q", "list_exchanges", "name", "arguments").stdout
        assert 'kept\t{"x-super-stream":true}' in exchanges.replace(" ", "")
        # The management API shows them as RabbitMQ's does.
        exchange = requests.get(mgmt.api("exchanges/%2F/kept"), auth=AUTH, timeout=10).json()
        assert (exchange["type"], exchange["arguments"]) == ("direct", {"x-super-stream": True})
        bindings = requests.get(
            mgmt.api("exchanges/%2F/kept/bindings/source"), auth=AUTH, timeout=10
        ).json()
        assert sorted((b["destination"], b["routing_key"], b["arguments"]) for b in bindings) == [
            ("kept-a", "a", {"x-stream-partition-order": 1}),
            ("kept-b", "b", {"x-stream-partition-order": 0}),
        ]
    finally:
        broker.stop()


def test_amqp_1_0_sends_to_a_super_stream_land_in_its_partitions(target: Target) -> None:
    leveret_only(target, "RabbitMQ 3.10's 1.0 plugin has no /exchanges/ (v2) addresses")
    name = unique("via10")
    streams = declare_over_0_9_1(target, name, ["0", "1"])
    connection = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{target.amqp_port}", timeout=10)
    try:
        connection.create_sender(f"/exchanges/{name}/1").send(
            Message(body=b"over 1.0", inferred=True)
        )  # a data section
    finally:
        connection.close()
    try:
        expected = [[], [b"over 1.0"]]
        got = [
            run(read_all(target.stream_port, s, len(e)))
            for s, e in zip(streams, expected, strict=True)
        ]
        assert got == expected
    finally:
        delete_over_0_9_1(target, name, streams)
