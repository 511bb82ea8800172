"""Unit tests for the AMQP 0-9-1 field-table codec (golden bytes from the spec and errata)."""

from __future__ import annotations

import datetime
import decimal
import struct
from typing import Any

import amqp.serialization
import pika.data
import pytest

from leveret.errors import AMQPError, SyntaxError_
from leveret.protocol.amqp091.fieldtable import (
    MAX_DEPTH,
    FieldTable,
    FieldValue,
    decode_array,
    decode_table,
    decode_value,
    encode_array,
    encode_table,
    encode_value,
    field_values_equal,
)

# Left out of the compiled pass (scripts/test): the field-table codec is not compiled.
pytestmark = pytest.mark.pure_only

UTC = datetime.UTC


def table_bytes(*entries: bytes) -> bytes:
    """A field table from raw ``shortstr key + type + value`` entries."""
    body = b"".join(entries)
    return struct.pack(">I", len(body)) + body


def entry(key: str, raw: bytes) -> bytes:
    kb = key.encode()
    return bytes([len(kb)]) + kb + raw


# (type letter + value bytes, decoded Python value)
GOLDEN: list[tuple[bytes, Any]] = [
    (b"t\x01", True),
    (b"t\x00", False),
    (b"t\x02", True),
    (b"b\xff", -1),
    (b"b\x7f", 127),
    (b"B\xff", 255),
    (b"s\xff\xfe", -2),
    (b"u\xff\xfe", 65534),
    (b"I\xff\xff\xff\xfd", -3),
    (b"i\xff\xff\xff\xfd", 4294967293),
    (b"l\xff\xff\xff\xff\xff\xff\xff\xfc", -4),
    (b"l\x7f\xff\xff\xff\xff\xff\xff\xff", 2**63 - 1),
    (b"L\xff\xff\xff\xff\xff\xff\xff\xfc", -4),
    (b"U\xff\xfe", -2),
    (b"f" + struct.pack(">f", 1.5), 1.5),
    (b"d" + struct.pack(">d", -2.25), -2.25),
    (b"D\x02\x00\x00\x00\x96", decimal.Decimal("1.50")),
    (b"D\x00\xff\xff\xff\xff", decimal.Decimal(-1)),
    (b"S\x00\x00\x00\x03h\xc3\xa9", "h\u00e9"),
    (b"S\x00\x00\x00\x00", ""),
    (b"S\x00\x00\x00\x02\xff\xfe", b"\xff\xfe"),
    (b"x\x00\x00\x00\x03abc", b"abc"),
    (b"A\x00\x00\x00\x00", []),
    (b"A\x00\x00\x00\x08I\x00\x00\x00\x01Vt\x01", [1, None, True]),
    (b"T\x00\x00\x00\x00\x5e\x0b\xe1\x00", datetime.datetime(2020, 1, 1, tzinfo=UTC)),
    (b"F\x00\x00\x00\x00", {}),
    (b"F\x00\x00\x00\x03\x01kV", {"k": None}),
    (b"V", None),
]


@pytest.mark.parametrize(("raw", "expected"), GOLDEN)
def test_decode_each_type(raw: bytes, expected: Any) -> None:
    data = table_bytes(entry("key", raw))
    table, end = decode_table(data, 0)
    assert end == len(data)
    assert table == {"key": expected}
    assert type(table["key"]) is type(expected)
    # memoryview input decodes identically
    assert decode_table(memoryview(data), 0) == (table, end)
    # as an array element too
    arr = struct.pack(">I", len(raw)) + raw
    assert decode_array(arr, 0) == ([expected], len(arr))
    assert decode_value(raw, 0) == (expected, len(raw))


def test_timestamp_is_tz_aware_utc() -> None:
    value, _ = decode_value(b"T\x00\x00\x00\x00\x00\x00\x00\x00", 0)
    assert isinstance(value, datetime.datetime)
    assert value.tzinfo is not None
    assert value == datetime.datetime(1970, 1, 1, tzinfo=UTC)


def test_decode_at_offset_and_returns_end() -> None:
    tbl = table_bytes(entry("a", b"V"))
    data = b"junk" + tbl + b"tail"
    assert decode_table(data, 4) == ({"a": None}, 4 + len(tbl))


def test_decode_multiple_keys_and_nesting() -> None:
    inner = table_bytes(entry("n", b"B\x07"))
    data = table_bytes(
        entry("first", b"S\x00\x00\x00\x01x"),
        entry("nested", b"F" + inner),
        entry("arr", b"A" + struct.pack(">I", 1 + len(inner)) + b"F" + inner),
    )
    assert decode_table(data, 0)[0] == {"first": "x", "nested": {"n": 7}, "arr": [{"n": 7}]}


