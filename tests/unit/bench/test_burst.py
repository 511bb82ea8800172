"""bench.burst's bookkeeping: the medians over bursts and the broker's CPU clock."""

from __future__ import annotations

import os

from bench.burst import broker_cpu_ns, build_parser, summarize


def test_summarize_takes_medians_over_bursts() -> None:
    bursts = [
        {"length_ms": 10.0, "cpu_ms": 5.0, "cpu_us_per_msg": 5.0},
        {"length_ms": 30.0, "cpu_ms": 9.0, "cpu_us_per_msg": 9.0},
        {"length_ms": 20.0, "cpu_ms": 7.0, "cpu_us_per_msg": 7.0},
    ]
    result = summarize(bursts, [100, 300, 200, 400], connections=1000)
    assert result["bursts"] == 3
    assert result["burst_ms"] == 20.0
    assert result["cpu_us_per_msg"] == 7.0
    assert result["cpu_ms_per_burst"] == 7.0
    assert result["latency_us"]["p50"] == 200
    assert result["latency_us"]["max"] == 400


def test_summarize_without_bursts() -> None:
    result = summarize([], [], connections=0)
    assert result["burst_ms"] is None
    assert result["latency_us"] is None


def test_broker_cpu_counts_this_process_and_nothing_for_a_missing_one() -> None:
    before = broker_cpu_ns(os.getpid())
    sum(i * i for i in range(200_000))
    assert broker_cpu_ns(os.getpid()) > before > 0
    assert broker_cpu_ns(2**22 + 12345) == 0


def test_defaults_are_scenario_h() -> None:
    args = build_parser().parse_args([])
    assert (args.connections, args.size, args.prefetch, args.ack_writes) == (1000, 16, 100, "each")
