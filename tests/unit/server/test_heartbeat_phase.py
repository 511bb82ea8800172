"""Accepted connections' heartbeat phases (server/heartbeat_phase.py): spread evenly over
(0.75, 1], whatever run of connections is taken, so that connections opened together send
their heartbeats apart."""

from __future__ import annotations

from collections import Counter

import pytest

from leveret.server.heartbeat_phase import LOW, heartbeat_phase, next_heartbeat_phase


@pytest.mark.parametrize("first", [0, 1, 997, 123_456])
def test_a_thousand_connections_opened_together_spread_over_the_range(first: int) -> None:
    phases = [heartbeat_phase(n) for n in range(first, first + 1000)]
    assert all(LOW < p <= 1.0 for p in phases)
    # Ten equal bins of the range: each holds a tenth of them, give or take a few.
    bins = Counter(min(9, int((1.0 - p) / (1.0 - LOW) * 10)) for p in phases)
    assert sorted(bins) == list(range(10))
    assert all(90 <= count <= 110 for count in bins.values()), bins


def test_two_connections_in_a_row_are_far_apart() -> None:
    for n in range(1000):
        assert abs(heartbeat_phase(n) - heartbeat_phase(n + 1)) > (1.0 - LOW) / 4


def test_each_accept_takes_the_next_phase() -> None:
    a, b = next_heartbeat_phase(), next_heartbeat_phase()
    assert a != b
    assert LOW < a <= 1.0
    assert LOW < b <= 1.0