# --- encoding --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "raw"),
    [
        (True, b"t\x01"),
        (False, b"t\x00"),
        (0, b"I\x00\x00\x00\x00"),
        (-(2**31), b"I\x80\x00\x00\x00"),
        (2**31 - 1, b"I\x7f\xff\xff\xff"),
        (2**31, b"l\x00\x00\x00\x00\x80\x00\x00\x00"),
        (-(2**31) - 1, b"l\xff\xff\xff\xff\x7f\xff\xff\xff"),
        (-(2**63), b"l\x80" + b"\x00" * 7),
        (1.5, b"d" + struct.pack(">d", 1.5)),
        (decimal.Decimal("1.50"), b"D\x02\x00\x00\x00\x96"),
        (decimal.Decimal("-12.3"), b"D\x01\xff\xff\xff\x85"),
        (decimal.Decimal("1E+3"), b"D\x00\x00\x00\x03\xe8"),
        ("h\u00e9", b"S\x00\x00\x00\x03h\xc3\xa9"),
        (b"\x00\xff", b"x\x00\x00\x00\x02\x00\xff"),
        (bytearray(b"ab"), b"x\x00\x00\x00\x02ab"),
        (memoryview(b"ab"), b"x\x00\x00\x00\x02ab"),
        (datetime.datetime(2020, 1, 1, tzinfo=UTC), b"T\x00\x00\x00\x00\x5e\x0b\xe1\x00"),
        (datetime.datetime(2020, 1, 1), b"T\x00\x00\x00\x00\x5e\x0b\xe1\x00"),
        (
            datetime.datetime(2020, 1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=1))),
            b"T\x00\x00\x00\x00\x5e\x0b\xe1\x00",
        ),
        ([], b"A\x00\x00\x00\x00"),
        ((1, None), b"A\x00\x00\x00\x06I\x00\x00\x00\x01V"),
        ({}, b"F\x00\x00\x00\x00"),
        ({"k": None}, b"F\x00\x00\x00\x03\x01kV"),
        (None, b"V"),
    ],
)
def test_encode_value(value: Any, raw: bytes) -> None:
    assert encode_value(value) == raw


def test_encode_table_none_and_empty() -> None:
    assert encode_table(None) == b"\x00\x00\x00\x00"
    assert encode_table({}) == b"\x00\x00\x00\x00"


def test_encode_table_golden() -> None:
    assert encode_table({"a": 1, "bb": "x"}) == table_bytes(
        entry("a", b"I\x00\x00\x00\x01"), entry("bb", b"S\x00\x00\x00\x01x")
    )


def test_encode_array() -> None:
    assert encode_array([True, "x"]) == b"\x00\x00\x00\x08t\x01S\x00\x00\x00\x01x"


def test_encode_bool_subclass_of_int_is_bool() -> None:
    assert encode_value(True) == b"t\x01"
    assert decode_table(encode_table({"b": True}), 0)[0]["b"] is True


def test_round_trip_nested() -> None:
    table: FieldTable = {
        "s": "text",
        "i": -5,
        "big": 2**62,
        "f": 0.1,
        "dec": decimal.Decimal("-3.14"),
        "raw": b"\x00\x01",
        "ts": datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
        "arr": [1, "two", [3.0, None], {"x": False}],
        "tbl": {"deep": {"deeper": {"v": None}}},
        "none": None,
    }
    assert decode_table(encode_table(table), 0)[0] == table


@pytest.mark.parametrize(
    "value",
    [
        2**63,
        -(2**63) - 1,
        decimal.Decimal("NaN"),
        decimal.Decimal("Infinity"),
        decimal.Decimal("1E-300"),
        decimal.Decimal("12345678901"),
        datetime.datetime(1969, 12, 31, tzinfo=UTC),
        object(),
        {1: 2},
        "\ud800",
        [2**64],
    ],
)
def test_encode_rejects(value: Any) -> None:
    with pytest.raises(SyntaxError_):
        encode_value(value)
    with pytest.raises(SyntaxError_):
        encode_table({"k": value})


def test_encode_key_too_long() -> None:
    encode_table({"k" * 255: 1})
    with pytest.raises(SyntaxError_, match="255"):
        encode_table({"k" * 256: 1})
    with pytest.raises(SyntaxError_):
        encode_table({"\u00e9" * 128: 1})  # 256 bytes in UTF-8


