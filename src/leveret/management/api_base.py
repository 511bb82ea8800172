"""Shared by the endpoint modules of the management API (``api_objects.py``,
``api_admin.py``, ``api_runtime.py``): request helpers and ``ApiBase``, what every endpoint
needs of the running server (the logged-in user, vhosts, connections, listings)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from leveret.management import query
from leveret.management.errors import bad_request, not_found
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
