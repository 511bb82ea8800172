"""A stream-protocol publish frame appended as one batch (``StreamQueue.append_entries``,
``FileStreamLog.append_entries``): de-duplication inside a batch, batches across chunk and
segment cuts, and a batch torn by a crash."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import pytest

from leveret.convert.amqp10_amqp091 import from_amqp10, to_amqp10
from leveret.convert.formats import amqp091_parts
from leveret.model.queues.stream import StreamQueue
from leveret.model.queues.stream_log import MemoryStreamLog
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.rabbitstream.chunk import entries_of, parse_header, simple_entry
from leveret.store.stream_log import CHUNK_DATA_MAX, FileStreamLog
from tests.unit.store.test_stream_log import Harness

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from leveret.model.queues.stream_log import StoredChunk, StreamLog

STREAM = {"x-queue-type": "stream"}


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "streams")
    yield harness
    harness.close()


def entry(body: bytes) -> bytes:
    return simple_entry(to_amqp10(BasicProperties(), body))


def sub_batch_entry(records: list[bytes]) -> bytes:
    inner = b"".join(simple_entry(r) for r in records)
    return struct.pack(">BHII", 0x80, len(records), len(inner), len(inner)) + inner


def stream(h: Harness, segment_bytes: int | None = None, *, stored: bool = True) -> StreamQueue:
    """The stream "s" on the harness's store (store id 0: an in-memory log)."""
    vhost = VirtualHost("/")
    arguments: dict[str, object] = dict(STREAM)
    if segment_bytes is not None:
        arguments["x-stream-max-segment-size-bytes"] = segment_bytes
    vhost.stream_backend = h.store
    queue = vhost.declare_queue("s", owner=None, durable=True, arguments=arguments)
    assert isinstance(queue, StreamQueue)
    if stored:
        queue.store_id = 1
    return queue


def bodies(log: StreamLog, offset: int = 0) -> list[bytes]:
    # The body a 0-9-1 reader gets (a stream-protocol record is kept in 1.0 form).
    return [amqp091_parts(e.message)[1] for e in log.read(offset, 10_000)]


def all_chunks(log: StreamLog) -> list[StoredChunk]:
    chunks: list[StoredChunk] = []
    offset = 0
    while offset < log.committed_offset:
        # From the files a read stops at READ_CHUNK bytes.
        chunks.extend(c for c in log.read_chunks(offset, 100) if c.first >= offset)
        offset = chunks[-1].first + chunks[-1].records
    return chunks


@pytest.mark.parametrize("stored", ["memory", "file"])
def test_duplicates_inside_a_batch_are_skipped_exactly(h: Harness, stored: str) -> None:
    queue = stream(h, stored=stored == "file")
    assert isinstance(queue.log, FileStreamLog if stored == "file" else MemoryStreamLog)
    ids = [1, 2, 3]
    assert queue.append_entries([entry(b"m%d" % i) for i in ids], None, "p", ids) == 3
    # 2 and 3 are stored already, 5 is fresh, 4 comes after 5 in the frame, 5 is repeated,
    # 6 is fresh: one append per message would keep 5 and 6 only.
    ids = [2, 3, 5, 4, 5, 6]
    got = queue.append_entries([entry(b"n%d" % i) for i in ids], None, "p", ids)
    assert got == 2
    assert queue.log.producers["p"] == 6
    assert bodies(queue.log) == [b"m1", b"m2", b"m3", b"n5", b"n6"]
    # A frame of duplicates only stores nothing.
    assert queue.append_entries([entry(b"x")], None, "p", [6]) == 0
    # Without a reference nothing is de-duplicated.
    assert queue.append_entries([entry(b"y"), entry(b"z")], None, "", [1, 1]) == 2
    assert queue.log.next_offset == 7
    if stored == "file":
        h.sync()
    chunks = all_chunks(queue.log)
    # In memory a batch is a chunk; on file a chunk is what one group commit gathered.
    cuts = [(0, 3), (3, 2), (5, 2)] if stored == "memory" else [(0, 7)]
    assert [(c.first, c.records) for c in chunks] == cuts
    got_records = [(r.offset, from_amqp10(r.data)[1]) for c in chunks for r in entries_of(c.data)]
    assert got_records == list(enumerate([b"m1", b"m2", b"m3", b"n5", b"n6", b"y", b"z"]))


def test_a_batch_with_sub_batches_counts_their_records(h: Harness) -> None:
    queue = stream(h)
    inner = [to_amqp10(BasicProperties(), b"s%d" % i) for i in range(3)]
    entries = [entry(b"a"), sub_batch_entry(inner), entry(b"b")]
    assert queue.append_entries(entries, [1, 3, 1], "p", [1, 2, 3]) == 3
    # The sub-batch is a duplicate: its three records are left out with it.
    entries = [sub_batch_entry(inner), entry(b"c")]
    assert queue.append_entries(entries, [3, 1], "p", [3, 4]) == 1
    assert queue.log.next_offset == 6
    assert bodies(queue.log) == [b"a", b"s0", b"s1", b"s2", b"b", b"c"]
    h.reopen()
    assert bodies(stream(h).log) == [b"a", b"s0", b"s1", b"s2", b"b", b"c"]