def test_encode_too_deep() -> None:
    value: FieldValue = None
    for _ in range(MAX_DEPTH + 5):
        value = [value]
    with pytest.raises(SyntaxError_, match="deeper"):
        encode_value(value)


def test_decimal_trailing_zeros_trimmed_to_fit_scale() -> None:
    value, _ = decode_value(encode_value(decimal.Decimal("1.0E-254")), 0)
    assert value == decimal.Decimal("1E-254")


# --- malformed input -------------------------------------------------------------------------


BAD_TABLES: list[tuple[str, bytes]] = [
    ("empty", b""),
    ("short length", b"\x00\x00\x00"),
    ("length past end", b"\x00\x00\x00\x05\x01aV"),
    ("key past end", b"\x00\x00\x00\x03\x05abV"),
    ("key without type", b"\x00\x00\x00\x02\x01a"),
    ("unknown type", table_bytes(entry("a", b"Z"))),
    ("spec short string letter", table_bytes(entry("a", b"s\x00"))),
    ("truncated int", table_bytes(entry("a", b"I\x00\x00"))),
    ("truncated in buffer", b"\x00\x00\x00\x04\x01aI\x00"),
    ("longstr past end", table_bytes(entry("a", b"S\x00\x00\x00\x09abc"))),
    ("bytes past end", table_bytes(entry("a", b"x\xff\xff\xff\xffabc"))),
    ("bad utf-8 key", table_bytes(b"\x02\xff\xfeV")),
    ("value crosses table end", b"\x00\x00\x00\x04\x01aI\x00\x00\x00\x00\x00"),
    ("nested length mismatch", table_bytes(entry("a", b"F\x00\x00\x00\x01V"))),
    (
        "nested value crosses end",
        table_bytes(entry("a", b"F\x00\x00\x00\x03\x01bI\x00\x00\x00\x00")),
    ),
    ("array crosses end", table_bytes(entry("a", b"A\x00\x00\x00\x02I\x00\x00\x00\x00"))),
    ("array unknown type", table_bytes(entry("a", b"A\x00\x00\x00\x01?"))),
    ("timestamp beyond datetime", table_bytes(entry("a", b"T\xff\xff\xff\xff\xff\xff\xff\xff"))),
    ("truncated decimal", table_bytes(entry("a", b"D\x01\x00"))),
]


@pytest.mark.parametrize(("name", "data"), BAD_TABLES, ids=[n for n, _ in BAD_TABLES])
def test_decode_malformed(name: str, data: bytes) -> None:
    with pytest.raises(SyntaxError_):
        decode_table(data, 0)
    with pytest.raises(SyntaxError_):
        decode_table(memoryview(data), 0)


def test_decode_offset_past_end() -> None:
    with pytest.raises(SyntaxError_):
        decode_table(b"\x00\x00\x00\x00", 10)


def test_decode_array_malformed() -> None:
    with pytest.raises(SyntaxError_):
        decode_array(b"\x00\x00\x00\x05V", 0)
    with pytest.raises(SyntaxError_):
        decode_array(b"\x00\x00\x00\x01Q", 0)
    with pytest.raises(SyntaxError_):
        decode_array(b"\x00\x00", 0)


def test_decode_value_malformed() -> None:
    with pytest.raises(SyntaxError_):
        decode_value(b"", 0)
    with pytest.raises(SyntaxError_):
        decode_value(b"Q", 0)
    with pytest.raises(SyntaxError_):
        decode_value(b"I\x00", 0)


def _nested(depth: int, letter: bytes) -> bytes:
    data = b"V"
    for _ in range(depth):
        if letter == b"A":
            data = b"A" + struct.pack(">I", len(data)) + data
        else:
            data = b"F" + table_bytes(entry("k", data))
    return data


@pytest.mark.parametrize("letter", [b"A", b"F"])
def test_nesting_depth_capped(letter: bytes) -> None:
    ok = table_bytes(entry("k", _nested(MAX_DEPTH, letter)))
    decode_table(ok, 0)
    deep = table_bytes(entry("k", _nested(MAX_DEPTH + 1, letter)))
    with pytest.raises(SyntaxError_, match="deeper"):
        decode_table(deep, 0)
    very_deep = table_bytes(entry("k", _nested(5000, letter)))
    with pytest.raises(SyntaxError_, match="deeper"):
        decode_table(very_deep, 0)


