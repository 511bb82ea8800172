"""The headers exchange type: bindings match on the message's header table.

Semantics are RabbitMQ's (``rabbit_exchange_type_headers``):

* ``x-match`` is ``all`` (the default when absent), ``any``, ``all-with-x`` or
  ``any-with-x``; any other value, or a value that is not a string, fails the bind
  with 406 PRECONDITION_FAILED and RabbitMQ's message.
* Binding keys starting with ``x-`` are ignored for matching, except with the
  ``-with-x`` variants (``x-match`` itself is always ignored).
* ``all``: every remaining binding key must be present in the headers with a matching
  value, so a binding with no such keys matches every message. ``any``: at least one
  must, so a binding with no such keys matches nothing.
* A binding value of ``None`` (void) matches the mere presence of the header. Otherwise
  values match as Erlang's ``==`` compares the values RabbitMQ keeps (``values_match``):
  integers, floats and timestamps by number, a decimal only as the same (scale, digits),
  a ``bool`` only as itself, ``str`` and ``bytes`` as the same UTF-8 binary; inside arrays
  and tables the element types must agree too.
* No headers on the message (``None``) is an empty table.

The routing key takes no part in matching. Bindings with equal arguments share one
compiled matcher.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from itertools import chain
from typing import TYPE_CHECKING, Final

from leveret.errors import PreconditionFailed
from leveret.model.exchanges.base import (
    EMPTY_ROUTE,
    BaseExchangeType,
    Destination,
    FieldTable,
    Frozen,
    RefCounts,
    register,
)

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ["X_MATCH_MODES", "HeadersExchange", "headers_match", "values_match"]

X_MATCH_MODES: Final = frozenset({"all", "any", "all-with-x", "any-with-x"})

_MISSING: Final = object()
_NUMBER: Final = (int, float, Decimal)
_BINARY: Final = (bytes, bytearray, memoryview)

_Pred = Callable[[object], bool]


def _as_binary(value: object) -> bytes | None:
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, _BINARY):
        return bytes(value)
    return None


def _seconds(value: object) -> object:
    """A timestamp is an integer of POSIX seconds in RabbitMQ's tables."""
    if type(value).__name__ == "datetime":
        return int(value.timestamp())  # type: ignore[attr-defined]
    return value


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def values_match(spec: object, value: object) -> bool:
    """Whether header ``value`` equals binding value ``spec``: Erlang's ``==`` on the values
    RabbitMQ keeps (``rabbit_exchange_type_headers``).

    Integers of every width, floats and timestamps (integer seconds) compare by number
    (``1 == 1.0``); a decimal is a (scale, digits) pair, equal only to the same pair; a
    ``bool`` only to itself; ``str`` and ``bytes`` as the same UTF-8 binary. Arrays and
    tables keep their elements' types, so there an int never equals a float or a
    timestamp (RabbitMQ also tells int32 from int64 apart there; decoded values no longer
    carry the width, so Leveret cannot). ``None`` here equals only ``None``;
    presence-only matching of a top-level void binding value is the caller's business.
    """
    if spec is None:
        return value is None
    if isinstance(spec, bool):
        return isinstance(value, bool) and value == spec
    if isinstance(spec, Decimal):
        return isinstance(value, Decimal) and value.as_tuple() == spec.as_tuple()
    spec = _seconds(spec)
    if _is_number(spec):
        value = _seconds(value)
        return _is_number(value) and value == spec
    if isinstance(spec, str | bytes | bytearray | memoryview):
        binary = _as_binary(value)
        return binary is not None and binary == _as_binary(spec)
    if isinstance(spec, Mapping):
        if not isinstance(value, Mapping) or len(value) != len(spec):
            return False
        for key, item in spec.items():
            other = value.get(key, _MISSING)
            if other is _MISSING or not _typed_match(item, other):
                return False
        return True
    if isinstance(spec, list | tuple):
        if not isinstance(value, list | tuple) or len(value) != len(spec):
            return False
        return all(_typed_match(a, b) for a, b in zip(spec, value, strict=True))
    return bool(spec == value)


def _kind(value: object) -> str:
    """The field type a decoded value came as, as far as it can be told (no int widths)."""
    if isinstance(value, str):
        return "longstr"
    if isinstance(value, _BINARY):
        return "binary"
    return (
        _amqp_type_name(value) if not isinstance(value, int) or isinstance(value, bool) else "int"
    )


def _typed_match(spec: object, value: object) -> bool:
    """Inside arrays and tables RabbitMQ compares (type, value) pairs."""
    return _kind(spec) == _kind(value) and values_match(spec, value)


