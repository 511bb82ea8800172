"""The ``/api`` endpoints, RabbitMQ 3.10's paths, fields, status codes and error bodies.

Reads go straight to the model (synchronous, on the loop); changes go through the same
calls as ``leveret ctl`` (``server/admin.py``'s verbs for users, vhosts, permissions and
limits, written to ``auth.json``; ``server/runtime.py`` for policies and parameters,
written to ``runtime.json``) or the model's declare/delete calls (journalled by the store).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from leveret import __version__
from leveret.management import query, shapes
from leveret.management.app import HttpError, bad_request, not_found
from leveret.management.shapes import Rates
from leveret.management.stats import CHANNEL_COUNTERS, message_stats
from leveret.model.stream import StreamQueue
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.admin_entities import import_document
from leveret.server.amqp091.message import wire_message
from leveret.server.runtime import (
    binding_rows,
    cluster_name,
    export_all,
    json_value,
)

if TYPE_CHECKING:
    from leveret.management.app import ManagementServer
    from leveret.management.authz import Principal
    from leveret.model.message import Message
    from leveret.model.queue import Queue
    from leveret.model.vhost import VirtualHost
    from leveret.server.connection import ConnectionProtocol


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d))


def _no_content() -> web.Response:
    return web.Response(status=204)


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    raw = await request.read()
    if not raw.strip():
        return {}
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise bad_request("body must be a JSON object")
    return data


def _rates(request: web.Request) -> Rates:
    q = request.query
    values: list[int | None] = []
    for name in ("msg_rates_age", "msg_rates_incr", "lengths_age", "lengths_incr"):
        try:
            values.append(int(q[name]) if name in q else None)
        except ValueError:
            raise bad_request(f"{name} must be an integer") from None
    age, incr, lengths_age, lengths_incr = values
    return Rates(
        age,
        incr if incr is not None or age is None else 5,
        lengths_age,
        lengths_incr if lengths_incr is not None or lengths_age is None else 5,
    )


def _bool(value: object, default: bool = False) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    return str(value).lower() == "true"


class Api:
    """The endpoints, bound to one ``ManagementServer``."""

    def __init__(self, server: ManagementServer) -> None:
        self.server = server
        self.host = server.host
        self.admin_host = server.host.admin_host
        self.broker = self.admin_host.broker
        self.users = self.admin_host.users
        self.runtime = server.host.runtime
        self.sampler = server.sampler

    # -- helpers ---------------------------------------------------------------------------

    def who(self, request: web.Request) -> Principal:
        principal: Principal = self.server.principal(request)
        return principal

    def vhost(self, name: str) -> VirtualHost:
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise not_found()
        return vhost

    def listing(self, request: web.Request, items: list[dict[str, Any]]) -> web.Response:
        return _json(query.apply(items, request.query))

    def visible_vhosts(self, who: Principal, only: str | None = None) -> list[VirtualHost]:
        out = []
        for name, vhost in sorted(self.broker.vhosts.items()):
            if only is not None and name != only:
                continue
            if who.sees_vhost(name):
                out.append(vhost)
        if only is not None and not out:
            if only not in self.broker.vhosts:
                raise not_found()
            who.require_vhost(only)
        return out

    def connections(self, who: Principal) -> list[ConnectionProtocol]:
        out = []
        for conn in list(self.admin_host.connections):
            front = conn.amqp
            client = getattr(front, "client", None) if front is not None else None
            if client is None:
                continue
            if who.is_monitor or client.user == who.name:
                out.append(conn)
        return sorted(out, key=lambda c: c.connected_at)

    # -- overview, nodes, misc ---------------------------------------------------------------

    async def overview(self, request: web.Request) -> web.Response:
        who = self.who(request)
        rates = _rates(request)
        vhosts = self.visible_vhosts(who)
        sampler = self.sampler
        queues = [q for v in vhosts for q in v.queues.values()]
        ready = sum(q.message_count for q in queues)
        unacked = sum(q.unacked_count for q in queues)
        conns = self.connections(who)
        channels = sum(len(c.amqp.client.sessions) for c in conns if c.amqp and c.amqp.client)
        totals = sampler.queue_totals.samples
        from leveret.management.stats import details

        queue_totals = {
            "messages": ready + unacked,
            "messages_ready": ready,
            "messages_unacknowledged": unacked,
            "messages_details": details(totals, 2, rates.lengths_age, rates.lengths_incr),
            "messages_ready_details": details(totals, 0, rates.lengths_age, rates.lengths_incr),
            "messages_unacknowledged_details": details(
                totals, 1, rates.lengths_age, rates.lengths_incr
            ),
        }
        running = [0] * len(CHANNEL_COUNTERS)
        for name, values in sampler.vhost_totals.items():
            if who.sees_vhost(name):
                for i, value in enumerate(values):
                    running[i] += value
        settings = self.admin_host.settings
        listeners = [
            {
                "node": shapes.node_name(),
                "protocol": url.split("://")[0],
                "ip_address": url.split("://")[1].rsplit(":", 1)[0].strip("[]"),
                "port": int(url.rsplit(":", 1)[1]),
            }
            for url in self.admin_host.listening
        ]
        return _json(
            {
                "management_version": __version__,
                "rates_mode": "basic",
                "sample_retention_policies": {
                    "global": [600, 3600, 28800, 86400],
                    "basic": [600, 3600],
                    "detailed": [600],
                },
                "exchange_types": [{**t, "enabled": True} for t in shapes.EXCHANGE_TYPES],
                "product_version": __version__,
                "product_name": "Leveret",
                "rabbitmq_version": "3.10.8",
                "cluster_name": cluster_name(self.runtime),
                "node": shapes.node_name(),
                "disable_stats": False,
                "enable_queue_totals": True,
                "statistics_db_event_queue": 0,
                "message_stats": message_stats(
                    CHANNEL_COUNTERS,
                    tuple(running),
                    sampler.overview.samples,
                    rates.age,
                    rates.incr,
                ),
                "queue_totals": queue_totals,
                "object_totals": {
                    "connections": len(conns),
                    "channels": channels,
                    "exchanges": sum(len(v.exchanges) for v in vhosts),
                    "queues": len(queues),
                    "consumers": sum(len(q.consumers) for q in queues),
                },
                "listeners": listeners,
                "contexts": [
                    {
                        "node": shapes.node_name(),
                        "description": "RabbitMQ Management",
                        "path": "/",
                        "port": str(settings.management_port),
                    }
                ],
            }
        )

    def _node(self) -> dict[str, Any]:
        host = self.host
        alarm = host.alarm
        node = shapes.node_json(self.admin_host, self.admin_host.started_at, 0, 0)
        node["mem_used"] = self.broker.gauge.bytes
        node["mem_limit"] = alarm.high
        node["mem_alarm"] = alarm.active
        return node

    async def nodes(self, request: web.Request) -> web.Response:
        self.who(request).require_monitor()
        return _json([self._node()])

    async def node(self, request: web.Request) -> web.Response:
        self.who(request).require_monitor()
        if request.match_info["node"] != shapes.node_name():
            raise not_found()
        return _json(self._node())

    async def extensions(self, request: web.Request) -> web.Response:
        self.who(request)
        return _json([])

    async def auth(self, request: web.Request) -> web.Response:
        return _json({"oauth_enabled": False})

    async def whoami(self, request: web.Request) -> web.Response:
        who = self.who(request)
        return _json({"name": who.name, "tags": list(who.tags)})

    async def get_cluster_name(self, request: web.Request) -> web.Response:
        self.who(request)
        return _json({"name": cluster_name(self.runtime)})

    async def put_cluster_name(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        body = await _body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise bad_request("name must be a non-empty string")
        self.runtime.global_parameters["cluster_name"] = name
        await self.runtime.save()
        return _no_content()

    async def aliveness(self, request: web.Request) -> web.Response:
        who = self.who(request)
        name = request.match_info["vhost"]
        who.require_vhost(name)
        vhost = self.vhost(name)
        # RabbitMQ declares aliveness-test, publishes to it and gets the message back.
        queue = vhost.declare_queue("aliveness-test", owner=None)
        body = b"test_message"
        raw = BasicProperties().encode()
        message = wire_message("", "aliveness-test", raw, body)
        queue.purge()
        queue.enqueue(message)
        entry = queue.get(auto_settle=True)
        if entry is None or entry.message.body != body:
            return _json({"status": "failed", "reason": "message not returned"}, 503)
        return _json({"status": "ok"})

    async def health_ok(self, request: web.Request) -> web.Response:
        self.who(request)
        return _json({"status": "ok"})

    async def health_alarms(self, request: web.Request) -> web.Response:
        self.who(request)
        if self.host.alarm.active:
            return _json(
                {
                    "status": "failed",
                    "reason": "resource alarm(s) in effect in the cluster",
                    "alarms": [{"node": shapes.node_name(), "resource": "memory"}],
                },
                503,
            )
        return _json({"status": "ok"})

    async def health_port(self, request: web.Request) -> web.Response:
        self.who(request)
        port = request.match_info["port"]
        ports = {url.rsplit(":", 1)[1] for url in self.admin_host.listening}
        ports.update(u.rsplit(":", 1)[1] for u in self.server.urls)
        if port not in ports:
            return _json({"status": "failed", "reason": f"No active listener on port {port}"}, 503)
        return _json({"status": "ok", "port": int(port)})

    async def health_protocol(self, request: web.Request) -> web.Response:
        self.who(request)
        protocol = request.match_info["protocol"].lower()
        known = {url.split("://")[0] for url in self.admin_host.listening}
        known.update({"http"} if self.server.urls else set())
        if protocol in ("amqp091", "amqp0-9-1", "amqp"):
            protocol = "amqp"
        if protocol not in known:
            return _json(
                {"status": "failed", "reason": f"No active listener for protocol {protocol}"},
                503,
            )
        return _json({"status": "ok", "protocol": protocol})

    # -- connections and channels -------------------------------------------------------------

    def _find_connection(self, who: Principal, name: str) -> ConnectionProtocol:
        for conn in self.connections(who):
            if shapes.connection_name(conn) == name:
                return conn
        raise not_found()

    async def list_connections(self, request: web.Request) -> web.Response:
        who = self.who(request)
        only = request.match_info.get("vhost")
        rates = _rates(request)
        rows = [
            shapes.connection_json(c, self.sampler, rates)
            for c in self.connections(who)
            if only is None or (c.amqp and c.amqp.client and c.amqp.client.vhost.name == only)
        ]
        if only is not None:
            self.visible_vhosts(who, only)
        return self.listing(request, rows)

    async def get_connection(self, request: web.Request) -> web.Response:
        who = self.who(request)
        conn = self._find_connection(who, request.match_info["name"])
        return _json(shapes.connection_json(conn, self.sampler, _rates(request)))

    async def delete_connection(self, request: web.Request) -> web.Response:
        who = self.who(request)
        conn = self._find_connection(who, request.match_info["name"])
        client = conn.amqp.client if conn.amqp is not None else None
        if not who.is_admin and client is not None and client.user != who.name:
            who.require_admin()
        reason = request.headers.get("X-Reason", "Closed via management plugin")
        conn.shutdown(reason)
        return _no_content()

    def _channels(self, who: Principal, conns: list[ConnectionProtocol] | None = None) -> list[Any]:
        out = []
        for conn in conns if conns is not None else self.connections(who):
            client = conn.amqp.client if conn.amqp is not None else None
            if client is None:
                continue
            for number, session in sorted(client.sessions.items()):
                out.append((conn, number, session))
        return out

    async def list_channels(self, request: web.Request) -> web.Response:
        who = self.who(request)
        rates = _rates(request)
        only = request.match_info.get("vhost")
        if only is not None:
            self.visible_vhosts(who, only)
        conns = None
        if "name" in request.match_info:
            conns = [self._find_connection(who, request.match_info["name"])]
        rows = [
            shapes.channel_json(conn, number, session, self.sampler, rates)
            for conn, number, session in self._channels(who, conns)
            if only is None or conn.amqp.client.vhost.name == only
        ]
        return self.listing(request, rows)

    async def get_channel(self, request: web.Request) -> web.Response:
        who = self.who(request)
        name = request.match_info["channel"]
        for conn, number, session in self._channels(who):
            if f"{shapes.connection_name(conn)} ({number})" == name:
                row = shapes.channel_json(conn, number, session, self.sampler, _rates(request))
                row["consumer_details"] = [
                    shapes.consumer_json(c, shapes.channel_details(conn, number))
                    for c in getattr(session, "consumers", {}).values()
                ]
                return _json(row)
        raise not_found()

    async def list_consumers(self, request: web.Request) -> web.Response:
        who = self.who(request)
        only = request.match_info.get("vhost")
        if only is not None:
            self.visible_vhosts(who, only)
        rows = [
            shapes.consumer_json(consumer, shapes.channel_details(conn, number))
            for conn, number, session in self._channels(who)
            if only is None or conn.amqp.client.vhost.name == only
            for consumer in getattr(session, "consumers", {}).values()
        ]
        return self.listing(request, rows)

    # -- exchanges ----------------------------------------------------------------------------

    async def list_exchanges(self, request: web.Request) -> web.Response:
        who = self.who(request)
        rates = _rates(request)
        rows = [
            shapes.exchange_json(x, v.name, self.sampler, rates)
            for v in self.visible_vhosts(who, request.match_info.get("vhost"))
            for _n, x in sorted(v.exchanges.items())
        ]
        return self.listing(request, rows)

    def _exchange_of(self, request: web.Request) -> tuple[VirtualHost, Any]:
        who = self.who(request)
        vname = request.match_info["vhost"]
        who.require_vhost(vname) if not who.is_monitor else None
        vhost = self.vhost(vname)
        name = request.match_info["name"]
        if name == "amq.default":
            name = ""
        exchange = vhost.exchanges.get(name)
        if exchange is None:
            raise not_found()
        return vhost, exchange

    async def get_exchange(self, request: web.Request) -> web.Response:
        vhost, exchange = self._exchange_of(request)
        row = shapes.exchange_json(exchange, vhost.name, self.sampler, _rates(request))
        row["incoming"] = []
        row["outgoing"] = []
        return _json(row)

    async def put_exchange(self, request: web.Request) -> web.Response:
        who = self.who(request)
        vname, name = request.match_info["vhost"], request.match_info["name"]
        who.require_vhost(vname)
        vhost = self.vhost(vname)
        body = await _body(request)
        kind = body.get("type")
        if not isinstance(kind, str):
            raise bad_request("type must be given")
        existed = name in vhost.exchanges
        try:
            vhost.declare_exchange(
                name,
                kind,
                durable=_bool(body.get("durable"), True),
                auto_delete=_bool(body.get("auto_delete")),
                internal=_bool(body.get("internal")),
                arguments=dict(body.get("arguments") or {}),
            )
        except KeyError as exc:
            raise bad_request(f"invalid exchange type {exc}") from None
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        return _no_content() if existed else web.Response(status=201)

    async def delete_exchange(self, request: web.Request) -> web.Response:
        vhost, exchange = self._exchange_of(request)
        self.who(request).require_vhost(vhost.name)
        vhost.delete_exchange(exchange.name, if_unused=_bool(request.query.get("if-unused")))
        return _no_content()

    async def exchange_bindings(self, request: web.Request) -> web.Response:
        vhost, exchange = self._exchange_of(request)
        side = request.match_info["side"]
        key = "source" if side == "source" else "destination"
        rows = [
            b
            for b in binding_rows(vhost)
            if b[key] == exchange.name and (key == "source" or b["destination_type"] == "exchange")
        ]
        return self.listing(request, rows)

    async def publish(self, request: web.Request) -> web.Response:
        vhost, exchange = self._exchange_of(request)
        self.who(request).require_vhost(vhost.name)
        body = await _body(request)
        payload = body.get("payload", "")
        encoding = body.get("payload_encoding", "string")
        if not isinstance(payload, str):
            raise bad_request("payload must be a string")
        if encoding == "base64":
            try:
                data = base64.b64decode(payload, validate=True)
            except binascii.Error:
                raise bad_request("payload is not valid base64") from None
        elif encoding == "string":
            data = payload.encode()
        else:
            raise bad_request(f"payload_encoding must be string or base64, got {encoding!r}")
        routing_key = str(body.get("routing_key", ""))
        message = wire_message(
            exchange.name, routing_key, _encode_properties(body.get("properties") or {}), data
        )
        exchange.n_publish_in += 1
        queues, message = vhost.router.route_publish(exchange, routing_key, message)
        exchange.n_publish_out += len(queues)
        for queue in queues:
            queue.enqueue(message)
        return _json({"routed": bool(queues)})

    # -- queues -------------------------------------------------------------------------------

    async def list_queues(self, request: web.Request) -> web.Response:
        who = self.who(request)
        rates = _rates(request)
        stubs = [
            {"name": name, "vhost": v.name, "queue": q}
            for v in self.visible_vhosts(who, request.match_info.get("vhost"))
            for name, q in sorted(v.queues.items())
        ]

        def render(stub: dict[str, Any]) -> dict[str, Any]:
            return shapes.queue_json(stub["queue"], self.sampler, rates)

        return _json(query.apply(stubs, request.query, render))

    def _queue_of(self, request: web.Request, *, change: bool = False) -> tuple[VirtualHost, Queue]:
        who = self.who(request)
        vname = request.match_info["vhost"]
        if change or not who.is_monitor:
            who.require_vhost(vname)
        vhost = self.vhost(vname)
        queue = vhost.queues.get(request.match_info["name"])
        if queue is None:
            raise not_found()
        return vhost, queue

    async def get_queue(self, request: web.Request) -> web.Response:
        _vhost, queue = self._queue_of(request)
        row = shapes.queue_json(queue, self.sampler, _rates(request), detail=True)
        owners = {
            id(consumer): shapes.channel_details(conn, number)
            for conn, number, session in self._channels(self.who(request))
            for consumer in getattr(session, "consumers", {}).values()
        }
        row["consumer_details"] = [
            shapes.consumer_json(c, owners.get(id(c))) for c in queue.consumers
        ]
        return _json(row)

    async def put_queue(self, request: web.Request) -> web.Response:
        who = self.who(request)
        vname, name = request.match_info["vhost"], request.match_info["name"]
        who.require_vhost(vname)
        vhost = self.vhost(vname)
        body = await _body(request)
        arguments = body.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise bad_request("arguments must be an object")
        existed = name in vhost.queues
        queue_type = body.get("type")
        if isinstance(queue_type, str) and "x-queue-type" not in arguments:
            arguments = {**arguments, "x-queue-type": queue_type}
        vhost.declare_queue(
            name,
            owner=None,
            durable=_bool(body.get("durable"), True),
            auto_delete=_bool(body.get("auto_delete")),
            arguments=arguments,
        )
        return _no_content() if existed else web.Response(status=201)

    async def delete_queue(self, request: web.Request) -> web.Response:
        vhost, queue = self._queue_of(request, change=True)
        vhost.delete_queue(
            queue.name,
            owner=queue.exclusive_owner,
            if_unused=_bool(request.query.get("if-unused")),
            if_empty=_bool(request.query.get("if-empty")),
        )
        return _no_content()

    async def purge_queue(self, request: web.Request) -> web.Response:
        _vhost, queue = self._queue_of(request, change=True)
        if isinstance(queue, StreamQueue):
            raise bad_request("purge is not supported by stream queues")
        queue.purge()
        return _no_content()

    async def queue_actions(self, request: web.Request) -> web.Response:
        self._queue_of(request, change=True)
        body = await _body(request)
        if body.get("action") not in ("sync", "cancel_sync"):
            raise bad_request("action must be sync or cancel_sync")
        return _no_content()  # one node: nothing to synchronise

    async def queue_bindings(self, request: web.Request) -> web.Response:
        vhost, queue = self._queue_of(request)
        rows = [
            b
            for b in binding_rows(vhost)
            if b["destination"] == queue.name and b["destination_type"] == "queue"
        ]
        return self.listing(request, rows)

    async def get_messages(self, request: web.Request) -> web.Response:
        _vhost, queue = self._queue_of(request, change=True)
        if isinstance(queue, StreamQueue):
            raise bad_request("basic.get is not supported by stream queues")
        body = await _body(request)
        try:
            count = int(body.get("count", 1))
        except (TypeError, ValueError):
            raise bad_request("count must be an integer") from None
        ackmode = body.get("ackmode", body.get("requeue") and "ack_requeue_true")
        if isinstance(body.get("requeue"), bool) and "ackmode" not in body:
            ackmode = "ack_requeue_true" if body["requeue"] else "ack_requeue_false"
        if ackmode not in (
            "ack_requeue_true",
            "ack_requeue_false",
            "reject_requeue_true",
            "reject_requeue_false",
        ):
            raise bad_request("ackmode must be ack_requeue_true, ack_requeue_false, ...")
        encoding = body.get("encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise bad_request("encoding must be auto or base64")
        truncate = body.get("truncate")
        entries = []
        for _ in range(max(0, count)):
            entry = queue.get(auto_settle=False)
            if entry is None:
                break
            entries.append(entry)
        rows = []
        for i, entry in enumerate(entries):
            rows.append(
                _message_json(
                    entry.message,
                    entry.redelivered,
                    queue.message_count + len(entries) - i - 1,
                    encoding,
                    truncate,
                )
            )
        if ackmode.endswith("requeue_true"):
            queue.requeue(entries)
        elif ackmode == "ack_requeue_false":
            for entry in entries:
                queue.settle(entry)
        else:
            for entry in entries:
                queue.discard(entry)
        return _json(rows)

    # -- bindings -----------------------------------------------------------------------------

    async def list_bindings(self, request: web.Request) -> web.Response:
        who = self.who(request)
        rows = [
            b
            for v in self.visible_vhosts(who, request.match_info.get("vhost"))
            for b in binding_rows(v)
        ]
        return self.listing(request, rows)

    def _binding_args(self, request: web.Request) -> tuple[VirtualHost, str, str, str]:
        who = self.who(request)
        vname = request.match_info["vhost"]
        who.require_vhost(vname)
        vhost = self.vhost(vname)
        source, dest = request.match_info["source"], request.match_info["dest"]
        kind = "queue" if request.match_info["kind"] == "q" else "exchange"
        if source not in vhost.exchanges:
            raise not_found()
        if kind == "queue" and dest not in vhost.queues:
            raise not_found()
        if kind == "exchange" and dest not in vhost.exchanges:
            raise not_found()
        return vhost, source, dest, kind

    def _between(
        self, vhost: VirtualHost, source: str, dest: str, kind: str
    ) -> list[dict[str, Any]]:
        return [
            b
            for b in binding_rows(vhost)
            if b["source"] == source and b["destination"] == dest and b["destination_type"] == kind
        ]

    async def bindings_between(self, request: web.Request) -> web.Response:
        vhost, source, dest, kind = self._binding_args(request)
        return self.listing(request, self._between(vhost, source, dest, kind))

    async def add_binding(self, request: web.Request) -> web.Response:
        vhost, source, dest, kind = self._binding_args(request)
        body = await _body(request)
        key = str(body.get("routing_key", ""))
        arguments = dict(body.get("arguments") or {})
        if kind == "queue":
            queue = vhost.queues[dest]
            vhost.bind_queue(dest, source, key, arguments, owner=queue.exclusive_owner)
        else:
            vhost.bind_exchange(dest, source, key, arguments)
        from leveret.server.runtime import properties_key

        # Relative, as RabbitMQ sends it.
        location = f"{dest}/{properties_key(key, json_value(arguments))}"
        return web.Response(status=201, headers={"Location": location})

    def _binding(self, request: web.Request) -> tuple[VirtualHost, dict[str, Any]]:
        vhost, source, dest, kind = self._binding_args(request)
        props = request.match_info["props"]
        for row in self._between(vhost, source, dest, kind):
            if row["properties_key"] == props:
                return vhost, row
        raise not_found()

    async def get_binding(self, request: web.Request) -> web.Response:
        _vhost, row = self._binding(request)
        return _json(row)

    async def delete_binding(self, request: web.Request) -> web.Response:
        vhost, row = self._binding(request)
        source, dest = row["source"], row["destination"]
        arguments = _raw_binding_args(vhost, row)
        if row["destination_type"] == "queue":
            queue = vhost.queues[dest]
            vhost.unbind_queue(
                dest, source, row["routing_key"], arguments, owner=queue.exclusive_owner
            )
        else:
            vhost.unbind_exchange(dest, source, row["routing_key"], arguments)
        return _no_content()

    # -- vhosts, users, permissions, limits (the admin verbs) ---------------------------------

    async def _verb(self, verb: str, args: dict[str, Any]) -> Any:
        reply = await self.host.admin.handle(verb, args)
        if not reply.ok:
            if reply.exit_code in (67, 69) and "does not exist" in reply.error:
                raise not_found()
            raise HttpError(400, "bad_request", reply.error)
        return reply.result

    def _vhost_row(self, name: str, rates: Rates) -> dict[str, Any]:
        info = self.users.vhosts[name]
        vhost = self.broker.vhosts.get(name)
        queues = list(vhost.queues.values()) if vhost is not None else []
        ready = sum(q.message_count for q in queues)
        unacked = sum(q.unacked_count for q in queues)
        series = self.sampler.vhost_series.get(name)
        samples = series.samples if series is not None else None
        running = self.sampler.vhost_totals.get(name)
        octets = self.sampler.vhost_octets.get(name, [0, 0])
        from leveret.management.stats import details

        n = len(CHANNEL_COUNTERS)
        return {
            "name": name,
            "description": info.description,
            "tags": list(info.tags),
            "default_queue_type": info.default_queue_type or "undefined",
            "metadata": {"description": info.description, "tags": list(info.tags)},
            "tracing": False,
            "cluster_state": {shapes.node_name(): "running"},
            "messages": ready + unacked,
            "messages_ready": ready,
            "messages_unacknowledged": unacked,
            "recv_oct": octets[0],
            "send_oct": octets[1],
            "recv_oct_details": details(samples, n, rates.age, rates.incr),
            "send_oct_details": details(samples, n + 1, rates.age, rates.incr),
            "messages_ready_details": details(
                samples, n + 2, rates.lengths_age, rates.lengths_incr
            ),
            "messages_unacknowledged_details": details(
                samples, n + 3, rates.lengths_age, rates.lengths_incr
            ),
            "messages_details": details(samples, n + 4, rates.lengths_age, rates.lengths_incr),
            "message_stats": message_stats(
                CHANNEL_COUNTERS,
                tuple(running) if running is not None else (0,) * n,
                samples,
                rates.age,
                rates.incr,
            ),
        }

    async def list_vhosts(self, request: web.Request) -> web.Response:
        who = self.who(request)
        rates = _rates(request)
        rows = [self._vhost_row(n, rates) for n in sorted(self.users.vhosts) if who.sees_vhost(n)]
        return self.listing(request, rows)

    async def get_vhost(self, request: web.Request) -> web.Response:
        who = self.who(request)
        name = request.match_info["vhost"]
        if name not in self.users.vhosts:
            raise not_found()
        if not who.sees_vhost(name):
            who.require_vhost(name)
        return _json(self._vhost_row(name, _rates(request)))

    async def put_vhost(self, request: web.Request) -> web.Response:
        who = self.who(request)
        who.require_admin()
        name = request.match_info["vhost"]
        body = await _body(request)
        existed = name in self.users.vhosts
        tags = body.get("tags", [])
        if isinstance(tags, str):
            tags = [t for t in tags.split(",") if t.strip()]
        await self._verb(
            "add_vhost",
            {
                "vhost": name,
                "description": str(body.get("description", "")),
                "tags": tags,
                "default_queue_type": body.get("default_queue_type"),
            },
        )
        if not existed:
            # RabbitMQ gives the user who created a vhost full permissions in it.
            await self._verb(
                "set_permissions",
                {"user": who.name, "vhost": name, "configure": ".*", "write": ".*", "read": ".*"},
            )
        return _no_content() if existed else web.Response(status=201)

    async def delete_vhost(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        name = request.match_info["vhost"]
        if name not in self.users.vhosts:
            raise not_found()
        await self._verb("delete_vhost", {"vhost": name})
        await self.runtime.save()
        return _no_content()

    def _user_row(self, name: str) -> dict[str, Any]:
        from leveret.auth import passwords

        user = self.users.users[name]
        return {
            "name": user.name,
            "password_hash": passwords.encode_hash(user.password_hash),
            "hashing_algorithm": user.hashing_algorithm,
            "tags": list(user.tags),
            "limits": dict(user.limits),
        }

    async def list_users(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        return self.listing(request, [self._user_row(n) for n in sorted(self.users.users)])

    async def users_without_permissions(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        rows = [
            self._user_row(n)
            for n in sorted(self.users.users)
            if not any(u == n for (u, _v) in self.users.permissions)
        ]
        return self.listing(request, rows)

    async def get_user(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        name = request.match_info["user"]
        if name not in self.users.users:
            raise not_found()
        return _json(self._user_row(name))

    async def put_user(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        name = request.match_info["user"]
        body = await _body(request)
        existed = name in self.users.users
        tags = body.get("tags", [])
        if isinstance(tags, str):
            tags = [t for t in tags.split(",") if t.strip()]
        if not isinstance(tags, list):
            raise bad_request("tags must be a list or a comma-separated string")
        entry: dict[str, Any] = {"name": name, "tags": tags}
        if "password_hash" in body:
            entry["password_hash"] = body["password_hash"]
            entry["hashing_algorithm"] = body.get(
                "hashing_algorithm", "rabbit_password_hashing_sha256"
            )
        elif "password" in body:
            entry["password"] = body["password"]
        elif existed:
            user = self.users.users[name]
            from leveret.auth import passwords

            entry["password_hash"] = passwords.encode_hash(user.password_hash)
            entry["hashing_algorithm"] = user.hashing_algorithm
        else:
            raise bad_request("password or password_hash must be set")
        if existed:
            entry["limits"] = dict(self.users.users[name].limits)
        await self._verb("import_definitions", {"definitions": {"users": [entry]}})
        return _no_content() if existed else web.Response(status=201)

    async def delete_user(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        name = request.match_info["user"]
        if name not in self.users.users:
            raise not_found()
        await self._verb("delete_user", {"user": name})
        return _no_content()

    async def bulk_delete_users(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        body = await _body(request)
        for name in body.get("users") or []:
            if name in self.users.users:
                await self._verb("delete_user", {"user": name})
        return _no_content()

    def _permission_rows(self, user: str | None = None, vhost: str | None = None) -> list[Any]:
        return [
            {"user": u, "vhost": v, "configure": p.configure, "write": p.write, "read": p.read}
            for (u, v), p in sorted(self.users.permissions.items())
            if (user is None or u == user) and (vhost is None or v == vhost)
        ]

    def _topic_rows(self, user: str | None = None, vhost: str | None = None) -> list[Any]:
        return [
            {"user": u, "vhost": v, "exchange": x, "write": t.write, "read": t.read}
            for (u, v), by_exchange in sorted(self.users.topic_permissions.items())
            for x, t in sorted(by_exchange.items())
            if (user is None or u == user) and (vhost is None or v == vhost)
        ]

    async def list_permissions(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        topic = request.path.rstrip("/").endswith("topic-permissions")
        user = request.match_info.get("user")
        vhost = request.match_info.get("vhost")
        if user is not None and user not in self.users.users:
            raise not_found()
        if vhost is not None and vhost not in self.users.vhosts:
            raise not_found()
        rows = self._topic_rows(user, vhost) if topic else self._permission_rows(user, vhost)
        return self.listing(request, rows)

    async def get_permission(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        user, vhost = request.match_info["user"], request.match_info["vhost"]
        topic = "/topic-permissions/" in request.path
        rows = self._topic_rows(user, vhost) if topic else self._permission_rows(user, vhost)
        if not rows:
            raise not_found()
        return _json(rows if topic else rows[0])

    async def put_permission(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        user, vhost = request.match_info["user"], request.match_info["vhost"]
        if user not in self.users.users or vhost not in self.users.vhosts:
            raise bad_request("user or vhost does not exist")
        body = await _body(request)
        if "/topic-permissions/" in request.path:
            existed = bool(self._topic_rows(user, vhost))
            await self._verb(
                "set_topic_permissions",
                {
                    "user": user,
                    "vhost": vhost,
                    "exchange": str(body.get("exchange", "amq.topic")),
                    "write": str(body.get("write", "")),
                    "read": str(body.get("read", "")),
                },
            )
        else:
            existed = (user, vhost) in self.users.permissions
            await self._verb(
                "set_permissions",
                {
                    "user": user,
                    "vhost": vhost,
                    "configure": str(body.get("configure", "")),
                    "write": str(body.get("write", "")),
                    "read": str(body.get("read", "")),
                },
            )
        return _no_content() if existed else web.Response(status=201)

    async def delete_permission(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        user, vhost = request.match_info["user"], request.match_info["vhost"]
        topic = "/topic-permissions/" in request.path
        rows = self._topic_rows(user, vhost) if topic else self._permission_rows(user, vhost)
        if not rows:
            raise not_found()
        verb = "clear_topic_permissions" if topic else "clear_permissions"
        await self._verb(verb, {"user": user, "vhost": vhost})
        return _no_content()

    async def list_vhost_limits(self, request: web.Request) -> web.Response:
        who = self.who(request)
        only = request.match_info.get("vhost")
        if only is not None and only not in self.users.vhosts:
            raise not_found()
        rows = [
            {"vhost": v.name, "value": dict(v.limits)}
            for v in sorted(self.users.vhosts.values(), key=lambda v: v.name)
            if v.limits and (only is None or v.name == only) and who.sees_vhost(v.name)
        ]
        return _json(rows)

    async def put_vhost_limit(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        vhost, name = request.match_info["vhost"], request.match_info["name"]
        info = self.users.vhosts.get(vhost)
        if info is None:
            raise not_found()
        body = await _body(request)
        limits = {**info.limits, name: body.get("value")}
        await self._verb("set_vhost_limits", {"vhost": vhost, "limits": json.dumps(limits)})
        return _no_content()

    async def delete_vhost_limit(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        vhost, name = request.match_info["vhost"], request.match_info["name"]
        info = self.users.vhosts.get(vhost)
        if info is None or name not in info.limits:
            raise not_found()
        limits = {k: v for k, v in info.limits.items() if k != name}
        if limits:
            await self._verb("set_vhost_limits", {"vhost": vhost, "limits": json.dumps(limits)})
        else:
            await self._verb("clear_vhost_limits", {"vhost": vhost})
        return _no_content()

    async def list_user_limits(self, request: web.Request) -> web.Response:
        who = self.who(request)
        only = request.match_info.get("user")
        if only is not None and only not in self.users.users:
            raise not_found()
        rows = [
            {"user": u.name, "value": dict(u.limits)}
            for u in sorted(self.users.users.values(), key=lambda u: u.name)
            if u.limits and (only is None or u.name == only) and who.sees_user(u.name)
        ]
        return _json(rows)

    async def put_user_limit(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        user, name = request.match_info["user"], request.match_info["name"]
        if user not in self.users.users:
            raise not_found()
        body = await _body(request)
        await self._verb(
            "set_user_limits", {"user": user, "limits": json.dumps({name: body.get("value")})}
        )
        return _no_content()

    async def delete_user_limit(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        user, name = request.match_info["user"], request.match_info["name"]
        if user not in self.users.users:
            raise not_found()
        await self._verb("clear_user_limits", {"user": user, "limit": name})
        return _no_content()

    # -- policies and parameters -------------------------------------------------------------

    def _operator(self, request: web.Request) -> bool:
        return request.path.startswith("/api/operator-policies")

    async def list_policies(self, request: web.Request) -> web.Response:
        who = self.who(request)
        only = request.match_info.get("vhost")
        if only is not None:
            self.visible_vhosts(who, only)
        operator = self._operator(request)
        if operator:
            who.require_admin()
        rows = [
            p
            for p in self.runtime.policies(only, operator=operator)
            if who.sees_vhost(str(p["vhost"]))
        ]
        return self.listing(request, rows)

    async def get_policy(self, request: web.Request) -> web.Response:
        who = self.who(request)
        vhost, name = request.match_info["vhost"], request.match_info["name"]
        who.require_vhost(vhost)
        for row in self.runtime.policies(vhost, operator=self._operator(request)):
            if row["name"] == name:
                return _json(row)
        raise not_found()

    async def put_policy(self, request: web.Request) -> web.Response:
        who = self.who(request)
        vhost, name = request.match_info["vhost"], request.match_info["name"]
        operator = self._operator(request)
        if operator:
            who.require_admin()
        else:
            who.require_policymaker(vhost)
        self.vhost(vhost)
        body = await _body(request)
        target = self.broker.vhosts[vhost]
        existed = name in (target.operator_policies if operator else target.policies)
        self.runtime.set_policy(
            vhost,
            name,
            body.get("pattern"),
            body.get("definition"),
            body.get("priority", 0),
            body.get("apply-to", "all"),
            operator=operator,
        )
        await self.runtime.save()
        return _no_content() if existed else web.Response(status=201)

    async def delete_policy(self, request: web.Request) -> web.Response:
        who = self.who(request)
        vhost, name = request.match_info["vhost"], request.match_info["name"]
        operator = self._operator(request)
        if operator:
            who.require_admin()
        else:
            who.require_policymaker(vhost)
        target = self.vhost(vhost)
        if name not in (target.operator_policies if operator else target.policies):
            raise not_found()
        self.runtime.clear_policy(vhost, name, operator=operator)
        await self.runtime.save()
        return _no_content()

    async def list_parameters(self, request: web.Request) -> web.Response:
        who = self.who(request)
        component = request.match_info.get("component")
        vhost = request.match_info.get("vhost")
        rows = [
            p
            for p in self.runtime.parameter_rows()
            if (component is None or p["component"] == component)
            and (vhost is None or p["vhost"] == vhost)
            and who.sees_vhost(p["vhost"])
            and who.is_policymaker
        ]
        return self.listing(request, rows)

    async def get_parameter(self, request: web.Request) -> web.Response:
        who = self.who(request)
        m = request.match_info
        who.require_policymaker(m["vhost"])
        key = (m["vhost"], m["component"], m["name"])
        if key not in self.runtime.parameters:
            raise not_found()
        return _json(
            {
                "vhost": key[0],
                "component": key[1],
                "name": key[2],
                "value": self.runtime.parameters[key],
            }
        )

    async def put_parameter(self, request: web.Request) -> web.Response:
        who = self.who(request)
        m = request.match_info
        who.require_policymaker(m["vhost"])
        self.vhost(m["vhost"])
        body = await _body(request)
        existed = (m["vhost"], m["component"], m["name"]) in self.runtime.parameters
        self.runtime.set_parameter(m["vhost"], m["component"], m["name"], body.get("value"))
        await self.runtime.save()
        return _no_content() if existed else web.Response(status=201)

    async def delete_parameter(self, request: web.Request) -> web.Response:
        who = self.who(request)
        m = request.match_info
        who.require_policymaker(m["vhost"])
        if (m["vhost"], m["component"], m["name"]) not in self.runtime.parameters:
            raise not_found()
        self.runtime.clear_parameter(m["vhost"], m["component"], m["name"])
        await self.runtime.save()
        return _no_content()

    async def list_global_parameters(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        return self.listing(request, self.runtime.global_rows())

    async def get_global_parameter(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        name = request.match_info["name"]
        for row in self.runtime.global_rows():
            if row["name"] == name:
                return _json(row)
        raise not_found()

    async def put_global_parameter(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        name = request.match_info["name"]
        body = await _body(request)
        existed = name in self.runtime.global_parameters
        self.runtime.global_parameters[name] = body.get("value")
        await self.runtime.save()
        return _no_content() if existed else web.Response(status=201)

    async def delete_global_parameter(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        name = request.match_info["name"]
        if self.runtime.global_parameters.pop(name, None) is None:
            raise not_found()
        await self.runtime.save()
        return _no_content()

    # -- definitions ----------------------------------------------------------------------------

    async def get_definitions(self, request: web.Request) -> web.Response:
        who = self.who(request)
        vhost = request.match_info.get("vhost")
        if vhost is not None:
            self.vhost(vhost)
        who.require_admin()
        doc = export_all(self.users, self.runtime, vhost)
        response = _json(doc)
        if _bool(request.query.get("download")) or "download" in request.query:
            stamp = time.strftime("%Y-%m-%d")
            response.headers["Content-Disposition"] = (
                f'attachment; filename="leveret_definitions_{stamp}.json"'
            )
        return response

    async def post_definitions(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        vhost = request.match_info.get("vhost")
        if vhost is not None:
            self.vhost(vhost)
        if request.content_type == "multipart/form-data":
            form = await request.post()
            field = form.get("file")
            raw = (
                field.file.read() if isinstance(field, web.FileField) else str(field or "").encode()
            )
            doc = json.loads(raw)
        else:
            doc = await _body(request)
        async with self.host.admin.lock:
            await import_document(self.host, doc, vhost)
        return _no_content()


def _raw_binding_args(vhost: VirtualHost, row: dict[str, Any]) -> dict[str, object]:
    """The binding's arguments as the exchange holds them (``row`` has their JSON)."""
    exchange = vhost.exchanges[row["source"]]
    for destination, key, arguments in exchange.kind.bindings():
        if (
            getattr(destination, "name", None) == row["destination"]
            and key == row["routing_key"]
            and json_value(dict(arguments or {})) == row["arguments"]
        ):
            return dict(arguments or {})
    return {}


