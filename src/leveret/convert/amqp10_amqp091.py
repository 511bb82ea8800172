"""The one AMQP 0-9-1 <-> AMQP 1.0 table, both ways: RabbitMQ 4's (``mc_amqpl``'s
``convert_from(mc_amqp, ...)`` and ``convert_to(mc_amqp, ...)``). It says what a 0-9-1
consumer gets of a message published over 1.0 (and through 0-9-1's form a 0-10, 0-8/0-9 or
AMQP/Fast consumer), what a 1.0 consumer gets of one published over 0-9-1 (or 0-10, 0-8/0-9,
AMQP/Fast), and what a stream stores for a 0-9-1 publish (``stream_records.py``), so a
stream-protocol reader sees what a 1.0 consumer sees. Converted only when a consumer of the
other protocol takes the message; the message itself stays in the form it came in.

AMQP 1.0 -> 0-9-1
=================

==============================  ===========================================================
AMQP 1.0                        0-9-1 basic property
==============================  ===========================================================
header durable                  delivery-mode 2 (1 when durable is false; absent: 2, as
                                RabbitMQ 4 treats a message without a header as durable)
header priority / ttl           priority / expiration (ms, as a string)
properties message-id,          message-id, correlation-id: strings of up to 255 octets;
correlation-id                  a UUID as ``urn:uuid:…``, a ulong in decimal; a binary id or
                                a longer string goes to the header ``x-message-id`` /
                                ``x-correlation-id``
properties user-id              user-id (when it is UTF-8 of up to 255 octets)
properties reply-to             reply-to
properties content-type/        content-type / content-encoding
content-encoding
properties creation-time (ms)   timestamp (s)
properties group-id             app-id
application-properties          headers (keys of up to 255 octets)
message-annotations ``x-…``     headers, except the broker's own (``x-exchange``,
                                ``x-routing-key``, ``x-basic-*``); ``x-cc`` → ``CC``
``x-basic-type``                type
body: data sections             the body (sections concatenated)
body: amqp-value/-sequence      the body is the encoded body sections and footer, and type
                                is ``amqp-1.0``
==============================  ===========================================================

Beyond RabbitMQ 4, where it has no answer: without a header, ``x-basic-delivery-mode``,
``-priority`` and ``-expiration`` annotations are read (as RabbitMQ 4 does), and so are
``x-basic-app-id``, ``-cluster-id``, ``-content-type`` and ``-content-encoding`` where the
properties have none (RabbitMQ 4 drops them; Leveret's streams before this table and the
Spark connector's stream sink wrote them). A value a field table cannot hold keeps its
value (``amqp10.field_value``); a priority or delivery mode outside an octet is left out.

AMQP 0-9-1 -> 1.0
=================

==============================  ===========================================================
0-9-1 basic property            AMQP 1.0
==============================  ===========================================================
delivery-mode, priority,        header: durable (delivery-mode 2), priority, ttl (ms; a
expiration                      non-numeric expiration is left out, one past 2^32 - 1 ms
                                is cut to it); a consumer's delivery adds first-acquirer
                                and, redelivered, delivery-count
message-id, correlation-id      properties: message-id, correlation-id (``urn:uuid:…`` as a
                                UUID, otherwise a string)
user-id                         properties: user-id (binary)
reply-to                        properties: reply-to
content-type, content-encoding  properties: content-type, content-encoding (symbols; one
                                that is not ASCII: annotation ``x-basic-content-type`` /
                                ``-encoding``)
timestamp (s)                   properties: creation-time (ms)
app-id                          properties: group-id
type                            message annotation ``x-basic-type`` (``amqp-1.0``: the body
                                already is encoded 1.0 sections and is sent as it is)
cluster-id                      left out (as RabbitMQ 4)
headers ``x-…``                 message annotations (symbols), but ``x-exchange``,
                                ``x-routing-key`` (the broker's) and names that are not
                                ASCII (application properties)
header ``CC`` (an array)        message annotation ``x-cc``
other headers                   application-properties (nested tables and arrays are left
                                out: 1.0 forbids them there)
exchange, routing key           message annotations ``x-exchange``, ``x-routing-key``
body                            one data section
==============================  ===========================================================

Lossless there and back (``tests/unit/convert/test_amqp10_amqp091.py`` checks both) for a
0-9-1 message whose delivery-mode is 1 or 2, expiration a number of ms below 2^32, type
not ``amqp-1.0`` and cluster-id unset, and whose headers hold nested tables or arrays only
under ASCII ``x-`` names (``CC`` aside) and use none of the table's own names (``x-cc``,
``x-basic-*``, the routing annotations); and for a 1.0 message with a header, one data
section, string or UUID ids, a whole-second creation time, ``x-`` annotations and
application properties of simple values under other names. Integers keep their value, not
always their width. ``amqp10_sections.py`` writes this direction's bytes directly for the
common values.

A 0-9-1 consumer's conversion is kept per distinct sections (a publisher that repeats its
properties pays it once); a stream reader's messages, which differ only in their two stamp
values, are converted once per head and filled in per message (``stream_stamp.Restamp``).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from leveret.convert.amqp10 import (
    Amqp10View,
    field_value,
    first_sections,
    split_payload,
    value_of_field,
)
from leveret.convert.amqp10_sections import (
    AMQP10_TYPE,
    NULL,
    RESERVED,
    Sections,
    annotations_section,
    data_head,
    header_section,
    sections,
    string,
)
from leveret.convert.stream_stamp import Restamp, stamp_values
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import (
    Data,
    Properties,
    Symbol,
    Timestamp,
    UByte,
    UInt,
)
from leveret.protocol.amqp10._generated.composites import ApplicationProperties
from leveret.protocol.amqp10.message import DATA, FOOTER, MESSAGE_ANNOTATIONS
from leveret.protocol.amqp10.types import decode_value, encode_value, skip_value

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.protocol.amqp091.fieldtable import FieldValue
    from leveret.protocol.amqp10.types import Value

__all__ = [
    "AMQP10_TYPE",
    "amqp091_parts",
    "from_amqp10",
    "general_sections",
    "payload_from_amqp091",
    "properties_of",
    "sections_of",
    "to_amqp10",
]

# -- AMQP 1.0 -> 0-9-1 ------------------------------------------------------------------------

# Message annotations that never become headers: the broker's own (RabbitMQ 4's
# ``is_internal_header``, and the ``x-basic-*`` ones the table reads itself).
_NOT_HEADERS = frozenset((*RESERVED, "x-opt-rabbitmq-received-time"))
_LONG_MAX = (1 << 63) - 1


def _shortstr(value: object) -> str | None:
    if isinstance(value, str) and len(value.encode()) <= 255:
        return str(value)
    return None


def _octet(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 255:
        return int(value)
    return None


def _message_id(value: Value, header: str, headers: dict[str, FieldValue]) -> str | None:
    if value is None:
        return None
    if isinstance(value, uuid.UUID):
        return f"urn:uuid:{value}"
    if isinstance(value, bytes):
        headers[header] = bytes(value)
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, str):
        short = _shortstr(value)
        if short is None:
            headers[header] = str(value)
        return short
    return None


def properties_of(view: Amqp10View, *, amqp_body: bool) -> BasicProperties:
    """The 0-9-1 properties of a 1.0 message (``amqp_body``: its body is not data)."""
    header = view.header
    props = view.props or Properties()
    annotations = view.annotations
    headers: dict[str, FieldValue] = {}
    for key, value in view.app_properties.items():
        if isinstance(key, str) and len(key.encode()) <= 255:
            headers[str(key)] = field_value(value)  # type: ignore[assignment]
    for key, value in annotations.items():
        if not isinstance(key, str) or not key.startswith("x-") or len(key.encode()) > 255:
            continue
        if key == "x-cc":
            headers["CC"] = field_value(value)  # type: ignore[assignment]
        elif key not in _NOT_HEADERS and not key.startswith("x-basic-"):
            headers[str(key)] = field_value(value)  # type: ignore[assignment]
    message_id = _message_id(props.message_id, "x-message-id", headers)
    correlation_id = _message_id(props.correlation_id, "x-correlation-id", headers)
    if header is not None and header.durable is not None:
        delivery_mode = 2 if header.durable else 1
    else:
        mode = _octet(annotations.get("x-basic-delivery-mode"))
        delivery_mode = 2 if mode is None else mode
    if header is not None and header.priority is not None:
        priority: int | None = header.priority
    else:
        priority = _octet(annotations.get("x-basic-priority"))
    expiration: str | None = None
    if header is not None and header.ttl is not None:
        expiration = str(header.ttl)
    else:
        expiration = _shortstr(annotations.get("x-basic-expiration"))
    kind = AMQP10_TYPE if amqp_body else _shortstr(annotations.get("x-basic-type"))
    user_id: str | None = None
    if props.user_id is not None:
        try:
            user_id = _shortstr(bytes(props.user_id).decode())
        except UnicodeDecodeError:
            user_id = None
    creation = props.creation_time
    content_type = _shortstr(props.content_type)
    content_encoding = _shortstr(props.content_encoding)
    app_id = _shortstr(props.group_id)
    # Read back what RabbitMQ 4 leaves out but earlier Leveret streams and the Spark sink
    # wrote as annotations (and what the table writes for a non-ASCII content type).
    if content_type is None:
        content_type = _shortstr(annotations.get("x-basic-content-type"))
    if content_encoding is None:
        content_encoding = _shortstr(annotations.get("x-basic-content-encoding"))
    if app_id is None:
        app_id = _shortstr(annotations.get("x-basic-app-id"))
    return BasicProperties(
        content_type=content_type,
        content_encoding=content_encoding,
        headers=headers or None,
        delivery_mode=delivery_mode,
        priority=priority,
        correlation_id=correlation_id,
        reply_to=_shortstr(props.reply_to),
        expiration=expiration,
        message_id=message_id,
        timestamp=None if creation is None or creation < 0 else int(creation) // 1000,
        type=kind,
        user_id=user_id,
        app_id=app_id,
        cluster_id=_shortstr(annotations.get("x-basic-cluster-id")),
    )


def _body(body: bytes) -> tuple[bytes, bool]:
    """(0-9-1 body, whether it is the encoded 1.0 body) of a 1.0 message's body sections."""
    if not body:
        return b"", False
    if body[0] == 0 and body[1] == 0x53 and body[2] == DATA:
        n = len(body)
        # One data section, the usual body: its value is the rest (sizes checked on arrival).
        if body[3] == 0xA0 and 5 + body[4] == n:
            return body[5:], False
        if body[3] == 0xB0 and n >= 8 and 8 + int.from_bytes(body[4:8], "big") == n:
            return body[8:], False
        parts: list[bytes] = []
        off = 0
        while off < n:
            if body[off + 2] == FOOTER:
                break
            value, off = decode_value(body, off)
            assert isinstance(value, Data)
            parts.append(value.value)
        return (parts[0] if len(parts) == 1 else b"".join(parts)), False
    return body, True


