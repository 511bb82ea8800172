"""Which node leads a new queue: RabbitMQ's queue leader locators, as pure functions.

The locator comes from the queue's ``x-queue-leader-locator`` argument, else its policy's
``queue-leader-locator`` key, else the older ``x-queue-master-locator`` /
``queue-master-locator`` (whose ``min-masters`` and ``random`` RabbitMQ 3.12 maps to
``balanced``), else ``client-local``:

- ``client-local``: the node of the connection (or API request) that declares it;
- ``balanced``: the running node that leads the fewest queues (ties: the declaring node,
  then the first by name). RabbitMQ picks at random past 1000 queues; counting stays cheap
  here (the view's records), so Leveret always counts.

Used by ``cluster/metadata.py`` when it writes a new queue's record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

CLIENT_LOCAL = "client-local"
BALANCED = "balanced"
# What each accepted value means (RabbitMQ 3.12's mapping of the old master locators).
_MEANING = {
    CLIENT_LOCAL: CLIENT_LOCAL,
    BALANCED: BALANCED,
    "min-masters": BALANCED,
    "random": BALANCED,
}


class BadLocator(ValueError):
    """A locator value RabbitMQ does not know."""


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode(errors="replace")
    return str(value)


def locator(arguments: Mapping[str, object], policy: Mapping[str, object]) -> str:
    """The locator a queue declared with ``arguments`` under a policy whose (effective)
    definition is ``policy`` asks for."""
    for source, key in (
        (arguments, "x-queue-leader-locator"),
        (policy, "queue-leader-locator"),
        (arguments, "x-queue-master-locator"),
        (policy, "queue-master-locator"),
    ):
        if key in source:
            value = _text(source[key])
            meaning = _MEANING.get(value)
            if meaning is None:
                raise BadLocator(f"invalid queue leader locator '{value}' ({key})")
            return meaning
    return CLIENT_LOCAL


def choose_leader(
    how: str, client_node: str, running: Iterable[str], leaders: Mapping[str, int]
) -> str:
    """The leader of a new queue: ``how`` (a :func:`locator` result), the declaring node,
    the running nodes and how many queues each leads now."""
    if how == CLIENT_LOCAL:
        return client_node
    candidates = sorted(set(running) | {client_node})
    fewest = min(leaders.get(n, 0) for n in candidates)
    best = [n for n in candidates if leaders.get(n, 0) == fewest]
    return client_node if client_node in best else best[0]


# RabbitMQ's default quorum group size.
DEFAULT_GROUP_SIZE = 3


def group_size(
    arguments: Mapping[str, object], argument: str = "x-quorum-initial-group-size"
) -> int:
    """``x-quorum-initial-group-size`` (RabbitMQ's; a stream's ``x-initial-cluster-size``),
    or the default."""
    value = arguments.get(argument)
    return (
        value
        if isinstance(value, int) and not isinstance(value, bool) and value > 0
        else (DEFAULT_GROUP_SIZE)
    )


def choose_members(
    leader: str, size: int, running: Iterable[str], leaders: Mapping[str, int]
) -> tuple[str, ...]:
    """A replicated queue's members: the leader and ``size - 1`` other running nodes (every
    one when there are fewer), those leading the fewest queues first, then by name."""
    others = sorted((n for n in set(running) if n != leader), key=lambda n: (leaders.get(n, 0), n))
    return (leader, *others[: max(size - 1, 0)])
