"""Unit tests of stream queues in the model: offsets, consumers, credit, retention, dedup."""

from __future__ import annotations

import datetime

import pytest

from leveret.errors import NotImplemented_, PreconditionFailed
from leveret.model.queues import parse_queue_args
from leveret.model.queues.stream import OffsetSpec, StreamQueue, parse_offset_spec
from leveret.model.queues.stream_log import MemoryStreamLog
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink, make_message

STREAM = {"x-queue-type": "stream"}


class World:
    def __init__(self, **arguments: object) -> None:
        self.vhost = VirtualHost("/")
        self.vhost.timers.now = 1000.0
        self.vhost.timers.wall_offset = 1_700_000_000.0
        self.owner = object()
        queue = self.vhost.declare_queue(
            "s", owner=self.owner, durable=True, arguments={**STREAM, **arguments}
        )
        assert isinstance(queue, StreamQueue)
        self.queue = queue

    def session(self, prefetch: int = 100) -> tuple[Session, RecordingSink]:
        sink = RecordingSink()
        session = Session(self.vhost, self.owner, sink)
        session.set_qos(0, prefetch, False)
        return session, sink

    def publish(self, *bodies: bytes, headers: dict[str, object] | None = None) -> None:
        session, _ = self.session()
        props = BasicProperties(headers=headers) if headers else None  # type: ignore[arg-type]
        for body in bodies:
            session.publish("", "s", make_message(body, "s", properties=props))


def consume(s: Session, tag: str, offset: object = None) -> str:
    arguments = {} if offset is None else {"x-stream-offset": offset}
    return s.consume("s", tag, no_ack=False, exclusive=False, arguments=arguments)


def offsets(sink: RecordingSink) -> list[int]:
    out = []
    for event in sink.deliveries():
        assert event.message is not None
        headers = event.message.headers
        assert headers is not None
        value = headers["x-stream-offset"]
        assert isinstance(value, int)
        out.append(value)
    return out


def test_offsets_start_at_zero_and_reading_does_not_remove() -> None:
    w = World()
    w.publish(b"a", b"b", b"c")
    assert w.queue.message_count == 3  # the next offset
    for tag in ("x", "y"):
        s, sink = w.session()
        consume(s, tag, "first")
        assert offsets(sink) == [0, 1, 2]
    assert w.queue.message_count == 3


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("first", [0, 1, 2, 3, 4]),
        ("last", [4]),
        ("next", []),
        (None, []),
        (2, [2, 3, 4]),
        (-5, [0, 1, 2, 3, 4]),
        (10, []),
    ],
)
def test_where_a_consumer_starts(spec: object, expected: list[int]) -> None:
    w = World()
    w.publish(*[b"m"] * 5)
    s, sink = w.session()
    consume(s, "c", spec)
    assert offsets(sink) == expected


def test_a_consumer_past_the_end_waits_for_that_offset() -> None:
    w = World()
    w.publish(b"0")
    s, sink = w.session()
    consume(s, "c", 3)
    w.publish(b"1", b"2", b"3", b"4")
    assert offsets(sink) == [3, 4]


def test_timestamp_and_interval_offsets() -> None:
    w = World()
    timers = w.vhost.timers
    w.publish(b"old")
    timers.now += 7200
    start = timers.wall
    w.publish(b"new1", b"new2")
    s, sink = w.session()
    consume(s, "ts", datetime.datetime.fromtimestamp(start, tz=datetime.UTC))
    assert offsets(sink) == [1, 2]
    consume(s, "interval", "1h")
    assert offsets(sink) == [1, 2]
    consume(s, "interval3", "3h")
    assert offsets(sink) == [0, 1, 2]


def test_each_delivery_has_offset_and_timestamp_headers() -> None:
    w = World()
    w.publish(b"a", headers={"keep": "me"})
    s, sink = w.session()
    consume(s, "c", "first")
    [event] = sink.deliveries()
    assert event.message is not None
    headers = event.message.headers
    assert headers == {
        "keep": "me",
        "x-stream-offset": 0,
        "x-stream-timestamp": int(w.vhost.timers.wall * 1000),
    }


def test_live_tail_respects_prefetch_and_acks_return_credit() -> None:
    w = World()
    s, sink = w.session(prefetch=2)
    consume(s, "c")
    w.publish(*[b"m"] * 5)
    got = sink.deliveries()
    assert [e.delivery_tag for e in got] == [1, 2]
    s.ack(2, multiple=True)
    assert [e.delivery_tag for e in sink.deliveries()] == [3, 4]
    s.ack(3)
    assert offsets(sink) == [4]
    assert w.queue.message_count == 5


def test_consumers_keep_their_own_positions() -> None:
    w = World()
    w.publish(*[b"m"] * 10)
    sessions = []
    for start in (0, 3, 7):
        s, sink = w.session(prefetch=1)
        consume(s, f"c{start}", start)
        sessions.append((s, sink, start))
    for s, sink, start in sessions:
        seen = offsets(sink)
        assert seen == [start]
        while seen[-1] < 9:
            s.ack(0, multiple=True)
            seen += offsets(sink)
        assert seen == list(range(start, 10))


