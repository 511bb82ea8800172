"""The store of a delayed-message exchange: its pending messages, in due-time order, and
the one deadline it keeps in ``Timers``. The vhost makes one per ``x-delayed-message``
exchange (``model/exchanges/delayed.py`` sends it what to hold); management, the CLI and
the store's recovery reach it through ``VirtualHost.delay_store``.

Theory of operation. A held message becomes a ``Scheduled`` entry: its due time (wall
clock, milliseconds: it must survive a restart), its delay (for the ``x-delay`` header it
is routed with) and the message. The entries are in a heap of ``(due, id, entry)`` owned
by this store, and the store keeps ONE deadline in the broker's ``Timers`` (its earliest
due time, re-armed only when an earlier one arrives), so 100k pending messages cost one
entry in the broker-wide heap, not 100k, and nothing is ever scanned to find what is due.
Cancelled entries are marked and skipped when they reach the top (the heap is rebuilt when
they outnumber the live ones). When woken, the store routes every due message from its
exchange with ``x-delay`` set to minus its delay (the plugin's rule), through the vhost's
router, at most ``RELEASE_BATCH`` per loop turn.

Durability. The store of a durable exchange is a hidden durable queue of the message store
(``queue_declared`` under the name ``amq.delayed.<exchange>``, which no client can
declare): each held message is written with its due time in place of the enqueue time
(``Journal.enqueued(..., at_ms=due)``), whatever its delivery mode (the plugin, too, keeps
every delayed message on disk), and removed when it is routed, cancelled or rescheduled.
Routing a due message writes its copies in the destination queues and its removal here in
the same loop turn, so in the same group-committed batch: a crash leaves it either pending
or delivered. ``store/recovery.py`` gives the records back to ``restore``. The queue is
declared lazily (first held message) and deleted, before the exchange, when the exchange
goes; a non-durable exchange keeps its pending messages in memory only.

This class subclasses ``Queue`` only so that the router, publishers and dead-lettering hand
it messages as they hand them to queues (``enqueue``); it is never in ``vhost.queues``,
has no consumers and none of a queue's other paths run.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Protocol

from leveret.model.entry import MESSAGE_OVERHEAD
from leveret.model.exchanges.delayed import (
    CANCEL_HEADER,
    DELAY_HEADER,
    MAX_DELAY,
    DelayedExchange,
    delay_of,
)
from leveret.model.queue import Queue

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from leveret.model.exchange import Exchange
    from leveret.model.journal import Journal
    from leveret.model.memory_gauge import MemoryGauge
    from leveret.model.message import Message
    from leveret.model.router import Router
    from leveret.model.timers import Timers

__all__ = [
    "CANCELLED_HEADER",
    "STORE_PREFIX",
    "DelayHost",
    "DelayQueue",
    "Scheduled",
    "Selector",
]

# The hidden store queue of exchange X is "amq.delayed.X" (a client cannot declare amq.*).
STORE_PREFIX = "amq.delayed."
# The header of the reply to a cancel request: how many pending messages it cancelled.
CANCELLED_HEADER = "x-delayed-cancelled"
# Due messages routed per wake; more wait for the next loop turn (fairness).
RELEASE_BATCH = 1000
# A wake this early (seconds) still releases the entry (rounding of wall-clock ms).
_SLACK = 0.001


class Scheduled:
    """One pending message of a delayed exchange."""

    __slots__ = (
        "correlation_id",
        "delay",
        "due",
        "id",
        "known",
        "live",
        "message",
        "message_id",
        "sid",
    )

    def __init__(
        self,
        ident: int,
        due: int,
        delay: int,
        message: Message,
        message_id: object = None,
        correlation_id: object = None,
        *,
        known: bool = True,
    ) -> None:
        self.id = ident  # unique in its store while the broker runs
        self.due = due  # wall clock, milliseconds since the epoch
        self.delay = delay  # milliseconds: routed with x-delay = -delay
        self.message = message
        self.sid = 0  # the message store's id (durable exchanges)
        self.live = True  # False once routed, cancelled or rescheduled
        # Kept apart so that cancelling by them decodes a message at most once. A recovered
        # entry reads them (and its delay) when first asked (``identify``): recovery
        # decodes nothing.
        self.message_id = message_id
        self.correlation_id = correlation_id
        self.known = known

    def identify(self) -> None:
        """Read the message id, correlation id and delay of a recovered entry (once)."""
        if self.known:
            return
        message = self.message
        self.message_id, self.correlation_id = _ids(message)
        self.delay = delay_of(message.headers)
        self.message = message.replace()  # without the decoded properties
        self.message.store_id = message.store_id
        self.known = True


def _ids(message: Message) -> tuple[object, object]:
    """``message``'s message id and correlation id (None for a format without them)."""
    props = message.properties
    return getattr(props, "message_id", None), getattr(props, "correlation_id", None)


