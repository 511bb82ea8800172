"""Message groups and last-value queues through real clients against a Leveret broker:
pika and aio-pika declaring them with Qpid's arguments over 0-9-1, Qpid Proton grouping by
AMQP 1.0's own ``group-id``, a durable grouped queue across ``kill -9``, the management
API's view of groups and owners, and Qpid's own 0-10 tests of groups and last values
(qpid.messaging under Python 2.7)."""

from __future__ import annotations

import asyncio
import random
import re
import signal
import subprocess
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import aio_pika
import pika
import pytest
import requests
from proton import Message
from proton.utils import BlockingConnection

from tests.integration.conftest import start_broker
from tests.integration.mgmt_support import _URL, AUTH, _wait_for
from tests.integration.pika_support import Opened, connect, pump

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator
    from pathlib import Path

    from tools.qpid import Py2

    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.leveret_only, pytest.mark.timeout(120)]

GROUPED: dict[str, Any] = {"qpid.group_header_key": "JMSXGroupID", "qpid.shared_msg_group": 1}


def run(coro: Callable[[], Awaitable[None]], timeout: float = 60.0) -> None:
    async def guarded() -> None:
        async with asyncio.timeout(timeout):
            await coro()

    asyncio.run(guarded(), debug=True)


def test_pika_consumers_never_share_a_group_and_keep_its_order(conn: Any, name: str) -> None:
    """Three consumers with prefetch 4 on one grouped queue, acking in random order: a group
    is only ever in one consumer's hands, and each group is processed in publish order."""
    setup = conn.channel()
    setup.queue_declare(name, auto_delete=True, arguments=GROUPED)
    channels = [conn.channel() for _ in range(3)]
    holding: dict[str, tuple[int, set[int]]] = {}  # group -> (consumer, tags held)
    processed: dict[str, list[int]] = defaultdict(list)
    unacked: list[tuple[int, int, str]] = []
    rng = random.Random(29)

    def on_message(index: int) -> Callable[[Any, Any, Any, bytes], None]:
        def handle(ch: Any, method: Any, props: Any, body: bytes) -> None:
            group = props.headers["JMSXGroupID"]
            owner, tags = holding.get(group, (index, set()))
            assert owner == index, f"group {group} went to {index} while {owner} holds it"
            tags.add(method.delivery_tag)
            holding[group] = (index, tags)
            processed[group].append(int(body))
            unacked.append((index, method.delivery_tag, group))

        return handle

    for i, ch in enumerate(channels):
        ch.basic_qos(prefetch_count=4)
        ch.basic_consume(name, on_message(i))
    groups = [f"order-{g}" for g in range(10)]
    total = 300
    for n in range(total):
        group = groups[rng.randrange(len(groups))]
        props = pika.BasicProperties(headers={"JMSXGroupID": group})
        setup.basic_publish("", name, str(n).encode(), props)
    done = 0
    while done < total:
        pump(conn, lambda: bool(unacked), 10)
        assert unacked, f"stuck after {done} messages"
        index, tag, group = unacked.pop(rng.randrange(len(unacked)))
        channels[index].basic_ack(tag)
        _owner, tags = holding[group]
        tags.discard(tag)
        if not tags:
            del holding[group]
        done += 1
    for group, bodies in processed.items():
        assert bodies == sorted(bodies), f"group {group} out of order: {bodies}"
    assert sum(len(b) for b in processed.values()) == total


def test_aio_pika_a_failed_consumer_s_group_goes_on_in_order(broker: Broker, name: str) -> None:
    async def main() -> None:
        first = await aio_pika.connect(broker.url)
        second = await aio_pika.connect(broker.url)
        async with second:
            channel = await first.channel()
            await channel.set_qos(prefetch_count=3)
            queue = await channel.declare_queue(name, arguments=GROUPED)
            for n in range(6):
                outgoing = aio_pika.Message(str(n).encode(), headers={"JMSXGroupID": "g1"})
                await channel.default_exchange.publish(outgoing, routing_key=name)
            held = []
            async with queue.iterator() as messages:
                async for message in messages:
                    held.append(int(message.body))
                    if len(held) == 3:
                        break
            assert held == [0, 1, 2]
            other = await second.channel()
            other_queue = await other.declare_queue(name, passive=True)
            # The group is the first consumer's while it holds 0-2: nothing for the other.
            assert await other_queue.get(fail=False) is None
            await first.close()  # the consumer fails: 0-2 come back, in front of 3-5
            got = []
            for _ in range(6):
                incoming = await other_queue.get(timeout=5)
                got.append((int(incoming.body), incoming.redelivered))
                await incoming.ack()
            assert got == [(0, True), (1, True), (2, True), (3, False), (4, False), (5, False)]
            await other_queue.delete()

    run(main)


