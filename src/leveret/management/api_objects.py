"""What is in the vhosts: overview, nodes, health checks, connections, channels,
consumers, exchanges (with publish), queues (with get and purge), bindings."""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web

from leveret import __version__
from leveret.convert.amqp091 import wire_message
from leveret.management import query, shapes
from leveret.management.api_base import (
    ApiBase,
    as_bool,
    json_reply,
    no_content,
    rates_of,
    read_body,
)
from leveret.management.errors import HttpError, bad_request, not_found
from leveret.management.peers import node_scope
from leveret.management.stats import CHANNEL_COUNTERS, message_stats
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.message_ops import PROPERTY_NAMES, message_json
from leveret.server.parameters import cluster_name
from leveret.server.rows import (
    binding_rows,
    channels,
    json_value,
    properties_key,
    queue_record_row,
)

if TYPE_CHECKING:
    from leveret.management.authz import Principal
    from leveret.model.queues.base import Queue
    from leveret.model.vhost import VirtualHost
    from leveret.server.connection import ConnectionProtocol
    from leveret.server.shell.info import ChannelInfo


class ObjectsApi(ApiBase):
    """What is in the vhosts: overview, nodes, health checks, connections, channels,"""

    # -- overview, nodes, misc ---------------------------------------------------------------

    async def overview(self, request: web.Request) -> web.Response:
        who = self.who(request)
        rates = rates_of(request)
        vhosts = self.visible_vhosts(who)
        sampler = self.sampler
        queues = [q for v in vhosts for q in v.queues.values()]
        ready = sum(q.message_count for q in queues)
        unacked = sum(q.unacked_count for q in queues)
        conns = self.connections(who)
        channels = sum(len(c.shell.channels()) for c in conns if c.shell is not None)
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
        object_totals = {
            "connections": len(conns),
            "channels": channels,
            "exchanges": sum(len(v.exchanges) for v in vhosts),
            "queues": len(queues),
            "consumers": sum(len(q.consumers) for q in queues),
        }
        stats = message_stats(
            CHANNEL_COUNTERS, tuple(running), sampler.overview.samples, rates.age, rates.incr
        )
        if self.others(request):
            await self._cluster_totals(request, who, object_totals, queue_totals, stats)
        listeners, contexts = self._listeners(request)
        return json_reply(
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
                "message_stats": stats,
                "queue_totals": queue_totals,
                "object_totals": object_totals,
                "listeners": listeners,
                "contexts": contexts,
            }
        )

    async def _cluster_totals(
        self,
        request: web.Request,
        who: Principal,
        object_totals: dict[str, Any],
        queue_totals: dict[str, Any],
        stats: dict[str, Any],
    ) -> None:
        """Add the other nodes' own totals to this node's (RabbitMQ's overview totals the
        cluster): their connections, channels, consumers, the messages of the queues they
        lead, their message rates; queues counted by their leaders, and from etcd's records
        those of nodes that did not answer (down: RabbitMQ counts them too)."""
        answers = await self.server.peers.ask(request, self.others(request))
        answered = {self.cluster.name}
        for name, (status, body) in answers.items():
            if status != 200 or not isinstance(body, dict):
                continue
            answered.add(name)
            theirs = body.get("object_totals") or {}
            for key in ("connections", "channels", "consumers", "queues"):
                object_totals[key] += int(theirs.get(key) or 0)
            _add_numbers(queue_totals, body.get("queue_totals") or {})
            _add_numbers(stats, body.get("message_stats") or {})
        object_totals["queues"] += sum(
            1
            for (vname, _name), record in self.cluster.applier.view.queues.items()
            if record.leader not in answered and who.sees_vhost(vname)
        )

    def _listeners(self, request: web.Request) -> tuple[list[Any], list[Any]]:
        """Every running node's listeners and management contexts, as RabbitMQ's overview
        lists them (by protocol, then node)."""
        name = shapes.node_name()
        nodes: dict[str, dict[str, Any]] = {
            name: {
                "listeners": list(self.admin_host.listening),
                "management": [u for u in self.server.urls if u not in self.server.prometheus_urls],
                "prometheus": list(self.server.prometheus_urls),
            }
        }
        cluster = self.cluster
        if cluster is not None and not node_scope(request):
            nodes.update(cluster.applier.view.nodes)
        listeners: list[dict[str, Any]] = []
        contexts: list[dict[str, Any]] = []
        for node, record in nodes.items():
            urls = [
                *record.get("listeners", []),
                *record.get("management", []),
                *[
                    f"http/prometheus://{u.split('://', 1)[1]}"
                    for u in record.get("prometheus", [])
                ],
            ]
            if record.get("cluster"):
                # RabbitMQ lists each node's inter-node port as "clustering".
                urls.append(f"clustering://{record['cluster']}")
            listeners += [_listener(node, str(url)) for url in urls]
            for description, kind in (("Management", "management"), ("Prometheus", "prometheus")):
                for url in record.get(kind, [])[:1]:
                    context = {
                        "node": node,
                        "description": f"RabbitMQ {description}",
                        "path": "/",
                        "port": str(url).rsplit(":", 1)[1],
                    }
                    if kind == "prometheus":
                        context["protocol"] = "'http/prometheus'"
                    contexts.append(context)
        listeners.sort(key=lambda item: (item["protocol"], item["node"]))
        contexts.sort(key=lambda item: (item["description"], item["node"]))
        return listeners, contexts

    def _node(self) -> dict[str, Any]:
        host = self.host
        alarm = host.alarm
        node = shapes.node_json(self.admin_host, self.admin_host.started_at, 0, 0)
        node["mem_used"] = self.broker.gauge.bytes
        node["mem_limit"] = alarm.high
        node["mem_alarm"] = alarm.local  # this node's own, as RabbitMQ's
        return node

    async def nodes(self, request: web.Request) -> web.Response:
        self.who(request).require_monitor()
        cluster = self.cluster
        if cluster is None or node_scope(request):
            return json_reply([self._node()])
        view = cluster.applier.view
        others = self.others(request)
        answers = await asyncio.gather(
            *(
                self.server.peers.ask(
                    request, {name: record}, path=f"/api/nodes/{quote(name, safe='')}"
                )
                for name, record in sorted(others.items())
            )
        )
        found = {
            name: body
            for answer in answers
            for name, (status, body) in answer.items()
            if status == 200 and isinstance(body, dict)
        }
        found[cluster.name] = self._node()
        return json_reply(
            [
                found.get(name) or _node_not_answering(name, view.nodes.get(name))
                for name in sorted(set(view.members) | set(view.nodes) | {cluster.name})
            ]
        )

    async def node(self, request: web.Request) -> web.Response:
        self.who(request).require_monitor()
        name = request.match_info["node"]
        if name == shapes.node_name():
            return json_reply(self._node())
        cluster = self.cluster
        if cluster is None or node_scope(request):
            raise not_found()
        view = cluster.applier.view
        if name not in view.members and name not in view.nodes:
            raise not_found()
        record = view.nodes.get(name)
        if record is not None:
            answer = await self.server.peers.ask(request, {name: record})
            status, body = answer.get(name, (0, None))
            if status == 200 and isinstance(body, dict):
                return json_reply(body)
        return json_reply(_node_not_answering(name, record))

    async def extensions(self, request: web.Request) -> web.Response:
        self.who(request)
        return json_reply([])

    async def auth(self, request: web.Request) -> web.Response:
        return json_reply({"oauth_enabled": False})

    async def whoami(self, request: web.Request) -> web.Response:
        who = self.who(request)
        return json_reply({"name": who.name, "tags": list(who.tags)})

    async def get_cluster_name(self, request: web.Request) -> web.Response:
        self.who(request)
        return json_reply({"name": cluster_name(self.runtime)})

    async def put_cluster_name(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        body = await read_body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise bad_request("name must be a non-empty string")
        await self.runtime.change(lambda r: r.set_global_parameter("cluster_name", name))
        return no_content()

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
            return json_reply({"status": "failed", "reason": "message not returned"}, 503)
        return json_reply({"status": "ok"})

    async def health_ok(self, request: web.Request) -> web.Response:
        self.who(request)
        return json_reply({"status": "ok"})

    async def health_alarms(self, request: web.Request) -> web.Response:
        self.who(request)
        alarm = self.host.alarm
        if alarm.active:
            nodes = ([shapes.node_name()] if alarm.local else []) + sorted(alarm.remote)
            return json_reply(
                {
                    "status": "failed",
                    "reason": "resource alarm(s) in effect in the cluster",
                    "alarms": [{"node": node, "resource": "memory"} for node in nodes],
                },
                503,
            )
        return json_reply({"status": "ok"})

    async def health_port(self, request: web.Request) -> web.Response:
        self.who(request)
        port = request.match_info["port"]
        ports = {url.rsplit(":", 1)[1] for url in self.admin_host.listening}
        ports.update(u.rsplit(":", 1)[1] for u in self.server.urls)
        if port not in ports:
            return json_reply(
                {"status": "failed", "reason": f"No active listener on port {port}"}, 503
            )
        return json_reply({"status": "ok", "port": int(port)})

    async def health_protocol(self, request: web.Request) -> web.Response:
        self.who(request)
        protocol = request.match_info["protocol"].lower()
        known = {url.split("://")[0] for url in self.admin_host.listening}
        known.update({"http"} if self.server.urls else set())
        if protocol in ("amqp091", "amqp0-9-1", "amqp"):
            protocol = "amqp"
        if protocol not in known:
            return json_reply(
                {"status": "failed", "reason": f"No active listener for protocol {protocol}"},
                503,
            )
        return json_reply({"status": "ok", "protocol": protocol})

    # -- connections and channels -------------------------------------------------------------

    def _find_connection(self, who: Principal, name: str) -> ConnectionProtocol:
        for conn in self.connections(who):
            if shapes.connection_name(conn) == name:
                return conn
        raise not_found()

    async def list_connections(self, request: web.Request) -> web.Response:
        who = self.who(request)
        only = request.match_info.get("vhost")
        rates = rates_of(request)
        rows = [
            shapes.connection_json(c, self.sampler, rates)
            for c in self.connections(who)
            if only is None or _vhost(c) == only
        ]
        if only is not None:
            self.visible_vhosts(who, only)
        return self.listing(request, await self.from_others(request, rows))

    async def _elsewhere(self, request: web.Request) -> web.Response:
        """A connection or channel this node does not have: the node that has it answers."""
        answer = await self.on_others(request)
        if answer is None:
            raise not_found()
        return answer

    async def get_connection(self, request: web.Request) -> web.Response:
        who = self.who(request)
        try:
            conn = self._find_connection(who, request.match_info["name"])
        except HttpError:
            return await self._elsewhere(request)
        return json_reply(shapes.connection_json(conn, self.sampler, rates_of(request)))

    async def delete_connection(self, request: web.Request) -> web.Response:
        who = self.who(request)
        try:
            conn = self._find_connection(who, request.match_info["name"])
        except HttpError:
            return await self._elsewhere(request)
        shell = conn.shell
        if not who.is_admin and shell is not None and shell.info.user != who.name:
            who.require_admin()
        reason = request.headers.get("X-Reason", "Closed via management plugin")
        conn.shutdown(reason)
        return no_content()

    def _channels(
        self, who: Principal, conns: list[ConnectionProtocol] | None = None
    ) -> list[tuple[ConnectionProtocol, ChannelInfo]]:
        return channels(conns if conns is not None else self.connections(who))

    async def list_channels(self, request: web.Request) -> web.Response:
        who = self.who(request)
        rates = rates_of(request)
        only = request.match_info.get("vhost")
        if only is not None:
            self.visible_vhosts(who, only)
        conns = None
        if "name" in request.match_info:
            try:
                conns = [self._find_connection(who, request.match_info["name"])]
            except HttpError:
                return await self._elsewhere(request)
        rows = [
            shapes.channel_json(conn, channel, self.sampler, rates)
            for conn, channel in self._channels(who, conns)
            if only is None or _vhost(conn) == only
        ]
        if conns is None:
            rows = await self.from_others(request, rows)
        return self.listing(request, rows)

    async def get_channel(self, request: web.Request) -> web.Response:
        who = self.who(request)
        name = request.match_info["channel"]
        for conn, channel in self._channels(who):
            if f"{shapes.connection_name(conn)} ({channel.number})" == name:
                row = shapes.channel_json(conn, channel, self.sampler, rates_of(request))
                row["consumer_details"] = [
                    shapes.consumer_json(c, shapes.channel_details(conn, channel.number))
                    for c in channel.consumers.values()
                ]
                return json_reply(row)
        return await self._elsewhere(request)

    async def list_consumers(self, request: web.Request) -> web.Response:
        who = self.who(request)
        only = request.match_info.get("vhost")
        if only is not None:
            self.visible_vhosts(who, only)
        rows = [
            shapes.consumer_json(consumer, shapes.channel_details(conn, channel.number))
            for conn, channel in self._channels(who)
            if only is None or _vhost(conn) == only
            for consumer in channel.consumers.values()
        ]
        return self.listing(request, await self.from_others(request, rows))

    # -- exchanges ----------------------------------------------------------------------------

    async def list_exchanges(self, request: web.Request) -> web.Response:
        who = self.who(request)
        rates = rates_of(request)
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
        row = shapes.exchange_json(exchange, vhost.name, self.sampler, rates_of(request))
        row["incoming"] = []
        row["outgoing"] = []
        return json_reply(row)

    async def put_exchange(self, request: web.Request) -> web.Response:
        who = self.who(request)
        vname, name = request.match_info["vhost"], request.match_info["name"]
        who.require_vhost(vname)
        vhost = self.vhost(vname)
        body = await read_body(request)
        kind = body.get("type")
        if not isinstance(kind, str):
            raise bad_request("type must be given")
        existed = name in vhost.exchanges
        options: dict[str, Any] = {
            "durable": as_bool(body.get("durable"), True),
            "auto_delete": as_bool(body.get("auto_delete")),
            "internal": as_bool(body.get("internal")),
            "arguments": dict(body.get("arguments") or {}),
        }
        try:
            if self.cluster is not None:
                existed = not await self.cluster.store.declare_exchange(
                    vname, name, kind, **options
                )
            else:
                vhost.declare_exchange(name, kind, **options)
        except KeyError as exc:
            raise bad_request(f"invalid exchange type {exc}") from None
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        return no_content() if existed else web.Response(status=201)

    async def delete_exchange(self, request: web.Request) -> web.Response:
        vhost, exchange = self._exchange_of(request)
        self.who(request).require_vhost(vhost.name)
        if_unused = as_bool(request.query.get("if-unused"))
        if self.cluster is not None:
            await self.cluster.store.delete_exchange(vhost.name, exchange.name, if_unused=if_unused)
        else:
            vhost.delete_exchange(exchange.name, if_unused=if_unused)
        return no_content()

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
        body = await read_body(request)
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
        return json_reply({"routed": bool(queues)})

    # -- queues -------------------------------------------------------------------------------

    async def list_queues(self, request: web.Request) -> web.Response:
        who = self.who(request)
        rates = rates_of(request)
        stubs = [
            {"name": name, "vhost": v.name, "queue": q}
            for v in self.visible_vhosts(who, request.match_info.get("vhost"))
            for name, q in sorted(v.queues.items())
        ]

        cluster = self.cluster
        if cluster is not None and not node_scope(request):
            # Queues led by other nodes: as their leaders show them (with their counters
            # and rates), else from their records in etcd (a leader down or not answering).
            only = request.match_info.get("vhost")
            theirs = await self.from_others(request, [])
            stubs += [{"name": row["name"], "vhost": row["vhost"], "row": row} for row in theirs]
            shown = {(row["vhost"], row["name"]) for row in theirs}
            stubs += [
                {"name": name, "vhost": vname, "record": record}
                for (vname, name), record in sorted(cluster.applier.view.queues.items())
                if record.leader != cluster.name
                and (vname, name) not in shown
                and (only is None or only == vname)
                and who.sees_vhost(vname)
            ]
            stubs.sort(key=lambda s: (s["vhost"], s["name"]))

        def render(stub: dict[str, Any]) -> dict[str, Any]:
            if "row" in stub:
                return dict(stub["row"])
            if "record" in stub:
                return remote_queue_json(stub["record"], cluster.applier.view.nodes)
            row = shapes.queue_json(stub["queue"], self.sampler, rates)
            if cluster is not None:
                view = cluster.applier.view
                with_replicas(row, view.queues.get((row["vhost"], row["name"])), view.nodes)
            return row

        return json_reply(query.apply(stubs, request.query, render))

    async def _queue_elsewhere(self, request: web.Request) -> web.Response | None:
        """The answer of the node that leads the queue the request names, when that is
        another node (its record says which; a queue only its node knows, such as a
        client's transient one, is asked of every node); None when it is this node's."""
        cluster = self.cluster
        if cluster is None or node_scope(request):
            return None
        vname, name = request.match_info["vhost"], request.match_info["name"]
        vhost = self.broker.vhosts.get(vname)
        if vhost is None or name in vhost.queues:
            return None
        record = cluster.applier.view.queues.get((vname, name))
        if record is None:
            return await self.on_others(request)
        if record.leader == cluster.name:
            return None
        return await self._at_leader(request, str(record.leader))

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

    async def _at_leader(self, request: web.Request, leader: str) -> web.Response:
        """A queue led by another node: that node answers (with the caller's credentials).
        A leader that is down: the queue as its record shows it (``state: down``) for a
        read, 503 naming the node for anything else."""
        if leader not in self.cluster.applier.view.nodes and request.method == "GET":
            self.who(request)
            record = self.cluster.applier.view.queues[
                (request.match_info["vhost"], request.match_info["name"])
            ]
            if request.path.endswith("/bindings"):
                raise not_found()
            return json_reply(remote_queue_json(record, self.cluster.applier.view.nodes))
        return await self.on_node(request, leader)

    async def get_queue(self, request: web.Request) -> web.Response:
        elsewhere = await self._queue_elsewhere(request)
        if elsewhere is not None:
            return elsewhere
        _vhost, queue = self._queue_of(request)
        row = shapes.queue_json(queue, self.sampler, rates_of(request), detail=True)
        if self.cluster is not None:
            view = self.cluster.applier.view
            with_replicas(row, view.queues.get((queue.vhost_name, queue.name)), view.nodes)
        owners = {
            id(consumer): shapes.channel_details(conn, channel.number)
            for conn, channel in self._channels(self.who(request))
            for consumer in channel.consumers.values()
        }
        row["consumer_details"] = [
            shapes.consumer_json(c, owners.get(id(c))) for c in queue.consumers
        ]
        return json_reply(row)

    async def put_queue(self, request: web.Request) -> web.Response:
        who = self.who(request)
        vname, name = request.match_info["vhost"], request.match_info["name"]
        who.require_vhost(vname)
        vhost = self.vhost(vname)
        body = await read_body(request)
        arguments = body.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise bad_request("arguments must be an object")
        existed = name in vhost.queues
        queue_type = body.get("type")
        if isinstance(queue_type, str) and "x-queue-type" not in arguments:
            arguments = {**arguments, "x-queue-type": queue_type}
        durable = as_bool(body.get("durable"), True)
        auto_delete = as_bool(body.get("auto_delete"))
        if self.cluster is not None:
            # One outcome for concurrent declarations on any nodes: etcd's.
            _record, created = await self.cluster.store.declare_queue(
                vname, name, durable=durable, auto_delete=auto_delete, arguments=arguments
            )
            existed = not created
        else:
            vhost.declare_queue(
                name, owner=None, durable=durable, auto_delete=auto_delete, arguments=arguments
            )
        return no_content() if existed else web.Response(status=201)

    async def delete_queue(self, request: web.Request) -> web.Response:
        cluster = self.cluster
        if cluster is not None:
            who = self.who(request)
            vname, name = request.match_info["vhost"], request.match_info["name"]
            who.require_vhost(vname)
            self.vhost(vname)
            if (
                name not in self.vhost(vname).queues
                and (vname, name) not in cluster.applier.view.queues
            ):
                raise not_found()
            await cluster.store.delete_queue(
                vname,
                name,
                if_unused=as_bool(request.query.get("if-unused")),
                if_empty=as_bool(request.query.get("if-empty")),
            )
            return no_content()
        vhost, queue = self._queue_of(request, change=True)
        vhost.delete_queue(
            queue.name,
            owner=queue.exclusive_owner,
            if_unused=as_bool(request.query.get("if-unused")),
            if_empty=as_bool(request.query.get("if-empty")),
        )
        return no_content()

    async def purge_queue(self, request: web.Request) -> web.Response:
        elsewhere = await self._queue_elsewhere(request)
        if elsewhere is not None:
            return elsewhere
        _vhost, queue = self._queue_of(request, change=True)
        if not queue.type.purges:
            raise bad_request(f"purge is not supported by {queue.type.name} queues")
        queue.purge()
        return no_content()

    async def queue_actions(self, request: web.Request) -> web.Response:
        elsewhere = await self._queue_elsewhere(request)
        if elsewhere is not None:
            return elsewhere
        self._queue_of(request, change=True)
        body = await read_body(request)
        if body.get("action") not in ("sync", "cancel_sync"):
            raise bad_request("action must be sync or cancel_sync")
        return no_content()  # one node: nothing to synchronise

    async def queue_bindings(self, request: web.Request) -> web.Response:
        elsewhere = await self._queue_elsewhere(request)
        if elsewhere is not None:
            return elsewhere
        vhost, queue = self._queue_of(request)
        rows = [
            b
            for b in binding_rows(vhost)
            if b["destination"] == queue.name and b["destination_type"] == "queue"
        ]
        return self.listing(request, rows)

    async def get_messages(self, request: web.Request) -> web.Response:
        elsewhere = await self._queue_elsewhere(request)
        if elsewhere is not None:
            return elsewhere
        _vhost, queue = self._queue_of(request, change=True)
        if not queue.type.gets:
            raise bad_request(f"basic.get is not supported by {queue.type.name} queues")
        body = await read_body(request)
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
        limit = None  # RabbitMQ ignores a truncate that is not a whole number of bytes
        if isinstance(truncate, int) and not isinstance(truncate, bool) and truncate >= 0:
            limit = truncate
        entries = []
        for _ in range(max(0, count)):
            entry = queue.get(auto_settle=False)
            if entry is None:
                break
            entries.append(entry)
        rows = []
        for i, entry in enumerate(entries):
            rows.append(
                message_json(
                    entry.message,
                    encoding=encoding,
                    truncate=limit,
                    redelivered=entry.redelivered,
                    message_count=queue.message_count + len(entries) - i - 1,
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
        return json_reply(rows)

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
        if kind == "queue" and dest not in vhost.queues and not self._remote_queue(vname, dest):
            raise not_found()
        if kind == "exchange" and dest not in vhost.exchanges:
            raise not_found()
        return vhost, source, dest, kind

    def _remote_queue(self, vhost: str, name: str) -> bool:
        """A queue led by another node of the cluster (not in this node's model)."""
        cluster = self.cluster
        return cluster is not None and (vhost, name) in cluster.applier.view.queues

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
        body = await read_body(request)
        key = str(body.get("routing_key", ""))
        arguments = dict(body.get("arguments") or {})
        if self.cluster is not None:
            await self.cluster.store.bind(vhost.name, source, kind, dest, key, arguments)
        elif kind == "queue":
            queue = vhost.queues[dest]
            vhost.bind_queue(dest, source, key, arguments, owner=queue.exclusive_owner)
        else:
            vhost.bind_exchange(dest, source, key, arguments)
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
        return json_reply(row)

    async def delete_binding(self, request: web.Request) -> web.Response:
        vhost, row = self._binding(request)
        source, dest = row["source"], row["destination"]
        arguments = _raw_binding_args(vhost, row)
        if self.cluster is not None:
            await self.cluster.store.unbind(
                vhost.name, source, row["destination_type"], dest, row["routing_key"], arguments
            )
        elif row["destination_type"] == "queue":
            queue = vhost.queues[dest]
            vhost.unbind_queue(
                dest, source, row["routing_key"], arguments, owner=queue.exclusive_owner
            )
        else:
            vhost.unbind_exchange(dest, source, row["routing_key"], arguments)
        return no_content()


def _add_numbers(total: dict[str, Any], more: dict[str, Any]) -> None:
    """Add another node's counts (and the ``rate`` of their ``*_details``) to ``total``."""
    for key, value in more.items():
        mine = total.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            total[key] = (mine if isinstance(mine, int | float) else 0) + value
        elif isinstance(value, dict) and isinstance(value.get("rate"), int | float):
            if not isinstance(mine, dict):
                total[key] = mine = {"rate": 0.0}
            mine["rate"] = float(mine.get("rate") or 0.0) + float(value["rate"])


# RabbitMQ's listener protocol names for Leveret's URL schemes.
_PROTOCOLS = {"amqps": "amqp/ssl", "rabbitmq-stream": "stream", "rabbitmq-stream+tls": "stream/ssl"}


def _listener(node: str, url: str) -> dict[str, Any]:
    scheme, address = url.split("://", 1)
    host, port = address.rsplit(":", 1)
    return {
        "node": node,
        "protocol": _PROTOCOLS.get(scheme, scheme),
        "ip_address": host.strip("[]"),
        "port": int(port),
    }


def _node_path(name: str) -> str:
    return f"/api/nodes/{quote(name, safe='')}"


def _node_not_answering(name: str, record: dict[str, Any] | None) -> dict[str, Any]:
    """A node that is down, as RabbitMQ 3.10.8 shows a stopped one (tests/data/management/),
    or one that runs and did not answer in time."""
    down = {"name": name, "type": "disc", "running": False, "cluster_links": []}
    if record is None:
        return down
    return {**down, "running": True, "os_pid": str(record.get("pid", ""))}


def remote_queue_json(record: Any, running: dict[str, Any]) -> dict[str, Any]:
    """A queue led by another node, from its record in etcd."""
    return with_replicas(queue_record_row(record, record.leader in running), record, running)


def with_replicas(row: dict[str, Any], record: Any, running: dict[str, Any]) -> dict[str, Any]:
    """A replicated queue's ``leader``, ``members`` and ``online`` (the members running),
    as RabbitMQ shows a quorum queue's."""
    if record is not None and record.members:
        row["leader"] = record.leader
        row["members"] = list(record.members)
        row["online"] = [m for m in record.members if m in running]
    return row


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


def _encode_properties(props: object) -> bytes:
    if not isinstance(props, dict):
        raise bad_request("properties must be an object")
    values: dict[str, Any] = {}
    for key, value in props.items():
        if key not in PROPERTY_NAMES:
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


def _vhost(conn: ConnectionProtocol) -> str | None:
    shell = conn.shell
    return shell.info.vhost if shell is not None else None
