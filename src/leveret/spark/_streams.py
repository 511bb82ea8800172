"""Stream-queue reading without Spark: offset ranges, tail discovery, data-loss checks.

Offsets are compared, never counted: a stream's offsets may have gaps (RabbitMQ skips some at
segment boundaries), so a range ``[start, end)`` is read by attaching at ``start`` and stopping
at the first delivery whose offset is ``>= end - 1`` (rows at or past ``end`` are dropped).
"""

from __future__ import annotations

import bisect
import datetime
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from leveret.spark._arrow import build_batch, stream_offsets
from leveret.spark._client import AmqpClient, AmqpClientError, ConnectionParams, Deliveries

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa

    from leveret.protocol.amqp091.fieldtable import FieldValue

__all__ = [
    "DataLossError",
    "OffsetRange",
    "TailFinder",
    "plan_ranges",
    "read_range",
]


class DataLossError(RuntimeError):
    """Requested offsets are no longer in the stream (retention removed them)."""


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one stream queue, read by one Spark task."""

    queue: str
    start: int
    end: int


def plan_ranges(
    start: dict[str, int],
    end: dict[str, int],
    min_partitions: int,
    max_records_per_partition: int | None,
) -> list[OffsetRange]:
    """Cut each queue's ``[start, end)`` into ranges: at least ``min_partitions`` in total,
    shared by lag, and none longer than ``max_records_per_partition`` offsets."""
    lags = {q: end[q] - start.get(q, end[q]) for q in end}
    lags = {q: lag for q, lag in lags.items() if lag > 0}
    total = sum(lags.values())
    ranges: list[OffsetRange] = []
    for q in sorted(lags):
        lag = lags[q]
        pieces = max(1, round(min_partitions * lag / total)) if total else 1
        if max_records_per_partition:
            pieces = max(pieces, -(-lag // max_records_per_partition))
        pieces = min(pieces, lag)
        s = start[q]
        for i in range(pieces):
            a = s + lag * i // pieces
            b = s + lag * (i + 1) // pieces
            ranges.append(OffsetRange(q, a, b))
    return ranges


def _offset_argument(value: int | str | datetime.datetime) -> FieldValue:
    return value


class TailFinder:
    """Driver-side offset discovery over one reused connection.

    On Leveret, a passive ``queue.declare`` of a stream returns the next offset to be written
    in ``message_count`` (exact and live). RabbitMQ 3.x has nothing like it over 0-9-1, so
    there the tail is probed: attach at ``last`` (the start of the last chunk), keep the highest
    offset seen until the stream is quiet for ``window`` seconds or ``cap`` seconds have passed
    since the first delivery, then cancel. ``timeout``: how long an empty stream is waited for.
    """

    def __init__(
        self, params: ConnectionParams, *, window: float, timeout: float, cap: float = 5.0
    ) -> None:
        self.params = params
        self.window = window
        self.timeout = timeout
        self.cap = cap
        self._client: AmqpClient | None = None

    def client(self) -> AmqpClient:
        if self._client is None:
            client = AmqpClient(self.params).connect()
            client.qos(2000)
            self._client = client
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _retrying(self, fn: str, queue: str) -> int:
        try:
            return int(getattr(self, fn)(queue))
        except AmqpClientError as exc:
            self.close()
            if exc.reply_code in (404, 403, 406):
                raise
            return int(getattr(self, fn)(queue))

    def next_offset(self, queue: str) -> int:
        """The offset the next message written to ``queue`` will get."""
        return self._retrying("_next_offset", queue)

    def first_offset(self, queue: str) -> int:
        """The oldest offset still in ``queue`` (its next offset when it is empty)."""
        return self._retrying("_first_offset", queue)

    def offset_for_timestamp(self, queue: str, ms: int) -> int:
        """The first offset whose chunk timestamp is at or after ``ms`` (ms since the epoch)."""
        when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
        found = self._attach(queue, when, take_max=False)
        return found if found is not None else self.next_offset(queue)

    def _next_offset(self, queue: str) -> int:
        client = self.client()
        ok = client.declare_passive(queue)
        if client.is_leveret:
            return ok.message_count
        last = self._attach(queue, "last", take_max=True)
        return last + 1 if last is not None else 0

    def _first_offset(self, queue: str) -> int:
        first = self._attach(queue, "first", take_max=False)
        return first if first is not None else self._next_offset(queue)

    def _attach(
        self, queue: str, where: int | str | datetime.datetime, *, take_max: bool
    ) -> int | None:
        client = self.client()
        deliveries = client.deliveries
        deliveries.clear()
        tag = client.consume(queue, arguments={"x-stream-offset": _offset_argument(where)})
        best: int | None = None
        try:
            deadline = time.monotonic() + self.timeout
            # Stop once the stream has been quiet for `window` after the first delivery, or
            # `cap` after it: a busy stream is never quiet (SPARK.md: drain-until-idle cost
            # 1.75 s per trigger), and what came first is the last chunk.
            first_at: float | None = None
            last_at = 0.0
            while True:
                now = time.monotonic()
                if len(deliveries):
                    offsets = [o for o in stream_offsets(deliveries.properties) if o >= 0]
                    client.ack(deliveries.tags[-1])
                    deliveries.clear()
                    if offsets:
                        if not take_max:
                            return offsets[0]
                        top = max(offsets)
                        best = top if best is None else max(best, top)
                        last_at = now
                        if first_at is None:
                            first_at = now
                if first_at is None:
                    remaining = deadline - now
                else:
                    remaining = min(last_at + self.window, first_at + self.cap) - now
                if remaining <= 0:
                    return best
                client.poll(remaining)
        finally:
            client.cancel(tag)
            deliveries.clear()


def _cut(offsets: list[int], end: int) -> int:
    """How many leading rows have an offset below ``end`` (offsets increase)."""
    return bisect.bisect_left(offsets, end)


def read_range(
    params: ConnectionParams,
    rng: OffsetRange,
    *,
    prefetch: int,
    read_timeout: float,
    fail_on_data_loss: bool,
    include_headers: bool,
    batch_rows: int,
    tail_window: float = 0.01,
) -> Iterator[pa.RecordBatch]:
    """Yield the messages of ``rng`` as record batches (empty ranges yield nothing).

    Raises :class:`DataLossError` when the first offset delivered is past ``rng.start`` because
    retention removed the start (and ``fail_on_data_loss``); a gap in the offsets is not loss.
    """
    if rng.end <= rng.start:
        return
    client = AmqpClient(params, timeout=read_timeout).connect()
    try:
        client.qos(prefetch)
        client.consume(rng.queue, arguments={"x-stream-offset": rng.start})
        deliveries = client.deliveries
        pending = Deliveries()
        pending_offsets: list[int] = []
        first = True
        last_offset = rng.end - 1
        done = False
        acked = 0
        # Credit comes back in halves of the window: one ack per ~prefetch/2 deliveries, not
        # one per socket read (a slow broker sends a few messages per read).
        ack_every = max(1, prefetch // 2)
        while not done:
            if not len(deliveries) and not client.poll(read_timeout):
                raise TimeoutError(
                    f"no delivery from stream {rng.queue!r} for {read_timeout:.0f} s while"
                    f" reading offsets [{rng.start}, {rng.end})"
                )
            if not len(deliveries):
                continue
            tag = deliveries.tags[-1]
            if tag - acked >= ack_every:
                client.ack(tag)
                client.flush()
                acked = tag
            chunk = deliveries.take()
            offsets = stream_offsets(chunk.properties)
            if first:
                first = False
                if offsets[0] > rng.start:
                    _check_loss(params, rng, offsets[0], fail_on_data_loss, tail_window)
            keep = len(offsets)
            if offsets[-1] >= last_offset:
                done = True
                keep = _cut(offsets, rng.end)
            if keep < len(offsets):
                chunk = chunk.take(keep)
                offsets = offsets[:keep]
            _extend(pending, chunk)
            pending_offsets.extend(offsets)
            if len(pending_offsets) >= batch_rows or (done and pending_offsets):
                yield build_batch(
                    pending.take(), rng.queue, pending_offsets, include_headers=include_headers
                )
                pending_offsets = []
    finally:
        client.abort()


def _extend(into: Deliveries, chunk: Deliveries) -> None:
    for name in Deliveries.__slots__:
        getattr(into, name).extend(getattr(chunk, name))


def _check_loss(
    params: ConnectionParams, rng: OffsetRange, got: int, fail: bool, window: float
) -> None:
    finder = TailFinder(params, window=window, timeout=2.0)
    try:
        floor = finder.first_offset(rng.queue)
    finally:
        finder.close()
    if floor > rng.start and fail:
        raise DataLossError(
            f"stream {rng.queue!r}: offsets [{rng.start}, {min(floor, rng.end)}) are gone"
            f" (retention); the oldest offset left is {floor}. Set failOnDataLoss=false to"
            " skip ahead instead."
        )
