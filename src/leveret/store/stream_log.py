"""Stream logs on disk: one directory per stream, append-only segment files, group commit.

Layout::

    data_dir/streams/<queue store id>/00000000000000000000.seg   named by first offset

A segment is a sequence of ``records.py`` records written in batches that end with a commit
record (so a torn tail is told from damage exactly as for the message store):

- ``P`` + JSON ``{producer: sequence}``: the de-duplication state when the segment was
  opened (first record of every segment, so retention never loses it);
- ``m`` offset timestamp producer sequence exchange routing-key properties body: one message
  with its properties as published; ``x-stream-offset`` / ``x-stream-timestamp`` are added
  when it is read (records written before carry them already; the stamp replaces them).
- ``n``: the same for a message of another wire format (``Message.format``, one octet after
  the sequence; an AMQP 1.0 message keeps its sections as they came).

Memory per stream stays small however long it is: a sparse index (every ``INDEX_EVERY``-th
record: offset, file position, timestamp) per segment, and a cache of the newest entries
bounded by ``cache_bytes`` (entries not yet synced are never evicted, so a read below the
cache always finds its bytes on disk). Reading below the cache reads a chunk of the file
synchronously on the loop thread.

Group commit: ``StreamStore`` is shared by every stream of the broker. Appends only add
framed records to the log's pending list; once per loop turn the pending records of every
stream go to ONE writer thread that writes and fdatasyncs each touched file, then reports
back on the loop. ``writes`` counts appends, ``synced`` how many are on disk; a confirm
registered with ``after_sync`` runs once everything appended before it is synced. A failed
write is cut back (ftruncate) and retried every second: confirms wait, nothing is nacked.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import queue as queue_mod
import shutil
import struct
import threading
import time
import zlib
from array import array
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveret.model.stream import MemoryStreamLog, StreamEntry
from leveret.store.records import (
    COMMIT,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    StoreCorrupt,
    frame,
    read_checked,
)

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Iterable, Mapping

    from leveret.model.message import Message
    from leveret.model.queue import MemoryGauge
    from leveret.model.stream import StreamLog

log = logging.getLogger("leveret.store")

SEGMENT_BYTES = 64 << 20
CACHE_BYTES = 4 << 20
INDEX_EVERY = 128
READ_CHUNK = 256 << 10
READ_AHEAD = 256  # entries
RETRY_SECONDS = 1.0
# kind, offset, timestamp, len(exchange), len(routing key), len(properties), len(producer),
# sequence; then exchange, routing key, producer, properties, body.
_M = struct.Struct("<cQqBBIHq")
_N = struct.Struct("<cQqBBIHqB")
_COMMIT_FRAME = frame(COMMIT)
# What one cached entry costs besides its body and properties (objects, list slot).
_ENTRY_OVERHEAD = 200


def _no_other_formats(
    exchange: str, routing_key: str, props: bytes, body: bytes, fmt: int
) -> Message:
    raise StoreCorrupt(f"stream record of wire format {fmt}, which this store cannot read")


def _segment_name(first: int) -> str:
    return f"{first:020d}.seg"


class _Segment:
    """One segment file as the loop thread sees it."""

    __slots__ = ("first", "idx_offset", "idx_pos", "idx_ts", "last_ts", "next", "size")

    def __init__(self, first: int) -> None:
        self.first = first
        self.next = first  # one past its last offset
        self.size = 0  # bytes, commit records included
        self.last_ts = -1
        self.idx_offset = array("q")
        self.idx_pos = array("q")
        self.idx_ts = array("q")

    def note(self, offset: int, pos: int, timestamp: int) -> None:
        if (offset - self.first) % INDEX_EVERY == 0:
            self.idx_offset.append(offset)
            self.idx_pos.append(pos)
            self.idx_ts.append(timestamp)
        self.next = offset + 1
        self.last_ts = timestamp


class FileStreamLog:
    """A ``StreamLog`` in its own directory; see the module docstring."""

    def __init__(
        self,
        store: StreamStore,
        path: Path,
        segment_bytes: int,
        make_message: Callable[[str, str, bytes, bytes], Message],
    ) -> None:
        self.store = store
        self.path = path
        self.segment_bytes = max(1, segment_bytes)
        self._make = make_message
        self._segments: list[_Segment] = []
        self._firsts: list[int] = []
        self._producers: dict[str, int] = {}
        self._next = 0
        # Newest entries: _cache[_head:] hold offsets _cache_first.. (contiguous).
        self._cache: list[StreamEntry] = []
        self._head = 0
        self._cache_first = 0
        self._cache_bytes = 0
        self._durable = 0  # offsets below this are synced
        # Records waiting for the writer: (segment first offset, framed bytes).
        self._out: list[tuple[int, bytes]] = []
        self._unsynced = 0  # bytes appended since the last submit (the memory gauge's share)
        self._deletes: list[int] = []
        self._rfds: dict[int, int] = {}
        self._ahead: list[StreamEntry] = []  # contiguous entries last read from the files
        self.destroyed = False
        path.mkdir(parents=True, exist_ok=True)
        self._recover()

    # -- boot ----------------------------------------------------------------------------

    def _recover(self) -> None:
        names = sorted(p for p in self.path.iterdir() if p.suffix == ".seg")
        for number, file in enumerate(names):
            last = number == len(names) - 1
            try:
                first = int(file.stem)
            except ValueError:
                continue
            result = read_checked(file, last=last)
            segment = _Segment(first)
            pos = 0
            for payload in result.payloads:
                kind = payload[0] if payload else 0
                if kind in (0x6D, 0x6E):  # "m", "n"
                    _k, offset, ts, _le, _lr, _lp, lprod, seq = _M.unpack_from(payload)
                    if lprod:
                        start = (_M.size if kind == 0x6D else _N.size) + _le + _lr
                        name = bytes(payload[start : start + lprod]).decode()
                        self._producers[name] = seq
                    segment.note(offset, pos, ts)
                elif kind == 0x50:  # "P"
                    self._producers.update(json.loads(bytes(payload[1:])))
                pos += HEADER_SIZE + len(payload)
            segment.size = result.good_end
            if self._segments and segment.first != self._segments[-1].next:
                log.warning("stream %s: offsets %d..%d are missing", self.path,
                            self._segments[-1].next, segment.first)  # fmt: skip
            self._add_segment(segment)
        if not self._segments:
            self._open_segment(0)
        elif self._segments[-1].size == 0:
            # Created but never written (a crash right after): it still needs its snapshot.
            empty = self._segments.pop()
            self._firsts.pop()
            self._open_segment(empty.first)
        self._next = self._segments[-1].next
        self._cache_first = self._durable = self._next

    def _add_segment(self, segment: _Segment) -> None:
        self._segments.append(segment)
        self._firsts.append(segment.first)

    def _open_segment(self, first: int) -> None:
        segment = _Segment(first)
        self._add_segment(segment)
        record = frame(b"P" + json.dumps(self._producers).encode())
        segment.size += len(record)
        self._out.append((first, record))

    # -- the StreamLog protocol ----------------------------------------------------------

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
        offset = self._next
        exchange = message.exchange.encode()
        routing_key = message.routing_key.encode()
        props = message.raw_properties
        name = producer.encode()
        body = message.body
        fmt = message.format
        prefix = (
            (
                _M.pack(
                    b"m",
                    offset,
                    timestamp,
                    len(exchange),
                    len(routing_key),
                    len(props),
                    len(name),
                    sequence,
                )
                if not fmt
                else _N.pack(
                    b"n",
                    offset,
                    timestamp,
                    len(exchange),
                    len(routing_key),
                    len(props),
                    len(name),
                    sequence,
                    fmt,
                )
            )
            + exchange
            + routing_key
            + name
        )
        # Framed without copying the body here: the batch is joined once at submit.
        length = len(prefix) + len(props) + len(body)
        crc = zlib.crc32(body, zlib.crc32(props, zlib.crc32(prefix)))
        segment = self._segments[-1]
        first = segment.first
        segment.note(offset, segment.size, timestamp)
        segment.size += HEADER_SIZE + length
        out = self._out
        out.append((first, HEADER.pack(MAGIC, length, crc) + prefix))
        out.append((first, props))
        out.append((first, body))
        self._next = offset + 1
        if producer:
            self._producers[producer] = sequence
        self._cache.append(StreamEntry(offset, timestamp, message))
        self._cache_bytes += len(message.body) + len(props) + _ENTRY_OVERHEAD
        self._evict()
        self._unsynced += HEADER_SIZE + length
        self.store.appended(self, HEADER_SIZE + length)
        if segment.size >= self.segment_bytes:
            self._open_segment(self._next)
            return True
        return False

    def read(self, offset: int, count: int) -> list[StreamEntry]:
        # Entries are kept as published; the stream headers are added on the way out, so
        # the append path does no per-message re-encoding (only readers that need the
        # 0-9-1 headers pay for them).
        stamp = self.store.stamp_out
        return [
            StreamEntry(e.offset, e.timestamp, stamp(e.message, e.offset, e.timestamp))
            for e in self._read(offset, count)
        ]

    def _read(self, offset: int, count: int) -> list[StreamEntry]:
        offset = max(offset, self.first_offset)
        out: list[StreamEntry] = []
        while len(out) < count and offset < self._next:
            if offset >= self._cache_first:
                start = self._head + offset - self._cache_first
                out.extend(self._cache[start : start + count - len(out)])
                break
            got = self._read_ahead(offset, min(count - len(out), self._cache_first - offset))
            if not got:
                break
            out.extend(got)
            offset = got[-1].offset + 1
        return out

    def _read_ahead(self, offset: int, count: int) -> list[StreamEntry]:
        """Entries from the files, through a small read-ahead: a consumer that reads history
        with one credit at a time (an ack per message) costs one file read per batch."""
        ahead = self._ahead
        if not ahead or not ahead[0].offset <= offset <= ahead[-1].offset:
            ahead = self._ahead = self._read_file(
                offset, min(max(count, READ_AHEAD), self._cache_first - offset)
            )
            if not ahead:
                return []
        start = offset - ahead[0].offset
        return ahead[start : start + count]

    def offset_at(self, timestamp: int) -> int:
        segments = self._segments
        for segment in segments:
            if segment.last_ts < timestamp:
                continue
            j = bisect.bisect_left(segment.idx_ts, timestamp)
            start = segment.idx_offset[j - 1] if j > 0 else segment.first
            while start < self._next:
                entries = self._read(start, INDEX_EVERY + 1)
                for entry in entries:
                    if entry.timestamp >= timestamp:
                        return entry.offset
                if not entries:
                    break
                start = entries[-1].offset + 1
        return self._next

    def retain(self, max_bytes: int | None, oldest: int | None) -> int:
        segments = self._segments
        total = sum(s.size for s in segments)
        dropped = 0
        while len(segments) > 1:
            head = segments[0]
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
            while self._cache_first < first and self._head < len(self._cache):
                self._pop_cached()
            self.store.appended(self, 0)
        return dropped

    def wait_durable(self) -> None:
        if self._durable < self._next:
            self.store.barrier()

    def destroy(self) -> None:
        self.destroyed = True
        for fd in self._rfds.values():
            os.close(fd)
        self._rfds.clear()
        self._cache = []
        self._head = 0
        self.store.destroyed(self)

    # -- cache ---------------------------------------------------------------------------

    def _pop_cached(self) -> None:
        entry = self._cache[self._head]
        self._head += 1
        self._cache_first += 1
        self._cache_bytes -= (
            len(entry.message.body) + len(entry.message.raw_properties) + _ENTRY_OVERHEAD
        )

    def _evict(self) -> None:
        limit = self.store.cache_bytes
        cache = self._cache
        while (
            self._cache_bytes > limit
            and self._head < len(cache)
            and self._cache_first < self._durable
        ):
            self._pop_cached()
        if self._head > 1024 and self._head * 2 > len(cache):
            del cache[: self._head]
            self._head = 0

    def synced_upto(self, offset: int) -> None:
        """The writer synced every record before ``offset`` (loop thread)."""
        self._durable = max(self._durable, offset)
        self._evict()

    # -- reading the files ---------------------------------------------------------------

    def _fd(self, first: int) -> int:
        fd = self._rfds.get(first)
        if fd is None:
            fd = self._rfds[first] = os.open(self.path / _segment_name(first), os.O_RDONLY)
        return fd

    def _read_file(self, offset: int, count: int) -> list[StreamEntry]:
        """Up to ``count`` entries from ``offset`` within one segment (synced bytes only)."""
        segment = self._segments[bisect.bisect_right(self._firsts, offset) - 1]
        j = bisect.bisect_right(segment.idx_offset, offset) - 1
        pos = segment.idx_pos[j] if j >= 0 else 0
        fd = self._fd(segment.first)
        out: list[StreamEntry] = []
        make = self._make
        want = READ_CHUNK
        while len(out) < count and pos < segment.size:
            data = os.pread(fd, want, pos)
            view = memoryview(data)
            at = 0
            while at + HEADER_SIZE <= len(data) and len(out) < count:
                _magic, length, _crc = HEADER.unpack_from(view, at)
                end = at + HEADER_SIZE + length
                if end > len(data):
                    break
                payload = view[at + HEADER_SIZE : end]
                at = end
                kind = payload[0] if payload else 0
                if kind not in (0x6D, 0x6E):  # "m", "n"
                    continue
                _k, off, ts, le, lr, lp, lprod, _seq = _M.unpack_from(payload)
                if off < offset:
                    continue
                fmt = 0 if kind == 0x6D else payload[_M.size]
                p = _M.size if kind == 0x6D else _N.size
                exchange = bytes(payload[p : p + le]).decode()
                p += le
                routing_key = bytes(payload[p : p + lr]).decode()
                p += lr + lprod
                props = bytes(payload[p : p + lp])
                body = bytes(payload[p + lp :])
                message = (
                    make(exchange, routing_key, props, body)
                    if not fmt
                    else self.store.make_other(exchange, routing_key, props, body, fmt)
                )
                out.append(StreamEntry(off, ts, message))
            if at == 0:
                if len(data) < want:
                    break  # nothing more in the file
                want *= 2  # one record larger than the chunk
                continue
            pos += at
            if len(data) < want:
                break
        return out


class StreamStore:
    """Every stream's files and the one writer thread; the model's ``StreamBackend``."""

    def __init__(
        self,
        path: str | Path,
        make_message: Callable[[str, str, bytes, bytes], Message],
        stamp: Callable[[Message, int, int], Message],
        *,
        segment_bytes: int = SEGMENT_BYTES,
        cache_bytes: int = CACHE_BYTES,
        sync: bool = True,
        make_other: Callable[[str, str, bytes, bytes, int], Message] | None = None,
    ) -> None:
        self.path = Path(path)
        # False only by the explicit setting ``stream_confirm = "written"``: a batch counts
        # as done once written (in the page cache), not once fdatasync'ed.
        self.sync = sync
        self.make_message = make_message
        # Messages of other wire formats (``n`` records): exchange, routing key, properties,
        # body and ``Message.format`` in, the message out.
        self.make_other = make_other if make_other is not None else _no_other_formats
        self.stamp_out = stamp
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
            return MemoryStreamLog(segment_bytes)
        existing = self.logs.get(store_id)
        if existing is not None:
            return existing
        stream_log = FileStreamLog(
            self,
            self.path / str(store_id),
            self.segment_bytes if segment_bytes is None else segment_bytes,
            self.make_message,
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
            out, stream_log._out = stream_log._out, []
            deletes, stream_log._deletes = stream_log._deletes, []
            chunks: list[tuple[int, list[bytes]]] = []
            for first, record in out:
                if chunks and chunks[-1][0] == first:
                    chunks[-1][1].append(record)
                else:
                    chunks.append((first, [record]))
            framed = [(first, b"".join(parts) + _COMMIT_FRAME) for first, parts in chunks]
            by_first = {segment.first: segment for segment in stream_log._segments}
            for first, _parts in chunks:
                segment = by_first.get(first)
                if segment is not None:  # else already dropped by retention
                    segment.size += len(_COMMIT_FRAME)
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
                for first, data in framed:
                    fd = self._segment_fd(path, first, synced)
                    written.append((fd, os.fstat(fd).st_size))
                    view = memoryview(data)
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
                    os.unlink(path / _segment_name(first))
                except OSError as exc:
                    log.warning("store: cannot delete stream segment %s: %s", first, exc)

    def _segment_fd(self, path: Path, first: int, synced: dict[int, None]) -> int:
        opened = self._wfds.get(path)
        if opened is not None and opened[1] == first:
            return opened[0]
        fd = os.open(path / _segment_name(first), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
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
