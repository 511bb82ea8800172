"""Osiris chunks: the unit a stream stores and a ``deliver`` frame carries, byte for byte.

Format (``rabbitmq/osiris`` ``src/osiris_log.erl``, "Specification of the Log format"; all
integers big-endian)::

    magic:4 version:4  chunk type u8  entries u16  records u32  timestamp i64 (ms)
    epoch u64  chunk id u64 (first offset)  data crc32 u32  data length u32
    trailer length u32  bloom size u8  reserved u24              -- 48 bytes
    bloom filter data (bloom size bytes)
    data: entries (num entries of them)
    trailer (trailer length bytes)

An entry is either simple, ``0:1 size:31`` then ``size`` bytes (one record: one AMQP 1.0
encoded message), or a sub-batch, ``1:1 compression:3 reserved:4 records u16
uncompressed-length u32 length u32`` then ``length`` bytes holding ``records`` simple
entries (compressed by the publisher with ``compression``; 0 = none). Offsets count
records: a chunk holds offsets ``chunk id .. chunk id + records - 1``.

Sans-IO; any module may import this one.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from leveret.protocol.rabbitstream.errors import UnknownFrame

MAGIC_VERSION = 0x50  # magic 5, chunk format version 0: what RabbitMQ 3.10.8 sends
CHUNK_USER = 0
CHUNK_TRACKING_DELTA = 1
CHUNK_TRACKING_SNAPSHOT = 2

HEADER = struct.Struct(">BBHIqQQIIIB3x")
HEADER_SIZE = HEADER.size  # 48
_U32 = struct.Struct(">I")
_SUB_BATCH = struct.Struct(">BHII")
SIMPLE_ENTRY_HEADER_SIZE = 4
SUB_BATCH_HEADER_SIZE = _SUB_BATCH.size  # 11


class ChunkHeader(NamedTuple):
    """The 48-byte chunk header, decoded."""

    chunk_type: int
    num_entries: int
    num_records: int
    timestamp: int
    epoch: int
    chunk_id: int
    crc: int
    data_length: int
    trailer_length: int
    bloom_size: int

    @property
    def size(self) -> int:
        """The whole chunk's length in bytes (header, filter, data and trailer)."""
        return HEADER_SIZE + self.bloom_size + self.data_length + self.trailer_length


def parse_header(data: bytes | bytearray | memoryview, at: int = 0) -> ChunkHeader:
    """The header of the chunk at ``at``; ``UnknownFrame`` when it is not one."""
    try:
        (magic, ctype, entries, records, ts, epoch, chunk_id, crc, dlen, tlen, bloom) = (
            HEADER.unpack_from(data, at)
        )
    except struct.error as exc:
        raise UnknownFrame(f"chunk header: {exc}") from exc
    if magic >> 4 != 5:
        raise UnknownFrame(f"not an osiris chunk (magic/version 0x{magic:02x})")
    return ChunkHeader(ctype, entries, records, ts, epoch, chunk_id, crc, dlen, tlen, bloom)


def simple_entry(record: bytes | bytearray | memoryview) -> bytes:
    """One record as a simple entry (its 4-byte size, then the bytes)."""
    return _U32.pack(len(record)) + record


def chunk_header(
    *,
    chunk_id: int,
    timestamp: int,
    num_entries: int,
    num_records: int,
    crc: int,
    data_length: int,
    trailer_length: int = 0,
    epoch: int = 1,
    chunk_type: int = CHUNK_USER,
) -> bytes:
    """The 48-byte header of a chunk whose data (``data_length`` bytes, CRC ``crc``) the
    caller writes after it, so the data need not be joined just to be checksummed."""
    return HEADER.pack(
        MAGIC_VERSION,
        chunk_type,
        num_entries,
        num_records,
        timestamp,
        epoch,
        chunk_id,
        crc,
        data_length,
        trailer_length,
        0,
    )


COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1


def split_entries(data: bytes | memoryview, num_entries: int) -> list[tuple[bytes, int]]:
    """The entries of a chunk's data as (entry bytes, records in it); ``UnknownFrame`` when
    the data is cut short."""
    out: list[tuple[bytes, int]] = []
    at = 0
    try:
        for _ in range(num_entries):
            if data[at] & 0x80:
                _kind, count, _uncompressed, length = _SUB_BATCH.unpack_from(data, at)
                end = at + SUB_BATCH_HEADER_SIZE + length
            else:
                count = 1
                end = at + 4 + _U32.unpack_from(data, at)[0]
            if end > len(data):
                raise UnknownFrame("chunk entry overruns the data")
            out.append((bytes(data[at:end]), count))
            at = end
    except (struct.error, IndexError) as exc:
        raise UnknownFrame(f"chunk entries: {exc}") from exc
    return out


