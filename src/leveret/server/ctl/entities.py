"""The ``leveret ctl`` verbs about what is inside the vhosts (rabbitmqctl's
``list_queues``, ``list_exchanges``, ``list_bindings``, ``list_connections``,
``list_channels``, ``list_consumers``, ``purge_queue``, ``delete_queue``,
``close_connection``, ``set_policy``/``clear_policy``/``list_policies`` and their
operator-policy twins), the whole definitions document (``export_definitions`` /
``import_definitions`` with queues, exchanges, bindings, policies and parameters:
``server/definitions.py``) and the cluster's (``cluster_status``,
``forget_cluster_node``). On a cluster node (``host.cluster``, ``cluster/node.py``)
deletions and policies go through etcd and ``list_queues`` lists the queues other nodes
lead too.

Each verb is a function of the ``Admin`` and the request's arguments. The listings are
rabbitmqctl's columns of the rows management shows too (``server/rows.py``), in the order
of the ``*_COLUMNS`` tables, which is the order of ``leveret ctl``'s table.
``server/server.py`` registers them with ``server/ctl/admin.py``'s ``Admin``
(``entity_verbs``).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any

from leveret.auth.users import AdminError, InvalidArgument
from leveret.errors import AMQPError
from leveret.model.queues.remote import RemoteQueue
from leveret.server.awaiting import outcome
from leveret.server.definitions import export_all, import_document
from leveret.server.parameters import runtime_of
from leveret.server.rows import (
    binding_rows,
    channel_row,
    channels,
    connection_row,
    consumer_row,
    exchange_row,
    queue_record_row,
    queue_row,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from leveret.model.vhost import VirtualHost
    from leveret.server.connection import ConnectionProtocol
    from leveret.server.ctl.admin import Admin
    from leveret.server.shell.info import ChannelInfo

    Verb = Callable[[dict[str, Any]], Awaitable[Any]]

# Seconds list_queues waits for other nodes' counters of the queues they lead.
COUNT_TIMEOUT = 2.0

# rabbitmqctl's columns, in its order.
QUEUE_COLUMNS = (
    "name",
    "messages",
    "messages_ready",
    "messages_unacknowledged",
    "consumers",
    "durable",
    "auto_delete",
    "exclusive",
    "arguments",
    "policy",
    "operator_policy",
    "effective_policy_definition",
    "type",
    "state",
    "vhost",
    # The queue's leader (rabbitmqctl shows it on request as ``leader``; a cluster lists
    # queues of every node).
    "node",
)
EXCHANGE_COLUMNS = (
    "name",
    "type",
    "durable",
    "auto_delete",
    "internal",
    "arguments",
    "policy",
    "vhost",
)
CONNECTION_COLUMNS = (
    "name",
    "user",
    "vhost",
    "peer_host",
    "peer_port",
    "state",
    "channels",
    "recv_oct",
    "send_oct",
    "protocol",
)
CHANNEL_COLUMNS = (
    "name",
    "connection",
    "number",
    "user",
    "vhost",
    "consumer_count",
    "messages_unacknowledged",
    "prefetch_count",
    "confirm",
    "transactional",
)
POLICY_COLUMNS = ("vhost", "name", "pattern", "apply-to", "definition", "priority")


def _project(row: dict[str, Any], columns: Iterable[str]) -> dict[str, Any]:
    return {column: row[column] for column in columns}


def _str(args: dict[str, Any], name: str, default: str | None = None) -> str:
    value = args.get(name, default)
    if not isinstance(value, str):
        raise InvalidArgument(f"argument '{name}' must be a string")
    return value


def _cluster(admin: Admin) -> Any:
    """This node's part in a cluster (``cluster/node.py``), None on a single node."""
    return getattr(admin.host, "cluster", None)


def _vhost(admin: Admin, args: dict[str, Any]) -> VirtualHost:
    name = _str(args, "vhost", "/")
    vhost = admin.host.broker.vhosts.get(name)
    if vhost is None:
        raise AdminError(f"Virtual host '{name}' does not exist")
    return vhost


# -- queues, exchanges, bindings -----------------------------------------------------------


async def list_queues(admin: Admin, args: dict[str, Any]) -> list[dict[str, Any]]:
    vhost = _vhost(admin, args)
    found = [queue_row(queue) for queue in vhost.queues.values()]
    cluster = _cluster(admin)
    if cluster is not None:
        # Queues led by other nodes, from their records, with their leaders' counters
        # (asked over the inter-node link; a leader that does not answer leaves zeros).
        view = cluster.applier.view
        remote = [
            queue_record_row(record, record.leader in view.nodes)
            for (vname, _name), record in view.queues.items()
            if vname == vhost.name and record.leader != cluster.name
        ]
        await _count_at_leaders(vhost, remote)
        found += remote
    rows = []
    for row in sorted(found, key=lambda r: str(r["name"])):
        # rabbitmqctl shows no policy as an empty cell.
        row["policy"] = row["policy"] or ""
        row["operator_policy"] = row["operator_policy"] or ""
        rows.append(_project(row, QUEUE_COLUMNS))
    return rows


