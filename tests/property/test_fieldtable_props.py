"""Property tests for the field-table codec: round trips and robustness on garbage."""

from __future__ import annotations

import datetime
import decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.errors import AMQPError
from leveret.protocol.amqp091.fieldtable import (
    FieldTable,
    FieldValue,
    decode_array,
    decode_table,
    encode_array,
    encode_table,
    field_values_equal,
)

# Left out of the compiled pass (scripts/test): the field-table codec is not compiled.
pytestmark = pytest.mark.pure_only

UTC = datetime.UTC

keys = st.text(max_size=20) | st.integers(250, 255).map(lambda n: "k" * n)
decimals = st.builds(
    lambda value, scale: decimal.Decimal(value).scaleb(-scale),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 255),
)
datetimes = st.datetimes(
    min_value=datetime.datetime(1970, 1, 1),
    max_value=datetime.datetime(9999, 12, 31, 23, 59, 59),
    timezones=st.just(UTC),
).map(lambda d: d.replace(microsecond=0))
scalars: st.SearchStrategy[FieldValue] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    decimals,
    st.text(),
    st.binary(max_size=40),
    datetimes,
)
values: st.SearchStrategy[FieldValue] = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=8,
)
tables: st.SearchStrategy[FieldTable] = st.dictionaries(keys, values, max_size=5)


@settings(max_examples=80, deadline=None)
@given(tables)
def test_table_round_trip(table: FieldTable) -> None:
    data = encode_table(table)
    decoded, end = decode_table(data, 0)
    assert end == len(data)
    assert decoded == table
    assert field_values_equal(decoded, table)
    assert decode_table(memoryview(b"pre" + data), 3) == (decoded, end + 3)


@settings(max_examples=40, deadline=None)
@given(st.lists(values, max_size=6))
def test_array_round_trip(items: list[FieldValue]) -> None:
    data = encode_array(items)
    assert decode_array(data, 0) == (items, len(data))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 8))
def test_random_bytes_only_raise_amqp_errors(data: bytes, offset: int) -> None:
    for decode in (decode_table, decode_array):
        try:
            decode(data, offset)
        except AMQPError:
            pass


@settings(max_examples=80, deadline=None)
@given(tables, st.data())
def test_mutated_tables_only_raise_amqp_errors(table: FieldTable, data: st.DataObject) -> None:
    encoded = bytearray(encode_table(table))
    if not encoded:
        return
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(encoded) - 1))
        encoded[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(encoded)))
    for buf in (bytes(encoded), bytes(encoded[:cut]), memoryview(encoded)):
        try:
            decode_table(buf, 0)
        except AMQPError:
            pass
