"""A replicated quorum queue's leader serves only until the instant the cluster gives it
(``QuorumQueue.serve_until``, model clock; docs/cluster.md, "The leader's serving rule"):
past it nothing is delivered, got or settled, whatever input comes first, and what waited
goes once the instant moves on. No sockets: the clock is the one the shell would set."""

from __future__ import annotations

import math

from leveret.model.queues.quorum import QuorumQueue
from leveret.model.timers import Timers
from leveret.model.vhost import VirtualHost
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink
from leveret.testing.client import make_message


class World:
    def __init__(self, **arguments: object) -> None:
        self.timers = Timers()
        self.timers.now = 100.0
        self.vhost = VirtualHost("/", timers=self.timers)
        self.owner = object()
        self.sink = RecordingSink()
        self.session = Session(self.vhost, self.owner, self.sink)
        self.vhost.declare_queue(
            "q", owner=None, durable=True, arguments={"x-queue-type": "quorum", **arguments}
        )
        queue = self.vhost.queues["q"]
        assert isinstance(queue, QuorumQueue)
        self.queue = queue

    def publish(self, *bodies: bytes) -> None:
        for body in bodies:
            self.session.publish("", "q", make_message(body, routing_key="q"))

    def ready(self) -> list[bytes]:
        return [e.message.body for e in self.queue.ready_entries()]

    def delivered(self) -> list[bytes]:
        return [e.body for e in self.sink.deliveries()]


def test_on_one_node_a_quorum_queue_always_serves() -> None:
    w = World()
    assert w.queue.serve_until == math.inf
    w.timers.now = 1e12
    w.session.consume("q", "c", no_ack=False, exclusive=False, arguments={})
    w.publish(b"1")
    assert w.delivered() == [b"1"]


def test_past_its_instant_a_leader_delivers_nothing_and_its_consumers_wait() -> None:
    w = World()
    w.queue.serve(110.0)
    w.session.consume("q", "c", no_ack=False, exclusive=False, arguments={})
    w.publish(b"1")
    first = w.sink.deliveries()
    assert [e.body for e in first] == [b"1"]
    # The process was stopped past its lease: the first input after it carries a clock
    # past the instant, and no timer ran in between.
    w.timers.now = 112.0
    w.publish(b"2", b"3")
    assert w.delivered() == []
    assert w.ready() == [b"2", b"3"]
    assert w.session.get("q", no_ack=False) is None
    assert w.queue.n_get_empty == 1
    # An ack taken while not serving is held: the message stays unsettled here.
    w.session.ack(first[0].delivery_tag)
    assert w.queue.unacked_count == 1
    assert w.sink.take("consumer_cancelled") == []  # consumers are not cancelled
    # The lease was renewed (a keepalive answered): what waited goes, in order.
    w.queue.serve(120.0)
    assert w.queue.unacked_count == 2
    assert w.delivered() == [b"2", b"3"]
    assert w.ready() == []


def test_the_instant_is_compared_on_every_delivery_path() -> None:
    w = World()
    w.queue.serve(110.0)
    w.publish(b"1", b"2")
    w.timers.now = 110.0  # the instant itself is past: the lease may be gone in etcd
    w.session.consume("q", "c", no_ack=True, exclusive=False, arguments={})
    assert w.delivered() == []
    w.queue.dispatch()
    assert w.delivered() == []
    assert w.queue.acquire(w.queue.ready_entries()[0]) is None
    assert w.ready() == [b"1", b"2"]
    w.timers.now = 109.0
    w.queue.dispatch()
    assert w.delivered() == [b"1", b"2"]


def test_stopped_at_once_and_a_deposed_leader_applies_nothing_it_held() -> None:
    w = World(**{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
    w.vhost.declare_queue("dead", owner=None, durable=True)
    w.session.consume("q", "c", no_ack=False, exclusive=False, arguments={})
    w.publish(b"1", b"2")
    tags = [e.delivery_tag for e in w.sink.deliveries()]
    assert len(tags) == 2
    w.queue.serve(-math.inf)  # the lease is known lost (etcd said so)
    w.session.ack(tags[0])
    w.session.reject(tags[1], requeue=False)
    w.publish(b"3")
    w.queue.serve(-math.inf)  # told again: still nothing applied
    assert w.queue.unacked_count == 2
    assert w.vhost.queues["dead"].message_count == 0
    assert w.delivered() == []
    # Had it stayed leader, the held ack and reject apply in order, then delivery resumes.
    w.queue.serve(200.0)
    assert w.queue.unacked_count == 1
    assert [e.message.body for e in w.vhost.queues["dead"].ready_entries()] == [b"2"]
    assert w.delivered() == [b"3"]
