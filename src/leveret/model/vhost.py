"""Virtual hosts: they own exchanges, queues and bindings; their ``Router`` routes.

Every check a declaration needs (reserved names, equivalence, exclusivity) lives here, with
RabbitMQ's reply codes and reply texts, so that each protocol front end gets the same
behaviour. A vhost is its queues' ``QueueHost``: it deletes a queue that retires
(``x-expires``, auto-delete) and republishes dead letters through its router.
"""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING

from leveret.errors import AccessRefused, NotFound, PreconditionFailed, ResourceLocked
from leveret.model.delayed import DelayQueue
from leveret.model.exchange import Exchange
from leveret.model.exchanges.base import freeze
from leveret.model.exchanges.delayed import DelayedExchange
from leveret.model.journal import NULL_JOURNAL, Journal
from leveret.model.memory_gauge import MemoryGauge
from leveret.model.policies import (
    Policy,
    effective_definition,
    effective_queue_arguments,
    exchange_alternate,
    select,
)
from leveret.model.queue import Queue
from leveret.model.queue_args import QueueConfig, parse_queue_args
from leveret.model.router import REPLY_TO, REPLY_TO_PREFIX, Router
from leveret.model.stream import MemoryStreamBackend, StreamBackend, StreamQueue
from leveret.model.timers import Timers

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from leveret.model.consumer import Source
    from leveret.model.message import Message
    from leveret.model.paging import Pager

__all__ = ["REPLY_TO", "REPLY_TO_PREFIX", "Exchange", "VirtualHost", "new_queue_name"]

STANDARD_EXCHANGES = (
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
)

# The queue arguments RabbitMQ compares on redeclaration; others may differ freely.
EQUIVALENT_QUEUE_ARGS = (
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-type",
    "x-single-active-consumer",
    "x-delivery-limit",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
)


def new_queue_name() -> str:
    """A name for a server-named queue (RabbitMQ's ``amq.gen-`` and 128 random bits)."""
    return "amq.gen-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


