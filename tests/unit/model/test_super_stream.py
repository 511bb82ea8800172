"""Super streams on the model (``model/super_stream.py``), without sockets: what create makes
(RabbitMQ 3.10.8's exchange, binding and queue arguments), routing, partition ordering,
atomic failure, delete."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.errors import NotFound, PreconditionFailed, ResourceError
from leveret.model import super_stream as ss
from leveret.model.queues.stream import StreamQueue
from leveret.model.vhost import VirtualHost

OWNER = object()


def vhost_with(name: str = "invoices", count: int = 3) -> VirtualHost:
    vhost = VirtualHost("/")
    streams, keys = ss.default_partitions(name, count)
    ss.create(vhost, name, streams, keys, {}, owner=OWNER)
    return vhost


def names(vhost: VirtualHost) -> tuple[set[str], set[str]]:
    exchanges = {n for n in vhost.exchanges if n and not n.startswith("amq.")}
    return exchanges, set(vhost.queues)


def test_create_makes_what_rabbitmq_makes() -> None:
    vhost = vhost_with()
    exchange = vhost.exchanges["invoices"]
    assert (exchange.type_name, exchange.durable, exchange.auto_delete) == ("direct", True, False)
    assert dict(exchange.arguments) == {"x-super-stream": True}
    bindings = sorted(
        (getattr(q, "name", ""), key, dict(args)) for q, key, args in exchange.kind.bindings()
    )
    assert bindings == [
        (f"invoices-{i}", str(i), {"x-stream-partition-order": i}) for i in range(3)
    ]
    for i in range(3):
        queue = vhost.queues[f"invoices-{i}"]
        assert isinstance(queue, StreamQueue)
        assert queue.durable
        assert dict(queue.arguments) == {"x-queue-type": "stream"}


def test_route_and_partitions() -> None:
    vhost = vhost_with()
    assert ss.partitions(vhost, "invoices") == ["invoices-0", "invoices-1", "invoices-2"]
    assert ss.route(vhost, "invoices", "1") == ["invoices-1"]
    assert ss.route(vhost, "invoices", "nope") == []
    assert ss.route(vhost, "missing", "1") is None
    assert ss.partitions(vhost, "missing") is None
    assert ss.partitions(vhost, "") is None
    assert ss.partition_index(vhost, "invoices", "invoices-2") == 2
    assert ss.partition_index(vhost, "invoices", "elsewhere") == -1
    assert ss.partition_index(vhost, "missing", "invoices-2") == -1


def test_binding_keys_name_the_partitions() -> None:
    vhost = VirtualHost("/")
    keys = ["amer", "emea", "apac"]
    ss.create(vhost, "orders", ss.partitions_for_keys("orders", keys), keys, {}, owner=OWNER)
    assert ss.partitions(vhost, "orders") == ["orders-amer", "orders-emea", "orders-apac"]
    assert ss.route(vhost, "orders", "emea") == ["orders-emea"]
    # A second binding with the same key: route gives both, once each, in partition order.
    vhost.bind_queue("orders-amer", "orders", "emea", {}, owner=OWNER)
    assert ss.route(vhost, "orders", "emea") == ["orders-amer", "orders-emea"]


def test_partitions_follow_the_order_argument_unordered_last() -> None:
    vhost = VirtualHost("/")
    vhost.declare_exchange("s", "direct", durable=True)
    for name in ("a", "b", "c", "d", "e"):
        vhost.declare_queue(name, owner=OWNER, durable=True, arguments={"x-queue-type": "stream"})
    vhost.declare_queue("classic", owner=OWNER, durable=True)
    vhost.bind_queue("a", "s", "k", {}, owner=OWNER)  # no order: after every ordered one
    vhost.bind_queue("b", "s", "k", {ss.PARTITION_ORDER: 2}, owner=OWNER)
    vhost.bind_queue("c", "s", "k", {ss.PARTITION_ORDER: "0"}, owner=OWNER)  # a string too
    vhost.bind_queue("d", "s", "k", {ss.PARTITION_ORDER: 1}, owner=OWNER)
    vhost.bind_queue("e", "s", "k", {}, owner=OWNER)
    vhost.bind_queue("classic", "s", "k", {ss.PARTITION_ORDER: 0}, owner=OWNER)  # not a stream
    assert ss.partitions(vhost, "s") == ["c", "d", "b", "a", "e"]
    assert ss.route(vhost, "s", "k") == ["c", "d", "b", "a", "e"]
    assert ss.partition_index(vhost, "s", "a") == -1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-5, 5)), min_size=1, max_size=8))
def test_partition_order_is_a_stable_sort_with_unordered_last(
    orders: list[int | None],
) -> None:
    vhost = VirtualHost("/")
    vhost.declare_exchange("s", "direct", durable=True)
    for i, order in enumerate(orders):
        name = f"p{i}"
        vhost.declare_queue(name, owner=OWNER, durable=True, arguments={"x-queue-type": "stream"})
        args = {} if order is None else {ss.PARTITION_ORDER: order}
        vhost.bind_queue(name, "s", str(i), args, owner=OWNER)
    ordered = [f"p{i}" for i, o in enumerate(orders) if o is not None]
    ordered.sort(key=lambda n: orders[int(n[1:])] or 0)
    unordered = [f"p{i}" for i, o in enumerate(orders) if o is None]
    assert ss.partitions(vhost, "s") == ordered + unordered
    for i in range(len(orders)):
        assert ss.route(vhost, "s", str(i)) == [f"p{i}"]


@pytest.mark.parametrize(
    ("name", "streams", "keys"),
    [
        ("s", [], []),
        ("s", ["s-0", "s-1"], ["0"]),
        ("s", ["s-0", "s-0"], ["0", "1"]),
        ("", ["x"], ["0"]),
        ("amq.s", ["x"], ["0"]),
        ("s", ["amq.x"], ["0"]),
    ],
)
def test_bad_requests_are_refused_before_anything_is_made(
    name: str, streams: list[str], keys: list[str]
) -> None:
    vhost = VirtualHost("/")
    before = names(vhost)
    with pytest.raises(PreconditionFailed):
        ss.create(vhost, name, streams, keys, {}, owner=OWNER)
    assert names(vhost) == before


def test_an_existing_exchange_or_stream_is_already_exists() -> None:
    vhost = vhost_with()
    with pytest.raises(ss.AlreadyExists):
        ss.create(vhost, "invoices", ["x-0"], ["0"], {}, owner=OWNER)
    before = names(vhost)
    with pytest.raises(ss.AlreadyExists):
        ss.create(vhost, "other", ["other-0", "invoices-1"], ["0", "1"], {}, owner=OWNER)
    assert names(vhost) == before


def test_a_failure_half_way_leaves_nothing_behind() -> None:
    vhost = VirtualHost("/")

    def limit(name: str, count: int) -> None:
        if count >= 2:
            raise ResourceError(f"queue limit reached: {name}")

    with pytest.raises(ResourceError):
        ss.create(
            vhost,
            "s",
            ["s-0", "s-1", "s-2"],
            ["0", "1", "2"],
            {},
            owner=OWNER,
            check_new_queue=limit,
        )
    assert names(vhost) == (set(), set())
    # A refused stream argument (validated by the core when the first stream is made).
    with pytest.raises(PreconditionFailed):
        ss.create(vhost, "s", ["s-0"], ["0"], {"x-max-age": "soon"}, owner=OWNER)
    assert names(vhost) == (set(), set())
    ss.create(vhost, "s", ["s-0"], ["0"], {"x-max-age": "1D"}, owner=OWNER)
    assert vhost.queues["s-0"].arguments["x-max-age"] == "1D"


def test_delete_removes_the_exchange_and_its_streams() -> None:
    vhost = vhost_with()
    vhost.declare_queue("bystander", owner=OWNER, durable=True)
    gone = ss.delete(vhost, "invoices")
    assert sorted(q.name for q in gone) == ["invoices-0", "invoices-1", "invoices-2"]
    assert all(q.deleted for q in gone)
    assert names(vhost) == (set(), {"bystander"})
    with pytest.raises(NotFound):
        ss.delete(vhost, "invoices")


def test_route_follows_exchange_to_exchange_bindings_not_alternates() -> None:
    vhost = vhost_with("s", 2)
    vhost.declare_exchange("more", "fanout", durable=True)
    vhost.declare_queue("extra", owner=OWNER, durable=True, arguments={"x-queue-type": "stream"})
    vhost.bind_queue("extra", "more", "", {}, owner=OWNER)
    vhost.bind_exchange("more", "s", "1", {})
    assert ss.route(vhost, "s", "1") == ["s-1", "extra"]
    assert ss.partitions(vhost, "s") == ["s-0", "s-1"]  # bindings to streams only
    vhost.declare_exchange("ae", "fanout", durable=True)
    vhost.bind_queue("extra", "ae", "", {}, owner=OWNER)
    vhost.declare_exchange("t", "direct", durable=True, arguments={"alternate-exchange": "ae"})
    assert ss.route(vhost, "t", "nothing") == []
