"""The fault harness's stream-protocol clients (``tools/faults/rstream_clients.py``) against
a real broker: rstream publishers with confirms, and a reader with server-side offset
tracking that is made to leave its connection mid-stream. It resumes after the offset it
stored, so it gets again only what it read after that store, never skips a message, and
the checker finds nothing lost, every confirm, and the repeats counted as duplicates of
that reader (allowed), none within one connection (which would break the order check).

The fault runs themselves are ``python -m tools.faults --queue-type stream
--stream-readers amqp,rstream`` (docs/faults.md)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest
from tools.faults.checker import check
from tools.faults.history import History, Outcome
from tools.faults.rstream_clients import StreamPublisher, StreamReader
from tools.faults.workload import Clock, QueueSpec, WorkloadSettings, declare

from leveret.testing.embedded import EmbeddedBroker

if TYPE_CHECKING:
    from collections.abc import Callable

# Left out of the compiled pass (scripts/test): the harness is not compiled.
pytestmark = pytest.mark.pure_only

STORE_EVERY = 10


async def _until(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:  # noqa: ASYNC110 - a poll
        await asyncio.sleep(0.05)
    assert condition(), "not within the time given"


async def _scenario(broker: EmbeddedBroker) -> tuple[History, StreamReader]:
    url = f"amqp://guest:guest@127.0.0.1:{broker.port}/%2F"
    await declare(url, "s", {"x-queue-type": "stream"}, durable=True)
    history, clock, queue = History(), Clock(), QueueSpec("s")
    settings = WorkloadSettings(rate=200, window=8, stream=True, store_every=STORE_EVERY)
    address = ("127.0.0.1", broker.stream_port)
    publisher = StreamPublisher("t1", queue, [url], history, clock, settings, addresses=[address])
    reader = StreamReader(
        "s1", queue, [url], history, clock, settings, addresses=[address], store_every=STORE_EVERY
    )
    history.consumers[reader.name] = queue.name
    tasks = [asyncio.create_task(client.run()) for client in (publisher, reader)]
    try:
        await _until(lambda: reader.delivered >= 3 * STORE_EVERY + 5, 20)
        reader.leave.set()  # it drops its connection and makes a new one
        await _until(lambda: reader.session >= 2 and reader.delivered > 60, 20)
        publisher.stop.set()
        await _until(lambda: tasks[0].done(), 10)
        confirmed = {p.id for p in history.publishes.values() if p.outcome is Outcome.CONFIRMED}
        await _until(lambda: confirmed <= reader.seen, 20)
    finally:
        reader.stop.set()
        publisher.stop.set()
        await asyncio.wait(tasks, timeout=10)
    history.close(clock.now())
    return history, reader


def test_a_stream_reader_resumes_after_the_offset_it_stored() -> None:
    with EmbeddedBroker() as broker:
        history, reader = asyncio.run(_scenario(broker))
    outcomes = {p.outcome for p in history.publishes.values()}
    assert outcomes == {Outcome.CONFIRMED}
    assert (reader.from_first, reader.from_stored, reader.forgotten, reader.went_back) == (
        1,
        1,
        0,
        0,
    )
    assert reader.stores >= 3
    verdict = check(history, {}, every_consumer=True)
    assert verdict.ok, verdict.to_json()
    assert verdict.counts["lost"] == 0
    row = verdict.per_reader["s1"]
    assert row["messages"] == len(history.publishes)
    # What it read after its last store before leaving came again, and nothing more (a
    # start from the first offset would repeat every one of the 35 and more it had read).
    assert row["duplicate_deliveries"] < STORE_EVERY
    assert {d.consumer for d in history.deliveries} == {"s1.1", "s1.2"}
