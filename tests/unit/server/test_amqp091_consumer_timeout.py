"""Consumer ack timeouts with the model's clock: only the late consumer is cancelled, its
unacked deliveries are requeued, and the channel goes on (RabbitMQ 4.3's rule)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from leveret.convert.amqp091 import wire_message
from leveret.errors import PreconditionFailed
from leveret.model.timers import Timers
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink

if TYPE_CHECKING:
    from leveret.model.message import Message


def msg(body: bytes, key: str) -> Message:
    raw = BasicProperties().encode()
    return wire_message("", key, raw, body)


class World:
    def __init__(self, default: float | None = 10.0) -> None:
        self.timers = Timers()
        self.vhost = VirtualHost("/", timers=self.timers)
        self.owner = object()
        self.sinks = [RecordingSink(), RecordingSink()]
        self.sessions = [
            Session(self.vhost, self.owner, sink, consumer_timeout=default) for sink in self.sinks
        ]
        self.vhost.declare_queue("q", owner=self.owner)

    def publish(self, *bodies: bytes) -> None:
        for body in bodies:
            self.sessions[0].publish("", "q", msg(body, "q"))

    def consume(self, index: int, tag: str, prefetch: int = 0, **args: object) -> None:
        session = self.sessions[index]
        session.set_qos(0, prefetch, False)
        session.consume("q", tag, no_ack=False, exclusive=False, arguments=args)

    def advance(self, seconds: float) -> None:
        self.timers.expire(self.timers.now + seconds)

    def delivered(self, index: int) -> list[tuple[int, bytes, bool]]:
        return [
            (e.delivery_tag, e.message.body if e.message else b"", e.redelivered)
            for e in self.sinks[index].deliveries()
        ]


def test_late_consumer_alone_is_cancelled_and_its_messages_requeued() -> None:
    w = World()
    w.consume(0, "late", prefetch=2)
    w.publish(b"a", b"b")
    assert w.delivered(0) == [(1, b"a", False), (2, b"b", False)]
    w.advance(9.9)
    assert w.sinks[0].take("consumer_cancelled") == []
    w.consume(1, "other", prefetch=5)
    w.advance(0.2)
    cancelled = w.sinks[0].take("consumer_cancelled")
    assert [e.consumer_tag for e in cancelled] == ["late"]
    assert "late" not in w.sessions[0].consumers
    assert w.delivered(1) == [(1, b"a", True), (2, b"b", True)]
    assert not w.sessions[0].closed
    # Late settlements of the requeued deliveries are ignored, not a channel error.
    w.sessions[0].ack(1)
    w.sessions[0].reject(2, requeue=False)
    with pytest.raises(PreconditionFailed):
        w.sessions[0].ack(1)
    # The channel is still usable: a new consumer on it gets new deliveries.
    w.consume(0, "again")
    w.publish(b"c")
    assert [body for _t, body, _r in w.delivered(0) + w.delivered(1)] == [b"c"]


def test_acks_in_time_keep_the_consumer() -> None:
    w = World()
    w.consume(0, "c", prefetch=1)
    for i in range(20):
        w.publish(b"m%d" % i)
        (tag, _body, _r), *_ = w.delivered(0)
        w.advance(5)
        w.sessions[0].ack(tag)
    assert w.sinks[0].take("consumer_cancelled") == []
    assert len(w.sessions[0].consumers["c"].pending) == 0
    # One deadline in the heap for the consumer, not one per message.
    assert len(w.timers) <= 1


def test_the_oldest_unacked_delivery_decides() -> None:
    w = World()
    w.consume(0, "c")
    w.publish(b"a")
    w.advance(6)
    w.publish(b"b")
    w.sessions[0].ack(2)  # out of order: the older one is still unacked
    w.advance(4.5)
    assert [e.consumer_tag for e in w.sinks[0].take("consumer_cancelled")] == ["c"]
    assert [e.message.body for e in w.vhost.queues["q"].ready_entries() if e.message] == [b"a"]


def test_a_renewed_head_moves_the_deadline() -> None:
    w = World()
    w.consume(0, "c")
    w.publish(b"a")
    w.advance(6)
    w.publish(b"b")
    w.sessions[0].ack(1)
    w.advance(6)  # a was 12 s old, but it is acked; b is 6 s old
    assert w.sinks[0].take("consumer_cancelled") == []
    w.advance(4.5)
    assert len(w.sinks[0].take("consumer_cancelled")) == 1


def test_consumer_argument_overrides_queue_and_broker() -> None:
    w = World(default=100.0)
    w.vhost.declare_queue("q2", owner=w.owner, arguments={"x-consumer-timeout": 2000})
    session = w.sessions[0]
    session.consume("q2", "queue-arg", no_ack=False, exclusive=False, arguments={})
    session.consume(
        "q", "own", no_ack=False, exclusive=False, arguments={"x-consumer-timeout": 1000}
    )
    assert session.consumers["queue-arg"].timeout == 2.0
    assert session.consumers["own"].timeout == 1.0
    w.publish(b"x")
    w.advance(1.5)
    assert [e.consumer_tag for e in w.sinks[0].take("consumer_cancelled")] == ["own"]


def test_off_and_no_ack_are_never_timed() -> None:
    w = World(default=None)
    w.consume(0, "c")
    w.sessions[1].consume("q", "n", no_ack=True, exclusive=False, arguments={})
    w.publish(b"a", b"b")
    w.advance(10_000)
    assert len(w.timers) == 0
    assert w.sinks[0].take("consumer_cancelled") == []
    assert w.sinks[1].take("consumer_cancelled") == []


def test_cancelled_or_closed_consumer_deadline_is_a_no_op() -> None:
    w = World()
    w.consume(0, "c")
    w.publish(b"a")
    w.sessions[0].cancel("c")
    w.advance(20)
    assert w.sinks[0].take("consumer_cancelled") == []
    w.consume(1, "d")
    w.publish(b"b")
    w.sessions[1].close()
    w.advance(20)
    assert w.sinks[1].take("consumer_cancelled") == []


def test_multiple_ack_across_timed_out_tags() -> None:
    w = World()
    w.consume(0, "c")
    w.publish(b"a", b"b")
    w.advance(11)
    assert len(w.sinks[0].take("consumer_cancelled")) == 1
    w.sessions[0].ack(2, multiple=True)  # both were requeued: nothing to do, no error
    assert w.sessions[0].unacked == {}
