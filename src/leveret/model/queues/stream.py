"""Stream queues (``x-queue-type: stream``, RabbitMQ's ``rabbit_stream_queue``): an
append-only log read by offset.

Theory of operation: a ``StreamQueue`` appends every message it is given to a ``StreamLog``
(``stream_log.py``; offsets 0, 1, 2, ...) and never removes one on delivery. Each consumer
(``StreamConsumer``) keeps its own next offset; ``dispatch`` reads from the log at that offset
for every consumer with credit, and settling a delivery only gives credit back (the owner
does; nothing is removed). A consumer that has read everything waits: the next append is
handed to it by the same ``dispatch``. Retention drops whole segments from the head
(``StreamLog.retain``), checked when a segment fills and, for ``x-max-age``, on a timer; a
consumer behind the new head jumps to it. Its type says so to front ends: no get, purge,
reject or automatic settlement; consumers need credit and choose an offset.

De-duplication: a message with ``x-stream-producer`` (string of 1 to 256 characters) and
``x-stream-sequence`` (integer >= 0) headers is dropped when the log already holds a
sequence at least as high for that producer; the log keeps that state durably
(``StreamLog.producers``). The stream protocol's publisher reference and publishing id are
the same pair (``StreamQueue.append_entries``).

A ``ChunkConsumer`` (a stream-protocol subscription) takes whole chunks once they are
committed (on disk), its credit counting chunks; its owner is a ``ChunkOwner`` whose callbacks
the front end supplies.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, NamedTuple

from leveret.errors import PreconditionFailed
from leveret.model.consumer import UNLIMITED, Consumer, ConsumerOwner, Source
from leveret.model.entry import QueuedMessage
from leveret.model.message import HINT_HEADERS
from leveret.model.queues.args import parse_age, type_name
from leveret.model.queues.base import Browsed, Queue, QueueType, register
from leveret.model.queues.classic import CLASSIC_ONLY
from leveret.model.queues.stream_log import OFFSET_HEADER, StoredChunk, StreamEntry

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

    from leveret.model.message import Message
    from leveret.model.queues.args import QueueConfig
    from leveret.model.queues.base import QueueHost
    from leveret.model.queues.stream_log import StreamBackend, StreamLog
    from leveret.model.timers import Timers

__all__ = [
    "NEXT",
    "OFFSET_HEADER",
    "STREAM",
    "ChunkConsumer",
    "ChunkOwner",
    "OffsetSpec",
    "StreamConsumer",
    "StreamQueue",
    "StreamType",
    "parse_offset_spec",
]

PRODUCER_HEADER = "x-stream-producer"
SEQUENCE_HEADER = "x-stream-sequence"
# Largest number of entries read from the log at once for one consumer.
READ_BATCH = 256
# Longer producer ids are not used for de-duplication (bad input, bounded record fields).
MAX_PRODUCER_LENGTH = 256
# How often x-max-age is checked at most (seconds); shorter ages are checked as often.
AGE_CHECK_EVERY = 60.0


class StreamType(QueueType):
    """RabbitMQ's ``rabbit_stream_queue``: durable only, read by offset."""

    name = "stream"
    durable_only = True
    # What RabbitMQ 3.10 refuses on a stream ("... of queue type rabbit_stream_queue").
    refused: tuple[str, ...] = (
        "x-max-length",
        "x-message-ttl",
        "x-expires",
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-single-active-consumer",
        "x-overflow",
        "x-delivery-limit",
        "x-dead-letter-strategy",
        "x-max-in-memory-length",
        "x-max-in-memory-bytes",
        "x-quorum-initial-group-size",
        *CLASSIC_ONLY,
    )
    policy_keys: tuple[str, ...] = (
        "max-length-bytes",
        "max-age",
        "stream-max-segment-size-bytes",
        "min-in-sync",
    )
    gets = False
    purges = False
    rejects = False
    removes = False
    auto_settle = False
    needs_credit = True
    offsets = True

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
        return StreamQueue(
            host.name,
            name,
            backend=host.stream_backend,
            arguments=arguments,
            config=config,
            host=host,
            timers=host.timers,
        )


STREAM = register(StreamType())


