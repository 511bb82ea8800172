"""AMQP 1.0 addresses as RabbitMQ reads them: what a link's source or target, or a
message's ``to``, names in the broker's terms (an exchange and a routing key, or a queue).

RabbitMQ 4's addresses (v2), percent-encoded segments:

=====================================  ================================================
``/queues/:queue``                     source and target: that queue (a target publishes
                                       to the default exchange with the queue's name)
``/exchanges/:exchange/:routing-key``  target: that exchange and key
``/exchanges/:exchange``               target: that exchange, the empty routing key
``null`` (the anonymous terminus)      target: each message's ``to`` holds one of the three
``/management``                        the HTTP-over-AMQP management node
=====================================  ================================================

And the older ones of RabbitMQ 3's plugin (v1), still accepted: ``/queue/:queue`` and a
bare name (a queue, declared at attach if missing: a classic queue, durable when the
terminus is, as RabbitMQ 3's plugin and RabbitMQ 4 do), ``/amq/queue/:queue`` (a queue that
must exist), ``/queue`` as a target (the routing key is the message's ``subject``),
``/exchange/:exchange/:key`` and ``/exchange/:exchange`` (target: key from ``subject``;
source: a temporary queue bound with the key), ``/topic/:key`` (``amq.topic``). The 1.0
front end imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

__all__ = ["Address", "AddressError", "parse_source", "parse_target"]

MANAGEMENT = "/management"


class AddressError(ValueError):
    """An address RabbitMQ would refuse (the link is refused with amqp:invalid-field)."""


@dataclass(frozen=True, slots=True)
class Address:
    """What an address names.

    ``queue``: a queue by name (source, or target through the default exchange).
    ``exchange`` and ``routing_key``: a target exchange; ``routing_key`` None means the
    message's ``subject`` gives it. ``bind``: a source that is a temporary queue bound to
    ``exchange`` with ``routing_key`` (v1's ``/exchange/...`` and ``/topic/...`` sources).
    ``management``: the management node. ``declare``: ``queue`` is declared at attach if
    it does not exist (v1's ``/queue/:queue`` and bare names).
    """

    queue: str | None = None
    exchange: str | None = None
    routing_key: str | None = None
    bind: bool = False
    management: bool = False
    declare: bool = False


def _segment(text: str) -> str:
    if not text:
        raise AddressError("empty address segment")
    return unquote(text)


def _v2(address: str, *, target: bool) -> Address | None:
    if address == MANAGEMENT:
        return Address(management=True)
    if address.startswith("/queues/"):
        rest = address[len("/queues/") :]
        if "/" in rest:
            raise AddressError(f"bad queue address '{address}'")
        return Address(queue=_segment(rest))
    if address.startswith("/exchanges/"):
        if not target:
            raise AddressError(f"exchange address '{address}' is not a source")
        parts = address[len("/exchanges/") :].split("/")
        if len(parts) == 1:
            return Address(exchange=_segment(parts[0]), routing_key="")
        if len(parts) == 2:
            return Address(exchange=_segment(parts[0]), routing_key=unquote(parts[1]))
        raise AddressError(f"bad exchange address '{address}'")
    return None


def _v1(address: str, *, target: bool) -> Address:
    if address.startswith("/amq/queue/"):
        return Address(queue=address[len("/amq/queue/") :] or _empty(address))
    if address.startswith("/queue/"):
        return Address(queue=address[len("/queue/") :] or _empty(address), declare=True)
    if address == "/queue":
        if not target:
            raise AddressError("'/queue' is not a source")
        return Address(exchange="", routing_key=None)
    if address.startswith("/exchange/"):
        parts = address[len("/exchange/") :].split("/", 1)
        exchange = parts[0]
        key = parts[1] if len(parts) == 2 else None
        if target:
            return Address(exchange=exchange, routing_key=key)
        return Address(exchange=exchange, routing_key=key or "", bind=True)
    if address.startswith("/topic/"):
        key = address[len("/topic/") :]
        if target:
            return Address(exchange="amq.topic", routing_key=key)
        return Address(exchange="amq.topic", routing_key=key, bind=True)
    if address.startswith("/"):
        raise AddressError(f"unknown address '{address}'")
    return Address(queue=address, declare=True)


def _empty(address: str) -> str:
    raise AddressError(f"no queue name in '{address}'")


def parse_target(address: str) -> Address:
    """A target address (or a message's ``to``)."""
    found = _v2(address, target=True)
    return found if found is not None else _v1(address, target=True)


def parse_source(address: str) -> Address:
    found = _v2(address, target=False)
    return found if found is not None else _v1(address, target=False)


def queue_address(name: str) -> str:
    """The v2 address of a queue (dynamic nodes answer with it)."""
    from urllib.parse import quote

    return "/queues/" + quote(name, safe="")
