"""bench.cluster_scenarios' table: the whole run's CPU per routed message, its ratio to the
single node, and the window's figure beside it; which setups --quorum adds; bench.loadgen's
--queue-type."""

from __future__ import annotations

from typing import Any

import pytest

from bench import cluster_scenarios, loadgen


def _run(setup: str, cpu_s: float, expected: int, **extra: Any) -> dict[str, Any]:
    return {
        "scenario": "e",
        "setup": setup,
        "ok": True,
        "window_s": 10,
        "rates": {"published": 2000.0, "consumed": 1000.0},
        "cpu": {"broker_cpu_s": 1.0},
        "verify": {"expected": expected},
        "cpu_split_s": {"node a": cpu_s / 2, "node b": cpu_s / 2},
        "load_before": 3.0,
        "load_after": 4.0,
        **extra,
    }


def test_whole_run_cpu_is_per_message_routed() -> None:
    assert cluster_scenarios.whole_run_us(_run("forwarded", 2.0, 100_000)) == 20.0
    assert cluster_scenarios.whole_run_us({"cpu_split_s": {}}) is None


def test_the_table_compares_each_setup_with_the_single_node() -> None:
    runs = [
        _run("single", 1.0, 100_000),
        _run("single", 1.2, 100_000),
        _run("forwarded", 3.0, 100_000),
        _run("forwarded", 4.0, 100_000, ok=False),
    ]
    lines = cluster_scenarios.render(runs).splitlines()
    single = next(line for line in lines if "| single |" in line).split(" | ")
    forwarded = next(line for line in lines if "| forwarded |" in line).split(" | ")
    assert single[5] == "11.0"  # median of 10 and 12 µs
    assert forwarded[4] == "100.0"  # the window: 1 s over 10,000 consumed
    assert forwarded[5] == "35.0"
    assert forwarded[6] == "3.18x"
    assert forwarded[7] == "1/2"
    assert "3.0→4.0" in forwarded[8]


def test_loadgen_declares_the_queue_type() -> None:
    cfg = loadgen.parse_args(["--queue-type", "quorum", "--durable"])
    assert cfg.queue_type == "quorum"
    assert loadgen.parse_args([]).queue_type == ""


def test_quorum_adds_every_quorum_setup_unless_some_are_named() -> None:
    every = ["single", "forwarded", "rabbit", "rabbit-quorum", "quorum-remote", "quorum-leader"]
    assert cluster_scenarios.chosen_setups("single,forwarded,rabbit", quorum=True) == every
    assert cluster_scenarios.chosen_setups("quorum-leader", quorum=True) == ["quorum-leader"]
    assert cluster_scenarios.chosen_setups("single,quorum-remote", quorum=False) == ["single"]


def test_the_quorum_setups_follow_the_classic_ones_in_the_table() -> None:
    runs = [
        {**_run(name, 1.0, 100_000), "scenario": "c"}
        for name in ("quorum-leader", "rabbit-quorum", "quorum-remote", "single")
    ]
    rows = [line.split(" | ")[1] for line in cluster_scenarios.render(runs).splitlines()[2:]]
    assert rows == ["single", "rabbit-quorum", "quorum-remote", "quorum-leader"]


def test_a_setup_that_fails_to_start_stops_what_it_started() -> None:
    stopped: list[str] = []
    setup = cluster_scenarios.Setup("quorum-remote", 0, 0)
    setup.stops += [lambda: stopped.append("etcd"), lambda: stopped.append("node a")]
    with pytest.raises(RuntimeError), cluster_scenarios._stopped_on_error(setup):
        raise RuntimeError("node b never answered")
    assert stopped == ["node a", "etcd"]
    with cluster_scenarios._stopped_on_error(setup):
        pass
    assert stopped == ["node a", "etcd"]


def test_a_process_counts_are_its_user_and_system_time_and_every_threads_switches() -> None:
    import os
    import threading
    import time

    before = cluster_scenarios.proc_counts(os.getpid())

    slept, end = threading.Event(), threading.Event()

    def sleeper() -> None:  # each sleep is a voluntary switch of this thread, not main's
        for _ in range(50):
            time.sleep(0.001)
        slept.set()
        end.wait()  # counted while it lives: an ended thread's counts leave /proc

    thread = threading.Thread(target=sleeper)
    thread.start()
    slept.wait()
    spin = time.process_time() + 0.05
    while time.process_time() < spin:
        pass
    after = cluster_scenarios.proc_counts(os.getpid())
    end.set()
    thread.join()
    assert after["voluntary"] - before["voluntary"] >= 50
    assert after["user_s"] + after["system_s"] - before["user_s"] - before["system_s"] > 0
    assert set(after) == {"user_s", "system_s", "voluntary", "involuntary"}
    assert cluster_scenarios.proc_counts(2**22 + 1)["user_s"] == 0  # no such process