def test_pika_last_value_queue(conn: Any, ch: Any, name: str) -> None:
    ch.queue_declare(name, auto_delete=True, arguments={"qpid.last_value_queue_key": "symbol"})
    for symbol, price in [("EUR", 1), ("GBP", 5), ("EUR", 2), ("EUR", 3), ("USD", 9)]:
        props = pika.BasicProperties(headers={"symbol": symbol})
        ch.basic_publish("", name, f"{symbol}={price}".encode(), props)
    ch.basic_publish("", name, b"no key")
    got = []
    while True:
        _method, _props, body = ch.basic_get(name, auto_ack=True)
        if body is None:
            break
        got.append(body)
    assert got == [b"GBP=5", b"EUR=3", b"USD=9", b"no key"]


def test_proton_groups_by_the_message_s_group_id(broker: Broker, name: str) -> None:
    """Two 1.0 receivers with credit and nothing settled: each group sticks to the receiver
    that took its first message (without groups the two would alternate)."""
    with Opened(connect(broker)) as conn:
        conn.channel().queue_declare(name, arguments=GROUPED)
    url = f"amqp://guest:guest@{broker.host}:{broker.port}"
    c = BlockingConnection(url, timeout=10)
    try:
        receivers = [
            c.create_receiver(f"/queues/{name}", credit=10, name=f"r{i}") for i in range(2)
        ]
        sender = c.create_sender(f"/queues/{name}")
        for n, group in enumerate(["a", "a", "b", "a", "b", "b"]):
            sender.send(Message(body=str(n), group_id=group))
        got = []
        for receiver in receivers:
            messages = [receiver.receive(timeout=5) for _ in range(3)]
            got.append([(m.group_id, m.body) for m in messages])
        assert sorted(got) == [
            [("a", "0"), ("a", "1"), ("a", "3")],
            [("b", "2"), ("b", "4"), ("b", "5")],
        ]
        for receiver in receivers:
            receiver.accept()
    finally:
        c.close()


def test_management_api_shows_groups_and_their_owners(broker: Broker, conn: Any, name: str) -> None:
    url = _wait_for(broker, _URL)
    ch = conn.channel()
    ch.queue_declare(name, auto_delete=True, arguments=GROUPED)
    for n, group in enumerate(["A", "A", "B"]):
        ch.basic_publish(
            "", name, str(n).encode(), pika.BasicProperties(headers={"JMSXGroupID": group})
        )
    consumer = conn.channel()
    consumer.basic_qos(prefetch_count=1)
    consumer.basic_consume(name, lambda *a: None, consumer_tag="worker-1")
    pump(conn, lambda: False, 0.3)
    detail = requests.get(f"{url}/api/queues/%2F/{name}", auth=AUTH, timeout=10).json()
    groups = detail["message_groups"]
    assert groups["group_header_key"] == "JMSXGroupID"
    state = {g["group_id"]: (g["msg_count"], g["consumer"]) for g in groups["group_state"]}
    assert state == {"A": (2, "worker-1"), "B": (1, "")}


# -- a durable grouped queue across kill -9 ---------------------------------------------------


@pytest.fixture
def node(tmp_path: Path) -> Iterator[list[Broker]]:
    brokers = [start_broker("--data-dir", str(tmp_path))]
    try:
        yield brokers
    finally:
        for b in brokers:
            if b.process is not None and b.process.poll() is None:
                b.stop()


