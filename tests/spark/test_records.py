"""Chunks of AMQP 1.0 records to Arrow (``_records``) and the stream sink's message form,
without sockets or Spark: the same rows as the 0-9-1 path, ranges, sub-batches, bad input."""

from __future__ import annotations

import datetime
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.convert.amqp091 import wire_message
from leveret.convert.amqp10_amqp091 import from_amqp10, to_amqp10
from leveret.convert.stream_records import record_of
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import AmqpValue, Data, Properties, encode_message
from leveret.protocol.rabbitstream.chunk import (
    CHUNK_TRACKING_DELTA,
    encode_chunk,
    simple_entry,
)
from leveret.spark._arrow import PROPERTY_FIELDS, READ_SCHEMA, build_batch
from leveret.spark._client import Deliveries
from leveret.spark._records import ChunkError, RecordColumns
from leveret.spark._stream_sink import encode_prefix

TS = 1_700_000_000_123


def chunk(records: list[bytes], first: int = 0, **kw: object) -> bytes:
    return encode_chunk(
        [simple_entry(r) for r in records],
        chunk_id=first,
        timestamp=TS,
        **kw,  # type: ignore[arg-type]
    )


def sub_batch(records: list[bytes], *, gzip: bool = False) -> bytes:
    inner = b"".join(simple_entry(r) for r in records)
    data = zlib.compress(inner, wbits=16 + zlib.MAX_WBITS) if gzip else inner
    kind = 0x80 | ((1 if gzip else 0) << 4)
    return struct.pack(">BHII", kind, len(records), len(inner), len(data)) + data


def rows(chunks: list[bytes], start: int = 0, end: int = 1 << 62) -> list[dict[str, object]]:
    cols = RecordColumns("q")
    for one in chunks:
        cols.add_chunk(one, start, end)
    batch = cols.build()
    assert batch.schema == READ_SCHEMA
    out: list[dict[str, object]] = batch.to_pylist()
    return out


PROPS = [
    BasicProperties(delivery_mode=2),
    BasicProperties(
        content_type="application/json",
        content_encoding="gzip",
        headers={"a": 1, "b": "x", "t": True, "nested": {"k": [1, 2]}, "bin": b"\xff"},
        delivery_mode=1,
        priority=7,
        correlation_id="c-1",
        reply_to="back",
        expiration="60000",
        message_id="m-1",
        type="order",
        user_id="guest",
        app_id="shop",
    ),
    BasicProperties(),
]


@pytest.mark.parametrize("props", PROPS)
def test_a_0_9_1_publish_reads_as_the_0_9_1_reader_gives_it(props: BasicProperties) -> None:
    raw = props.encode()
    bodies = [b"one", b"x" * 300, b""]
    records = [record_of(wire_message("ex", "rk.1", raw, body)) for body in bodies]
    got = rows([chunk(records, first=40)])
    deliveries = Deliveries()
    for body in bodies:
        deliveries.bodies.append(body)
        deliveries.properties.append(raw)
        deliveries.routing_keys.append(b"rk.1")
        deliveries.exchanges.append(b"ex")
        deliveries.redelivered.append(0)
    expected = build_batch(deliveries, "q", [40, 41, 42]).to_pylist()
    for row, want in zip(got, expected, strict=True):
        assert row["timestamp"] == datetime.datetime.fromtimestamp(TS / 1000, tz=datetime.UTC)
        for name in ("value", "routing_key", "exchange", "queue", "offset", "headers"):
            assert row[name] == want[name], name
        assert row["properties"] == want["properties"]
        assert row["redelivered"] is False


@pytest.mark.parametrize("props", PROPS)
def test_a_1_0_message_reads_with_rabbitmqs_mapping(props: BasicProperties) -> None:
    record = to_amqp10(props, b"payload")
    (row,) = rows([chunk([record], first=7)])
    back, body = from_amqp10(record)
    assert row["value"] == body == b"payload"
    assert row["offset"] == 7
    assert (row["exchange"], row["routing_key"]) == ("", "q")  # no annotations: the stream
    got = row["properties"]
    assert isinstance(got, dict)
    for name in PROPERTY_FIELDS:
        if name == "user_id":
            continue
        assert got[name] == getattr(back, name), name
    raw_headers = row["headers"]
    assert raw_headers is None or isinstance(raw_headers, list)
    headers = dict(raw_headers) if raw_headers is not None else None
    expected = None
    if back.headers:
        expected = {k: _as_text(v) for k, v in back.headers.items()}
    assert headers == expected


