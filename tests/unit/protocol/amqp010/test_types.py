"""Unit tests of the AMQP 0-10 type system (types.py) and serial numbers (sequence.py)."""

from __future__ import annotations

import datetime
import decimal
import uuid

import pytest

from leveret.protocol.amqp010._generated.commands import MessageAccept, MessageTransfer
from leveret.protocol.amqp010._generated.constants import TypeCode
from leveret.protocol.amqp010._generated.structs import (
    CommandFragment,
    DeliveryProperties,
    SessionHeader,
    Xid,
)
from leveret.protocol.amqp010.errors import DecodeError, EncodeError
from leveret.protocol.amqp010.ops import decode_command, decode_control, decode_header
from leveret.protocol.amqp010.sequence import SequenceSet, serial_add, serial_le, serial_lt
from leveret.protocol.amqp010.types import (
    SESSION_HEADER_NO_SYNC,
    SESSION_HEADER_SYNC,
    Array,
    OpaqueStruct,
    Typed,
    Value,
    decode_map,
    decode_struct32,
    decode_value,
    enc_sequence_set,
    encode_map,
    encode_value,
    fixed_width,
)

# Left out of the compiled pass (scripts/test): the 0-10 codec is not compiled.
pytestmark = pytest.mark.pure_only


def test_sequence_set_example_from_the_spec() -> None:
    # Spec 3.2, sequence-set: [(0, 2), (5, 6), (15, 15)] and its bytes.
    out = bytearray()
    enc_sequence_set(out, SequenceSet([(0, 2), (5, 6), (15, 15)]))
    assert out.hex() == "0018000000000000000200000005000000060000000f0000000f"


def test_serial_arithmetic_wraps() -> None:
    assert serial_add(0xFFFFFFFF, 1) == 0
    assert serial_lt(0xFFFFFFFF, 0)
    assert not serial_lt(0, 0xFFFFFFFF)
    assert serial_le(5, 5)
    assert not serial_lt(0, 0x80000000)  # undefined: neither is less
    assert not serial_lt(0x80000000, 0)


def test_sequence_set_merges_and_subtracts_across_the_wrap() -> None:
    s = SequenceSet([(0xFFFFFFFE, 0xFFFFFFFF)])
    s.add(0)
    s.add(1)
    assert s.ranges == ((0xFFFFFFFE, 1),)
    assert 0xFFFFFFFF in s
    assert 0 in s
    assert 2 not in s
    assert s.count() == 4
    s.remove(0xFFFFFFFF)
    assert list(s) == [(0xFFFFFFFE, 0xFFFFFFFE), (0, 1)]
    assert list(s.ids()) == [0xFFFFFFFE, 0, 1]
    with pytest.raises(ValueError, match="reversed"):
        s.add_range(5, 4)


def test_session_header_constants_match_the_generated_struct() -> None:
    assert SessionHeader(sync=True).encode() == SESSION_HEADER_SYNC
    assert SessionHeader(sync=False).encode() == SESSION_HEADER_NO_SYNC


def test_map_values_decode_to_python_types() -> None:
    when = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    value: dict[str, Value] = {
        "b": True,
        "i": -5,
        "u": (1 << 64) - 1,
        "f": 1.5,
        "s": "é",
        "x": b"\x00\xff",
        "n": None,
        "l": [1, "a", [None]],
        "m": {"k": {}},
        "t": when,
        "id": uuid.UUID(int=7),
        "d": decimal.Decimal("-12.50"),
        "a": Array(TypeCode.UINT8, (1, 2, 3)),
    }
    decoded = decode_map(encode_map(value))
    assert decoded == {**value, "a": [1, 2, 3]}
    assert decode_map(encode_map(value), exact=True)["a"] == Array(TypeCode.UINT8, (1, 2, 3))


def test_exact_decoding_keeps_non_default_type_codes() -> None:
    typed: dict[str, Value] = {
        "i32": Typed(TypeCode.INT32, 7),
        "f": Typed(TypeCode.FLOAT, 0.5),
        "c": Typed(TypeCode.CHAR, "x"),
        "bin": Typed(TypeCode.BIN40, b"12345"),
        "s8": Typed(TypeCode.STR8_UTF16, "hi"),
    }
    raw = encode_map(typed)
    plain = decode_map(raw)
    assert plain == {"i32": 7, "f": 0.5, "c": "x", "bin": b"12345", "s8": "hi"}
    exact = decode_map(raw, exact=True)
    assert exact["i32"] == Typed(TypeCode.INT32, 7)
    assert encode_map(exact) == raw


