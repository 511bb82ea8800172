"""Stateful property tests of message groups and last-value queues (``model/keyed_queue.py``)
through two 0-9-1 channels of the core (``server/amqp091/session.py``: prefetch, acks,
nacks with and without requeue, rejects to a dead-letter exchange, gets, cancels and closed
channels, which release what they held: a consumer failing).

Groups, after every step:

- a group's unsettled messages are all held by one consumer (or one get);
- a message is handed out only when no earlier message of its group is ready: order within
  a group holds through requeues and failures;
- while a consumer has credit, no ready message has a group that is free or its own
  (nothing is stuck), and a busy group never holds up the others;
- nothing is lost or duplicated, and the queue's ready messages are in publish order.

Last values, after every step: at most one ready message per key, the newest one known; a
replaced message never comes back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink, SinkEvent, make_message

if TYPE_CHECKING:
    from leveret.protocol.amqp091.fieldtable import FieldValue

SESSIONS = 2
GROUPS = ("A", "B", "C", None)  # None: no header, the default group


@dataclass
class ModelConsumer:
    tag: str
    session: int
    no_ack: bool
    prefetch: int


@dataclass
class ModelSession:
    per_consumer: int = 0
    # delivery tag -> (message id, consumer tag, "" for a get)
    unacked: dict[int, tuple[int, str]] = field(default_factory=dict)

    def unacked_of(self, tag: str) -> int:
        return sum(1 for _mid, t in self.unacked.values() if t == tag)


class _Tee(list[SinkEvent]):
    def __init__(self, log: list[tuple[int, SinkEvent]], index: int) -> None:
        super().__init__()
        self.log = log
        self.session_index = index

    def append(self, event: SinkEvent) -> None:
        super().append(event)
        self.log.append((self.session_index, event))


class KeyedMachine(RuleBasedStateMachine):
    """What both machines share: the channels, the consumers, the reference state."""

    ARGUMENTS: dict[str, object] = {}

    def __init__(self) -> None:
        super().__init__()
        self.vhost = VirtualHost("/")
        self.owner = object()
        self.vhost.declare_exchange("dlx", "fanout")
        self.vhost.declare_queue("dead", owner=self.owner)
        self.vhost.bind_queue("dead", "dlx", "", {}, owner=self.owner)
        self.queue = self.vhost.declare_queue(
            "q", owner=self.owner, arguments={**self.ARGUMENTS, "x-dead-letter-exchange": "dlx"}
        )
        self.log: list[tuple[int, SinkEvent]] = []
        self.sinks = [RecordingSink(events=_Tee(self.log, i)) for i in range(SESSIONS)]
        self.sessions = [Session(self.vhost, self.owner, s) for s in self.sinks]
        self.model = [ModelSession() for _ in range(SESSIONS)]
        self.consumers: dict[str, ModelConsumer] = {}
        self.next_id = 0
        self.next_tag = 0
        self.key_of: dict[int, str | None] = {}
        self.ready: set[int] = set()
        self.settled: set[int] = set()

    # -- what subclasses decide ----------------------------------------------------------

    def published(self, mid: int) -> None:
        """The reference's part of a publish (``mid`` is ready)."""

    def requeued(self, mid: int) -> None:
        self.ready.add(mid)

    def check_delivery(self, mid: int, holder: tuple[int, str]) -> None:
        """A handed-out message: assert what the queue's rules say."""

    # -- bookkeeping ---------------------------------------------------------------------

    def unacked(self) -> list[tuple[int, tuple[int, str]]]:
        model = self.model
        return [(mid, (i, tag)) for i, s in enumerate(model) for mid, tag in s.unacked.values()]

    def absorb(self) -> None:
        events = self.log[:]
        self.log.clear()
        for sink in self.sinks:
            sink.events.clear()
        for index, event in events:
            assert event.kind == "deliver", event
            mid = int(event.body)
            assert mid in self.ready, f"delivered {mid}, which is not ready"
            consumer = self.consumers[event.consumer_tag]
            self.check_delivery(mid, (index, consumer.tag))
            self.ready.discard(mid)
            if consumer.no_ack:
                self.settled.add(mid)
                continue
            session = self.model[index]
            if consumer.prefetch:
                assert session.unacked_of(consumer.tag) < consumer.prefetch
            session.unacked[event.delivery_tag] = (mid, consumer.tag)

    def settle(self, index: int, tags: list[int], requeue: bool | None) -> None:
        session = self.model[index]
        for tag in sorted(tags, reverse=True):
            mid, _consumer = session.unacked.pop(tag)
            if requeue:
                self.requeued(mid)
            else:
                self.settled.add(mid)

    # -- rules ---------------------------------------------------------------------------

    @rule(index=st.integers(0, SESSIONS - 1), keys=st.lists(st.sampled_from(GROUPS), max_size=3))
    def publish(self, index: int, keys: list[str | None]) -> None:
        for key in keys:
            mid = self.next_id
            self.next_id += 1
            self.key_of[mid] = key
            self.ready.add(mid)
            self.published(mid)
            headers: dict[str, FieldValue] | None = {self.HEADER: key} if key else None
            props = BasicProperties(headers=headers)
            self.sessions[index].publish("", "q", make_message(str(mid).encode(), "q", "", props))
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
        if result is None:
            return
        tag, entry, _left = result
        mid = int(entry.message.body)
        assert mid in self.ready
        self.check_delivery(mid, (index, ""))
        self.ready.discard(mid)
        if no_ack:
            self.settled.add(mid)
        else:
            self.model[index].unacked[tag] = (mid, "")
        self.absorb()

    @precondition(lambda self: any(s.unacked for s in self.model))
    @rule(data=st.data(), outcome=st.sampled_from(["ack", "requeue", "reject"]))
    def settle_one(self, data: st.DataObject, outcome: str) -> None:
        index = data.draw(st.sampled_from([i for i, s in enumerate(self.model) if s.unacked]))
        tag = data.draw(st.sampled_from(sorted(self.model[index].unacked)))
        if outcome == "ack":
            self.sessions[index].ack(tag)
            self.settle(index, [tag], None)
        else:
            requeue = outcome == "requeue"
            self.sessions[index].reject(tag, requeue=requeue)
            self.settle(index, [tag], requeue)
        self.absorb()

    @rule(index=st.integers(0, SESSIONS - 1), count=st.integers(0, 3))
    def qos(self, index: int, count: int) -> None:
        self.model[index].per_consumer = count
        for consumer in self.consumers.values():
            if consumer.session == index:
                consumer.prefetch = count
        self.sessions[index].set_qos(0, count, False)
        self.absorb()

    @rule(index=st.integers(0, SESSIONS - 1))
    def fail(self, index: int) -> None:
        """The channel goes (a consumer's connection failed): what it held comes back."""
        for tag in [t for t, c in self.consumers.items() if c.session == index]:
            del self.consumers[tag]
        old = self.model[index]
        self.model[index] = ModelSession()
        self.sinks[index] = RecordingSink(events=_Tee(self.log, index))
        for mid in sorted((m for m, _t in old.unacked.values()), reverse=True):
            self.requeued(mid)  # the queue puts them back newest first
        self.sessions[index].close()
        self.sessions[index] = Session(self.vhost, self.owner, self.sinks[index])
        self.absorb()

    HEADER = "g"

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def nothing_lost_or_duplicated(self) -> None:
        held = [mid for mid, _h in self.unacked()]
        assert len(held) == len(set(held))
        parts = [self.ready, set(held), self.settled]
        assert sum(len(p) for p in parts) == self.next_id
        assert set().union(*parts) == set(range(self.next_id))
        entries = self.queue.ready_entries()
        assert [int(e.message.body) for e in entries] == sorted(self.ready)
        assert self.queue.unacked_count == len(held)


