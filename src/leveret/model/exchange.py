"""An exchange of a virtual host: its name, flags and arguments, and ``kind``, the exchange
type (``model/exchanges/``) that holds its bindings and routes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.model.exchanges import ExchangeType, make_exchange_type

if TYPE_CHECKING:
    from collections.abc import Mapping


class Exchange:
    """An exchange of a vhost; ``kind`` is its routing algorithm."""

    # What RabbitMQ's resource record calls it (the order of bindings in its route table,
    # which x-modulus-hash follows, puts exchanges before queues).
    resource_kind = "exchange"

    def __init__(
        self,
        name: str,
        type_name: str,
        *,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Mapping[str, object] | None = None,
    ) -> None:
        self.name = name
        self.type_name = type_name
        self.arguments: Mapping[str, object] = dict(arguments or {})
        self.kind: ExchangeType = make_exchange_type(type_name, self.arguments)
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        alternate = self.arguments.get("alternate-exchange")
        if isinstance(alternate, bytes):
            alternate = alternate.decode(errors="replace")
        self.alternate: str | None = alternate if isinstance(alternate, str) else None
        # The policy that applies (model/policies.py), by name.
        self.policy: str | None = None
        # Management counters (plain increments by the publisher; sampled on a timer).
        self.n_publish_in = 0
        self.n_publish_out = 0
        # Exchanges that have a binding to this one, for cleanup on delete.
        self.sources: set[Exchange] = set()

    def __repr__(self) -> str:
        return f"Exchange({self.name!r}, {self.type_name!r})"
