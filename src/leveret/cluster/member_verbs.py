"""``rabbitmq-queues``' verbs for quorum queues on a cluster node: ``add_member``,
``delete_member``, ``grow``, ``shrink`` and ``quorum_status``, and ``rabbitmq-streams``'
for streams: ``add_replica``, ``delete_replica``, ``stream_status`` (``cli/ctl_quorum.py``
is the command line). The changes are written to etcd by ``cluster/members.py``; the status
comes from the queue's record and what this node's replication knows of the members' logs
(every member's on the leader's node, its own copy's elsewhere).

``cluster/node.py`` registers them with the server's ``Admin`` in place of a single node's
(``server/ctl/quorum.py``: they say the node is not in a cluster).
"""

from __future__ import annotations

import re
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, cast

from leveret.auth.users import AdminError, InvalidArgument
from leveret.cluster import members

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from leveret.cluster.apply import Applier, QueueRecord
    from leveret.cluster.metadata import MetadataStore
    from leveret.cluster.replication import Replication
    from leveret.server.ctl.admin import Admin

    Verb = Callable[[dict[str, Any]], Awaitable[Any]]

__all__ = ["member_verbs"]


class ClusterNode(Protocol):
    """What the verbs need of the node (``cluster/node.py``'s ``ClusterNode``)."""

    applier: Applier
    store: MetadataStore
    replication: Replication


def _str(args: dict[str, Any], name: str, default: str | None = None) -> str:
    value = args.get(name, default)
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"argument '{name}' must be a non-empty string")
    return value


def _cluster(admin: Admin) -> ClusterNode:
    cluster = getattr(admin.host, "cluster", None)
    assert cluster is not None  # registered by the cluster's node
    return cast("ClusterNode", cluster)


def _pattern(args: dict[str, Any], name: str) -> re.Pattern[str]:
    text = _str(args, name, ".*")
    try:
        return re.compile(text)
    except re.error as exc:
        raise InvalidArgument(f"{name.replace('_', '-')} '{text}' is not a regex: {exc}") from None


async def add_member(admin: Admin, args: dict[str, Any], kind: str = "quorum") -> None:
    cluster, m = _cluster(admin), members
    node = _str(args, "node")
    view = cluster.applier.view
    await m.change(
        cluster.store,
        _str(args, "vhost", "/"),
        _str(args, "queue"),
        lambda record: m.added(record, node, view),
        running=node,
        kind=kind,
    )


async def delete_member(admin: Admin, args: dict[str, Any], kind: str = "quorum") -> None:
    cluster, m = _cluster(admin), members
    node = _str(args, "node")
    view = cluster.applier.view
    await m.change(
        cluster.store,
        _str(args, "vhost", "/"),
        _str(args, "queue"),
        lambda record: m.removed(record, node, view),
        kind=kind,
    )


def _row(record: QueueRecord, size: int, result: str) -> dict[str, Any]:
    return {"vhost": record.vhost, "name": record.name, "size": size, "result": result}


async def grow(admin: Admin, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Add ``node`` to every quorum queue matching the patterns (``even``: only those with
    an even number of members), one row per queue."""
    cluster, m = _cluster(admin), members
    node = _str(args, "node")
    strategy = _str(args, "strategy", "all")
    if strategy not in ("all", "even"):
        raise InvalidArgument(f"strategy must be 'all' or 'even', not '{strategy}'")
    vhosts, queues = _pattern(args, "vhost_pattern"), _pattern(args, "queue_pattern")
    view = cluster.applier.view
    if node not in view.nodes:
        known = node in view.members
        raise m.MemberError(
            f"node '{node}' is not running" if known else f"node '{node}' is not in this cluster"
        )
    rows = []
    for record in sorted(view.queues.values(), key=lambda r: (r.vhost, r.name)):
        size = len(m.members_of(record))
        if (
            not m.is_quorum(record)
            or node in m.members_of(record)
            or not vhosts.search(record.vhost)
            or not queues.search(record.name)
            or (strategy == "even" and size % 2)
        ):
            continue
        rows.append(await _each(cluster, record, size, m.added, node, running=node))
    return _errors(rows) if args.get("errors_only") else rows


async def shrink(admin: Admin, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Remove ``node`` from every quorum queue it is a member of (not from one it is the
    last member of), one row per queue."""
    cluster, m = _cluster(admin), members
    node = _str(args, "node")
    view = cluster.applier.view
    rows = []
    for record in sorted(view.queues.values(), key=lambda r: (r.vhost, r.name)):
        if m.is_quorum(record) and node in m.members_of(record):
            size = len(m.members_of(record))
            rows.append(await _each(cluster, record, size, m.removed, node))
    return _errors(rows) if args.get("errors_only") else rows


async def _each(
    cluster: ClusterNode,
    record: QueueRecord,
    size: int,
    how: Callable[[QueueRecord, str, Any], QueueRecord],
    node: str,
    *,
    running: str | None = None,
) -> dict[str, Any]:
    view, m = cluster.applier.view, members
    try:
        new = await m.change(
            cluster.store,
            record.vhost,
            record.name,
            lambda current: how(current, node, view),
            running=running,
        )
    except AdminError as exc:
        return _row(record, size, f"error: {exc}")
    return _row(record, len(m.members_of(new)), "ok")


def _errors(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for row in rows if row["result"] != "ok"]


async def quorum_status(
    admin: Admin, args: dict[str, Any], kind: str = "quorum"
) -> list[dict[str, Any]]:
    """One row per member: its role, whether its node runs and is in the in-sync set, its
    log's offset and the committed offset where this node knows them (on the leader's
    node: every member's; elsewhere: its own copy's). A stream's (``stream_status``) name
    the roles as RabbitMQ's do: ``writer`` and ``replica``."""
    cluster, m = _cluster(admin), members
    vhost, name = _str(args, "vhost", "/"), _str(args, "queue")
    view = cluster.applier.view
    record = m.quorum_record(view, vhost, name, kind)
    known = cluster.replication.status((vhost, name))
    in_sync = set(record.in_sync) if record.members else {record.leader}
    roles = ("writer", "replica") if kind == "stream" else ("leader", "follower")
    rows = []
    for node in m.members_of(record):
        logs = known.get(node, {})
        rows.append(
            {
                "node": node,
                "role": roles[0] if node == record.leader else roles[1],
                "running": node in view.nodes,
                "in_sync": node in in_sync,
                "epoch": record.epoch,
                "log_offset": logs.get("log_offset"),
                "committed_offset": logs.get("committed_offset"),
            }
        )
    return rows


def member_verbs(admin: Admin) -> dict[str, Verb]:
    return {
        "add_member": partial(add_member, admin),
        "delete_member": partial(delete_member, admin),
        "grow": partial(grow, admin),
        "shrink": partial(shrink, admin),
        "quorum_status": partial(quorum_status, admin),
        # rabbitmq-streams' verbs: the same changes, for streams.
        "add_replica": partial(add_member, admin, kind="stream"),
        "delete_replica": partial(delete_member, admin, kind="stream"),
        "stream_status": partial(quorum_status, admin, kind="stream"),
    }