def test_batches_across_chunk_cuts(h: Harness) -> None:
    queue = stream(h)
    big = [entry(b"x" * 100_000) for _ in range(8)]  # 800 kB: one chunk
    assert queue.append_entries(big, None, "p", list(range(1, 9))) == 8
    # It does not fit what is left of the open chunk: a chunk of its own.
    assert queue.append_entries(big[:4], None, "p", list(range(9, 13))) == 4
    # One batch larger than a chunk may hold (a large frame_max) is cut at entries.
    huge = [entry(b"y" * 100_000) for _ in range(25)]
    assert queue.append_entries(huge, None, "p", list(range(13, 38))) == 25
    h.sync()

    def check(log: StreamLog) -> None:
        chunks = all_chunks(log)
        assert [(c.first, c.records) for c in chunks] == [
            (0, 8),
            (8, 4),
            (12, 10),
            (22, 10),
            (32, 5),
        ]
        assert all(parse_header(c.data).data_length <= CHUNK_DATA_MAX for c in chunks)
        offsets = [r.offset for c in chunks for r in entries_of(c.data)]
        assert offsets == list(range(37))
        assert [e.offset for e in log.read(0, 100)] == list(range(37))
        assert log.producers["p"] == 37

    check(queue.log)
    h.reopen()
    check(stream(h).log)


def test_a_batch_across_a_segment_cut_stays_whole(h: Harness) -> None:
    queue = stream(h, segment_bytes=5000)
    n = 0
    for _ in range(6):
        ids = list(range(n + 1, n + 11))
        assert queue.append_entries([entry(b"%04d" % i * 50) for i in ids], None, "p", ids) == 10
        n += 10
    log = queue.log
    assert isinstance(log, FileStreamLog)
    # Batches of 10 entries of ~230 bytes: the third passes the segment size and is kept
    # whole in it (a segment may pass its size by up to one batch).
    assert [s.first for s in log._segments] == [0, 30, 60]
    h.reopen()
    log = stream(h, segment_bytes=5000).log
    assert bodies(log) == [b"%04d" % i * 50 for i in range(1, 61)]
    assert log.producers["p"] == 60


def test_a_torn_batch_is_cut_at_recovery_and_its_ids_can_be_resent(h: Harness) -> None:
    queue = stream(h)
    ids = list(range(1, 11))
    queue.append_entries([entry(b"a%d" % i) for i in ids], None, "p", ids)
    h.sync()
    ids = list(range(11, 21))
    queue.append_entries([entry(b"b%d" % i) for i in ids], None, "p", ids)
    h.sync()
    h.store.close()
    log = queue.log
    assert isinstance(log, FileStreamLog)
    segment = log.path / f"{0:020d}.segment"
    data = segment.read_bytes()
    # A crash in the middle of the second batch's chunk (its entries half written).
    second = data.index(entry(b"b11"))
    cut = second + 3 * len(entry(b"b11"))
    assert cut < len(data)
    segment.write_bytes(data[:cut])
    h.store = h._open()
    queue = stream(h)
    assert queue.log.next_offset == 10
    assert queue.log.producers["p"] == 10  # the torn batch's ids were never stored
    assert queue.append_entries([entry(b"c%d" % i) for i in ids], None, "p", ids) == 10
    h.reopen()
    assert bodies(stream(h).log) == [b"a%d" % i for i in range(1, 11)] + [
        b"c%d" % i for i in range(11, 21)
    ]


def test_a_frame_cut_into_chunks_keeps_each_chunks_producer_sequence(h: Harness) -> None:
    # Two messages near half of frame_max each: more than a chunk holds, so two chunks.
    queue = stream(h)
    halves = [entry(b"a" * 600_000), entry(b"b" * 600_000)]
    assert queue.append_entries(halves, None, "p", [7, 9]) == 2
    h.sync()
    h.store.close()
    log = queue.log
    assert isinstance(log, FileStreamLog)
    segment = log.path / f"{0:020d}.segment"
    data = segment.read_bytes()
    # A crash tore the second chunk: the first one's message is kept, and so is its id.
    segment.write_bytes(data[: data.index(b"b" * 1000) + 1000])
    h.store = h._open()
    queue = stream(h)
    assert queue.log.next_offset == 1
    assert queue.log.producers["p"] == 7
    # The client resends the unconfirmed frame: only the second message is stored again.
    assert queue.append_entries(halves, None, "p", [7, 9]) == 1
    h.reopen()
    log = stream(h).log
    assert [amqp091_parts(e.message)[1][:1] for e in log.read(0, 10)] == [b"a", b"b"]
    assert log.producers["p"] == 9
