"""Stream queues (``x-queue-type: stream``): an append-only log read by offset.

Theory of operation: a ``StreamQueue`` appends every message it is given to a ``StreamLog``
(offsets 0, 1, 2, ...) and never removes one on delivery. Each consumer (``StreamConsumer``)
keeps its own next offset; ``dispatch`` reads from the log at that offset for every consumer
with credit, and settling a delivery only gives credit back (the owner does; nothing is
removed). A consumer that has read everything waits: the next append is handed to it by the same
``dispatch``. Retention drops whole segments from the head (``StreamLog.retain``), checked
when a segment fills and, for ``x-max-age``, on a timer; a consumer behind the new head
jumps to it.

The log is behind a Protocol: the file-backed one lives in ``store/stream_log.py``, the
in-memory one here (unit tests, and a broker without a data directory). A
``StreamBackend`` opens logs and adds the ``x-stream-offset`` / ``x-stream-timestamp``
headers to a message (a wire-format concern, so the front end supplies it).

De-duplication: a message with ``x-stream-producer`` (string of 1 to 256 characters) and
``x-stream-sequence`` (integer >= 0) headers is dropped when the log already holds a
sequence at least as high for that producer; the log keeps that state durably
(``StreamLog.producers``). The stream protocol's publisher reference and publishing id are
the same pair (``StreamQueue.append_entries``).

Chunks: a log keeps its messages as osiris chunks (one per group-commit batch), the unit the
stream protocol delivers. A ``ChunkConsumer`` (a stream-protocol subscription) takes whole
chunks once they are committed (on disk), its credit counting chunks; its owner is a
``ChunkOwner`` whose callbacks the front end supplies. The chunk and record format is the
front end's business: the log reaches it through a ``RecordCodec``. Consumer offsets stored
by reference (``StreamLog.store_offset``) are kept by the log as durably as its messages.
"""

from __future__ import annotations

import bisect
import datetime
from typing import TYPE_CHECKING, NamedTuple, Protocol

from leveret.errors import NotImplemented_, PreconditionFailed
from leveret.model.consumer import UNLIMITED, Consumer, ConsumerOwner, Source
from leveret.model.entry import QueuedMessage
from leveret.model.message import HINT_HEADERS
from leveret.model.queue import Queue
from leveret.model.queue_args import parse_age, type_name

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from leveret.model.message import Message
    from leveret.model.queue_args import QueueConfig
    from leveret.model.queue_features import QueueHost
    from leveret.model.timers import Timers

OFFSET_HEADER = "x-stream-offset"
TIMESTAMP_HEADER = "x-stream-timestamp"
PRODUCER_HEADER = "x-stream-producer"
SEQUENCE_HEADER = "x-stream-sequence"
# Largest number of entries read from the log at once for one consumer.
READ_BATCH = 256
# Longer producer ids are not used for de-duplication (bad input, bounded record fields).
MAX_PRODUCER_LENGTH = 256
# How often x-max-age is checked at most (seconds); shorter ages are checked as often.
AGE_CHECK_EVERY = 60.0


class StreamEntry(NamedTuple):
    offset: int
    timestamp: int  # append time, ms since the epoch
    message: Message


class StoredChunk(NamedTuple):
    """A committed chunk as a stream-protocol reader gets it: ``data`` is the chunk's header
    and entries as stored (sent without re-encoding); offsets ``first .. first+records-1``."""

    first: int
    records: int
    timestamp: int
    data: bytes


class RecordCodec(Protocol):
    """The stored form of messages, supplied by the server (the model knows no format)."""

    def entry(self, message: Message) -> list[bytes]:
        """``message`` as one stored entry (pieces to be joined into a chunk)."""
        ...

    def messages(self, entry: bytes, stream: str, entries: int = 1) -> list[Message | None]:
        """The messages of the records of ``entries`` entries joined in ``entry``, in order
        (None: a record unreadable here)."""
        ...

    def chunk_messages(
        self, data: bytes, at: int, end: int, entries: int, stream: str
    ) -> list[Message | None]:
        """The messages of the ``entries`` entries in ``data[at:end]``, a chunk's data (the
        same as ``messages`` of each entry, in one pass)."""
        ...

    def chunk(
        self, entries: list[bytes], records: int, first: int, timestamp: int, count: int = 0
    ) -> bytes:
        """A chunk of ``entries`` holding offsets ``first ..`` (its stored bytes); ``count``
        entries in all when an item holds several, joined (0: one per item)."""
        ...


