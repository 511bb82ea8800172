"""Publishing, in the core's words: one ``Publisher`` per channel or link of any protocol.

``publish`` checks what the core checks of a message (a per-message ``expiration`` must be
valid; a ``reply_to`` of ``amq.rabbitmq.reply-to`` becomes this requester's reply address),
routes it with the vhost's ``Router``, enqueues it, and reports back through the
``PublishSink``: a message no queue took is ``returned`` when the publisher asked for that
(``report_unroutable``; ``require_consumer`` also returns one that no consumer could take at
once), and publisher confirms go out through ``Confirms`` once a publisher asked for them.
In a transaction (``model/transaction.py``) publishes wait for the commit.

``feeds_backlog`` is set when a publish went to a queue whose consumers are falling behind
(``Queue.falling_behind``; a queue led by another node: while the link to it is backed up);
the front end reads and clears it to pace this publisher. ``feeds_far_backlog`` names
that queue besides when it is far behind (``Queue.far_behind``): the shell then stops reading
the publisher's connection for a moment (``Shell.held``).

A queue led by another node (``Queue.forwards``, ``queues/remote.py``) is handed the
message with ``forward``, which answers, when a confirm is wanted, with a completion of the
leader's confirm; the publish's confirm waits for it (``Confirms.published``). When the
link to that leader has a window of publishes it has not handled yet, ``wait`` is set
(``Queue.room``): the shell holds the publisher's input until it is done, as one node's
publisher waits for its turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol

from leveret.errors import AccessRefused, NotFound, PreconditionFailed
from leveret.model.completion import Completion
from leveret.model.confirms import Confirms, ConfirmSink
from leveret.model.message import HINT_EXPIRATION, HINT_REPLY_TO
from leveret.model.queues.features import parse_expiration
from leveret.model.router import REPLY_TO, REPLY_TO_PREFIX
from leveret.model.transaction import Transaction

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.model.queues.base import Queue
    from leveret.model.vhost import VirtualHost

__all__ = ["NO_CONSUMERS", "NO_ROUTE", "PublishSink", "Publisher"]

# Why a message came back to its publisher.
NO_ROUTE: Final = "no_route"
NO_CONSUMERS: Final = "no_consumers"


def _acked(done: Completion[bool]) -> bool:
    return done.error is None and bool(done.result())


class PublishSink(ConfirmSink, Protocol):
    def returned(self, reason: str, message: Message) -> None:
        """``message`` reached no queue (``NO_ROUTE``) or no consumer (``NO_CONSUMERS``)."""
        ...


class Publisher:
    """The publishing side of one channel or link; see the module docstring."""

    def __init__(self, vhost: VirtualHost, sink: PublishSink) -> None:
        self.vhost = vhost
        # The vhost's exchanges and router, read by every publish: held here, as the
        # vhost is an interpreted object (a generic attribute lookup each in the compiled
        # build) and replaces neither.
        self._exchanges = vhost.exchanges
        self._router = vhost.router
        self.sink = sink
        self.confirms: Confirms | None = None
        self.tx: Transaction | None = None
        self.feeds_backlog = False
        self.feeds_far_backlog: Queue | None = None
        # A queue's leader on another node has a window's worth of this node's publishes
        # still to handle: the front end holds this publisher's input until this is done
        # (``Queue.room``; the shell's ``published_by``).
        self.wait: Completion[None] | None = None
        # What the leaders of the queues led elsewhere that the last routed message went to
        # will answer (None: it went to none, or no confirm is wanted).
        self.remote: Completion[bool] | None = None
        # Direct reply-to: this requester's key while it consumes its replies ("" if not).
        self.reply_key = ""
        # Management counters: plain increments, sampled on a timer (management/).
        self.n_publish = 0
        self.n_confirm = 0
        self.n_return_unroutable = 0
        self.n_drop_unroutable = 0

    def check(self, exchange_name: str) -> None:
        """Validate the target before the content arrives (RabbitMQ checks at publish)."""
        exchange = self.vhost.exchange(exchange_name)
        if exchange.internal:
            raise AccessRefused(
                f"cannot publish to internal exchange '{exchange_name}' "
                f"in vhost '{self.vhost.name}'"
            )

    def publish(
        self,
        exchange_name: str,
        routing_key: str,
        message: Message,
        *,
        report_unroutable: bool = False,
        require_consumer: bool = False,
    ) -> None:
        if message.hints & (HINT_EXPIRATION | HINT_REPLY_TO):
            message = self._check_properties(message)
        self.n_publish += 1
        confirms = self.confirms
        if confirms is not None:
            confirms.seq += 1
            self.n_confirm += 1
        tx = self.tx
        if tx is not None:
            self.check(exchange_name)
            tx.publishes.append(
                (exchange_name, routing_key, message, report_unroutable, require_consumer)
            )
            return
        if confirms is None:
            # Nothing to confirm: no need to watch the store's writes.
            self.route(exchange_name, routing_key, message, report_unroutable, require_consumer)
            return
        journal = self.vhost.journal
        writes = journal.writes
        accepted = self.route(
            exchange_name, routing_key, message, report_unroutable, require_consumer
        )
        remote = self.remote
        if remote is None:
            confirms.published(accepted, journal.writes != writes)
        else:
            self.remote = None
            confirms.published(accepted, journal.writes != writes, remote)

    def _check_properties(self, message: Message) -> Message:
        """Validate ``expiration`` and rewrite a direct reply-to ``reply_to`` (RabbitMQ)."""
        properties = message.properties
        if message.hints & HINT_EXPIRATION and properties.expiration is not None:
            parse_expiration(properties.expiration)
        if message.hints & HINT_REPLY_TO and properties.reply_to == REPLY_TO:
            if not self.reply_key:
                raise PreconditionFailed("fast reply consumer does not exist")
            message = message.replace(reply_to=REPLY_TO_PREFIX + self.reply_key)
        return message

    def route(
        self,
        exchange_name: str,
        routing_key: str,
        message: Message,
        report_unroutable: bool,
        require_consumer: bool,
    ) -> bool:
        """Route and enqueue; False when a queue refused the message (reject-publish)."""
        exchange = self._exchanges.get(exchange_name)
        if exchange is None:
            # The exchange went between check and the body: as RabbitMQ, 404.
            raise NotFound(f"no exchange '{exchange_name}' in vhost '{self.vhost.name}'")
        exchange.n_publish_in += 1
        queues, message = self._router.route_publish(exchange, routing_key, message)
        if not queues:
            if report_unroutable:
                self.n_return_unroutable += 1
                self.sink.returned(NO_ROUTE, message)
            else:
                self.n_drop_unroutable += 1
            return True
        exchange.n_publish_out += len(queues)
        if require_consumer:
            queues = [q for q in queues if q.can_deliver_now(message)]
            if not queues:
                self.sink.returned(NO_CONSUMERS, message)
                return True
        accepted = True
        down = 0
        for queue in queues:
            if queue.forwards:
                if queue.available():
                    self._forward(queue, message)
                else:
                    down += 1
            elif not queue.enqueue(message):
                accepted = False
            elif queue.gate is not None and (self.confirms is not None or self.tx is not None):
                # A replicated queue: confirmed once its in-sync followers have it too.
                done = queue.gate()
                if done is not None:
                    self._join(done)
            if (queue.consumers or queue.forwards) and queue.falling_behind():
                self.feeds_backlog = True
                if queue.far_behind():
                    self.feeds_far_backlog = queue
        if down and down == len(queues) and report_unroutable:
            # Every queue it went to is led by a node that is down: RabbitMQ 3.10 returns it
            # as unroutable (and confirms it).
            self.n_return_unroutable += 1
            self.sink.returned(NO_ROUTE, message)
        return accepted

    def _forward(self, queue: Queue, message: Message) -> None:
        """Hand ``message`` to ``queue``'s leader on another node; its confirm (if one is
        wanted) joins ``remote``."""
        done = queue.forward(message, self.confirms is not None or self.tx is not None)
        if done is not None:
            self._join(done)
        if self.wait is None:
            self.wait = queue.room()

    def _join(self, done: Completion[bool]) -> None:
        """The routed messages' confirm also waits for ``done``."""
        previous = self.remote
        if previous is None:
            self.remote = done
            return
        both: Completion[bool] = Completion()

        def joined(_: Completion[bool]) -> None:
            if previous.done and done.done:
                both.resolve(_acked(previous) and _acked(done))

        previous.on_done(joined)
        done.on_done(joined)
        self.remote = both

    def take_remote(self) -> Completion[bool] | None:
        """What the leaders of the queues led elsewhere that the messages routed since the
        last call went to will answer (a transaction's commit waits for it)."""
        remote, self.remote = self.remote, None
        return remote

    def flush_confirms(self) -> None:
        if self.confirms is not None:
            self.confirms.flush()

    def select_confirms(self) -> None:
        if self.tx is not None:
            raise PreconditionFailed("cannot switch from tx to confirm mode")
        if self.confirms is None:
            self.confirms = Confirms(self.vhost, self.sink)

    def select_tx(self) -> Transaction:
        if self.confirms is not None:
            raise PreconditionFailed("cannot switch from confirm to tx mode")
        if self.tx is None:
            self.tx = Transaction()
        return self.tx

    def close(self) -> None:
        """The channel or link went: drop what a transaction held and pending confirms."""
        if self.confirms is not None:
            self.confirms.closed = True
        if self.tx is not None:
            self.tx.publishes.clear()
