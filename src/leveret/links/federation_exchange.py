"""A federated exchange's link to one upstream (RabbitMQ's
``rabbit_federation_exchange_link``; see ``federation.py`` for the whole picture).

On the upstream, per link run: the queue ``federation: <upstream exchange> -> <our cluster
name>[:<vhost>][:<exchange>]`` (durable; ``x-expires``, ``x-message-ttl`` from the
upstream's ``expires`` and ``message-ttl``), the upstream exchange (declared like ours if it
is missing), and an internal exchange ``<queue> A`` or ``<queue> B`` of type
``x-federation-upstream`` (it cuts loops and counts hops upstream already; ``fanout`` where
that type is unknown) bound to the queue. The suffix alternates at each run, so the new
internal exchange is bound before the old one is deleted and nothing published meanwhile is
missed.

Bindings: each binding of the downstream exchange (once per routing key and arguments) is
made from the upstream exchange to the internal exchange, with an ``x-bound-from`` entry
saying how many more hops it may travel; a binding that came from further downstream (it
has ``x-bound-from`` already) is passed on with one hop less, or not at all once none are
left or it has been here before. They are brought up to date at each reconciliation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any, cast

from leveret.links.amqp091 import LinkError, open_connection
from leveret.links.federation_link import FederationLink
from leveret.links.messages import prepend_table_header
from leveret.model.exchanges.federation_upstream import (
    DOWNSTREAM_NAME,
    DOWNSTREAM_VHOST,
    MAX_HOPS,
    ROUTING_HEADER,
    already_seen,
    should_forward,
)
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp091.fieldtable import Long

if TYPE_CHECKING:
    from leveret.links.amqp091 import Connection091
    from leveret.links.uri import Endpoint
    from leveret.protocol.amqp091.client import Deliveries
    from leveret.protocol.amqp091.fieldtable import FieldTable

__all__ = ["BINDING_HEADER", "ExchangeLink", "upstream_queue_name"]

log = logging.getLogger("leveret.links")

BINDING_HEADER = "x-bound-from"
PURPOSE: FieldTable = {"x-internal-purpose": "federation"}


def upstream_queue_name(
    upstream_exchange: str,
    upstream_vhost: str,
    cluster: str,
    downstream_exchange: str,
    downstream_vhost: str,
) -> str:
    """RabbitMQ's ``upstream_queue_name``."""
    if downstream_vhost == upstream_vhost:
        part = "" if downstream_exchange == upstream_exchange else f":{downstream_exchange}"
    else:
        part = f":{downstream_vhost}:{downstream_exchange}"
    return f"federation: {upstream_exchange} -> {cluster}{part}"


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