class StreamLog(Protocol):
    """An append-only log of messages by offset, whole segments dropped from the head."""

    # Called when ``committed_offset`` moved (set by the queue).
    on_committed: Callable[[], None] | None

    @property
    def first_offset(self) -> int:
        """The first retained offset (== next_offset when empty)."""
        ...

    @property
    def next_offset(self) -> int:
        """The offset the next append gets."""
        ...

    @property
    def producers(self) -> Mapping[str, int]:
        """Per producer id, the highest sequence stored (survives restarts and retention)."""
        ...

    def append(self, message: Message, timestamp: int, producer: str, sequence: int) -> bool:
        """Store ``message`` at ``next_offset``; True when this closed a segment.

        ``producer`` is "" for a message without de-duplication headers."""
        ...

    def append_entries(
        self,
        data: bytes,
        entries: int,
        records: int,
        timestamp: int,
        producer: str,
        sequence: int,
        ids: list[int] | None = None,
    ) -> bool:
        """Store ``entries`` entries published over the stream protocol, joined in ``data``
        as they are stored (``records`` records in all), from ``next_offset``, with one
        timestamp; ``sequence`` is the producer's highest among them, ``ids`` (with a
        producer) each entry's, so that a log storing the batch in several chunks keeps
        each chunk's own. True when this closed a segment."""
        ...

    def read(self, offset: int, count: int) -> list[StreamEntry]:
        """Up to ``count`` entries from ``offset`` (from the first retained one if older)."""
        ...

    @property
    def committed_offset(self) -> int:
        """Offsets below this are in committed chunks (``read_chunks`` gives them)."""
        ...

    @property
    def last_chunk_offset(self) -> int:
        """The first offset of the last committed chunk (== next_offset when none)."""
        ...

    def read_chunks(self, offset: int, count: int) -> list[StoredChunk]:
        """Up to ``count`` committed chunks, from the one holding ``offset`` (or the first
        retained one if ``offset`` is older)."""
        ...

    @property
    def offsets(self) -> Mapping[str, int]:
        """Consumer offsets stored by reference (survive restarts and retention)."""
        ...

    def store_offset(self, reference: str, offset: int) -> None:
        """Keep ``offset`` for ``reference`` (written with the next batch)."""
        ...

    def offset_at(self, timestamp: int) -> int:
        """The first offset appended at or after ``timestamp`` (ms), else next_offset."""
        ...

    def retain(self, max_bytes: int | None, oldest: int | None) -> int:
        """Drop whole closed segments from the head while the log is larger than
        ``max_bytes`` or the segment's newest entry is older than ``oldest`` (ms);
        returns how many were dropped."""
        ...

    def wait_durable(self) -> None:
        """The next publisher confirm must wait until what was appended is durable (a
        dropped duplicate is confirmed only once its original is)."""
        ...

    def destroy(self) -> None:
        """The stream was deleted: remove what it stored."""
        ...


class StreamBackend(Protocol):
    def open(self, vhost: str, name: str, store_id: int, segment_bytes: int | None) -> StreamLog:
        """The log of a stream (``store_id`` 0: not stored, in memory)."""
        ...

    def stamp(self, message: Message, offset: int, timestamp: int) -> Message:
        """``message`` with the ``x-stream-offset`` and ``x-stream-timestamp`` headers."""
        ...


# -- the in-memory log --------------------------------------------------------------------

MEMORY_SEGMENT_BYTES = 64 << 20


class _Segment:
    __slots__ = ("entries", "first", "size")

    def __init__(self, first: int) -> None:
        self.first = first
        self.entries: list[StreamEntry] = []
        self.size = 0


