"""The ``amqp`` PySpark data source: readers over stream and classic queues, and the sink.

Register it once per session, then use ``format("amqp")``::

    from leveret.spark import AmqpDataSource
    spark.dataSource.register(AmqpDataSource)
    df = spark.read.format("amqp").option("uri", url).option("queue", "events").load()

Stream queues (default ``queueMode=stream``) are read by offset range on executors; the offsets
``{"queue": next}`` live in Spark's checkpoint only. Classic queues (``queueMode=consume``) are
consumed on the driver and acked only once Spark has committed the batch that holds them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    SimpleDataSourceStreamReader,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from leveret.spark._arrow import build_batch
from leveret.spark._client import AmqpClient, Deliveries
from leveret.spark._options import EARLIEST, LATEST, Options, parse_offsets_spec
from leveret.spark._protocol import resolve_read, resolve_write
from leveret.spark._schema import READ_STRUCT
from leveret.spark._stream_reads import StreamTailFinder, read_range_chunks
from leveret.spark._streams import OffsetRange, TailFinder, plan_ranges, read_range
from leveret.spark.sink import AmqpBatchWriter, AmqpStreamWriter

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["AmqpDataSource"]


@dataclass(frozen=True)
class _RangePartition(InputPartition):
    """One offset range plus what the executor needs to read it (pickled to the task)."""

    rng: OffsetRange
    options: Options

    def __init__(self, rng: OffsetRange, options: Options) -> None:
        object.__setattr__(self, "rng", rng)
        object.__setattr__(self, "options", options)
        object.__setattr__(self, "value", (rng.queue, rng.start, rng.end))


def _read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, _RangePartition)
    o = partition.options
    if o.protocol == "stream":
        yield from read_range_chunks(
            o.stream_params,
            partition.rng,
            credit=o.credit,
            read_timeout=o.read_timeout,
            fail_on_data_loss=o.fail_on_data_loss,
            include_headers=o.include_headers,
            batch_rows=o.batch_rows,
            probe_timeout=o.tail_probe_timeout,
        )
        return
    yield from read_range(
        o.params,
        partition.rng,
        prefetch=o.prefetch,
        read_timeout=o.read_timeout,
        fail_on_data_loss=o.fail_on_data_loss,
        include_headers=o.include_headers,
        batch_rows=o.batch_rows,
        tail_window=o.tail_probe_window,
    )


def _finder(o: Options, *, streaming: bool) -> TailFinder | StreamTailFinder:
    if o.protocol == "stream":
        return StreamTailFinder(o.stream_params, timeout=o.tail_probe_timeout, wait=o.read_timeout)
    # A batch read resolves "latest" once and wants all of it; a trigger wants it fast.
    cap = o.tail_probe_max if streaming else o.read_timeout
    return TailFinder(o.params, window=o.tail_probe_window, timeout=o.tail_probe_timeout, cap=cap)


def _resolve(finder: TailFinder | StreamTailFinder, queue: str, offset: int) -> int:
    if offset == EARLIEST:
        return finder.first_offset(queue)
    if offset == LATEST:
        return finder.next_offset(queue)
    return offset


def _starting(o: Options, finder: TailFinder | StreamTailFinder, default: str) -> dict[str, int]:
    if o.starting_offsets is None and o.starting_timestamp is not None:
        return {q: finder.offset_for_timestamp(q, o.starting_timestamp) for q in o.queues}
    spec = parse_offsets_spec(o.starting_offsets or default, o.queues, "startingOffsets")
    return {q: _resolve(finder, q, n) for q, n in spec.items()}


class AmqpDataSource(DataSource):
    """``format("amqp")``: stream and classic queues of an AMQP 0-9-1 broker."""

    @classmethod
    def name(cls) -> str:
        return "amqp"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = Options.parse(options, need_queue=False)

    def schema(self) -> StructType:
        return READ_STRUCT

    def _source_options(self) -> Options:
        if not self.parsed.queues:
            raise ValueError("option queue (or queues) is required to read")
        return self.parsed

    def reader(self, schema: StructType) -> DataSourceReader:
        o = resolve_read(self._source_options())
        if o.queue_mode == "consume":
            return ClassicBatchReader(o)
        return StreamBatchReader(o)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        o = resolve_read(self._source_options())
        if o.queue_mode == "consume":
            # Spark then falls back to simpleStreamReader(): classic queues are consumed on
            # the driver, where the acks for committed batches can be sent.
            raise PySparkNotImplementedError(
                errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"}
            )
        return StreamQueueReader(o)

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        o = self._source_options()
        if o.queue_mode != "consume":
            # Spark prefers streamReader(); reaching here means it is not implemented there.
            raise ValueError("stream queues are read with the partitioned stream reader")
        return ClassicStreamReader(o)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        o = resolve_write(self.parsed, schema.fieldNames())
        return AmqpBatchWriter(o, schema, prefix=o.message_id_prefix)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        o = resolve_write(self.parsed, schema.fieldNames())
        return AmqpStreamWriter(o, schema, prefix=o.message_id_prefix)


# -- stream queues ------------------------------------------------------------------------


class StreamBatchReader(DataSourceReader):
    """Batch read of stream queues: ``[startingOffsets, endingOffsets)``, resolved at planning."""

    def __init__(self, options: Options) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        finder = _finder(o, streaming=False)
        try:
            start = _starting(o, finder, "earliest")
            spec = parse_offsets_spec(o.ending_offsets or "latest", o.queues, "endingOffsets")
            if EARLIEST in spec.values():
                raise ValueError("endingOffsets cannot be earliest")
            end = {q: _resolve(finder, q, n) for q, n in spec.items()}
        finally:
            finder.close()
        ranges = plan_ranges(start, end, o.min_partitions, o.max_records_per_partition)
        return [_RangePartition(r, o) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(partition)


class StreamQueueReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Structured Streaming over stream queues; offsets ``{"queue": next offset to read}``.

    Runs in one long-lived Python process on the driver: the tail-discovery connection is
    reused across triggers. ``commit`` writes nothing back: the checkpoint is the only truth.
    """

    def __init__(self, options: Options) -> None:
        self.options = options
        self._finder = _finder(options, streaming=True)
        self._latest: dict[str, int] | None = None
        self._available_now: dict[str, int] | None = None

    def initialOffset(self) -> dict[str, int]:
        return _starting(self.options, self._finder, "latest")

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {q: self._finder.next_offset(q) for q in self.options.queues}

    def _start_of(self, start: dict[str, int], queue: str) -> int:
        if queue in start:
            return int(start[queue])
        # A queue added to the list after the checkpoint was made is read from its first
        # offset (as Kafka reads new partitions from the earliest offset).
        return self._finder.first_offset(queue)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        o = self.options
        begin = {q: self._start_of(start, q) for q in o.queues}
        tails = self._available_now or {q: self._finder.next_offset(q) for q in o.queues}
        latest = {q: max(tails[q], begin[q]) for q in o.queues}
        self._latest = latest
        if isinstance(limit, ReadMaxRows):
            return _limit(begin, latest, limit.max_rows)
        return latest

    def reportLatestOffset(self) -> dict[str, int] | None:
        return self._latest

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        o = self.options
        begin = {q: self._start_of(start, q) for q in end}
        ranges = plan_ranges(begin, end, o.min_partitions, o.max_records_per_partition)
        return [_RangePartition(r, o) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the offsets are in the checkpoint, messages stay in the stream."""

    def stop(self) -> None:
        self._finder.close()


def _limit(start: dict[str, int], latest: dict[str, int], budget: int) -> dict[str, int]:
    """Advance at most ``budget`` offsets in total, shared by lag (as Kafka does)."""
    lags = {q: latest[q] - start[q] for q in latest}
    total = sum(lags.values())
    if total <= budget:
        return dict(latest)
    out = dict(start)
    given = 0
    for q in sorted(lags, key=lambda name: -lags[name]):
        share = min(lags[q], max(1, budget * lags[q] // total)) if lags[q] else 0
        share = min(share, budget - given)
        out[q] = start[q] + share
        given += share
    return out


# -- classic queues -----------------------------------------------------------------------


class _Consumer:
    """A driver-side consumer whose deliveries are numbered ``base, base + 1, ...``.

    Delivery tags on a fresh channel are 1, 2, 3, ..., so the message numbered ``n`` has tag
    ``n - base + 1`` and acking "everything below n" is one ``multiple`` ack.
    """

    def __init__(self, o: Options, base: int, prefetch: int | None = None) -> None:
        self.client = AmqpClient(o.params).connect()
        self.client.qos(prefetch or o.prefetch)
        self.client.consume(o.queues[0])
        self.base = base
        self.taken = base  # number of the next delivery not yet handed to Spark
        self.acked = base  # every number below this is acked

    def ack_below(self, n: int) -> None:
        n = min(n, self.taken)
        if n > self.acked:
            self.client.ack(n - self.base, multiple=True)
            self.client.flush()
            self.acked = n

    def take(self, limit: int, wait: float, idle: float) -> Deliveries:
        """Up to ``limit`` deliveries, polling at most ``wait`` s (less once idle ``idle`` s)."""
        deliveries = self.client.deliveries
        deadline = time.monotonic() + wait
        while len(deliveries) < limit:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if not self.client.poll(min(remaining, idle)) and len(deliveries):
                break
        out = deliveries.take(limit)
        self.taken += len(out)
        return out

    def close(self) -> None:
        self.client.close()


class ClassicStreamReader(SimpleDataSourceStreamReader):
    """Classic-queue streaming, at-least-once: ack after Spark commits the batch.

    Offsets count the messages handed to Spark (``{"queue": n}``). Spark plans batch N+1 only
    after batch N is in the sink and the commit log, so every message below ``start`` is acked
    at the next ``read(start)``, and again in ``commit()``. If the query dies, the broker
    requeues whatever was not acked and later batches deliver it again (``redelivered``).
    """

    def __init__(self, options: Options) -> None:
        self.options = options
        self._consumer: _Consumer | None = None

    def initialOffset(self) -> dict[str, int]:
        return {self.options.queues[0]: 0}

    def _ensure(self, start: int) -> _Consumer:
        if self._consumer is None:
            self._consumer = _Consumer(self.options, start)
        return self._consumer

    def read(self, start: dict[str, int]) -> tuple[Iterator[Any], dict[str, int]]:
        o = self.options
        queue = o.queues[0]
        begin = int(start[queue])
        consumer = self._ensure(begin)
        consumer.ack_below(begin)
        if begin != consumer.taken:
            # Spark re-planned from an older offset (a batch failed and is retried in this
            # process): those messages are in flight on this channel and cannot be re-read.
            raise RuntimeError(
                f"classic queue {queue!r}: Spark asked for messages from #{begin}, but #"
                f"{consumer.taken} is the next one; restart the query to have the broker"
                " redeliver the unacknowledged messages"
            )
        chunk = consumer.take(o.max_messages_per_trigger, o.poll_timeout, o.idle_timeout)
        if not len(chunk):
            return iter(()), {queue: begin}
        batch = build_batch(chunk, queue, None, include_headers=o.include_headers)
        return iter([batch]), {queue: begin + batch.num_rows}

    def readBetweenOffsets(self, start: dict[str, int], end: dict[str, int]) -> Iterator[Any]:
        """A batch planned by a query that died: its messages were never acked, so the broker
        redelivers them to this run's consumer; re-reading them here would duplicate them."""
        return iter(())

    def commit(self, end: dict[str, int]) -> None:
        if self._consumer is not None:
            self._consumer.ack_below(int(end[self.options.queues[0]]))

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


@dataclass(frozen=True)
class _ClassicPartition(InputPartition):
    options: Options
    limit: int
    index: int

    def __init__(self, options: Options, limit: int, index: int) -> None:
        object.__setattr__(self, "options", options)
        object.__setattr__(self, "limit", limit)
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "value", index)


class ClassicBatchReader(DataSourceReader):
    """Batch drain of a classic queue by ``minPartitions`` competing consumers.

    Each task takes up to its share of ``maxMessages`` (default: the depth at planning) and
    acks them when it has handed them all to Spark. Weak guarantee, documented: a task that
    fails after its ack does not get the same messages back on retry.
    """

    def __init__(self, options: Options) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        total = o.max_messages
        if total is None:
            client = AmqpClient(o.params).connect()
            try:
                total = client.declare_passive(o.queues[0]).message_count
            finally:
                client.close()
        n = max(1, min(o.min_partitions, total or 1))
        return [_ClassicPartition(o, total // n + (1 if i < total % n else 0), i) for i in range(n)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _ClassicPartition)
        o = partition.options
        if partition.limit <= 0:
            return
        consumer = _Consumer(o, 0, min(o.prefetch, partition.limit))
        try:
            while consumer.taken < partition.limit:
                want = min(o.batch_rows, partition.limit - consumer.taken)
                chunk = consumer.take(want, o.idle_timeout, o.idle_timeout)
                if not len(chunk):
                    break
                yield build_batch(chunk, o.queues[0], None, include_headers=o.include_headers)
            consumer.ack_below(consumer.taken)
        finally:
            consumer.close()