async def _count_at_leaders(vhost: VirtualHost, rows: list[dict[str, Any]]) -> None:
    """Fill the counters of ``rows`` (queues led by other nodes) from their leaders, all
    asked at once, for at most ``COUNT_TIMEOUT`` seconds."""
    asked: list[tuple[dict[str, Any], asyncio.Task[tuple[int, int, int]]]] = []
    for row in rows:
        proxy = vhost.remote_queues.get(row["name"])
        if not isinstance(proxy, RemoteQueue) or row["state"] != "running":
            continue
        asked.append((row, asyncio.ensure_future(outcome(proxy.stats()))))
    if not asked:
        return
    await asyncio.wait([f for _row, f in asked], timeout=COUNT_TIMEOUT)
    for row, future in asked:
        if future.done() and future.exception() is None:
            ready, unacked, consumers = future.result()
            row.update(
                messages=ready + unacked,
                messages_ready=ready,
                messages_unacknowledged=unacked,
                consumers=consumers,
            )
        elif not future.done():
            future.cancel()


async def list_exchanges(admin: Admin, args: dict[str, Any]) -> list[dict[str, Any]]:
    vhost = _vhost(admin, args)
    rows = []
    for _name, exchange in sorted(vhost.exchanges.items()):
        row = exchange_row(exchange, vhost.name)
        row["policy"] = row.get("policy") or ""
        rows.append(_project(row, EXCHANGE_COLUMNS))
    return rows


async def list_bindings(admin: Admin, args: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "source_name": row["source"],
            "source_kind": "exchange",
            "destination_name": row["destination"],
            "destination_kind": row["destination_type"],
            "routing_key": row["routing_key"],
            "arguments": row["arguments"],
            "vhost": row["vhost"],
        }
        for row in binding_rows(_vhost(admin, args))
    ]


async def purge_queue(admin: Admin, args: dict[str, Any]) -> int:
    vhost = _vhost(admin, args)
    name = _str(args, "queue")
    queue = vhost.queues.get(name)
    if queue is None:
        raise AdminError(f"Queue '{name}' in vhost '{vhost.name}' does not exist")
    if not queue.type.purges:
        raise AdminError(f"purge is not supported by {queue.type.name} queues")
    return int(queue.purge())


async def delete_queue(admin: Admin, args: dict[str, Any]) -> int:
    vhost = _vhost(admin, args)
    name = _str(args, "queue")
    cluster = _cluster(admin)
    if cluster is not None:
        if name not in vhost.queues and (vhost.name, name) not in cluster.applier.view.queues:
            raise AdminError(f"Queue '{name}' in vhost '{vhost.name}' does not exist")
        try:
            return int(
                await cluster.store.delete_queue(
                    vhost.name,
                    name,
                    if_unused=bool(args.get("if_unused")),
                    if_empty=bool(args.get("if_empty")),
                )
            )
        except AMQPError as exc:
            raise AdminError(exc.reply_text) from None
    queue = vhost.queues.get(name)
    if queue is None:
        raise AdminError(f"Queue '{name}' in vhost '{vhost.name}' does not exist")
    try:
        return int(
            vhost.delete_queue(
                name,
                owner=queue.exclusive_owner,
                if_unused=bool(args.get("if_unused")),
                if_empty=bool(args.get("if_empty")),
            )
        )
    except AMQPError as exc:
        raise AdminError(exc.reply_text) from None


# -- connections, channels, consumers ------------------------------------------------------


def _connections(admin: Admin) -> list[ConnectionProtocol]:
    return sorted(admin.host.connections, key=lambda c: c.connected_at)


def connection_rows(admin: Admin) -> list[tuple[ConnectionProtocol, dict[str, Any]]]:
    """Each connection, oldest first, with its row."""
    out = []
    for conn in _connections(admin):
        shell = conn.shell
        if shell is None:
            continue
        opened = shell.opened
        row = connection_row(conn)
        # Before the vhost is open rabbitmqctl shows no user, and the state "starting".
        row["user"] = row["user"] if opened else ""
        row["state"] = row["state"] if opened else "starting"
        out.append((conn, _project(row, CONNECTION_COLUMNS)))
    return out


async def list_connections(admin: Admin, args: dict[str, Any]) -> list[dict[str, Any]]:
    return [row for _conn, row in connection_rows(admin)]


def _channel_rows(admin: Admin) -> list[tuple[dict[str, Any], ChannelInfo]]:
    out = []
    for conn, channel in channels(_connections(admin)):
        row = channel_row(conn, channel)
        row["connection"] = row["connection_details"]["name"]
        out.append((row, channel))
    return out


async def list_channels(admin: Admin, args: dict[str, Any]) -> list[dict[str, Any]]:
    return [_project(row, CHANNEL_COLUMNS) for row, _session in _channel_rows(admin)]


