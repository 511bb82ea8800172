"""The delayed-message exchange in the core: the plugin's rules (declare arguments, how
``x-delay`` is read, routing when due with the bindings of then, the header swapped), and
what Leveret adds (listing, cancel, reschedule, the AMQP cancel request), with a clock the
test moves and a journal that records what would be stored."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from leveret.convert.amqp091 import wire_message
from leveret.errors import CommandInvalid, PreconditionFailed
from leveret.model.exchanges.delayed import MAX_DELAY, delay_of
from leveret.model.journal import NullJournal
from leveret.model.queues.delayed import CANCELLED_HEADER, RELEASE_BATCH, STORE_PREFIX, DelayQueue
from leveret.model.queues.delayed import Selector as Sel
from leveret.model.timers import Timers
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from leveret.model.message import Message

WALL = 1_700_000_000.0  # the wall clock at the test's monotonic 0


class Journal(NullJournal):
    """Records what the store would be told."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self._next = 0
        self.writes = 0

    def queue_declared(
        self, vhost: str, name: str, auto_delete: bool, arguments: Mapping[str, object]
    ) -> int:
        self._next += 1
        self.calls.append(("q+", name))
        return 100 + self._next

    def queue_deleted(self, vhost: str, name: str, store_id: int) -> None:
        self.calls.append(("q-", name, store_id))

    def enqueued(self, queue_id: int, message: Message, at_ms: int = 0) -> int:
        self._next += 1
        self.writes += 1
        self.calls.append(("enq", queue_id, message.body, at_ms))
        return self._next

    def removed(self, queue_id: int, sid: int) -> None:
        self.calls.append(("rm", queue_id, sid))

    def after_commit(self, callback: Callable[[], None]) -> None:
        callback()


class World:
    def __init__(self, inner: str = "direct", *, durable: bool = False) -> None:
        self.timers = Timers()
        self.timers.wall_offset = WALL
        self.vhost = VirtualHost("/", timers=self.timers)
        self.journal = Journal()
        self.vhost.journal = self.vhost.store_journal = self.journal
        self.owner = object()
        self.sink = RecordingSink()
        self.session = Session(self.vhost, self.owner, self.sink)
        self.vhost.declare_exchange(
            "d", "x-delayed-message", durable=durable, arguments={"x-delayed-type": inner}
        )
        self.store = self.vhost.delay_store(self.vhost.exchanges["d"])
        assert self.store is not None

    def queue(self, name: str, key: str = "k", exchange: str = "d") -> None:
        self.vhost.declare_queue(name, owner=self.owner, durable=True)
        self.vhost.bind_queue(name, exchange, key, {}, owner=self.owner)

    def publish(
        self, body: bytes, key: str = "k", exchange: str = "d", mandatory: bool = False, **p: Any
    ) -> None:
        raw = BasicProperties(**p).encode()
        self.session.publish(
            exchange, key, wire_message(exchange, key, raw, body), mandatory=mandatory
        )

    def bodies(self, name: str) -> list[bytes]:
        return [e.message.body for e in self.vhost.queues[name].ready_entries()]

    def headers(self, name: str) -> list[Mapping[str, object] | None]:
        return [e.message.headers for e in self.vhost.queues[name].ready_entries()]

    def advance(self, seconds: float) -> None:
        self.timers.expire(self.timers.now + seconds)


