"""The direct exchange type: a message goes to the bindings whose key equals its key.

``route`` is one dict lookup returning a tuple built at bind time, so a publish
allocates nothing here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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

__all__ = ["DirectExchange"]


@register
class DirectExchange(BaseExchangeType):
    """Exact routing-key match (AMQP 0-9-1 section 3.1.3.1)."""

    TYPE_NAME = "direct"
    NEEDS_MESSAGE = False

    __slots__ = ("_index", "_routes")

    def __init__(self) -> None:
        super().__init__()
        self._index: dict[str, RefCounts] = {}
        # routing key -> destinations, rebuilt only when a key's destination set changes
        self._routes: dict[str, tuple[Destination, ...]] = {}

    def route(self, routing_key: str, headers: FieldTable | None) -> Collection[Destination]:
        return self._routes.get(routing_key, EMPTY_ROUTE)

    def _added(
        self, destination: Destination, routing_key: str, frozen: Frozen, arguments: FieldTable
    ) -> None:
        refs = self._index.get(routing_key)
        if refs is None:
            refs = self._index[routing_key] = RefCounts()
        if refs.incr(destination):
            self._routes[routing_key] = refs.members

    def _removed(self, destination: Destination, routing_key: str, frozen: Frozen) -> None:
        refs = self._index[routing_key]
        if refs.decr(destination):
            if refs:
                self._routes[routing_key] = refs.members
            else:
                del self._index[routing_key]
                del self._routes[routing_key]
