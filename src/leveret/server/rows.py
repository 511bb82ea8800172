"""The rows every listing shows, computed once: the facts of each kind of object that the
management API's JSON (``management/shapes.py``) and ``leveret ctl``'s verbs
(``server/ctl/``) are made of, and the definitions export (``definitions.py``) reuses.
"""

from __future__ import annotations

import datetime
import decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from leveret.model.vhost import VirtualHost


def json_value(value: object) -> Any:
    """A field-table value as JSON (longstr bytes as text, decimals and timestamps as
    numbers), as RabbitMQ shows arguments and headers."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    return value


def properties_key(routing_key: str, arguments: Mapping[str, object]) -> str:
    """RabbitMQ's binding id in URLs: the routing key, or it plus a hash of the arguments
    (``~`` + a base64 of its digest); ``~`` alone for an empty key."""
    import base64
    import hashlib

    if not arguments:
        return routing_key.replace("%", "%25") if routing_key else "~"
    digest = hashlib.md5(  # noqa: S324 - an id, not security
        repr(sorted((k, repr(v)) for k, v in arguments.items())).encode()
    ).digest()
    return f"{routing_key}~{base64.urlsafe_b64encode(digest).decode().rstrip('=')}"


def binding_rows(vhost: VirtualHost) -> list[dict[str, Any]]:
    """Every binding of a vhost, RabbitMQ's way: the default exchange's implicit ones first."""
    from leveret.model.exchange import Exchange
    from leveret.model.queue import Queue

    rows: list[dict[str, Any]] = [
        {
            "source": "",
            "vhost": vhost.name,
            "destination": name,
            "destination_type": "queue",
            "routing_key": name,
            "arguments": {},
            "properties_key": name,
        }
        for name in sorted(vhost.queues)
    ]
    for name, exchange in sorted(vhost.exchanges.items()):
        if not name:
            continue
        for destination, key, arguments in exchange.kind.bindings():
            if isinstance(destination, Queue):
                dest_type, dest_name = "queue", destination.name
            elif isinstance(destination, Exchange):
                dest_type, dest_name = "exchange", destination.name
            else:
                continue
            args = dict(arguments or {})
            rows.append(
                {
                    "source": name,
                    "vhost": vhost.name,
                    "destination": dest_name,
                    "destination_type": dest_type,
                    "routing_key": key,
                    "arguments": json_value(args),
                    "properties_key": properties_key(key, args),
                }
            )
    return rows
