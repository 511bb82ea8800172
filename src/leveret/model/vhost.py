"""Virtual hosts: they own exchanges, queues and bindings; their ``Router`` routes.

Every check a declaration needs (reserved names, exclusivity) lives here, with RabbitMQ's
reply codes and reply texts, so that each protocol front end gets the same behaviour; what
depends on a queue's type (its arguments, equivalence, policy keys, making the queue) is the
type's (``model/queues/``), found by the ``x-queue-type`` argument. A vhost is its queues'
``QueueHost``: it deletes a queue that retires (``x-expires``, auto-delete) and republishes
dead letters through its router.
"""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING, NamedTuple, cast

from leveret.errors import AccessRefused, NotFound, PreconditionFailed
from leveret.model.exchange import Exchange
from leveret.model.exchanges.delayed import DelayedExchange
from leveret.model.exchanges.lvc import LastValueExchange
from leveret.model.journal import NULL_JOURNAL, Journal
from leveret.model.lvc import LastValueStore
from leveret.model.memory_gauge import MemoryGauge
from leveret.model.policies import (
    Policy,
    effective_definition,
    effective_queue_arguments,
    exchange_alternate,
    select,
)
from leveret.model.queues import Queue, QueueType, type_of
from leveret.model.queues.base import require_equivalent
from leveret.model.queues.delayed import DelayQueue
from leveret.model.queues.stream_log import MemoryStreamBackend, StreamBackend
from leveret.model.router import REPLY_TO, REPLY_TO_PREFIX, Router
from leveret.model.timers import Timers

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from leveret.model.consumer import Source
    from leveret.model.message import Message
    from leveret.model.paging import Pager
    from leveret.model.queues.args import QueueConfig
    from leveret.model.shared_metadata import SharedMetadata

__all__ = [
    "REPLY_TO",
    "REPLY_TO_PREFIX",
    "Declared",
    "Exchange",
    "VirtualHost",
    "new_queue_name",
]

STANDARD_EXCHANGES = (
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
)


def new_queue_name() -> str:
    """A name for a server-named queue (RabbitMQ's ``amq.gen-`` and 128 random bits)."""
    return "amq.gen-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


