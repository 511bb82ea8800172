"""AMQP/Fast 0.8a2 commands and the message header block (AMQ RFC 006, 3.1-3.5); sans-IO.

Each command is a dataclass whose fields are those of the RFC's command table, in its order,
with the command type octet of its ABNF (``connection-challenge = %d10 ...``). Field types:

==============  ===========================================  =================
RFC             wire                                         Python
==============  ===========================================  =================
octet           1 octet                                      ``int``
short integer   2 octets, network order                      ``int``
long integer    4 octets, network order                      ``int``
bit             packed with neighbouring bits into octets    ``bool``
short string    1-octet length + UTF-8 octets, no zero octet ``str``
long string     2-octet length + any octets                  ``bytes``
field table     ``fieldtable`` (2-octet length)              ``dict``
==============  ===========================================  =================

The RFC says only "bits are packed into octets". The reading taken (docs/compatibility.md):
consecutive bits share an octet, the first in the least significant bit, a ninth bit or any
other field starts a new octet, as in every later AMQP. So ``persistent`` then ``priority``
in the message header take one octet each.

``encode()`` returns the command payload (type octet + fields); ``framing`` adds the size and
the command-end octet. :func:`decode_command` parses one payload; malformed input raises
:class:`leveret.errors.SyntaxError_` (502), an unknown command type
:class:`leveret.errors.CommandInvalid` (503). Trailing octets after the last field are
malformed: "each command has a fixed set of fields".
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Self

from leveret.errors import CommandInvalid, SyntaxError_
from leveret.protocol.amqpfast.fieldtable import FastTable, decode_table, encode_table

__all__ = [
    "COMMANDS",
    "FRAGMENT_CARRIERS",
    "ChannelAck",
    "ChannelClose",
    "ChannelCommit",
    "ChannelOpen",
    "ChannelReply",
    "ChannelRollback",
    "Command",
    "ConnectionChallenge",
    "ConnectionClose",
    "ConnectionOpen",
    "ConnectionPing",
    "ConnectionReply",
    "ConnectionResponse",
    "ConnectionTune",
    "HandleBrowse",
    "HandleCancel",
    "HandleClose",
    "HandleConsume",
    "HandleCreated",
    "HandleFlow",
    "HandleIndex",
    "HandleNotify",
    "HandleOpen",
    "HandlePrepare",
    "HandleQuery",
    "HandleReady",
    "HandleReply",
    "HandleSend",
    "HandleUnget",
    "MessageHeader",
    "decode_command",
]

_FIXED = {"octet": struct.Struct(">B"), "short": struct.Struct(">H"), "long": struct.Struct(">L")}
_U8 = _FIXED["octet"]
_U16 = _FIXED["short"]

Fields = tuple[tuple[str, str], ...]


def _encode_fields(obj: object, spec: Fields) -> bytes:
    out: list[bytes] = []
    bits: list[bool] = []

    def flush() -> None:
        if bits:
            out.append(_U8.pack(sum(1 << i for i, bit in enumerate(bits) if bit)))
            bits.clear()

    for name, kind in spec:
        value: Any = getattr(obj, name)
        if kind == "bit":
            if len(bits) == 8:
                flush()
            bits.append(bool(value))
            continue
        flush()
        if kind in _FIXED:
            out.append(_FIXED[kind].pack(value))
        elif kind == "shortstr":
            raw = value.encode()
            if b"\x00" in raw:
                raise SyntaxError_(f"{name}: short strings may not contain a zero octet")
            out.append(_U8.pack(len(raw)) + raw)
        elif kind == "longstr":
            out.append(_U16.pack(len(value)) + bytes(value))
        elif kind == "table":
            out.append(encode_table(value))
        else:  # pragma: no cover - the field specs below use only these kinds
            raise AssertionError(kind)
    flush()
    return b"".join(out)


def _decode_fields(
    buf: bytes | memoryview, offset: int, spec: Fields
) -> tuple[dict[str, Any], int]:
    values: dict[str, Any] = {}
    octet = 0
    used = 8  # bits already taken from ``octet``; 8 = none left
    for name, kind in spec:
        if kind == "bit":
            if used == 8:
                octet = buf[offset]
                offset += 1
                used = 0
            values[name] = bool(octet >> used & 1)
            used += 1
            continue
        used = 8
        if kind in _FIXED:
            st = _FIXED[kind]
            values[name] = st.unpack_from(buf, offset)[0]
            offset += st.size
        elif kind == "shortstr":
            n = buf[offset]
            raw = bytes(buf[offset + 1 : offset + 1 + n])
            if len(raw) != n:
                raise SyntaxError_(f"{name}: string runs past the end of the command")
            if b"\x00" in raw:
                raise SyntaxError_(f"{name}: short strings may not contain a zero octet")
            values[name] = raw.decode()
            offset += 1 + n
        elif kind == "longstr":
            n = _U16.unpack_from(buf, offset)[0]
            raw = bytes(buf[offset + 2 : offset + 2 + n])
            if len(raw) != n:
                raise SyntaxError_(f"{name}: string runs past the end of the command")
            values[name] = raw
            offset += 2 + n
        elif kind == "table":
            values[name], offset = decode_table(buf, offset)
        else:  # pragma: no cover
            raise AssertionError(kind)
    return values, offset


_ERRORS = (struct.error, IndexError, UnicodeError, OverflowError, AttributeError, TypeError)


@dataclass(slots=True)
class Command:
    """Base of every command; subclasses set the ClassVars."""

    TYPE: ClassVar[int]
    NAME: ClassVar[str]
    FIELDS: ClassVar[Fields]
    FROM_CLIENT: ClassVar[bool]
    """The server accepts it (the RFC's "server must expect" list)."""
    FROM_SERVER: ClassVar[bool]
    """The client accepts it."""

    def encode(self) -> bytes:
        """The command payload: type octet, then the fields."""
        try:
            return _U8.pack(self.TYPE) + _encode_fields(self, self.FIELDS)
        except SyntaxError_ as exc:
            raise SyntaxError_(f"cannot encode {self.NAME}: {exc.reply_text}") from exc
        except _ERRORS as exc:
            raise SyntaxError_(f"cannot encode {self.NAME}: {exc}") from exc

    @classmethod
    def decode(cls, buf: bytes | memoryview, offset: int) -> Self:
        """Decode the fields starting at ``offset`` (after the type octet) to the end."""
        try:
            values, end = _decode_fields(buf, offset, cls.FIELDS)
        except SyntaxError_ as exc:
            raise SyntaxError_(f"malformed {cls.NAME}: {exc.reply_text}") from exc
        except _ERRORS as exc:
            raise SyntaxError_(f"malformed {cls.NAME}: {exc}") from exc
        if end != len(buf):
            raise SyntaxError_(f"malformed {cls.NAME}: {len(buf) - end} octets after the fields")
        return cls(**values)


def _spec(*pairs: str) -> Fields:
    """``_spec("a:short", "b:bit")`` → (("a", "short"), ("b", "bit"))."""
    return tuple((p.split(":")[0], p.split(":")[1]) for p in pairs)


# -- connection commands (3.2) --------------------------------------------------------------


@dataclass(slots=True)
class ConnectionChallenge(Command):
    """Server → client: the agreed version, mechanisms (space-separated), challenges."""

    TYPE = 10
    NAME = "CONNECTION CHALLENGE"
    FIELDS = _spec("version:octet", "mechanisms:shortstr", "challenges:table")
    FROM_CLIENT = False
    FROM_SERVER = True
    version: int = 1
    mechanisms: str = ""
    challenges: FastTable = field(default_factory=dict)


@dataclass(slots=True)
class ConnectionResponse(Command):
    """Client → server: the chosen mechanism and its response fields (PLAIN: LOGIN, PASSWORD)."""

    TYPE = 11
    NAME = "CONNECTION RESPONSE"
    FIELDS = _spec("mechanism:shortstr", "responses:table")
    FROM_CLIENT = True
    FROM_SERVER = False
    mechanism: str = ""
    responses: FastTable = field(default_factory=dict, repr=False)


@dataclass(slots=True)
class ConnectionTune(Command):
    """Either way: tuning options (FRAME_MAX, CHANNEL_MAX, ...) and a header dictionary."""

    TYPE = 12
    NAME = "CONNECTION TUNE"
    FIELDS = _spec("options:table", "dictionary:table")
    FROM_CLIENT = True
    FROM_SERVER = True
    options: FastTable = field(default_factory=dict)
    dictionary: FastTable = field(default_factory=dict)


@dataclass(slots=True)
class ConnectionOpen(Command):
    """Client → server: open a virtual host."""

    TYPE = 13
    NAME = "CONNECTION OPEN"
    FIELDS = _spec(
        "confirm_tag:short", "virtual_path:shortstr", "client_name:shortstr", "options:table"
    )
    FROM_CLIENT = True
    FROM_SERVER = False
    confirm_tag: int = 0
    virtual_path: str = ""
    client_name: str = ""
    options: FastTable = field(default_factory=dict)


@dataclass(slots=True)
class ConnectionPing(Command):
    """Either way: heartbeat; ``respond`` asks for a PING back (which never has it set)."""

    TYPE = 14
    NAME = "CONNECTION PING"
    FIELDS = _spec("respond:bit")
    FROM_CLIENT = True
    FROM_SERVER = True
    respond: bool = False


@dataclass(slots=True)
class ConnectionReply(Command):
    """Server → client: confirms CONNECTION OPEN."""

    TYPE = 18
    NAME = "CONNECTION REPLY"
    FIELDS = _spec("confirm_tag:short", "reply_code:short", "reply_text:shortstr")
    FROM_CLIENT = False
    FROM_SERVER = True
    confirm_tag: int = 0
    reply_code: int = 200
    reply_text: str = ""


@dataclass(slots=True)
class ConnectionClose(Command):
    """Either way: close the connection; the other side answers with CONNECTION CLOSE."""

    TYPE = 19
    NAME = "CONNECTION CLOSE"
    FIELDS = _spec("reply_code:short", "reply_text:shortstr")
    FROM_CLIENT = True
    FROM_SERVER = True
    reply_code: int = 200
    reply_text: str = ""


# -- channel commands (3.3) -----------------------------------------------------------------


@dataclass(slots=True)
class ChannelOpen(Command):
    """Client → server: open channel ``channel_id`` (> 0)."""

    TYPE = 20
    NAME = "CHANNEL OPEN"
    FIELDS = _spec(
        "channel_id:short",
        "confirm_tag:short",
        "transacted:bit",
        "restartable:bit",
        "options:table",
        "out_of_band:shortstr",
    )
    FROM_CLIENT = True
    FROM_SERVER = False
    channel_id: int = 0
    confirm_tag: int = 0
    transacted: bool = False
    restartable: bool = False
    options: FastTable = field(default_factory=dict)
    out_of_band: str = ""


@dataclass(slots=True)
class ChannelAck(Command):
    """Client → server: acknowledge every message of the channel up to ``message_nbr``."""

    TYPE = 21
    NAME = "CHANNEL ACK"
    FIELDS = _spec("channel_id:short", "confirm_tag:short", "message_nbr:long")
    FROM_CLIENT = True
    FROM_SERVER = False
    channel_id: int = 0
    confirm_tag: int = 0
    message_nbr: int = 0


@dataclass(slots=True)
class ChannelCommit(Command):
    """Client → server: commit the channel's transaction."""

    TYPE = 22
    NAME = "CHANNEL COMMIT"
    FIELDS = _spec("channel_id:short", "confirm_tag:short", "options:table")
    FROM_CLIENT = True
    FROM_SERVER = False
    channel_id: int = 0
    confirm_tag: int = 0
    options: FastTable = field(default_factory=dict)


@dataclass(slots=True)
class ChannelRollback(Command):
    """Client → server: roll back the channel's transaction."""

    TYPE = 23
    NAME = "CHANNEL ROLLBACK"
    FIELDS = _spec("channel_id:short", "confirm_tag:short", "options:table")
    FROM_CLIENT = True
    FROM_SERVER = False
    channel_id: int = 0
    confirm_tag: int = 0
    options: FastTable = field(default_factory=dict)


@dataclass(slots=True)
class ChannelReply(Command):
    """Server → client: confirms a channel command."""

    TYPE = 28
    NAME = "CHANNEL REPLY"
    FIELDS = _spec(
        "channel_id:short", "confirm_tag:short", "reply_code:short", "reply_text:shortstr"
    )
    FROM_CLIENT = False
    FROM_SERVER = True
    channel_id: int = 0
    confirm_tag: int = 0
    reply_code: int = 200
    reply_text: str = ""


@dataclass(slots=True)
class ChannelClose(Command):
    """Either way: close a channel; the other side answers with CHANNEL CLOSE."""

    TYPE = 29
    NAME = "CHANNEL CLOSE"
    FIELDS = _spec("channel_id:short", "reply_code:short", "reply_text:shortstr")
    FROM_CLIENT = True
    FROM_SERVER = True
    channel_id: int = 0
    reply_code: int = 200
    reply_text: str = ""


# -- destination (handle) commands (3.5) ----------------------------------------------------


@dataclass(slots=True)
class HandleOpen(Command):
    """Client → server: open handle ``handle_id`` on a channel, for a destination."""

    TYPE = 30
    NAME = "HANDLE OPEN"
    FIELDS = _spec(
        "channel_id:short",
        "handle_id:short",
        "service_type:short",
        "confirm_tag:short",
        "producer:bit",
        "consumer:bit",
        "browser:bit",
        "temporary:bit",
        "dest_name:shortstr",
        "mime_type:shortstr",
        "encoding:shortstr",
        "options:table",
    )
    FROM_CLIENT = True
    FROM_SERVER = False
    channel_id: int = 0
    handle_id: int = 0
    service_type: int = 1
    confirm_tag: int = 0
    producer: bool = False
    consumer: bool = False
    browser: bool = False
    temporary: bool = False
    dest_name: str = ""
    mime_type: str = ""
    encoding: str = ""
    options: FastTable = field(default_factory=dict)


@dataclass(slots=True)
class HandleSend(Command):
    """Client → server: a message fragment of ``fragment_size`` octets follows."""

    TYPE = 31
    NAME = "HANDLE SEND"
    FIELDS = _spec(
        "handle_id:short",
        "confirm_tag:short",
        "fragment_size:long",
        "partial:bit",
        "out_of_band:bit",
        "recovery:bit",
        "streaming:bit",
        "dest_name:shortstr",
    )
    FROM_CLIENT = True
    FROM_SERVER = False
    handle_id: int = 0
    confirm_tag: int = 0
    fragment_size: int = 0
    partial: bool = False
    out_of_band: bool = False
    recovery: bool = False
    streaming: bool = False
    dest_name: str = ""


@dataclass(slots=True)
class HandleConsume(Command):
    """Client → server: subscribe to a destination."""

    TYPE = 32
    NAME = "HANDLE CONSUME"
    FIELDS = _spec(
        "handle_id:short",
        "confirm_tag:short",
        "prefetch:short",
        "no_local:bit",
        "unreliable:bit",
        "dest_name:shortstr",
        "identifier:shortstr",
        "selector:longstr",
        "mime_type:shortstr",
    )
    FROM_CLIENT = True
    FROM_SERVER = False
    handle_id: int = 0
    confirm_tag: int = 0
    prefetch: int = 1
    no_local: bool = False
    unreliable: bool = False
    dest_name: str = ""
    identifier: str = ""
    selector: bytes = b""
    mime_type: str = ""


@dataclass(slots=True)
class HandleCancel(Command):
    """Client → server: end a durable topic subscription."""

    TYPE = 33
    NAME = "HANDLE CANCEL"
    FIELDS = _spec(
        "handle_id:short", "confirm_tag:short", "dest_name:shortstr", "identifier:shortstr"
    )
    FROM_CLIENT = True
    FROM_SERVER = False
    handle_id: int = 0
    confirm_tag: int = 0
    dest_name: str = ""
    identifier: str = ""


@dataclass(slots=True)
class HandleFlow(Command):
    """Client → server: pause (``flow_pause``) or restart messages on a handle."""

    TYPE = 34
    NAME = "HANDLE FLOW"
    FIELDS = _spec("handle_id:short", "confirm_tag:short", "flow_pause:bit")
    FROM_CLIENT = True
    FROM_SERVER = False
    handle_id: int = 0
    confirm_tag: int = 0
    flow_pause: bool = False


@dataclass(slots=True)
class HandleUnget(Command):
    """Client → server: give a delivered message back to its queue."""

    TYPE = 35
    NAME = "HANDLE UNGET"
    FIELDS = _spec("handle_id:short", "confirm_tag:short", "message_nbr:long")
    FROM_CLIENT = True
    FROM_SERVER = False
    handle_id: int = 0
    confirm_tag: int = 0
    message_nbr: int = 0


@dataclass(slots=True)
class HandleQuery(Command):
    """Client → server: list the messages of a destination above ``message_nbr``."""

    TYPE = 36
    NAME = "HANDLE QUERY"
    FIELDS = _spec(
        "handle_id:short",
        "message_nbr:long",
        "dest_name:shortstr",
        "selector:longstr",
        "mime_type:shortstr",
    )
    FROM_CLIENT = True
    FROM_SERVER = False
    handle_id: int = 0
    message_nbr: int = 0
    dest_name: str = ""
    selector: bytes = b""
    mime_type: str = ""


@dataclass(slots=True)
class HandleBrowse(Command):
    """Client → server: send me message ``message_nbr`` without delivering it."""

    TYPE = 37
    NAME = "HANDLE BROWSE"
    FIELDS = _spec("handle_id:short", "confirm_tag:short", "message_nbr:long")
    FROM_CLIENT = True
    FROM_SERVER = False
    handle_id: int = 0
    confirm_tag: int = 0
    message_nbr: int = 0


@dataclass(slots=True)
class HandleCreated(Command):
    """Server → client: the name of the temporary destination created."""

    TYPE = 40
    NAME = "HANDLE CREATED"
    FIELDS = _spec("handle_id:short", "dest_name:shortstr")
    FROM_CLIENT = False
    FROM_SERVER = True
    handle_id: int = 0
    dest_name: str = ""


@dataclass(slots=True)
class HandleNotify(Command):
    """Server → client: a message fragment of ``fragment_size`` octets follows."""

    TYPE = 41
    NAME = "HANDLE NOTIFY"
    FIELDS = _spec(
        "handle_id:short",
        "message_nbr:long",
        "fragment_size:long",
        "partial:bit",
        "out_of_band:bit",
        "recovery:bit",
        "delivered:bit",
        "redelivered:bit",
        "streaming:bit",
        "dest_name:shortstr",
    )
    FROM_CLIENT = False
    FROM_SERVER = True
    handle_id: int = 0
    message_nbr: int = 0
    fragment_size: int = 0
    partial: bool = False
    out_of_band: bool = False
    recovery: bool = False
    delivered: bool = True
    redelivered: bool = False
    streaming: bool = False
    dest_name: str = ""


@dataclass(slots=True)
class HandleIndex(Command):
    """Server → client: answer to HANDLE QUERY, e.g. ``b"0 5 9 15-40 80"``."""

    TYPE = 42
    NAME = "HANDLE INDEX"
    FIELDS = _spec("handle_id:short", "message_nbr:long", "message_list:longstr")
    FROM_CLIENT = False
    FROM_SERVER = True
    handle_id: int = 0
    message_nbr: int = 0
    message_list: bytes = b""


@dataclass(slots=True)
class HandlePrepare(Command):
    """Either way: a restartable transfer starts; the header (+ body octets) follow."""

    TYPE = 43
    NAME = "HANDLE PREPARE"
    FIELDS = _spec("handle_id:short", "fragment_size:long", "content_hash:shortstr")
    FROM_CLIENT = True
    FROM_SERVER = True
    handle_id: int = 0
    fragment_size: int = 0
    content_hash: str = ""


@dataclass(slots=True)
class HandleReady(Command):
    """Either way: how much of the prepared message is already held."""

    TYPE = 44
    NAME = "HANDLE READY"
    FIELDS = _spec("handle_id:short", "message_size:long")
    FROM_CLIENT = True
    FROM_SERVER = True
    handle_id: int = 0
    message_size: int = 0


@dataclass(slots=True)
class HandleReply(Command):
    """Server → client: confirms a handle command (or reports 310 for a lost browse)."""

    TYPE = 48
    NAME = "HANDLE REPLY"
    FIELDS = _spec(
        "handle_id:short", "confirm_tag:short", "reply_code:short", "reply_text:shortstr"
    )
    FROM_CLIENT = False
    FROM_SERVER = True
    handle_id: int = 0
    confirm_tag: int = 0
    reply_code: int = 200
    reply_text: str = ""


@dataclass(slots=True)
class HandleClose(Command):
    """Either way: close a handle; the other side answers with HANDLE CLOSE."""

    TYPE = 49
    NAME = "HANDLE CLOSE"
    FIELDS = _spec("handle_id:short", "reply_code:short", "reply_text:shortstr")
    FROM_CLIENT = True
    FROM_SERVER = True
    handle_id: int = 0
    reply_code: int = 200
    reply_text: str = ""


COMMANDS: dict[int, type[Command]] = {
    cls.TYPE: cls
    for cls in (
        ConnectionChallenge,
        ConnectionResponse,
        ConnectionTune,
        ConnectionOpen,
        ConnectionPing,
        ConnectionReply,
        ConnectionClose,
        ChannelOpen,
        ChannelAck,
        ChannelCommit,
        ChannelRollback,
        ChannelReply,
        ChannelClose,
        HandleOpen,
        HandleSend,
        HandleConsume,
        HandleCancel,
        HandleFlow,
        HandleUnget,
        HandleQuery,
        HandleBrowse,
        HandleCreated,
        HandleNotify,
        HandleIndex,
        HandlePrepare,
        HandleReady,
        HandleReply,
        HandleClose,
    )
}
"""Every command class by its type octet."""

FRAGMENT_CARRIERS = frozenset({HandleSend.TYPE, HandleNotify.TYPE, HandlePrepare.TYPE})
"""Commands followed in the stream by ``fragment_size`` octets of message (unless out of band)."""


def decode_command(payload: bytes | memoryview) -> Command:
    """Decode a command payload (type octet + fields)."""
    if len(payload) < 1:
        raise SyntaxError_("empty command")
    cls = COMMANDS.get(payload[0])
    if cls is None:
        raise CommandInvalid(f"unknown command type {payload[0]}")
    return cls.decode(payload, 1)


# -- the message header block (3.4.4) -------------------------------------------------------


@dataclass(slots=True)
class MessageHeader:
    """The header block at the start of a message's first fragment."""

    FIELDS: ClassVar[Fields] = _spec(
        "body_size:long",
        "persistent:bit",
        "priority:octet",
        "expiration:long",
        "mime_type:shortstr",
        "encoding:shortstr",
        "identifier:shortstr",
        "headers:table",
    )
    body_size: int = 0
    persistent: bool = False
    priority: int = 0
    expiration: int = 0
    mime_type: str = ""
    encoding: str = ""
    identifier: str = ""
    headers: FastTable = field(default_factory=dict)

    def encode(self) -> bytes:
        """The header block's octets."""
        try:
            return _encode_fields(self, self.FIELDS)
        except _ERRORS as exc:
            raise SyntaxError_(f"cannot encode message header: {exc}") from exc

    @classmethod
    def decode(cls, buf: bytes | memoryview, offset: int = 0) -> tuple[Self, int]:
        """Decode the header block at ``offset``; return (header, offset of the body)."""
        try:
            values, end = _decode_fields(buf, offset, cls.FIELDS)
        except SyntaxError_ as exc:
            raise SyntaxError_(f"malformed message header: {exc.reply_text}") from exc
        except _ERRORS as exc:
            raise SyntaxError_(f"malformed message header: {exc}") from exc
        return cls(**values), end


def field_names(cls: type[Command] | type[MessageHeader]) -> list[str]:
    """The dataclass field names (the RFC table's order)."""
    return [f.name for f in fields(cls)]
