"""The queue of the classic type (``classic.py``): FIFO with round-robin delivery, paging of
deep queues, priority levels (``priority.py``) and the features of ``features.py``. A keyed
queue (``keyed.py``) and a quorum queue (``quorum.py``) build on it.

Theory of operation: a queue holds ``ready`` entries in sequence order and a list of
consumers. The invariant after every public call is "if ``ready`` is not empty, no consumer
can take a message right now", so publishing to a queue whose consumers have credit hands
the message straight to one of them (round-robin) without touching ``ready``. Whatever frees
credit (an ack, a qos change, flow on, a writable socket) calls ``dispatch``.

Requeued entries keep their sequence number, so they go back to their original position
(RabbitMQ's behaviour), marked redelivered.

Features (TTLs, length limits, single active consumer, consumer priorities, and the hooks
of priority and quorum queues) live in ``features.FeatureMixin``: a queue runs them only
once ``_special`` is set (from its arguments, or when a message with ``expiration`` or a
consumer with ``x-priority`` arrives). A plain queue pays one attribute test per call. The
plain paths write to the queue's store only for persistent messages of a durable queue (the
journal keeps no others); a type that keeps every message (quorum) runs the feature paths.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from itertools import islice
from typing import TYPE_CHECKING

from leveret.model.entry import MESSAGE_OVERHEAD, QueuedMessage
from leveret.model.message import HINT_PERSISTENT, QUEUE_HINTS
from leveret.model.paging import Page, PagedTail, PageSource
from leveret.model.queues.args import PLAIN
from leveret.model.queues.base import Browsed
from leveret.model.queues.features import FeatureMixin
from leveret.model.queues.priority import PriorityReady, make_ready

if TYPE_CHECKING:
    from array import array
    from collections.abc import Iterable, Iterator, Mapping

    from leveret.model.consumer import Consumer
    from leveret.model.memory_gauge import MemoryGauge
    from leveret.model.message import Message
    from leveret.model.queues.args import QueueConfig
    from leveret.model.queues.base import QueueHost, QueueType
    from leveret.model.timers import Timers


__all__ = ["ClassicQueue"]


class ClassicQueue(FeatureMixin):
    """A classic queue: FIFO with round-robin delivery to consumers."""

    _entry_cls = QueuedMessage
    # Paging (model/paging.py): ready messages kept as objects before the tail goes to pages,
    # the level at which the next page is read back, and the size of a page.
    resident_max = 2048
    resident_low = 1024
    # Past ``resident_max``, a message whose body is at least this large stays resident while
    # the broker's queued bytes are under the gauge's paging level (``_pages``).
    large_body = 4096
    # Ready messages beyond which a queue whose consumers are falling behind asks for its
    # publishers to be paced (Session.feeds_backlog; server/connection.py): half the resident
    # window, so a queue whose consumers keep up with paced publishers does not page.
    backlog_pace = 1024
    # Ready messages beyond which such a queue is far behind: its publishers' connections are
    # not read for a moment (Publisher.feeds_far_backlog; Shell.held), as RabbitMQ's credit
    # flow stops a publisher its queues cannot keep up with. Four times the pace, so a paced
    # publisher whose consumers keep up never reaches it, and the backlog stays within two
    # resident windows (a few pages at most).
    backlog_hold = 4096  # 4 * backlog_pace, spelt out: mypyc sets it outside the class body
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
        queue_type: QueueType,
    ) -> None:
        super().__init__(
            vhost_name,
            name,
            queue_type,
            durable=durable,
            exclusive_owner=exclusive_owner,
            auto_delete=auto_delete,
            arguments=arguments,
            gauge=gauge,
            config=config,
            host=host,
            timers=timers,
        )
        self.ready = make_ready(config)
        self._next_seq = 0
        self._special = config.special
        # The paged tail of a deep queue (its pager: ``Queue.pager``).
        self._tail = None
        self._init_features()

    @property
    def message_count(self) -> int:
        tail = self._tail
        return len(self.ready) if tail is None else len(self.ready) + tail.count

    def has_ready(self) -> bool:
        return bool(self.ready)

    @property
    def uses_features(self) -> bool:
        """Whether the queue runs the feature paths (which never page)."""
        return self._special

    @property
    def paged_count(self) -> int:
        tail = self._tail
        return 0 if tail is None else tail.count - len(tail.open)

    @property
    def message_bytes(self) -> int:
        if self._special:
            return int(self.ready_bytes)
        # The plain path does not count them: a sample of the head (management reads it).
        return sum(len(e.message.body) for e in list(self.ready)[:100_000])

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
            self.store.enqueued(self, entry)
        if self.ready or not self.consumers or not self._deliver(entry):
            if self._tail is not None or (
                len(self.ready) >= self.resident_max and self._pages(message)
            ):
                self._to_tail(entry)
            else:
                self.ready.append(entry)
        return True

    def _pages(self, message: Message) -> bool:
        """Whether ``message``, arriving past ``resident_max``, starts the paged tail.

        Counting messages bounds what a deep queue of small ones costs: its objects, which
        the gauge only estimates (``MESSAGE_OVERHEAD``), and paging one costs little. A large
        body is the other way round: it is almost all bytes the gauge counts exactly, and a
        page is two more copies of it through the page cache (write, read back). So a large
        body pages only under memory pressure, as RabbitMQ's classic queues do: once the
        broker's queued bytes reach the gauge's paging level (the memory high watermark
        times ``memory_paging_percent``). The head stays bounded: each message kept past
        ``resident_max`` adds at least ``large_body`` bytes to the gauge, and none is kept
        once it is at the level (a paging level of 0 pages by count alone)."""
        gauge = self.gauge
        return len(message.body) < self.large_body or gauge.bytes >= gauge.paging_level

    def _enqueue_browsed(self, message: Message) -> bool:
        self.browsers, browsers = [], self.browsers
        try:
            accepted = self.enqueue(message)
        finally:
            self.browsers = browsers
        self.wake_browsers()
        return accepted

    def falling_behind(self) -> bool:
        """Consumers are attached but the ready backlog is past ``backlog_pace``."""
        return len(self.ready) + self.paged_count > self.backlog_pace and bool(self.consumers)

    def far_behind(self) -> bool:
        """Consumers are attached but the ready backlog is past ``backlog_hold``."""
        return len(self.ready) + self.paged_count > self.backlog_hold and bool(self.consumers)

    def departed(self) -> int:
        # Every accepted message took the next sequence number (a refused one none).
        return self._next_seq - self.message_count

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
            if entry.sid:
                self.store.delivered(self, entry)
        if self._special:
            self.ready_bytes -= len(entry.message.body)
        return entry

    def acquire(self, entry: QueuedMessage) -> QueuedMessage | None:
        """Take the entry numbered ``entry.seq``, still ready, out of the queue unsettled,
        as a delivery would (AMQP 0-10's message.acquire of a browsed message); returns it
        (``entry`` itself, or the resident entry when ``entry`` was a copy read from a
        page: its page is brought in first), None when it is not ready any more."""
        ready = self.ready
        if isinstance(ready, PriorityReady):
            if not ready.remove(entry):
                return None
            self._acquired(entry)
            return entry
        seq = entry.seq
        tail = self._tail
        while tail is not None and tail.count and (not ready or ready[-1].seq < seq):
            self._page_in(len(ready) + 1)  # a browsed copy from the paged tail
        i = bisect_left(ready, seq, key=lambda e: e.seq)
        if i >= len(ready) or ready[i].seq != seq:
            return None
        entry = ready[i]
        del ready[i]
        self._acquired(entry)
        return entry

    def _acquired(self, entry: QueuedMessage) -> None:
        """``entry`` was taken out of ``ready`` unsettled (``acquire``)."""
        self.unacked_count += 1
        if self._special:
            self.ready_bytes -= len(entry.message.body)
        if entry.sid:
            self.store.delivered(self, entry)
        if self._tail is not None and len(self.ready) < self.resident_low:
            self._page_in()

    def take(self, entry: QueuedMessage) -> bool:
        """Remove ``entry``, a ready message, for good (a move to another queue: the caller
        enqueues it there first, in the same loop turn, so the store commits both in one
        batch); False if it is not ready (not resident) any more."""
        if not self._remove_ready(entry):
            return False
        if self._special:
            self.ready_bytes -= len(entry.message.body)
        self._gone(entry)
        if self._tail is not None and len(self.ready) < self.resident_low:
            self._page_in()
        return True

    def _remove_ready(self, entry: QueuedMessage) -> bool:
        """Take ``entry`` out of ``ready`` wherever it is; False when it is not there."""
        ready = self.ready
        if isinstance(ready, PriorityReady):
            return ready.remove(entry)
        i = bisect_left(ready, entry.seq, key=lambda e: e.seq)
        if i >= len(ready) or ready[i] is not entry:
            return False
        del ready[i]
        return True

    def browse(self, start: int = 0) -> Iterator[Browsed]:
        """Every ready entry from position ``start`` in delivery order, without taking or
        marking any: the resident ones as they are (a snapshot), then the paged tail a page
        at a time (copies). If the queue reads a page back or drops it while the iteration
        is paused, it stops there."""
        for position, entry in enumerate(self._snapshot()):
            if position >= start:
                yield Browsed(position, entry)

    def _snapshot(self) -> Iterator[QueuedMessage]:
        yield from list(self.ready)
        tail = self._tail
        if tail is not None:
            for page in list(tail.pages):
                if self._tail is not tail or page not in tail.pages:
                    return  # read back or purged meanwhile: the snapshot is stale
                yield from page.load(tail.pager, self._entry_cls)
            yield from list(tail.open)

    def head(self, count: int) -> list[QueuedMessage]:
        return list(islice(self.ready, count))

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
        if isinstance(ready, PriorityReady):
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
            if entry.sid:
                self.store.requeued(self, entry)
            if not ready or entry.seq < ready[0].seq:
                ready.appendleft(entry)
            else:
                ready.insert(bisect_left(ready, entry.seq, key=lambda e: e.seq), entry)
        self.unacked_count -= count
        self.dispatch()
        if self.browsers:
            self.wake_browsers()

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
            sids = [entry.sid for entry in resident if entry.sid]
            if tail is not None:
                for page in tail.pages:
                    sids.extend(page.sids)
            if sids:
                self.store.purged(self, sids)
        if tail is not None:
            tail.discard_all()
            self._tail = None
        self.ready.clear()
        self.ready_bytes = 0
        return count

    def on_delete(self) -> None:
        self.purge()

    def restore(
        self, message: Message, sid: int, redelivered: bool, enqueued_at: float | None = None
    ) -> None:
        """Put a message recovered from the store at the tail, as it was (no store write,
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
        index = self._detach(consumer)
        if index < 0:
            return
        if self._expires_on and not self.consumers:
            self.touch()
        if self._special and index == 0 and self.config.single_active_consumer:
            if consumer.unsettled > 0:
                self._sac_draining = consumer  # hand over once its deliveries are settled
            self.dispatch()  # fail over to the next consumer
        self._retire_if_unused()
