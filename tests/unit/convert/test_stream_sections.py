"""The direct encoder of a 0-9-1 property set's 1.0 sections (convert/stream_sections.py)
against the general mapping (convert/stream_records.py ``_sections``): the same bytes for
every property set it takes, over property bytes with headers of every field type."""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.convert import stream_records as stream_message
from leveret.convert.amqp091 import wire_message
from leveret.convert.stream_sections import Sections, sections
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import types as t
from leveret.spark.sink import _fast_properties

# One header value as it goes on the wire: type letter + value bytes (every letter
# RabbitMQ and the spec define, the ones only some clients send included).
_PACKED = {
    "b": (">b", st.integers(-128, 127)),
    "B": (">B", st.integers(0, 255)),
    "s": (">h", st.integers(-(2**15), 2**15 - 1)),
    "u": (">H", st.integers(0, 2**16 - 1)),
    "U": (">h", st.integers(-(2**15), 2**15 - 1)),
    "I": (">i", st.integers(-(2**31), 2**31 - 1)),
    "i": (">I", st.integers(0, 2**32 - 1)),
    "l": (">q", st.integers(-(2**63), 2**63 - 1)),
    "L": (">q", st.integers(-(2**63), 2**63 - 1)),
    "f": (">f", st.floats(width=32, allow_nan=False)),
    "d": (">d", st.floats(allow_nan=False)),
    "T": (">Q", st.integers(0, 253402300799)),
}


def _longstr(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _shortstr(text: str) -> bytes:
    return bytes((len(text.encode()),)) + text.encode()


def _packed(letter: str, fmt: str, strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    return strategy.map(lambda v: letter.encode() + struct.pack(fmt, v))


_usual = st.one_of(
    *(
        _packed(letter, fmt, strategy)
        for letter, (fmt, strategy) in _PACKED.items()
        if letter != "T"
    ),
    st.booleans().map(lambda v: b"t" + bytes((v,))),
    st.just(b"V"),
    st.text(max_size=300).map(lambda v: b"S" + _longstr(v.encode())),
    st.binary(max_size=20).map(lambda v: b"S" + _longstr(v)),  # not always UTF-8
    st.binary(max_size=300).map(lambda v: b"x" + _longstr(v)),
)
_scalar = st.one_of(
    _usual,
    st.integers(0, 253402300799).map(lambda v: b"T" + struct.pack(">Q", v)),
    st.tuples(st.integers(0, 10), st.integers(-(2**31), 2**31 - 1)).map(
        lambda v: b"D" + struct.pack(">Bi", *v)
    ),
)
_keys = st.text(max_size=12).filter(lambda k: len(k.encode()) < 256)


def _table(entries: list[tuple[str, bytes]]) -> bytes:
    return _longstr(b"".join(_shortstr(k) + v for k, v in entries))


_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda vs: b"A" + _longstr(b"".join(vs))),
        st.lists(st.tuples(_keys, inner), max_size=3).map(lambda es: b"F" + _table(es)),
    ),
    max_leaves=4,
)
_short = st.text(max_size=20).filter(lambda s: len(s.encode()) < 256)
_ascii = st.text(st.characters(max_codepoint=127), max_size=20)


@st.composite
def _raw_properties(draw: st.DrawFn) -> bytes:
    """Basic property bytes: any subset of the fields, headers of every field type (half
    of them only with what the direct path takes, so that it is well exercised)."""
    usual = draw(st.booleans())
    flags = 0
    out = b""
    for bit, strategy in (
        (0x8000, _ascii if usual else _short),  # content-type
        (0x4000, _ascii if usual else _short),  # content-encoding
    ):
        if draw(st.booleans()):
            flags |= bit
            out += _shortstr(draw(strategy))
    if usual or draw(st.booleans()):
        flags |= 0x2000
        value = _usual if usual else _value
        out += _table(draw(st.lists(st.tuples(_keys, value), max_size=8)))
    for bit in (0x1000, 0x0800):  # delivery-mode, priority
        if draw(st.booleans()):
            flags |= bit
            out += bytes((draw(st.integers(0, 255)),))
    expirations = st.integers(0, 2**40).map(str)
    if not usual:
        expirations |= _short
    for bit, strategy in (
        (0x0400, _short),  # correlation-id
        (0x0200, _short),  # reply-to
        (0x0100, expirations),
        (0x0080, _short),  # message-id
    ):
        if draw(st.booleans()):
            flags |= bit
            out += _shortstr(draw(strategy))
    if draw(st.booleans()):  # timestamp
        flags |= 0x0040
        times = st.integers(0, 2**40) if usual else st.integers(0, 2**64 - 1)
        out += struct.pack(">Q", draw(times))
    for bit in (0x0020, 0x0010, 0x0008, 0x0004):  # type, user-id, app-id, cluster-id
        if draw(st.booleans()):
            flags |= bit
            out += _shortstr(draw(_short))
    return struct.pack(">H", flags) + out


