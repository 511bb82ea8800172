"""The AMQP 1.0 type system: every encoding of every primitive, smallest-encoding choice,
described and array values, and bad input ending as DecodeError only."""

from __future__ import annotations

import struct
import uuid

import pytest

from leveret.protocol.amqp10 import Accepted, Error, Open, Source
from leveret.protocol.amqp10.errors import DecodeError, Scope
from leveret.protocol.amqp10.types import (
    Array,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    Described,
    Float32,
    Int,
    Short,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
    Value,
    composite_for,
    decode_value,
    decode_whole,
    encode_value,
    skip_value,
)
from tests.unit.protocol.amqp10.values import same

U = uuid.UUID("12345678-1234-5678-1234-567812345678")

# (wire bytes in a given encoding, the value decoded from them). Several are not the
# smallest encoding of their value: a peer may send any of them.
EVERY_ENCODING: list[tuple[str, Value]] = [
    ("40", None),
    ("41", True),
    ("42", False),
    ("5601", True),
    ("5600", False),
    ("50ff", UByte(255)),
    ("60ffff", UShort(65535)),
    ("70000000ff", UInt(255)),
    ("52ff", UInt(255)),
    ("43", UInt(0)),
    ("800000000000000005", ULong(5)),
    ("5305", ULong(5)),
    ("44", ULong(0)),
    ("51ff", Byte(-1)),
    ("61fffe", Short(-2)),
    ("71fffffffd", Int(-3)),
    ("54fc", Int(-4)),
    ("81fffffffffffffffb", -5),
    ("55fa", -6),
    ("723fc00000", Float32(1.5)),
    ("82400c000000000000", 3.5),
    ("7401020304", Decimal32(b"\x01\x02\x03\x04")),
    ("840102030405060708", Decimal64(bytes(range(1, 9)))),
    ("94" + bytes(range(16)).hex(), Decimal128(bytes(range(16)))),
    ("730001f600", Char("\U0001f600")),
    ("83" + (1311704463521).to_bytes(8, "big").hex(), Timestamp(1311704463521)),
    ("98" + U.bytes.hex(), U),
    ("a003616263", b"abc"),
    ("b000000003616263", b"abc"),
    ("a103c3a978", "\u00e9x"),
    ("b100000003c3a978", "\u00e9x"),
    ("a303616263", Symbol("abc")),
    ("b300000003616263", Symbol("abc")),
    ("45", []),
    ("c003015201", [UInt(1)]),
    ("d0000000050000000141", [True]),
    ("c103024142", {True: False}),
    ("d10000000600000002" + "4142", {True: False}),
    ("e00402520102", Array("uint", (UInt(1), UInt(2)))),
    ("e0050270000000010000000002", None),  # placeholder replaced below
    ("f000000007000000027000000001000000" + "02", None),  # placeholder replaced below
    ("005303a10178", Described(ULong(3), "x")),
    ("00a303666f6fa10178", Described(Symbol("foo"), "x")),
]
# Arrays: one constructor, every element in its width.
EVERY_ENCODING[-4] = ("e00a02700000000100000002", Array("uint", (UInt(1), UInt(2))))
EVERY_ENCODING[-3] = ("f00000000d00000002700000000100000002", Array("uint", (UInt(1), UInt(2))))


@pytest.mark.parametrize(
    ("hexed", "value"), EVERY_ENCODING, ids=[h[:12] for h, _ in EVERY_ENCODING]
)
def test_every_encoding_decodes(hexed: str, value: Value) -> None:
    data = bytes.fromhex(hexed)
    got = decode_whole(data)
    assert same(got, value), got
    assert skip_value(data, 0) == len(data)
    # Re-encoding gives the smallest form, which decodes to the same value.
    again = encode_value(got)
    assert len(again) <= len(data)
    assert same(decode_whole(again), value)


@pytest.mark.parametrize(
    ("value", "hexed"),
    [
        (UInt(0), "43"),
        (UInt(255), "52ff"),
        (UInt(256), "7000000100"),
        (ULong(0), "44"),
        (ULong(7), "5307"),
        (ULong(2**64 - 1), "80ffffffffffffffff"),
        (Int(-128), "5480"),
        (Int(128), "7100000080"),
        (127, "557f"),
        (-129, "81ffffffffffffff7f"),
        (True, "41"),
        (False, "42"),
        ("", "a100"),
        ("x" * 255, "a1ff" + "78" * 255),
        ("x" * 256, "b100000100" + "78" * 256),
        (b"", "a000"),
        ([], "45"),
        ({}, "c10100"),
        (Array("symbol", ()), "e00200a3"),
        (Array("symbol", (Symbol("a"),)), "e00401a30161"),
        (Array("boolean", (True, False)), "e00402560100"),
        (Array("uint", (UInt(1), UInt(255))), "e0040252 01ff".replace(" ", "")),
        (Array("uint", (UInt(1), UInt(256))), "e00a0270 00000001 00000100".replace(" ", "")),
        (Array("long", (-1, 2)), "e0040255ff02"),
    ],
)
def test_smallest_encoding(value: Value, hexed: str) -> None:
    assert encode_value(value).hex() == hexed