_PROPERTY_NAMES = tuple(BasicProperties.__dataclass_fields__)


def _encode_properties(props: object) -> bytes:
    if not isinstance(props, dict):
        raise bad_request("properties must be an object")
    values: dict[str, Any] = {}
    for key, value in props.items():
        if key not in _PROPERTY_NAMES:
            raise bad_request(f"unknown property '{key}'")
        if key in ("delivery_mode", "priority", "timestamp"):
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise bad_request(f"property '{key}' must be an integer") from None
        elif key == "headers":
            if not isinstance(value, dict):
                raise bad_request("headers must be an object")
        elif value is not None:
            value = str(value)
        values[key] = value
    try:
        return BasicProperties(**values).encode()
    except (TypeError, ValueError, OverflowError) as exc:
        raise bad_request(f"invalid properties: {exc}") from None


def _message_json(
    message: Message, redelivered: bool, left: int, encoding: str, truncate: object
) -> dict[str, Any]:
    body = message.body
    props = message.properties
    properties = {
        name: json_value(getattr(props, name))
        for name in _PROPERTY_NAMES
        if getattr(props, name, None) is not None
    }
    shown = body
    if isinstance(truncate, int) and not isinstance(truncate, bool) and truncate >= 0:
        shown = body[:truncate]
    payload_encoding = "string"
    if encoding == "base64":
        payload, payload_encoding = base64.b64encode(shown).decode(), "base64"
    else:
        try:
            payload = shown.decode("utf-8")
        except UnicodeDecodeError:
            payload, payload_encoding = base64.b64encode(shown).decode(), "base64"
    return {
        "payload_bytes": len(body),
        "redelivered": redelivered,
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "message_count": left,
        "properties": properties or [],
        "payload": payload,
        "payload_encoding": payload_encoding,
    }