# -- where a consumer starts ---------------------------------------------------------------


class OffsetSpec(NamedTuple):
    """A parsed ``x-stream-offset``: kind is first, last, next, offset or timestamp."""

    kind: str
    value: int = 0  # the offset, or a timestamp in ms


NEXT = OffsetSpec("next")


def parse_offset_spec(
    arguments: Mapping[str, object] | None, *, where: str, wall_ms: int
) -> OffsetSpec:
    """The ``x-stream-offset`` consumer argument; 406 as RabbitMQ when it is unusable.

    ``wall_ms`` is now (ms since the epoch), for intervals such as ``"1h"``."""
    if not arguments or OFFSET_HEADER not in arguments:
        return NEXT
    value = arguments[OFFSET_HEADER]
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, str):
        if value in ("first", "last", "next"):
            return OffsetSpec(value)
        age = parse_age(value)
        if age is not None:
            return OffsetSpec("timestamp", wall_ms - int(age * 1000))
        shown = f'{{longstr,<<"{value}">>}}'
    elif isinstance(value, int) and not isinstance(value, bool):
        return OffsetSpec("offset", max(value, 0))
    elif isinstance(value, datetime.datetime):
        return OffsetSpec("timestamp", int(value.timestamp()) * 1000)
    else:
        shown = f"{{{type_name(value)},{value!r}}}"
    raise PreconditionFailed(
        f"invalid arg '{OFFSET_HEADER}' {where}: {{invalid_stream_offset_arg,{shown}}}"
    )


def _dedup_key(headers: Mapping[str, object]) -> tuple[str, int]:
    """(producer, sequence) from the de-duplication headers, ("", -1) when absent/unusable."""
    producer = headers.get(PRODUCER_HEADER)
    if producer is None:
        return "", -1
    if isinstance(producer, bytes):
        producer = producer.decode(errors="replace")
    sequence = headers.get(SEQUENCE_HEADER)
    if (
        not isinstance(producer, str)
        or not producer
        or len(producer) > MAX_PRODUCER_LENGTH
        or not isinstance(sequence, int)
        or isinstance(sequence, bool)
        or sequence < 0
    ):
        return "", -1
    return producer, sequence


# -- the queue and its consumers -----------------------------------------------------------


def _without_duplicates(
    entries: list[bytes], counts: list[int] | None, ids: list[int], stored: int
) -> tuple[list[bytes], list[int] | None, list[int], int]:
    """The entries whose id is above ``stored`` and every earlier id of the frame (what one
    append per message would have kept), their counts, their ids, and the highest id."""
    kept: list[bytes] = []
    kept_counts: list[int] | None = None if counts is None else []
    kept_ids: list[int] = []
    last = stored
    for i, pid in enumerate(ids):
        if pid > last:
            last = pid
            kept.append(entries[i])
            kept_ids.append(pid)
            if kept_counts is not None and counts is not None:
                kept_counts.append(counts[i])
    return kept, kept_counts, kept_ids, last


class StreamConsumer(Consumer):
    """A consumer of a stream: where it starts, and the next offset it gets."""

    __slots__ = ("offset", "spec")

    def __init__(
        self,
        tag: str,
        queue: Source,
        owner: ConsumerOwner,
        *,
        spec: OffsetSpec,
        credit: int = UNLIMITED,
        exclusive: bool = False,
        arguments: Mapping[str, object] | None = None,
        priority: int = 0,
        timeout: float | None = None,
    ) -> None:
        super().__init__(
            tag,
            queue,
            owner,
            auto_settle=False,
            exclusive=exclusive,
            credit=credit,
            arguments=arguments,
            priority=priority,
            timeout=timeout,
        )
        self.spec = spec
        self.offset = 0