# Converted properties by (sections before the body, body kind): a publisher that repeats
# its properties pays the table once. Starts over when full.
_converted: dict[tuple[bytes, bool], bytes] = {}
_CONVERTED_MAX = 256
# The same for messages a stream's reader gets, which differ from the message before only
# in their two stamp values: by the sections with those zeroed, a ``Restamp`` once the same
# sections come a second time (``_ONCE`` after the first; None: not a stamp there).
_restamps: dict[tuple[bytes, bool], Restamp | object | None] = {}
_ONCE = object()


def amqp091_parts(message: Message) -> tuple[bytes, bytes]:
    """(encoded basic properties, body) of a 1.0 ``message`` for a 0-9-1 consumer."""
    body, amqp_body = _body(message.body)
    raw = message.raw_properties
    stamp = stamp_values(raw)
    if stamp is not None:
        zeroed, offset, timestamp, at = stamp
        key = (zeroed, amqp_body)
        restamp = _restamps.get(key, _UNSEEN)
        if restamp is _ONCE:
            restamp = _restamps[key] = _restamp(zeroed, at, amqp_body)
        elif restamp is _UNSEEN:
            if len(_restamps) >= _CONVERTED_MAX:
                _restamps.clear()
            _restamps[key] = _ONCE
        if isinstance(restamp, Restamp):
            return restamp.fill(offset, timestamp), body
        # A stamped message is the only one of its bytes: converted, not kept.
        view = message.properties
        assert isinstance(view, Amqp10View)
        return properties_of(view, amqp_body=amqp_body).encode(), body
    key = (raw, amqp_body)
    converted = _converted.get(key)
    if converted is None:
        view = message.properties
        assert isinstance(view, Amqp10View)
        converted = properties_of(view, amqp_body=amqp_body).encode()
        if len(_converted) >= _CONVERTED_MAX:
            _converted.clear()
        _converted[key] = converted
    return converted, body


