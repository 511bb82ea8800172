"""Paging of deep queues: the tail goes to pages, comes back in order, and is counted."""

from __future__ import annotations

from leveret.model.entry import MESSAGE_OVERHEAD, QueuedMessage
from leveret.model.message import Message
from leveret.model.paging import decode_page, encode_page
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.amqp091.session import Session
from leveret.testing import MemoryPager, RecordingSink, make_message
from tests.queue_support import classic


class World:
    def __init__(self) -> None:
        self.vhost = VirtualHost("/")
        self.pager = MemoryPager()
        self.vhost.pager = self.pager
        self.owner = object()
        self.queue = classic(self.vhost.declare_queue("q", owner=self.owner))
        q = self.queue
        q.resident_max, q.resident_low, q.page_messages, q.page_bytes = 8, 4, 5, 1 << 20
        self.session, self.sink = self.new_session()

    def new_session(self) -> tuple[Session, RecordingSink]:
        sink = RecordingSink()
        return Session(self.vhost, self.owner, sink), sink

    def publish(self, *bodies: bytes, properties: BasicProperties | None = None) -> None:
        for body in bodies:
            self.session.publish("", "q", make_message(body, "q", properties=properties))


def bodies(n: int, start: int = 0) -> list[bytes]:
    return [b"m%d" % i for i in range(start, start + n)]


def test_a_page_round_trips_every_field() -> None:
    props = BasicProperties(content_type="text/plain", headers={"k": "v"}, delivery_mode=2)
    message = make_message(b"body", "rk", "ex", props)
    message.store_id = 77
    entry = QueuedMessage(5, message, redelivered=True)
    entry.sid = 99
    other = QueuedMessage(6, make_message(b"", "", ""))
    back = decode_page(encode_page([entry, other]), QueuedMessage, message._decode, None)
    assert [(e.seq, e.sid, e.redelivered) for e in back] == [(5, 99, True), (6, 0, False)]
    got = back[0].message
    assert isinstance(got, Message)
    assert (got.exchange, got.routing_key, got.body, got.store_id) == ("ex", "rk", b"body", 77)
    assert got.raw_properties == message.raw_properties
    assert got.hints == message.hints
    assert got.headers == {"k": "v"}
    assert back[1].message.body == b""


def test_a_page_keeps_each_message_s_names_across_runs_of_them() -> None:
    # The codec encodes and decodes a run of one exchange and routing key once (shared
    # strings): every change of either, back and forth and to the default exchange's
    # empty name, must still come back per message.
    names = [("ex", "a"), ("ex", "a"), ("", "a"), ("", "b"), ("ex", "b"), ("é", "ß"), ("ex", "a")]
    entries = [
        QueuedMessage(i, make_message(b"%d" % i, rk, ex)) for i, (ex, rk) in enumerate(names)
    ]
    back = decode_page(encode_page(entries), QueuedMessage, entries[0].message._decode, None)
    assert [(e.message.exchange, e.message.routing_key) for e in back] == names
    assert [e.message.body for e in back] == [b"%d" % i for i in range(len(names))]
    assert back[0].message.exchange is back[1].message.exchange  # one string for the run


def test_a_deep_queue_pages_its_tail_and_keeps_its_head_resident() -> None:
    w = World()
    w.publish(*bodies(30))
    q = w.queue
    assert q.message_count == 30
    assert len(q.ready) == 8
    assert q.paged_count == 20  # four full pages of five; two messages in the open page
    assert len(w.pager.pages) == 4
    assert [e.message.body for e in q.ready_entries()] == bodies(30)
    # Only the resident messages count against the memory alarm.
    resident = 8 + 2
    assert w.vhost.gauge.bytes == sum(len(b) for b in bodies(30)[:8] + bodies(30)[28:]) + (
        resident * MESSAGE_OVERHEAD
    )


def test_consuming_reads_pages_back_in_order_and_frees_them() -> None:
    w = World()
    w.publish(*bodies(30))
    consumer_session, sink = w.new_session()
    consumer_session.consume("q", "c", no_ack=True, exclusive=False, arguments={})
    assert [e.body for e in sink.deliveries()] == bodies(30)
    assert w.queue.message_count == 0
    assert w.pager.pages == {}
    assert w.vhost.gauge.bytes == 0
    # Once drained, a queue takes the direct path again.
    w.publish(b"after")
    assert [e.body for e in sink.deliveries()][-1] == b"after"
    assert w.queue._tail is None


def test_new_messages_stay_behind_the_pages_while_consumers_drain_slowly() -> None:
    w = World()
    w.publish(*bodies(20))
    consumer_session, sink = w.new_session()
    consumer_session.set_qos(0, 3, False)
    consumer_session.consume("q", "c", no_ack=False, exclusive=False, arguments={})
    got: list[bytes] = []
    for round_ in range(20):
        w.publish(*bodies(2, 100 + 2 * round_))
        new = sink.deliveries()
        got += [e.body for e in new]
        for event in new:
            consumer_session.ack(event.delivery_tag)
    while len(got) < 60:
        new = sink.deliveries()
        assert new
        got += [e.body for e in new]
        for event in new:
            consumer_session.ack(event.delivery_tag)
    assert got == bodies(20) + bodies(40, 100)


def test_requeued_messages_go_back_before_the_paged_tail() -> None:
    w = World()
    w.publish(*bodies(25))
    tags = []
    for _ in range(6):
        got = w.session.get("q", no_ack=False)
        assert got is not None
        tags.append(got[0])
    w.session.reject(tags[1], requeue=True)
    w.session.reject(tags[4], requeue=True)
    entries = w.queue.ready_entries()
    assert [e.message.body for e in entries][:3] == [b"m1", b"m4", b"m6"]
    assert [e.message.body for e in entries] == [b"m1", b"m4", *bodies(19, 6)]
    assert [e.redelivered for e in entries][:3] == [True, True, False]


