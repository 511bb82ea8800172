"""The fanout exchange type: every bound destination gets every message.

The routing key and arguments of a binding take part in its identity only (as in
RabbitMQ); ``route`` returns one cached tuple of the distinct destinations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.model.exchanges.base import (
    BaseExchangeType,
    Destination,
    FieldTable,
    Frozen,
    RefCounts,
    register,
)

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ["FanoutExchange"]


@register
class FanoutExchange(BaseExchangeType):
    """Unconditional delivery to all bindings (AMQP 0-9-1 section 3.1.3.2)."""

    TYPE_NAME = "fanout"
    NEEDS_MESSAGE = False

    __slots__ = ("_refs",)

    def __init__(self) -> None:
        super().__init__()
        self._refs = RefCounts()

    def route(self, routing_key: str, headers: FieldTable | None) -> Collection[Destination]:
        return self._refs.members

    def _added(
        self, destination: Destination, routing_key: str, frozen: Frozen, arguments: FieldTable
    ) -> None:
        self._refs.incr(destination)

    def _removed(self, destination: Destination, routing_key: str, frozen: Frozen) -> None:
        self._refs.decr(destination)
