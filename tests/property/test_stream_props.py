"""A stateful property test of stream consumers in the model against the published list.

Publishes (with retention dropping whole segments), consumers attaching at any offset
spec, acks (single and multiple), QoS changes and cancels run in any order. After every
step, for every consumer:

- it starts where its ``x-stream-offset`` says (computed here from the bounds), the offsets
  it received are strictly increasing, each delivery carries the body published
  at that offset, and a step of more than one offset only ever lands on an offset that was
  the first retained one when it was delivered (retention is the only source of gaps);
- a delivery is only made while its unacked deliveries are fewer than its prefetch;
- it is never stuck: it has read up to the end, or its prefetch is full.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from leveret.model.queues.stream import StreamConsumer, StreamQueue
from leveret.model.vhost import VirtualHost
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink, make_message

ARGS = {
    "x-queue-type": "stream",
    "x-max-length-bytes": 1500,
    "x-stream-max-segment-size-bytes": 300,
}


@dataclass
class Reader:
    session: Session
    sink: RecordingSink
    tag: str
    prefetch: int
    start: int  # where the reference says it starts
    received: list[tuple[int, int]] = field(default_factory=list)  # (offset, first then)
    unacked: list[int] = field(default_factory=list)


class StreamConsumers(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.vhost = VirtualHost("/")
        queue = self.vhost.declare_queue("s", owner=None, durable=True, arguments=ARGS)
        assert isinstance(queue, StreamQueue)
        self.queue = queue
        self.publisher = Session(self.vhost, None, RecordingSink())
        self.bodies: list[bytes] = []
        self.readers: list[Reader] = []
        self.count = 0

    def _collect(self) -> None:
        first = self.queue.log.first_offset
        for reader in self.readers:
            for event in reader.sink.deliveries():
                assert event.message is not None
                headers = event.message.headers
                assert headers is not None
                offset = headers["x-stream-offset"]
                assert isinstance(offset, int)
                assert event.body == self.bodies[offset]
                # Credit is checked at each hand-out (a lower prefetch revokes nothing).
                assert len(reader.unacked) < reader.prefetch
                reader.received.append((offset, first))
                reader.unacked.append(event.delivery_tag)

    @rule(n=st.integers(1, 8), size=st.integers(0, 120))
    def publish(self, n: int, size: int) -> None:
        for _ in range(n):
            body = (b"%d:" % len(self.bodies)).ljust(size, b".")
            self.bodies.append(body)
            self.publisher.publish("", "s", make_message(body, "s"))
        self._collect()

    @rule(
        spec=st.one_of(st.sampled_from(["first", "last", "next"]), st.integers(-1, 60), st.none()),
        prefetch=st.integers(1, 6),
    )
    def attach(self, spec: object, prefetch: int) -> None:
        log = self.queue.log
        first, end = log.first_offset, log.next_offset
        if spec == "first":
            start = first
        elif spec == "last":
            start = max(end - 1, first)
        elif isinstance(spec, int):
            start = max(spec, first)
        else:
            start = end
        sink = RecordingSink()
        session = Session(self.vhost, None, sink)
        session.set_qos(0, prefetch, False)
        self.count += 1
        tag = f"c{self.count}"
        arguments = {} if spec is None else {"x-stream-offset": spec}
        session.consume("s", tag, no_ack=False, exclusive=False, arguments=arguments)
        self.readers.append(Reader(session, sink, tag, prefetch, start))
        self._collect()

    @precondition(lambda self: any(r.unacked for r in self.readers))
    @rule(data=st.data(), multiple=st.booleans())
    def ack(self, data: st.DataObject, multiple: bool) -> None:
        reader = data.draw(st.sampled_from([r for r in self.readers if r.unacked]))
        index = data.draw(st.integers(0, len(reader.unacked) - 1))
        tag = reader.unacked[index]
        reader.session.ack(tag, multiple=multiple)
        if multiple:
            reader.unacked = [t for t in reader.unacked if t > tag]
        else:
            del reader.unacked[index]
        self._collect()

    @precondition(lambda self: self.readers)
    @rule(data=st.data(), prefetch=st.integers(1, 6))
    def qos(self, data: st.DataObject, prefetch: int) -> None:
        reader = data.draw(st.sampled_from(self.readers))
        reader.session.set_qos(0, prefetch, False)
        reader.prefetch = prefetch
        self._collect()

    @precondition(lambda self: self.readers)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        reader = data.draw(st.sampled_from(self.readers))
        reader.session.close()
        self.readers.remove(reader)

    @invariant()
    def consumers_read_in_order_without_loss(self) -> None:
        end = self.queue.log.next_offset
        assert end == len(self.bodies)
        for reader in self.readers:
            if reader.received:
                offset, first = reader.received[0]
                assert offset == reader.start or offset == first > reader.start
            previous = None
            for offset, first in reader.received:
                if previous is not None:
                    assert offset > previous
                    assert offset == previous + 1 or offset == first
                previous = offset
            consumer = reader.session.consumers[reader.tag]
            assert isinstance(consumer, StreamConsumer)
            assert consumer.offset >= end or len(reader.unacked) >= reader.prefetch


TestStreamConsumers = StreamConsumers.TestCase
TestStreamConsumers.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
