"""The full collection taken once a storm of new connections is over, and the young
generation's threshold (server/storm_gc.py)."""

from __future__ import annotations

import asyncio
import gc
import socket
from typing import TYPE_CHECKING

import pytest

from leveret.config import Settings
from leveret.server.server import Server
from leveret.server.storm_gc import YOUNG_THRESHOLD, StormCollector, raise_young_threshold

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def thresholds() -> Iterator[None]:
    """The process's collector thresholds, put back after the test."""
    saved = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*saved)


class Recorder:
    """Stands for the gc module: counts collections, full ones CPython ran too."""

    def __init__(self) -> None:
        self.ours = 0
        self.full = 0

    def collect(self) -> None:
        self.ours += 1
        self.full += 1

    def full_collections(self) -> int:
        return self.full


def collector(rec: Recorder, storm: int = 3) -> StormCollector:
    return StormCollector(
        storm=storm,
        quiet=0.5,
        spacing=10.0,
        collect=rec.collect,
        full_collections=rec.full_collections,
    )


def test_fewer_than_a_storm_never_collects() -> None:
    rec = Recorder()
    c = collector(rec)
    assert c.accepted(1.0) is None
    assert c.accepted(1.1) is None
    assert c.check(100.0) is None
    assert rec.ours == 0


def test_a_storm_is_collected_once_it_is_quiet() -> None:
    rec = Recorder()
    c = collector(rec)
    c.accepted(1.0)
    c.accepted(1.1)
    assert c.accepted(1.2) == 1.7  # the storm: due once nothing came for 0.5 s
    assert c.accepted(1.4) == 1.9  # another accept puts it off
    assert c.check(1.7) == 1.9  # a timer armed for the first due looks again
    assert rec.ours == 0
    assert c.check(1.9) is None
    assert (rec.ours, c.collections, c.pending) == (1, 1, 0)
    assert c.check(5.0) is None  # nothing more to do
    assert rec.ours == 1


def test_collections_are_spaced() -> None:
    rec = Recorder()
    c = collector(rec)
    for t in (1.0, 1.1, 1.2):
        c.accepted(t)
    c.check(1.7)
    assert rec.ours == 1
    for t in (2.0, 2.1):
        c.accepted(t)
    assert c.accepted(2.2) == 11.7  # ten seconds after the last collection
    assert c.check(2.7) == 11.7
    assert c.check(11.7) is None
    assert rec.ours == 2


def test_the_gap_after_a_collection_is_what_it_cost_times_duty() -> None:
    """A storm in two waves: the second is collected once the first one's cost allows
    (50 times its 30 ms), not a fixed ten seconds on; a costly collection waits longer."""
    rec = Recorder()
    costs = iter([0.030, 0.300])
    clock = [0.0]

    def collect() -> None:
        rec.collect()
        clock[0] += next(costs)

    c = StormCollector(
        storm=3,
        quiet=0.5,
        spacing=1.0,
        duty=50.0,
        collect=collect,
        full_collections=rec.full_collections,
        timer=lambda: clock[0],
    )
    for t in (1.0, 1.1, 1.2):
        c.accepted(t)
    assert c.check(1.7) is None
    for t in (2.2, 2.3):
        c.accepted(t)
    assert c.accepted(2.4) == pytest.approx(3.2)  # 1.7 + 50 x 0.030 s
    assert c.check(3.2) is None
    assert rec.ours == 2
    for t in (3.5, 3.6):
        c.accepted(t)
    assert c.accepted(3.7) == pytest.approx(18.2)  # 3.2 + 50 x 0.300 s
    for t in (10.0, 10.1):
        c.accepted(t)
    assert c.accepted(10.2) == pytest.approx(18.2)
    assert c.check(10.7) == pytest.approx(18.2)


