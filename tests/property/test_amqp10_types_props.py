"""Property tests of the AMQP 1.0 type system: encode→decode identity for every primitive
and compound value, and arbitrary or truncated bytes ending only in DecodeError."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leveret.protocol.amqp10.errors import DecodeError
from leveret.protocol.amqp10.types import (
    Value,
    decode_value,
    decode_whole,
    encode_value,
    skip_value,
)
from tests.unit.protocol.amqp10.values import BY_TYPE, VALUES, same


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES)
def test_encode_decode_identity(value: Value) -> None:
    data = encode_value(value)
    assert same(decode_whole(data), value)
    assert skip_value(data, 0) == len(data)
    # Decoding from the middle of a larger buffer reports the right end.
    framed = b"\x99" + data + b"\x40"
    got, end = decode_value(framed, 1)
    assert same(got, value)
    assert end == len(framed) - 1


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(sorted(BY_TYPE)).flatmap(lambda t: BY_TYPE[t]))
def test_every_primitive_round_trips(value: Value) -> None:
    assert same(decode_whole(encode_value(value)), value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES, st.data())
def test_truncated_encodings_are_decode_errors(value: Value, data: st.DataObject) -> None:
    encoded = encode_value(value)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    try:
        decode_whole(encoded[:cut])
    except DecodeError:
        return
    raise AssertionError(f"{encoded[:cut].hex()} decoded")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    try:
        value, end = decode_value(data)
    except DecodeError:
        return
    assert 0 < end <= len(data)
    assert skip_value(data, 0) == end
    encode_value(value)  # whatever decodes can be encoded again
