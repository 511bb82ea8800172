"""Message groups and last-value queues on a queue of the core, with the queue features they
meet: priorities, consumer priorities, single active consumer, TTL, dead-lettering, gets,
browsing acquisitions, AMQP 1.0's group-id, the management view and the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leveret.model.consumer import Consumer, ConsumerOwner
from leveret.model.keyed_queue import KeyedQueue
from leveret.model.message_groups import NO_GROUP, SWEEP_FLOOR, group_of
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.testing import make_message

if TYPE_CHECKING:
    from leveret.model.entry import QueuedMessage

OWNER = object()
GROUPED: dict[str, object] = {"qpid.group_header_key": "g"}


@dataclass
class Owner(ConsumerOwner):
    """Takes what its consumers' credit allows; records what it got."""

    got: dict[str, list[QueuedMessage]] = field(default_factory=dict)

    def accepts(self, consumer: Consumer, size: int) -> bool:
        return True

    def deliver(self, consumer: Consumer, entry: QueuedMessage) -> None:
        consumer.credit -= 1
        self.got.setdefault(consumer.tag, []).append(entry)

    def consumer_removed(self, consumer: Consumer) -> None:
        pass

    def bodies(self, tag: str) -> list[bytes]:
        return [e.message.body for e in self.got.get(tag, [])]


def keyed(vhost: VirtualHost, arguments: dict[str, object], name: str = "q") -> KeyedQueue:
    queue = vhost.declare_queue(name, owner=OWNER, arguments=arguments)
    assert isinstance(queue, KeyedQueue)
    return queue


def put(queue: KeyedQueue, body: bytes, group: str | None = None, **props: Any) -> None:
    headers = dict(props.pop("headers", {}))
    if group is not None:
        headers["g"] = group
    message = make_message(body, queue.name, "", BasicProperties(headers=headers or None, **props))
    queue.enqueue(message)


def consumer(queue: KeyedQueue, owner: Owner, tag: str, credit: int, **kw: Any) -> Consumer:
    c = Consumer(tag, queue, owner, auto_settle=False, exclusive=False, credit=credit, **kw)
    queue.add_consumer(c)
    return c


def test_a_busy_group_holds_up_nothing_else() -> None:
    vhost = VirtualHost("/")
    queue = keyed(vhost, GROUPED)
    for body, group in [(b"a1", "A"), (b"a2", "A"), (b"a3", "A"), (b"b1", "B"), (b"c1", "C")]:
        put(queue, body, group)
    owner = Owner()
    c1 = consumer(queue, owner, "c1", 1)
    consumer(queue, owner, "c2", 5)
    assert owner.bodies("c1") == [b"a1"]
    assert owner.bodies("c2") == [b"b1", b"c1"]  # A is c1's while it holds a1
    queue.settle(owner.got["c1"][0])  # A is free again
    assert owner.bodies("c2") == [b"b1", b"c1", b"a2", b"a3"]
    c1.credit = 5
    queue.dispatch()
    assert owner.bodies("c1") == [b"a1"]


def test_priorities_order_a_group_s_messages_and_the_groups() -> None:
    vhost = VirtualHost("/")
    queue = keyed(vhost, {**GROUPED, "x-max-priority": 9})
    put(queue, b"a-low", "A", priority=1)
    put(queue, b"b-mid", "B", priority=5)
    put(queue, b"a-high", "A", priority=9)
    owner = Owner()
    c = consumer(queue, owner, "c", 1)
    assert owner.bodies("c") == [b"a-high"]
    queue.settle(owner.got["c"][0])
    c.credit = 2
    queue.dispatch()
    assert owner.bodies("c") == [b"a-high", b"b-mid", b"a-low"]


def test_consumer_priorities_and_single_active_consumer() -> None:
    vhost = VirtualHost("/")
    queue = keyed(vhost, GROUPED)
    owner = Owner()
    consumer(queue, owner, "low", 10, priority=1)
    consumer(queue, owner, "high", 10, priority=5)
    for i in range(4):
        put(queue, f"m{i}".encode(), f"G{i}")
    assert owner.bodies("high") == [b"m0", b"m1", b"m2", b"m3"]
    sac = keyed(vhost, {**GROUPED, "x-single-active-consumer": True}, "sac")
    other = Owner()
    consumer(sac, other, "first", 10)
    consumer(sac, other, "second", 10)
    for i in range(3):
        put(sac, f"s{i}".encode(), f"G{i}")
    assert other.bodies("first") == [b"s0", b"s1", b"s2"]
    assert other.bodies("second") == []


def test_expired_messages_of_a_group_are_skipped_and_dead_lettered() -> None:
    vhost = VirtualHost("/")
    vhost.declare_exchange("dlx", "fanout")
    vhost.declare_queue("dead", owner=OWNER)
    vhost.bind_queue("dead", "dlx", "", {}, owner=OWNER)
    queue = keyed(vhost, {**GROUPED, "x-dead-letter-exchange": "dlx"})
    vhost.timers.now = 0.0
    put(queue, b"a1", "A", expiration="1000")
    put(queue, b"b1", "B")
    put(queue, b"a2", "A")
    vhost.timers.now = 2.0
    owner = Owner()
    c = consumer(queue, owner, "c", 3)
    assert owner.bodies("c") == [b"b1", b"a2"]
    queue.discard(owner.got["c"][0])  # rejected: dead-lettered, and B is free
    assert [e.message.body for e in vhost.queues["dead"].ready_entries()] == [b"a1", b"b1"]
    put(queue, b"b2", "B")
    assert owner.bodies("c") == [b"b1", b"a2", b"b2"]
    assert c.credit == 0


