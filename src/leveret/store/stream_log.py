"""Stream logs on disk: one directory per stream, segment files of osiris chunks, group commit.

Layout::

    data_dir/streams/<queue store id>/00000000000000000000.segment   named by first offset

A segment is a sequence of osiris chunks, one per group-commit batch (more when a batch
passes ``CHUNK_DATA_MAX``, so that a chunk fits a reader's frame_max), stored exactly as a
stream-protocol reader is sent them (``stream_segments.py`` has the file format, the
tracking trailer and the torn-tail rule). Every message is kept in AMQP 1.0 form (the
front end's ``RecordCodec``): a stream-protocol publish as it arrived, a 0-9-1 publish
converted once, with its original property bytes kept for 0-9-1 readers. Readers see
``x-stream-offset`` / ``x-stream-timestamp`` added on the way out (0-9-1) or the chunk as
stored (stream protocol); all messages of a chunk share its timestamp (as in RabbitMQ).

Appending only adds the entry's bytes to the open chunk (``_Building``) of the log: a
0-9-1 message's pieces, or a stream-protocol publish frame's entries joined, as one part
(``append_entries``: one call per frame, the counts added once; a batch that does not fit
the open chunk starts the next, one larger than a chunk may hold is cut at entries, and a
segment may pass its size by up to one batch). Once
per loop turn the open chunks of every stream are closed (header, CRC over the pieces,
trailer) and go to ONE writer thread that writes them and fdatasyncs each touched file,
then reports back on the loop. A chunk is *committed* once synced: only then do
stream-protocol readers get it (``read_chunks``); 0-9-1 readers read entries at once, as
before. ``writes`` counts appends, ``synced`` how many are on disk; a confirm registered with
``after_sync`` runs once everything appended before it is synced. A failed write is cut
back (ftruncate) and retried every second: confirms wait, nothing is nacked.

Memory per stream stays small however long it is: a sparse index (a chunk every
``INDEX_BYTES`` of file: offset, position, timestamp) per segment, and a cache of the newest
chunks bounded by ``cache_bytes`` (chunks not yet synced are never evicted, so a read below
the cache always finds its bytes on disk). Reading below the cache reads the file
synchronously on the loop thread (one ``pread`` of up to ``READ_CHUNK`` bytes).

Directories in the previous format (``*.seg`` files of records) are converted at boot
(``stream_format_v1.py``).
"""

from __future__ import annotations

import bisect
import logging
import os
import queue as queue_mod
import shutil
import threading
import time
import zlib
from array import array
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveret.model.queues.stream_log import MemoryStreamLog, StoredChunk, StreamAppend, StreamEntry
from leveret.protocol.rabbitstream.chunk import (
    CHUNK_TRACKING_DELTA,
    CHUNK_TRACKING_SNAPSHOT,
    CHUNK_USER,
    HEADER_SIZE,
    chunk_header,
    parse_header,
    split_entries,
)
from leveret.store import stream_format_v1
from leveret.store.stream_segments import (
    SUFFIX,
    SegmentScan,
    encode_trailer,
    is_user,
    scan_segment,
    segment_name,
)

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Iterable, Mapping

    from leveret.model.memory_gauge import MemoryGauge
    from leveret.model.message import Message
    from leveret.model.queues.stream_log import RecordCodec, StreamLog

    Tap = Callable[[StreamAppend], None]

log = logging.getLogger("leveret.store")

SEGMENT_BYTES = 64 << 20
CACHE_BYTES = 4 << 20
INDEX_BYTES = 64 << 10
READ_CHUNK = 256 << 10
# Most data bytes in one chunk: a stream-protocol reader gets a chunk whole in one deliver
# frame, which must fit the connection's frame_max (1 MiB by default, size prefix, deliver
# header and chunk header included). An entry larger than this is a chunk of its own.
CHUNK_DATA_MAX = (1 << 20) - (4 << 10)
RETRY_SECONDS = 1.0
# What one decoded cached message costs besides its bytes (objects, list slot).
_ENTRY_OVERHEAD = 200


# A NamedTuple's constructor is a Python-level function; tuple.__new__ with every field costs
# about half as much, which counts for the entry made per message read.
_new_tuple = tuple.__new__


