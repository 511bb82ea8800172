"""The stream protocol's super stream commands, as RabbitMQ's stream plugin answers them
(``rabbit_stream_reader``, ``rabbit_stream_utils``), on ``model/super_stream.py``:

- route (0x0018) and partitions (0x0019): no permission is checked (RabbitMQ checks none);
  an unknown super stream (no such exchange) is ``STREAM_DOES_NOT_EXIST`` with no streams,
  a key that routes nowhere is OK with none;
- create_super_stream (0x001d) and delete_super_stream (0x001e), RabbitMQ 3.13's: the
  name is cleaned and checked (CR/LF dropped; empty or ``amq.*``: PRECONDITION_FAILED),
  then ``check_super_stream_management_permitted``: configure on the exchange and on
  every partition, read on the exchange (the bindings' source), write on every partition
  (their destination), else ACCESS_REFUSED; an existing exchange or partition is
  STREAM_ALREADY_EXISTS, a refused argument PRECONDITION_FAILED. Deleting one whose
  exchange is missing is STREAM_DOES_NOT_EXIST; the deleted partitions' publishers and
  subscribers on every connection are told (by the caller), as for a deleted stream;
- ``partition_of``: a subscription's ``super-stream`` property names the super stream whose
  single-active-consumer rules apply to it (``state.py``).

Imported by ``connection.py`` only: its handlers send what these answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.errors import NotFound, PreconditionFailed
from leveret.model import super_stream
from leveret.protocol.rabbitstream import commands as c
from leveret.protocol.rabbitstream.constants import Code, Key

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from leveret.auth.access import Access
    from leveret.model.completion import Completion
    from leveret.model.vhost import VirtualHost

SUPER_STREAM_PROPERTY = "super-stream"


def clean_name(name: str) -> str | None:
    """RabbitMQ's ``enforce_correct_name``: CR and LF dropped; None when empty or amq.*."""
    name = name.replace("\n", "").replace("\r", "")
    if not name or name.startswith("amq."):
        return None
    return name


def management_permitted(access: Access, name: str, partitions: Sequence[str]) -> bool:
    """Whether the user may create or delete super stream ``name`` with ``partitions``."""
    return (
        access.allowed("configure", "exchange", name)
        and all(access.allowed("configure", "queue", p) for p in partitions)
        and access.allowed("read", "exchange", name)
        and all(access.allowed("write", "queue", p) for p in partitions)
    )


def partition_of(vhost: VirtualHost, stream: str, properties: Mapping[str, str]) -> int:
    """The single-active-consumer partition index of a subscription to ``stream``."""
    name = properties.get(SUPER_STREAM_PROPERTY)
    if not name:
        return -1
    return super_stream.partition_index(vhost, name, stream)


def route(vhost: VirtualHost, command: c.Route) -> c.StreamsResponse:
    streams = super_stream.route(vhost, command.super_stream, command.routing_key)
    code = Code.OK if streams is not None else Code.STREAM_DOES_NOT_EXIST
    return c.StreamsResponse(Key.ROUTE, command.correlation_id, code, streams or [])


def partitions(vhost: VirtualHost, command: c.Partitions) -> c.StreamsResponse:
    streams = super_stream.partitions(vhost, command.super_stream)
    code = Code.OK if streams is not None else Code.STREAM_DOES_NOT_EXIST
    return c.StreamsResponse(Key.PARTITIONS, command.correlation_id, code, streams or [])


def create(
    vhost: VirtualHost,
    access: Access,
    owner: object,
    command: c.CreateSuperStream,
    arguments: Mapping[str, object],
) -> int | Completion[bool]:
    """The response code of ``command``; ``arguments``: its arguments as the queue
    arguments of a stream queue. Raises the core's other errors (the caller's code). On a
    cluster node (``VirtualHost.shared``), once the checks pass, the super stream goes to
    the cluster's metadata store first: then the completion of that write, done with
    whether this call made it (``code_of`` answers it)."""
    name = clean_name(command.name)
    if name is None:
        return Code.PRECONDITION_FAILED
    if not management_permitted(access, name, command.partitions):
        return Code.ACCESS_REFUSED
    shared = vhost.shared
    try:
        if shared is None:
            super_stream.create(
                vhost,
                name,
                command.partitions,
                command.binding_keys,
                arguments,
                owner=owner,
                check_new_queue=access.check_queue_limit,
            )
            return Code.OK
        super_stream.check_new(vhost, name, command.partitions, command.binding_keys)
        for made, stream in enumerate(command.partitions):
            access.check_queue_limit(stream, len(vhost.queues) + made)
    except super_stream.AlreadyExists:
        return Code.STREAM_ALREADY_EXISTS
    except PreconditionFailed:
        return Code.PRECONDITION_FAILED
    return shared.create_super_stream(
        name, command.partitions, command.binding_keys, arguments, owner
    )


def code_of(written: Completion[bool]) -> int:
    """The response code of a creation written to the cluster's metadata store (``create``'s
    completion, done). Raises the core's other errors (the caller's code)."""
    try:
        made = written.result()
    except super_stream.AlreadyExists:
        return Code.STREAM_ALREADY_EXISTS
    except PreconditionFailed:
        return Code.PRECONDITION_FAILED
    return Code.OK if made else Code.STREAM_ALREADY_EXISTS


def delete(
    vhost: VirtualHost, access: Access, command: c.DeleteSuperStream
) -> int | Completion[None]:
    """The response code of ``command`` (the model's removal of its partition streams
    tells their clients). Raises the core's other errors (the caller's code). On a cluster
    node (``VirtualHost.shared``), once the checks pass, the deletion goes to the cluster's
    metadata store first: then the completion of that write (``deleted_code`` answers it)."""
    name = command.name
    streams = super_stream.partitions(vhost, name) or []
    if not management_permitted(access, name, streams):
        return Code.ACCESS_REFUSED
    try:
        shared = vhost.shared
        if shared is None:
            super_stream.delete(vhost, name)
            return Code.OK
        queues = super_stream.members(vhost, name)
    except NotFound:
        return Code.STREAM_DOES_NOT_EXIST
    return shared.delete_super_stream(name, queues)


def deleted_code(written: Completion[None]) -> int:
    """The response code of a deletion written to the cluster's metadata store (``delete``'s
    completion, done). Raises the core's other errors (the caller's code)."""
    try:
        written.result()
    except NotFound:
        return Code.STREAM_DOES_NOT_EXIST
    return Code.OK
