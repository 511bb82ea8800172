"""A federated queue's link to one upstream (RabbitMQ's ``rabbit_federation_queue_link``
and the queue decorator's run/pause rule; see ``federation.py``).

The upstream queue (``queue`` in the upstream's definition, else the same name) is declared
as the downstream one if it is missing. The link consumes it, with ``x-priority`` -1 and the
upstream's consumer tag, only while the downstream queue is empty and has a consumer of
priority 0 or more with room for a message (credit); otherwise the consumer is cancelled.
That is looked at every ``CHECK_EVERY`` seconds (the model tells no one when its consumers
fill up) and after each batch forwarded. Forwarded messages go to the downstream queue
through the default exchange, with ``x-received-from`` (counting visits per upstream) and,
the first time, ``x-original-exchange`` and ``x-original-routing-key``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, ClassVar

from leveret.links.amqp091 import LinkError
from leveret.links.federation_link import FederationLink
from leveret.links.messages import prepend_table_header
from leveret.model.exchanges.federation_upstream import ROUTING_HEADER
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp091.fieldtable import Long

if TYPE_CHECKING:
    from leveret.links.amqp091 import Connection091
    from leveret.links.uri import Endpoint
    from leveret.protocol.amqp091.client import Deliveries
    from leveret.protocol.amqp091.fieldtable import FieldTable

__all__ = ["QueueLink", "update_headers"]

log = logging.getLogger("leveret.links")


def update_headers(
    headers: FieldTable | None,
    table: FieldTable,
    redelivered: bool,
    exchange: str,
    routing_key: str,
) -> FieldTable:
    """RabbitMQ's queue-link ``update_headers``: the visit count of this upstream goes up by
    one, the original exchange and key are kept the first time, ``CC`` is renamed."""
    out: dict[str, Any] = dict(headers or {})
    been = out.get(ROUTING_HEADER)
    count = 0
    if isinstance(been, list):
        kept = []
        for entry in been:
            if (
                isinstance(entry, dict)
                and entry.get("uri") == table.get("uri")
                and entry.get("queue") == table.get("queue")
            ):
                visits = entry.get("visit-count")
                count = visits if isinstance(visits, int) else 0
            else:
                kept.append(entry)
        out[ROUTING_HEADER] = kept
    else:
        out.pop(ROUTING_HEADER, None)
        out["x-original-exchange"] = exchange
        out["x-original-routing-key"] = routing_key
    if "CC" in out:
        out["x-original-cc"] = out.pop("CC")
    entry_: FieldTable = {**table, "redelivered": redelivered, "visit-count": Long(count + 1)}
    return prepend_table_header(out, ROUTING_HEADER, entry_)


class QueueLink(FederationLink):
    kind = "queue"
    CHECK_EVERY: ClassVar[float] = 0.05

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.consuming = False
        self._switching = False

    async def _run(self, up: Connection091, down: Connection091, endpoint: Endpoint) -> None:
        upstream = self.upstream
        capabilities = up.server_properties.get("capabilities")
        if (
            not isinstance(capabilities, dict)
            or capabilities.get("consumer_priorities") is not True
        ):
            raise LinkError("upstream lacks consumer priorities")
        queue = self._queue()
        if queue is None:
            raise LinkError(f"queue '{self.resource}' in vhost '{self.vhost}' not found")
        try:
            await up.disposable_call(
                m.QueueDeclare(queue=upstream.queue, passive=True), m.QueueDeclareOk
            )
        except LinkError as exc:
            if exc.code != 404 or up.error is not None:
                raise
            await up.call(
                self.ch,
                m.QueueDeclare(
                    queue=upstream.queue,
                    durable=queue.durable,
                    auto_delete=queue.auto_delete,
                    arguments=dict(queue.arguments),
                ),
                m.QueueDeclareOk,
            )
        if upstream.ack_mode != "no-ack":
            await up.call(self.ch, m.BasicQos(prefetch_count=upstream.prefetch), m.BasicQosOk)
        self.consuming = False
        watcher = asyncio.get_running_loop().create_task(self._watch(up))
        try:
            await self._wait(up, down)
        finally:
            watcher.cancel()

    def _queue(self) -> Any:
        vhost = self.links.server.broker.vhosts.get(self.vhost)
        return vhost.queues.get(self.resource) if vhost is not None else None

    def should_run(self) -> bool:
        """The downstream queue is empty and a consumer of priority >= 0 has room."""
        queue = self._queue()
        if queue is None or queue.message_count:
            return False
        return any(c.priority >= 0 and c.credit > 0 for c in queue.consumers)

    async def _watch(self, up: Connection091) -> None:
        while up.is_open:
            await self._switch(up)
            await asyncio.sleep(self.CHECK_EVERY)

    async def _switch(self, up: Connection091) -> None:
        run = self.should_run()
        if run == self.consuming or self._switching:
            return
        self._switching = True
        upstream = self.upstream
        try:
            if run:
                await up.call(
                    self.ch,
                    m.BasicConsume(
                        queue=upstream.queue,
                        consumer_tag=upstream.consumer_tag,
                        no_ack=upstream.ack_mode == "no-ack",
                        arguments={"x-priority": -1},
                    ),
                    m.BasicConsumeOk,
                )
            else:
                await up.call(
                    self.ch, m.BasicCancel(consumer_tag=upstream.consumer_tag), m.BasicCancelOk
                )
            self.consuming = run
        except (LinkError, TimeoutError):
            pass  # the connection's failure ends the run
        finally:
            self._switching = False

    def _cancelled(self, channel: int, tag: str) -> None:
        raise LinkError("received a 'basic.cancel'")

    def _deliveries(self, d: Deliveries) -> None:
        table: FieldTable = {"uri": self.uri, "queue": self.upstream.queue}
        trust = self.upstream.trust_user_id
        for tag, redelivered, exchange, key, raw, body in zip(
            d.tags, d.redelivered, d.exchanges, d.routing_keys, d.properties, d.bodies, strict=True
        ):
            props = BasicProperties.decode(raw)
            props.headers = update_headers(
                props.headers, table, bool(redelivered), exchange.decode(), key.decode()
            )
            if not trust:
                props.user_id = None
            self.forward(tag, "", self.resource, props.encode(), body)

    def row(self, node: str) -> dict[str, Any]:
        return {
            "node": node,
            "queue": self.resource,
            "upstream_queue": self.upstream.queue,
            "consumer_tag": self.upstream.consumer_tag,
            "type": "queue",
            "vhost": self.vhost,
            "upstream": self.upstream.name,
            "id": self.id,
            **self._status_fields(),
        }
