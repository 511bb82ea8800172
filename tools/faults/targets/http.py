"""The management API calls the targets make (RabbitMQ's API, which Leveret's mirrors)."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

import aiohttp

HEADERS = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}
TIMEOUT = aiohttp.ClientTimeout(total=5)


async def get_json(base: str, path: str) -> Any:
    """``GET base/api/path`` as JSON; None for a 404; raises for other failures."""
    async with (
        aiohttp.ClientSession(headers=HEADERS, timeout=TIMEOUT) as session,
        session.get(f"{base}/api/{path}") as response,
    ):
        if response.status == 404:
            return None
        response.raise_for_status()
        return await response.json()


async def queue_leader(base: str, queue: str, vhost: str = "/") -> str | None:
    """The node leading ``queue`` as that API sees it (a quorum queue's ``leader``, else
    its ``node``)."""
    data = await get_json(base, f"queues/{quote(vhost, safe='')}/{quote(queue, safe='')}")
    if not isinstance(data, dict):
        return None
    leader = data.get("leader") or data.get("node")
    return str(leader) if leader else None


async def queue_replicas(
    base: str, queue: str, vhost: str = "/"
) -> tuple[set[str], set[str]] | None:
    """A replicated queue's ``members`` and the ``online`` ones, as RabbitMQ's API shows
    them for a quorum queue; None for a queue without them (a classic queue, Leveret's
    queues until replication lands)."""
    data = await get_json(base, f"queues/{quote(vhost, safe='')}/{quote(queue, safe='')}")
    if not isinstance(data, dict) or "members" not in data:
        return None
    return set(data.get("members") or ()), set(data.get("online") or ())


async def running_nodes(base: str) -> set[str]:
    data = await get_json(base, "nodes")
    return {str(n["name"]) for n in data or () if n.get("running")}


__all__ = ["get_json", "queue_leader", "queue_replicas", "running_nodes"]
