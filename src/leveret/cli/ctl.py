"""``leveret ctl``: rabbitmqctl's verbs, with its argument order, against the running broker.

The broker is found from the same settings as ``leveret serve`` (``--data-dir``,
``--config``, ``LEVERET_*``): its control socket is ``data_dir/ctl.sock``
(``server/ctl/unix_socket.py``), usable by the broker's own user only, so no password is
needed on the broker's machine. For ``leveret serve --workers`` it is the first worker's
that answers (``data_dir/node-1/ctl.sock``, else node-2's, ...). Output is a table
(tab-separated, a header line; rabbitmqctl's "Listing ..." banner unless ``-q``) or JSON
(``--formatter json``). Exit codes are rabbitmqctl's: 0 done, 64 bad usage, 65 bad data or
failed authentication, 67 no such user, 69 broker or vhost unavailable, 70 user exists;
never a traceback.
"""

from __future__ import annotations

import argparse
import copy
import getpass
import json
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from leveret.cli import ctl_links, ctl_quorum
from leveret.config import ConfigError, default_data_dir, load
from leveret.server.ctl.unix_socket import socket_path

if TYPE_CHECKING:
    from collections.abc import Sequence

EX_USAGE = 64
EX_UNAVAILABLE = 69
DEFAULT_TIMEOUT = 60.0
AWAIT_TIMEOUT = 300.0


class CtlError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EX_USAGE, f"leveret ctl: {message} (see '{self.prog} --help')\n")


