"""The Spark connector's client on its own: how fast it parses deliveries, and reads a stream.

    python -m bench.spark_client scan                        # from memory, no broker
    python -m bench.spark_client fill --url URL --queue Q    # a stream of --messages messages
    python -m bench.spark_client read --url URL --queue Q    # read_range (client + Arrow)
    python -m bench.spark_client read --url URL --queue Q --spark   # batch read, 1 partition

``scan`` feeds a recorded buffer (``--messages`` ~60-byte stream messages as a broker writes
them: deliver + header with ``x-stream-offset`` + body, in 1 MiB reads) through the client's
own read path (``AmqpClient._read_once`` over a socket stand-in) and prints rows per CPU
second. It touches only what every version of the client has (``_sock``, ``_handshake``,
``_read_once``, ``deliveries``), so the same command measures another checkout's client with
``PYTHONPATH=<its src>``. Each command prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid

from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.spark._client import AmqpClient, ConnectionParams

_CHUNK = 1 << 20


def _frame(channel: int, method: m.Method) -> bytes:
    return framing.encode_method_frame(channel, method.encode())


def recorded(n: int) -> bytes:
    """What a broker sends for ``n`` stream messages of ~60 bytes on channel 1."""
    parts = []
    for i in range(n):
        method = m.BasicDeliver(
            consumer_tag="leveret.spark.1", delivery_tag=i + 1, routing_key="bench.q"
        ).encode()
        props = BasicProperties(headers={"x-stream-offset": i + 2**32}, delivery_mode=2).encode()
        body = b'{"id": %d, "user": "user-%d", "amount": %d}' % (i, i % 50, i % 100)
        parts.append(framing.encode_message_frames(1, method, 60, body, props, 131072))
    return b"".join(parts)


class _Replay:
    """A socket stand-in: ``recv`` returns the next scripted chunk, ``sendall`` drops."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.at = 0

    def recv(self, _size: int) -> bytes:
        chunk = self.chunks[self.at]
        self.at += 1
        return chunk

    def sendall(self, _data: bytes) -> None:
        pass

    def settimeout(self, _timeout: float) -> None:
        pass

    def close(self) -> None:
        pass


def scan_once(data: bytes, n: int) -> float:
    """Rows per CPU second of the client's read path over ``data`` (``n`` deliveries)."""
    handshake = (
        _frame(0, m.ConnectionStart(0, 9, {"product": "replay"}, b"PLAIN", b"en_US"))
        + _frame(0, m.ConnectionTune(2047, 131072, 0))
        + _frame(0, m.ConnectionOpenOk())
    )
    reads = [data[i : i + _CHUNK] for i in range(0, len(data), _CHUNK)]
    sock = _Replay([handshake, _frame(1, m.ChannelOpenOk()), *reads])
    client = AmqpClient(ConnectionParams())
    client._sock = sock  # type: ignore[assignment]  # the stand-in socket
    client._handshake()
    deliveries = client.deliveries
    rows = 0
    cpu = time.process_time()
    for _ in reads:
        client._read_once()
        rows += len(deliveries.take())
    elapsed = time.process_time() - cpu
    assert rows == n, rows
    return n / elapsed


def cmd_scan(args: argparse.Namespace) -> dict[str, object]:
    data = recorded(args.messages)
    rates = [scan_once(data, args.messages) for _ in range(args.rounds)]
    return {"scan_rows_per_cpu_s": statistics.median(rates), "runs": rates}


def cmd_fill(args: argparse.Namespace) -> dict[str, object]:
    params = ConnectionParams.from_uri(args.url)
    with AmqpClient(params).connect() as c:
        c.declare(args.queue, {"x-queue-type": "stream"})
        c.confirm_select()
        method = m.BasicPublish(exchange="", routing_key=args.queue).encode()
        props = BasicProperties(delivery_mode=2).encode()
        for i in range(args.messages):
            body = b'{"id": %d, "user": "user-%d", "amount": %d}' % (i, i % 50, i % 100)
            c.publish_frames(framing.encode_message_frames(1, method, 60, body, props, 131072))
            if c.in_flight >= 1000:
                c.wait_confirms(500, 60)
        c.wait_confirms(0, 60)
    return {"filled": args.messages, "queue": args.queue}


def cmd_read(args: argparse.Namespace) -> dict[str, object]:
    if args.spark:
        return _spark_read(args)
    from leveret.spark._streams import OffsetRange, read_range

    rates = []
    for _ in range(args.rounds):
        cpu = time.process_time()
        started = time.perf_counter()
        got = 0
        for batch in read_range(
            ConnectionParams.from_uri(args.url),
            OffsetRange(args.queue, 0, args.messages),
            prefetch=2000,
            read_timeout=30,
            fail_on_data_loss=True,
            include_headers=True,
            batch_rows=8192,
        ):
            got += batch.num_rows
        rates.append((got / (time.perf_counter() - started), got / (time.process_time() - cpu)))
    return {
        "read_rows_per_s": statistics.median(r[0] for r in rates),
        "read_rows_per_cpu_s": statistics.median(r[1] for r in rates),
        "runs": rates,
    }


def _spark_read(args: argparse.Namespace) -> dict[str, object]:
    from examples.spark_bench import batch_read
    from examples.spark_pipeline import make_spark

    spark = make_spark()
    try:
        batch_read(spark, args.url, args.queue, args.messages, 1)  # warm-up: JVM, workers
        rates = [batch_read(spark, args.url, args.queue, args.messages, 1) for _ in range(2)]
    finally:
        spark.stop()
    return {"spark_batch_rows_per_s": statistics.median(rates), "runs": rates}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    scan = sub.add_parser("scan", help="the read path over a recorded buffer, no broker")
    scan.add_argument("--messages", type=int, default=200_000)
    scan.add_argument("--rounds", type=int, default=5)
    fill = sub.add_parser("fill", help="publish --messages messages into a new stream")
    read = sub.add_parser("read", help="read a stream: read_range, or a Spark batch read")
    for p in (fill, read):
        p.add_argument("--url", required=True)
        p.add_argument("--queue", default=f"bench.{uuid.uuid4().hex[:8]}")
        p.add_argument("--messages", type=int, default=200_000)
    read.add_argument("--rounds", type=int, default=3)
    read.add_argument("--spark", action="store_true", help="through Spark (1 partition)")
    args = parser.parse_args(argv)
    result = {"scan": cmd_scan, "fill": cmd_fill, "read": cmd_read}[args.command](args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
