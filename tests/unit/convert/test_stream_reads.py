"""A chunk's entries decoded in one pass (convert/stream_reads.py, through
``StreamRecords.chunk_messages``): the same messages as decoding each entry on its own,
whatever mix of records, and a reused record head only where it must hold."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.convert.amqp091 import wire_message
from leveret.convert.amqp10_amqp091 import sections_of, to_amqp10
from leveret.convert.formats import AMQP10, amqp091_parts
from leveret.convert.stream_records import StreamRecords, record_of
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.rabbitstream.chunk import HEADER_SIZE, parse_header, simple_entry
from leveret.protocol.rabbitstream.errors import UnknownFrame

if TYPE_CHECKING:
    from leveret.model.message import Message

PROPS = [
    BasicProperties(),
    BasicProperties(delivery_mode=2),
    BasicProperties(delivery_mode=2, headers={"x-stream-producer": "p", "x-stream-sequence": 1}),
    BasicProperties(content_type="application/json", priority=3, message_id="m"),
    # Sections over 255 bytes: a list32 properties section, a map32 of application properties.
    BasicProperties(headers={"big": "v" * 300}, message_id="m" * 200, correlation_id="c" * 90),
]
_SUB = struct.Struct(">BHII")


def _published(props: int, exchange: str, key: str, size: int) -> bytes:
    """The stored record of a 0-9-1 publish."""
    return record_of(wire_message(exchange, key, PROPS[props].encode(), bytes([size % 251]) * size))


def _two_data_sections(props: int, size: int) -> bytes:
    # The same head as a one-section record of these properties, then a second body part.
    return _published(props, "", "q", size) + b"\x00\x53\x75\xa0\x02ab"


def _sub_batch(records: list[bytes]) -> bytes:
    inner = b"".join(struct.pack(">I", len(r)) + r for r in records)
    return _SUB.pack(0x80, len(records), len(inner), len(inner)) + inner


records = st.one_of(
    st.builds(
        _published,
        st.integers(0, len(PROPS) - 1),
        st.sampled_from(["", "amq.topic"]),
        st.sampled_from(["q", "k" * 300]),
        st.sampled_from([0, 1, 200, 255, 256, 1000]),
    ),
    st.builds(_two_data_sections, st.integers(0, len(PROPS) - 1), st.sampled_from([0, 3, 300])),
    # Records of 1.0 / stream-protocol publishes, routed by the stream or by annotations.
    st.builds(lambda p, b: to_amqp10(PROPS[p], b), st.integers(0, len(PROPS) - 1), st.binary()),
    st.builds(
        lambda p, b: sections_of(PROPS[p], b, exchange="e", routing_key="rk"),
        st.integers(0, len(PROPS) - 1),
        st.sampled_from([b"", b"x", b"y" * 300]),
    ),
    st.binary(max_size=40),
)
entries = st.one_of(
    records.map(simple_entry),
    st.lists(records, min_size=1, max_size=3).map(_sub_batch),
)


def _fields(message: Message | None) -> object:
    if message is None:
        return None
    return (
        message.exchange,
        message.routing_key,
        message.raw_properties,
        message.body,
        message.hints,
        message.format,
    )


def _chunk_data(codec: StreamRecords, chunk_entries: list[bytes]) -> tuple[bytes, int, int]:
    chunk = codec.chunk(chunk_entries, len(chunk_entries), 0, 0)
    header = parse_header(chunk)
    at = HEADER_SIZE + header.bloom_size
    return chunk, at, at + header.data_length


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(entries, min_size=1, max_size=8), st.sampled_from(["s", "t"])),
        min_size=1,
        max_size=3,
    )
)
def test_a_chunk_gives_what_its_entries_give_one_by_one(
    chunks: list[tuple[list[bytes], str]],
) -> None:
    # One codec for every chunk: the head kept from one chunk meets the next one's records,
    # of the same stream or another (a 1.0 record is routed by its stream's name).
    codec = StreamRecords()
    for chunk_entries, stream in chunks:
        chunk, at, end = _chunk_data(codec, chunk_entries)
        expected = [m for e in chunk_entries for m in StreamRecords().messages(e, stream)]
        got = codec.chunk_messages(chunk, at, end, len(chunk_entries), stream)
        assert [_fields(m) for m in got] == [_fields(m) for m in expected]


def test_records_that_repeat_a_head_share_its_parts_and_keep_their_bodies() -> None:
    codec = StreamRecords()
    bodies = [b"a", b"b" * 300, b"", b"c" * 70000]
    raw = PROPS[2].encode()
    chunk_entries = [simple_entry(record_of(wire_message("x", "k", raw, b))) for b in bodies]
    chunk, at, end = _chunk_data(codec, chunk_entries)
    got = codec.chunk_messages(chunk, at, end, len(chunk_entries), "s")
    assert [m.body for m in got if m is not None] == bodies
    raw_properties = {id(m.raw_properties) for m in got if m is not None}
    assert len(raw_properties) == 1
    assert {(m.exchange, m.routing_key) for m in got if m is not None} == {("x", "k")}


def test_1_0_records_that_repeat_a_head_share_it_within_their_stream() -> None:
    codec = StreamRecords()
    bodies = [b"a", b"b" * 300, b""]
    chunk_entries = [simple_entry(to_amqp10(PROPS[3], b)) for b in bodies]
    chunk, at, end = _chunk_data(codec, chunk_entries)
    got = [m for m in codec.chunk_messages(chunk, at, end, 3, "s") if m is not None]
    assert {m.format for m in got} == {AMQP10}
    assert [amqp091_parts(m)[1] for m in got] == bodies
    assert len({id(m.raw_properties) for m in got}) == 1
    assert {m.routing_key for m in got} == {"s"}
    # The same records read for another stream are routed by that one's name.
    other = codec.chunk_messages(chunk, at, end, 3, "t")
    assert {m.routing_key for m in other if m is not None} == {"t"}


def test_a_second_data_section_after_a_known_head_is_part_of_the_body() -> None:
    codec = StreamRecords()
    chunk_entries = [
        simple_entry(_published(1, "", "q", 3)),
        simple_entry(_two_data_sections(1, 3)),
    ]
    chunk, at, end = _chunk_data(codec, chunk_entries)
    got = codec.chunk_messages(chunk, at, end, 2, "s")
    assert [m.body for m in got if m is not None] == [b"\x03" * 3, b"\x03" * 3 + b"ab"]


@pytest.mark.parametrize("cut", [1, 4, 10])
def test_an_entry_that_overruns_the_data_is_an_unknown_frame(cut: int) -> None:
    codec = StreamRecords()
    chunk, at, end = _chunk_data(codec, [simple_entry(_published(0, "", "q", 20))] * 2)
    with pytest.raises(UnknownFrame):
        codec.chunk_messages(chunk, at, end - cut, 2, "s")
    with pytest.raises(UnknownFrame):
        codec.chunk_messages(chunk[: end - cut], at, end, 2, "s")
