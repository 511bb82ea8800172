"""End-to-end pipeline: broker -> Spark Structured Streaming -> Parquet + broker, exactly once.

Run it with one command (Spark in local mode; a Leveret broker of its own on a free port)::

    python examples/spark_pipeline.py

What happens:

1. A Leveret broker starts (``leveret serve --port 0``) with its own data directory.
2. A producer publishes shop events (JSON) to the topic exchange ``shop.events``; the stream
   queue ``shop.events.stream`` is bound to it.
3. A streaming query reads the stream (``format("amqp")``), totals the events per user in each
   micro-batch, writes the totals to Parquet (one directory per batch, overwritten on replay)
   and publishes them to the exchange ``shop.results`` (bound to the stream
   ``shop.results.stream``) with ids derived from the batch id.
4. After ``--crash-after`` batches the query is killed after both side effects of a batch but
   before Spark commits it, and restarted from its checkpoint: the batch is replayed with the
   same offsets, the Parquet directory is rewritten, and the broker drops the re-published
   totals as duplicates.
5. The example checks that Parquet holds every event exactly once and that every total reached
   ``shop.results.stream`` exactly once, and exits non-zero otherwise.

Spark reads the stream and publishes the totals over RabbitMQ's stream protocol (the fast
path: chunks decoded into Arrow in bulk; the totals published in batches under a publisher
reference per task, which the broker de-duplicates). ``--protocol amqp`` runs the same over
AMQP 0-9-1 (the totals then go through the exchange ``shop.results`` and are de-duplicated by
Leveret's ``x-stream-producer`` / ``x-stream-sequence`` headers).

Queue and exchange names get a per-run suffix (``shop.events.<run>``); with ``--url`` they
are deleted at the end. ``--url amqp://...`` uses another broker (RabbitMQ 3.9+ has stream
queues; its stream protocol on 5552 beside 5672, or ``--stream-port``, de-duplicates the
totals too; over 0-9-1 it does not, and there the replayed totals show up twice and the
example says so).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import IO, TYPE_CHECKING

from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.spark import AmqpDataSource
from leveret.spark._arrow import stream_offsets
from leveret.spark._client import AmqpClient, ConnectionParams
from leveret.spark._streams import TailFinder

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

# Names carry a per-run suffix so that runs against a shared broker (--url) never meet.
RUN = uuid.uuid4().hex[:6]
EVENTS_EXCHANGE = f"shop.events.{RUN}"
EVENTS_STREAM = f"shop.events.stream.{RUN}"
RESULTS_EXCHANGE = f"shop.results.{RUN}"
RESULTS_STREAM = f"shop.results.stream.{RUN}"
USERS = 50

_LISTENING = re.compile(r"listening on amqp://\[?([0-9a-fA-F:.]+)\]?:(\d+)")
_STREAM_LISTENING = re.compile(r"listening on rabbitmq-stream://\S+:(\d+)")


class InjectedCrash(RuntimeError):
    """Raised inside a micro-batch after its side effects, before Spark commits it."""


def start_leveret(data_dir: Path) -> tuple[subprocess.Popen[str], str, int]:
    """``leveret serve`` on free ports; returns the process, its amqp:// URL and its
    stream-protocol port."""
    cmd = [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0"]
    # The broker runs from the installed package, not from what spark-submit put on this
    # driver's PYTHONPATH (the job's zipped wheel).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and fixed arguments
        [*cmd, "--stream-port", "0", "--no-management", "--data-dir", str(data_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    url = None
    stream_port = None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        found = _LISTENING.search(line)
        if found:
            url = f"amqp://guest:guest@{found.group(1)}:{found.group(2)}/%2F"
        found = _STREAM_LISTENING.search(line)
        if found:
            stream_port = int(found.group(1))
        if url is not None and stream_port is not None:
            threading.Thread(target=_drain, args=(proc.stderr,), daemon=True).start()
            return proc, url, stream_port
    proc.kill()
    raise RuntimeError("the broker did not start")


def _drain(stream: IO[str]) -> None:
    for _ in stream:
        pass


def connect(url: str) -> AmqpClient:
    return AmqpClient(ConnectionParams.from_uri(url)).connect()


def setup_broker(url: str) -> None:
    with connect(url) as c:
        c.declare_exchange(EVENTS_EXCHANGE, "topic")
        c.declare(EVENTS_STREAM, {"x-queue-type": "stream"})
        c.bind(EVENTS_STREAM, EVENTS_EXCHANGE, "order.#")
        c.declare_exchange(RESULTS_EXCHANGE, "fanout")
        c.declare(RESULTS_STREAM, {"x-queue-type": "stream"})
        c.bind(RESULTS_STREAM, RESULTS_EXCHANGE)


def teardown_broker(url: str) -> None:
    """Remove what :func:`setup_broker` declared (a shared broker keeps nothing of ours)."""
    with connect(url) as c:
        for queue in (EVENTS_STREAM, RESULTS_STREAM):
            c.delete_queue(queue)
        for exchange in (EVENTS_EXCHANGE, RESULTS_EXCHANGE):
            c.delete_exchange(exchange)


def produce(url: str, events: int, rate: int, done: threading.Event) -> None:
    """Publish ``events`` orders at about ``rate`` per second, with publisher confirms."""
    with connect(url) as c:
        c.confirm_select()
        method = m.BasicPublish(exchange=EVENTS_EXCHANGE, routing_key="order.created").encode()
        props = BasicProperties(content_type="application/json", delivery_mode=2).encode()
        started = time.monotonic()
        for i in range(events):
            body = json.dumps({"id": i, "user": f"user-{i % USERS}", "amount": i % 100}).encode()
            c.publish_frames(framing.encode_message_frames(1, method, 60, body, props, 131072))
            if c.in_flight >= 1000:
                c.wait_confirms(500, 60)
            if i % 1000 == 999:
                ahead = (i + 1) / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        c.wait_confirms(0, 60)
    done.set()


def submitted() -> bool:
    """True when ``spark-submit`` started this driver (its master and settings apply)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def make_spark() -> SparkSession:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("leveret-pipeline")
    if not submitted():
        # Local mode: the executors are this interpreter (it has leveret and pyarrow).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = (
            builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
        )
    spark = (
        builder.config("spark.sql.shuffle.partitions", "2")
        # A Python worker that starts slowly on a busy machine is waited for, not failed.
        .config("spark.python.authenticate.socketTimeout", "60s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.CRITICAL)  # the injected crash's traceback
    spark.dataSource.register(AmqpDataSource)
    return spark


def _committed_up_to(query: StreamingQuery) -> int:
    """The next offset of the last batch Spark committed (progress is reported after it)."""
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return -1
    end = progress["sources"][0].get("endOffset")
    if isinstance(end, str):
        end = json.loads(end)
    return int(end.get(EVENTS_STREAM, -1)) if isinstance(end, dict) else -1


def run_query(
    spark: SparkSession,
    url: str,
    work: Path,
    produced: threading.Event,
    crash_at: int | None,
    connection: dict[str, str],
) -> None:
    """Run the query until it has committed every event published (or the injected crash)."""
    from pyspark.sql import functions as F

    out = work / "totals"
    schema = "id LONG, user STRING, amount LONG"

    def process(batch: DataFrame, batch_id: int) -> None:
        orders = batch.select(
            "offset", F.from_json(F.col("value").cast("string"), schema).alias("o")
        )
        totals = (
            orders.groupBy(F.col("o.user").alias("user"))
            .agg(
                F.count("*").alias("orders"),
                F.sum("o.amount").alias("amount"),
                F.min("offset").alias("first_offset"),
                F.max("offset").alias("last_offset"),
            )
            .withColumn("batch_id", F.lit(batch_id))
            .coalesce(1)
            .sortWithinPartitions("user")  # a replay numbers its messages the same way
            .cache()
        )
        if totals.isEmpty():
            return
        totals.write.mode("overwrite").parquet(str(out / f"batch_id={batch_id}"))
        writer = (
            totals.select(F.to_json(F.struct("*")).alias("value"))
            .write.format("amqp")
            .option("uri", url)
            .options(**connection)
            .option("messageIdPrefix", f"totals-{batch_id}")
        )
        if connection.get("protocol") == "amqp":
            writer = writer.option("exchange", RESULTS_EXCHANGE).option("routingKey", "totals")
        else:
            writer = writer.option("stream", RESULTS_STREAM)  # the stream protocol: no exchange
        writer.mode("append").save()
        totals.unpersist()
        if crash_at is not None and batch_id == crash_at:
            raise InjectedCrash(f"killed after the side effects of batch {batch_id}")

    query = (
        spark.readStream.format("amqp")
        .option("uri", url)
        .option("queue", EVENTS_STREAM)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "4000")
        .option("minPartitions", "2")
        .options(**connection)
        .load()
        .writeStream.foreachBatch(process)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(processingTime="1 second")
        .queryName("shop-totals")
        .start()
    )
    tail = None
    try:
        while query.isActive:
            if query.exception() is not None:
                break
            if tail is None and produced.is_set():
                finder = TailFinder(ConnectionParams.from_uri(url), window=0.05, timeout=1.0)
                try:
                    tail = finder.next_offset(EVENTS_STREAM)
                finally:
                    finder.close()
            if tail is not None and _committed_up_to(query) >= tail:
                break
            time.sleep(1.0)
    finally:
        query.stop()
    error = query.exception()
    if error is not None:
        if "InjectedCrash" in str(error) or "killed after the side effects" in str(error):
            print(f"  query died as planned: batch {crash_at} ran but was not committed")
            return
        raise RuntimeError(f"query failed: {error}")
    if crash_at is not None:
        print(f"  every event was committed before batch {crash_at}: nothing was killed")


def read_results(url: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with connect(url) as c:
        c.qos(1000)
        c.consume(RESULTS_STREAM, arguments={"x-stream-offset": "first"})
        d = c.deliveries
        while c.poll(1.0) or len(d):
            if len(d):
                c.ack(d.tags[-1])
                chunk = d.take()
                assert all(o >= 0 for o in stream_offsets(chunk.properties))
                rows.extend(json.loads(body) for body in chunk.bodies)
    return rows


def verify(spark: SparkSession, url: str, work: Path, events: int, product: str) -> bool:
    totals = spark.read.parquet(str(work / "totals"))
    stats = totals.selectExpr("sum(orders)", "sum(amount)").first()
    assert stats is not None
    expected_amount = sum(i % 100 for i in range(events))
    ranges = sorted(
        (int(r.first), int(r.last), int(r.n))
        for r in totals.groupBy("batch_id")
        .agg({"first_offset": "min", "last_offset": "max", "orders": "sum"})
        .withColumnsRenamed(
            {"min(first_offset)": "first", "max(last_offset)": "last", "sum(orders)": "n"}
        )
        .collect()
    )
    contiguous = all(a[1] < b[0] for a, b in itertools.pairwise(ranges))
    parquet_ok = int(stats[0]) == events and int(stats[1]) == expected_amount and contiguous
    print(
        f"Parquet: {stats[0]} orders (expected {events}), amount {stats[1]}"
        f" (expected {expected_amount}), {len(ranges)} batches with disjoint offset ranges:"
        f" {contiguous}"
    )
    results = read_results(url)
    keys = [(r["batch_id"], r["user"]) for r in results]
    duplicates = len(keys) - len(set(keys))
    result_orders = sum(int(str(r["orders"])) for r in results) if results else 0
    print(
        f"{RESULTS_STREAM}: {len(results)} totals, {duplicates} duplicates,"
        f" {result_orders} orders counted"
    )
    results_ok = duplicates == 0 and result_orders == events
    if results_ok and parquet_ok:
        print("exactly once: OK")
    if product != "Leveret" and duplicates:
        print(f"  ({product} does not de-duplicate 0-9-1 publishes: replayed totals appear twice)")
        distinct = {(r["batch_id"], r["user"]): int(str(r["orders"])) for r in results}
        results_ok = sum(distinct.values()) == events  # nothing lost
        if parquet_ok:
            print("Parquet exactly once: OK; results at least once (no de-duplication)")
    if not (parquet_ok and results_ok):
        print("exactly once: FAILED")
    return parquet_ok and results_ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=5_000, help="events per second")
    parser.add_argument("--crash-after", type=int, default=2, help="batch to kill; -1: none")
    parser.add_argument("--url", help="use this broker instead of starting Leveret")
    parser.add_argument(
        "--protocol",
        choices=("auto", "stream", "amqp"),
        default="stream",
        help="how Spark reads and writes the streams (default: the stream protocol)",
    )
    parser.add_argument("--stream-port", type=int, help="the broker's stream-protocol port")
    parser.add_argument("--workdir", type=Path, help="keep files here (default: a temp dir)")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="leveret-pipeline-"))
    work.mkdir(parents=True, exist_ok=True)
    broker = None
    url = args.url
    stream_port = args.stream_port
    if url is None:
        broker, url, stream_port = start_leveret(work / "broker")
        print(f"Leveret listening at {url} (data in {work / 'broker'})")
    connection = {"protocol": args.protocol}
    if stream_port is not None:
        connection["streamPort"] = str(stream_port)
    print(f"Spark reads and writes with protocol={args.protocol}")
    spark = None
    try:
        setup_broker(url)
        with connect(url) as c:
            product = c.product
        produced = threading.Event()
        producer = threading.Thread(
            target=produce, args=(url, args.events, args.rate, produced), daemon=True
        )
        producer.start()
        spark = make_spark()
        crash = args.crash_after if args.crash_after >= 0 else None
        print(f"Run 1 (the query is killed after batch {crash})")
        run_query(spark, url, work, produced, crash, connection)
        print("Run 2 (restarted from the checkpoint)")
        run_query(spark, url, work, produced, None, connection)
        producer.join()
        return 0 if verify(spark, url, work, args.events, product) else 1
    finally:
        if spark is not None:
            spark.stop()
        if args.url is not None:
            teardown_broker(url)
        if broker is not None:
            broker.terminate()
            broker.wait(30)
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