def entry_records(entry: bytes) -> list[bytes | None]:
    """The records of one (well-framed) entry. A sub-batch compressed with gzip is
    decompressed; with any other codec (snappy, lz4, zstd: the client's business), or when
    its inside is malformed, each of its records is None."""
    if not entry[0] & 0x80:
        return [entry[4 : 4 + _U32.unpack_from(entry, 0)[0]]]
    kind, count, _uncompressed, length = _SUB_BATCH.unpack_from(entry, 0)
    try:
        inner = entry[SUB_BATCH_HEADER_SIZE : SUB_BATCH_HEADER_SIZE + length]
        compression = (kind >> 4) & 0x07
        if compression == COMPRESSION_GZIP:
            inner = zlib.decompress(inner, 16 + zlib.MAX_WBITS)
        elif compression != COMPRESSION_NONE:
            return [None] * count
        out: list[bytes | None] = []
        pos = 0
        for _ in range(count):
            size = _U32.unpack_from(inner, pos)[0]
            if pos + 4 + size > len(inner):
                return [None] * count
            out.append(inner[pos + 4 : pos + 4 + size])
            pos += 4 + size
        return out
    except (struct.error, zlib.error):
        return [None] * count


def encode_chunk(
    entries: list[bytes],
    *,
    chunk_id: int,
    timestamp: int,
    num_records: int | None = None,
    num_entries: int | None = None,
    epoch: int = 0,
    chunk_type: int = CHUNK_USER,
    trailer: bytes = b"",
) -> bytes:
    """A chunk of already-encoded ``entries`` (``simple_entry`` or sub-batch bytes);
    ``num_records`` defaults to one per entry, ``num_entries`` to one per item of
    ``entries`` (an item may hold several entries, joined as stored)."""
    data = b"".join(entries)
    count = len(entries) if num_entries is None else num_entries
    header = HEADER.pack(
        MAGIC_VERSION,
        chunk_type,
        count,
        count if num_records is None else num_records,
        timestamp,
        epoch,
        chunk_id,
        zlib.crc32(data),
        len(data),
        len(trailer),
        0,
    )
    return header + data + trailer


class Record(NamedTuple):
    """One record of a chunk: its offset and its bytes (an AMQP 1.0 encoded message)."""

    offset: int
    data: bytes


def entries_of(chunk: bytes | memoryview, *, check_crc: bool = True) -> list[Record]:
    """Every record of a whole chunk, in offset order; sub-batches must be uncompressed.

    ``UnknownFrame`` when the chunk is cut short, its CRC is wrong, or a sub-batch is
    compressed (decompressing is the reader's business)."""
    header = parse_header(chunk)
    start = HEADER_SIZE + header.bloom_size
    end = start + header.data_length
    if len(chunk) < end:
        raise UnknownFrame(f"chunk cut short: {len(chunk)} of {end} bytes")
    data = memoryview(chunk)[start:end]
    if check_crc and zlib.crc32(data) != header.crc:
        raise UnknownFrame(f"chunk {header.chunk_id}: data CRC mismatch")
    out: list[Record] = []
    offset = header.chunk_id
    at = 0
    try:
        for _ in range(header.num_entries):
            first = data[at]
            if not first & 0x80:
                size = _U32.unpack_from(data, at)[0]
                at += 4
                if at + size > len(data):
                    raise UnknownFrame("chunk entry overruns the data")
                out.append(Record(offset, bytes(data[at : at + size])))
                offset += 1
                at += size
                continue
            kind, count, _uncompressed, length = _SUB_BATCH.unpack_from(data, at)
            at += SUB_BATCH_HEADER_SIZE
            if (kind >> 4) & 0x07:
                raise UnknownFrame("compressed sub-batch entries are not decoded here")
            inner, at = data[at : at + length], at + length
            pos = 0
            for _ in range(count):
                size = _U32.unpack_from(inner, pos)[0]
                out.append(Record(offset, bytes(inner[pos + 4 : pos + 4 + size])))
                offset += 1
                pos += 4 + size
    except (struct.error, IndexError) as exc:
        raise UnknownFrame(f"chunk entries: {exc}") from exc
    return out
