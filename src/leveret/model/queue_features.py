"""The feature paths of a queue: TTLs, length limits, priorities, single active consumer,
consumer priorities, quorum delivery counts and queue expiry (``x-expires``).

``Queue`` (model/queue.py) inherits ``FeatureMixin`` and switches to these methods once its
``_special`` flag is set; the plain FIFO paths stay free of them.

Expiry follows RabbitMQ: only the head of a queue is checked (a queue-level TTL is FIFO, so
the head is always the next to expire; a message with its own shorter ``expiration`` behind a
longer-lived one waits until it reaches the head, as in RabbitMQ). A message that has expired
is never delivered: it is checked again when it is about to be handed out. The queue asks
``Timers`` to wake it at its head's deadline, so nothing is ever scanned.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from leveret.errors import PreconditionFailed
from leveret.model import dead_letter as dl
from leveret.model.consumer import Source
from leveret.model.entry import MESSAGE_OVERHEAD
from leveret.model.message import HINT_EXPIRATION, HINT_PERSISTENT, HINT_PRIORITY

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from leveret.model.consumer import Consumer
    from leveret.model.entry import QueuedMessage
    from leveret.model.journal import Journal
    from leveret.model.memory_gauge import MemoryGauge
    from leveret.model.message import Message
    from leveret.model.paging import PagedTail
    from leveret.model.queue_args import QueueConfig
    from leveret.model.timers import Timers


class QueueHost(Protocol):
    """What a queue asks of whoever holds it (its virtual host): to be deleted once it has
    no reason to exist (``x-expires``, auto-delete after its last consumer), and to
    republish a dead letter to its dead-letter exchange."""

    def retire(self, queue: Source) -> None: ...

    def dead_letter(
        self, message: Message, reason: str, queue: str, dlx: str, dlrk: str | None
    ) -> None: ...


# RabbitMQ's largest per-message expiration: ten years in milliseconds (measured on 3.10.8).
MAX_EXPIRATION = 315_360_000_000
_INTEGER_PREFIX = re.compile(r"[+-]?[0-9]+")


def parse_expiration(text: str) -> float:
    """A per-message ``expiration`` (milliseconds as a string) in seconds; 406 if invalid,
    with RabbitMQ's texts (its parse is Erlang's ``string:to_integer``: an optional sign,
    digits, nothing after them; at most ten years)."""
    match = _INTEGER_PREFIX.match(text)
    if match is None:
        raise PreconditionFailed(f"invalid expiration '{text}': no_integer")
    rest = text[match.end() :]
    if rest:
        raise PreconditionFailed(f"invalid expiration '{text}': {{leftover_string,\"{rest}\"}}")
    value = int(match.group())
    if value < 0:
        raise PreconditionFailed(f"invalid expiration '{text}': {{value_negative,{value}}}")
    if value > MAX_EXPIRATION:
        raise PreconditionFailed(f"invalid expiration '{text}': {{value_too_large,{value}}}")
    return value / 1000


def message_ttl(message: Message) -> float | None:
    """The message's own TTL in seconds (None when it has none)."""
    if not message.hints & HINT_EXPIRATION:
        return None
    expiration = message.properties.expiration
    return None if expiration is None else parse_expiration(expiration)


def insert_by_seq(ready: deque[QueuedMessage], entry: QueuedMessage) -> None:
    """Put ``entry`` back at its original position (entries are in seq order)."""
    if not ready or entry.seq < ready[0].seq:
        ready.appendleft(entry)
    else:
        ready.insert(bisect_left(ready, entry.seq, key=lambda e: e.seq), entry)


