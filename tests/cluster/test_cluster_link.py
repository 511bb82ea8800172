"""The inter-node link through real clients: three ``leveret serve`` nodes on one etcd,
each queue led by one node and used through the others (pika publishing with confirms on
one node, consuming and getting on another), a publish flood that leaves the consumers across
the link their share (the publishes' window), and a queue whose node is down answering as
RabbitMQ 3.10 answers for a classic queue on a down node, then back with its node."""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pika
import pika.exceptions
import pytest
from proton import Message as ProtonMessage
from proton.utils import BlockingConnection as ProtonConnection
from tools.qpid import ensure

from tests.cluster import down_node, nodes
from tests.cluster.nodes import connect, visible
from tests.integration.ctl_support import ok

if TYPE_CHECKING:
    from collections.abc import Iterator

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

# In both passes: the link's both sides and its codec are compiled (a type the compiled
# build checks and uvloop does not give shows only here).
pytestmark = pytest.mark.leveret_only

# qpid.messaging (Python 2.7) in a subprocess, as the conversion tests run it.
QPID_CLIENT = Path(__file__).parents[1] / "integration" / "qpid_messaging_client.py2"


@pytest.fixture(scope="module")
def three_nodes(etcd_server: EtcdServer) -> Iterator[list[Node]]:
    """Nodes a, b and c on the session's etcd, for the module (a test that stops one
    starts it again)."""
    yield from nodes.three_nodes(etcd_server, "link")


def declare_on(node: Node, queue: str, *others: Node) -> None:
    """A durable queue declared through ``node`` (so led by it), served by ``others``."""
    conn = connect(node)
    conn.channel().queue_declare(queue, durable=True)
    conn.close()
    for other in others:
        nodes.eventually(functools.partial(visible, other, queue))


def publish_confirmed(node: Node, queue: str, bodies: list[bytes]) -> None:
    conn = connect(node)
    ch = conn.channel()
    ch.confirm_delivery()
    for body in bodies:
        # With confirms, pika's BlockingChannel raises if the broker nacks.
        ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2), mandatory=True)
    conn.close()


def consume(node: Node, queue: str, count: int, *, prefetch: int = 10) -> list[bytes]:
    conn = connect(node)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    got: list[bytes] = []
    deadline = time.monotonic() + 10
    for method, _props, body in ch.consume(queue, inactivity_timeout=1):
        if method is None:
            if time.monotonic() > deadline:
                break
            continue
        got.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    ch.cancel()
    conn.close()
    return got


def test_publish_on_a_to_a_queue_led_by_b_consumed_on_c(three_nodes: list[Node]) -> None:
    a, b, c = three_nodes
    declare_on(b, "q.link", a, c)
    bodies = [b"m%d" % i for i in range(300)]
    publish_confirmed(a, "q.link", bodies)
    # The messages are on b (its queue's counters), not on a or c.
    listed = nodes.eventually(
        lambda: next(
            (q for q in b.get("queues/%2F") if q["name"] == "q.link" and q.get("messages") == 300),
            None,
        )
    )
    assert listed["node"] == "b@test"
    assert consume(c, "q.link", 300) == bodies  # in order, through the link
    assert get_all(b, "q.link") == []  # every one acked away on b


def test_a_prefetch_window_across_the_link_is_exact_and_refilled(three_nodes: list[Node]) -> None:
    """The leader is told of a consumer's acks by quarters of its window, and at once when
    it has sent all it was allowed: a pika consumer on a (prefetch 20, the queue led by b)
    that keeps 17 deliveries unacked and acks the rest one by one still gets every message,
    and never holds more than 20 unacked."""
    a, b, _c = three_nodes
    declare_on(b, "q.window", a)
    bodies = [b"w%d" % i for i in range(120)]
    publish_confirmed(a, "q.window", bodies)
    conn = connect(a)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=20)
    got: list[bytes] = []
    held: list[int] = []
    unacked = most = 0
    deadline = time.monotonic() + 20
    for method, _props, body in ch.consume("q.window", inactivity_timeout=0.5):
        if method is None:
            if time.monotonic() > deadline:
                break
            continue
        got.append(body)
        unacked += 1
        most = max(most, unacked)
        if len(held) < 17:
            held.append(method.delivery_tag)
        else:
            ch.basic_ack(method.delivery_tag)
            unacked -= 1
        if len(got) == len(bodies):
            break
    assert got == bodies
    assert most <= 20
    ch.basic_ack(held[-1], multiple=True)
    ch.cancel()
    conn.close()
    assert get_all(b, "q.window") == []


