"""StreamJournal: publisher confirms wait for both the stream writer and the message store
(the two at once, whichever finishes last), and keep their order; everything else goes to
the message store unchanged."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from leveret.convert.stream_records import RECORDS
from leveret.convert.stream_stamp import stamp_stream
from leveret.model.journal import NullJournal
from leveret.model.vhost import VirtualHost
from leveret.server.amqp091.session import Session
from leveret.store.stream_journal import StreamJournal
from leveret.store.stream_log import StreamStore
from leveret.testing import RecordingSink, make_message

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


class SlowDisk(NullJournal):
    """A message store whose commits complete only when the test says so."""

    def __init__(self) -> None:
        self.pending: list[Callable[[], None]] = []
        self.queues = 0

    def queue_declared(self, vhost: str, name: str, auto_delete: bool, arguments: object) -> int:
        self.queues += 1
        return self.queues

    def after_commit(self, callback: Callable[[], None]) -> None:
        self.pending.append(callback)

    def commit(self) -> None:
        pending, self.pending = self.pending, []
        for callback in pending:
            callback()


@pytest.mark.parametrize("store_first", [True, False])
def test_confirms_wait_for_the_stream_sync_and_the_store(tmp_path: Path, store_first: bool) -> None:
    loop = asyncio.new_event_loop()
    streams = StreamStore(tmp_path, RECORDS, stamp_stream)
    streams.start(loop)
    disk = SlowDisk()
    journal = StreamJournal(disk, streams)
    vhost = VirtualHost("/")
    vhost.journal = journal
    vhost.stream_backend = streams
    owner = object()
    vhost.declare_queue("s", owner=owner, durable=True, arguments={"x-queue-type": "stream"})
    vhost.declare_queue("c", owner=owner)  # transient: confirmed at once
    sink = RecordingSink()
    session = Session(vhost, owner, sink)
    session.select_confirm()
    session.publish("", "c", make_message(b"c1", "c"))
    session.flush_confirms()
    assert [(e.delivery_tag, e.ack) for e in sink.take("confirm")] == [(1, True)]
    before = journal.writes
    session.publish("", "s", make_message(b"s1", "s"))
    assert journal.writes == before + 1
    session.flush_confirms()
    session.publish("", "c", make_message(b"c2", "c"))
    session.flush_confirms()  # queues behind the stream publish
    assert sink.take("confirm") == []
    assert len(disk.pending) == 2  # both writers are waited for at once

    async def until_synced() -> None:
        for _ in range(5000):
            if streams.synced >= streams.writes and not streams._busy:
                return
            await asyncio.sleep(0.001)

    if store_first:
        disk.commit()
        assert sink.take("confirm") == []  # still waiting for the stream writer
        loop.run_until_complete(until_synced())
    else:
        loop.run_until_complete(until_synced())
        assert sink.take("confirm") == []  # still waiting for the message store
        disk.commit()
    assert [(e.delivery_tag, e.ack) for e in sink.take("confirm")] == [(2, True), (3, True)]
    streams.close()
    loop.close()
