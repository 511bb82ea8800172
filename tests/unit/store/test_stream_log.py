"""The file-backed stream log: reads by offset, restart, torn tail, retention, group commit."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

import pytest

from leveret.model.memory_gauge import MemoryGauge
from leveret.model.stream import MemoryStreamLog, StreamEntry, StreamQueue
from leveret.model.vhost import VirtualHost
from leveret.server.amqp091.message import wire_message
from leveret.server.amqp091.stream_headers import stamp_stream
from leveret.server.stream_message import RECORDS, legacy_entry
from leveret.store.records import StoreCorrupt
from leveret.store.stream_log import FileStreamLog, StreamStore

STREAM = {"x-queue-type": "stream"}

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


class Harness:
    """A StreamStore on a private event loop; ``sync()`` runs the loop until all is on disk."""

    def __init__(self, path: Path, *, cache_bytes: int = 4 << 20, sync: bool = True) -> None:
        self.path = path
        self.cache_bytes = cache_bytes
        self.sync_writes = sync
        self.loop = asyncio.new_event_loop()
        self.store = self._open()

    def _open(self) -> StreamStore:
        store = StreamStore(
            self.path,
            RECORDS,
            stamp_stream,
            cache_bytes=self.cache_bytes,
            sync=self.sync_writes,
            legacy_entry=legacy_entry,
        )
        store.start(self.loop)
        return store

    def log(self, store_id: int = 1, segment_bytes: int | None = None) -> FileStreamLog:
        stream_log = self.store.open("/", "s", store_id, segment_bytes)
        assert isinstance(stream_log, FileStreamLog)
        return stream_log

    def sync(self) -> None:
        async def wait() -> None:
            for _ in range(5000):
                store = self.store
                if store.synced >= store.writes and not store._dirty and not store._busy:
                    return
                await asyncio.sleep(0.001)
            raise AssertionError("the stream store never synced")

        self.loop.run_until_complete(wait())

    def reopen(self) -> None:
        self.sync()
        self.store.close()
        self.store = self._open()

    def close(self) -> None:
        self.store.close()
        self.loop.close()


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "streams")
    yield harness
    harness.close()


def append(
    stream_log: FileStreamLog, body: bytes, ts: int = 0, producer: str = "", seq: int = -1
) -> int:
    offset = stream_log.next_offset
    message = stamp_stream(wire_message("ex", "rk", b"\x00\x00", body), offset, ts)
    stream_log.append(message, ts, producer, seq)
    return offset


def bodies(entries: list[StreamEntry]) -> list[bytes]:
    return [e.message.body for e in entries]


def test_read_back_across_segments_and_restart(h: Harness) -> None:
    stream_log = h.log(segment_bytes=2000)
    for i in range(100):
        append(stream_log, b"%04d" % i * 20, ts=1000 + i)
    expected = [b"%04d" % i * 20 for i in range(100)]
    assert bodies(stream_log.read(0, 1000)) == expected
    h.reopen()
    stream_log = h.log(segment_bytes=2000)
    assert len(os.listdir(stream_log.path)) > 3
    assert (stream_log.first_offset, stream_log.next_offset) == (0, 100)
    entries = stream_log.read(37, 10)
    assert [e.offset for e in entries] == list(range(37, 47))
    assert bodies(entries) == expected[37:47]
    # A chunk's messages share its timestamp (its first message's append time).
    stamps = [e.timestamp for e in entries]
    assert stamps == sorted(stamps)
    assert all(1000 <= e.timestamp <= 1000 + e.offset for e in entries)
    entry = entries[0]
    assert entry.message.exchange == "ex"
    assert entry.message.routing_key == "rk"
    assert entry.message.headers == {"x-stream-offset": 37, "x-stream-timestamp": entry.timestamp}
    # Timestamps are per chunk: the first message whose (chunk's) timestamp is at or after.
    stamped = stream_log.read(0, 100)
    assert stream_log.offset_at(1050) == next(e.offset for e in stamped if e.timestamp >= 1050)
    assert stream_log.offset_at(0) == 0
    assert stream_log.offset_at(5000) == 100
    assert append(stream_log, b"after") == 100
    assert bodies(stream_log.read(99, 5)) == [expected[99], b"after"]


def test_old_offsets_are_read_from_the_file_with_a_small_cache(tmp_path: Path) -> None:
    h = Harness(tmp_path / "streams", cache_bytes=10_000)
    try:
        stream_log = h.log()
        for i in range(2000):
            append(stream_log, b"%06d" % i)
            if i % 100 == 0:
                h.sync()
        h.sync()
        assert stream_log._cache_bytes <= 10_000
        assert stream_log._cache_first() > 1000
        for start in (0, 1, 127, 128, 129, 999, 1500):
            got = stream_log.read(start, 300)
            assert [e.offset for e in got] == list(range(start, start + 300))
            assert bodies(got) == [b"%06d" % i for i in range(start, start + 300)]
    finally:
        h.close()


def test_unsynced_entries_stay_cached(tmp_path: Path) -> None:
    h = Harness(tmp_path / "streams", cache_bytes=1)
    try:
        stream_log = h.log()
        for i in range(50):
            append(stream_log, b"x%d" % i)
        # Nothing synced yet: all of it must still be readable.
        assert bodies(stream_log.read(0, 100)) == [b"x%d" % i for i in range(50)]
        h.sync()
        assert stream_log._cache_first() == 50
        assert bodies(stream_log.read(0, 100)) == [b"x%d" % i for i in range(50)]
    finally:
        h.close()


def test_producer_state_survives_restart_and_retention(h: Harness) -> None:
    stream_log = h.log(segment_bytes=500)
    append(stream_log, b"a" * 300, producer="p1", seq=7)
    append(stream_log, b"b" * 300, producer="p2", seq=3)
    for _ in range(10):
        append(stream_log, b"c" * 300)
    assert stream_log.retain(1000, None) > 0
    assert stream_log.first_offset > 2
    h.reopen()
    stream_log = h.log(segment_bytes=500)
    assert dict(stream_log.producers) == {"p1": 7, "p2": 3}
    assert stream_log.first_offset > 2


def test_retention_deletes_segment_files(h: Harness) -> None:
    stream_log = h.log(segment_bytes=1000)
    for i in range(60):
        append(stream_log, b"%03d" % i * 100)
    h.sync()
    before = len(os.listdir(stream_log.path))
    dropped = stream_log.retain(3000, None)
    h.sync()
    assert dropped > 0
    assert len(os.listdir(stream_log.path)) == before - dropped
    first = stream_log.first_offset
    assert stream_log.read(0, 1)[0].offset == first
    assert sorted(os.listdir(stream_log.path))[0] == f"{first:020d}.segment"
    h.reopen()
    assert h.log(segment_bytes=1000).first_offset == first


def test_retention_by_age_never_drops_the_open_segment(h: Harness) -> None:
    stream_log = h.log(segment_bytes=100)
    for ts in range(10):
        append(stream_log, b"x" * 100, ts=ts)
    assert stream_log.retain(None, 5) == 5
    assert stream_log.first_offset == 5
    assert stream_log.retain(None, 100) == 5
    assert stream_log.first_offset == 10 == stream_log.next_offset
    assert stream_log.read(0, 10) == []


def test_torn_tail_is_cut_with_one_log_line(h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    stream_log = h.log()
    for i in range(10):
        append(stream_log, b"m%d" % i)
    h.sync()
    h.store.close()
    segment = stream_log.path / f"{0:020d}.segment"
    size = segment.stat().st_size
    with open(segment, "ab") as f:
        f.write(b"\x50\x00\x00\x01\x00")  # a chunk header cut short by a crash
    with caplog.at_level(logging.WARNING, logger="leveret.store"):
        h.store = h._open()
        stream_log = h.log()
    assert [r.message for r in caplog.records if "torn tail" in r.message] != []
    assert segment.stat().st_size == size
    assert stream_log.next_offset == 10
    assert append(stream_log, b"next") == 10
    h.reopen()
    assert bodies(h.log().read(9, 5)) == [b"m9", b"next"]


def test_damage_before_synced_data_refuses_to_open(h: Harness) -> None:
    stream_log = h.log(segment_bytes=200)
    for _ in range(10):
        append(stream_log, b"y" * 100)
        h.sync()
    h.store.close()
    first = sorted(stream_log.path.iterdir())[0]
    data = bytearray(first.read_bytes())
    data[60] ^= 0xFF  # in the first chunk's entries (covered by its CRC)
    first.write_bytes(bytes(data))
    h.store = h._open()
    with pytest.raises(StoreCorrupt, match="damaged"):
        h.log(segment_bytes=200)


def test_confirm_callbacks_wait_for_the_sync_and_keep_their_order(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        syncs.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    stream_log = h.log()
    order: list[int] = []
    h.store.after_sync(lambda: order.append(0))
    assert order == [0]  # nothing pending: at once
    for i in range(1000):
        append(stream_log, b"z")
        if i == 0:
            h.store.after_sync(lambda: order.append(1))
    h.store.after_sync(lambda: order.append(2))
    assert order == [0]
    h.sync()
    assert order == [0, 1, 2]
    assert len(syncs) <= 2  # 1000 appends of one turn share the syncs


def test_destroy_removes_the_directory_and_orphans_are_removed(h: Harness) -> None:
    stream_log = h.log(store_id=1)
    other = h.log(store_id=2)
    append(stream_log, b"a")
    append(other, b"b")
    h.sync()
    stream_log.destroy()
    h.sync()
    assert not stream_log.path.exists()
    (h.path / "9").mkdir()
    h.store.remove_orphans([2])
    assert sorted(os.listdir(h.path)) == ["2"]


def test_store_id_zero_is_in_memory(h: Harness) -> None:
    assert isinstance(h.store.open("/", "s", 0, None), MemoryStreamLog)


def test_an_empty_last_segment_gets_its_producer_snapshot(h: Harness) -> None:
    stream_log = h.log(segment_bytes=300)
    append(stream_log, b"a" * 300, producer="p", seq=4)
    append(stream_log, b"b" * 300)
    h.reopen()
    path = h.log(segment_bytes=300).path
    h.store.close()
    # A crash right after the writer created the next segment file, before writing to it.
    (path / f"{2:020d}.segment").write_bytes(b"")
    h.store = h._open()
    stream_log = h.log(segment_bytes=300)
    append(stream_log, b"c" * 50)  # stays in the open segment
    assert stream_log.retain(1, None) == 2  # only the open segment is left
    h.reopen()
    stream_log = h.log(segment_bytes=300)
    assert stream_log.first_offset == 2
    assert dict(stream_log.producers) == {"p": 4}
    assert stream_log.next_offset == 3


def test_unsynced_bytes_count_in_the_memory_gauge(h: Harness) -> None:
    gauge = MemoryGauge()
    checks: list[int] = []
    h.store.gauge = gauge
    h.store.on_synced = lambda: checks.append(gauge.bytes)
    stream_log = h.log()
    for _ in range(100):
        append(stream_log, b"x" * 1000)
    assert gauge.bytes > 100 * 1000
    h.sync()
    assert gauge.bytes == 0
    assert checks[-1] == 0


def test_timestamps_stay_ordered_across_a_restart_with_the_clock_behind(h: Harness) -> None:
    vhost = VirtualHost("/")
    vhost.stream_backend = h.store
    vhost.timers.wall_offset = 2_000_000.0
    queue = vhost.declare_queue("s", owner=None, durable=True, arguments=STREAM)
    assert isinstance(queue, StreamQueue)
    queue.store_id = 1
    queue.enqueue(wire_message("", "s", b"\x00\x00", b"a"))
    h.reopen()
    vhost = VirtualHost("/")
    vhost.stream_backend = h.store
    vhost.timers.wall_offset = 1_000_000.0  # the clock went back
    queue = vhost.declare_queue("s", owner=None, durable=True, arguments=STREAM)
    assert isinstance(queue, StreamQueue)
    queue.store_id = 1
    queue.enqueue(wire_message("", "s", b"\x00\x00", b"b"))
    first, second = queue.log.read(0, 2)
    assert first.timestamp == second.timestamp == 2_000_000_000


def test_many_streams_are_written_then_synced_in_one_pass(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_write, real_sync = os.write, os.fdatasync

    real_writev = os.writev

    def write(fd: int, data: bytes | memoryview) -> int:
        events.append("write")
        return real_write(fd, data)

    def writev(fd: int, pieces: list[bytes]) -> int:
        events.append("write")
        return real_writev(fd, pieces)

    def sync(fd: int) -> None:
        events.append("sync")
        real_sync(fd)

    logs = [h.log(store_id=i) for i in range(1, 5)]
    h.sync()
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "writev", writev)
    monkeypatch.setattr(os, "fdatasync", sync)
    for stream_log in logs:
        append(stream_log, b"x")
    h.sync()
    assert events == ["write"] * 4 + ["sync"] * 4


def test_written_mode_confirms_without_a_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs: list[int] = []
    monkeypatch.setattr(os, "fdatasync", syncs.append)
    harness = Harness(tmp_path / "streams", sync=False)  # stream_confirm = "written"
    try:
        stream_log = harness.log()
        done: list[int] = []
        append(stream_log, b"a")
        harness.store.after_sync(lambda: done.append(1))
        harness.sync()
        assert done == [1]
        assert syncs == []
        assert [e.message.body for e in stream_log.read(0, 5)] == [b"a"]
    finally:
        harness.close()
