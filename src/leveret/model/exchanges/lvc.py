"""The last-value-cache exchange type (``x-lvc``), as RabbitMQ's rabbitmq-lvc-exchange
plugin defines it: a direct exchange that also keeps the last message published with each
routing key, and hands it to a destination when it is bound with that key.

- Every message routed through the exchange is kept under its routing key (under each key
  of a message with ``CC``/``BCC`` keys: the router routes it once per key), routable or
  not; the previous one under that key goes.
- When a queue is bound with key K and a message is kept under K, the queue gets it at once
  (a binding that already existed does not: the plugin's hook runs for new bindings only);
  an exchange bound with key K gets it routed through it. This is the vhost's part
  (``VirtualHost.bind_queue`` / ``bind_exchange``), as it owns the queues.
- Deleting the exchange drops what it kept.

The values live here; ``store`` (``model/lvc.py``), attached by the vhost, counts their
memory and, for a durable exchange, keeps them in the message store across restarts (the
plugin keeps them in a disc table).

This module imports nothing from leveret but :mod:`leveret.errors` and its siblings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol

from leveret.model.exchanges.base import Destination, RoutedMessage, register
from leveret.model.exchanges.direct import DirectExchange

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ["LastValueExchange", "ValueStore"]


class ValueStore(Protocol):
    """Told of every change to the kept values (memory, durability)."""

    def kept(self, key: str, old: RoutedMessage | None, new: RoutedMessage | None) -> None: ...


@register
class LastValueExchange(DirectExchange):
    """Direct routing, plus the last message per routing key."""

    TYPE_NAME: ClassVar[str] = "x-lvc"
    NEEDS_MESSAGE: ClassVar[bool] = True

    __slots__ = ("store", "values")

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, RoutedMessage] = {}
        self.store: ValueStore | None = None

    def route_message(self, routing_key: str, message: RoutedMessage) -> Collection[Destination]:
        self.keep(routing_key, message)
        return self.route(routing_key, None)

    def keep(self, key: str, message: RoutedMessage) -> None:
        """Keep ``message`` as the last value of ``key``."""
        old = self.values.get(key)
        if old is message:
            return  # the same publish routed here again (an exchange graph with a cycle)
        self.values[key] = message
        if self.store is not None:
            self.store.kept(key, old, message)

    def value(self, key: str) -> RoutedMessage | None:
        """The last message routed with ``key`` (None: none yet)."""
        return self.values.get(key)

    def forget(self) -> None:
        """The exchange is deleted: its values go."""
        store = self.store
        if store is not None:
            for key, old in self.values.items():
                store.kept(key, old, None)
        self.values.clear()
