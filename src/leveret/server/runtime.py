"""Runtime parameters of the running broker and the whole definitions document.

- Policies and operator policies live in the model (``VirtualHost.policies``, applied live
  by ``VirtualHost.apply_policies``); other parameters (``federation-upstream``,
  ``shovel``, ... kept as given, for definitions round trips) and global parameters live
  here. All of it is written to ``data_dir/runtime.json`` (``store/runtime.py``) before a
  change is answered and loaded at boot (``boot_runtime``).
- ``export_all`` / ``import_all``: RabbitMQ's definitions with everything: the auth part
  (``auth/definitions.py``), parameters, policies, and durable exchanges, queues and
  bindings, which are declared through the model's calls (so the store records them).

Used by ``server/admin.py`` (``leveret ctl``), ``management/`` and ``server/lifecycle.py``.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import logging
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leveret import __version__
from leveret.auth.definitions import VHOST_LIMITS_COMPONENT, export_definitions
from leveret.auth.users import AdminError, InvalidArgument
from leveret.errors import AMQPError
from leveret.model.policies import PolicyError, make_policy
from leveret.store import runtime as runtime_file

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from leveret.auth.users import UserStore
    from leveret.model.broker import Broker
    from leveret.model.queues.base import Queue
    from leveret.model.vhost import VirtualHost

log = logging.getLogger("leveret.admin")

OPERATOR_POLICY_COMPONENT = "operator_policy"
# What a RabbitMQ export says about its producer; Leveret's export says the same version so
# RabbitMQ 3.10 imports it (it checks nothing else).
RABBIT_VERSION = "3.10.8"


class NoSuchPolicy(AdminError):
    exit_code = 69

    def __init__(self, vhost: str, name: str) -> None:
        super().__init__(f"Parameter does not exist: policy '{name}' in vhost '{vhost}'")


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


@dataclass
class Runtime:
    """Parameters and policies of a broker, and their file."""

    broker: Broker
    path: Path | None = None
    # (vhost, component, name) -> value
    parameters: dict[tuple[str, str, str], Any] = field(default_factory=dict)
    global_parameters: dict[str, Any] = field(default_factory=dict)

    # -- policies -------------------------------------------------------------------------

    def _vhost(self, name: str) -> VirtualHost:
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise AdminError(f"Virtual host '{name}' does not exist")
        return vhost

    def set_policy(
        self,
        vhost: str,
        name: str,
        pattern: object,
        definition: object,
        priority: object = 0,
        apply_to: object = "all",
        *,
        operator: bool = False,
    ) -> None:
        target = self._vhost(vhost)
        try:
            policy = make_policy(
                vhost, name, pattern, definition, priority, apply_to, operator=operator
            )
        except PolicyError as exc:
            raise InvalidArgument(f"Validation failed\n\n{exc}\n") from None
        table = target.operator_policies if operator else target.policies
        table[name] = policy
        target.apply_policies()

    def clear_policy(self, vhost: str, name: str, *, operator: bool = False) -> None:
        target = self._vhost(vhost)
        table = target.operator_policies if operator else target.policies
        if name not in table:
            raise NoSuchPolicy(vhost, name)
        del table[name]
        target.apply_policies()

    def policies(self, vhost: str | None = None, *, operator: bool = False) -> list[dict[str, Any]]:
        out = []
        for vname, target in sorted(self.broker.vhosts.items()):
            if vhost is not None and vname != vhost:
                continue
            table = target.operator_policies if operator else target.policies
            out += [p.to_json() for _n, p in sorted(table.items())]
        return out

    # -- parameters ----------------------------------------------------------------------

    def set_parameter(self, vhost: str, component: str, name: str, value: object) -> None:
        self._vhost(vhost)
        if component == VHOST_LIMITS_COMPONENT:
            raise InvalidArgument("vhost limits are set through /api/vhost-limits")
        self.parameters[(vhost, component, name)] = value

    def clear_parameter(self, vhost: str, component: str, name: str) -> None:
        if self.parameters.pop((vhost, component, name), None) is None:
            raise AdminError(f"Parameter does not exist: {component} '{name}' in '{vhost}'")

    def parameter_rows(self) -> list[dict[str, Any]]:
        return [
            {"vhost": v, "component": c, "name": n, "value": value}
            for (v, c, n), value in sorted(self.parameters.items())
            if v in self.broker.vhosts
        ]

    def global_rows(self) -> list[dict[str, Any]]:
        rows = [{"name": n, "value": v} for n, v in sorted(self.global_parameters.items())]
        if "cluster_name" not in self.global_parameters:
            rows.insert(0, {"name": "cluster_name", "value": cluster_name(self)})
        return rows

    # -- persistence ---------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {
            "policies": self.policies(),
            "operator_policies": self.policies(operator=True),
            "parameters": self.parameter_rows(),
            "global_parameters": [
                {"name": n, "value": v} for n, v in sorted(self.global_parameters.items())
            ],
        }

    def load(self, doc: Mapping[str, Any]) -> None:
        """Apply a runtime document (boot) or the runtime part of definitions."""
        for entry in _entries(doc, "global_parameters"):
            if isinstance(entry.get("name"), str):
                self.global_parameters[entry["name"]] = entry.get("value")
        for entry in _entries(doc, "parameters"):
            component = entry.get("component")
            vhost, name = entry.get("vhost"), entry.get("name")
            if not (isinstance(vhost, str) and isinstance(name, str)):
                raise InvalidArgument("definitions: a parameter needs a vhost and a name")
            if component == VHOST_LIMITS_COMPONENT:
                continue  # the auth registry's (auth/definitions.py)
            if component == OPERATOR_POLICY_COMPONENT and isinstance(entry.get("value"), dict):
                value = entry["value"]
                self.broker.add_vhost(vhost)
                self.set_policy(
                    vhost,
                    name,
                    value.get("pattern"),
                    value.get("definition"),
                    value.get("priority", 0),
                    value.get("apply-to", "all"),
                    operator=True,
                )
                continue
            if isinstance(component, str):
                self.broker.add_vhost(vhost)
                self.parameters[(vhost, component, name)] = entry.get("value")
        for key, operator in (("policies", False), ("operator_policies", True)):
            for entry in _entries(doc, key):
                vhost, name = entry.get("vhost"), entry.get("name")
                if not (isinstance(vhost, str) and isinstance(name, str)):
                    raise InvalidArgument(f"definitions: {key}: a vhost and a name are needed")
                self.broker.add_vhost(vhost)
                self.set_policy(
                    vhost,
                    name,
                    entry.get("pattern"),
                    entry.get("definition"),
                    entry.get("priority", 0),
                    entry.get("apply-to", "all"),
                    operator=operator,
                )

    async def save(self) -> None:
        """Write the file (in a thread: the loop keeps serving meanwhile)."""
        if self.path is None:
            return
        try:
            await asyncio.to_thread(runtime_file.save, self.path, self.snapshot())
        except OSError as exc:
            raise AdminError(f"change made but not saved: {exc.strerror}") from None


def _entries(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        raise InvalidArgument(f"definitions: '{key}' must be a list of objects")
    return value


def cluster_name(runtime: Runtime) -> str:
    name = runtime.global_parameters.get("cluster_name")
    return name if isinstance(name, str) else f"leveret@{socket.gethostname()}"


def boot_runtime(runtime: Runtime, data_dir: Path) -> None:
    """Load ``runtime.json`` (policies apply to the recovered queues at once)."""
    path = data_dir / runtime_file.RUNTIME_FILE
    runtime.path = path
    doc = runtime_file.load(path)
    if doc is not None:
        runtime.load(doc)


# -- the whole definitions document ---------------------------------------------------------


def queue_definition(queue: Queue) -> dict[str, Any]:
    return {
        "name": queue.name,
        "vhost": queue.vhost_name,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "arguments": json_value(dict(queue.arguments)),
    }


def export_all(users: UserStore, runtime: Runtime, vhost: str | None = None) -> dict[str, Any]:
    """RabbitMQ's definitions of everything (one vhost's, RabbitMQ's shape for
    ``/api/definitions/{vhost}``, when ``vhost`` is given). Durable entities only, as
    RabbitMQ exports; exclusive queues never."""
    auth = export_definitions(users)
    broker = runtime.broker
    queues: list[dict[str, Any]] = []
    exchanges: list[dict[str, Any]] = []
    bindings: list[dict[str, Any]] = []
    for vname, target in sorted(broker.vhosts.items()):
        if vhost is not None and vname != vhost:
            continue
        queues += [
            queue_definition(queue)
            for queue in sorted(target.queues.values(), key=lambda q: q.name)
            if queue.durable and not queue.exclusive
        ]
        for name, exchange in sorted(target.exchanges.items()):
            if not name or name.startswith("amq.") or not exchange.durable:
                continue
            exchanges.append(
                {
                    "name": name,
                    "vhost": vname,
                    "type": exchange.type_name,
                    "durable": True,
                    "auto_delete": exchange.auto_delete,
                    "internal": exchange.internal,
                    "arguments": json_value(dict(exchange.arguments)),
                }
            )
        bindings += [
            {k: v for k, v in b.items() if k != "properties_key"}
            for b in binding_rows(target)
            if b["source"] and _durable_binding(target, b)
        ]
    policies = runtime.policies(vhost)
    if vhost is not None:
        return {
            "rabbit_version": RABBIT_VERSION,
            "rabbitmq_version": RABBIT_VERSION,
            "product_name": "Leveret",
            "product_version": __version__,
            "parameters": [p for p in runtime.parameter_rows() if p["vhost"] == vhost],
            "policies": [{k: v for k, v in p.items() if k != "vhost"} for p in policies],
            "queues": [{k: v for k, v in q.items() if k != "vhost"} for q in queues],
            "exchanges": [{k: v for k, v in e.items() if k != "vhost"} for e in exchanges],
            "bindings": [{k: v for k, v in b.items() if k != "vhost"} for b in bindings],
        }
    limit_parameters = auth.pop("parameters")
    return {
        "rabbit_version": RABBIT_VERSION,
        "rabbitmq_version": RABBIT_VERSION,
        "product_name": "Leveret",
        "product_version": __version__,
        **auth,
        "parameters": limit_parameters + runtime.parameter_rows(),
        "global_parameters": runtime.global_rows(),
        "policies": policies,
        "operator_policies": runtime.policies(operator=True),
        "queues": queues,
        "exchanges": exchanges,
        "bindings": bindings,
    }


def _durable_binding(vhost: VirtualHost, binding: Mapping[str, Any]) -> bool:
    source = vhost.exchanges.get(binding["source"])
    if source is None or not source.durable:
        return False
    if binding["destination_type"] == "queue":
        queue = vhost.queues.get(binding["destination"])
        return queue is not None and queue.durable and not queue.exclusive
    dest = vhost.exchanges.get(binding["destination"])
    return dest is not None and dest.durable


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
    from leveret.model.queues.base import Queue

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


@dataclass
class ImportCounts:
    queues: int = 0
    exchanges: int = 0
    bindings: int = 0


def import_entities(
    broker: Broker, doc: Mapping[str, Any], vhost: str | None = None
) -> ImportCounts:
    """Declare the exchanges, queues and bindings of ``doc`` (a vhost's own document when
    ``vhost`` is given: its entries name no vhost). An entity that exists already must be
    equivalent, as RabbitMQ requires (else ``AdminError`` with the 406 text)."""
    counts = ImportCounts()

    def target(entry: Mapping[str, Any]) -> VirtualHost:
        name = vhost if vhost is not None else entry.get("vhost")
        if not isinstance(name, str) or name not in broker.vhosts:
            raise InvalidArgument(f"definitions: vhost '{name}' does not exist")
        return broker.vhosts[name]

    try:
        for entry in _entries(doc, "exchanges"):
            target(entry).declare_exchange(
                str(entry["name"]),
                str(entry.get("type", "direct")),
                durable=bool(entry.get("durable", True)),
                auto_delete=bool(entry.get("auto_delete", False)),
                internal=bool(entry.get("internal", False)),
                arguments=dict(entry.get("arguments") or {}),
            )
            counts.exchanges += 1
        for entry in _entries(doc, "queues"):
            target(entry).declare_queue(
                str(entry["name"]),
                owner=None,
                durable=bool(entry.get("durable", True)),
                auto_delete=bool(entry.get("auto_delete", False)),
                arguments=dict(entry.get("arguments") or {}),
            )
            counts.queues += 1
        for entry in _entries(doc, "bindings"):
            where = target(entry)
            args = dict(entry.get("arguments") or {})
            key = str(entry.get("routing_key", ""))
            if entry.get("destination_type", "queue") == "queue":
                where.bind_queue(
                    str(entry["destination"]), str(entry["source"]), key, args, owner=None
                )
            else:
                where.bind_exchange(str(entry["destination"]), str(entry["source"]), key, args)
            counts.bindings += 1
    except KeyError as exc:
        raise InvalidArgument(f"definitions: an entry has no {exc}") from None
    except AMQPError as exc:
        raise InvalidArgument(exc.reply_text) from None
    return counts
