"""Property tests of the AMQP 0-10 codec: every type, struct, control and command round-trips,
and frames assemble the same however the byte stream is split."""

from __future__ import annotations

import datetime
import decimal
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.protocol.amqp010._generated import structs as generated_structs
from leveret.protocol.amqp010._generated.commands import COMMANDS, MessageTransfer
from leveret.protocol.amqp010._generated.constants import TypeCode
from leveret.protocol.amqp010._generated.controls import CONTROLS
from leveret.protocol.amqp010._generated.structs import (
    Acquired,
    DeliveryProperties,
    MessageProperties,
    XaResult,
)
from leveret.protocol.amqp010.framing import Assembler, Assembly, FrameDecoder, encode_command
from leveret.protocol.amqp010.ops import (
    decode_command,
    decode_control,
    decode_header,
    encode_header,
)
from leveret.protocol.amqp010.sequence import SERIAL_MASK, SequenceSet, serial_add
from leveret.protocol.amqp010.types import (
    Array,
    Command,
    Struct,
    Typed,
    Value,
    decode_map,
    decode_value,
    encode_map,
    encode_value,
)

# Left out of the compiled pass (scripts/test): the 0-10 codec is not compiled.
pytestmark = pytest.mark.pure_only

ALL_STRUCTS: list[type[Struct]] = sorted(
    {
        obj
        for obj in vars(generated_structs).values()
        if isinstance(obj, type) and issubclass(obj, Struct) and obj.__module__.endswith("structs")
    },
    key=lambda cls: cls.NAME,
)
ALL_OPS: list[type[Struct]] = [*CONTROLS.values(), *COMMANDS.values()]

_text8 = st.text(max_size=20)
_text16 = st.text(max_size=60)
_u32 = st.integers(0, SERIAL_MASK)


def _sequence_sets() -> st.SearchStrategy[SequenceSet]:
    # Ranges inside one serial window (the protocol's own constraint), possibly wrapping.
    return st.builds(
        lambda base, pairs: SequenceSet(
            (serial_add(base, lo), serial_add(base, lo + n)) for lo, n in pairs
        ),
        _u32,
        st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 50)), max_size=5),
    )


_scalars: st.SearchStrategy[Value] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 63), (1 << 64) - 1),
    st.floats(allow_nan=False),
    _text16,
    st.binary(max_size=30),
    st.uuids(),
    st.datetimes(
        min_value=datetime.datetime(1970, 1, 1),
        max_value=datetime.datetime(9999, 12, 31),
        timezones=st.just(datetime.UTC),
    ).map(lambda d: d.replace(microsecond=0)),
    st.decimals(
        allow_nan=False, allow_infinity=False, places=3, min_value=-(10**12), max_value=10**12
    ),
)
values: st.SearchStrategy[Value] = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(_text8, inner, max_size=4),
    ),
    max_leaves=12,
)
maps = st.dictionaries(_text8, values, max_size=6)

_KIND: dict[str, st.SearchStrategy[Any]] = {
    "bit": st.booleans(),
    "uint8": st.integers(0, 0xFF),
    "uint16": st.integers(0, 0xFFFF),
    "uint32": _u32,
    "sequence-no": _u32,
    "uint64": st.integers(0, (1 << 64) - 1),
    "datetime": st.integers(0, (1 << 64) - 1),
    "uuid": st.uuids(),
    "str8": _text8.filter(lambda s: len(s.encode()) < 256),
    "str16": _text16,
    "vbin8": st.binary(max_size=255),
    "vbin16": st.binary(max_size=300),
    "vbin32": st.binary(max_size=300),
    "map": maps,
    "array": st.one_of(st.lists(st.integers(-5, 5), max_size=4), st.lists(_text8, max_size=4)),
    "str16-array": st.lists(_text16, max_size=4),
    "sequence-set": _sequence_sets(),
    "byte-ranges": st.lists(
        st.tuples(st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 64) - 1)), max_size=3
    ).map(tuple),
}


def instances(cls: type[Struct]) -> st.SearchStrategy[Any]:
    """Instances of a generated struct/control/command with any mix of fields present."""
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for name, kind in cls.FIELDS:
        if kind.startswith("struct:"):
            strategy = instances(getattr(generated_structs, kind.split(":", 1)[1]))
        elif kind == "struct32":
            strategy = st.sampled_from([Acquired, XaResult, DeliveryProperties]).flatmap(instances)
        else:
            strategy = _KIND[kind]
        if kind == "bit" or cls.PACK == 0:
            kwargs[name] = strategy
        else:
            kwargs[name] = st.none() | strategy
    return st.builds(cls, **kwargs)


