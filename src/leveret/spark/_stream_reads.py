"""Stream-queue reading over RabbitMQ's stream protocol: offset ranges as whole chunks, and
the driver's offset discovery. The 0-9-1 twin of this module is ``_streams``.

A range ``[start, end)`` is read by subscribing at offset ``start`` with a few chunks of
credit, one credit back per chunk received; each chunk goes through
``_records.RecordColumns`` (records outside the range are dropped) and the read stops at the
first chunk that reaches ``end``. Offsets are compared, never counted, as in ``_streams``.

Offset discovery (:class:`StreamTailFinder`) subscribes with one credit and reads the first
chunk's header: ``last`` gives the next offset (its chunk id + its records), ``first`` the
oldest, ``timestamp`` the first chunk at or after a time. Where the broker has stream stats
(RabbitMQ 3.11+, Leveret) an empty stream is known at once; RabbitMQ 3.10 has none (and
closes the connection on the command), so there an empty stream is one that sent nothing
for ``timeout`` seconds. No pyspark import here.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from leveret.protocol.rabbitstream.chunk import CHUNK_USER
from leveret.protocol.rabbitstream.constants import Code, OffsetType
from leveret.spark._records import RecordColumns, chunk_header
from leveret.spark._stream_client import StreamClient, StreamClientError
from leveret.spark._streams import DataLossError

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa

    from leveret.protocol.rabbitstream.chunk import ChunkHeader
    from leveret.spark._client import ConnectionParams
    from leveret.spark._streams import OffsetRange

__all__ = ["StreamTailFinder", "read_range_chunks"]

_PROBE = 255  # the subscription id offset probes use (readers use 1)


class StreamTailFinder:
    """Driver-side offset discovery over one reused stream-protocol connection.

    Same interface as ``_streams.TailFinder``: ``next_offset``, ``first_offset``,
    ``offset_for_timestamp``, ``close``.
    """

    def __init__(self, params: ConnectionParams, *, timeout: float, wait: float = 30.0) -> None:
        self.params = params
        self.timeout = timeout  # how long an empty stream is waited for (no stream stats)
        self.wait = wait  # how long a chunk known to exist is waited for
        self._client: StreamClient | None = None

    def client(self) -> StreamClient:
        if self._client is None:
            self._client = StreamClient(self.params, timeout=self.wait).connect()
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _retrying(self, fn: str, *args: object) -> int:
        try:
            return int(getattr(self, fn)(*args))
        except StreamClientError as exc:
            self.close()
            if exc.code in (Code.STREAM_DOES_NOT_EXIST, Code.ACCESS_REFUSED):
                raise
            return int(getattr(self, fn)(*args))

    def next_offset(self, queue: str) -> int:
        """The offset the next message written to ``queue`` will get."""
        return self._retrying("_next_offset", queue)

    def first_offset(self, queue: str) -> int:
        """The oldest offset still in ``queue`` (its next offset when it is empty)."""
        return self._retrying("_first_offset", queue)

    def offset_for_timestamp(self, queue: str, ms: int) -> int:
        """The first offset of the first chunk at or after ``ms`` (ms since the epoch)."""
        return self._retrying("_offset_for_timestamp", queue, ms)

    def _empty(self, client: StreamClient, queue: str) -> bool | None:
        """True/False from stream stats when the broker has them, else None (unknown)."""
        if not client.has_stream_stats:
            return None
        return client.stream_stats(queue).get("committed_chunk_id", -1) < 0

    def _probe(self, queue: str, offset_type: int, offset: int, known: bool) -> ChunkHeader | None:
        """The header of the first user chunk a subscription at this spec gets; None when
        nothing came in time (an empty stream)."""
        client = self.client()
        client.chunks.clear()
        client.subscribe(_PROBE, queue, offset_type, offset, credit=1)
        try:
            deadline = time.monotonic() + (self.wait if known else self.timeout)
            while True:
                for _sid, chunk in client.chunks:
                    header = chunk_header(chunk)
                    if header.chunk_type == CHUNK_USER and header.num_records:
                        return header
                    client.credit(_PROBE, 1)  # a tracking chunk: not what was asked
                client.chunks.clear()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                client.poll(remaining)
        finally:
            client.unsubscribe(_PROBE)
            client.chunks.clear()

    def _next_offset(self, queue: str) -> int:
        empty = self._empty(self.client(), queue)
        if empty:
            return 0
        last = self._probe(queue, OffsetType.LAST, 0, known=empty is False)
        return last.chunk_id + last.num_records if last is not None else 0

    def _first_offset(self, queue: str) -> int:
        client = self.client()
        if client.has_stream_stats:
            first = client.stream_stats(queue).get("first_chunk_id", -1)
            return first if first >= 0 else self._next_offset(queue)
        found = self._probe(queue, OffsetType.FIRST, 0, known=False)
        return found.chunk_id if found is not None else 0

    def _offset_for_timestamp(self, queue: str, ms: int) -> int:
        empty = self._empty(self.client(), queue)
        if empty:
            return 0
        last = self._probe(queue, OffsetType.LAST, 0, known=empty is False)
        if last is None:
            return 0
        if last.timestamp < ms:
            return last.chunk_id + last.num_records  # nothing at or after it yet
        found = self._probe(queue, OffsetType.TIMESTAMP, ms, known=True)
        return found.chunk_id if found is not None else last.chunk_id


def read_range_chunks(
    params: ConnectionParams,
    rng: OffsetRange,
    *,
    credit: int,
    read_timeout: float,
    fail_on_data_loss: bool,
    include_headers: bool,
    batch_rows: int,
    probe_timeout: float = 0.3,
) -> Iterator[pa.RecordBatch]:
    """Yield the messages of ``rng`` as record batches (empty ranges yield nothing).

    Raises ``DataLossError`` when the first chunk delivered starts past ``rng.start`` because
    retention removed the start (and ``fail_on_data_loss``); a gap in the offsets is not loss.
    """
    if rng.end <= rng.start:
        return
    client = StreamClient(params, timeout=read_timeout).connect()
    sid = 1
    try:
        client.subscribe(sid, rng.queue, OffsetType.OFFSET, rng.start, credit=credit)
        columns = RecordColumns(rng.queue, include_headers=include_headers)
        chunks = client.chunks
        first = True
        done = False
        while not done:
            if not chunks and not client.poll(read_timeout):
                raise TimeoutError(
                    f"no chunk from stream {rng.queue!r} for {read_timeout:.0f} s while"
                    f" reading offsets [{rng.start}, {rng.end})"
                )
            if not chunks:
                continue
            taken = chunks[:]
            chunks.clear()
            client.credit(sid, len(taken))
            client.flush()  # the broker sends more while these are decoded
            for _sid, chunk in taken:
                if first:
                    header = chunk_header(chunk)
                    if header.chunk_type == CHUNK_USER and header.num_records:
                        first = False
                        if header.chunk_id > rng.start:
                            _check_loss(params, rng, fail_on_data_loss, probe_timeout)
                after = columns.add_chunk(chunk, rng.start, rng.end)
                if after >= rng.end:
                    done = True
                    break
                if len(columns) >= batch_rows:
                    yield columns.build()
        if len(columns):
            yield columns.build()
    finally:
        client.abort()


def _check_loss(params: ConnectionParams, rng: OffsetRange, fail: bool, timeout: float) -> None:
    finder = StreamTailFinder(params, timeout=timeout)
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
