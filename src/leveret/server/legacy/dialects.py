"""What AMQP 0-8 and 0-9 change from 0-9-1 on the wire, as data: one ``Dialect`` per
version, read by the legacy front end (``connection.py``) at its edge.

Most methods of 0-8 and 0-9 are 0-9-1's, octet for octet (0-9-1 renamed the ``ticket``
fields ``reserved``, kept their types, and dropped classes). A dialect lists only what
differs, so every method the versions share is decoded and handled by the 0-9-1 code:

- ``renamed``: methods a client sends under another id (0-8's ``connection.close`` is 10/60,
  0-9-1's 10/50): the id is rewritten and the 0-9-1 method handles it;
- ``own``: methods that exist only in the older version (``access``, ``file``, ``stream``,
  ``message``, ``channel.ping``...): decoded with the version's own codec and handled by
  ``handlers.py``;
- ``refused``: ids RabbitMQ 3.10.8 answers with ``connection.close`` 541 (the other version's
  ``connection.close``, or 0-9-1's ``connection.blocked`` from a client);
- ``padded``: methods whose 0-9-1 form has more trailing arguments (0-8's ``basic.consume``
  has no ``arguments`` table): the octets of their empty values are appended;
- ``outbound``: replies whose encoding differs (0-8's ``channel.open-ok`` has no field);
- ``capabilities``: whether connection.start carries RabbitMQ's capabilities table (0-8's
  field tables cannot hold its booleans, so RabbitMQ sends an empty one).

The tables are checked against the generated method sets by ``tests/unit/server/
test_legacy_dialects.py``: every id of a version is either shared with 0-9-1 octet for
octet, renamed, or its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from leveret.protocol.amqp08 import framing as framing08
from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp09 import framing as framing09
from leveret.protocol.amqp09._generated import methods as m09
from leveret.protocol.amqp091._generated import methods as m

__all__ = ["AMQP08", "AMQP09", "DIALECTS", "Dialect", "index"]


def index(class_id: int, method_id: int) -> int:
    return (class_id << 16) | method_id


Encoder = Callable[[m.Method], bytes]


def _close_08(method: m.Method) -> bytes:
    assert isinstance(method, m.ConnectionClose)
    return m08.ConnectionClose(
        reply_code=method.reply_code,
        reply_text=method.reply_text,
        class_id=method.class_id,
        method_id=method.method_id,
    ).encode()


def _close_ok_08(method: m.Method) -> bytes:
    return m08.ConnectionCloseOk().encode()


def _channel_open_ok_08(method: m.Method) -> bytes:
    return m08.ChannelOpenOk().encode()


def _dropped(method: m.Method) -> bytes:
    # connection.blocked/unblocked: 10/60 and 10/61 are connection.close/close-ok in 0-8.
    return b""


@dataclass(frozen=True)
class Dialect:
    """One older version of the protocol, as differences from 0-9-1."""

    name: str
    headers: frozenset[bytes]
    version_major: int
    version_minor: int
    # The version's own decoder (class-id, method-id, arguments -> its generated class).
    decode: Callable[[bytes | memoryview], Any]
    renamed: dict[int, int]
    own: frozenset[int]
    refused: frozenset[int]
    padded: dict[int, bytes]
    outbound: dict[int, Encoder]
    capabilities: bool


def _own(
    methods: dict[int, type[Any]], renamed: dict[int, int], refused: frozenset[int]
) -> frozenset[int]:
    """The version's ids that are not 0-9-1's (by id and name), less the renamed/refused."""
    out = set()
    for key, cls in methods.items():
        shared = m.METHODS.get(key)
        if shared is not None and shared.NAME == cls.NAME:
            continue
        if key in renamed or key in refused:
            continue
        out.add(key)
    return frozenset(out)


_RENAMED_08 = {index(10, 60): index(10, 50), index(10, 61): index(10, 51)}
_REFUSED_08 = frozenset({index(10, 50), index(10, 51)})
# 0-8's basic.recover (60/100) is 0-9-1's basic.recover-async octet for octet, 0-8's
# recover-sync (60/110, RabbitMQ's) 0-9-1's basic.recover: both are shared, not own.
_SHARED_08 = frozenset({index(60, 100), index(60, 110), index(60, 111)})

AMQP08 = Dialect(
    name="0-8",
    headers=framing08.PROTOCOL_HEADERS,
    version_major=8,
    version_minor=0,
    decode=m08.decode_method,
    renamed=_RENAMED_08,
    own=_own(m08.METHODS, _RENAMED_08, _REFUSED_08) - _SHARED_08,
    refused=_REFUSED_08,
    # Qpid's 0-8 clients send the table (their XML has it), plain 0-8 ones do not; the 0-9-1
    # decoder reads the first table and ignores the padding after it.
    padded={m.BasicConsume.INDEX: b"\x00\x00\x00\x00"},
    outbound={
        m.ConnectionClose.INDEX: _close_08,
        m.ConnectionCloseOk.INDEX: _close_ok_08,
        m.ChannelOpenOk.INDEX: _channel_open_ok_08,
        m.ConnectionBlocked.INDEX: _dropped,
        m.ConnectionUnblocked.INDEX: _dropped,
    },
    capabilities=False,
)

# 0-9 (Qpid's clients): RabbitMQ answers it with 0-9-1's method set, which shares 0-9's ids;
# 0-9's own methods come on top. 10/60 and 10/61 are 0-9-1's connection.blocked/unblocked,
# which a client may not send: RabbitMQ closes with 541.
_REFUSED_09 = frozenset({index(10, 60), index(10, 61)})
# 0-9's basic.recover (60/100, no reply) is 0-9-1's basic.recover-async.
_SHARED_09 = frozenset({index(60, 100)})

AMQP09 = Dialect(
    name="0-9",
    headers=frozenset({framing09.PROTOCOL_HEADER}),
    version_major=0,
    version_minor=9,
    decode=m09.decode_method,
    renamed={},
    own=_own(m09.METHODS, {}, _REFUSED_09) - _SHARED_09,
    refused=_REFUSED_09,
    padded={},
    outbound={},
    capabilities=True,
)

DIALECTS = (AMQP08, AMQP09)
