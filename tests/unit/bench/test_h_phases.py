"""``bench.h_phases`` reads the Go tool's per-message dump of scenario h: the publishers'
phases within the second (a burst across the second's edge is one), the densest 10 ms, and
the clumps of sends with their latencies."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from bench import h_phases

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

MS = 1_000_000


def _dump(tmp_path: Path, rows: list[tuple[int, int, int]]) -> str:
    path = tmp_path / "dump.txt"
    path.write_text("".join(f"{s} {r} {p}\n" for s, r, p in rows))
    return str(path)


def test_phases_across_the_seconds_edge_are_one_burst() -> None:
    # 20 publishers, 1 ms apart from 990 ms into the second to 9 ms past its end, twice.
    rows = [
        (second * h_phases.SECOND + (990 + i) * MS, second * h_phases.SECOND + (991 + i) * MS, i)
        for second in (1, 2)
        for i in range(20)
    ]
    spread = h_phases.phases(rows)
    assert spread == [i * MS for i in range(20)]
    summary = h_phases.summarize(rows)
    assert summary["phase_spread_ms"] == 16.0  # p10 (the 2nd phase, 1 ms) to p90 (the 18th)
    assert summary["densest_10ms"] == 11


def test_clumps_and_their_latencies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A clump of 40 sends 0.1 ms apart, each received 1 ms after the one before it was
    # (latency grows with the place in the clump), then 5 lone sends 10 ms apart.
    rows = [(i * MS // 10, i * MS // 10 + (i + 1) * MS, i) for i in range(40)]
    rows += [(100 * MS + k * 10 * MS, 100 * MS + k * 10 * MS + MS // 2, 40 + k) for k in range(5)]
    h_phases.main([_dump(tmp_path, rows)])
    result = json.loads(capsys.readouterr().out)
    assert result["messages"] == 45
    small, large = result["clumps"]
    assert (small["sizes"], small["clumps"], small["messages"]) == ([1, 31], 5, 5)
    assert small["median_latency_us"] == small["max_latency_us"] == 500
    assert (large["sizes"], large["clumps"], large["messages"]) == ([32, 99], 1, 40)
    assert large["max_latency_us"] == 40_000
