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


@pytest.mark.parametrize("backlog", [0, 3000])
def test_single_acks_with_a_paged_backlog_deliver_every_message(backlog: int) -> None:
    """Scenario b as the load generator drives it: one ack per delivery, and a backlog kept
    ahead of the consumer (3,000: past the resident head, so the queue pages); the figure
    counts the measured messages only, each delivered."""
    argv = ["--protocol", "091", "--scenario", "b", "--acks", "single", "--count", "900"]
    args = amqp10_path.build_parser().parse_args([*argv, "--backlog", str(backlog)])
    elapsed, delivered = amqp10_path.run(args)
    # With a backlog each round acks until its publishes' worth went out: a few more may.
    assert delivered == 900 if not backlog else 900 <= delivered < 900 + 100
    assert elapsed > 0
