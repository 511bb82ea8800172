"""Rebuild the model from what the store read back, before any client connects.

Runs with the broker's journal still the null one, so nothing is written again; the server
attaches the store afterwards. Order: exchanges, queues with their messages (in their
original order), then bindings (queue and exchange-to-exchange).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from leveret.errors import AMQPError

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.broker import Broker
    from leveret.model.message import Message
    from leveret.store.disk import Recovered

log = logging.getLogger("leveret.store")


def restore(
    broker: Broker,
    recovered: Recovered,
    make_message: Callable[[str, str, bytes, bytes], Message],
) -> None:
    for rec in recovered.exchanges:
        vhost = broker.add_vhost(rec["v"])
        try:
            vhost.declare_exchange(
                rec["n"],
                rec["t"],
                durable=True,
                auto_delete=rec["ad"],
                internal=rec["i"],
                arguments=rec["a"],
            )
        except AMQPError as exc:
            log.error("store: cannot restore exchange '%s': %s", rec["n"], exc.reply_text)
    for q in recovered.queues:
        vhost = broker.add_vhost(q.vhost)
        try:
            queue = vhost.declare_queue(
                q.name, owner=None, durable=True, auto_delete=q.auto_delete, arguments=q.arguments
            )
        except AMQPError as exc:
            log.error("store: cannot restore queue '%s': %s", q.name, exc.reply_text)
            continue
        queue.store_id = q.qid
        for mid, exchange, routing_key, props, body, delivered in q.messages:
            message = make_message(exchange, routing_key, props, body)
            message.store_id = mid
            queue.restore(message, mid, delivered)
    for rec in recovered.bindings:
        vhost = broker.add_vhost(rec["v"])
        try:
            if rec["q"]:
                vhost.bind_queue(rec["d"], rec["s"], rec["k"], rec["a"], owner=None)
            else:
                vhost.bind_exchange(rec["d"], rec["s"], rec["k"], rec["a"])
        except AMQPError as exc:
            log.error(
                "store: cannot restore binding of '%s' to '%s': %s",
                rec["d"],
                rec["s"],
                exc.reply_text,
            )
