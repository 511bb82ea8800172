"""``rabbitmq-queues``' verbs for quorum queues (``add_member``, ``delete_member``,
``grow``, ``shrink``, ``quorum_status``) and ``rabbitmq-streams``' (``add_replica``,
``delete_replica``, ``stream_status``) on a node outside a cluster: a quorum queue or a
stream there has one member, which no verb changes, and each says so. A cluster node
registers its own in their place (``cluster/member_verbs.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.auth.users import AdminError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["VERBS", "quorum_verbs"]

VERBS = (
    "add_member",
    "delete_member",
    "grow",
    "shrink",
    "quorum_status",
    "add_replica",
    "delete_replica",
    "stream_status",
)


async def _single_node(_args: dict[str, Any]) -> None:
    raise AdminError(
        "this node is not part of a cluster (it runs without --etcd): "
        "its quorum queues and streams have one member"
    )


def quorum_verbs() -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
    return dict.fromkeys(VERBS, _single_node)
