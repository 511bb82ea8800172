"""The ``leveret ctl`` verbs of the shovel and federation plugins, with rabbitmqctl's
names and fields: ``shovel_status``, ``delete_shovel``, ``restart_shovel``,
``federation_status`` (``--only-down``), ``restart_federation_link``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from leveret.auth.users import InvalidArgument
from leveret.links.status import NoSuchLink

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from leveret.links.federation import Federation

__all__ = ["link_verbs"]


def _str(args: dict[str, Any], name: str, default: str | None = None) -> str:
    value = args.get(name, default)
    if not isinstance(value, str):
        raise InvalidArgument(f"argument '{name}' must be a string")
    return value


class Links(Protocol):
    """What the verbs need of the plug-in (``supervisor.Links``)."""

    federation: Federation

    @property
    def node(self) -> str: ...

    def shovel_status_rows(self) -> list[dict[str, Any]]: ...

    async def delete_shovel(self, vhost: str, name: str) -> None: ...

    async def restart_shovel(self, vhost: str, name: str) -> None: ...


def link_verbs(links: Links) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
    async def shovel_status(args: dict[str, Any]) -> list[dict[str, Any]]:
        return links.shovel_status_rows()

    async def delete_shovel(args: dict[str, Any]) -> None:
        await links.delete_shovel(_str(args, "vhost", "/"), _str(args, "name"))

    async def restart_shovel(args: dict[str, Any]) -> None:
        await links.restart_shovel(_str(args, "vhost", "/"), _str(args, "name"))

    async def federation_status(args: dict[str, Any]) -> list[dict[str, Any]]:
        rows = []
        for row in links.federation.rows(links.node):
            if args.get("only_down") and row["status"] in ("running", "starting"):
                continue
            # rabbitmqctl's output: every identity field present, timestamp as last_changed.
            out = {
                "queue": "",
                "exchange": "",
                "upstream_queue": "",
                "upstream_exchange": "",
                "local_connection": "",
                "error": "",
                **{k: v for k, v in row.items() if k not in ("timestamp", "node")},
            }
            out["last_changed"] = row["timestamp"]
            rows.append(out)
        return rows

    async def restart_federation_link(args: dict[str, Any]) -> None:
        link_id = _str(args, "id")
        link = links.federation.find(link_id)
        if link is None:
            raise NoSuchLink("Link with the given ID was not found")
        await links.federation.restart(link)

    return {
        "shovel_status": shovel_status,
        "delete_shovel": delete_shovel,
        "restart_shovel": restart_shovel,
        "federation_status": federation_status,
        "restart_federation_link": restart_federation_link,
    }
