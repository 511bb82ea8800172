"""bench.compare's table: medians per broker, ratios to RabbitMQ, latency for g and h, and
bench.loop_probe's percentiles and GC instruments."""

from __future__ import annotations

import gc
from typing import Any

from bench import compare, loop_probe


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


def test_percentiles() -> None:
    stats = loop_probe._percentiles([0.001 * i for i in range(1, 1001)])
    assert stats["count"] == 1000
    assert stats["p50_ms"] == 501.0
    assert stats["max_ms"] == 1000.0
    assert loop_probe._percentiles([]) == {"count": 0}


def test_the_probe_times_each_collection() -> None:
    probe = loop_probe.LoopProbe()
    probe.install()
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        gc.callbacks.remove(probe._on_gc)
    assert len(probe.gc_wall[0]) >= 1
    assert len(probe.gc_wall[2]) >= 1
    report = probe.report()
    assert report["gc_cpu"]["2"]["count"] >= 1
