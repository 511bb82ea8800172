"""``bench.convert_path``: every scenario delivers every message, with properties that repeat
and with a message id of each message's own."""

from __future__ import annotations

import pytest

from bench import convert_path


@pytest.mark.parametrize("vary", [False, True])
@pytest.mark.parametrize("scenario", convert_path.SCENARIOS)
def test_every_message_is_delivered(scenario: str, vary: bool) -> None:
    argv = ["--scenario", scenario, "--count", "1100"] + (["--vary"] if vary else [])
    elapsed, delivered = convert_path.run(convert_path.build_parser().parse_args(argv))
    assert delivered == 1100
    assert elapsed > 0
