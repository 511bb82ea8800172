"""The record framing shared by every store file, and reading a file back.

A record is ``MAGIC (2 bytes) | length (u32 LE) | crc32 of payload (u32 LE) | payload``.
Files are only ever appended to, one batch per group commit, and every batch ends with a
commit record (payload ``C``). The writer starts a batch only after the previous one's
fsync returned, so a batch followed by another batch's commit record was on disk.

Reading a file back (``scan``) stops at the first record that is incomplete or fails its
checksum, and then tells a torn tail from damage in the middle:

- torn tail: the damage lies in the last batch (at most one commit record follows it). A
  crash while writing leaves a short record, zeros or, after a power loss, pages of the last
  unsynced batch missing. Nothing in that batch was confirmed. The caller truncates the
  file there and logs what was dropped.
- corruption: two or more commit records follow the damage, so the damaged batch had been
  synced and later data depends on it. That is ``StoreCorrupt``; it is never skipped.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

log = logging.getLogger("leveret.store")

MAGIC = b"\xa7\x4c"
HEADER = struct.Struct("<2sII")
HEADER_SIZE = HEADER.size
# No record is larger than this (a 128 MiB message plus its routing data).
MAX_RECORD = (128 << 20) + (1 << 20)
COMMIT = b"C"


class StoreCorrupt(Exception):
    """A store file is damaged in the middle; the broker refuses to start with this text."""


def frame(payload: bytes) -> bytes:
    return record_head(payload) + payload


def record_head(payload: bytes) -> bytes:
    """The header ``frame`` puts in front of ``payload`` (a batch joins heads and payloads
    once, without a framed copy of each record first)."""
    return HEADER.pack(MAGIC, len(payload), zlib.crc32(payload))


def _valid_at(data: bytes | memoryview, pos: int) -> int:
    """The end of a valid record at ``pos``, or -1."""
    end = pos + HEADER_SIZE
    if end > len(data):
        return -1
    magic, length, crc = HEADER.unpack_from(data, pos)
    length = int(length)
    if magic != MAGIC or length > MAX_RECORD or end + length > len(data):
        return -1
    if zlib.crc32(data[end : end + length]) != crc:
        return -1
    return int(end + length)


@dataclass
class Scan:
    """The valid records of a file, and what follows them."""

    payloads: list[memoryview] = field(default_factory=list)
    good_end: int = 0  # offset just past the last valid record
    size: int = 0  # the file's size
    # Offset of the first valid record found after the bad one (-1: none).
    resumes_at: int = -1
    # Commit records found after the bad one: 2 or more means synced data follows it.
    commits_after: int = 0

    @property
    def damaged(self) -> bool:
        return self.good_end < self.size

    @property
    def corrupt(self) -> bool:
        return self.commits_after >= 2


def scan(data: bytes) -> Scan:
    view = memoryview(data)
    result = Scan(size=len(data))
    pos = 0
    payloads = result.payloads
    unpack = HEADER.unpack_from
    size = len(data)
    crc32 = zlib.crc32
    while pos + HEADER_SIZE <= size:
        magic, length, crc = unpack(view, pos)
        start = pos + HEADER_SIZE
        end = start + length
        if magic != MAGIC or end > size or length > MAX_RECORD:
            break
        payload = view[start:end]
        if crc32(payload) != crc:
            break
        payloads.append(payload)
        pos = end
    result.good_end = pos
    if pos < size:
        # What follows the damage: any valid records, and how many commits among them.
        probe = data.find(MAGIC, pos + 1)
        while probe >= 0:
            end = _valid_at(view, probe)
            if end < 0:
                probe = data.find(MAGIC, probe + 1)
                continue
            if result.resumes_at < 0:
                result.resumes_at = probe
            if view[probe + HEADER_SIZE : end] == COMMIT:
                result.commits_after += 1
            probe = data.find(MAGIC, end)
    return result


def read_checked(path: Path, *, last: bool) -> Scan:
    """A store file's valid records. A torn tail of the last file of a series is cut off
    (and synced) with one log line; damage anywhere else is ``StoreCorrupt``."""
    data = path.read_bytes()
    result = scan(data)
    if result.damaged:
        if result.corrupt or not last:
            raise StoreCorrupt(
                f"store file {path} is damaged at offset {result.good_end} of {result.size} "
                f"and committed data follows it (first valid record after the damage at "
                f"offset {result.resumes_at}); refusing to start rather than lose it. "
                "Restore the data directory from a backup, or move this file aside to "
                "accept the loss of its messages."
            )
        log.warning(
            "store file %s: torn tail at offset %d: dropped %d bytes of an unfinished write "
            "(%d records before it kept)",
            path,
            result.good_end,
            result.size - result.good_end,
            sum(1 for p in result.payloads if p != COMMIT),
        )
        with open(path, "r+b") as f:
            f.truncate(result.good_end)
            os.fsync(f.fileno())
    return result
