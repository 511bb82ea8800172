"""Classic FIFO queues; owned by a virtual host (``QueueHost``), consumed through the
interfaces of ``model/consumer.py`` by whatever front end owns a consumer.

Theory of operation: a queue holds ``ready`` entries in sequence order and a list of
consumers. The invariant after every public call is "if ``ready`` is not empty, no consumer
can take a message right now", so publishing to a queue whose consumers have credit hands
the message straight to one of them (round-robin) without touching ``ready``. Whatever frees
credit (an ack, a qos change, flow on, a writable socket) calls ``dispatch``.

Requeued entries keep their sequence number, so they go back to their original position
(RabbitMQ's behaviour), marked redelivered.

Features (TTLs, length limits, priorities, single active consumer, consumer priorities,
quorum delivery counts) live in ``queue_features.FeatureMixin``: a queue runs them only
once ``_special`` is set (from its arguments, or when a message with ``expiration`` or a
consumer with ``x-priority`` arrives). A plain queue pays one attribute test per call.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from typing import TYPE_CHECKING

from leveret.errors import AccessRefused
from leveret.model.consumer import Browser, Consumer
from leveret.model.entry import MESSAGE_OVERHEAD, QueuedMessage
from leveret.model.journal import NULL_JOURNAL, Journal
from leveret.model.memory_gauge import MemoryGauge
from leveret.model.message import HINT_PERSISTENT, QUEUE_HINTS
from leveret.model.paging import Page, PagedTail, Pager, PageSource
from leveret.model.queue_args import PLAIN, QueueConfig
from leveret.model.queue_features import FeatureMixin, PriorityReady, QueueHost
from leveret.model.timers import Timers

if TYPE_CHECKING:
    from array import array
    from collections.abc import Iterable, Iterator, Mapping

    from leveret.model.message import Message


__all__ = ["MESSAGE_OVERHEAD", "Consumer", "Queue", "QueuedMessage"]


class Queue(FeatureMixin):
    """A classic queue: FIFO with round-robin delivery to consumers."""

    _entry_cls = QueuedMessage
    # Paging (model/paging.py): ready messages kept as objects before the tail goes to pages,
    # the level at which the next page is read back, and the size of a page.
    resident_max = 2048
    resident_low = 1024
    # Ready messages beyond which a queue whose consumers are falling behind asks for its
    # publishers to be paced (Session.feeds_backlog; server/connection.py): half the resident
    # window, so a queue whose consumers keep up with paced publishers does not page.
    backlog_pace = 1024
    page_messages = 1024
    page_bytes = 1 << 20

    def __init__(
        self,
        vhost_name: str,
        name: str,
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
        self.ready: deque[QueuedMessage] | PriorityReady = (
            deque() if config.max_priority is None else PriorityReady(config.max_priority)
        )
        self.unacked_count = 0
        self.consumers: list[Consumer] = []
        self.deleted = False
        self._next_seq = 0
        self._rr = 0
        self._special = config.special
        # Durable queues get an id from the store (0: nothing of this queue is stored).
        self.store_id = 0
        self.journal: Journal = NULL_JOURNAL
        # Where a deep queue pages its tail (None: it never pages), and the paged tail.
        self.pager: Pager | None = None
        self._tail: PagedTail | None = None
        # Consumers that look at ready messages without taking them (AMQP 0-10's
        # not-acquired subscriptions): woken when messages become ready.
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
        self._init_features()

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def message_count(self) -> int:
        tail = self._tail
        return len(self.ready) if tail is None else len(self.ready) + tail.count

    @property
    def uses_features(self) -> bool:
        """Whether the queue runs the feature paths (which never page)."""
        return self._special

    @property
    def paged_count(self) -> int:
        """Ready messages that are in pages on disk (not in memory)."""
        tail = self._tail
        return 0 if tail is None else tail.count - len(tail.open)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def has_exclusive_consumer(self) -> bool:
        return any(c.exclusive for c in self.consumers)

    def check_exclusive_use(self, exclusive: bool) -> None:
        """403 if an exclusive consumer holds the queue, or if a consumer asks to be
        exclusive while others consume (RabbitMQ's rule and text)."""
        if self.has_exclusive_consumer() or (exclusive and self.consumers):
            raise AccessRefused(
                f"queue '{self.name}' in vhost '{self.vhost_name}' in exclusive use"
            )

    # -- publishing and delivery ---------------------------------------------------------

    def enqueue(self, message: Message) -> bool:
        """Queue (or hand over) ``message``; False when the queue refused it (overflow)."""
        self.n_publish += 1
        if self.browsers:
            return self._enqueue_browsed(message)
        if self._special or message.hints & QUEUE_HINTS:
            return self._enqueue_special(message)
        self.gauge.bytes += len(message.body) + MESSAGE_OVERHEAD
        self._next_seq += 1
        entry = QueuedMessage(self._next_seq, message)
        if self.store_id and message.hints & HINT_PERSISTENT:
            entry.sid = self.journal.enqueued(self.store_id, message)
        if self.ready or not self.consumers or not self._deliver(entry):
            if self._tail is not None or len(self.ready) >= self.resident_max:
                self._to_tail(entry)
            else:
                self.ready.append(entry)
        return True

    def _enqueue_browsed(self, message: Message) -> bool:
        self.browsers, browsers = [], self.browsers
        try:
            accepted = self.enqueue(message)
        finally:
            self.browsers = browsers
        self.wake_browsers()
        return accepted

    def wake_browsers(self) -> None:
        """Ready messages may have arrived: let each browser look."""
        for browser in list(self.browsers):
            browser.browse()

    def falling_behind(self) -> bool:
        """Consumers are attached but the ready backlog is past ``backlog_pace``."""
        return len(self.ready) + self.paged_count > self.backlog_pace and bool(self.consumers)

    def can_deliver_now(self, message: Message) -> bool:
        """Whether a message published now would go straight to a consumer (``immediate``)."""
        return not self.ready and any(c.can_take(message) for c in self.consumers)

    def _deliver(self, entry: QueuedMessage) -> bool:
        consumers = self.consumers
        count = len(consumers)
        start = self._rr
        for i in range(count):
            consumer = consumers[(start + i) % count]
            if consumer.can_take(entry.message):
                self._rr = (start + i + 1) % count
                self._hand_over(consumer, entry)
                return True
        return False

    def dispatch(self) -> None:
        if self._special:
            self._dispatch_special()
            return
        ready = self.ready
        while True:
            while ready and self.consumers and self._deliver(ready[0]):
                ready.popleft()
            if self._tail is None or len(ready) >= self.resident_low:
                return
            self._page_in()

    def get(self, *, auto_settle: bool) -> QueuedMessage | None:
        """Take the head (a get rather than a delivery to a consumer); unless
        ``auto_settle`` it stays unsettled here."""
        if self._special or self._expires_on:
            self._before_get()
        if not self.ready:
            self.n_get_empty += 1
            return None
        entry = self.ready.popleft()
        if self._tail is not None and len(self.ready) < self.resident_low:
            self._page_in()
        if entry.redelivered:
            self.n_redeliver += 1
        if auto_settle:
            self.n_get_no_ack += 1
            self._gone(entry)
        else:
            self.n_get += 1
            self.unacked_count += 1
            if entry.sid and not entry.redelivered:
                self.journal.delivered(self.store_id, entry.sid)
        if self._special:
            self.ready_bytes -= len(entry.message.body)
        return entry

    def acquire(self, entry: QueuedMessage) -> QueuedMessage | None:
        """Take the entry numbered ``entry.seq``, still ready, out of the queue unsettled,
        as a delivery would (AMQP 0-10's message.acquire of a browsed message); returns it
        (``entry`` itself, or the resident entry when ``entry`` was a copy read from a
        page: its page is brought in first), None when it is not ready any more."""
        ready = self.ready
        if not isinstance(ready, deque):
            if not ready.remove(entry):
                return None
        else:
            seq = entry.seq
            tail = self._tail
            while tail is not None and tail.count and (not ready or ready[-1].seq < seq):
                self._page_in(len(ready) + 1)  # a browsed copy from the paged tail
            i = bisect_left(ready, seq, key=lambda e: e.seq)
            if i >= len(ready) or ready[i].seq != seq:
                return None
            entry = ready[i]
            del ready[i]
        self.unacked_count += 1
        if self._special:
            self.ready_bytes -= len(entry.message.body)
        if entry.sid and not entry.redelivered:
            self.journal.delivered(self.store_id, entry.sid)
        if self._tail is not None and len(ready) < self.resident_low:
            self._page_in()
        return entry

    def take(self, entry: QueuedMessage) -> bool:
        """Remove ``entry``, a ready message, for good (a move to another queue: the caller
        enqueues it there first, in the same loop turn, so the store commits both in one
        batch); False if it is not ready (not resident) any more."""
        ready = self.ready
        if isinstance(ready, PriorityReady):
            if not ready.remove(entry):
                return False
        else:
            i = bisect_left(ready, entry.seq, key=lambda e: e.seq)
            if i >= len(ready) or ready[i] is not entry:
                return False
            del ready[i]
        if self._special:
            self.ready_bytes -= len(entry.message.body)
        self._gone(entry)
        if self._tail is not None and len(ready) < self.resident_low:
            self._page_in()
        return True

    def browse(self) -> Iterator[QueuedMessage]:
        """Every ready entry in delivery order, without taking or marking any: the resident
        ones as they are (a snapshot), then the paged tail a page at a time (copies). If the
        queue reads a page back or drops it while the iteration is paused, it stops there."""
        yield from list(self.ready)
        tail = self._tail
        if tail is not None:
            for page in list(tail.pages):
                if self._tail is not tail or page not in tail.pages:
                    return  # read back or purged meanwhile: the snapshot is stale
                yield from page.load(tail.pager, self._entry_cls)
            yield from list(tail.open)

    def unpage(self) -> None:
        """Bring a paged tail back into memory (so that any ready entry can be taken)."""
        self._unpage_all()

    def withdraw(self, sid: int) -> QueuedMessage | None:
        """The ready entry with store id ``sid``, taken out unsettled (recovery of a
        prepared distributed transaction that settles it); None when it is not there."""
        self._unpage_all()
        for entry in self.ready:
            if entry.sid == sid:
                return self.acquire(entry)
        return None

    def browse_after(self, seq: int, limit: int) -> list[QueuedMessage]:
        """Up to ``limit`` ready entries numbered after ``seq``, in the order they would be
        delivered (AMQP 0-10's not-acquiring subscriptions); entries of the paged tail are
        copies read from their pages, which stay where they are (``acquire`` takes one)."""
        ready = self.ready
        if not isinstance(ready, deque):
            return sorted((e for e in ready if e.seq > seq), key=lambda e: e.seq)[:limit]
        start = bisect_right(ready, seq, key=lambda e: e.seq)
        found = [ready[i] for i in range(start, min(len(ready), start + limit))]
        tail = self._tail
        if tail is None or len(found) >= limit:
            return found
        pages = tail.pages
        for k, page in enumerate(pages):
            after = pages[k + 1].first_seq if k + 1 < len(pages) else None
            if after is None and tail.open:
                after = tail.open[0].seq
            if after is not None and after <= seq + 1:
                continue  # every entry of this page is numbered at most ``seq``
            for entry in page.load(tail.pager, self._entry_cls):
                if entry.seq > seq:
                    found.append(entry)
                    if len(found) >= limit:
                        return found
        for entry in tail.open:
            if entry.seq > seq:
                found.append(entry)
                if len(found) >= limit:
                    break
        return found

    # -- settlement ----------------------------------------------------------------------

    def settle(self, entry: QueuedMessage) -> None:
        """An unacked entry was acked, rejected or dropped: it leaves the queue."""
        self.n_ack += 1
        self.unacked_count -= 1
        self._gone(entry)
        if self._sac_draining is not None:
            self.dispatch()  # the cancelled active consumer may be done: hand over

    def requeue(self, entries: Iterable[QueuedMessage], redelivered: bool = True) -> None:
        """Put unacked entries back at their original positions, marked redelivered unless
        ``redelivered`` is False (then the mark stays as it was)."""
        if self._special:
            self._requeue_special(entries, redelivered)
            if self.browsers:
                self.wake_browsers()
            return
        ready = self.ready
        assert isinstance(ready, deque)
        count = 0
        for entry in sorted(entries, key=lambda e: e.seq, reverse=True):
            count += 1
            if redelivered:
                entry.redelivered = True
            if not ready or entry.seq < ready[0].seq:
                ready.appendleft(entry)
            else:
                ready.insert(bisect_left(ready, entry.seq, key=lambda e: e.seq), entry)
        self.unacked_count -= count
        self.dispatch()
        if self.browsers:
            self.wake_browsers()

    def counts_returns(self) -> bool:
        return self.config.quorum

    def purge(self) -> int:
        count = len(self.ready)
        resident = list(self.ready)
        tail = self._tail
        if tail is not None:
            count += tail.count
            resident += tail.open
        self.gauge.bytes -= sum(len(e.message.body) for e in resident) + len(resident) * (
            MESSAGE_OVERHEAD
        )
        if self.store_id:
            journal, queue_id = self.journal, self.store_id
            for entry in resident:
                if entry.sid:
                    journal.removed(queue_id, entry.sid)
            if tail is not None:
                for page in tail.pages:
                    for sid in page.sids:
                        journal.removed(queue_id, sid)
        if tail is not None:
            tail.discard_all()
            self._tail = None
        self.ready.clear()
        self.ready_bytes = 0
        return count

    def restore(
        self, message: Message, sid: int, redelivered: bool, enqueued_at: float | None = None
    ) -> None:
        """Put a message recovered from the store at the tail, as it was (no journal write,
        no delivery: recovery runs before any client connects). ``enqueued_at`` (wall
        clock) is when it first entered the queue: its TTL counts from then."""
        self._next_seq += 1
        entry = self._entry_cls(self._next_seq, message, redelivered)
        entry.sid = sid
        size = len(message.body)
        self.gauge.bytes += size + MESSAGE_OVERHEAD
        if self._special or message.hints & QUEUE_HINTS:
            self._restore_special(entry, enqueued_at)
        elif self._tail is not None or len(self.ready) >= self.resident_max:
            self._to_tail(entry)
        else:
            self.ready.append(entry)

    # -- paging (model/paging.py) --------------------------------------------------------

    def ready_entries(self) -> list[QueuedMessage]:
        """Every ready entry in order, paged ones read back (copies; for tests and tools)."""
        entries = list(self.ready)
        tail = self._tail
        if tail is not None:
            for page in tail.pages:
                entries += page.load(tail.pager, self._entry_cls)
            entries += tail.open
        return entries

    def restore_page(
        self, source: PageSource, handle: object, count: int, sids: array[int]
    ) -> None:
        """Put ``count`` recovered messages at the tail as one page that ``source`` loads
        when the head needs it (no journal write: recovery runs before clients connect).
        Only for a queue on the plain path, after its head was restored."""
        assert not self._special
        tail = self._tail
        if tail is None:
            tail = self._tail = PagedTail(self.pager)
        assert not tail.open  # a page never goes behind messages that are newer
        first = self._next_seq + 1
        self._next_seq += count
        tail.pages.append(Page(handle, count, 0, sids, None, None, source, first))
        tail.count += count

    def _to_tail(self, entry: QueuedMessage) -> None:
        """Append behind the resident head; a full open page goes to the pager."""
        tail = self._tail
        if tail is None:
            if self.pager is None:
                self.ready.append(entry)
                return
            tail = self._tail = PagedTail(self.pager)
        tail.open.append(entry)
        tail.open_bytes += len(entry.message.body)
        tail.count += 1
        if (len(tail.open) >= self.page_messages or tail.open_bytes >= self.page_bytes) and len(
            tail.open
        ) >= tail.hold:
            page = tail.flush()
            if page is None:
                # The pager could not take it (disk trouble): keep the page in memory and
                # try again a page later, not at every message.
                tail.hold = len(tail.open) + self.page_messages
            else:
                tail.hold = 0
                self.gauge.bytes -= page.body_bytes + page.count * MESSAGE_OVERHEAD

    def _page_in(self, low: int | None = None) -> None:
        """Refill the head from the tail until it holds ``low`` (default ``resident_low``)
        messages or the tail is empty."""
        tail = self._tail
        ready = self.ready
        assert tail is not None
        assert isinstance(ready, deque)
        if low is None:
            low = self.resident_low
        while tail.count and len(ready) < low:
            paged = bool(tail.pages)
            entries = tail.take_page(self._entry_cls)
            if paged:
                self.gauge.bytes += sum(len(e.message.body) for e in entries) + len(entries) * (
                    MESSAGE_OVERHEAD
                )
            ready.extend(entries)
        if not tail.count:
            self._tail = None

    def _unpage_all(self) -> None:
        """Bring every paged message back: the feature paths work on ``ready`` alone."""
        if self._tail is not None:
            self._page_in(low=1 << 62)

    # -- consumers -----------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """Attach ``consumer`` (see ``check_exclusive_use``)."""
        self.check_exclusive_use(consumer.exclusive)
        if consumer.priority:
            self._enter_features()
            self._prioritised = True
        self.consumers.append(consumer)
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        try:
            index = self.consumers.index(consumer)
        except ValueError:
            return
        del self.consumers[index]
        if index < self._rr:
            self._rr -= 1
        if self._rr >= len(self.consumers):
            self._rr = 0
        if self._expires_on and not self.consumers:
            self.touch()
        if self._special and index == 0 and self.config.single_active_consumer:
            if consumer.unsettled > 0:
                self._sac_draining = consumer  # hand over once its deliveries are settled
            self.dispatch()  # fail over to the next consumer
        if self.auto_delete and not self.consumers and self.host is not None:
            self.host.retire(self)  # an auto-delete queue goes with its last consumer