class ChunkOwner(ConsumerOwner):
    """The owner of chunk consumers: the front end's callbacks (a stream-protocol
    connection). ``deliver_chunk`` spends the consumer's credit; ``writable`` False holds
    deliveries back (a full socket)."""

    def __init__(
        self,
        deliver_chunk: Callable[[ChunkConsumer, StoredChunk], None],
        removed: Callable[[Consumer], None],
    ) -> None:
        self.deliver_chunk = deliver_chunk
        self.removed = removed
        self.writable = True

    def accepts(self, consumer: Consumer, size: int) -> bool:
        return self.writable

    def deliver(self, consumer: Consumer, entry: QueuedMessage) -> None:
        raise RuntimeError("a chunk consumer takes chunks, not messages")

    def consumer_removed(self, consumer: Consumer) -> None:
        self.removed(consumer)

    def consumer_deadline(self, consumer: Consumer, now: float) -> None:
        return None  # chunks are never settled, so there is no deadline


class ChunkConsumer(StreamConsumer):
    """A consumer that takes whole committed chunks (credit counts chunks)."""

    __slots__ = ()


class StreamQueue(Queue):
    """A durable stream; see the module docstring."""

    def __init__(
        self,
        vhost_name: str,
        name: str,
        *,
        backend: StreamBackend,
        arguments: Mapping[str, object] | None = None,
        config: QueueConfig,
        host: QueueHost | None = None,
        timers: Timers | None = None,
    ) -> None:
        # RabbitMQ's rule (checked by its type): durable, not exclusive, not auto-delete.
        super().__init__(
            vhost_name,
            name,
            STREAM,
            durable=True,
            arguments=arguments,
            config=config,
            host=host,
            timers=timers,
        )
        self.backend = backend
        self._log: StreamLog | None = None
        self._last_timestamp = 0
        self._age_check_pending = False
        # A replicated stream's commit point on its leader (cluster/stream_replication.py):
        # readers get offsets below it only; None: every appended (or synced) offset.
        self.readable_upto: int | None = None

    @property
    def log(self) -> StreamLog:
        """The log, opened on first use (recovery sets ``store_id`` after declaring)."""
        log = self._log
        if log is None:
            log = self._log = self.backend.open(
                self.vhost_name, self.name, self.store_id, self.config.segment_bytes
            )
            self._opened(log)
        return log

    def _opened(self, log: StreamLog) -> None:
        log.on_committed = self._committed
        if log.next_offset > log.first_offset:
            # Timestamps stay ordered across a restart even if the clock went back.
            self._last_timestamp = max(
                self._last_timestamp, log.read(log.next_offset - 1, 1)[0].timestamp
            )
        self._retain()
        self._schedule_age_check()

    def adopt(self, log: StreamLog) -> None:
        """Serve ``log`` from now on (a replicated stream's copy, taken over by this node
        as its new leader); the log opened before, if any, is left as it is."""
        self._log = log
        self._opened(log)
        if self.consumers:
            self.dispatch()

    def capped(self, upto: int) -> None:
        """Readers may get offsets below ``upto`` (a replicated stream's commit point)."""
        before = self.readable_upto
        if before is not None and upto <= before:
            return
        self.readable_upto = upto
        if self.consumers and not self.deleted:
            self.dispatch()

    @property
    def message_count(self) -> int:
        """The next offset (Leveret's passive-declare answer for streams; RabbitMQ: 0)."""
        return self.log.next_offset

    # -- appending -------------------------------------------------------------------------

    def enqueue(self, message: Message) -> bool:
        log = self.log
        producer, sequence = "", -1
        if message.hints & HINT_HEADERS:
            key = log.dedup_key(message)
            if key is not None:
                producer, sequence = key
            else:
                headers = message.headers
                if headers:
                    producer, sequence = _dedup_key(headers)
            if producer and sequence <= log.producers.get(producer, -1):
                log.wait_durable()
                return True  # a duplicate: stored before, confirmed, dropped
        # Timestamps never go backwards, so "first at or after a time" is a search.
        timestamp = max(int(self.timers.wall * 1000), self._last_timestamp)
        self._last_timestamp = timestamp
        stamped = self.backend.stamp(message, log.next_offset, timestamp)
        if log.append(stamped, timestamp, producer, sequence):
            self._retain()
        if self.consumers:
            self.dispatch()
        return True

    def append_entries(
        self, entries: list[bytes], counts: list[int] | None, producer: str, ids: list[int]
    ) -> int:
        """Append a publish frame's entries (stream protocol) as one batch, one timestamp;
        ``counts``: each entry's record count (None: one each). With a ``producer`` (""
        = no de-duplication), ``ids`` are the entries' publishing ids and an entry whose id
        is at most the highest stored, or than an earlier one of the frame, is a duplicate:
        left out, and confirmed once durable all the same. Returns how many were stored."""
        log = self.log
        sequence = -1
        kept: list[int] | None = None
        if producer:
            kept = ids
            stored = log.producers.get(producer, -1)
            last = stored
            fresh = True
            for pid in ids:
                if pid <= last:
                    fresh = False
                    break
                last = pid
            if not fresh:
                entries, counts, kept, last = _without_duplicates(entries, counts, ids, stored)
                log.wait_durable()
                if not entries:
                    return 0
            sequence = last
        records = len(entries) if counts is None else sum(counts)
        timestamp = max(int(self.timers.wall * 1000), self._last_timestamp)
        self._last_timestamp = timestamp
        data = entries[0] if len(entries) == 1 else b"".join(entries)
        if log.append_entries(data, len(entries), records, timestamp, producer, sequence, kept):
            self._retain()
        if self.consumers:
            self.dispatch()
        return len(entries)

    def _committed(self) -> None:
        if self.consumers and not self.deleted:
            self.dispatch()

    def can_deliver_now(self, message: Message) -> bool:
        end = self.log.next_offset
        return any(
            isinstance(c, StreamConsumer) and c.offset >= end and c.can_take(message)
            for c in self.consumers
        )

    # -- reading ---------------------------------------------------------------------------

    def dispatch(self) -> None:
        log = self.log
        end = log.next_offset
        cap = self.readable_upto
        if cap is not None and cap < end:
            end = cap
        for consumer in self.consumers:
            assert isinstance(consumer, StreamConsumer)
            if isinstance(consumer, ChunkConsumer):
                self._dispatch_chunks(consumer, log)
                continue
            while consumer.offset < end:
                credit = consumer.credit
                if credit <= 0 or not consumer.owner.accepts(consumer, 0):
                    break
                entries = log.read(consumer.offset, min(credit, READ_BATCH))
                if not entries:
                    break
                if not self._hand_out(consumer, entries, end):
                    break

    def _hand_out(self, consumer: StreamConsumer, entries: list[StreamEntry], end: int) -> bool:
        """Deliver ``entries`` below ``end`` in order while ``consumer`` can take them."""
        owner = consumer.owner
        for entry in entries:
            if entry.offset >= end:
                return False
            if not consumer.can_take(entry.message):
                return False
            consumer.offset = entry.offset + 1
            self.unacked_count += 1
            owner.deliver(consumer, QueuedMessage(entry.offset, entry.message))
        return True

    def _dispatch_chunks(self, consumer: ChunkConsumer, log: StreamLog) -> None:
        owner = consumer.owner
        assert isinstance(owner, ChunkOwner)
        end = log.committed_offset
        cap = self.readable_upto
        if cap is not None and cap < end:
            end = cap
        while consumer.credit > 0 and owner.writable and consumer.offset < end:
            chunks = log.read_chunks(consumer.offset, consumer.credit)
            if not chunks:
                return
            for chunk in chunks:
                if chunk.first + chunk.records > end:
                    return  # not all of it is committed yet (a replicated stream)
                consumer.offset = chunk.first + chunk.records
                owner.deliver_chunk(consumer, chunk)
                if consumer.credit <= 0 or not owner.writable:
                    return

    def offset_spec(self, arguments: Mapping[str, object] | None) -> OffsetSpec:
        """Where a consumer attached with ``arguments`` starts (``x-stream-offset``)."""
        return parse_offset_spec(
            arguments,
            where=f"for {self.resource}",
            wall_ms=int(self.timers.wall * 1000),
        )

    def start_offset(self, spec: OffsetSpec, *, chunks: bool = False) -> int:
        """The first offset a consumer attached with ``spec`` gets (once it exists);
        ``chunks``: for a chunk consumer, for which ``last`` is the last chunk."""
        log = self.log
        first, end = log.first_offset, log.next_offset
        if spec.kind == "first":
            return first
        if spec.kind == "last":
            if chunks:
                return max(log.last_chunk_offset, first)
            return max(end - 1, first)
        if spec.kind == "offset":
            return max(spec.value, first)
        if spec.kind == "timestamp":
            return max(log.offset_at(spec.value), first)
        return end

    def lookup(self, arguments: Mapping[str, object] | None) -> int:
        """Passive queue.declare's answer: the next offset, or with an ``x-stream-offset``
        argument the offset a consumer attached with it would get first (a Leveret
        addition; RabbitMQ ignores the arguments of a passive declare and answers 0)."""
        if not arguments or OFFSET_HEADER not in arguments:
            return self.log.next_offset
        return self.start_offset(self.offset_spec(arguments))

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
        """A ``StreamConsumer`` starting where ``arguments``' ``x-stream-offset`` says (406
        when it is unusable); its deliveries are never settled as they go."""
        return StreamConsumer(
            tag,
            self,
            owner,
            spec=self.offset_spec(arguments),
            credit=credit,
            exclusive=exclusive,
            arguments=arguments,
            priority=priority,
            timeout=timeout,
        )

    def add_consumer(self, consumer: Consumer) -> None:
        assert isinstance(consumer, StreamConsumer)
        consumer.offset = self.start_offset(
            consumer.spec, chunks=isinstance(consumer, ChunkConsumer)
        )
        super().add_consumer(consumer)

    # -- settlement: acks only give credit back ----------------------------------------------

    def settle(self, entry: QueuedMessage) -> None:
        self.unacked_count -= 1

    def discard(self, entry: QueuedMessage, reason: str = "") -> None:
        self.unacked_count -= 1

    def amend(
        self, entry: QueuedMessage, headers: Mapping[str, object] | None, failed: bool
    ) -> None:
        return None  # the log is never changed

    def requeue(self, entries: Iterable[QueuedMessage], redelivered: bool = True) -> None:
        # A channel closed or a consumer timed out: nothing goes back, the log keeps it.
        self.unacked_count -= sum(1 for _ in entries)
        self.dispatch()

    def on_delete(self) -> None:
        """The stream was deleted: its log goes too."""
        if self._log is not None or self.store_id:
            self.log.destroy()

    def open_storage(self) -> bool:
        if not self.store_id:
            return False
        _ = self.log  # opening it cuts a torn tail and starts retention
        return True

    # -- what tools read -----------------------------------------------------------------

    def browse(self, start: int = 0) -> Iterator[Browsed]:
        """The committed messages from offset ``start`` (the first retained one if older)
        up to the last committed when the iteration starts, read a slice at a time."""
        log = self.log
        offset = max(start, log.first_offset)
        end = log.committed_offset
        if self.readable_upto is not None:
            end = min(end, self.readable_upto)
        while offset < end:
            entries = log.read(offset, READ_BATCH)
            if not entries:
                return
            for entry in entries:
                if entry.offset >= end:
                    return
                yield Browsed(
                    entry.offset, QueuedMessage(entry.offset, entry.message), entry.timestamp
                )
            offset = entries[-1].offset + 1

    # -- retention -----------------------------------------------------------------------

    def reconfigure(self, config: QueueConfig) -> None:
        """Retention from ``config`` from now on (a policy changed): applied at once."""
        self.config = config
        self._retain()
        self._schedule_age_check()

    def _retain(self) -> None:
        log = self._log
        if log is None:
            return
        config = self.config
        if config.max_length_bytes is None and config.max_age is None:
            return
        oldest = None
        if config.max_age is not None:
            oldest = int((self.timers.wall - config.max_age) * 1000)
        if log.retain(config.max_length_bytes, oldest) and self.consumers:
            self.dispatch()

    def _schedule_age_check(self) -> None:
        age = self.config.max_age
        if age is None or self._age_check_pending or self.deleted:
            return
        self._age_check_pending = True
        self.timers.schedule(self.timers.now + max(1.0, min(age, AGE_CHECK_EVERY)), self)

    def on_deadline(self, now: float) -> None:
        self._age_check_pending = False
        if self.deleted:
            return
        self._retain()
        self._schedule_age_check()