def test_declare_checks_x_delayed_type_as_the_plugin() -> None:
    vhost = VirtualHost("/")
    with pytest.raises(PreconditionFailed, match="'x-delayed-type' must bean existing"):
        vhost.declare_exchange("d", "x-delayed-message")
    with pytest.raises(PreconditionFailed, match="must bean existing"):
        vhost.declare_exchange("d", "x-delayed-message", arguments={"x-delayed-type": 5})
    with pytest.raises(CommandInvalid, match="unknown exchange type 'nope'"):
        vhost.declare_exchange("d", "x-delayed-message", arguments={"x-delayed-type": "nope"})
    with pytest.raises(PreconditionFailed, match="cannot be x-delayed-message"):
        vhost.declare_exchange(
            "d", "x-delayed-message", arguments={"x-delayed-type": "x-delayed-message"}
        )
    assert "d" not in vhost.exchanges
    x = vhost.declare_exchange("d", "x-delayed-message", arguments={"x-delayed-type": b"topic"})
    assert repr(x.kind) == "<DelayedExchange topic bindings=0>"
    store = vhost.delay_store(x)
    assert isinstance(store, DelayQueue)
    assert store.name == STORE_PREFIX + "d"
    assert "amq.delayed.d" not in vhost.queues  # hidden
    assert vhost.delay_store(vhost.exchanges["amq.direct"]) is None


@pytest.mark.parametrize(
    ("value", "delay"),
    [
        (None, 0),
        (1500, 1500),
        (0, 0),
        (-5, 0),
        (MAX_DELAY, MAX_DELAY),
        (MAX_DELAY + 1, 0),  # the plugin: beyond an Erlang timer, routed at once
        ("250", 250),
        (b"250", 250),
        ("+7", 7),
        ("2.5", 0),
        ("soon", 0),
        (99.9, 99),
        (Decimal("12.7"), 12),
        (float("nan"), 0),
        (True, 0),
        ([1], 0),
    ],
)
def test_delay_is_read_as_the_plugin_reads_it(value: object, delay: int) -> None:
    assert delay_of({"x-delay": value} if value is not None else {}) == delay


def test_messages_are_routed_when_due_in_due_order_with_the_header_swapped() -> None:
    w = World()
    w.queue("q")
    w.publish(b"late", headers={"x-delay": 5000, "other": "kept"})
    w.publish(b"early", headers={"x-delay": 1000})
    w.publish(b"now")  # no header: routed at once
    w.publish(b"zero", headers={"x-delay": 0})
    assert w.bodies("q") == [b"now", b"zero"]
    assert w.store is not None
    assert w.store.pending == 2
    w.advance(0.999)
    assert w.bodies("q") == [b"now", b"zero"]
    w.advance(0.001)
    assert w.bodies("q") == [b"now", b"zero", b"early"]
    w.advance(4.0)
    assert w.bodies("q") == [b"now", b"zero", b"early", b"late"]
    assert w.headers("q")[2] == {"x-delay": -1000}
    assert w.headers("q")[3] == {"x-delay": -5000, "other": "kept"}
    assert w.store.pending == 0
    assert w.vhost.exchanges["d"].n_publish_out == 4


def test_due_messages_take_the_bindings_of_then() -> None:
    w = World("topic")
    w.publish(b"m1", key="a.b", headers={"x-delay": 100})
    w.publish(b"m2", key="a.b", headers={"x-delay": 300})
    w.queue("q", key="a.*")  # bound after the publish: still gets it
    w.advance(0.1)
    assert w.bodies("q") == [b"m1"]
    w.vhost.unbind_queue("q", "d", "a.*", {}, owner=w.owner)
    w.advance(0.2)  # routed nowhere: dropped, as the plugin does
    assert w.bodies("q") == [b"m1"]
    assert w.store is not None
    assert w.store.n_unroutable == 1
    assert w.store.pending == 0


@pytest.mark.parametrize("inner", ["direct", "fanout", "topic", "headers"])
def test_each_inner_type_routes_the_released_message(inner: str) -> None:
    w = World(inner)
    args: dict[str, object] = {"x-match": "any", "color": "red"} if inner == "headers" else {}
    w.vhost.declare_queue("q", owner=w.owner)
    w.vhost.bind_queue("q", "d", "k", args, owner=w.owner)
    w.publish(b"m", headers={"x-delay": 10, "color": "red"})
    assert w.bodies("q") == []
    w.advance(0.01)
    assert w.bodies("q") == [b"m"]


