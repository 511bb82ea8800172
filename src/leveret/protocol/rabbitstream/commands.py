"""Every command of RabbitMQ's stream protocol as a frozen dataclass with ``encode()``
(``Publish``: a frozen class of its own, which keeps a decoded frame's messages as stored
entries and builds ``messages`` only when asked).

``encode()`` returns the whole frame (size prefix included); ``decode(version, reader)``
reads a frame body after its key and version. ``COMMANDS`` maps a wire key (with the
response bit) to its class. Layouts are PROTOCOL.adoc's; where RabbitMQ's encoder differs
from the document it is followed and said so (an empty SASL challenge is left out of
``SaslAuthenticateResponse``; ``OpenResponse`` carries properties only when OK).

Sans-IO; any module may import this one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

from leveret.protocol.rabbitstream import _wire as w
from leveret.protocol.rabbitstream._publish import simple_entries
from leveret.protocol.rabbitstream.constants import RESPONSE, Code, Key
from leveret.protocol.rabbitstream.errors import UnknownFrame

_HEAD = struct.Struct(">IHH")  # size, key, version
_HEAD_CID = struct.Struct(">IHHI")  # size, key, version, correlation id
_PUB_HEAD = struct.Struct(">IHHBi")  # size, key, version, publisher id, count
_SUB_BATCH = struct.Struct(">BHII")
_ID_SIZE = struct.Struct(">QI")
_DELIVER1 = struct.Struct(">IHHB")
_DELIVER2 = struct.Struct(">IHHBQ")
_CREDIT = struct.Struct(">IHHBH")


def _frame(key: int, version: int, body: bytes) -> bytes:
    return _HEAD.pack(len(body) + 4, key, version) + body


def _request(key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    return _HEAD_CID.pack(len(body) + 8, key, version, correlation_id) + body


@dataclass(frozen=True, slots=True)
class Command:
    """Base of every command; ``KEY`` is the wire key (response bit included)."""

    KEY: ClassVar[int] = 0

    def encode(self) -> bytes:
        raise NotImplementedError

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Command:
        raise NotImplementedError


# -- connection set-up ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeerProperties(Command):
    KEY = Key.PEER_PROPERTIES
    correlation_id: int
    properties: dict[str, str]

    def encode(self) -> bytes:
        return _request(self.KEY, 1, self.correlation_id, w.properties(self.properties))

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> PeerProperties:
        return cls(r.u32(), r.properties())


@dataclass(frozen=True, slots=True)
class PeerPropertiesResponse(Command):
    KEY = RESPONSE | Key.PEER_PROPERTIES
    correlation_id: int
    code: int
    properties: dict[str, str]

    def encode(self) -> bytes:
        body = w.U16.pack(self.code) + w.properties(self.properties)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> PeerPropertiesResponse:
        return cls(r.u32(), r.u16(), r.properties())


@dataclass(frozen=True, slots=True)
class SaslHandshake(Command):
    KEY = Key.SASL_HANDSHAKE
    correlation_id: int

    def encode(self) -> bytes:
        return _request(self.KEY, 1, self.correlation_id, b"")

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> SaslHandshake:
        return cls(r.u32())


@dataclass(frozen=True, slots=True)
class SaslHandshakeResponse(Command):
    KEY = RESPONSE | Key.SASL_HANDSHAKE
    correlation_id: int
    code: int
    mechanisms: list[str]

    def encode(self) -> bytes:
        body = w.U16.pack(self.code) + w.strings(self.mechanisms)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> SaslHandshakeResponse:
        return cls(r.u32(), r.u16(), r.strings())


@dataclass(frozen=True, slots=True)
class SaslAuthenticate(Command):
    KEY = Key.SASL_AUTHENTICATE
    correlation_id: int
    mechanism: str
    data: bytes | None

    def encode(self) -> bytes:
        body = w.string(self.mechanism) + w.bytes_(self.data)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> SaslAuthenticate:
        return cls(r.u32(), r.str_(), r.bytes_())


@dataclass(frozen=True, slots=True)
class SaslAuthenticateResponse(Command):
    """``data`` (a challenge) is on the wire only when not None, as RabbitMQ sends it."""

    KEY = RESPONSE | Key.SASL_AUTHENTICATE
    correlation_id: int
    code: int
    data: bytes | None = None

    def encode(self) -> bytes:
        body = w.U16.pack(self.code)
        if self.data is not None:
            body += w.bytes_(self.data)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> SaslAuthenticateResponse:
        cid, code = r.u32(), r.u16()
        return cls(cid, code, r.bytes_() if r.pos < len(r.data) else None)


@dataclass(frozen=True, slots=True)
class Tune(Command):
    """Sent by the server, answered by the client with the same key (no response bit)."""

    KEY = Key.TUNE
    frame_max: int
    heartbeat: int

    def encode(self) -> bytes:
        return _frame(self.KEY, 1, w.U32.pack(self.frame_max) + w.U32.pack(self.heartbeat))

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Tune:
        return cls(r.u32(), r.u32())


@dataclass(frozen=True, slots=True)
class Open(Command):
    KEY = Key.OPEN
    correlation_id: int
    virtual_host: str

    def encode(self) -> bytes:
        return _request(self.KEY, 1, self.correlation_id, w.string(self.virtual_host))

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Open:
        return cls(r.u32(), r.str_())


@dataclass(frozen=True, slots=True)
class OpenResponse(Command):
    """``properties`` only when ``code`` is OK (RabbitMQ sends none with an error)."""

    KEY = RESPONSE | Key.OPEN
    correlation_id: int
    code: int
    properties: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        body = w.U16.pack(self.code)
        if self.code == Code.OK:
            body += w.properties(self.properties)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> OpenResponse:
        cid, code = r.u32(), r.u16()
        return cls(cid, code, r.properties() if r.pos < len(r.data) else {})


@dataclass(frozen=True, slots=True)
class Close(Command):
    KEY = Key.CLOSE
    correlation_id: int
    code: int
    reason: str

    def encode(self) -> bytes:
        body = w.U16.pack(self.code) + w.string(self.reason)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Close:
        return cls(r.u32(), r.u16(), r.str_())


@dataclass(frozen=True, slots=True)
class Heartbeat(Command):
    KEY = Key.HEARTBEAT

    def encode(self) -> bytes:
        return _frame(self.KEY, 1, b"")

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Heartbeat:
        return cls()


@dataclass(frozen=True, slots=True)
class Response(Command):
    """A response that is only a code: declare/delete publisher, subscribe, unsubscribe,
    create, delete, close, create/delete super stream (``key`` says which)."""

    key: int
    correlation_id: int
    code: int

    def encode(self) -> bytes:
        return _request(RESPONSE | self.key, 1, self.correlation_id, w.U16.pack(self.code))

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Response:
        raise AssertionError("decoded through _decode_response")


# -- publishing ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeclarePublisher(Command):
    KEY = Key.DECLARE_PUBLISHER
    correlation_id: int
    publisher_id: int
    reference: str | None
    stream: str

    def encode(self) -> bytes:
        body = w.U8.pack(self.publisher_id) + w.string(self.reference) + w.string(self.stream)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> DeclarePublisher:
        return cls(r.u32(), r.u8(), r.string(), r.str_())


class PublishedMessage(NamedTuple):
    """One message of a publish: a record, or a sub-batch of records (``sub_batch`` =
    (compression, record count, uncompressed length) and ``data`` the batch's bytes)."""

    publishing_id: int
    data: bytes
    filter_value: str | None = None
    sub_batch: tuple[int, int, int] | None = None

    @property
    def records(self) -> int:
        return 1 if self.sub_batch is None else self.sub_batch[1]

    def entry(self) -> bytes:
        """The message as an osiris chunk entry (what a stream stores)."""
        if self.sub_batch is None:
            return w.U32.pack(len(self.data)) + self.data
        compression, count, uncompressed = self.sub_batch
        head = _SUB_BATCH.pack(0x80 | (compression & 7) << 4, count, uncompressed, len(self.data))
        return head + self.data


class Publish(Command):
    """Version 2 when any message has a filter value (``version`` says which was read).

    Built by a client from ``messages``. Decoded (the broker's side, per message the hot
    path) it keeps the frame's messages in the form a stream stores them, and builds
    ``messages`` only when asked: ``ids`` the publishing ids, ``entries`` each message as an
    osiris chunk entry (``PublishedMessage.entry()``: for a record, the size prefix and the
    data sliced from the frame at once), ``counts`` each entry's record count (None when
    every entry is one record, no sub-batch), ``filters`` the v2 filter values (None in v1).
    Equality and ``repr`` are those of (publisher_id, messages, version)."""

    __slots__ = ("_messages", "counts", "entries", "filters", "ids", "publisher_id", "version")
    KEY = Key.PUBLISH
    publisher_id: int
    version: int
    ids: list[int]
    entries: list[bytes]
    counts: list[int] | None
    filters: list[str | None] | None
    _messages: list[PublishedMessage] | None

    def __init__(
        self,
        publisher_id: int,
        messages: list[PublishedMessage] | None = None,
        version: int = 1,
        *,
        ids: list[int] | None = None,
        entries: list[bytes] | None = None,
        counts: list[int] | None = None,
        filters: list[str | None] | None = None,
    ) -> None:
        if messages is not None:
            ids = [m.publishing_id for m in messages]
            entries = [m.entry() for m in messages]
            subs = any(m.sub_batch is not None for m in messages)
            counts = [m.records for m in messages] if subs else None
            filters = [m.filter_value for m in messages] if version == 2 else None
        # Frozen like every command (the base's __setattr__ refuses).
        setattr_ = object.__setattr__
        setattr_(self, "publisher_id", publisher_id)
        setattr_(self, "version", version)
        setattr_(self, "_messages", messages)
        setattr_(self, "ids", ids or [])
        setattr_(self, "entries", entries or [])
        setattr_(self, "counts", counts)
        setattr_(self, "filters", filters)

    @property
    def messages(self) -> list[PublishedMessage]:
        if self._messages is None:
            filters = self.filters
            built = [
                _published(pid, entry, None if filters is None else filters[i])
                for i, (pid, entry) in enumerate(zip(self.ids, self.entries, strict=True))
            ]
            object.__setattr__(self, "_messages", built)
            return built
        return self._messages

    @property
    def records(self) -> int:
        """Records in the frame (a sub-batch counts its records)."""
        return len(self.entries) if self.counts is None else sum(self.counts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Publish):
            return NotImplemented
        return (self.publisher_id, self.version, self.messages) == (
            other.publisher_id,
            other.version,
            other.messages,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Publish(publisher_id={self.publisher_id}, messages={self.messages!r}, "
            f"version={self.version})"
        )

    def encode(self) -> bytes:
        v2 = self.version == 2
        filters = self.filters
        parts = []
        for i, (pid, entry) in enumerate(zip(self.ids, self.entries, strict=True)):
            head = w.U64.pack(pid)
            if v2:
                head += w.string(None if filters is None else filters[i])
            parts.append(head + entry)
        body = b"".join(parts)
        return (
            _PUB_HEAD.pack(len(body) + 9, self.KEY, self.version, self.publisher_id, len(parts))
            + body
        )

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Publish:
        if version not in (1, 2):
            raise UnknownFrame(f"publish version {version}")
        publisher_id = r.u8()
        count = r.count(12)
        # The messages as bytes once: an entry is then one slice (a record's size prefix
        # and data are contiguous in the frame, its publishing id just before them).
        data = bytes(r.data[r.pos :])
        r.pos = len(r.data)
        ids: list[int] = []
        entries: list[bytes] = []
        pos = 0
        if version == 1:
            pos = simple_entries(data, count, ids, entries)
            count -= len(ids)
        counts: list[int] | None = None
        filters: list[str | None] | None = [] if version == 2 else None
        sub = w.Reader(data)
        unpack_id = w.U64.unpack_from
        unpack_size = w.U32.unpack_from
        try:
            for _ in range(count):
                ids.append(unpack_id(data, pos)[0])
                pos += 8
                if filters is not None:
                    sub.pos = pos
                    filters.append(sub.string())
                    pos = sub.pos
                start = pos
                flags = data[pos]
                if flags & 0x80:
                    _kind, records, _uncompressed, size = _SUB_BATCH.unpack_from(data, pos)
                    pos += _SUB_BATCH.size
                    if counts is None:
                        counts = [1] * len(entries)
                    counts.append(records)
                else:
                    size = unpack_size(data, pos)[0]
                    pos += 4
                    if counts is not None:
                        counts.append(1)
                pos += size
                if pos > len(data):
                    raise UnknownFrame("published message overruns the frame")
                entry = data[start:pos]
                if flags & 0x8F > 0x80:  # reserved bits set: stored without them
                    entry = bytes([flags & 0xF0]) + entry[1:]
                entries.append(entry)
        except (struct.error, IndexError) as exc:
            raise UnknownFrame("publish frame cut short") from exc
        if pos != len(data):
            raise UnknownFrame(f"{len(data) - pos} bytes left over in the frame")
        return cls(publisher_id, None, version, ids=ids, entries=entries, counts=counts,
                   filters=filters)  # fmt: skip


def _published(pid: int, entry: bytes, filter_value: str | None) -> PublishedMessage:
    """A message of a decoded publish frame, from its stored entry."""
    if not entry[0] & 0x80:
        return PublishedMessage(pid, entry[4:], filter_value)
    kind, records, uncompressed, _size = _SUB_BATCH.unpack_from(entry, 0)
    sub = ((kind >> 4) & 7, records, uncompressed)
    return PublishedMessage(pid, entry[_SUB_BATCH.size :], filter_value, sub)


@dataclass(frozen=True, slots=True)
class PublishConfirm(Command):
    KEY = Key.PUBLISH_CONFIRM
    publisher_id: int
    publishing_ids: list[int]

    def encode(self) -> bytes:
        ids = self.publishing_ids
        body = struct.pack(f">Bi{len(ids)}Q", self.publisher_id, len(ids), *ids)
        return _frame(self.KEY, 1, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> PublishConfirm:
        publisher_id = r.u8()
        n = r.count(8)
        ids = list(struct.unpack_from(f">{n}Q", r.data, r.pos))
        r.pos += 8 * n
        return cls(publisher_id, ids)


@dataclass(frozen=True, slots=True)
class PublishError(Command):
    KEY = Key.PUBLISH_ERROR
    publisher_id: int
    errors: list[tuple[int, int]]  # (publishing id, code)

    def encode(self) -> bytes:
        body = w.U8.pack(self.publisher_id) + w.I32.pack(len(self.errors))
        body += b"".join(w.U64.pack(i) + w.U16.pack(c) for i, c in self.errors)
        return _frame(self.KEY, 1, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> PublishError:
        publisher_id = r.u8()
        return cls(publisher_id, [(r.u64(), r.u16()) for _ in range(r.count(10))])


@dataclass(frozen=True, slots=True)
class QueryPublisherSequence(Command):
    KEY = Key.QUERY_PUBLISHER_SEQUENCE
    correlation_id: int
    reference: str
    stream: str

    def encode(self) -> bytes:
        body = w.string(self.reference) + w.string(self.stream)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> QueryPublisherSequence:
        return cls(r.u32(), r.str_(), r.str_())


@dataclass(frozen=True, slots=True)
class QueryPublisherSequenceResponse(Command):
    KEY = RESPONSE | Key.QUERY_PUBLISHER_SEQUENCE
    correlation_id: int
    code: int
    sequence: int

    def encode(self) -> bytes:
        body = w.U16.pack(self.code) + w.U64.pack(self.sequence)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> QueryPublisherSequenceResponse:
        return cls(r.u32(), r.u16(), r.u64())


@dataclass(frozen=True, slots=True)
class DeletePublisher(Command):
    KEY = Key.DELETE_PUBLISHER
    correlation_id: int
    publisher_id: int

    def encode(self) -> bytes:
        return _request(self.KEY, 1, self.correlation_id, w.U8.pack(self.publisher_id))

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> DeletePublisher:
        return cls(r.u32(), r.u8())


# -- consuming ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subscribe(Command):
    """``offset`` is an offset for OffsetType.OFFSET, ms since the epoch for TIMESTAMP, and
    absent from the wire for the other types."""

    KEY = Key.SUBSCRIBE
    correlation_id: int
    subscription_id: int
    stream: str
    offset_type: int
    offset: int
    credit: int
    properties: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        body = w.U8.pack(self.subscription_id) + w.string(self.stream)
        body += w.U16.pack(self.offset_type) + _offset_value(self.offset_type, self.offset)
        body += w.U16.pack(self.credit) + w.properties(self.properties)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Subscribe:
        cid, sid, stream, otype = r.u32(), r.u8(), r.str_(), r.u16()
        offset = _read_offset(r, otype)
        credit = r.u16()
        props = r.properties() if r.pos < len(r.data) else {}
        return cls(cid, sid, stream, otype, offset, credit, props)


def _offset_value(offset_type: int, offset: int) -> bytes:
    if offset_type == 4:
        return w.U64.pack(offset)
    if offset_type == 5:
        return w.I64.pack(offset)
    return b""


def _read_offset(r: w.Reader, offset_type: int) -> int:
    if offset_type == 4:
        return r.u64()
    if offset_type == 5:
        return r.i64()
    return 0


@dataclass(frozen=True, slots=True)
class Deliver(Command):
    """A whole osiris chunk (``chunk`` as stored); version 2 adds ``committed_chunk_id``."""

    KEY = Key.DELIVER
    subscription_id: int
    chunk: bytes
    committed_chunk_id: int | None = None

    def encode(self) -> bytes:
        return deliver_prefix(self.subscription_id, len(self.chunk), self.committed_chunk_id) + (
            self.chunk
        )

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Deliver:
        sid = r.u8()
        committed = r.u64() if version >= 2 else None
        return cls(sid, r.rest(), committed)


def deliver_prefix(subscription_id: int, chunk_size: int, committed: int | None = None) -> bytes:
    """The bytes of a deliver frame before its chunk: the chunk can then be written from
    where it is stored (``writelines`` / ``sendfile``) without being copied into a frame."""
    if committed is None:
        return _DELIVER1.pack(chunk_size + 5, Key.DELIVER, 1, subscription_id)
    return _DELIVER2.pack(chunk_size + 13, Key.DELIVER, 2, subscription_id, committed)


@dataclass(frozen=True, slots=True)
class Credit(Command):
    KEY = Key.CREDIT
    subscription_id: int
    credit: int

    def encode(self) -> bytes:
        return _CREDIT.pack(7, self.KEY, 1, self.subscription_id, self.credit)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Credit:
        return cls(r.u8(), r.u16())


@dataclass(frozen=True, slots=True)
class CreditResponse(Command):
    """Sent only when a credit fails (an unknown subscription); no correlation id."""

    KEY = RESPONSE | Key.CREDIT
    code: int
    subscription_id: int

    def encode(self) -> bytes:
        return _frame(self.KEY, 1, w.U16.pack(self.code) + w.U8.pack(self.subscription_id))

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> CreditResponse:
        return cls(r.u16(), r.u8())


@dataclass(frozen=True, slots=True)
class StoreOffset(Command):
    KEY = Key.STORE_OFFSET
    reference: str
    stream: str
    offset: int

    def encode(self) -> bytes:
        body = w.string(self.reference) + w.string(self.stream) + w.U64.pack(self.offset)
        return _frame(self.KEY, 1, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> StoreOffset:
        return cls(r.str_(), r.str_(), r.u64())


@dataclass(frozen=True, slots=True)
class QueryOffset(Command):
    KEY = Key.QUERY_OFFSET
    correlation_id: int
    reference: str
    stream: str

    def encode(self) -> bytes:
        body = w.string(self.reference) + w.string(self.stream)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> QueryOffset:
        return cls(r.u32(), r.str_(), r.str_())


@dataclass(frozen=True, slots=True)
class QueryOffsetResponse(Command):
    KEY = RESPONSE | Key.QUERY_OFFSET
    correlation_id: int
    code: int
    offset: int

    def encode(self) -> bytes:
        body = w.U16.pack(self.code) + w.U64.pack(self.offset)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> QueryOffsetResponse:
        return cls(r.u32(), r.u16(), r.u64())


@dataclass(frozen=True, slots=True)
class Unsubscribe(Command):
    KEY = Key.UNSUBSCRIBE
    correlation_id: int
    subscription_id: int

    def encode(self) -> bytes:
        return _request(self.KEY, 1, self.correlation_id, w.U8.pack(self.subscription_id))

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Unsubscribe:
        return cls(r.u32(), r.u8())


@dataclass(frozen=True, slots=True)
class ConsumerUpdate(Command):
    """Server to client (single active consumer): the subscription is now (in)active."""

    KEY = Key.CONSUMER_UPDATE
    correlation_id: int
    subscription_id: int
    active: bool

    def encode(self) -> bytes:
        body = w.U8.pack(self.subscription_id) + w.U8.pack(1 if self.active else 0)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> ConsumerUpdate:
        return cls(r.u32(), r.u8(), bool(r.u8()))


@dataclass(frozen=True, slots=True)
class ConsumerUpdateResponse(Command):
    """Client to server: where the newly active consumer starts."""

    KEY = RESPONSE | Key.CONSUMER_UPDATE
    correlation_id: int
    code: int
    offset_type: int
    offset: int

    def encode(self) -> bytes:
        # Here the offset is always on the wire (u64), whatever the type.
        body = w.U16.pack(self.code) + w.U16.pack(self.offset_type)
        body += (w.I64 if self.offset_type == 5 else w.U64).pack(self.offset)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> ConsumerUpdateResponse:
        cid, code, otype = r.u32(), r.u16(), r.u16()
        offset = r.i64() if otype == 5 else r.u64()
        return cls(cid, code, otype, offset)


# -- streams -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Create(Command):
    KEY = Key.CREATE
    correlation_id: int
    stream: str
    arguments: dict[str, str]

    def encode(self) -> bytes:
        body = w.string(self.stream) + w.properties(self.arguments)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Create:
        return cls(r.u32(), r.str_(), r.properties())


@dataclass(frozen=True, slots=True)
class Delete(Command):
    KEY = Key.DELETE
    correlation_id: int
    stream: str

    def encode(self) -> bytes:
        return _request(self.KEY, 1, self.correlation_id, w.string(self.stream))

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Delete:
        return cls(r.u32(), r.str_())


@dataclass(frozen=True, slots=True)
class Metadata(Command):
    KEY = Key.METADATA
    correlation_id: int
    streams: list[str]

    def encode(self) -> bytes:
        return _request(self.KEY, 1, self.correlation_id, w.strings(self.streams))

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Metadata:
        return cls(r.u32(), r.strings())


class Broker(NamedTuple):
    reference: int
    host: str
    port: int


class StreamMetadata(NamedTuple):
    stream: str
    code: int
    leader: int
    replicas: list[int]


@dataclass(frozen=True, slots=True)
class MetadataResponse(Command):
    KEY = RESPONSE | Key.METADATA
    correlation_id: int
    brokers: list[Broker]
    streams: list[StreamMetadata]

    def encode(self) -> bytes:
        parts = [w.I32.pack(len(self.brokers))]
        parts.extend(
            w.U16.pack(b.reference) + w.string(b.host) + w.U32.pack(b.port) for b in self.brokers
        )
        parts.append(w.I32.pack(len(self.streams)))
        for s in self.streams:
            parts.append(
                w.string(s.stream) + struct.pack(">HHi", s.code, s.leader, len(s.replicas))
            )
            parts.append(b"".join(w.U16.pack(x) for x in s.replicas))
        return _request(self.KEY, 1, self.correlation_id, b"".join(parts))

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> MetadataResponse:
        cid = r.u32()
        brokers = [Broker(r.u16(), r.str_(), r.u32()) for _ in range(r.count(8))]
        streams = []
        for _ in range(r.count(10)):
            name, code, leader = r.str_(), r.u16(), r.u16()
            streams.append(StreamMetadata(name, code, leader, [r.u16() for _ in range(r.count(2))]))
        return cls(cid, brokers, streams)


@dataclass(frozen=True, slots=True)
class MetadataUpdate(Command):
    KEY = Key.METADATA_UPDATE
    code: int
    stream: str

    def encode(self) -> bytes:
        return _frame(self.KEY, 1, w.U16.pack(self.code) + w.string(self.stream))

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> MetadataUpdate:
        return cls(r.u16(), r.str_())


@dataclass(frozen=True, slots=True)
class StreamStats(Command):
    KEY = Key.STREAM_STATS
    correlation_id: int
    stream: str

    def encode(self) -> bytes:
        return _request(self.KEY, 1, self.correlation_id, w.string(self.stream))

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> StreamStats:
        return cls(r.u32(), r.str_())


@dataclass(frozen=True, slots=True)
class StreamStatsResponse(Command):
    KEY = RESPONSE | Key.STREAM_STATS
    correlation_id: int
    code: int
    stats: dict[str, int]

    def encode(self) -> bytes:
        body = w.U16.pack(self.code) + w.I32.pack(len(self.stats))
        body += b"".join(w.string(k) + w.I64.pack(v) for k, v in self.stats.items())
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> StreamStatsResponse:
        cid, code = r.u32(), r.u16()
        return cls(cid, code, {r.str_(): r.i64() for _ in range(r.count(10))})


@dataclass(frozen=True, slots=True)
class Route(Command):
    KEY = Key.ROUTE
    correlation_id: int
    routing_key: str
    super_stream: str

    def encode(self) -> bytes:
        body = w.string(self.routing_key) + w.string(self.super_stream)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Route:
        return cls(r.u32(), r.str_(), r.str_())


@dataclass(frozen=True, slots=True)
class Partitions(Command):
    KEY = Key.PARTITIONS
    correlation_id: int
    super_stream: str

    def encode(self) -> bytes:
        return _request(self.KEY, 1, self.correlation_id, w.string(self.super_stream))

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> Partitions:
        return cls(r.u32(), r.str_())


@dataclass(frozen=True, slots=True)
class StreamsResponse(Command):
    """The answer to route or partitions (``key`` says which): a code and stream names."""

    key: int
    correlation_id: int
    code: int
    streams: list[str]

    def encode(self) -> bytes:
        body = w.U16.pack(self.code) + w.strings(self.streams)
        return _request(RESPONSE | self.key, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> StreamsResponse:
        raise AssertionError("decoded through _decode_response")


@dataclass(frozen=True, slots=True)
class CreateSuperStream(Command):
    KEY = Key.CREATE_SUPER_STREAM
    correlation_id: int
    name: str
    partitions: list[str]
    binding_keys: list[str]
    arguments: dict[str, str]

    def encode(self) -> bytes:
        body = w.string(self.name) + w.strings(self.partitions) + w.strings(self.binding_keys)
        body += w.properties(self.arguments)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> CreateSuperStream:
        return cls(r.u32(), r.str_(), r.strings(), r.strings(), r.properties())


@dataclass(frozen=True, slots=True)
class DeleteSuperStream(Command):
    KEY = Key.DELETE_SUPER_STREAM
    correlation_id: int
    name: str

    def encode(self) -> bytes:
        return _request(self.KEY, 1, self.correlation_id, w.string(self.name))

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> DeleteSuperStream:
        return cls(r.u32(), r.str_())


class CommandVersion(NamedTuple):
    key: int
    min_version: int
    max_version: int


@dataclass(frozen=True, slots=True)
class ExchangeCommandVersions(Command):
    KEY = Key.EXCHANGE_COMMAND_VERSIONS
    correlation_id: int
    commands: list[CommandVersion]

    def encode(self) -> bytes:
        body = w.I32.pack(len(self.commands))
        body += b"".join(struct.pack(">HHH", *c) for c in self.commands)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> ExchangeCommandVersions:
        cid = r.u32()
        return cls(cid, [CommandVersion(r.u16(), r.u16(), r.u16()) for _ in range(r.count(6))])


@dataclass(frozen=True, slots=True)
class ExchangeCommandVersionsResponse(Command):
    KEY = RESPONSE | Key.EXCHANGE_COMMAND_VERSIONS
    correlation_id: int
    code: int
    commands: list[CommandVersion]

    def encode(self) -> bytes:
        body = w.U16.pack(self.code) + w.I32.pack(len(self.commands))
        body += b"".join(struct.pack(">HHH", *c) for c in self.commands)
        return _request(self.KEY, 1, self.correlation_id, body)

    @classmethod
    def decode(cls, version: int, r: w.Reader) -> ExchangeCommandVersionsResponse:
        cid, code = r.u32(), r.u16()
        return cls(
            cid, code, [CommandVersion(r.u16(), r.u16(), r.u16()) for _ in range(r.count(6))]
        )


# -- the tables ----------------------------------------------------------------------------

# Responses that are only a code.
CODE_ONLY_RESPONSES = frozenset(
    {
        Key.DECLARE_PUBLISHER,
        Key.DELETE_PUBLISHER,
        Key.SUBSCRIBE,
        Key.UNSUBSCRIBE,
        Key.CREATE,
        Key.DELETE,
        Key.CLOSE,
        Key.CREATE_SUPER_STREAM,
        Key.DELETE_SUPER_STREAM,
    }
)
STREAMS_RESPONSES = frozenset({Key.ROUTE, Key.PARTITIONS})

COMMANDS: dict[int, type[Command]] = {
    cls.KEY: cls
    for cls in (
        PeerProperties,
        PeerPropertiesResponse,
        SaslHandshake,
        SaslHandshakeResponse,
        SaslAuthenticate,
        SaslAuthenticateResponse,
        Tune,
        Open,
        OpenResponse,
        Close,
        Heartbeat,
        DeclarePublisher,
        Publish,
        PublishConfirm,
        PublishError,
        QueryPublisherSequence,
        QueryPublisherSequenceResponse,
        DeletePublisher,
        Subscribe,
        Deliver,
        Credit,
        CreditResponse,
        StoreOffset,
        QueryOffset,
        QueryOffsetResponse,
        Unsubscribe,
        ConsumerUpdate,
        ConsumerUpdateResponse,
        Create,
        Delete,
        Metadata,
        MetadataResponse,
        MetadataUpdate,
        StreamStats,
        StreamStatsResponse,
        Route,
        Partitions,
        CreateSuperStream,
        DeleteSuperStream,
        ExchangeCommandVersions,
        ExchangeCommandVersionsResponse,
    )
}

# The versions this codec reads and writes, per request key (exchange command versions).
VERSIONS: dict[int, tuple[int, int]] = {
    int(k): ((1, 2) if k in (Key.PUBLISH, Key.DELIVER) else (1, 1)) for k in Key
}


def decode_body(key: int, version: int, body: bytes | memoryview, at: int = 4) -> Command:
    """The command of one frame body (``body[at:]`` follows the key and version)."""
    r = w.Reader(body, at)
    base = key & ~RESPONSE
    if key & RESPONSE and base in CODE_ONLY_RESPONSES:
        command: Command = Response(base, r.u32(), r.u16())
    elif key & RESPONSE and base in STREAMS_RESPONSES:
        cid, code = r.u32(), r.u16()
        command = StreamsResponse(base, cid, code, r.strings())
    else:
        cls = COMMANDS.get(key)
        if cls is None:
            raise UnknownFrame(f"unknown command key 0x{key:04x}")
        low, high = VERSIONS.get(base, (1, 1))
        if not low <= version <= high:
            raise UnknownFrame(f"unsupported version {version} of command 0x{key:04x}")
        command = cls.decode(version, r)
    r.end()
    return command
