"""The side-by-side scenarios against Leveret, compared with RabbitMQ 3.10.8's recorded outcomes.

``conformance/scenarios.py`` holds the client steps, ``conformance/recorded.json`` what
RabbitMQ answered to each (``python -m conformance record``). This module starts one Leveret
process (port 0, fresh data directory), runs every scenario against it and compares the
outcomes as data. A scenario where Leveret differs today is listed in ``differences.json``
with the difference: it runs as ``xfail(strict=True)``, so fixing the broker flips it to a
failure until the entry is removed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from conformance import brokers
from conformance.record import RECORDED
from conformance.scenarios import SCENARIOS, run
from conformance.wire import comparable

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.interop

RECORDING: dict[str, dict[str, object]] = {
    k: v for k, v in json.loads(RECORDED.read_text()).items() if not k.startswith("_")
}

# Scenario -> how Leveret differs today. "(a)": a difference to fix (after the core reshaping);
# "(c)": a deliberate difference documented in docs/compatibility.md.
DIFFERENCES: dict[str, str] = json.loads((Path(__file__).parent / "differences.json").read_text())


@pytest.fixture(scope="module")
def leveret() -> Iterator[brokers.Target]:
    # The recording is RabbitMQ 3.10's, whose 0-9-1 listener offers no ANONYMOUS; Leveret
    # offers it by default as RabbitMQ 4 does (docs/compatibility.md), so it is turned off
    # here to compare the rest of connection.start.
    target = brokers.start_leveret(management=False, env={"LEVERET_ANONYMOUS_LOGIN_USER": "none"})
    try:
        yield target
    finally:
        target.stop()


def test_every_scenario_is_recorded() -> None:
    assert sorted(SCENARIOS) == sorted(RECORDING)


def _params() -> list[object]:
    out: list[object] = []
    for name in sorted(SCENARIOS):
        marks = []
        if name in DIFFERENCES:
            marks.append(pytest.mark.xfail(strict=True, reason=DIFFERENCES[name]))
        if name.startswith("auth-"):
            # auth/'s refusal, 3 s each (docs/architecture.md, "How it is tested").
            marks.append(pytest.mark.pure_only)
        out.append(pytest.param(name, id=name, marks=marks))
    return out


@pytest.mark.parametrize("name", _params())
def test_scenario(leveret: brokers.Target, name: str) -> None:
    expected = RECORDING[name]["rabbitmq"]
    got = run(SCENARIOS[name], leveret.host, leveret.port)
    assert comparable(got) == comparable(expected), (
        f"RabbitMQ: {json.dumps(expected)}\nLeveret:  {json.dumps(got)}"
    )


def test_every_difference_names_a_scenario() -> None:
    assert sorted(set(DIFFERENCES) - set(SCENARIOS)) == []
    assert all(reason[:4] in {"(a) ", "(c) "} for reason in DIFFERENCES.values())
