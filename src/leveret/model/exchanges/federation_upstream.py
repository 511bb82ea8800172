"""``x-federation-upstream``: the exchange a federation link declares on its upstream
broker (RabbitMQ's ``rabbit_federation_upstream_exchange``). A fanout that drops what must
not travel further: a message whose ``x-received-from`` header already lists the link's
downstream broker and vhost (a loop), or has made ``x-max-hops`` hops.

Its arguments (set by the link, which is on the other broker): ``x-max-hops`` (required),
``x-downstream-name`` (the downstream's cluster name) and ``x-downstream-vhost``.
:func:`should_forward` is also what a federation link checks before it republishes
(``leveret.links``), for upstreams that are not federation-aware.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.errors import PreconditionFailed
from leveret.model.exchanges.base import ARGUMENT_TYPES, TYPES, Destination, FieldTable
from leveret.model.exchanges.fanout import FanoutExchange

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

__all__ = ["FederationUpstreamExchange", "already_seen", "should_forward"]

TYPE_NAME = "x-federation-upstream"
ROUTING_HEADER = "x-received-from"
MAX_HOPS = "x-max-hops"
DOWNSTREAM_NAME = "x-downstream-name"
DOWNSTREAM_VHOST = "x-downstream-vhost"
_EMPTY: tuple[Destination, ...] = ()


def already_seen(name: object, vhost: object, hops: Sequence[object]) -> bool:
    """Whether one of the ``x-received-from`` tables names cluster ``name`` and ``vhost``."""
    for hop in hops:
        if isinstance(hop, dict) and hop.get("cluster-name") == name and hop.get("vhost") == vhost:
            return True
    return False


def should_forward(headers: FieldTable | None, max_hops: int, name: object, vhost: object) -> bool:
    """RabbitMQ's ``should_forward``: fewer hops than ``max_hops`` and not seen by the
    downstream ``name``/``vhost`` yet (a missing or malformed header: forward)."""
    if not headers:
        return True
    hops = headers.get(ROUTING_HEADER)
    if not isinstance(hops, list):
        return True
    return len(hops) < max_hops and not already_seen(name, vhost, hops)


class FederationUpstreamExchange(FanoutExchange):
    """A fanout that applies :func:`should_forward` with its arguments."""

    TYPE_NAME = TYPE_NAME
    NEEDS_MESSAGE = True

    __slots__ = ("downstream_name", "downstream_vhost", "max_hops")

    def __init__(self, arguments: FieldTable | None = None) -> None:
        super().__init__()
        self.max_hops = 1
        self.downstream_name: object = None
        self.downstream_vhost: object = None
        if arguments is None:
            return  # made only to check that the type exists (make_exchange_type)
        max_hops = arguments.get(MAX_HOPS)
        if max_hops is None:
            raise PreconditionFailed(f"Argument {MAX_HOPS} missing")
        if isinstance(max_hops, bool) or not isinstance(max_hops, int):
            raise PreconditionFailed(f"Argument {MAX_HOPS} must be of type long")
        self.max_hops = max_hops
        self.downstream_name = _text(arguments.get(DOWNSTREAM_NAME))
        self.downstream_vhost = _text(arguments.get(DOWNSTREAM_VHOST))

    def route(self, routing_key: str, headers: FieldTable | None) -> Collection[Destination]:
        if should_forward(headers, self.max_hops, self.downstream_name, self.downstream_vhost):
            return super().route(routing_key, headers)
        return _EMPTY


def _text(value: object) -> object:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


TYPES[TYPE_NAME] = FederationUpstreamExchange
ARGUMENT_TYPES[TYPE_NAME] = FederationUpstreamExchange