class _Segment:
    """One segment file as the loop thread sees it."""

    __slots__ = ("first", "idx_offset", "idx_pos", "idx_ts", "last_ts", "next", "size")

    def __init__(self, first: int) -> None:
        self.first = first
        self.next = first  # one past its last offset
        self.size = 0  # bytes, pending chunks included
        self.last_ts = -1
        self.idx_offset = array("q")
        self.idx_pos = array("q")
        self.idx_ts = array("q")

    def note(self, first: int, records: int, pos: int, timestamp: int) -> None:
        """A chunk at ``pos`` (index it when the last index point is far enough back)."""
        if not self.idx_pos or pos - self.idx_pos[-1] >= INDEX_BYTES:
            self.idx_offset.append(first)
            self.idx_pos.append(pos)
            self.idx_ts.append(timestamp)
        if records:
            self.next = first + records
            self.last_ts = timestamp


class _Building:
    """The open chunk of a log: entries appended since the last batch."""

    __slots__ = (
        "entries",
        "first",
        "length",
        "messages",
        "offsets",
        "parts",
        "producers",
        "raw",
        "records",
        "segment",
        "snapshot",
        "timestamp",
    )

    def __init__(self, segment: _Segment, first: int, timestamp: int, snapshot: bool) -> None:
        self.segment = segment
        self.first = first
        self.timestamp = timestamp
        self.snapshot = snapshot  # the first chunk of its segment: carries the whole state
        self.parts: list[bytes] = []
        self.length = 0  # bytes in parts
        self.entries = 0
        self.records = 0
        self.messages: list[Message | None] = []
        # (index in messages, entries joined as stored, how many) not decoded yet
        self.raw: list[tuple[int, bytes, int]] = []
        self.producers: dict[str, int] = {}
        self.offsets: dict[str, int] = {}


class _Chunk:
    """A closed user chunk in the cache."""

    __slots__ = ("first", "messages", "records", "sent", "timestamp")

    def __init__(
        self,
        first: int,
        records: int,
        timestamp: int,
        sent: bytes,
        messages: list[Message | None] | None,
    ) -> None:
        self.first = first
        self.records = records
        self.timestamp = timestamp
        self.sent = sent  # header + entries: what a stream-protocol reader is sent
        self.messages = messages  # decoded lazily for 0-9-1 readers

    @property
    def cost(self) -> int:
        return len(self.sent) + _ENTRY_OVERHEAD * self.records


