"""The ``leveret ctl`` verbs of ``rabbitmq-streams`` about super streams:
``add_super_stream NAME (--partitions N | --binding-keys a,b)`` with the stream arguments
(``--max-length-bytes``, ``--max-age``, ``--stream-max-segment-size-bytes``,
``--leader-locator``, ``--initial-cluster-size``) and ``delete_super_stream NAME``, on
``model/super_stream.py``: the same exchange, streams and bindings the stream protocol's
create_super_stream makes, and the deleted partitions' stream-protocol clients are told.
As with ``rabbitmq-streams`` on the broker's machine, no user permission is checked. On a
cluster node (``VirtualHost.shared``) both go to etcd first, as the stream protocol's do
(``cluster/declarations.py``), and are answered once this node's copy has the change: of
two at once through two nodes, one is done and the other answers as one node does for a
super stream that exists, or is missing.

``server/server.py`` registers these with ``server/ctl/admin.py``'s ``Admin``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from leveret.auth.users import AdminError, InvalidArgument
from leveret.errors import AMQPError, NotFound
from leveret.model import super_stream
from leveret.server.awaiting import outcome
from leveret.server.rabbitstream.connection import stream_queue_arguments
from leveret.server.rabbitstream.superstream import clean_name

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from leveret.model.vhost import VirtualHost
    from leveret.server.ctl.admin import Admin

T = TypeVar("T")


class SuperStreamExists(AdminError):
    exit_code = 70  # as an existing user: the thing to make is there already


def _vhost(admin: Admin, args: dict[str, Any]) -> VirtualHost:
    name = args.get("vhost", "/")
    if not isinstance(name, str):
        raise InvalidArgument("argument 'vhost' must be a string")
    vhost = admin.host.broker.vhosts.get(name)
    if vhost is None:
        raise AdminError(f"Virtual host '{name}' does not exist")
    return vhost


def _name(args: dict[str, Any]) -> str:
    name = args.get("name")
    if not isinstance(name, str):
        raise InvalidArgument("argument 'name' must be a string")
    cleaned = clean_name(name)
    if cleaned is None:
        raise InvalidArgument(f"'{name}' is not a correct name for a super stream")
    return cleaned


def _layout(name: str, args: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The partition streams and binding keys: ``binding_keys`` or ``partitions``."""
    keys = args.get("binding_keys")
    count = args.get("partitions")
    if keys is not None and count is not None:
        raise InvalidArgument("specify either partitions or binding keys, not both")
    if keys is not None:
        if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
            raise InvalidArgument("binding keys must be non-empty strings")
        if not keys:
            raise InvalidArgument("at least one binding key is needed")
        return super_stream.partitions_for_keys(name, keys), list(keys)
    if count is None:
        count = 3  # rabbitmq-streams' default
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidArgument("the number of partitions must be a positive integer")
    return super_stream.default_partitions(name, count)


def super_stream_verbs(admin: Admin) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:

    async def add_super_stream(args: dict[str, Any]) -> None:
        vhost = _vhost(admin, args)
        name = _name(args)
        streams, keys = _layout(name, args)
        arguments = args.get("arguments") or {}
        if not isinstance(arguments, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in arguments.items()
        ):
            raise InvalidArgument("stream arguments must be strings")
        queue_arguments = stream_queue_arguments(arguments)
        shared = vhost.shared
        try:
            if shared is None:
                super_stream.create(vhost, name, streams, keys, queue_arguments, owner=None)
                return
            super_stream.check_new(vhost, name, streams, keys)
            written = shared.create_super_stream(name, streams, keys, queue_arguments, None)
            made = await outcome(written)
        except super_stream.AlreadyExists as exc:
            raise SuperStreamExists(exc.reply_text) from None
        except AMQPError as exc:
            raise AdminError(exc.reply_text) from None
        if not made:  # another node's creation (or an exchange of the name) came first
            raise SuperStreamExists(f"there is already an exchange named {name}")

    async def delete_super_stream(args: dict[str, Any]) -> None:
        vhost = _vhost(admin, args)
        name = args.get("name")
        if not isinstance(name, str):
            raise InvalidArgument("argument 'name' must be a string")
        shared = vhost.shared
        try:
            # The model's removal of its partitions tells their stream clients (on a
            # cluster node, as etcd's watch brings the deletion back to each node's copy).
            if shared is None:
                super_stream.delete(vhost, name)
            else:
                queues = super_stream.members(vhost, name)
                await outcome(shared.delete_super_stream(name, queues))
        except NotFound:
            raise AdminError(f"Super stream '{name}' does not exist") from None
        except AMQPError as exc:
            raise AdminError(exc.reply_text) from None

    return {
        "add_super_stream": add_super_stream,
        "delete_super_stream": delete_super_stream,
    }
