"""Erlang's ``erlang:phash2/1`` and RabbitMQ's jump consistent hash, bit for bit.

RabbitMQ's hashing exchanges choose a destination with Erlang's portable term hash
(``x-modulus-hash``: ``phash2(RoutingKeys) rem N``; ``x-consistent-hash``: a jump
consistent hash seeded with the ``phash2`` of the value hashed on). For a Leveret exchange
to send every key where RabbitMQ sends it, both are computed here exactly as the Erlang VM
does; ``tests/data/consistent-hash/`` holds what Erlang/OTP 25 and RabbitMQ 3.10.8 gave for
the same inputs.

- :func:`phash2` is ``make_hash2`` of the VM (Bob Jenkins' 96-bit mix over the term's
  structure) masked to 27 bits. Terms are given as Python values: ``bytes`` for binaries,
  :class:`Atom` for atoms, ``int`` (any width), ``float``, ``tuple`` for tuples, ``list``
  for proper lists. phash2 is documented as stable across VM versions and machines.
- :func:`jump_consistent_hash` is the plugin's ``jump_consistent_hash/2``: Lamping and
  Veach's jump hash, its random numbers drawn from ``rand``'s ``exs1024`` generator
  (xorshift1024*, seeded from ``{Key, Key, Key}`` through xorshift64*) as ``uniform_s/1``
  turns them into floats.
- :func:`field_term` is the Erlang term RabbitMQ holds for a header value
  (``rabbit_misc:table_lookup`` returns ``{Type, Value}``).

Imports nothing from leveret.
"""

from __future__ import annotations

import datetime
import struct
from decimal import Decimal
from typing import Final, TypeAlias

__all__ = [
    "FALSE",
    "TRUE",
    "UNDEFINED",
    "Atom",
    "Term",
    "erlang_repr",
    "field_term",
    "jump_consistent_hash",
    "phash2",
]

_M32: Final = 0xFFFFFFFF
_M64: Final = (1 << 64) - 1
_HCONST: Final = 0x9E3779B9  # the golden ratio, Jenkins' arbitrary start
_PHASH2_MASK: Final = (1 << 27) - 1
# The VM's "tag" constants: HCONST times 2 ... 13, modulo 2^32.
_H_NIL: Final = (_HCONST * 2) & _M32
_H_ATOM: Final = (_HCONST * 3) & _M32
_H_BYTES_LIST: Final = (_HCONST * 4) & _M32
_H_TUPLE: Final = (_HCONST * 9) & _M32
_H_NEG_BIG: Final = (_HCONST * 10) & _M32
_H_POS_BIG: Final = (_HCONST * 11) & _M32
_H_FLOAT: Final = (_HCONST * 12) & _M32
_H_BINARY: Final = (_HCONST * 13) & _M32
# What make_hash2 gives [] alone; inside a term [] mixes in NIL_DEF (2).
_NIL_ALONE: Final = 3468870702
_NIL_DEF: Final = 2
_SMALL28: Final = 1 << 27
_WORDS: Final = struct.Struct("<3I")
_DOUBLE: Final = struct.Struct("<d")
_TWO_WORDS: Final = struct.Struct("<II")


class Atom(str):
    """An Erlang atom (a ``str`` subclass, so that it never equals a binary's ``bytes``)."""

    __slots__ = ()


UNDEFINED: Final = Atom("undefined")
TRUE: Final = Atom("true")
FALSE: Final = Atom("false")

Term: TypeAlias = "bytes | Atom | int | float | tuple[Term, ...] | list[Term]"


def _mix3(a: int, b: int, c: int) -> tuple[int, int, int]:
    """Jenkins' mix of three 32-bit words."""
    a = (a - b - c) & _M32
    a ^= c >> 13
    b = (b - c - a) & _M32
    b ^= (a << 8) & _M32
    c = (c - a - b) & _M32
    c ^= b >> 13
    a = (a - b - c) & _M32
    a ^= c >> 12
    b = (b - c - a) & _M32
    b ^= (a << 16) & _M32
    c = (c - a - b) & _M32
    c ^= b >> 5
    a = (a - b - c) & _M32
    a ^= c >> 3
    b = (b - c - a) & _M32
    b ^= (a << 10) & _M32
    c = (c - a - b) & _M32
    c ^= b >> 15
    return a, b, c


def _hash2(x: int, y: int, const: int, h: int) -> int:
    """The VM's ``UINT32_HASH_2``: two words and a type constant mixed into ``h``."""
    return _mix3((const + x) & _M32, (const + y) & _M32, h)[2]


