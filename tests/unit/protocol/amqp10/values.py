"""Hypothesis strategies for AMQP 1.0 values and a type-strict comparison, shared by tests."""

from __future__ import annotations

import dataclasses
import math
import string
import uuid
from typing import Any

from hypothesis import strategies as st

from leveret.protocol.amqp10 import (
    Accepted,
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Error,
    Flow,
    Modified,
    Open,
    Rejected,
    Released,
    Source,
    Target,
    Transfer,
)
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
)

LONG = st.integers(-(2**63), 2**63 - 1)
# Lengths around the 255-byte boundary between the 8-bit and the 32-bit encodings.
BLOB = st.one_of(st.binary(max_size=20), st.binary(min_size=250, max_size=270))
TEXT = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=20),
    st.text(string.ascii_letters, min_size=250, max_size=270),
)
SYMBOL_TEXT = st.one_of(
    st.text(string.ascii_letters + ":-._", max_size=20),
    st.text(string.ascii_letters, min_size=250, max_size=270),
)

# Every primitive by its AMQP type name, as the decoder returns it.
BY_TYPE: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "ubyte": st.integers(0, 255).map(UByte),
    "ushort": st.integers(0, 2**16 - 1).map(UShort),
    "uint": st.one_of(st.integers(0, 300), st.integers(0, 2**32 - 1)).map(UInt),
    "ulong": st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1)).map(ULong),
    "byte": st.integers(-128, 127).map(Byte),
    "short": st.integers(-(2**15), 2**15 - 1).map(Short),
    "int": st.one_of(st.integers(-200, 200), st.integers(-(2**31), 2**31 - 1)).map(Int),
    "long": st.one_of(st.integers(-200, 200), LONG),
    "float": st.floats(width=32, allow_nan=False).map(Float32),
    "double": st.floats(allow_nan=False),
    "decimal32": st.binary(min_size=4, max_size=4).map(Decimal32),
    "decimal64": st.binary(min_size=8, max_size=8).map(Decimal64),
    "decimal128": st.binary(min_size=16, max_size=16).map(Decimal128),
    "char": st.characters(exclude_categories=["Cs"]).map(Char),
    "timestamp": LONG.map(Timestamp),
    "uuid": st.uuids(),
    "binary": BLOB,
    "string": TEXT,
    "symbol": SYMBOL_TEXT.map(Symbol),
}
SCALARS = st.one_of(*BY_TYPE.values())
DESCRIPTORS = st.one_of(
    st.integers(0x100, 2**64 - 1).map(ULong),  # clear of the spec's own 0x00..0xff codes
    st.text(string.ascii_lowercase + ":", min_size=1, max_size=12)
    .filter(lambda s: not s.startswith("amqp:"))
    .map(Symbol),
)


def arrays(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Array]:
    """Arrays of scalars, lists, maps or arrays, sometimes described."""

    def of(type_name: str) -> st.SearchStrategy[Array]:
        if type_name == "list":
            item: st.SearchStrategy[Any] = st.lists(children, max_size=3)
        elif type_name == "map":
            item = st.dictionaries(SCALARS, children, max_size=3)
        elif type_name == "array":
            item = st.sampled_from(sorted(BY_TYPE)).flatmap(
                lambda t: st.lists(BY_TYPE[t], max_size=3).map(lambda xs: Array(t, tuple(xs)))
            )
        else:
            item = BY_TYPE[type_name]
        return st.builds(
            Array,
            st.just(type_name),
            st.lists(item, max_size=4).map(tuple),
            st.one_of(st.none(), DESCRIPTORS),
        )

    return st.sampled_from([*sorted(BY_TYPE), "list", "map", "array"]).flatmap(of)


VALUES: st.SearchStrategy[Value] = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(SCALARS, children, max_size=5),
        st.builds(Described, DESCRIPTORS, children),
        arrays(children),
    ),
    max_leaves=12,
)