def test_timers_hold_one_deadline_however_many_messages_wait() -> None:
    w = World()
    w.queue("q")
    for i in range(500):
        w.publish(str(i).encode(), headers={"x-delay": 10_000 - i})
    # Each publish earlier than the last armed one re-arms: those entries are stale but
    # bounded by the re-arms; publishing later ones adds nothing.
    before = len(w.timers)
    for i in range(500):
        w.publish(b"later", headers={"x-delay": 20_000 + i})
    assert len(w.timers) == before
    w.advance(10.0)
    assert len(w.vhost.queues["q"].ready_entries()) == 500
    w.advance(20.0)
    assert len(w.vhost.queues["q"].ready_entries()) == 1000
    assert len(w.timers) == 0


def test_a_crowd_due_at_once_goes_out_over_several_turns() -> None:
    w = World()
    w.queue("q")
    for _ in range(RELEASE_BATCH * 2 + 5):
        w.publish(b"x", headers={"x-delay": 50})
    w.advance(0.05)
    assert len(w.vhost.queues["q"].ready_entries()) == RELEASE_BATCH
    w.advance(0.001)
    w.advance(0.001)
    assert len(w.vhost.queues["q"].ready_entries()) == RELEASE_BATCH * 2 + 5


def test_listing_cancel_and_reschedule() -> None:
    w = World()
    w.queue("q")
    w.publish(b"a", headers={"x-delay": 3000}, message_id="m-a", correlation_id="c1")
    w.publish(b"b", headers={"x-delay": 1000}, message_id="m-b", correlation_id="c1")
    w.publish(b"c", key="other", headers={"x-delay": 2000}, message_id="m-c")
    store = w.store
    assert store is not None
    listed = store.entries()
    assert [e.message.body for e in listed] == [b"b", b"c", b"a"]
    assert [e.due for e in listed] == [int(WALL * 1000) + d for d in (1000, 2000, 3000)]
    assert [e.message.body for e in store.entries(limit=1, skip=1)] == [b"c"]
    assert [e.message.body for e in store.entries(Sel(correlation_id="c1"))] == [b"b", b"a"]
    assert store.next_due() == int(WALL * 1000) + 1000
    assert store.cancel(Sel()) == 0  # nothing selected: nothing cancelled
    assert store.cancel(Sel(message_id="m-b")) == 1
    assert store.cancel(Sel(message_id="m-b")) == 0
    moved = store.reschedule(Sel(routing_key="other"), delay=500)
    assert [e.message.body for e in moved] == [b"c"]
    assert moved[0].id > listed[-1].id  # a new id
    w.advance(0.5)
    assert w.bodies("q") == []  # "other" is not bound
    assert store.n_unroutable == 1
    assert store.reschedule(Sel(ids=[listed[2].id]), due=int(WALL * 1000) + 700)[0].id
    w.advance(0.2001)  # (the wall clock's milliseconds, seen from the monotonic clock)
    assert w.bodies("q") == [b"a"]
    assert w.headers("q") == [{"x-delay": -200}]  # the new delay
    with pytest.raises(ValueError, match="either"):
        store.reschedule(Sel(everything=True))
    with pytest.raises(ValueError, match="delay must be"):
        store.reschedule(Sel(everything=True), delay=-1)
    assert store.pending == 0
    assert store.n_cancelled == 1


def test_cancel_everything_and_many_cancellations_compact_the_heap() -> None:
    w = World()
    for i in range(1000):
        w.publish(b"x", headers={"x-delay": 1000 + i}, message_id=str(i % 10))
    store = w.store
    assert store is not None
    assert store.cancel(Sel(message_id="3")) == 100
    assert store.cancel(Sel(everything=True, routing_key="k")) == 900
    assert store.pending == 0
    assert store.pending_bytes == 0
    assert store.entries() == []
    assert store.next_due() is None
    assert w.vhost.gauge.bytes == 0


