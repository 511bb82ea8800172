"""Queue leader placement (``cluster/placement.py``): which locator a declaration asks for,
and which node each locator picks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveret.cluster.placement import BALANCED, CLIENT_LOCAL, BadLocator, choose_leader, locator


def test_default_is_client_local() -> None:
    assert locator({}, {}) == CLIENT_LOCAL


@pytest.mark.parametrize(
    ("arguments", "policy", "expected"),
    [
        ({"x-queue-leader-locator": "balanced"}, {}, BALANCED),
        ({"x-queue-leader-locator": b"balanced"}, {}, BALANCED),  # a longstr from the wire
        ({}, {"queue-leader-locator": "balanced"}, BALANCED),
        ({"x-queue-master-locator": "min-masters"}, {}, BALANCED),
        ({}, {"queue-master-locator": "random"}, BALANCED),
        ({}, {"queue-master-locator": "client-local"}, CLIENT_LOCAL),
        # The argument wins over the policy, the leader key over the master key.
        (
            {"x-queue-leader-locator": "client-local"},
            {"queue-leader-locator": "balanced"},
            CLIENT_LOCAL,
        ),
        (
            {"x-queue-master-locator": "balanced"},
            {"queue-leader-locator": "client-local"},
            CLIENT_LOCAL,
        ),
    ],
)
def test_locator_precedence(
    arguments: dict[str, object], policy: dict[str, object], expected: str
) -> None:
    assert locator(arguments, policy) == expected


def test_unknown_locator_is_refused() -> None:
    with pytest.raises(BadLocator, match="nearest"):
        locator({"x-queue-leader-locator": "nearest"}, {})


def test_client_local_is_the_declaring_node_whatever_the_counts() -> None:
    assert choose_leader(CLIENT_LOCAL, "a", ["a", "b"], {"a": 100, "b": 0}) == "a"


def test_balanced_picks_the_node_leading_fewest() -> None:
    assert choose_leader(BALANCED, "a", ["a", "b", "c"], {"a": 3, "b": 1, "c": 2}) == "b"
    # A running node leading nothing counts as 0.
    assert choose_leader(BALANCED, "a", ["a", "b", "c"], {"a": 1, "b": 1}) == "c"
    # Ties: the declaring node first, then by name.
    assert choose_leader(BALANCED, "b", ["a", "b"], {"a": 1, "b": 1}) == "b"
    assert choose_leader(BALANCED, "c", ["a", "b", "c"], {"a": 0, "b": 0, "c": 5}) == "a"
    # A node that is not running is never chosen, however few it leads.
    assert choose_leader(BALANCED, "a", ["a"], {"a": 9, "gone": 0}) == "a"


@given(
    st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 50), min_size=1),
    st.sampled_from("abcdef"),
)
def test_balanced_never_picks_a_node_leading_more_than_another(
    counts: dict[str, int], client: str
) -> None:
    running = sorted(counts)
    leader = choose_leader(BALANCED, client, running, counts)
    assert leader in {*running, client}
    assert counts.get(leader, 0) == min(counts.get(n, 0) for n in {*running, client})


@given(st.lists(st.sampled_from(["a", "b", "c"]), max_size=60))
def test_balanced_placement_of_a_series_keeps_counts_within_one(clients: list[str]) -> None:
    """Declaring queue after queue with ``balanced`` from any node spreads leaders evenly."""
    counts = {"a": 0, "b": 0, "c": 0}
    for client in clients:
        counts[choose_leader(BALANCED, client, counts, counts)] += 1
    assert max(counts.values()) - min(counts.values()) <= 1
