"""AMQP 0-10 browsing (a subscription that does not acquire) of a queue led by another
node, through real clients connected to the node that does not lead it: the subscription
is sent, as not-acquired transfers, what the leader holds and then what arrives there, and
the messages stay on the leader for its consumers (before, the subscription failed at its
first credit: the proxy holds none of them). An acquire of a browsed message through that
node takes it on the leader if it is still there, as one node does. An AMQP 1.0 receiver
with ``distribution-mode: copy`` through that node browses the same way."""

from __future__ import annotations

import base64
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from proton import Terminus
from proton.reactor import Copy
from proton.utils import BlockingConnection as ProtonConnection
from tools.qpid import ensure

from leveret.protocol.amqp010._generated.commands import (
    MessageAccept,
    MessageAcquire,
    MessageFlow,
    MessageSubscribe,
    MessageTransfer,
)
from leveret.protocol.amqp010._generated.structs import Acquired
from leveret.protocol.amqp010.sequence import SequenceSet
from tests.cluster import nodes
from tests.cluster.nodes import connect
from tests.cluster.test_cluster_link import (
    QPID_CLIENT,
    b_count,
    declare_on,
    get_all,
    publish_confirmed,
)
from tests.integration.test_amqp010 import Client010

if TYPE_CHECKING:
    from collections.abc import Iterator

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = pytest.mark.leveret_only

UNLIMITED = 0xFFFFFFFF
NOT_ACQUIRED = 1


@pytest.fixture(scope="module")
def two(etcd_server: EtcdServer) -> Iterator[tuple[Node, Node]]:
    yield from nodes.two_nodes(etcd_server, f"/leveret-test/browse-{uuid.uuid4().hex[:8]}/")


def test_a_0_10_browser_through_another_node_sees_what_the_leader_holds(
    two: tuple[Node, Node],
) -> None:
    """A raw 0-10 subscription on a, not acquiring, of a queue led by b: the three messages
    b holds come as not-acquired transfers, then a fourth published on b; b still holds
    all four. An acquire of the first takes it (accepted: gone from b); a get on b then
    takes the second, so an acquire of the second and third takes the third alone; what
    is left, the fourth, a consumer gets after the browser went."""
    a, b = two
    queue = f"browse-raw-{uuid.uuid4().hex[:8]}"
    declare_on(b, queue, a)
    publish_confirmed(b, queue, [b"m0", b"m1", b"m2"])
    client = Client010(a.broker)
    try:
        send = client.conn.send_command
        send(1, MessageSubscribe(queue=queue, destination="br", accept_mode=0, acquire_mode=1))
        send(1, MessageFlow(destination="br", unit=1, value=UNLIMITED))
        send(1, MessageFlow(destination="br", unit=0, value=UNLIMITED))
        client.wait(lambda: len(client.transfers()) == 3)
        publish_confirmed(b, queue, [b"m3"])
        client.wait(lambda: len(client.transfers()) == 4)
        transfers = client.transfers()
        assert [t.body for t in transfers] == [b"m0", b"m1", b"m2", b"m3"]
        modes = {
            t.command.acquire_mode for t in transfers if isinstance(t.command, MessageTransfer)
        }
        assert modes == {NOT_ACQUIRED}
        assert b_count(b, queue) == 4
        ids = [t.command_id for t in transfers]
        assert acquire(client, ids[0]) == [ids[0]]
        send(1, MessageAccept(transfers=SequenceSet.of(ids[0])))
        assert nodes.eventually(lambda: b_count(b, queue) == 3 or None) is True
        assert [body for _props, body in get_one(b, queue)] == [b"m1"]
        assert acquire(client, ids[1], ids[2]) == [ids[2]]
        send(1, MessageAccept(transfers=SequenceSet.of(ids[2])))
        assert nodes.eventually(lambda: b_count(b, queue) == 1 or None) is True
    finally:
        client.close()
    assert [body for _props, body in get_all(a, queue)] == [b"m3"]


def acquire(client: Client010, *command_ids: int) -> list[int]:
    """The transfers of ``command_ids`` that ``message.acquire`` took."""
    acquired = client.result(MessageAcquire(transfers=SequenceSet.of(*command_ids)))
    assert isinstance(acquired, Acquired)
    return list((acquired.transfers or SequenceSet()).ids())


