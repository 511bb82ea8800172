"""Classic queues (queueMode=consume): acked only after Spark commits; nothing lost on a kill."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import pytest

from tests.spark import support

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

pytestmark = pytest.mark.spark


def _start(
    spark: SparkSession,
    url: str,
    queue: str,
    checkpoint: Path,
    sink: Callable[[DataFrame, int], None],
) -> StreamingQuery:
    return (
        spark.readStream.format("amqp")
        .option("uri", url)
        .option("queue", queue)
        .option("queueMode", "consume")
        .option("maxMessagesPerTrigger", "500")
        .option("pollTimeoutMs", "300")
        .option("idleTimeoutMs", "200")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def test_killed_query_loses_nothing_and_idle_holds_nothing_unacked(
    spark_session: SparkSession, amqp_url: str, name: str, tmp_path: Path
) -> None:
    support.declare(amqp_url, name)
    seen: list[tuple[int, bool]] = []
    lock = threading.Lock()
    die = threading.Event()
    first_run_active = threading.Event()
    first_run_active.set()
    try:
        support.publish(amqp_url, name, [str(i).encode() for i in range(2000)])

        def sink(batch: DataFrame, batch_id: int) -> None:
            rows = batch.selectExpr("CAST(value AS STRING) v", "redelivered").collect()
            if die.is_set():
                raise RuntimeError("killed before the batch was committed")
            with lock:
                seen.extend((int(r.v), bool(r.redelivered)) for r in rows)
                if len(seen) >= 1000 and first_run_active.is_set():
                    die.set()

        q = _start(spark_session, amqp_url, name, tmp_path / "cp", sink)
        with pytest.raises(Exception, match="killed before"):
            q.awaitTermination(120)
        first_run = len(seen)
        assert 1000 <= first_run < 2000
        # Everything not committed went back to the queue (nothing acked early) ...
        support.wait_for(lambda: support.depth(amqp_url, name) == 2000 - first_run, 20, "requeue")
        first_run_active.clear()
        die.clear()
        done = threading.Event()

        def sink2(batch: DataFrame, batch_id: int) -> None:
            sink(batch, batch_id)
            with lock:
                if len({v for v, _ in seen}) >= 2000:
                    done.set()

        q = _start(spark_session, amqp_url, name, tmp_path / "cp", sink2)
        try:
            assert done.wait(90), "the restarted query did not deliver the rest"
            # ... and once a later trigger has run, the last batch is acked too.
            n = len(q.recentProgress)
            support.wait_for(lambda: len(q.recentProgress) > n + 1, 30, "more triggers")
        finally:
            q.stop()
        values = [v for v, _ in seen]
        assert sorted(set(values)) == list(range(2000))
        # The uncommitted batch came back redelivered (at-least-once, no loss).
        assert any(redelivered for _, redelivered in seen[first_run:])
        assert support.drain(amqp_url, name, idle=0.5) == []
    finally:
        support.delete(amqp_url, name)


def test_batch_read_drains_with_partitions(
    spark_session: SparkSession, amqp_url: str, name: str
) -> None:
    support.declare(amqp_url, name)
    try:
        support.publish(amqp_url, name, [str(i).encode() for i in range(1200)])
        df = (
            spark_session.read.format("amqp")
            .option("uri", amqp_url)
            .option("queue", name)
            .option("queueMode", "consume")
            .option("minPartitions", "2")
            .option("idleTimeoutMs", "500")
            .load()
        )
        assert df.rdd.getNumPartitions() == 2
        rows = df.selectExpr("CAST(value AS STRING) v", "offset", "properties").collect()
        assert sorted(int(r.v) for r in rows) == list(range(1200))
        assert all(r.offset is None and r.properties.delivery_mode == 2 for r in rows)
        assert support.depth(amqp_url, name) == 0
    finally:
        support.delete(amqp_url, name)