def test_a_durable_grouped_queue_keeps_each_group_s_order_across_kill_9(
    tmp_path: Path, node: list[Broker]
) -> None:
    with Opened(connect(node[0])) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("grouped", durable=True, arguments=GROUPED)
        for n in range(40):
            props = pika.BasicProperties(delivery_mode=2, headers={"JMSXGroupID": f"g{n % 4}"})
            ch.basic_publish("", "grouped", str(n).encode(), props)
        worker = conn.channel()
        worker.basic_qos(prefetch_count=6)
        held: list[int] = []
        worker.basic_consume("grouped", lambda c, m, p, body: held.append(int(body)))
        pump(conn, lambda: len(held) == 6, 5)
        acked = held[:2]
        for tag in (1, 2):
            worker.basic_ack(tag)
        pump(conn, lambda: len(held) == 8, 5)
        conn.channel().queue_declare("grouped", passive=True)  # the acks were read
    node[0].stop(signal.SIGKILL)
    node.append(start_broker("--data-dir", str(tmp_path)))
    with Opened(connect(node[1])) as conn:
        ch = conn.channel()
        got: dict[str, list[int]] = defaultdict(list)
        while True:
            _m, props, body = ch.basic_get("grouped", auto_ack=True)
            if body is None:
                break
            got[props.headers["JMSXGroupID"]].append(int(body))
    for group, bodies in got.items():
        # Every message not acked comes back, each group in publish order (an ack the
        # store had not written when the broker was killed brings its message back too).
        expected = [n for n in range(40) if f"g{n % 4}" == group]
        assert bodies == [n for n in expected if n in bodies], group
        assert set(expected) - set(acked) <= set(bodies), group
    assert sum(len(b) for b in got.values()) >= 38


# -- Qpid's own tests over 0-10 (qpid.messaging) ----------------------------------------------

QPID_TESTS = (
    "qpid_tests.broker_0_10.msg_groups.MultiConsumerMsgGroupTests.test_simple",
    "qpid_tests.broker_0_10.msg_groups.MultiConsumerMsgGroupTests.test_simple_browse",
    "qpid_tests.broker_0_10.msg_groups.MultiConsumerMsgGroupTests.test_release",
    "qpid_tests.broker_0_10.msg_groups.MultiConsumerMsgGroupTests.test_reject",
    "qpid_tests.broker_0_10.msg_groups.MultiConsumerMsgGroupTests.test_close",
    "qpid_tests.broker_0_10.msg_groups.MultiConsumerMsgGroupTests.test_transaction",
    "qpid_tests.broker_0_10.msg_groups.MultiConsumerMsgGroupTests.test_send_transaction",
    "qpid_tests.broker_0_10.msg_groups.MultiConsumerMsgGroupTests.test_transaction_order",
    "qpid_tests.broker_0_10.lvq.*",
    "qpid_tests.broker_0_10.priority.PriorityTests.test_fairshare_*",
    "qpid_tests.broker_0_10.priority.PriorityTests.test_ring_queue_3",
    "qpid_tests.broker_0_10.new_api.SequenceNumberTests.*",
)
_RESULT = re.compile(r"^(qpid_tests\.broker_0_10\.\S+) \.+ (pass|fail|skip)$")


@pytest.mark.interop
def test_qpid_s_own_group_and_last_value_tests_pass(py2: Py2, broker: Broker) -> None:
    runner = str(py2.path / "bin" / "qpid-python-test")
    url = f"amqp://guest/guest@{broker.host}:{broker.port}"
    done = subprocess.run(
        [py2.python, runner, "-b", url, "-m", "qpid_tests.broker_0_10", *QPID_TESTS],
        capture_output=True,
        text=True,
        env={**py2.env(), "PYTHONUNBUFFERED": "1"},
        timeout=100,
        check=False,
    )
    joined = re.sub(r" \\\n +", "", done.stdout)
    results: dict[str, str] = {}
    for line in joined.splitlines():
        match = _RESULT.match(line.strip())
        if match is not None:
            results[match.group(1)] = match.group(2)
    assert len(results) >= 20, done.stdout[-3000:]
    failed = [test for test, outcome in results.items() if outcome != "pass"]
    assert not failed, done.stdout[-3000:]
