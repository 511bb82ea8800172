"""``python -m bench.burst``: the broker's CPU for one small message alone on its own socket,
in a burst of them (issue 26, scenario h with the Go load generator).

The Go tool's 1000 paced publishers tick together, so once a second the broker finds about
a thousand sockets readable, one 16-byte publish on each, and handles them one after
another: the last message waits for the other 999, and p99 is about the burst's length.
This measures that burst on its own: ``--connections`` publishers (one channel each) and one
consumer (``--prefetch``, a manual ack per message, as the Go tool's), then ``--bursts``
times: one publish written on every publisher's socket back to back (a few µs each, faster
than any broker reads them), until the consumer has them all. The consumer writes each ack
on its own (``--ack-writes each``), as the Go tool's client does.

Per burst it reports the burst's length (the first write to the last delivery) and the
broker's CPU for it: the on-CPU time of all its threads (``/proc/PID/task/*/schedstat``,
nanoseconds, not the 10 ms ticks of ``/proc/PID/stat``) from just before the first write to
a settle time after the last delivery (the acks read), less the idle rate measured with the
connections open and nothing sent (heartbeats, timers, the statistics sample), divided by
the burst's messages. That CPU per message is the figure a busy machine moves least.

``--leveret PATH`` starts ``leveret serve`` from ``PATH`` (``src`` or a build's directory),
``--rabbitmq`` starts RabbitMQ (``bench.run``'s start-up), otherwise ``--port`` and
``--broker-pid`` name a running broker. One JSON line goes to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.amqp import CHANNEL, Connection, PublishTemplate, connect
from bench.stats import STAMP, percentiles
from leveret.protocol.amqp091._generated import methods as m

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["broker_cpu_ns", "build_parser", "main", "summarize"]


def broker_cpu_ns(pid: int) -> int:
    """On-CPU nanoseconds of every thread of ``pid`` (0 when it is gone)."""
    total = 0
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
    return total


def summarize(
    bursts: list[dict[str, float]], latencies_us: list[int], connections: int
) -> dict[str, Any]:
    """Medians over bursts and the percentiles of every message's latency."""

    def med(key: str) -> float | None:
        values = [b[key] for b in bursts]
        return round(statistics.median(values), 2) if values else None

    return {
        "connections": connections,
        "bursts": len(bursts),
        "burst_ms": med("length_ms"),
        "cpu_us_per_msg": med("cpu_us_per_msg"),
        "cpu_ms_per_burst": med("cpu_ms"),
        "latency_us": percentiles(latencies_us),
    }


