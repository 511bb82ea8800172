"""The chunk format of stream logs: chunks as stream-protocol readers get them, entries
published over the stream protocol read by 0-9-1 readers, stored consumer offsets, and the
conversion of directories written in the previous format."""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING

import pytest

from leveret.convert.amqp091 import wire_message
from leveret.convert.amqp10_amqp091 import from_amqp10, to_amqp10
from leveret.convert.formats import AMQP091, AMQP10, amqp091_parts
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.rabbitstream.chunk import (
    HEADER_SIZE,
    entries_of,
    parse_header,
    simple_entry,
)
from leveret.store.records import COMMIT, frame
from leveret.store.stream_log import CHUNK_DATA_MAX
from leveret.store.stream_segments import SUFFIX
from tests.unit.store.test_stream_log import Harness, append

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from leveret.model.queues.stream_log import StoredChunk


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "streams")
    yield harness
    harness.close()


def records(chunks: list[StoredChunk]) -> list[tuple[int, bytes]]:
    return [(r.offset, r.data) for c in chunks for r in entries_of(c.data)]


def test_a_batch_is_one_chunk_committed_once_synced(h: Harness) -> None:
    stream_log = h.log()
    committed: list[int] = []
    stream_log.on_committed = lambda: committed.append(stream_log.committed_offset)
    for i in range(5):
        append(stream_log, b"m%d" % i)
    # Not synced: 0-9-1 readers see the entries, chunk readers nothing yet.
    assert len(stream_log.read(0, 10)) == 5
    assert stream_log.read_chunks(0, 10) == []
    h.sync()
    assert committed == [5]
    chunks = stream_log.read_chunks(0, 10)
    assert [(c.first, c.records) for c in chunks] == [(0, 5)]
    header = parse_header(chunks[0].data)
    # The header counts the trailer, which readers are not sent (as RabbitMQ does).
    assert len(chunks[0].data) == HEADER_SIZE + header.data_length
    assert header.epoch == 1
    got = records(chunks)
    assert [o for o, _ in got] == [0, 1, 2, 3, 4]
    assert from_amqp10(got[3][1])[1] == b"m3"


def test_a_batch_over_the_chunk_limit_is_cut_into_chunks_that_fit(h: Harness) -> None:
    # A stream-protocol reader gets a chunk in one frame: no chunk passes CHUNK_DATA_MAX,
    # except one holding a single entry larger than that.
    stream_log = h.log()
    entry = simple_entry(b"x" * 100_000)
    for i in range(25):
        assert not stream_log.append_entries(entry, 1, 1, 10, "pub", i)
    assert not stream_log.append_entries(
        simple_entry(b"y" * (CHUNK_DATA_MAX + 1)), 1, 1, 10, "pub", 25
    )
    append(stream_log, b"after")
    h.sync()

    def check() -> None:
        chunks: list[StoredChunk] = []
        while more := stream_log.read_chunks(
            chunks[-1].first + chunks[-1].records if chunks else 0, 100
        ):
            chunks.extend(more)  # from the files a read stops at READ_CHUNK bytes
        assert [(c.first, c.records) for c in chunks] == [
            (0, 10),
            (10, 10),
            (20, 5),
            (25, 1),
            (26, 1),
        ]
        sizes = [parse_header(c.data).data_length for c in chunks]
        assert all(size <= CHUNK_DATA_MAX for size in sizes[:3] + sizes[4:])
        got = records(chunks)
        assert [o for o, _ in got] == list(range(27))
        assert [e.offset for e in stream_log.read(0, 100)] == list(range(27))
        assert dict(stream_log.producers) == {"pub": 25}

    check()
    h.reopen()
    stream_log = h.log()
    check()


def test_chunks_from_the_files_and_from_the_cache_are_the_same_bytes(tmp_path: Path) -> None:
    h = Harness(tmp_path / "streams", cache_bytes=20_000)
    try:
        stream_log = h.log(segment_bytes=3_000)
        for i in range(200):
            append(stream_log, b"%04d" % i * 10)
            if i % 7 == 0:
                h.sync()
        h.sync()
        from_memory = stream_log._cache[-1]
        h.reopen()
        stream_log = h.log(segment_bytes=3_000)
        everything = []
        offset = 0
        while offset < stream_log.committed_offset:
            chunks = stream_log.read_chunks(offset, 3)
            assert chunks
            everything += chunks
            offset = chunks[-1].first + chunks[-1].records
        assert [o for o, _ in records(everything)] == list(range(200))
        last = next(c for c in everything if c.first == from_memory.first)
        assert last.data == from_memory.sent
        # A read from an offset inside a chunk starts with that whole chunk.
        big = next(c for c in everything if c.records > 2)
        inside = stream_log.read_chunks(big.first + 1, 1)
        assert inside == [big]
    finally:
        h.close()


