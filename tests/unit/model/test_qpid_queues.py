"""Qpid's queue arguments on a queue of the core (``model/qpid_args.py``): priority levels
with Qpid's mapping, fair shares, ring and reject limits, sequence numbers, the checks of
counts and sizes, and the delayed auto-delete."""

from __future__ import annotations

from typing import Any

import pytest

from leveret.errors import PreconditionFailed
from leveret.model.qpid_args import qpid_priority_level
from leveret.model.queue_args import parse_queue_args
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink, make_message

OWNER = object()


def declare(vhost: VirtualHost, name: str, **arguments: Any) -> None:
    vhost.declare_queue(name, owner=OWNER, arguments=arguments)


def put(vhost: VirtualHost, name: str, body: bytes, priority: int | None = None) -> bool:
    props = BasicProperties(priority=priority)
    return vhost.queues[name].enqueue(make_message(body, name, "", props))


def drain(vhost: VirtualHost, name: str) -> list[bytes]:
    queue = vhost.queues[name]
    out = []
    while (entry := queue.get(auto_settle=True)) is not None:
        out.append(entry.message.body)
    return out


def test_qpid_priority_levels_map_as_qpid_does() -> None:
    # PriorityQueue::getPriorityLevel: the levels centred on priorities 4 and 5.
    assert [qpid_priority_level(p, 10) for p in range(10)] == list(range(10))
    assert [qpid_priority_level(p, 5) for p in range(10)] == [0, 0, 0, 1, 2, 3, 4, 4, 4, 4]
    assert [qpid_priority_level(p, 3) for p in (0, 3, 4, 5, 9)] == [0, 0, 1, 2, 2]
    assert qpid_priority_level(None, 10) == 4  # no priority: Qpid's default, 4
    assert qpid_priority_level(16, 8) == 7


@pytest.mark.parametrize("key", ["x-qpid-priorities", "qpid.priorities"])
def test_priority_levels_deliver_highest_first(key: str) -> None:
    vhost = VirtualHost("/")
    declare(vhost, "q", **{key: 5})
    for i, p in enumerate([8, 9, 5, 1, 2, 2, 3, 4, 9, 7]):
        put(vhost, "q", f"{i}:{p}".encode(), p)
    got = [b.decode().split(":")[1] for b in drain(vhost, "q")]
    # Levels of 5: 6-9 are one level, 5, 4, 3 one each, 0-2 the lowest; FIFO within.
    assert got == ["8", "9", "9", "7", "5", "4", "3", "1", "2", "2"]


def test_fairshare_gives_each_level_its_share_per_round() -> None:
    vhost = VirtualHost("/")
    declare(vhost, "q", **{"x-qpid-priorities": 10, "x-qpid-fairshare": 2, "x-qpid-fairshare-3": 1})
    for i, p in enumerate([9, 9, 9, 9, 9, 5, 5, 5, 3, 3, 3]):
        put(vhost, "q", f"{p}{i}".encode(), p)
    assert drain(vhost, "q") == [
        b"90", b"91", b"55", b"56", b"38",  # round 1: 2 of 9, 2 of 5, 1 of 3
        b"92", b"93", b"57", b"39",  # round 2
        b"94", b"310",  # round 3
    ]  # fmt: skip


def test_ring_drops_the_oldest_of_the_lowest_priority() -> None:
    vhost = VirtualHost("/")
    declare(
        vhost,
        "q",
        **{"x-qpid-priorities": 10, "qpid.policy_type": "ring", "qpid.max_count": "3"},
    )
    for body, p in [(b"a", 5), (b"b", 1), (b"c", 9), (b"d", 1), (b"e", 5)]:
        assert put(vhost, "q", body, p)
    assert drain(vhost, "q") == [b"c", b"a", b"e"]


def test_ring_without_priorities_drops_the_oldest_and_sequence_numbers_show_the_gap() -> None:
    vhost = VirtualHost("/")
    declare(
        vhost,
        "q",
        **{"qpid.policy_type": "ring", "qpid.max_count": 2, "qpid.queue_msg_sequence": "seq"},
    )
    for body in (b"1", b"2", b"3", b"4"):
        put(vhost, "q", body)
    entries = vhost.queues["q"].ready_entries()
    assert [e.message.body for e in entries] == [b"3", b"4"]
    assert [(e.message.headers or {})["seq"] for e in entries] == [3, 4]


def test_a_limit_without_a_policy_rejects_as_qpid_does() -> None:
    vhost = VirtualHost("/")
    declare(vhost, "q", **{"qpid.max_count": 2})
    assert put(vhost, "q", b"1")
    assert put(vhost, "q", b"2")
    assert not put(vhost, "q", b"3")
    assert drain(vhost, "q") == [b"1", b"2"]


def test_flow_to_disk_sets_no_limit_and_self_destruct_deletes_the_queue() -> None:
    vhost = VirtualHost("/")
    declare(vhost, "f", **{"qpid.max_count": 1, "qpid.policy_type": "flow_to_disk"})
    assert not vhost.queues["f"].uses_features
    for body in (b"1", b"2", b"3"):
        assert put(vhost, "f", body)
    declare(vhost, "s", **{"qpid.max_count": 1, "qpid.policy_type": "self-destruct"})
    put(vhost, "s", b"1")
    put(vhost, "s", b"2")
    assert "s" not in vhost.queues


@pytest.mark.parametrize(
    "arguments",
    [
        {"qpid.max_count": -1},
        {"qpid.max_size": -1},
        {"qpid.max_size": "foo"},
        {"qpid.max_count": "foo"},
        {"qpid.max_size": 3.14159},
        {"qpid.max_count": "2222222.22222"},
        {"qpid.policy_type": "sometimes"},
    ],
)
def test_bad_limits_are_refused_and_no_queue_is_made(arguments: dict[str, object]) -> None:
    vhost = VirtualHost("/")
    with pytest.raises(PreconditionFailed):
        vhost.declare_queue("q", owner=OWNER, arguments=arguments)
    assert "q" not in vhost.queues


def test_counts_may_be_strings_of_digits() -> None:
    config = parse_queue_args({"qpid.max_count": "3", "qpid.max_size": "0"})
    assert (config.max_length, config.max_length_bytes, config.overflow) == (3, 0, "reject-publish")


def test_rabbitmq_arguments_win_over_qpid_ones() -> None:
    config = parse_queue_args({"x-max-length": 7, "qpid.max_count": 3, "x-max-priority": 3})
    assert config.max_length == 7
    config = parse_queue_args({"x-max-priority": 3, "x-qpid-priorities": 10})
    assert (config.max_priority, config.priority_levels) == (3, None)


def test_an_auto_delete_queue_with_a_timeout_goes_only_if_left_unused() -> None:
    vhost = VirtualHost("/")
    vhost.declare_queue(
        "q", owner=OWNER, auto_delete=True, arguments={"qpid.auto_delete_timeout": 3}
    )
    session = Session(vhost, OWNER, RecordingSink())
    session.consume("q", "c1", no_ack=True, exclusive=False, arguments={})
    vhost.timers.now = 10.0
    session.cancel("c1")
    assert "q" in vhost.queues  # not at once
    vhost.timers.expire(12.0)
    session.consume("q", "c2", no_ack=True, exclusive=False, arguments={})
    vhost.timers.expire(13.5)
    assert "q" in vhost.queues  # used again before the timeout: it stays
    vhost.timers.now = 20.0
    session.cancel("c2")
    vhost.timers.expire(22.9)
    assert "q" in vhost.queues
    vhost.timers.expire(23.0)
    assert "q" not in vhost.queues
