"""``bench.lone_read`` runs the real adapter, shell and 0-9-1 front end on in-memory
transports: every read's publish reaches the queue, and the figure is a positive time."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from bench import lone_read

if TYPE_CHECKING:
    import pytest


def test_a_small_run_times_every_read(capsys: pytest.CaptureFixture[str]) -> None:
    lone_read.main(["--connections", "5", "--repeats", "3", "--label", "t"])
    result = json.loads(capsys.readouterr().out)
    assert (result["connections"], result["repeats"], result["label"]) == (5, 3, "t")
    assert 0 < result["us_per_read_min"] <= result["us_per_read_median"]


def test_a_consumer_acks_every_message_of_each_burst(capsys: pytest.CaptureFixture[str]) -> None:
    """With ``--consume`` every burst is delivered and acked (the run asserts the queue is
    empty after each), the window refilling from the acks: 12 messages through a prefetch
    of 5 take at least three writes to the consumer a burst. Every message's delivery has its
    place in its burst's CPU, the first at most the median."""
    lone_read.main(
        [
            "--connections",
            "12",
            "--repeats",
            "2",
            "--consume",
            "--prefetch",
            "5",
            "--ack-reads",
            "3",
        ]
    )
    result = json.loads(capsys.readouterr().out)
    assert result["connections"] == 12
    assert 0 < result["us_per_read_min"] <= result["us_per_read_median"]
    assert result["consumer_writes_per_burst"] >= 3
    written = result["written_at_us"]
    assert written["samples"] == 12 * 2
    assert 0 <= result["first_written_at_us"] <= written["p50"] <= written["max"]