class MemoryStreamLog:
    """A ``StreamLog`` held in memory, with the same segment and retention rules; with a
    ``codec`` it also keeps one committed chunk per append (the stream protocol's view)."""

    def __init__(
        self, segment_bytes: int | None = None, codec: RecordCodec | None = None, name: str = ""
    ) -> None:
        self.segment_bytes = MEMORY_SEGMENT_BYTES if segment_bytes is None else segment_bytes
        self.codec = codec
        self.name = name
        self._segments = [_Segment(0)]
        self._next = 0
        self._producers: dict[str, int] = {}
        self._offsets: dict[str, int] = {}
        self._chunks: list[StoredChunk] = []
        self._chunk_firsts: list[int] = []
        self.on_committed: Callable[[], None] | None = None

    @property
    def first_offset(self) -> int:
        return self._segments[0].first

    @property
    def next_offset(self) -> int:
        return self._next

    @property
    def producers(self) -> Mapping[str, int]:
        return self._producers

    def append(self, message: Message, timestamp: int, producer: str, sequence: int) -> bool:
        if self.codec is not None:
            self._add_chunk([b"".join(self.codec.entry(message))], 1, timestamp, 1)
        return self._add([message], timestamp, producer, sequence)

    def append_entries(
        self,
        data: bytes,
        entries: int,
        records: int,
        timestamp: int,
        producer: str,
        sequence: int,
        ids: list[int] | None = None,
    ) -> bool:
        codec = self.codec
        if codec is None:
            raise RuntimeError("a stream log without a record codec stores no entries")
        self._add_chunk([data], records, timestamp, entries)
        return self._add(codec.messages(data, self.name, entries), timestamp, producer, sequence)

    def _add_chunk(self, entries: list[bytes], records: int, timestamp: int, count: int) -> None:
        assert self.codec is not None
        data = self.codec.chunk(entries, records, self._next, timestamp, count)
        self._chunks.append(StoredChunk(self._next, records, timestamp, data))
        self._chunk_firsts.append(self._next)

    def _add(
        self, messages: list[Message | None], timestamp: int, producer: str, sequence: int
    ) -> bool:
        segment = self._segments[-1]
        for message in messages:
            if message is not None:
                segment.entries.append(StreamEntry(self._next, timestamp, message))
                segment.size += len(message.body) + len(message.raw_properties)
            self._next += 1
        if producer:
            self._producers[producer] = sequence
        if self.on_committed is not None and self._chunks:
            self.on_committed()
        if segment.size >= self.segment_bytes:
            self._segments.append(_Segment(self._next))
            return True
        return False

    @property
    def committed_offset(self) -> int:
        return self._next

    @property
    def last_chunk_offset(self) -> int:
        return self._chunks[-1].first if self._chunks else self._next

    def read_chunks(self, offset: int, count: int) -> list[StoredChunk]:
        start = max(bisect.bisect_right(self._chunk_firsts, offset) - 1, 0)
        return self._chunks[start : start + count]

    @property
    def offsets(self) -> Mapping[str, int]:
        return self._offsets

    def store_offset(self, reference: str, offset: int) -> None:
        self._offsets[reference] = offset

    def read(self, offset: int, count: int) -> list[StreamEntry]:
        segments = self._segments
        offset = max(offset, segments[0].first)
        out: list[StreamEntry] = []
        index = len(segments) - 1
        while index > 0 and segments[index].first > offset:
            index -= 1
        while index < len(segments) and len(out) < count:
            entries = segments[index].entries
            # Entries are in offset order; unreadable records leave gaps.
            start = bisect.bisect_left(entries, offset, key=lambda e: e.offset)
            out.extend(entries[start : start + count - len(out)])
            index += 1
            offset = segments[index].first if index < len(segments) else offset
        return out

    def offset_at(self, timestamp: int) -> int:
        for segment in self._segments:
            for entry in segment.entries:
                if entry.timestamp >= timestamp:
                    return entry.offset
        return self._next

    def retain(self, max_bytes: int | None, oldest: int | None) -> int:
        segments = self._segments
        total = sum(s.size for s in segments)
        dropped = 0
        while len(segments) > 1:
            head = segments[0]
            too_big = max_bytes is not None and total > max_bytes
            too_old = (
                oldest is not None and bool(head.entries) and head.entries[-1].timestamp < oldest
            )
            if not (too_big or too_old):
                break
            total -= head.size
            del segments[0]
            dropped += 1
        if dropped:
            first = segments[0].first
            cut = bisect.bisect_right(self._chunk_firsts, first) - 1
            if cut > 0:
                del self._chunks[:cut]
                del self._chunk_firsts[:cut]
        return dropped

    def wait_durable(self) -> None:
        return None

    def destroy(self) -> None:
        self._segments = [_Segment(self._next)]
        self._chunks = []
        self._chunk_firsts = []