def get_one(node: Node, queue: str) -> list[tuple[object, bytes]]:
    """A ``basic.get`` (auto-ack) through ``node``: what it took."""
    conn = connect(node)
    try:
        method, props, body = conn.channel().basic_get(queue, auto_ack=True)
        return [] if method is None else [(props, body)]
    finally:
        conn.close()


@pytest.mark.parametrize("capacity", [0, 10])
def test_qpid_messaging_browsers_through_another_node_take_nothing(
    two: tuple[Node, Node], capacity: int
) -> None:
    """qpid.messaging's ``{mode: browse}`` receivers on a, the queue led by b: with no
    capacity (each fetch a credit of one and a flush, answered by b) and with a prefetch
    of ten, two browsers in turn each see the five messages, which a fetching receiver
    then takes."""
    py2 = ensure()
    if py2 is None:
        pytest.skip("Python 2.7 with qpid-python is not available")
    a, b = two
    queue = f"browse-qpid-{capacity}-{uuid.uuid4().hex[:8]}"
    declare_on(b, queue, a)
    bodies = [b"q%d" % i for i in range(5)]
    publish_confirmed(b, queue, bodies)
    port = str(a.broker.port)
    for _ in range(2):
        seen = py2.run_json(QPID_CLIENT, "127.0.0.1", port, "browse", queue, str(capacity))
        assert [base64.b64decode(body) for body in seen["bodies"]] == bodies
    fetched = py2.run_json(QPID_CLIENT, "127.0.0.1", port, "fetch", queue)["bodies"]
    assert [base64.b64decode(body) for body in fetched] == bodies


def test_an_amqp10_copy_receiver_through_another_node_browses_the_leaders_queue(
    two: tuple[Node, Node],
) -> None:
    """A proton receiver on a with ``Copy()``, the queue led by b: the attach answers
    ``copy``; it gets the three messages b holds, then a fourth published on b, and
    accepts them; b still holds four. A second copy receiver drains them (two, then the
    other two and its credit given back, then nothing), rejecting and releasing; b still
    holds four, which a 0-9-1 consumer through a then gets. Before, the first receiver
    took all four from b."""
    a, b = two
    queue = f"browse-copy-{uuid.uuid4().hex[:8]}"
    declare_on(b, queue, a)
    publish_confirmed(b, queue, [b"c0", b"c1", b"c2"])
    conn = ProtonConnection(f"amqp://guest:guest@127.0.0.1:{a.broker.port}", timeout=10)
    try:
        first = conn.create_receiver(f"/queues/{queue}", credit=10, options=Copy(), name="one")
        assert first.link.remote_source.distribution_mode == Terminus.DIST_MODE_COPY
        assert _bodies([first.receive(timeout=5) for _ in range(3)]) == [b"c0", b"c1", b"c2"]
        publish_confirmed(b, queue, [b"c3"])
        assert _bodies([first.receive(timeout=5)]) == [b"c3"]
        for _ in range(4):
            first.accept()
        assert b_count(b, queue) == 4
        second = conn.create_receiver(f"/queues/{queue}", credit=0, options=Copy(), name="two")
        fetcher = second.fetcher
        assert fetcher is not None
        link = second.link

        def drain(credit: int, expected: int) -> list[bytes]:
            link.drain(credit)
            conn.wait(lambda: not link.draining(), timeout=10, msg="the drain")
            conn.wait(lambda: fetcher.has_message >= expected, timeout=2, msg="drained")
            assert link.credit == 0
            got = []
            while fetcher.has_message:
                got.append(fetcher.pop())
                if len(got) % 2:
                    second.reject()
                else:
                    second.release(delivered=False)
            return _bodies(got)

        assert drain(2, 2) == [b"c0", b"c1"]
        assert drain(10, 2) == [b"c2", b"c3"]
        assert drain(3, 0) == []
        assert b_count(b, queue) == 4
    finally:
        conn.close()
    assert [body for _props, body in get_all(a, queue)] == [b"c0", b"c1", b"c2", b"c3"]


def _bodies(messages: list[Any]) -> list[bytes]:
    # Read while the messages are alive: proton's body is a view of memory they own.
    return [bytes(m.body) for m in messages]
