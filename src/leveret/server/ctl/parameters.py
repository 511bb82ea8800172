"""rabbitmqctl's runtime-parameter verbs for ``leveret ctl``: ``set_parameter``,
``clear_parameter``, ``list_parameters`` (a component's own checks run on set: a shovel or
federation upstream is refused as RabbitMQ refuses it). The change is made through
``Runtime.change`` (``runtime.json`` before the answer; etcd on a cluster node), as the HTTP
API's ``PUT /api/parameters`` does.

Registered with the admin by ``server/server.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.auth.users import InvalidArgument

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from leveret.server.ctl.admin import Admin
    from leveret.server.parameters import Runtime

__all__ = ["parameter_verbs"]


def _str(args: dict[str, Any], name: str, default: str | None = None) -> str:
    value = args.get(name, default)
    if not isinstance(value, str):
        raise InvalidArgument(f"argument '{name}' must be a string")
    return value


def parameter_verbs(admin: Admin) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
    def runtime() -> Runtime:
        found: Runtime | None = getattr(admin.host, "runtime", None)
        if found is None:
            raise InvalidArgument("this broker has no runtime parameters")
        return found

    async def set_parameter(args: dict[str, Any]) -> None:
        vhost, component, name = (
            _str(args, "vhost", "/"),
            _str(args, "component"),
            _str(args, "name"),
        )
        value = args.get("value")
        await runtime().change(lambda rt: rt.set_parameter(vhost, component, name, value))

    async def clear_parameter(args: dict[str, Any]) -> None:
        vhost, component, name = (
            _str(args, "vhost", "/"),
            _str(args, "component"),
            _str(args, "name"),
        )
        await runtime().change(lambda rt: rt.clear_parameter(vhost, component, name))

    async def list_parameters(args: dict[str, Any]) -> list[dict[str, Any]]:
        vhost = _str(args, "vhost", "/")
        return [
            {"component": p["component"], "name": p["name"], "value": p["value"]}
            for p in runtime().parameter_rows()
            if p["vhost"] == vhost
        ]

    return {
        "set_parameter": set_parameter,
        "clear_parameter": clear_parameter,
        "list_parameters": list_parameters,
    }