def test_basic_get_walks_through_the_pages() -> None:
    w = World()
    w.publish(*bodies(23))
    got = []
    while True:
        result = w.session.get("q", no_ack=True)
        if result is None:
            break
        _tag, entry, remaining = result
        got.append(entry.message.body)
        assert remaining == 23 - len(got)
    assert got == bodies(23)


def test_purge_counts_and_discards_the_pages() -> None:
    w = World()
    w.publish(*bodies(30))
    assert w.queue.purge() == 30
    assert w.queue.message_count == 0
    assert w.pager.pages == {}
    assert w.vhost.gauge.bytes == 0


def test_a_refused_page_stays_in_memory_and_is_written_later() -> None:
    w = World()
    w.pager.refuse = True
    w.publish(*bodies(20))
    assert w.queue.paged_count == 0
    assert w.queue.message_count == 20
    w.pager.refuse = False
    w.publish(*bodies(6, 20))  # the next try comes one page later
    assert w.queue.paged_count > 0
    assert [e.message.body for e in w.queue.ready_entries()] == bodies(26)
    s, sink = w.new_session()
    s.consume("q", "c", no_ack=True, exclusive=False, arguments={})
    assert [e.body for e in sink.deliveries()] == bodies(26)


def test_a_message_that_needs_the_feature_paths_brings_the_pages_back_first() -> None:
    w = World()
    w.publish(*bodies(20))
    w.publish(b"ttl", properties=BasicProperties(expiration="60000"))
    assert w.queue.paged_count == 0
    assert [e.message.body for e in w.queue.ready_entries()] == [*bodies(20), b"ttl"]
    s, sink = w.new_session()
    s.consume("q", "c", no_ack=True, exclusive=False, arguments={})
    assert [e.body for e in sink.deliveries()] == [*bodies(20), b"ttl"]


def test_a_queue_without_a_pager_keeps_everything_resident() -> None:
    vhost = VirtualHost("/")
    queue = classic(vhost.declare_queue("q", owner=None))
    queue.resident_max = 2
    session = Session(vhost, None, RecordingSink())
    for body in bodies(10):
        session.publish("", "q", make_message(body, "q"))
    assert len(queue.ready) == 10
    assert queue.paged_count == 0


# -- large bodies: paged under memory pressure, not by count ------------------------------

LARGE = 4096  # ClassicQueue.large_body


def large(n: int, start: int = 0) -> list[bytes]:
    return [b"%06d" % i + b"x" * (LARGE - 6) for i in range(start, start + n)]


def test_large_bodies_stay_resident_past_the_count_while_under_the_paging_level() -> None:
    w = World()
    w.vhost.gauge.paging_level = 1 << 30
    w.publish(*large(30))
    q = w.queue
    assert len(q.ready) == 30
    assert q.paged_count == 0
    assert w.pager.writes == 0
    assert w.vhost.gauge.bytes == 30 * (LARGE + MESSAGE_OVERHEAD)


def test_small_bodies_still_page_by_count_under_the_paging_level() -> None:
    w = World()
    w.vhost.gauge.paging_level = 1 << 30
    w.publish(*bodies(30))
    assert len(w.queue.ready) == 8
    assert w.queue.paged_count == 20
    # One body just under the size pages too: the rule is the body's size, not the gauge.
    v = World()
    v.vhost.gauge.paging_level = 1 << 30
    v.publish(*[b"y" * (LARGE - 1)] * 30)
    assert len(v.queue.ready) == 8


def test_large_bodies_page_once_the_gauge_reaches_the_paging_level() -> None:
    w = World()
    level = 12 * (LARGE + MESSAGE_OVERHEAD)
    w.vhost.gauge.paging_level = level
    w.publish(*large(40))
    q = w.queue
    # Resident while the gauge was under the level (the 12th message takes it there and
    # pages), then everything goes behind, in pages: the head stops growing.
    assert len(q.ready) == 11
    assert q.message_count == 40
    assert q.paged_count == 25  # five pages of five; four in the open page
    assert w.vhost.gauge.bytes < level + 5 * (LARGE + MESSAGE_OVERHEAD)
    assert [e.message.body for e in q.ready_entries()] == large(40)
    consumer_session, sink = w.new_session()
    consumer_session.consume("q", "c", no_ack=True, exclusive=False, arguments={})
    assert [e.body for e in sink.deliveries()] == large(40)
    assert w.pager.pages == {}
    assert w.vhost.gauge.bytes == 0
    assert q._tail is None


def test_once_the_tail_is_drained_large_bodies_are_kept_resident_again() -> None:
    w = World()
    level = 12 * (LARGE + MESSAGE_OVERHEAD)
    w.vhost.gauge.paging_level = level
    w.publish(*large(40))
    for _ in range(35):
        assert w.session.get("q", no_ack=True) is not None
    assert w.queue._tail is None
    w.publish(*large(6, 40))  # 11 queued: past resident_max (8), under the level (12)
    assert len(w.queue.ready) == 11
    assert w.queue.paged_count == 0
    assert [e.message.body for e in w.queue.ready_entries()] == large(11, 35)


def test_a_paging_level_of_zero_pages_large_bodies_by_count() -> None:
    w = World()
    assert w.vhost.gauge.paging_level == 0  # the model's default
    w.publish(*large(30))
    assert len(w.queue.ready) == 8
    assert w.queue.paged_count == 20
