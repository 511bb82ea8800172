"""Where each message record of the recovered segments lies, and reading records back.

Recovery scans every segment once and keeps, per segment, three arrays: the ids of its
message records, the offsets of their payloads and their lengths (20 bytes per record).
Bodies stay in the files; ``load`` reads the records of a run of ids with one ``pread``
per segment they span. Restoring a deep queue hands its messages to the queue as pages
that point here (``store/recovery.py``), so a boot with millions of messages neither holds
their bodies nor writes them again.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from typing import TYPE_CHECKING

from leveret.store.records import StoreCorrupt

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path

# A message record: kind, queue id, message id, enqueue time (wall clock, ms),
# exchange/routing-key/properties lengths.
M_RECORD = struct.Struct("<cQQQBBI")
# The same for a message of another wire format (``N``): its ``Message.format`` follows.
N_RECORD = struct.Struct("<cQQQBBIB")
N_KIND = 78  # b"N"

# exchange, routing key, raw properties, body, enqueue time (wall clock, seconds), format
StoredRecord = tuple[str, str, bytes, bytes, float, int]


class SegmentIndex:
    """The message records of the segments found at boot."""

    def __init__(self, directory: Path, segment_of: Callable[[int], int]) -> None:
        self.directory = directory
        self.segment_of = segment_of
        self.segments: dict[int, tuple[array[int], array[int], array[int]]] = {}
        self._fds: dict[int, int] = {}

    def add_segment(self, segno: int) -> tuple[array[int], array[int], array[int]]:
        arrays = self.segments[segno] = (array("Q"), array("Q"), array("I"))
        return arrays

    def has(self, mid: int) -> bool:
        found = self.segments.get(self.segment_of(mid))
        if found is None:
            return False
        mids = found[0]
        i = bisect.bisect_left(mids, mid)
        return i < len(mids) and mids[i] == mid

    def load(self, mids: Sequence[int]) -> list[StoredRecord]:
        """The records of ``mids``, in that order."""
        out: list[StoredRecord] = []
        segment_of = self.segment_of
        unpack, size = M_RECORD.unpack_from, M_RECORD.size
        n_unpack, n_size = N_RECORD.unpack_from, N_RECORD.size
        n = len(mids)
        i = 0
        while i < n:
            segno = segment_of(mids[i])
            j = i + 1
            while j < n and segment_of(mids[j]) == segno:
                j += 1
            seg_mids, starts, lengths = self.segments[segno]
            where = []
            for k in range(i, j):
                x = bisect.bisect_left(seg_mids, mids[k])
                if x == len(seg_mids) or seg_mids[x] != mids[k]:
                    raise StoreCorrupt(f"store: message {mids[k]} is missing")
                where.append(x)
            lo = min(starts[x] for x in where)
            hi = max(starts[x] + lengths[x] for x in where)
            data = self._read(segno, lo, hi - lo)
            for x in where:
                start = starts[x] - lo
                end = start + lengths[x]
                if data[start] == N_KIND:
                    _k, _qid, _mid, ms, exlen, rklen, proplen, fmt = n_unpack(data, start)
                    pos = start + n_size
                else:
                    _k, _qid, _mid, ms, exlen, rklen, proplen = unpack(data, start)
                    pos = start + size
                    fmt = 0
                exchange = data[pos : pos + exlen].decode()
                pos += exlen
                routing_key = data[pos : pos + rklen].decode()
                pos += rklen
                props = data[pos : pos + proplen]
                body = data[pos + proplen : end]
                out.append((exchange, routing_key, props, body, ms / 1000, fmt))
            i = j
        return out

    def _read(self, segno: int, offset: int, length: int) -> bytes:
        fd = self._fds.get(segno)
        if fd is None:
            fd = self._fds[segno] = os.open(self.directory / f"{segno:08d}.seg", os.O_RDONLY)
        data = os.pread(fd, length, offset)
        while len(data) < length:
            more = os.pread(fd, length - len(data), offset + len(data))
            if not more:
                raise StoreCorrupt(f"store: segment {segno} is shorter than its records")
            data += more
        return data

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self.segments.clear()


class StoredMessages:
    """A recovered queue's messages in queue order, read from the segments on demand.

    Items are (mid, exchange, routing key, raw properties, body, delivered before, enqueue
    time in wall-clock seconds, ``Message.format``)."""

    CHUNK = 4096

    def __init__(self, refs: dict[int, bool], index: SegmentIndex) -> None:
        self._refs = refs
        self.index = index

    def __len__(self) -> int:
        return len(self._refs)

    def __iter__(self) -> Iterator[tuple[int, str, str, bytes, bytes, bool, float, int]]:
        for mids, delivered in self.runs(0, self.CHUNK):
            for mid, seen, record in zip(mids, delivered, self.index.load(mids), strict=True):
                exchange, routing_key, props, body, at, fmt = record
                yield (mid, exchange, routing_key, props, body, bool(seen), at, fmt)

    def runs(self, skip: int, size: int) -> Iterator[tuple[array[int], bytes]]:
        """The ids (and delivered flags) after the first ``skip``, ``size`` at a time."""
        mids = array("Q")
        delivered = bytearray()
        for n, (mid, seen) in enumerate(self._refs.items()):
            if n < skip:
                continue
            mids.append(mid)
            delivered.append(seen)
            if len(mids) == size:
                yield mids, bytes(delivered)
                mids = array("Q")
                delivered = bytearray()
        if mids:
            yield mids, bytes(delivered)

    def release(self) -> None:
        """Recovery is done with the ids (pages keep their own)."""
        self._refs = {}