class ExchangeLink(FederationLink):
    kind = "exchange"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cmd = 0  # the upstream channel for bindings
        self.queue = ""
        self.internal = ""
        self.upstream_vhost = ""
        self.upstream_cluster: str | None = None
        # Upstream bindings made: (routing key, arguments as JSON) -> arguments.
        self.bound: dict[tuple[str, str], FieldTable] = {}
        self._syncing = False
        self._resync = False

    # -- a run ------------------------------------------------------------------------------

    async def _run(self, up: Connection091, down: Connection091, endpoint: Endpoint) -> None:
        links, upstream = self.links, self.upstream
        vhost = links.server.broker.vhosts.get(self.vhost)
        exchange = vhost.exchanges.get(self.resource) if vhost is not None else None
        if exchange is None:
            raise LinkError(f"exchange '{self.resource}' in vhost '{self.vhost}' not found")
        self.upstream_vhost = endpoint.vhost
        self.upstream_cluster = _text(up.server_properties.get("cluster_name"))
        cluster = links.cluster_name()
        self.queue = upstream_queue_name(
            upstream.exchange, endpoint.vhost, cluster, self.resource, self.vhost
        )
        self.cmd = await up.open_channel()
        arguments: FieldTable = dict(PURPOSE)
        if upstream.expires is not None:
            arguments["x-expires"] = Long(int(upstream.expires))
        if upstream.message_ttl is not None:
            arguments["x-message-ttl"] = Long(int(upstream.message_ttl))
        if upstream.ha_policy is not None:
            arguments["x-ha-policy"] = upstream.ha_policy
        await up.call(
            self.ch,
            m.QueueDeclare(queue=self.queue, durable=True, arguments=arguments),
            m.QueueDeclareOk,
        )
        no_ack = upstream.ack_mode == "no-ack"
        if not no_ack:
            await up.call(self.ch, m.BasicQos(prefetch_count=upstream.prefetch), m.BasicQosOk)
        # The upstream exchange, declared as ours if it is missing.
        try:
            await up.disposable_call(
                m.ExchangeDeclare(exchange=upstream.exchange, passive=True), m.ExchangeDeclareOk
            )
        except LinkError as exc:
            if exc.code != 404 or up.error is not None:
                raise
            await up.call(
                self.ch,
                m.ExchangeDeclare(
                    exchange=upstream.exchange,
                    type=exchange.type_name,
                    durable=exchange.durable,
                    auto_delete=exchange.auto_delete,
                    internal=exchange.internal,
                    arguments=cast("FieldTable", dict(exchange.arguments)),
                ),
                m.ExchangeDeclareOk,
            )
        suffixes = self.federation.suffixes
        old = suffixes.get(self.key, "A")
        suffix = "B" if old == "A" else "A"
        self.internal = f"{self.queue} {suffix}"
        await self._declare_internal(up, endpoint)
        await up.call(self.ch, m.QueueBind(queue=self.queue, exchange=self.internal), m.QueueBindOk)
        suffixes[self.key] = suffix
        self.bound = {}
        await self._sync(up)
        with contextlib.suppress(LinkError):
            await up.disposable_call(
                m.ExchangeDelete(exchange=f"{self.queue} {old}"), m.ExchangeDeleteOk
            )
        await up.call(
            self.ch,
            m.BasicConsume(queue=self.queue, consumer_tag=upstream.consumer_tag, no_ack=no_ack),
            m.BasicConsumeOk,
        )
        log.info(
            "Federation exchange '%s' in vhost '%s' connected to %s (upstream '%s')",
            self.resource,
            self.vhost,
            endpoint.safe_uri,
            upstream.name,
        )
        await self._wait(up, down)

    async def _declare_internal(self, up: Connection091, endpoint: Endpoint) -> None:
        """The internal exchange: deleted, then declared ``x-federation-upstream`` on a
        connection of its own (an unknown exchange type is a connection error in 0-9-1),
        falling back to ``fanout``."""
        with contextlib.suppress(LinkError):
            await up.disposable_call(m.ExchangeDelete(exchange=self.internal), m.ExchangeDeleteOk)
        arguments: FieldTable = {
            MAX_HOPS: Long(self.upstream.max_hops),
            DOWNSTREAM_NAME: self.links.cluster_name(),
            DOWNSTREAM_VHOST: self.vhost,
            **PURPOSE,
        }

        def declare(kind: str, args: FieldTable) -> m.ExchangeDeclare:
            return m.ExchangeDeclare(
                exchange=self.internal,
                type=kind,
                durable=True,
                internal=True,
                auto_delete=True,
                arguments=args,
            )

        probe = await open_connection(
            endpoint, "Disposable exchange federation link connection", self.links.local
        )
        try:
            channel = await probe.open_channel()
            await probe.call(
                channel,
                declare("x-federation-upstream", arguments),
                m.ExchangeDeclareOk,
            )
        except LinkError as exc:
            if exc.code != 503:
                raise
            await up.call(
                self.ch,
                declare("fanout", dict(PURPOSE)),
                m.ExchangeDeclareOk,
            )
        finally:
            await probe.close()

    async def cleanup(self) -> None:
        """The link is gone for good: its queue and internal exchange go too."""
        if not self.queue:
            return
        up = self.up
        if up is None or not up.is_open:
            return
        with contextlib.suppress(LinkError, TimeoutError):
            await up.disposable_call(m.QueueDelete(queue=self.queue), m.QueueDeleteOk, within=5)
            await up.disposable_call(
                m.ExchangeDelete(exchange=self.internal), m.ExchangeDeleteOk, within=5
            )

    # -- messages -------------------------------------------------------------------------------

    def _deliveries(self, d: Deliveries) -> None:
        upstream = self.upstream
        table: FieldTable = {"uri": self.uri, "exchange": upstream.exchange}
        cluster = self.links.cluster_name()
        for tag, redelivered, key, raw, body in zip(
            d.tags, d.redelivered, d.routing_keys, d.properties, d.bodies, strict=True
        ):
            props = BasicProperties.decode(raw)
            if not should_forward(props.headers, upstream.max_hops, cluster, self.vhost):
                self.drop(tag)
                continue
            entry: FieldTable = {**table, "redelivered": bool(redelivered)}
            if self.upstream_cluster is not None:
                entry["cluster-name"] = self.upstream_cluster
            entry["vhost"] = self.upstream_vhost
            props.headers = prepend_table_header(props.headers, ROUTING_HEADER, entry)
            if not upstream.trust_user_id:
                props.user_id = None
            self.forward(tag, self.resource, key.decode(), props.encode(), body)

    # -- bindings --------------------------------------------------------------------------------

    def _hops(self, arguments: FieldTable) -> int:
        """How many more hops a binding may travel from here (RabbitMQ's
        ``update_binding``); 0: not at all."""
        max_hops = self.upstream.max_hops
        seen = arguments.get(BINDING_HEADER)
        if not isinstance(seen, list) or not seen:
            return max_hops
        first = seen[0]
        previous = first.get("hops") if isinstance(first, dict) else None
        if already_seen(self.upstream_cluster, self.upstream_vhost, seen):
            return 0
        if not isinstance(previous, int):
            return 0
        return min(previous - 1, max_hops)

    def desired_bindings(self) -> dict[tuple[str, str], FieldTable]:
        vhost = self.links.server.broker.vhosts.get(self.vhost)
        exchange = vhost.exchanges.get(self.resource) if vhost is not None else None
        if exchange is None or not self.internal:
            return {}
        suffix = self.internal.rsplit(" ", 1)[-1]
        out: dict[tuple[str, str], FieldTable] = {}
        for _dest, key, args in exchange.kind.bindings():
            arguments: FieldTable = cast("FieldTable", dict(args or {}))
            hops = self._hops(arguments)
            if hops <= 0:
                continue
            # One upstream binding per routing key and arguments: several destinations of
            # one binding need it once; bindings passed on from further downstream differ
            # by their x-bound-from, so each travels on.
            ident = (key, json.dumps(arguments, sort_keys=True, default=str))
            if ident in out:
                continue
            entry: FieldTable = {
                "cluster-name": self.links.cluster_name(),
                "vhost": self.vhost,
                "exchange": f"{self.vhost}:{self.resource} {suffix}",
                "hops": hops,
            }
            out[ident] = prepend_table_header(arguments, BINDING_HEADER, entry)
        return out

    def sync_bindings(self) -> None:
        """Bring the upstream bindings up to date (from the reconciliation; one at a time)."""
        up = self.up
        if up is None or not up.is_open or self.status != "running":
            return
        if self._syncing:
            self._resync = True
            return
        self._syncing = True
        task = asyncio.get_running_loop().create_task(self._sync_task(up))
        self.federation.tasks.add(task)
        task.add_done_callback(self.federation.tasks.discard)

    async def _sync_task(self, up: Connection091) -> None:
        try:
            while True:
                self._resync = False
                try:
                    await self._sync(up)
                except (LinkError, TimeoutError) as exc:
                    log.warning("Federation exchange '%s': binding failed: %s", self.resource, exc)
                    return
                if not self._resync:
                    return
        finally:
            self._syncing = False

    async def _sync(self, up: Connection091) -> None:
        desired = self.desired_bindings()
        source = self.upstream.exchange
        for ident, arguments in desired.items():
            if ident not in self.bound:
                await up.call(
                    self.cmd,
                    m.ExchangeBind(
                        destination=self.internal,
                        source=source,
                        routing_key=ident[0],
                        arguments=arguments,
                    ),
                    m.ExchangeBindOk,
                )
                self.bound[ident] = arguments
        for ident in [i for i in self.bound if i not in desired]:
            arguments = self.bound.pop(ident)
            await up.call(
                self.cmd,
                m.ExchangeUnbind(
                    destination=self.internal,
                    source=source,
                    routing_key=ident[0],
                    arguments=arguments,
                ),
                m.ExchangeUnbindOk,
            )

    # -- what is shown -------------------------------------------------------------------------

    def row(self, node: str) -> dict[str, Any]:
        return {
            "node": node,
            "exchange": self.resource,
            "upstream_exchange": self.upstream.exchange,
            "type": "exchange",
            "vhost": self.vhost,
            "upstream": self.upstream.name,
            "id": self.id,
            **self._status_fields(),
        }
