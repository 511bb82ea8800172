"""What the router and a stream read of 0-9-1 headers from the property bytes
(convert/amqp091_headers.py) against the decoded properties: whenever the scan answers, the
decoder takes the bytes and its headers give the same CC/BCC answer and de-duplication key,
over property bytes of every field type, cut or corrupted ones included."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.convert.amqp091 import wire_message
from leveret.convert.amqp091_headers import dedup_key, headers_hint, scan
from leveret.model.message import HINT_PLAIN_HEADERS
from leveret.model.queues.stream import _dedup_key
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.spark.sink import _fast_properties
from tests.unit.convert.test_amqp10_sections import _raw_properties, _shortstr, _table

_dedup_names = st.sampled_from(["x-stream-producer", "x-stream-sequence", "CC", "BCC"])
_dedup_values = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(lambda v: b"l" + struct.pack(">q", v)),
    st.integers(0, 2**31 - 1).map(lambda v: b"I" + struct.pack(">i", v)),
    st.text(max_size=300).map(lambda v: b"S" + struct.pack(">I", len(v.encode())) + v.encode()),
    st.binary(max_size=5).map(lambda v: b"x" + struct.pack(">I", len(v)) + v),
    st.sampled_from([b"t\x01", b"V", b"f\x00\x00\x00\x00"]),
)


@st.composite
def _with_dedup_headers(draw: st.DrawFn) -> bytes:
    """Headers mostly of the names the scan looks for, duplicates and odd types included."""
    entries = draw(st.lists(st.tuples(_dedup_names, _dedup_values), max_size=5))
    if draw(st.booleans()):  # a usable pair, somewhere among them
        producer = draw(st.text(min_size=255, max_size=257) | st.text(min_size=1, max_size=9))
        pair = [
            (
                "x-stream-producer",
                b"S" + struct.pack(">I", len(producer.encode())) + producer.encode(),
            ),
            ("x-stream-sequence", b"l" + struct.pack(">q", draw(st.integers(0, 2**63 - 1)))),
        ]
        at = draw(st.integers(0, len(entries)))
        entries[at:at] = pair
    flags = 0x2000
    tail = b""
    if draw(st.booleans()):
        flags |= 0x0080
        tail = _shortstr(draw(st.text(max_size=20)))
    return struct.pack(">H", flags) + _table(entries) + tail


def _decoded(raw: bytes) -> tuple[bool, tuple[str, int]]:
    headers = BasicProperties.decode(raw).headers or {}
    return "CC" in headers or "BCC" in headers, _dedup_key(headers)


def _check(raw: bytes) -> None:
    found = scan(raw)
    if found is None:
        return
    routes, producer, sequence = found
    assert (routes, (producer, sequence)) == _decoded(raw)  # and the decoder takes them


@settings(max_examples=300, deadline=None)
@given(st.one_of(_raw_properties(), _with_dedup_headers()))
def test_the_scan_agrees_with_the_decoded_headers(raw: bytes) -> None:
    _check(raw)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_raw_properties(), _with_dedup_headers()), st.data())
def test_cut_or_corrupted_bytes_scan_as_the_decoder_reads_them(
    raw: bytes, data: st.DataObject
) -> None:
    at = data.draw(st.integers(0, len(raw)))
    octet = bytes((data.draw(st.integers(0, 255)),))
    _check(data.draw(st.sampled_from([raw[:at], raw[:at] + octet + raw[at + 1 :]])))


def test_the_sinks_properties_are_read_without_a_decode() -> None:
    raw = _fast_properties(b"spark-1-0", 42, b"\x0bspark-1-0-7", True)
    assert scan(raw) == (False, "spark-1-0", 42)
    assert dedup_key(raw) == ("spark-1-0", 42)
    assert headers_hint(raw) == HINT_PLAIN_HEADERS
    message = wire_message("", "q", raw, b"")
    message.hints |= headers_hint(raw)
    assert message.replace(headers={"CC": ["b"]}).hints & HINT_PLAIN_HEADERS == 0


def test_cc_nested_values_and_bad_bytes_leave_the_decode_to_the_caller() -> None:
    assert headers_hint(BasicProperties(headers={"CC": ["a"]}).encode()) == 0
    assert scan(BasicProperties(headers={"BCC": "a"}).encode()) == (True, "", -1)
    assert scan(BasicProperties(headers={"nested": {"a": 1}}).encode()) is None
    assert scan(b"\x20\x00\x00\x00\x00\x09") is None  # a table cut short
    assert scan(b"\x00\x80\x02\xff\xfe") is None  # a message-id that is not UTF-8