def _block_hash(data: bytes, initval: int) -> int:
    """Jenkins' lookup2 over a binary (the VM's ``block_hash``), 12 bytes a round."""
    a = b = _HCONST
    c = initval
    size = len(data)
    whole = size - size % 12
    for off in range(0, whole, 12):
        wa, wb, wc = _WORDS.unpack_from(data, off)
        a = (a + wa) & _M32
        b = (b + wb) & _M32
        a, b, c = _mix3(a, b, (c + wc) & _M32)
    rest = data[whole:] + bytes(12 - (size - whole))
    wa, wb, wc = _WORDS.unpack(rest)
    a = (a + wa) & _M32
    b = (b + wb) & _M32
    # The first byte of c is the length's: the tail's bytes 8-10 go above it.
    c = (c + size + ((wc << 8) & _M32)) & _M32
    return _mix3(a, b, c)[2]


def _atom_value(name: str) -> int:
    """The atom table's hash of an atom's name (hashpjw over its Latin-1 bytes)."""
    h = 0
    for octet in name.encode("latin-1", "replace"):
        h = ((h << 4) + octet) & _M32
        top = h & 0xF0000000
        if top:
            h ^= top >> 24
            h ^= top
    return h


class _Tail:
    """The rest of a list still to hash (a marker on the work stack)."""

    __slots__ = ("items",)

    def __init__(self, items: list[Term]) -> None:
        self.items = items


_NIL: Final = object()


def phash2(term: Term) -> int:
    """``erlang:phash2(Term)``: 0 to 2^27 - 1."""
    return _make_hash2(term) & _PHASH2_MASK


def _make_hash2(term: Term) -> int:
    h = 0
    stack: list[object] = [term]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            h = _list(item, h, stack)
        elif isinstance(item, _Tail):
            stack.append(item.items)
        elif item is _NIL:
            h = _NIL_ALONE if h == 0 else _hash2(_NIL_DEF, 0, _H_NIL, h)
        elif isinstance(item, Atom):
            value = _atom_value(item)
            h = value if h == 0 else _hash2(value, 0, _H_ATOM, h)
        elif isinstance(item, bool):
            raise TypeError("a boolean is the atom true or false in Erlang: use TRUE/FALSE")
        elif isinstance(item, int):
            h = _integer(item, h)
        elif isinstance(item, bytes):
            const = (_H_BINARY + h) & _M32
            h = _block_hash(item, const) if item else const
        elif isinstance(item, tuple):
            h = _hash2(len(item), 0, _H_TUPLE, h)
            stack.extend(reversed(item))
        elif isinstance(item, float):
            if item == 0.0:
                item = 0.0  # -0.0 hashes as 0.0
            low, high = _TWO_WORDS.unpack(_DOUBLE.pack(item))
            h = _hash2(high, low, _H_FLOAT, h)
        else:
            raise TypeError(f"not an Erlang term: {item!r}")
    return h


def _integer(value: int, h: int) -> int:
    if -_SMALL28 <= value < _SMALL28:
        # SINT32_HASH: a negative small is mixed twice (its magnitude, then itself).
        if value < 0:
            h = _hash2(-value, 0, _HCONST, h)
        return _hash2(value & _M32, 0, _HCONST, h)
    const, magnitude = (_H_NEG_BIG, -value) if value < 0 else (_H_POS_BIG, value)
    while True:
        h = _hash2(magnitude & _M32, (magnitude >> 32) & _M32, const, h)
        magnitude >>= 64
        if not magnitude:
            return h


def _list(items: list[Term], h: int, stack: list[object]) -> int:
    """A proper list: a leading run of bytes (0-255) four at a time, as the VM's string
    shortcut does, then the first other element, its tail after it, then ``[]``."""
    count = 0
    packed = 0
    i = 0
    size = len(items)
    while i < size:
        item = items[i]
        if not (type(item) is int and 0 <= item <= 255):
            break
        packed = ((packed << 8) + item) & _M32
        if count == 3:
            h = _hash2(packed, 0, _H_BYTES_LIST, h)
            count = packed = 0
        else:
            count += 1
        i += 1
    if count:
        h = _hash2(packed, 0, _H_BYTES_LIST, h)
    if i < size:
        stack.append(_Tail(items[i + 1 :]))
        stack.append(items[i])
    else:
        stack.append(_NIL)
    return h


# -- the jump consistent hash ------------------------------------------------------------