def test_qos_is_required_and_no_ack_refused() -> None:
    w = World()
    sink = RecordingSink()
    s = Session(w.vhost, w.owner, sink)
    with pytest.raises(PreconditionFailed, match="consumer prefetch count is not set for"):
        consume(s, "c")
    s.set_qos(0, 10, True)  # a global prefetch does not count (RabbitMQ)
    with pytest.raises(PreconditionFailed):
        consume(s, "c")
    s.set_qos(0, 10, False)
    with pytest.raises(NotImplemented_, match="automatic acknowledgement not supported"):
        s.consume("s", "c", no_ack=True, exclusive=False, arguments={})
    assert s.consumers == {}


def test_get_purge_reject_and_nack_are_not_implemented() -> None:
    w = World()
    w.publish(b"a", b"b")
    s, sink = w.session()
    with pytest.raises(NotImplemented_, match=r"basic\.get not supported by stream queues"):
        s.get("s", no_ack=False)
    with pytest.raises(NotImplemented_, match=r"purge not supported by stream queues"):
        w.vhost.purge_queue("s", owner=w.owner)
    consume(s, "c", "first")
    assert len(sink.deliveries()) == 2
    with pytest.raises(NotImplemented_, match=r"basic\.nack and basic\.reject not supported"):
        s.reject(1, requeue=True)
    with pytest.raises(NotImplemented_):
        s.reject(0, multiple=True, requeue=False)
    assert sorted(s.unacked) == [1, 2]  # nothing was taken
    s.ack(2, multiple=True)
    assert s.unacked == {}


def test_closing_a_channel_requeues_nothing() -> None:
    w = World()
    w.publish(b"a", b"b")
    s, _sink = w.session()
    consume(s, "c", "first")
    s.close()
    assert w.queue.unacked_count == 0
    assert w.queue.message_count == 2
    s2, sink2 = w.session()
    consume(s2, "d", "first")
    assert [e.redelivered for e in sink2.deliveries()] == [False, False]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("5X", '{invalid_stream_offset_arg,{longstr,<<"5X">>}}'),
        (True, "{invalid_stream_offset_arg,{bool,True}}"),
        (1.5, "{invalid_stream_offset_arg,{double,1.5}}"),
        ({"a": 1}, "invalid_stream_offset_arg,{table,"),
    ],
)
def test_bad_offset_arguments_are_406(value: object, text: str) -> None:
    w = World()
    s, _ = w.session()
    with pytest.raises(PreconditionFailed, match="invalid arg 'x-stream-offset'") as info:
        consume(s, "c", value)
    assert text in info.value.reply_text


def test_parse_offset_spec() -> None:
    where, now = "here", 10_000_000
    assert parse_offset_spec({}, where=where, wall_ms=now) == OffsetSpec("next")
    assert parse_offset_spec({"x-stream-offset": b"first"}, where=where, wall_ms=now) == (
        OffsetSpec("first")
    )
    assert parse_offset_spec({"x-stream-offset": "30s"}, where=where, wall_ms=now) == (
        OffsetSpec("timestamp", now - 30_000)
    )


def test_declare_rules_and_argument_checks() -> None:
    vhost = VirtualHost("/")
    with pytest.raises(PreconditionFailed, match="invalid property 'non-durable'"):
        vhost.declare_queue("a", owner=None, arguments=STREAM)
    with pytest.raises(PreconditionFailed, match="invalid property 'exclusive-owner'"):
        vhost.declare_queue("a", owner=None, durable=True, exclusive=True, arguments=STREAM)
    with pytest.raises(PreconditionFailed, match="invalid property 'auto-delete'"):
        vhost.declare_queue("a", owner=None, durable=True, auto_delete=True, arguments=STREAM)
    for arg, value in (("x-max-length", 5), ("x-message-ttl", 5), ("x-expires", 5)):
        with pytest.raises(PreconditionFailed, match="of queue type rabbit_stream_queue"):
            vhost.declare_queue("a", owner=None, durable=True, arguments={**STREAM, arg: value})
    with pytest.raises(PreconditionFailed, match=r"'x-max-age' .*: invalid_max_age"):
        parse_queue_args({**STREAM, "x-max-age": "7X"}, queue="a")
    with pytest.raises(PreconditionFailed, match=r"\{unacceptable_type,signedint\}"):
        parse_queue_args({**STREAM, "x-max-age": 7}, queue="a")
    with pytest.raises(PreconditionFailed, match=r"\{value_negative,-1\}"):
        parse_queue_args({**STREAM, "x-stream-max-segment-size-bytes": -1}, queue="a")
    config = parse_queue_args(
        {**STREAM, "x-max-age": "7D", "x-stream-max-segment-size-bytes": 1000}, queue="a"
    )
    assert (config.max_age, config.segment_bytes, config.queue_type) == (7 * 86400, 1000, "stream")


