"""Unit tests of the queue features with a controllable clock (model.timers.Timers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from leveret.convert.amqp091 import wire_message
from leveret.errors import PreconditionFailed
from leveret.model.dead_letter import is_cycle
from leveret.model.queues import parse_queue_args
from leveret.model.queues.args import PLAIN
from leveret.model.timers import Timers
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink

if TYPE_CHECKING:
    from leveret.model.message import Message


def msg(body: bytes, key: str, **props: object) -> Message:
    raw = BasicProperties(**props).encode()  # type: ignore[arg-type]
    return wire_message("", key, raw, body)


class World:
    def __init__(self) -> None:
        self.timers = Timers()
        self.vhost = VirtualHost("/", timers=self.timers)
        self.owner = object()
        self.sink = RecordingSink()
        self.session = Session(self.vhost, self.owner, self.sink)

    def declare(self, name: str, **args: object) -> None:
        self.vhost.declare_queue(name, owner=self.owner, arguments=args)

    def publish(self, key: str, body: bytes, **props: object) -> None:
        self.session.publish("", key, msg(body, key, **props))

    def bodies(self, name: str) -> list[bytes]:
        return [e.message.body for e in self.vhost.queues[name].ready_entries()]

    def advance(self, seconds: float) -> None:
        self.timers.expire(self.timers.now + seconds)


def test_plain_arguments_are_not_special() -> None:
    assert parse_queue_args({}) is PLAIN
    assert not parse_queue_args({"x-dead-letter-exchange": "dlx"}).special
    assert parse_queue_args({"x-message-ttl": 5}).special


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ({"x-message-ttl": True}, '"expected integer, got bool"'),
        ({"x-expires": -5}, "{value_negative,-5}"),
        ({"x-overflow": 1}, "{unacceptable_type,signedint}"),
        ({"x-queue-type": "quorum", "x-max-priority": 5}, "of queue type rabbit_quorum_queue"),
    ],
)
def test_invalid_arguments(args: dict[str, object], text: str) -> None:
    with pytest.raises(PreconditionFailed) as exc:
        parse_queue_args(args, queue="q", durable=True)
    assert text in exc.value.reply_text


def test_stream_is_accepted_durable_only() -> None:
    assert parse_queue_args({"x-queue-type": "stream"}, durable=True).queue_type == "stream"
    with pytest.raises(PreconditionFailed, match="non-durable"):
        parse_queue_args({"x-queue-type": "stream"}, durable=False)


def test_ttl_expires_head_only_when_due_and_dead_letters() -> None:
    w = World()
    w.declare("dead")
    w.declare("q", **{"x-message-ttl": 1000, "x-dead-letter-exchange": ""})
    w.vhost.declare_queue(
        "q2",
        owner=w.owner,
        arguments={
            "x-message-ttl": 1000,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dead",
        },
    )
    w.publish("q2", b"a")
    w.advance(0.5)
    w.publish("q2", b"b")
    assert w.timers.next_deadline() is not None
    w.advance(0.6)
    assert w.bodies("q2") == [b"b"]
    assert w.bodies("dead") == [b"a"]
    headers = w.vhost.queues["dead"].ready_entries()[0].message.headers
    assert headers is not None
    assert headers["x-first-death-reason"] == "expired"
    w.advance(1.0)
    assert w.bodies("dead") == [b"a", b"b"]


def test_expired_message_is_never_delivered() -> None:
    w = World()
    w.declare("q", **{"x-message-ttl": 100})
    w.publish("q", b"old")
    w.timers.now += 1  # no timer fired yet
    w.session.consume("q", "c", no_ack=True, exclusive=False, arguments={})
    assert w.sink.deliveries() == []
    assert w.bodies("q") == []


def test_per_message_expiration_on_plain_queue() -> None:
    w = World()
    w.declare("q")
    w.publish("q", b"x", expiration="10")
    w.publish("q", b"y")
    w.advance(0.02)
    assert w.bodies("q") == [b"y"]


def test_queue_expires_when_unused() -> None:
    w = World()
    w.declare("q", **{"x-expires": 1000})
    w.advance(0.6)
    w.declare("q", **{"x-expires": 1000})  # a redeclare is a use
    w.advance(0.6)
    assert "q" in w.vhost.queues
    w.advance(0.5)
    assert "q" not in w.vhost.queues


def test_queue_with_consumer_does_not_expire_until_it_leaves() -> None:
    w = World()
    w.declare("q", **{"x-expires": 1000})
    w.session.consume("q", "c", no_ack=True, exclusive=False, arguments={})
    w.advance(5)
    assert "q" in w.vhost.queues
    w.session.cancel("c")
    w.advance(0.9)
    assert "q" in w.vhost.queues
    w.advance(0.2)
    assert "q" not in w.vhost.queues


def test_priorities_and_requeue_order() -> None:
    w = World()
    w.declare("q", **{"x-max-priority": 3})
    w.publish("q", b"p1", priority=1)
    w.publish("q", b"p0")
    w.publish("q", b"p3", priority=3)
    w.publish("q", b"p9", priority=9)
    assert w.bodies("q") == [b"p3", b"p9", b"p1", b"p0"]
    tag, entry, _ = w.session.get("q", no_ack=False)  # type: ignore[misc]
    assert entry.message.body == b"p3"
    w.session.reject(tag, requeue=True)
    assert w.bodies("q") == [b"p3", b"p9", b"p1", b"p0"]


def test_reject_publish_nacks_under_confirms() -> None:
    w = World()
    w.declare("q", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    w.session.select_confirm()
    w.publish("q", b"1")
    w.publish("q", b"2")
    w.session.flush_confirms()
    confirms = [(e.delivery_tag, e.ack) for e in w.sink.take("confirm")]
    assert confirms == [(1, True), (2, False)]


def test_drop_head_dead_letters_maxlen() -> None:
    w = World()
    w.declare("dead")
    w.vhost.declare_queue(
        "q",
        owner=w.owner,
        arguments={
            "x-max-length": 1,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dead",
        },
    )
    w.publish("q", b"1")
    w.publish("q", b"2")
    assert w.bodies("q") == [b"2"]
    assert w.bodies("dead") == [b"1"]


def test_x_death_counts_and_cycle_rules() -> None:
    deaths: list[object] = [
        {"queue": "a", "reason": "expired"},
        {"queue": "b", "reason": "expired"},
    ]
    assert is_cycle("b", deaths)
    assert not is_cycle("c", deaths)
    assert not is_cycle("b", [{"queue": "a", "reason": "rejected"}, *deaths[1:]])


def test_single_active_consumer_and_consumer_priority() -> None:
    w = World()
    w.declare("q", **{"x-single-active-consumer": True})
    w.session.consume("q", "a", no_ack=True, exclusive=False, arguments={})
    w.session.consume("q", "b", no_ack=True, exclusive=False, arguments={})
    w.publish("q", b"1")
    w.publish("q", b"2")
    assert [e.consumer_tag for e in w.sink.deliveries()] == ["a", "a"]
    w.session.cancel("a")
    w.publish("q", b"3")
    assert [e.consumer_tag for e in w.sink.deliveries()] == ["b"]
    w.declare("p")
    w.session.consume("p", "low", no_ack=True, exclusive=False, arguments={})
    w.session.consume("p", "high", no_ack=True, exclusive=False, arguments={"x-priority": 5})
    w.publish("p", b"1")
    w.publish("p", b"2")
    assert [e.consumer_tag for e in w.sink.deliveries()] == ["high", "high"]


def test_quorum_delivery_limit() -> None:
    w = World()
    w.vhost.declare_queue(
        "q",
        owner=w.owner,
        durable=True,
        arguments={"x-queue-type": "quorum", "x-delivery-limit": 0},
    )
    w.publish("q", b"x")
    tag, entry, _ = w.session.get("q", no_ack=False)  # type: ignore[misc]
    assert entry.message.headers == {"x-delivery-count": 0}
    w.session.reject(tag, requeue=True)
    assert w.bodies("q") == []
