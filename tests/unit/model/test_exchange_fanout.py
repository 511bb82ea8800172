"""Unit tests of the fanout exchange type."""

from __future__ import annotations

import pytest

from leveret.model.exchanges import FanoutExchange

# Left out of the compiled pass (scripts/test): the exchanges are not compiled.
pytestmark = pytest.mark.pure_only


class Queue:
    """A stand-in destination compared by identity."""

    def __init__(self, name: str) -> None:
        self.name = name


def test_routes_to_all_ignoring_key_and_headers() -> None:
    ex = FanoutExchange()
    q1, q2 = Queue("1"), Queue("2")
    ex.add_binding(q1, "", {})
    ex.add_binding(q2, "some.key", {})
    for key in ("", "x", "some.key", "#"):
        assert list(ex.route(key, None)) == [q1, q2]
    assert list(ex.route("x", {"a": 1})) == [q1, q2]


def test_empty_fanout_routes_nowhere() -> None:
    assert list(FanoutExchange().route("k", None)) == []


def test_destination_once_even_with_many_bindings() -> None:
    ex = FanoutExchange()
    q = Queue("q")
    assert ex.add_binding(q, "a", {})
    assert ex.add_binding(q, "b", {})
    assert ex.add_binding(q, "a", {"x": 1})
    assert not ex.add_binding(q, "a", {})
    assert len(ex) == 3
    assert list(ex.route("", None)) == [q]


def test_unbind_keeps_destination_while_other_bindings_remain() -> None:
    ex = FanoutExchange()
    q1, q2 = Queue("1"), Queue("2")
    ex.add_binding(q1, "a", {})
    ex.add_binding(q1, "b", {})
    ex.add_binding(q2, "a", {})
    assert ex.remove_binding(q1, "a", {})
    assert list(ex.route("", None)) == [q1, q2]
    assert ex.remove_binding(q1, "b", {})
    assert list(ex.route("", None)) == [q2]
    assert not ex.remove_binding(q1, "b", {})


def test_remove_destination() -> None:
    ex = FanoutExchange()
    q1, q2 = Queue("1"), Queue("2")
    ex.add_binding(q1, "a", {})
    ex.add_binding(q1, "b", {})
    ex.add_binding(q2, "", {})
    assert ex.remove_destination(q1) == 2
    assert list(ex.route("", None)) == [q2]
    assert ex.has_bindings_to(q2)
    assert not ex.has_bindings_to(q1)
    assert ex.has_binding(q2, "", {})
    assert not ex.has_binding(q2, "x", {})


def test_route_result_is_cached() -> None:
    ex = FanoutExchange()
    ex.add_binding(Queue("1"), "", {})
    assert ex.route("a", None) is ex.route("b", None)


def test_bindings_listing() -> None:
    ex = FanoutExchange()
    q = Queue("q")
    ex.add_binding(q, "a", {})
    ex.add_binding(q, "b", {"x": "y"})
    assert list(ex.bindings()) == [(q, "a", {}), (q, "b", {"x": "y"})]