def test_get_ack_reject_and_requeue_across_nodes(three_nodes: list[Node]) -> None:
    a, b, c = three_nodes
    declare_on(c, "q.get", a)
    publish_confirmed(b, "q.get", [b"one", b"two", b"three"])
    conn = connect(a)
    ch = conn.channel()
    method, _props, body = ch.basic_get("q.get")
    assert (body, method.message_count, method.redelivered) == (b"one", 2, False)
    ch.basic_nack(method.delivery_tag, requeue=True)  # back on c, redelivered
    method, _props, body = ch.basic_get("q.get")
    assert (body, method.redelivered) == (b"one", True)
    ch.basic_ack(method.delivery_tag)
    method, _props, body = ch.basic_get("q.get")
    assert body == b"two"
    ch.basic_reject(method.delivery_tag, requeue=False)  # dropped (no dead-letter exchange)
    method, _props, body = ch.basic_get("q.get", auto_ack=True)
    assert body == b"three"
    assert ch.basic_get("q.get") == (None, None, None)
    # Unacked deliveries of a channel that closes go back to the leader.
    publish_confirmed(b, "q.get", [b"four"])
    method, _props, body = ch.basic_get("q.get")
    assert body == b"four"
    ch.close()
    conn.close()
    assert consume(c, "q.get", 1) == [b"four"]


def test_counts_purge_and_a_transaction_across_nodes(three_nodes: list[Node]) -> None:
    a, b, c = three_nodes
    declare_on(b, "q.counts", a)
    publish_confirmed(c, "q.counts", [b"x"] * 7)
    conn = connect(a)
    ch = conn.channel()
    # Declare-ok counts are the leader's (asked over the link).
    assert ch.queue_declare("q.counts", passive=True).method.message_count == 7
    watcher = connect(c)
    wch = watcher.channel()
    wch.basic_qos(prefetch_count=1)
    held: list[bytes] = []
    wch.basic_consume("q.counts", lambda _ch, _m, _p, body: held.append(body))  # one, unacked
    nodes.eventually(lambda: watcher.process_data_events(time_limit=0.05) or held)
    declared = ch.queue_declare("q.counts", durable=True).method
    assert (declared.message_count, declared.consumer_count) == (6, 1)
    # leveret ctl list_queues on a node that does not lead it shows the leader's counters.
    listed = ok(a.data_dir, "list_queues", "--formatter", "json")
    row = next(r for r in json.loads(listed) if r["name"] == "q.counts")
    counted = ("messages", "messages_ready", "messages_unacknowledged", "consumers", "node")
    assert [row[k] for k in counted] == [7, 6, 1, 1, "b@test"]
    watcher.close()
    assert ch.queue_purge("q.counts").method.message_count == 7
    # tx.commit-ok once the leader has the messages.
    ch.tx_select()
    for _ in range(3):
        ch.basic_publish("", "q.counts", b"tx", pika.BasicProperties(delivery_mode=2))
    assert ch.queue_declare("q.counts", passive=True).method.message_count == 0
    ch.tx_commit()
    conn.close()
    assert nodes.eventually(lambda: b_count(b, "q.counts") == 3)


def b_count(node: Node, queue: str) -> int:
    conn = connect(node)
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        conn.close()


