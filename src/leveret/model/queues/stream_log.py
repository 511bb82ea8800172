"""A stream's log (``stream.py``): an append-only log of messages by offset, whole segments
dropped from the head, behind a Protocol.

The file-backed log lives in ``store/stream_log.py``; the in-memory one here (unit tests, and
a broker without a data directory). A ``StreamBackend`` opens logs and adds the
``x-stream-offset`` / ``x-stream-timestamp`` headers to a message (a wire-format concern, so
the front end supplies it).

Chunks: a log keeps its messages as osiris chunks (one per group-commit batch), the unit the
stream protocol delivers. The chunk and record format is the front end's business: the log
reaches it through a ``RecordCodec``. Consumer offsets stored by reference
(``StreamLog.store_offset``) are kept by the log as durably as its messages; so is, per
producer, the highest de-duplication sequence stored (``StreamLog.producers``).
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from leveret.model.message import Message

__all__ = [
    "OFFSET_HEADER",
    "TIMESTAMP_HEADER",
    "MemoryStreamBackend",
    "MemoryStreamLog",
    "RecordCodec",
    "StoredChunk",
    "StreamAppend",
    "StreamBackend",
    "StreamEntry",
    "StreamLog",
]

OFFSET_HEADER = "x-stream-offset"
TIMESTAMP_HEADER = "x-stream-timestamp"


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


class StreamAppend(NamedTuple):
    """One append as a log stored it: entries (their bytes as stored) from offset
    ``start``, their counts, timestamp, producer, sequence and publishing ids (what a
    replicated stream's leader ships, ``cluster/stream_replication.py``, and a follower's
    copy takes with ``append_entries``)."""

    start: int
    data: bytes
    entries: int
    records: int
    timestamp: int
    producer: str
    sequence: int
    ids: list[int] | None

    @property
    def end(self) -> int:
        return self.start + self.records


class RecordCodec(Protocol):
    """The stored form of messages, supplied by the server (the model knows no format)."""

    def entry(self, message: Message) -> list[bytes]:
        """``message`` as one stored entry (pieces to be joined into a chunk)."""
        ...

    def dedup_key(self, message: Message) -> tuple[str, int] | None:
        """(producer, sequence) of ``message``'s de-duplication headers, ("", -1) for none,
        read without decoding its properties; None when they must be decoded."""
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

    def dedup_key(self, message: Message) -> tuple[str, int] | None:
        """``RecordCodec.dedup_key`` of the log's codec (None without one)."""
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

    def dedup_key(self, message: Message) -> tuple[str, int] | None:
        return None if self.codec is None else self.codec.dedup_key(message)

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
