"""The delayed-message exchange type (``x-delayed-message``), as RabbitMQ's
rabbitmq-delayed-message-exchange plugin defines it, plus cancelling over AMQP.

Declared with the argument ``x-delayed-type`` naming the exchange type whose routing it
takes (direct, topic, fanout, headers); the bindings are that type's. A message whose
``x-delay`` header is a delay in milliseconds, ``0 < delay <= 2**32 - 1``, goes to the
exchange's store (``model/delayed.py``) instead of the bound queues, and is routed from the
exchange when it is due; any other message (no header, zero, negative, too large, not a
number) is routed at once, as the plugin does. The delay is read as the plugin reads it
(``rabbit_delayed_message_utils:get_delay/1``): integers of any width as they are, decimal
strings parsed, floats and decimals truncated. A message routed when due carries
``x-delay`` set to minus its delay, so it is not delayed again by a delayed exchange it
meets further on, and a consumer can tell it was delayed (the plugin's
``swap_delay_header/1``).

Leveret's own addition: a message published to a delayed exchange with the header
``x-delayed-cancel`` is not routed; it cancels the pending messages of that exchange that
match it (``model/delayed.py``, ``Selector.from_header``).

This module imports nothing from leveret but :mod:`leveret.errors` and its siblings.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import TYPE_CHECKING, ClassVar

from leveret.errors import CommandInvalid, PreconditionFailed
from leveret.model.exchanges.base import (
    ARGUMENT_TYPES,
    EMPTY_ROUTE,
    TYPES,
    Destination,
    FieldTable,
)

if TYPE_CHECKING:
    from collections.abc import Collection, Iterator

    from leveret.model.exchanges.base import ExchangeType, RoutedMessage

__all__ = [
    "CANCEL_HEADER",
    "DELAYED_TYPE",
    "DELAY_HEADER",
    "MAX_DELAY",
    "DelayedExchange",
    "delay_of",
]

DELAYED_TYPE = "x-delayed-message"
TYPE_ARGUMENT = "x-delayed-type"
DELAY_HEADER = "x-delay"
CANCEL_HEADER = "x-delayed-cancel"
# The plugin's largest delay: an Erlang timer's limit, (2^32)-1 milliseconds (about 49
# days). A larger one is routed at once, as the plugin does.
MAX_DELAY = 4_294_967_295
_INTEGER = re.compile(r"[+-]?[0-9]+")


def delay_of(headers: FieldTable | None) -> int:
    """The ``x-delay`` of a message in milliseconds, as the plugin reads it; 0 when the
    message is not to be delayed (no header, not a number, ``<= 0``, above ``MAX_DELAY``)."""
    if not headers:
        return 0
    value = headers.get(DELAY_HEADER)
    delay: int
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int):
        delay = value
    elif isinstance(value, float | Decimal):
        try:
            delay = int(value)  # truncated towards zero, as Erlang's trunc/1
        except (ValueError, OverflowError):
            return 0  # NaN, infinity
    elif isinstance(value, str | bytes):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        # The plugin's binary_to_integer/1: a sign and digits, nothing else. (It crashes
        # the channel on anything else; Leveret routes such a message at once.)
        if _INTEGER.fullmatch(text) is None:
            return 0
        delay = int(text)
    else:
        return 0
    return delay if 0 < delay <= MAX_DELAY else 0


class DelayedExchange:
    """``x-delayed-message``: the bindings and routing of ``inner``, with delayed messages
    (and cancel requests) sent to ``store``, the exchange's store of pending messages,
    which the vhost attaches (``attach``)."""

    TYPE_NAME: ClassVar[str] = DELAYED_TYPE
    # The store decision needs the headers, whatever the inner type.
    NEEDS_MESSAGE: ClassVar[bool] = True

    __slots__ = ("_to_store", "inner", "inner_type", "releasing", "store")

    def __init__(self, arguments: FieldTable | None = None) -> None:
        """``arguments`` None: only to check that the type exists (an access check)."""
        self.inner_type = "direct"
        if arguments is not None:
            self.inner_type = _inner_type(arguments)
        inner_cls = TYPES[self.inner_type]
        self.inner: ExchangeType = inner_cls()
        self.store: Destination | None = None
        self._to_store: tuple[Destination, ...] = EMPTY_ROUTE
        # True while the store routes a due message: it is not held again, whatever its
        # headers say.
        self.releasing = False

    def attach(self, store: Destination) -> None:
        self.store = store
        self._to_store = (store,)

    def route(self, routing_key: str, headers: FieldTable | None) -> Collection[Destination]:
        if (
            headers
            and not self.releasing
            and self.store is not None
            and (CANCEL_HEADER in headers or delay_of(headers))
        ):
            return self._to_store
        return self.inner.route(routing_key, headers)

    def route_message(self, routing_key: str, message: RoutedMessage) -> Collection[Destination]:
        headers = message.headers
        if (
            headers
            and not self.releasing
            and self.store is not None
            and (CANCEL_HEADER in headers or delay_of(headers))
        ):
            return self._to_store
        inner = self.inner
        if inner.NEEDS_MESSAGE:
            return inner.route_message(routing_key, message)
        return inner.route(routing_key, None)

    def validate_binding(
        self, routing_key: str, arguments: FieldTable, target: str = "classic"
    ) -> None:
        self.inner.validate_binding(routing_key, arguments, target)

    def add_binding(
        self, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> bool:
        return self.inner.add_binding(destination, routing_key, arguments)

    def remove_binding(
        self, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> bool:
        return self.inner.remove_binding(destination, routing_key, arguments)

    def remove_destination(self, destination: Destination) -> int:
        return self.inner.remove_destination(destination)

    def has_binding(
        self, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> bool:
        return self.inner.has_binding(destination, routing_key, arguments)

    def has_bindings_to(self, destination: Destination) -> bool:
        return self.inner.has_bindings_to(destination)

    def bindings(self) -> Iterator[tuple[Destination, str, FieldTable]]:
        return self.inner.bindings()

    def __len__(self) -> int:
        return len(self.inner)

    def __repr__(self) -> str:
        return f"<DelayedExchange {self.inner_type} bindings={len(self.inner)}>"


def _inner_type(arguments: FieldTable) -> str:
    """The ``x-delayed-type`` argument, checked as the plugin's ``validate/1`` does."""
    value = arguments.get(TYPE_ARGUMENT)
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if not isinstance(value, str):
        # The plugin's text as its validate/1 builds it, typos included (two literals
        # joined without a space: "must bean existing exchnage type").
        raise PreconditionFailed(
            "Invalid argument, 'x-delayed-type' must bean existing exchnage type"
        )
    if value == DELAYED_TYPE:
        # The plugin recurses into its own validate/1 for ever; refuse instead.
        raise PreconditionFailed("Invalid argument, 'x-delayed-type' cannot be x-delayed-message")
    if value not in TYPES:
        raise CommandInvalid(f"unknown exchange type '{value}'")
    return value


TYPES[DELAYED_TYPE] = DelayedExchange
ARGUMENT_TYPES[DELAYED_TYPE] = DelayedExchange
