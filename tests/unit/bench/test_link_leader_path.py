"""``bench.link_leader_path``: the leader delivers every publish of a burst to the peer's
consumers, with its own queue's routing key, in both scenarios (the figure it prints is per
message)."""

from __future__ import annotations

import pytest

from bench import link_leader_path


@pytest.mark.parametrize(("scenario", "queues"), [("a", 1), ("e", 10)])
def test_every_publish_is_delivered(scenario: str, queues: int) -> None:
    delivered = link_leader_path.deliveries(scenario, 100)
    assert [d.routing_key for d in delivered] == [f"q{k % queues}" for k in range(100)]
    assert {d.cid for d in delivered} == set(range(1, queues + 1))
    assert len({d.did for d in delivered}) == 100


def test_a_run_times_its_rounds() -> None:
    assert link_leader_path.run("e", 20, 2) > 0
