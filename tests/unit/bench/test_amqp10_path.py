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