class PriorityReady:
    """Ready entries of a priority queue: one FIFO per priority, highest served first."""

    __slots__ = ("_count", "levels")

    def __init__(self, max_priority: int) -> None:
        self.levels: list[deque[QueuedMessage]] = [deque() for _ in range(max_priority + 1)]
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[QueuedMessage]:
        for level in reversed(self.levels):
            yield from level

    def __getitem__(self, index: int) -> QueuedMessage:
        if index != 0:
            raise IndexError("only the head of a priority queue can be read")
        for level in reversed(self.levels):
            if level:
                return level[0]
        raise IndexError("empty queue")

    def append(self, entry: QueuedMessage) -> None:
        self.levels[entry.priority].append(entry)
        self._count += 1

    def popleft(self) -> QueuedMessage:
        for level in reversed(self.levels):
            if level:
                self._count -= 1
                return level.popleft()
        raise IndexError("empty queue")

    def remove(self, entry: QueuedMessage) -> bool:
        """Take ``entry`` out wherever it is; False when it is not here."""
        level = self.levels[entry.priority]
        i = bisect_left(level, entry.seq, key=lambda e: e.seq)
        if i >= len(level) or level[i] is not entry:
            return False
        del level[i]
        self._count -= 1
        return True

    def put_back(self, entry: QueuedMessage) -> None:
        insert_by_seq(self.levels[entry.priority], entry)
        self._count += 1

    def clear(self) -> None:
        for level in self.levels:
            level.clear()
        self._count = 0


