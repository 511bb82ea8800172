"""A stateful property test of the queue-type interface, the same rules for every declarable
type (classic, priority, quorum, stream), in the core's own words: queues made by their type
through a ``VirtualHost``, consumers owned by a plain ``ConsumerOwner`` that gives credit back
as it settles, settlements through ``model/settle.py``. No front end takes part.

After every step it checks, for every type:

- capabilities are honest: an operation a type says it lacks (``gets``, ``purges``) raises
  ``unsupported``, and a type without ``auto_settle`` never settles a delivery as it goes;
- ``unacked_count`` is the number of deliveries held unsettled, and no consumer holds more
  than the credit it was given;
- for a type that removes what it delivers: every published message is exactly one of ready,
  held or gone, ``message_count`` counts the ready ones, a message ready while a consumer
  could take it is never left behind, a released message comes back redelivered (a quorum
  queue counts each release and drops the message past ``x-delivery-limit``);
- for a type read by offset (a stream): nothing is ever removed (``browse`` from 0 is every
  message published, in order), and each consumer reads the log in order from where it
  started, without gaps or repeats;
- the storage hooks tell the whole story: replaying what the queue wrote through its
  ``QueueStore`` (enqueued, minus removed, dead-lettered and purged) gives exactly the
  entries the queue still holds, ready or unsettled (what a replica would rebuild).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from leveret.errors import NotImplemented_
from leveret.model import settle
from leveret.model.consumer import UNLIMITED, CallbackOwner, Consumer
from leveret.model.settle import Delivery
from leveret.model.vhost import VirtualHost
from tests.queue_support import message

if TYPE_CHECKING:
    from collections.abc import Iterable

    from leveret.model.entry import QueuedMessage
    from leveret.model.queues import Queue

DELIVERY_LIMIT = 2
ARGUMENTS: dict[str, dict[str, object]] = {
    "classic": {},
    "priority": {"x-max-priority": 3},
    "quorum": {"x-queue-type": "quorum", "x-delivery-limit": DELIVERY_LIMIT},
    "stream": {"x-queue-type": "stream"},
}


def ident(entry: QueuedMessage) -> int:
    return int(entry.message.body)


class LedgerStore:
    """A ``QueueStore`` that keeps the log of operations a replica would receive."""

    def __init__(self) -> None:
        self.next_sid = 0
        self.live: dict[int, int] = {}  # sid -> message id
        self.operations: list[str] = []

    def enqueued(self, queue: Queue, entry: QueuedMessage) -> None:
        self.next_sid += 1
        entry.sid = self.next_sid
        self.live[entry.sid] = ident(entry)
        self.operations.append("enqueued")

    def delivered(self, queue: Queue, entry: QueuedMessage) -> None:
        assert entry.sid in self.live
        self.operations.append("delivered")

    def removed(self, queue: Queue, entry: QueuedMessage) -> None:
        del self.live[entry.sid]
        self.operations.append("removed")

    def requeued(self, queue: Queue, entry: QueuedMessage) -> None:
        assert entry.sid in self.live
        self.operations.append("requeued")

    def dead_lettered(self, queue: Queue, entry: QueuedMessage, reason: str) -> None:
        del self.live[entry.sid]
        self.operations.append(f"dead_lettered:{reason}")

    def purged(self, queue: Queue, sids: Iterable[int]) -> None:
        for sid in sids:
            del self.live[sid]
        self.operations.append("purged")


@dataclass
class Held:
    delivery: Delivery
    ident: int


@dataclass
class Owner:
    """A consumer's owner in the core's words: takes what its credit allows, keeps each
    delivery until the test settles it, and gives the credit back then. Its consumers are
    owned by ``owner``, a ``CallbackOwner`` (the compiled build's ``ConsumerOwner`` cannot
    be subclassed here)."""

    held: list[Held] = field(default_factory=list)
    received: dict[str, list[QueuedMessage]] = field(default_factory=dict)
    credit_given: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.owner = CallbackOwner(self.deliver)

    def deliver(self, consumer: Consumer, entry: QueuedMessage) -> None:
        consumer.credit -= 1
        self.received.setdefault(consumer.tag, []).append(entry)
        if not consumer.auto_settle:
            consumer.unsettled += 1
            self.held.append(Held(Delivery(entry, consumer.queue, consumer), ident(entry)))


class QueueTypeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.vhost = VirtualHost("/")
        self.owner = Owner()
        self.store = LedgerStore()
        self.next_id = 0
        self.published: list[int] = []
        self.gone: set[int] = set()  # settled, rejected, purged or dropped
        self.ever_delivered: set[int] = set()
        self.returns: dict[int, int] = {}  # message id -> failed deliveries (quorum)
        self.consumers: list[Consumer] = []
        self.starts: dict[str, int] = {}  # stream consumer -> the offset it started at
        self.next_tag = 0

    @initialize(kind=st.sampled_from(sorted(ARGUMENTS)))
    def declare(self, kind: str) -> None:
        self.kind = kind
        self.queue = self.vhost.declare_queue(
            "q", owner=None, durable=True, arguments=ARGUMENTS[kind]
        )
        self.queue.store_id = 1  # as a durable queue in a broker with a store
        self.queue.store = self.store

    @property
    def offsets(self) -> bool:
        return self.queue.type.offsets

    # -- rules -----------------------------------------------------------------------

    @rule(count=st.integers(1, 4), priority=st.none() | st.integers(0, 5), persistent=st.booleans())
    def publish(self, count: int, priority: int | None, persistent: bool) -> None:
        for _ in range(count):
            self.next_id += 1
            self.published.append(self.next_id)
            message_ = message(self.next_id, priority=priority, persistent=persistent)
            assert self.queue.enqueue(message_)

    @precondition(lambda self: len(self.consumers) < 3)
    @rule(credit=st.sampled_from([1, 2, 5, UNLIMITED]), auto_settle=st.booleans())
    def consume(self, credit: int, auto_settle: bool) -> None:
        self.next_tag += 1
        tag = f"c{self.next_tag}"
        start = self.queue.message_count  # a stream consumer starts at the next offset
        consumer = self.queue.consumer(
            tag, self.owner.owner, auto_settle=auto_settle, credit=credit
        )
        if not self.queue.type.auto_settle:
            assert not consumer.auto_settle
        self.owner.credit_given[tag] = credit
        self.starts[tag] = start
        self.consumers.append(consumer)
        self.queue.add_consumer(consumer)

    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        consumer = data.draw(st.sampled_from(self.consumers))
        self.consumers.remove(consumer)
        self.queue.remove_consumer(consumer)
        mine = [h for h in self.owner.held if h.delivery.consumer is consumer]
        # A cancelled consumer's unsettled deliveries go back (a channel closing).
        self._settle(mine, "release")

    @precondition(lambda self: self.owner.held)
    @rule(data=st.data(), outcome=st.sampled_from(["accept", "reject", "release", "modify"]))
    def settle_some(self, data: st.DataObject, outcome: str) -> None:
        count = data.draw(st.integers(1, len(self.owner.held)))
        chosen = data.draw(st.permutations(self.owner.held))[:count]
        self._settle(chosen, outcome)

    @rule(auto_settle=st.booleans())
    def get(self, auto_settle: bool) -> None:
        if not self.queue.type.gets:
            with pytest.raises(NotImplemented_, match="not supported by"):
                self.queue.get(auto_settle=auto_settle)
            return
        entry = self.queue.get(auto_settle=auto_settle)
        if entry is None:
            return
        self.ever_delivered.add(ident(entry))
        if auto_settle:
            self.gone.add(ident(entry))
        else:
            self.owner.held.append(Held(Delivery(entry, self.queue, None), ident(entry)))

    @rule()
    def purge(self) -> None:
        if not self.queue.type.purges:
            with pytest.raises(NotImplemented_, match="not supported by"):
                self.queue.purge()
            return
        ready = {ident(e) for e in self.queue.ready_entries()}
        assert self.queue.purge() == len(ready)
        self.gone |= ready

    # -- settling --------------------------------------------------------------------

    def _settle(self, chosen: list[Held], outcome: str) -> None:
        for held in chosen:
            self.owner.held.remove(held)
            consumer = held.delivery.consumer
            if consumer is not None:
                consumer.unsettled -= 1
                consumer.credit += 1
        deliveries = [h.delivery for h in chosen]
        if outcome == "accept":
            settle.accept(deliveries)
        elif outcome == "reject":
            settle.reject(deliveries)
        elif outcome == "release":
            settle.release(deliveries)
        else:
            settle.modify(deliveries, headers={"x-note": 1}, failed=True)
        if not self.offsets:
            for held in chosen:
                self._returned(held.ident, outcome)
        self.queue.dispatch()

    def _returned(self, mid: int, outcome: str) -> None:
        if outcome in ("accept", "reject"):
            self.gone.add(mid)
            return
        if self.kind == "quorum":
            self.returns[mid] = self.returns.get(mid, 0) + 1
            if self.returns[mid] > DELIVERY_LIMIT:
                self.gone.add(mid)  # dead-lettered (no dead-letter exchange: dropped)

    # -- invariants ------------------------------------------------------------------

    def _absorb(self) -> None:
        """Record what was delivered since the last step."""
        for tag, entries in self.owner.received.items():
            for entry in entries[len(getattr(self, "_seen_" + tag, [])) :]:
                mid = ident(entry)
                if not self.offsets:
                    assert mid not in self.gone, f"{mid} was delivered after it left"
                    assert entry.redelivered == (mid in self.ever_delivered)
                    if self.kind == "quorum":
                        count = (entry.message.headers or {}).get("x-delivery-count")
                        assert count == self.returns.get(mid, 0)
                self.ever_delivered.add(mid)
            setattr(self, "_seen_" + tag, list(entries))
        consumers = {c.tag: c for c in self.consumers}
        for tag, entries in self.owner.received.items():
            consumer = consumers.get(tag)
            if consumer is not None and consumer.auto_settle and not self.offsets:
                self.gone |= {ident(e) for e in entries}

    @invariant()
    def deliveries_are_accounted_for(self) -> None:
        if not hasattr(self, "queue"):
            return
        self._absorb()
        queue = self.queue
        assert queue.unacked_count == len(self.owner.held)
        for consumer in self.consumers:
            given = self.owner.credit_given[consumer.tag]
            assert consumer.unsettled <= given
        if self.offsets:
            self._check_log()
        else:
            self._check_conservation()

    def _check_conservation(self) -> None:
        queue = self.queue
        ready = [ident(e) for e in queue.ready_entries()]
        held = [h.ident for h in self.owner.held]
        assert len(set(ready)) == len(ready)
        assert not set(ready) & set(held)
        assert not (set(ready) | set(held)) & self.gone
        assert set(ready) | set(held) | self.gone == set(self.published)
        assert queue.message_count == len(ready)
        if ready:
            assert not any(c.can_take(queue.ready_entries()[0].message) for c in self.consumers)
        # What the store was told leaves exactly what the queue holds: every entry of a
        # quorum queue, the persistent ones of a classic queue (its plain path offers no
        # other to the store: the journal keeps only those).
        entries = [*queue.ready_entries(), *(h.delivery.entry for h in self.owner.held)]
        if self.kind == "quorum":
            assert all(e.sid for e in entries)
        assert self.store.live == {e.sid: ident(e) for e in entries if e.sid}

    def _check_log(self) -> None:
        logged = [ident(b.entry) for b in self.queue.browse(0)]
        assert logged == self.published
        assert [b.position for b in self.queue.browse(0)] == list(range(len(self.published)))
        for tag, entries in self.owner.received.items():
            offsets = [e.seq for e in entries]
            start = self.starts[tag]
            assert offsets == list(range(start, start + len(offsets)))
            assert [ident(e) for e in entries] == self.published[start : start + len(offsets)]
        assert self.store.live == {}  # a stream keeps its own log, not these hooks


QueueTypeMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_queue_types = QueueTypeMachine.TestCase


def test_the_ledger_sees_the_operations_a_replica_repeats() -> None:
    """Each operation of a quorum queue, in the order its store records them."""
    vhost = VirtualHost("/")
    queue = vhost.declare_queue("q", owner=None, durable=True, arguments=ARGUMENTS["quorum"])
    store = LedgerStore()
    queue.store_id, queue.store = 1, store
    owner = Owner()
    for i in range(3):
        queue.enqueue(message(i, priority=None, persistent=False))
    consumer = queue.consumer("c", owner.owner, auto_settle=False, credit=1)
    queue.add_consumer(consumer)  # delivers 0

    def settled(outcome: str) -> None:
        held = owner.held.pop()
        consumer.credit += 1
        getattr(settle, outcome)([held.delivery])
        queue.dispatch()

    settled("accept")  # 0 goes; 1 is delivered
    settled("release")  # 1 back (1 failed delivery) and delivered again
    settled("release")  # (2 failed deliveries)
    settled("release")  # past the limit: dead-lettered; 2 is delivered
    queue.remove_consumer(consumer)
    settle.release([owner.held.pop().delivery])  # 2 back, nobody takes it
    queue.purge()
    assert store.operations == [
        *["enqueued"] * 3,
        "delivered",
        "removed",
        "delivered",
        "requeued",
        "delivered",
        "requeued",
        "delivered",
        "dead_lettered:delivery_limit",
        "delivered",
        "requeued",
        "purged",
    ]
    assert store.live == {}
    assert queue.message_count == queue.unacked_count == 0
