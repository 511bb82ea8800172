"""The local random exchange type (``x-local-random``), as RabbitMQ 4 defines it: each
message goes to one queue picked at random among the bound queues that live on this node,
for a publisher that wants the queue next to it (request/reply with local workers).

Its binding rules are RabbitMQ 4's: the binding key must be empty and the destination a
classic queue (406 with RabbitMQ's texts otherwise; an exchange is "not found" as a queue).
On one node every queue is local; ``is_local`` is where a cluster says which are not.

This module imports nothing from leveret but :mod:`leveret.errors` and its siblings.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, ClassVar

from leveret.errors import PreconditionFailed
from leveret.model.exchanges.base import (
    EMPTY_ROUTE,
    BaseExchangeType,
    Destination,
    FieldTable,
    Frozen,
    register,
)
from leveret.model.exchanges.random_choice import BindingRows

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

__all__ = ["LocalRandomExchange"]


def _everywhere(destination: Destination) -> bool:
    return True


@register
class LocalRandomExchange(BaseExchangeType):
    """One local bound queue picked at random per message."""

    TYPE_NAME: ClassVar[str] = "x-local-random"
    NEEDS_MESSAGE: ClassVar[bool] = False
    rng: ClassVar[random.Random] = random.Random()

    __slots__ = ("_rows", "is_local")

    def __init__(self) -> None:
        super().__init__()
        self._rows = BindingRows()
        # Whether a bound queue lives on this node (a single node: all of them).
        self.is_local: Callable[[Destination], bool] = _everywhere

    def validate_binding(
        self, routing_key: str, arguments: FieldTable, target: str = "classic"
    ) -> None:
        if routing_key:
            raise PreconditionFailed(f"Non empty binding '{routing_key}' key not permitted")
        if target == "exchange":
            raise PreconditionFailed("Destination not found")
        if target != "classic":
            raise PreconditionFailed(
                f"Queue type rabbit_{target}_queue not valid for this exchange type"
            )

    def route(self, routing_key: str, headers: FieldTable | None) -> Collection[Destination]:
        if self.is_local is _everywhere:
            return self._rows.pick(self.rng)
        local = [d for d in self._rows.rows if self.is_local(d)]
        if len(local) < 2:
            return (local[0],) if local else EMPTY_ROUTE
        return (local[self.rng.randrange(len(local))],)

    def _added(
        self, destination: Destination, routing_key: str, frozen: Frozen, arguments: FieldTable
    ) -> None:
        self._rows.add(destination)

    def _removed(self, destination: Destination, routing_key: str, frozen: Frozen) -> None:
        self._rows.remove(destination)