_UNSEEN = object()


def _restamp(zeroed: bytes, at: int, amqp_body: bool) -> Restamp | None:
    """The 0-9-1 form of ``zeroed`` as a ``Restamp``, when the entries at ``at`` are the last
    two keys and values of its message annotations (as ``stamp_amqp10`` writes them, not
    bytes inside another value); None otherwise."""
    where = first_sections(zeroed).get(MESSAGE_ANNOTATIONS)
    if where is None or not _last_two_keys_at(zeroed, where[0], at):
        return None
    try:
        return Restamp(properties_of(Amqp10View(zeroed), amqp_body=amqp_body).encode())
    except ValueError:
        return None


def _last_two_keys_at(raw: bytes, section: int, at: int) -> bool:
    """Whether the map of the annotations section at ``section`` ends with two entries whose
    first key starts at ``at``."""
    code = raw[section + 3]
    if code == 0xC1:
        count, p = raw[section + 5], section + 6
    elif code == 0xD1:
        count, p = int.from_bytes(raw[section + 8 : section + 12], "big"), section + 12
    else:
        return False
    if count < 4 or count % 2:
        return False
    for _ in range(count - 4):
        p = skip_value(raw, p)
    return p == at


def from_amqp10(payload: bytes) -> tuple[BasicProperties, bytes]:
    """A whole 1.0 message (sections as on the wire or in a stream) as 0-9-1 properties and
    body."""
    raw, body = split_payload(payload)
    converted, amqp_body = _body(body)
    return properties_of(Amqp10View(raw), amqp_body=amqp_body), converted


