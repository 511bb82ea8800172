"""``leveret ctl``'s runtime-parameter, shovel and federation commands, with rabbitmqctl's
argument order: ``set_parameter [-p vhost] component name value``, ``clear_parameter``,
``list_parameters``, ``shovel_status``, ``delete_shovel [-p vhost] name``,
``restart_shovel``, ``federation_status [--only-down]``, ``restart_federation_link id``.

``cli/ctl.py`` merges these into its tables (verbs, banners, columns, request arguments).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

__all__ = ["BANNERS", "DEFAULT_COLUMNS", "SPECS", "VERBS", "request_args"]


class LinkArgumentError(ValueError):
    """A command line whose value is not JSON (ctl.py reports it with exit code 65)."""


# One ``add_argument`` call: its names and its keywords (ctl.py's ``Arg``).
_Arg = tuple[tuple[str, ...], dict[str, Any]]
_VHOST: tuple[_Arg, ...] = (
    (("-p", "--vhost"), {"default": "/", "help": "virtual host (default /)"}),
)
_SHOVEL = (*_VHOST, (("name",), {}))

# verb -> (help, its arguments), merged into ctl.py's VERBS.
SPECS: dict[str, tuple[str, tuple[_Arg, ...]]] = {
    "set_parameter": (
        "set a runtime parameter (shovel, federation-upstream, ...)",
        (
            *_VHOST,
            (("component",), {}),
            (("name",), {}),
            (("value",), {"help": 'JSON, e.g. \'{"src-uri": "amqp://", ...}\''}),
        ),
    ),
    "clear_parameter": (
        "clear a runtime parameter",
        (*_VHOST, (("component",), {}), (("name",), {})),
    ),
    "list_parameters": ("list the runtime parameters of a vhost", _VHOST),
    "shovel_status": ("show the status of every shovel", ()),
    "delete_shovel": ("delete a dynamic shovel", _SHOVEL),
    "restart_shovel": ("restart a dynamic shovel", _SHOVEL),
    "federation_status": (
        "show the status of every federation link",
        (
            (
                ("--only-down",),
                {
                    "action": "store_true",
                    "help": "only links that failed or are not currently connected",
                },
            ),
        ),
    ),
    "restart_federation_link": (
        "restart a federation link",
        ((("link_id",), {"help": "ID of the link to restart (federation_status's id)"}),),
    ),
}

VERBS = frozenset(SPECS)

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