class Selector:
    """Which pending messages a cancel, reschedule or listing is about: every condition
    given must hold (``everything`` for none at all)."""

    __slots__ = ("correlation_id", "everything", "ids", "message_id", "routing_key")

    def __init__(
        self,
        *,
        ids: Iterable[int] | None = None,
        message_id: str | None = None,
        correlation_id: str | None = None,
        routing_key: str | None = None,
        everything: bool = False,
    ) -> None:
        self.ids: set[int] | None = set(ids) if ids is not None else None
        self.message_id = message_id
        self.correlation_id = correlation_id
        self.routing_key = routing_key
        self.everything = everything

    @property
    def empty(self) -> bool:
        """No condition: matches nothing unless ``everything`` says otherwise."""
        return (
            self.ids is None
            and self.message_id is None
            and self.correlation_id is None
            and self.routing_key is None
        )

    def matches(self, entry: Scheduled) -> bool:
        if self.empty:
            return self.everything
        if self.ids is not None and entry.id not in self.ids:
            return False
        if self.message_id is not None or self.correlation_id is not None:
            entry.identify()
        if self.message_id is not None and _text(entry.message_id) != self.message_id:
            return False
        if self.correlation_id is not None and _text(entry.correlation_id) != self.correlation_id:
            return False
        return self.routing_key is None or entry.message.routing_key == self.routing_key

    @classmethod
    def from_header(cls, value: object) -> Selector:
        """The selector of an ``x-delayed-cancel`` header: a message id, or a table of
        ``message-id``, ``correlation-id``, ``routing-key``, ``id`` (all must match)."""
        if isinstance(value, str | bytes):
            return cls(message_id=_text(value))
        if not isinstance(value, dict):
            return cls()
        ident = value.get("id")
        return cls(
            ids=[ident] if isinstance(ident, int) and not isinstance(ident, bool) else None,
            message_id=_opt_text(value.get("message-id")),
            correlation_id=_opt_text(value.get("correlation-id")),
            routing_key=_opt_text(value.get("routing-key")),
        )


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


def _opt_text(value: object) -> str | None:
    return None if value is None else _text(value)


class DelayHost(Protocol):
    """What a delay store asks of the virtual host that holds it (``VirtualHost`` is the
    one): its name, memory gauge and timers, the journal it writes to (read at each write:
    the broker sets it when it is given its message store), the router and the exchanges it
    routes due messages through."""

    @property
    def name(self) -> str: ...

    @property
    def gauge(self) -> MemoryGauge: ...

    @property
    def timers(self) -> Timers: ...

    @property
    def journal(self) -> Journal: ...

    @property
    def router(self) -> Router: ...

    @property
    def exchanges(self) -> dict[str, Exchange]: ...