# -- AMQP 0-9-1 -> 1.0 ------------------------------------------------------------------------
#
# ``general_sections`` is the table as the 1.0 composites; ``amqp10_sections.sections`` writes
# the same bytes directly for the common values (and is tried first).

_EMPTY_PROPERTIES = Properties()
_UINT_MAX = 0xFFFFFFFF


def _id(value: str | None) -> Value:
    if value is not None and value.startswith("urn:uuid:"):
        try:
            return uuid.UUID(value[9:])
        except ValueError:
            return value
    return value


def _symbol(text: str | None, name: str, annotations: dict[Value, Value]) -> Symbol | None:
    """A content type or encoding as a symbol; one a symbol cannot hold (not ASCII) goes to
    the annotation ``name`` instead (read back by ``properties_of``)."""
    if text is None:
        return None
    if text.isascii():
        return Symbol(text)
    annotations[Symbol(name)] = text
    return None


def general_sections(props: BasicProperties) -> Sections:
    """The 1.0 parts of 0-9-1 ``props``: the table's general implementation."""
    expiration = props.expiration
    ttl = NULL
    if expiration is not None and expiration.isascii() and expiration.isdigit():
        ttl = encode_value(UInt(min(int(expiration), _UINT_MAX)))
    annotations: dict[Value, Value] = {}
    app: dict[Value, Value] = {}
    for key, value in (props.headers or {}).items():
        if key.startswith("x-") and key.isascii():  # a symbol holds ASCII only
            if key not in RESERVED:
                annotations[Symbol(key)] = value_of_field(value)
        elif key == "CC" and isinstance(value, list):
            annotations[Symbol("x-cc")] = value_of_field(value)
        elif not isinstance(value, (list, dict)):
            app[key] = value_of_field(value)
    if props.type is not None and props.type != AMQP10_TYPE:
        annotations[Symbol("x-basic-type")] = props.type
    content_type = _symbol(props.content_type, "x-basic-content-type", annotations)
    content_encoding = _symbol(props.content_encoding, "x-basic-content-encoding", annotations)
    creation = None
    if props.timestamp is not None and props.timestamp * 1000 <= _LONG_MAX:
        creation = Timestamp(props.timestamp * 1000)
    properties = Properties(
        message_id=_id(props.message_id),
        user_id=None if props.user_id is None else props.user_id.encode(),
        reply_to=props.reply_to,
        correlation_id=_id(props.correlation_id),
        content_type=content_type,
        content_encoding=content_encoding,
        creation_time=creation,
        group_id=props.app_id,
    )
    rest = b"" if properties == _EMPTY_PROPERTIES else properties.encode()
    if app:
        rest += ApplicationProperties(app).encode()
    return Sections(
        props.delivery_mode == 2,
        NULL if props.priority is None else encode_value(UByte(props.priority)),
        ttl,
        b"".join(encode_value(k) + encode_value(v) for k, v in annotations.items()),
        2 * len(annotations),
        rest,
    )


