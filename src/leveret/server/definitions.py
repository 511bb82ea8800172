"""The whole definitions document, RabbitMQ's format for everything a broker holds: the
auth part (users, vhosts, permissions, limits: ``auth/definitions.py``), parameters and
policies (``parameters.py``), and durable exchanges, queues and bindings, exported from the
model and imported through the model's calls (so the store records them).

Used by ``server/ctl/`` (``leveret ctl export_definitions`` / ``import_definitions``),
``management/api_runtime.py`` (``/api/definitions``) and ``server/server.py``
(``load_definitions`` at boot).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leveret import __version__
from leveret.auth.definitions import export_definitions
from leveret.auth.users import InvalidArgument
from leveret.errors import AMQPError
from leveret.server.parameters import doc_entries, runtime_of
from leveret.server.rows import binding_rows, json_value

if TYPE_CHECKING:
    from collections.abc import Mapping

    from leveret.auth.users import UserStore
    from leveret.model.broker import Broker
    from leveret.model.queue import Queue
    from leveret.model.vhost import VirtualHost
    from leveret.server.ctl.admin import Admin
    from leveret.server.parameters import Runtime

# What a RabbitMQ export says about its producer; Leveret's export says the same version so
# RabbitMQ 3.10 imports it (it checks nothing else).
RABBIT_VERSION = "3.10.8"


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
        for entry in doc_entries(doc, "exchanges"):
            target(entry).declare_exchange(
                str(entry["name"]),
                str(entry.get("type", "direct")),
                durable=bool(entry.get("durable", True)),
                auto_delete=bool(entry.get("auto_delete", False)),
                internal=bool(entry.get("internal", False)),
                arguments=dict(entry.get("arguments") or {}),
            )
            counts.exchanges += 1
        for entry in doc_entries(doc, "queues"):
            target(entry).declare_queue(
                str(entry["name"]),
                owner=None,
                durable=bool(entry.get("durable", True)),
                auto_delete=bool(entry.get("auto_delete", False)),
                arguments=dict(entry.get("arguments") or {}),
            )
            counts.queues += 1
        for entry in doc_entries(doc, "bindings"):
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


async def import_document(host: Any, doc: object, vhost: str | None = None) -> dict[str, int]:
    """Import a definitions document (the caller holds ``host.admin.lock``): the auth part
    first (users, vhosts, permissions, limits: all or nothing), then parameters and
    policies, then exchanges, queues and bindings (an error there leaves what was
    declared before it)."""
    if not isinstance(doc, dict):
        raise InvalidArgument("definitions must be a JSON object")
    admin: Admin = host.admin
    runtime = runtime_of(admin.host)
    if vhost is None:
        keys = ("users", "vhosts", "permissions", "topic_permissions", "parameters")
        await admin.import_definitions({"definitions": {k: doc[k] for k in keys if k in doc}})
        await runtime.change(lambda r: r.load(doc))
    else:
        part = {
            "policies": [{**p, "vhost": vhost} for p in doc.get("policies") or []],
            "parameters": [{**p, "vhost": vhost} for p in doc.get("parameters") or []],
        }
        await runtime.change(lambda r: r.load(part))
    # A cluster node declares them through etcd (cluster/node.py), which every node applies.
    cluster = getattr(host, "cluster", None)
    if cluster is not None:
        counts = await cluster.import_entities(doc, vhost)
    else:
        counts = import_entities(runtime.broker, doc, vhost)
    return {"queues": counts.queues, "exchanges": counts.exchanges, "bindings": counts.bindings}
