"""Ready messages of a deep queue live in pages on disk, not as objects in memory.

A plain queue keeps at most ``Queue.resident_max`` ready messages as objects (its head, the
ones delivered next; more of large bodies while the broker is under its paging level:
``ClassicQueue._pages``). Beyond that, arriving messages collect in an open page; a full page
(``page_messages`` messages or ``page_bytes`` of bodies) is encoded into one blob and handed
to the ``Pager`` the server injected, which writes it to a scratch file. What stays in memory
per paged message is its store id in the page's ``sids`` array (8 bytes, persistent messages
only) and a share of one small ``Page`` record per page. When the head falls below
``Queue.resident_low``, the oldest page is read back whole.

Order is kept by construction: once a queue pages, every arriving message goes to the tail
(never to the resident head) until the tail is empty again, and requeued messages, which
always came from the head, go back into the head. Persistent messages are also in the store's
segments; the page is a second, scratch copy that is dropped at restart, so paging needs no
fsync and transient messages in a deep queue are gone after a restart, as they must be.

This module is pure (no IO): ``Pager`` is the Protocol the store side implements, and the
codec of a page is plain bytes manipulation.
"""

from __future__ import annotations

import struct
from array import array
from collections import deque
from typing import TYPE_CHECKING, Protocol

from leveret.model.entry import QueuedMessage
from leveret.model.message import Message

if TYPE_CHECKING:
    from leveret.model.message import PropertiesDecoder, PropertiesEncoder


class Pager(Protocol):
    """Scratch storage for pages; a handle is whatever ``write`` returns."""

    def write(self, data: bytes) -> object | None:
        """Store ``data``; None when it could not be written (the page stays in memory)."""
        ...

    def read(self, handle: object) -> bytes: ...

    def discard(self, handle: object) -> None: ...


class PageSource(Protocol):
    """Pages whose messages are somewhere else already (the store's segments, after a
    restart): ``load`` builds the entries, numbered from ``first_seq``."""

    def load(self, handle: object, first_seq: int) -> list[QueuedMessage]: ...

    def discard(self, handle: object) -> None: ...


# seq, sid, store id, properties length, body length, hints, redelivered, exchange length,
# routing key length; then exchange, routing key, properties and body.
_ENTRY = struct.Struct("<QQQIIBBBB")


def encode_page(entries: list[QueuedMessage]) -> bytes:
    # Once per paged message (a queue its publisher outruns pages every message past its
    # head: scenario b). The list's own append, not a bound method's generic call per
    # piece; a run of messages to one exchange and routing key encodes the names once.
    pack = _ENTRY.pack
    parts: list[bytes] = []
    last_exchange = last_routing_key = ""
    exchange = routing_key = b""
    for entry in entries:
        message = entry.message
        if message.exchange != last_exchange:
            last_exchange = message.exchange
            exchange = last_exchange.encode()
        if message.routing_key != last_routing_key:
            last_routing_key = message.routing_key
            routing_key = last_routing_key.encode()
        props = message.raw_properties
        parts.append(
            pack(
                entry.seq,
                entry.sid,
                message.store_id,
                len(props),
                len(message.body),
                message.hints,
                entry.redelivered,
                len(exchange),
                len(routing_key),
            )
        )
        parts.append(exchange)
        parts.append(routing_key)
        parts.append(props)
        parts.append(message.body)
    return b"".join(parts)


def decode_page(
    data: bytes,
    entry_cls: type[QueuedMessage],
    decode: PropertiesDecoder,
    encode: PropertiesEncoder | None,
    format: int = 0,  # Message.format of every message of the page
) -> list[QueuedMessage]:
    # Once per paged message. The fields are typed (a struct's are Any: every slice and sum
    # with them was a generic call in the compiled build), the entry is made by a native
    # call when it is a plain one, and a run of messages to one exchange and routing key
    # shares their strings (one decode, one object, where each message had its own).
    unpack = _ENTRY.unpack_from
    size: int = _ENTRY.size
    plain = entry_cls is QueuedMessage
    entries: list[QueuedMessage] = []
    pos = 0
    end = len(data)
    seq: int
    sid: int
    store_id: int
    plen: int
    blen: int
    hints: int
    redelivered: int
    exlen: int
    rklen: int
    exchange = routing_key = ""
    exchange_raw = routing_key_raw = b""
    while pos < end:
        seq, sid, store_id, plen, blen, hints, redelivered, exlen, rklen = unpack(data, pos)
        pos += size
        raw = data[pos : pos + exlen]
        if raw != exchange_raw:
            exchange_raw = raw
            exchange = raw.decode()
        pos += exlen
        raw = data[pos : pos + rklen]
        if raw != routing_key_raw:
            routing_key_raw = raw
            routing_key = raw.decode()
        pos += rklen
        props = data[pos : pos + plen]
        pos += plen
        body = data[pos : pos + blen]
        pos += blen
        message = Message(exchange, routing_key, props, body, decode, encode, hints, format)
        message.store_id = store_id
        if plain:
            entry = QueuedMessage(seq, message, bool(redelivered))
        else:
            entry = entry_cls(seq, message, bool(redelivered))
        entry.sid = sid
        entries.append(entry)
    return entries


