"""Replicated streams (docs/cluster.md, "Replicated streams"): what a stream's leader ships
and how a follower's copy takes it.

A replicated stream uses the quorum queues' machinery (``replication.py``: the record's
members, epoch and in-sync set, ``Append``/``Appended`` over the inter-node link,
heartbeats, the lag bound, elections, hand-over) with the **stream's own offsets** as the
log's offsets: an ``Append`` carries one append of the leader's log (``FileStreamLog.tap``:
the entries' bytes as stored, their counts, the timestamp, the producer and sequence, the
publishing ids) and the offset one past it; a follower's copy is a ``FileStreamLog`` of
its own that calls ``append_entries`` with exactly those, so it holds the same entries at
the same offsets (its chunk boundaries, made by its own group commit, may differ). The
follower acknowledges the copy's next offset once the copy is synced (its store's
``after_sync``). The leader's own end is its log's synced offset, so ``committed`` waits
for the leader's disk too.

Following starts with a **reset** (``STREAM_RESET``: the leader's first and next offsets,
its epochs, its producers' sequences and stored consumer offsets, the reset's number): the
follower keeps its copy when its epochs are a prefix of the leader's (``keeps``, KIP-101's
rule; never truncation by high watermark), else starts a new one at the leader's first
offset, and answers where its copy ends (``Positioned``); the leader sends it what follows
(``StreamShipping.pump``: synced chunks from the leader's files, then the appends not yet
synced, kept in ``tail``), then each new append as it comes. A copy that must be cut back
is copied again whole (no tail truncation of a stream log yet).

Reading from a replica: the leader sends its commit offset as it moves (``STREAM_COMMIT``,
not in the log); a follower's ``StreamReplica.reader`` serves the stream protocol's
subscriptions on its node from the copy, capped there. Consumer offsets stored on the
leader (the stream protocol's store_offset, from a client of any node: the link's
``StoreOffset``) are sent to the followers as they are stored (``STREAM_TRACK``), and a
reset carries them all: an elected copy knows where its readers were.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, NamedTuple

from leveret.model.queues.args import QueueConfig
from leveret.model.queues.stream import StreamQueue
from leveret.model.queues.stream_log import StreamAppend
from leveret.protocol.rabbitstream.chunk import HEADER_SIZE, parse_header, split_entries
from leveret.store.stream_log import FileStreamLog

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from leveret.model.queues.stream_log import StreamLog
    from leveret.model.timers import Timers
    from leveret.server.cluster_link.frontend import LinkFrontEnd
    from leveret.store.stream_log import StreamStore

__all__ = [
    "STREAM_APPEND",
    "STREAM_RESET",
    "STREAM_TRACK",
    "StreamAppend",
    "StreamReplica",
    "StreamReset",
    "StreamShipping",
    "apply_append",
    "decode_append",
    "decode_reset",
    "decode_track",
    "encode_append",
    "encode_reset",
    "encode_track",
]

# Record kinds (after replication.py's quorum-queue kinds, 1..7).
STREAM_APPEND: Final = 8
STREAM_RESET: Final = 9
# The leader's commit offset (not in the log): a follower's readers are capped at it.
STREAM_COMMIT: Final = 10
# A consumer offset the leader's log stored (the stream protocol's store_offset): the
# copies keep it too, so a reader finds it after a failover.
STREAM_TRACK: Final = 11

# Bytes a leader ships to one follower catching up per check (``pump``).
PUMP_BYTES: Final = 4 << 20
# Chunks read from the leader's files at once while catching a follower up.
PUMP_CHUNKS: Final = 32

_HEAD = struct.Struct(">BQ")
_COUNTS = struct.Struct(">IIqq")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_NO_IDS: Final = 0xFFFFFFFF


class StreamReset(NamedTuple):
    """The leader's log as a follower (re)starts following it: its first and next
    offsets, its epochs, its tracking state, and the number of this (re)start (answered
    with ``Positioned``)."""

    first: int
    producers: dict[str, int]
    offsets: dict[str, int]
    epochs: list[tuple[int, int]] = []
    next: int = 0
    sync: int = 0


# A log's epochs: (epoch, first offset written in it), in order (Kafka's leader epoch cache).
Epochs = list[tuple[int, int]]
EPOCHS_FILE: Final = "epochs"


def held_epochs(epochs: Epochs, next_offset: int) -> Epochs:
    """The epochs of the entries below ``next_offset``."""
    return [(e, s) for e, s in epochs if s < next_offset]


def keeps(mine: Epochs, first: int, end: int, reset: StreamReset) -> bool:
    """Whether a copy holding ``first`` .. ``end - 1`` labelled ``mine`` is a prefix of the
    leader's log described by ``reset``, so that it follows on from ``end`` rather than
    starting again. Entries of one epoch are written by that epoch's one leader, in order:
    two logs whose epochs agree below ``end`` hold the same entries there (KIP-101's rule,
    kept conservative: any difference in the labels starts the copy again)."""
    if end < reset.first or end > reset.next:
        return False  # the leader no longer has what follows, or the copy is longer
    if end == first:
        return True  # an empty copy: it follows on from where it is
    held = held_epochs(mine, end)
    if not held or reset.epochs[: len(held)] != held:
        return False
    following = reset.epochs[len(held) : len(held) + 1]
    return end <= (following[0][1] if following else reset.next)


def load_epochs(directory: Path) -> tuple[Epochs, int]:
    """A log's epochs and the offset from which a copy holds every committed entry
    (``StreamReplica.complete_at``); ([], 0) when there is no readable file."""
    try:
        raw = json.loads((directory / EPOCHS_FILE).read_text())
        return [(int(e), int(s)) for e, s in raw["epochs"]], int(raw.get("complete_at", 0))
    except (OSError, ValueError, TypeError, KeyError):
        return [], 0


def save_epochs(directory: Path, epochs: Epochs, complete_at: int = 0) -> None:
    """Write the epochs file (synced, then renamed over the old one: before any entry
    labelled by it is acknowledged)."""
    temporary = directory / (EPOCHS_FILE + ".new")
    with open(temporary, "w") as out:
        out.write(json.dumps({"epochs": epochs, "complete_at": complete_at}))
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, directory / EPOCHS_FILE)


def encode_commit(upto: int) -> bytes:
    return _HEAD.pack(STREAM_COMMIT, upto)


def decode_commit(record: bytes) -> int:
    try:
        kind, upto = _HEAD.unpack_from(record, 0)
    except struct.error as exc:
        raise ValueError(f"malformed stream commit: {exc}") from None
    if kind != STREAM_COMMIT or len(record) != _HEAD.size:
        raise ValueError("not a stream commit")
    return int(upto)


def encode_track(reference: str, offset: int) -> bytes:
    return bytes((STREAM_TRACK,)) + _pack_map({reference: offset})


def decode_track(record: bytes) -> tuple[str, int]:
    """(reference, offset) of a ``STREAM_TRACK`` record."""
    if not record or record[0] != STREAM_TRACK:
        raise ValueError("not a stream offset")
    try:
        values, end = _unpack_map(record, 1)
    except (struct.error, ValueError) as exc:  # (a cut map says "stream reset")
        raise ValueError(f"malformed stream offset: {exc}") from None
    if len(values) != 1 or end != len(record):
        raise ValueError("malformed stream offset")
    ((reference, offset),) = values.items()
    return reference, offset


def encode_append(a: StreamAppend) -> bytes:
    producer = a.producer.encode()
    ids = b"" if a.ids is None else struct.pack(f">{len(a.ids)}q", *a.ids)
    return b"".join(
        (
            _HEAD.pack(STREAM_APPEND, a.start),
            _COUNTS.pack(a.entries, a.records, a.timestamp, a.sequence),
            _U16.pack(len(producer)),
            producer,
            _U32.pack(_NO_IDS if a.ids is None else len(a.ids)),
            ids,
            a.data,
        )
    )


def decode_append(record: bytes) -> StreamAppend:
    """The append in ``record`` (ValueError when it is not a well-formed one)."""
    try:
        kind, start = _HEAD.unpack_from(record, 0)
        if kind != STREAM_APPEND:
            raise ValueError(f"not a stream append (kind {kind})")
        pos = _HEAD.size
        entries, records, timestamp, sequence = _COUNTS.unpack_from(record, pos)
        pos += _COUNTS.size
        (length,) = _U16.unpack_from(record, pos)
        pos += 2
        if pos + length > len(record):
            raise ValueError("truncated stream append")
        producer = record[pos : pos + length].decode()
        pos += length
        (count,) = _U32.unpack_from(record, pos)
        pos += 4
        ids: list[int] | None = None
        if count != _NO_IDS:
            ids = list(struct.unpack_from(f">{count}q", record, pos))
            pos += 8 * count
        data = record[pos:]
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed stream append: {exc}") from None
    if entries < 1 or records < entries or not data or (ids is not None and len(ids) != entries):
        raise ValueError("inconsistent stream append")
    return StreamAppend(start, data, entries, records, timestamp, producer, sequence, ids)


def _pack_map(values: Mapping[str, int]) -> bytes:
    parts = [_U32.pack(len(values))]
    for name, value in values.items():
        encoded = name.encode()
        parts += (_U16.pack(len(encoded)), encoded, _I64.pack(value))
    return b"".join(parts)


def _unpack_map(record: bytes, pos: int) -> tuple[dict[str, int], int]:
    (count,) = _U32.unpack_from(record, pos)
    pos += 4
    out: dict[str, int] = {}
    for _ in range(count):
        (length,) = _U16.unpack_from(record, pos)
        pos += 2
        if pos + length > len(record):
            raise ValueError("truncated stream reset")
        name = record[pos : pos + length].decode()
        pos += length
        (out[name],) = _I64.unpack_from(record, pos)
        pos += 8
    return out, pos


_RESET = struct.Struct(">qQI")
_EPOCH = struct.Struct(">Qq")


def encode_reset(reset: StreamReset) -> bytes:
    return b"".join(
        (
            _HEAD.pack(STREAM_RESET, reset.first),
            _RESET.pack(reset.next, reset.sync, len(reset.epochs)),
            b"".join(_EPOCH.pack(e, s) for e, s in reset.epochs),
            _pack_map(reset.producers),
            _pack_map(reset.offsets),
        )
    )


def decode_reset(record: bytes) -> StreamReset:
    try:
        kind, first = _HEAD.unpack_from(record, 0)
        if kind != STREAM_RESET:
            raise ValueError(f"not a stream reset (kind {kind})")
        next_offset, sync, count = _RESET.unpack_from(record, _HEAD.size)
        pos = _HEAD.size + _RESET.size
        if pos + count * _EPOCH.size > len(record):
            raise ValueError("truncated stream reset")
        epochs = [_EPOCH.unpack_from(record, pos + i * _EPOCH.size) for i in range(count)]
        producers, pos = _unpack_map(record, pos + count * _EPOCH.size)
        offsets, pos = _unpack_map(record, pos)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed stream reset: {exc}") from None
    if pos != len(record):
        raise ValueError("trailing bytes in a stream reset")
    return StreamReset(first, producers, offsets, epochs, next_offset, sync)


def retention(config: QueueConfig, wall: float) -> tuple[int | None, int | None]:
    """A follower's retention of its copy, from the stream's config (its arguments and
    the policies on its node: ``max-length-bytes``, ``max-age``): ``StreamLog.retain``'s
    bounds at ``wall``."""
    age = config.max_age
    return config.max_length_bytes, None if age is None else int((wall - age) * 1000)


def apply_append(log: StreamLog, append: StreamAppend) -> bool | None:
    """Append ``append`` to a follower's copy: None (nothing done) when it does not start
    at the copy's next offset (a gap or a repeat: the leader resets the copy), else
    whether it closed a segment (time to apply retention)."""
    if append.start != log.next_offset:
        return None
    return log.append_entries(
        append.data,
        append.entries,
        append.records,
        append.timestamp,
        append.producer,
        append.sequence,
        append.ids,
    )


@dataclass
class StreamShipping:
    """A replicated stream's leader side: its log, where each follower is in it, and the
    appends not yet synced here (a follower catching up reads synced ones from the files)."""

    log: StreamLog
    # The log's epochs (``keeps``), this leader's the last.
    epochs: Epochs = field(default_factory=list)
    # The commit offset last told to the followers (``STREAM_COMMIT``).
    told: int = 0
    # The next offset each following node is sent (none until it answered its reset).
    cursor: dict[str, int] = field(default_factory=dict)
    # The number of the last reset sent to each node.
    syncs: dict[str, int] = field(default_factory=dict)
    # (start, end, record) of the appends above the log's synced offset, in order.
    tail: deque[tuple[int, int, bytes]] = field(default_factory=deque)

    def tapped(self, append: StreamAppend) -> bytes:
        record = encode_append(append)
        self.tail.append((append.start, append.end, record))
        self.prune()
        return record

    def prune(self) -> None:
        synced = self.log.committed_offset
        tail = self.tail
        while tail and tail[0][1] <= synced:
            tail.popleft()

    def reset(self, node: str) -> bytes:
        """(Re)start ``node``: the reset record. It answers where its copy ends
        (``positioned``); ``pump`` sends it what follows."""
        log = self.log
        self.cursor.pop(node, None)
        sync = self.syncs[node] = self.syncs.get(node, 0) + 1
        return encode_reset(
            StreamReset(
                log.first_offset,
                dict(log.producers),
                dict(log.offsets),
                list(self.epochs),
                log.next_offset,
                sync,
            )
        )

    def positioned(self, node: str, sync: int, offset: int) -> bool | None:
        """``node`` answered reset ``sync``: its copy ends at ``offset``. True: it follows
        from there; None: an older answer (ignored); False: reset it again (the log no
        longer holds what follows)."""
        if sync != self.syncs.get(node) or node in self.cursor:
            return None
        if offset < self.log.first_offset or offset > self.log.next_offset:
            return False
        self.cursor[node] = offset
        return True

    def pump(self, node: str, budget: int = PUMP_BYTES) -> list[tuple[int, bytes]]:
        """The next records (end offset, record) for ``node`` behind the log's end, about
        ``budget`` bytes: synced chunks from the files, then the tail."""
        log = self.log
        self.prune()
        cursor = self.cursor.get(node)
        if cursor is None:
            return []
        cursor = max(cursor, log.first_offset)
        out: list[tuple[int, bytes]] = []
        size = 0
        while cursor < log.next_offset and size < budget:
            before = cursor
            if cursor < log.committed_offset:
                chunks = log.read_chunks(cursor, PUMP_CHUNKS)
                if not chunks:
                    break
                for chunk in chunks:
                    if chunk.first + chunk.records <= cursor:
                        continue
                    append = _from_chunk(chunk.first, chunk.data, cursor)
                    record = encode_append(append)
                    out.append((append.end, record))
                    size += len(record)
                    cursor = append.end
                    if size >= budget:
                        break
                if cursor == before:
                    break  # nothing readable there (yet)
                continue
            shipped = False
            for start, end, record in self.tail:
                if start == cursor:
                    out.append((end, record))
                    size += len(record)
                    cursor = end
                    shipped = True
                    if size >= budget:
                        break
                elif start > cursor:
                    break
            if not shipped:
                break
        self.cursor[node] = cursor
        return out


def _from_chunk(first: int, data: bytes, cursor: int) -> StreamAppend:
    """A stored chunk (header and entries) as an append, from offset ``cursor`` on."""
    header = parse_header(data)
    entries = data[HEADER_SIZE:]
    if first >= cursor:
        return StreamAppend(
            first, entries, header.num_entries, header.num_records, header.timestamp, "", -1, None
        )
    offset = first
    kept: list[bytes] = []
    records = 0
    for entry, count in split_entries(entries, header.num_entries):
        if offset >= cursor:
            kept.append(entry)
            records += count
        offset += count
    if not kept:
        raise ValueError("a chunk ends before the cursor")
    start = first + header.num_records - records
    return StreamAppend(start, b"".join(kept), len(kept), records, header.timestamp, "", -1, None)


@dataclass
class StreamReplica:
    """This node's copy of a replicated stream it follows: a ``FileStreamLog`` in a
    directory of its own, ``<base>.<generation>`` (a reset starts the next generation, so
    a new copy never shares a directory with one the writer is still removing)."""

    base: Path
    store: StreamStore
    name: str
    # The stream's x-stream-max-segment-size-bytes (0: the store's).
    segment_bytes: int = 0
    epoch: int = 0
    log: FileStreamLog | None = None
    generation: int = 0
    electing: bool = False
    # The copy's offset last known synced (a heartbeat at it is answered at once).
    synced: int = -1
    ackers: set[LinkFrontEnd] = field(default_factory=set)
    # The copy's epochs (the leader's, as of the last reset it took).
    epochs: Epochs = field(default_factory=list)
    # Resets to answer once synced: (front, number).
    positions: list[tuple[LinkFrontEnd, int]] = field(default_factory=list)
    # A copy started again holds committed entries only from this offset on: it is not
    # elected before (the leader's next offset when it was reset).
    complete_at: int = 0
    # The leader's commit offset as last told (``STREAM_COMMIT``).
    committed: int = 0
    # The stream as this node's stream-protocol subscribers read it from the copy (made
    # on the first subscription here), capped at ``committed``.
    reader: StreamQueue | None = None

    def read(
        self, vhost: str, arguments: Mapping[str, object], timers: Timers | None = None
    ) -> StreamQueue:
        """The reader of the copy (a copy made empty at 0 when there is none yet)."""
        if self.reader is None:
            log = self.fresh()
            reader = StreamQueue(
                vhost, self.name, backend=self.store, arguments=arguments,
                config=QueueConfig(queue_type="stream"), timers=timers,
            )  # fmt: skip
            reader.readable_upto = self.committed
            reader.adopt(log)
            self.reader = reader
        return self.reader

    def commit(self, upto: int) -> None:
        self.committed = max(self.committed, upto)
        if self.reader is not None:
            self.reader.capped(self.committed)

    @property
    def electable(self) -> bool:
        return self.log is not None and self.log.next_offset >= self.complete_at

    @property
    def offset(self) -> int:
        """The copy's next offset (-1: no copy yet)."""
        return -1 if self.log is None else self.log.next_offset

    def _directory(self, generation: int) -> Path:
        return self.base.with_name(f"{self.base.name}.{generation}")

    def generations(self) -> list[tuple[int, Path]]:
        found = []
        parent = self.base.parent
        if parent.is_dir():
            prefix = self.base.name + "."
            for path in parent.iterdir():
                suffix = path.name[len(prefix) :]
                if path.name.startswith(prefix) and suffix.isdigit():
                    found.append((int(suffix), path))
        return sorted(found)

    def load(self, avoid: Path | None = None) -> None:
        """Open the newest copy on disk (a restart), unless it is ``avoid`` (a log of
        this node's being removed: a deposed leader's)."""
        found = self.generations()
        if found:
            self.generation = found[-1][0]
            if found[-1][1] != avoid and self.log is None:
                self.log = self._open(found[-1][1])
                self.epochs, self.complete_at = load_epochs(found[-1][1])

    def _open(self, path: Path) -> FileStreamLog:
        store = self.store
        size = self.segment_bytes or store.segment_bytes
        return FileStreamLog(store, path, size, store.codec, self.name)

    def follow(self, reset: StreamReset) -> None:
        """Take the leader's reset: keep the copy when it is a prefix of the leader's log
        (``keeps``), else start a new one; its epochs are the leader's from now on."""
        log = self.log
        if log is None or not keeps(self.epochs, log.first_offset, log.next_offset, reset):
            self.reset(reset)
            self.complete_at = reset.next
        else:
            self.complete_at = max(self.complete_at, 0)
            log.track(reset.producers, reset.offsets)
        assert self.log is not None
        self.epochs = list(reset.epochs)
        save_epochs(self.log.path, self.epochs, self.complete_at)

    def reset(self, reset: StreamReset) -> None:
        """Discard the copy; a new, empty one starts at ``reset.first``."""
        old = self.log
        if old is not None:
            old.destroy()
        for _generation, path in self.generations():
            if old is None or path != old.path:
                _remove_tree(path)
        self.generation += 1
        self.synced = -1
        log = self._open(self._directory(self.generation))
        log.start_at(reset.first, reset.producers, reset.offsets)
        self.log = log
        if self.reader is not None:
            self.reader.adopt(log)

    def fresh(self) -> FileStreamLog:
        """The copy, made empty at offset 0 if there is none (a member elected before any
        reset reached it: it acknowledged nothing, so nothing was committed)."""
        if self.log is None:
            self.reset(StreamReset(0, {}, {}))
        assert self.log is not None
        return self.log

    def close(self, *, remove: bool = False) -> None:
        if remove:
            if self.log is not None:
                self.log.destroy()
            for _generation, path in self.generations():
                if self.log is None or path != self.log.path:
                    _remove_tree(path)
        self.log = None


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
