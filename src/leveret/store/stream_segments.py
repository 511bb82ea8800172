"""Stream segment files on disk: osiris chunks back to back, read back at boot.

A segment file (``<first offset:020d>.segment``) is a sequence of osiris chunks exactly as a
stream-protocol reader is sent them (``protocol/rabbitstream/chunk.py``): a 48-byte header,
the entries, then a trailer that readers are not sent (the header counts it, as RabbitMQ's
does). One chunk is written per stream per group-commit batch, so the chunk, its header and
its CRC are the unit of a write and of a torn tail.

The trailer holds tracking entries, ``kind u8, id length u16, id, value u64``: kind 0 a
producer's highest sequence (de-duplication), kind 1 a consumer offset stored by reference.
The first chunk of every segment carries the whole state (so retention, which drops whole
segments, never loses it); later chunks carry what changed. Chunks of type 1/2 (tracking
delta/snapshot) have no entries: they carry only a trailer (a stored offset with no message
in the same batch). Only user chunks (type 0) are delivered.

Reading back (``scan_segment``) checks every chunk's magic, sizes and data CRC and stops at
the first bad one. Because the writer starts a batch only after the previous one synced,
a bad chunk followed by any valid chunk means synced data follows the damage
(``StoreCorrupt``); a bad chunk at the end of the last segment is a torn tail, cut off
with one warning. The store's module imports this one.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from leveret.protocol.rabbitstream.chunk import (
    CHUNK_TRACKING_SNAPSHOT,
    CHUNK_USER,
    HEADER_SIZE,
    ChunkHeader,
    parse_header,
)
from leveret.protocol.rabbitstream.errors import UnknownFrame
from leveret.store.records import StoreCorrupt

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

log = logging.getLogger("leveret.store")

SUFFIX = ".segment"
TRACK_PRODUCER = 0
TRACK_OFFSET = 1
_TRACK = struct.Struct(">BH")
_U64 = struct.Struct(">Q")
# A chunk larger than this is not one of ours (damage read as a size).
MAX_CHUNK = 1 << 31


def segment_name(first: int) -> str:
    return f"{first:020d}{SUFFIX}"


def encode_trailer(producers: Mapping[str, int], offsets: Mapping[str, int]) -> bytes:
    parts = []
    for kind, table in ((TRACK_PRODUCER, producers), (TRACK_OFFSET, offsets)):
        for name, value in table.items():
            raw = name.encode()
            parts.append(_TRACK.pack(kind, len(raw)) + raw + _U64.pack(value))
    return b"".join(parts)


def decode_trailer(
    data: bytes | memoryview, producers: dict[str, int], offsets: dict[str, int]
) -> None:
    """Apply a chunk's trailer to ``producers`` and ``offsets``."""
    at = 0
    n = len(data)
    while at + _TRACK.size <= n:
        kind, size = _TRACK.unpack_from(data, at)
        start = at + _TRACK.size
        end = start + size
        if end + 8 > n:
            return
        name = bytes(data[start:end]).decode(errors="replace")
        value = _U64.unpack_from(data, end)[0]
        if name:
            (producers if kind == TRACK_PRODUCER else offsets)[name] = value
        at = end + 8


def _chunk_at(data: bytes | memoryview, pos: int) -> ChunkHeader | None:
    """The header of a whole, valid chunk at ``pos``, or None."""
    if pos + HEADER_SIZE > len(data):
        return None
    try:
        header = parse_header(data, pos)
    except UnknownFrame:
        return None
    if header.chunk_type > CHUNK_TRACKING_SNAPSHOT or header.size > MAX_CHUNK:
        return None
    if header.chunk_type != CHUNK_USER and header.num_records:
        return None
    if pos + header.size > len(data):
        return None
    start = pos + HEADER_SIZE + header.bloom_size
    if zlib.crc32(data[start : start + header.data_length]) != header.crc:
        return None
    return header


@dataclass
class ChunkInfo:
    """One chunk of a segment as the boot scan found it."""

    header: ChunkHeader
    pos: int


@dataclass
class SegmentScan:
    chunks: list[ChunkInfo] = field(default_factory=list)
    size: int = 0  # bytes of valid chunks
    producers: dict[str, int] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)


def scan_segment(
    path: Path, first: int, *, last: bool, scan: SegmentScan | None = None
) -> SegmentScan:
    """Every valid chunk of a segment file; applies trailers to ``scan``'s tracking state.

    A torn tail of the last segment is cut off (and synced) with one warning; damage
    followed by a valid chunk, or in any other segment, is ``StoreCorrupt``."""
    data = path.read_bytes()
    view = memoryview(data)
    result = scan if scan is not None else SegmentScan()
    result.chunks = []
    pos = 0
    n = len(data)
    # Chunk ids are not covered by the CRC: each must follow on from the one before.
    expected = first
    while pos < n:
        header = _chunk_at(view, pos)
        if header is None or header.chunk_id != expected:
            break
        if header.chunk_type == CHUNK_USER:
            expected += header.num_records
        result.chunks.append(ChunkInfo(header, pos))
        trailer_at = pos + HEADER_SIZE + header.bloom_size + header.data_length
        decode_trailer(
            view[trailer_at : trailer_at + header.trailer_length],
            result.producers,
            result.offsets,
        )
        pos += header.size
    result.size = pos
    if pos < n:
        resumes = _valid_after(view, data, pos)
        if resumes >= 0 or not last:
            raise StoreCorrupt(
                f"store file {path} is damaged at offset {pos} of {n} and committed data "
                f"follows it (first valid chunk after the damage at offset {resumes}); "
                "refusing to start rather than lose it. Restore the data directory from a "
                "backup, or move this file aside to accept the loss of its messages."
            )
        log.warning(
            "store file %s: torn tail at offset %d: dropped %d bytes of an unfinished write "
            "(%d chunks before it kept)",
            path,
            pos,
            n - pos,
            len(result.chunks),
        )
        with open(path, "r+b") as f:
            f.truncate(pos)
            os.fsync(f.fileno())
    return result


def _valid_after(view: memoryview, data: bytes, pos: int) -> int:
    """The position of the first valid chunk after the damage at ``pos``, or -1."""
    probe = data.find(b"\x50", pos + 1)
    while probe >= 0:
        header = _chunk_at(view, probe)
        if header is not None and header.data_length + header.trailer_length > 0:
            return probe
        probe = data.find(b"\x50", probe + 1)
    return -1


def is_user(header: ChunkHeader) -> bool:
    return header.chunk_type == CHUNK_USER
