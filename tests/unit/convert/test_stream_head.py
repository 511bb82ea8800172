"""A stream record's head written from the property bytes (convert/stream_head.py) against
the decoding path (decode, then the table's sections): the same bytes whenever it answers,
over property bytes of every field type, malformed ones included; the sink's properties
and the usual basic properties take it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.convert import stream_records
from leveret.convert.amqp091 import wire_message
from leveret.convert.stream_head import stored_head
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp091.fieldtable import Long
from leveret.spark.sink import _fast_properties
from tests.unit.convert.test_amqp10_sections import _raw_properties


def _decoding_path(exchange: str, routing_key: str, raw: bytes) -> bytes:
    stream_records._prepared.clear()
    message = wire_message(exchange, routing_key, raw, b"")
    return stream_records.decoded_head(exchange, routing_key, raw, message)


@settings(max_examples=400, deadline=None)
@given(_raw_properties(), st.sampled_from(["", "amq.direct", "é" * 130]), st.text(max_size=40))
def test_the_head_is_the_decoding_paths_bytes(raw: bytes, exchange: str, key: str) -> None:
    direct = stored_head(exchange, key, raw)
    if direct is not None:
        assert direct == _decoding_path(exchange, key, raw)


@settings(max_examples=300, deadline=None)
@given(_raw_properties(), st.data())
def test_cut_or_corrupted_bytes_give_none_or_the_same_head(raw: bytes, data: st.DataObject) -> None:
    """Whatever the bytes, no exception: None, or what decoding them would give."""
    at = data.draw(st.integers(0, len(raw)))
    mangled = data.draw(
        st.sampled_from(
            [raw[:at], raw[:at] + bytes((data.draw(st.integers(0, 255)),)) + raw[at + 1 :]]
        )
    )
    direct = stored_head("", "q", mangled)
    if direct is not None:
        assert direct == _decoding_path("", "q", mangled)


def test_the_sink_and_the_usual_properties_take_it() -> None:
    sink = _fast_properties(b"spark-1-0", 2**40, b"\x0bspark-1-0-7", True)
    usual = BasicProperties(
        content_type="application/json",
        headers={"s": "x", "n": 7, "big": Long(2**40), "t": True, "b": b"\xff", "x-seen": 1},
        delivery_mode=2,
        priority=5,
        correlation_id="c",
        reply_to="r",
        expiration="60000",
        message_id="m",
        timestamp=1_700_000_000,
        type="order",
        user_id="guest",
        app_id="app",
    ).encode()
    for raw in (sink, usual, b"\x00\x00"):
        head = stored_head("ex", "rk", raw)
        assert head is not None
        assert head == _decoding_path("ex", "rk", raw)


def test_what_it_leaves_to_the_decoding_path() -> None:
    for props in (
        BasicProperties(headers={"f": 1.5}),
        BasicProperties(headers={"CC": ["a"]}),
        BasicProperties(headers={"x-basic-type": "t"}),
        BasicProperties(message_id="urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66"),
    ):
        assert stored_head("", "q", props.encode()) is None
    assert stored_head("", "q", b"\x00") is None  # too short
    assert stored_head("", "q", b"\x00\x01") is None  # a continuation flag
