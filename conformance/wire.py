"""A blocking AMQP 0-9-1 client for the side-by-side scenarios, on the project's own codec.

Owned by the conformance scenarios (``conformance/scenarios.py``, ``tests/conformance``).
Frames are cut by ``leveret.protocol.amqp091.framing.FrameDecoder`` and methods decoded and
encoded by the generated classes, in the client role; everything a scenario may want to get
wrong on purpose (frame sizes, channel numbers, frame order, field-table type letters) is
also reachable as raw bytes. What the broker answers is turned into plain data
(:func:`summary`) so that RabbitMQ's answers can be recorded and Leveret's compared.
"""

from __future__ import annotations

import dataclasses
import decimal
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m

if TYPE_CHECKING:
    from leveret.protocol.amqp091.fieldtable import FieldTable

Json = Any
"""A JSON-able value (what outcomes are made of)."""

DEFAULT_TIMEOUT = 3.0
QUIET = 0.4
"""Seconds of silence taken to mean "the broker sends nothing" (both brokers answer well
within it on this machine; a scenario that waits for silence costs this much)."""

FIRST_WAIT = 1.0
"""Seconds :meth:`Wire.drain` waits for its first event."""

CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
}


# -- events ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Method:
    channel: int
    method: m.Method


@dataclass(frozen=True)
class Content:
    channel: int
    method: m.Method
    properties: bytes
    body: bytes


@dataclass(frozen=True)
class Header:
    """The broker answered with a protocol header (it wants another version)."""

    data: bytes


@dataclass(frozen=True)
class Heartbeat:
    channel: int


@dataclass(frozen=True)
class Closed:
    """The TCP connection ended."""


@dataclass(frozen=True)
class Silence:
    """Nothing arrived within the wait."""


@dataclass(frozen=True)
class Odd:
    """A frame this client cannot make sense of (kept as data, never raised)."""

    what: str
    payload_hex: str = ""


Event = Method | Content | Header | Heartbeat | Closed | Silence | Odd


@dataclass
class _Partial:
    method: m.Method
    size: int = -1
    properties: bytes = b""
    body: list[bytes] = field(default_factory=list)
    got: int = 0


