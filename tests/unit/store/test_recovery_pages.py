"""Recovering a deep queue: its head as objects, the rest as pages that point into the
store's segments (nothing is read or written again until the queue reaches them)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from leveret.convert.amqp091 import wire_message
from leveret.convert.formats import stored_message
from leveret.model.broker import Broker
from leveret.model.queues import ClassicQueue
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.amqp091.session import Session
from leveret.store.disk import DiskStore
from leveret.store.recovery import restore
from leveret.testing import MemoryPager, RecordingSink
from tests.queue_support import classic

if TYPE_CHECKING:
    from pathlib import Path

PERSISTENT = BasicProperties(delivery_mode=2).encode()
EXPIRING = BasicProperties(delivery_mode=2, expiration="600000").encode()


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ClassicQueue, "resident_max", 8)
    monkeypatch.setattr(ClassicQueue, "resident_low", 4)
    monkeypatch.setattr(ClassicQueue, "page_messages", 10)


def _fill(path: Path, props: list[bytes], delivered: set[int]) -> None:
    store = DiskStore(path)
    store.open()

    async def main() -> None:
        store.start(asyncio.get_running_loop())
        qid = store.queue_declared("/", "q", False, {})
        for i, raw in enumerate(props):
            sid = store.enqueued(qid, wire_message("ex", "rk", raw, b"m%d" % i))
            if i in delivered:
                store.delivered(qid, sid)
        for _ in range(20):
            await asyncio.sleep(0.01)
        store.close()

    asyncio.run(main())


def _recover(path: Path) -> tuple[Broker, DiskStore, ClassicQueue]:
    store = DiskStore(path)
    recovered = store.open()
    broker = Broker()
    broker.attach_pager(MemoryPager())
    restore(broker, recovered, stored_message)
    return broker, store, classic(broker.vhosts["/"].queues["q"])


def test_a_deep_queue_comes_back_as_a_head_and_stored_pages(tmp_path: Path) -> None:
    _fill(tmp_path, [PERSISTENT] * 45, delivered={3, 20, 44})
    broker, store, queue = _recover(tmp_path)
    try:
        assert queue.message_count == 45
        assert len(queue.ready) == 8
        assert queue.paged_count == 37
        pager = broker.pager
        assert isinstance(pager, MemoryPager)
        assert pager.writes == 0  # nothing was written again
        session = Session(broker.vhosts["/"], None, sink := RecordingSink())
        session.consume("q", "c", no_ack=False, exclusive=False, arguments={})
        got = sink.deliveries()
        assert [e.body for e in got] == [b"m%d" % i for i in range(45)]
        assert [i for i, e in enumerate(got) if e.redelivered] == [3, 20, 44]
        assert [e.message.store_id for e in got if e.message] == list(range(1, 46))
        assert queue.message_count == 0
    finally:
        store.close()


def test_purging_a_recovered_deep_queue_removes_every_stored_message(tmp_path: Path) -> None:
    _fill(tmp_path, [PERSISTENT] * 30, delivered=set())
    broker, store, queue = _recover(tmp_path)

    async def main() -> None:
        store.start(asyncio.get_running_loop())
        broker.attach_journal(store)
        assert queue.purge() == 30
        for _ in range(20):
            await asyncio.sleep(0.01)
        store.close()

    asyncio.run(main())
    _broker, store, queue = _recover(tmp_path)
    store.close()
    assert queue.message_count == 0


def test_a_head_message_with_a_ttl_brings_the_whole_queue_back_as_objects(
    tmp_path: Path,
) -> None:
    _fill(tmp_path, [PERSISTENT] * 3 + [EXPIRING] + [PERSISTENT] * 26, delivered=set())
    _broker, store, queue = _recover(tmp_path)
    store.close()
    assert queue.uses_features
    assert queue.paged_count == 0
    assert [e.message.body for e in queue.ready] == [b"m%d" % i for i in range(30)]
