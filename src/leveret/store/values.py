"""Field-table values (queue, exchange and binding arguments) as tagged JSON, so that they
come back with their Python types: bytes stay bytes, a Decimal stays a Decimal."""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from collections.abc import Mapping
from typing import Any


def tag(value: object) -> Any:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return {"i": str(value)}
    if isinstance(value, float):
        return {"f": repr(value)}
    if isinstance(value, bytes | bytearray):
        return {"b": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, decimal.Decimal):
        return {"d": str(value)}
    if isinstance(value, datetime.datetime):
        return {"t": value.isoformat()}
    if isinstance(value, Mapping):
        return {"m": {str(k): tag(v) for k, v in value.items()}}
    if isinstance(value, list | tuple):
        return {"l": [tag(v) for v in value]}
    raise TypeError(f"cannot store a value of type {type(value).__name__}")


def untag(value: Any) -> object:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((kind, inner),) = value.items()
        if kind == "i":
            return int(inner)
        if kind == "f":
            return float(inner)
        if kind == "b":
            return base64.b64decode(inner)
        if kind == "d":
            return decimal.Decimal(inner)
        if kind == "t":
            return datetime.datetime.fromisoformat(inner)
        if kind == "m":
            return {k: untag(v) for k, v in inner.items()}
        if kind == "l":
            return [untag(v) for v in inner]
    raise ValueError(f"not a stored value: {value!r}")


def dump_table(table: Mapping[str, object]) -> Any:
    return {str(k): tag(v) for k, v in table.items()}


def load_table(data: Any) -> dict[str, object]:
    if not isinstance(data, dict):
        raise ValueError(f"not a stored table: {data!r}")
    return {k: untag(v) for k, v in data.items()}


def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))