def _xorshift64star(state: int) -> tuple[int, int]:
    """``rand``'s exs64 step: (output, next state)."""
    state ^= state >> 12
    state ^= (state << 25) & _M64
    state ^= state >> 27
    return (state * 2685821657736338717) & _M64, state


def _exs1024_seed(key: int) -> list[int]:
    """The 16 words of ``rand:seed_s(exs1024, {Key, Key, Key})``, in the order the
    generator reads them."""
    low = key & 0x1FFFFF
    b1 = ((low + 1) * 2097131) & 0x1FFFFF
    b2 = ((low + 1) * 2097133) & 0x1FFFFF
    b3 = ((low + 1) * 2097143) & 0x1FFFFF
    state = (b1 << 43) | (b2 << 22) | (b3 << 1) | 1
    words = []
    for _ in range(16):
        word, state = _xorshift64star(state)
        words.append(word)
    words.reverse()  # rand builds the list by prepending
    return words


def jump_consistent_hash(key: int, buckets: int) -> int:
    """The bucket (0 to ``buckets`` - 1) of an integer key, as RabbitMQ's consistent-hash
    exchange computes it (``jump_consistent_hash/2`` with ``rand``'s exs1024)."""
    if buckets <= 1:
        return 0
    ring = _exs1024_seed(key)
    p = 0
    b = -1
    j = 0
    while j < buckets:
        b = j
        # xorshift1024*: s0 = ring[p], s1 = ring[p+1], the new word replaces s1.
        s0 = ring[p]
        p = (p + 1) & 15
        s1 = ring[p]
        s1 ^= (s1 << 31) & _M64
        word = s1 ^ s0 ^ (s1 >> 11) ^ (s0 >> 30)
        ring[p] = word
        output = (word * 1181783497276652981) & _M64
        # uniform_s/1 for a 64-bit generator: the top 53 bits as N * 2^-53.
        r = (output >> 11) * 1.11022302462515657e-16
        if r == 0.0:
            return b  # Erlang would crash dividing by zero; one draw in 2^53
        j = int((b + 1) / r)
    return b


# -- header values as RabbitMQ holds them ------------------------------------------------

_INT32: Final = 1 << 31
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def field_term(value: object) -> Term:
    """The ``{Type, Value}`` term ``rabbit_misc:table_lookup`` returns for a header value
    decoded by Leveret. Integers are typed as a client that picks the narrowest of int32
    and int64 sends them (pika, Leveret's own encoder): ``signedint`` or ``long``; a
    string is ``longstr``, bytes are ``binary`` (pika's ``x``)."""
    if value is None:
        return (Atom("void"), UNDEFINED)
    if isinstance(value, bool):
        return (Atom("bool"), TRUE if value else FALSE)
    if isinstance(value, int):
        return (Atom("signedint" if -_INT32 <= value < _INT32 else "long"), value)
    if isinstance(value, float):
        return (Atom("double"), value)
    if isinstance(value, Decimal):
        sign, digits, exponent = value.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        scale = -exponent if isinstance(exponent, int) else 0
        # RabbitMQ reads a decimal's value as an unsigned 32-bit integer.
        return (Atom("decimal"), (scale, unscaled & _M32))
    if isinstance(value, str):
        return (Atom("longstr"), value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bytes | bytearray | memoryview):
        return (Atom("binary"), bytes(value))
    if isinstance(value, datetime.datetime):
        stamp = value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
        return (Atom("timestamp"), int((stamp - _EPOCH).total_seconds()))
    if isinstance(value, dict):
        entries: list[Term] = []
        for name, item in value.items():
            typed = field_term(item)
            assert isinstance(typed, tuple)
            entries.append((str(name).encode("utf-8", "surrogatepass"), *typed))
        return (Atom("table"), entries)
    if isinstance(value, list | tuple):
        return (Atom("array"), [field_term(item) for item in value])
    return (Atom("longstr"), str(value).encode())


_ESCAPES: Final = {
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
    ord("\v"): "\\v",
    ord("\b"): "\\b",
    ord("\f"): "\\f",
    27: "\\e",
    ord('"'): '\\"',
    ord("\\"): "\\\\",
}


def erlang_repr(binary: bytes) -> str:
    """A binary as ``io_lib:format("~p", ...)`` prints it (Latin-1 printable range): a
    quoted string when every byte is printable, else the list of byte values."""
    if all(32 <= o <= 126 or o >= 160 or o in _ESCAPES for o in binary):
        text = "".join(_ESCAPES.get(o, chr(o)) for o in binary)
        return f'<<"{text}">>' if binary else "<<>>"
    return "<<" + ",".join(str(o) for o in binary) + ">>"