def test_unknown_type_codes_pass_through_by_their_width() -> None:
    # 0x3f: a fixed 8-octet type the spec does not name; 0x9f: 2-octet sized variable.
    raw = bytes([0x3F]) + b"ABCDEFGH"
    assert decode_value(raw) == Typed(0x3F, b"ABCDEFGH")
    assert encode_value(Typed(0x3F, b"ABCDEFGH")) == raw
    sized = bytes([0x9F, 0, 3]) + b"xyz"
    assert decode_value(sized) == Typed(0x9F, b"xyz")
    assert encode_value(decode_value(sized)) == sized
    assert fixed_width(0xC5) == 5
    with pytest.raises(DecodeError, match="reserved"):
        decode_value(bytes([0xB0, 0]))


def test_text_not_in_its_encoding_is_kept_as_bytes() -> None:
    raw = bytes([TypeCode.STR16, 0, 2, 0xFF, 0xFE])
    assert decode_value(raw) == b"\xff\xfe"
    assert encode_value(decode_value(raw, exact=True)) == raw


@pytest.mark.parametrize(
    "raw",
    [
        b"",  # nothing
        bytes([TypeCode.STR16, 0, 9]) + b"short",  # string runs out
        bytes([TypeCode.MAP, 0, 0, 0, 9, 0, 0, 0, 1]),  # map runs out
        bytes([TypeCode.MAP, 0, 0, 0, 4, 0, 0, 0, 1]),  # count without entries
        bytes([TypeCode.LIST, 0, 0, 0, 5, 0, 0, 0, 0, 0]),  # size and count disagree
        bytes([TypeCode.ARRAY, 0, 0, 0, 5, 0xF0, 0xFF, 0xFF, 0xFF, 0xFF]),  # void flood
        bytes([TypeCode.STRUCT32, 0, 0, 0, 1, 0]),  # struct32 shorter than its code
        bytes([TypeCode.UINT32, 1, 2]),  # fixed value truncated
        bytes([TypeCode.INT8, 1, 2]),  # trailing octets
    ],
)
def test_malformed_values_raise_decode_error(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_value(raw)


def test_nesting_is_bounded() -> None:
    raw = encode_value([])
    for _ in range(150):
        raw = bytes([TypeCode.LIST]) + (len(raw) + 4).to_bytes(4, "big") + b"\0\0\0\1" + raw
    with pytest.raises(DecodeError, match="nested deeper"):
        decode_value(raw)


def test_bad_values_raise_encode_error() -> None:
    with pytest.raises(EncodeError):
        encode_value(1 << 70)
    with pytest.raises(EncodeError):
        encode_value(object())  # type: ignore[arg-type]
    with pytest.raises(EncodeError):
        DeliveryProperties(priority=300).encode()
    with pytest.raises(EncodeError):
        encode_value(Typed(TypeCode.BIN16, b"x"))
    with pytest.raises(EncodeError):
        encode_value(CommandFragment(1, ()))  # no struct code: cannot be a struct32


def test_struct_decoding_checks_sizes_codes_and_flags() -> None:
    good = Xid(1, b"g", b"b").encode()
    assert Xid.decode(good) == Xid(1, b"g", b"b")
    with pytest.raises(DecodeError, match="code"):
        Xid.decode(good[:4] + b"\x06\x05" + good[6:])
    with pytest.raises(DecodeError):
        Xid.decode(good[:-1])
    with pytest.raises(DecodeError, match="packing flags"):
        Xid.decode(good[:6] + b"\x0f\x00" + good[8:])
    with pytest.raises(DecodeError):
        Xid.decode(good + b"\x00")
    assert Xid().missing_required() == ["format", "global_id", "branch_id"]


def test_unknown_struct32_codes_are_kept_opaque() -> None:
    raw = b"\x00\x00\x00\x05\x7f\x01abc"
    value = decode_struct32(raw)
    assert value == OpaqueStruct(0x7F01, b"abc")
    assert encode_value(value)[1:] == raw
    assert decode_header(raw + raw) == [value, value]


def test_commands_and_controls_reject_garbage() -> None:
    with pytest.raises(DecodeError, match="unknown command"):
        decode_command(b"\x63\x01\x01\x00\x00\x00")
    with pytest.raises(DecodeError, match="unknown control"):
        decode_control(b"\x01")
    with pytest.raises(DecodeError, match="session header"):
        decode_command(b"\x04\x02\x02\x00\x00\x00")
    accept = MessageAccept(SequenceSet.of(1)).encode(sync=True)
    assert decode_command(accept) == (MessageAccept(SequenceSet.of(1)), True)
    with pytest.raises(DecodeError):
        decode_command(accept[:-1])
    with pytest.raises(DecodeError, match=r"not a message\.transfer"):
        MessageTransfer.decode(accept)
