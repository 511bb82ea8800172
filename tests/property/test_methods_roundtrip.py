"""Property tests of the generated AMQP 0-9-1 codec: methods and basic properties round-trip,
and malformed bytes only ever raise :class:`leveret.errors.AMQPError` subclasses."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tools import codegen
from tools.codegen import render
from tools.codegen import spec as codegen_spec

from leveret.errors import AMQPError, CommandInvalid, SyntaxError_
from leveret.protocol.amqp091._generated import constants
from leveret.protocol.amqp091._generated.methods import (
    METHODS,
    BasicAck,
    BasicDeliver,
    BasicPublish,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionUpdateSecret,
    ExchangeDeclare,
    Method,
    QueueDeclare,
    decode_method,
)
from leveret.protocol.amqp091._generated.properties import (
    PROPERTY_FLAGS,
    BasicProperties,
    decode_headers_only,
)

# Left out of the compiled pass (scripts/test): the generated 0-9-1 method codecs are not compiled.
pytestmark = pytest.mark.pure_only

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The spec type of every field, read from the same inputs the generator used.
_MODEL = codegen_spec.load(codegen.DEFAULT_SPEC, codegen.DEFAULT_OVERLAYS)
FIELD_TYPES: dict[str, list[tuple[str, str]]] = {
    render.class_name(c, m): [(render.py_name(f.name), f.type) for f in m.fields]
    for c in _MODEL.classes
    for m in c.methods
}
ALL_METHODS = sorted(METHODS.values(), key=lambda cls: cls.INDEX)
_BASIC = next(c for c in _MODEL.classes if c.name == "basic")
PROPERTY_TYPES = {render.py_name(f.name): f.type for f in _BASIC.properties}

shortstrs = st.text(max_size=40) | st.text(alphabet="ab", min_size=255, max_size=255)
scalar_values = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
field_values = st.recursive(
    scalar_values,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=6,
)
tables = st.dictionaries(st.text(max_size=20), field_values, max_size=3)

STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "bit": st.booleans(),
    "octet": st.integers(0, 2**8 - 1),
    "short": st.integers(0, 2**16 - 1),
    "long": st.integers(0, 2**32 - 1),
    "longlong": st.integers(0, 2**64 - 1),
    "timestamp": st.integers(0, 2**64 - 1),
    "shortstr": shortstrs,
    "longstr": st.binary(max_size=300),
    "table": tables,
}


def _instances(cls: type[Method]) -> st.SearchStrategy[Method]:
    kwargs = {name: STRATEGIES[ftype] for name, ftype in FIELD_TYPES[cls.__name__]}
    return st.builds(cls, **kwargs)


def test_every_spec_method_is_generated() -> None:
    assert set(FIELD_TYPES) == {cls.__name__ for cls in METHODS.values()}
    for cls in ALL_METHODS:
        assert METHODS[cls.INDEX] is cls
        assert cls.INDEX == (cls.CLASS_ID << 16) | cls.METHOD_ID
        assert [f.name for f in dataclasses.fields(cls)] == [
            n for n, _ in FIELD_TYPES[cls.__name__]
        ]
        cls()  # every field has a default


@pytest.mark.parametrize("cls", ALL_METHODS, ids=lambda cls: cls.NAME)
@SETTINGS
@given(data=st.data())
def test_method_roundtrip(cls: type[Method], data: st.DataObject) -> None:
    method = data.draw(_instances(cls))
    payload = method.encode()
    assert payload[:4] == cls.CLASS_ID.to_bytes(2, "big") + cls.METHOD_ID.to_bytes(2, "big")
    assert decode_method(payload) == method
    assert cls.decode(memoryview(payload), 4) == method
    # Decoding at an offset inside a bigger buffer works too (frames are parsed in place).
    framed = memoryview(b"\x01\x00\x05" + payload[4:] + b"\xce")
    assert cls.decode(framed, 3) == method


@pytest.mark.parametrize("cls", ALL_METHODS, ids=lambda cls: cls.NAME)
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_truncated_method_raises_syntax_error(cls: type[Method], data: st.DataObject) -> None:
    payload = data.draw(_instances(cls)).encode()
    for cut in range(len(payload)):
        with pytest.raises(SyntaxError_):
            decode_method(payload[:cut])


@SETTINGS
@given(st.binary(max_size=64))
def test_random_payload_only_raises_amqp_errors(payload: bytes) -> None:
    try:
        decode_method(payload)
    except AMQPError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(METHODS)), st.binary(max_size=64))
def test_random_arguments_only_raise_amqp_errors(index: int, args: bytes) -> None:
    try:
        method = decode_method(index.to_bytes(4, "big") + args)
    except AMQPError:
        return
    assert isinstance(method, METHODS[index])


def test_known_wire_bytes() -> None:
    publish = BasicPublish(exchange="ex", routing_key="rk", mandatory=True)
    assert publish.encode() == b"\x00\x3c\x00\x28\x00\x00\x02ex\x02rk\x01"
    assert BasicAck(delivery_tag=7, multiple=True).encode() == (
        b"\x00\x3c\x00\x50" + (7).to_bytes(8, "big") + b"\x01"
    )
    deliver = BasicDeliver("ct", 1, True, "", "rk")
    assert (
        deliver.encode() == b"\x00\x3c\x00\x3c\x02ct" + (1).to_bytes(8, "big") + b"\x01\x00\x02rk"
    )
    tune = ConnectionTune(channel_max=2047, frame_max=131072, heartbeat=60)
    assert tune.encode() == b"\x00\x0a\x00\x1e\x07\xff\x00\x02\x00\x00\x00\x3c"
    # queue.declare: passive, durable, exclusive, auto-delete, no-wait share one octet.
    qd = QueueDeclare(queue="q", durable=True, auto_delete=True)
    assert qd.encode() == b"\x00\x32\x00\x0a\x00\x00\x01q\x0a\x00\x00\x00\x00"
    ed = ExchangeDeclare(exchange="x", type="topic", internal=True)
    assert ed.encode().endswith(b"\x05topic\x08\x00\x00\x00\x00")


def test_api_shapes() -> None:
    assert (constants.FRAME_METHOD, constants.FRAME_HEADER, constants.FRAME_BODY) == (1, 2, 3)
    assert (constants.FRAME_HEARTBEAT, constants.FRAME_MIN_SIZE, constants.FRAME_END) == (
        8,
        4096,
        206,
    )
    assert constants.REPLY_SUCCESS == 200
    assert constants.CONTENT_TOO_LARGE == 311
    assert constants.NO_ROUTE == 312
    assert {311, 312, 313, 403, 404, 405, 406} == constants.SOFT_ERRORS
    assert {320, 402, 501, 502, 503, 504, 505, 506, 530, 540, 541} == constants.HARD_ERRORS
    assert BasicPublish.NAME == "basic.publish"
    assert BasicPublish.HAS_CONTENT
    assert not BasicPublish.SYNCHRONOUS
    assert ConnectionStartOk.SYNCHRONOUS
    start_ok = ConnectionStartOk(mechanism="PLAIN", response=b"\x00guest\x00secret")
    assert "secret" not in repr(start_ok)
    assert "secret" not in repr(ConnectionUpdateSecret(new_secret=b"secret"))
    assert METHODS[(10 << 16) | 60].__name__ == "ConnectionBlocked"
    assert METHODS[(85 << 16) | 10].__name__ == "ConfirmSelect"


def test_codec_errors() -> None:
    with pytest.raises(SyntaxError_):
        decode_method(b"\x00\x3c")
    with pytest.raises(CommandInvalid, match="unknown method 60/999") as info:
        decode_method(b"\x00\x3c\x03\xe7")
    assert (info.value.class_id, info.value.method_id) == (60, 999)
    with pytest.raises(CommandInvalid):
        decode_method(b"\x00\x63\x00\x0a")
    with pytest.raises(SyntaxError_) as err:
        BasicPublish(exchange="x" * 256).encode()
    assert "basic.publish" in str(err.value)
    with pytest.raises(SyntaxError_):
        BasicAck(delivery_tag=-1).encode()
    # A shortstr that is not UTF-8.
    bad = b"\x00\x3c\x00\x28\x00\x00\x02\xff\xfe\x00\x00"
    with pytest.raises(SyntaxError_, match=r"basic\.publish") as err:
        decode_method(bad)
    assert (err.value.class_id, err.value.method_id) == (60, 40)


# -- BasicProperties ------------------------------------------------------------------------

PROPERTY_STRATEGIES = {name: STRATEGIES[ptype] for name, ptype in PROPERTY_TYPES.items()}
SAMPLE_VALUES: dict[str, Any] = {
    "shortstr": "värde",
    "octet": 2,
    "timestamp": 1_700_000_000,
    "table": {"x-match": "all", "n": 1, "nested": {"a": [1, "b"]}},
}


def test_property_flags() -> None:
    names = [f.name for f in dataclasses.fields(BasicProperties)]
    assert names == list(PROPERTY_FLAGS)
    assert names[-1] == "cluster_id"
    assert len(names) == 14
    assert [PROPERTY_FLAGS[n] for n in names] == [1 << (15 - i) for i in range(14)]


def test_every_property_subset_roundtrips() -> None:
    names = list(PROPERTY_FLAGS)
    for mask in range(1 << len(names)):
        kwargs = {n: SAMPLE_VALUES[PROPERTY_TYPES[n]] for i, n in enumerate(names) if mask >> i & 1}
        props = BasicProperties(**kwargs)
        encoded = props.encode()
        assert int.from_bytes(encoded[:2], "big") == sum(PROPERTY_FLAGS[n] for n in kwargs)
        assert BasicProperties.decode(encoded) == props
        assert BasicProperties.decode(memoryview(encoded)) == props


@SETTINGS
@given(st.fixed_dictionaries({}, optional=PROPERTY_STRATEGIES))
def test_random_properties_roundtrip(kwargs: dict[str, Any]) -> None:
    props = BasicProperties(**kwargs)
    encoded = props.encode()
    assert BasicProperties.decode(encoded) == props
    assert decode_headers_only(encoded) == props.headers
    for cut in range(len(encoded)):
        with pytest.raises(SyntaxError_):
            BasicProperties.decode(encoded[:cut])


@SETTINGS
@given(st.binary(max_size=64))
def test_random_property_bytes_only_raise_amqp_errors(buf: bytes) -> None:
    for decoder in (BasicProperties.decode, decode_headers_only):
        try:
            decoder(buf)
        except AMQPError:
            pass


def test_property_errors() -> None:
    with pytest.raises(SyntaxError_, match="unknown property flags"):
        BasicProperties.decode(b"\x00\x01")
    with pytest.raises(SyntaxError_):
        BasicProperties.decode(b"\x80\x00\x01\xff")
    with pytest.raises(SyntaxError_):
        BasicProperties(content_type="x" * 256).encode()
    with pytest.raises(SyntaxError_):
        BasicProperties(priority=256).encode()
    assert decode_headers_only(BasicProperties(content_type="t").encode()) is None


def test_every_property_type_has_a_sample_value() -> None:
    # Guards the exhaustive subset test against a property type without a sample value.
    assert set(PROPERTY_TYPES.values()) <= set(SAMPLE_VALUES)
