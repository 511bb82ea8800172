"""Unit tests of the core's protocol-neutral API, driven directly (no front end): the
publisher with its returns, confirms and transactions, the settlement outcomes, and
consumer credit as the queue reads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from leveret.errors import AccessRefused, NotFound, PreconditionFailed
from leveret.model import settle
from leveret.model.consumer import UNLIMITED
from leveret.model.publisher import NO_CONSUMERS, NO_ROUTE, Publisher
from leveret.model.settle import Delivery
from leveret.model.transaction import ACCEPT, REJECT, RELEASE, Transaction
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink, make_message
from tests.queue_support import classic

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.message import Message

OWNER = object()


@dataclass
class Sink:
    """A PublishSink that records returns and confirms."""

    returns: list[tuple[str, bytes]] = field(default_factory=list)
    confirms: list[tuple[int, bool, bool]] = field(default_factory=list)

    def returned(self, reason: str, message: Message) -> None:
        self.returns.append((reason, message.body))

    def confirm(self, upto: int, *, multiple: bool, ack: bool) -> None:
        self.confirms.append((upto, multiple, ack))


@dataclass
class Journal:
    """A journal that writes nothing but counts stored publishes and holds commits."""

    writes: int = 0
    ok: bool = True
    pending: list[Callable[[], None]] = field(default_factory=list)

    def commit(self) -> None:
        callbacks, self.pending = self.pending, []
        for callback in callbacks:
            callback()

    def after_commit(self, callback: Callable[[], None]) -> None:
        self.pending.append(callback)


def ready(vhost: VirtualHost, name: str) -> list[bytes]:
    return [e.message.body for e in vhost.queues[name].ready_entries()]


# -- publishing and routing ---------------------------------------------------------------


def test_publish_routes_and_returns_what_no_queue_takes() -> None:
    vhost = VirtualHost("/")
    vhost.declare_queue("q", owner=OWNER)
    sink = Sink()
    publisher = Publisher(vhost, sink)
    publisher.publish("", "q", make_message(b"a"))
    publisher.publish("", "nowhere", make_message(b"b"), report_unroutable=True)
    publisher.publish("", "nowhere", make_message(b"c"))  # dropped quietly
    publisher.publish("", "q", make_message(b"d"), require_consumer=True)
    assert ready(vhost, "q") == [b"a"]
    assert sink.returns == [(NO_ROUTE, b"b"), (NO_CONSUMERS, b"d")]


def test_publish_checks_the_target_and_the_expiration() -> None:
    vhost = VirtualHost("/")
    vhost.declare_exchange("in", "direct", internal=True)
    publisher = Publisher(vhost, Sink())
    with pytest.raises(NotFound):
        publisher.check("missing")
    with pytest.raises(AccessRefused, match="internal exchange 'in'"):
        publisher.check("in")
    with pytest.raises(PreconditionFailed, match="invalid expiration"):
        publisher.publish("", "q", make_message(b"x", properties=BasicProperties(expiration="x")))


def test_direct_reply_to_is_rewritten_to_the_requesters_key() -> None:
    vhost = VirtualHost("/")
    vhost.declare_queue("requests", owner=OWNER)
    publisher = Publisher(vhost, Sink())
    request = make_message(b"r", properties=BasicProperties(reply_to="amq.rabbitmq.reply-to"))
    with pytest.raises(PreconditionFailed, match="fast reply consumer does not exist"):
        publisher.publish("", "requests", request)
    publisher.reply_key = "KEY"
    publisher.publish("", "requests", request)
    [entry] = vhost.queues["requests"].ready_entries()
    assert entry.message.properties.reply_to == "amq.rabbitmq.reply-to.KEY"


def test_feeds_backlog_only_for_a_queue_whose_consumers_fall_behind() -> None:
    vhost = VirtualHost("/")
    queue = classic(vhost.declare_queue("q", owner=OWNER))
    queue.backlog_pace = 2
    publisher = Publisher(vhost, Sink())
    for _ in range(5):
        publisher.publish("", "q", make_message(b"m"))
    assert not publisher.feeds_backlog  # no consumer: a queue may fill freely
    session = Session(vhost, OWNER, RecordingSink())
    session.set_qos(0, 1, False)
    session.consume("q", "c", no_ack=False, exclusive=False, arguments={})
    publisher.publish("", "q", make_message(b"m"))
    assert publisher.feeds_backlog


# -- confirms -----------------------------------------------------------------------------


def test_confirms_wait_for_the_store_and_never_overtake_a_write() -> None:
    vhost = VirtualHost("/")
    journal = Journal()
    vhost.journal = journal  # type: ignore[assignment]
    vhost.declare_queue("q", owner=OWNER)
    sink = Sink()
    publisher = Publisher(vhost, sink)
    publisher.select_confirms()
    assert publisher.confirms is not None
    publisher.publish("", "q", make_message(b"1"))
    journal.writes += 1  # as if routing 2 had stored it: publish 2 must wait for the commit
    publisher.confirms.seq += 1
    publisher.confirms.published(True, True)
    publisher.flush_confirms()
    assert sink.confirms == []
    publisher.publish("", "q", make_message(b"3"))
    publisher.flush_confirms()
    assert sink.confirms == []  # queued behind the write
    journal.commit()
    assert sink.confirms == [(2, True, True), (3, False, True)]


def test_a_refused_publish_is_nacked_alone_after_those_before_it() -> None:
    vhost = VirtualHost("/")
    vhost.declare_queue(
        "q", owner=OWNER, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
    )
    sink = Sink()
    publisher = Publisher(vhost, sink)
    publisher.select_confirms()
    publisher.publish("", "q", make_message(b"1"))
    publisher.publish("", "q", make_message(b"2"))
    publisher.publish("", "q", make_message(b"3"))
    publisher.flush_confirms()
    assert sink.confirms == [(1, False, True), (2, False, False), (3, False, False)]


def test_confirms_and_transactions_exclude_each_other() -> None:
    publisher = Publisher(VirtualHost("/"), Sink())
    publisher.select_confirms()
    with pytest.raises(PreconditionFailed, match="cannot switch from confirm to tx mode"):
        publisher.select_tx()
    other = Publisher(VirtualHost("/"), Sink())
    other.select_tx()
    with pytest.raises(PreconditionFailed, match="cannot switch from tx to confirm mode"):
        other.select_confirms()


# -- transactions ---------------------------------------------------------------------------


def test_transaction_routes_at_commit_and_applies_settlements_in_order() -> None:
    vhost = VirtualHost("/")
    queue = vhost.declare_queue("q", owner=OWNER)
    publisher = Publisher(vhost, Sink())
    tx = publisher.select_tx()
    publisher.publish("", "q", make_message(b"held"))
    assert ready(vhost, "q") == []
    applied: list[tuple[str, list[object]]] = []
    done: list[bool] = []
    for body in (b"a", b"b", b"c"):
        queue.enqueue(make_message(body))
    entries = [queue.get(auto_settle=False) for _ in range(3)]
    deliveries = [Delivery(e, queue, None) for e in entries if e is not None]
    tx.settle(REJECT, deliveries[0], 1)
    tx.settle(ACCEPT, deliveries[1], 2)
    tx.settle(RELEASE, deliveries[2], 3)
    tx.commit(
        publisher.route,
        lambda outcome, group: applied.append((outcome, [t for _d, t in group])),
        vhost.journal,
        done.append,
    )
    assert ready(vhost, "q") == [b"held"]
    assert applied == [(ACCEPT, [2]), (RELEASE, [3]), (REJECT, [1])]
    assert done == [True]


def test_transaction_rollback_drops_publishes_and_hands_back_settlements() -> None:
    tx = Transaction()
    tx.publishes.append(("", "q", make_message(b"x"), False, False))
    vhost = VirtualHost("/")
    queue = vhost.declare_queue("q", owner=OWNER)
    queue.enqueue(make_message(b"a"))
    entry = queue.get(auto_settle=False)
    assert entry is not None
    delivery = Delivery(entry, queue, None)
    tx.settle(ACCEPT, delivery, "token")
    assert tx.rollback() == [(delivery, "token")]
    assert tx.publishes == []
    assert tx.settlements == []


# -- settlement ------------------------------------------------------------------------------


def _unsettled(vhost: VirtualHost, name: str, *bodies: bytes) -> list[Delivery]:
    queue = vhost.queues[name]
    for body in bodies:
        queue.enqueue(make_message(body, name))
    out = []
    for _ in bodies:
        entry = queue.get(auto_settle=False)
        assert entry is not None
        out.append(Delivery(entry, queue, None))
    return out


def test_accept_removes_release_requeues_in_place_and_redelivered() -> None:
    vhost = VirtualHost("/")
    queue = vhost.declare_queue("q", owner=OWNER)
    a, b, c = _unsettled(vhost, "q", b"a", b"b", b"c")
    settle.accept([b])
    settle.release([c, a])
    assert ready(vhost, "q") == [b"a", b"c"]
    assert all(e.redelivered for e in queue.ready_entries())
    assert queue.unacked_count == 0


def test_reject_dead_letters_where_the_queue_says_and_drops_elsewhere() -> None:
    vhost = VirtualHost("/")
    vhost.declare_exchange("dlx", "fanout")
    vhost.declare_queue("dead", owner=OWNER)
    vhost.bind_queue("dead", "dlx", "", {}, owner=OWNER)
    vhost.declare_queue("q", owner=OWNER, arguments={"x-dead-letter-exchange": "dlx"})
    vhost.declare_queue("plain", owner=OWNER)
    [d1] = _unsettled(vhost, "q", b"x")
    [d2] = _unsettled(vhost, "plain", b"y")
    settle.reject([d1, d2])
    [dead] = vhost.queues["dead"].ready_entries()
    assert dead.message.body == b"x"
    deaths = (dead.message.headers or {})["x-death"]
    assert isinstance(deaths, list)
    assert deaths[0]["reason"] == "rejected"
    assert ready(vhost, "plain") == []


def test_settling_a_delivery_of_a_deleted_queue_drops_it() -> None:
    vhost = VirtualHost("/")
    vhost.declare_queue("q", owner=OWNER)
    [d] = _unsettled(vhost, "q", b"x")
    vhost.delete_queue("q", owner=OWNER)
    settle.release([d])
    settle.reject([d])
    assert "q" not in vhost.queues


def test_modify_merges_headers_counts_failures_and_requeues_or_dead_letters() -> None:
    vhost = VirtualHost("/")
    vhost.declare_exchange("dlx", "fanout")
    vhost.declare_queue("dead", owner=OWNER)
    vhost.bind_queue("dead", "dlx", "", {}, owner=OWNER)
    queue = vhost.declare_queue("q", owner=OWNER, arguments={"x-dead-letter-exchange": "dlx"})
    a, b = _unsettled(vhost, "q", b"a", b"b")
    settle.modify([a], headers={"x-opt-n": 1}, failed=True)
    settle.modify([b], headers={"x-opt-why": "bad"}, undeliverable=True)
    [again] = queue.ready_entries()
    assert (again.message.body, again.redelivered, again.deliveries) == (b"a", True, 1)
    assert again.message.headers == {"x-opt-n": 1}
    [dead] = vhost.queues["dead"].ready_entries()
    assert (dead.message.headers or {})["x-opt-why"] == "bad"
    assert "x-death" in (dead.message.headers or {})
    # Not failed: released without counting; headers merged with what is there.
    entry = queue.get(auto_settle=False)
    assert entry is not None
    settle.modify([Delivery(entry, queue, None)], headers={"x-opt-m": "2"})
    [again] = queue.ready_entries()
    assert again.deliveries == 1
    assert again.message.headers == {"x-opt-n": 1, "x-opt-m": "2"}


def test_modify_on_a_quorum_queue_leaves_the_count_to_the_queue() -> None:
    vhost = VirtualHost("/")
    queue = vhost.declare_queue(
        "qq", owner=OWNER, durable=True, arguments={"x-queue-type": "quorum"}
    )
    [d] = _unsettled(vhost, "qq", b"x")
    settle.modify([d], failed=True)
    [again] = queue.ready_entries()
    assert again.deliveries == 1  # once, by the quorum queue's own requeue


# -- consumers and credit ---------------------------------------------------------------------


def test_a_consumer_takes_only_while_it_has_credit() -> None:
    vhost = VirtualHost("/")
    vhost.declare_queue("q", owner=OWNER)
    sink = RecordingSink()
    session = Session(vhost, OWNER, sink)
    session.consume("q", "c", no_ack=False, exclusive=False, arguments={})
    consumer = session.consumers["c"]
    assert consumer.credit == UNLIMITED
    consumer.credit = 2
    for body in (b"1", b"2", b"3"):
        vhost.queues["q"].enqueue(make_message(body))
    assert [e.body for e in sink.deliveries()] == [b"1", b"2"]
    assert consumer.credit == 0
    consumer.credit = 1
    vhost.queues["q"].dispatch()
    assert [e.body for e in sink.deliveries()] == [b"3"]
