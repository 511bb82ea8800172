"""``server/message_ops.py`` and the queue calls under it (``Queue.browse``, ``Queue.take``)
without sockets: browsing leaves a queue as it was (paged tails and priorities included),
moves take exactly what they put elsewhere, filters and selectors refuse bad JSON."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from leveret.model.delayed import DelayQueue
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server import message_ops as tools
from leveret.server.amqp091.message import wire_message
from leveret.testing.pager import MemoryPager

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.model.queue import Queue


def msg(body: bytes, key: str = "q", **props: Any) -> Message:
    return wire_message("", key, BasicProperties(**props).encode(), body)


def filled(vhost: VirtualHost, name: str, count: int, **args: object) -> Queue:
    queue = vhost.declare_queue(name, owner=None, arguments=args)
    for i in range(count):
        queue.enqueue(msg(b"m%d" % i, priority=i % 3, headers={"n": i, "odd": bool(i % 2)}))
    return queue


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_browse_reads_a_paged_tail_and_changes_nothing() -> None:
    vhost = VirtualHost("/")
    vhost.pager = MemoryPager()
    queue = vhost.declare_queue("deep", owner=None)
    queue.pager = vhost.pager
    queue.resident_max, queue.resident_low, queue.page_messages = 8, 4, 4
    for i in range(30):
        queue.enqueue(msg(b"m%d" % i))
    assert queue.paged_count > 0
    before = (len(queue.ready), queue.paged_count, queue.message_count)
    rows = run(tools.browse(queue, {"count": 100}))
    assert [r["payload"] for r in rows] == [f"m{i}" for i in range(30)]
    assert [r["position"] for r in rows] == list(range(30))
    assert (len(queue.ready), queue.paged_count, queue.message_count) == before
    rows = run(tools.browse(queue, {"offset": 20, "count": 3}))
    assert [r["payload"] for r in rows] == ["m20", "m21", "m22"]
    # A move from the head brings the pages back as it goes.
    target = vhost.declare_queue("target", owner=None)
    assert run(tools.move(vhost, queue, {"to_queue": "target", "limit": 25}))["moved"] == 25
    assert [e.message.body for e in target.ready] == [b"m%d" % i for i in range(25)]
    assert [e.message.body for e in queue.browse()] == [b"m%d" % i for i in range(25, 30)]


def test_browse_and_take_in_a_priority_queue() -> None:
    vhost = VirtualHost("/")
    queue = filled(vhost, "prio", 6, **{"x-max-priority": 2})
    order = [e.message.body for e in queue.browse()]
    assert order == [b"m2", b"m5", b"m1", b"m4", b"m0", b"m3"]  # priority order, then FIFO
    entry = next(e for e in queue.browse() if e.message.body == b"m1")
    assert queue.take(entry)
    assert not queue.take(entry)
    assert [e.message.body for e in queue.browse()] == [b"m2", b"m5", b"m4", b"m0", b"m3"]
    assert queue.message_count == 5


def test_filters() -> None:
    vhost = VirtualHost("/")
    queue = filled(vhost, "q", 10)
    queue.enqueue(msg(b"tagged", key="other", message_id="abc", correlation_id="c-1"))

    def found(flt: dict[str, Any]) -> list[str]:
        return [r["payload"] for r in run(tools.browse(queue, {"filter": flt}))]

    assert found({"headers": {"odd": True}}) == ["m1", "m3", "m5", "m7", "m9"]
    assert found({"headers": {"n": "4"}}) == ["m4"]  # as text too
    assert found({"properties": {"message_id": "abc"}}) == ["tagged"]
    assert found({"routing_key": "other"}) == ["tagged"]
    assert found({"body_contains": "agg"}) == ["tagged"]
    assert found({"redelivered": True}) == []
    assert (
        run(tools.browse(queue, {"count": 2, "filter": {"headers": {"odd": False}}}))[1]["position"]
        == 2
    )
    for bad, text in (
        ({"filter": []}, "filter must be an object"),
        ({"filter": {"properties": {"colour": "red"}}}, "unknown property 'colour'"),
        ({"filter": {"headers": []}}, "headers must be an object"),
        ({"count": "many"}, "count must be an integer"),
        ({"count": -1}, "count must be at least 0"),
        ({"encoding": "hex"}, "encoding must be auto or base64"),
    ):
        with pytest.raises(tools.ToolError, match=text):
            run(tools.browse(queue, bad))


def test_move_refused_by_the_target_goes_back_to_the_source() -> None:
    vhost = VirtualHost("/")
    source = filled(vhost, "src", 3)
    vhost.declare_queue(
        "full", owner=None, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
    )
    result = run(tools.move(vhost, source, {"to_queue": "full"}))
    assert result == {"moved": 1, "unroutable": 0, "refused": 2}
    assert [e.message.body for e in vhost.queues["full"].ready] == [b"m0"]
    assert [e.message.body for e in source.ready] == [b"m1", b"m2"]


def test_move_errors() -> None:
    vhost = VirtualHost("/")
    source = filled(vhost, "src", 1)
    for body, text in (
        ({}, "either to_queue or to_exchange"),
        ({"to_queue": "src"}, "the queue itself"),
        ({"to_queue": "nope"}, "no queue 'nope'"),
        ({"to_exchange": "nope"}, "no exchange 'nope'"),
        ({"to_exchange": "amq.direct", "routing_key": 5}, "routing_key must be a string"),
    ):
        with pytest.raises(tools.ToolError, match=text):
            run(tools.move(vhost, source, body))


def test_replay_reads_the_newest_death() -> None:
    vhost = VirtualHost("/")
    vhost.declare_queue("a", owner=None)
    vhost.declare_queue("b", owner=None)
    dlq = vhost.declare_queue("dlq", owner=None)
    deaths = [{"queue": "b", "reason": "expired"}, {"queue": "a", "reason": "rejected"}]
    dlq.enqueue(msg(b"went b", headers={"x-death": deaths}))
    dlq.enqueue(msg(b"first only", headers={"x-first-death-queue": "a"}))
    dlq.enqueue(msg(b"gone", headers={"x-death": [{"queue": "deleted"}]}))
    result = run(tools.replay(vhost, dlq, {}))
    assert result == {"moved": 2, "unroutable": 0, "refused": 0, "skipped": 1,
                      "queues": {"b": 1, "a": 1}}  # fmt: skip
    assert [e.message.body for e in vhost.queues["a"].ready] == [b"first only"]
    assert [e.message.body for e in vhost.queues["b"].ready] == [b"went b"]
    assert [e.message.body for e in dlq.ready] == [b"gone"]


def test_delayed_selectors_and_rows() -> None:
    vhost = VirtualHost("/")
    vhost.declare_exchange("d", "x-delayed-message", arguments={"x-delayed-type": "direct"})
    store = tools.delay_store(vhost, "d")
    assert isinstance(store, DelayQueue)
    store.enqueue(msg(b"x" * 500, key="k", message_id="m", headers={"x-delay": 5000}))
    rows = tools.pending(store, {"preview": 10})
    assert rows[0]["payload"] == "x" * 10
    assert rows[0]["payload_bytes"] == 500
    assert rows[0]["delay"] == 5000
    for body, text in (
        ({}, "say which messages"),
        ({"ids": "1"}, "ids must be a list of integers"),
        ({"message_id": 5}, "message_id must be a string"),
        ({"all": "yes"}, "all must be true or false"),
    ):
        with pytest.raises(tools.ToolError, match=text):
            tools.cancel(store, body)
    with pytest.raises(tools.ToolError, match="either delay"):
        tools.reschedule(store, {"all": True})
    with pytest.raises(tools.ToolError, match="delay must be"):
        tools.reschedule(store, {"all": True, "delay": 2**40})
    with pytest.raises(tools.ToolError, match="not x-delayed-message"):
        tools.delay_store(vhost, "amq.direct")
    assert tools.cancel(store, {"all": True}) == {"cancelled": 1}
