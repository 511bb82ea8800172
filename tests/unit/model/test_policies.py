"""Policies and operator policies (model/policies.py) and their live application by the
vhost: matching, priority, RabbitMQ's precedence between arguments, policy and operator
policy, and queues that change behaviour without being redeclared."""

from __future__ import annotations

import pytest

from leveret.convert.amqp091 import wire_message
from leveret.model.policies import (
    PolicyError,
    effective_definition,
    effective_queue_arguments,
    make_policy,
    select,
)
from leveret.model.queues import CLASSIC, STREAM
from leveret.model.timers import Timers
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink


def _msg(body: bytes, key: str) -> object:
    return wire_message("", key, BasicProperties().encode(), body)


class World:
    def __init__(self) -> None:
        self.timers = Timers()
        self.vhost = VirtualHost("/", timers=self.timers)
        self.owner = object()
        self.session = Session(self.vhost, self.owner, RecordingSink())

    def policy(self, name: str, pattern: str, definition: dict[str, object], **kw: object) -> None:
        policy = make_policy("/", name, pattern, definition, **kw)  # type: ignore[arg-type]
        table = self.vhost.operator_policies if kw.get("operator") else self.vhost.policies
        table[name] = policy
        self.vhost.apply_policies()

    def publish(self, key: str, count: int) -> None:
        for i in range(count):
            self.session.publish("", key, _msg(b"m%d" % i, key))  # type: ignore[arg-type]

    def bodies(self, name: str) -> list[bytes]:
        return [e.message.body for e in self.vhost.queues[name].ready_entries()]


def test_pattern_apply_to_and_priority_choose_one_policy() -> None:
    low = make_policy("/", "low", "^a", {"max-length": 5}, 0, "all")
    high = make_policy("/", "high", "^ab", {"max-length": 1}, 10, "queues")
    exchanges = make_policy("/", "x", ".*", {"alternate-exchange": "ae"}, 99, "exchanges")
    policies = [low, high, exchanges]
    assert select(policies, "abc", "queue") is high
    assert select(policies, "acc", "queue") is low
    assert select(policies, "zzz", "queue") is None
    assert select(policies, "abc", "exchange") is exchanges
    streams = make_policy("/", "s", ".*", {"max-age": "1D"}, 100, "streams")
    assert select([streams, low], "abc", "queue", "classic") is low
    assert select([streams, low], "abc", "queue", "stream") is streams


@pytest.mark.parametrize(
    ("definition", "kw", "text"),
    [
        ({"max-length": "5"}, {}, "max-length value must be an integer"),
        ({"expires": 0}, {}, "expires value must be positive"),
        ({"min-in-sync": 0}, {}, "min-in-sync value must be positive"),
        ({"overflow": "sideways"}, {}, "overflow value"),
        ({"dead-letter-routing-key": "k"}, {}, "requires dead-letter-exchange"),
        ({"dead-letter-exchange": "dlx"}, {"operator": True}, "not an operator policy key"),
        ({}, {}, "non-empty JSON object"),
    ],
)
def test_bad_definitions_are_refused(
    definition: dict[str, object], kw: dict[str, object], text: str
) -> None:
    with pytest.raises(PolicyError, match=text):
        make_policy("/", "p", ".*", definition, **kw)  # type: ignore[arg-type]


def test_bad_pattern_and_apply_to_are_refused() -> None:
    with pytest.raises(PolicyError, match="not a valid regular expression"):
        make_policy("/", "p", "(", {"max-length": 1})
    with pytest.raises(PolicyError, match="apply-to"):
        make_policy("/", "p", ".*", {"max-length": 1}, 0, "sometimes")


def test_operator_policy_min_wins_and_arguments_precede_policies() -> None:
    policy = make_policy("/", "p", ".*", {"max-length": 10, "dead-letter-exchange": "pol"})
    operator = make_policy("/", "o", ".*", {"max-length": 3, "message-ttl": 500}, operator=True)
    merged = effective_definition(policy, operator)
    assert merged == {"max-length": 3, "dead-letter-exchange": "pol", "message-ttl": 500}
    args = effective_queue_arguments(
        {"x-max-length": 7, "x-dead-letter-exchange": "arg", "x-message-ttl": 100},
        merged,
        CLASSIC.policy_keys,
    )
    # The smaller of argument and policy for limits; the argument for the others.
    assert args == {"x-max-length": 3, "x-dead-letter-exchange": "arg", "x-message-ttl": 100}
    # A stream takes none of these keys.
    assert effective_queue_arguments({}, merged, STREAM.policy_keys) == {}