def test_dead_letters_cross_to_a_queue_on_another_node(three_nodes: list[Node]) -> None:
    a, b, c = three_nodes
    declare_on(c, "q.dead", a, b)
    conn = connect(b)
    ch = conn.channel()
    ch.queue_declare(
        "q.live",
        durable=True,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q.dead"},
    )
    conn.close()
    nodes.eventually(functools.partial(visible, a, "q.live"))
    publish_confirmed(a, "q.live", [b"doomed"])
    conn = connect(a)
    ch = conn.channel()
    method, _props, body = ch.basic_get("q.live")
    assert body == b"doomed"
    ch.basic_reject(method.delivery_tag, requeue=False)  # dead-lettered on b, to c's queue
    conn.close()
    [(props, body)] = nodes.eventually(lambda: get_all(a, "q.dead"))
    assert body == b"doomed"
    assert props.headers["x-death"][0]["queue"] == "q.live"


def get_all(node: Node, queue: str) -> list[tuple[Any, bytes]]:
    conn = connect(node)
    ch = conn.channel()
    found = []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        found.append((props, body))
    conn.close()
    return found


def test_a_fanout_to_several_queues_of_one_leader_reaches_each_confirmed(
    three_nodes: list[Node],
) -> None:
    """A message routed to three queues led by b crosses the link once (a Publish and an
    Also for each other queue): each still gets every message, in order and confirmed, as
    on one node; so do a queue of the publisher's node and one of a third node beside them."""
    a, b, c = three_nodes
    tag = uuid.uuid4().hex[:8]
    exchange = f"fan-{tag}"
    queues: list[str] = []  # b's three first
    for node, count in ((b, 3), (c, 1), (a, 1)):
        conn = connect(node)
        ch = conn.channel()
        ch.exchange_declare(exchange, "fanout", durable=True)
        for i in range(count):
            queue = f"fan-{tag}-{node.name[0]}{i}"
            ch.queue_declare(queue, durable=True)
            ch.queue_bind(queue, exchange)
            queues.append(queue)
        conn.close()
    nodes.eventually(lambda: len(a.get(f"exchanges/%2F/{exchange}/bindings/source")) == 5)
    bodies = [b"f%d" % i for i in range(200)]
    conn = connect(a)
    ch = conn.channel()
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish(exchange, "", body, pika.BasicProperties(delivery_mode=2))
    conn.close()
    for queue in queues:
        assert consume(c, queue, 200, prefetch=100) == bodies, queue


def test_amqp10_clients_through_another_node(three_nodes: list[Node]) -> None:
    """Any front end gets the link through the core: proton sends (settled once the
    leader has the messages) on c and receives on a, the queue led by b."""
    a, b, c = three_nodes
    declare_on(b, "q.amqp10", a, c)
    url = "amqp://guest:guest@127.0.0.1:{}"
    sender_conn = ProtonConnection(url.format(c.broker.port), timeout=10)
    try:
        sender = sender_conn.create_sender("/queues/q.amqp10")
        for i in range(5):
            sender.send(ProtonMessage(body=f"p{i}", durable=True))
    finally:
        sender_conn.close()
    receiver_conn = ProtonConnection(url.format(a.broker.port), timeout=10)
    try:
        receiver = receiver_conn.create_receiver("/queues/q.amqp10", credit=2)
        got = []
        for _ in range(5):
            got.append(receiver.receive(timeout=5).body)
            receiver.accept()
    finally:
        receiver_conn.close()
    assert got == [f"p{i}" for i in range(5)]
    assert nodes.eventually(lambda: b_count(b, "q.amqp10") == 0 or None) is True


