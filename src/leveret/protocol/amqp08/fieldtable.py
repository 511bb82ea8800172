"""AMQP 0-8 field tables: 0-8's five value types on output, every 0-9-1 type on input.

The 0-8 specification defines a field table as the 0-9-1 one does (a long byte length, then
``shortstr name, type octet, value`` entries) but with five value types only: ``S`` (long
string), ``I`` (signed 32-bit integer), ``D`` (decimal: scale octet + int32), ``T``
(64-bit POSIX time) and ``F`` (nested table). :func:`encode_table` writes nothing else and
refuses other Python values (RabbitMQ too keeps to them on a 0-8 connection: its
``connection.start`` there carries an empty ``capabilities`` table instead of 0-9-1's
booleans, ``tests/data/rabbitmq-headers``). :func:`decode_table` is the 0-9-1 decoder, so a
0-8 client that sends 0-9-1 letters is still understood. The generated 0-8 codec imports this
module; nothing else needs to.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Mapping

from leveret.errors import SyntaxError_
from leveret.protocol.amqp091 import fieldtable as _fieldtable
from leveret.protocol.amqp091.fieldtable import FieldTable, FieldValue, decode_table

__all__ = ["FieldTable", "FieldValue", "decode_table", "encode_table"]

_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1


def _check(value: object, depth: int) -> None:
    if depth > _fieldtable.MAX_DEPTH:
        raise SyntaxError_(f"field table: nested deeper than {_fieldtable.MAX_DEPTH} levels")
    if isinstance(value, bool):
        # bool is an int in Python, but 0-8 has no boolean type: refuse rather than send 'I'.
        raise SyntaxError_("field table: AMQP 0-8 has no boolean field type")
    if isinstance(value, int):
        if not _I32_MIN <= value <= _I32_MAX:
            raise SyntaxError_(f"field table: AMQP 0-8 integers are 32-bit, {value} is not")
    elif isinstance(value, Mapping):
        for item in value.values():
            _check(item, depth + 1)
    elif not isinstance(value, str | decimal.Decimal | datetime.datetime):
        raise SyntaxError_(
            f"field table: AMQP 0-8 has no field type for a {type(value).__name__}"
            " (only string, 32-bit integer, decimal, timestamp and table)"
        )


def encode_table(table: Mapping[str, FieldValue] | None) -> bytes:
    """Encode ``table`` with 0-8's types only (``None`` → empty table).

    Raises:
        SyntaxError_: a value 0-8 cannot carry (bool, float, bytes, list, None, int beyond
            32 bits), or one the 0-9-1 encoder refuses.
    """
    if table:
        for value in table.values():
            _check(value, 0)
    return _fieldtable.encode_table(table)
