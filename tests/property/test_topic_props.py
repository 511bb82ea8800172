"""Property test: the topic trie agrees with a regex built per binding key."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.model.exchanges import TopicExchange

# Left out of the compiled pass (scripts/test): the exchanges' matching is not compiled.
pytestmark = pytest.mark.pure_only

WORDS = st.sampled_from(["a", "b", "", "*", "#"])
ROUTING_WORDS = st.sampled_from(["a", "b", "", "*", "#", "ab"])


def keys(words: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    # Zero words is the empty key; otherwise the words joined by dots.
    return st.lists(words, max_size=6).map(".".join)


def reference_regex(binding_key: str) -> re.Pattern[str]:
    """Match against ``"".join("." + w for w in words)``: one ``.`` opens every word."""
    parts = []
    for word in binding_key.split(".") if binding_key else []:
        if word == "*":
            parts.append(r"\.[^.]*")
        elif word == "#":
            parts.append(r"(?:\.[^.]*)*")
        else:
            parts.append(re.escape("." + word))
    return re.compile("".join(parts))


def encode(routing_key: str) -> str:
    return "".join("." + w for w in routing_key.split(".")) if routing_key else ""


@settings(max_examples=300, deadline=None)
@given(
    bindings=st.lists(st.tuples(keys(WORDS), st.integers(0, 4)), max_size=12),
    routing_keys=st.lists(keys(ROUTING_WORDS), min_size=1, max_size=8),
    removals=st.integers(0, 4),
)
def test_trie_agrees_with_regex(
    bindings: list[tuple[str, int]], routing_keys: list[str], removals: int
) -> None:
    ex = TopicExchange()
    for key, dest in bindings:
        ex.add_binding(dest, key, {})
    live = set(bindings)

    def check() -> None:
        for routing_key in routing_keys:
            target = encode(routing_key)
            expected = {d for k, d in live if reference_regex(k).fullmatch(target)}
            result = ex.route(routing_key, None)
            assert len(result) == len(set(result))
            assert set(result) == expected, (routing_key, sorted(live))

    check()
    # Unbinding (and the cache invalidation with it) keeps the answers right.
    for key, dest in sorted(live)[:removals]:
        assert ex.remove_binding(dest, key, {})
        live.discard((key, dest))
        check()
    ex.remove_destination(0)
    live = {(k, d) for k, d in live if d != 0}
    check()
    if not live:
        assert ex.node_count() == 0
