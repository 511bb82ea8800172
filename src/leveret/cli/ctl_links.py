"""``leveret ctl``'s runtime-parameter, shovel and federation commands, with rabbitmqctl's
argument order: ``set_parameter [-p vhost] component name value``, ``clear_parameter``,
``list_parameters``, ``shovel_status``, ``delete_shovel [-p vhost] name``,
``restart_shovel``, ``federation_status [--only-down]``, ``restart_federation_link id``.

``cli/ctl.py`` merges these into its tables (parsers, banners, columns, request arguments).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

__all__ = ["BANNERS", "DEFAULT_COLUMNS", "VERBS", "request_args", "specs"]


class LinkArgumentError(ValueError):
    """A command line whose value is not JSON (ctl.py reports it with exit code 65)."""


def _vhost(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--vhost", default="/", help="virtual host (default /)")


def specs() -> dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]]:
    def set_parameter(p: argparse.ArgumentParser) -> None:
        _vhost(p)
        p.add_argument("component")
        p.add_argument("name")
        p.add_argument("value", help='JSON, e.g. \'{"src-uri": "amqp://", ...}\'')

    def clear_parameter(p: argparse.ArgumentParser) -> None:
        _vhost(p)
        p.add_argument("component")
        p.add_argument("name")

    def shovel_name(p: argparse.ArgumentParser) -> None:
        _vhost(p)
        p.add_argument("name")

    def federation_status(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--only-down",
            action="store_true",
            help="only links that failed or are not currently connected",
        )

    def link_id(p: argparse.ArgumentParser) -> None:
        p.add_argument("link_id", help="ID of the link to restart (federation_status's id)")

    def none(p: argparse.ArgumentParser) -> None:
        pass

    return {
        "set_parameter": (
            "set a runtime parameter (shovel, federation-upstream, ...)",
            set_parameter,
        ),
        "clear_parameter": ("clear a runtime parameter", clear_parameter),
        "list_parameters": ("list the runtime parameters of a vhost", _vhost),
        "shovel_status": ("show the status of every shovel", none),
        "delete_shovel": ("delete a dynamic shovel", shovel_name),
        "restart_shovel": ("restart a dynamic shovel", shovel_name),
        "federation_status": ("show the status of every federation link", federation_status),
        "restart_federation_link": ("restart a federation link", link_id),
    }


VERBS = frozenset(specs())

BANNERS = {
    "set_parameter": 'Setting runtime parameter "{name}" for component "{component}" to '
    '"{value}" in vhost "{vhost}" ...',
    "clear_parameter": 'Clearing runtime parameter "{name}" for component "{component}" on '
    'vhost "{vhost}" ...',
    "list_parameters": 'Listing runtime parameters for vhost "{vhost}" ...',
    "shovel_status": "Shovel status ...",
    "delete_shovel": 'Deleting shovel "{name}" in vhost "{vhost}" ...',
    "restart_shovel": 'Restarting shovel "{name}" in vhost "{vhost}" ...',
    "federation_status": "Listing federation links ...",
    "restart_federation_link": "Restarting federation link {link_id} ...",
}

DEFAULT_COLUMNS = {
    "list_parameters": ["component", "name", "value"],
    "shovel_status": [
        "name",
        "vhost",
        "type",
        "state",
        "source",
        "destination",
        "termination_reason",
        "last_changed",
    ],
    "federation_status": [
        "id",
        "type",
        "vhost",
        "exchange",
        "queue",
        "upstream",
        "status",
        "local_connection",
        "uri",
        "error",
        "last_changed",
    ],
}


def request_args(verb: str, a: argparse.Namespace) -> dict[str, Any]:
    """The control request's arguments for one of :data:`VERBS`."""
    if verb == "set_parameter":
        try:
            value = json.loads(a.value)
        except ValueError as exc:
            raise LinkArgumentError(f"value is not valid JSON: {exc}") from None
        return {"vhost": a.vhost, "component": a.component, "name": a.name, "value": value}
    if verb == "clear_parameter":
        return {"vhost": a.vhost, "component": a.component, "name": a.name}
    if verb == "list_parameters":
        return {"vhost": a.vhost}
    if verb in ("delete_shovel", "restart_shovel"):
        return {"vhost": a.vhost, "name": a.name}
    if verb == "federation_status":
        return {"only_down": a.only_down}
    if verb == "restart_federation_link":
        return {"id": a.link_id}
    return {}
