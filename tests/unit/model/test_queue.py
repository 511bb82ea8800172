"""Unit tests of the classic queue: dispatch, round-robin, requeue positions, consumers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.model.vhost import VirtualHost
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink, make_message
from tests.queue_support import classic

if TYPE_CHECKING:
    from leveret.model.queues.base import Queue


class World:
    """One vhost with queue ``q`` and any number of sessions of one owner."""

    def __init__(self, *, auto_delete: bool = False) -> None:
        self.vhost = VirtualHost("/")
        self.owner = object()
        self.queue = classic(
            self.vhost.declare_queue("q", owner=self.owner, auto_delete=auto_delete)
        )

    def session(self) -> tuple[Session, RecordingSink]:
        sink = RecordingSink()
        return Session(self.vhost, self.owner, sink), sink

    def publish(self, session: Session, *bodies: bytes) -> None:
        for body in bodies:
            session.publish("", "q", make_message(body, "q"))


def ready_bodies(queue: Queue) -> list[bytes]:
    return [entry.message.body for entry in queue.ready_entries()]


def test_publish_without_consumers_keeps_fifo_order() -> None:
    w = World()
    s, _ = w.session()
    w.publish(s, b"1", b"2", b"3")
    assert ready_bodies(w.queue) == [b"1", b"2", b"3"]
    assert w.queue.message_count == 3
    assert [e.seq for e in w.queue.ready] == sorted(e.seq for e in w.queue.ready)


def test_round_robin_across_consumers_of_different_sessions() -> None:
    w = World()
    sessions = [w.session() for _ in range(3)]
    for i, (s, _) in enumerate(sessions):
        s.consume("q", f"c{i}", no_ack=True, exclusive=False, arguments={})
    publisher, _ = w.session()
    w.publish(publisher, *[str(i).encode() for i in range(6)])
    got = [[e.body for e in sink.deliveries()] for _, sink in sessions]
    assert got == [[b"0", b"3"], [b"1", b"4"], [b"2", b"5"]]
    assert w.queue.message_count == 0


def test_round_robin_within_one_session_uses_consumer_tags() -> None:
    w = World()
    s, sink = w.session()
    s.consume("q", "a", no_ack=True, exclusive=False, arguments={})
    s.consume("q", "b", no_ack=True, exclusive=False, arguments={})
    w.publish(s, b"1", b"2", b"3", b"4")
    assert [(e.consumer_tag, e.body) for e in sink.deliveries()] == [
        ("a", b"1"),
        ("b", b"2"),
        ("a", b"3"),
        ("b", b"4"),
    ]


def test_round_robin_skips_a_consumer_without_credit() -> None:
    w = World()
    s1, sink1 = w.session()
    s1.set_qos(0, 1, False)
    s1.consume("q", "busy", no_ack=False, exclusive=False, arguments={})
    s2, sink2 = w.session()
    s2.consume("q", "free", no_ack=True, exclusive=False, arguments={})
    w.publish(s2, b"1", b"2", b"3")
    assert [e.body for e in sink1.deliveries()] == [b"1"]
    assert [e.body for e in sink2.deliveries()] == [b"2", b"3"]


def test_messages_wait_when_no_consumer_has_credit_then_flow_in_order() -> None:
    w = World()
    s, sink = w.session()
    s.set_qos(0, 1, False)
    s.consume("q", "c", no_ack=False, exclusive=False, arguments={})
    w.publish(s, b"1", b"2", b"3")
    first = sink.deliveries()
    assert [e.body for e in first] == [b"1"]
    assert ready_bodies(w.queue) == [b"2", b"3"]
    assert w.queue.unacked_count == 1
    s.ack(first[0].delivery_tag)
    assert [e.body for e in sink.deliveries()] == [b"2"]
    assert ready_bodies(w.queue) == [b"3"]


def test_cancel_keeps_round_robin_fair() -> None:
    w = World()
    s, sink = w.session()
    for tag in ("a", "b", "c"):
        s.consume("q", tag, no_ack=True, exclusive=False, arguments={})
    w.publish(s, b"1")  # to a
    assert s.cancel("a")
    w.publish(s, b"2", b"3")
    assert [(e.consumer_tag, e.body) for e in sink.deliveries()] == [
        ("a", b"1"),
        ("b", b"2"),
        ("c", b"3"),
    ]


def test_cancel_of_the_last_consumer_in_turn_wraps_round_robin() -> None:
    w = World()
    s, sink = w.session()
    for tag in ("a", "b"):
        s.consume("q", tag, no_ack=True, exclusive=False, arguments={})
    w.publish(s, b"1")  # a; b is next
    assert s.cancel("b")
    w.publish(s, b"2")
    assert [(e.consumer_tag, e.body) for e in sink.deliveries()] == [("a", b"1"), ("a", b"2")]


def test_unknown_cancel_is_not_an_error() -> None:
    w = World()
    s, _ = w.session()
    assert not s.cancel("nope")


def test_requeue_goes_back_to_the_original_position_marked_redelivered() -> None:
    w = World()
    s, _ = w.session()
    w.publish(s, b"1", b"2", b"3", b"4", b"5")
    tags = {}
    for body in (b"1", b"2", b"3"):
        got = s.get("q", no_ack=False)
        assert got is not None
        tag, entry, _left = got
        assert entry.message.body == body
        tags[body] = tag
    assert ready_bodies(w.queue) == [b"4", b"5"]
    s.reject(tags[b"2"], requeue=True)
    assert ready_bodies(w.queue) == [b"2", b"4", b"5"]
    s.reject(tags[b"3"], requeue=True)  # between 2 and 4
    assert ready_bodies(w.queue) == [b"2", b"3", b"4", b"5"]
    s.reject(tags[b"1"], requeue=True)
    assert ready_bodies(w.queue) == [b"1", b"2", b"3", b"4", b"5"]
    assert [e.redelivered for e in w.queue.ready] == [True, True, True, False, False]
    assert w.queue.unacked_count == 0


def test_requeue_of_several_at_once_restores_order() -> None:
    w = World()
    s, sink = w.session()
    s.consume("q", "c", no_ack=False, exclusive=False, arguments={})
    w.publish(s, *[str(i).encode() for i in range(6)])
    tags = [e.delivery_tag for e in sink.deliveries()]
    assert s.cancel("c")
    # Nack 4, 1 and 3 (in that order), ack the rest.
    for i in (4, 1, 3):
        s.reject(tags[i], requeue=True)
    for i in (0, 2, 5):
        s.ack(tags[i])
    assert ready_bodies(w.queue) == [b"1", b"3", b"4"]


def test_requeue_redelivers_to_a_waiting_consumer() -> None:
    w = World()
    s1, sink1 = w.session()
    w.publish(s1, b"1", b"2")
    got = s1.get("q", no_ack=False)
    assert got is not None
    s2, sink2 = w.session()
    s2.consume("q", "c", no_ack=True, exclusive=False, arguments={})
    assert [e.body for e in sink2.deliveries()] == [b"2"]
    s1.reject(got[0], requeue=True)
    (event,) = sink2.deliveries()
    assert (event.body, event.redelivered) == (b"1", True)
    assert not sink1.events


def test_can_deliver_now() -> None:
    w = World()
    s, sink = w.session()
    message = make_message(b"x", "q")
    assert not w.queue.can_deliver_now(message)  # no consumer
    s.set_qos(0, 1, False)
    s.consume("q", "c", no_ack=False, exclusive=False, arguments={})
    assert w.queue.can_deliver_now(message)
    w.publish(s, b"1")
    assert not w.queue.can_deliver_now(message)  # prefetch reached
    s.ack(sink.deliveries()[0].delivery_tag)
    assert w.queue.can_deliver_now(message)
    s.set_flow(False)
    assert not w.queue.can_deliver_now(message)


def test_no_ack_consumer_does_not_count_unacked() -> None:
    w = World()
    s, sink = w.session()
    s.set_qos(0, 1, True)
    s.consume("q", "c", no_ack=True, exclusive=False, arguments={})
    w.publish(s, b"1", b"2", b"3")
    assert [e.body for e in sink.deliveries()] == [b"1", b"2", b"3"]
    assert w.queue.unacked_count == 0
    assert s.unacked == {}


def test_purge_drops_ready_but_not_unacked() -> None:
    w = World()
    s, _ = w.session()
    w.publish(s, b"1", b"2", b"3")
    got = s.get("q", no_ack=False)
    assert got is not None
    assert w.vhost.purge_queue("q", owner=w.owner) == 2
    assert w.queue.message_count == 0
    s.reject(got[0], requeue=True)
    assert ready_bodies(w.queue) == [b"1"]


def test_counts() -> None:
    w = World()
    s, _ = w.session()
    w.publish(s, b"1", b"2")
    assert (w.queue.message_count, w.queue.consumer_count) == (2, 0)
    s.set_qos(0, 1, False)
    s.consume("q", "c", no_ack=False, exclusive=False, arguments={})
    assert (w.queue.message_count, w.queue.consumer_count) == (1, 1)


def test_get_reports_messages_left_and_empty() -> None:
    w = World()
    s, _ = w.session()
    w.publish(s, b"1", b"2")
    first = s.get("q", no_ack=True)
    assert first is not None
    assert (first[1].message.body, first[2]) == (b"1", 1)
    second = s.get("q", no_ack=True)
    assert second is not None
    assert (second[1].message.body, second[2]) == (b"2", 0)
    assert s.get("q", no_ack=True) is None
    assert first[0] != second[0]


def test_auto_delete_queue_goes_after_last_consumer_cancel() -> None:
    w = World(auto_delete=True)
    s, _ = w.session()
    s.consume("q", "a", no_ack=True, exclusive=False, arguments={})
    s.consume("q", "b", no_ack=True, exclusive=False, arguments={})
    assert s.cancel("a")
    assert "q" in w.vhost.queues
    assert s.cancel("b")
    assert "q" not in w.vhost.queues
    assert w.queue.deleted


def test_auto_delete_queue_without_any_consumer_stays() -> None:
    w = World(auto_delete=True)
    s, _ = w.session()
    w.publish(s, b"1")
    assert s.get("q", no_ack=True) is not None
    s.close()
    assert "q" in w.vhost.queues


def test_auto_delete_queue_goes_when_the_consuming_channel_closes() -> None:
    w = World(auto_delete=True)
    s, _ = w.session()
    s.consume("q", "a", no_ack=False, exclusive=False, arguments={})
    s.close()
    assert "q" not in w.vhost.queues


def test_departed_counts_what_leaves_the_ready_backlog_whatever_is_published() -> None:
    """``Queue.departed`` (the far-behind hold's test of a queue that drains): a publish
    into the backlog leaves it as it is, a fetch or a delivery adds one (a publish handed
    straight to a consumer too)."""
    w = World()
    s, _ = w.session()
    w.publish(s, b"1", b"2", b"3", b"4")
    assert w.queue.departed() == 0
    w.queue.get(auto_settle=True)
    assert w.queue.departed() == 1
    c, _ = w.session()
    c.consume("q", "c", no_ack=True, exclusive=False, arguments={})
    assert w.queue.departed() == 4
    w.publish(s, b"5")
    assert w.queue.departed() == 5