def _fmt(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return "none" if value is None else str(value)


def _require_equivalent(what: str, pairs: list[tuple[str, object, object]]) -> None:
    """406 naming the first (name, received, current) pair that differs. Values compare
    with their types, as RabbitMQ's do (x-message-ttl 1000 is not 1000.0; integers of
    any width are one type)."""
    for field, got, have in pairs:
        if got != have or freeze(got) != freeze(have):
            raise PreconditionFailed(
                f"inequivalent arg '{field}' {what}: "
                f"received '{_fmt(got)}' but current is '{_fmt(have)}'"
            )


class VirtualHost:
    """One namespace of exchanges and queues."""

    def __init__(
        self, name: str, gauge: MemoryGauge | None = None, timers: Timers | None = None
    ) -> None:
        self.name = name
        self.gauge = gauge if gauge is not None else MemoryGauge()
        self.timers = timers if timers is not None else Timers()
        # Where durable entities and persistent messages are written (see model.journal).
        self.journal: Journal = NULL_JOURNAL
        # Where deep queues page their tails (model/paging.py); None: they do not page.
        self.pager: Pager | None = None
        # Where stream queues keep their logs (the server supplies the file-backed one).
        self.stream_backend: StreamBackend = MemoryStreamBackend()
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        self.router = Router(self.exchanges, self.queues, self.timers)
        # Exchanges each queue is bound from, so deleting a queue finds its bindings.
        self._queue_sources: dict[Queue, set[Exchange]] = {}
        # Policies and operator policies by name (model/policies.py), applied live.
        self.policies: dict[str, Policy] = {}
        self.operator_policies: dict[str, Policy] = {}
        # Whether an auto-delete exchange goes when its last binding does. A cluster node
        # turns it off: there the bindings of an exchange are not all in one node's model,
        # and the node that removes the last one in etcd deletes the exchange there.
        self.auto_delete_exchanges = True
        # Told of every queue removed (deleted, retired, its connection gone): a cluster
        # node removes the queue's record from etcd when it led it.
        self.on_queue_removed: Callable[[Queue], None] | None = None
        self.exchanges[""] = Exchange("", "direct", durable=True)
        for name_, type_name in STANDARD_EXCHANGES:
            self.exchanges[name_] = Exchange(name_, type_name, durable=True)

    def __repr__(self) -> str:
        return f"VirtualHost({self.name!r})"

    # -- lookups -------------------------------------------------------------------------

    def _where(self) -> str:
        return f"in vhost '{self.name}'"

    def exchange(self, name: str) -> Exchange:
        try:
            return self.exchanges[name]
        except KeyError:
            raise NotFound(f"no exchange '{name}' {self._where()}") from None

    def queue(self, name: str, owner: object | None = None) -> Queue:
        """The queue ``name``, checking exclusivity against ``owner``."""
        try:
            queue = self.queues[name]
        except KeyError:
            raise NotFound(f"no queue '{name}' {self._where()}") from None
        self._check_exclusive(queue, owner)
        return queue

    def _check_exclusive(self, queue: Queue, owner: object | None) -> None:
        if queue.exclusive_owner is not None and queue.exclusive_owner is not owner:
            raise ResourceLocked(
                f"cannot obtain exclusive access to locked queue '{queue.name}' {self._where()}. "
                "It could be originally declared on another connection or the exclusive "
                "property value does not match that of the original declaration."
            )

    # -- exchanges -----------------------------------------------------------------------

    def declare_exchange(
        self,
        name: str,
        type_name: str,
        *,
        passive: bool = False,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Mapping[str, object] | None = None,
    ) -> Exchange:
        if passive:
            if name == "":
                # RabbitMQ 3.10.8 refuses even a passive declare of the default exchange.
                raise AccessRefused("operation not permitted on the default exchange")
            return self.exchange(name)
        existing = self.exchanges.get(name)
        if name == "" or (name.startswith("amq.") and existing is None):
            # An equivalent redeclaration of a predeclared amq.* exchange is fine (spec).
            raise AccessRefused(
                f"exchange name '{name}' contains reserved prefix 'amq.*'"
                if name
                else "operation not permitted on the default exchange"
            )
        if existing is None:
            exchange = Exchange(
                name,
                type_name,
                durable=durable,
                auto_delete=auto_delete,
                internal=internal,
                arguments=arguments,
            )
            self.exchanges[name] = exchange
            if isinstance(exchange.kind, DelayedExchange):
                exchange.kind.attach(DelayQueue(self, exchange))
            if self.policies:
                self._apply_exchange_policy(exchange)
            if durable:
                self.journal.exchange_declared(
                    self.name, name, type_name, auto_delete, internal, exchange.arguments
                )
            return exchange
        new_args = arguments or {}
        # Of the arguments, RabbitMQ 3.10.8 compares only alternate-exchange.
        _require_equivalent(
            f"for exchange '{name}' {self._where()}",
            [
                ("type", type_name, existing.type_name),
                ("durable", durable, existing.durable),
                ("auto_delete", auto_delete, existing.auto_delete),
                ("internal", internal, existing.internal),
                (
                    "alternate-exchange",
                    new_args.get("alternate-exchange"),
                    existing.arguments.get("alternate-exchange"),
                ),
            ],
        )
        return existing

    def delete_exchange(self, name: str, *, if_unused: bool = False) -> None:
        if name == "" or name.startswith("amq."):
            raise AccessRefused(
                f"operation not permitted on exchange '{name}'"
                if name
                else "operation not permitted on the default exchange"
            )
        exchange = self.exchanges.get(name)
        if exchange is None:
            return  # RabbitMQ: deleting a missing exchange succeeds
        if if_unused and len(exchange.kind):
            raise PreconditionFailed(f"exchange '{name}' {self._where()} in use")
        self._remove_exchange(exchange)

    def delay_store(self, exchange: Exchange) -> DelayQueue | None:
        """The pending messages of a delayed-message exchange (None for another type)."""
        kind = exchange.kind
        if isinstance(kind, DelayedExchange) and isinstance(kind.store, DelayQueue):
            return kind.store
        return None

    def _remove_exchange(self, exchange: Exchange) -> None:
        if self.exchanges.get(exchange.name) is not exchange:
            return
        del self.exchanges[exchange.name]
        store = self.delay_store(exchange)
        if store is not None:
            store.drop()  # before the exchange's record: never a store without its exchange
        if exchange.durable:
            self.journal.exchange_deleted(self.name, exchange.name)
        for destination, _key, _args in list(exchange.kind.bindings()):
            if isinstance(destination, Queue):
                self._queue_sources.get(destination, set()).discard(exchange)
            elif isinstance(destination, Exchange):
                destination.sources.discard(exchange)
        for source in list(exchange.sources):
            source.kind.remove_destination(exchange)
            self._maybe_auto_delete(source)
        exchange.sources.clear()

    def _maybe_auto_delete(self, exchange: Exchange) -> None:
        if exchange.auto_delete and self.auto_delete_exchanges and not len(exchange.kind):
            self._remove_exchange(exchange)

    def _bindable_source(self, name: str) -> Exchange:
        if name == "":
            raise AccessRefused("operation not permitted on the default exchange")
        return self.exchange(name)

    def bind_exchange(
        self, destination: str, source: str, routing_key: str, arguments: Mapping[str, object]
    ) -> None:
        dest = self._bindable_source(destination)
        src = self._bindable_source(source)
        src.kind.validate_binding(routing_key, arguments)
        src.kind.add_binding(dest, routing_key, arguments)
        dest.sources.add(src)
        if src.durable and dest.durable:
            self.journal.binding_changed(
                True, self.name, source, False, destination, routing_key, arguments
            )

    def unbind_exchange(
        self, destination: str, source: str, routing_key: str, arguments: Mapping[str, object]
    ) -> None:
        if "" in (destination, source):
            raise AccessRefused("operation not permitted on the default exchange")
        dest, src = self.exchanges.get(destination), self.exchanges.get(source)
        if dest is None or src is None:
            return  # RabbitMQ: removing a binding that cannot exist succeeds
        src.kind.remove_binding(dest, routing_key, arguments)
        if src.durable and dest.durable:
            self.journal.binding_changed(
                False, self.name, source, False, destination, routing_key, arguments
            )
        if not src.kind.has_bindings_to(dest):
            dest.sources.discard(src)
        self._maybe_auto_delete(src)

    # -- queues --------------------------------------------------------------------------

    def declare_queue(
        self,
        name: str,
        *,
        owner: object,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: Mapping[str, object] | None = None,
        generated_name: str = "",
    ) -> Queue:
        """``generated_name``: the name a server-named queue (``name`` "") gets, made by
        the caller with :func:`new_queue_name` so that it can be checked first (access
        control); by default one is made here."""
        if passive:
            if name == REPLY_TO or (
                name.startswith(REPLY_TO_PREFIX)
                and name[len(REPLY_TO_PREFIX) :] in self.router.reply_to
            ):
                return Queue(self.name, name)  # a pseudo-queue: exists while its requester does
            queue = self.queue(name, owner)
            if queue.config.expires is not None:
                queue.touch()  # RabbitMQ: a passive declare counts as a use too
            return queue
        if name == "":
            name = generated_name or new_queue_name()
        elif name.startswith("amq."):
            raise AccessRefused(f"queue name '{name}' contains reserved prefix 'amq.*'")
        existing = self.queues.get(name)
        if existing is None:
            config = parse_queue_args(
                arguments,
                queue=name,
                vhost=self.name,
                durable=durable,
                exclusive=exclusive,
                auto_delete=auto_delete,
            )
            policy = operator = None
            if self.policies or self.operator_policies:
                policy, operator, config = self._policy_config(
                    name, arguments, config, durable, exclusive, auto_delete
                )
            if config.stream:
                queue = StreamQueue(
                    self.name,
                    name,
                    backend=self.stream_backend,
                    arguments=arguments,
                    config=config,
                    host=self,
                    timers=self.timers,
                )
            else:
                queue = Queue(
                    self.name,
                    name,
                    durable=durable,
                    exclusive_owner=owner if exclusive else None,
                    auto_delete=auto_delete,
                    arguments=arguments,
                    gauge=self.gauge,
                    config=config,
                    host=self,
                    timers=self.timers,
                )
            if policy is not None or operator is not None:
                queue.policy = policy.name if policy is not None else None
                queue.operator_policy = operator.name if operator is not None else None
                queue.policy_definition = effective_definition(policy, operator)
            self.queues[name] = queue
            self._queue_sources[queue] = set()
            queue.journal = self.journal
            queue.pager = self.pager
            if durable and not exclusive:
                # Exclusive queues go with their connection, so never survive a restart.
                queue.store_id = self.journal.queue_declared(
                    self.name, name, auto_delete, queue.arguments
                )
            return queue
        self._check_exclusive(existing, owner)
        if exclusive != existing.exclusive:
            # RabbitMQ: a different exclusive flag is a lock conflict (405), not an inequivalence.
            self._check_exclusive(existing, object())
            self._check_exclusive(Queue(self.name, name, exclusive_owner=owner), None)
        new_args = arguments or {}
        _require_equivalent(
            f"for queue '{name}' {self._where()}",
            [
                ("durable", durable, existing.durable),
                ("auto_delete", auto_delete, existing.auto_delete),
            ]
            + [
                (key, new_args.get(key), existing.arguments.get(key))
                for key in EQUIVALENT_QUEUE_ARGS
            ],
        )
        if existing.config.expires is not None:
            existing.touch()
        return existing

    def bind_queue(
        self,
        queue_name: str,
        exchange_name: str,
        routing_key: str,
        arguments: Mapping[str, object],
        *,
        owner: object,
    ) -> None:
        queue = self.queue(queue_name, owner)
        exchange = self._bindable_source(exchange_name)
        exchange.kind.validate_binding(routing_key, arguments)
        exchange.kind.add_binding(queue, routing_key, arguments)
        self._queue_sources[queue].add(exchange)
        if queue.store_id and exchange.durable:
            self.journal.binding_changed(
                True, self.name, exchange_name, True, queue_name, routing_key, arguments
            )

    def unbind_queue(
        self,
        queue_name: str,
        exchange_name: str,
        routing_key: str,
        arguments: Mapping[str, object],
        *,
        owner: object,
    ) -> None:
        if exchange_name == "":
            raise AccessRefused("operation not permitted on the default exchange")
        queue = self.queues.get(queue_name)
        exchange = self.exchanges.get(exchange_name)
        if queue is None or exchange is None:
            return  # RabbitMQ: removing a binding that cannot exist succeeds
        self._check_exclusive(queue, owner)
        exchange.kind.remove_binding(queue, routing_key, arguments)
        if queue.store_id and exchange.durable:
            self.journal.binding_changed(
                False, self.name, exchange_name, True, queue_name, routing_key, arguments
            )
        if not exchange.kind.has_bindings_to(queue):
            self._queue_sources[queue].discard(exchange)
        self._maybe_auto_delete(exchange)

    def purge_queue(self, name: str, *, owner: object) -> int:
        return self.queue(name, owner).purge()

    def delete_queue(
        self, name: str, *, owner: object, if_unused: bool = False, if_empty: bool = False
    ) -> int:
        queue = self.queues.get(name)
        if queue is None:
            return 0  # RabbitMQ: deleting a missing queue succeeds with a count of 0
        self._check_exclusive(queue, owner)
        if if_unused and queue.consumers:
            raise PreconditionFailed(f"queue '{name}' {self._where()} in use")
        if if_empty and queue.ready:
            raise PreconditionFailed(f"queue '{name}' {self._where()} is not empty")
        count = queue.message_count
        self.remove_queue(queue)
        return count

    def remove_queue(self, queue: Queue) -> None:
        """Delete ``queue`` and its bindings; its consumers' owners are told."""
        if self.queues.get(queue.name) is not queue:
            return
        del self.queues[queue.name]
        queue.deleted = True
        for exchange in self._queue_sources.pop(queue, set()):
            exchange.kind.remove_destination(queue)
            self._maybe_auto_delete(exchange)
        queue.purge()
        if queue.store_id:
            self.journal.queue_deleted(self.name, queue.name, queue.store_id)
        if isinstance(queue, StreamQueue):
            queue.destroy()
        consumers = list(queue.consumers)
        queue.consumers.clear()
        for consumer in consumers:
            consumer.owner.consumer_removed(consumer)
        if self.on_queue_removed is not None:
            self.on_queue_removed(queue)

    # -- policies (model/policies.py) ---------------------------------------------------

    def _policy_config(
        self,
        name: str,
        arguments: Mapping[str, object] | None,
        config: QueueConfig,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
    ) -> tuple[Policy | None, Policy | None, QueueConfig]:
        """The policy and operator policy of queue ``name`` and the config they give with
        its arguments (``config``: the arguments alone)."""
        queue_type = config.queue_type
        policy = select(self.policies.values(), name, "queue", queue_type)
        operator = select(self.operator_policies.values(), name, "queue", queue_type)
        if policy is None and operator is None:
            return None, None, config
        definition = effective_definition(policy, operator)
        merged = effective_queue_arguments(arguments, definition, queue_type)
        effective = parse_queue_args(
            merged,
            queue=name,
            vhost=self.name,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
        )
        return policy, operator, effective

    def _apply_exchange_policy(self, exchange: Exchange) -> None:
        policy = select(self.policies.values(), exchange.name, "exchange")
        exchange.policy = policy.name if policy is not None else None
        definition = policy.definition if policy is not None else {}
        exchange.alternate = exchange_alternate(exchange.arguments, definition)

    def apply_policies(self) -> None:
        """Apply the current policies to every queue and exchange (after a change)."""
        for exchange in self.exchanges.values():
            if exchange.name and not exchange.name.startswith("amq."):
                self._apply_exchange_policy(exchange)
        for queue in list(self.queues.values()):
            base = parse_queue_args(
                queue.arguments,
                queue=queue.name,
                vhost=self.name,
                durable=queue.durable,
                exclusive=queue.exclusive,
                auto_delete=queue.auto_delete,
            )
            policy, operator, config = self._policy_config(
                queue.name,
                queue.arguments,
                base,
                queue.durable,
                queue.exclusive,
                queue.auto_delete,
            )
            queue.policy = policy.name if policy is not None else None
            queue.operator_policy = operator.name if operator is not None else None
            queue.policy_definition = effective_definition(policy, operator)
            if config != queue.config:
                queue.reconfigure(config)

    # -- QueueHost -----------------------------------------------------------------------

    def retire(self, queue: Source) -> None:
        """A queue has no more reason to exist (x-expires, auto-delete): delete it."""
        if isinstance(queue, Queue):
            self.remove_queue(queue)

    def dead_letter(
        self, message: Message, reason: str, queue: str, dlx: str, dlrk: str | None
    ) -> None:
        self.router.dead_letter(message, reason, queue, dlx, dlrk)

    def owned_queues(self, owner: object) -> Iterator[Queue]:
        return (q for q in list(self.queues.values()) if q.exclusive_owner is owner)