class Sink:
    """The consumer: acks each delivery, keeps its latency, wakes the burst when all came.

    With ``each_write`` every ack is a write of its own, as the Go tool's client
    (amqp091-go flushes each frame); else the acks of one read go out in one write.
    """

    def __init__(self, conn: Connection, *, each_write: bool) -> None:
        self.count = 0
        self.expected = 0
        self.latencies: list[int] = []
        self.last_ns = 0
        self.done: asyncio.Future[None] | None = None
        self.ack = conn.machine.ack
        self.flush = conn.flush if each_write else None
        conn.on_deliver = self.deliver

    def deliver(self, tag: int, _redelivered: int, stamp: bytes) -> None:
        t = time.monotonic_ns()
        self.ack(CHANNEL, tag, False)
        if self.flush is not None:
            self.flush()
        self.count += 1
        self.last_ns = t
        self.latencies.append((t - STAMP.unpack(stamp)[0]) // 1000)
        if self.count >= self.expected and self.done is not None and not self.done.done():
            self.done.set_result(None)


async def run(args: argparse.Namespace, port: int, pid: int) -> dict[str, Any]:
    host, user, password, vhost = "127.0.0.1", "guest", "guest", "/"
    ctl = await connect(host, port, user, password, vhost)
    queue = f"burst-{os.getpid()}"
    await ctl.call(CHANNEL, m.QueueDeclare(queue=queue), m.QueueDeclareOk)
    consumer = await connect(host, port, user, password, vhost)
    sink = Sink(consumer, each_write=args.ack_writes == "each")
    await consumer.call(CHANNEL, m.BasicQos(prefetch_count=args.prefetch), m.BasicQosOk)
    await consumer.call(
        CHANNEL, m.BasicConsume(queue=queue, consumer_tag="burst"), m.BasicConsumeOk
    )
    publishers: list[Connection] = []
    for start in range(0, args.connections, 100):
        count = min(100, args.connections - start)
        publishers += await asyncio.gather(
            *(connect(host, port, user, password, vhost) for _ in range(count))
        )
    template = PublishTemplate(
        CHANNEL, "", queue, args.size, persistent=False, frame_max=publishers[0].frame_max
    )
    prefix, suffix = template.prefix, template.suffix
    transports = [p.transport for p in publishers if p.transport is not None]
    # A profiler started on this line sees the bursts and not the connections' opening.
    print(f"connected: {len(transports)} publishers", file=sys.stderr, flush=True)
    await asyncio.sleep(args.interval)
    idle_cpu, idle_t = broker_cpu_ns(pid), time.monotonic_ns()
    await asyncio.sleep(args.idle)
    idle_rate = (broker_cpu_ns(pid) - idle_cpu) / (time.monotonic_ns() - idle_t)
    bursts: list[dict[str, float]] = []
    latencies: list[int] = []
    loop = asyncio.get_running_loop()
    for seq in range(args.bursts + args.warmup):
        sink.expected = sink.count + len(transports)
        sink.done = loop.create_future()
        first = len(sink.latencies)
        cpu0, t0 = broker_cpu_ns(pid), time.monotonic_ns()
        for i, transport in enumerate(transports):
            transport.write(prefix + STAMP.pack(time.monotonic_ns(), seq, i) + suffix)
        async with asyncio.timeout(60):
            await sink.done
        await asyncio.sleep(args.settle)
        cpu1, t1 = broker_cpu_ns(pid), time.monotonic_ns()
        if seq < args.warmup:
            continue
        cpu = cpu1 - cpu0 - idle_rate * (t1 - t0)
        bursts.append(
            {
                "length_ms": (sink.last_ns - t0) / 1e6,
                "cpu_ms": cpu / 1e6,
                "cpu_us_per_msg": cpu / len(transports) / 1e3,
            }
        )
        latencies += sink.latencies[first:]
        await asyncio.sleep(args.interval)
    result = summarize(bursts, latencies, len(transports))
    result["idle_cpu_pct"] = round(idle_rate * 100, 2)
    result["per_burst"] = [{k: round(v, 3) for k, v in b.items()} for b in bursts]
    for conn in (*publishers, consumer):
        with contextlib.suppress(Exception):
            await conn.close()
    with contextlib.suppress(Exception):
        await ctl.call(CHANNEL, m.QueueDelete(queue=queue), m.QueueDeleteOk)
        await ctl.close()
    return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.burst", description=__doc__)
    p.add_argument("--port", type=int, default=5672)
    p.add_argument("--broker-pid", type=int, default=0)
    p.add_argument("--leveret", default="", help="start leveret serve from this PYTHONPATH")
    p.add_argument("--rabbitmq", action="store_true", help="start RabbitMQ")
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--bursts", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2, help="bursts run first and not counted")
    p.add_argument("--size", type=int, default=16)
    p.add_argument("--prefetch", type=int, default=100)
    p.add_argument("--interval", type=float, default=0.3, help="seconds between bursts")
    p.add_argument("--settle", type=float, default=0.05, help="after a burst's last delivery")
    p.add_argument("--idle", type=float, default=2.0, help="seconds of the idle measurement")
    p.add_argument(
        "--ack-writes",
        choices=("each", "batch"),
        default="each",
        help="one write per ack (the Go tool's client) or per read",
    )
    p.add_argument("--label", default="")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from bench.run import _raise_nofile, start_leveret, start_rabbitmq

    _raise_nofile()
    broker = None
    with tempfile.TemporaryDirectory(prefix="leveret-burst-") as workdir:
        try:
            if args.leveret:
                broker = start_leveret(args.leveret, Path(workdir))
            elif args.rabbitmq:
                broker = start_rabbitmq(Path(workdir))
            port = broker.port if broker else args.port
            pid = broker.pid if broker else args.broker_pid
            if not pid:
                print("--broker-pid (or --leveret/--rabbitmq) is needed", file=sys.stderr)
                return 2
            with contextlib.suppress(ImportError):
                import uvloop

                asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
            result = asyncio.run(run(args, port, pid))
        finally:
            if broker is not None:
                broker.stop()
    result["label"] = args.label
    result["build"] = broker.notes if broker else []
    result["loadavg"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