class Page:
    """One page: what is needed to read it back, count it and purge it. A page the queue
    wrote is bytes on the pager (``decode``/``encode`` rebuild its messages); a page from
    a ``PageSource`` is loaded by that source."""

    __slots__ = (
        "body_bytes",
        "count",
        "decode",
        "encode",
        "first_seq",
        "format",
        "handle",
        "sids",
        "source",
    )

    def __init__(
        self,
        handle: object,
        count: int,
        body_bytes: int,
        sids: array[int],
        decode: PropertiesDecoder | None,
        encode: PropertiesEncoder | None,
        source: PageSource | None = None,
        first_seq: int = 0,
        format: int = 0,  # Message.format of its messages
    ) -> None:
        self.handle = handle
        self.count = count
        self.body_bytes = body_bytes
        self.sids = sids
        self.decode = decode
        self.encode = encode
        self.source = source
        self.first_seq = first_seq
        self.format = format

    def load(self, pager: Pager | None, entry_cls: type[QueuedMessage]) -> list[QueuedMessage]:
        """The page's entries (the page stays where it is)."""
        if self.source is not None:
            return self.source.load(self.handle, self.first_seq)
        assert pager is not None
        assert self.decode is not None
        return decode_page(
            pager.read(self.handle), entry_cls, self.decode, self.encode, self.format
        )

    def discard(self, pager: Pager | None) -> None:
        if self.source is not None:
            self.source.discard(self.handle)
        elif pager is not None:
            pager.discard(self.handle)


class PagedTail:
    """The part of a queue behind its resident head: written pages, then the open page."""

    __slots__ = ("count", "hold", "open", "open_bytes", "pager", "pages")

    def __init__(self, pager: Pager | None) -> None:
        self.pager = pager
        self.pages: deque[Page] = deque()
        self.open: list[QueuedMessage] = []
        self.open_bytes = 0
        self.count = 0  # messages in pages and in the open page
        self.hold = 0  # after a refused write: the open page's length before the next try

    def flush(self) -> Page | None:
        """Write the open page out; None (and it stays open) when the pager refused it."""
        entries = self.open
        first = entries[0].message
        decode, encode = first._decode, first._encode
        # A page decodes with one pair of property functions: a page holding messages of
        # two wire formats (two front ends) is not written; it stays open, in memory.
        if self.pager is None or any(e.message._decode is not decode for e in entries):
            return None
        handle = self.pager.write(encode_page(entries))
        if handle is None:
            return None
        sids = array("Q", [e.sid for e in entries if e.sid])
        page = Page(
            handle,
            len(entries),
            self.open_bytes,
            sids,
            decode,
            encode,
            first_seq=entries[0].seq,
            format=first.format,
        )
        self.pages.append(page)
        self.open = []
        self.open_bytes = 0
        return page

    def take_page(self, entry_cls: type[QueuedMessage]) -> list[QueuedMessage]:
        """The oldest paged messages, read back (the open page once no page is left)."""
        if self.pages:
            page = self.pages[0]
            # Loaded before it leaves the deque: a read that fails (an IO error) raises
            # with the page still in place, so nothing is lost or miscounted.
            entries = page.load(self.pager, entry_cls)
            self.pages.popleft()
            page.discard(self.pager)
        else:
            entries = self.open
            self.open = []
            self.open_bytes = 0
        self.count -= len(entries)
        return entries

    def discard_all(self) -> None:
        for page in self.pages:
            page.discard(self.pager)
        self.pages.clear()
        self.open = []
        self.open_bytes = 0
        self.count = 0
