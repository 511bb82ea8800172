"""``python -m bench.loop_probe --out FILE -- [serve flags]``: run ``leveret serve`` with
instruments on its own pauses, which a busy machine does not blur (issue 26).

- the cyclic garbage collector: every collection's generation and its duration, wall and
  the thread's CPU (``gc.callbacks``);
- the management plane's statistics sample: the CPU of each;
- the event loop: a 1 ms timer whose lateness is the loop's lag; each late tick is split
  into the CPU the broker's thread used meanwhile (its own work: a long turn) and the rest
  (the process was not running: the machine's other work).

On SIGTERM or SIGINT the broker stops as usual and the probe writes one JSON object to
``--out``: counts and percentiles of GC pauses per generation and of the loop's lag, split
as above. Latency percentiles of the messages come from the load generator; this says which
part of them the broker causes itself.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
from pathlib import Path
from typing import Any

__all__ = ["LoopProbe", "main"]

TICK = 0.001


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3, 3)

    return {
        "count": len(ordered),
        "p50_ms": at(0.50),
        "p99_ms": at(0.99),
        "p999_ms": at(0.999),
        "max_ms": round(ordered[-1] * 1e3, 3),
        "total_ms": round(sum(ordered) * 1e3, 1),
    }


class LoopProbe:
    """GC pauses and loop lag of the process it is installed in."""

    def __init__(self) -> None:
        self.gc_wall: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self.gc_cpu: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._gc_started = (0.0, 0.0)
        self.lag: list[float] = []
        self.lag_cpu: list[float] = []
        self.lag_off_cpu: list[float] = []
        self.samples: list[float] = []
        self._tick: asyncio.Handle | None = None
        self.started = time.monotonic()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = (time.perf_counter(), time.thread_time())
            return
        wall0, cpu0 = self._gc_started
        generation = int(info["generation"])
        self.gc_wall[generation].append(time.perf_counter() - wall0)
        self.gc_cpu[generation].append(time.thread_time() - cpu0)

    def install(self) -> None:
        gc.callbacks.append(self._on_gc)

    def start_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        def tick(due: float, cpu: float) -> None:
            now = loop.time()
            cpu_now = time.thread_time()
            late = max(0.0, now - due)
            self.lag.append(late)
            if late > TICK:
                # Of the interval since the last tick, the part the thread ran is its own work.
                used = cpu_now - cpu
                self.lag_cpu.append(min(late, max(0.0, used - TICK)))
                self.lag_off_cpu.append(max(0.0, late - max(0.0, used - TICK)))
            self._tick = loop.call_at(now + TICK, tick, now + TICK, cpu_now)

        self._tick = loop.call_soon(tick, loop.time(), time.thread_time())

    def report(self) -> dict[str, Any]:
        return {
            "seconds": round(time.monotonic() - self.started, 1),
            "gc_wall": {str(g): _percentiles(v) for g, v in self.gc_wall.items()},
            "gc_cpu": {str(g): _percentiles(v) for g, v in self.gc_cpu.items()},
            "gc_threshold": gc.get_threshold(),
            "gc_frozen": gc.get_freeze_count(),
            "stats_sample_cpu": _percentiles(self.samples),
            "loop_lag": _percentiles(self.lag),
            "late_ticks_own_cpu": _percentiles(self.lag_cpu),
            "late_ticks_off_cpu": _percentiles(self.lag_off_cpu),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loop_probe", description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--gc-threshold",
        default="",
        help="gen0,gen1,gen2: set once the broker started (default: the broker's own)",
    )
    parser.add_argument("serve", nargs=argparse.REMAINDER, help="-- then leveret serve's flags")
    args = parser.parse_args(argv)
    serve_args = [a for a in args.serve if a != "--"]
    from leveret.cli import main as cli
    from leveret.server import server

    probe = LoopProbe()
    probe.install()
    original_start = server.Server.start

    async def start(self: server.Server) -> None:
        await original_start(self)
        if args.gc_threshold:
            gc.set_threshold(*(int(x) for x in args.gc_threshold.split(",")))
        probe.start_loop(asyncio.get_running_loop())

    server.Server.start = start  # type: ignore[method-assign]
    # The management plane's statistics sample: one turn every collect_statistics_interval.
    from leveret.management import stats

    original_sample = stats.Sampler.sample

    def sample(self: stats.Sampler, *a: Any, **k: Any) -> None:
        cpu = time.thread_time()
        original_sample(self, *a, **k)
        probe.samples.append(time.thread_time() - cpu)

    stats.Sampler.sample = sample  # type: ignore[method-assign]
    try:
        return cli.main(["serve", *serve_args])
    finally:
        args.out.write_text(json.dumps(probe.report(), indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