class FeatureMixin(Source):
    """Slow paths of ``Queue``; see the module docstring."""

    # Provided by Queue.
    config: QueueConfig
    host: QueueHost | None
    timers: Timers
    gauge: MemoryGauge
    ready: deque[QueuedMessage] | PriorityReady
    consumers: list[Consumer]
    unacked_count: int
    deleted: bool
    name: str
    _special: bool
    _next_seq: int
    _rr: int
    _entry_cls: Any
    store_id: int
    journal: Journal
    _tail: PagedTail | None
    n_deliver: int
    n_deliver_no_ack: int
    n_redeliver: int

    def _unpage_all(self) -> None:
        """Provided by Queue: brings a paged tail back into ``ready``."""
        raise NotImplementedError

    def _init_features(self) -> None:
        self.ready_bytes = 0
        # Single active consumer: the active consumer that was cancelled while it still had
        # unsettled deliveries; nobody takes over until they are settled (RabbitMQ 3.10).
        self._sac_draining: Consumer | None = None
        self._prioritised = False
        self._ttl_at: float | None = None
        self._expires_on = self.config.expires is not None
        self._expiry_pending = False
        self.last_used = self.timers.now
        if self._expires_on:
            self.touch()

    def _enter_features(self) -> None:
        """From now on the queue runs the feature paths, which keep every message as an
        object: a paged tail comes back first (model/paging.py)."""
        if self._tail is not None:
            self._unpage_all()
        self._special = True

    def _gone(self, entry: QueuedMessage) -> None:
        """``entry`` left the queue for good: its bytes and its stored copy go."""
        self.gauge.bytes -= len(entry.message.body) + MESSAGE_OVERHEAD
        if entry.sid:
            self.journal.removed(self.store_id, entry.sid)

    def _hand_over(self, consumer: Consumer, entry: QueuedMessage) -> None:
        """Deliver ``entry`` to ``consumer``: gone at once for one that settles
        automatically, else unsettled until its owner settles it."""
        if consumer.auto_settle:
            self._gone(entry)
        else:
            self.unacked_count += 1
            if entry.sid and not entry.redelivered:
                # The first delivery is recorded, so it comes back redelivered after a crash.
                self.journal.delivered(self.store_id, entry.sid)
        consumer.owner.deliver(consumer, entry)

    def reconfigure(self, config: QueueConfig) -> None:
        """Run with ``config`` from now on (a policy changed): messages already queued
        keep the expiry they were given, a new length limit applies at once, and a new
        ``x-expires`` starts counting now. Only for classic and quorum queues."""
        self.config = config
        if config.special and not self._special:
            self._enter_features()
            # The plain path does not count ready bytes; the feature paths do.
            self.ready_bytes = sum(len(e.message.body) for e in self.ready)
        self._expires_on = config.expires is not None
        self._expiry_pending = False
        if self._expires_on:
            self.touch()
        if self._special:
            while self._over_limit():
                head = self.ready.popleft()
                self.ready_bytes -= len(head.message.body)
                self._drop(head, dl.MAXLEN)
            self._schedule_head()
            self._dispatch_special()

    # -- queue expiry (x-expires) --------------------------------------------------------

    def touch(self) -> None:
        """The queue was used (declared, basic.get, consumer gone): restart x-expires."""
        self.last_used = self.timers.now
        expires = self.config.expires
        if expires is not None and not self._expiry_pending:
            self._expiry_pending = True
            self.timers.schedule(self.last_used + expires, self)

    def on_deadline(self, now: float) -> None:
        if self.deleted:
            return
        if self._ttl_at is not None and now >= self._ttl_at:
            self._ttl_at = None
            self._expire_heads(now)
            self._schedule_head()
        expires = self.config.expires
        if expires is not None and self._expiry_pending:
            due = self.last_used + expires
            if now >= due:
                self._expiry_pending = False
                if not self.consumers and self.host is not None:
                    self.host.retire(self)
            elif self.consumers:
                self._expiry_pending = False  # the last consumer's cancel restarts it
            else:
                self.timers.schedule(due, self)

    # -- TTL -----------------------------------------------------------------------------

    def _schedule_head(self) -> None:
        ready = self.ready
        if not ready:
            return
        expires = ready[0].expires
        if expires is not None and (self._ttl_at is None or expires < self._ttl_at):
            self._ttl_at = expires
            self.timers.schedule(expires, self)

    def _expire_heads(self, now: float) -> None:
        ready = self.ready
        while ready:
            head = ready[0]
            if head.expires is None or head.expires > now:
                break
            ready.popleft()
            self.ready_bytes -= len(head.message.body)
            self._drop(head, dl.EXPIRED)

    def _drop(self, entry: QueuedMessage, reason: str) -> None:
        """``entry`` leaves the queue for ``reason``: dead-letter it (or drop it)."""
        self._gone(entry)
        self._dead_letter(entry.message, reason)

    def _dead_letter(self, message: Message, reason: str) -> None:
        config = self.config
        dlx = config.dead_letter_exchange
        if dlx is not None and self.host is not None and not self.deleted:
            self.host.dead_letter(message, reason, self.name, dlx, config.dead_letter_routing_key)

    def discard(self, entry: QueuedMessage, reason: str = dl.REJECTED) -> None:
        """An unsettled entry was refused for good: dead-lettered if the queue says so."""
        self.unacked_count -= 1
        self._drop(entry, reason)
        if self._sac_draining is not None:
            self.dispatch()

    # -- enqueue -------------------------------------------------------------------------

    def _over_limit(self) -> bool:
        config = self.config
        return (config.max_length is not None and len(self.ready) > config.max_length) or (
            config.max_length_bytes is not None and self.ready_bytes > config.max_length_bytes
        )

    def _enqueue_special(self, message: Message) -> bool:
        config = self.config
        size = len(message.body)
        if config.overflow != "drop-head" and (
            (config.max_length is not None and len(self.ready) >= config.max_length)
            or (
                config.max_length_bytes is not None
                and self.ready_bytes + size > config.max_length_bytes
            )
        ):
            if config.overflow == "reject-publish-dlx":
                self._dead_letter(message, dl.MAXLEN)
            return False
        self._enter_features()
        now = self.timers.now
        if config.quorum:
            # RabbitMQ's quorum queues deliver every message with x-delivery-count (0 first).
            message = message.replace(headers={**(message.headers or {}), "x-delivery-count": 0})
        self._next_seq += 1
        entry = self._entry_cls(self._next_seq, message)
        if self.store_id and message.hints & HINT_PERSISTENT:
            entry.sid = self.journal.enqueued(self.store_id, message)
        ttl = config.message_ttl
        own = message_ttl(message)
        if own is not None and (ttl is None or own < ttl):
            ttl = own
        if ttl is not None:
            entry.expires = now + ttl
        if config.max_priority is not None and message.hints & HINT_PRIORITY:
            entry.priority = min(message.properties.priority or 0, config.max_priority)
        self.gauge.bytes += size + MESSAGE_OVERHEAD
        if not self.ready and self.consumers and self._deliver_special(entry):
            return True
        if entry.expires is not None and entry.expires <= now:
            self._drop(entry, dl.EXPIRED)  # TTL 0: deliver now or never
            return True
        self.ready.append(entry)
        self.ready_bytes += size
        while self._over_limit():
            head = self.ready.popleft()
            self.ready_bytes -= len(head.message.body)
            self._drop(head, dl.MAXLEN)
        self._schedule_head()
        return True

    # -- delivery ------------------------------------------------------------------------

    def _pick(self, message: Message) -> Consumer | None:
        consumers = self.consumers
        if self.config.single_active_consumer:
            draining = self._sac_draining
            if draining is not None:
                if draining.unsettled > 0:
                    return None
                self._sac_draining = None
            active = consumers[0]
            return active if active.can_take(message) else None
        count = len(consumers)
        if not self._prioritised:
            start = self._rr
            for i in range(count):
                consumer = consumers[(start + i) % count]
                if consumer.can_take(message):
                    self._rr = (start + i + 1) % count
                    return consumer
            return None
        # Consumer priorities: the highest priority that can take it, round-robin within.
        best: Consumer | None = None
        start = self._rr
        for i in range(count):
            consumer = consumers[(start + i) % count]
            if (best is None or consumer.priority > best.priority) and consumer.can_take(message):
                best = consumer
        if best is not None:
            self._rr = (consumers.index(best) + 1) % count
        return best

    def _deliver_special(self, entry: QueuedMessage) -> bool:
        consumer = self._pick(entry.message)
        if consumer is None:
            return False
        self._hand_over(consumer, entry)
        return True

    def _restore_special(self, entry: QueuedMessage, enqueued_at: float | None = None) -> None:
        """``Queue.restore`` for a queue or message that needs the feature paths. The TTL
        counts from ``enqueued_at`` (wall clock; the monotonic clock does not survive a
        restart), or from now when it is not known; an expired head goes at the next
        deadline, as usual."""
        self._enter_features()
        message = entry.message
        ttl = self.config.message_ttl
        own = message_ttl(message)
        if own is not None and (ttl is None or own < ttl):
            ttl = own
        if ttl is not None:
            age = 0.0 if enqueued_at is None else max(0.0, self.timers.wall - enqueued_at)
            entry.expires = self.timers.now + ttl - age
        if self.config.max_priority is not None and message.hints & HINT_PRIORITY:
            entry.priority = min(message.properties.priority or 0, self.config.max_priority)
        self.ready.append(entry)
        self.ready_bytes += len(message.body)
        self._schedule_head()

    def _dispatch_special(self) -> None:
        ready = self.ready
        now = self.timers.now
        while ready and self.consumers:
            entry = ready[0]
            if entry.expires is not None and entry.expires <= now:
                ready.popleft()
                self.ready_bytes -= len(entry.message.body)
                self._drop(entry, dl.EXPIRED)
                continue
            if not self._deliver_special(entry):
                break
            ready.popleft()
            self.ready_bytes -= len(entry.message.body)
        self._schedule_head()

    def _before_get(self) -> None:
        if self._expires_on:
            self.touch()
        if self._special:
            self._expire_heads(self.timers.now)
            self._schedule_head()

    # -- requeue -------------------------------------------------------------------------

    def _requeue_special(self, entries: Iterable[QueuedMessage], redelivered: bool) -> None:
        config = self.config
        ready = self.ready
        for entry in sorted(entries, key=lambda e: e.seq, reverse=True):
            self.unacked_count -= 1
            if redelivered:
                entry.redelivered = True
            if config.quorum and redelivered:
                entry.deliveries += 1
                limit = config.delivery_limit
                if limit is not None and entry.deliveries > limit:
                    self._drop(entry, dl.DELIVERY_LIMIT)
                    continue
                entry.message = entry.message.replace(
                    headers={**(entry.message.headers or {}), "x-delivery-count": entry.deliveries}
                )
            if isinstance(ready, PriorityReady):
                ready.put_back(entry)
            else:
                insert_by_seq(ready, entry)
            self.ready_bytes += len(entry.message.body)
        self._dispatch_special()