def _common(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument("--data-dir", default=default, help="the broker's data directory")
    parser.add_argument("--config", default=default, help="the broker's TOML config file")
    parser.add_argument(
        "--formatter", choices=("table", "json"), default=default, help="output format"
    )
    parser.add_argument("-q", "--quiet", action="store_true", default=default)
    parser.add_argument(
        "-t", "--timeout", type=float, default=default, help="seconds to wait for the broker"
    )


# One ``add_argument`` call: its names and its keywords.
Arg = tuple[tuple[str, ...], dict[str, Any]]


@dataclass(frozen=True)
class OneOf:
    """A mutually exclusive group of arguments."""

    args: tuple[Arg, ...]
    required: bool = False


def _a(*names: str, **options: Any) -> Arg:
    return names, options


# add_super_stream's options -> the stream protocol's stream arguments (rabbitmq-streams').
_SUPER_STREAM_ARGUMENTS = {
    "max-length-bytes": "max-length-bytes",
    "max-age": "max-age",
    "stream-max-segment-size-bytes": "stream-max-segment-size-bytes",
    "leader-locator": "queue-leader-locator",
    "initial-cluster-size": "initial-cluster-size",
}

# The arguments the verbs share, in the order they are added.
VHOST = (_a("-p", "--vhost", default="/", help="virtual host (default /)"),)
USER = (_a("username"),)
USER_PASSWORD = (*USER, _a("password", nargs="?", help="read from stdin when left out"))
COLUMNS = (_a("columns", nargs="*"),)
VHOST_COLUMNS = (*VHOST, *COLUMNS)
QUEUE = (*VHOST, _a("queue"))
FILE = (_a("file", help="'-' for standard input/output"),)
NONE: tuple[Arg, ...] = ()
SET_POLICY = (
    *VHOST,
    _a("--priority", type=int, default=0),
    _a(
        "--apply-to",
        default="all",
        choices=("all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams"),
    ),
    _a("name"),
    _a("pattern"),
    _a("definition", help="JSON, e.g. '{\"max-length\": 1000}'"),
)
CLEAR_POLICY = (*VHOST, _a("name"))
DELAYED_SELECTORS = (
    _a("--id", dest="ids", type=int, action="append", help="a pending id"),
    _a("--message-id"),
    _a("--correlation-id"),
    _a("--routing-key"),
)
CANCEL_DELAYED = (
    *VHOST,
    _a("exchange"),
    *DELAYED_SELECTORS,
    _a("--all", action="store_true", help="every pending message"),
)
MESSAGE_FILTER = (
    _a("--header", action="append", default=[], help="NAME=VALUE"),
    _a("--property", action="append", default=[], help="NAME=VALUE"),
    _a("--key", dest="match_key", help="only messages with this routing key"),
    _a("--body-contains"),
)

# verb -> (help, its arguments)
VERBS: dict[str, tuple[str, tuple[Arg | OneOf, ...]]] = {
    "add_user": ("create a user", USER_PASSWORD),
    "delete_user": ("delete a user and their permissions", USER),
    "change_password": ("set a user's password", USER_PASSWORD),
    "clear_password": ("remove a user's password (certificate login only)", USER),
    "set_user_tags": ("replace a user's tags", (*USER, _a("tags", nargs="*"))),
    "list_users": ("list users and their tags", NONE),
    "authenticate_user": ("check a user's password", USER_PASSWORD),
    "add_vhost": (
        "create a virtual host",
        (
            _a("vhost"),
            _a("--description", default=""),
            _a("--tags", default="", help="comma-separated"),
            _a("--default-queue-type", choices=("classic", "quorum", "stream")),
        ),
    ),
    "delete_vhost": ("delete a virtual host and everything in it", (_a("vhost"),)),
    "list_vhosts": ("list virtual hosts", COLUMNS),
    "set_permissions": (
        "set a user's permissions in a vhost",
        (*VHOST, *(_a(n) for n in ("username", "conf", "write", "read"))),
    ),
    "clear_permissions": ("remove a user's permissions in a vhost", (*VHOST, *USER)),
    "list_permissions": ("list the permissions in a vhost", VHOST),
    "list_user_permissions": ("list a user's permissions", USER),
    "set_topic_permissions": (
        "set a user's topic permissions",
        (*VHOST, *(_a(n) for n in ("username", "exchange", "write", "read"))),
    ),
    "clear_topic_permissions": (
        "remove a user's topic permissions",
        (*VHOST, *USER, _a("exchange", nargs="?")),
    ),
    "list_topic_permissions": ("list the topic permissions in a vhost", VHOST),
    "list_user_topic_permissions": ("list a user's topic permissions", USER),
    "set_vhost_limits": (
        "set a vhost's limits",
        (*VHOST, _a("definition", help="JSON, e.g. '{\"max-connections\": 10}'")),
    ),
    "clear_vhost_limits": ("remove a vhost's limits", VHOST),
    "list_vhost_limits": (
        "show vhost limits",
        (*VHOST, _a("--global", dest="all", action="store_true", help="every vhost")),
    ),
    "set_user_limits": (
        "set a user's limits",
        (*USER, _a("definition", help="JSON, e.g. '{\"max-channels\": 100}'")),
    ),
    "clear_user_limits": (
        "remove a user's limit",
        (*USER, _a("limit", help="max-connections, max-channels or all")),
    ),
    "list_user_limits": (
        "show user limits",
        (_a("--user"), _a("--global", dest="all", action="store_true", help="every user")),
    ),
    "list_queues": ("list queues (columns: name messages consumers ...)", VHOST_COLUMNS),
    "list_exchanges": ("list exchanges", VHOST_COLUMNS),
    "list_bindings": ("list bindings", VHOST_COLUMNS),
    "list_connections": ("list connections", COLUMNS),
    "list_channels": ("list channels", COLUMNS),
    "list_consumers": ("list consumers", VHOST_COLUMNS),
    "purge_queue": ("remove every ready message of a queue", QUEUE),
    "delete_queue": (
        "delete a queue",
        (
            *QUEUE,
            _a("--if-empty", action="store_true", help="only if it has no messages"),
            _a("--if-unused", action="store_true", help="only if it has no consumers"),
        ),
    ),
    "close_connection": (
        "close a client connection",
        (
            _a("connection", help="the connection's name (list_connections name)"),
            _a("explanation", help="the reason the client is told"),
        ),
    ),
    "set_policy": ("set a policy", SET_POLICY),
    "clear_policy": ("remove a policy", CLEAR_POLICY),
    "list_policies": ("list the policies of a vhost", VHOST),
    "set_operator_policy": ("set an operator policy", SET_POLICY),
    "clear_operator_policy": ("remove an operator policy", CLEAR_POLICY),
    "list_operator_policies": ("list the operator policies of a vhost", VHOST),
    "import_definitions": (
        "import definitions (RabbitMQ's JSON: users, vhosts, permissions, limits, "
        "parameters, policies, exchanges, queues, bindings)",
        FILE,
    ),
    "export_definitions": ("export every definition (RabbitMQ's JSON)", FILE),
    "list_delayed": (
        "list the pending messages of a delayed exchange",
        (
            *VHOST,
            _a("exchange"),
            *DELAYED_SELECTORS,
            _a("--count", type=int, default=100),
            _a("--skip", type=int, default=0),
            _a("--preview", type=int, default=60, help="body bytes shown"),
            _a("columns", nargs="*", default=[]),
        ),
    ),
    "cancel_delayed": ("cancel pending messages of a delayed exchange", CANCEL_DELAYED),
    "reschedule_delayed": (
        "give pending messages of a delayed exchange a new due time",
        (
            *CANCEL_DELAYED,
            OneOf(
                (
                    _a("--delay", type=int, help="ms from now"),
                    _a("--due", type=int, help="ms since the epoch"),
                ),
                required=True,
            ),
        ),
    ),
    "browse_queue": (
        "show a queue's messages without consuming them",
        (
            *QUEUE,
            *MESSAGE_FILTER,
            _a("--offset", type=int, default=0, help="position (stream: offset)"),
            _a("--count", type=int, default=20),
            _a("--scan", type=int, help="look at no more than this many"),
            _a("--truncate", type=int, default=60, help="body bytes shown"),
            _a("columns", nargs="*", default=[]),
        ),
    ),
    "move_messages": (
        "move or copy a queue's messages elsewhere",
        (
            *QUEUE,
            *MESSAGE_FILTER,
            OneOf((_a("--to-queue"), _a("--to-exchange")), required=True),
            _a("--routing-key", help="with --to-exchange (default: each message's)"),
            _a("--limit", type=int),
            _a("--copy", action="store_true", help="leave the messages where they are"),
            _a("--offset", type=int, default=0, help="streams: the first offset"),
            _a("--end-offset", type=int, help="streams: the offset to stop before"),
        ),
    ),
    "replay_dead_letters": (
        "move a dead-letter queue's messages back to the queues they died in",
        (*QUEUE, *MESSAGE_FILTER, _a("--limit", type=int)),
    ),
    "add_super_stream": (
        "create a super stream: an exchange and its partition streams (rabbitmq-streams)",
        (
            *VHOST,
            _a("name"),
            OneOf(
                (
                    _a("--partitions", type=int, help="partitions NAME-0 ... (default 3)"),
                    _a(
                        "--binding-keys",
                        "--routing-keys",  # RabbitMQ 3.10's name for it
                        dest="binding_keys",
                        help="comma-separated binding keys, one partition NAME-key each",
                    ),
                )
            ),
            *(_a(f"--{option}") for option in _SUPER_STREAM_ARGUMENTS),
        ),
    ),
    "delete_super_stream": (
        "delete a super stream and its partition streams (rabbitmq-streams)",
        (*VHOST, _a("name")),
    ),
    "status": ("show the broker's status", NONE),
    "cluster_status": (
        "show the cluster: its nodes, which run, their listeners, queue leaders per node",
        NONE,
    ),
    "forget_cluster_node": (
        "remove a stopped node from the cluster, with the queues it led",
        (_a("node"),),
    ),
    "await_startup": ("wait until the broker accepts commands", NONE),
    "reload_tls": (
        "reload the TLS certificate, key and CA files (amqps and the inter-node link)",
        NONE,
    ),
}
# The runtime-parameter, shovel and federation verbs (cli/ctl_links.py).
VERBS.update(ctl_links.SPECS)
# rabbitmq-queues' verbs for quorum queues (cli/ctl_quorum.py).
VERBS.update(ctl_quorum.SPECS)


def _add(p: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup, arg: Arg) -> None:
    names, options = arg
    # A copy: argparse keeps a default list as given, and the table is shared.
    p.add_argument(*names, **copy.deepcopy(options))


def parser() -> argparse.ArgumentParser:
    main = _Parser(
        prog="leveret ctl",
        description="Manage a running Leveret broker (rabbitmqctl's verbs)",
    )
    _common(main, None)
    sub = main.add_subparsers(dest="verb", required=True, metavar="command")
    for verb, (help_text, args) in VERBS.items():
        p = sub.add_parser(verb, help=help_text, description=help_text)
        _common(p, argparse.SUPPRESS)
        for arg in args:
            if isinstance(arg, OneOf):
                group = p.add_mutually_exclusive_group(required=arg.required)
                for member in arg.args:
                    _add(group, member)
            else:
                _add(p, arg)
    return main


# -- talking to the broker ---------------------------------------------------------------


def request(path: Path, verb: str, args: dict[str, Any], timeout: float) -> Any:
    """One request to the broker's control socket; the result, or CtlError."""
    payload = json.dumps({"verb": verb, "args": args}).encode() + b"\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
            sock.sendall(payload)
            chunks = []
            while chunk := sock.recv(1 << 16):
                chunks.append(chunk)
        except FileNotFoundError:
            raise CtlError(
                f"no broker is running with data directory {path.parent} ({path} is missing)",
                EX_UNAVAILABLE,
            ) from None
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise CtlError(f"cannot reach the broker at {path}: {reason}", EX_UNAVAILABLE) from None
    try:
        reply = json.loads(b"".join(chunks))
    except ValueError:
        raise CtlError("the broker closed the control connection", EX_UNAVAILABLE) from None
    if not reply.get("ok"):
        raise CtlError(str(reply.get("error")), int(reply.get("code") or 1))
    return reply.get("result")


# -- output -----------------------------------------------------------------------------------


def _cell(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _print_table(rows: list[dict[str, Any]], columns: Sequence[str] | None = None) -> None:
    if columns is None:
        columns = list(rows[0]) if rows else []
    if columns:
        print("\t".join(columns))
    for row in rows:
        print("\t".join(_cell(row.get(c, "")) for c in columns))


# verb -> (banner, table columns when the result is empty)
_BANNERS: dict[str, str] = {
    "add_user": 'Adding user "{username}" ...',
    "delete_user": 'Deleting user "{username}" ...',
    "change_password": 'Changing password for user "{username}" ...',
    "clear_password": 'Clearing password for user "{username}" ...',
    "set_user_tags": 'Setting tags for user "{username}" to [{tag_list}] ...',
    "list_users": "Listing users ...",
    "authenticate_user": 'Authenticating user "{username}" ...',
    "add_vhost": 'Adding vhost "{vhost}" ...',
    "delete_vhost": 'Deleting vhost "{vhost}" ...',
    "list_vhosts": "Listing vhosts ...",
    "set_permissions": 'Setting permissions for user "{username}" in vhost "{vhost}" ...',
    "clear_permissions": 'Clearing permissions for user "{username}" in vhost "{vhost}" ...',
    "list_permissions": 'Listing permissions for vhost "{vhost}" ...',
    "list_user_permissions": 'Listing permissions for user "{username}" ...',
    "set_topic_permissions": (
        'Setting topic permissions on "{exchange}" for user "{username}" in vhost "{vhost}" ...'
    ),
    "clear_topic_permissions": 'Clearing topic permissions for user "{username}" in vhost '
    '"{vhost}" ...',
    "list_topic_permissions": 'Listing topic permissions for vhost "{vhost}" ...',
    "list_user_topic_permissions": 'Listing topic permissions for user "{username}" ...',
    "set_vhost_limits": 'Setting vhost limits to "{definition}" for vhost "{vhost}" ...',
    "clear_vhost_limits": 'Clearing vhost "{vhost}" limits ...',
    "list_vhost_limits": 'Listing limits for vhost "{vhost}" ...',
    "set_user_limits": 'Setting user limits to "{definition}" for user "{username}" ...',
    "clear_user_limits": 'Clearing "{limit}" limit for user "{username}" ...',
    "list_user_limits": "Listing user limits ...",
    "import_definitions": 'Importing definitions in JSON from "{file}" ...',
    "export_definitions": 'Exporting definitions in JSON to "{file}" ...',
    "list_queues": "Listing queues for vhost {vhost} ...",
    "list_exchanges": "Listing exchanges for vhost {vhost} ...",
    "list_bindings": "Listing bindings for vhost {vhost}...",
    "list_connections": "Listing connections ...",
    "list_channels": "Listing channels ...",
    "list_consumers": "Listing consumers in vhost {vhost} ...",
    "purge_queue": "Purging queue '{queue}' in vhost '{vhost}' ...",
    "delete_queue": "Deleting queue '{queue}' on vhost '{vhost}' ...",
    "add_super_stream": "Adding a super stream '{name}' on vhost '{vhost}' ...",
    "delete_super_stream": "Deleting super stream '{name}' on vhost '{vhost}' ...",
    "close_connection": "Closing connection {connection}, reason: {explanation}...",
    "set_policy": 'Setting policy "{name}" for pattern "{pattern}" to "{definition}" with '
    'priority "{priority}" for vhost "{vhost}" ...',
    "clear_policy": 'Clearing policy "{name}" on vhost "{vhost}" ...',
    "list_policies": 'Listing policies for vhost "{vhost}" ...',
    "set_operator_policy": 'Setting operator policy override "{name}" for pattern "{pattern}" '
    'to "{definition}" with priority "{priority}" for vhost "{vhost}" ...',
    "clear_operator_policy": 'Clearing operator policy "{name}" on vhost "{vhost}" ...',
    "list_operator_policies": 'Listing operator policy overrides for vhost "{vhost}" ...',
    "list_delayed": "Listing pending messages of exchange '{exchange}' in vhost '{vhost}' ...",
    "cancel_delayed": "Cancelling pending messages of exchange '{exchange}' in vhost '{vhost}' ...",
    "reschedule_delayed": "Rescheduling pending messages of exchange '{exchange}' in vhost "
    "'{vhost}' ...",
    "browse_queue": "Browsing queue '{queue}' in vhost '{vhost}' ...",
    "move_messages": "Moving messages of queue '{queue}' in vhost '{vhost}' ...",
    "replay_dead_letters": "Replaying dead letters of queue '{queue}' in vhost '{vhost}' ...",
    "status": "Status of the broker ...",
    "cluster_status": "Cluster status of the broker ...",
    "forget_cluster_node": "Removing node {node} from the cluster ...",
    "await_startup": "Waiting for the broker to start ...",
    "reload_tls": "Reloading TLS certificates ...",
}
# rabbitmqctl's default columns of its list verbs.
_DEFAULT_COLUMNS = {
    "list_vhosts": ["name"],
    "list_queues": ["name", "messages"],
    "list_exchanges": ["name", "type"],
    "list_bindings": [
        "source_name",
        "source_kind",
        "destination_name",
        "destination_kind",
        "routing_key",
        "arguments",
    ],
    "list_connections": ["user", "peer_host", "peer_port", "state"],
    "list_channels": ["name", "user", "consumer_count", "messages_unacknowledged"],
    "list_consumers": [
        "queue_name",
        "channel_pid",
        "consumer_tag",
        "ack_required",
        "prefetch_count",
        "active",
        "arguments",
    ],
    "list_policies": ["vhost", "name", "pattern", "apply-to", "definition", "priority"],
    "list_operator_policies": ["vhost", "name", "pattern", "apply-to", "definition", "priority"],
    "list_delayed": ["id", "due_at", "due_in", "routing_key", "payload"],
    "browse_queue": ["position", "routing_key", "redelivered", "payload"],
}
_BANNERS.update(ctl_links.BANNERS)
_DEFAULT_COLUMNS.update(ctl_links.DEFAULT_COLUMNS)
_BANNERS.update(ctl_quorum.BANNERS)
_DEFAULT_COLUMNS.update(ctl_quorum.DEFAULT_COLUMNS)
_EMPTY_COLUMNS = {
    "list_users": ["user", "tags"],
    "list_permissions": ["user", "configure", "write", "read"],
    "list_user_permissions": ["vhost", "configure", "write", "read"],
    "list_topic_permissions": ["user", "exchange", "write", "read"],
    "list_user_topic_permissions": ["vhost", "exchange", "write", "read"],
    "list_vhost_limits": ["vhost", "limits"],
    "list_user_limits": ["user", "limits"],
}


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return str(args.password)
    if sys.stdin.isatty():
        return getpass.getpass("Password: ")
    return sys.stdin.readline().rstrip("\n")


def _request_args(verb: str, a: argparse.Namespace) -> dict[str, Any]:
    """The control request's arguments for the parsed command line."""
    if verb in ctl_links.VERBS:
        try:
            return ctl_links.request_args(verb, a)
        except ctl_links.LinkArgumentError as exc:
            raise CtlError(str(exc), 65) from None
    if verb in ctl_quorum.VERBS:
        return ctl_quorum.request_args(verb, a)
    if verb in ("add_user", "change_password", "authenticate_user"):
        return {"user": a.username, "password": _password(a)}
    if verb in ("delete_user", "clear_password", "list_user_permissions"):
        return {"user": a.username}
    if verb == "list_user_topic_permissions":
        return {"user": a.username}
    if verb == "set_user_tags":
        return {"user": a.username, "tags": list(a.tags)}
    if verb == "add_vhost":
        return {
            "vhost": a.vhost,
            "description": a.description,
            "tags": [t for t in a.tags.split(",") if t.strip()],
            "default_queue_type": a.default_queue_type,
        }
    if verb == "delete_vhost":
        return {"vhost": a.vhost}
    if verb == "set_permissions":
        return {
            "vhost": a.vhost,
            "user": a.username,
            "configure": a.conf,
            "write": a.write,
            "read": a.read,
        }
    if verb == "clear_permissions":
        return {"vhost": a.vhost, "user": a.username}
    if verb in ("list_permissions", "list_topic_permissions", "clear_vhost_limits"):
        return {"vhost": a.vhost}
    if verb == "set_topic_permissions":
        return {
            "vhost": a.vhost,
            "user": a.username,
            "exchange": a.exchange,
            "write": a.write,
            "read": a.read,
        }
    if verb == "clear_topic_permissions":
        return {"vhost": a.vhost, "user": a.username, "exchange": a.exchange}
    if verb == "set_vhost_limits":
        return {"vhost": a.vhost, "limits": a.definition}
    if verb == "list_vhost_limits":
        return {"vhost": a.vhost, "global": a.all}
    if verb == "set_user_limits":
        return {"user": a.username, "limits": a.definition}
    if verb == "clear_user_limits":
        return {"user": a.username, "limit": a.limit}
    if verb == "list_user_limits":
        return {} if a.all or a.user is None else {"user": a.user}
    if verb == "import_definitions":
        return {"definitions": _read_definitions(a.file)}
    if verb in ("list_queues", "list_exchanges", "list_bindings", "list_consumers"):
        return {"vhost": a.vhost}
    if verb == "purge_queue":
        return {"vhost": a.vhost, "queue": a.queue}
    if verb == "delete_queue":
        return {
            "vhost": a.vhost,
            "queue": a.queue,
            "if_empty": a.if_empty,
            "if_unused": a.if_unused,
        }
    if verb == "close_connection":
        return {"connection": a.connection, "reason": a.explanation}
    if verb in ("set_policy", "set_operator_policy"):
        try:
            definition = json.loads(a.definition)
        except ValueError as exc:
            raise CtlError(f"definition is not valid JSON: {exc}", 65) from None
        return {
            "vhost": a.vhost,
            "name": a.name,
            "pattern": a.pattern,
            "definition": definition,
            "priority": a.priority,
            "apply_to": a.apply_to,
        }
    if verb in ("clear_policy", "clear_operator_policy"):
        return {"vhost": a.vhost, "name": a.name}
    if verb in ("list_policies", "list_operator_policies"):
        return {"vhost": a.vhost}
    if verb in ("list_delayed", "cancel_delayed", "reschedule_delayed"):
        return _delayed_args(verb, a)
    if verb in ("browse_queue", "move_messages", "replay_dead_letters"):
        return _message_args(verb, a)
    if verb == "add_super_stream":
        return _super_stream_args(a)
    if verb == "delete_super_stream":
        return {"vhost": a.vhost, "name": a.name}
    if verb == "forget_cluster_node":
        return {"node": a.node}
    return {}


def _super_stream_args(a: argparse.Namespace) -> dict[str, Any]:
    args: dict[str, Any] = {"vhost": a.vhost, "name": a.name}
    if a.binding_keys is not None:
        args["binding_keys"] = [k.strip() for k in a.binding_keys.split(",") if k.strip()]
    elif a.partitions is not None:
        args["partitions"] = a.partitions
    args["arguments"] = {
        argument: getattr(a, option.replace("-", "_"))
        for option, argument in _SUPER_STREAM_ARGUMENTS.items()
        if getattr(a, option.replace("-", "_")) is not None
    }
    return args


def _delayed_args(verb: str, a: argparse.Namespace) -> dict[str, Any]:
    args: dict[str, Any] = {"vhost": a.vhost, "exchange": a.exchange}
    for name in ("ids", "message_id", "correlation_id", "routing_key"):
        if getattr(a, name) is not None:
            args[name] = getattr(a, name)
    if verb == "list_delayed":
        args.update(count=a.count, skip=a.skip, preview=a.preview)
    else:
        args["all"] = a.all
    if verb == "reschedule_delayed":
        args.update({"delay": a.delay} if a.delay is not None else {"due": a.due})
    return args


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise CtlError(f"{what} must be NAME=VALUE, got '{item}'", EX_USAGE)
        out[name] = value
    return out


def _message_args(verb: str, a: argparse.Namespace) -> dict[str, Any]:
    flt: dict[str, Any] = {}
    if a.header:
        flt["headers"] = _pairs(a.header, "--header")
    if a.property:
        flt["properties"] = _pairs(a.property, "--property")
    if a.match_key is not None:
        flt["routing_key"] = a.match_key
    if a.body_contains is not None:
        flt["body_contains"] = a.body_contains
    args: dict[str, Any] = {"vhost": a.vhost, "queue": a.queue, "filter": flt}
    if verb == "browse_queue":
        args.update(offset=a.offset, count=a.count, truncate=a.truncate)
        if a.scan is not None:
            args["scan"] = a.scan
    elif verb == "move_messages":
        if a.to_queue is not None:
            args["to_queue"] = a.to_queue
        else:
            args["to_exchange"] = a.to_exchange
        if a.routing_key is not None:
            args["routing_key"] = a.routing_key
        args.update(copy=a.copy, offset=a.offset)
        if a.end_offset is not None:
            args["end_offset"] = a.end_offset
    if verb != "browse_queue" and a.limit is not None:
        args["limit"] = a.limit
    return args


def _read_definitions(name: str) -> Any:
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise CtlError(f"cannot read {name}: {exc.strerror}", 66) from None
    except UnicodeDecodeError:
        raise CtlError(f"{name} is not UTF-8", 65) from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CtlError(f"{name} is not valid JSON: {exc}", 65) from None


def _show(verb: str, a: argparse.Namespace, result: Any) -> None:
    if verb == "export_definitions":
        text = json.dumps(result, indent=2, sort_keys=True) + "\n"
        if a.file == "-":
            sys.stdout.write(text)
        else:
            try:
                Path(a.file).write_text(text, encoding="utf-8")
            except OSError as exc:
                raise CtlError(f"cannot write {a.file}: {exc.strerror}", 73) from None
        return
    if a.formatter == "json":
        if result is not None:
            print(json.dumps(result, indent=1))
        return
    if isinstance(result, list):
        columns = list(a.columns) if getattr(a, "columns", None) else None
        if columns is None:
            columns = _DEFAULT_COLUMNS.get(verb)
        if not result and columns is None:
            columns = _EMPTY_COLUMNS.get(verb)
        _print_table(result, columns)
    elif isinstance(result, dict):
        if verb in ("list_vhost_limits", "list_user_limits"):
            print(json.dumps(result, separators=(",", ":")))
        else:
            for key, value in result.items():
                print(f"{key}: {_cell(value)}")
    elif result is not None:
        print(result)


def control_socket(data_dir: Path) -> Path:
    """The control socket of the broker using ``data_dir``: its own, or for ``leveret
    serve --workers`` the first worker's that takes a connection (a worker may be down
    or restarting)."""
    own = socket_path(data_dir)
    if own.exists():
        return own
    from leveret.cli.supervisor import worker_dirs

    workers = [socket_path(d) for d in worker_dirs(data_dir)]
    for path in workers:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(path))
            except OSError:
                continue
            return path
    return workers[0] if workers else own


def _await_startup(data_dir: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            request(control_socket(data_dir), "status", {}, min(5.0, timeout))
            return
        except CtlError as exc:
            if time.monotonic() >= deadline:
                raise CtlError(
                    f"the broker did not start within {timeout:g} s: {exc}", 75
                ) from None
        time.sleep(0.2)


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    args.formatter = args.formatter or "table"
    verb: str = args.verb
    try:
        settings = load(args.config, overrides={"data_dir": args.data_dir})
    except ConfigError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EX_USAGE
    data_dir = Path(settings.data_dir or default_data_dir())
    if not args.quiet and args.formatter == "table":
        values = {**vars(args), "tag_list": ", ".join(getattr(args, "tags", None) or [])}
        try:
            print(_BANNERS[verb].format(**values))
        except (KeyError, IndexError):
            pass  # a banner field this verb does not have: no banner
    try:
        if verb == "await_startup":
            _await_startup(data_dir, args.timeout or AWAIT_TIMEOUT)
            return 0
        path = control_socket(data_dir)
        result = request(path, verb, _request_args(verb, args), args.timeout or DEFAULT_TIMEOUT)
        _show(verb, args, result)
    except CtlError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    return 0
