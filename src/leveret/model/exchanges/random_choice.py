"""The random exchange type (``x-random``), as RabbitMQ's rabbitmq_random_exchange plugin
(3.10) defines it: each message goes to one binding's destination, picked uniformly at
random; the binding key and arguments play no part. Every binding counts, so a queue bound
twice (two keys) is picked twice as often, as in the plugin (it picks among the route
table's rows).

The random numbers come from ``rng`` (a ``random.Random``), which a test may replace to
make routing repeatable.

This module imports nothing from leveret but :mod:`leveret.errors` and its siblings.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, ClassVar

from leveret.model.exchanges.base import (
    EMPTY_ROUTE,
    BaseExchangeType,
    Destination,
    FieldTable,
    Frozen,
    register,
)

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ["BindingRows", "RandomExchange"]


class BindingRows:
    """One destination per binding (a destination bound twice is here twice), in no
    particular order; what the random types pick from."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[Destination] = []

    def add(self, destination: Destination) -> None:
        self.rows.append(destination)

    def remove(self, destination: Destination) -> None:
        self.rows.remove(destination)

    def pick(self, rng: random.Random) -> Collection[Destination]:
        rows = self.rows
        if len(rows) < 2:
            return (rows[0],) if rows else EMPTY_ROUTE
        return (rows[rng.randrange(len(rows))],)


@register
class RandomExchange(BaseExchangeType):
    """One binding picked at random per message."""

    TYPE_NAME: ClassVar[str] = "x-random"
    NEEDS_MESSAGE: ClassVar[bool] = False
    # Shared by every x-random exchange unless a test gives one its own.
    rng: ClassVar[random.Random] = random.Random()

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        super().__init__()
        self._rows = BindingRows()

    def route(self, routing_key: str, headers: FieldTable | None) -> Collection[Destination]:
        return self._rows.pick(self.rng)

    def _added(
        self, destination: Destination, routing_key: str, frozen: Frozen, arguments: FieldTable
    ) -> None:
        self._rows.add(destination)

    def _removed(self, destination: Destination, routing_key: str, frozen: Frozen) -> None:
        self._rows.remove(destination)
