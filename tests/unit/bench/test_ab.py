"""``bench.ab``'s order of runs and its summary (the runs themselves need brokers)."""

from __future__ import annotations

from bench import ab


def test_each_round_swaps_which_build_runs_first() -> None:
    runs = ab.order(4)
    assert runs == [(0, "A"), (0, "B"), (1, "B"), (1, "A"), (2, "A"), (2, "B"), (3, "B"), (3, "A")]
    firsts = [name for rnd, name in runs[::2]]
    assert firsts.count("A") == firsts.count("B") == 2


def test_the_summary_gives_each_builds_p99s_for_a_latency_scenario() -> None:
    def run(build: str, p99: float, ok: bool = True) -> dict[str, object]:
        return {
            "build": build,
            "ok": ok,
            "latency_us": {"p99": p99 * 1000},
            "rates": {"consumed": 1000.0},
            "window_s": 10.0,
            "cpu": {"broker_cpu_s": 0.5},
        }

    runs = [run("A", 3.0), run("B", 9.0), run("B", 1.0, ok=False), run("A", 5.0), run("A", 4.0)]
    summary = ab._summary(runs, "h")
    assert summary["A_p99_ms"] == [3.0, 4.0, 5.0]
    assert summary["A_p99_median"] == 4.0
    assert summary["B_p99_median"] == 5.0
    assert (summary["A_verified"], summary["B_verified"]) == (3, 1)
    assert summary["A_cpu_us_median"] == 50.0
