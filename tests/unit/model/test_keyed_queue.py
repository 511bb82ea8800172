"""Message groups and last-value queues on a queue of the core, with the queue features they
meet: priorities, consumer priorities, single active consumer, TTL, dead-lettering, gets,
browsing acquisitions, AMQP 1.0's group-id, the management view and the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leveret.model.message import HINT_HEADERS, Message
from leveret.model.message_groups import NO_GROUP, SWEEP_FLOOR, group_of
from leveret.model.queues.keyed import KeyedQueue
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink, make_message

if TYPE_CHECKING:
    from leveret.protocol.amqp091.fieldtable import FieldValue
    from leveret.testing import SinkEvent

OWNER = object()
GROUPED: dict[str, object] = {"qpid.group_header_key": "g"}


class Channel:
    """A 0-9-1 channel of the core (the compiled build's ConsumerOwner: a test cannot
    subclass a compiled class) that records what its consumers got."""

    def __init__(self, vhost: VirtualHost) -> None:
        self.sink = RecordingSink()
        self.session = Session(vhost, OWNER, self.sink)

    def consume(self, queue: str, tag: str, prefetch: int, priority: int = 0) -> None:
        self.session.set_qos(0, prefetch, False)
        arguments: dict[str, FieldValue] = {"x-priority": priority} if priority else {}
        self.session.consume(queue, tag, no_ack=False, exclusive=False, arguments=arguments)

    def credit(self, prefetch: int) -> None:
        self.session.set_qos(0, prefetch, False)

    def deliveries(self, tag: str | None = None) -> list[SinkEvent]:
        return [
            e
            for e in self.sink.events
            if e.kind == "deliver" and (tag is None or e.consumer_tag == tag)
        ]

    def bodies(self, tag: str) -> list[bytes]:
        return [e.body for e in self.deliveries(tag)]

    def tag_of(self, body: bytes) -> int:
        return next(e.delivery_tag for e in self.deliveries() if e.body == body)

    def ack(self, body: bytes) -> None:
        self.session.ack(self.tag_of(body))

    def reject(self, body: bytes, *, requeue: bool) -> None:
        self.session.reject(self.tag_of(body), requeue=requeue)


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


def test_a_busy_group_holds_up_nothing_else() -> None:
    vhost = VirtualHost("/")
    queue = keyed(vhost, GROUPED)
    for body, group in [(b"a1", "A"), (b"a2", "A"), (b"a3", "A"), (b"b1", "B"), (b"c1", "C")]:
        put(queue, body, group)
    one, two = Channel(vhost), Channel(vhost)
    one.consume("q", "c1", 1)
    two.consume("q", "c2", 5)
    assert one.bodies("c1") == [b"a1"]
    assert two.bodies("c2") == [b"b1", b"c1"]  # A is c1's while it holds a1
    one.session.cancel("c1")  # gone, but A stays its own while a1 is unsettled
    assert two.bodies("c2") == [b"b1", b"c1"]
    one.ack(b"a1")  # A is free again: c2 has credit
    assert two.bodies("c2") == [b"b1", b"c1", b"a2", b"a3"]


def test_priorities_order_a_group_s_messages_and_the_groups() -> None:
    vhost = VirtualHost("/")
    queue = keyed(vhost, {**GROUPED, "x-max-priority": 9})
    put(queue, b"a-low", "A", priority=1)
    put(queue, b"b-mid", "B", priority=5)
    put(queue, b"a-high", "A", priority=9)
    channel = Channel(vhost)
    channel.consume("q", "c", 1)
    assert channel.bodies("c") == [b"a-high"]
    channel.ack(b"a-high")
    assert channel.bodies("c") == [b"a-high", b"b-mid"]
    channel.credit(3)
    assert channel.bodies("c") == [b"a-high", b"b-mid", b"a-low"]


def test_consumer_priorities_and_single_active_consumer() -> None:
    vhost = VirtualHost("/")
    queue = keyed(vhost, GROUPED)
    channel = Channel(vhost)
    channel.consume("q", "low", 10, priority=1)
    channel.consume("q", "high", 10, priority=5)
    for i in range(4):
        put(queue, f"m{i}".encode(), f"G{i}")
    assert channel.bodies("high") == [b"m0", b"m1", b"m2", b"m3"]
    sac = keyed(vhost, {**GROUPED, "x-single-active-consumer": True}, "sac")
    other = Channel(vhost)
    other.consume("sac", "first", 10)
    other.consume("sac", "second", 10)
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
    channel = Channel(vhost)
    channel.consume("q", "c", 3)
    assert channel.bodies("c") == [b"b1", b"a2"]
    channel.reject(b"b1", requeue=False)  # dead-lettered, and B is free
    assert [e.message.body for e in vhost.queues["dead"].ready_entries()] == [b"a1", b"b1"]
    put(queue, b"b2", "B")
    assert channel.bodies("c") == [b"b1", b"a2", b"b2"]


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
    channel = Channel(vhost)
    channel.consume("q", "c", 5)
    assert channel.bodies("c") == []
    queue.requeue([got])
    assert channel.bodies("c") == [b"a1", b"a2"]


def test_acquiring_a_browsed_message_respects_its_group() -> None:
    vhost = VirtualHost("/")
    queue = keyed(vhost, GROUPED)
    put(queue, b"a1", "A")
    put(queue, b"a2", "A")
    channel = Channel(vhost)
    channel.consume("q", "c", 1)
    a2 = queue.ready_entries()[0]
    assert queue.acquire(a2) is None  # A is c's
    channel.session.cancel("c")
    channel.ack(b"a1")
    assert queue.acquire(a2) is a2


def test_the_group_of_a_message() -> None:
    @dataclass
    class View:
        """What a front end's decoder gives (the 1.0 one has ``group_id``)."""

        headers: dict[str, object] | None = None
        group_id: str | None = None

    def of(headers: dict[str, object] | None, group_id: str | None = None) -> str:
        view = View(headers, group_id)
        # A front end sets the headers hint when its encoded form has headers.
        hints = HINT_HEADERS if headers is not None else 0
        message = Message("", "q", b"\x01\x00", b"", lambda _raw: view, hints=hints)  # type: ignore[arg-type, return-value]
        return group_of(message, "g")

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
    Channel(vhost).consume("q", "worker", 1)
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
    channel = Channel(vhost)
    channel.consume("q", "c", 1)
    put(queue, b"v2", headers={"k": "p"})  # v1 is with c: v2 is queued
    assert [e.message.body for e in queue.ready_entries()] == [b"v2"]
    channel.session.cancel("c")
    channel.reject(b"v1", requeue=True)  # back while the newer v2 is ready: v1 goes
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
    for n in range(3 * SWEEP_FLOOR):
        put(queue, b"m", f"order-{n}")  # every message a group of its own
        entry = queue.get(auto_settle=False)
        assert entry is not None
        queue.settle(entry)
    groups = queue.groups
    assert groups is not None
    assert len(groups) == 0  # none in use
    assert len(groups._groups) <= SWEEP_FLOOR