class Declared(NamedTuple):
    """What a declaration answers: the queue's name and counts (a passive one may name the
    pseudo-queue of direct reply-to, which is no queue)."""

    queue: str
    message_count: int
    consumer_count: int


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
        # The store's own journal under it, whose ``writes`` and ``ok`` a publish that
        # wants a confirm reads (``Broker.attach_journal``).
        self.store_journal: Journal = NULL_JOURNAL
        # Where deep queues page their tails (model/paging.py); None: they do not page.
        self.pager: Pager | None = None
        # Where stream queues keep their logs (the server supplies the file-backed one).
        self.stream_backend: StreamBackend = MemoryStreamBackend()
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        # Queues led by other nodes of a cluster (``queues/remote.py``), by name: found by
        # lookups, declarations and routing as the node's own are, listed apart (a node
        # lists, counts and stores the queues it leads).
        self.remote_queues: dict[str, Queue] = {}
        self.router = Router(self.exchanges, self.queues, self.timers, self.remote_queues)
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
        # A cluster node's metadata store, where the front ends' declarations go before
        # they are answered (model/shared_metadata.py); None on a single node.
        self.shared: SharedMetadata | None = None
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
        queue = self.queues.get(name)
        if queue is None:
            queue = self.remote_queues.get(name)
            if queue is None:
                raise NotFound(f"no queue '{name}' {self._where()}") from None
        self._check_exclusive(queue, owner)
        return queue

    def find_queue(self, name: str) -> Queue | None:
        """Queue ``name``, led here or (a cluster node) elsewhere; None when there is none."""
        queue = self.queues.get(name)
        return queue if queue is not None else self.remote_queues.get(name)

    def add_remote_queue(self, queue: Queue) -> None:
        """Hold ``queue``, led by another node (its record arrived): it replaces any proxy
        of the same name, never a queue led here."""
        old = self.remote_queues.get(queue.name)
        if old is not None:
            self.remove_queue(old)
        self.remote_queues[queue.name] = queue
        self._queue_sources[queue] = set()

    def _check_exclusive(self, queue: Queue, owner: object | None) -> None:
        if queue.exclusive_owner is not None and queue.exclusive_owner is not owner:
            raise queue.locked()

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
            elif isinstance(exchange.kind, LastValueExchange):
                LastValueStore(self, exchange, exchange.kind)
            if self.policies:
                self._apply_exchange_policy(exchange)
            if durable:
                self.journal.exchange_declared(
                    self.name, name, type_name, auto_delete, internal, exchange.arguments
                )
            return exchange
        new_args = arguments or {}
        # Of the arguments, RabbitMQ 3.10.8 compares only alternate-exchange.
        require_equivalent(
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

    def lvc_store(self, exchange: Exchange) -> LastValueStore | None:
        """The kept values of an ``x-lvc`` exchange (None for another type)."""
        kind = exchange.kind
        if isinstance(kind, LastValueExchange) and isinstance(kind.store, LastValueStore):
            return kind.store
        return None

    def _remove_exchange(self, exchange: Exchange) -> None:
        if self.exchanges.get(exchange.name) is not exchange:
            return
        del self.exchanges[exchange.name]
        store = self.delay_store(exchange)
        if store is not None:
            store.drop()  # before the exchange's record: never a store without its exchange
        values = self.lvc_store(exchange)
        if values is not None:
            values.drop()  # the same: the hidden queue goes first
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
        src.kind.validate_binding(routing_key, arguments, "exchange")
        added = src.kind.add_binding(dest, routing_key, arguments)
        dest.sources.add(src)
        if src.durable and dest.durable:
            self.journal.binding_changed(
                True, self.name, source, False, destination, routing_key, arguments
            )
        if added and isinstance(src.kind, LastValueExchange):
            value = src.kind.value(routing_key)
            if value is not None:
                # The plugin routes the last value through the newly bound exchange.
                message = cast("Message", value)
                for queue in self.router.route(dest, message.routing_key, message):
                    queue.enqueue(message)

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
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: Mapping[str, object] | None = None,
        generated_name: str = "",
    ) -> Queue:
        """Declare (or redeclare, equivalently) queue ``name`` of the type its arguments ask
        for. ``generated_name``: the name a server-named queue (``name`` "") gets, made by
        the caller with :func:`new_queue_name` so that it can be checked first (access
        control); by default one is made here."""
        if name == "":
            name = generated_name or new_queue_name()
        elif name.startswith("amq."):
            raise AccessRefused(f"queue name '{name}' contains reserved prefix 'amq.*'")
        existing = self.find_queue(name)
        if existing is not None:
            self._redeclare(existing, owner, durable, exclusive, auto_delete, arguments)
            return existing
        queue_type, policy, operator, config = self._configured(
            name, arguments, durable, exclusive, auto_delete
        )
        queue = queue_type.create(
            self,
            name,
            durable=durable,
            exclusive_owner=owner if exclusive else None,
            auto_delete=auto_delete,
            arguments=arguments,
            config=config,
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

    def _redeclare(
        self,
        queue: Queue,
        owner: object,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: Mapping[str, object] | None,
    ) -> None:
        queue.reachable()
        self._check_exclusive(queue, owner)
        if exclusive != queue.exclusive and (queue.exclusive or owner is not None):
            # RabbitMQ: a different exclusive flag is a lock conflict (405), not an inequivalence.
            raise queue.locked()
        queue.type.check_equivalent(
            queue, durable=durable, auto_delete=auto_delete, arguments=arguments
        )
        if queue.config.expires is not None:
            queue.touch()

    def passive_declare(
        self, name: str, *, owner: object, arguments: Mapping[str, object] | None = None
    ) -> Declared:
        """A passive declaration: the counts of queue ``name`` (404 when there is none, 405
        when another connection holds it exclusively). Its type answers the message count
        (``Queue.lookup``: a stream, the offset ``arguments`` point at); the pseudo-queue of
        direct reply-to exists while its requester does, counted as its one consumer."""
        if name == REPLY_TO or (
            name.startswith(REPLY_TO_PREFIX)
            and name[len(REPLY_TO_PREFIX) :] in self.router.reply_to
        ):
            return Declared(name, 0, 1)
        queue = self.queue(name, owner)
        queue.reachable()
        if queue.config.expires is not None:
            queue.touch()  # RabbitMQ: a passive declare counts as a use too
        return Declared(queue.name, queue.lookup(arguments), queue.consumer_count)

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
        exchange.kind.validate_binding(routing_key, arguments, queue.type.name)
        added = exchange.kind.add_binding(queue, routing_key, arguments)
        self._queue_sources[queue].add(exchange)
        if queue.store_id and exchange.durable:
            self.journal.binding_changed(
                True, self.name, exchange_name, True, queue_name, routing_key, arguments
            )
        if added and isinstance(exchange.kind, LastValueExchange):
            value = exchange.kind.value(routing_key)
            if value is not None:
                queue.enqueue(cast("Message", value))  # the last value, as the plugin hands it

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
        queue = self.find_queue(queue_name)
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
        self,
        name: str,
        *,
        owner: object,
        if_unused: bool = False,
        if_empty: bool = False,
        leader_counts: tuple[int, int] | None = None,
    ) -> int:
        """Delete queue ``name``; its message count. ``leader_counts``: the messages and
        consumers of a queue led by another node, as its leader answered them just now
        (what ``if_unused``, ``if_empty`` and the count are then about)."""
        checked = self.check_delete(
            name,
            owner=owner,
            if_unused=if_unused,
            if_empty=if_empty,
            leader_counts=leader_counts,
        )
        if checked is None:
            return 0  # RabbitMQ: deleting a missing queue succeeds with a count of 0
        queue, messages = checked
        self.remove_queue(queue)
        return messages

    def check_delete(
        self,
        name: str,
        *,
        owner: object,
        if_unused: bool = False,
        if_empty: bool = False,
        leader_counts: tuple[int, int] | None = None,
    ) -> tuple[Queue, int] | None:
        """What ``delete_queue`` checks (``if_unused``, ``if_empty``, exclusivity), without
        deleting: the queue and its message count, or None when there is no such queue. A
        cluster's front end checks so before the deletion goes to the metadata store."""
        queue = self.find_queue(name)
        if queue is None:
            return None
        queue.reachable()
        self._check_exclusive(queue, owner)
        if queue.forwards:
            if leader_counts is None and (if_unused or if_empty):
                # Its counts are its leader's: refused rather than deleting what may be in use.
                raise PreconditionFailed(
                    f"queue '{name}' {self._where()} is led by another node: if-unused and "
                    "if-empty deletions are made through its leader"
                )
            messages, consumers = leader_counts or (0, 0)
        else:
            messages, consumers = queue.message_count, len(queue.consumers)
        if if_unused and consumers:
            raise PreconditionFailed(f"queue '{name}' {self._where()} in use")
        if if_empty and (queue.has_ready() if not queue.forwards else messages):
            raise PreconditionFailed(f"queue '{name}' {self._where()} is not empty")
        return queue, messages

    def remove_queue(self, queue: Queue) -> None:
        """Delete ``queue`` and its bindings; its consumers' owners are told, its browsers
        woken."""
        if self.queues.get(queue.name) is queue:
            del self.queues[queue.name]
        elif self.remote_queues.get(queue.name) is queue:
            del self.remote_queues[queue.name]
        else:
            return
        queue.deleted = True
        for exchange in self._queue_sources.pop(queue, set()):
            exchange.kind.remove_destination(queue)
            self._maybe_auto_delete(exchange)
        queue.on_delete()
        if queue.store_id:
            self.journal.queue_deleted(self.name, queue.name, queue.store_id)
        consumers = list(queue.consumers)
        queue.consumers.clear()
        for consumer in consumers:
            consumer.owner.consumer_removed(consumer)
        if queue.browsers:
            # They see ``deleted`` (a 1.0 copy link detaches, as its consumers' links do).
            queue.wake_browsers()
        if self.on_queue_removed is not None:
            self.on_queue_removed(queue)

    # -- policies (model/policies.py) ---------------------------------------------------

    def configured(
        self,
        name: str,
        arguments: Mapping[str, object],
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
    ) -> QueueConfig:
        """The config a queue ``name`` with ``arguments`` has here, the vhost's policies
        applied (a replicated stream's follower keeps its copy by it: it holds no queue)."""
        return self._configured(name, arguments, durable, exclusive, auto_delete)[3]

    def _configured(
        self,
        name: str,
        arguments: Mapping[str, object] | None,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
    ) -> tuple[QueueType, Policy | None, Policy | None, QueueConfig]:
        """Queue ``name``'s type, policy, operator policy and the config they give with
        its arguments."""
        queue_type = type_of(arguments, queue=name, vhost=self.name)
        config = queue_type.parse(
            arguments,
            queue=name,
            vhost=self.name,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
        )
        if not (self.policies or self.operator_policies):
            return queue_type, None, None, config
        policy, operator, config = self._policy_config(
            queue_type, name, arguments, config, durable, exclusive, auto_delete
        )
        return queue_type, policy, operator, config

    def _policy_config(
        self,
        queue_type: QueueType,
        name: str,
        arguments: Mapping[str, object] | None,
        config: QueueConfig,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
    ) -> tuple[Policy | None, Policy | None, QueueConfig]:
        """The policy and operator policy of queue ``name`` and the config they give with
        its arguments (``config``: the arguments alone)."""
        policy = select(self.policies.values(), name, "queue", queue_type.name)
        operator = select(self.operator_policies.values(), name, "queue", queue_type.name)
        if policy is None and operator is None:
            return None, None, config
        definition = effective_definition(policy, operator)
        merged = effective_queue_arguments(arguments, definition, queue_type.policy_keys)
        effective = queue_type.parse(
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
            base = queue.type.parse(
                queue.arguments,
                queue=queue.name,
                vhost=self.name,
                durable=queue.durable,
                exclusive=queue.exclusive,
                auto_delete=queue.auto_delete,
            )
            policy, operator, config = self._policy_config(
                queue.type,
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
        """A queue has no more reason to exist (x-expires, auto-delete): delete it; an
        auto-delete queue with Qpid's ``qpid.auto_delete_timeout`` goes when that has passed,
        if it is still unused then."""
        if not isinstance(queue, Queue):
            return
        if queue.auto_delete and queue.config.auto_delete_timeout:
            self.remove_later(queue, lambda: self.remove_queue(queue))
            return
        self.remove_queue(queue)

    def remove_later(self, queue: Queue, remove: Callable[[], object]) -> None:
        """Run ``remove`` after the queue's ``auto_delete_timeout`` unless it has a consumer
        or an exclusive owner again by then (Qpid's delayed auto-delete)."""
        delay = queue.config.auto_delete_timeout or 0.0
        self.timers.schedule(self.timers.now + delay, _LateRemoval(queue, remove))

    def dead_letter(
        self, message: Message, reason: str, queue: str, dlx: str, dlrk: str | None
    ) -> None:
        self.router.dead_letter(message, reason, queue, dlx, dlrk)

    def owned_queues(self, owner: object) -> Iterator[Queue]:
        return (q for q in list(self.queues.values()) if q.exclusive_owner is owner)


class _LateRemoval:
    """A delayed auto-delete (``VirtualHost.remove_later``), woken by ``Timers``."""

    __slots__ = ("queue", "remove")

    def __init__(self, queue: Queue, remove: Callable[[], object]) -> None:
        self.queue = queue
        self.remove = remove

    def on_deadline(self, now: float) -> None:
        queue = self.queue
        if queue.deleted or queue.consumers or queue.exclusive_owner is not None:
            return  # used again meanwhile: it stays (its next last consumer starts over)
        self.remove()
