"""A stateful property test of one queue and two sessions against a list-based reference.

The state machine publishes, consumes and cancels, gets, acks, nacks (requeue or drop),
changes QoS and closes channels, in any order. After every step it checks:

- no message is lost or duplicated: every published id is exactly one of ready, unacked
  or settled, and a delivery only ever hands out a ready message;
- deliveries come from the head of the queue (the smallest ready id), and the queue's ready
  list is the ready ids in publish order, requeued ones back at their original positions;
- redelivered is set exactly on messages that were delivered before;
- a delivery never exceeds the consumer's prefetch (its channel's latest per-consumer qos) nor the
  channel's global prefetch (RabbitMQ's meaning of ``global``);
- while messages are ready, no consumer could take one (nothing is stuck).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from leveret.errors import PreconditionFailed
from leveret.model.vhost import VirtualHost
from leveret.server.amqp091.session import Session
from leveret.testing import MemoryPager, RecordingSink, SinkEvent, make_message
from tests.queue_support import classic

SESSIONS = 2


class _Tee(list[SinkEvent]):
    """A sink's event list that also appends to the machine's cross-session log."""

    def __init__(self, log: list[tuple[int, SinkEvent]], index: int) -> None:
        super().__init__()
        self.log = log
        self.session_index = index

    def append(self, event: SinkEvent) -> None:
        super().append(event)
        self.log.append((self.session_index, event))


@dataclass
class ModelConsumer:
    tag: str
    session: int
    no_ack: bool
    prefetch: int


@dataclass
class ModelSession:
    """The reference state of one channel."""

    per_consumer: int = 0
    global_: int = 0
    # delivery tag → (message id, consumer tag or "" for basic.get)
    unacked: dict[int, tuple[int, str]] = field(default_factory=dict)

    def consumer_unacked(self) -> int:
        return sum(1 for _id, tag in self.unacked.values() if tag)

    def unacked_of(self, consumer_tag: str) -> int:
        return sum(1 for _id, tag in self.unacked.values() if tag == consumer_tag)


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.vhost = VirtualHost("/")
        self.owner = object()
        self.queue = classic(self.vhost.declare_queue("q", owner=self.owner))
        # Every session's events, in the order they happened across sessions.
        self.log: list[tuple[int, SinkEvent]] = []
        self.sinks = [self._sink(i) for i in range(SESSIONS)]
        self.sessions = [Session(self.vhost, self.owner, sink) for sink in self.sinks]
        self.model = [ModelSession() for _ in range(SESSIONS)]
        self.consumers: dict[str, ModelConsumer] = {}
        self.next_id = 0
        self.next_tag = 0
        self.ready: set[int] = set()
        self.settled: set[int] = set()
        self.ever_delivered: set[int] = set()

    def _sink(self, index: int) -> RecordingSink:
        return RecordingSink(events=_Tee(self.log, index))

    # -- bookkeeping ---------------------------------------------------------------------

    def unacked_ids(self) -> list[int]:
        return [mid for s in self.model for mid, _tag in s.unacked.values()]

    def absorb(self) -> None:
        """Check and record what the sessions delivered during the last step."""
        events = self.log[:]
        self.log.clear()
        for sink in self.sinks:
            sink.events.clear()
        for index, event in events:
            assert event.kind == "deliver", event
            mid = int(event.body)
            assert mid in self.ready, f"delivered {mid}, which is not ready"
            assert mid == min(self.ready), "a delivery skipped the head of the queue"
            assert event.redelivered == (mid in self.ever_delivered)
            consumer = self.consumers[event.consumer_tag]
            assert consumer.session == index
            session = self.model[index]
            self.ready.discard(mid)
            self.ever_delivered.add(mid)
            if consumer.no_ack:
                self.settled.add(mid)
                continue
            if consumer.prefetch:
                assert session.unacked_of(consumer.tag) < consumer.prefetch
            if session.global_:
                assert session.consumer_unacked() < session.global_
            assert event.delivery_tag not in session.unacked
            session.unacked[event.delivery_tag] = (mid, consumer.tag)

    def settle(self, index: int, tags: list[int], requeue: bool | None) -> None:
        """Model an ack (requeue None), a nack with requeue, or a drop."""
        session = self.model[index]
        for tag in tags:
            mid, _consumer = session.unacked.pop(tag)
            if requeue:
                self.ready.add(mid)
            else:
                self.settled.add(mid)

    def tags_upto(self, index: int, tag: int, multiple: bool) -> list[int]:
        unacked = self.model[index].unacked
        if not multiple:
            return [tag]
        return sorted(t for t in unacked if tag == 0 or t <= tag)

    # -- rules ---------------------------------------------------------------------------

    @rule(index=st.integers(0, SESSIONS - 1), count=st.integers(1, 3))
    def publish(self, index: int, count: int) -> None:
        for _ in range(count):
            mid = self.next_id
            self.next_id += 1
            self.ready.add(mid)
            self.sessions[index].publish("", "q", make_message(str(mid).encode(), "q"))
            self.absorb()

    @rule(index=st.integers(0, SESSIONS - 1), no_ack=st.booleans())
    def consume(self, index: int, no_ack: bool) -> None:
        tag = f"c{self.next_tag}"
        self.next_tag += 1
        self.consumers[tag] = ModelConsumer(tag, index, no_ack, self.model[index].per_consumer)
        self.sessions[index].consume("q", tag, no_ack=no_ack, exclusive=False, arguments={})
        self.absorb()

    @precondition(lambda self: bool(self.consumers))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        tag = data.draw(st.sampled_from(sorted(self.consumers)))
        consumer = self.consumers.pop(tag)
        assert self.sessions[consumer.session].cancel(tag)
        self.absorb()

    @rule(index=st.integers(0, SESSIONS - 1), no_ack=st.booleans())
    def get(self, index: int, no_ack: bool) -> None:
        result = self.sessions[index].get("q", no_ack=no_ack)
        if not self.ready:
            assert result is None
            return
        assert result is not None
        tag, entry, left = result
        mid = int(entry.message.body)
        assert mid == min(self.ready)
        assert entry.redelivered == (mid in self.ever_delivered)
        self.ready.discard(mid)
        self.ever_delivered.add(mid)
        assert left == len(self.ready)
        if no_ack:
            self.settled.add(mid)
        else:
            self.model[index].unacked[tag] = (mid, "")

    @precondition(lambda self: any(s.unacked for s in self.model))
    @rule(data=st.data(), multiple=st.booleans())
    def ack(self, data: st.DataObject, multiple: bool) -> None:
        index = data.draw(st.sampled_from([i for i, s in enumerate(self.model) if s.unacked]))
        tag = data.draw(st.sampled_from(sorted(self.model[index].unacked)))
        tags = self.tags_upto(index, tag, multiple)
        self.sessions[index].ack(tag, multiple=multiple)
        self.settle(index, tags, None)
        self.absorb()

    @precondition(lambda self: any(s.unacked for s in self.model))
    @rule(data=st.data(), multiple=st.booleans(), requeue=st.booleans())
    def nack(self, data: st.DataObject, multiple: bool, requeue: bool) -> None:
        index = data.draw(st.sampled_from([i for i, s in enumerate(self.model) if s.unacked]))
        tag = data.draw(st.sampled_from(sorted(self.model[index].unacked)))
        tags = self.tags_upto(index, tag, multiple)
        self.sessions[index].reject(tag, multiple=multiple, requeue=requeue)
        self.settle(index, tags, requeue)
        self.absorb()

    @rule(index=st.integers(0, SESSIONS - 1), multiple=st.booleans())
    def ack_everything(self, index: int, multiple: bool) -> None:
        if not multiple:
            # Tag 0 without multiple is never a valid tag: 406, and nothing changes.
            with pytest.raises(PreconditionFailed):
                self.sessions[index].ack(0)
            return
        tags = sorted(self.model[index].unacked)
        self.sessions[index].ack(0, multiple=True)
        self.settle(index, tags, None)
        self.absorb()

    @rule(index=st.integers(0, SESSIONS - 1), data=st.data())
    def ack_unknown(self, index: int, data: st.DataObject) -> None:
        known = self.model[index].unacked
        tag = data.draw(st.integers(1, 200).filter(lambda t: t not in known))
        with pytest.raises(PreconditionFailed):
            self.sessions[index].ack(tag, multiple=data.draw(st.booleans()))

    @rule(index=st.integers(0, SESSIONS - 1), count=st.integers(0, 3), global_=st.booleans())
    def qos(self, index: int, count: int, global_: bool) -> None:
        if global_:
            self.model[index].global_ = count
        else:
            self.model[index].per_consumer = count
            # RabbitMQ: a per-consumer limit lifts the channel-wide one.
            self.model[index].global_ = 0
            # Leveret applies a per-consumer limit to the channel's existing consumers too.
            for consumer in self.consumers.values():
                if consumer.session == index:
                    consumer.prefetch = count
        self.sessions[index].set_qos(0, count, global_)
        self.absorb()

    @rule(index=st.integers(0, SESSIONS - 1))
    def close(self, index: int) -> None:
        for tag in [t for t, c in self.consumers.items() if c.session == index]:
            del self.consumers[tag]
        old = self.model[index]
        self.model[index] = ModelSession()
        self.sinks[index] = self._sink(index)
        self.settle_all(old)
        self.sessions[index].close()
        self.sessions[index] = Session(self.vhost, self.owner, self.sinks[index])
        self.absorb()

    def settle_all(self, old: ModelSession) -> None:
        for mid, _tag in old.unacked.values():
            self.ready.add(mid)

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def nothing_lost_or_duplicated(self) -> None:
        unacked = self.unacked_ids()
        assert len(unacked) == len(set(unacked))
        parts = [self.ready, set(unacked), self.settled]
        assert sum(len(p) for p in parts) == self.next_id
        assert set().union(*parts) == set(range(self.next_id))

    @invariant()
    def ready_is_in_publish_order(self) -> None:
        entries = self.queue.ready_entries()
        assert [int(e.message.body) for e in entries] == sorted(self.ready)
        assert self.queue.message_count == len(entries)
        assert [e.redelivered for e in entries] == [
            mid in self.ever_delivered for mid in sorted(self.ready)
        ]
        assert self.queue.unacked_count == len(self.unacked_ids())

    @invariant()
    def nothing_is_stuck(self) -> None:
        if not self.ready:
            return
        for consumer in self.consumers.values():
            session = self.model[consumer.session]
            assert not consumer.no_ack, "ready messages while a no-ack consumer waits"
            full = bool(consumer.prefetch) and session.unacked_of(consumer.tag) >= (
                consumer.prefetch
            )
            full = full or (bool(session.global_) and session.consumer_unacked() >= session.global_)
            assert full, f"ready messages while {consumer.tag} has credit"


QueueMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestQueueMachine = QueueMachine.TestCase


class PagedQueueMachine(QueueMachine):
    """The same machine with a queue that pages beyond four resident messages."""

    def __init__(self) -> None:
        super().__init__()
        self.pager = MemoryPager()
        self.queue.pager = self.pager
        q = self.queue
        q.resident_max, q.resident_low, q.page_messages, q.page_bytes = 4, 2, 3, 1 << 20

    @invariant()
    def pages_are_freed(self) -> None:
        tail = self.queue._tail
        written = 0 if tail is None else len(tail.pages)
        assert len(self.pager.pages) == written


PagedQueueMachine.TestCase.settings = QueueMachine.TestCase.settings
TestPagedQueueMachine = PagedQueueMachine.TestCase
