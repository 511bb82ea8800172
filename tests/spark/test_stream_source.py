"""The stream-queue source: batch reads by offset range, streaming with exactly-once replay.

Each test runs once per protocol the source reads streams with (``read_options``): RabbitMQ's
stream protocol and AMQP 0-9-1."""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING

import pytest

from tests.spark import support

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark


def _bodies(start: int, n: int) -> list[bytes]:
    return [json.dumps({"id": i}).encode() for i in range(start, start + n)]


def _reader(spark: SparkSession, url: str, queue: str, **options: object) -> DataFrame:
    r = spark.read.format("amqp").option("uri", url).option("queue", queue)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def test_batch_read_split_by_min_partitions(
    spark_session: SparkSession, stream_url: str, name: str, read_options: dict[str, str]
) -> None:
    support.declare_stream(stream_url, name)
    try:
        support.publish(stream_url, name, _bodies(0, 3000))
        df = _reader(spark_session, stream_url, name, minPartitions=3, **read_options)
        assert df.rdd.getNumPartitions() == 3
        rows = df.selectExpr("offset", "CAST(value AS STRING) AS v", "queue").collect()
        assert sorted(r.offset for r in rows) == list(range(3000))
        assert {r.queue for r in rows} == {name}
        by_offset = {r.offset: json.loads(r.v)["id"] for r in rows}
        assert all(by_offset[o] == o for o in by_offset)
        # Explicit ranges: [100, 250) only.
        part = _reader(
            spark_session,
            stream_url,
            name,
            startingOffsets=json.dumps({name: 100}),
            endingOffsets=json.dumps({name: 250}),
            minPartitions=2,
            **read_options,
        )
        assert sorted(r.offset for r in part.select("offset").collect()) == list(range(100, 250))
    finally:
        support.delete(stream_url, name)


