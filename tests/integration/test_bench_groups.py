"""``bench.groups`` (the message-groups benchmark) works: a short run of each Leveret
scenario against a broker delivers every message, each group in publish order where the
scenario promises it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from bench import groups

if TYPE_CHECKING:
    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.leveret_only, pytest.mark.timeout(120)]


@dataclass
class _Target:
    name: str
    port: int
    pid: int


@pytest.mark.parametrize("scenario", groups.SCENARIOS)
def test_a_short_run_delivers_everything_in_group_order(broker: Broker, scenario: str) -> None:
    assert broker.process is not None
    args = groups.build_parser().parse_args(
        ["--count", "3000", "--groups", "50", "--consumers", "4", "--prefetch", "20"]
    )
    target = _Target("leveret", broker.port, broker.process.pid)
    result = groups.run_once(target, scenario, args)
    assert result.consumed == 3000
    if scenario != "plain":  # without groups nothing keeps a group's order across consumers
        assert result.out_of_order == 0
    assert result.rate > 0
    assert "| leveret | " + scenario in groups.table([result], 3000)
