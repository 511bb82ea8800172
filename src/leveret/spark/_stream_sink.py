"""The sink over RabbitMQ's stream protocol: rows published in batches, with a publisher id.

Each task declares one publisher whose *reference* is its producer name
(``<prefix>-<batchId>-<partition>``, as the 0-9-1 sink's ``x-stream-producer``) and gives
row ``n`` of the task the publishing id ``n + 1``. The broker (Leveret and RabbitMQ alike)
keeps the highest publishing id stored per reference and drops (and still confirms) any id
not above it, so a replayed batch or a retried task publishes nothing twice. Before
publishing, the task asks for that highest id (``query_publisher_sequence``) and does not
even send the rows below it.

Rows become AMQP 1.0 messages by RabbitMQ 4's 0-9-1 → 1.0 mapping, the broker's one table
(``convert/amqp10_amqp091.py``; ``_records`` reads them back the same way):
``persistent`` / ``delivery_mode`` → header durable, ``priority`` and a numeric
``expiration`` → header priority / ttl, the ids, ``reply_to``, content type and encoding
and ``app_id`` (group-id) → the properties section, ``type`` → the ``x-basic-type``
annotation, ``headers`` → application properties, the value → one data section (a
non-numeric ``expiration``, which the table leaves out, goes in ``x-basic-expiration``).
The header is always written: without one, RabbitMQ 4 and Leveret take a message as
durable. Messages go out in publish frames of up to ``_FRAME_BYTES``, with at most
``max_in_flight`` unconfirmed. No pyspark import here.
"""

from __future__ import annotations

import struct
import time
from typing import TYPE_CHECKING, Any

from leveret.protocol.amqp10 import (
    ApplicationProperties,
    Header,
    MessageAnnotations,
    Properties,
)
from leveret.protocol.amqp10 import types as t
from leveret.protocol.rabbitstream.constants import Key
from leveret.spark._stream_client import StreamClient, StreamClientError

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa

    from leveret.spark._client import ConnectionParams

__all__ = ["encode_prefix", "publish_to_stream"]

_PUB_HEAD = struct.Struct(">IHHBi")  # size, key, version, publisher id, message count
_FRAME_BYTES = 1 << 18
_PUBLISHER = 1
_U32 = struct.Struct(">I")
_CACHE_MAX = 4096
_DATA8 = b"\x00\x53\x75\xa0"  # a data section, vbin8 / vbin32 (its size follows)
_DATA32 = b"\x00\x53\x75\xb0"


def encode_prefix(
    persistent: bool,
    headers: list[tuple[str, str | None]] | None,
    props: dict[str, Any] | None,
) -> bytes:
    """The sections of a message before its body (see the module docstring)."""
    p = props or {}
    mode = p.get("delivery_mode")
    durable = mode == 2 if mode is not None else persistent
    priority = p.get("priority")
    expiration = p.get("expiration")
    ttl = int(expiration) if isinstance(expiration, str) and expiration.isdigit() else None
    parts = [Header(durable=durable, priority=priority, ttl=ttl).encode()]
    annotations: dict[t.Value, t.Value] = {}
    if p.get("type") is not None:
        annotations[t.Symbol("x-basic-type")] = str(p["type"])
    if expiration is not None and ttl is None:
        annotations[t.Symbol("x-basic-expiration")] = str(expiration)
    if annotations:
        parts.append(MessageAnnotations(annotations).encode())
    user_id = p.get("user_id")
    content_type = p.get("content_type")
    content_encoding = p.get("content_encoding")
    section = Properties(
        message_id=p.get("message_id"),
        user_id=user_id.encode() if user_id is not None else None,
        reply_to=p.get("reply_to"),
        correlation_id=p.get("correlation_id"),
        content_type=t.Symbol(content_type) if content_type is not None else None,
        content_encoding=t.Symbol(content_encoding) if content_encoding is not None else None,
        group_id=None if p.get("app_id") is None else str(p["app_id"]),
    )
    if section != Properties():
        parts.append(section.encode())
    if headers:
        parts.append(ApplicationProperties(dict(headers)).encode())
    return b"".join(parts)