def test_retention_by_bytes_drops_whole_segments_and_consumers_jump() -> None:
    w = World(**{"x-max-length-bytes": 3000, "x-stream-max-segment-size-bytes": 1000})
    s, sink = w.session(prefetch=1)
    consume(s, "slow", "first")
    assert offsets(sink) == []
    w.publish(*[b"x" * 400] * 30)
    log = w.queue.log
    assert log.first_offset > 0
    assert log.next_offset == 30
    assert offsets(sink) == [0]  # delivered before the head moved
    s.ack(1)
    [jumped] = offsets(sink)
    assert jumped == log.first_offset
    s2, sink2 = w.session()
    consume(s2, "zero", 0)
    got = offsets(sink2)
    assert got == list(range(log.first_offset, 30))


def test_retention_by_age_runs_on_the_timer() -> None:
    w = World(**{"x-max-age": "10s", "x-stream-max-segment-size-bytes": 1})
    w.publish(b"a", b"b")
    timers = w.vhost.timers
    timers.now += 5
    w.publish(b"c")
    assert w.queue.log.first_offset == 0
    timers.expire(timers.now + 7)  # a and b are 12 s old, c 7 s
    assert w.queue.log.first_offset == 2
    timers.expire(timers.now + 20)
    # The open (last) segment is never dropped.
    assert w.queue.log.first_offset == 3
    assert w.queue.log.next_offset == 3


def test_deduplication_per_producer() -> None:
    w = World()
    for seq in (0, 1, 1, 0, 2):
        w.publish(b"p%d" % seq, headers={"x-stream-producer": "p", "x-stream-sequence": seq})
    w.publish(b"q", headers={"x-stream-producer": "q", "x-stream-sequence": 0})
    w.publish(b"plain")
    w.publish(b"plain")
    w.publish(b"bad", headers={"x-stream-producer": "p", "x-stream-sequence": "1"})
    long_id = {"x-stream-producer": "p" * 257, "x-stream-sequence": 0}
    w.publish(b"long", headers=long_id)
    w.publish(b"long", headers=long_id)
    s, sink = w.session()
    consume(s, "c", "first")
    assert [e.body for e in sink.deliveries()] == [
        b"p0",
        b"p1",
        b"p2",
        b"q",
        b"plain",
        b"plain",
        b"bad",
        b"long",
        b"long",
    ]
    assert dict(w.queue.log.producers) == {"p": 2, "q": 0}


def test_duplicates_are_confirmed() -> None:
    w = World()
    s, sink = w.session()
    s.select_confirm()
    headers = {"x-stream-producer": "p", "x-stream-sequence": 5}
    props = BasicProperties(headers=headers)  # type: ignore[arg-type]
    for _ in range(3):
        s.publish("", "s", make_message(b"m", "s", properties=props))
    s.flush_confirms()
    [confirm] = sink.take("confirm")
    assert (confirm.delivery_tag, confirm.multiple, confirm.ack) == (3, True, True)
    assert w.queue.message_count == 1


def test_deleting_a_stream_cancels_its_consumers() -> None:
    w = World()
    s, sink = w.session()
    consume(s, "c")
    w.vhost.delete_queue("s", owner=w.owner)
    assert [e.consumer_tag for e in sink.take("consumer_cancelled")] == ["c"]


def test_memory_log_reads_across_segments() -> None:
    log = MemoryStreamLog(segment_bytes=10)
    for i in range(20):
        log.append(make_message(b"%05d" % i), i, "", -1)
    assert [e.offset for e in log.read(3, 7)] == list(range(3, 10))
    assert log.retain(50, None) > 0
    first = log.first_offset
    assert [e.offset for e in log.read(0, 100)] == list(range(first, 20))
    assert log.offset_at(15) == 15
    assert log.offset_at(100) == 20


def test_lookup_answers_where_a_consumer_would_start() -> None:
    w = World(**{"x-max-length-bytes": 6000, "x-stream-max-segment-size-bytes": 1000})
    q = w.queue
    assert q.lookup(None) == q.lookup({"x-stream-offset": "last"}) == 0
    timers = w.vhost.timers
    w.publish(*[b"x" * 400] * 10)
    timers.now += 3600
    middle = timers.wall
    w.publish(*[b"y" * 400] * 10)
    first = q.log.first_offset
    assert 0 < first < 10
    assert q.lookup({}) == q.lookup({"x-stream-offset": "next"}) == 20
    assert q.lookup({"x-stream-offset": "first"}) == first
    assert q.lookup({"x-stream-offset": 0}) == first
    assert q.lookup({"x-stream-offset": 15}) == 15
    assert q.lookup({"x-stream-offset": "last"}) == 19
    when = datetime.datetime.fromtimestamp(middle, tz=datetime.UTC)
    assert q.lookup({"x-stream-offset": when}) == 10
    with pytest.raises(PreconditionFailed, match="invalid_stream_offset_arg"):
        q.lookup({"x-stream-offset": "soon"})
