"""The AMQP 1.0 message format (spec part 3.2): sections, the bare message, annotations.

A message is a sequence of described sections in a fixed order::

    header? delivery-annotations? message-annotations?      the annotations a broker may
    [properties? application-properties? body]               rewrite; the bare message, which
    footer?                                                   it must pass on byte-identical

with ``body`` one or more ``data``, one or more ``amqp-sequence``, or one ``amqp-value``.
:func:`parse_message` finds every section's offsets without decoding them and keeps the
payload bytes, so a broker can store them, rewrite only the annotations
(:meth:`MessageSections.reannotated`) and re-send the bare message as it came; sections are
decoded only when asked for. :func:`encode_message` builds a message from sections.
Only ``leveret.protocol.amqp10`` and the 1.0 front end import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from leveret.protocol.amqp10._generated import encodings as fc
from leveret.protocol.amqp10._generated.composites import (
    AmqpSequence,
    AmqpValue,
    ApplicationProperties,
    Data,
    DeliveryAnnotations,
    Footer,
    Header,
    MessageAnnotations,
    Properties,
)
from leveret.protocol.amqp10.errors import DecodeError
from leveret.protocol.amqp10.types import (
    DECODE_ERRORS,
    Composite,
    composite_for,
    decode_error,
    decode_value,
    skip_value,
)

if TYPE_CHECKING:
    from leveret.protocol.amqp10.types import Value

__all__ = [
    "Body",
    "MessageSections",
    "Section",
    "encode_message",
    "parse_message",
]

HEADER = Header.DESCRIPTOR_CODE
DELIVERY_ANNOTATIONS = DeliveryAnnotations.DESCRIPTOR_CODE
MESSAGE_ANNOTATIONS = MessageAnnotations.DESCRIPTOR_CODE
PROPERTIES = Properties.DESCRIPTOR_CODE
APPLICATION_PROPERTIES = ApplicationProperties.DESCRIPTOR_CODE
DATA = Data.DESCRIPTOR_CODE
AMQP_SEQUENCE = AmqpSequence.DESCRIPTOR_CODE
AMQP_VALUE = AmqpValue.DESCRIPTOR_CODE
FOOTER = Footer.DESCRIPTOR_CODE

# The position of each section kind in the required order; body kinds share one position.
_RANK = {
    HEADER: 0,
    DELIVERY_ANNOTATIONS: 1,
    MESSAGE_ANNOTATIONS: 2,
    PROPERTIES: 3,
    APPLICATION_PROPERTIES: 4,
    DATA: 5,
    AMQP_SEQUENCE: 5,
    AMQP_VALUE: 5,
    FOOTER: 6,
}
_BODY = frozenset({DATA, AMQP_SEQUENCE, AMQP_VALUE})
_BARE = frozenset({PROPERTIES, APPLICATION_PROPERTIES}) | _BODY

Body = Data | list[Data] | AmqpValue | AmqpSequence | list[AmqpSequence]
"""A message body as :func:`encode_message` takes it."""


@dataclass(frozen=True, slots=True)
class Section:
    """One section: its descriptor code and its ``[start, end)`` offsets in the payload."""

    code: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class MessageSections:
    """A parsed message: the payload as it came and where each section lies in it."""

    payload: bytes
    sections: tuple[Section, ...]
    bare_start: int
    bare_end: int

    @property
    def bare(self) -> bytes:
        """The bare message (properties … body), byte for byte as the sender encoded it."""
        return self.payload[self.bare_start : self.bare_end]

    @property
    def body_code(self) -> int | None:
        """``DATA``, ``AMQP_SEQUENCE`` or ``AMQP_VALUE`` (None: a message without a body)."""
        for s in self.sections:
            if s.code in _BODY:
                return s.code
        return None

    def find(self, code: int) -> Section | None:
        for s in self.sections:
            if s.code == code:
                return s
        return None

    def _decode(self, section: Section) -> Composite:
        try:
            value, _ = decode_value(self.payload, section.start)
        except DecodeError:
            raise
        except DECODE_ERRORS as exc:  # pragma: no cover - decode_value maps these itself
            raise decode_error("message section", exc) from exc
        assert isinstance(value, Composite)
        return value

    def header(self) -> Header | None:
        s = self.find(HEADER)
        return None if s is None else _as(self._decode(s), Header)

    def delivery_annotations(self) -> dict[Value, Value]:
        s = self.find(DELIVERY_ANNOTATIONS)
        return {} if s is None else _as(self._decode(s), DeliveryAnnotations).value

    def message_annotations(self) -> dict[Value, Value]:
        s = self.find(MESSAGE_ANNOTATIONS)
        return {} if s is None else _as(self._decode(s), MessageAnnotations).value

    def properties(self) -> Properties | None:
        s = self.find(PROPERTIES)
        return None if s is None else _as(self._decode(s), Properties)

    def application_properties(self) -> dict[Value, Value]:
        s = self.find(APPLICATION_PROPERTIES)
        return {} if s is None else _as(self._decode(s), ApplicationProperties).value

    def footer(self) -> dict[Value, Value]:
        s = self.find(FOOTER)
        return {} if s is None else _as(self._decode(s), Footer).value

    def body(self) -> list[Data] | AmqpValue | list[AmqpSequence] | None:
        """The body sections, decoded (data: their bytes are slices of the payload)."""
        code = self.body_code
        if code is None:
            return None
        parts = [self._decode(s) for s in self.sections if s.code == code]
        if code == AMQP_VALUE:
            return _as(parts[0], AmqpValue)
        if code == DATA:
            return [_as(p, Data) for p in parts]
        return [_as(p, AmqpSequence) for p in parts]

    def data(self) -> bytes:
        """The concatenated ``data`` sections (``b""`` for any other body)."""
        if self.body_code != DATA:
            return b""
        return b"".join(_as(self._decode(s), Data).value for s in self.sections if s.code == DATA)

    def reannotated(
        self,
        *,
        header: Header | None,
        delivery_annotations: dict[Value, Value] | None = None,
        message_annotations: dict[Value, Value] | None = None,
    ) -> list[bytes]:
        """The message with new header and annotations (empty ones left out) and the bare
        message and footer as they came: the pieces to send, without joining the body."""
        pieces: list[bytes] = []
        if header is not None:
            pieces.append(header.encode())
        if delivery_annotations:
            pieces.append(DeliveryAnnotations(delivery_annotations).encode())
        if message_annotations:
            pieces.append(MessageAnnotations(message_annotations).encode())
        pieces.append(self.payload[self.bare_start :])
        return pieces


_T = TypeVar("_T")


def _as(value: object, cls: type[_T]) -> _T:
    assert isinstance(value, cls)
    return value


def _section_code(payload: bytes, off: int) -> int:
    """The descriptor code of the section at ``off`` (numeric or symbolic descriptor)."""
    if payload[off] != fc.DESCRIBED:
        raise DecodeError(f"message: byte {off} is not the start of a described section")
    code = payload[off + 1]
    if code == fc.SMALLULONG:
        return payload[off + 2]
    descriptor, _ = decode_value(payload, off + 1)
    if isinstance(descriptor, int) and not isinstance(descriptor, bool):
        return descriptor
    if isinstance(descriptor, str):
        cls = composite_for(descriptor)
        if cls is not None:
            return cls.DESCRIPTOR_CODE
    raise DecodeError(f"message: unknown section descriptor {descriptor!r}")


def parse_message(payload: bytes | bytearray | memoryview) -> MessageSections:
    """Find the sections of ``payload`` (a whole transfer's message) and check their order."""
    data = payload if type(payload) is bytes else bytes(payload)
    sections: list[Section] = []
    off = 0
    n = len(data)
    rank = -1
    body_code = None
    try:
        while off < n:
            code = _section_code(data, off)
            r = _RANK.get(code)
            if r is None:
                raise DecodeError(f"message: section 0x{code:x} is not a message section")
            if code in _BODY and body_code is not None:
                # data and amqp-sequence may repeat; nothing else may, and kinds do not mix.
                if code != body_code or code == AMQP_VALUE or r < rank:
                    raise DecodeError("message: mixed, repeated or misplaced body sections")
            elif r <= rank:
                raise DecodeError(f"message: section 0x{code:x} out of order or repeated")
            if code in _BODY:
                body_code = code
            rank = r
            end = skip_value(data, off)
            sections.append(Section(code, off, end))
            off = end
    except DecodeError:
        raise
    except DECODE_ERRORS as exc:
        raise decode_error("message", exc) from exc
    bare = [s for s in sections if s.code in _BARE]
    if bare:
        start, end = bare[0].start, bare[-1].end
    else:
        footer = [s for s in sections if s.code == FOOTER]
        start = end = footer[0].start if footer else n
    return MessageSections(data, tuple(sections), start, end)


def encode_message(
    body: Body | None = None,
    *,
    header: Header | None = None,
    delivery_annotations: dict[Value, Value] | None = None,
    message_annotations: dict[Value, Value] | None = None,
    properties: Properties | None = None,
    application_properties: dict[Value, Value] | None = None,
    footer: dict[Value, Value] | None = None,
) -> bytes:
    """A message from its sections, in the spec's order (absent or empty ones left out)."""
    pieces: list[bytes] = []
    if header is not None:
        pieces.append(header.encode())
    if delivery_annotations:
        pieces.append(DeliveryAnnotations(delivery_annotations).encode())
    if message_annotations:
        pieces.append(MessageAnnotations(message_annotations).encode())
    if properties is not None:
        pieces.append(properties.encode())
    if application_properties:
        pieces.append(ApplicationProperties(application_properties).encode())
    if isinstance(body, list):
        pieces.extend(part.encode() for part in body)
    elif body is not None:
        pieces.append(body.encode())
    if footer:
        pieces.append(Footer(footer).encode())
    return b"".join(pieces)
