"""The exchange-type interface, the shared binding bookkeeping and the type registry.

An exchange type owns the bindings of one exchange and answers ``route``: which
destinations (queues or exchanges of the vhost, compared by hash/identity) a message with
a routing key goes to. A type that must look at the message itself (its headers, its
properties, or to keep it) sets ``NEEDS_MESSAGE`` and the router calls ``route_message``
instead, so the types that route on the key alone cost nothing more. A binding is
identified, as in RabbitMQ, by ``(destination, routing_key, arguments)``: the same key with
different arguments makes two bindings. Arguments are turned into a hashable canonical form
by :func:`freeze`.

This module imports nothing from leveret but :mod:`leveret.errors`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping
from decimal import Decimal
from typing import ClassVar, Protocol, TypeAlias, TypeVar

from leveret.errors import CommandInvalid

__all__ = [
    "ARGUMENT_TYPES",
    "EMPTY_ROUTE",
    "TYPES",
    "BaseExchangeType",
    "Destination",
    "ExchangeType",
    "FieldTable",
    "Frozen",
    "RoutedMessage",
    "freeze",
    "make_exchange_type",
]

Destination: TypeAlias = Hashable
"""A queue or exchange object of the vhost; compared by identity/hash."""

FieldTable: TypeAlias = Mapping[str, object]
"""An AMQP field table as the model sees it: a plain mapping of str to Python values."""

Frozen: TypeAlias = Hashable
"""The canonical hashable form of a field value, made by :func:`freeze`."""

EMPTY_ROUTE: tuple[Destination, ...] = ()
"""The shared empty result of ``route`` (no allocation per unroutable publish)."""


def freeze(value: object) -> Frozen:
    """A hashable canonical form of a field value, used for binding identity.

    Tables become key-sorted tuples and arrays tuples, tagged so that a table, an array
    and a scalar never collide. Scalars keep their AMQP type apart: ``1``, ``1.0``,
    ``True`` and ``Decimal(1)`` freeze differently (RabbitMQ compares binding
    arguments as typed terms), while ``str`` and ``bytes`` stay as they are.
    """
    if value is None or type(value) is str or type(value) is bytes:
        return value
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        return ("i", value)
    if isinstance(value, float):
        # repr keeps -0.0 apart from 0.0 and makes NaN equal to itself.
        return ("f", repr(value))
    if isinstance(value, Decimal):
        return ("d", str(value))
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, Mapping):
        return ("t", tuple(sorted((str(k), freeze(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("a", tuple(freeze(v) for v in value))
    try:
        hash(value)
    except TypeError:
        return (type(value).__name__, repr(value))
    return (type(value).__name__, value)


EMPTY_ARGS: Frozen = freeze({})


def _freeze_args(arguments: FieldTable) -> Frozen:
    return freeze(arguments) if arguments else EMPTY_ARGS


class RoutedMessage(Protocol):
    """What an exchange type may read of the message it routes (``model.message.Message``
    is the one): the routing key it was published with, its headers and its properties
    (read with ``getattr``: each wire format has its own)."""

    @property
    def routing_key(self) -> str: ...

    @property
    def headers(self) -> Mapping[str, object] | None: ...

    @property
    def properties(self) -> object: ...


class ExchangeType(Protocol):
    """What the vhost and router need from an exchange type (one instance per exchange)."""

    TYPE_NAME: ClassVar[str]
    # True: the router calls route_message (the type reads the message), else route.
    NEEDS_MESSAGE: ClassVar[bool]

    def validate_binding(
        self, routing_key: str, arguments: FieldTable, target: str = "classic"
    ) -> None:
        """Raise :class:`leveret.errors.PreconditionFailed` (406) on a bad binding.

        ``target`` is what the binding leads to: ``"exchange"``, or the queue's type
        (``"classic"``, ``"quorum"``, ``"stream"``)."""

    def add_binding(
        self, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> bool:
        """Add a binding; False if this exact binding already existed."""

    def remove_binding(
        self, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> bool:
        """Remove a binding; False if it was absent."""

    def remove_destination(self, destination: Destination) -> int:
        """Drop every binding to ``destination``; return how many were dropped."""

    def has_binding(
        self, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> bool:
        """Whether this exact binding exists."""

    def has_bindings_to(self, destination: Destination) -> bool:
        """Whether any binding leads to ``destination``."""

    def route(self, routing_key: str, headers: FieldTable | None) -> Collection[Destination]:
        """The destinations a message goes to, each at most once. Do not mutate."""

    def route_message(self, routing_key: str, message: RoutedMessage) -> Collection[Destination]:
        """``route`` for a type with ``NEEDS_MESSAGE``: the message itself is at hand."""

    def bindings(self) -> Iterator[tuple[Destination, str, FieldTable]]:
        """Every binding as ``(destination, routing_key, arguments)``."""

    def __len__(self) -> int:
        """The number of bindings."""


class BaseExchangeType(ABC):
    """Binding bookkeeping shared by the built-in types.

    Subclasses keep their own routing index through the ``_added`` / ``_removed`` hooks,
    which run once per binding actually added or removed, and implement ``route``.
    """

    TYPE_NAME: ClassVar[str]
    NEEDS_MESSAGE: ClassVar[bool] = False

    __slots__ = ("_bindings", "_by_dest")

    def __init__(self) -> None:
        # (destination, routing_key, frozen arguments) -> arguments as given
        self._bindings: dict[tuple[Destination, str, Frozen], FieldTable] = {}
        # destination -> {(routing_key, frozen arguments): None}, insertion ordered
        self._by_dest: dict[Destination, dict[tuple[str, Frozen], None]] = {}

    def validate_binding(
        self, routing_key: str, arguments: FieldTable, target: str = "classic"
    ) -> None:
        """Every binding is valid unless a subclass says otherwise."""
        return

    def add_binding(
        self, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> bool:
        frozen = _freeze_args(arguments)
        ident = (destination, routing_key, frozen)
        if ident in self._bindings:
            return False
        self._bindings[ident] = arguments
        per_dest = self._by_dest.get(destination)
        if per_dest is None:
            per_dest = self._by_dest[destination] = {}
        per_dest[(routing_key, frozen)] = None
        self._added(destination, routing_key, frozen, arguments)
        return True

    def remove_binding(
        self, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> bool:
        frozen = _freeze_args(arguments)
        ident = (destination, routing_key, frozen)
        if self._bindings.pop(ident, None) is None:
            return False
        per_dest = self._by_dest[destination]
        del per_dest[(routing_key, frozen)]
        if not per_dest:
            del self._by_dest[destination]
        self._removed(destination, routing_key, frozen)
        return True

    def remove_destination(self, destination: Destination) -> int:
        per_dest = self._by_dest.pop(destination, None)
        if per_dest is None:
            return 0
        bindings = self._bindings
        for routing_key, frozen in per_dest:
            del bindings[(destination, routing_key, frozen)]
            self._removed(destination, routing_key, frozen)
        return len(per_dest)

    def has_binding(
        self, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> bool:
        return (destination, routing_key, _freeze_args(arguments)) in self._bindings

    def has_bindings_to(self, destination: Destination) -> bool:
        return destination in self._by_dest

    def bindings(self) -> Iterator[tuple[Destination, str, FieldTable]]:
        for (destination, routing_key, _), arguments in list(self._bindings.items()):
            yield destination, routing_key, arguments

    def __len__(self) -> int:
        return len(self._bindings)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} bindings={len(self._bindings)}>"

    @abstractmethod
    def route(self, routing_key: str, headers: FieldTable | None) -> Collection[Destination]:
        """The destinations a message goes to, each at most once. Do not mutate."""

    def route_message(self, routing_key: str, message: RoutedMessage) -> Collection[Destination]:
        """By default a type that reads the message reads its headers."""
        return self.route(routing_key, message.headers)

    @abstractmethod
    def _added(
        self, destination: Destination, routing_key: str, frozen: Frozen, arguments: FieldTable
    ) -> None:
        """Index a binding that was just added."""

    @abstractmethod
    def _removed(self, destination: Destination, routing_key: str, frozen: Frozen) -> None:
        """Unindex a binding that was just removed."""


class RefCounts:
    """Destinations with a count of bindings each, and a cached tuple of them.

    The tuple is rebuilt only when a destination appears or disappears, so ``route``
    hands out the same object publish after publish.
    """

    __slots__ = ("counts", "members")

    def __init__(self) -> None:
        self.counts: dict[Destination, int] = {}
        self.members: tuple[Destination, ...] = EMPTY_ROUTE

    def incr(self, destination: Destination) -> bool:
        """Count one more binding; True if ``destination`` is new (members changed)."""
        counts = self.counts
        n = counts.get(destination, 0)
        counts[destination] = n + 1
        if n:
            return False
        self.members = (*self.members, destination)
        return True

    def decr(self, destination: Destination) -> bool:
        """Count one binding less; True if ``destination`` left (members changed)."""
        counts = self.counts
        n = counts[destination] - 1
        if n:
            counts[destination] = n
            return False
        del counts[destination]
        self.members = tuple(counts)
        return True

    def __bool__(self) -> bool:
        return bool(self.counts)


TYPES: dict[str, type[ExchangeType]] = {}
"""Registry of exchange types by name.