def test_policy_applies_live_to_an_existing_queue_and_is_removed_live() -> None:
    w = World()
    w.vhost.declare_queue("orders", owner=w.owner)
    w.publish("orders", 5)
    w.policy("cap", "^ord", {"max-length": 2}, apply_to="queues")
    queue = w.vhost.queues["orders"]
    assert w.bodies("orders") == [b"m3", b"m4"]  # the head was dropped at once
    assert queue.policy == "cap"
    assert queue.policy_definition == {"max-length": 2}
    w.publish("orders", 3)
    assert w.bodies("orders") == [b"m1", b"m2"]
    del w.vhost.policies["cap"]
    w.vhost.apply_policies()
    assert w.vhost.queues["orders"].policy is None
    w.publish("orders", 3)
    assert len(w.bodies("orders")) == 5


def test_policy_ttl_and_dead_lettering_apply_to_new_queues() -> None:
    w = World()
    w.policy(
        "ttl",
        "^t\\.",
        {"message-ttl": 1000, "dead-letter-exchange": "", "dead-letter-routing-key": "dead"},
    )
    w.vhost.declare_queue("t.work", owner=w.owner)
    w.vhost.declare_queue("dead", owner=w.owner)
    assert w.vhost.queues["t.work"].config.message_ttl == 1.0
    assert w.vhost.queues["dead"].policy is None
    w.publish("t.work", 1)
    w.timers.expire(w.timers.now + 2)
    assert w.bodies("t.work") == []
    assert w.bodies("dead") == [b"m0"]


def test_operator_policy_caps_a_queue_argument() -> None:
    w = World()
    w.vhost.declare_queue("big", owner=w.owner, arguments={"x-max-length": 100})
    w.policy("cap", ".*", {"max-length": 1}, operator=True)
    queue = w.vhost.queues["big"]
    assert queue.operator_policy == "cap"
    assert queue.config.max_length == 1
    assert queue.arguments == {"x-max-length": 100}  # what the client declared is kept
    w.publish("big", 3)
    assert w.bodies("big") == [b"m2"]


def test_exchange_alternate_from_policy_unless_argument() -> None:
    w = World()
    w.vhost.declare_exchange("x1", "direct")
    w.vhost.declare_exchange("x2", "direct", arguments={"alternate-exchange": "mine"})
    w.policy("ae", "^x", {"alternate-exchange": "ae"}, apply_to="exchanges")
    assert w.vhost.exchanges["x1"].alternate == "ae"
    assert w.vhost.exchanges["x1"].policy == "ae"
    assert w.vhost.exchanges["x2"].alternate == "mine"
    w.vhost.declare_exchange("x3", "fanout")
    assert w.vhost.exchanges["x3"].alternate == "ae"


def test_stream_retention_from_a_policy() -> None:
    w = World()
    w.vhost.declare_queue(
        "events", owner=w.owner, durable=True, arguments={"x-queue-type": "stream"}
    )
    w.policy("keep", "^events$", {"max-age": "1D", "message-ttl": 5}, apply_to="streams")
    stream = w.vhost.queues["events"]
    assert stream.policy == "keep"
    assert stream.config.max_age == 86400
    assert stream.config.message_ttl is None  # not a stream key: ignored
    w.policy("keep", "^events$", {"max-length-bytes": 1000}, apply_to="streams")
    config = w.vhost.queues["events"].config
    assert config.max_age is None
    assert config.max_length_bytes == 1000


def test_min_in_sync_reaches_replicated_queues_by_argument_or_policy_not_classic_ones() -> None:
    w = World()
    w.vhost.declare_queue("q1", owner=w.owner, durable=True, arguments={"x-queue-type": "quorum"})
    w.vhost.declare_queue("s1", owner=w.owner, durable=True, arguments={"x-queue-type": "stream"})
    w.vhost.declare_queue("c1", owner=w.owner)

    def least(name: str) -> int | None:
        return w.vhost.queues[name].config.min_in_sync

    assert least("q1") is None  # a majority
    w.policy("least", ".*", {"min-in-sync": 1})
    assert (least("q1"), least("s1"), least("c1")) == (1, 1, None)
    w.vhost.declare_queue(
        "q2",
        owner=w.owner,
        durable=True,
        arguments={"x-queue-type": "quorum", "x-min-in-sync": 2},
    )
    assert least("q2") == 2
