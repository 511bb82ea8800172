"""Boot-time conversion of stream directories written in the previous format.

Before chunk segments, a stream's files were ``<first>.seg``: ``records.py`` records
(``P`` + JSON producer state; ``m`` offset, timestamp, producer, sequence, exchange, routing
key, 0-9-1 properties, body) in batches ending with a commit record. ``convert`` rewrites
such a directory into ``.segment`` files of chunks, segment by segment (same first offsets,
same message offsets, the de-duplication state carried in the trailers), so nothing but the
files' format changes. Messages are grouped into chunks of at most ``GROUP`` records whose
timestamps lie within ``GROUP_MS`` of the first (a chunk has one timestamp: the first's).

Crash safety: each new segment is written to a temporary name, synced and renamed; a
``CONVERTED`` marker is written (and the directory synced) only once every new segment is
on disk; only then are the old files deleted. A conversion cut short before the marker is
started again from the old files; after it, only the deletion is finished.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from typing import TYPE_CHECKING

from leveret.protocol.rabbitstream.chunk import CHUNK_TRACKING_SNAPSHOT, CHUNK_USER, chunk_header
from leveret.store.records import read_checked
from leveret.store.stream_segments import SUFFIX, encode_trailer, segment_name

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

log = logging.getLogger("leveret.store")

LEGACY_SUFFIX = ".seg"
MARKER = "CONVERTED"
GROUP = 256
GROUP_MS = 1000
# kind, offset, timestamp, len(exchange), len(routing key), len(properties), len(producer),
# sequence; then exchange, routing key, producer, properties, body.
_M = struct.Struct("<cQqBBIHq")


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def convert(path: Path, entry_of: Callable[[str, str, bytes, bytes], list[bytes]]) -> bool:
    """Convert ``path`` if it holds the previous format; True when it did."""
    olds = sorted(p for p in path.iterdir() if p.suffix == LEGACY_SUFFIX)
    marker = path / MARKER
    if marker.exists():
        for old in olds:
            old.unlink()
        marker.unlink()
        _sync_dir(path)
        return False
    if not olds:
        return False
    for stale in path.iterdir():  # a conversion cut short: start again from the old files
        if stale.suffix == SUFFIX or stale.name.endswith(".tmp"):
            stale.unlink()
    producers: dict[str, int] = {}
    count = 0
    for number, old in enumerate(olds):
        first = int(old.stem)
        scan = read_checked(old, last=number == len(olds) - 1)
        writer = _SegmentWriter(path / (segment_name(first) + ".tmp"), first, producers)
        for payload in scan.payloads:
            kind = payload[0] if payload else 0
            if kind == 0x50:  # "P"
                producers.update(json.loads(bytes(payload[1:])))
                continue
            if kind != 0x6D:  # "m"
                continue
            _k, offset, ts, le, lr, lp, lprod, seq = _M.unpack_from(payload)
            p = _M.size
            exchange = bytes(payload[p : p + le]).decode()
            p += le
            routing_key = bytes(payload[p : p + lr]).decode()
            p += lr
            producer = bytes(payload[p : p + lprod]).decode()
            p += lprod
            props = bytes(payload[p : p + lp])
            body = bytes(payload[p + lp :])
            writer.add(offset, ts, entry_of(exchange, routing_key, props, body), producer, seq)
            count += 1
        writer.close()
        os.replace(writer.path, path / segment_name(first))
    _sync_dir(path)
    with open(marker, "wb") as f:
        os.fsync(f.fileno())
    _sync_dir(path)
    for old in olds:
        old.unlink()
    marker.unlink()
    _sync_dir(path)
    log.info("stream %s: converted %d messages to chunk segments", path, count)
    return True


class _SegmentWriter:
    """Chunks of one new segment, written as they fill."""

    def __init__(self, path: Path, first: int, producers: dict[str, int]) -> None:
        self.path = path
        self.segment_first = first
        self.producers = producers
        self.file = open(path, "wb")  # noqa: SIM115 - closed in close()
        self.chunks = 0
        self.parts: list[bytes] = []
        self.first = -1
        self.records = 0
        self.timestamp = 0
        self.delta: dict[str, int] = {}

    def add(self, offset: int, ts: int, pieces: list[bytes], producer: str, seq: int) -> None:
        if self.records and (
            self.records >= GROUP
            or ts - self.timestamp > GROUP_MS
            or offset != self.first + self.records
        ):
            self._flush()
        if not self.records:
            self.first, self.timestamp = offset, ts
        self.parts.extend(pieces)
        self.records += 1
        if producer:
            self.producers[producer] = seq
            self.delta[producer] = seq

    def _flush(self) -> None:
        crc = 0
        length = 0
        for part in self.parts:
            crc = zlib.crc32(part, crc)
            length += len(part)
        trailer = encode_trailer(self.producers if not self.chunks else self.delta, {})
        header = chunk_header(
            chunk_id=self.first,
            timestamp=self.timestamp,
            num_entries=self.records,
            num_records=self.records,
            crc=crc,
            data_length=length,
            trailer_length=len(trailer),
            chunk_type=CHUNK_USER,
        )
        self.file.write(b"".join([header, *self.parts, trailer]))
        self.chunks += 1
        self.parts = []
        self.records = 0
        self.delta = {}

    def close(self) -> None:
        if self.records:
            self._flush()
        elif not self.chunks:
            # No message: the segment still carries the de-duplication state.
            trailer = encode_trailer(self.producers, {})
            self.file.write(
                chunk_header(
                    chunk_id=self.segment_first,
                    timestamp=0,
                    num_entries=0,
                    num_records=0,
                    crc=0,
                    data_length=0,
                    trailer_length=len(trailer),
                    chunk_type=CHUNK_TRACKING_SNAPSHOT,
                )
                + trailer
            )
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
