"""The 0-9-1 Spark sink's write into a stream without Spark: the broker's append side.

    python -m bench.sink_write                         # start Leveret, write, stop it
    python -m bench.sink_write --src OTHER/src         # the broker from another checkout
    python -m bench.sink_write --written               # stream_confirm = written
    python -m bench.sink_write --url URL --pid PID     # a running broker (RabbitMQ: beam.smp)

Publishes ``--messages`` ~60-byte rows into a new stream with the sink's own publisher
(``spark.sink.publish_batches``: confirms, window 1,000, and each row's own
``x-stream-producer`` / ``x-stream-sequence`` headers and ``message-id``, the property
sets a stream's record head cache cannot reuse), and prints one JSON line: rows/s and the
broker's CPU per row (from ``/proc/PID/stat``). ``--fixed``: the same rows with one fixed
property set instead (the cached case). Interleave brokers to compare them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa
from examples.spark_pipeline import _LISTENING

from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.spark._client import AmqpClient
from leveret.spark._options import Options
from leveret.spark.sink import _Plan, publish_batches


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start(
    src: str | None, data_dir: str, written: bool = False
) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if src is not None:
        env["PYTHONPATH"] = src
    cmd = [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0"]
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and fixed arguments
        [
            *cmd,
            *(["--stream-confirm", "written"] if written else []),
            *["--stream-port", "0", "--no-management", "--data-dir", data_dir],
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = _LISTENING.search(proc.stderr.readline())
        if found:
            return proc, f"amqp://guest:guest@{found.group(1)}:{found.group(2)}/%2F"
    proc.kill()
    raise RuntimeError("the broker did not start")


def _publish_fixed(options: Options, bodies: list[bytes]) -> int:
    """The same rows with one fixed property set (delivery-mode 2), as the sink's
    client-alone figure: what an append costs when the record head cache hits."""
    with AmqpClient(options.params).connect() as c:
        c.confirm_select()
        method = m.BasicPublish(exchange="", routing_key=options.routing_key or "").encode()
        props = BasicProperties(delivery_mode=2).encode()
        for body in bodies:
            c.publish_frames(framing.encode_message_frames(1, method, 60, body, props, c.frame_max))
            if c.in_flight >= 1000:
                c.wait_confirms(500, 60)
        c.wait_confirms(0, 60)
    return len(bodies)


def write(url: str, pid: int, messages: int, fixed: bool = False) -> dict[str, object]:
    queue = f"bench.sink.{uuid.uuid4().hex[:8]}"
    options = Options.parse({"uri": url, "queue": queue, "routingKey": queue})
    with AmqpClient(options.params).connect() as c:
        c.declare(queue, {"x-queue-type": "stream"})
    bodies = [
        b'{"id": %d, "user": "user-%d", "amount": %d}' % (i, i % 50, i % 100)
        for i in range(messages)
    ]
    batch = pa.RecordBatch.from_pydict({"value": pa.array(bodies, pa.binary())})
    plan = _Plan("value", None, None, None, None)  # what plan_columns gives a value column
    cpu = _cpu_seconds(pid)
    start = time.perf_counter()
    if fixed:
        published = _publish_fixed(options, bodies)
    else:
        published = publish_batches(options, plan, iter([batch]), f"bench-{uuid.uuid4().hex[:6]}-0")
    wall = time.perf_counter() - start
    cpu = _cpu_seconds(pid) - cpu
    with AmqpClient(options.params).connect() as c:
        c.delete_queue(queue)
    return {
        "rows": published,
        "rows_per_s": round(published / wall),
        "broker_cpu_us_per_row": round(cpu / published * 1e6, 1),
        "load": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running broker (default: start Leveret)")
    parser.add_argument("--pid", type=int, help="the running broker's process id")
    parser.add_argument("--src", help="start Leveret from this source directory")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument(
        "--fixed", action="store_true", help="one fixed property set instead of the sink's"
    )
    parser.add_argument(
        "--written",
        action="store_true",
        help="start Leveret with stream_confirm = written (RabbitMQ's guarantee)",
    )
    args = parser.parse_args(argv)
    if args.url is not None:
        if args.pid is None:
            parser.error("--url needs --pid")
        print(json.dumps(write(args.url, args.pid, args.messages, args.fixed)))
        return 0
    with tempfile.TemporaryDirectory(prefix="leveret-sink-bench-") as work:
        proc, url = _start(args.src, work, args.written)
        try:
            print(json.dumps(write(url, proc.pid, args.messages, args.fixed)))
        finally:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
