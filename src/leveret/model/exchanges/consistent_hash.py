"""The consistent-hash exchange type (``x-consistent-hash``), as RabbitMQ's
rabbitmq_consistent_hash_exchange plugin (3.10) defines it, key for key.

A binding's key is its weight: a queue bound with ``"3"`` owns three buckets of a ring.
Buckets are numbered in the order destinations were bound (a destination's buckets in a
row), and a message goes to the destination owning bucket
``jump_consistent_hash(phash2(value), total)`` (``erlang_hash.py``), where the value is

- the routing key (the default),
- the header named by the exchange argument ``hash-header`` (its ``{Type, Value}`` term as
  RabbitMQ holds it; ``undefined`` when absent), or
- the property named by ``hash-property``: ``message_id``, ``correlation_id`` or
  ``timestamp`` (as decimal text).

The plugin's rules, followed as they are: the binding key must be an integer of at least 1
(406 otherwise, with its texts); a destination bound a second time (another key) keeps its
first weight; removing any binding of a destination takes all of its buckets away, and the
buckets after them move down; ``hash-header`` and ``hash-property`` are exclusive (406),
and only a string value of either counts. Where Leveret differs (a message with ``CC``
keys; the order of the ring after a restart) is in ``docs/compatibility.md``.

Recently hashed values are remembered (a bounded cache, emptied when a binding changes):
a key seen before costs a dict lookup.

This module imports nothing from leveret but :mod:`leveret.errors` and its siblings.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from typing import TYPE_CHECKING, ClassVar, Final

from leveret.errors import PreconditionFailed
from leveret.model.exchanges.base import (
    ARGUMENT_TYPES,
    EMPTY_ROUTE,
    BaseExchangeType,
    Destination,
    FieldTable,
    Frozen,
    RoutedMessage,
    register,
)
from leveret.model.exchanges.erlang_hash import (
    UNDEFINED,
    Term,
    erlang_repr,
    field_term,
    jump_consistent_hash,
    phash2,
)

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ["HASH_PROPERTIES", "ConsistentHashExchange", "binding_weight"]

HASH_PROPERTIES: Final = ("correlation_id", "message_id", "timestamp")
_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
# Hashed values remembered per exchange before the cache starts again.
CACHE_SIZE: Final = 4096


def binding_weight(routing_key: str) -> int:
    """The weight a binding key gives, checked as the plugin's ``validate_binding/2``
    (Erlang's ``list_to_integer``: a sign and digits, nothing else)."""
    if _INTEGER.fullmatch(routing_key) is None:
        raw = routing_key.encode("utf-8", "surrogatepass")
        raise PreconditionFailed(f"The binding key must be an integer: {erlang_repr(raw)}")
    weight = int(routing_key)
    if weight < 1:
        raise PreconditionFailed("The binding key must be greater than 0")
    return weight


def _hash_on(arguments: FieldTable) -> tuple[str | None, str | None]:
    """(header, property) the exchange hashes on, checked as the plugin's ``validate/1``;
    a value that is not a string is ignored, as the plugin ignores anything not a longstr."""
    header = arguments.get("hash-header")
    prop = arguments.get("hash-property")
    header = header if isinstance(header, str) else None
    prop = prop if isinstance(prop, str) else None
    if header is not None and prop is not None:
        raise PreconditionFailed("hash-header and hash-property are mutually exclusive")
    if prop is not None and prop not in HASH_PROPERTIES:
        raise PreconditionFailed(f"Unsupported property: {prop}")
    return header, prop


@register
class ConsistentHashExchange(BaseExchangeType):
    """Weighted consistent hashing over the bound destinations; see the module docstring."""

    TYPE_NAME: ClassVar[str] = "x-consistent-hash"
    NEEDS_MESSAGE: ClassVar[bool] = True

    __slots__ = ("_cache", "_ends", "_header", "_members", "_property", "_total", "_weights")

    def __init__(self, arguments: FieldTable | None = None) -> None:
        super().__init__()
        self._header, self._property = _hash_on(arguments or {})
        # The ring: destinations in bucket order, the bucket after each one's last, and the
        # weight each brought (the plugin's bucket map, kept as ranges).
        self._members: list[Destination] = []
        self._ends: list[int] = []
        self._weights: dict[Destination, int] = {}
        self._total = 0
        self._cache: dict[object, Destination] = {}

    def validate_binding(
        self, routing_key: str, arguments: FieldTable, target: str = "classic"
    ) -> None:
        binding_weight(routing_key)

    def route(self, routing_key: str, headers: FieldTable | None) -> Collection[Destination]:
        """Routing on the key alone (or on a header, given the headers)."""
        if self._property is not None:
            return self._pick_term(UNDEFINED)
        if self._header is not None:
            return self._pick_term(self._header_term(headers))
        return self._pick_key(routing_key)

    def route_message(self, routing_key: str, message: RoutedMessage) -> Collection[Destination]:
        if self._header is None and self._property is None:
            return self._pick_key(routing_key)
        if self._header is not None:
            return self._pick_term(self._header_term(message.headers))
        return self._pick_term(_property_term(message, self._property))

    def _header_term(self, headers: FieldTable | None) -> Term:
        name = self._header
        if not headers or name is None or name not in headers:
            return UNDEFINED
        return field_term(headers[name])

    def _pick_key(self, routing_key: str) -> Collection[Destination]:
        if not self._total:
            return EMPTY_ROUTE
        cache = self._cache
        hit = cache.get(routing_key)
        if hit is not None:
            return (hit,)
        chosen = self._bucket_owner(phash2(routing_key.encode("utf-8", "surrogatepass")))
        self._remember(routing_key, chosen)
        return (chosen,)

    def _pick_term(self, term: Term) -> Collection[Destination]:
        if not self._total:
            return EMPTY_ROUTE
        try:
            key: object = ("t", term)
            hash(key)
        except TypeError:  # tables and arrays are lists: not remembered
            return (self._bucket_owner(phash2(term)),)
        hit = self._cache.get(key)
        if hit is not None:
            return (hit,)
        chosen = self._bucket_owner(phash2(term))
        self._remember(key, chosen)
        return (chosen,)

    def _bucket_owner(self, key: int) -> Destination:
        bucket = jump_consistent_hash(key, self._total)
        return self._members[bisect_right(self._ends, bucket)]

    def _remember(self, key: object, destination: Destination) -> None:
        cache = self._cache
        if len(cache) >= CACHE_SIZE:
            cache.clear()
        cache[key] = destination

    def ring(self) -> list[tuple[Destination, int]]:
        """The destinations in bucket order with their weights (the plugin's ring state)."""
        return [(d, self._weights[d]) for d in self._members]

    def _added(
        self, destination: Destination, routing_key: str, frozen: Frozen, arguments: FieldTable
    ) -> None:
        if destination in self._weights:
            return  # the plugin keeps a destination's first weight
        weight = binding_weight(routing_key)
        self._weights[destination] = weight
        self._members.append(destination)
        self._total += weight
        self._ends.append(self._total)
        self._cache.clear()

    def _removed(self, destination: Destination, routing_key: str, frozen: Frozen) -> None:
        # The plugin drops every bucket of the destination, whichever binding went.
        weight = self._weights.pop(destination, None)
        if weight is None:
            return
        self._members.remove(destination)
        self._total -= weight
        ends = []
        end = 0
        for member in self._members:
            end += self._weights[member]
            ends.append(end)
        self._ends = ends
        self._cache.clear()


def _property_term(message: RoutedMessage, name: str | None) -> Term:
    """The plugin's value of a ``hash-property``: a binary, or ``undefined``."""
    value = getattr(message.properties, name or "", None)
    if value is None:
        return UNDEFINED
    if name == "timestamp":
        if isinstance(value, int):
            return str(value).encode()
        stamp = getattr(value, "timestamp", None)
        return str(int(stamp())).encode() if callable(stamp) else UNDEFINED
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8", "surrogatepass")


ARGUMENT_TYPES[ConsistentHashExchange.TYPE_NAME] = ConsistentHashExchange
