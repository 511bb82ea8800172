"""Super streams (partitioned streams) as RabbitMQ's stream plugin makes them, on the core's
own exchanges, bindings and stream queues, so every protocol and the management plane see
the same thing:

- a super stream ``S`` is a durable direct exchange ``S`` with the argument
  ``x-super-stream: true``;
- its partitions are stream queues (``S-0`` ... ``S-(n-1)`` unless named) bound to ``S``
  with a routing key each (the partition's index unless given) and the binding argument
  ``x-stream-partition-order`` (the index);
- ``partitions(S)``: the streams bound to ``S``, ordered by ``x-stream-partition-order``
  (a binding without it sorts last, ties keep binding order), as RabbitMQ's
  ``rabbit_stream_utils:sort_partitions`` does; ``route(S, key)``: the streams ``S``
  routes ``key`` to (the exchange's own routing, through exchange-to-exchange bindings
  too), its partitions first in partition order;
- ``create`` checks everything before it changes anything and undoes what it made when a
  later step fails: nothing is left behind; ``delete`` removes the exchange and its
  partition streams.

Names, permissions and response codes are the front ends' business (the stream-protocol
server's ``server/rabbitstream/superstream.py``, ``leveret ctl``). Imports nothing from
leveret but the model and ``leveret.errors``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeGuard

from leveret.errors import AMQPError, NotFound, PreconditionFailed
from leveret.model.exchange import Exchange
from leveret.model.queues.base import Queue
from leveret.model.queues.stream import StreamQueue, StreamType

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from leveret.model.vhost import VirtualHost

SUPER_STREAM_ARGUMENT = "x-super-stream"
PARTITION_ORDER = "x-stream-partition-order"


class AlreadyExists(PreconditionFailed):
    """The super stream's exchange, or one of its partition streams, exists already."""


def default_partitions(name: str, count: int) -> tuple[list[str], list[str]]:
    """RabbitMQ's defaults for ``count`` partitions: streams ``name-i``, binding keys ``i``."""
    keys = [str(i) for i in range(count)]
    return [f"{name}-{key}" for key in keys], keys


def partitions_for_keys(name: str, binding_keys: Sequence[str]) -> list[str]:
    """RabbitMQ's partition names for given binding keys: ``name-key``."""
    return [f"{name}-{key}" for key in binding_keys]


def _order(arguments: Mapping[str, object]) -> int | None:
    value = arguments.get(PARTITION_ORDER)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _is_stream(destination: object) -> TypeGuard[Queue]:
    """A stream a super stream may hold: a stream queue, or on a cluster node the proxy of
    one led by another node (its partitions are every node's)."""
    return (
        isinstance(destination, Queue)
        and isinstance(destination.type, StreamType)
        and not destination.deleted
    )


def _ordered_bindings(exchange: Exchange) -> list[tuple[Queue, str, int | None]]:
    bound = [
        (queue, key, _order(arguments))
        for queue, key, arguments in exchange.kind.bindings()
        if _is_stream(queue)
    ]
    # sorted() is stable: equal orders (and all the unordered ones, last) keep binding order.
    return sorted(bound, key=lambda b: (b[2] is None, b[2] or 0))


def partitions(vhost: VirtualHost, name: str) -> list[str] | None:
    """The partition streams of super stream ``name`` in order; None: no exchange ``name``."""
    exchange = vhost.exchanges.get(name)
    if exchange is None or name == "":
        return None
    return [queue.name for queue, _key, _order in _ordered_bindings(exchange)]


def _routed(exchange: Exchange, routing_key: str) -> list[Queue]:
    """The streams ``exchange`` routes ``routing_key`` to (no headers), through
    exchange-to-exchange bindings too, as RabbitMQ's ``rabbit_exchange:route``; not through
    alternate exchanges (RabbitMQ applies those when publishing only)."""
    found: dict[Queue, None] = {}
    seen: set[Exchange] = set()
    pending = [exchange]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        for destination in current.kind.route(routing_key, {}):
            if _is_stream(destination):
                found[destination] = None
            elif isinstance(destination, Exchange):
                pending.append(destination)
    return list(found)


def route(vhost: VirtualHost, name: str, routing_key: str) -> list[str] | None:
    """The streams super stream ``name`` routes ``routing_key`` to: its own partitions in
    partition order, then any reached through other exchanges; None: no exchange ``name``."""
    exchange = vhost.exchanges.get(name)
    if exchange is None or name == "":
        return None
    routed = _routed(exchange, routing_key)
    ordered = [queue for queue, _key, _order in _ordered_bindings(exchange)]
    first = [queue for queue in dict.fromkeys(ordered) if queue in routed]
    return [queue.name for queue in first + [q for q in routed if q not in first]]