def test_an_amqp10_receiver_its_leader_refuses_is_refused_as_on_one_node(
    three_nodes: list[Node],
) -> None:
    """A proton receiver on a, of a queue led by b that an exclusive 0-9-1 consumer on b
    holds: the attach is answered once b refused the consume, so it is refused (403) as on
    one node, and the connection goes on. Before, it was attached, then detached."""
    a, b, _ = three_nodes
    queue = f"q.excl.{uuid.uuid4().hex[:8]}"
    declare_on(b, queue, a)
    holder = connect(b)
    try:
        holder.channel().basic_consume(queue, lambda *_: None, exclusive=True)
        conn = ProtonConnection(f"amqp://guest:guest@127.0.0.1:{a.broker.port}", timeout=10)
        try:
            with pytest.raises(Exception, match=r"unauthorized-access.*exclusive use"):
                conn.create_receiver(f"/queues/{queue}")
            conn.create_sender(f"/queues/{queue}").send(ProtonMessage(body="still open"))
        finally:
            conn.close()
    finally:
        holder.close()


def test_an_amqp10_dynamic_node_and_v1_queue_are_in_etcd_when_attached(
    etcd_server: EtcdServer, three_nodes: list[Node]
) -> None:
    """A proton receiver's dynamic node (its reply queue) and a v1 queue address that
    declares its queue are in the cluster's metadata store once the attach is answered,
    as a 0-9-1 declaration is at declare-ok (before, a wrote them to etcd behind the
    answer): a reply sent to the dynamic node through b reaches the receiver on a."""
    a, b, _ = three_nodes
    v1 = f"v1-{uuid.uuid4().hex[:8]}"
    conn = ProtonConnection(f"amqp://guest:guest@127.0.0.1:{a.broker.port}", timeout=10)
    try:
        receiver = conn.create_receiver(None, dynamic=True, credit=1)
        address = receiver.link.remote_source.address
        assert address is not None
        name = unquote(address.rsplit("/", 1)[-1])
        queues = f"{a.prefix}entities/queues/%2F/"
        [record] = nodes.etcd_values(etcd_server, queues + name)
        assert record["exclusive"] is True
        conn.create_receiver(f"/queue/{v1}", credit=0)
        # Proton's source durability is none: a transient classic queue, as RabbitMQ's.
        [record] = nodes.etcd_values(etcd_server, queues + v1)
        assert record["durable"] is False
        nodes.eventually(functools.partial(_routed, b, "", name, b"reply"))
        received = receiver.receive(timeout=10)
        assert received.body == b"reply"
        # A v1 exchange source: a server-named queue, and its binding, in etcd too.
        key = f"k-{v1}"
        conn.create_receiver(f"/exchange/amq.direct/{key}", credit=0)
        bindings = nodes.etcd_values(etcd_server, f"{a.prefix}entities/bindings/%2F/", prefix=True)
        [binding] = [v for v in bindings if v.get("routing_key") == key]
        assert binding["source"] == "amq.direct"
    finally:
        conn.close()


@pytest.mark.parametrize("through", ["a", "b"])
def test_an_amqp10_drain_through_another_node_gets_what_the_leader_holds(
    three_nodes: list[Node], through: str
) -> None:
    """A proton receiver on a, the queue led by b, drains as on b itself (the second
    case): it gets what b holds up to its credit, then the drain's completion (its credit
    given back: 0). Before, a answered the drain at once with what had reached it
    (nothing)."""
    a, b, _c = three_nodes
    queue = f"q.drain.{through}"
    declare_on(b, queue, a)
    url = "amqp://guest:guest@127.0.0.1:{}"
    sender_conn = ProtonConnection(url.format(b.broker.port), timeout=10)
    try:
        sender = sender_conn.create_sender(f"/queues/{queue}")
        for i in range(5):
            sender.send(ProtonMessage(body=f"d{i}", durable=True))
    finally:
        sender_conn.close()
    receiving = a if through == "a" else b
    receiver_conn = ProtonConnection(url.format(receiving.broker.port), timeout=10)
    try:
        # No credit until the drains: nothing reaches a before them.
        receiver = receiver_conn.create_receiver(f"/queues/{queue}", credit=0)
        fetcher = receiver.fetcher
        assert fetcher is not None
        link = receiver.link

        def drain(credit: int, expected: int) -> list[object]:
            link.drain(credit)
            receiver_conn.wait(lambda: not link.draining(), timeout=10, msg="the drain")
            # The deliveries precede the completion on the session: all here.
            receiver_conn.wait(lambda: fetcher.has_message >= expected, timeout=2, msg="drained")
            assert link.credit == 0
            got: list[object] = []
            while fetcher.has_message:
                got.append(fetcher.pop().body)
                receiver.accept()
            return got

        assert drain(3, 3) == ["d0", "d1", "d2"]  # less credit than b holds: all of it used
        assert drain(10, 2) == ["d3", "d4"]  # more: what b holds, then the completion
        assert drain(4, 0) == []  # nothing left: completed at once
    finally:
        receiver_conn.close()
    assert nodes.eventually(lambda: b_count(b, queue) == 0 or None) is True