class GroupMachine(KeyedMachine):
    ARGUMENTS = {"qpid.group_header_key": "g", "qpid.shared_msg_group": 1}

    def group(self, mid: int) -> str:
        key = self.key_of[mid]
        return key if key is not None else "qpid.no-group"

    def holders(self) -> dict[str, set[tuple[int, str]]]:
        out: dict[str, set[tuple[int, str]]] = {}
        for mid, holder in self.unacked():
            out.setdefault(self.group(mid), set()).add(holder)
        return out

    def check_delivery(self, mid: int, holder: tuple[int, str]) -> None:
        group = self.group(mid)
        earlier = [m for m in self.ready if m < mid and self.group(m) == group]
        assert not earlier, f"{mid} of group {group} went before {earlier}"
        others = self.holders().get(group, set()) - {holder}
        if holder[1]:
            assert not others, f"{mid} of group {group} to {holder} while {others} hold it"

    @invariant()
    def one_holder_per_group(self) -> None:
        for group, holders in self.holders().items():
            assert len(holders) <= 1, f"group {group} held by {holders}"

    @invariant()
    def nothing_is_stuck(self) -> None:
        holders = self.holders()
        for consumer in self.consumers.values():
            session = self.model[consumer.session]
            if consumer.prefetch and session.unacked_of(consumer.tag) >= consumer.prefetch:
                continue
            me = (consumer.session, consumer.tag)
            for mid in self.ready:
                held = holders.get(self.group(mid), set())
                stuck = f"{mid} ({self.group(mid)}) is ready while {consumer.tag} could take it"
                assert held, stuck
                assert held != {me}, stuck


class LastValueMachine(KeyedMachine):
    ARGUMENTS = {"qpid.last_value_queue_key": "k"}
    HEADER = "k"

    def published(self, mid: int) -> None:
        key = self.key_of[mid]
        if key is None:
            return
        for other in [m for m in self.ready if m != mid and self.key_of[m] == key]:
            self.ready.discard(other)  # replaced: it leaves
            self.settled.add(other)

    def requeued(self, mid: int) -> None:
        key = self.key_of[mid]
        if key is not None and any(self.key_of[m] == key for m in self.ready):
            self.settled.add(mid)  # a newer value of its key is ready: the stale one goes
            return
        self.ready.add(mid)

    def check_delivery(self, mid: int, holder: tuple[int, str]) -> None:
        assert mid == min(self.ready), "a last-value queue delivers from its head"

    @invariant()
    def one_ready_value_per_key(self) -> None:
        keys = [self.key_of[m] for m in self.ready if self.key_of[m] is not None]
        assert len(keys) == len(set(keys))


_SETTINGS = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
GroupMachine.TestCase.settings = _SETTINGS
LastValueMachine.TestCase.settings = _SETTINGS
TestGroupMachine = GroupMachine.TestCase
TestLastValueMachine = LastValueMachine.TestCase
