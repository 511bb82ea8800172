"""``python -m bench.h_phases DUMP...``: how the Go load generator's sends fell in time in
scenario h (1000 publishers at 1 msg/s), and what each message's latency owed to it (issue
26, docs/benchmarks.md "h's tail under the Go tool").

A dump is one line per message of the measured window, ``sent received publisher`` (ns of
the tool's own clock), as a copy of the tool patched as that section says writes it to
``$LOADGEN_DUMP``. The tool starts each publisher's 1 s ticker when its channel opens, so a
publisher's sends keep one phase within the second; how close together the publishers'
phases are decides how large a burst the broker gets once a second.

Per file, one JSON line: the latency percentiles (µs); ``phase_spread_ms``, p10 to p90 of the
publishers' phases (each publisher's first send within the second, the circle cut at its
widest gap); ``densest_10ms``, the most publishers whose phases fall within 10 ms; and
``clumps``: the sends split where ``--gap`` ms pass without one, by size band, with the
clumps' count, their messages, and the medians over the clumps of each clump's median and
largest latency (µs).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from typing import TYPE_CHECKING, Any

from bench.stats import percentiles

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["BANDS", "clumps", "load", "main", "phases", "summarize"]

SECOND = 1_000_000_000
BANDS = ((1, 31), (32, 99), (100, 199), (200, 399), (400, 1_000_000))

Row = tuple[int, int, int]  # sent, received (ns), publisher


def load(path: str) -> list[Row]:
    rows = []
    with open(path, encoding="ascii") as f:
        for line in f:
            sent, received, publisher = line.split()
            rows.append((int(sent), int(received), int(publisher)))
    return rows


def phases(rows: Sequence[Row]) -> list[int]:
    """Each publisher's phase (ns into the second) of its first send, sorted, the circle cut
    at the widest gap between two phases so that a burst across a second's edge stays one."""
    first: dict[int, int] = {}
    for sent, _received, publisher in sorted(rows):
        first.setdefault(publisher, sent % SECOND)
    ordered = sorted(first.values())
    if len(ordered) < 2:
        return ordered
    gaps = [(b - a, i + 1) for i, (a, b) in enumerate(itertools.pairwise(ordered))]
    gaps.append((ordered[0] + SECOND - ordered[-1], 0))
    _widest, start = max(gaps)
    return [(p - ordered[start]) % SECOND for p in ordered[start:] + ordered[:start]]


def densest(values: Sequence[int], window: int) -> int:
    """The most of ``values`` (sorted) within any ``window``."""
    best = lo = 0
    for hi, value in enumerate(values):
        while value - values[lo] > window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def clumps(rows: Sequence[Row], gap: int) -> list[list[Row]]:
    """The sends split where more than ``gap`` ns pass between two."""
    out: list[list[Row]] = []
    last = None
    for row in sorted(rows):
        if last is None or row[0] - last > gap:
            out.append([])
        out[-1].append(row)
        last = row[0]
    return out


def summarize(rows: Sequence[Row], gap_ms: float = 0.3) -> dict[str, Any]:
    spread = phases(rows)
    bands = []
    split = clumps(rows, int(gap_ms * 1e6))
    for low, high in BANDS:
        these = [c for c in split if low <= len(c) <= high]
        if not these:
            continue
        latencies = [[(r[1] - r[0]) // 1000 for r in c] for c in these]
        bands.append(
            {
                "sizes": [low, high],
                "clumps": len(these),
                "messages": sum(len(c) for c in these),
                "median_latency_us": statistics.median(statistics.median(x) for x in latencies),
                "max_latency_us": statistics.median(max(x) for x in latencies),
            }
        )
    return {
        "messages": len(rows),
        "latency_us": percentiles([(r[1] - r[0]) // 1000 for r in rows]),
        "phase_spread_ms": round(
            (spread[int(0.9 * (len(spread) - 1))] - spread[int(0.1 * (len(spread) - 1))]) / 1e6, 1
        )
        if spread
        else None,
        "densest_10ms": densest(spread, 10_000_000),
        "clumps": bands,
    }


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.h_phases", description=__doc__)
    p.add_argument("dumps", nargs="+")
    p.add_argument("--gap", type=float, default=0.3, help="ms without a send that ends a clump")
    args = p.parse_args(argv)
    for path in args.dumps:
        print(json.dumps({"dump": path, **summarize(load(path), args.gap)}), flush=True)


if __name__ == "__main__":
    main()
