"""The one router of a virtual host: which queues a message goes to.

Everything that decides where a message goes lives here, whichever protocol published it
and whether a client or the broker itself (dead-lettering) sends it: the default exchange,
exchange types (``model/exchanges/``), exchange-to-exchange bindings and alternate exchanges
(each exchange visited at most once per message), sender-selected distribution (``CC`` and
``BCC`` headers, RabbitMQ's extension: ``BCC`` is removed from what is delivered), direct
reply-to (``amq.rabbitmq.reply-to.<key>`` on the default exchange goes straight to the
requester that holds the key), and the republishing of dead letters with RabbitMQ's cycle
rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol

from leveret.model import dead_letter as dl
from leveret.model.exchange import Exchange
from leveret.model.message import HINT_HEADERS, HINT_PLAIN_HEADERS
from leveret.model.queues.base import Queue

if TYPE_CHECKING:
    from collections.abc import Collection

    from leveret.model.message import Message
    from leveret.model.timers import Timers

# Direct reply-to: the pseudo-queue a requester consumes from, and its per-requester names.
REPLY_TO = "amq.rabbitmq.reply-to"
REPLY_TO_PREFIX: Final = REPLY_TO + "."

_NO_QUEUES: Final[list[Queue]] = []


class ReplyTarget(Protocol):
    """A requester of direct reply-to: replies published to its key go straight to it."""

    def deliver_reply(self, message: Message) -> None: ...


class Router:
    """Routes messages over the exchanges and queues of one vhost (shared dicts)."""

    def __init__(
        self,
        exchanges: dict[str, Exchange],
        queues: dict[str, Queue],
        timers: Timers,
        remote: dict[str, Queue] | None = None,
    ) -> None:
        self.exchanges = exchanges
        self.queues = queues
        # Queues led by other nodes (a cluster node's vhost): the default exchange's too.
        self.remote: dict[str, Queue] = remote if remote is not None else {}
        self.timers = timers
        # Direct reply-to: the key of ``amq.rabbitmq.reply-to.<key>`` -> its requester.
        self.reply_to: dict[str, ReplyTarget] = {}

    def route(self, exchange: Exchange, routing_key: str, message: Message) -> list[Queue]:
        """The queues ``message`` goes to, each once; [] when unroutable."""
        if exchange.name == "":
            queue = self.queues.get(routing_key)
            if queue is None:
                queue = self.remote.get(routing_key)
                if queue is None:
                    return _NO_QUEUES
            return [queue]
        kind = exchange.kind
        if kind.NEEDS_MESSAGE:
            destinations = kind.route_message(routing_key, message)
        else:
            destinations = kind.route(routing_key, None)
        if (
            len(destinations) == 1
            and exchange.alternate is None
            and isinstance(first := next(iter(destinations)), Queue)
        ):
            return [first]
        return self._route_graph(exchange, routing_key, message, destinations)

    def _route_graph(
        self,
        start: Exchange,
        routing_key: str,
        message: Message,
        first: Collection[object] | None = None,
    ) -> list[Queue]:
        """Every queue reachable from ``start``; ``first``: what ``start`` routed to,
        already asked (an exchange type is asked once per message: some keep it)."""
        queues: dict[Queue, None] = {}
        seen: set[Exchange] = set()
        pending = [start]
        while pending:
            exchange = pending.pop()
            if exchange in seen:
                continue
            seen.add(exchange)
            kind = exchange.kind
            if first is not None and exchange is start:
                destinations = first
            elif kind.NEEDS_MESSAGE:
                destinations = kind.route_message(routing_key, message)
            else:
                destinations = kind.route(routing_key, None)
            if not destinations and exchange.alternate is not None:
                alternate = self.exchanges.get(exchange.alternate)
                if alternate is not None:
                    pending.append(alternate)
                continue
            for destination in destinations:
                if isinstance(destination, Queue):
                    queues[destination] = None
                elif isinstance(destination, Exchange):
                    pending.append(destination)
        return list(queues)

    def route_publish(
        self, exchange: Exchange, routing_key: str, message: Message
    ) -> tuple[list[Queue], Message]:
        """Route a published message: direct reply-to first, then ``CC``/``BCC`` if the
        message has headers. Returns the queues and the message to enqueue (``BCC``
        removed); a reply is handed to its requester here and routes to no queue."""
        if not exchange.name and routing_key.startswith(REPLY_TO_PREFIX):
            requester = self.reply_to.get(routing_key[len(REPLY_TO_PREFIX) :])
            if requester is not None:
                requester.deliver_reply(message)  # at most once; dropped once it has gone
            return _NO_QUEUES, message
        if not message.hints & HINT_HEADERS or message.hints & HINT_PLAIN_HEADERS:
            return self.route(exchange, routing_key, message), message
        headers = message.headers or {}
        if "CC" not in headers and "BCC" not in headers:
            return self.route(exchange, routing_key, message), message
        keys = [routing_key]
        for name in ("CC", "BCC"):
            values = headers.get(name)
            if isinstance(values, list):
                for value in values:
                    if isinstance(value, bytes):
                        value = value.decode(errors="replace")
                    if isinstance(value, str):
                        keys.append(value)
        if "BCC" in headers:
            message = message.replace(headers={k: v for k, v in headers.items() if k != "BCC"})
        return self._route_keys(exchange, keys, message), message

    def _route_keys(self, exchange: Exchange, keys: list[str], message: Message) -> list[Queue]:
        queues: dict[Queue, None] = {}
        for key in keys:
            for queue in self.route(exchange, key, message):
                queues[queue] = None
        return list(queues)

    def dead_letter(
        self, message: Message, reason: str, queue: str, dlx: str, dlrk: str | None
    ) -> None:
        """Republish ``message``, which left ``queue`` for ``reason``, to ``dlx``."""
        exchange = self.exchanges.get(dlx)
        if exchange is None:
            return  # RabbitMQ: a missing dead-letter exchange drops the message
        keys = [dlrk] if dlrk is not None else dl.routing_keys(message)
        copy = dl.dead_lettered_copy(message, reason, queue, dlx, dlrk, self.timers.wall)
        targets = self._route_keys(exchange, keys, copy)
        if reason != dl.REJECTED:
            deaths = (copy.headers or {}).get("x-death")
            if isinstance(deaths, list):
                targets = [t for t in targets if not dl.is_cycle(t.name, deaths)]
        for target in targets:
            target.enqueue(copy)
