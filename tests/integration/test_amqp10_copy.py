"""AMQP 1.0 receivers whose source says ``distribution-mode: copy`` (proton's ``Copy()``):
browsers of their queue (spec 3.5.3: the messages stay available to other links). They get
copies of what the queue holds and then of what arrives, within their credit; whatever
they settle the copies with, the queue keeps every message for its consumers; a drain uses
the credit on what is there and gives the rest back; the attach answers ``copy``.

Leveret only: RabbitMQ 3.10.8's 1.0 plugin answers ``copy`` and consumes, as Leveret did
before (docs/compatibility.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pika
import pytest
from proton import Delivery, Terminus, symbol
from proton.reactor import AtMostOnce, Copy, Filter, Selector
from proton.utils import BlockingConnection, LinkDetached

if TYPE_CHECKING:
    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.timeout(60)]


def _url(broker: Broker) -> str:
    return f"amqp://guest:guest@{broker.host}:{broker.port}"


def _pika(broker: Broker) -> Any:
    return pika.BlockingConnection(pika.ConnectionParameters(host=broker.host, port=broker.port))


def _declare(broker: Broker, queue: str, bodies: list[bytes], **headers: Any) -> None:
    with _pika(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(queue)
        for body in bodies:
            ch.basic_publish("", queue, body, pika.BasicProperties(headers=headers or None))


def _count(broker: Broker, queue: str) -> int:
    with _pika(broker) as conn:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)


def _consume_all(broker: Broker, queue: str) -> list[tuple[bytes, bool]]:
    """What a 0-9-1 consumer (auto-ack) gets until the queue is quiet: each body and its
    redelivered flag."""
    got = []
    with _pika(broker) as conn:
        ch = conn.channel()
        for method, _props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=1):
            if method is None:
                break
            got.append((body, bool(method.redelivered)))
        ch.cancel()
    return got


def _body(message: Any) -> bytes:
    # Read while ``message`` is alive: proton's body is a view of memory the message owns.
    return bytes(message.body)


def _receive(receiver: Any, count: int) -> list[bytes]:
    return [_body(m) for m in [receiver.receive(timeout=5) for _ in range(count)]]


def _nothing_more(receiver: Any) -> bool:
    try:
        receiver.receive(timeout=0.5)
    except Exception:  # proton's Timeout
        return True
    return False


def test_a_copy_receiver_browses_and_leaves_every_message(broker: Broker, name: str) -> None:
    """A copy receiver gets the three messages the queue holds, then a fourth published
    after it attached; it accepts them all and the queue still holds four. A second copy
    receiver sees the four too and settles them rejected, released, modified
    (undeliverable) and accepted: nothing changes. A 0-9-1 consumer then gets all four,
    none redelivered. Before, the first receiver took them: the queue was left empty."""
    _declare(broker, name, [b"m0", b"m1", b"m2"])
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        first = c.create_receiver(f"/queues/{name}", credit=10, options=Copy(), name="first")
        assert first.link.remote_source.distribution_mode == Terminus.DIST_MODE_COPY
        assert _receive(first, 3) == [b"m0", b"m1", b"m2"]
        _declare(broker, name, [b"m3"])
        assert _receive(first, 1) == [b"m3"]
        first.accept()
        first.accept()
        first.accept()
        first.accept()
        assert _count(broker, name) == 4
        second = c.create_receiver(f"/queues/{name}", credit=10, options=Copy(), name="second")
        assert _receive(second, 4) == [b"m0", b"m1", b"m2", b"m3"]
        second.reject()
        second.release(delivered=False)
        second.settle(Delivery.MODIFIED)
        second.accept()
        assert _nothing_more(second)  # a settled copy is not sent again
        assert _count(broker, name) == 4
    finally:
        c.close()
    assert _consume_all(broker, name) == [
        (b"m0", False),
        (b"m1", False),
        (b"m2", False),
        (b"m3", False),
    ]


def test_a_copy_receiver_drains(broker: Broker, name: str) -> None:
    """Drains of a copy receiver with no credit between them: three of the five messages
    (less credit than the queue holds: all of it used), then the two it has not seen
    and the credit given back, then nothing. The queue keeps the five. Before, the
    drains took them."""
    _declare(broker, name, [b"d%d" % i for i in range(5)])
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        receiver = c.create_receiver(f"/queues/{name}", credit=0, options=Copy())
        fetcher = receiver.fetcher
        assert fetcher is not None
        link = receiver.link

        def drain(credit: int, expected: int) -> list[bytes]:
            link.drain(credit)
            c.wait(lambda: not link.draining(), timeout=10, msg="the drain")
            c.wait(lambda: fetcher.has_message >= expected, timeout=2, msg="drained")
            assert link.credit == 0
            got = []
            while fetcher.has_message:
                got.append(_body(fetcher.pop()))
                receiver.accept()
            return got

        assert drain(3, 3) == [b"d0", b"d1", b"d2"]
        assert drain(10, 2) == [b"d3", b"d4"]
        assert drain(4, 0) == []
        assert _count(broker, name) == 5
    finally:
        c.close()


def test_a_settled_copy_receiver_and_a_selector_take_nothing(broker: Broker, name: str) -> None:
    """A copy receiver with sender-settle-mode settled (proton's ``AtMostOnce``) gets the
    copies pre-settled; one with a JMS selector (a Qpid JMS ``QueueBrowser``'s) gets the
    copies of the messages it matches. The queue keeps all four. Before, the settled one
    took every message and the selector one took the messages it matched."""
    with _pika(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name)
        for i in range(4):
            ch.basic_publish("", name, b"s%d" % i, pika.BasicProperties(headers={"n": i}))
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        settled = c.create_receiver(
            f"/queues/{name}", credit=10, options=[Copy(), AtMostOnce()], name="settled"
        )
        assert _receive(settled, 4) == [b"s0", b"s1", b"s2", b"s3"]
        assert _count(broker, name) == 4
        odd = c.create_receiver(
            f"/queues/{name}", credit=10, options=[Copy(), Selector("n = 1 OR n = 3")], name="odd"
        )
        assert odd.link.remote_source.distribution_mode == Terminus.DIST_MODE_COPY
        assert _receive(odd, 2) == [b"s1", b"s3"]
        odd.accept()
        odd.accept()
        assert _nothing_more(odd)
        assert _count(broker, name) == 4
    finally:
        c.close()
    assert [body for body, _redelivered in _consume_all(broker, name)] == [
        b"s0",
        b"s1",
        b"s2",
        b"s3",
    ]


def test_a_copy_receiver_of_a_deleted_queue_is_detached(broker: Broker, name: str) -> None:
    """The queue of a copy receiver is deleted: its link is detached with
    amqp:resource-deleted, as a consuming receiver's is."""
    _declare(broker, name, [b"x"])
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        receiver = c.create_receiver(f"/queues/{name}", credit=10, options=Copy())
        assert _receive(receiver, 1) == [b"x"]
        with _pika(broker) as conn:
            conn.channel().queue_delete(name)
        with pytest.raises(LinkDetached, match="amqp:resource-deleted"):
            c.wait(lambda: False, timeout=5)
    finally:
        c.close()


def test_a_stream_read_with_copy_answers_copy(broker: Broker, name: str) -> None:
    """A stream is read without taking anything: a copy receiver reads it from its offset
    as any receiver does, and the attach's ``copy`` is what happens."""
    with _pika(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        for i in range(3):
            ch.basic_publish("", name, b"s%d" % i)
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        first: Any = "first"
        for link in ("one", "two"):
            offset = Filter({symbol("rabbitmq:stream-offset-spec"): first})
            receiver = c.create_receiver(
                f"/queues/{name}", credit=10, options=[Copy(), offset], name=link
            )
            assert receiver.link.remote_source.distribution_mode == Terminus.DIST_MODE_COPY
            assert _receive(receiver, 3) == [b"s0", b"s1", b"s2"]
            receiver.accept()
    finally:
        c.close()
