"""A 0-9-1 client's declarations on a cluster node go to etcd before declare-ok: two nodes
declaring the same queue or exchange at once agree on one outcome (the second gets what a
redeclaration gets: 406 when not equivalent), the queue's leader is chosen by its
locator, and a transient queue is reachable from every node, as in RabbitMQ."""

from __future__ import annotations

import functools
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest

from tests.cluster import nodes

if TYPE_CHECKING:
    from collections.abc import Iterator

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]


@pytest.fixture(scope="module")
def two(etcd_server: EtcdServer) -> Iterator[tuple[Node, Node]]:
    """Nodes a and b for the module's tests (each uses names of its own)."""
    yield from nodes.two_nodes(etcd_server, f"/leveret-test/shared-{uuid.uuid4().hex[:8]}/")


def connect(node: Node) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", node.broker.port, heartbeat=0)
    )


def _declare_at_once(
    two: tuple[Node, Node], declare: list[tuple[str, dict[str, object]]]
) -> list[str]:
    """Each node's client declares at the same moment (a barrier); each outcome."""
    conns = [connect(node) for node in two]
    channels = [conn.channel() for conn in conns]
    barrier = threading.Barrier(2)
    outcomes = ["", ""]

    def run(index: int) -> None:
        kind, params = declare[index]
        barrier.wait(10)
        try:
            if kind == "queue":
                channels[index].queue_declare(**params)
            else:
                channels[index].exchange_declare(**params)
            outcomes[index] = "ok"
        except pika.exceptions.ChannelClosedByBroker as exc:
            outcomes[index] = str(exc.reply_code)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for conn in conns:
        if conn.is_open:
            conn.close()
    return outcomes


def _queue_of(node: Node, name: str) -> dict[str, Any] | None:
    return next((q for q in node.get("queues/%2F") if q["name"] == name), None)


def _to_spread(a: Node, b: Node) -> int:
    """How many queues the balanced locator must place for both nodes to get one: it
    evens out the leaders first (the module's other tests led some), then alternates."""
    leaders = [q["node"] for q in a.get("queues")]
    return abs(leaders.count(a.name) - leaders.count(b.name)) + 2


def test_concurrent_inequivalent_declarations_agree_on_one_outcome(
    two: tuple[Node, Node],
) -> None:
    for round_ in range(4):
        name = f"race-{round_}-{uuid.uuid4().hex[:6]}"
        outcomes = _declare_at_once(
            two,
            [
                ("queue", {"queue": name, "durable": True, "arguments": {"x-max-length": 10}}),
                ("queue", {"queue": name, "durable": True, "arguments": {"x-max-length": 20}}),
            ],
        )
        assert sorted(outcomes) == ["406", "ok"], (name, outcomes)
        winner = 10 if outcomes[0] == "ok" else 20
        for node in two:
            queue = nodes.eventually(functools.partial(_queue_of, node, name))
            assert queue["arguments"] == {"x-max-length": winner}
        exchange = f"race-x-{round_}-{uuid.uuid4().hex[:6]}"
        outcomes = _declare_at_once(
            two,
            [
                ("exchange", {"exchange": exchange, "exchange_type": "topic"}),
                ("exchange", {"exchange": exchange, "exchange_type": "fanout"}),
            ],
        )
        assert sorted(outcomes) == ["406", "ok"], (exchange, outcomes)


def test_a_transient_queue_declared_on_one_node_is_served_by_the_other(
    two: tuple[Node, Node],
) -> None:
    a, b = two
    name = f"transient-{uuid.uuid4().hex[:6]}"
    conn = connect(a)
    conn.channel().queue_declare(name, durable=False)
    conn.close()

    def published_on_b() -> bool:
        conn = connect(b)
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("", name, b"through b", mandatory=True)
            return True
        except pika.exceptions.UnroutableError:
            return False
        finally:
            if conn.is_open:
                conn.close()

    nodes.eventually(published_on_b)
    conn = connect(a)
    try:
        method, _props, body = conn.channel().basic_get(name, auto_ack=True)
        assert method is not None
        assert body == b"through b"
    finally:
        conn.close()
    queue = next(q for q in b.get("queues/%2F") if q["name"] == name)
    assert queue["node"] == a.name
    assert queue["durable"] is False


