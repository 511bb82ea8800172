"""Differential tests of the AMQP 1.0 codec against python-qpid-proton's (``proton.Data``,
the C codec of Apache Qpid Proton): what proton encodes we decode to the same value, and what
we encode proton decodes to the same value, for every primitive, compound and described type
and for the generated performatives."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leveret.protocol.amqp10.types import (
    Array,
    Byte,
    Char,
    Composite,
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
    decode_whole,
    encode_value,
)
from tests.unit.protocol.amqp10.values import BY_TYPE, DESCRIPTORS, PERFORMATIVES, SCALARS, same

proton = pytest.importorskip("proton")
Data = proton.Data

_WRAP: dict[type, Any] = {
    UByte: proton.ubyte,
    UShort: proton.ushort,
    UInt: proton.uint,
    ULong: proton.ulong,
    Byte: proton.byte,
    Short: proton.short,
    Int: proton.int32,
    Float32: proton.float32,
    Char: proton.char,
    Timestamp: proton.timestamp,
    Symbol: proton.symbol,
}
_ARRAY_TYPES = {
    "null": Data.NULL,
    "boolean": Data.BOOL,
    "ubyte": Data.UBYTE,
    "ushort": Data.USHORT,
    "uint": Data.UINT,
    "ulong": Data.ULONG,
    "byte": Data.BYTE,
    "short": Data.SHORT,
    "int": Data.INT,
    "long": Data.LONG,
    "float": Data.FLOAT,
    "double": Data.DOUBLE,
    "decimal32": Data.DECIMAL32,
    "decimal64": Data.DECIMAL64,
    "decimal128": Data.DECIMAL128,
    "char": Data.CHAR,
    "timestamp": Data.TIMESTAMP,
    "uuid": Data.UUID,
    "binary": Data.BINARY,
    "string": Data.STRING,
    "symbol": Data.SYMBOL,
    "list": Data.LIST,
    "map": Data.MAP,
}


def to_proton(v: Value) -> Any:
    """Our value as the equivalent proton value."""
    wrap = _WRAP.get(type(v))
    if wrap is not None:
        return wrap(v)
    if isinstance(v, Decimal32):
        return proton.decimal32(int.from_bytes(v, "big"))
    if isinstance(v, Decimal64):
        return proton.decimal64(int.from_bytes(v, "big"))
    if isinstance(v, Decimal128):
        return proton.decimal128(bytes(v))
    if isinstance(v, list):
        return [to_proton(x) for x in v]
    if isinstance(v, dict):
        return {to_proton(k): to_proton(x) for k, x in v.items()}
    if isinstance(v, Described):
        return proton.Described(to_proton(v.descriptor), to_proton(v.value))
    if isinstance(v, Array):
        descriptor = proton.UNDESCRIBED if v.descriptor is None else to_proton(v.descriptor)
        items = [to_proton(x) for x in v.items]
        return proton.Array(descriptor, _ARRAY_TYPES[v.element_type], *items)
    if isinstance(v, Composite):
        return to_proton(decode_whole(_undescribe(v)))
    return v


def _undescribe(v: Composite) -> bytes:
    """A composite re-encoded as an unregistered described list (same bytes but descriptor)."""
    data = v.encode()
    assert data[:2] == b"\x00\x53"
    return b"\x00\x80" + (0xFFFF_0000_0000 + data[2]).to_bytes(8, "big") + data[3:]


def same_proton(a: Any, b: Any) -> bool:
    """Equal proton values of the same Python types, all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same_proton(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        keys = {k: k for k in b}
        return len(a) == len(b) and all(
            k in keys and same_proton(k, keys[k]) and same_proton(x, b[k]) for k, x in a.items()
        )
    if isinstance(a, proton.Described):
        return same_proton(a.descriptor, b.descriptor) and same_proton(a.value, b.value)
    if isinstance(a, proton.Array):
        return (
            a.type == b.type
            and same_proton(a.descriptor, b.descriptor)
            and same_proton(list(a.elements), list(b.elements))
        )
    return bool(a == b)


def proton_encode(v: Any) -> bytes:
    d = Data()
    d.put_object(v)
    return bytes(d.encode())


def proton_decode(data: bytes) -> Any:
    d = Data()
    d.decode(data)
    d.rewind()
    d.next()
    return _bytes(d.get_object())


def _bytes(v: Any) -> Any:
    """Proton hands binaries out as memoryviews: make them bytes for comparison."""
    if isinstance(v, memoryview):
        return bytes(v)
    if isinstance(v, list):
        return [_bytes(x) for x in v]
    if isinstance(v, dict):
        return {k: _bytes(x) for k, x in v.items()}
    if isinstance(v, proton.Described):
        return proton.Described(_bytes(v.descriptor), _bytes(v.value))
    if isinstance(v, proton.Array):
        return proton.Array(v.descriptor, v.type, *[_bytes(x) for x in v.elements])
    return v


# Proton decodes a binary map key to a memoryview it cannot hash: no binary keys here.
KEYS = SCALARS.filter(lambda v: type(v) is not bytes)


def _arrays(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Array]:
    def of(t: str) -> st.SearchStrategy[Array]:
        if t == "list":
            item: st.SearchStrategy[Any] = st.lists(children, max_size=3)
        elif t == "map":
            item = st.dictionaries(KEYS, children, max_size=3)
        else:
            item = BY_TYPE[t]
        items = st.lists(item, max_size=4).map(tuple)
        return st.builds(Array, st.just(t), items, st.one_of(st.none(), DESCRIPTORS))

    return st.sampled_from(sorted(_ARRAY_TYPES)).flatmap(of)


# Proton 0.40's decoder loses the list item after a described value whose value is itself
# described (c0 17 02 [00 80.. [00 80.. 40]] 40 decodes to one item): no directly nested
# described values here (ours decode them, see test_amqp10_types_props).
PROTON_VALUES: st.SearchStrategy[Value] = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(KEYS, children, max_size=5),
        st.builds(Described, DESCRIPTORS, children.filter(lambda v: not isinstance(v, Described))),
        _arrays(children),
    ),
    max_leaves=10,
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PROTON_VALUES)
def test_proton_encodes_we_decode(value: Value) -> None:
    data = proton_encode(to_proton(value))
    assert same(decode_whole(data), value), data.hex()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PROTON_VALUES)
def test_we_encode_proton_decodes(value: Value) -> None:
    data = encode_value(value)
    got = proton_decode(data)
    assert same_proton(got, to_proton(value)), data.hex()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PERFORMATIVES)
def test_performatives_both_ways(performative: Composite) -> None:
    data = performative.encode()
    got = proton_decode(data)
    assert isinstance(got, proton.Described)
    assert got.descriptor == performative.DESCRIPTOR_CODE
    # Proton re-encodes what it decoded (its own encoding choices); we decode that back.
    again = proton_encode(got)
    assert decode_whole(again) == performative


def test_uuid_and_timestamp_match_proton() -> None:
    u = uuid.uuid4()
    assert decode_whole(proton_encode(u)) == u
    assert proton_decode(encode_value(Timestamp(1311704463521))) == proton.timestamp(1311704463521)
