"""The queue-type interface: what each type of queue declares about itself (``QueueType``),
what every queue offers the rest of the broker (``Queue``), what a queue asks of its vhost
(``QueueHost``) and where it writes what it holds (``QueueStore``).

Theory of operation (RabbitMQ's ``rabbit_queue_type`` behaviour, in aioquic's shape: one base,
one module per implementation, a registry by name). A type is one object in ``TYPES``, keyed by
its ``x-queue-type`` name. At declare it validates the arguments (what it takes, refuses and
requires, ``parse``), compares a redeclaration (``check_equivalent``), names the policy keys
that apply to it and makes the queue (``create``). It also declares its capabilities, read by
front ends before they call an operation the type does not have, so that each refuses it in
its own protocol's words (``gets``, ``purges``, ``rejects``, ``removes``, ``auto_settle``,
``needs_credit``, ``offsets``). The vhost never names a concrete type, and no front end asks
which class a queue is.

A queue is an instance of a subclass of ``Queue``. Its state changes only through the calls of
this interface, each named for the operation a replica of the queue would repeat: ``enqueue``,
a delivery (to a consumer, or ``get``), ``settle`` (accepted), ``discard`` (rejected:
dead-lettered where the queue says), ``requeue`` (released), ``amend`` (a settlement that
changes the message), ``purge``, ``take`` (moved out by a tool). What the queue decides by
itself (a TTL expiry, an overflow, a delivery limit) ends in one of the same operations
(dead-letter, drop). Where those operations are stored is the ``QueueStore`` a queue writes
through: the broker's journal today (``JournalStore``), the epoch-stamped log of a replicated
queue later. None of it knows a protocol: no delivery tags, channels or links.

The base classes are native classes, not Protocols, so that the compiled build calls them
through a vtable on the per-message path (see ``model/consumer.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

from leveret.errors import AccessRefused, NotImplemented_, PreconditionFailed, ResourceLocked
from leveret.model.completion import Completion
from leveret.model.consumer import UNLIMITED, Browser, Consumer, ConsumerOwner, Source

# Imported at run time although only annotations name it: the compiled build builds the
# Browsed NamedTuple from its field types when the module loads (see model/settle.py).
from leveret.model.entry import QueuedMessage  # noqa: TC001
from leveret.model.exchanges.base import freeze
from leveret.model.journal import NULL_JOURNAL, Journal
from leveret.model.memory_gauge import MemoryGauge
from leveret.model.message import HINT_PERSISTENT
from leveret.model.queues.args import PLAIN, parse_values, queue_type_name, where
from leveret.model.timers import Timers

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from leveret.model.message import Message
    from leveret.model.paging import Pager
    from leveret.model.queues.args import QueueConfig
    from leveret.model.queues.stream_log import StreamBackend

__all__ = [
    "EQUIVALENT_ARGUMENTS",
    "TYPES",
    "Browsed",
    "JournalStore",
    "Queue",
    "QueueHost",
    "QueueStore",
    "QueueType",
    "parse_queue_args",
    "register",
    "type_of",
]

# The queue arguments RabbitMQ compares on redeclaration; others may differ freely.
EQUIVALENT_ARGUMENTS = (
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


def _fmt(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return "none" if value is None else str(value)


def require_equivalent(what: str, pairs: list[tuple[str, object, object]]) -> None:
    """406 naming the first (name, received, current) pair that differs. Values compare
    with their types, as RabbitMQ's do (x-message-ttl 1000 is not 1000.0; integers of
    any width are one type)."""
    for field, got, have in pairs:
        if got != have or freeze(got) != freeze(have):
            raise PreconditionFailed(
                f"inequivalent arg '{field}' {what}: "
                f"received '{_fmt(got)}' but current is '{_fmt(have)}'"
            )


class QueueHost(Protocol):
    """What a queue asks of whoever holds it (its virtual host): its name, memory gauge,
    timers and where streams keep their logs; to delete a queue that has no reason to exist
    any more (``x-expires``, auto-delete after its last consumer), and to republish a dead
    letter to its dead-letter exchange."""

    @property
    def name(self) -> str: ...

    @property
    def gauge(self) -> MemoryGauge: ...

    @property
    def timers(self) -> Timers: ...

    @property
    def stream_backend(self) -> StreamBackend: ...

    def retire(self, queue: Source) -> None: ...

    def dead_letter(
        self, message: Message, reason: str, queue: str, dlx: str, dlrk: str | None
    ) -> None: ...


class Browsed(NamedTuple):
    """A ready message as a tool sees it: its position (from the head; a type with
    ``offsets`` gives the offset), the entry (``take`` accepts it) and when it was appended
    (ms since the epoch; 0 for a type that keeps no such time)."""

    position: int
    entry: QueuedMessage
    timestamp: int = 0


class QueueStore(Protocol):
    """Where a queue writes what it holds: one call per operation that changes it, named as
    the operations a replica repeats (the storage hooks). A queue calls them for entries it
    keeps (``entry.sid`` set by ``enqueued``; 0: not kept, nothing more is written), and only
    when it has a store id (a durable queue).

    ``JournalStore`` keeps the persistent messages of a durable queue in the broker's journal
    (a delivery mark, so that a message comes back redelivered after a crash, and removal).
    A replicated queue's store appends every call to the queue's log, stamped with the
    leader's epoch, for its followers (docs/architecture.md, "Adding a queue type"). A
    Protocol, not a base class: the store may live in code that is not compiled."""

    def enqueued(self, queue: Queue, entry: QueuedMessage) -> None:
        """``entry`` joined ``queue``: keep it (set ``entry.sid``) if the store keeps it."""

    def delivered(self, queue: Queue, entry: QueuedMessage) -> None:
        """``entry`` went out unsettled (to a consumer or a get)."""

    def removed(self, queue: Queue, entry: QueuedMessage) -> None:
        """``entry`` left ``queue`` for good: accepted, settled as it went, or taken."""

    def requeued(self, queue: Queue, entry: QueuedMessage) -> None:
        """``entry`` went back to its place, ready again (``entry.deliveries`` counted)."""

    def dead_lettered(self, queue: Queue, entry: QueuedMessage, reason: str) -> None:
        """``entry`` left ``queue`` for ``reason`` (``model/dead_letter.py``): rejected,
        expired, over a length or delivery limit; republished where the queue says."""

    def purged(self, queue: Queue, sids: Iterable[int]) -> None:
        """Every ready entry left ``queue``; ``sids``: the kept ones (paged ones too)."""


class Gate(Protocol):
    """A replicated queue's confirm gate: the completion of what was just enqueued
    (True: committed by the in-sync majority; False: refused), or None when it is
    committed already."""

    def __call__(self) -> Completion[bool] | None: ...


class JournalStore:
    """The persistent messages of a durable queue, in the broker's journal (the queue's
    ``journal`` and ``store_id``; a transient queue has no store id and keeps nothing).
    ``every_message``: the transient ones too (a quorum queue's: RabbitMQ's quorum queues
    keep every message whatever its delivery mode, and a replicated one ships what its
    store keeps)."""

    def __init__(self, *, every_message: bool = False) -> None:
        self.every_message = every_message

    def enqueued(self, queue: Queue, entry: QueuedMessage) -> None:
        message = entry.message
        if queue.store_id and (self.every_message or message.hints & HINT_PERSISTENT):
            entry.sid = queue.journal.enqueued(queue.store_id, message)

    def delivered(self, queue: Queue, entry: QueuedMessage) -> None:
        if entry.sid and not entry.redelivered:
            # Recorded once, so that it comes back redelivered after a crash.
            queue.journal.delivered(queue.store_id, entry.sid)

    def removed(self, queue: Queue, entry: QueuedMessage) -> None:
        if entry.sid:
            queue.journal.removed(queue.store_id, entry.sid)

    def requeued(self, queue: Queue, entry: QueuedMessage) -> None:
        return None  # the journal keeps no place in the queue: recovery restores by order

    def dead_lettered(self, queue: Queue, entry: QueuedMessage, reason: str) -> None:
        if entry.sid:
            queue.journal.removed(queue.store_id, entry.sid)

    def purged(self, queue: Queue, sids: Iterable[int]) -> None:
        journal, queue_id = queue.journal, queue.store_id
        for sid in sids:
            journal.removed(queue_id, sid)


JOURNAL_STORE = JournalStore()
EVERY_MESSAGE_STORE = JournalStore(every_message=True)


class QueueType:
    """One type of queue; see the module docstring. Subclasses set the class attributes and
    implement ``create``; one instance of each is registered in ``TYPES``."""

    # The x-queue-type value; RabbitMQ's module is rabbit_<name>_queue (its error texts).
    name = ""
    # Only durable, non-exclusive, non-auto-delete queues (RabbitMQ: quorum queues, streams).
    durable_only = False
    # Arguments this type refuses (406 "invalid arg ... of queue type rabbit_<name>_queue").
    refused: tuple[str, ...] = ()
    # Arguments a redeclaration must repeat (406 "inequivalent arg").
    equivalent: tuple[str, ...] = EQUIVALENT_ARGUMENTS
    # The policy keys that apply to it, as the x- arguments they become (model/policies.py).
    policy_keys: tuple[str, ...] = ()
    # -- capabilities: front ends refuse what a type cannot do, in their own words --------
    # A message can be taken on request (basic.get, the management API's get).
    gets = True
    # Every ready message can be dropped at once.
    purges = True
    # An unsettled delivery can be rejected or released, not only accepted.
    rejects = True
    # A ready message can be taken out of it (the message tools' move and replay).
    removes = True
    # A consumer may settle each delivery as it goes (0-9-1 no-ack, 1.0 pre-settled).
    auto_settle = True
    # A consumer must have a credit limit (0-9-1: a prefetch count).
    needs_credit = False
    # Consumers read from an offset they choose (x-stream-offset); settling gives credit back
    # and removes nothing; positions (``browse``, a passive declare's lookup) are offsets.
    offsets = False

    def __repr__(self) -> str:
        return f"QueueType({self.name!r})"

    def parse(
        self,
        arguments: Mapping[str, object] | None,
        *,
        queue: str = "",
        vhost: str = "/",
        durable: bool = True,
        exclusive: bool = False,
        auto_delete: bool = False,
    ) -> QueueConfig:
        """Validate ``arguments`` of a declaration of this type; 406 with RabbitMQ's text
        for a flag it does not allow, an argument it refuses or an invalid value."""
        at = where(queue, vhost)
        if self.durable_only:
            for flag, bad in (
                ("non-durable", not durable),
                ("exclusive-owner", exclusive),
                ("auto-delete", auto_delete),
            ):
                if bad:
                    raise PreconditionFailed(f"invalid property '{flag}' {at}")
        if arguments:
            for name in self.refused:
                if name in arguments:
                    raise PreconditionFailed(
                        f"invalid arg '{name}' {at} of queue type rabbit_{self.name}_queue"
                    )
        return parse_values(arguments, self.name, queue=queue, vhost=vhost)

    def check_equivalent(
        self,
        queue: Queue,
        *,
        durable: bool,
        auto_delete: bool,
        arguments: Mapping[str, object] | None,
    ) -> None:
        """406 unless a redeclaration of ``queue`` with these flags and arguments is
        equivalent (RabbitMQ's rule: the flags and the ``equivalent`` arguments)."""
        given = arguments or {}
        require_equivalent(
            f"for queue '{queue.name}' in vhost '{queue.vhost_name}'",
            [("durable", durable, queue.durable), ("auto_delete", auto_delete, queue.auto_delete)]
            + [(key, given.get(key), queue.arguments.get(key)) for key in self.equivalent],
        )

    def create(
        self,
        host: QueueHost,
        name: str,
        *,
        durable: bool,
        exclusive_owner: object | None,
        auto_delete: bool,
        arguments: Mapping[str, object] | None,
        config: QueueConfig,
    ) -> Queue:
        """A new queue of this type in ``host`` (its arguments parsed into ``config``)."""
        raise NotImplementedError


# Every declarable type by its x-queue-type name; each type module registers its own.
TYPES: dict[str, QueueType] = {}


def register(queue_type: QueueType) -> QueueType:
    TYPES[queue_type.name] = queue_type
    return queue_type


def type_of(
    arguments: Mapping[str, object] | None, *, queue: str = "", vhost: str = "/"
) -> QueueType:
    """The type ``arguments`` ask for (``x-queue-type``, classic by default); 406 when it
    is not one of ``TYPES``."""
    return TYPES[queue_type_name(arguments, TYPES, where(queue, vhost))]


def parse_queue_args(
    arguments: Mapping[str, object] | None,
    *,
    queue: str = "",
    vhost: str = "/",
    durable: bool = True,
    exclusive: bool = False,
    auto_delete: bool = False,
) -> QueueConfig:
    """Validate the ``arguments`` of a queue.declare with their type's rules."""
    return type_of(arguments, queue=queue, vhost=vhost).parse(
        arguments,
        queue=queue,
        vhost=vhost,
        durable=durable,
        exclusive=exclusive,
        auto_delete=auto_delete,
    )


class Queue(Source):
    """A queue of a virtual host, whatever its type: what the vhost, the router, front ends,
    management and the store may ask of it. Subclasses implement the operations; those a
    type lacks raise ``unsupported`` (its capabilities say so up front)."""

    # A queue led by another node of a cluster (``queues/remote.py``): the publisher hands
    # it messages with ``forward`` and a ``basic.get`` asks it with ``fetch`` (answered
    # later); its counts are the leader's.
    forwards = False

    def __init__(
        self,
        vhost_name: str,
        name: str,
        queue_type: QueueType,
        *,
        durable: bool = False,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        arguments: Mapping[str, object] | None = None,
        gauge: MemoryGauge | None = None,
        config: QueueConfig = PLAIN,
        host: QueueHost | None = None,
        timers: Timers | None = None,
    ) -> None:
        self.type = queue_type
        self.gauge = gauge if gauge is not None else MemoryGauge()
        self.config = config
        self.host = host
        self.timers = timers if timers is not None else Timers()
        self.vhost_name = vhost_name
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments: Mapping[str, object] = dict(arguments or {})
        self.unacked_count = 0
        self.consumers: list[Consumer] = []
        self._rr = 0
        self.deleted = False
        # Durable queues get an id from the store (0: nothing of this queue is stored).
        self.store_id = 0
        self.journal: Journal = NULL_JOURNAL
        self.store: QueueStore = JOURNAL_STORE
        # A replicated queue's confirm gate (the cluster sets it on the leader): a completion
        # for what was just enqueued, done once it is committed (docs/cluster.md,
        # "Replicated queues"); None: confirmed as on one node.
        self.gate: Gate | None = None
        # Where a deep queue pages its tail (None: it never pages; the vhost sets it).
        self.pager: Pager | None = None
        # Consumers that look at ready messages without taking them (AMQP 0-10's
        # not-acquired subscriptions, 1.0 selectors): woken when messages become ready.
        self.browsers: list[Browser] = []
        # The policy and operator policy that apply (model/policies.py) and what they say
        # together; the vhost sets them.
        self.policy: str | None = None
        self.operator_policy: str | None = None
        self.policy_definition: dict[str, object] = {}
        # Management counters: plain increments here, sampled on a timer (management/).
        self.n_publish = 0
        self.n_deliver = 0
        self.n_deliver_no_ack = 0
        self.n_get = 0
        self.n_get_no_ack = 0
        self.n_ack = 0
        self.n_redeliver = 0
        self.n_get_empty = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @property
    def resource(self) -> str:
        """RabbitMQ's name of the queue in its texts: ``queue 'q' in vhost '/'``."""
        return f"queue '{self.name}' in vhost '{self.vhost_name}'"

    def unsupported(self, operation: str) -> NotImplemented_:
        """The error for ``operation``, which this type does not support (RabbitMQ's text;
        a front end names the operation in its own protocol's words)."""
        return NotImplemented_(
            f"{operation} not supported by {self.type.name} queues {self.resource}"
        )

    def locked(self) -> ResourceLocked:
        """405 for a connection that is not the owner of this exclusive queue (or that asks
        for exclusivity this queue was not declared with): RabbitMQ's text."""
        return ResourceLocked(
            f"cannot obtain exclusive access to locked queue '{self.name}' in vhost "
            f"'{self.vhost_name}'. It could be originally declared on another connection or "
            "the exclusive property value does not match that of the original declaration."
        )

    # -- stats ---------------------------------------------------------------------------

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    @property
    def message_count(self) -> int:
        """Ready messages (a stream: its next offset, Leveret's declare-ok answer)."""
        raise NotImplementedError

    def has_ready(self) -> bool:
        """Whether messages wait to be delivered (queue.delete's if-empty)."""
        return False

    @property
    def paged_count(self) -> int:
        """Ready messages that are in pages on disk (not in memory)."""
        return 0

    @property
    def message_bytes(self) -> int:
        """Body bytes of the ready messages (management's ``message_bytes_ready``)."""
        return 0

    def details(self) -> dict[str, object]:
        """What the type adds to management's detailed view of the queue (none by default)."""
        return {}

    def lookup(self, arguments: Mapping[str, object] | None) -> int:
        """A passive declaration's message count (a type with ``offsets`` answers the
        offset a consumer attached with ``arguments`` would get first: a Leveret addition)."""
        return self.message_count

    # -- publishing ----------------------------------------------------------------------

    def enqueue(self, message: Message) -> bool:
        """Queue (or hand over) ``message``; False when the queue refused it (overflow)."""
        raise NotImplementedError

    def forward(self, message: Message, confirm: bool) -> Completion[bool] | None:
        """Hand ``message`` to the queue's leader on another node (``forwards``); with
        ``confirm``, a completion of the leader's confirm (True) or refusal (False)."""
        self.enqueue(message)
        return None

    def room(self) -> Completion[None] | None:
        """After ``forward``: what the publisher waits for before it publishes again (the
        link to the leader has a window's worth of publishes unhandled); None: go on."""
        return None

    def fetch(self, *, auto_settle: bool) -> Completion[tuple[QueuedMessage | None, int]]:
        """``get`` answered later (a queue led by another node): the entry (None: none was
        ready) and how many messages are left."""
        return Completion.of((self.get(auto_settle=auto_settle), self.message_count))

    def inspect(self, *, purge: bool) -> Completion[tuple[int, int]]:
        """(ready messages, consumers), answered later by a queue led by another node; with
        ``purge``, the queue is purged first and the count is of the messages purged."""
        count = self.purge() if purge else self.message_count
        return Completion.of((count, self.consumer_count))

    def available(self) -> bool:
        """Whether a message routed to it now reaches it (a queue led by a node that is
        down does not: RabbitMQ 3.10 counts it as no route)."""
        return True

    def reachable(self) -> None:
        """Raise what an operation on this queue gets while it cannot be reached (a queue
        led by a node that is down: 404, as RabbitMQ answers); nothing for a local queue."""
        return None

    def can_deliver_now(self, message: Message) -> bool:
        """Whether a message published now would go straight to a consumer (``immediate``)."""
        return False

    def falling_behind(self) -> bool:
        """Consumers are attached but the ready backlog grows (publishers are paced)."""
        return False

    def far_behind(self) -> bool:
        """Consumers are attached but the ready backlog is far past what pacing keeps
        (the publisher's connection is not read for a moment)."""
        return False

    def departed(self) -> int:
        """How many of the messages this queue took in are no longer ready (delivered,
        fetched, expired, dropped, purged; less those requeued): it grows whenever the queue
        drains, whatever is published to it meanwhile (the shell's test of a queue that holds
        a publisher: ``Shell.release_hold``)."""
        return self.n_publish - self.message_count

    # -- consumers -----------------------------------------------------------------------

    def consumer(
        self,
        tag: str,
        owner: ConsumerOwner,
        *,
        auto_settle: bool,
        exclusive: bool = False,
        credit: int = UNLIMITED,
        arguments: Mapping[str, object] | None = None,
        priority: int = 0,
        timeout: float | None = None,
    ) -> Consumer:
        """A consumer of this queue for ``owner``, not attached yet (``add_consumer``); the
        type reads what it needs of ``arguments`` (a stream: ``x-stream-offset``)."""
        return Consumer(
            tag,
            self,
            owner,
            auto_settle=auto_settle,
            exclusive=exclusive,
            credit=credit,
            arguments=arguments,
            priority=priority,
            timeout=timeout,
        )

    def has_exclusive_consumer(self) -> bool:
        return any(c.exclusive for c in self.consumers)

    def check_exclusive_use(self, exclusive: bool) -> None:
        """403 if an exclusive consumer holds the queue, or if a consumer asks to be
        exclusive while others consume (RabbitMQ's rule and text)."""
        if self.has_exclusive_consumer() or (exclusive and self.consumers):
            raise AccessRefused(f"{self.resource} in exclusive use")

    def add_consumer(self, consumer: Consumer) -> None:
        """Attach ``consumer`` (see ``check_exclusive_use``) and deliver to it."""
        self.check_exclusive_use(consumer.exclusive)
        self.consumers.append(consumer)
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        if self._detach(consumer) >= 0:
            self._retire_if_unused()

    def _detach(self, consumer: Consumer) -> int:
        """Take ``consumer`` out (round-robin kept in place); its index, -1 if absent. An
        auto-delete queue goes with its last consumer."""
        try:
            index = self.consumers.index(consumer)
        except ValueError:
            return -1
        del self.consumers[index]
        if index < self._rr:
            self._rr -= 1
        if self._rr >= len(self.consumers):
            self._rr = 0
        return index

    def _retire_if_unused(self) -> None:
        if self.auto_delete and not self.consumers and self.host is not None:
            self.host.retire(self)  # an auto-delete queue goes with its last consumer

    # -- taking and settling (Source: dispatch, settle, discard, requeue) ----------------

    def get(self, *, auto_settle: bool) -> QueuedMessage | None:
        """Take the head (a get rather than a delivery to a consumer); unless
        ``auto_settle`` it stays unsettled here. None when nothing is ready."""
        raise self.unsupported("get")

    def rejects(self) -> bool:
        return self.type.rejects

    def amend(
        self, entry: QueuedMessage, headers: Mapping[str, object] | None, failed: bool
    ) -> None:
        if headers:
            message = entry.message
            entry.message = message.replace(headers={**(message.headers or {}), **headers})
        if failed:
            entry.deliveries += 1

    # -- operations on the whole queue ---------------------------------------------------

    def purge(self) -> int:
        """Drop every ready message; how many."""
        raise self.unsupported("purge")

    def touch(self) -> None:
        """The queue was used (declared, got from, a consumer went): ``x-expires`` restarts."""
        return None

    def reconfigure(self, config: QueueConfig) -> None:
        """Run with ``config`` from now on (a policy changed)."""
        self.config = config

    def on_delete(self) -> None:
        """The vhost deleted the queue (``deleted`` is set, bindings gone): drop what it holds,
        its stored messages, a stream's log."""
        raise NotImplementedError

    # -- what tools and other protocols' browsers read -----------------------------------

    def browse(self, start: int = 0) -> Iterator[Browsed]:
        """The ready messages from position ``start`` in delivery order, without taking or
        marking any (a snapshot taken at the first step)."""
        raise self.unsupported("browse")

    def ready_entries(self) -> list[QueuedMessage]:
        """Every ready entry in order (paged ones read back, copies); a type whose messages
        never wait ready (a stream: they stay in its log) has none."""
        return []

    def head(self, count: int) -> list[QueuedMessage]:
        """Up to ``count`` ready entries from the head, in delivery order (resident ones)."""
        raise self.unsupported("head")

    def take(self, entry: QueuedMessage) -> bool:
        """Remove ``entry``, a ready message, for good (moved elsewhere: the caller enqueues
        it there first, in the same loop turn); False when it is not ready any more."""
        raise self.unsupported("take")

    def unpage(self) -> None:
        """Bring a paged tail back into memory (so that any ready entry can be taken)."""
        return None

    def browse_after(self, seq: int, limit: int) -> list[QueuedMessage]:
        """Up to ``limit`` ready entries numbered after ``seq`` (AMQP 0-10's not-acquiring
        subscriptions)."""
        raise self.unsupported("browse")

    def acquire(self, entry: QueuedMessage) -> QueuedMessage | None:
        """Take the ready entry numbered ``entry.seq`` out unsettled, as a delivery would;
        None when it is not ready any more."""
        raise self.unsupported("acquire")

    def claim(self, entry: QueuedMessage) -> Completion[QueuedMessage | None]:
        """``acquire`` as a completion: done at once here; a queue led by another node
        asks its leader (``entry`` a browsing consumer's copy)."""
        return Completion.of(self.acquire(entry))

    def wake_browsers(self) -> None:
        """Ready messages may have arrived: let each browser look."""
        for browser in list(self.browsers):
            browser.browse()

    # -- storage -------------------------------------------------------------------------

    def restore(
        self, message: Message, sid: int, redelivered: bool, enqueued_at: float | None = None
    ) -> None:
        """Put a message recovered from the store back, as it was (no store write, no
        delivery: recovery runs before any client connects). ``enqueued_at`` (wall clock)
        is when it first entered the queue."""
        raise self.unsupported("restore")

    def withdraw(self, sid: int) -> QueuedMessage | None:
        """The ready entry with store id ``sid``, taken out unsettled (recovery of a
        prepared distributed transaction that settles it); None when it is not there."""
        return None

    def open_storage(self) -> bool:
        """Recovery is over: open what the queue stores itself (a stream's log files: torn
        tails cut, retention timers started). True when it keeps files of its own."""
        return False