class Wire:
    """One TCP connection to a broker, spoken to frame by frame."""

    def __init__(self, host: str, port: int, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.frame_max = 131072
        self.tune: m.ConnectionTune | None = None
        self.start: m.ConnectionStart | None = None
        self._decoder = framing.FrameDecoder(frame_max=0)
        self._events: list[Event] = []
        self._partial: dict[int, _Partial] = {}
        self._first = True
        self._eof = False
        self.buffered = b""

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- sending -------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            self._eof = True

    def send(self, channel: int, method: m.Method) -> None:
        self.send_raw(framing.encode_method_frame(channel, method.encode()))

    def frame(self, frame_type: int, channel: int, payload: bytes) -> None:
        self.send_raw(framing.encode_frame(frame_type, channel, payload))

    def publish(
        self,
        channel: int,
        exchange: str = "",
        routing_key: str = "",
        body: bytes = b"",
        properties: bytes = b"\x00\x00",
        *,
        mandatory: bool = False,
        immediate: bool = False,
        frame_max: int | None = None,
    ) -> None:
        """basic.publish with its content, body split as ``frame_max`` (negotiated) allows."""
        method = m.BasicPublish(
            exchange=exchange, routing_key=routing_key, mandatory=mandatory, immediate=immediate
        )
        frames = framing.encode_content_frames(
            channel, 60, body, properties, self.frame_max if frame_max is None else frame_max
        )
        self.send_raw(framing.encode_method_frame(channel, method.encode()) + b"".join(frames))

    # -- receiving -----------------------------------------------------------------------

    def _read(self, timeout: float) -> bool:
        if self._eof:
            return False
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return False
        except OSError:
            self._eof = True
            return False
        if not data:
            self._eof = True
            return False
        if self._first:
            self._first = False
            if data.startswith(b"AMQP"):
                self._events.append(Header(data[:8]))
                data = data[8:]
        self._feed(data)
        return True

    def _feed(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except Exception as exc:
            self._events.append(Odd(f"undecodable frames: {exc}"))
            self._eof = True
            return
        for frame_type, channel, payload in frames:
            self._frame(frame_type, channel, bytes(payload))

    def _frame(self, frame_type: int, channel: int, payload: bytes) -> None:
        if frame_type == framing.FRAME_HEARTBEAT:
            self._events.append(Heartbeat(channel))
            return
        if frame_type == framing.FRAME_METHOD:
            try:
                method = m.decode_method(payload)
            except Exception as exc:
                self._events.append(Odd(f"undecodable method: {exc}", payload.hex()))
                return
            if method.HAS_CONTENT:
                self._partial[channel] = _Partial(method)
            else:
                self._events.append(Method(channel, method))
            return
        part = self._partial.get(channel)
        if part is None:
            self._events.append(Odd(f"content frame {frame_type} on channel {channel}"))
            return
        if frame_type == framing.FRAME_HEADER:
            _cls, part.size, part.properties = framing.parse_content_header(payload)
        else:
            part.body.append(payload)
            part.got += len(payload)
        if part.size >= 0 and part.got >= part.size:
            del self._partial[channel]
            self._events.append(Content(channel, part.method, part.properties, b"".join(part.body)))

    def next(self, timeout: float | None = None) -> Event:
        """The next event, skipping heartbeats; :class:`Silence` after ``timeout`` seconds."""
        wait = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        while True:
            while self._events:
                event = self._events.pop(0)
                if not isinstance(event, Heartbeat):
                    return event
            left = deadline - time.monotonic()
            if self._eof:
                return Closed()
            if left <= 0:
                return Silence()
            self._read(left)

    def drain(self, timeout: float = QUIET, first: float = FIRST_WAIT) -> list[Event]:
        """Every event until ``timeout`` seconds pass with nothing new (or the end).

        The first event may take up to ``first`` seconds: a loaded machine (CI running two
        builds) must not turn a slow first delivery into "nothing came".
        """
        out: list[Event] = []
        while True:
            event = self.next(timeout if out else max(timeout, first))
            if isinstance(event, Silence):
                return out
            out.append(event)
            if isinstance(event, Closed):
                return out

    def expect(self, cls: type[m.Method], channel: int | None = None) -> m.Method:
        """The next method, which must be ``cls`` (else :class:`Unexpected`).

        Deliveries that arrive first (a consumer's messages may precede the reply to the
        next synchronous method) are kept, in order, for the following reads.
        """
        held: list[Event] = []
        try:
            while True:
                event = self.next()
                if (
                    isinstance(event, Method | Content)
                    and isinstance(event.method, cls)
                    and (channel is None or event.channel == channel)
                ):
                    return event.method
                if isinstance(event, Content) and not cls.HAS_CONTENT:
                    held.append(event)
                    continue
                raise Unexpected(cls.NAME, event)
        finally:
            self._events[:0] = held

    # -- the handshake -------------------------------------------------------------------

    def handshake(
        self,
        *,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        frame_max: int | None = None,
        channel_max: int | None = None,
        heartbeat: int = 0,
        capabilities: dict[str, Any] | None = None,
    ) -> m.ConnectionTune:
        """Header, start-ok (PLAIN), tune-ok (the broker's values unless given), open."""
        self.send_raw(framing.PROTOCOL_HEADER)
        start = self.expect(m.ConnectionStart)
        assert isinstance(start, m.ConnectionStart)
        self.start = start
        self.start_ok(user, password, capabilities=capabilities)
        tune = self.expect(m.ConnectionTune)
        assert isinstance(tune, m.ConnectionTune)
        self.tune = tune
        fm = tune.frame_max if frame_max is None else frame_max
        cm = tune.channel_max if channel_max is None else channel_max
        self.send(0, m.ConnectionTuneOk(channel_max=cm, frame_max=fm, heartbeat=heartbeat))
        self.frame_max = fm
        self.send(0, m.ConnectionOpen(virtual_host=vhost))
        self.expect(m.ConnectionOpenOk)
        return tune

    def start_ok(
        self,
        user: str = "guest",
        password: str = "guest",
        *,
        mechanism: str = "PLAIN",
        response: bytes | None = None,
        capabilities: dict[str, Any] | None = None,
    ) -> None:
        if response is None:
            response = b"\x00" + user.encode() + b"\x00" + password.encode()
        caps: FieldTable = dict(CAPABILITIES if capabilities is None else capabilities)
        self.send(
            0,
            m.ConnectionStartOk(
                client_properties={"product": "leveret-conformance", "capabilities": caps},
                mechanism=mechanism,
                response=response,
                locale="en_US",
            ),
        )

    def channel(self, number: int = 1) -> int:
        self.send(number, m.ChannelOpen())
        self.expect(m.ChannelOpenOk, number)
        return number

    def call(self, channel: int, method: m.Method, timeout: float | None = None) -> Json:
        """Send ``method`` and summarise the next event."""
        self.send(channel, method)
        return summary(self.next(timeout))


class Unexpected(AssertionError):
    """A scenario's set-up step got another answer than it needs (the scenario is void)."""

    def __init__(self, wanted: str, got: Event) -> None:
        super().__init__(f"expected {wanted}, got {summary(got)}")
        self.got = got


# -- outcomes as data ----------------------------------------------------------------------

_SKIP_FIELDS = frozenset({"server_properties", "reply_text", "consumer_tag", "queue"})


def summary(event: Event, *fields: str) -> Json:
    """An event as JSON data: method name, channel, and the fields that are comparable.

    Closes keep reply code and the failing class/method ids (the reply text goes under
    ``_text``, kept for reading but not compared); other methods keep their small scalar
    fields (names chosen by the broker, such as consumer tags, are left to the scenario).
    """
    if isinstance(event, Closed):
        return {"m": "eof"}
    if isinstance(event, Silence):
        return {"m": "silence"}
    if isinstance(event, Header):
        return {"m": "protocol-header", "bytes": list(event.data)}
    if isinstance(event, Odd):
        return {"m": "odd", "payload": event.payload_hex, "_text": event.what}
    if isinstance(event, Heartbeat):
        return {"m": "heartbeat", "ch": event.channel}
    method = event.method
    out: dict[str, Json] = {"m": method.NAME, "ch": event.channel}
    if isinstance(method, m.ConnectionClose | m.ChannelClose):
        out.update(
            code=method.reply_code,
            ids=[method.class_id, method.method_id],
            _text=method.reply_text,
        )
        return out
    names = fields or tuple(
        f.name
        for f in dataclasses.fields(method)
        if f.name not in _SKIP_FIELDS
        and isinstance(getattr(method, f.name), bool | int)
        and not f.name.startswith("delivery_tag")
    )
    for name in names:
        value = getattr(method, name)
        out[name] = value.decode() if isinstance(value, bytes) else value
    if isinstance(event, Content):
        out["body"] = event.body.decode("latin-1")
    return out


def comparable(outcome: Json) -> Json:
    """``outcome`` without its informational keys (those that start with ``_``)."""
    if isinstance(outcome, dict):
        return {k: comparable(v) for k, v in outcome.items() if not k.startswith("_")}
    if isinstance(outcome, list):
        return [comparable(v) for v in outcome]
    return outcome


def shape(text: str) -> str:
    """The form of a broker-made name: letters, digits and ``-_`` runs become their class.

    ``amq.ctag-Xy_9...`` (22 base64url characters) becomes ``amq.ctag-<b64url:22>``, so two
    brokers that generate names the same way agree without generating the same names.
    """
    prefix, sep, rest = text.partition("-")
    if not sep:
        return f"<{len(text)} chars>"
    alphabet = set(rest)
    b64url = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    kind = "b64url" if alphabet <= b64url else "other"
    return f"{prefix}{sep}<{kind}:{len(rest)}>"


# -- field tables with chosen type letters ---------------------------------------------------


# Fixed-size field types by letter (RabbitMQ's table, with py-amqp's L and U read too).
_FIXED = {
    letter: struct.Struct(fmt)
    for letter, fmt in (
        ("b", ">b"),
        ("B", ">B"),
        ("s", ">h"),
        ("u", ">H"),
        ("I", ">i"),
        ("i", ">I"),
        ("l", ">q"),
        ("f", ">f"),
        ("d", ">d"),
        ("T", ">Q"),
        ("L", ">Q"),
        ("U", ">h"),
    )
}


@dataclass(frozen=True)
class Typed:
    """A field value with the type letter to send it as."""

    letter: str
    value: Any


def _shortstr(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">B", len(raw)) + raw


def _longstr(raw: bytes) -> bytes:
    return struct.pack(">I", len(raw)) + raw


def encode_typed(v: Typed) -> bytes:
    """One field value: its type letter, then the value in that letter's encoding."""
    letter, value = v.letter, v.value
    if letter in _FIXED:
        return letter.encode() + _FIXED[letter].pack(value)
    if letter == "t":
        return b"t" + struct.pack(">B", 1 if value else 0)
    if letter == "D":
        sign, digits, exponent = decimal.Decimal(value).as_tuple()
        assert isinstance(exponent, int)
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        return b"D" + struct.pack(">Bi", -exponent, unscaled)
    if letter == "S":
        return b"S" + _longstr(value.encode() if isinstance(value, str) else value)
    if letter == "x":
        return b"x" + _longstr(value)
    if letter == "V":
        return b"V"
    if letter == "A":
        return b"A" + _longstr(b"".join(encode_typed(item) for item in value))
    if letter == "F":
        return b"F" + typed_table(value)
    raise ValueError(f"type letter {letter!r}")


def typed_table(items: dict[str, Typed]) -> bytes:
    """A field table (with its length) whose values carry the chosen letters."""
    return _longstr(b"".join(_shortstr(k) + encode_typed(v) for k, v in items.items()))


def read_typed_table(buf: bytes, off: int = 0) -> tuple[dict[str, Json], int]:
    """Decode a field table keeping each value's type letter: ``{key: [letter, value]}``."""
    (size,) = struct.unpack_from(">I", buf, off)
    off += 4
    end = off + size
    out: dict[str, Json] = {}
    while off < end:
        klen = buf[off]
        key = buf[off + 1 : off + 1 + klen].decode()
        off += 1 + klen
        out[key], off = _read_typed_value(buf, off)
    return out, end


def _read_typed_value(buf: bytes, off: int) -> tuple[Json, int]:
    letter = chr(buf[off])
    off += 1
    if letter in _FIXED:
        st = _FIXED[letter]
        (value,) = st.unpack_from(buf, off)
        return [letter, value if letter != "T" else "<timestamp>"], off + st.size
    if letter == "t":
        return [letter, bool(buf[off])], off + 1
    if letter == "D":
        scale, unscaled = struct.unpack_from(">Bi", buf, off)
        return [letter, f"{unscaled}e-{scale}"], off + 5
    if letter in "Sx":
        (size,) = struct.unpack_from(">I", buf, off)
        raw = buf[off + 4 : off + 4 + size]
        return [letter, raw.decode("latin-1")], off + 4 + size
    if letter == "V":
        return [letter, None], off
    if letter == "F":
        table, off = read_typed_table(buf, off)
        return [letter, table], off
    if letter == "A":
        (size,) = struct.unpack_from(">I", buf, off)
        off += 4
        end = off + size
        items: list[Json] = []
        while off < end:
            item, off = _read_typed_value(buf, off)
            items.append(item)
        return [letter, items], end
    raise ValueError(f"unknown field type {letter!r}")


# -- content properties with raw headers ---------------------------------------------------

_PROPS = (
    ("content_type", 15, "s"),
    ("content_encoding", 14, "s"),
    ("headers", 13, "F"),
    ("delivery_mode", 12, "o"),
    ("priority", 11, "o"),
    ("correlation_id", 10, "s"),
    ("reply_to", 9, "s"),
    ("expiration", 8, "s"),
    ("message_id", 7, "s"),
    ("timestamp", 6, "q"),
    ("type", 5, "s"),
    ("user_id", 4, "s"),
    ("app_id", 3, "s"),
    ("cluster_id", 2, "s"),
)


def properties(**values: Any) -> bytes:
    """Property flags + list; ``headers`` is raw table bytes (see :func:`typed_table`)."""
    flags = 0
    out: list[bytes] = []
    for name, bit, kind in _PROPS:
        value = values.pop(name, None)
        if value is None:
            continue
        flags |= 1 << bit
        if kind == "s":
            out.append(_shortstr(value))
        elif kind == "F":
            out.append(value)
        elif kind == "o":
            out.append(struct.pack(">B", value))
        else:
            out.append(struct.pack(">Q", value))
    if values:
        raise TypeError(f"unknown properties {sorted(values)}")
    return struct.pack(">H", flags) + b"".join(out)


def read_properties(raw: bytes) -> dict[str, Json]:
    """Decode property bytes; headers keep their type letters (:func:`read_typed_table`)."""
    (flags,) = struct.unpack_from(">H", raw, 0)
    off = 2
    out: dict[str, Json] = {}
    for name, bit, kind in _PROPS:
        if not flags & (1 << bit):
            continue
        if kind == "s":
            size = raw[off]
            out[name] = raw[off + 1 : off + 1 + size].decode("latin-1")
            off += 1 + size
        elif kind == "F":
            out[name], off = read_typed_table(raw, off)
        elif kind == "o":
            out[name] = raw[off]
            off += 1
        else:
            out[name] = "<timestamp>"
            off += 8
    return out