def test_the_amqp_cancel_request() -> None:
    w = World()
    w.queue("q")
    w.vhost.declare_queue("replies", owner=w.owner)
    w.publish(b"a", headers={"x-delay": 1000}, message_id="order-1")
    w.publish(b"b", headers={"x-delay": 1000}, message_id="order-2", correlation_id="c")
    w.publish(b"c", headers={"x-delay": 1000}, message_id="order-2", correlation_id="d")
    w.publish(b"", headers={"x-delayed-cancel": "order-1"})
    w.publish(
        b"",
        headers={"x-delayed-cancel": {"message-id": "order-2", "correlation-id": "c"}},
        reply_to="replies",
        correlation_id="req-7",
        mandatory=True,
    )
    w.publish(b"", headers={"x-delayed-cancel": "order-1"}, reply_to="replies")
    assert w.sink.take("returned") == []  # a cancel request is never returned
    replies = w.vhost.queues["replies"].ready_entries()
    assert [e.message.headers for e in replies] == [
        {CANCELLED_HEADER: 1},
        {CANCELLED_HEADER: 0},
    ]
    assert replies[0].message.properties.correlation_id == "req-7"  # type: ignore[attr-defined]
    assert replies[0].message.properties.reply_to is None
    w.advance(1.0)
    assert w.bodies("q") == [b"c"]


def test_cancel_at_the_due_time_either_cancels_or_finds_it_gone() -> None:
    w = World()
    w.queue("q")
    w.publish(b"a", headers={"x-delay": 1000}, message_id="a")
    w.publish(b"b", headers={"x-delay": 1000}, message_id="b")
    w.timers.now = 1.0  # the due time has come but the timer has not fired yet
    assert w.store is not None
    assert w.store.cancel(Sel(message_id="a")) == 1
    w.advance(0.0)
    assert w.bodies("q") == [b"b"]
    assert w.store.cancel(Sel(message_id="b")) == 0  # delivered: nothing to cancel


def test_mandatory_delayed_publish_is_not_returned_and_confirms_once_stored() -> None:
    w = World(durable=True)
    w.session.select_confirm()
    w.publish(b"m", headers={"x-delay": 100}, mandatory=True)
    w.session.flush_confirms()
    assert w.sink.take("returned") == []
    assert [e.kind for e in w.sink.take()] == ["confirm"]


def test_durable_store_journals_due_times_and_removals() -> None:
    w = World(durable=True)
    w.queue("q")
    w.publish(b"a", headers={"x-delay": 1000}, delivery_mode=1)  # transient: kept too
    w.publish(b"b", headers={"x-delay": 2000}, delivery_mode=2)
    due = int(WALL * 1000)
    assert w.journal.calls == [
        ("q+", "q"),
        ("q+", "amq.delayed.d"),
        ("enq", 102, b"a", due + 1000),
        ("enq", 102, b"b", due + 2000),
    ]
    w.journal.calls.clear()
    w.advance(1.0)
    # Removed from the store; "a" is transient, so the queue does not store it.
    assert w.journal.calls == [("rm", 102, 3)]
    w.journal.calls.clear()
    assert w.store is not None
    assert w.store.cancel(Sel(everything=True)) == 1
    assert w.journal.calls == [("rm", 102, 4)]
    w.publish(b"c", headers={"x-delay": 2000})
    w.journal.calls.clear()
    w.vhost.delete_exchange("d")
    assert w.journal.calls == [("rm", 102, 5), ("q-", "amq.delayed.d", 102)]
    w.advance(5.0)
    assert w.bodies("q") == [b"a"]


def test_a_non_durable_exchange_stores_nothing() -> None:
    w = World()
    w.publish(b"a", headers={"x-delay": 1000}, delivery_mode=2)
    w.advance(1.0)
    assert w.journal.calls == []


