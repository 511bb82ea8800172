"""Shared by the endpoint modules of the management API (``api_objects.py``,
``api_admin.py``, ``api_runtime.py``): request helpers and ``ApiBase``, what every endpoint
needs of the running server (the logged-in user, vhosts, connections, listings)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from leveret.management import query
from leveret.management.errors import bad_request, not_found
from leveret.management.peers import node_scope
from leveret.management.shapes import Rates

if TYPE_CHECKING:
    from leveret.management.authz import Principal
    from leveret.management.plane import Plane
    from leveret.model.vhost import VirtualHost
    from leveret.server.connection import ConnectionProtocol


def json_reply(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d))


def no_content() -> web.Response:
    return web.Response(status=204)


async def read_body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    raw = await request.read()
    if not raw.strip():
        return {}
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise bad_request("body must be a JSON object")
    return data


def rates_of(request: web.Request) -> Rates:
    q = request.query
    values: list[int | None] = []
    for name in ("msg_rates_age", "msg_rates_incr", "lengths_age", "lengths_incr"):
        try:
            values.append(int(q[name]) if name in q else None)
        except ValueError:
            raise bad_request(f"{name} must be an integer") from None
    age, incr, lengths_age, lengths_incr = values
    return Rates(
        age,
        incr if incr is not None or age is None else 5,
        lengths_age,
        lengths_incr if lengths_incr is not None or lengths_age is None else 5,
    )


def as_bool(value: object, default: bool = False) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    return str(value).lower() == "true"


class ApiBase:
    """What the endpoints share, bound to one ``Plane``."""

    def __init__(self, server: Plane) -> None:
        self.server = server
        self.host = server.host
        self.admin_host = server.host.admin_host
        self.broker = self.admin_host.broker
        self.users = self.admin_host.users
        self.runtime = server.host.runtime
        self.sampler = server.sampler

    @property
    def cluster(self) -> Any:
        """This node's part in a cluster (``cluster/node.py``), None on a single node:
        declarations and deletions then go through etcd's metadata store."""
        return getattr(self.admin_host, "cluster", None)

    # -- the other nodes of a cluster (peers.py) ---------------------------------------------

    def others(self, request: web.Request) -> dict[str, dict[str, Any]]:
        """The other running nodes to ask for this request: none on a single node, or
        when another node asks (it wants this node's own objects)."""
        cluster = self.cluster
        if cluster is None or node_scope(request):
            return {}
        return {n: r for n, r in cluster.applier.view.nodes.items() if n != cluster.name}

    async def from_others(
        self, request: web.Request, local: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """``local`` (this node's rows for the request) with the other nodes' rows for the
        same request, node by node in name order."""
        nodes = self.others(request)
        if not nodes:
            return local
        answers = await self.server.peers.ask(request, nodes)
        by_node: dict[str, list[dict[str, Any]]] = {self.cluster.name: local}
        for name, (status, body) in answers.items():
            if status == 200 and isinstance(body, list):
                by_node[name] = [row for row in body if isinstance(row, dict)]
        return [row for name in sorted(by_node) for row in by_node[name]]

    async def on_others(self, request: web.Request) -> web.Response | None:
        """An object this node does not have (a connection, a channel, a queue only its
        node knows) asked of the other nodes in turn, the request as it is: the first
        answer that is not 404, as that node gave it; None if none has it."""
        nodes = self.others(request)
        body = await request.read() if nodes else b""
        for name in sorted(nodes):
            answer = await self.server.peers.forward(request, nodes[name], body)
            if answer is not None and answer[0] != 404:
                status, data, content_type = answer
                return web.Response(status=status, body=data or None, content_type=content_type)
        return None

    async def on_node(self, request: web.Request, name: str) -> web.Response:
        """The request as it is, answered by node ``name`` (a queue's leader)."""
        record = self.cluster.applier.view.nodes.get(name)
        body = await request.read()
        answer = None if record is None else await self.server.peers.forward(request, record, body)
        if answer is None:
            return web.json_response(
                {"error": "not_available", "reason": f"node {name} is down or does not answer"},
                status=503,
            )
        status, data, content_type = answer
        return web.Response(status=status, body=data or None, content_type=content_type)

    # -- helpers ---------------------------------------------------------------------------

    def who(self, request: web.Request) -> Principal:
        principal: Principal = self.server.principal(request)
        return principal

    def vhost(self, name: str) -> VirtualHost:
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise not_found()
        return vhost

    def listing(self, request: web.Request, items: list[dict[str, Any]]) -> web.Response:
        return json_reply(query.apply(items, request.query))

    def visible_vhosts(self, who: Principal, only: str | None = None) -> list[VirtualHost]:
        out = []
        for name, vhost in sorted(self.broker.vhosts.items()):
            if only is not None and name != only:
                continue
            if who.sees_vhost(name):
                out.append(vhost)
        if only is not None and not out:
            if only not in self.broker.vhosts:
                raise not_found()
            who.require_vhost(only)
        return out

    def connections(self, who: Principal) -> list[ConnectionProtocol]:
        out = []
        for conn in list(self.admin_host.connections):
            shell = conn.shell
            if shell is None or not shell.opened:
                continue
            if who.is_monitor or shell.info.user == who.name:
                out.append(conn)
        return sorted(out, key=lambda c: c.connected_at)
