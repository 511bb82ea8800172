"""A 0-9-1 client's declarations on a cluster node go to etcd before declare-ok: two nodes
declaring the same queue or exchange at once agree on one outcome (the second gets what a
redeclaration gets: 406 when not equivalent), the queue's leader is chosen by its
locator, and a transient queue is reachable from every node, as in RabbitMQ."""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest
import requests

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


def test_an_exclusive_queue_is_known_to_every_node_and_goes_with_its_connection(
    two: tuple[Node, Node],
) -> None:
    """RabbitMQ's behaviour: listed by every node, used by its own connection only (405
    for any other, on any node), gone with its connection, and an auto-delete exchange
    bound to exclusive queues on both nodes goes with the last of their bindings."""
    a, b = two
    exchange = f"ad-{uuid.uuid4().hex[:6]}"
    owner_a, owner_b = connect(a), connect(b)
    ch_a, ch_b = owner_a.channel(), owner_b.channel()
    ch_a.exchange_declare(exchange, "fanout", auto_delete=True)
    mine = ch_a.queue_declare("", exclusive=True).method.queue
    theirs = ch_b.queue_declare("", exclusive=True).method.queue
    ch_a.queue_bind(mine, exchange)
    ch_b.queue_bind(theirs, exchange)
    listed = nodes.eventually(lambda: _queue_of(b, mine))
    assert listed["node"] == a.name
    assert listed["exclusive"] is True
    other = connect(b)
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            other.channel().basic_consume(mine, lambda *_: None)
        assert refused.value.reply_code == 405
    finally:
        if other.is_open:
            other.close()
    # Published on b, routed through the binding in etcd to a's exclusive queue.
    ch_b.basic_publish(exchange, "", b"to both")
    assert nodes.eventually(lambda: ch_a.basic_get(mine, auto_ack=True)[2]) == b"to both"
    owner_a.close()
    nodes.eventually(lambda: _queue_of(b, mine) is None)
    assert any(x["name"] == exchange for x in b.get("exchanges/%2F"))  # b's binding holds it
    owner_b.close()
    nodes.eventually(lambda: not any(x["name"] == exchange for x in a.get("exchanges/%2F")))
    assert _queue_of(a, theirs) is None


def test_a_delete_through_another_node_answers_the_leader_count(
    two: tuple[Node, Node],
) -> None:
    a, b = two
    name = f"count-{uuid.uuid4().hex[:6]}"
    conn = connect(a)
    ch = conn.channel()
    ch.queue_declare(name, durable=True)
    ch.confirm_delivery()
    for _ in range(3):
        ch.basic_publish("", name, b"m")
    conn.close()
    conn = connect(b)
    try:
        nodes.eventually(lambda: _queue_of(b, name))
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.queue_delete(name, if_empty=True)
        assert refused.value.reply_code == 406
        ch = conn.channel()
        assert ch.queue_delete(name).method.message_count == 3
    finally:
        conn.close()
    nodes.eventually(lambda: _queue_of(a, name) is None)


def test_the_exclusive_queues_of_a_killed_node_go_once_its_lease_expires(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    a, _b = two
    c = nodes.start_node(etcd_server, a.prefix, "c@test")
    conn = connect(c)
    try:
        name = conn.channel().queue_declare("", exclusive=True).method.queue
        nodes.eventually(lambda: _queue_of(a, name))
        c.broker.stop(signal.SIGKILL)
        # Its connections died with it: the others remove its exclusive queue's record
        # once its lease (2 s here) has expired.
        nodes.eventually(lambda: _queue_of(a, name) is None, timeout=nodes.LEASE_TTL * 3 + 5)
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            conn.close()  # its socket, whose peer was killed
        if c.broker.process is not None and c.broker.process.poll() is None:
            c.broker.stop()


def test_a_bind_the_queue_type_refuses_is_refused_by_the_cluster(
    two: tuple[Node, Node],
) -> None:
    """The store checks a bind on a scratch copy of the queue of its real type: a quorum
    queue bound to an ``x-local-random`` exchange gets the single node's 406 (the HTTP
    API's 400), and etcd gets no binding that every node's applier would then refuse."""
    a, b = two
    name = f"typed-{uuid.uuid4().hex[:6]}"
    queue = f"{name}.q"
    refusal = "Queue type rabbit_quorum_queue not valid for this exchange type"
    conn = connect(a)
    try:
        ch = conn.channel()
        ch.exchange_declare(name, "x-local-random")
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
    finally:
        conn.close()
    nodes.eventually(lambda: _queue_of(b, queue))
    response = requests.post(
        b.api(f"bindings/%2F/e/{name}/q/{queue}"), json={}, auth=nodes.AUTH, timeout=10
    )
    assert response.status_code == 400, response.text
    assert response.json()["reason"] == refusal
    conn = connect(b)
    try:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.queue_bind(queue, name, "")
        assert refused.value.reply_code == 406
        assert refused.value.reply_text == f"PRECONDITION_FAILED - {refusal}"
        ch = conn.channel()
        ch.exchange_delete(name, if_unused=True)  # 406 "in use" if etcd has the binding
        ch.queue_delete(queue)
    finally:
        conn.close()