class MemoryStreamBackend:
    """Streams in memory; ``stamp`` re-encodes the headers through the message's encoder."""

    def __init__(self, codec: RecordCodec | None = None) -> None:
        self.codec = codec

    def open(self, vhost: str, name: str, store_id: int, segment_bytes: int | None) -> StreamLog:
        return MemoryStreamLog(segment_bytes, self.codec, name)

    def stamp(self, message: Message, offset: int, timestamp: int) -> Message:
        headers = dict(message.headers or {})
        headers[OFFSET_HEADER] = offset
        headers[TIMESTAMP_HEADER] = timestamp
        return message.replace(headers=headers)


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
        # RabbitMQ's rule (checked in queue_args): durable, not exclusive, not auto-delete.
        super().__init__(
            vhost_name,
            name,
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

    def __repr__(self) -> str:
        return f"StreamQueue({self.name!r})"

    def _where(self) -> str:
        return f"queue '{self.name}' in vhost '{self.vhost_name}'"

    @property
    def log(self) -> StreamLog:
        """The log, opened on first use (recovery sets ``store_id`` after declaring)."""
        log = self._log
        if log is None:
            log = self._log = self.backend.open(
                self.vhost_name, self.name, self.store_id, self.config.segment_bytes
            )
            log.on_committed = self._committed
            if log.next_offset > log.first_offset:
                # Timestamps stay ordered across a restart even if the clock went back.
                self._last_timestamp = log.read(log.next_offset - 1, 1)[0].timestamp
            self._retain()
            self._schedule_age_check()
        return log

    @property
    def message_count(self) -> int:
        """The next offset (Leveret's passive-declare answer for streams; RabbitMQ: 0)."""
        return self.log.next_offset

    # -- appending -------------------------------------------------------------------------

    def enqueue(self, message: Message) -> bool:
        log = self.log
        producer, sequence = "", -1
        if message.hints & HINT_HEADERS:
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
                if not self._hand_out(consumer, entries):
                    break

    def _hand_out(self, consumer: StreamConsumer, entries: list[StreamEntry]) -> bool:
        """Deliver ``entries`` in order while ``consumer`` can take them."""
        owner = consumer.owner
        for entry in entries:
            if not consumer.can_take(entry.message):
                return False
            consumer.offset = entry.offset + 1
            self.unacked_count += 1
            owner.deliver(consumer, QueuedMessage(entry.offset, entry.message))
        return True

    def _dispatch_chunks(self, consumer: ChunkConsumer, log: StreamLog) -> None:
        owner = consumer.owner
        assert isinstance(owner, ChunkOwner)
        while consumer.credit > 0 and owner.writable and consumer.offset < log.committed_offset:
            chunks = log.read_chunks(consumer.offset, consumer.credit)
            if not chunks:
                return
            for chunk in chunks:
                consumer.offset = chunk.first + chunk.records
                owner.deliver_chunk(consumer, chunk)
                if consumer.credit <= 0 or not owner.writable:
                    return

    def unsupported(self, operation: str) -> NotImplemented_:
        """The error for ``operation``, which streams do not support (RabbitMQ's text; a
        front end names the operation in its own protocol's words)."""
        return NotImplemented_(f"{operation} not supported by stream queues {self._where()}")

    def get(self, *, auto_settle: bool) -> QueuedMessage | None:
        raise self.unsupported("get")

    def offset_spec(self, arguments: Mapping[str, object] | None) -> OffsetSpec:
        """Where a consumer attached with ``arguments`` starts (``x-stream-offset``)."""
        return parse_offset_spec(
            arguments,
            where=f"for queue '{self.name}' in vhost '{self.vhost_name}'",
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

    def modifiable(self) -> bool:
        return False

    def requeue(self, entries: Iterable[QueuedMessage], redelivered: bool = True) -> None:
        # A channel closed or a consumer timed out: nothing goes back, the log keeps it.
        self.unacked_count -= sum(1 for _ in entries)
        self.dispatch()

    def purge(self) -> int:
        if self.deleted:
            return 0  # VirtualHost.remove_queue purges what it deletes: nothing to do here
        raise self.unsupported("purge")

    def destroy(self) -> None:
        """The stream was deleted: its log goes too."""
        if self._log is not None or self.store_id:
            self.log.destroy()

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
