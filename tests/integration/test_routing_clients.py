"""The spreading exchange types and the last-value cache through real clients (pika,
aio-pika) against a Leveret broker.

The consistent-hash and modulus-hash scenarios are the ones recorded against RabbitMQ 3.10.8
with its plugins (``tests/data/hashing/``, ``python -m tools.capture_hashing``), run with
the same client code, and compared message by message.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aio_pika
import pika
import pika.exceptions
import pytest
from tools.capture_hashing import run_scenario

from tests.integration.conftest import start_broker
from tests.integration.pika_support import Opened, connect

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from tests.integration.conftest import Broker

DATA = Path(__file__).resolve().parents[1] / "data" / "hashing" / "rabbitmq-3.10.8.json"
RECORDED = {s["name"]: s for s in json.loads(DATA.read_text())["scenarios"]}


def run(coro: Callable[[], Awaitable[None]], timeout: float = 30.0) -> None:
    async def guarded() -> None:
        async with asyncio.timeout(timeout):
            await coro()

    asyncio.run(guarded(), debug=True)


@pytest.mark.parametrize(
    "scenario",
    [
        "weights 1 2 3 4, q2 unbound",
        "hash-header",
        "hash-property timestamp",
        "modulus hash, bindings in route-table order",
    ],
)
def test_hashing_routes_as_rabbitmq_3_10_8(broker: Broker, name: str, scenario: str) -> None:
    recorded = RECORDED[scenario]
    routed = run_scenario(broker.host, broker.port, recorded, f"{name}.")
    assert routed == recorded["routed"]


def test_consistent_hash_bind_refusals_close_the_channel_with_406(conn: Any, name: str) -> None:
    ch = conn.channel()
    ch.exchange_declare(name, "x-consistent-hash")
    ch.queue_declare(name, exclusive=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(name, name, "heavy")
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        'PRECONDITION_FAILED - The binding key must be an integer: <<"heavy">>'
    )
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(name + ".p", "x-consistent-hash", arguments={"hash-property": "x"})
    assert info.value.reply_text == "PRECONDITION_FAILED - Unsupported property: x"


def test_random_and_modulus_hash_spread_over_bound_queues_with_aio_pika(
    broker: Broker, name: str
) -> None:
    async def main() -> None:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            for kind in ("x-random", "x-modulus-hash"):
                exchange = await channel.declare_exchange(f"{name}.{kind}", kind, auto_delete=True)
                queues = []
                for i in range(3):
                    queue = await channel.declare_queue(f"{name}.{kind}.{i}", exclusive=True)
                    await queue.bind(exchange, routing_key=str(i))
                    queues.append(queue)
                for i in range(600):
                    await exchange.publish(aio_pika.Message(b"m"), routing_key=f"key-{i}")
                counts: list[int] = []
                for queue in queues:
                    declared = await channel.declare_queue(queue.name, passive=True)
                    counts.append(declared.declaration_result.message_count or 0)
                assert sum(counts) == 600
                assert all(count > 120 for count in counts), (kind, counts)

    run(main)


def test_local_random_with_pika(conn: Any, ch: Any, name: str) -> None:
    ch.exchange_declare(name, "x-local-random", auto_delete=True)
    for i in range(2):
        ch.queue_declare(f"{name}.{i}", exclusive=True)
        ch.queue_bind(f"{name}.{i}", name, "")
    ch.confirm_delivery()
    for _ in range(200):
        ch.basic_publish(name, "anything", b"m")
    counts = [ch.queue_declare(f"{name}.{i}", passive=True).method.message_count for i in range(2)]
    assert sum(counts) == 200
    assert min(counts) > 50
    ch.queue_declare(f"{name}.q", durable=True, arguments={"x-queue-type": "quorum"})
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(f"{name}.q", name, "")
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - Queue type rabbit_quorum_queue not valid for this exchange type"
    )
    conn.channel().queue_delete(f"{name}.q")


def test_lvc_hands_the_last_value_per_key_to_a_late_queue_with_aio_pika(
    broker: Broker, name: str
) -> None:
    async def main() -> None:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            exchange = await channel.declare_exchange(name, "x-lvc", auto_delete=True)
            for price in (b"100", b"101", b"102"):
                await exchange.publish(aio_pika.Message(price), routing_key="EURUSD")
            await exchange.publish(aio_pika.Message(b"7"), routing_key="GBPUSD")
            queue = await channel.declare_queue(exclusive=True)
            await queue.bind(exchange, "EURUSD")
            await queue.bind(exchange, "GBPUSD")
            await exchange.publish(aio_pika.Message(b"103"), routing_key="EURUSD")
            got = []
            for _ in range(3):
                message = await queue.get(timeout=5)
                await message.ack()
                got.append(message.body)
            assert got == [b"102", b"7", b"103"]
            assert await queue.get(fail=False) is None

    run(main)


# -- a durable x-lvc exchange across kill -9 ------------------------------------------------


@pytest.fixture
def node(tmp_path: Path) -> Iterator[list[Broker]]:
    brokers = [start_broker("--data-dir", str(tmp_path))]
    try:
        yield brokers
    finally:
        for b in brokers:
            if b.process is not None and b.process.poll() is None:
                b.stop()


@pytest.mark.leveret_only
def test_durable_lvc_values_survive_kill_9_and_are_handed_out_once(
    tmp_path: Path, node: list[Broker]
) -> None:
    with Opened(connect(node[0])) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare("prices", "x-lvc", durable=True)
        ch.queue_declare("before", durable=True)
        ch.queue_bind("before", "prices", "A")
        for i in range(50):
            ch.basic_publish("prices", "A", f"a{i}".encode(), pika.BasicProperties(delivery_mode=2))
            ch.basic_publish("prices", "B", f"b{i}".encode())  # transient: kept all the same
    node[0].stop(signal.SIGKILL)
    node.append(start_broker("--data-dir", str(tmp_path)))
    with Opened(connect(node[1])) as conn:
        ch = conn.channel()
        # The queue bound before the crash got every A, and nothing more at the restart.
        assert ch.queue_declare("before", durable=True).method.message_count == 50
        ch.queue_declare("after", exclusive=True)
        ch.queue_bind("after", "prices", "A")
        ch.queue_bind("after", "prices", "B")
        got = []
        while True:
            _m, _p, body = ch.basic_get("after", auto_ack=True)
            if body is None:
                break
            got.append(body)
        assert got == [b"a49", b"b49"]
        counts = Counter(ch.basic_get("before", auto_ack=True)[2] for _ in range(50))
        assert len(counts) == 50
