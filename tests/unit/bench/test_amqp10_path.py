"""``bench.amqp10_path``: every published message reaches the consumer, in both protocols
and both scenarios (the figures it prints are per delivered message)."""

from __future__ import annotations

import pytest

from bench import amqp10_path


@pytest.mark.parametrize("protocol", ["10", "091"])
@pytest.mark.parametrize("scenario", ["a", "c"])
def test_every_message_is_delivered(protocol: str, scenario: str) -> None:
    args = amqp10_path.build_parser().parse_args(
        ["--protocol", protocol, "--scenario", scenario, "--count", "700", "--batch", "150"]
    )
    elapsed, delivered = amqp10_path.run(args)
    assert delivered == 700
    assert elapsed > 0


@pytest.mark.parametrize("queue_type", ["classic", "quorum", "priority"])
def test_prefetch_scenario_acks_its_way_through(queue_type: str) -> None:
    """Scenario b (prefetch 100): each multiple ack lets the next deliveries out, on every
    queue type the bench can declare."""
    args = amqp10_path.build_parser().parse_args(
        ["--protocol", "091", "--scenario", "b", "--queue-type", queue_type, "--count", "700"]
    )
    elapsed, delivered = amqp10_path.run(args)
    assert delivered == 700
    assert elapsed > 0