def _routed(node: Node, exchange: str, key: str = "", body: bytes = b"probe") -> bool:
    """Whether a mandatory, confirmed publish of ``body`` to ``exchange`` with ``key``
    through ``node`` reaches a queue (its queues and bindings have reached that node's
    copy of the routing table)."""
    conn = connect(node)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish(exchange, key, body, mandatory=True)
        return True
    except pika.exceptions.UnroutableError:
        return False
    finally:
        conn.close()


# One unthrottled pika publisher in a process of its own (the test's consumers keep this
# one's interpreter): persistent 256 B messages to a fanout for SECONDS, then the count.
_FLOOD = """
import sys, time, pika
port, exchange, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=0))
ch = conn.channel()
body, props = b"x" * 256, pika.BasicProperties(delivery_mode=2)
published, start = 0, time.monotonic()
while time.monotonic() - start < seconds:
    for _ in range(100):
        ch.basic_publish(exchange, "", body, props)
    published += 100
print(published, flush=True)
conn.close()
"""


def test_a_0_10_fetch_through_another_node_gets_what_the_leader_holds(
    three_nodes: list[Node],
) -> None:
    """qpid.messaging's ``fetch(timeout=0)`` with no capacity grants one credit and, when
    nothing has come yet, flushes (``message.flush``, then a sync): the flush is completed
    once the leader b handed what it held, so each fetch through a gets a message (before,
    a completed the flush at once, with what had reached it: nothing)."""
    py2 = ensure()
    if py2 is None:
        pytest.skip("Python 2.7 with qpid-python is not available")
    a, b, _ = three_nodes
    queue = f"fetch-{uuid.uuid4().hex[:8]}"
    declare_on(b, queue, a)
    bodies = [b"q%d" % i for i in range(5)]
    publish_confirmed(b, queue, bodies)
    port = str(a.broker.port)
    fetched = py2.run_json(QPID_CLIENT, "127.0.0.1", port, "fetch", queue)["bodies"]
    assert [base64.b64decode(body) for body in fetched] == bodies
    assert get_all(b, queue) == []  # each acknowledged on b


