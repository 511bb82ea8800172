"""The other nodes of a cluster, asked through their own management API: how one node's
``/api/connections``, ``/api/channels``, ``/api/consumers``, ``/api/overview``,
``/api/nodes`` and the object endpoints answer for the whole cluster, as RabbitMQ's do.

A node asks each other running node at the URL of its API that reaches it alone (its
record's ``api``: with ``--workers`` the management port is shared, so each worker has a
listener of its own besides), with the caller's ``Authorization`` (the registry is the
cluster's, so the same user exists there and is filtered the same way) and the header
``X-Leveret-Scope: node``, which makes the asked node answer with its own objects only
(never asking further: no request goes round). The query's listing parameters (page,
sort, name, columns) are applied once, by the asking node, to the whole list; the others
(rates, ages) are passed on. A node that does not answer within ``TIMEOUT`` is left out
of the answer (logged), as RabbitMQ leaves out a node that does not reply.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import aiohttp
from yarl import URL

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger("leveret.management")

SCOPE_HEADER = "X-Leveret-Scope"
NODE_SCOPE = "node"
# Seconds a node waits for another's answer.
TIMEOUT = 2.0
# Query parameters the asking node applies to the merged list (management/query.py).
LISTING_PARAMETERS = frozenset(
    ("page", "page_size", "name", "use_regex", "sort", "sort_reverse", "columns")
)


def node_scope(request: web.Request) -> bool:
    """Whether another node asks: answer with this node's own objects only."""
    return request.headers.get(SCOPE_HEADER) == NODE_SCOPE


def api_url(record: dict[str, Any]) -> str | None:
    """The URL of a node's API that reaches that node alone, from its record."""
    for url in [*record.get("api", []), *record.get("management", [])]:
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            return url
    return None


class Peers:
    """The asking side: one HTTP session (kept-alive connections) for every request a
    node makes of the others."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def ask(
        self,
        request: web.Request,
        nodes: dict[str, dict[str, Any]],
        *,
        method: str = "GET",
        path: str | None = None,
    ) -> dict[str, tuple[int, Any]]:
        """``method path`` (the request's own path by default; encoded) of each node in ``nodes``
        (name -> record) at once: node -> (status, JSON body or None). A node that does
        not answer is left out."""
        query = {k: v for k, v in request.query.items() if k not in LISTING_PARAMETERS}
        # The path as it came, still encoded: a vhost "/" is %2F, a name may hold "?".
        target = (path or request.rel_url.raw_path) + (f"?{urlencode(query)}" if query else "")
        headers = {SCOPE_HEADER: NODE_SCOPE}
        if "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        for name in ("X-Reason",):
            if name in request.headers:
                headers[name] = request.headers[name]
        names = sorted(nodes)
        answers = await asyncio.gather(
            *(self._one(method, nodes[name], target, headers) for name in names)
        )
        out = {}
        for name, answer in zip(names, answers, strict=True):
            if answer is None:
                log.warning("node %s did not answer %s %s", name, method, target)
            else:
                out[name] = answer
        return out

    async def forward(
        self, request: web.Request, record: dict[str, Any], body: bytes
    ) -> tuple[int, bytes, str] | None:
        """The request as it is (method, path, query, body) to one node: its status,
        body and content type, or None when it does not answer."""
        base = api_url(record)
        if base is None:
            return None
        headers = {SCOPE_HEADER: NODE_SCOPE}
        for name in ("Authorization", "Content-Type", "X-Reason"):
            if name in request.headers:
                headers[name] = request.headers[name]
        try:
            async with self._client().request(
                request.method,
                URL(base + request.raw_path, encoded=True),
                headers=headers,
                data=body or None,
            ) as reply:
                return reply.status, await reply.read(), reply.content_type
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def _one(
        self, method: str, record: dict[str, Any], target: str, headers: dict[str, str]
    ) -> tuple[int, Any] | None:
        base = api_url(record)
        if base is None:
            return None
        try:
            url = URL(base + target, encoded=True)
            async with self._client().request(method, url, headers=headers) as reply:
                body = await reply.json() if reply.content_type == "application/json" else None
                return reply.status, body
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None


__all__ = ["NODE_SCOPE", "SCOPE_HEADER", "Peers", "api_url", "node_scope"]