def sections_for(props: BasicProperties) -> Sections:
    """The 1.0 parts of ``props``, directly where the fast path takes them."""
    direct = sections(props)
    return direct if direct is not None else general_sections(props)


_TRUE = b"\x41"
_FALSE = b"\x42"
_EXCHANGE_KEY = encode_value(Symbol("x-exchange"))
_ROUTING_KEY_KEY = encode_value(Symbol("x-routing-key"))


def sections_of(
    props: BasicProperties,
    body: bytes,
    *,
    exchange: str | None = None,
    routing_key: str | None = None,
    redelivered: bool = False,
    delivery_count: int = 0,
    first_acquirer: bool | None = None,
) -> bytes:
    """The 1.0 message for 0-9-1 ``props`` and ``body``; ``exchange`` and ``routing_key``
    become the ``x-exchange`` / ``x-routing-key`` annotations, the rest is the delivery's
    header (``first-acquirer``; ``delivery-count`` on a redelivery)."""
    s = sections_for(props)
    items, count = s.annotations, s.count
    if exchange is not None:
        items += _EXCHANGE_KEY + string(exchange)
        count += 2
    if routing_key is not None:
        items += _ROUTING_KEY_KEY + string(routing_key)
        count += 2
    acquirer = NULL if first_acquirer is None else _TRUE if first_acquirer else _FALSE
    pieces = [header_section(s, acquirer, delivery_count if redelivered else 0)]
    if count:
        pieces.append(annotations_section(items, count))
    pieces.append(s.rest)
    if props.type == AMQP10_TYPE:
        pieces.append(body)
    else:
        pieces.append(data_head(body))
        pieces.append(body)
    return b"".join(pieces)


def payload_from_amqp091(message: Message, redelivered: bool, delivery_count: int) -> bytes:
    """The transfer payload of a 0-9-1 ``message`` for a 1.0 consumer."""
    props = message.properties
    assert isinstance(props, BasicProperties)
    return sections_of(
        props,
        message.body,
        exchange=message.exchange,
        routing_key=message.routing_key,
        redelivered=redelivered,
        delivery_count=delivery_count,
        first_acquirer=not redelivered,
    )


def to_amqp10(props: BasicProperties, body: bytes) -> bytes:
    """A 0-9-1 message as a whole 1.0 message, without routing annotations."""
    return sections_of(props, body)