def test_the_leader_locator_of_a_client_declaration_places_the_queue(
    two: tuple[Node, Node],
) -> None:
    a, b = two
    names = [f"balanced-{i}-{uuid.uuid4().hex[:6]}" for i in range(_to_spread(a, b))]
    conn = connect(a)
    ch = conn.channel()
    for name in names:
        ch.queue_declare(name, durable=True, arguments={"x-queue-leader-locator": "balanced"})
    # A server-named queue with the default locator is led by the declaring node.
    local = ch.queue_declare("", durable=False, exclusive=False).method.queue
    conn.close()
    deadline = time.monotonic() + 10
    while True:
        leaders = {q["name"]: q["node"] for q in a.get("queues/%2F")}
        if all(n in leaders for n in [*names, local]) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    # Balanced: both nodes get some (client-local, the default, would put all on a).
    placed = [leaders[n] for n in names]
    assert set(placed) == {a.name, b.name}, placed
    assert leaders[local] == a.name


def test_a_queue_deleted_and_declared_again_at_once_stays_in_the_cluster(
    two: tuple[Node, Node],
) -> None:
    a, b = two
    names = [f"again-{i}-{uuid.uuid4().hex[:6]}" for i in range(5)]
    conn = connect(a)
    ch = conn.channel()
    for name in names:
        ch.queue_declare(name, durable=True)
        ch.queue_delete(name)
        ch.queue_declare(name, durable=True)
        ch.basic_publish("", name, b"kept")
    conn.close()
    time.sleep(1.0)  # what a late removal of the first record would have done by now
    for node in (a, b):
        listed = {q["name"] for q in node.get("queues/%2F")}
        assert set(names) <= listed, (node.name, set(names) - listed)
    conn = connect(b)
    try:
        for name in names:
            method, _props, body = conn.channel().basic_get(name, auto_ack=True)
            assert method is not None, name
            assert body == b"kept"
    finally:
        conn.close()


def test_an_amqp10_client_declares_through_the_cluster_too(two: tuple[Node, Node]) -> None:
    """RabbitMQ's AMQP 1.0 client's management requests (HTTP over AMQP) on node a: the
    locator places its queues, and its transient queue and binding are every node's."""
    rmq = pytest.importorskip("rabbitmq_amqp_python_client")
    a, b = two
    env = rmq.Environment(f"amqp://guest:guest@127.0.0.1:{a.broker.port}/")
    conn = env.connection()
    conn.dial()
    management = conn.management()
    tag = uuid.uuid4().hex[:6]
    balanced = [f"v1-balanced-{i}-{tag}" for i in range(_to_spread(a, b))]
    transient = f"v1-transient-{tag}"
    exchange = f"v1-x-{tag}"
    # (This client sends x-queue-leader-locator for quorum queues only: a policy places
    # these classic ones.)
    policy = {
        "pattern": f"^v1-balanced-.*-{tag}$",
        "definition": {"queue-leader-locator": "balanced"},
    }
    assert b.put(f"policies/%2F/balanced-{tag}", policy).status_code in (201, 204)
    nodes.eventually(lambda: any(p["name"] == f"balanced-{tag}" for p in a.get("policies/%2F")))
    try:
        for name in balanced:
            management.declare_queue(rmq.ClassicQueueSpecification(name=name))
        management.declare_queue(rmq.ClassicQueueSpecification(name=transient, is_durable=False))
        management.declare_exchange(rmq.ExchangeSpecification(name=exchange))
        management.bind(
            rmq.ExchangeToQueueBindingSpecification(
                source_exchange=exchange, destination_queue=transient, binding_key="k"
            )
        )
    finally:
        management.close()
        conn.close()
    leaders = {q["name"]: q["node"] for q in b.get("queues/%2F")}
    assert {leaders.get(name) for name in balanced} == {a.name, b.name}, leaders
    assert leaders.get(transient) == a.name
    publish = connect(b)
    try:
        ch = publish.channel()
        ch.confirm_delivery()
        ch.basic_publish(exchange, "k", b"routed on b", mandatory=True)
    finally:
        publish.close()
    get = connect(a)
    try:
        method, _props, body = get.channel().basic_get(transient, auto_ack=True)
        assert method is not None
        assert body == b"routed on b"
    finally:
        get.close()
