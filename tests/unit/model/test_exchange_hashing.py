"""Leveret's hashing exchanges against RabbitMQ 3.10.8's, message by message.

The scenarios and where RabbitMQ sent each message are in ``tests/data/hashing/``
(``python -m tools.capture_hashing`` recorded them); here the same bindings are made on a
vhost of the core and the same messages, encoded as the 0-9-1 front end keeps them, are
routed through it. Plus the hash functions against values Erlang/OTP 25 computed.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from tools.capture_hashing import REFUSALS, header_value

from leveret.errors import PreconditionFailed
from leveret.model.exchanges.erlang_hash import (
    FALSE,
    TRUE,
    UNDEFINED,
    Atom,
    Term,
    erlang_repr,
    jump_consistent_hash,
    phash2,
)
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.testing import make_message

pytestmark = pytest.mark.pure_only  # the exchanges are not compiled

DATA = Path(__file__).resolve().parents[2] / "data" / "hashing" / "rabbitmq-3.10.8.json"
RECORDED = json.loads(DATA.read_text())
OWNER = object()

# erlang:phash2/1 of each term, as Erlang/OTP 25 answered.
PHASH2 = [
    (b"abc", 98228475),
    (b"", 13708901),
    (b"hello world!", 25699699),
    (b"a" * 13, 78082363),
    ((Atom("longstr"), b"abc"), 101716503),
    (UNDEFINED, 45914356),
    (5, 5878562),
    (-5, 115015680),
    (0, 88723725),
    (1 << 40, 13893919),
    (-(1 << 40), 48180921),
    (1 << 70, 131422029),
    ((Atom("signedint"), 42), 20266392),
    ((Atom("long"), 1 << 40), 93748608),
    (1.5, 10380315),
    ((Atom("double"), 2.25), 26322418),
    ((Atom("bool"), TRUE), 32030443),
    ((Atom("void"), UNDEFINED), 27077197),
    ((), 87486268),
    ([], 113427502),
    ([1, 2, 3], 25788620),
    ([1, 2, 3, 4, 5], 66056394),
    ([300, 1], 12314199),
    ([(Atom("longstr"), b"a"), (Atom("signedint"), 1)], 25247821),
    ((Atom("table"), [(b"k", Atom("longstr"), b"v")]), 95356243),
    ((Atom("array"), []), 86211673),
    ([[]], 96416884),
    ([1, (Atom("x"),), 2], 7773117),
    ([1, 2, 3, 4, 300, 5], 54824158),
]

# rabbit_exchange_type_consistent_hash:jump_consistent_hash(Key, N), from Erlang/OTP 25.
JUMP = {
    5: [0, 2, 4, 65, 125],
    98228475: [1, 1, 5, 88, 543],
    101716503: [0, 0, 8, 54, 634],
    0: [0, 0, 4, 47, 807],
    134217727: [0, 2, 6, 74, 220],
}


@pytest.mark.parametrize(("term", "expected"), PHASH2)
def test_phash2_is_erlangs(term: Term, expected: int) -> None:
    assert phash2(term) == expected


def test_booleans_must_be_atoms() -> None:
    with pytest.raises(TypeError):
        phash2(True)
    assert phash2(FALSE) != phash2(TRUE)


def test_jump_consistent_hash_is_the_plugins() -> None:
    for key, buckets in JUMP.items():
        assert [jump_consistent_hash(key, n) for n in (2, 3, 10, 100, 1000)] == buckets
    assert jump_consistent_hash(12345, 1) == 0


def test_erlang_repr_of_binaries() -> None:
    assert erlang_repr(b"abc") == '<<"abc">>'
    assert erlang_repr(b"") == "<<>>"
    assert erlang_repr(b'a"b\\c\n') == '<<"a\\"b\\\\c\\n">>'
    assert erlang_repr(bytes([1, 2, 3])) == "<<1,2,3>>"


def _message(scenario: dict[str, Any], index: int, message: dict[str, Any]) -> Any:
    headers = None
    if "header" in message:
        present, value = header_value(message["header"])
        if isinstance(value, Decimal):
            # As pika sends it: normalized, never a negative scale.
            value = value.normalize()
            exponent = value.as_tuple().exponent
            if isinstance(exponent, int) and exponent > 0:
                value = value.quantize(Decimal(1))
        if present:
            headers = {"hk": value}
        elif message["header"] is not None:
            headers = {"other": 1}
    props = message.get("properties", {})
    return make_message(
        str(index).encode(),
        routing_key=message["key"],
        exchange="x",
        properties=BasicProperties(
            headers=headers,
            message_id=props.get("message_id"),
            correlation_id=props.get("correlation_id"),
            timestamp=props.get("timestamp"),
        ),
    )


@pytest.mark.parametrize(
    "scenario", RECORDED["scenarios"], ids=[s["name"] for s in RECORDED["scenarios"]]
)
def test_routes_as_rabbitmq(scenario: dict[str, Any]) -> None:
    vhost = VirtualHost("/")
    spec = scenario["exchange"]
    exchange = vhost.declare_exchange("x", spec["type"], arguments=spec["arguments"])
    for name in sorted({q for q, _ in scenario["bindings"]}):
        vhost.declare_queue(name, owner=OWNER)
    for name, key in scenario["bindings"]:
        vhost.bind_queue(name, "x", key, {}, owner=OWNER)
    for name, key in scenario.get("unbind", []):
        vhost.unbind_queue(name, "x", key, {}, owner=OWNER)
    routed = []
    for i, message in enumerate(scenario["messages"]):
        queues = vhost.router.route(exchange, message["key"], _message(scenario, i, message))
        assert len(queues) <= 1
        routed.append(queues[0].name if queues else None)
    mismatches = [
        (i, got, want)
        for i, (got, want) in enumerate(zip(routed, scenario["routed"], strict=True))
        if got != want
    ]
    assert not mismatches, f"{len(mismatches)} messages routed elsewhere: {mismatches[:5]}"


@pytest.mark.parametrize(("what", "arguments", "key"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_as_rabbitmq(what: str, arguments: dict[str, Any], key: str | None) -> None:
    vhost = VirtualHost("/")
    vhost.declare_queue("q", owner=OWNER)

    def declare_and_bind() -> None:
        vhost.declare_exchange("x", "x-consistent-hash", arguments=arguments)
        vhost.bind_queue("q", "x", key or "", {}, owner=OWNER)

    with pytest.raises(PreconditionFailed) as info:
        declare_and_bind()
    assert f"406 PRECONDITION_FAILED - {info.value.reply_text}" == RECORDED["refusals"][what]