def test_deleting_the_exchange_drops_its_pending_messages() -> None:
    w = World()
    w.queue("q")
    w.publish(b"a", headers={"x-delay": 100})
    w.vhost.delete_exchange("d")
    w.vhost.declare_exchange("d", "x-delayed-message", arguments={"x-delayed-type": "direct"})
    w.vhost.bind_queue("q", "d", "k", {}, owner=w.owner)
    w.advance(1.0)
    assert w.bodies("q") == []
    assert w.vhost.gauge.bytes == 0


def test_exchange_to_exchange_bindings_hold_only_at_the_delayed_exchange() -> None:
    w = World()
    w.vhost.declare_exchange("src", "fanout")
    w.vhost.declare_queue("direct-q", owner=w.owner)
    w.vhost.bind_queue("direct-q", "src", "", {}, owner=w.owner)
    w.vhost.bind_exchange("d", "src", "", {})
    w.vhost.declare_exchange("after", "fanout")
    w.vhost.bind_exchange("after", "d", "k", {})
    w.vhost.declare_queue("after-q", owner=w.owner)
    w.vhost.bind_queue("after-q", "after", "", {}, owner=w.owner)
    w.publish(b"m", exchange="src", headers={"x-delay": 100})
    assert w.bodies("direct-q") == [b"m"]
    assert w.bodies("after-q") == []
    w.advance(0.1)
    assert w.bodies("after-q") == [b"m"]
    assert w.vhost.queues["after-q"].ready_entries()[0].message.exchange == "src"


def test_cc_routing_keys_hold_the_message_once_and_route_it_by_all_keys() -> None:
    w = World()
    w.queue("q1", key="k1")
    w.queue("q2", key="k2")
    w.publish(b"m", key="k1", headers={"x-delay": 100, "CC": ["k2"]})
    assert w.store is not None
    assert w.store.pending == 1
    w.advance(0.1)
    assert w.bodies("q1") == [b"m"]
    assert w.bodies("q2") == [b"m"]


def test_dead_letters_sent_to_a_delayed_exchange_are_held() -> None:
    w = World()
    w.queue("retry")
    w.vhost.declare_queue(
        "work",
        owner=w.owner,
        arguments={"x-dead-letter-exchange": "d", "x-dead-letter-routing-key": "k"},
    )
    raw = BasicProperties(headers={"x-delay": 250}).encode()
    w.session.publish("", "work", wire_message("", "work", raw, b"job"))
    entry = w.vhost.queues["work"].get(auto_settle=False)
    assert entry is not None
    w.vhost.queues["work"].discard(entry)
    assert w.bodies("retry") == []
    w.advance(0.25)
    assert w.bodies("retry") == [b"job"]
    assert (w.headers("retry")[0] or {})["x-delay"] == -250


def test_restore_schedules_from_the_stored_due_time() -> None:
    w = World(durable=True)
    w.queue("q")
    store = w.store
    assert store is not None
    raw = BasicProperties(headers={"x-delay": 60_000}, message_id="r").encode()
    # Stored due times: one passed while the broker was down, one in 2 s.
    store.restore(wire_message("d", "k", raw, b"overdue"), 7, False, enqueued_at=WALL - 5)
    store.restore(wire_message("d", "k", raw, b"later"), 8, False, enqueued_at=WALL + 2)
    store.arm()
    entries = store.entries()
    assert [(e.known, e.message_id) for e in entries] == [(False, None), (False, None)]
    for e in entries:
        e.identify()  # recovery decodes nothing; the id is read when asked for
    assert [(e.message_id, e.delay) for e in entries] == [("r", 60_000), ("r", 60_000)]
    assert entries[0].message.store_id == 7
    w.advance(0.0)
    assert w.bodies("q") == [b"overdue"]
    w.advance(2.0)
    assert w.bodies("q") == [b"overdue", b"later"]
    assert w.journal.calls[-2:] == [("rm", 0, 7), ("rm", 0, 8)]
