"""The shovels that move a RabbitMQ's messages into Leveret (``docs/migration.md``).

``python -m leveret.links.migration DEFINITIONS SOURCE_URI [--user NAME] [--vhost V]...
[--delete-after]``
reads a RabbitMQ definitions file (``GET /api/definitions`` or ``rabbitmqctl
export_definitions``) and prints one ``leveret ctl set_parameter`` command per queue: a
shovel named ``migrate-<queue>`` from that queue on RabbitMQ (``SOURCE_URI`` plus the
queue's vhost) to the queue of the same name here (``amqp://<user>@/<vhost>``: this broker,
logged in as ``--user``, by default the source URI's user, which the definitions brought
along), with ``on-confirm`` acknowledgements so that nothing is acknowledged at RabbitMQ
before Leveret has it on disk. ``--delete-after`` adds ``"src-delete-after":
"queue-length"``: run it again once no publisher uses RabbitMQ any more, and each shovel
moves what is left and deletes itself.

The output is commands rather than actions so that they can be read first; pipe them to
``sh`` to run them.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from leveret.links.uri import UriError, parse_amqp091

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["main", "shovel_commands", "shovel_definition"]

PREFIX = "migrate-"


def _base(source_uri: str) -> str:
    """The source URI without its path and query (each queue's vhost is added)."""
    scheme, sep, rest = source_uri.partition("://")
    authority = rest.split("/", 1)[0].split("?", 1)[0]
    return f"{scheme}{sep}{authority}"


def shovel_definition(
    queue: str,
    vhost: str,
    source_uri: str,
    user: str,
    *,
    prefetch: int = 1000,
    delete_after: bool = False,
) -> dict[str, Any]:
    """The ``shovel`` parameter that moves ``vhost``'s ``queue`` from RabbitMQ to here."""
    v = quote(vhost, safe="")
    value: dict[str, Any] = {
        "src-protocol": "amqp091",
        "src-uri": f"{_base(source_uri)}/{v}",
        "src-queue": queue,
        "src-prefetch-count": prefetch,
        "dest-protocol": "amqp091",
        "dest-uri": f"amqp://{quote(user, safe='')}@/{v}",
        "dest-queue": queue,
        "ack-mode": "on-confirm",
        "reconnect-delay": 5,
    }
    if delete_after:
        value["src-delete-after"] = "queue-length"
    return value


def shovel_commands(
    definitions: dict[str, Any],
    source_uri: str,
    user: str | None = None,
    *,
    prefetch: int = 1000,
    delete_after: bool = False,
    vhosts: Sequence[str] = (),
) -> list[list[str]]:
    """``leveret ctl set_parameter`` argument lists, one per durable queue of the file (of
    ``vhosts`` only, when given; a vhost's own export, whose entries name no vhost, needs
    its name there)."""
    endpoint = parse_amqp091(source_uri)
    if endpoint.local:
        raise UriError("the source URI must name RabbitMQ's host")
    login = user or endpoint.username or "guest"
    commands = []
    for entry in definitions.get("queues") or []:
        if not isinstance(entry, dict) or entry.get("durable") is False:
            continue
        name = str(entry["name"])
        vhost = str(entry.get("vhost", vhosts[0] if len(vhosts) == 1 else "/"))
        if vhosts and vhost not in vhosts:
            continue
        value = shovel_definition(
            name, vhost, source_uri, login, prefetch=prefetch, delete_after=delete_after
        )
        commands.append(
            [
                "leveret",
                "ctl",
                "set_parameter",
                "-p",
                vhost,
                "shovel",
                PREFIX + name,
                json.dumps(value, separators=(",", ":")),
            ]
        )
    return commands


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m leveret.links.migration",
        description="Print the leveret ctl commands that shovel every queue of a RabbitMQ "
        "definitions file into this broker (docs/migration.md).",
    )
    parser.add_argument("definitions", help="RabbitMQ's definitions (JSON file, '-': stdin)")
    parser.add_argument("source_uri", help="RabbitMQ, e.g. amqp://user:password@rabbit:5672")
    parser.add_argument("--user", help="who the local ends log in as (default: the URI's user)")
    parser.add_argument("--prefetch", type=int, default=1000, help="src-prefetch-count")
    parser.add_argument(
        "--vhost",
        action="append",
        default=[],
        help="only this vhost's queues (repeat for more; one vhost at a time is a way to move)",
    )
    parser.add_argument(
        "--delete-after",
        action="store_true",
        help="add src-delete-after queue-length (once no publisher uses RabbitMQ)",
    )
    args = parser.parse_args(argv)
    try:
        text = sys.stdin.read() if args.definitions == "-" else Path(args.definitions).read_text()
        definitions = json.loads(text)
        commands = shovel_commands(
            definitions,
            args.source_uri,
            args.user,
            prefetch=args.prefetch,
            delete_after=args.delete_after,
            vhosts=args.vhost,
        )
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 65
    for command in commands:
        print(shlex.join(command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
