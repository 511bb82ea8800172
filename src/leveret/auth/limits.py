"""Limits on what may be opened: per vhost ``max-connections`` and ``max-queues``, per user
``max-connections`` and ``max-channels``, and the broker's ``connection_max``; the counts
they are checked against (:class:`ConnectionTracker`) and RabbitMQ's refusals.

Imported by ``auth.users`` (limits are kept with users and vhosts) and ``auth.access``.
The texts are RabbitMQ 3.10.8's, recorded next to the tests (tests/unit/auth/). A limit
is a non-negative integer; a negative one, as in RabbitMQ, means "no limit" and is not kept.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping

from leveret.errors import NotAllowed, PreconditionFailed

MAX_CONNECTIONS = "max-connections"
MAX_QUEUES = "max-queues"
MAX_CHANNELS = "max-channels"
VHOST_LIMITS = (MAX_CONNECTIONS, MAX_QUEUES)
USER_LIMITS = (MAX_CONNECTIONS, MAX_CHANNELS)


class InvalidLimits(ValueError):
    """A limits document that cannot be used."""


def parse_limits(document: str | Mapping[str, object], allowed: tuple[str, ...]) -> dict[str, int]:
    """Limits from a JSON object (``'{"max-connections": 10}'``) or a mapping; keys outside
    ``allowed`` are refused. Negative values ("no limit") are kept: a caller that merges
    limits removes those keys, one that replaces them drops them (``kept``)."""
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError as exc:
            raise InvalidLimits(f"limits are not valid JSON: {exc}") from None
    if not isinstance(document, Mapping):
        raise InvalidLimits("limits must be a JSON object")
    unknown = sorted(str(k) for k in document if k not in allowed)
    if unknown:
        raise InvalidLimits(
            f"unrecognised limits {', '.join(unknown)} (known: {', '.join(allowed)})"
        )
    limits: dict[str, int] = {}
    for key, value in document.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidLimits(f"limit {key} must be an integer, got {value!r}")
        limits[str(key)] = value
    return limits


def kept(limits: Mapping[str, int]) -> dict[str, int]:
    """The limits that limit something (negative means none)."""
    return {key: value for key, value in limits.items() if value >= 0}


# -- RabbitMQ's refusals --------------------------------------------------------------------


def node_connection_limit(limit: int) -> NotAllowed:
    # RabbitMQ 3.10 stops accepting sockets at connection_max (ranch); later versions
    # refuse connection.open with this text, which tells the client why.
    return NotAllowed(f"connection refused: node connection limit ({limit}) is reached")


def vhost_connection_limit(vhost: str, user: str, limit: int) -> NotAllowed:
    return NotAllowed(
        f"access to vhost '{vhost}' refused for user '{user}': connection limit ({limit}) "
        "is reached"
    )


def user_connection_limit(user: str, limit: int) -> NotAllowed:
    return NotAllowed(
        f"connection refused for user '{user}': user connection limit ({limit}) is reached"
    )


def user_channel_limit(user: str, limit: int) -> NotAllowed:
    return NotAllowed(
        f"number of channels opened for user '{user}' has reached the maximum allowed user "
        f"limit of ({limit})"
    )


def vhost_queue_limit(queue: str, vhost: str, limit: int) -> PreconditionFailed:
    return PreconditionFailed(
        f"cannot declare queue '{queue}': queue limit in vhost '{vhost}' ({limit}) is reached"
    )


class ConnectionTracker:
    """Open connections per vhost and per user, and open channels per user, broker-wide.

    The event loop is the only thread, so check-then-count needs no lock.
    """

    def __init__(self) -> None:
        self.total = 0
        self.by_vhost: Counter[str] = Counter()
        self.by_user: Counter[str] = Counter()
        self.channels_by_user: Counter[str] = Counter()

    def connection_opened(self, user: str, vhost: str) -> None:
        self.total += 1
        self.by_vhost[vhost] += 1
        self.by_user[user] += 1

    def connection_closed(self, user: str, vhost: str) -> None:
        self.total -= 1
        _decrement(self.by_vhost, vhost)
        _decrement(self.by_user, user)

    def channel_opened(self, user: str) -> None:
        self.channels_by_user[user] += 1

    def channel_closed(self, user: str) -> None:
        _decrement(self.channels_by_user, user)


def _decrement(counter: Counter[str], key: str) -> None:
    count = counter[key] - 1
    if count > 0:
        counter[key] = count
    else:
        del counter[key]