class FileStreamLog:
    """A ``StreamLog`` in its own directory; see the module docstring."""

    def __init__(
        self, store: StreamStore, path: Path, segment_bytes: int, codec: RecordCodec, name: str
    ) -> None:
        self.store = store
        self.path = path
        self.segment_bytes = max(1, segment_bytes)
        self.codec = codec
        self.name = name
        self.on_committed: Callable[[], None] | None = None
        # Told every append once stored (a replicated stream's leader ships it).
        self.tap: Tap | None = None
        # Told every consumer offset stored (a replicated stream's leader sends it on).
        self.tracked: Callable[[str, int], None] | None = None
        self._segments: list[_Segment] = []
        self._firsts: list[int] = []
        self._producers: dict[str, int] = {}
        self._offsets: dict[str, int] = {}
        self._next = 0
        self._committed = 0  # offsets below this are in synced chunks
        self._last_chunk = 0  # first offset of the last submitted user chunk
        self._building: list[_Building] = []
        self._cache: list[_Chunk] = []
        self._cache_bytes = 0
        # Chunks closed and waiting for the writer: (segment first offset, pieces).
        self._out: list[tuple[int, list[bytes]]] = []
        self._unsynced = 0  # bytes appended since the last submit (the memory gauge's share)
        self._deletes: list[int] = []
        self._rfds: dict[int, int] = {}
        self._ahead: list[StreamEntry] = []  # contiguous entries last read from the files, stamped
        self.destroyed = False
        path.mkdir(parents=True, exist_ok=True)
        if store.legacy_entry is not None:
            stream_format_v1.convert(path, store.legacy_entry)
        self._recover()

    # -- boot ----------------------------------------------------------------------------

    def _recover(self) -> None:
        names = sorted(p for p in self.path.iterdir() if p.suffix == SUFFIX)
        scan = SegmentScan(producers=self._producers, offsets=self._offsets)
        for number, file in enumerate(names):
            try:
                first = int(file.stem)
            except ValueError:
                continue
            scan_segment(file, first, last=number == len(names) - 1, scan=scan)
            if not scan.chunks:
                file.unlink()  # created but never written (a crash right after)
                continue
            segment = _Segment(first)
            for info in scan.chunks:
                h = info.header
                segment.note(h.chunk_id, h.num_records if is_user(h) else 0, info.pos, h.timestamp)
                if is_user(h):
                    self._last_chunk = h.chunk_id
            segment.size = scan.size
            if self._segments and segment.first != self._segments[-1].next:
                log.warning("stream %s: offsets %d..%d are missing", self.path,
                            self._segments[-1].next, segment.first)  # fmt: skip
            self._add_segment(segment)
        if not self._segments:
            self._add_segment(_Segment(0))
        self._next = self._committed = self._segments[-1].next
        if self._segments[-1].size >= self.segment_bytes:
            self._new_segment(max(self._segments[-1].last_ts, 0))
        if not any(s.next > s.first for s in self._segments):
            self._last_chunk = self._next

    def _add_segment(self, segment: _Segment) -> None:
        self._segments.append(segment)
        self._firsts.append(segment.first)

    # -- the StreamLog protocol: writing ---------------------------------------------------

    @property
    def first_offset(self) -> int:
        return self._segments[0].first

    @property
    def next_offset(self) -> int:
        return self._next

    @property
    def committed_offset(self) -> int:
        return self._committed

    @property
    def last_chunk_offset(self) -> int:
        return self._last_chunk

    @property
    def producers(self) -> Mapping[str, int]:
        return self._producers

    @property
    def offsets(self) -> Mapping[str, int]:
        return self._offsets

    def _open(self, timestamp: int, size: int = 0) -> _Building:
        """The open chunk that takes ``size`` more bytes: the last one of the current segment,
        or a new one when there is none or it would grow past ``CHUNK_DATA_MAX``."""
        building = self._building
        segment = self._segments[-1]
        if building and building[-1].segment is segment:
            last = building[-1]
            if not last.entries or last.length + size <= CHUNK_DATA_MAX:
                return last
            self._close(last)  # full: the next entries start a chunk of their own
            building.pop()
        fresh = segment.size == 0
        opened = _Building(segment, self._next, timestamp, snapshot=fresh)
        building.append(opened)
        return opened

    def dedup_key(self, message: Message) -> tuple[str, int] | None:
        return self.codec.dedup_key(message)

    def append(self, message: Message, timestamp: int, producer: str, sequence: int) -> bool:
        pieces = self.codec.entry(message)
        size = 0
        for piece in pieces:
            size += len(piece)
        building = self._open(timestamp, size)
        if not building.entries:
            building.timestamp = timestamp  # it held only a stored offset so far
        building.messages.append(message)
        building.parts.extend(pieces)
        start = self._next
        closed = self._appended(building, size, 1, 1, producer, sequence)
        if self.tap is not None:
            self.tap(
                StreamAppend(start, b"".join(pieces), 1, 1, timestamp, producer, sequence, None)
            )
        return closed

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
        start = self._next
        closed = self._append_entries(data, entries, records, timestamp, producer, sequence, ids)
        if self.tap is not None:
            self.tap(
                StreamAppend(start, data, entries, records, timestamp, producer, sequence, ids)
            )
        return closed

    def start_at(
        self, offset: int, producers: Mapping[str, int], offsets: Mapping[str, int]
    ) -> None:
        """An empty log (just made) whose first offset is ``offset``, with this tracking
        state: a replicated stream's new copy (its leader's log may no longer hold the
        offsets before it)."""
        if self._next or self._building or len(self._segments) != 1 or self._segments[0].size:
            raise ValueError("only an empty new log starts at another offset")
        self._segments.clear()
        self._firsts.clear()
        self._add_segment(_Segment(offset))
        self._next = self._committed = self._last_chunk = offset
        self._producers.update(producers)
        self._offsets.update(offsets)

    def track(self, producers: Mapping[str, int], offsets: Mapping[str, int]) -> None:
        """Take these producers' sequences and consumer offsets where they are higher (a
        replicated stream's copy told its leader's)."""
        for producer, sequence in producers.items():
            if sequence > self._producers.get(producer, -1):
                self._producers[producer] = sequence
        self._offsets.update(offsets)

    def _append_entries(
        self,
        data: bytes,
        entries: int,
        records: int,
        timestamp: int,
        producer: str,
        sequence: int,
        ids: list[int] | None,
    ) -> bool:
        size = len(data)
        if size > CHUNK_DATA_MAX and entries > 1:
            return self._append_split(data, entries, timestamp, producer, sequence, ids)
        building = self._open(timestamp, size)
        if not building.entries:
            building.timestamp = timestamp
        building.raw.append((len(building.messages), data, entries))
        building.messages.extend([None] * records)
        building.parts.append(data)
        return self._appended(building, size, entries, records, producer, sequence)

    def _append_split(
        self,
        data: bytes,
        entries: int,
        timestamp: int,
        producer: str,
        sequence: int,
        ids: list[int] | None,
    ) -> bool:
        """A batch larger than a chunk may hold (a frame of a few messages near frame_max):
        appended in pieces of whole entries that each fit a chunk, each with the producer's
        sequence of its last entry (a crash that tears a later piece keeps de-duplication
        exact for the earlier ones)."""
        closed = False
        group: list[bytes] = []
        size = records = 0
        for i, (entry, count) in enumerate(split_entries(data, entries)):
            if group and size + len(entry) > CHUNK_DATA_MAX:
                joined = b"".join(group)
                piece = producer if ids is not None else ""
                last = ids[i - 1] if ids is not None else -1
                closed |= self._append_entries(
                    joined, len(group), records, timestamp, piece, last, None
                )
                group, size, records = [], 0, 0
            group.append(entry)
            size += len(entry)
            records += count
        joined = b"".join(group)
        closed |= self._append_entries(
            joined, len(group), records, timestamp, producer, sequence, None
        )
        return closed

    def _appended(
        self,
        building: _Building,
        size: int,
        entries: int,
        records: int,
        producer: str,
        sequence: int,
    ) -> bool:
        building.length += size
        building.entries += entries
        building.records += records
        self._next += records
        if producer:
            self._producers[producer] = sequence
            building.producers[producer] = sequence
        segment = building.segment
        segment.size += size
        self._unsynced += size
        self.store.appended(self, size)
        if segment.size >= self.segment_bytes:
            self._close(building)
            self._building.remove(building)
            self._new_segment(building.timestamp)
            return True
        return False

    def _new_segment(self, timestamp: int) -> None:
        """Open the next segment; its first chunk (written with the next batch even if no
        message comes) carries the whole tracking state, so retention of the older
        segments never loses it."""
        self._add_segment(_Segment(self._next))
        self._open(timestamp)
        self.store.appended(self, 0)

    def store_offset(self, reference: str, offset: int) -> None:
        self._offsets[reference] = offset
        self._open(max(self._segments[-1].last_ts, 0)).offsets[reference] = offset
        self.store.appended(self, 0)
        if self.tracked is not None:
            self.tracked(reference, offset)

    def _close(self, building: _Building) -> None:
        """Turn an open chunk into the pieces the writer appends (and a cached chunk)."""
        if building.snapshot:
            trailer = encode_trailer(self._producers, self._offsets)
        else:
            trailer = encode_trailer(building.producers, building.offsets)
        parts = building.parts
        # One checksum pass over the chunk's bytes (a stream-protocol publish frame is one
        # part already; a 0-9-1 message is three).
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        crc = zlib.crc32(data)
        length = len(data)
        if building.entries:
            kind = CHUNK_USER
        else:
            kind = CHUNK_TRACKING_SNAPSHOT if building.snapshot else CHUNK_TRACKING_DELTA
        header = chunk_header(
            chunk_id=building.first,
            timestamp=building.timestamp,
            num_entries=building.entries,
            num_records=building.records,
            crc=crc,
            data_length=length,
            trailer_length=len(trailer),
            chunk_type=kind,
        )
        sent = header + data
        segment = building.segment
        pos = segment.size - length
        segment.size += HEADER_SIZE + len(trailer)
        segment.note(building.first, building.records, pos, building.timestamp)
        self._out.append((segment.first, [sent, trailer]))
        if building.records:
            self._last_chunk = building.first
            messages = None if building.raw else building.messages
            chunk = _Chunk(building.first, building.records, building.timestamp, sent, messages)
            self._cache.append(chunk)
            self._cache_bytes += chunk.cost

    def take_batch(self) -> list[tuple[int, list[bytes]]]:
        """Close the open chunks; what the writer appends now (loop thread)."""
        for building in self._building:
            self._close(building)
        self._building = []
        out, self._out = self._out, []
        return out

    # -- reading: entries (0-9-1 readers) ---------------------------------------------------

    def read(self, offset: int, count: int) -> list[StreamEntry]:
        # Entries are kept as published; the stream headers are added on the way out (once
        # per entry of the read-ahead, which consumers at the same place share).
        return self._read(offset, count)

    def _cache_first(self) -> int:
        if self._cache:
            return self._cache[0].first
        if self._building:
            return self._building[0].first
        return self._next

    def _read(self, offset: int, count: int) -> list[StreamEntry]:
        offset = max(offset, self.first_offset)
        out: list[StreamEntry] = []
        cache_first = self._cache_first()
        while len(out) < count and offset < cache_first:
            got, offset = self._read_ahead(offset, count - len(out), cache_first)
            out.extend(got)
        if len(out) >= count or offset >= self._next:
            return out
        stamp = self.store.stamp_out
        for first, timestamp, messages in self._in_memory(offset):
            for i in range(max(offset - first, 0), len(messages)):
                message = messages[i]
                if message is not None:
                    at = first + i
                    out.append(
                        _new_tuple(StreamEntry, (at, timestamp, stamp(message, at, timestamp)))
                    )
                    if len(out) >= count:
                        return out
        return out

    def _in_memory(self, offset: int) -> Iterable[tuple[int, int, list[Message | None]]]:
        """(first offset, timestamp, messages) of the cached and open chunks from the one
        holding ``offset``."""
        cache = self._cache
        i = bisect.bisect_right(cache, offset, key=lambda c: c.first) - 1
        for chunk in cache[max(i, 0) :]:
            if chunk.first + chunk.records <= offset:
                continue
            if chunk.messages is None:
                chunk.messages = self._decode(chunk.sent)
            yield chunk.first, chunk.timestamp, chunk.messages
        for building in self._building:
            if building.first + building.records <= offset:
                continue
            if building.raw:
                for index, data, entries in building.raw:
                    decoded = self.codec.messages(data, self.name, entries)
                    building.messages[index : index + len(decoded)] = decoded
                building.raw = []
            yield building.first, building.timestamp, building.messages

    def _decode(self, sent: bytes | memoryview) -> list[Message | None]:
        header = parse_header(sent)
        at = HEADER_SIZE + header.bloom_size
        data = sent if isinstance(sent, bytes) else bytes(sent)
        return self.codec.chunk_messages(
            data, at, at + header.data_length, header.num_entries, self.name
        )

    def _read_ahead(self, offset: int, count: int, limit: int) -> tuple[list[StreamEntry], int]:
        """Entries from the files, through a small read-ahead (the chunks of one read), and
        the offset to read from next: a consumer that reads history one credit at a time
        costs one file read per ``READ_CHUNK``."""
        ahead = self._ahead
        if not ahead or not ahead[0].offset <= offset <= ahead[-1].offset:
            ahead = []
            chunks = self._file_chunks(offset, 1 << 30, limit, READ_CHUNK)
            if not chunks:
                return [], limit
            stamp = self.store.stamp_out
            for chunk in chunks:
                messages = self._decode(chunk.data)
                first, timestamp = chunk.first, chunk.timestamp
                for i in range(max(offset - first, 0), len(messages)):
                    message = messages[i]
                    if message is not None:
                        at = first + i
                        entry = (at, timestamp, stamp(message, at, timestamp))
                        ahead.append(_new_tuple(StreamEntry, entry))
            self._ahead = ahead
            if not ahead:
                return [], chunks[-1].first + chunks[-1].records
        start = bisect.bisect_left(ahead, offset, key=lambda e: e.offset)
        got = ahead[start : start + count]
        if not got:
            return [], ahead[-1].offset + 1
        return got, got[-1].offset + 1

    # -- reading: chunks (stream-protocol readers) ---------------------------------------------

    def read_chunks(self, offset: int, count: int) -> list[StoredChunk]:
        offset = max(offset, self.first_offset)
        committed = self._committed
        out: list[StoredChunk] = []
        cache_first = self._cache[0].first if self._cache else committed
        if offset < cache_first:
            out = self._file_chunks(offset, count, min(cache_first, committed), READ_CHUNK)
            if out:
                return out
            offset = cache_first
        cache = self._cache
        i = max(bisect.bisect_right(cache, offset, key=lambda c: c.first) - 1, 0)
        for chunk in cache[i:]:
            if chunk.first + chunk.records > committed or len(out) >= count:
                break
            if chunk.first + chunk.records > offset:
                out.append(StoredChunk(chunk.first, chunk.records, chunk.timestamp, chunk.sent))
        return out

    def _fd(self, first: int) -> int:
        fd = self._rfds.get(first)
        if fd is None:
            fd = self._rfds[first] = os.open(self.path / segment_name(first), os.O_RDONLY)
        return fd

    def _file_chunks(self, offset: int, count: int, limit: int, budget: int) -> list[StoredChunk]:
        """Up to ``count`` user chunks from the files, from the one holding ``offset``, below
        offset ``limit`` (synced bytes only), reading about ``budget`` bytes."""
        out: list[StoredChunk] = []
        index = bisect.bisect_right(self._firsts, offset) - 1
        read = 0
        while index < len(self._segments) and len(out) < count and read < budget:
            segment = self._segments[index]
            if segment.first >= limit:
                break
            j = bisect.bisect_right(segment.idx_offset, offset) - 1
            pos = segment.idx_pos[j] if j >= 0 else 0
            fd = self._fd(segment.first)
            while len(out) < count and read < budget:
                data = os.pread(fd, READ_CHUNK, pos)
                if len(data) < HEADER_SIZE:
                    break
                at = 0
                while at + HEADER_SIZE <= len(data) and len(out) < count:
                    header = parse_header(data, at)
                    end = at + header.size
                    if end > len(data):
                        if at == 0 and len(data) >= READ_CHUNK:  # a chunk larger than a read
                            data = os.pread(fd, header.size, pos)
                            if len(data) == header.size:
                                continue
                        break
                    if header.chunk_id >= limit:
                        return out
                    if is_user(header) and header.chunk_id + header.num_records > offset:
                        sent = data[at : end - header.trailer_length]
                        out.append(
                            StoredChunk(header.chunk_id, header.num_records, header.timestamp, sent)
                        )
                    at = end
                read += at
                pos += at
                if at == 0 or len(data) < READ_CHUNK:
                    break
            index += 1
            offset = self._segments[index].first if index < len(self._segments) else limit
        return out

    def offset_at(self, timestamp: int) -> int:
        cache_first = self._cache_first()
        for segment in self._segments:
            if segment.last_ts < timestamp or segment.first >= cache_first:
                continue
            j = bisect.bisect_left(segment.idx_ts, timestamp)
            start = segment.idx_offset[j - 1] if j > 0 else segment.first
            while start < cache_first:
                chunks = self._file_chunks(start, 64, cache_first, READ_CHUNK)
                for chunk in chunks:
                    if chunk.timestamp >= timestamp:
                        return max(chunk.first, self.first_offset)
                if not chunks:
                    break
                start = chunks[-1].first + chunks[-1].records
            break
        for cached in self._cache:
            if cached.timestamp >= timestamp:
                return cached.first
        for building in self._building:
            if building.records and building.timestamp >= timestamp:
                return building.first
        return self._next

    # -- retention, durability, deletion ------------------------------------------------------

    def retain(self, max_bytes: int | None, oldest: int | None) -> int:
        segments = self._segments
        total = sum(s.size for s in segments)
        dropped = 0
        while len(segments) > 1:
            head = segments[0]
            if any(b.segment is head for b in self._building):
                break  # its open chunk is not closed yet
            too_big = max_bytes is not None and total > max_bytes
            too_old = oldest is not None and head.next > head.first and head.last_ts < oldest
            if not (too_big or too_old):
                break
            total -= head.size
            del segments[0]
            del self._firsts[0]
            fd = self._rfds.pop(head.first, None)
            if fd is not None:
                os.close(fd)
            self._deletes.append(head.first)
            dropped += 1
        if dropped:
            self._ahead = []
            first = self.first_offset
            cache = self._cache
            while cache and cache[0].first + cache[0].records <= first:
                self._cache_bytes -= cache.pop(0).cost
            self.store.appended(self, 0)
        return dropped

    def wait_durable(self) -> None:
        if self._committed < self._next or self._building:
            self.store.barrier()

    def destroy(self) -> None:
        self.destroyed = True
        for fd in self._rfds.values():
            os.close(fd)
        self._rfds.clear()
        self._cache = []
        self._building = []
        self.store.destroyed(self)

    def _evict(self) -> None:
        limit = self.store.cache_bytes
        cache = self._cache
        n = 0
        while (
            self._cache_bytes > limit
            and n < len(cache)
            and cache[n].first + cache[n].records <= self._committed
        ):
            self._cache_bytes -= cache[n].cost
            n += 1
        if n:
            del cache[:n]

    def synced_upto(self, offset: int) -> None:
        """The writer synced every chunk before ``offset`` (loop thread)."""
        if offset > self._committed:
            self._committed = offset
            self._evict()
            if self.on_committed is not None:
                self.on_committed()


