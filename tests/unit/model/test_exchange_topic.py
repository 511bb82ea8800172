"""Unit tests of the topic exchange type, including RabbitMQ's edge cases."""

from __future__ import annotations

import pytest

from leveret.model.exchanges import TopicExchange
from leveret.model.exchanges.topic import CACHE_SIZE, split_topic_key

# Left out of the compiled pass (scripts/test): the exchanges are not compiled.
pytestmark = pytest.mark.pure_only


def matches(binding_key: str, routing_key: str) -> bool:
    ex = TopicExchange()
    ex.add_binding("q", binding_key, {})
    return list(ex.route(routing_key, None)) == ["q"]


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("", []),
        ("a", ["a"]),
        ("a.b", ["a", "b"]),
        ("a..b", ["a", "", "b"]),
        (".", ["", ""]),
        ("a.", ["a", ""]),
        (".a", ["", "a"]),
    ],
)
def test_split_like_rabbitmq(key: str, words: list[str]) -> None:
    assert split_topic_key(key) == words


@pytest.mark.parametrize(
    ("binding", "routing", "expected"),
    [
        # literal words
        ("a.b", "a.b", True),
        ("a.b", "a.c", False),
        ("a.b", "a", False),
        ("a.b", "a.b.c", False),
        ("a", "A", False),
        # '*' is exactly one word
        ("*", "a", True),
        ("*", "", False),
        ("*", "a.b", False),
        ("*", ".", False),
        ("*.*", ".", True),
        ("a.*", "a.b", True),
        ("a.*", "a", False),
        ("a.*", "a.", True),
        ("a.*.c", "a.b.c", True),
        ("a.*.c", "a..c", True),
        ("a.*.c", "a.c", False),
        # '#' is zero or more words
        ("#", "", True),
        ("#", "a", True),
        ("#", "a.b.c", True),
        ("#", ".", True),
        ("a.#", "a", True),
        ("a.#", "a.b", True),
        ("a.#", "a.b.c", True),
        ("a.#", "b", False),
        ("a.#", "", False),
        ("#.a", "a", True),
        ("#.a", "b.a", True),
        ("#.a", "b.c.a", True),
        ("#.a", "a.b", False),
        ("a.#.b", "a.b", True),
        ("a.#.b", "a.x.y.b", True),
        ("a.#.b", "a.x.y", False),
        ("#.#", "", True),
        ("#.#", "a.b", True),
        ("#.*", "", False),
        ("#.*", "a", True),
        ("*.#", "a", True),
        ("*.#", "", False),
        ("#.*.#", "a.b.c", True),
        # the spec's example
        ("*.stock.#", "usd.stock", True),
        ("*.stock.#", "eur.stock.db", True),
        ("*.stock.#", "stock.nasdaq", False),
        # empty binding key and empty words
        ("", "", True),
        ("", "a", False),
        ("", ".", False),
        ("a..b", "a..b", True),
        ("a..b", "a.b", False),
        (".", ".", True),
        (".", "", False),
        ("a.", "a", False),
        ("a.", "a.", True),
        # wildcards in a routing key are plain words
        ("a", "*", False),
        ("a", "#", False),
        ("*", "*", True),
        ("#", "#", True),
        ("a.*", "a.#", True),
        # partial wildcards are literal words
        ("a*", "ab", False),
        ("a*", "a*", True),
        ("a#", "a", False),
    ],
)
def test_match_semantics(binding: str, routing: str, expected: bool) -> None:
    assert matches(binding, routing) is expected


def test_destination_routed_once_across_patterns() -> None:
    ex = TopicExchange()
    ex.add_binding("q", "#", {})
    ex.add_binding("q", "a.*", {})
    ex.add_binding("q", "a.b", {})
    ex.add_binding("q", "a.b", {"x": 1})
    ex.add_binding("r", "a.#", {})
    ex.add_binding("s", "b.#", {})
    assert sorted(map(str, ex.route("a.b", None))) == ["q", "r"]
    assert sorted(map(str, ex.route("b", None))) == ["q", "s"]
    assert len(ex) == 6


def test_many_hashes_do_not_blow_up() -> None:
    ex = TopicExchange()
    ex.add_binding("q", ".".join(["#"] * 30) + ".z", {})
    assert list(ex.route(".".join(["a"] * 60), None)) == []
    assert list(ex.route(".".join(["a"] * 60) + ".z", None)) == ["q"]


def test_unbind_updates_routes_and_cache() -> None:
    ex = TopicExchange()
    ex.add_binding("q", "a.*", {})
    assert list(ex.route("a.b", None)) == ["q"]
    ex.add_binding("r", "a.b", {})
    assert sorted(map(str, ex.route("a.b", None))) == ["q", "r"]
    assert ex.remove_binding("q", "a.*", {})
    assert list(ex.route("a.b", None)) == ["r"]
    assert not ex.remove_binding("q", "a.*", {})
    assert ex.remove_binding("r", "a.b", {})
    assert list(ex.route("a.b", None)) == []


def test_same_key_other_args_keeps_route_until_last_unbind() -> None:
    ex = TopicExchange()
    ex.add_binding("q", "a.#", {})
    ex.add_binding("q", "a.#", {"x": 1})
    assert ex.remove_binding("q", "a.#", {})
    assert list(ex.route("a", None)) == ["q"]
    assert ex.remove_binding("q", "a.#", {"x": 1})
    assert list(ex.route("a", None)) == []


def test_trie_is_pruned_on_unbind() -> None:
    ex = TopicExchange()
    ex.add_binding("q", "a.b.c", {})
    ex.add_binding("q", "a.#", {})
    ex.add_binding("r", "a.b", {})
    assert ex.node_count() == 4  # a, a.b, a.b.c, a.#
    ex.remove_binding("q", "a.b.c", {})
    assert ex.node_count() == 3
    ex.remove_binding("r", "a.b", {})
    assert ex.node_count() == 2
    ex.remove_destination("q")
    assert ex.node_count() == 0
    assert len(ex) == 0
    assert list(ex.route("a.b", None)) == []


def test_intermediate_node_with_binding_survives_pruning() -> None:
    ex = TopicExchange()
    ex.add_binding("q", "a", {})
    ex.add_binding("r", "a.b", {})
    ex.remove_binding("r", "a.b", {})
    assert ex.node_count() == 1
    assert list(ex.route("a", None)) == ["q"]


def test_remove_destination_across_patterns() -> None:
    ex = TopicExchange()
    for key in ("a", "a.*", "#", ""):
        ex.add_binding("q", key, {})
    ex.add_binding("r", "a", {})
    assert ex.remove_destination("q") == 4
    assert list(ex.route("a", None)) == ["r"]
    assert list(ex.route("", None)) == []
    assert not ex.has_bindings_to("q")


def test_cache_is_bounded_and_correct_after_overflow() -> None:
    ex = TopicExchange()
    ex.add_binding("q", "k.*", {})
    for i in range(CACHE_SIZE + 10):
        assert list(ex.route(f"k.{i}", None)) == ["q"]
    assert len(ex._cache) <= CACHE_SIZE
    assert list(ex.route("k.0", None)) == ["q"]
    assert list(ex.route("x.0", None)) == []


def test_cached_result_is_reused() -> None:
    ex = TopicExchange()
    ex.add_binding("q", "a.#", {})
    ex.add_binding("r", "#.b", {})
    first = ex.route("a.b", None)
    assert ex.route("a.b", None) is first


def test_headers_are_ignored() -> None:
    ex = TopicExchange()
    ex.add_binding("q", "a", {})
    assert list(ex.route("a", {"x": 1})) == ["q"]