def test_a_cheap_collection_still_waits_the_spacing() -> None:
    rec = Recorder()
    c = StormCollector(
        storm=3,
        quiet=0.5,
        spacing=1.0,
        duty=50.0,
        collect=rec.collect,
        full_collections=rec.full_collections,
        timer=lambda: 0.0,
    )
    for t in (1.0, 1.1, 1.2):
        c.accepted(t)
    c.check(1.7)
    for t in (1.8, 1.9):
        c.accepted(t)
    assert c.accepted(2.0) == pytest.approx(2.7)  # the spacing, not the quiet's 2.5


def test_a_full_collection_by_cpython_meanwhile_counts() -> None:
    rec = Recorder()
    c = collector(rec)
    for t in (1.0, 1.1, 1.2):
        c.accepted(t)
    rec.full += 1  # CPython's own full collection walked the storm's objects
    assert c.check(1.7) is None
    assert (rec.ours, c.pending) == (0, 0)
    c.accepted(2.0)  # counting starts anew from there
    assert c.pending == 1


def test_an_accept_after_cpython_collected_starts_counting_anew() -> None:
    rec = Recorder()
    c = collector(rec)
    c.accepted(1.0)
    c.accepted(1.1)
    rec.full += 1
    assert c.accepted(1.2) is None
    assert c.pending == 1


def test_the_real_gc_module_by_default() -> None:
    c = StormCollector(storm=1, quiet=0.0, spacing=0.0)
    before = gc.get_stats()[2]["collections"]
    c.accepted(1.0)
    assert c.check(1.0) is None
    assert c.collections == 1
    assert gc.get_stats()[2]["collections"] == before + 1


def test_the_server_collects_after_a_storm_of_accepted_sockets(tmp_path: Path) -> None:
    """The listener counts every accepted socket; a timer takes the collection."""

    async def run() -> None:
        settings = Settings(
            host="127.0.0.1", port=0, data_dir=str(tmp_path), management=False, stream_port=0
        )
        server = Server(settings)
        await server.start()
        rec = Recorder()
        server.storm_gc = StormCollector(
            storm=3,
            quiet=0.05,
            spacing=10.0,
            collect=rec.collect,
            full_collections=rec.full_collections,
        )
        port = int(server.listening[0].rsplit(":", 1)[1])
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        try:
            for _ in range(100):
                await asyncio.sleep(0.02)
                if rec.ours:
                    break
            assert rec.ours == 1
            assert server.storm_gc.pending == 0
        finally:
            for s in socks:
                s.close()
            await server.stop()

    asyncio.run(run())


@pytest.mark.usefixtures("thresholds")
def test_the_young_threshold_is_raised_and_the_older_ones_kept() -> None:
    gc.set_threshold(700, 11, 12)
    raise_young_threshold()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 11, 12)


@pytest.mark.usefixtures("thresholds")
def test_a_higher_young_threshold_or_a_disabled_collector_stays() -> None:
    gc.set_threshold(50_000, 10, 10)
    raise_young_threshold()
    assert gc.get_threshold() == (50_000, 10, 10)
    gc.set_threshold(0, 10, 10)  # 0: automatic collection is off
    raise_young_threshold()
    assert gc.get_threshold() == (0, 10, 10)


@pytest.mark.usefixtures("thresholds")
def test_a_burst_of_lone_messages_meets_no_young_collection() -> None:
    """What a thousand queued messages hold (a few containers each) stays below the raised
    threshold: none of it is walked (nor promoted) before it is freed."""
    gc.set_threshold(700, 10, 10)
    raise_young_threshold()
    gc.collect()
    before = gc.get_stats()[0]["collections"]
    held: list[list[object]] = [[{}, [], ()] for _ in range(1000)]
    assert gc.get_stats()[0]["collections"] == before
    del held


@pytest.mark.usefixtures("thresholds")
def test_the_server_raises_the_young_threshold_at_boot(tmp_path: Path) -> None:
    async def run() -> None:
        settings = Settings(
            host="127.0.0.1", port=0, data_dir=str(tmp_path), management=False, stream_port=0
        )
        server = Server(settings)
        gc.set_threshold(700, 10, 10)
        await server.start()
        try:
            assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
        finally:
            await server.stop()

    asyncio.run(run())
