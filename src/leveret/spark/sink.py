"""The ``amqp`` sink: ``df.write`` / ``writeStream`` to an exchange with pipelined confirms.

Each task publishes its rows on one connection in confirm mode, keeping at most
``maxInFlight`` messages unconfirmed, and fails (so Spark retries it) on a nack, a return of a
``mandatory`` message, a broken connection or ``confirmTimeoutMs``. Every message carries
deterministic ids: producer ``<prefix>-<batchId>-<partition>`` in ``x-stream-producer``, its
row number in the task in ``x-stream-sequence`` and ``message_id``
``<prefix>-<batchId>-<partition>-<row>``, so a broker that de-duplicates (Leveret streams)
turns replays of the same batch into exactly-once.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    MapType,
    StringType,
    StructType,
)

from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp091.fieldtable import FieldValue, encode_table
from leveret.spark._arrow import PROPERTY_FIELDS
from leveret.spark._client import AmqpClient
from leveret.spark._stream_sink import publish_to_stream

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa

    from leveret.spark._options import Options

__all__ = ["AmqpBatchWriter", "AmqpStreamWriter", "PublishResult", "publish_batches"]

PRODUCER_HEADER = "x-stream-producer"
SEQUENCE_HEADER = "x-stream-sequence"

# Columns a read produces that a write passes over (so a read can be piped into a write).
_READ_ONLY_COLUMNS = frozenset(("queue", "offset", "timestamp", "redelivered"))
_KNOWN_COLUMNS = frozenset(("value", "body", "routing_key", "exchange", "headers", "properties"))

_H = struct.Struct(">H")
_I = struct.Struct(">I")
_Q = struct.Struct(">q")
_PRODUCER_KEY = b"\x11" + PRODUCER_HEADER.encode() + b"S"
_SEQUENCE_KEY = b"\x11" + SEQUENCE_HEADER.encode() + b"l"


@dataclass(frozen=True)
class PublishResult(WriterCommitMessage):
    """What one task published (reported to the driver's ``commit``)."""

    partition: int
    producer: str
    published: int


@dataclass(frozen=True)
class _Plan:
    """Checked once on the driver: which columns the writer uses."""

    body_column: str
    routing_key_column: str | None
    exchange_column: str | None
    headers_column: str | None
    properties_column: str | None


def plan_columns(schema: StructType, options: Options) -> _Plan:
    names = schema.fieldNames()
    unknown = [n for n in names if n not in _KNOWN_COLUMNS and n not in _READ_ONLY_COLUMNS]
    if unknown and not options.ignore_unknown_columns:
        raise ValueError(
            f"amqp sink: unknown columns {unknown} (expected value or body, routing_key,"
            " exchange, headers, properties); set ignoreUnknownColumns=true to drop them"
        )
    if "value" in names:
        body = "value"
    elif "body" in names:
        body = "body"
    else:
        raise ValueError("amqp sink: a value (or body) column is required")
    if not isinstance(schema[body].dataType, BinaryType | StringType):
        raise ValueError(f"amqp sink: column {body} must be binary or string")
    rk = "routing_key" if "routing_key" in names else None
    if rk is None and options.routing_key is None and not options.stream:
        raise ValueError("amqp sink: set the routingKey option or add a routing_key column")
    headers = "headers" if "headers" in names else None
    if headers is not None:
        t = schema[headers].dataType
        if not (isinstance(t, MapType) and isinstance(t.keyType, StringType)):
            raise ValueError("amqp sink: headers must be a map<string, string>")
    props = "properties" if "properties" in names else None
    if props is not None and not isinstance(schema[props].dataType, StructType):
        raise ValueError("amqp sink: properties must be a struct")
    return _Plan(body, rk, "exchange" if "exchange" in names else None, headers, props)


def _shortstr(text: str) -> bytes:
    raw = text.encode()
    if len(raw) > 255:
        raise ValueError(f"message id longer than 255 bytes: {text[:40]!r}...")
    return bytes((len(raw),)) + raw


def _fast_properties(producer: bytes, row: int, message_id: bytes, persistent: bool) -> bytes:
    """headers {x-stream-producer, x-stream-sequence} [+ delivery-mode 2] + message-id."""
    table = b"".join((_PRODUCER_KEY, _I.pack(len(producer)), producer, _SEQUENCE_KEY, _Q.pack(row)))
    flags = 0x2000 | 0x0080 | (0x1000 if persistent else 0)
    return b"".join(
        (
            _H.pack(flags),
            _I.pack(len(table)),
            table,
            b"\x02" if persistent else b"",
            message_id,
        )
    )


def _properties(
    producer: str,
    row: int,
    message_id: str,
    persistent: bool,
    headers: list[tuple[str, str | None]] | None,
    props: dict[str, Any] | None,
) -> bytes:
    table: dict[str, FieldValue] = {}
    if headers:
        table.update((k, v) for k, v in headers)
    table[PRODUCER_HEADER] = producer
    table[SEQUENCE_HEADER] = row
    values: dict[str, Any] = {
        "headers": table,
        "delivery_mode": 2 if persistent else None,
        "message_id": message_id,
    }
    if props:
        for name in PROPERTY_FIELDS:
            value = props.get(name)
            if value is not None:
                values[name] = value
    encode_table(table)  # fails early with a clear error on a bad header
    return BasicProperties(**values).encode()


def publish_batches(
    options: Options,
    plan: _Plan,
    batches: Iterator[pa.RecordBatch],
    producer: str,
) -> int:
    """Publish every row of ``batches``; return how many were published and confirmed."""
    client = AmqpClient(options.params, timeout=options.confirm_timeout).connect()
    try:
        client.confirm_select()
        frame_max = client.frame_max
        persistent = options.persistent
        window = options.max_in_flight or 1000
        low = window // 2
        producer_raw = producer.encode()
        methods: dict[tuple[str, str], bytes] = {}
        mandatory = options.mandatory
        row = 0
        for batch in batches:
            bodies = batch.column(plan.body_column).to_pylist()
            n = len(bodies)
            keys: list[str | None] = (
                batch.column(plan.routing_key_column).to_pylist()
                if plan.routing_key_column
                else [options.routing_key or ""] * n
            )
            exchanges = (
                batch.column(plan.exchange_column).to_pylist()
                if plan.exchange_column
                else [options.exchange] * n
            )
            headers = batch.column(plan.headers_column).to_pylist() if plan.headers_column else None
            props = (
                batch.column(plan.properties_column).to_pylist() if plan.properties_column else None
            )
            for i in range(n):
                body = bodies[i]
                if body is None:
                    raise ValueError(f"amqp sink: row {row} has a null {plan.body_column}")
                if isinstance(body, str):
                    body = body.encode()
                exchange: str = exchanges[i] if exchanges[i] is not None else options.exchange
                key = keys[i]
                if key is None:
                    key = options.routing_key or ""
                method = methods.get((exchange, key))
                if method is None:
                    if len(methods) > 10000:
                        methods.clear()
                    method = methods[(exchange, key)] = m.BasicPublish(
                        exchange=exchange, routing_key=key, mandatory=mandatory
                    ).encode()
                message_id = f"{producer}-{row}"
                h = headers[i] if headers is not None else None
                p = props[i] if props is not None else None
                if h or p:
                    raw = _properties(producer, row, message_id, persistent, h, p)
                else:
                    raw = _fast_properties(producer_raw, row, _shortstr(message_id), persistent)
                client.publish_frames(
                    framing.encode_message_frames(1, method, 60, body, raw, frame_max)
                )
                row += 1
                if client.in_flight >= window:
                    client.wait_confirms(low, options.confirm_timeout)
        client.wait_confirms(0, options.confirm_timeout)
        return row
    finally:
        client.close()


def publish(options: Options, plan: _Plan, batches: Iterator[pa.RecordBatch], producer: str) -> int:
    """Publish over the protocol the driver chose (``_protocol.resolve_write``)."""
    if options.protocol == "stream":
        assert options.stream is not None
        return publish_to_stream(
            options.stream_params,
            options.stream,
            producer,
            batches,
            body_column=plan.body_column,
            headers_column=plan.headers_column,
            properties_column=plan.properties_column,
            persistent=options.persistent,
            max_in_flight=options.max_in_flight or 20000,
            confirm_timeout=options.confirm_timeout,
        )
    return publish_batches(options, plan, batches, producer)


def _task_ids() -> tuple[int, int | None]:
    """(partition id, streaming batch id or None) of the running task."""
    ctx = TaskContext.get()
    if ctx is None:
        return 0, None
    batch_id = ctx.getLocalProperty("streaming.sql.batchId")
    return ctx.partitionId(), int(batch_id) if batch_id is not None else None


def _query_id() -> str | None:
    ctx = TaskContext.get()
    return ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None


class AmqpBatchWriter(DataSourceArrowWriter):
    """``df.write.format("amqp")``: batch id 0; prefix ``messageIdPrefix`` or a fresh one."""

    def __init__(self, options: Options, schema: StructType, prefix: str | None) -> None:
        self.options = options
        self.plan = plan_columns(schema, options)
        self.prefix = prefix or uuid.uuid4().hex[:12]

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        partition, _ = _task_ids()
        producer = f"{self.prefix}-0-{partition}"
        count = publish(self.options, self.plan, iterator, producer)
        return PublishResult(partition, producer, count)


class AmqpStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("amqp")``: producer ``<prefix>-<batchId>-<partition>``.

    The default prefix is the query id, which a restart from the same checkpoint keeps, so a
    batch replayed after a failure carries the same ids as its first attempt.
    """

    def __init__(self, options: Options, schema: StructType, prefix: str | None) -> None:
        self.options = options
        self.plan = plan_columns(schema, options)
        self.prefix = prefix

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        partition, batch_id = _task_ids()
        prefix = self.prefix or _query_id() or "leveret"
        producer = f"{prefix}-{batch_id if batch_id is not None else 0}-{partition}"
        count = publish(self.options, self.plan, iterator, producer)
        return PublishResult(partition, producer, count)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every message was confirmed before its task finished."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Published messages cannot be withdrawn; a replay with the same ids de-duplicates."""
