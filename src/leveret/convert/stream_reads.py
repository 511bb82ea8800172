"""A stored chunk's entries decoded for readers in one pass over the chunk's data.

A stream keeps a 0-9-1 publish as a 1.0 record whose first bytes (header section, the
``x-exchange`` / ``x-routing-key`` / ``x-amqp091-properties`` annotations, any properties
sections, the data section's descriptor) depend only on the exchange, routing key and
property bytes (``stream_records.py``, ``record_parts``); a 1.0 or stream-protocol publish's
record has its sections before the body as they came. A publisher that repeats those gives
records that differ only in the body, so ``ChunkReads`` keeps the head of the last record
it parsed and, for each record that starts with the same bytes and holds one data section
after them, slices the body out and reuses the exchange, routing key, properties and hints:
no parse, and no copy of the entry or the record. Any other record (a new head, several
data sections, another body kind, a sub-batch) is handed to the codec, which parses it and
gives the next head.

Compiled with the hot path (``build_info.HOT_PATH_MODULES``). Imported by
``stream_records.py`` only.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from leveret.convert import amqp10
from leveret.convert.amqp091 import decode_properties, encode_properties
from leveret.model.message import Message
from leveret.protocol.rabbitstream.errors import UnknownFrame

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.message import PropertiesDecoder, PropertiesEncoder

_U32 = struct.Struct(">I")
_DATA_SECTION = b"\x00\x53\x75"
_SUB_BATCH = struct.Struct(">BHII")  # kind, records, uncompressed size, size
_VBIN8 = 0xA0
_VBIN32 = 0xB0
_AMQP10 = amqp10.FORMAT


class ChunkReads:
    """Decodes chunks' entries; ``record(record, stream)`` parses one record into its
    message and the length of its reusable head (0: none), ``entry(entry, stream)`` one
    entry that is not a simple record (a sub-batch)."""

    __slots__ = (
        "_entry",
        "_exchange",
        "_format",
        "_head",
        "_hints",
        "_raw",
        "_record",
        "_routing_key",
        "_stream",
    )

    def __init__(
        self,
        record: Callable[[bytes, str], tuple[Message, int]],
        entry: Callable[[bytes, str], list[Message | None]],
    ) -> None:
        self._record = record
        self._entry = entry
        self._head = b""
        self._exchange = ""
        self._routing_key = ""
        self._raw = b""
        self._hints = 0
        # The reused head's form: 0-9-1's ends at the data section's value (the body is the
        # value); 1.0's before the data section (the body keeps the section).
        self._format = 0
        # A 1.0 record without routing annotations is routed by its stream's name: a head
        # is reused within the stream it was read from.
        self._stream = ""

    def messages(
        self, data: bytes, at: int, end: int, entries: int, stream: str
    ) -> list[Message | None]:
        """The messages of the ``entries`` entries in ``data[at:end]`` (None: a record
        unreadable here); ``UnknownFrame`` when an entry overruns ``end``."""
        if end > len(data):
            raise UnknownFrame("chunk data cut short")
        out: list[Message | None] = []
        head = self._head
        size = len(head) if stream == self._stream else 0
        for _ in range(entries):
            if at + 4 > end:
                raise UnknownFrame("chunk entry overruns the data")
            if data[at] & 0x80:
                _kind, _count, _uncompressed, length = _SUB_BATCH.unpack_from(data, at)
                stop = at + _SUB_BATCH.size + length
                if stop > end:
                    raise UnknownFrame("chunk entry overruns the data")
                out.extend(self._entry(data[at:stop], stream))
                at = stop
                continue
            start = at + 4
            stop = start + _U32.unpack_from(data, at)[0]
            if stop > end:
                raise UnknownFrame("chunk entry overruns the data")
            at = stop
            if size:
                p = start + size
                whole = self._format == _AMQP10
                if whole:
                    p += 3  # the data section's descriptor, checked below
                if p + 2 <= stop and data.startswith(head, start):
                    code = data[p]
                    body_at = length = -1
                    if code == _VBIN8:
                        body_at, length = p + 2, data[p + 1]
                    elif code == _VBIN32 and p + 5 <= stop:
                        body_at, length = p + 5, _U32.unpack_from(data, p + 1)[0]
                    if body_at + length == stop and (
                        not whole or data.startswith(_DATA_SECTION, p - 3)
                    ):
                        decode: PropertiesDecoder = decode_properties
                        encode: PropertiesEncoder = encode_properties
                        if whole:
                            body = data[p - 3 : stop]
                            decode = amqp10.decode_properties
                            encode = amqp10.encode_properties
                        else:
                            body = data[body_at:stop]
                        out.append(
                            Message(
                                self._exchange,
                                self._routing_key,
                                self._raw,
                                body,
                                decode,
                                encode,
                                self._hints,
                                self._format,
                            )
                        )
                        continue
            message, reuse = self._record(data[start:stop], stream)
            out.append(message)
            if reuse:
                head = self._head = data[start : start + reuse]
                size = reuse
                self._exchange = message.exchange
                self._routing_key = message.routing_key
                self._raw = message.raw_properties
                self._hints = message.hints
                self._format = message.format
                self._stream = stream
        return out