async def list_consumers(admin: Admin, args: dict[str, Any]) -> list[dict[str, Any]]:
    vhost = _str(args, "vhost", "/")
    out = []
    for channel, info in _channel_rows(admin):
        if channel["vhost"] != vhost:
            continue
        for consumer in info.consumers.values():
            row = consumer_row(consumer, None)
            out.append(
                {
                    "queue_name": row["queue"]["name"],
                    "channel_pid": channel["name"],
                    "consumer_tag": row["consumer_tag"],
                    "ack_required": row["ack_required"],
                    # rabbitmqctl's prefetch is the channel's (basic.qos), not the credit.
                    "prefetch_count": channel["prefetch_count"],
                    "active": row["active"],
                    "arguments": row["arguments"],
                }
            )
    return out


async def close_connection(admin: Admin, args: dict[str, Any]) -> None:
    name = _str(args, "connection")
    reason = _str(args, "reason", "Closed via leveret ctl")
    for conn, row in connection_rows(admin):
        if row["name"] == name or conn.peer == name:
            conn.shutdown(reason)
            return
    raise AdminError(f"Connection '{name}' does not exist")


# -- policies and operator policies ----------------------------------------------------------


async def set_policy(admin: Admin, args: dict[str, Any], *, operator: bool = False) -> None:
    vhost, name = _str(args, "vhost", "/"), _str(args, "name")
    await runtime_of(admin.host).change(
        lambda r: r.set_policy(
            vhost,
            name,
            args.get("pattern"),
            args.get("definition"),
            args.get("priority", 0),
            args.get("apply_to", "all"),
            operator=operator,
        )
    )


async def clear_policy(admin: Admin, args: dict[str, Any], *, operator: bool = False) -> None:
    vhost, name = _str(args, "vhost", "/"), _str(args, "name")
    await runtime_of(admin.host).change(lambda r: r.clear_policy(vhost, name, operator=operator))


async def list_policies(
    admin: Admin, args: dict[str, Any], *, operator: bool = False
) -> list[dict[str, Any]]:
    vhost = _str(args, "vhost", "/")
    return [
        _project(p, POLICY_COLUMNS)
        for p in runtime_of(admin.host).policies(vhost, operator=operator)
    ]


# -- definitions -------------------------------------------------------------------------------


async def export_definitions(admin: Admin, args: dict[str, Any]) -> dict[str, Any]:
    return export_all(admin.host.users, runtime_of(admin.host))


async def import_definitions(admin: Admin, args: dict[str, Any]) -> dict[str, Any]:
    doc = args.get("definitions")
    host = admin.host
    counts = await import_document(host, doc) if hasattr(host, "admin") else {}
    return {"imported": counts}


# -- the cluster ---------------------------------------------------------------------------------


async def cluster_status(admin: Admin, args: dict[str, Any]) -> dict[str, Any]:
    cluster = _cluster(admin)
    if cluster is not None:
        return dict(cluster.status())
    host = admin.host
    node = str(getattr(host, "node_name", ""))
    return {
        "node": node,
        "members": [node],
        "running": [node],
        "listeners": {node: list(getattr(host, "listening", []))},
        "queue_leaders": {node: sum(len(v.queues) for v in host.broker.vhosts.values())},
    }


async def forget_cluster_node(admin: Admin, args: dict[str, Any]) -> dict[str, Any]:
    cluster = _cluster(admin)
    if cluster is None:
        raise AdminError("this node is not part of a cluster (it runs without --etcd)")
    name = _str(args, "node")
    return {"node": name, "queues_removed": await cluster.store.forget_node(name)}


def entity_verbs(admin: Admin) -> dict[str, Verb]:
    """The verbs above by name, bound to ``admin``; the definitions verbs only when its
    host is a server with runtime parameters whose admin it is."""
    verbs: dict[str, Verb] = {
        "list_queues": partial(list_queues, admin),
        "list_exchanges": partial(list_exchanges, admin),
        "list_bindings": partial(list_bindings, admin),
        "list_connections": partial(list_connections, admin),
        "list_channels": partial(list_channels, admin),
        "list_consumers": partial(list_consumers, admin),
        "purge_queue": partial(purge_queue, admin),
        "delete_queue": partial(delete_queue, admin),
        "close_connection": partial(close_connection, admin),
        "cluster_status": partial(cluster_status, admin),
        "forget_cluster_node": partial(forget_cluster_node, admin),
    }
    for operator, prefix, plural in (
        (False, "policy", "policies"),
        (True, "operator_policy", "operator_policies"),
    ):
        verbs[f"set_{prefix}"] = partial(set_policy, admin, operator=operator)
        verbs[f"clear_{prefix}"] = partial(clear_policy, admin, operator=operator)
        verbs[f"list_{plural}"] = partial(list_policies, admin, operator=operator)
    host = admin.host
    if getattr(host, "runtime", None) is not None and getattr(host, "admin", None) is admin:
        verbs["export_definitions"] = partial(export_definitions, admin)
        verbs["import_definitions"] = partial(import_definitions, admin)
    return verbs
