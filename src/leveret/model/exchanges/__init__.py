"""Exchange types of the broker core: direct, fanout, topic, headers, the delayed-message
exchange (``x-delayed-message``, which routes as one of the others), the last-value cache
(``x-lvc``), the spreading types: consistent hashing (``x-consistent-hash``), modulus
hashing (``x-modulus-hash``), random (``x-random``) and local random (``x-local-random``),
and federation's ``x-federation-upstream`` (a fanout that cuts loops and counts hops).

Importing this package registers every built-in type in :data:`TYPES`;
:func:`make_exchange_type` makes an empty instance by type name.
"""

from __future__ import annotations

from leveret.model.exchanges.base import (
    TYPES,
    BaseExchangeType,
    Destination,
    ExchangeType,
    FieldTable,
    freeze,
    make_exchange_type,
)
from leveret.model.exchanges.consistent_hash import ConsistentHashExchange
from leveret.model.exchanges.delayed import DelayedExchange
from leveret.model.exchanges.direct import DirectExchange
from leveret.model.exchanges.fanout import FanoutExchange
from leveret.model.exchanges.federation_upstream import FederationUpstreamExchange
from leveret.model.exchanges.headers import HeadersExchange
from leveret.model.exchanges.local_random import LocalRandomExchange
from leveret.model.exchanges.lvc import LastValueExchange
from leveret.model.exchanges.modulus_hash import ModulusHashExchange
from leveret.model.exchanges.random_choice import RandomExchange
from leveret.model.exchanges.topic import TopicExchange

__all__ = [
    "TYPES",
    "BaseExchangeType",
    "ConsistentHashExchange",
    "DelayedExchange",
    "Destination",
    "DirectExchange",
    "ExchangeType",
    "FanoutExchange",
    "FederationUpstreamExchange",
    "FieldTable",
    "HeadersExchange",
    "LastValueExchange",
    "LocalRandomExchange",
    "ModulusHashExchange",
    "RandomExchange",
    "TopicExchange",
    "freeze",
    "make_exchange_type",
]
