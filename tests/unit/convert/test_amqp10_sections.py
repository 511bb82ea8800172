"""The direct encoder of the 0-9-1 -> 1.0 table (convert/amqp10_sections.py) against the
table's general implementation (convert/amqp10_amqp091.py ``general_sections``): the same
bytes for every property set it takes, over property bytes with headers of every field type;
the stored stream record and a 1.0 consumer's payload are the same whichever path made them;
what the direct path leaves to the general one is still converted, never a crash."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.convert import stream_records
from leveret.convert.amqp091 import wire_message
from leveret.convert.amqp10_amqp091 import general_sections, sections_of
from leveret.convert.amqp10_sections import NULL, header_section, sections, uint
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import Header, parse_message
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


class _Long(int):
    """An int subclass, as the field-table decoder's ``Long`` (x-death counts)."""


@settings(max_examples=300, deadline=None)
@given(_raw_properties())
def test_direct_sections_are_the_general_implementations_bytes(raw: bytes) -> None:
    props = BasicProperties.decode(raw)
    general = general_sections(props)  # never raises: the table has an answer for all
    direct = sections(props)
    if direct is not None:
        assert direct.parts() == general.parts()


@settings(max_examples=100, deadline=None)
@given(_raw_properties(), st.binary(max_size=300))
def test_a_stored_record_is_the_same_whichever_path_made_it(raw: bytes, body: bytes) -> None:
    """record_parts (which takes the direct path when it can) against the general path."""
    props = BasicProperties.decode(raw)
    general = general_sections(props)
    stream_records._heads.clear()
    stream_records._prepared.clear()
    head, _ = stream_records.record_parts(wire_message("ex", "rk", raw, body))
    items = (
        stream_records._EXCHANGE_KEY
        + t.encode_value("ex")
        + stream_records._ROUTING_KEY_KEY
        + t.encode_value("rk")
        + stream_records._PROPERTIES_KEY
        + t.encode_value(raw)
        + general.annotations
    )
    expected = b"".join(
        (
            header_section(general),
            b"\x00\x53\x72\xd1",
            struct.pack(">II", len(items) + 4, 6 + general.count),
            items,
            general.rest,
        )
    )
    assert head[: len(expected)] == expected
    record = head + body
    parse_message(record)  # a well-formed 1.0 message
    message = stream_records.message_of(record)
    assert (message.exchange, message.routing_key) == ("ex", "rk")
    assert (message.raw_properties, message.body) == (raw, body)


@settings(max_examples=100, deadline=None)
@given(_raw_properties(), st.binary(max_size=300), st.booleans(), st.integers(0, 300))
def test_a_consumers_payload_is_a_well_formed_message(
    raw: bytes, body: bytes, redelivered: bool, count: int
) -> None:
    props = BasicProperties.decode(raw)
    payload = sections_of(
        props,
        body,
        exchange="ex",
        routing_key="rk",
        redelivered=redelivered,
        delivery_count=count,
        first_acquirer=not redelivered,
    )
    parsed = parse_message(payload)
    header = parsed.header()
    assert header is not None
    assert header.first_acquirer is (not redelivered)
    assert header.delivery_count == (count if redelivered and count else None)
    annotations = parsed.message_annotations()
    assert (annotations["x-exchange"], annotations["x-routing-key"]) == ("ex", "rk")


@pytest.mark.parametrize("durable", [False, True])
@pytest.mark.parametrize("priority", [None, 0, 9, 255])
@pytest.mark.parametrize("ttl", [None, 0, 255, 256, 2**32 - 1])
@pytest.mark.parametrize("acquirer", [None, True, False])
@pytest.mark.parametrize("count", [0, 1, 300])
def test_the_header_is_the_generated_composites_encoding(
    durable: bool, priority: int | None, ttl: int | None, acquirer: bool | None, count: int
) -> None:
    s = general_sections(
        BasicProperties(
            delivery_mode=2 if durable else 1,
            priority=priority,
            expiration=None if ttl is None else str(ttl),
        )
    )
    acquirer_bytes = NULL if acquirer is None else t.encode_value(acquirer)
    expected = Header(
        durable=durable,
        priority=priority,
        ttl=ttl,
        first_acquirer=acquirer,
        delivery_count=count or None,
    ).encode()
    assert header_section(s, acquirer_bytes, count) == expected
    assert uint(count) == t.encode_value(t.UInt(count))


def test_what_a_publisher_usually_sends_takes_the_direct_path() -> None:
    sink = BasicProperties.decode(_fast_properties(b"spark-1-0", 42, b"\x04m-42", True))
    assert sections(sink) is not None
    full = BasicProperties(
        content_type="application/json",
        content_encoding="gzip",
        headers={
            "s": "x",
            "n": 7,
            "big": 2**40,
            "f": 1.5,
            "t": True,
            "b": b"\x00",
            "v": None,
            "x-custom": "c",
        },
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
    edges += [BasicProperties(headers={"x-s": "x" * n}) for n in (240, 253, 256)]
    edges += [BasicProperties(message_id="m" * n) for n in (240, 250, 251, 252, 253, 255)]
    edges += [BasicProperties(headers={f"k{i}": i for i in range(n)}) for n in (60, 127, 128)]
    edges += [BasicProperties(headers={f"x-{i}": i for i in range(n)}) for n in (60, 127, 128)]
    edges += [BasicProperties(expiration=str(n)) for n in (0, 1, 255, 256, 2**32 - 1, 2**32)]
    edges += [BasicProperties(priority=p, delivery_mode=1) for p in (0, 255)]
    edges += [BasicProperties(timestamp=n) for n in (0, (2**63 - 1) // 1000)]
    for props in edges:
        direct = sections(props)
        assert direct is not None, props
        assert direct.parts() == general_sections(props).parts(), props


@pytest.mark.parametrize(
    "props",
    [
        BasicProperties(headers={"CC": ["a", "b"]}),
        BasicProperties(headers={"x-nested": {"a": 1}}),
        BasicProperties(headers={"x-list": [1, "a"]}),
        BasicProperties(headers={"x-basic-type": "t"}, type="u"),
        BasicProperties(headers={"x-ünï": "v"}),
        BasicProperties(content_type="tëxt/plain"),
        BasicProperties(content_encoding="gzïp"),
        BasicProperties(message_id="urn:uuid:6b3e1c2a-1111-4222-8333-444455556666"),
        BasicProperties(correlation_id="urn:uuid:not-a-uuid"),
        BasicProperties(timestamp=2**63),
        BasicProperties(headers={"long": _Long(5)}),
    ],
)
def test_unusual_values_are_left_to_the_general_implementation(props: BasicProperties) -> None:
    assert sections(props) is None
    payload = sections_of(props, b"b", exchange="", routing_key="q", first_acquirer=True)
    parse_message(payload)  # converted all the same
