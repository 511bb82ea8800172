"""Property tests of every generated AMQP 1.0 class: instances with any field values (of the
field's AMQP type, or null) round-trip, and a value of the wrong type in any typed field is a
DecodeError naming what was expected."""

from __future__ import annotations

import dataclasses
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leveret.protocol.amqp10._generated.composites import BY_CODE, Error
from leveret.protocol.amqp10.errors import DecodeError
from leveret.protocol.amqp10.types import (
    Composite,
    Described,
    Symbol,
    compound,
    decode_whole,
    encode_value,
)
from tests.unit.protocol.amqp10.values import SCALARS, VALUES

CLASSES = sorted(BY_CODE.values(), key=lambda c: c.DESCRIPTOR_CODE)
SYMBOL = st.text(string.ascii_letters + ":-", min_size=1, max_size=10).map(Symbol)
# What a field of each AMQP type may hold, as the generated classes hold it (plain ints,
# str, bytes; generic values for maps, lists and "*").
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "boolean": st.booleans(),
    "ubyte": st.integers(0, 255),
    "ushort": st.integers(0, 2**16 - 1),
    "uint": st.integers(0, 2**32 - 1),
    "ulong": st.integers(0, 2**64 - 1),
    "timestamp": st.integers(-(2**63), 2**63 - 1),
    "binary": st.binary(max_size=20),
    "string": st.text(max_size=20),
    "symbol": SYMBOL,
    "symbol[]": st.lists(SYMBOL, min_size=1, max_size=3).map(tuple),
    "map": st.dictionaries(SCALARS, SCALARS, max_size=3),
    "fields": st.dictionaries(SYMBOL, SCALARS, max_size=3),
    "list": st.lists(SCALARS, max_size=3),
    "*": VALUES,
    "error": st.builds(Error, condition=SYMBOL, description=st.none() | st.text(max_size=8)),
}
# A value of another type for each typed field (what a confused peer might send).
WRONG: dict[str, Any] = {
    "boolean": "yes",
    "ubyte": "one",
    "ushort": True,
    "uint": Symbol("x"),
    "ulong": b"x",
    "timestamp": 1.5,
    "binary": "text",
    "string": b"bytes",
    "symbol": "a string",
    "symbol[]": 7,
    "map": [1],
    "fields": [2],
    "list": {"k": 1},
    "error": "not an error",
}


def _instances(cls: type[Composite]) -> st.SearchStrategy[Composite]:
    kwargs = {}
    for f, amqp_type in zip(dataclasses.fields(cls), cls.TYPES, strict=True):  # type: ignore[arg-type]
        values = FIELD_VALUES[amqp_type]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required:
            kwargs[f.name] = values.filter(lambda v: v is not None)
        elif f.default is not None:
            kwargs[f.name] = values
        else:
            kwargs[f.name] = st.none() | values
    return st.builds(cls, **kwargs)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.NAME)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_instance_round_trips(cls: type[Composite], data: st.DataObject) -> None:
    obj = data.draw(_instances(cls))
    encoded = obj.encode()
    assert decode_whole(encoded) == obj


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.NAME)
def test_a_wrong_type_in_any_field_is_a_decode_error(cls: type[Composite]) -> None:
    for index, amqp_type in enumerate(cls.TYPES):
        wrong = WRONG.get(amqp_type)
        if wrong is None:
            continue
        items = [b"\x40"] * index + [encode_value(wrong)]
        if cls.FIELDS == ("value",):
            body = encode_value(wrong)  # a described restricted type: the value itself
        else:
            body = compound(0xC0, 0xD0, len(items), b"".join(items))
        data = b"\x00\x53" + bytes((cls.DESCRIPTOR_CODE,)) + body
        with pytest.raises(DecodeError, match=r"expected|mandatory"):
            decode_whole(data)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.NAME)
def test_extra_fields_are_skipped_and_a_bad_size_is_refused(cls: type[Composite]) -> None:
    if cls.FIELDS == ("value",):
        return
    kwargs = {
        f.name: {"symbol[]": ("a",), "error": None}.get(t, _SAMPLE.get(t))
        for f, t in zip(dataclasses.fields(cls), cls.TYPES, strict=True)  # type: ignore[arg-type]
        if f.default is dataclasses.MISSING
    }
    obj = cls(**kwargs)
    encoded = obj.encode()
    # Re-encode the same fields as a list32 with two extra items a newer spec might add.
    described = decode_whole(b"\x00\x80" + (2**40).to_bytes(8, "big") + encoded[3:])
    assert isinstance(described, Described)
    assert isinstance(described.value, list)
    items = list(described.value)
    items += [None] * (len(cls.FIELDS) - len(items)) + ["extra", 7]
    body = b"".join(encode_value(x) for x in items)
    data = (
        encoded[:3]
        + b"\xd0"
        + (len(body) + 4).to_bytes(4, "big")
        + len(items).to_bytes(4, "big")
        + body
    )
    assert decode_whole(data) == obj
    bad = data[:4] + (len(body) + 5).to_bytes(4, "big") + data[8:] + b"\x40"
    with pytest.raises(DecodeError, match="size does not match"):
        decode_whole(bad)


_SAMPLE: dict[str, Any] = {
    "boolean": True,
    "ubyte": 1,
    "ushort": 2,
    "uint": 3,
    "ulong": 4,
    "timestamp": 5,
    "binary": b"b",
    "string": "s",
    "symbol": Symbol("y"),
    "map": {},
    "fields": {},
    "list": [],
    "*": "v",
}