def test_spec_examples() -> None:
    # Type-system seed, "Primitive Format Code (String)" and the composite "book" example.
    hello = b"Hello Glorious Messaging World"
    assert encode_value("Hello Glorious Messaging World") == b"\xa1\x1e" + hello
    authors = Array("string", ("Rob J. Godfrey", "Rafael H. Schloming"))
    book = b"".join(
        (
            b"\x00\xa3\x11example:book:list\xc0\x40\x03",
            b"\xa1\x15AMQP for & by Dummies",
            b"\xe0\x25\x02\xa1\x0eRob J. Godfrey\x13Rafael H. Schloming",
            b"\x40",
        )
    )
    got = decode_whole(book)
    assert got == Described(Symbol("example:book:list"), ["AMQP for & by Dummies", authors, None])
    assert encode_value(authors) == book[book.index(b"\xe0") : -1]


def test_described_array_keeps_descriptor() -> None:
    arr = Array("list", ([UInt(1)], []), descriptor=Symbol("x:y"))
    data = encode_value(arr)
    assert same(decode_whole(data), arr)


def test_registered_descriptors_build_the_generated_class() -> None:
    assert composite_for(0x24) is Accepted
    assert composite_for("amqp:accepted:list") is Accepted
    assert composite_for(0x1234) is None
    # Symbolic descriptor and a 64-bit numeric one decode to the same class.
    assert decode_whole(b"\x00\xa3\x12amqp:accepted:list\x45") == Accepted()
    assert decode_whole(b"\x00\x80" + (0x24).to_bytes(8, "big") + b"\x45") == Accepted()


def test_composite_round_trip_and_defaults() -> None:
    o = Open(container_id="c", max_frame_size=4294967295, channel_max=7)
    data = o.encode()
    # The defaulted max-frame-size is sent as null, the trailing nulls are dropped.
    assert data.hex() == "005310c00904a101634040600007"
    assert decode_whole(data) == o
    assert Source().encode() == b"\x00\x53\x28\x45"


def test_composite_fields_beyond_the_spec_are_skipped() -> None:
    # error with condition, description, info and two extra fields a newer peer might add.
    body = b"\xa3\x01x\xa1\x01d\x40\x52\x07\xa1\x02zz"
    data = b"\x00\x53\x1d\xc0" + bytes((len(body) + 1, 5)) + body
    assert decode_whole(data) == Error(condition="x", description="d")


def test_unknown_described_kept() -> None:
    value = Described(Symbol("rabbitmq:stream-offset-spec"), "first")
    assert decode_whole(encode_value(value)) == value


def test_wrappers_compare_as_their_base() -> None:
    assert UInt(5) == 5
    assert hash(Symbol("a")) == hash("a")
    keyed: dict[str, int] = {Symbol("k"): 1}
    assert keyed["k"] == 1
    assert encode_value(Float32(0.5)) == b"\x72" + struct.pack(">f", 0.5)


@pytest.mark.parametrize(
    "value",
    [
        UByte(256),
        UInt(-1),
        ULong(2**64),
        Int(2**31),
        2**63,
        Char("ab"),
        Decimal32(b"123"),
        Symbol("\u00e9"),
        "\ud800",
        object(),
        Array("nonsense", ()),
        Array("boolean", (1,)),
        Array("array", (1,)),
    ],
    # Not repr: a plain object's names its address, and each xdist worker must collect
    # the same ids.
    ids=lambda value: "object()" if type(value) is object else repr(value),
)
def test_unencodable_values_raise_value_error(value: object) -> None:
    with pytest.raises(ValueError, match=r"encod|char|decimal|array"):
        encode_value(value)  # type: ignore[arg-type]


BAD = [
    ("", "truncated"),
    ("70000001", "truncated"),
    ("a005616263", "past the end"),
    ("b0ffffffff61", "past the end"),
    ("a102c328", "utf-8"),
    ("a30180", "ascii"),
    ("5602", "boolean octet"),
    ("7300110000", "Unicode scalar"),
    ("7300 00d8 00".replace(" ", ""), "Unicode scalar"),
    ("01", "not defined"),
    ("4f", "not defined"),
    ("c003014141", "size does not match"),
    ("c003034141", "cannot hold"),
    ("c1020141", "odd number"),
    ("c1050441424142", "duplicate key"),
    ("c10502c00041 41".replace(" ", ""), "size"),
    ("c10302 4541".replace(" ", ""), "unhashable"),
    ("e0020001", "not a primitive"),
    ("f000000005ffffffff40", "zero-width"),
    ("e003025201", "cannot hold"),
    ("e00401520102", "size does not match"),
    ("0040a100", "null descriptor"),
    ("00", "truncated"),
    ("c00000", "smaller than its count"),
    ("d00000000000", "truncated"),
]


@pytest.mark.parametrize(("hexed", "why"), BAD, ids=[h or "empty" for h, _ in BAD])
def test_bad_input_raises_decode_error(hexed: str, why: str) -> None:
    with pytest.raises(DecodeError, match=why) as info:
        decode_whole(bytes.fromhex(hexed))
    assert info.value.condition == "amqp:decode-error"
    assert info.value.scope is Scope.CONNECTION


def test_deep_nesting_is_a_decode_error() -> None:
    data = b"\xc0\x02\x01" * 200 + b"\x45"
    with pytest.raises(DecodeError, match="nested deeper"):
        decode_value(data)
    described = b"\x00\x53\x01" * 200 + b"\x40"
    with pytest.raises(DecodeError, match="nested deeper"):
        decode_value(described)
    with pytest.raises(DecodeError, match="nested deeper"):
        skip_value(described, 0)


def test_trailing_bytes_are_an_error() -> None:
    with pytest.raises(DecodeError, match="1 bytes after"):
        decode_whole(b"\x40\x40")


def test_decode_accepts_any_buffer() -> None:
    data = encode_value([UInt(1), "x"])
    assert decode_value(memoryview(data)) == decode_value(bytearray(data)) == ([1, "x"], 8)