def test_streaming_failure_and_restart_gives_every_offset_once(
    spark_session: SparkSession,
    stream_url: str,
    name: str,
    tmp_path: Path,
    read_options: dict[str, str],
) -> None:
    """A failure after batch 1 is written; restart replays the same range; no loss or dup."""
    support.declare_stream(stream_url, name)
    checkpoint = tmp_path / "checkpoint"
    # The sink is idempotent by batch id (a replay overwrites), like any exactly-once sink.
    written: dict[int, list[int]] = {}
    attempts: dict[int, int] = {}
    fail_in = {1}
    try:
        support.publish(stream_url, name, _bodies(0, 3000))

        def sink(batch: DataFrame, batch_id: int) -> None:
            offsets = sorted(r.offset for r in batch.select("offset").collect())
            if batch_id in written:
                assert written[batch_id] == offsets, "a replayed batch must cover the same range"
            written[batch_id] = offsets
            attempts[batch_id] = attempts.get(batch_id, 0) + 1
            if batch_id in fail_in:
                fail_in.discard(batch_id)
                raise RuntimeError("injected failure")

        def run() -> None:
            q = (
                spark_session.readStream.format("amqp")
                .option("uri", stream_url)
                .option("queue", name)
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", "1000")
                .option("minPartitions", "2")
                .options(**read_options)
                .load()
                .writeStream.foreachBatch(sink)
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination(120)

        with pytest.raises(Exception, match="injected failure"):
            run()
        assert set(written) == {0, 1}
        support.publish(stream_url, name, _bodies(3000, 1500))
        run()
        assert attempts[1] == 2, "batch 1 was not committed, so it must be replayed"
        assert attempts[0] == 1, "batch 0 was committed, so it must not be replayed"
        offsets = sorted(o for batch in written.values() for o in batch)
        assert offsets == list(range(4500))
        assert written[1] == list(range(1000, 2000))
    finally:
        support.delete(stream_url, name)


def _truncated_stream(url: str, queue: str) -> int:
    """A stream whose first segments were dropped by retention; returns its first offset."""
    support.declare_stream(
        url,
        queue,
        {"x-max-length-bytes": 20_000, "x-stream-max-segment-size-bytes": 5_000},
    )
    body = b"x" * 200
    for _ in range(6):
        support.publish(url, queue, [body] * 50)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        rows = support.read_stream(url, queue, idle=0.5)
        if rows and rows[0][0] > 0:
            return rows[0][0]
        support.publish(url, queue, [body] * 50)
    raise AssertionError("retention never removed the head of the stream")


def test_fail_on_data_loss(
    spark_session: SparkSession, stream_url: str, name: str, read_options: dict[str, str]
) -> None:
    first = _truncated_stream(stream_url, name)
    try:
        start = json.dumps({name: 0})
        with pytest.raises(Exception, match="retention"):
            _reader(spark_session, stream_url, name, startingOffsets=start, **read_options).count()
        df = _reader(
            spark_session,
            stream_url,
            name,
            startingOffsets=start,
            failOnDataLoss=False,
            **read_options,
        )
        offsets = [r.offset for r in df.select("offset").orderBy("offset").collect()]
        # Skips ahead to what is left; the offsets it reads are exactly the stream's.
        assert offsets[0] >= first
        assert offsets == [o for o, _ in support.read_stream(stream_url, name) if o >= offsets[0]]
    finally:
        support.delete(stream_url, name)


def test_offsets_with_gaps_are_compared_not_counted(
    spark_session: SparkSession, stream_url: str, name: str, read_options: dict[str, str]
) -> None:
    """After retention the first offset is not 0: earliest starts there, nothing is invented."""
    first = _truncated_stream(stream_url, name)
    try:
        expected = [o for o, _ in support.read_stream(stream_url, name)]
        df = _reader(spark_session, stream_url, name, minPartitions=3, **read_options)
        offsets = sorted(r.offset for r in df.select("offset").collect())
        assert offsets == expected
        assert offsets[0] == first
    finally:
        support.delete(stream_url, name)


def test_streaming_follows_new_messages(
    spark_session: SparkSession,
    stream_url: str,
    name: str,
    tmp_path: Path,
    read_options: dict[str, str],
) -> None:
    """startingOffsets=latest skips the backlog; later messages arrive in micro-batches."""
    support.declare_stream(stream_url, name)
    seen: list[int] = []
    lock = threading.Lock()
    try:
        support.publish(stream_url, name, _bodies(0, 100))

        def sink(batch: DataFrame, batch_id: int) -> None:
            values = [
                json.loads(r.v)["id"] for r in batch.selectExpr("CAST(value AS STRING) v").collect()
            ]
            with lock:
                seen.extend(values)

        q = (
            spark_session.readStream.format("amqp")
            .option("uri", stream_url)
            .option("queue", name)
            .options(**read_options)
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        try:
            support.wait_for(lambda: q.lastProgress is not None, 60, "the first trigger")
            support.publish(stream_url, name, _bodies(100, 200))
            support.wait_for(lambda: len(seen) >= 200, 60, "200 new rows")
        finally:
            q.stop()
        assert sorted(seen) == list(range(100, 300))
    finally:
        support.delete(stream_url, name)


def test_both_protocols_give_the_same_rows(
    spark_session: SparkSession, stream_url: str, stream_port: int, name: str
) -> None:
    """Properties, headers, routing key and exchange of 0-9-1 publishes read the same either
    way (the stream protocol's timestamp is the chunk's; Leveret's 0-9-1 one is too)."""
    from leveret.protocol.amqp091._generated.properties import BasicProperties

    support.declare_stream(stream_url, name)
    props = BasicProperties(
        content_type="application/json",
        headers={"n": 1, "s": "x", "nested": {"a": [1]}},
        delivery_mode=2,
        priority=3,
        correlation_id="c",
        message_id="m",
        type="t",
        app_id="a",
    )
    try:
        support.publish(stream_url, name, _bodies(0, 500), properties=props)
        columns = ["offset", "value", "routing_key", "exchange", "headers", "properties"]
        by_stream = _reader(
            spark_session, stream_url, name, protocol="stream", streamPort=stream_port
        ).select(*columns)
        by_amqp = _reader(spark_session, stream_url, name, protocol="amqp").select(*columns)
        a = sorted(by_stream.collect(), key=lambda r: r.offset)
        b = sorted(by_amqp.collect(), key=lambda r: r.offset)
        assert len(a) == 500
        assert a == b
    finally:
        support.delete(stream_url, name)
