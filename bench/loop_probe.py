"""``python -m bench.loop_probe --out FILE -- [serve flags]``: run ``leveret serve`` with
instruments on its own pauses, which a busy machine does not blur (issue 26).

- the cyclic garbage collector: every collection's generation, duration (wall and the
  thread's CPU) and when it ran, split into boot (before the listeners opened and
  ``Server.start`` returned) and serving, which is what a client feels;
- the management plane's statistics sample: the CPU of each loop turn it takes (a slice of
  a pass, ``Sampler.step``) and of each whole pass;
- the event loop: a 1 ms timer whose lateness (``time.perf_counter``: uvloop's own clock
  counts whole milliseconds) is the loop's lag; each late tick is split into the CPU the
  broker's thread used meanwhile (its own work: a long turn) and the rest (the process was
  not running: the machine's other work), and the longest turns are listed with what ran in
  them (a collection, a statistics slice, or neither);
- on SIGUSR1, one full collection (``gc.collect()``), timed like the others: what a full
  collection of everything the broker holds now would cost the loop.

On SIGTERM or SIGINT the broker stops as usual and the probe writes one JSON object to
``--out``. Latency percentiles of the messages come from the load generator; this says which
part of them the broker causes itself.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["LoopProbe", "main"]

TICK = 0.001
# Late ticks kept with their attribution, the longest first.
WORST = 12


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

    def __init__(self, *, census: bool = False) -> None:
        # (seconds since serving began, or negative while booting; generation; wall; cpu)
        self.collections: list[tuple[float, int, float, float]] = []
        self._gc_started = (0.0, 0.0)
        self.serving_since: float | None = None
        self.lag: list[float] = []
        self.lag_cpu: list[float] = []
        self.lag_off_cpu: list[float] = []
        self.worst: list[tuple[float, float, float, str]] = []  # (late, at, own cpu, what ran)
        self.sample_slices: list[float] = []
        self.sample_passes: list[float] = []
        self._pass_cpu = 0.0
        self.gc_events = 0
        self.sample_events = 0
        self.census = census
        # With census: the types most common in the generation each full collection walked.
        self.full_census: list[dict[str, Any]] = []
        self.forced: list[int] = []  # what each full collection asked with SIGUSR1 freed
        self._tick: asyncio.Handle | None = None
        self.started = time.perf_counter()

    def _since_serving(self, wall: float) -> float:
        return wall - (self.serving_since if self.serving_since is not None else wall + 1e9)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        generation = int(info["generation"])
        if phase == "start":
            if self.census and generation == 2 and self.serving_since is not None:
                types = Counter(type(o).__qualname__ for o in gc.get_objects(2))
                self.full_census.append(
                    {
                        "at_s": round(time.perf_counter() - self.serving_since, 3),
                        "objects": sum(types.values()),
                        "top": types.most_common(15),
                    }
                )
            self._gc_started = (time.perf_counter(), time.thread_time())
            return
        wall0, cpu0 = self._gc_started
        wall = time.perf_counter()
        self.collections.append(
            (self._since_serving(wall0), generation, wall - wall0, time.thread_time() - cpu0)
        )
        self.gc_events += 1

    def install(self) -> None:
        gc.callbacks.append(self._on_gc)

    def uninstall(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def serving(self) -> None:
        """The broker finished booting: what happens from now on is what clients feel."""
        self.serving_since = time.perf_counter()

    def timed_slice(self, cpu: float, *, finished: bool) -> None:
        self.sample_slices.append(cpu)
        self.sample_events += 1
        self._pass_cpu += cpu
        if finished:
            self.sample_passes.append(self._pass_cpu)
            self._pass_cpu = 0.0

    def full_collection(self) -> None:
        """What a full collection costs now (SIGUSR1): one ``gc.collect()``, timed (and with
        ``--census``, its objects counted by type) like any other."""
        self.forced.append(gc.collect())

    def start_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_signal_handler(signal.SIGUSR1, self.full_collection)

        def tick(due: float, cpu: float, gcs: int, samples: int) -> None:
            now = time.perf_counter()
            cpu_now = time.thread_time()
            late = max(0.0, now - due)
            self.lag.append(late)
            if late > TICK:
                # Of the interval since the last tick, the part the thread ran is its own work.
                own = min(late, max(0.0, cpu_now - cpu - TICK))
                self.lag_cpu.append(own)
                self.lag_off_cpu.append(late - own)
                ran = "gc" if self.gc_events != gcs else ""
                if self.sample_events != samples:
                    ran = f"{ran}+sample" if ran else "sample"
                entry = (late, self._since_serving(now), own, ran)
                if len(self.worst) < WORST:
                    heapq.heappush(self.worst, entry)
                else:
                    heapq.heappushpop(self.worst, entry)
            self._tick = loop.call_later(
                TICK, tick, time.perf_counter() + TICK, cpu_now, self.gc_events, self.sample_events
            )

        self._tick = loop.call_soon(
            tick, time.perf_counter(), time.thread_time(), self.gc_events, self.sample_events
        )

    def _gc_report(self, serving: bool) -> dict[str, Any]:
        picked = [c for c in self.collections if (c[0] >= 0) == serving]
        out: dict[str, Any] = {}
        for generation in (0, 1, 2):
            these = [c for c in picked if c[1] == generation]
            out[str(generation)] = {
                "wall": _percentiles([c[2] for c in these]),
                "cpu": _percentiles([c[3] for c in these]),
                "at_s": [round(c[0], 2) for c in these][:20] if generation and serving else None,
            }
        return out

    def report(self) -> dict[str, Any]:
        return {
            "seconds": round(time.perf_counter() - self.started, 1),
            "serving_s": (
                round(time.perf_counter() - self.serving_since, 1)
                if self.serving_since is not None
                else None
            ),
            "gc_serving": self._gc_report(serving=True),
            "gc_boot": self._gc_report(serving=False),
            "gc_threshold": gc.get_threshold(),
            "gc_frozen": gc.get_freeze_count(),
            "gc_full_census": self.full_census,
            "gc_forced_collected": self.forced,
            "stats_slice_cpu": _percentiles(self.sample_slices),
            "stats_pass_cpu": _percentiles(self.sample_passes),
            "loop_lag": _percentiles(self.lag),
            "late_ticks_own_cpu": _percentiles(self.lag_cpu),
            "late_ticks_off_cpu": _percentiles(self.lag_off_cpu),
            "worst_ticks": [
                {
                    "late_ms": round(late * 1e3, 2),
                    "at_s": round(at, 2),
                    "own_cpu_ms": round(own * 1e3, 2),
                    "ran": ran,
                }
                for late, at, own, ran in sorted(self.worst, reverse=True)
            ],
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loop_probe", description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--gc-threshold",
        default="",
        help="gen0,gen1,gen2: set once the broker started (default: the broker's own)",
    )
    parser.add_argument(
        "--census",
        action="store_true",
        help="list the object types each full collection walks (slows those collections)",
    )
    parser.add_argument("serve", nargs=argparse.REMAINDER, help="-- then leveret serve's flags")
    args = parser.parse_args(argv)
    serve_args = [a for a in args.serve if a != "--"]
    from leveret.cli import main as cli
    from leveret.server import server

    probe = LoopProbe(census=args.census)
    probe.install()
    original_start = server.Server.start

    async def start(self: server.Server) -> None:
        await original_start(self)
        if args.gc_threshold:
            gc.set_threshold(*(int(x) for x in args.gc_threshold.split(",")))
        probe.serving()
        probe.start_loop(asyncio.get_running_loop())

    server.Server.start = start  # type: ignore[method-assign]
    # The management plane's statistics sample: a pass every collect_statistics_interval,
    # taken a slice per loop turn.
    from leveret.management import stats

    if hasattr(stats, "SamplePass"):
        original_step = stats.SamplePass.step

        def step(self: stats.SamplePass, budget: int) -> bool:
            cpu = time.thread_time()
            finished = original_step(self, budget)
            probe.timed_slice(time.thread_time() - cpu, finished=finished)
            return finished

        stats.SamplePass.step = step  # type: ignore[method-assign]
    else:  # a build from before the sample was sliced: one pass, one turn
        original_sample = stats.Sampler.sample

        def sample(self: stats.Sampler, *a: Any, **k: Any) -> None:
            cpu = time.thread_time()
            original_sample(self, *a, **k)
            probe.timed_slice(time.thread_time() - cpu, finished=True)

        stats.Sampler.sample = sample  # type: ignore[method-assign]
    try:
        return cli.main(["serve", *serve_args])
    finally:
        args.out.write_text(json.dumps(probe.report(), indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
