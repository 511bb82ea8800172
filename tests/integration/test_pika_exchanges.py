"""The exchange class end to end with pika's BlockingConnection: declare and delete, the
predeclared exchanges, routing by every exchange type, exchange-to-exchange bindings,
alternate exchanges and auto-delete.

Every test here passes against RabbitMQ (``LEVERET_TEST_AMQP_URL``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest

from tests.integration.pika_support import Opened, code_of, connect, eventually, exchange_code, pump

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.integration.conftest import Broker

pytestmark = pytest.mark.interop


def new_queue(ch: Any) -> str:
    return str(ch.queue_declare(queue="", exclusive=True).method.queue)


def drain(ch: Any, queue: str, settle: float = 0.15) -> list[bytes]:
    """Every body in the queue, in order, once publishes in flight have landed.

    basic.get reaches a queue behind the publishes the same channel made before it, so the
    bodies published on ``ch`` are all there; ``settle`` covers other channels.
    """
    time.sleep(settle)
    bodies: list[bytes] = []
    while True:
        method, _, body = ch.basic_get(queue=queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)


def bound_fanouts(ch: Any, name: str, exchanges: list[str]) -> str:
    """Fanout ``name.src`` bound to fanout ``name.dst`` (deleted after the test); returns the
    source."""
    src, dst = name + ".src", name + ".dst"
    exchanges.extend([src, dst])
    ch.exchange_declare(exchange=src, exchange_type="fanout")
    ch.exchange_declare(exchange=dst, exchange_type="fanout")
    ch.exchange_bind(destination=dst, source=src)
    return src


@pytest.fixture
def exchanges(broker: Broker) -> Iterator[list[str]]:
    """Names appended here are deleted after the test."""
    names: list[str] = []
    yield names
    with Opened(connect(broker)) as c:
        cleanup = c.channel()
        for exchange in names:
            cleanup.exchange_delete(exchange=exchange)


# --------------------------------------------------------------------------- declare


@pytest.mark.parametrize(
    ("exchange", "kind"),
    [
        ("amq.direct", "direct"),
        ("amq.fanout", "fanout"),
        ("amq.topic", "topic"),
        ("amq.headers", "headers"),
        ("amq.match", "headers"),
    ],
)
def test_predeclared_exchanges_exist(conn: Any, ch: Any, exchange: str, kind: str) -> None:
    ch.exchange_declare(exchange=exchange, passive=True)
    # Redeclaring a predeclared exchange with its own type and flags is allowed ...
    ch.exchange_declare(exchange=exchange, exchange_type=kind, durable=True)
    # ... with another type it is not.
    other = "fanout" if kind != "fanout" else "direct"
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.exchange_declare(exchange=exchange, exchange_type=other, durable=True)
    assert code_of(exc) == 406
    assert conn.is_open


def test_declare_and_passive(ch: Any, name: str, exchanges: list[str]) -> None:
    exchanges.append(name)
    ch.exchange_declare(exchange=name, exchange_type="topic")
    ch.exchange_declare(exchange=name, passive=True)
    ch.exchange_declare(exchange=name, exchange_type="topic")  # equivalent redeclare


@pytest.mark.parametrize("kind", ["direct", "fanout", "topic", "headers"])
@pytest.mark.parametrize("durable", [False, True])
def test_declare_each_type(
    ch: Any, name: str, exchanges: list[str], kind: str, durable: bool
) -> None:
    exchanges.append(name)
    ch.exchange_declare(exchange=name, exchange_type=kind, durable=durable)
    ch.exchange_declare(exchange=name, exchange_type=kind, durable=durable)


def test_passive_declare_of_missing_exchange_is_404(conn: Any, ch: Any, name: str) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.exchange_declare(exchange=name, passive=True)
    assert code_of(exc) == 404
    assert conn.is_open


def test_passive_declare_ignores_type(ch: Any) -> None:
    ch.exchange_declare(exchange="amq.direct", exchange_type="fanout", passive=True)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"exchange_type": "direct"}, {"exchange_type": "fanout"}),
        ({"exchange_type": "topic"}, {"exchange_type": "headers"}),
        ({"durable": True}, {"durable": False}),
        ({"durable": False}, {"durable": True}),
        ({"auto_delete": True}, {"auto_delete": False}),
        ({"internal": True}, {"internal": False}),
        ({"arguments": {"alternate-exchange": "a"}}, {"arguments": {"alternate-exchange": "b"}}),
        ({"arguments": {"alternate-exchange": "a"}}, {}),
    ],
    ids=["type", "type2", "durable", "not-durable", "auto-delete", "internal", "ae", "ae-missing"],
)
def test_inequivalent_redeclare_is_406(
    conn: Any,
    ch: Any,
    name: str,
    exchanges: list[str],
    first: dict[str, Any],
    second: dict[str, Any],
) -> None:
    exchanges.append(name)
    ch.exchange_declare(exchange=name, **{"exchange_type": "direct", **first})
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.exchange_declare(exchange=name, **{"exchange_type": "direct", **second})
    assert code_of(exc) == 406  # PRECONDITION_FAILED
    assert conn.is_open


def test_reserved_amq_prefix_is_403(conn: Any, ch: Any, name: str) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.exchange_declare(exchange="amq." + name, exchange_type="direct")
    assert code_of(exc) == 403  # ACCESS_REFUSED
    assert conn.is_open


def test_default_exchange_cannot_be_declared_or_deleted(conn: Any) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        conn.channel().exchange_declare(exchange="", exchange_type="direct")
    assert code_of(exc) == 403
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        conn.channel().exchange_delete(exchange="")
    assert code_of(exc) == 403


def test_unknown_exchange_type_is_503_connection_error(conn: Any, ch: Any, name: str) -> None:
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as exc:
        ch.exchange_declare(exchange=name, exchange_type="x-no-such-type")
    assert code_of(exc) == 503  # COMMAND_INVALID: a hard error
    assert not conn.is_open


def test_publish_to_internal_exchange_is_403(
    conn: Any, ch: Any, name: str, exchanges: list[str]
) -> None:
    exchanges.append(name)
    ch.exchange_declare(exchange=name, exchange_type="fanout", internal=True)
    ch.basic_publish(exchange=name, routing_key="", body=b"x")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.exchange_declare(exchange=name, passive=True)
    assert code_of(exc) == 403
    assert conn.is_open


def test_internal_exchange_routes_via_exchange_binding(
    ch: Any, name: str, exchanges: list[str]
) -> None:
    inner, outer = name + ".inner", name + ".outer"
    exchanges.extend([inner, outer])
    ch.exchange_declare(exchange=inner, exchange_type="fanout", internal=True)
    ch.exchange_declare(exchange=outer, exchange_type="fanout")
    ch.exchange_bind(destination=inner, source=outer)
    q = new_queue(ch)
    ch.queue_bind(queue=q, exchange=inner)
    ch.basic_publish(exchange=outer, routing_key="", body=b"through")
    assert drain(ch, q) == [b"through"]


# --------------------------------------------------------------------------- delete


def test_delete_exchange(conn: Any, ch: Any, name: str) -> None:
    ch.exchange_declare(exchange=name, exchange_type="direct")
    ch.exchange_delete(exchange=name)
    assert exchange_code(conn, name) == 404


def test_delete_if_unused_with_binding_is_406(
    conn: Any, ch: Any, name: str, exchanges: list[str]
) -> None:
    exchanges.append(name)
    ch.exchange_declare(exchange=name, exchange_type="direct")
    q = new_queue(ch)
    ch.queue_bind(queue=q, exchange=name, routing_key="k")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.exchange_delete(exchange=name, if_unused=True)
    assert code_of(exc) == 406
    assert exchange_code(conn, name) == 0
    ch2 = conn.channel()
    ch2.queue_unbind(queue=q, exchange=name, routing_key="k")
    ch2.exchange_delete(exchange=name, if_unused=True)
    assert exchange_code(conn, name) == 404


def test_delete_if_unused_with_exchange_binding_is_406(
    conn: Any, ch: Any, name: str, exchanges: list[str]
) -> None:
    src = bound_fanouts(ch, name, exchanges)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.exchange_delete(exchange=src, if_unused=True)
    assert code_of(exc) == 406


def test_delete_if_unused_without_bindings(conn: Any, ch: Any, name: str) -> None:
    ch.exchange_declare(exchange=name, exchange_type="direct")
    ch.exchange_delete(exchange=name, if_unused=True)
    assert exchange_code(conn, name) == 404


def test_delete_missing_exchange_is_ok(ch: Any, name: str) -> None:
    """RabbitMQ makes exchange.delete idempotent (the 0-9-1 text has 404 NOT_FOUND)."""
    ch.exchange_delete(exchange=name)
    assert ch.is_open


def test_delete_predeclared_exchange_is_403(ch: Any) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.exchange_delete(exchange="amq.direct")
    assert code_of(exc) == 403


def test_delete_removes_bindings(ch: Any, name: str, exchanges: list[str]) -> None:
    exchanges.append(name)
    ch.exchange_declare(exchange=name, exchange_type="fanout")
    q = new_queue(ch)
    ch.queue_bind(queue=q, exchange=name)
    ch.exchange_delete(exchange=name)
    ch.exchange_declare(exchange=name, exchange_type="fanout")  # a new one, unbound
    ch.basic_publish(exchange=name, routing_key="", body=b"x")
    assert drain(ch, q) == []


# --------------------------------------------------------------------------- routing


def test_default_exchange_routes_by_queue_name(ch: Any) -> None:
    q = new_queue(ch)
    ch.basic_publish(exchange="", routing_key=q, body=b"x")
    assert drain(ch, q) == [b"x"]


def test_direct_routing(ch: Any, name: str, exchanges: list[str]) -> None:
    exchanges.append(name)
    ch.exchange_declare(exchange=name, exchange_type="direct")
    qa, qb, qab = new_queue(ch), new_queue(ch), new_queue(ch)
    ch.queue_bind(queue=qa, exchange=name, routing_key="a")
    ch.queue_bind(queue=qb, exchange=name, routing_key="b")
    ch.queue_bind(queue=qab, exchange=name, routing_key="a")
    ch.queue_bind(queue=qab, exchange=name, routing_key="b")
    for key in ("a", "b", "c", "A", "a.b"):
        ch.basic_publish(exchange=name, routing_key=key, body=key.encode())
    assert drain(ch, qa) == [b"a"]
    assert drain(ch, qb, 0) == [b"b"]
    assert drain(ch, qab, 0) == [b"a", b"b"]  # one copy per message, however many bindings


def test_fanout_ignores_routing_key(ch: Any, name: str, exchanges: list[str]) -> None:
    exchanges.append(name)
    ch.exchange_declare(exchange=name, exchange_type="fanout")
    queues = [new_queue(ch) for _ in range(3)]
    for i, q in enumerate(queues):
        ch.queue_bind(queue=q, exchange=name, routing_key=f"ignored-{i}")
    ch.basic_publish(exchange=name, routing_key="whatever", body=b"1")
    ch.basic_publish(exchange=name, routing_key="", body=b"2")
    for q in queues:
        assert drain(ch, q) == [b"1", b"2"]


TOPIC_CASES = [
    ("a.b.c", "a.b.c", True),
    ("a.b.c", "a.b", False),
    ("a.*.c", "a.b.c", True),
    ("a.*.c", "a.c", False),
    ("a.*.c", "a.b.b.c", False),
    ("a.*", "a.", True),
    ("a.*.b", "a..b", True),
    ("*", "a", True),
    ("*", "a.b", False),
    ("*", "", False),
    ("*.*", "a", False),
    ("#", "", True),
    ("#", "a.b.c", True),
    ("a.#", "a", True),
    ("a.#", "a.b.c", True),
    ("a.#", "b.a", False),
    ("#.a", "a", True),
    ("#.a", "x.y.a", True),
    ("a.#.b", "a.b", True),
    ("a.#.b", "a.x.y.b", True),
    ("a.#.b", "a.x.y.c", False),
    ("a.#.#.b", "a.b", True),
    ("#.#", "a", True),
    ("*.#", "a", True),
    ("#.*", "", False),
    ("a..b", "a..b", True),
    ("A", "a", False),
    ("a*", "ab", False),
    ("a#", "ab", False),
    ("*.b.#", "a.b", True),
    ("*.b.#", "b", False),
]


@pytest.mark.parametrize(("pattern", "key", "matches"), TOPIC_CASES)
def test_topic_matching(
    ch: Any, name: str, exchanges: list[str], pattern: str, key: str, matches: bool
) -> None:
    exchanges.append(name)
    ch.exchange_declare(exchange=name, exchange_type="topic")
    q = new_queue(ch)
    ch.queue_bind(queue=q, exchange=name, routing_key=pattern)
    ch.basic_publish(exchange=name, routing_key=key, body=b"x")
    assert drain(ch, q, 0) == ([b"x"] if matches else [])


def test_topic_overlapping_bindings_deliver_once(ch: Any, name: str, exchanges: list[str]) -> None:
    exchanges.append(name)
    ch.exchange_declare(exchange=name, exchange_type="topic")
    q = new_queue(ch)
    for pattern in ("a.*", "#", "a.b", "*.b"):
        ch.queue_bind(queue=q, exchange=name, routing_key=pattern)
    ch.basic_publish(exchange=name, routing_key="a.b", body=b"once")
    assert drain(ch, q, 0) == [b"once"]


def test_topic_unbind_one_pattern(ch: Any, name: str, exchanges: list[str]) -> None:
    exchanges.append(name)
    ch.exchange_declare(exchange=name, exchange_type="topic")
    q = new_queue(ch)
    ch.queue_bind(queue=q, exchange=name, routing_key="a.*")
    ch.queue_bind(queue=q, exchange=name, routing_key="*.b")
    ch.queue_unbind(queue=q, exchange=name, routing_key="a.*")
    for key in ("a.x", "x.b"):
        ch.basic_publish(exchange=name, routing_key=key, body=key.encode())
    assert drain(ch, q, 0) == [b"x.b"]


HEADERS_CASES: list[tuple[str | None, dict[str, Any], dict[str, Any] | None, bool]] = [
    # x-match, binding arguments, message headers, routed?
    ("all", {"a": 1, "b": "two"}, {"a": 1, "b": "two"}, True),
    ("all", {"a": 1, "b": "two"}, {"a": 1, "b": "two", "c": 3}, True),
    ("all", {"a": 1, "b": "two"}, {"a": 1}, False),
    ("all", {"a": 1, "b": "two"}, {"a": 1, "b": "three"}, False),
    ("all", {"a": 1}, None, False),
    ("all", {}, {"a": 1}, True),
    ("all", {}, None, True),
    (None, {"a": 1, "b": 2}, {"a": 1}, False),  # x-match defaults to all
    (None, {"a": 1, "b": 2}, {"a": 1, "b": 2}, True),
    ("any", {"a": 1, "b": "two"}, {"a": 1}, True),
    ("any", {"a": 1, "b": "two"}, {"b": "two"}, True),
    ("any", {"a": 1, "b": "two"}, {"a": 2, "b": "three"}, False),
    ("any", {"a": 1}, None, False),
    ("any", {}, {"a": 1}, False),
    # Values compare with their types: 1 is not "1", a 32-bit int is not a 64-bit one.
    ("all", {"a": 1}, {"a": "1"}, False),
    ("all", {"a": 1}, {"a": 2**40}, False),
    ("all", {"a": 2**40}, {"a": 2**40}, True),
    ("all", {"a": True}, {"a": True}, True),
    ("all", {"a": True}, {"a": 1}, False),
    ("all", {"a": b"raw"}, {"a": b"raw"}, True),
    # A void value in the binding matches any value under that key.
    ("all", {"a": None}, {"a": 5}, True),
    ("all", {"a": None}, {"b": 5}, False),
    # Binding keys starting with x- are ignored by all/any, compared by all-with-x/any-with-x.
    ("all", {"x-a": 1, "b": 2}, {"x-a": 2, "b": 2}, True),
    ("any", {"x-a": 1}, {"x-a": 1}, False),
    ("all-with-x", {"x-a": 1, "b": 2}, {"x-a": 2, "b": 2}, False),
    ("all-with-x", {"x-a": 1, "b": 2}, {"x-a": 1, "b": 2}, True),
    ("any-with-x", {"x-a": 1}, {"x-a": 1}, True),
    ("any-with-x", {"x-a": 1, "b": 2}, {"x-a": 3, "b": 3}, False),
]


@pytest.mark.parametrize(("x_match", "binding", "headers", "routed"), HEADERS_CASES)
def test_headers_matching(
    ch: Any,
    x_match: str | None,
    binding: dict[str, Any],
    headers: dict[str, Any] | None,
    routed: bool,
) -> None:
    q = new_queue(ch)
    arguments = dict(binding)
    if x_match is not None:
        arguments["x-match"] = x_match
    ch.queue_bind(queue=q, exchange="amq.headers", routing_key="", arguments=arguments)
    ch.basic_publish(
        exchange="amq.headers",
        routing_key="ignored",
        body=b"x",
        properties=pika.BasicProperties(headers=headers),
    )
    assert drain(ch, q, 0) == ([b"x"] if routed else [])


def test_headers_bad_x_match_is_406(ch: Any) -> None:
    q = new_queue(ch)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_bind(
            queue=q, exchange="amq.headers", routing_key="", arguments={"x-match": "some"}
        )
    assert code_of(exc) == 406


def test_headers_unbind_by_arguments(ch: Any, name: str, exchanges: list[str]) -> None:
    exchanges.append(name)
    ch.exchange_declare(exchange=name, exchange_type="headers")
    q = new_queue(ch)
    first = {"x-match": "any", "a": 1}
    second = {"x-match": "any", "b": 1}
    ch.queue_bind(queue=q, exchange=name, routing_key="", arguments=first)
    ch.queue_bind(queue=q, exchange=name, routing_key="", arguments=second)
    ch.queue_unbind(queue=q, exchange=name, routing_key="", arguments=first)
    for key in ("a", "b"):
        props = pika.BasicProperties(headers={key: 1})
        ch.basic_publish(exchange=name, routing_key="", body=key.encode(), properties=props)
    assert drain(ch, q, 0) == [b"b"]


# --------------------------------------------------------------------------- exchange to exchange


def test_exchange_to_exchange_binding(ch: Any, name: str, exchanges: list[str]) -> None:
    src, dst = name + ".src", name + ".dst"
    exchanges.extend([src, dst])
    ch.exchange_declare(exchange=src, exchange_type="direct")
    ch.exchange_declare(exchange=dst, exchange_type="topic")
    ch.exchange_bind(destination=dst, source=src, routing_key="a.b")
    q = new_queue(ch)
    ch.queue_bind(queue=q, exchange=dst, routing_key="a.*")
    ch.basic_publish(exchange=src, routing_key="a.b", body=b"via-src")
    ch.basic_publish(exchange=src, routing_key="a.c", body=b"no-src-binding")
    ch.basic_publish(exchange=dst, routing_key="a.c", body=b"direct-to-dst")
    assert drain(ch, q) == [b"via-src", b"direct-to-dst"]
    ch.exchange_unbind(destination=dst, source=src, routing_key="a.b")
    ch.basic_publish(exchange=src, routing_key="a.b", body=b"after-unbind")
    assert drain(ch, q) == []


def test_exchange_binding_chain_and_fan_in(ch: Any, name: str, exchanges: list[str]) -> None:
    """A message reaching a queue along two paths is delivered to it once."""
    a, b, c = name + ".a", name + ".b", name + ".c"
    exchanges.extend([a, b, c])
    for exchange in (a, b, c):
        ch.exchange_declare(exchange=exchange, exchange_type="fanout")
    ch.exchange_bind(destination=b, source=a)
    ch.exchange_bind(destination=c, source=b)
    ch.exchange_bind(destination=c, source=a)
    q = new_queue(ch)
    ch.queue_bind(queue=q, exchange=c)
    ch.queue_bind(queue=q, exchange=b)
    ch.basic_publish(exchange=a, routing_key="", body=b"once")
    assert drain(ch, q) == [b"once"]


def test_exchange_binding_cycle_terminates(ch: Any, name: str, exchanges: list[str]) -> None:
    a, b = name + ".a", name + ".b"
    exchanges.extend([a, b])
    ch.exchange_declare(exchange=a, exchange_type="fanout")
    ch.exchange_declare(exchange=b, exchange_type="fanout")
    ch.exchange_bind(destination=b, source=a)
    ch.exchange_bind(destination=a, source=b)
    q = new_queue(ch)
    ch.queue_bind(queue=q, exchange=b)
    ch.basic_publish(exchange=a, routing_key="", body=b"loop")
    assert drain(ch, q) == [b"loop"]


def test_exchange_bind_missing_source_or_destination_is_404(
    conn: Any, name: str, exchanges: list[str]
) -> None:
    exchanges.append(name)
    setup = conn.channel()
    setup.exchange_declare(exchange=name, exchange_type="fanout")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        conn.channel().exchange_bind(destination=name, source=name + ".missing")
    assert code_of(exc) == 404
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        conn.channel().exchange_bind(destination=name + ".missing", source=name)
    assert code_of(exc) == 404


def test_mandatory_through_exchange_binding(
    conn: Any, ch: Any, name: str, exchanges: list[str]
) -> None:
    src = bound_fanouts(ch, name, exchanges)
    returned: list[Any] = []
    ch.add_on_return_callback(lambda _c, method, _p, _b: returned.append(method))
    # dst has no queue: the message reaches no queue and comes back.
    ch.basic_publish(exchange=src, routing_key="", body=b"x", mandatory=True)
    assert pump(conn, lambda: bool(returned))
    assert returned[0].reply_code == 312


# --------------------------------------------------------------------------- alternate exchange


def test_alternate_exchange_gets_unroutable(
    conn: Any, ch: Any, name: str, exchanges: list[str]
) -> None:
    main, alt = name + ".main", name + ".alt"
    exchanges.extend([main, alt])
    ch.exchange_declare(exchange=alt, exchange_type="fanout")
    ch.exchange_declare(
        exchange=main, exchange_type="direct", arguments={"alternate-exchange": alt}
    )
    q_main, q_alt = new_queue(ch), new_queue(ch)
    ch.queue_bind(queue=q_main, exchange=main, routing_key="known")
    ch.queue_bind(queue=q_alt, exchange=alt)
    returned: list[Any] = []
    ch.add_on_return_callback(lambda *a: returned.append(a))
    ch.basic_publish(exchange=main, routing_key="known", body=b"routed", mandatory=True)
    ch.basic_publish(exchange=main, routing_key="unknown", body=b"alt", mandatory=True)
    assert drain(ch, q_main) == [b"routed"]
    assert drain(ch, q_alt, 0) == [b"alt"]
    pump(conn, lambda: False, timeout=0.2)
    assert returned == []  # routed by the alternate exchange: not returned


def test_alternate_exchange_keeps_routing_key(ch: Any, name: str, exchanges: list[str]) -> None:
    main, alt = name + ".main", name + ".alt"
    exchanges.extend([main, alt])
    ch.exchange_declare(exchange=alt, exchange_type="direct")
    ch.exchange_declare(exchange=main, exchange_type="topic", arguments={"alternate-exchange": alt})
    q = new_queue(ch)
    ch.queue_bind(queue=q, exchange=alt, routing_key="r.k")
    ch.basic_publish(exchange=main, routing_key="r.k", body=b"x")
    ch.basic_publish(exchange=main, routing_key="other", body=b"y")
    assert drain(ch, q) == [b"x"]


def test_missing_alternate_exchange_means_unroutable(
    conn: Any, ch: Any, name: str, exchanges: list[str]
) -> None:
    exchanges.append(name)
    ch.exchange_declare(
        exchange=name, exchange_type="direct", arguments={"alternate-exchange": name + ".gone"}
    )
    returned: list[Any] = []
    ch.add_on_return_callback(lambda _c, method, _p, _b: returned.append(method))
    ch.basic_publish(exchange=name, routing_key="k", body=b"x", mandatory=True)
    assert pump(conn, lambda: bool(returned))
    assert returned[0].reply_code == 312


# --------------------------------------------------------------------------- auto-delete


def test_auto_delete_after_last_queue_unbind(conn: Any, ch: Any, name: str) -> None:
    ch.exchange_declare(exchange=name, exchange_type="direct", auto_delete=True)
    q1, q2 = new_queue(ch), new_queue(ch)
    ch.queue_bind(queue=q1, exchange=name, routing_key="k")
    ch.queue_bind(queue=q2, exchange=name, routing_key="k")
    ch.queue_unbind(queue=q1, exchange=name, routing_key="k")
    assert exchange_code(conn, name) == 0
    ch.queue_unbind(queue=q2, exchange=name, routing_key="k")
    assert eventually(lambda: exchange_code(conn, name) == 404)


def test_auto_delete_after_bound_queue_deleted(conn: Any, ch: Any, name: str) -> None:
    ch.exchange_declare(exchange=name, exchange_type="fanout", auto_delete=True)
    q = new_queue(ch)
    ch.queue_bind(queue=q, exchange=name)
    ch.queue_delete(queue=q)
    assert eventually(lambda: exchange_code(conn, name) == 404)


def test_auto_delete_after_exchange_unbind_as_source(
    conn: Any, ch: Any, name: str, exchanges: list[str]
) -> None:
    dst = name + ".dst"
    exchanges.append(dst)
    ch.exchange_declare(exchange=name, exchange_type="fanout", auto_delete=True)
    ch.exchange_declare(exchange=dst, exchange_type="fanout")
    ch.exchange_bind(destination=dst, source=name)
    ch.exchange_unbind(destination=dst, source=name)
    assert eventually(lambda: exchange_code(conn, name) == 404)


def test_auto_delete_exchange_never_bound_stays(
    conn: Any, ch: Any, name: str, exchanges: list[str]
) -> None:
    exchanges.append(name)
    ch.exchange_declare(exchange=name, exchange_type="fanout", auto_delete=True)
    time.sleep(0.2)
    assert exchange_code(conn, name) == 0


def test_auto_delete_not_triggered_as_destination(
    conn: Any, ch: Any, name: str, exchanges: list[str]
) -> None:
    """Only bindings whose source is the exchange count for its auto-delete."""
    src = name + ".src"
    exchanges.extend([name, src])
    ch.exchange_declare(exchange=name, exchange_type="fanout", auto_delete=True)
    ch.exchange_declare(exchange=src, exchange_type="fanout")
    ch.exchange_bind(destination=name, source=src)
    ch.exchange_unbind(destination=name, source=src)
    time.sleep(0.2)
    assert exchange_code(conn, name) == 0