def _compile_value(spec: object) -> _Pred | None:
    """A predicate on a present header value; None means presence is enough."""
    if spec is None:
        return None
    if isinstance(spec, bool):
        flag = spec
        return lambda value: isinstance(value, bool) and value == flag
    if isinstance(spec, int | float):
        number = spec
        return lambda value: (
            (isinstance(value, int | float) and not isinstance(value, bool) and value == number)
            or values_match(number, value)
        )
    binary = _as_binary(spec)
    if binary is not None:
        try:
            text: str | None = binary.decode("utf-8")
        except UnicodeDecodeError:
            text = None

        def match_binary(value: object) -> bool:
            if isinstance(value, str):
                return value == text
            if isinstance(value, _BINARY):
                return value == binary
            return False

        return match_binary
    return lambda value: values_match(spec, value)


def _x_match_mode(arguments: FieldTable) -> str:
    mode = arguments.get("x-match", "all")
    if isinstance(mode, _BINARY):
        try:
            mode = bytes(mode).decode("utf-8")
        except UnicodeDecodeError:
            return "all"
    return mode if isinstance(mode, str) and mode in X_MATCH_MODES else "all"


class _Matcher:
    """A compiled binding-argument table."""

    __slots__ = ("any", "pairs")

    def __init__(self, arguments: FieldTable) -> None:
        mode = _x_match_mode(arguments)
        with_x = mode.endswith("-with-x")
        self.any = mode.startswith("any")
        self.pairs: tuple[tuple[str, _Pred | None], ...] = tuple(
            (key, _compile_value(spec))
            for key, spec in arguments.items()
            if key != "x-match" and (with_x or not key.startswith("x-"))
        )

    def __call__(self, headers: FieldTable) -> bool:
        if self.any:
            for key, pred in self.pairs:
                value = headers.get(key, _MISSING)
                if value is not _MISSING and (pred is None or pred(value)):
                    return True
            return False
        for key, pred in self.pairs:
            value = headers.get(key, _MISSING)
            if value is _MISSING or (pred is not None and not pred(value)):
                return False
        return True


def headers_match(arguments: FieldTable, headers: FieldTable | None) -> bool:
    """Whether a message with ``headers`` matches a binding with ``arguments``."""
    return _Matcher(arguments)(headers or {})


def _amqp_type_name(value: object) -> str:
    """The RabbitMQ field-type name of a decoded value (for error messages)."""
    if value is None:
        return "void"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, list | tuple):
        return "array"
    return "timestamp" if type(value).__name__ == "datetime" else type(value).__name__


def _erlang_repr(value: object) -> str:
    """Roughly how RabbitMQ's ``~tp`` prints a field value."""
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'<<"{value}">>'
    if isinstance(value, _BINARY):
        return f'<<"{bytes(value).decode("utf-8", "replace")}">>'
    return str(value)


class _Group:
    """The destinations bound with one argument table, and its compiled matcher."""

    __slots__ = ("matcher", "refs")

    def __init__(self, arguments: FieldTable) -> None:
        self.matcher = _Matcher(arguments)
        self.refs = RefCounts()


@register
class HeadersExchange(BaseExchangeType):
    """Match on message headers (AMQP 0-9-1 section 3.1.3.4), RabbitMQ-exact."""

    TYPE_NAME = "headers"
    NEEDS_MESSAGE = True

    __slots__ = ("_groups",)

    def __init__(self) -> None:
        super().__init__()
        self._groups: dict[Frozen, _Group] = {}

    def validate_binding(
        self, routing_key: str, arguments: FieldTable, target: str = "classic"
    ) -> None:
        if "x-match" not in arguments:
            return
        mode = arguments["x-match"]
        if isinstance(mode, str | bytes | bytearray | memoryview):
            text = mode if isinstance(mode, str) else bytes(mode).decode("utf-8", "replace")
            if text in X_MATCH_MODES:
                return
            raise PreconditionFailed(
                f"Invalid x-match field value {_erlang_repr(mode)}; "
                "expected all, any, all-with-x, or any-with-x"
            )
        raise PreconditionFailed(
            f"Invalid x-match field type {_amqp_type_name(mode)} "
            f"(value {_erlang_repr(mode)}); expected longstr"
        )

    def route(self, routing_key: str, headers: FieldTable | None) -> Collection[Destination]:
        table: FieldTable = headers if headers is not None else {}
        found = [group.refs.members for group in self._groups.values() if group.matcher(table)]
        if not found:
            return EMPTY_ROUTE
        if len(found) == 1:
            return found[0]
        return tuple(dict.fromkeys(chain.from_iterable(found)))

    def _added(
        self, destination: Destination, routing_key: str, frozen: Frozen, arguments: FieldTable
    ) -> None:
        group = self._groups.get(frozen)
        if group is None:
            group = self._groups[frozen] = _Group(arguments)
        group.refs.incr(destination)

    def _removed(self, destination: Destination, routing_key: str, frozen: Frozen) -> None:
        group = self._groups[frozen]
        group.refs.decr(destination)
        if not group.refs.counts:
            del self._groups[frozen]
