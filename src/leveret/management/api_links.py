"""The shovel and federation plugins' endpoints (``rabbitmq_shovel_management``,
``rabbitmq_federation_management`` 3.10.8): what runs (``leveret.links``), with RabbitMQ's
paths and fields.

- ``GET /api/shovels[/{vhost}]``; ``DELETE /api/shovels/vhost/{vhost}/{name}`` deletes the
  shovel (its parameter), ``DELETE .../restart`` restarts it (also ``POST``, and the same
  under ``/api/shovels/{vhost}/{name}/restart``).
- ``GET /api/federation-links[/{vhost}]``, ``.../state/down`` (links neither running nor
  starting); ``DELETE /api/federation-links/vhost/{vhost}/{id}/{node}/restart``.

Reads need the monitoring tag (RabbitMQ's ``is_authorized_monitor``) and show the vhosts
the user may see; deleting and restarting need the policymaker tag in the vhost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.management import shapes
from leveret.management.api_base import ApiBase, no_content
from leveret.management.errors import not_found

if TYPE_CHECKING:
    from aiohttp import web

    from leveret.links.supervisor import Links

__all__ = ["LinksApi", "add_link_routes"]


class LinksApi(ApiBase):
    """Shovel and federation status (see the module docstring)."""

    def _links(self) -> Links:
        from leveret.links.supervisor import Links

        for plugin in getattr(self.host, "plugins", ()):
            if isinstance(plugin, Links):
                return plugin
        raise not_found()

    async def list_shovels(self, request: web.Request) -> web.Response:
        who = self.who(request)
        who.require_monitor()
        only = request.match_info.get("vhost")
        if only is not None:
            self.vhost(only)
        rows = [
            row
            for row in self._links().shovel_rows()
            if who.sees_vhost(row["vhost"]) and (only is None or row["vhost"] == only)
        ]
        return self.listing(request, rows)

    async def delete_shovel(self, request: web.Request) -> web.Response:
        who = self.who(request)
        vhost, name = request.match_info["vhost"], request.match_info["name"]
        who.require_policymaker(vhost)
        links = self._links()
        if (vhost, name) not in links.shovels:
            raise not_found()
        if request.path.endswith("/restart"):
            await links.restart_shovel(vhost, name)
        else:
            await links.delete_shovel(vhost, name)
        return no_content()

    async def list_federation_links(self, request: web.Request) -> web.Response:
        who = self.who(request)
        who.require_monitor()
        only = request.match_info.get("vhost")
        if only is not None:
            self.vhost(only)
        down = request.path.rstrip("/").endswith("/state/down")
        links = self._links()
        rows = []
        for row in links.federation.rows(links.node):
            if not who.sees_vhost(row["vhost"]) or (only is not None and row["vhost"] != only):
                continue
            if down and row["status"] in ("running", "starting"):
                continue
            channel = self._local_channel(row.get("local_connection"))
            if channel is not None:
                row["local_channel"] = channel
            rows.append(row)
        return self.listing(request, rows)

    def _local_channel(self, connection: object) -> dict[str, Any] | None:
        """The link's channel on its local connection, as ``/api/channels`` shows it
        (RabbitMQ's ``local_channel``)."""
        if not isinstance(connection, str) or not connection:
            return None
        for conn in list(self.admin_host.connections):
            if shapes.connection_name(conn) != connection:
                continue
            shell = conn.shell
            if shell is None or not shell.opened:
                return None
            for channel in sorted(shell.channels(), key=lambda c: c.number):
                return shapes.channel_json(conn, channel, self.sampler)
        return None

    async def restart_federation_link(self, request: web.Request) -> web.Response:
        who = self.who(request)
        vhost = request.match_info["vhost"]
        who.require_policymaker(vhost)
        federation = self._links().federation
        link = federation.find(request.match_info["id"])
        if link is None or link.vhost != vhost:
            raise not_found()
        await federation.restart(link)
        return no_content()


def add_link_routes(app: web.Application, api: LinksApi) -> None:
    r = app.router
    get, delete, post = r.add_get, r.add_delete, r.add_post
    get("/api/shovels", api.list_shovels)
    get("/api/shovels/{vhost}", api.list_shovels)
    get("/api/shovels/vhost/{vhost}/{name}", api.list_shovels)
    for path in (
        "/api/shovels/vhost/{vhost}/{name}",
        "/api/shovels/vhost/{vhost}/{name}/restart",
        "/api/shovels/{vhost}/{name}/restart",
    ):
        delete(path, api.delete_shovel)
        if path.endswith("restart"):
            post(path, api.delete_shovel)
    get("/api/federation-links", api.list_federation_links)
    get("/api/federation-links/state/down", api.list_federation_links)
    get("/api/federation-links/{vhost}", api.list_federation_links)
    get("/api/federation-links/{vhost}/state/down", api.list_federation_links)
    delete("/api/federation-links/vhost/{vhost}/{id}/{node}/restart", api.restart_federation_link)