Each type module registers its class with :func:`register`; the package ``__init__``
imports them all, and it runs before any of its submodules can be imported.
"""


ARGUMENT_TYPES: dict[str, Callable[[FieldTable], ExchangeType]] = {}
"""Types whose instances depend on the exchange's arguments (``x-delayed-message`` takes
its routing from ``x-delayed-type``), made from them; also in :data:`TYPES`."""


_T = TypeVar("_T", bound=type[BaseExchangeType])


def register(cls: _T) -> _T:
    """Add ``cls`` to :data:`TYPES` under its ``TYPE_NAME``."""
    TYPES[cls.TYPE_NAME] = cls
    return cls


def make_exchange_type(type_name: str, arguments: FieldTable | None = None) -> ExchangeType:
    """A fresh, empty instance of the exchange type called ``type_name``, for an exchange
    declared with ``arguments`` (None: only to check that the type exists).

    An unknown name raises :class:`leveret.errors.CommandInvalid` (503), as RabbitMQ
    answers an ``exchange.declare`` of an unknown type; a type that takes its arguments
    raises what they are wrong with.
    """
    cls = TYPES.get(type_name)
    if cls is None:
        raise CommandInvalid(f"unknown exchange type '{type_name}'")
    factory = ARGUMENT_TYPES.get(type_name)
    if factory is not None and arguments is not None:
        return factory(arguments)
    return cls()