def same(a: object, b: object) -> bool:
    """Equal values of the same Python types, all the way down (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)  # type: ignore[arg-type]
    if isinstance(a, list | tuple):
        assert isinstance(b, list | tuple)
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        assert isinstance(b, dict)
        if len(a) != len(b):
            return False
        bkeys = {k: k for k in b}
        return all(k in bkeys and same(k, bkeys[k]) and same(v, b[k]) for k, v in a.items())
    if isinstance(a, Array | Described | Composite):
        assert dataclasses.is_dataclass(a)
        assert dataclasses.is_dataclass(b)
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, uuid.UUID | str | bytes | int | float) or a is None:
        return a == b
    raise AssertionError(f"unexpected value {a!r}")


def _sym(alphabet: str = string.ascii_lowercase + ":-") -> st.SearchStrategy[str]:
    return st.text(alphabet, min_size=1, max_size=10).map(Symbol)


U32 = st.integers(0, 2**32 - 1)
ERRORS = st.builds(
    Error,
    condition=_sym(),
    description=st.none() | st.text(max_size=10),
    info=st.none() | st.dictionaries(_sym(), SCALARS, max_size=2),
)
PERFORMATIVES: st.SearchStrategy[Composite] = st.one_of(
    st.builds(
        Open,
        container_id=st.text(max_size=10),
        hostname=st.none() | st.text(max_size=10),
        max_frame_size=U32,
        channel_max=st.integers(0, 65535),
        idle_time_out=st.none() | U32,
        offered_capabilities=st.none() | st.lists(_sym(), min_size=1, max_size=3).map(tuple),
        properties=st.none() | st.dictionaries(_sym(), SCALARS, max_size=3),
    ),
    st.builds(
        Begin,
        remote_channel=st.none() | st.integers(0, 65535),
        next_outgoing_id=U32,
        incoming_window=U32,
        outgoing_window=U32,
        handle_max=U32,
    ),
    st.builds(
        Attach,
        name=st.text(max_size=10),
        handle=U32,
        role=st.booleans(),
        snd_settle_mode=st.integers(0, 2),
        rcv_settle_mode=st.integers(0, 1),
        source=st.none()
        | st.builds(
            Source,
            address=st.none() | st.text(max_size=10),
            dynamic=st.booleans(),
            filter=st.none()
            | st.dictionaries(_sym(), st.builds(Described, _sym(), SCALARS), max_size=2),
            outcomes=st.none() | st.lists(_sym(), min_size=1, max_size=3).map(tuple),
        ),
        target=st.none() | st.builds(Target, address=st.none() | st.text(max_size=10)),
        initial_delivery_count=st.none() | U32,
        max_message_size=st.none() | st.integers(0, 2**64 - 1),
    ),
    st.builds(
        Flow,
        next_incoming_id=st.none() | U32,
        incoming_window=U32,
        next_outgoing_id=U32,
        outgoing_window=U32,
        handle=st.none() | U32,
        delivery_count=st.none() | U32,
        link_credit=st.none() | U32,
        drain=st.booleans(),
        echo=st.booleans(),
    ),
    st.builds(
        Transfer,
        handle=U32,
        delivery_id=st.none() | U32,
        delivery_tag=st.none() | st.binary(max_size=32),
        message_format=st.none() | U32,
        settled=st.none() | st.booleans(),
        more=st.booleans(),
        state=st.none() | st.just(Accepted()),
        aborted=st.booleans(),
        batchable=st.booleans(),
    ),
    st.builds(
        Disposition,
        role=st.booleans(),
        first=U32,
        last=st.none() | U32,
        settled=st.booleans(),
        state=st.one_of(
            st.none(),
            st.just(Accepted()),
            st.just(Released()),
            st.builds(Rejected, error=st.none() | ERRORS),
            st.builds(
                Modified,
                delivery_failed=st.none() | st.booleans(),
                message_annotations=st.none() | st.dictionaries(_sym(), SCALARS, max_size=2),
            ),
        ),
    ),
    st.builds(Detach, handle=U32, closed=st.booleans(), error=st.none() | ERRORS),
    st.builds(End, error=st.none() | ERRORS),
    st.builds(Close, error=st.none() | ERRORS),
)