def add_routes(app: web.Application, server: ManagementServer) -> None:
    api = Api(server)
    r = app.router
    get, put, delete, post = r.add_get, r.add_put, r.add_delete, r.add_post
    get("/api/overview", api.overview)
    get("/api/cluster-name", api.get_cluster_name)
    put("/api/cluster-name", api.put_cluster_name)
    get("/api/nodes", api.nodes)
    get("/api/nodes/{node}", api.node)
    get("/api/extensions", api.extensions)
    get("/api/auth", api.auth)
    get("/api/whoami", api.whoami)
    get("/api/definitions", api.get_definitions)
    post("/api/definitions", api.post_definitions)
    get("/api/definitions/{vhost}", api.get_definitions)
    post("/api/definitions/{vhost}", api.post_definitions)
    get("/api/connections", api.list_connections)
    get("/api/vhosts/{vhost}/connections", api.list_connections)
    get("/api/connections/{name}", api.get_connection)
    delete("/api/connections/{name}", api.delete_connection)
    get("/api/connections/{name}/channels", api.list_channels)
    get("/api/channels", api.list_channels)
    get("/api/vhosts/{vhost}/channels", api.list_channels)
    get("/api/channels/{channel}", api.get_channel)
    get("/api/consumers", api.list_consumers)
    get("/api/consumers/{vhost}", api.list_consumers)
    get("/api/exchanges", api.list_exchanges)
    get("/api/exchanges/{vhost}", api.list_exchanges)
    get("/api/exchanges/{vhost}/{name}", api.get_exchange)
    put("/api/exchanges/{vhost}/{name}", api.put_exchange)
    delete("/api/exchanges/{vhost}/{name}", api.delete_exchange)
    get("/api/exchanges/{vhost}/{name}/bindings/{side:source|destination}", api.exchange_bindings)
    post("/api/exchanges/{vhost}/{name}/publish", api.publish)
    get("/api/queues", api.list_queues)
    get("/api/queues/{vhost}", api.list_queues)
    get("/api/queues/{vhost}/{name}", api.get_queue)
    put("/api/queues/{vhost}/{name}", api.put_queue)
    delete("/api/queues/{vhost}/{name}", api.delete_queue)
    delete("/api/queues/{vhost}/{name}/contents", api.purge_queue)
    post("/api/queues/{vhost}/{name}/actions", api.queue_actions)
    get("/api/queues/{vhost}/{name}/bindings", api.queue_bindings)
    post("/api/queues/{vhost}/{name}/get", api.get_messages)
    get("/api/bindings", api.list_bindings)
    get("/api/bindings/{vhost}", api.list_bindings)
    between = "/api/bindings/{vhost}/e/{source}/{kind:q|e}/{dest}"
    get(between, api.bindings_between)
    post(between, api.add_binding)
    get(between + "/{props}", api.get_binding)
    delete(between + "/{props}", api.delete_binding)
    get("/api/vhosts", api.list_vhosts)
    get("/api/vhosts/{vhost}", api.get_vhost)
    put("/api/vhosts/{vhost}", api.put_vhost)
    delete("/api/vhosts/{vhost}", api.delete_vhost)
    get("/api/vhosts/{vhost}/permissions", api.list_permissions)
    get("/api/vhosts/{vhost}/topic-permissions", api.list_permissions)
    get("/api/users", api.list_users)
    get("/api/users/without-permissions", api.users_without_permissions)
    post("/api/users/bulk-delete", api.bulk_delete_users)
    get("/api/users/{user}", api.get_user)
    put("/api/users/{user}", api.put_user)
    delete("/api/users/{user}", api.delete_user)
    get("/api/users/{user}/permissions", api.list_permissions)
    get("/api/users/{user}/topic-permissions", api.list_permissions)
    for kind in ("permissions", "topic-permissions"):
        get(f"/api/{kind}", api.list_permissions)
        get(f"/api/{kind}/{{vhost}}/{{user}}", api.get_permission)
        put(f"/api/{kind}/{{vhost}}/{{user}}", api.put_permission)
        delete(f"/api/{kind}/{{vhost}}/{{user}}", api.delete_permission)
    for kind in ("policies", "operator-policies"):
        get(f"/api/{kind}", api.list_policies)
        get(f"/api/{kind}/{{vhost}}", api.list_policies)
        get(f"/api/{kind}/{{vhost}}/{{name}}", api.get_policy)
        put(f"/api/{kind}/{{vhost}}/{{name}}", api.put_policy)
        delete(f"/api/{kind}/{{vhost}}/{{name}}", api.delete_policy)
    get("/api/parameters", api.list_parameters)
    get("/api/parameters/{component}", api.list_parameters)
    get("/api/parameters/{component}/{vhost}", api.list_parameters)
    get("/api/parameters/{component}/{vhost}/{name}", api.get_parameter)
    put("/api/parameters/{component}/{vhost}/{name}", api.put_parameter)
    delete("/api/parameters/{component}/{vhost}/{name}", api.delete_parameter)
    get("/api/global-parameters", api.list_global_parameters)
    get("/api/global-parameters/{name}", api.get_global_parameter)
    put("/api/global-parameters/{name}", api.put_global_parameter)
    delete("/api/global-parameters/{name}", api.delete_global_parameter)
    get("/api/vhost-limits", api.list_vhost_limits)
    get("/api/vhost-limits/{vhost}", api.list_vhost_limits)
    put("/api/vhost-limits/{vhost}/{name}", api.put_vhost_limit)
    delete("/api/vhost-limits/{vhost}/{name}", api.delete_vhost_limit)
    get("/api/user-limits", api.list_user_limits)
    get("/api/user-limits/{user}", api.list_user_limits)
    put("/api/user-limits/{user}/{name}", api.put_user_limit)
    delete("/api/user-limits/{user}/{name}", api.delete_user_limit)
    get("/api/aliveness-test/{vhost}", api.aliveness)
    # The pre-3.8 health check that clients still call (amqpstorm's healthchecks.get).
    get("/api/healthchecks/node", api.health_alarms)
    get("/api/healthchecks/node/{node}", api.health_alarms)
    get("/api/health/checks/alarms", api.health_alarms)
    get("/api/health/checks/local-alarms", api.health_alarms)
    get("/api/health/checks/virtual-hosts", api.health_ok)
    get("/api/health/checks/node-is-mirror-sync-critical", api.health_ok)
    get("/api/health/checks/node-is-quorum-critical", api.health_ok)
    get("/api/health/checks/certificate-expiration/{within}/{unit}", api.health_ok)
    get("/api/health/checks/port-listener/{port}", api.health_port)
    get("/api/health/checks/protocol-listener/{protocol}", api.health_protocol)
