"""bench.compare's table: medians per broker, ratios to RabbitMQ, latency for g and h, and
bench.loop_probe's percentiles and GC instruments."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

from bench import compare, floor_probe, loop_probe


def _run(broker: str, scenario: str, rate: float, p99_us: float, **extra: Any) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "tool": "go",
        "broker": broker,
        "ok": True,
        "loadavg": 3.0,
        "window_s": 10,
        "rates": {"consumed": rate},
        "latency_us": {"p50": p99_us / 4, "p99": p99_us, "p99_9": p99_us * 2},
        "cpu": {"broker_pct": 50.0},
        **extra,
    }


def test_the_table_compares_each_build_with_rabbitmq() -> None:
    runs = [
        _run("compiled", "a", 40_000, 0),
        _run("compiled", "a", 60_000, 0),
        _run("pure", "a", 20_000, 0),
        _run("rabbitmq", "a", 25_000, 0),
        _run("compiled", "g", 1000, 800),
        _run("pure", "g", 1000, 1500),
        _run("rabbitmq", "g", 1000, 1000),
    ]
    table = compare.render(runs).splitlines()
    a = next(line for line in table if line.startswith("| a:"))
    g = next(line for line in table if line.startswith("| g:"))
    assert "50,000 msg/s" in a  # the median of the compiled rounds
    assert "| 2.00x | 0.80x |" in a
    assert "0.20 / 0.80 / 1.60 ms" in g
    assert "p99 0.80x" in g
    assert "p99 1.50x" in g
    assert "2/2, 1/1, 1/1" in a
    # CPU per message: 50 % of a core over 10 s for 1,000 msg/s is 500 µs each.
    assert "500.0" in g


def test_the_brokers_take_turns_at_running_first_after_each_scenario() -> None:
    runs = compare.schedule(3, "fg", ["go"])
    assert len(runs) == 3 * 2 * 3
    # Every round runs every scenario on every broker once.
    for rnd in (1, 2, 3):
        for key in "fg":
            assert sorted(b for r, k, _, b in runs if (r, k) == (rnd, key)) == sorted(
                compare.BROKERS
            )
    # Who runs g right after the last f on another broker: each broker once in three rounds.
    first_after_f = [
        runs[i + 1][3]
        for i, (_, key, _, _) in enumerate(runs[:-1])
        if key == "f" and runs[i + 1][1] == "g"
    ]
    assert sorted(first_after_f) == sorted(compare.BROKERS)
    assert [b for r, k, _, b in runs if (r, k) == (1, "f")] == list(compare.BROKERS)


def test_a_latency_row_shows_the_machines_own_tail_and_steal_beside_the_load() -> None:
    floor = {"count": 5000, "p50": 40, "p99": 900, "p99_9": 3000, "max": 9000, "over_1ms": 40}
    runs = [
        _run("compiled", "g", 1000, 800, floor_us=floor, steal_ms=0.0),
        _run("pure", "g", 1000, 1500, floor_us={**floor, "p99": 2400}, steal_ms=30.0),
        _run("rabbitmq", "g", 1000, 1000, floor_us=floor, steal_ms=10.0),
        _run("compiled", "a", 40_000, 0, steal_ms=50.0),
        _run("pure", "a", 20_000, 0),
        _run("rabbitmq", "a", 25_000, 0),
    ]
    table = compare.render(runs).splitlines()
    g = next(line for line in table if line.startswith("| g:"))
    a = next(line for line in table if line.startswith("| a:"))
    assert g.endswith("| 3.0 to 3.0; no-broker p99 0.90 to 2.40 ms; steal 0 to 30 ms |")
    assert "no-broker" not in a
    assert "steal" not in a


def test_the_floor_probe_times_a_round_trip_a_millisecond() -> None:
    started = time.monotonic()
    result = floor_probe.probe(0.3)
    # One round trip due each millisecond, late ones sent at once: 300, over at least 0.3 s.
    assert result["count"] == 300
    assert time.monotonic() - started >= 0.29
    assert 0 < result["p50"] <= result["p99"] <= result["p99_9"] <= result["max"]
    assert result["over_1ms"] <= result["count"]


def test_percentiles() -> None:
    stats = loop_probe._percentiles([0.001 * i for i in range(1, 1001)])
    assert stats["count"] == 1000
    assert stats["p50_ms"] == 501.0
    assert stats["max_ms"] == 1000.0
    assert loop_probe._percentiles([]) == {"count": 0}


def test_the_probe_times_each_collection_and_tells_boot_from_serving() -> None:
    # A broker started in this worker by another test froze every object then
    # (``Server.start``'s ``gc.freeze()``): the full collection would walk none.
    gc.unfreeze()
    probe = loop_probe.LoopProbe(census=True)
    probe.install()
    try:
        gc.collect(0)
        probe.serving()
        gc.collect(2)
    finally:
        probe.uninstall()
    report = probe.report()
    assert report["gc_boot"]["0"]["cpu"]["count"] >= 1
    assert report["gc_serving"]["2"]["cpu"]["count"] == 1
    assert report["gc_serving"]["2"]["at_s"][0] >= 0
    # The census counts what the full collection walked.
    assert report["gc_full_census"][0]["objects"] > 0


def test_the_probe_says_what_ran_in_a_long_turn() -> None:
    probe = loop_probe.LoopProbe()

    async def run() -> None:
        probe.start_loop(asyncio.get_running_loop())
        await asyncio.sleep(0.005)
        probe.timed_slice(0.004, finished=True)
        busy = time.thread_time() + 0.02
        while time.thread_time() < busy:  # a long turn of the loop's own work
            pass
        await asyncio.sleep(0.005)

    asyncio.run(run())
    report = probe.report()
    assert report["stats_pass_cpu"]["count"] == 1
    worst = report["worst_ticks"][0]
    assert worst["ran"] == "sample"
    assert worst["late_ms"] >= 15
    assert worst["own_cpu_ms"] >= 10