def _as_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def test_ranges_cut_inside_chunks_and_skip_whole_ones() -> None:
    first = chunk([to_amqp10(PROPS[0], b"%d" % i) for i in range(10)], first=0)
    second = chunk([to_amqp10(PROPS[0], b"%d" % i) for i in range(10, 20)], first=10)
    cols = RecordColumns("q")
    assert cols.add_chunk(first, 5, 15) == 10
    assert cols.add_chunk(second, 5, 15) == 20
    got = cols.build().to_pylist()
    assert [r["offset"] for r in got] == list(range(5, 15))
    assert [r["value"] for r in got] == [b"%d" % i for i in range(5, 15)]
    assert cols.add_chunk(first, 10, 20) == 10  # nothing of it in range
    assert len(cols) == 0


def test_sub_batches_plain_and_gzip_count_offsets() -> None:
    records = [to_amqp10(PROPS[0], b"r%d" % i) for i in range(6)]
    data = encode_chunk(
        [simple_entry(records[0]), sub_batch(records[1:4]), sub_batch(records[4:], gzip=True)],
        chunk_id=100,
        timestamp=TS,
        num_records=6,
    )
    got = rows([data], start=101)
    assert [(r["offset"], r["value"]) for r in got] == [(100 + i, b"r%d" % i) for i in range(1, 6)]


def test_tracking_chunks_and_empty_chunks_have_no_rows() -> None:
    cols = RecordColumns("q")
    tracking = encode_chunk([], chunk_id=5, timestamp=TS, chunk_type=CHUNK_TRACKING_DELTA)
    assert cols.add_chunk(tracking) == -1
    assert len(cols) == 0


def test_bodies_other_than_data() -> None:
    text = encode_message(AmqpValue("hello"), properties=Properties(message_id="v"))
    number = encode_message(AmqpValue(42))
    several = encode_message([Data(b"ab"), Data(b"cd")])
    got = rows([chunk([text, number, several])])
    assert got[0]["value"] == b"hello"
    assert got[0]["properties"]["message_id"] == "v"  # type: ignore[index]
    assert got[1]["value"] == AmqpValue(42).encode()
    assert got[2]["value"] == b"abcd"


def test_a_record_that_is_not_a_message_is_its_own_body() -> None:
    junk = b"\x01\x02not amqp"
    got = rows([chunk([junk, to_amqp10(PROPS[0], b"ok")])])
    assert got[0]["value"] == junk
    assert got[0]["properties"]["delivery_mode"] is None  # type: ignore[index]
    assert got[0]["headers"] is None
    assert got[1]["value"] == b"ok"


def test_a_chunk_cut_short_is_a_chunk_error() -> None:
    whole = chunk([to_amqp10(PROPS[0], b"x" * 50)])
    with pytest.raises(ChunkError):
        RecordColumns("q").add_chunk(whole[:-10])
    with pytest.raises(ChunkError):
        RecordColumns("q").add_chunk(b"\x00" * 60)


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=0, max_size=200), st.integers(0, 250))
def test_any_bytes_in_a_chunk_give_rows_or_a_chunk_error(junk: bytes, cut: int) -> None:
    data = chunk([junk, to_amqp10(PROPS[1], b"b")])
    cols = RecordColumns("q")
    try:
        cols.add_chunk(data[: len(data) - cut] if cut else data)
        cols.build()
    except ChunkError:
        pass


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)


@settings(max_examples=80, deadline=None)
@given(
    persistent=st.booleans(),
    headers=st.one_of(
        st.none(), st.lists(st.tuples(_TEXT, st.one_of(st.none(), _TEXT)), max_size=4)
    ),
    props=st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {},
            optional={
                "content_type": st.text("abc/+-", min_size=1, max_size=10),
                "content_encoding": st.text("abcz", min_size=1, max_size=5),
                "delivery_mode": st.sampled_from([1, 2]),
                "priority": st.integers(0, 9),
                "correlation_id": _TEXT,
                "reply_to": _TEXT,
                "expiration": st.one_of(st.integers(0, 10**6).map(str), st.just("soon")),
                "message_id": _TEXT,
                "type": _TEXT,
                "user_id": _TEXT,
                "app_id": _TEXT,
            },
        ),
    ),
    body=st.binary(max_size=300),
)
def test_what_the_stream_sink_writes_reads_back(
    persistent: bool,
    headers: list[tuple[str, str | None]] | None,
    props: dict[str, object] | None,
    body: bytes,
) -> None:
    prefix = encode_prefix(persistent, headers, props)
    record = prefix + encode_message(Data(body))
    (row,) = rows([chunk([record])])
    assert row["value"] == body
    got = row["properties"]
    assert isinstance(got, dict)
    p = props or {}
    mode = p.get("delivery_mode")
    durable = mode == 2 if mode is not None else persistent
    assert got["delivery_mode"] == (2 if durable else 1)
    for name in PROPERTY_FIELDS:
        if name != "delivery_mode":
            assert got[name] == p.get(name), name
    if headers:
        assert row["headers"] == list(dict(headers).items())
    else:
        assert row["headers"] is None
