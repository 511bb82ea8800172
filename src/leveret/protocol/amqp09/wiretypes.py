"""Codecs of the method-argument types the 0-9 specs add to 0-9-1's; generated code imports it.

- ``content`` (0-9 ``message.transfer``'s ``body``): the XML names the domain but does not
  define it. The reading, the one Qpid's 0-9 codec used: one octet (0 = the body inline,
  1 = the name of a reference built with ``message.open``/``append``/``close``), then a long
  string. Any other first octet is malformed.
- ``rfc1982-long-set`` (working draft: ``session.ack``, ``execution.complete``, the
  ``message`` class's ``transfers``): "pairs of RFC-1982 numbers representing a discontinuous
  range". The reading: a short count of the numbers that follow (so twice the number of
  ranges), then each as a long; an odd count is malformed. Values are ``(first, last)`` pairs.

Every error is a ``struct.error``, ``IndexError`` or ``ValueError``, which the generated
code turns into :class:`leveret.errors.SyntaxError_`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["Content", "decode_content", "decode_long_set", "encode_content", "encode_long_set"]

_BL = struct.Struct(">BL")
_H = struct.Struct(">H")
_L = struct.Struct(">L")

_INLINE = 0
_REFERENCE = 1


@dataclass(frozen=True, slots=True)
class Content:
    """A 0-9 message body: the bytes themselves, or (``reference``) a reference's name."""

    data: bytes = b""
    reference: bool = False


def encode_content(value: Content) -> bytes:
    """Encode ``value`` as the kind octet and a long string."""
    return _BL.pack(_REFERENCE if value.reference else _INLINE, len(value.data)) + value.data


def decode_content(buf: bytes | memoryview, offset: int) -> tuple[Content, int]:
    """Decode the content at ``offset``; return (content, offset after it)."""
    kind, size = _BL.unpack_from(buf, offset)
    if kind not in (_INLINE, _REFERENCE):
        raise ValueError(f"content kind {kind} is neither inline (0) nor reference (1)")
    start = offset + 5
    end = start + size
    if end > len(buf):
        raise IndexError("content runs past the end of the frame")
    return Content(bytes(buf[start:end]), kind == _REFERENCE), end


def encode_long_set(ranges: tuple[tuple[int, int], ...]) -> bytes:
    """Encode ``(first, last)`` ranges as a count of numbers and the numbers."""
    numbers = [n for pair in ranges for n in pair]
    return _H.pack(len(numbers)) + struct.pack(f">{len(numbers)}L", *numbers)


def decode_long_set(
    buf: bytes | memoryview, offset: int
) -> tuple[tuple[tuple[int, int], ...], int]:
    """Decode the set at ``offset``; return (ranges, offset after it)."""
    count = _H.unpack_from(buf, offset)[0]
    if count % 2:
        raise ValueError(f"a set of ranges holds pairs, not {count} numbers")
    numbers = struct.unpack_from(f">{count}L", buf, offset + 2)
    pairs = tuple(zip(numbers[::2], numbers[1::2], strict=True))
    return pairs, offset + 2 + 4 * count