@pytest.mark.parametrize("cls", ALL_STRUCTS, ids=lambda c: c.NAME)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_every_struct_round_trips(cls: type[Struct], data: st.DataObject) -> None:
    value = data.draw(instances(cls))
    assert type(value).decode(value.encode()) == value
    if cls.CODE is not None:
        assert decode_value(encode_value(value)) == value


@pytest.mark.parametrize("cls", ALL_OPS, ids=lambda c: c.NAME)
@settings(max_examples=8, deadline=None)
@given(data=st.data(), sync=st.booleans())
def test_every_control_and_command_round_trips(
    cls: type[Struct], data: st.DataObject, sync: bool
) -> None:
    op = data.draw(instances(cls))
    if isinstance(op, Command):
        assert decode_command(op.encode(sync)) == (op, sync)
    else:
        assert decode_control(op.encode()) == op


@settings(max_examples=150, deadline=None)
@given(maps)
def test_maps_round_trip(value: dict[str, Value]) -> None:
    raw = encode_map(value)
    assert decode_map(raw) == value
    assert encode_map(decode_map(raw, exact=True)) == raw


_typed = st.sampled_from(
    [
        (TypeCode.INT8, st.integers(-128, 127)),
        (TypeCode.UINT16, st.integers(0, 0xFFFF)),
        (TypeCode.INT32, st.integers(-(1 << 31), (1 << 31) - 1)),
        (TypeCode.UINT32, _u32),
        (TypeCode.FLOAT, st.floats(width=32, allow_nan=False)),
        (TypeCode.CHAR, st.characters(codec="iso-8859-15")),
        (TypeCode.CHAR_UTF32, st.characters(codec="utf-8")),
        (TypeCode.STR8, _text8.filter(lambda s: len(s.encode()) < 256)),
        (TypeCode.STR16_LATIN, st.text(alphabet=st.characters(codec="iso-8859-15"))),
        (TypeCode.STR16_UTF16, st.text(max_size=10, alphabet=st.characters(codec="utf-16"))),
        (TypeCode.BIN128, st.binary(min_size=16, max_size=16)),
        (TypeCode.BIN72, st.binary(min_size=9, max_size=9)),
        (TypeCode.VBIN32, st.binary(max_size=20)),
        (TypeCode.DEC32, st.integers(-(1 << 31), (1 << 31) - 1).map(decimal.Decimal)),
        (TypeCode.VOID, st.none()),
    ]
).flatmap(lambda pair: pair[1].map(lambda v: Typed(pair[0], cast("Value", v))))


@settings(max_examples=200, deadline=None)
@given(_typed)
def test_every_type_code_round_trips_exactly(value: Typed) -> None:
    raw = encode_value(value)
    assert raw[0] == value.code
    decoded = decode_value(raw, exact=True)
    assert encode_value(decoded) == raw
    plain = decoded.value if isinstance(decoded, Typed) else decoded
    assert plain == value.value


_WIDTHS = {
    TypeCode.BIN8: 1,
    TypeCode.BIN16: 2,
    TypeCode.BIN32: 4,
    TypeCode.BIN64: 8,
    TypeCode.BIN256: 32,
    TypeCode.BIN512: 64,
    TypeCode.BIN1024: 128,
    TypeCode.BIN40: 5,
}


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(_WIDTHS)), st.data())
def test_arrays_of_fixed_width_types_round_trip(code: TypeCode, data: st.DataObject) -> None:
    width = _WIDTHS[code]
    items = data.draw(st.lists(st.binary(min_size=width, max_size=width), max_size=3))
    raw = encode_value(Array(code, tuple(items)))
    assert decode_value(raw) == items
    assert decode_value(raw, exact=True) == Array(code, tuple(items))


@settings(max_examples=40, deadline=None)
@given(
    delivery=instances(DeliveryProperties),
    properties=instances(MessageProperties),
    body=st.binary(max_size=200),
    channel=st.integers(0, 0xFFFF),
    frame_size=st.integers(13, 64),
    sync=st.booleans(),
)
def test_transfer_frames_split_at_every_byte_assemble_the_same(
    delivery: DeliveryProperties,
    properties: MessageProperties,
    body: bytes,
    channel: int,
    frame_size: int,
    sync: bool,
) -> None:
    transfer = MessageTransfer("amq.direct", 0, 1)
    raw = encode_command(
        channel,
        transfer,
        sync=sync,
        header=[delivery, properties],
        body=body,
        max_frame_size=frame_size,
    )
    expected = Assembly(
        channel, 1, transfer.encode(sync), encode_header([delivery, properties]), body
    )
    for cut in range(len(raw) + 1):
        decoder, assembler = FrameDecoder(frame_size), Assembler()
        got = [
            a
            for part in (raw[:cut], raw[cut:])
            for frame in decoder.feed(part)
            if (a := assembler.add(frame)) is not None
        ]
        assert got == [expected]
    assert decode_header(expected.header or b"") == [delivery, properties]