def _general(props: BasicProperties) -> Sections | None:
    try:
        header, annotations, rest = stream_message._sections(props)
    except ValueError:
        return None
    items = b"".join(t.encode_value(k) + t.encode_value(v) for k, v in annotations.items())
    return Sections(header, items, 2 * len(annotations), rest)


@settings(max_examples=300, deadline=None)
@given(_raw_properties())
def test_direct_sections_are_the_general_mappings_bytes(raw: bytes) -> None:
    props = BasicProperties.decode(raw)
    direct = sections(props)
    if direct is None:
        return
    general = _general(props)
    assert general is not None
    assert (direct.header, direct.annotations, direct.count, direct.rest) == (
        general.header,
        general.annotations,
        general.count,
        general.rest,
    )


@settings(max_examples=100, deadline=None)
@given(_raw_properties(), st.binary(max_size=300))
def test_a_stored_record_is_the_same_whichever_path_made_it(raw: bytes, body: bytes) -> None:
    """record_parts (which takes the direct path when it can) against the general path."""
    props = BasicProperties.decode(raw)
    general = _general(props)
    stream_message._heads.clear()
    stream_message._prepared.clear()
    try:
        head, _ = stream_message.record_parts(wire_message("ex", "rk", raw, body))
    except ValueError:
        assert general is None  # both paths refuse it (a timestamp beyond 1.0's range)
        return
    assert general is not None
    items = (
        stream_message._EXCHANGE_KEY
        + t.encode_value("ex")
        + stream_message._ROUTING_KEY_KEY
        + t.encode_value("rk")
        + stream_message._PROPERTIES_KEY
        + t.encode_value(raw)
        + general.annotations
    )
    expected = b"".join(
        (
            general.header,
            b"\x00\x53\x72\xd1",
            struct.pack(">II", len(items) + 4, 6 + general.count),
            items,
            general.rest,
        )
    )
    assert head == expected + stream_message._data(body)
    message = stream_message.message_of(head + body)
    assert (message.raw_properties, message.body) == (raw, body)


def test_what_a_publisher_usually_sends_takes_the_direct_path() -> None:
    sink = BasicProperties.decode(_fast_properties(b"spark-1-0", 42, b"\x04m-42", True))
    assert sections(sink) is not None
    full = BasicProperties(
        content_type="application/json",
        content_encoding="gzip",
        headers={"s": "x", "n": 7, "big": 2**40, "f": 1.5, "t": True, "b": b"\x00", "v": None},
        delivery_mode=2,
        priority=5,
        correlation_id="c-1",
        reply_to="replies",
        expiration="60000",
        message_id="m-1",
        timestamp=1_700_000_000,
        type="order",
        user_id="guest",
        app_id="app",
        cluster_id="cl",
    )
    assert sections(full) is not None
    assert sections(BasicProperties()) is not None


def test_edges_of_the_encodings() -> None:
    """Where an encoding changes width: small/long integers, 8/32-bit strings, lists, maps."""
    edges: list[BasicProperties] = [
        BasicProperties(headers={"n": n}) for n in (-129, -128, 127, 128, -(2**63), 2**63 - 1)
    ]
    edges += [BasicProperties(headers={"s": "x" * n, "b": b"y" * n}) for n in (253, 255, 256)]
    edges += [BasicProperties(message_id="m" * n) for n in (240, 250, 251, 252, 253, 255)]
    edges += [BasicProperties(headers={f"k{i}": i for i in range(n)}) for n in (60, 127, 128)]
    edges += [BasicProperties(expiration=str(n)) for n in (0, 1, 255, 256, 2**32 - 1, 2**32)]
    edges += [BasicProperties(priority=p, delivery_mode=1) for p in (0, 255)]
    edges += [BasicProperties(timestamp=n) for n in (0, (2**63 - 1) // 1000)]
    for props in edges:
        direct = sections(props)
        general = _general(props)
        assert direct is not None, props
        assert general is not None, props
        assert (direct.header, direct.annotations, direct.count, direct.rest) == (
            general.header,
            general.annotations,
            general.count,
            general.rest,
        ), props


def test_unusual_values_are_left_to_the_general_mapping() -> None:
    for props in (
        BasicProperties(headers={"nested": {"a": 1}}),
        BasicProperties(headers={"list": [1]}),
        BasicProperties(content_type="tëxt/plain"),
        BasicProperties(content_encoding="gzïp"),
        BasicProperties(expiration="soon"),
        BasicProperties(expiration="١٢"),  # digits, not ASCII ones
        BasicProperties(timestamp=2**63),
    ):
        assert sections(props) is None, props
