"""Property tests of the generated 0-8, 0-9 and 0-9 draft codecs: every method, result struct
and property class round-trips, truncation is a SyntaxError_, and random bytes only ever raise
:class:`leveret.errors.AMQPError` subclasses (as tests/property/test_methods_roundtrip.py does
for 0-9-1)."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tools import codegen
from tools.codegen import render
from tools.codegen import spec as codegen_spec

from leveret.errors import AMQPError, SyntaxError_
from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp08._generated import properties as p08
from leveret.protocol.amqp09._generated import methods as m09
from leveret.protocol.amqp09._generated import properties as p09
from leveret.protocol.amqp09.draft._generated import methods as mdraft
from leveret.protocol.amqp09.draft._generated import properties as pdraft
from leveret.protocol.amqp09.wiretypes import Content

if TYPE_CHECKING:
    from types import ModuleType

# Left out of the compiled pass (scripts/test): the 0-8/0-9 method codecs are not compiled.
pytestmark = pytest.mark.pure_only

SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])

MODULES: dict[str, tuple[ModuleType, ModuleType]] = {
    "amqp08": (m08, p08),
    "amqp09": (m09, p09),
    "amqp09-draft": (mdraft, pdraft),
}
MODELS = {
    name: codegen_spec.load(t.spec, t.overlays, scraped=t.scraped)
    for name, t in codegen.TARGETS.items()
    if name in MODULES
}

# -- value strategies, per target where the field-table types differ ---------------------------

_utc_seconds = st.integers(0, 253402300799).map(
    lambda s: datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=s)
)
_decimals = st.builds(
    lambda m, s: decimal.Decimal(m).scaleb(-s), st.integers(-(2**31), 2**31 - 1), st.integers(0, 9)
)


def _tables(scalars: st.SearchStrategy[Any], lists: bool) -> st.SearchStrategy[Any]:
    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        nested = st.dictionaries(st.text(max_size=10), inner, max_size=3)
        return nested | st.lists(inner, max_size=3) if lists else nested

    values = st.recursive(scalars, extend, max_leaves=5)
    return st.dictionaries(st.text(max_size=20), values, max_size=3)


TABLES = {
    # 0-8 writes only S, I, D, T, F.
    "amqp08": _tables(
        st.text(max_size=20) | st.integers(-(2**31), 2**31 - 1) | _decimals | _utc_seconds,
        lists=False,
    ),
    # 0-9 shares 0-9-1's field tables.
    "amqp09": _tables(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63 - 1)
        | st.floats(allow_nan=False)
        | st.text(max_size=20)
        | st.binary(max_size=20),
        lists=True,
    ),
    # The draft's numeric type codes.
    "amqp09-draft": _tables(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63 - 1)
        | st.floats(allow_nan=False)
        | st.text(max_size=20)
        | st.binary(max_size=20)
        | _decimals
        | _utc_seconds,
        lists=True,
    ),
}

_longs = st.integers(0, 2**32 - 1)


def strategies(target: str) -> dict[str, st.SearchStrategy[Any]]:
    return {
        "bit": st.booleans(),
        "octet": st.integers(0, 2**8 - 1),
        "short": st.integers(0, 2**16 - 1),
        "long": _longs,
        "longlong": st.integers(0, 2**64 - 1),
        "timestamp": st.integers(0, 2**64 - 1),
        "shortstr": st.text(max_size=40) | st.text(alphabet="ab", min_size=255, max_size=255),
        "longstr": st.binary(max_size=300),
        "table": TABLES[target],
        "content": st.builds(Content, st.binary(max_size=100), st.booleans()),
        "uuid": st.uuids(),
        "rfc1982-long-set": st.lists(st.tuples(_longs, _longs), max_size=4).map(tuple),
        "array": st.lists(st.binary(max_size=20), max_size=4),
    }


def _fields(target: str) -> dict[str, list[tuple[str, str]]]:
    return {
        render.class_name(c, m): [(render.py_name(f.name), f.type) for f in m.fields]
        for c in MODELS[target].classes
        for m in c.methods
    }


FIELDS = {target: _fields(target) for target in MODULES}
CASES = [
    (target, cls)
    for target, (methods, _) in MODULES.items()
    for cls in sorted(methods.METHODS.values(), key=lambda cls: cls.INDEX)
]


def _results(target: str) -> dict[str, list[tuple[str, str]]]:
    return {
        render.class_name(c, m) + "Result": [
            (render.py_name(f.name), f.type) for f in m.result.fields
        ]
        for c in MODELS[target].classes
        for m in c.methods
        if m.result
    }


RESULT_FIELDS = _results("amqp09-draft")


def _struct(cls: type[Any]) -> st.SearchStrategy[Any]:
    kinds = strategies("amqp09-draft")
    return st.builds(cls, **{n: kinds[t] for n, t in RESULT_FIELDS[cls.__name__]})


def _instances(target: str, cls: type[Any]) -> st.SearchStrategy[Any]:
    kinds = dict(strategies(target))
    if target == "amqp09-draft":
        kinds["long-struct"] = st.none() | st.one_of(*(_struct(s) for s in mdraft.RESULTS.values()))
    return st.builds(cls, **{n: kinds[t] for n, t in FIELDS[target][cls.__name__]})


def _id(case: tuple[str, type[Any]]) -> str:
    return f"{case[0]}:{case[1].NAME}"


def test_every_spec_method_is_generated() -> None:
    for target, (methods, _) in MODULES.items():
        assert set(FIELDS[target]) == {cls.__name__ for cls in methods.METHODS.values()}
        for cls in methods.METHODS.values():
            assert cls.INDEX == (cls.CLASS_ID << 16) | cls.METHOD_ID
            assert [f.name for f in dataclasses.fields(cls)] == [
                n for n, _ in FIELDS[target][cls.__name__]
            ]
            cls()  # every field has a default
    assert set(RESULT_FIELDS) == {cls.__name__ for cls in mdraft.RESULTS.values()}


@pytest.mark.parametrize("case", CASES, ids=_id)
@SETTINGS
@given(data=st.data())
def test_method_roundtrip(case: tuple[str, type[Any]], data: st.DataObject) -> None:
    target, cls = case
    methods = MODULES[target][0]
    method = data.draw(_instances(target, cls))
    payload = method.encode()
    assert payload[:4] == cls.CLASS_ID.to_bytes(2, "big") + cls.METHOD_ID.to_bytes(2, "big")
    assert methods.decode_method(payload) == method
    framed = memoryview(b"\x01\x00\x05" + payload[4:] + b"\xce")
    assert cls.decode(framed, 3) == method
    for cut in range(len(payload)):
        with pytest.raises(SyntaxError_):
            methods.decode_method(payload[:cut])


@pytest.mark.parametrize("target", sorted(MODULES))
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_random_arguments_only_raise_amqp_errors(target: str, data: st.DataObject) -> None:
    methods = MODULES[target][0]
    index = data.draw(st.sampled_from(sorted(methods.METHODS)))
    args = data.draw(st.binary(max_size=64))
    try:
        method = methods.decode_method(index.to_bytes(4, "big") + args)
    except AMQPError:
        return
    assert isinstance(method, methods.METHODS[index])


@pytest.mark.parametrize("cls", list(mdraft.RESULTS.values()), ids=lambda c: c.__name__)
@SETTINGS
@given(data=st.data())
def test_result_struct_roundtrip_through_execution_result(
    cls: type[Any], data: st.DataObject
) -> None:
    result = data.draw(_struct(cls))
    method = mdraft.ExecutionResult(command_id=data.draw(_longs), data=result)
    assert mdraft.decode_method(method.encode()) == method


def _property_cases() -> list[tuple[str, type[Any]]]:
    return [
        (target, cls) for target, (_, props) in MODULES.items() for cls in props.PROPERTIES.values()
    ]


@pytest.mark.parametrize("case", _property_cases(), ids=lambda c: f"{c[0]}:{c[1].__name__}")
@SETTINGS
@given(data=st.data())
def test_properties_roundtrip(case: tuple[str, type[Any]], data: st.DataObject) -> None:
    target, cls = case
    model = MODELS[target]
    klass = next(
        c
        for c in model.classes
        if c.properties and cls.__name__.lower().startswith(c.name.replace("-", ""))
    )
    kinds = strategies(target)
    optional = {render.py_name(f.name): kinds[f.type] for f in klass.properties}
    props = cls(**data.draw(st.fixed_dictionaries({}, optional=optional)))
    encoded = props.encode()
    assert cls.decode(encoded) == props
    for cut in range(len(encoded)):
        with pytest.raises(SyntaxError_):
            cls.decode(encoded[:cut])


def test_uuid_strategy_is_used() -> None:
    # Guards the draft's session.attached against a default-only round trip.
    attached = mdraft.SessionAttached(session_id=uuid.UUID(int=1), detached_lifetime=2)
    assert attached.encode()[4:20] == uuid.UUID(int=1).bytes
