"""The modulus-hash exchange type (``x-modulus-hash``), as RabbitMQ's rabbitmq_sharding
plugin (3.10) defines it: a message goes to binding number ``phash2([RoutingKey]) rem N``
of the exchange's N bindings (``erlang_hash.py``), taken in the order of RabbitMQ's route
table: by binding key, then destination (exchanges before queues, then by name), then
arguments. So the same bindings send each key where RabbitMQ sends it. Every binding
counts (a queue bound with two keys owns two slots); binding keys are otherwise ignored.

This module imports nothing from leveret but :mod:`leveret.errors` and its siblings.
"""

from __future__ import annotations

from bisect import insort
from typing import TYPE_CHECKING, ClassVar, Final, TypeAlias

from leveret.model.exchanges.base import (
    EMPTY_ROUTE,
    BaseExchangeType,
    Destination,
    FieldTable,
    Frozen,
    register,
)
from leveret.model.exchanges.erlang_hash import phash2

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ["ModulusHashExchange", "route_table_order"]

CACHE_SIZE: Final = 4096

Order: TypeAlias = tuple[bytes, str, bytes, str, int]


def route_table_order(destination: Destination, routing_key: str, frozen: Frozen) -> Order:
    """Where a binding sorts in RabbitMQ's route table (an ordered set of
    ``#binding{source, key, destination = #resource{vhost, kind, name}, args}``): by key,
    then kind (the atom ``exchange`` before ``queue``), then name, then arguments."""
    kind = getattr(destination, "resource_kind", "queue")
    name = str(getattr(destination, "name", ""))
    return (
        routing_key.encode("utf-8", "surrogatepass"),
        kind,
        name.encode("utf-8", "surrogatepass"),
        repr(frozen),
        id(destination),
    )


@register
class ModulusHashExchange(BaseExchangeType):
    """``phash2(routing keys) rem N`` over the bindings in route-table order."""

    TYPE_NAME: ClassVar[str] = "x-modulus-hash"
    NEEDS_MESSAGE: ClassVar[bool] = False

    __slots__ = ("_cache", "_rows", "_slots")

    def __init__(self) -> None:
        super().__init__()
        self._rows: list[tuple[Order, Destination]] = []
        self._slots: list[Destination] = []
        self._cache: dict[str, Destination] = {}

    def route(self, routing_key: str, headers: FieldTable | None) -> Collection[Destination]:
        slots = self._slots
        if not slots:
            return EMPTY_ROUTE
        hit = self._cache.get(routing_key)
        if hit is None:
            key = phash2([routing_key.encode("utf-8", "surrogatepass")])
            hit = slots[key % len(slots)]
            if len(self._cache) >= CACHE_SIZE:
                self._cache.clear()
            self._cache[routing_key] = hit
        return (hit,)

    def _added(
        self, destination: Destination, routing_key: str, frozen: Frozen, arguments: FieldTable
    ) -> None:
        row = (route_table_order(destination, routing_key, frozen), destination)
        insort(self._rows, row, key=lambda r: r[0])
        self._rebuild()

    def _removed(self, destination: Destination, routing_key: str, frozen: Frozen) -> None:
        order = route_table_order(destination, routing_key, frozen)
        self._rows = [row for row in self._rows if row[0] != order]
        self._rebuild()

    def _rebuild(self) -> None:
        self._slots = [row[1] for row in self._rows]
        self._cache.clear()