def test_errors_are_amqp_errors() -> None:
    with pytest.raises(AMQPError) as info:
        decode_table(b"\x01", 0)
    assert info.value.reply_code == 502


# --- interop ---------------------------------------------------------------------------------

PIKA_CLIENT_PROPERTIES: dict[str, Any] = {
    "product": "Pika Python Client Library",
    "platform": "Python 3.11.9",
    "capabilities": {
        "authentication_failure_close": True,
        "basic.nack": True,
        "connection.blocked": True,
        "consumer_cancel_notify": True,
        "publisher_confirms": True,
    },
    "information": "See http://pika.rtfd.org",
    "version": "1.3.2",
    "connection_name": "leveret-test",
}


def test_decodes_pika_client_properties() -> None:
    pieces: list[bytes] = []
    pika.data.encode_table(pieces, PIKA_CLIENT_PROPERTIES)
    data = b"".join(pieces)
    table, end = decode_table(data, 0)
    assert end == len(data)
    assert table == PIKA_CLIENT_PROPERTIES


def test_decodes_pika_all_types() -> None:
    source: dict[str, Any] = {
        "str": "h\u00e9llo",
        "bytes": b"\x00\xff",
        "int": 7,
        "neg": -7,
        "long": 2**40,
        "bool": False,
        "dec": decimal.Decimal("3.25"),
        "ts": datetime.datetime(2021, 2, 3, 4, 5, 6, tzinfo=UTC),
        "list": [1, "a", [True], {"n": None}],
        "dict": {"x": {"y": 1}},
        "none": None,
    }
    pieces: list[bytes] = []
    pika.data.encode_table(pieces, source)
    data = b"".join(pieces)
    assert decode_table(data, 0) == (source, len(data))
    # and pika decodes what we encode
    decoded, end = pika.data.decode_table(encode_table(source), 0)
    assert end == len(encode_table(source))
    assert decoded["long"] == 2**40
    assert decoded["str"] == "h\u00e9llo"
    assert decoded["dec"] == decimal.Decimal("3.25")
    assert decoded["list"] == [1, "a", [True], {"n": None}]


def test_decodes_py_amqp_tables() -> None:
    source: dict[str, Any] = {
        "product": "py-amqp",
        "capabilities": {"consumer_cancel_notify": True, "connection.blocked": True},
        "int": -12,
        "long": -(2**40),
        "float": 0.5,
        "dec": decimal.Decimal("-1.5"),
        "ts": datetime.datetime(2022, 1, 1, tzinfo=UTC),
        "list": [1, "x", None, {"k": "v"}],
        "none": None,
    }
    data = amqp.serialization.dumps("F", [source])
    assert decode_table(data, 0) == (source, len(data))
    # and py-amqp decodes what we encode
    ours = encode_table(source)
    decoded, _ = amqp.serialization.loads("F", ours, 0)
    assert decoded[0]["long"] == -(2**40)
    assert decoded[0]["capabilities"] == source["capabilities"]


# --- field_values_equal ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (1, 1, True),
        (1, 1.0, True),
        (1, decimal.Decimal("1.00"), True),
        (0.5, decimal.Decimal("0.5"), True),
        (decimal.Decimal("0.1"), 0.1, False),
        (1, 2, False),
        (True, True, True),
        (True, 1, False),
        (1, True, False),
        (False, 0, False),
        (0.0, False, False),
        ("abc", "abc", True),
        ("abc", b"abc", True),
        (b"abc", "abc", True),
        ("h\u00e9", b"h\xc3\xa9", True),
        ("abc", "abd", False),
        ("1", 1, False),
        (1, "1", False),
        (None, None, True),
        (None, 0, False),
        ("", None, False),
        ([1, "a"], [1.0, b"a"], True),
        ([1], [1, 2], False),
        ([1], (1,), True),
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": 1}, {"b": 1}, False),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ({"a": [True]}, {"a": [1]}, False),
        ([], {}, False),
        (datetime.datetime(1970, 1, 1, 0, 0, 5, tzinfo=UTC), 5, True),
        (datetime.datetime(1970, 1, 1, 0, 0, 5, tzinfo=UTC), 6, False),
        (
            datetime.datetime(2020, 1, 1, tzinfo=UTC),
            datetime.datetime(2020, 1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=1))),
            True,
        ),
    ],
)
def test_field_values_equal(a: Any, b: Any, equal: bool) -> None:
    assert field_values_equal(a, b) is equal
    assert field_values_equal(b, a) is equal