def partition_index(vhost: VirtualHost, name: str, stream: str) -> int:
    """The ``x-stream-partition-order`` of ``stream`` in super stream ``name``; -1 when it
    is not one of its partitions or has no order (its single active consumer group is then
    a plain one), as RabbitMQ's ``partition_index`` answers."""
    exchange = vhost.exchanges.get(name)
    if exchange is None or name == "":
        return -1
    for queue, _key, order in _ordered_bindings(exchange):
        if queue.name == stream:
            return -1 if order is None else order
    return -1


def create(
    vhost: VirtualHost,
    name: str,
    streams: Sequence[str],
    binding_keys: Sequence[str],
    arguments: Mapping[str, object],
    *,
    owner: object,
    check_new_queue: Callable[[str, int], None] | None = None,
) -> None:
    """Make super stream ``name``: the exchange, one stream per name in ``streams`` (queue
    ``arguments``, ``x-queue-type`` set here) bound with the matching binding key. Raises
    :class:`AlreadyExists` when the exchange or a stream exists, PreconditionFailed for a
    bad request, or what the core raises (its arguments' validation, ``check_new_queue``:
    the caller's limit check, given the name and the vhost's queue count); then nothing
    made here is left."""
    check_new(vhost, name, streams, binding_keys)
    queue_arguments = partition_arguments(arguments)
    made: list[str] = []
    vhost.declare_exchange(name, "direct", durable=True, arguments=exchange_arguments())
    try:
        for stream in streams:
            if check_new_queue is not None:
                check_new_queue(stream, len(vhost.queues))
            vhost.declare_queue(stream, owner=owner, durable=True, arguments=queue_arguments)
            made.append(stream)
        for index, (stream, key) in enumerate(zip(streams, binding_keys, strict=True)):
            vhost.bind_queue(stream, name, key, binding_arguments(index), owner=owner)
    except AMQPError:
        for stream in made:
            queue = vhost.queues.get(stream)
            if queue is not None:
                vhost.remove_queue(queue)
        vhost.delete_exchange(name)
        raise


def exchange_arguments() -> dict[str, object]:
    """The arguments of a super stream's exchange (a durable direct exchange)."""
    return {SUPER_STREAM_ARGUMENT: True}


def partition_arguments(arguments: Mapping[str, object]) -> dict[str, object]:
    """The queue arguments of a partition made with ``arguments`` (a durable stream)."""
    return {**arguments, "x-queue-type": "stream"}


def binding_arguments(index: int) -> dict[str, object]:
    """The arguments of the binding of partition ``index`` to its super stream."""
    return {PARTITION_ORDER: index}


def check_new(
    vhost: VirtualHost, name: str, streams: Sequence[str], binding_keys: Sequence[str]
) -> None:
    """What ``create`` checks before it makes anything (on a cluster node, before the
    super stream is written to the cluster's metadata store): the request's shape, and that
    neither the exchange nor a partition exists here (:class:`AlreadyExists`)."""
    if not streams:
        raise PreconditionFailed("a super stream needs at least one partition")
    if len(streams) != len(binding_keys):
        raise PreconditionFailed(f"{len(streams)} partitions but {len(binding_keys)} binding keys")
    if len(set(streams)) != len(streams):
        raise PreconditionFailed("partition names must be distinct")
    if not name or name.startswith("amq."):
        raise PreconditionFailed(f"'{name}' is not a correct name for a super stream")
    if name in vhost.exchanges:
        raise AlreadyExists(f"there is already an exchange named {name}")
    for stream in streams:
        if not stream or stream.startswith("amq."):
            raise PreconditionFailed(f"'{stream}' is not a correct name for a stream")
        if vhost.find_queue(stream) is not None:
            raise AlreadyExists(f"there is already a queue named {stream}")


def members(vhost: VirtualHost, name: str) -> list[Queue]:
    """The partition streams of super stream ``name`` (a proxy for one led by another
    node), what ``delete`` deletes with its exchange. NotFound when there is no exchange
    ``name``."""
    exchange = vhost.exchanges.get(name)
    if exchange is None or name == "":
        raise NotFound(f"no super stream '{name}' in vhost '{vhost.name}'")
    queues: list[Queue] = []
    for queue, _key, _order in _ordered_bindings(exchange):
        if queue not in queues:
            queues.append(queue)
    return queues


def delete(vhost: VirtualHost, name: str) -> list[StreamQueue]:
    """Delete super stream ``name``: its exchange and its partition streams (returned, so
    the caller can tell their clients). NotFound when there is no exchange ``name``."""
    queues = members(vhost, name)
    vhost.delete_exchange(name)
    for queue in queues:
        vhost.remove_queue(queue)
    return local_streams(queues)


def local_streams(queues: Sequence[Queue]) -> list[StreamQueue]:
    """The streams of ``queues`` led here: a proxy has no stream-protocol publishers or
    subscribers (they go to its leader), so no client of this node is told of it."""
    return [queue for queue in queues if isinstance(queue, StreamQueue)]
