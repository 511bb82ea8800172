"""Throughput and latency of the ``amqp`` data source (the figures in docs/spark.md).

    python -m examples.spark_bench            # starts a Leveret broker of its own
    python -m examples.spark_bench --url amqp://guest:guest@127.0.0.1:5672/%2F   # RabbitMQ
        [--stream-port 5552] [--protocols stream,amqp] [--latency] [--large 1000000]

Measures, on stream queues, once per protocol (RabbitMQ's stream protocol, AMQP 0-9-1): the
client's decode from memory, publishing with confirms from the client alone, the raw read
path (client + Arrow, no Spark), batch reads with 1 and 2 partitions (``noop`` sink),
streaming catch-up (Trigger.AvailableNow), writes with confirms, and with ``--latency`` the
end-to-end latency of a streaming query at a fixed publish rate. ``--large N`` measures
only batch reads of one stream of N messages (published over the stream protocol), with
Spark's fixed cost per job (a read of one row) taken apart from the rate per partition.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from examples.spark_pipeline import connect, make_spark, start_leveret
from leveret.convert.amqp091 import wire_message
from leveret.convert.stream_records import record_of
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.rabbitstream.chunk import encode_chunk, simple_entry
from leveret.spark._arrow import build_batch, stream_offsets
from leveret.spark._client import ConnectionParams, Deliveries, scan_frames
from leveret.spark._records import RecordColumns
from leveret.spark._stream_reads import read_range_chunks
from leveret.spark._stream_sink import publish_to_stream
from leveret.spark._streams import OffsetRange, read_range

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _body(i: int) -> bytes:
    return b'{"id": %d, "user": "user-%d", "amount": %d}' % (i, i % 50, i % 100)


def publish_stream(params: ConnectionParams, queue: str, n: int) -> float:
    """Publish ``n`` of the same messages over the stream protocol with the sink's client
    (batches of publish frames, confirms pipelined); returns messages per second."""
    bodies = [_body(i) for i in range(n)]
    batches = [
        pa.record_batch([pa.array(bodies[i : i + 8192], pa.binary())], names=["value"])
        for i in range(0, n, 8192)
    ]
    started = time.perf_counter()
    publish_to_stream(
        params,
        queue,
        f"bench-{uuid.uuid4().hex[:8]}",
        iter(batches),
        body_column="value",
        headers_column=None,
        properties_column=None,
        persistent=True,
        max_in_flight=20000,
        confirm_timeout=60,
    )
    return n / (time.perf_counter() - started)


def decode_chunks_ceiling(n: int) -> float:
    """Rows per CPU-second of the stream-protocol decode alone, fed from memory: the chunks a
    broker stores for ~60-byte messages published over 0-9-1 (chunks of 500), through
    ``RecordColumns`` into 8192-row record batches."""
    raw = BasicProperties(delivery_mode=2).encode()
    records = [record_of(wire_message("", "bench.q", raw, _body(i))) for i in range(n)]
    chunks = [
        encode_chunk([simple_entry(r) for r in records[i : i + 500]], chunk_id=i, timestamp=1)
        for i in range(0, n, 500)
    ]
    cpu = time.process_time()
    columns = RecordColumns("bench.q")
    rows = 0
    for chunk in chunks:
        columns.add_chunk(chunk)
        if len(columns) >= 8192:
            rows += columns.build().num_rows
    if len(columns):
        rows += columns.build().num_rows
    assert rows == n
    return n / (time.process_time() - cpu)


def publish(url: str, queue: str, n: int) -> float:
    """Publish ``n`` ~60-byte JSON messages with confirms; returns messages per second."""
    with connect(url) as c:
        c.confirm_select()
        method = m.BasicPublish(exchange="", routing_key=queue).encode()
        props = BasicProperties(delivery_mode=2).encode()
        started = time.perf_counter()
        for i in range(n):
            body = b'{"id": %d, "user": "user-%d", "amount": %d}' % (i, i % 50, i % 100)
            c.publish_frames(framing.encode_message_frames(1, method, 60, body, props, 131072))
            if c.in_flight >= 1000:
                c.wait_confirms(500, 60)
        c.wait_confirms(0, 60)
        return n / (time.perf_counter() - started)


def decode_ceiling(n: int) -> float:
    """Rows per CPU-second of the client's decode path alone, fed from memory (no broker).

    The same bytes a broker sends for ~60-byte stream messages (deliver + header with
    ``x-stream-offset`` + body), cut in 1 MiB reads, through ``scan_frames``,
    ``stream_offsets`` and ``build_batch`` in 8192-row batches.
    """
    frames = []
    for i in range(n):
        method = m.BasicDeliver(
            consumer_tag="leveret.spark.1", delivery_tag=i + 1, routing_key="bench.q"
        ).encode()
        props = BasicProperties(headers={"x-stream-offset": i + 2**32}, delivery_mode=2).encode()
        body = b'{"id": %d, "user": "user-%d", "amount": %d}' % (i, i % 50, i % 100)
        frames.append(framing.encode_message_frames(1, method, 60, body, props, 131072))
    data = b"".join(frames)
    cpu = time.process_time()
    pending = Deliveries()
    control: list[framing.Frame] = []
    rest = b""
    rows = 0
    for i in range(0, len(data), 1 << 20):
        buf = rest + data[i : i + (1 << 20)]
        used = scan_frames(buf, pending, control)
        rest = buf[used:]
        while len(pending) >= 8192:
            chunk = pending.take(8192)
            rows += build_batch(chunk, "bench.q", stream_offsets(chunk.properties)).num_rows
    if len(pending):
        chunk = pending.take()
        rows += build_batch(chunk, "bench.q", stream_offsets(chunk.properties)).num_rows
    assert rows == n
    return n / (time.process_time() - cpu)


def raw_read(
    url: str, queue: str, n: int, stream_params: ConnectionParams | None = None
) -> tuple[float, float]:
    """The executors' read path without Spark (client + Arrow batches): ``read_range`` over
    0-9-1, ``read_range_chunks`` over the stream protocol (``stream_params``).

    Returns (rows per second, rows per second of this process's CPU time): the second is the
    client's own ceiling when the broker, not the client, is the bottleneck.
    """
    cpu = time.process_time()
    started = time.perf_counter()
    got = 0
    rng = OffsetRange(queue, 0, n)
    if stream_params is not None:
        batches = read_range_chunks(
            stream_params,
            rng,
            credit=8,
            read_timeout=30,
            fail_on_data_loss=True,
            include_headers=True,
            batch_rows=8192,
        )
    else:
        batches = read_range(
            ConnectionParams.from_uri(url),
            rng,
            prefetch=2000,
            read_timeout=30,
            fail_on_data_loss=True,
            include_headers=True,
            batch_rows=8192,
        )
    for batch in batches:
        got += batch.num_rows
    return got / (time.perf_counter() - started), got / (time.process_time() - cpu)


OPTIONS: dict[str, str] = {}  # the protocol and stream port of the figures being taken


def reader(spark: SparkSession, url: str, queue: str, **options: object) -> DataFrame:
    r = spark.read.format("amqp").option("uri", url).option("queue", queue).options(**OPTIONS)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def batch_read(spark: SparkSession, url: str, queue: str, n: int, parts: int) -> float:
    started = time.perf_counter()
    reader(spark, url, queue, minPartitions=parts).write.format("noop").mode("append").save()
    return n / (time.perf_counter() - started)


def catch_up(spark: SparkSession, url: str, queue: str, n: int, work: Path) -> float:
    started = time.perf_counter()
    q = (
        spark.readStream.format("amqp")
        .option("uri", url)
        .option("queue", queue)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max(n // 4, 1)))
        .option("minPartitions", "2")
        .options(**OPTIONS)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(work / f"cp-{uuid.uuid4().hex[:6]}"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    return n / (time.perf_counter() - started)


def write(spark: SparkSession, url: str, queue: str, n: int, parts: int) -> float:
    df = spark.range(0, n, numPartitions=parts).selectExpr(
        "to_json(named_struct('id', id, 'pad', 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx')) AS value"
    )
    df.cache().count()
    started = time.perf_counter()
    df.write.format("amqp").option("uri", url).option("routingKey", queue).options(**OPTIONS).mode(
        "append"
    ).save()
    return n / (time.perf_counter() - started)


def large_reads(
    spark: SparkSession, url: str, queue: str, n: int, repeats: int = 3
) -> dict[str, float]:
    """Batch reads of a stream of ``n`` rows (``noop`` sink), ``repeats`` of each, medians.

    ``job_s``: a read of one row, Spark's fixed cost of a job (planning on the driver, the
    task's launch and its Python worker, the connection); ``rate_pN``: rows per second of a
    read with N partitions; ``net_pN``: the same without the fixed cost, rows per second per
    partition while the tasks read.
    """

    def timed(**options: object) -> float:
        started = time.perf_counter()
        reader(spark, url, queue, **options).write.format("noop").mode("append").save()
        return time.perf_counter() - started

    timed(minPartitions=1)  # warm-up: JVM, Python workers
    job = statistics.median(timed(endingOffsets=json.dumps({queue: 1})) for _ in range(repeats))
    result = {"job_s": job}
    for parts in (1, 2):
        seconds = statistics.median(timed(minPartitions=parts) for _ in range(repeats))
        result[f"rate_p{parts}"] = n / seconds
        # Too few rows to tell apart from the fixed cost: no figure.
        result[f"net_p{parts}"] = n / parts / (seconds - job) if seconds > job else float("nan")
    return result


def latency(
    spark: SparkSession, url: str, queue: str, rate: int, seconds: float, work: Path
) -> dict[str, float]:
    """Publish at ``rate``/s with the send time in the body; the query records arrival - send."""
    delays: list[float] = []
    warm_up = 10.0  # seconds of publishing before measuring: Python workers start, JIT, backlog
    measure_from = [float("inf")]

    def sink(batch: DataFrame, batch_id: int) -> None:
        now = time.time()
        sent = batch.selectExpr("CAST(get_json_object(CAST(value AS STRING), '$.t') AS DOUBLE)")
        delays.extend(now - r[0] for r in sent.collect() if r[0] >= measure_from[0])

    q = (
        spark.readStream.format("amqp")
        .option("uri", url)
        .option("queue", queue)
        .option("startingOffsets", "latest")
        .options(**OPTIONS)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(work / f"cp-{uuid.uuid4().hex[:6]}"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        while q.lastProgress is None:
            time.sleep(0.2)
        with connect(url) as c:
            c.confirm_select()
            method = m.BasicPublish(exchange="", routing_key=queue).encode()
            props = BasicProperties(delivery_mode=2).encode()
            started = time.monotonic()
            measure_from[0] = time.time() + warm_up
            sent = 0
            while time.monotonic() - started < seconds + warm_up:
                due = int((time.monotonic() - started) * rate)
                while sent < due:
                    body = json.dumps({"id": sent, "t": time.time()}).encode()
                    c.publish_frames(
                        framing.encode_message_frames(1, method, 60, body, props, 131072)
                    )
                    sent += 1
                c.wait_confirms(1000, 30)
                time.sleep(0.005)
            c.wait_confirms(0, 30)
        expected = int(seconds * rate * 0.99)
        deadline = time.monotonic() + 30
        while len(delays) < expected and time.monotonic() < deadline:
            time.sleep(0.2)
        recent = q.recentProgress[len(q.recentProgress) // 3 :]  # past the warm-up
        batch_ms = [p["batchDuration"] for p in recent if p["numInputRows"]]
        lat_ms = [p["durationMs"].get("latestOffset", 0) for p in recent]
    finally:
        q.stop()
    steady = sorted(delays)
    return {
        "messages": float(len(delays)),
        "p50": steady[len(steady) // 2],
        "p95": steady[int(len(steady) * 0.95)],
        "max": steady[-1],
        "batch_ms": statistics.median(batch_ms) if batch_ms else 0.0,
        "latestOffset_ms": statistics.median(lat_ms) if lat_ms else 0.0,
    }


def print_latency(result: dict[str, float], rate: int) -> None:
    print(
        f"latency at {rate}/s, trigger 0 s: p50 {result['p50']:.2f} s,"
        f" p95 {result['p95']:.2f} s, max {result['max']:.2f} s"
        f" ({result['messages']:.0f} messages, median batch {result['batch_ms']:.0f} ms,"
        f" latestOffset {result['latestOffset_ms']:.0f} ms)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="broker URL (default: start Leveret)")
    parser.add_argument("--stream-port", type=int, help="its stream-protocol port")
    parser.add_argument(
        "--protocols",
        default="stream,amqp",
        help="comma-separated: stream, amqp (default: both, stream,amqp)",
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=2_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--latency", action="store_true", help="also the latency figure")
    parser.add_argument("--decode-only", action="store_true", help="only the no-broker figures")
    parser.add_argument("--latency-only", action="store_true", help="only the latency figure")
    parser.add_argument(
        "--large", type=int, default=0, help="only batch reads of a stream of this many rows"
    )
    parser.add_argument(
        "--writes-only", action="store_true", help="only the writes (--messages / 2 rows each)"
    )
    args = parser.parse_args()
    protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    unknown = sorted(set(protocols) - {"stream", "amqp"})
    if unknown or not protocols:
        parser.error(f"--protocols: expected stream and/or amqp, got {args.protocols!r}")
    n = args.messages
    if args.decode_only:
        print(f"client decode, 0-9-1, from memory: {decode_ceiling(n):,.0f} rows per CPU-s")
        print(f"client decode, chunks, from memory: {decode_chunks_ceiling(n):,.0f} rows per CPU-s")
        return 0
    work = Path(tempfile.mkdtemp(prefix="leveret-spark-bench-"))
    broker = None
    url = args.url
    stream_port = args.stream_port
    if url is None:
        broker, url, stream_port = start_leveret(work / "broker")
    elif stream_port is None and ":5672/" in url:
        stream_port = 5552
    spark = None
    queues: list[str] = []

    def stream() -> str:
        name = f"bench.{uuid.uuid4().hex[:8]}"
        with connect(url) as c:
            c.declare(name, {"x-queue-type": "stream"})
        queues.append(name)
        return name

    def use(protocol: str) -> None:
        OPTIONS.clear()
        OPTIONS["protocol"] = protocol
        if stream_port is not None:
            OPTIONS["streamPort"] = str(stream_port)

    try:
        with connect(url) as c:
            print(f"broker: {c.product} {c.server_properties.get('version')!r}")
        params = ConnectionParams.from_uri(url)
        stream_params = dataclasses.replace(params, port=stream_port or 5552)
        if args.large:
            q = stream()
            rate = publish_stream(stream_params, q, args.large)
            print(f"publish stream protocol (sink client, confirms): {rate:,.0f} msg/s")
            wall, cpu = raw_read(url, q, args.large, stream_params)
            print(f"[stream] raw read (client + Arrow, no Spark): {wall:,.0f} rows/s")
            spark = make_spark()
            for protocol in protocols:
                use(protocol)
                r = large_reads(spark, url, q, args.large)
                print(f"[{protocol}] batch read job of one row: {r['job_s'] * 1000:,.0f} ms")
                for parts in (1, 2):
                    print(
                        f"[{protocol}] batch read {args.large:,}, {parts} partition(s):"
                        f" {r[f'rate_p{parts}']:,.0f} rows/s"
                    )
                    print(
                        f"[{protocol}] batch read {args.large:,} less the job's cost,"
                        f" per partition, {parts} partition(s): {r[f'net_p{parts}']:,.0f} rows/s"
                    )
            return 0
        if args.writes_only:
            spark = make_spark()
            for protocol in protocols:
                use(protocol)
                write(spark, url, stream(), 2000, 1)  # warm-up: the writer's Python workers
                for parts in (1, 2):
                    rate = write(spark, url, stream(), n // 2, parts)
                    what = f"[{protocol}] write with confirms, {parts} partition(s)"
                    print(f"{what}: {rate:,.0f} rows/s")
            return 0
        if args.latency_only:
            spark = make_spark()
            for protocol in protocols:
                use(protocol)
                result = latency(spark, url, stream(), args.rate, args.seconds, work)
                print(f"[{protocol}] ", end="")
                print_latency(result, args.rate)
            return 0
        print(f"client decode, 0-9-1, from memory:   {decode_ceiling(n):,.0f} rows per CPU-s")
        print(
            f"client decode, chunks, from memory:  {decode_chunks_ceiling(n):,.0f} rows per CPU-s"
        )
        q = stream()
        print(f"publish 0-9-1 (client, confirms, window 1000): {publish(url, q, n):,.0f} msg/s")
        if "stream" in protocols:
            rate = publish_stream(stream_params, stream(), n)
            print(f"publish stream protocol (sink client, confirms): {rate:,.0f} msg/s")
        for protocol in protocols:
            sp = stream_params if protocol == "stream" else None
            wall, cpu = raw_read(url, q, n, sp)
            print(
                f"[{protocol}] raw read (client + Arrow, no Spark): {wall:,.0f} rows/s,"
                f" {cpu:,.0f} per CPU-s"
            )
        spark = make_spark()
        for protocol in protocols:
            use(protocol)
            batch_read(spark, url, q, n, 1)  # warm-up: JVM, Python workers
            for parts in (1, 2):
                rate = batch_read(spark, url, q, n, parts)
                print(f"[{protocol}] batch read, {parts} partition(s): {rate:,.0f} rows/s")
            rate = catch_up(spark, url, q, n, work)
            print(f"[{protocol}] streaming catch-up, AvailableNow: {rate:,.0f} rows/s")
            write(spark, url, stream(), 2000, 1)  # warm-up: the writer's Python workers
            for parts in (1, 2):
                target = stream()
                rate = write(spark, url, target, n // 2, parts)
                print(f"[{protocol}] write with confirms, {parts} partition(s): {rate:,.0f} rows/s")
            if args.latency:
                result = latency(spark, url, stream(), args.rate, args.seconds, work)
                print(f"[{protocol}] ", end="")
                print_latency(result, args.rate)
        return 0
    finally:
        if spark is not None:
            spark.stop()
        for name in queues:
            with connect(url) as c:
                c.delete_queue(name)
        if broker is not None:
            broker.terminate()
            broker.wait(30)
        shutil.rmtree(work, ignore_errors=True)  # checkpoints, and the broker's data if ours


if __name__ == "__main__":
    sys.exit(main())