def test_stream_protocol_entries_are_read_by_0_9_1_readers(h: Harness) -> None:
    stream_log = h.log()
    props = BasicProperties(content_type="text/plain", headers={"k": "v"}, delivery_mode=2)
    record = to_amqp10(props, b"hello")
    sub_batch = b"".join(simple_entry(to_amqp10(BasicProperties(), b"s%d" % i)) for i in range(3))
    batch_entry = struct.pack(">BHII", 0x80, 3, len(sub_batch), len(sub_batch)) + sub_batch
    assert not stream_log.append_entries(simple_entry(record), 1, 1, 10, "pub", 0)
    assert not stream_log.append_entries(batch_entry, 1, 3, 11, "pub", 1)
    append(stream_log, b"091", ts=12)
    assert stream_log.next_offset == 5
    assert dict(stream_log.producers) == {"pub": 1}

    def check() -> None:
        entries = stream_log.read(0, 10)
        assert [e.offset for e in entries] == [0, 1, 2, 3, 4]
        first = entries[0].message
        assert first.format == AMQP10  # kept as the stream client sent it
        assert amqp091_parts(first)[1] == b"hello"
        assert first.routing_key == "s"  # the stream's name
        assert first.headers == {"k": "v", "x-stream-offset": 0, "x-stream-timestamp": 10}
        assert [amqp091_parts(e.message)[1] for e in entries[1:]] == [b"s0", b"s1", b"s2", b"091"]
        assert entries[4].message.format == AMQP091
        assert entries[4].message.exchange == "ex"

    check()
    h.reopen()
    stream_log = h.log()
    check()
    assert dict(stream_log.producers) == {"pub": 1}


def test_a_0_9_1_publish_keeps_its_property_bytes(h: Harness) -> None:
    stream_log = h.log()
    raw = BasicProperties(
        content_type="application/json", headers={"n": 7, "t": {"x": 1}}, priority=3
    ).encode()
    message = wire_message("amq.direct", "key", raw, b"{}")
    stream_log.append(message, 5, "", -1)
    h.reopen()
    got = h.log().read(0, 1)[0].message
    assert (got.exchange, got.routing_key, got.body) == ("amq.direct", "key", b"{}")
    # The nested table (which the 1.0 form leaves out) is still there: the raw bytes are.
    headers = got.headers
    assert headers is not None
    assert headers["t"] == {"x": 1}


def test_consumer_offsets_survive_restarts_and_retention(h: Harness) -> None:
    stream_log = h.log(segment_bytes=400)
    stream_log.store_offset("app", 0)
    h.sync()
    for i in range(20):
        append(stream_log, b"x" * 100)
        stream_log.store_offset("app", i)
    stream_log.store_offset("other", 3)
    h.sync()
    assert stream_log.retain(500, None) > 0
    h.reopen()
    stream_log = h.log(segment_bytes=400)
    assert dict(stream_log.offsets) == {"app": 19, "other": 3}
    # A stored offset with no message in its batch is a tracking chunk: never delivered.
    stream_log.store_offset("app", 25)
    h.reopen()
    stream_log = h.log(segment_bytes=400)
    assert stream_log.offsets["app"] == 25
    assert stream_log.next_offset == 20
    assert all(c.records for c in stream_log.read_chunks(0, 100))


def _old_segment(path: Path, first: int, producers: dict[str, int], messages: list[int]) -> None:
    """A segment file as the previous format wrote it (records of P and m)."""
    m = struct.Struct("<cQqBBIHq")
    out = [frame(b"P" + json.dumps(producers).encode())]
    for offset in messages:
        producer = b"p" if offset % 2 else b""
        props = b"\x10\x00\x02"  # delivery-mode 2
        payload = (
            m.pack(b"m", offset, 1000 + offset, 2, 1, len(props), len(producer), offset)
            + b"ex"
            + b"k"
            + producer
            + props
            + b"body%d" % offset
        )
        out.append(frame(payload))
    out.append(frame(COMMIT))
    (path / f"{first:020d}.seg").write_bytes(b"".join(out))


def test_a_directory_in_the_previous_format_is_converted_at_boot(h: Harness) -> None:
    directory = h.path / "1"
    directory.mkdir(parents=True)
    _old_segment(directory, 0, {}, list(range(10)))
    _old_segment(directory, 10, {"p": 9, "gone": 4}, list(range(10, 15)))
    stream_log = h.log()
    assert sorted(p.suffix for p in directory.iterdir()) == [SUFFIX, SUFFIX]
    assert (stream_log.first_offset, stream_log.next_offset) == (0, 15)
    assert dict(stream_log.producers) == {"p": 13, "gone": 4}
    entries = stream_log.read(0, 20)
    assert [e.message.body for e in entries] == [b"body%d" % i for i in range(15)]
    assert entries[12].message.properties.delivery_mode == 2
    assert stream_log.read_chunks(0, 1)[0].first == 0
    # Appends continue after the converted offsets, and a restart reads both.
    append(stream_log, b"new")
    h.reopen()
    assert [e.message.body for e in h.log().read(14, 5)] == [b"body14", b"new"]


def test_a_conversion_cut_short_after_its_marker_only_deletes(h: Harness) -> None:
    directory = h.path / "1"
    directory.mkdir(parents=True)
    _old_segment(directory, 0, {}, list(range(4)))
    h.log()  # converted
    h.reopen()
    # As if the broker died after the marker, before deleting the old files.
    _old_segment(directory, 0, {}, list(range(2)))
    (directory / "CONVERTED").write_bytes(b"")
    h.store.close()
    h.store = h._open()
    stream_log = h.log()
    assert stream_log.next_offset == 4
    assert sorted(p.name for p in directory.iterdir()) == [f"{0:020d}{SUFFIX}"]