def publish_to_stream(
    params: ConnectionParams,
    stream: str,
    producer: str,
    batches: Iterator[pa.RecordBatch],
    *,
    body_column: str,
    headers_column: str | None,
    properties_column: str | None,
    persistent: bool,
    max_in_flight: int,
    confirm_timeout: float,
) -> int:
    """Publish every row of ``batches`` to ``stream``; returns how many rows are in the stream
    (confirmed now, or stored by an earlier attempt with the same ``producer``)."""
    client = StreamClient(params, timeout=confirm_timeout).connect()
    try:
        client.declare_publisher(_PUBLISHER, producer, stream)
        stored = client.publisher_sequence(producer, stream)
        budget = min(_FRAME_BYTES, client.frame_max - 64 if client.frame_max else _FRAME_BYTES)
        plain = encode_prefix(persistent, None, None)
        prefixes: dict[Any, bytes] = {}
        parts: list[bytes] = []
        count = 0
        size = 0
        sent = 0
        row = 0
        window = max_in_flight
        low = window // 2

        def emit() -> None:
            nonlocal parts, count, size
            frame = _PUB_HEAD.pack(size + 9, Key.PUBLISH, 1, _PUBLISHER, count)
            parts[0:0] = [frame]
            client.publish_frame(b"".join(parts))
            parts, count, size = [], 0, 0

        for batch in batches:
            bodies = batch.column(body_column).to_pylist()
            headers = batch.column(headers_column).to_pylist() if headers_column else None
            props = batch.column(properties_column).to_pylist() if properties_column else None
            for i, body in enumerate(bodies):
                row += 1
                if row <= stored:
                    continue  # an earlier attempt stored it
                if body is None:
                    raise ValueError(f"amqp sink: row {row - 1} has a null {body_column}")
                if isinstance(body, str):
                    body = body.encode()
                h = headers[i] if headers is not None else None
                p = props[i] if props is not None else None
                if h or p:
                    key = (tuple(h or ()), tuple(sorted((p or {}).items())))
                    prefix = prefixes.get(key)
                    if prefix is None:
                        if len(prefixes) >= _CACHE_MAX:
                            prefixes.clear()
                        prefix = prefixes[key] = encode_prefix(persistent, h, p)
                else:
                    prefix = plain
                n = len(body)
                head = _DATA8 + bytes((n,)) if n < 256 else _DATA32 + _U32.pack(n)
                record = len(prefix) + len(head) + n
                parts.append(struct.pack(">QI", row, record))
                parts.append(prefix)
                parts.append(head)
                parts.append(body)
                count += 1
                sent += 1
                size += 12 + record
                if size >= budget:
                    emit()
                    if sent - client.confirmed.get(_PUBLISHER, 0) >= window:
                        _wait(client, sent, low, confirm_timeout)
        if count:
            emit()
        _wait(client, sent, 0, confirm_timeout)
        return row
    finally:
        client.close()


def _wait(client: StreamClient, sent: int, at_most: int, timeout: float) -> None:
    """Flush, then read until at most ``at_most`` publishes are unconfirmed."""
    client.flush()
    deadline = time.monotonic() + timeout
    while sent - client.confirmed.get(_PUBLISHER, 0) > at_most and not client.errors:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise StreamClientError(
                f"timed out after {timeout:.1f} s waiting for"
                f" {sent - client.confirmed.get(_PUBLISHER, 0)} confirms"
            )
        client.poll(min(remaining, 1.0))
    if client.errors:
        _pid, publishing_id, code = client.errors[0]
        raise StreamClientError(
            f"the broker refused {len(client.errors)} message(s), the first (publishing id"
            f" {publishing_id}) with code 0x{code:02x}",
            code,
        )