def test_a_get_takes_a_free_group_and_holds_it() -> None:
    vhost = VirtualHost("/")
    queue = keyed(vhost, GROUPED)
    put(queue, b"a1", "A")
    put(queue, b"a2", "A")
    put(queue, b"b1", "B")
    got = queue.get(auto_settle=False)
    assert got is not None
    assert got.message.body == b"a1"
    second = queue.get(auto_settle=False)
    assert second is not None
    assert second.message.body == b"b1"  # A is held by the first get
    assert queue.get(auto_settle=False) is None
    owner = Owner()
    consumer(queue, owner, "c", 5)
    assert owner.bodies("c") == []
    queue.requeue([got])
    assert owner.bodies("c") == [b"a1", b"a2"]


def test_acquiring_a_browsed_message_respects_its_group() -> None:
    vhost = VirtualHost("/")
    queue = keyed(vhost, GROUPED)
    put(queue, b"a1", "A")
    put(queue, b"a2", "A")
    owner = Owner()
    c = consumer(queue, owner, "c", 1)
    a2 = queue.ready_entries()[0]
    assert queue.acquire(a2) is None  # A is c's
    queue.settle(owner.got["c"][0])
    assert c.credit == 0
    assert queue.acquire(a2) is a2


def test_the_group_of_a_message() -> None:
    @dataclass
    class View:
        headers: dict[str, object] | None = None
        group_id: str | None = None

    @dataclass
    class Message:
        properties: View
        headers: dict[str, object] | None

    def of(headers: dict[str, object] | None, group_id: str | None = None) -> str:
        view = View(headers, group_id)
        return group_of(Message(view, headers), "g")  # type: ignore[arg-type]

    assert of({"g": "A"}) == "A"
    assert of({"g": b"B"}) == "B"
    assert of({"g": 7}) == "7"
    assert of(None, "from-1.0") == "from-1.0"  # AMQP 1.0's group-id, without the header
    assert of({"g": "A"}, "ignored") == "A"
    assert of({"other": 1}) == NO_GROUP


def test_group_state_shows_groups_counts_and_owners() -> None:
    vhost = VirtualHost("/")
    queue = keyed(vhost, GROUPED)
    for body, group in [(b"a1", "A"), (b"b1", "B"), (b"a2", "A"), (b"c1", None)]:
        put(queue, body, group)
    owner = Owner()
    consumer(queue, owner, "worker", 1)
    state = {g["group_id"]: (g["msg_count"], g["consumer"]) for g in queue.group_state()}
    assert state == {"A": (2, "worker"), "B": (1, ""), NO_GROUP: (1, "")}


# -- last values ---------------------------------------------------------------------------


LVQ: dict[str, object] = {"qpid.last_value_queue_key": "k"}


def test_a_new_value_replaces_the_ready_one_and_goes_to_the_back() -> None:
    vhost = VirtualHost("/")
    queue = keyed(vhost, LVQ)
    for body, key in [(b"a1", "a"), (b"b1", "b"), (b"a2", "a"), (b"x", None), (b"a3", "a")]:
        put(queue, body, headers={"k": key} if key else {})
    assert [e.message.body for e in queue.ready_entries()] == [b"b1", b"x", b"a3"]
    assert queue.message_count == 3


def test_a_value_handed_out_is_not_replaced_and_a_stale_one_released_goes() -> None:
    vhost = VirtualHost("/")
    queue = keyed(vhost, LVQ)
    put(queue, b"v1", headers={"k": "p"})
    owner = Owner()
    c = consumer(queue, owner, "c", 1)
    put(queue, b"v2", headers={"k": "p"})  # v1 is with c: v2 is queued
    assert [e.message.body for e in queue.ready_entries()] == [b"v2"]
    queue.remove_consumer(c)
    queue.requeue(owner.got["c"])  # v1 comes back while the newer v2 is ready: v1 goes
    assert [e.message.body for e in queue.ready_entries()] == [b"v2"]
    assert queue.unacked_count == 0


@dataclass
class Journal:
    """Counts what a durable last-value queue writes and removes."""

    writes: int = 0
    ok: bool = True
    removed_sids: list[int] = field(default_factory=list)
    next_sid: int = 0

    def enqueued(self, queue_id: int, message: Any, at_ms: int = 0) -> int:
        self.writes += 1
        self.next_sid += 1
        return self.next_sid

    def removed(self, queue_id: int, sid: int) -> None:
        self.removed_sids.append(sid)

    def delivered(self, queue_id: int, sid: int) -> None:
        pass

    def queue_declared(self, *args: Any) -> int:
        return 7


def test_a_replaced_durable_value_leaves_the_store() -> None:
    vhost = VirtualHost("/")
    journal = Journal()
    vhost.journal = journal  # type: ignore[assignment]
    queue = vhost.declare_queue("q", owner=OWNER, durable=True, arguments=LVQ)
    for i in range(3):
        put(queue, f"v{i}".encode(), headers={"k": "p"}, delivery_mode=2)  # type: ignore[arg-type]
    assert journal.writes == 3
    assert journal.removed_sids == [1, 2]


def test_idle_groups_are_forgotten_so_the_table_stays_bounded() -> None:
    vhost = VirtualHost("/")
    queue = keyed(vhost, GROUPED)
    owner = Owner()
    worker = consumer(queue, owner, "c", 1)
    for n in range(3 * SWEEP_FLOOR):
        put(queue, b"m", f"order-{n}")  # every message a group of its own
        queue.settle(owner.got["c"][-1])
        worker.credit = 1
    groups = queue.groups
    assert groups is not None
    assert len(groups) == 0  # none in use
    assert len(groups._groups) <= SWEEP_FLOOR
