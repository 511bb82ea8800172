"""The feature paths of a classic or quorum queue: TTLs, length limits (RabbitMQ's overflow
modes and Qpid's ring and self-destruct), priority levels (``priority.py``), Qpid's sequence
numbers, single active consumer, consumer priorities, queue expiry (``x-expires``), and the
hooks through which a keyed queue (``keyed.py``) and a quorum queue (``quorum.py``) change
them.

``ClassicQueue`` (``fifo.py``) inherits ``FeatureMixin`` and switches to these methods once
its ``_special`` flag is set; the plain FIFO paths stay free of them.

Expiry follows RabbitMQ: only the head of a queue is checked (a queue-level TTL is FIFO, so
the head is always the next to expire; a message with its own shorter ``expiration`` behind a
longer-lived one waits until it reaches the head, as in RabbitMQ). A message that has expired
is never delivered: it is checked again when it is about to be handed out. The queue asks
``Timers`` to wake it at its head's deadline, so nothing is ever scanned.

Every entry that leaves for good goes through ``_gone`` (settled, taken) or ``_drop``
(dead-lettered or dropped for a reason), every delivery through ``_hand_over``, ``get`` or
``acquire``, every release through ``_requeue_special`` (or the plain ``requeue``), and each
writes through the queue's ``QueueStore`` (``base.py``) for the entries it keeps.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from leveret.errors import PreconditionFailed
from leveret.model import dead_letter as dl
from leveret.model.entry import MESSAGE_OVERHEAD
from leveret.model.message import HINT_EXPIRATION, HINT_PRIORITY
from leveret.model.queues.base import Queue
from leveret.model.queues.priority import PriorityReady, insert_by_seq

if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Iterable

    from leveret.model.consumer import Consumer
    from leveret.model.entry import QueuedMessage
    from leveret.model.message import Message
    from leveret.model.paging import PagedTail
    from leveret.model.queues.args import QueueConfig


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


# Overflow modes that drop messages to make room instead of refusing the new one.
_DROPPING = ("drop-head", "ring", "self-destruct")


class FeatureMixin(Queue):
    """Slow paths of ``ClassicQueue``; see the module docstring."""

    # Provided by ClassicQueue.
    ready: deque[QueuedMessage] | PriorityReady
    _special: bool
    _next_seq: int
    _entry_cls: Any
    _tail: PagedTail | None

    def _unpage_all(self) -> None:
        """Provided by ClassicQueue: brings a paged tail back into ``ready``."""
        raise NotImplementedError

    def _init_features(self) -> None:
        self.ready_bytes = 0
        # The last number given by Qpid's qpid.queue_msg_sequence.
        self.msg_sequence = 0
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
            self.store.removed(self, entry)

    def _hand_over(self, consumer: Consumer, entry: QueuedMessage) -> None:
        """Deliver ``entry`` to ``consumer``: gone at once for one that settles
        automatically, else unsettled until its owner settles it."""
        if consumer.auto_settle:
            self._gone(entry)
        else:
            self.unacked_count += 1
            if entry.sid:
                self.store.delivered(self, entry)
        consumer.owner.deliver(consumer, entry)

    # -- hooks of the types built on a classic queue -------------------------------------

    def _admit(self, message: Message) -> Message:
        """The message a new entry holds (a quorum queue adds its delivery count)."""
        return message

    def _rank(self, entry: QueuedMessage) -> None:
        """Give a new or recovered entry its level in a priority queue (``priority.py``)."""
        config = self.config
        if config.max_priority is None:
            return
        message = entry.message
        if message.hints & HINT_PRIORITY:
            entry.priority = config.priority_level(message.properties.priority)
        elif config.priority_levels is not None:
            entry.priority = config.priority_level(None)  # Qpid's level for no priority

    def _put_back(self, entry: QueuedMessage) -> None:
        """Return an unsettled entry to its place among the ready ones."""
        ready = self.ready
        if isinstance(ready, PriorityReady):
            ready.put_back(entry)
        else:
            insert_by_seq(ready, entry)

    def _returned(self, entry: QueuedMessage, redelivered: bool) -> bool:
        """Mark an entry that is released (redelivered unless ``redelivered`` is False);
        False when it must not come back (a quorum queue's delivery limit: it was dropped)."""
        if redelivered:
            entry.redelivered = True
        return True

    # -- policies ------------------------------------------------------------------------

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
            self._trim()
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
        self.gauge.bytes -= len(entry.message.body) + MESSAGE_OVERHEAD
        if entry.sid:
            self.store.dead_lettered(self, entry, reason)
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
        if config.overflow not in _DROPPING and (
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
        message = self._admit(message)
        if config.sequence_key is not None:
            # Qpid's qpid.queue_msg_sequence: every arrival numbered, dropped ones included.
            self.msg_sequence += 1
            message = message.replace(
                headers={**(message.headers or {}), config.sequence_key: self.msg_sequence}
            )
        self._next_seq += 1
        entry = self._entry_cls(self._next_seq, message)
        if self.store_id:
            self.store.enqueued(self, entry)
        ttl = config.message_ttl
        own = message_ttl(message)
        if own is not None and (ttl is None or own < ttl):
            ttl = own
        if ttl is not None:
            entry.expires = now + ttl
        self._rank(entry)
        self.gauge.bytes += size + MESSAGE_OVERHEAD
        self._place(entry, now)
        return True

    def _place(self, entry: QueuedMessage, now: float) -> None:
        """A new entry: straight to a consumer if one can take it, else ready (then the
        length limits apply)."""
        if not self.ready and self.consumers and self._deliver_special(entry):
            return
        if entry.expires is not None and entry.expires <= now:
            self._drop(entry, dl.EXPIRED)  # TTL 0: deliver now or never
            return
        self.ready.append(entry)
        self.ready_bytes += len(entry.message.body)
        self._trim()
        self._schedule_head()

    def _trim(self) -> None:
        """Drop what the length limits no longer allow: the head (RabbitMQ's drop-head),
        or the oldest of the lowest priority (Qpid's ring); a Qpid self-destruct queue
        goes instead."""
        ready = self.ready
        ring = self.config.overflow == "ring"
        while self._over_limit():
            if self.config.overflow == "self-destruct":
                if self.host is not None and not self.deleted:
                    self.host.retire(self)
                return
            if ring and isinstance(ready, PriorityReady):
                victim = ready.pop_lowest()
            else:
                victim = ready.popleft()
            self.ready_bytes -= len(victim.message.body)
            self._drop(victim, dl.MAXLEN)

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
        self._rank(entry)
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
        for entry in sorted(entries, key=lambda e: e.seq, reverse=True):
            self.unacked_count -= 1
            if not self._returned(entry, redelivered):
                continue
            if entry.sid:
                self.store.requeued(self, entry)
            self._put_back(entry)
            self.ready_bytes += len(entry.message.body)
        self._dispatch_special()
