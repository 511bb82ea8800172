"""Unit tests of the random exchange types (x-random, x-local-random) and of the
last-value cache (x-lvc) on a vhost of the core."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from leveret.errors import PreconditionFailed
from leveret.model.exchanges import LastValueExchange, LocalRandomExchange, RandomExchange
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.testing import make_message

pytestmark = pytest.mark.pure_only  # the exchanges are not compiled

OWNER = object()


def bodies(vhost: VirtualHost, name: str) -> list[bytes]:
    return [e.message.body for e in vhost.queues[name].ready_entries()]


@pytest.fixture
def seeded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RandomExchange, "rng", random.Random(29))
    monkeypatch.setattr(LocalRandomExchange, "rng", random.Random(29))


@pytest.mark.usefixtures("seeded")
def test_random_spreads_over_every_binding_and_counts_each() -> None:
    vhost = VirtualHost("/")
    x = vhost.declare_exchange("x", "x-random")
    for q in ("a", "b", "c"):
        vhost.declare_queue(q, owner=OWNER)
    vhost.bind_queue("a", "x", "", {}, owner=OWNER)
    vhost.bind_queue("b", "x", "", {}, owner=OWNER)
    vhost.bind_queue("c", "x", "one", {}, owner=OWNER)
    vhost.bind_queue("c", "x", "two", {}, owner=OWNER)  # c owns two of four rows
    counts: Counter[str] = Counter()
    for i in range(4000):
        (queue,) = vhost.router.route(x, f"k{i}", make_message(b""))
        counts[queue.name] += 1
    assert counts["c"] == pytest.approx(2000, rel=0.1)
    assert counts["a"] == pytest.approx(1000, rel=0.15)
    assert counts["b"] == pytest.approx(1000, rel=0.15)
    vhost.unbind_queue("c", "x", "one", {}, owner=OWNER)
    vhost.unbind_queue("c", "x", "two", {}, owner=OWNER)
    vhost.unbind_queue("b", "x", "", {}, owner=OWNER)
    assert [q.name for q in vhost.router.route(x, "k", make_message(b""))] == ["a"]
    vhost.unbind_queue("a", "x", "", {}, owner=OWNER)
    assert vhost.router.route(x, "k", make_message(b"")) == []


@pytest.mark.usefixtures("seeded")
def test_local_random_picks_among_local_queues_only() -> None:
    vhost = VirtualHost("/")
    x = vhost.declare_exchange("x", "x-local-random")
    for q in ("a", "b", "c"):
        vhost.declare_queue(q, owner=OWNER)
        vhost.bind_queue(q, "x", "", {}, owner=OWNER)
    kind = x.kind
    assert isinstance(kind, LocalRandomExchange)
    seen = {vhost.router.route(x, "", make_message(b""))[0].name for _ in range(200)}
    assert seen == {"a", "b", "c"}
    kind.is_local = lambda queue: getattr(queue, "name", "") != "b"
    seen = {vhost.router.route(x, "", make_message(b""))[0].name for _ in range(200)}
    assert seen == {"a", "c"}
    kind.is_local = lambda queue: False
    assert vhost.router.route(x, "", make_message(b"")) == []


def test_local_random_binding_rules_are_rabbitmq_4s() -> None:
    vhost = VirtualHost("/")
    vhost.declare_exchange("x", "x-local-random")
    vhost.declare_exchange("other", "fanout")
    vhost.declare_queue("classic", owner=OWNER)
    vhost.declare_queue("quorum", owner=OWNER, durable=True, arguments={"x-queue-type": "quorum"})
    with pytest.raises(PreconditionFailed, match=r"^Non empty binding 'k' key not permitted$"):
        vhost.bind_queue("classic", "x", "k", {}, owner=OWNER)
    with pytest.raises(
        PreconditionFailed,
        match=r"^Queue type rabbit_quorum_queue not valid for this exchange type$",
    ):
        vhost.bind_queue("quorum", "x", "", {}, owner=OWNER)
    with pytest.raises(PreconditionFailed, match=r"^Destination not found$"):
        vhost.bind_exchange("other", "x", "", {})
    vhost.bind_queue("classic", "x", "", {}, owner=OWNER)


def test_modulus_hash_counts_a_queue_bound_twice_twice() -> None:
    vhost = VirtualHost("/")
    x = vhost.declare_exchange("x", "x-modulus-hash")
    for q in ("a", "b"):
        vhost.declare_queue(q, owner=OWNER)
    vhost.bind_queue("a", "x", "1", {}, owner=OWNER)
    vhost.bind_queue("a", "x", "2", {}, owner=OWNER)
    vhost.bind_queue("b", "x", "3", {}, owner=OWNER)
    counts = Counter(vhost.router.route(x, f"k{i}", make_message(b""))[0].name for i in range(3000))
    assert counts["a"] == pytest.approx(2000, rel=0.1)
    # The same key goes the same way every time.
    assert {vhost.router.route(x, "same", make_message(b""))[0].name for _ in range(20)} == {
        vhost.router.route(x, "same", make_message(b""))[0].name
    }


# -- x-lvc -------------------------------------------------------------------------------


def lvc(vhost: VirtualHost, name: str = "lvc") -> LastValueExchange:
    x = vhost.declare_exchange(name, "x-lvc")
    assert isinstance(x.kind, LastValueExchange)
    return x.kind


def publish(vhost: VirtualHost, exchange: str, key: str, body: bytes, **props: object) -> None:
    x = vhost.exchanges[exchange]
    message = make_message(body, key, exchange, BasicProperties(**props))  # type: ignore[arg-type]
    queues, message = vhost.router.route_publish(x, key, message)
    for queue in queues:
        queue.enqueue(message)


def test_lvc_routes_as_direct_and_hands_the_last_value_to_a_new_binding() -> None:
    vhost = VirtualHost("/")
    kind = lvc(vhost)
    vhost.declare_queue("early", owner=OWNER)
    vhost.bind_queue("early", "lvc", "price", {}, owner=OWNER)
    publish(vhost, "lvc", "price", b"1")
    publish(vhost, "lvc", "price", b"2")
    publish(vhost, "lvc", "other", b"o")  # kept, though nothing is bound with its key
    assert bodies(vhost, "early") == [b"1", b"2"]
    assert kind.value("price") is not None
    vhost.declare_queue("late", owner=OWNER)
    vhost.bind_queue("late", "lvc", "price", {}, owner=OWNER)
    assert bodies(vhost, "late") == [b"2"]
    # A binding that already exists hands nothing out again.
    vhost.bind_queue("late", "lvc", "price", {}, owner=OWNER)
    assert bodies(vhost, "late") == [b"2"]
    vhost.bind_queue("late", "lvc", "other", {}, owner=OWNER)
    vhost.bind_queue("late", "lvc", "never", {}, owner=OWNER)
    assert bodies(vhost, "late") == [b"2", b"o"]


def test_lvc_keeps_each_cc_key_and_hands_values_through_a_bound_exchange() -> None:
    vhost = VirtualHost("/")
    lvc(vhost)
    publish(vhost, "lvc", "a", b"to a and b", headers={"CC": ["b"]})
    vhost.declare_exchange("fan", "fanout")
    vhost.declare_queue("q1", owner=OWNER)
    vhost.declare_queue("q2", owner=OWNER)
    vhost.bind_queue("q1", "fan", "", {}, owner=OWNER)
    vhost.bind_queue("q2", "fan", "", {}, owner=OWNER)
    vhost.bind_exchange("fan", "lvc", "b", {})
    assert bodies(vhost, "q1") == bodies(vhost, "q2") == [b"to a and b"]


def test_lvc_values_count_in_the_gauge_and_go_with_the_exchange() -> None:
    vhost = VirtualHost("/")
    kind = lvc(vhost)
    before = vhost.gauge.bytes
    publish(vhost, "lvc", "k", b"x" * 1000)
    publish(vhost, "lvc", "k", b"y" * 10)
    publish(vhost, "lvc", "j", b"z" * 100)
    kept = vhost.gauge.bytes - before
    assert 110 < kept < 110 + 2 * 1024
    vhost.delete_exchange("lvc")
    assert vhost.gauge.bytes == before
    assert kind.values == {}
