"""Unit tests of the direct exchange type, the shared bookkeeping and the registry."""

from __future__ import annotations

from decimal import Decimal

import pytest

from leveret.errors import CommandInvalid
from leveret.model.exchanges import (
    TYPES,
    ConsistentHashExchange,
    DelayedExchange,
    DirectExchange,
    FanoutExchange,
    FederationUpstreamExchange,
    HeadersExchange,
    LastValueExchange,
    LocalRandomExchange,
    ModulusHashExchange,
    RandomExchange,
    TopicExchange,
    freeze,
    make_exchange_type,
)

# Left out of the compiled pass (scripts/test): the exchanges are not compiled.
pytestmark = pytest.mark.pure_only


class Queue:
    """A stand-in destination compared by identity."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Queue({self.name})"


def test_registry_has_every_type() -> None:
    assert {
        "direct": DirectExchange,
        "fanout": FanoutExchange,
        "topic": TopicExchange,
        "headers": HeadersExchange,
        "x-delayed-message": DelayedExchange,
        "x-federation-upstream": FederationUpstreamExchange,
        "x-consistent-hash": ConsistentHashExchange,
        "x-modulus-hash": ModulusHashExchange,
        "x-random": RandomExchange,
        "x-local-random": LocalRandomExchange,
        "x-lvc": LastValueExchange,
    } == TYPES
    # The types that read the message itself (headers, properties, or to keep it).
    readers = (
        "headers",
        "x-delayed-message",
        "x-consistent-hash",
        "x-lvc",
        "x-federation-upstream",
    )
    for name, cls in TYPES.items():
        instance = make_exchange_type(name)
        assert isinstance(instance, cls)
        assert name == instance.TYPE_NAME
        assert instance.NEEDS_MESSAGE is (name in readers)
        assert len(instance) == 0


def test_make_exchange_type_gives_fresh_instances() -> None:
    assert make_exchange_type("direct") is not make_exchange_type("direct")


def test_unknown_type_is_command_invalid() -> None:
    with pytest.raises(CommandInvalid) as info:
        make_exchange_type("x-nope")
    assert info.value.reply_code == 503
    assert info.value.reply_text == "unknown exchange type 'x-nope'"
    assert info.value.hard


def test_exact_key_match() -> None:
    ex = DirectExchange()
    q1, q2, q3 = Queue("1"), Queue("2"), Queue("3")
    assert ex.add_binding(q1, "a", {})
    assert ex.add_binding(q2, "a", {})
    assert ex.add_binding(q3, "b", {})
    assert list(ex.route("a", None)) == [q1, q2]
    assert list(ex.route("b", None)) == [q3]
    assert list(ex.route("c", None)) == []
    assert list(ex.route("A", None)) == []
    assert list(ex.route("", None)) == []


def test_empty_key_binding_matches_only_empty_key() -> None:
    ex = DirectExchange()
    q = Queue("q")
    ex.add_binding(q, "", {})
    assert list(ex.route("", None)) == [q]
    assert list(ex.route("x", None)) == []


def test_no_wildcards_in_direct() -> None:
    ex = DirectExchange()
    q = Queue("q")
    ex.add_binding(q, "#", {})
    ex.add_binding(q, "*", {})
    assert list(ex.route("a", None)) == []
    assert list(ex.route("#", None)) == [q]


def test_duplicate_binding_returns_false() -> None:
    ex = DirectExchange()
    q = Queue("q")
    assert ex.add_binding(q, "k", {"x": 1})
    assert not ex.add_binding(q, "k", {"x": 1})
    assert len(ex) == 1


def test_same_key_other_arguments_is_another_binding() -> None:
    ex = DirectExchange()
    q = Queue("q")
    assert ex.add_binding(q, "k", {})
    assert ex.add_binding(q, "k", {"x": 1})
    assert len(ex) == 2
    # Routed once even though bound twice.
    assert list(ex.route("k", None)) == [q]
    assert ex.remove_binding(q, "k", {})
    assert list(ex.route("k", None)) == [q]
    assert ex.remove_binding(q, "k", {"x": 1})
    assert list(ex.route("k", None)) == []
    assert len(ex) == 0


def test_remove_absent_binding_returns_false() -> None:
    ex = DirectExchange()
    q = Queue("q")
    assert not ex.remove_binding(q, "k", {})
    ex.add_binding(q, "k", {})
    assert not ex.remove_binding(q, "other", {})
    assert not ex.remove_binding(q, "k", {"x": 1})
    assert not ex.remove_binding(Queue("q"), "k", {})
    assert len(ex) == 1


def test_has_binding_and_has_bindings_to() -> None:
    ex = DirectExchange()
    q, other = Queue("q"), Queue("other")
    ex.add_binding(q, "k", {"a": [1, {"b": b"x"}]})
    assert ex.has_binding(q, "k", {"a": [1, {"b": b"x"}]})
    assert not ex.has_binding(q, "k", {})
    assert not ex.has_binding(other, "k", {"a": [1, {"b": b"x"}]})
    assert ex.has_bindings_to(q)
    assert not ex.has_bindings_to(other)


def test_remove_destination() -> None:
    ex = DirectExchange()
    q1, q2 = Queue("1"), Queue("2")
    ex.add_binding(q1, "a", {})
    ex.add_binding(q1, "b", {})
    ex.add_binding(q1, "b", {"x": 1})
    ex.add_binding(q2, "a", {})
    assert ex.remove_destination(q1) == 3
    assert ex.remove_destination(q1) == 0
    assert not ex.has_bindings_to(q1)
    assert list(ex.route("a", None)) == [q2]
    assert list(ex.route("b", None)) == []
    assert len(ex) == 1


def test_bindings_lists_every_binding_with_given_arguments() -> None:
    ex = DirectExchange()
    q1, q2 = Queue("1"), Queue("2")
    args = {"x": 1}
    ex.add_binding(q1, "a", {})
    ex.add_binding(q1, "a", args)
    ex.add_binding(q2, "b", {})
    listed = list(ex.bindings())
    assert listed == [(q1, "a", {}), (q1, "a", args), (q2, "b", {})]
    assert listed[1][2] is args


def test_bindings_iteration_survives_mutation() -> None:
    ex = DirectExchange()
    qs = [Queue(str(i)) for i in range(3)]
    for q in qs:
        ex.add_binding(q, "k", {})
    for destination, _key, _args in ex.bindings():
        ex.remove_destination(destination)
    assert len(ex) == 0


def test_route_returns_cached_collection() -> None:
    ex = DirectExchange()
    q = Queue("q")
    ex.add_binding(q, "k", {})
    first = ex.route("k", None)
    assert ex.route("k", None) is first
    ex.add_binding(q, "k", {"other": True})  # same destination: result unchanged
    assert ex.route("k", None) is first


def test_any_hashable_destination() -> None:
    ex = DirectExchange()
    ex.add_binding("queue-name", "k", {})
    ex.add_binding(("exchange", "name"), "k", {})
    assert set(ex.route("k", None)) == {"queue-name", ("exchange", "name")}


def test_routing_ignores_headers() -> None:
    ex = DirectExchange()
    q = Queue("q")
    ex.add_binding(q, "k", {"h": 1})
    assert list(ex.route("k", {"h": 2})) == [q]


def test_freeze_canonical_and_typed() -> None:
    assert freeze({"a": 1, "b": 2}) == freeze({"b": 2, "a": 1})
    assert hash(freeze({"t": {"n": [1, b"x", None]}})) == hash(
        freeze({"t": {"n": [1, b"x", None]}})
    )
    distinct = [
        freeze(1),
        freeze(True),
        freeze(1.0),
        freeze(Decimal(1)),
        freeze("1"),
        freeze(b"1"),
        freeze([1]),
        freeze({"1": 1}),
        freeze(None),
    ]
    assert len(set(distinct)) == len(distinct)
    assert freeze([1, 2]) == freeze((1, 2))
    assert freeze(bytearray(b"ab")) == freeze(b"ab")
    assert freeze(Decimal("1.0")) != freeze(Decimal("1.00"))
    assert freeze(float("nan")) == freeze(float("nan"))


def test_typed_arguments_are_distinct_bindings() -> None:
    ex = DirectExchange()
    q = Queue("q")
    assert ex.add_binding(q, "k", {"x": 1})
    assert ex.add_binding(q, "k", {"x": True})
    assert ex.add_binding(q, "k", {"x": 1.0})
    assert len(ex) == 3


def test_validate_binding_accepts_anything() -> None:
    ex = DirectExchange()
    ex.validate_binding("any key", {"x-match": "bogus"})
