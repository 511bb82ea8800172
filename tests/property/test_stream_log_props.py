"""Property tests of the stream logs against a list: any sequence of appends, reads,
retention, syncs and restarts returns exactly the appended messages by offset (on disk also
batches of entries, as a stream-protocol publish frame appends them).

Both logs (in memory and on disk) run the same machine. The reference keeps every appended
(offset, body, timestamp); retention may only move the first offset forward by whole
segments, never past the open segment, and a read at any offset returns the reference's
entries from max(offset, first) on, in order, with no gap. On disk, the messages of one
chunk (appended between two syncs, in one segment) share the first one's timestamp.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from leveret.convert.amqp091 import wire_message
from leveret.convert.amqp10_amqp091 import to_amqp10
from leveret.convert.formats import amqp091_parts
from leveret.convert.stream_records import RECORDS
from leveret.convert.stream_stamp import stamp_stream
from leveret.model.queues.stream_log import MemoryStreamLog, StreamLog
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.rabbitstream.chunk import simple_entry
from leveret.store.stream_log import StreamStore

SEGMENT_BYTES = 600


class LogMachine(RuleBasedStateMachine):
    on_disk = False

    def __init__(self) -> None:
        super().__init__()
        self.appended: list[tuple[int, bytes, int]] = []
        self.producers: dict[str, int] = {}
        self.first = 0
        self.clock = 0
        # The timestamp of the open chunk (disk: until the next sync or segment roll).
        self.chunk_ts: int | None = None
        if self.on_disk:
            self.dir = Path(tempfile.mkdtemp(prefix="leveret-stream-props-"))
            self.loop = asyncio.new_event_loop()
            self.store = self._store()
        self.log = self._open()

    def _store(self) -> StreamStore:
        store = StreamStore(self.dir, RECORDS, stamp_stream, cache_bytes=700)
        store.start(self.loop)
        return store

    def _open(self) -> StreamLog:
        if self.on_disk:
            return self.store.open("/", "s", 1, SEGMENT_BYTES)
        return MemoryStreamLog(SEGMENT_BYTES)

    def _sync(self) -> None:
        self.chunk_ts = None

        async def wait() -> None:
            store = self.store
            for _ in range(10_000):
                if store.synced >= store.writes and not store._dirty and not store._busy:
                    return
                await asyncio.sleep(0.001)
            raise AssertionError("the stream store never synced")

        self.loop.run_until_complete(wait())

    def teardown(self) -> None:
        if self.on_disk:
            self.store.close()
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    @rule(
        size=st.integers(0, 300),
        step=st.integers(0, 3),
        producer=st.sampled_from(["", "p", "q"]),
    )
    def append(self, size: int, step: int, producer: str) -> None:
        self.clock += step
        offset = self.log.next_offset
        assert offset == len(self.appended)
        body = (b"%d:" % offset).ljust(size, b"x")
        seq = self.producers.get(producer, -1) + 1 if producer else -1
        message = stamp_stream(wire_message("", "s", b"\x00\x00", body), offset, self.clock)
        rolled = self.log.append(message, self.clock, producer, seq)
        if producer:
            self.producers[producer] = seq
        if self.chunk_ts is None:
            self.chunk_ts = self.clock
        self.appended.append((offset, body, self.chunk_ts if self.on_disk else self.clock))
        if rolled:
            self.chunk_ts = None

    @precondition(lambda self: self.on_disk)
    @rule(
        sizes=st.lists(st.integers(0, 200), min_size=1, max_size=5),
        step=st.integers(0, 3),
        producer=st.sampled_from(["", "p", "q"]),
    )
    def append_batch(self, sizes: list[int], step: int, producer: str) -> None:
        """A stream-protocol publish frame: its entries as one batch, one timestamp."""
        self.clock += step
        offset = self.log.next_offset
        bodies = [(b"%d:" % (offset + i)).ljust(size, b"y") for i, size in enumerate(sizes)]
        entries = [simple_entry(to_amqp10(BasicProperties(), body)) for body in bodies]
        seq = self.producers.get(producer, -1) + len(sizes) if producer else -1
        data = b"".join(entries)
        rolled = self.log.append_entries(data, len(sizes), len(sizes), self.clock, producer, seq)
        if producer:
            self.producers[producer] = seq
        if self.chunk_ts is None:
            self.chunk_ts = self.clock
        for i, body in enumerate(bodies):
            self.appended.append((offset + i, body, self.chunk_ts))
        if rolled:
            self.chunk_ts = None

    @rule(offset=st.integers(-2, 80), count=st.integers(1, 40))
    def read(self, offset: int, count: int) -> None:
        got = self.log.read(offset, count)
        start = max(offset, self.first, 0)
        expected = self.appended[start : start + count]
        got_091 = [(e.offset, amqp091_parts(e.message)[1], e.timestamp) for e in got]
        assert got_091 == expected
        for entry in got:
            headers = entry.message.headers
            assert headers is not None
            assert headers["x-stream-offset"] == entry.offset

    @rule(at=st.integers(0, 40))
    def offset_at(self, at: int) -> None:
        expected = next(
            (o for o, _b, ts in self.appended[self.first :] if ts >= at), len(self.appended)
        )
        assert self.log.offset_at(at) == expected

    @rule(max_bytes=st.one_of(st.none(), st.integers(0, 3000)), age=st.integers(0, 20))
    def retain(self, max_bytes: int | None, age: int) -> None:
        oldest = self.clock - age if max_bytes is None else None
        self.log.retain(max_bytes, oldest)
        first = self.log.first_offset
        assert first >= self.first
        assert first <= len(self.appended)
        self.first = first

    @precondition(lambda self: self.on_disk)
    @rule()
    def sync(self) -> None:
        self._sync()

    @precondition(lambda self: self.on_disk)
    @rule()
    def restart(self) -> None:
        self._sync()
        self.store.close()
        self.store = self._store()
        self.log = self._open()

    @invariant()
    def bounds(self) -> None:
        assert self.log.next_offset == len(self.appended)
        assert self.log.first_offset == self.first
        assert dict(self.log.producers) == self.producers


class DiskLogMachine(LogMachine):
    on_disk = True


TestMemoryLog = LogMachine.TestCase
TestMemoryLog.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestDiskLog = DiskLogMachine.TestCase
TestDiskLog.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