class StreamStore:
    """Every stream's files and the one writer thread; the model's ``StreamBackend``."""

    def __init__(
        self,
        path: str | Path,
        codec: RecordCodec,
        stamp: Callable[[Message, int, int], Message],
        *,
        segment_bytes: int = SEGMENT_BYTES,
        cache_bytes: int = CACHE_BYTES,
        sync: bool = True,
        legacy_entry: Callable[[str, str, bytes, bytes], list[bytes]] | None = None,
    ) -> None:
        self.path = Path(path)
        # False only by the explicit setting ``stream_confirm = "written"``: a batch counts
        # as done once written (in the page cache), not once fdatasync'ed.
        self.sync = sync
        self.codec = codec
        self.stamp_out = stamp
        # The stored entry of a message of the previous format (exchange, routing key,
        # properties, body): directories in that format are converted when opened.
        self.legacy_entry = legacy_entry
        self.segment_bytes = segment_bytes
        self.cache_bytes = cache_bytes
        # Bytes appended but not yet synced count in the broker's memory gauge, so the memory
        # alarm blocks publishers that outrun the disk; ``on_synced`` re-checks the alarm.
        self.gauge: MemoryGauge | None = None
        self.on_synced: Callable[[], None] | None = None
        self.writes = 0
        self.synced = 0
        self.logs: dict[int, FileStreamLog] = {}
        self._dirty: dict[FileStreamLog, None] = {}
        self._waiting: deque[tuple[int, Callable[[], None]]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._busy = False
        self._scheduled = False
        self._jobs: queue_mod.SimpleQueue[tuple[Any, ...] | None] = queue_mod.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closing = False
        # Writer thread only: the open segment file of each stream directory.
        self._wfds: dict[Path, tuple[int, int]] = {}

    # -- StreamBackend -------------------------------------------------------------------

    def open(self, vhost: str, name: str, store_id: int, segment_bytes: int | None) -> StreamLog:
        if not store_id:
            return MemoryStreamLog(segment_bytes, self.codec, name)
        existing = self.logs.get(store_id)
        if existing is not None:
            return existing
        stream_log = FileStreamLog(
            self,
            self.path / str(store_id),
            self.segment_bytes if segment_bytes is None else segment_bytes,
            self.codec,
            name,
        )
        self.logs[store_id] = stream_log
        return stream_log

    def stamp(self, message: Message, offset: int, timestamp: int) -> Message:
        # Stored as published: the logs add the headers when they are read (``stamp_out``).
        return message

    def remove_orphans(self, live: Iterable[int]) -> None:
        """Delete the directories of streams that no longer exist (deleted before a crash)."""
        keep = {str(i) for i in live}
        if not self.path.exists():
            return
        for entry in self.path.iterdir():
            if entry.is_dir() and entry.name not in keep:
                log.info("store: removing the files of deleted stream %s", entry.name)
                shutil.rmtree(entry, ignore_errors=True)

    # -- loop thread ---------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._writer, name="leveret-streams", daemon=True)
        self._thread.start()
        if self._dirty:
            self._kick()

    def close(self) -> None:
        """Write what is pending, stop the writer."""
        if self._thread is not None:
            self._busy = False
            self._closing = True
            self._submit()
            self._jobs.put(None)
            self._thread.join()
            self._thread = None
            self._waiting.clear()  # their connections are gone
        for stream_log in self.logs.values():
            for fd in stream_log._rfds.values():
                os.close(fd)
            stream_log._rfds.clear()

    def appended(self, stream_log: FileStreamLog, size: int) -> None:
        self.writes += 1
        if self.gauge is not None:
            self.gauge.bytes += size
        self._dirty[stream_log] = None
        self._kick()

    def barrier(self) -> None:
        """Make the next confirm wait for what is pending (an empty sync if need be)."""
        self.writes += 1
        self._kick()

    def destroyed(self, stream_log: FileStreamLog) -> None:
        for store_id, known in list(self.logs.items()):
            if known is stream_log:
                del self.logs[store_id]
        self._dirty[stream_log] = None
        self._kick()

    def after_sync(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once everything appended so far is on disk, in call order."""
        if not self._waiting and self.synced >= self.writes:
            callback()
            return
        self._waiting.append((self.writes, callback))
        self._kick()

    def _kick(self) -> None:
        if not self._scheduled and self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._submit)

    def _submit(self) -> None:
        self._scheduled = False
        if self._busy or self._thread is None:
            return
        target = self.writes
        if not self._dirty and self.synced >= target:
            return
        work = []
        for stream_log in self._dirty:
            framed = stream_log.take_batch()
            deletes, stream_log._deletes = stream_log._deletes, []
            work.append(
                (stream_log, framed, deletes, stream_log.destroyed, stream_log._next,
                 stream_log._unsynced)
            )  # fmt: skip
            stream_log._unsynced = 0
        self._dirty = {}
        self._busy = True
        self._jobs.put((work, target))

    def _done(self, work: list[tuple[Any, ...]], target: int) -> None:
        self._busy = False
        released = 0
        for stream_log, _framed, _deletes, _destroyed, upto, unsynced in work:
            stream_log.synced_upto(upto)
            released += unsynced
        self.synced = max(self.synced, target)
        if self.gauge is not None and released:
            self.gauge.bytes -= released
            if self.on_synced is not None:
                self.on_synced()
        waiting = self._waiting
        while waiting and waiting[0][0] <= self.synced:
            waiting.popleft()[1]()
        if self._dirty or waiting or self.synced < self.writes:
            self._submit()

    # -- the writer thread ---------------------------------------------------------------

    def _writer(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                for fd, _first in self._wfds.values():
                    os.close(fd)
                self._wfds.clear()
                return
            work, target = job
            while True:
                try:
                    self._write(work)
                    break
                except OSError as exc:
                    log.error(
                        "store: stream write failed: %s; confirms wait, retrying in %g s",
                        exc,
                        RETRY_SECONDS,
                    )
                    if self._closing:
                        break
                    time.sleep(RETRY_SECONDS)
            loop = self._loop
            if loop is not None and not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(self._done, work, target)
                except RuntimeError:
                    pass  # the loop closed meanwhile (shutdown)

    def _write(self, work: list[tuple[Any, ...]]) -> None:
        """Write and sync one batch; on failure every file is cut back to where it was.

        Every stream's records are written first and the files synced after, once each:
        the first fdatasync's journal commit carries the others' data and metadata (ext4
        data=ordered), so N streams cost about one sync, not N in a row."""
        written: list[tuple[int, int]] = []
        synced: dict[int, None] = {}
        deleted: list[tuple[Path, list[int]]] = []
        try:
            for stream_log, framed, deletes, destroyed, _upto, _size in work:
                path: Path = stream_log.path
                if destroyed:
                    opened = self._wfds.pop(path, None)
                    if opened is not None:
                        synced.pop(opened[0], None)
                        os.close(opened[0])
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                for first, pieces in framed:
                    fd = self._segment_fd(path, first, synced)
                    written.append((fd, os.fstat(fd).st_size))
                    size = sum(len(p) for p in pieces)
                    done = os.writev(fd, pieces)
                    if done < size:  # a short write: the rest, joined
                        view = memoryview(b"".join(pieces))[done:]
                        while view:
                            view = view[os.write(fd, view) :]
                    synced[fd] = None
                if deletes:
                    deleted.append((path, deletes))
            if self.sync:
                for fd in synced:
                    os.fdatasync(fd)
        except OSError:
            still_open = {fd for fd, _first in self._wfds.values()}
            for fd, size in written:
                if fd not in still_open:
                    continue  # a completed segment, synced and closed
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    pass
            raise
        for path, deletes in deleted:
            for first in deletes:
                try:
                    os.unlink(path / segment_name(first))
                except OSError as exc:
                    log.warning("store: cannot delete stream segment %s: %s", first, exc)

    def _segment_fd(self, path: Path, first: int, synced: dict[int, None]) -> int:
        opened = self._wfds.get(path)
        if opened is not None and opened[1] == first:
            return opened[0]
        fd = os.open(path / segment_name(first), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if opened is not None:  # the previous segment is complete: sync and close it
            os.fsync(opened[0])
            os.close(opened[0])
            synced.pop(opened[0], None)
        dir_fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._wfds[path] = (fd, first)
        return fd
