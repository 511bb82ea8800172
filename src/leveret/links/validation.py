"""RabbitMQ's parameter validation (``rabbit_parameter_validation``): typed checks of a
JSON object's keys, mandatory and optional, unknown keys refused, with RabbitMQ's texts.

Shared by the shovel and federation parameters. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "Check",
    "ValidationError",
    "binary",
    "boolean",
    "enum",
    "erl",
    "number",
    "proplist",
    "validation_failed",
]

Check = Callable[[str, object], "str | None"]


class ValidationError(ValueError):
    """The parameter was refused; ``errors`` are RabbitMQ's lines."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__(validation_failed(errors))
        self.errors = errors


def validation_failed(errors: list[str]) -> str:
    """The text RabbitMQ answers a refused parameter with."""
    return "Validation failed\n\n" + "\n".join(errors) + "\n"


def erl(value: object) -> str:
    """A JSON value as Erlang's ``~p`` prints the term RabbitMQ decoded it to."""
    if isinstance(value, str):
        return '<<"' + value.replace("\\", "\\\\").replace('"', '\\"') + '">>'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ",".join(erl(v) for v in value) + "]"
    if isinstance(value, dict):
        return "#{" + ",".join(f"{erl(k)} => {erl(v)}" for k, v in value.items()) + "}"
    return str(value)


def number(name: str, value: object) -> str | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return None
    return f"{name} should be a number, actually was {erl(value)}"


def binary(name: str, value: object) -> str | None:
    if isinstance(value, str):
        return None
    return f"{name} should be binary, actually was {erl(value)}"


def boolean(name: str, value: object) -> str | None:
    if isinstance(value, bool):
        return None
    return f"{name} should be boolean, actually was {erl(value)}"


def enum(*options: str) -> Check:
    def check(name: str, value: object) -> str | None:
        if not isinstance(value, str):
            return f"{name} should be binary, actually was {erl(value)}"
        if value not in options:
            listed = "[" + ",".join(erl(o) for o in options) + "]"
            return f"{name} should be one of {listed}, actually was {erl(value)}"
        return None

    return check


def proplist(
    name: str, constraints: list[tuple[str, Check, bool]], term: Mapping[str, Any]
) -> list[str]:
    """The errors of ``term`` against ``(key, check, mandatory)`` constraints, RabbitMQ's
    order (the last constraint's first, unknown keys first of all)."""
    errors: list[str] = []
    remaining = dict(term)
    for key, check, mandatory in constraints:
        if key in remaining:
            error = check(key, remaining.pop(key))
            if error is not None:
                errors.insert(0, error)
        elif mandatory:
            errors.insert(0, f'Key "{key}" not found in {name}')
    if remaining:
        unknown = "[" + ",".join(f"{{{erl(k)},{erl(v)}}}" for k, v in remaining.items()) + "]"
        errors.insert(0, f"Unrecognised terms {unknown} in {name}")
    return errors