class DelayQueue(Queue):
    """The pending messages of one delayed exchange; see the module docstring."""

    def __init__(self, vhost: DelayHost, exchange: Exchange) -> None:
        super().__init__(
            vhost.name,
            STORE_PREFIX + exchange.name,
            durable=exchange.durable,
            gauge=vhost.gauge,
            timers=vhost.timers,
        )
        self.vhost = vhost
        self.exchange = exchange
        kind = exchange.kind
        assert isinstance(kind, DelayedExchange)
        self.kind = kind
        self._heap: list[tuple[int, int, Scheduled]] = []
        self._next_id = 0
        self.pending = 0  # live entries
        self.pending_bytes = 0
        self._armed: float | None = None  # the monotonic deadline asked of Timers
        # Counters (management): held, routed when due, routed nowhere, cancelled.
        self.n_held = 0
        self.n_released = 0
        self.n_unroutable = 0
        self.n_cancelled = 0

    def __repr__(self) -> str:
        return f"DelayQueue({self.exchange.name!r}, pending={self.pending})"

    # -- holding -------------------------------------------------------------------------

    def enqueue(self, message: Message) -> bool:
        """The exchange sent ``message`` here: hold it, or act on a cancel request."""
        headers = message.headers
        if headers and CANCEL_HEADER in headers:
            self._cancel_request(message, headers)
            return True
        delay = delay_of(headers)
        now_ms = int(self.timers.wall * 1000)
        self.hold(message, now_ms + delay, delay)
        return True

    def hold(self, message: Message, due: int, delay: int) -> Scheduled:
        """Keep ``message`` until ``due`` (wall clock, ms); stored if the exchange is
        durable. ``delay`` is what its ``x-delay`` header becomes negated when routed."""
        self._next_id += 1
        # A copy: its own store id (the due time is stored with it), and no decoded
        # properties kept in memory for as long as it waits.
        copy = message.replace()
        entry = Scheduled(self._next_id, due, delay, copy, *_ids(message))
        if self.durable:
            store_id = self._store_id()
            if store_id:
                entry.sid = self.vhost.journal.enqueued(store_id, copy, at_ms=due)
        self._push(entry)
        self.n_held += 1
        return entry

    def _store_id(self) -> int:
        """The hidden queue's id in the message store, declared on first use."""
        if not self.store_id:
            self.store_id = self.vhost.journal.queue_declared(
                self.vhost.name, self.name, False, {"x-delayed-exchange": self.exchange.name}
            )
        return self.store_id

    def _push(self, entry: Scheduled) -> None:
        heapq.heappush(self._heap, (entry.due, entry.id, entry))
        self.pending += 1
        size = len(entry.message.body)
        self.pending_bytes += size
        self.gauge.bytes += size + MESSAGE_OVERHEAD
        self._arm()

    def restore(
        self, message: Message, sid: int, redelivered: bool, enqueued_at: float | None = None
    ) -> None:
        """A pending message recovered from the store: ``enqueued_at`` is its due time
        (wall clock, seconds), as it was stored. Call ``arm`` once every one is back (until
        then the entries are not in heap order)."""
        self._next_id += 1
        due = round((enqueued_at or self.timers.wall) * 1000)
        message.store_id = sid
        entry = Scheduled(self._next_id, due, -1, message, known=False)
        entry.sid = sid
        self._heap.append((due, entry.id, entry))
        self.pending += 1
        size = len(message.body)
        self.pending_bytes += size
        self.gauge.bytes += size + MESSAGE_OVERHEAD

    def arm(self) -> None:
        """Recovery is over: order the heap and ask for the first deadline."""
        heapq.heapify(self._heap)
        self._arm()

    # -- the deadline --------------------------------------------------------------------

    def _monotonic(self, due: int) -> float:
        return due / 1000 - self.timers.wall_offset

    def _head(self) -> Scheduled | None:
        heap = self._heap
        while heap:
            entry = heap[0][2]
            if entry.live:
                return entry
            heapq.heappop(heap)
        return None

    def _arm(self) -> None:
        head = self._head()
        if head is None:
            return
        when = self._monotonic(head.due)
        armed = self._armed
        if armed is None or when < armed:
            self._armed = when
            self.timers.schedule(when, self)

    def on_deadline(self, now: float) -> None:
        if self.deleted:
            return
        armed = self._armed
        if armed is not None and now + _SLACK >= armed:
            self._armed = None
        limit = (now + self.timers.wall_offset + _SLACK) * 1000
        released = 0
        heap = self._heap
        while heap:
            due, _ident, entry = heap[0]
            if not entry.live:
                heapq.heappop(heap)
                continue
            if due > limit:
                break
            if released == RELEASE_BATCH:
                # The rest on the next turn: other connections get the loop meanwhile.
                self._armed = now + _SLACK
                self.timers.schedule(now + _SLACK, self)
                return
            heapq.heappop(heap)
            self._release(entry)
            released += 1
        self._arm()

    def _take(self, entry: Scheduled) -> None:
        """``entry`` leaves the store (its heap slot is dropped lazily)."""
        entry.live = False
        self.pending -= 1
        size = len(entry.message.body)
        self.pending_bytes -= size
        self.gauge.bytes -= size + MESSAGE_OVERHEAD
        if entry.sid:
            self.vhost.journal.removed(self.store_id, entry.sid)

    def _release(self, entry: Scheduled) -> None:
        """Route a due message from the exchange, as the plugin does when its timer fires."""
        self._take(entry)
        message = entry.message
        try:
            headers = dict(message.headers or {})
            headers[DELAY_HEADER] = -(entry.delay if entry.known else delay_of(headers))
            message = message.replace(headers=headers)
        except TypeError:
            pass  # no encoder for its format: routed as it is (``releasing`` below)
        exchange = self.exchange
        kind = self.kind
        kind.releasing = True
        try:
            queues, message = self.vhost.router.route_publish(
                exchange, message.routing_key, message
            )
        finally:
            kind.releasing = False
        self.n_released += 1
        if not queues:
            self.n_unroutable += 1  # the plugin, too, makes one attempt and drops it
            return
        # (The exchange's publish_out counted this message when it was held.)
        for queue in queues:
            queue.enqueue(message)

    # -- looking and changing ------------------------------------------------------------

    def entries(
        self, selector: Selector | None = None, limit: int | None = None, skip: int = 0
    ) -> list[Scheduled]:
        """Pending messages in due-time order (``skip`` first, at most ``limit``)."""
        live = (t for t in self._heap if t[2].live and (selector is None or selector.matches(t[2])))
        chosen = sorted(live) if limit is None else heapq.nsmallest(skip + max(0, limit), live)
        return [t[2] for t in chosen[skip:]]

    def next_due(self) -> int | None:
        head = self._head()
        return None if head is None else head.due

    def cancel(self, selector: Selector) -> int:
        """Drop the pending messages ``selector`` matches; how many."""
        count = 0
        for _due, _ident, entry in self._heap:
            if entry.live and selector.matches(entry):
                self._take(entry)
                count += 1
        self.n_cancelled += count
        self._compact()
        return count

    def reschedule(
        self, selector: Selector, *, due: int | None = None, delay: int | None = None
    ) -> list[Scheduled]:
        """Give the matching messages a new due time: ``due`` (wall clock, ms) or ``delay``
        ms from now. Each gets a new id (and a new store record); the new entries."""
        if (due is None) == (delay is None):
            raise ValueError("give either due or delay")
        now_ms = int(self.timers.wall * 1000)
        if delay is not None:
            if not 0 <= delay <= MAX_DELAY:
                raise ValueError(f"delay must be 0 to {MAX_DELAY} ms")
            due = now_ms + delay
        assert due is not None
        chosen = [t[2] for t in self._heap if t[2].live and selector.matches(t[2])]
        moved = []
        for entry in sorted(chosen, key=lambda e: (e.due, e.id)):
            self._take(entry)
            moved.append(self.hold(entry.message, due, max(0, due - now_ms)))
        self._compact()
        return moved

    def _compact(self) -> None:
        """Rebuild the heap once cancelled entries outnumber the live ones."""
        if len(self._heap) > 64 and len(self._heap) > 2 * self.pending:
            self._heap = [t for t in self._heap if t[2].live]
            heapq.heapify(self._heap)

    def drop(self) -> None:
        """The exchange is deleted: its pending messages go, and the hidden queue."""
        for _due, _ident, entry in self._heap:
            if entry.live:
                self._take(entry)
        self._heap = []
        self.deleted = True
        if self.store_id:
            self.vhost.journal.queue_deleted(self.vhost.name, self.name, self.store_id)
            self.store_id = 0

    # -- the AMQP convention -------------------------------------------------------------

    def _cancel_request(self, message: Message, headers: Mapping[str, object]) -> None:
        """Cancel what the request's ``x-delayed-cancel`` selects; answer ``reply_to``
        (if given) with ``x-delayed-cancelled: <count>`` and the request's correlation id."""
        selector = Selector.from_header(headers.get(CANCEL_HEADER))
        count = self.cancel(selector)
        reply_to = message.properties.reply_to
        if not reply_to:
            return
        try:
            reply = message.replace(
                exchange="", routing_key=reply_to, headers={CANCELLED_HEADER: count}, reply_to=None
            )
        except TypeError:
            return  # no encoder for this format: no reply
        default = self.vhost.exchanges[""]
        queues, reply = self.vhost.router.route_publish(default, reply_to, reply)
        for queue in queues:
            queue.enqueue(reply)