# The pure pass only (the suite's time): the compiled pass keeps the link's other tests.
@pytest.mark.pure_only
def test_a_publish_flood_leaves_the_consumers_across_the_link_their_share(
    three_nodes: list[Node],
) -> None:
    """Scenario d of docs/benchmarks.md in small: one unthrottled publisher on a, a fanout to
    four queues led by b, their consumers on a. The link's publish window holds the
    publisher, so the consumers' credit and acks are not queued behind its publishes: they
    take a good share while it publishes (before the window: about 5 % of what was routed,
    then nothing until the publisher stopped), and every message arrives once."""
    a, b, _ = three_nodes
    tag = uuid.uuid4().hex[:8]
    exchange = f"flood-{tag}"
    queues = [f"flood-{tag}-{i}" for i in range(4)]
    conn = connect(b)
    ch = conn.channel()
    ch.exchange_declare(exchange, "fanout", durable=True)
    for queue in queues:
        ch.queue_declare(queue, durable=True)
        ch.queue_bind(queue, exchange)
    nodes.eventually(functools.partial(_routed, a, exchange))
    for queue in queues:
        ch.queue_purge(queue)
    conn.close()

    received = [0]
    stop = threading.Event()
    ready = threading.Event()
    failure: list[BaseException] = []

    def consumers() -> None:
        try:
            conn = connect(a)
            for queue in queues:
                ch = conn.channel()
                ch.basic_qos(prefetch_count=100)

                def on_message(
                    ch: Any, method: Any, _props: Any, _body: bytes, received: list[int] = received
                ) -> None:
                    received[0] += 1
                    if method.delivery_tag % 50 == 0:
                        ch.basic_ack(method.delivery_tag, multiple=True)

                ch.basic_consume(queue, on_message)
            ready.set()
            deadline = time.monotonic() + 120
            while not stop.is_set() and time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.05)
            conn.close()
        except BaseException as exc:  # reported by the test's thread
            failure.append(exc)
            ready.set()

    thread = threading.Thread(target=consumers, daemon=True)
    thread.start()
    try:
        assert ready.wait(30)
        assert not failure
        publisher = subprocess.run(
            [sys.executable, "-c", _FLOOD, str(a.broker.port), exchange, "2.0"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        during = received[0]
        routed = int(publisher.stdout) * len(queues)
        # A share, not a rate: the machine may be loaded.
        assert during >= 2000, (during, routed)
        assert during >= routed // 5, (during, routed)
        nodes.eventually(lambda: received[0] >= routed, timeout=60)
        time.sleep(0.2)
        assert received[0] == routed  # every one once
    finally:
        stop.set()
        thread.join(30)
    assert not failure


# The pure pass only (the suite's time): the compiled pass keeps the link's other tests.
@pytest.mark.pure_only
def test_the_link_is_read_again_once_a_large_delivery_has_drained(
    three_nodes: list[Node],
) -> None:
    """b writes a 20 MiB delivery to a over the link, which fills the transport's buffer:
    b stops reading the link from a meanwhile (as any connection whose peer does not read
    what it is sent) and must start again as soon as the buffer drains: the link has no
    heartbeat, and without another tick what a publishes to b's queues would wait for good
    (a publisher held by the link's window, a queue.delete or a get waiting for b)."""
    a, b, _c = three_nodes
    declare_on(b, "q.big", a)
    declare_on(b, "q.meanwhile", a)
    consumer = connect(a)
    got: list[bytes] = []
    consumer.channel().basic_consume(
        "q.big", lambda _ch, _m, _p, body: got.append(body), auto_ack=True
    )
    sent = [0]
    done = threading.Event()

    def flood() -> None:
        # Publishes through a to b's queue while the delivery goes the other way.
        conn = connect(a)
        ch = conn.channel()
        with contextlib.suppress(pika.exceptions.AMQPError):  # the nodes stopped (failed)
            while not done.is_set() and sent[0] < 50_000:
                ch.basic_publish("", "q.meanwhile", b"m")
                sent[0] += 1
            conn.close()

    flooding = threading.Thread(target=flood, daemon=True)
    flooding.start()
    nodes.eventually(lambda: sent[0] > 100)
    big = bytes(range(251)) * (20 * 1024 * 1024 // 251)
    publisher = connect(b)
    publisher.channel().basic_publish("", "q.big", big)
    publisher.close()
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        consumer.process_data_events(time_limit=0.05)
    done.set()
    consumer.close()
    assert got == [big]
    # A few ms once b reads again; the stall lasted until some other tick of the link
    # (its handshake deadline, 10 s after it connected) or for good.
    flooding.join(5)
    assert not flooding.is_alive(), "the publisher through a is still held"
    assert nodes.eventually(lambda: b_count(b, "q.meanwhile") == sent[0], timeout=5)


def test_deleting_an_auto_delete_queue_its_cancel_removed_on_its_leader_is_ok(
    three_nodes: list[Node],
) -> None:
    """basic.cancel of an auto-delete queue's last consumer deletes it on its leader; a
    queue.delete right after (aiormq's own test does so) gets delete-ok with 0, as on
    one node, not the leader's 404 for a queue it no longer has."""
    a, b, _c = three_nodes
    conn = connect(a)
    try:
        for round_ in range(5):
            name = f"q.gone-{round_}-{uuid.uuid4().hex[:6]}"
            declarer = connect(b)
            declarer.channel().queue_declare(name, auto_delete=True)
            declarer.close()
            nodes.eventually(functools.partial(visible, a, name))
            ch = conn.channel()
            tag = ch.basic_consume(name, lambda *_: None)
            ch.basic_cancel(tag)
            assert ch.queue_delete(name).method.message_count == 0
            ch.close()
    finally:
        conn.close()


def test_a_consume_its_leader_refuses_is_the_channel_error_one_node_gives(
    three_nodes: list[Node],
) -> None:
    """An exclusive consumer on c holds a queue led by b: a consume through a gets 403
    ACCESS_REFUSED as a channel error, with no consume-ok before it (not a basic.cancel of
    a consume it was told is on); once c's consumer goes, a's consume is accepted and
    served, consume-ok before its first delivery."""
    # The holder's close hands its unacked delivery back (pika nacks it, then cancels): b
    # redelivers it to the holder's consumer on c before the cancel, and c gives it back
    # at once (it was left unacked on b, for good, until 2026-11-28).
    a, b, c = three_nodes
    declare_on(b, "q.exclusive-use", a, c)
    publish_confirmed(b, "q.exclusive-use", [b"one", b"two"])
    holder = connect(c)
    hch = holder.channel()
    hch.basic_qos(prefetch_count=1)
    htag = hch.basic_consume("q.exclusive-use", lambda *_: None, exclusive=True)
    conn = connect(a)
    try:
        for exclusive in (False, True):
            ch = conn.channel()
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                ch.basic_consume("q.exclusive-use", lambda *_: None, exclusive=exclusive)
            assert refused.value.reply_code == 403
            assert "exclusive use" in refused.value.reply_text
        hch.basic_cancel(htag)
        holder.close()  # its unacked delivery goes back
        ch = conn.channel()
        got: list[bytes] = []
        ch.basic_consume(
            "q.exclusive-use",
            lambda _ch, _m, _p, body: got.append(body),
            auto_ack=True,
            exclusive=True,
        )
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        assert sorted(got) == [b"one", b"two"]
    finally:
        if holder.is_open:
            holder.close()
        conn.close()


# The pure pass only (the suite's time): the compiled pass keeps the link's other tests.
@pytest.mark.pure_only
def test_a_queue_on_a_down_node_answers_as_rabbitmq_and_returns_with_it(
    three_nodes: list[Node], etcd_server: EtcdServer
) -> None:
    a, b, _c = three_nodes
    declare_on(b, down_node.QUEUE, a)
    found = down_node.probe(a.broker.port, b.broker.port, b.name, lambda: b.broker.stop())
    # RabbitMQ 3.10.8's answers (a durable classic queue whose node is down), as data.
    assert found == json.loads(down_node.RECORDED.read_text())
    # b comes back with its data directory: every confirmed message is still there.
    back = nodes.start_node(etcd_server, b.prefix, "b@test", b.data_dir)
    three_nodes[1] = back
    nodes.eventually(lambda: visible(a, down_node.QUEUE))
    assert consume(a, down_node.QUEUE, 5) == [b"kept"] * 5
    # The link to the restarted node numbers its publishes afresh: they are confirmed.
    publish_confirmed(a, down_node.QUEUE, [b"again"])
    assert consume(a, down_node.QUEUE, 1) == [b"again"]
