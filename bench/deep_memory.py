"""Memory of a deep queue, recovery after kill -9, and draining everything back (issue 3).

Starts Leveret on its own data directory, publishes N persistent messages (1 KiB by default)
with confirms (1000 in flight) to one durable queue, and reports the broker's resident memory
before and after (bytes per queued message beyond the empty broker). Then kills the broker
with SIGKILL, starts it again on the same directory, reports how long recovery took (the
broker's own log line, and the wall time until its port accepted connections) and its memory
with the recovered queue, and finally consumes every message, checking that each sequence
number comes back exactly once and in order.

    python -m bench.deep_memory --count 1000000
    python -m bench.deep_memory --count 5000000 --skip-drain

Figures are in docs/benchmarks.md ("Deep queues").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.amqp import PublishTemplate, connect
from bench.run import rss_kib, start_leveret
from leveret.protocol.amqp091._generated import methods as m

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bench.run import Broker

QUEUE = "deep-memory"
_SEQ = struct.Struct(">Q8x")
_RECOVERED = re.compile(r"recovered .* and (\d+) messages from .* in ([0-9.]+) s")


async def fill(port: int, count: int, size: int, in_flight: int) -> float:
    conn = await connect("127.0.0.1", port, "guest", "guest", "/")
    await conn.call(1, m.QueueDeclare(queue=QUEUE, durable=True), m.QueueDeclareOk)
    await conn.call(1, m.ConfirmSelect(), m.ConfirmSelectOk)
    template = PublishTemplate(1, "", QUEUE, size, persistent=True, frame_max=conn.frame_max)
    confirmed = 0
    nacked = 0
    room = asyncio.Event()
    room.set()

    def on_confirm(tag: int, multiple: bool, ack: bool) -> None:
        nonlocal confirmed, nacked
        done = tag - confirmed if multiple else 1
        confirmed = tag if multiple else confirmed + 1
        if not ack:
            nacked += done
        room.set()

    conn.on_confirm = on_confirm
    started = time.monotonic()
    sent = 0
    while sent < count:
        if sent - confirmed >= in_flight:
            room.clear()
            await room.wait()
            continue
        batch = min(count - sent, in_flight - (sent - confirmed), 100)
        parts: list[bytes] = []
        for _ in range(batch):
            parts += (template.prefix, _SEQ.pack(sent), template.suffix)
            sent += 1
        conn.publish(b"".join(parts), batch)
        conn.flush()
        await asyncio.sleep(0)
    while confirmed < count:
        room.clear()
        await room.wait()
    elapsed = time.monotonic() - started
    await conn.close()
    if nacked:
        raise SystemExit(f"{nacked} publishes were nacked")
    return elapsed


async def drain(port: int, count: int) -> float:
    conn = await connect("127.0.0.1", port, "guest", "guest", "/")
    await conn.call(1, m.BasicQos(prefetch_count=2000), m.BasicQosOk)
    expected = 0
    errors: list[str] = []
    done = asyncio.Event()
    last_tag = 0

    def on_deliver(tag: int, redelivered: int, stamp: bytes) -> None:
        nonlocal expected, last_tag
        seq = _SEQ.unpack(stamp)[0]
        if seq != expected and len(errors) < 5:
            errors.append(f"got sequence {seq}, expected {expected}")
        expected = seq + 1
        last_tag = tag
        if seq + 1 == count:
            done.set()

    def after_data() -> None:
        if last_tag:
            conn.ack(last_tag, multiple=True)

    conn.on_deliver = on_deliver
    conn.after_data = after_data
    started = time.monotonic()
    conn.send(1, m.BasicConsume(queue=QUEUE, consumer_tag="drain"))
    await asyncio.wait_for(done.wait(), timeout=3600)
    elapsed = time.monotonic() - started
    await conn.close()
    if errors:
        raise SystemExit("drain out of order: " + "; ".join(errors))
    return elapsed


def restart(
    broker: Broker, workdir: Path, pythonpath: str | None
) -> tuple[Broker, float, float | None]:
    broker.proc.send_signal(signal.SIGKILL)
    broker.proc.wait(30)
    started = time.monotonic()
    new = start_leveret(pythonpath, workdir, log_level="info")
    wall = time.monotonic() - started
    match = None
    for line in new.log.read_text().splitlines():
        match = _RECOVERED.search(line) or match
    return new, wall, float(match.group(2)) if match else None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.deep_memory", description=__doc__)
    p.add_argument("--count", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--in-flight", type=int, default=1000)
    p.add_argument("--skip-drain", action="store_true", help="do not consume at the end")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--pythonpath", default=None, help="run the broker from this source tree")
    args = p.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="leveret-deep-"))
    workdir.mkdir(parents=True, exist_ok=True)
    broker = start_leveret(args.pythonpath, workdir)
    result: dict[str, object] = {"count": args.count, "size": args.size}
    try:
        time.sleep(1.0)
        base = rss_kib(broker.pid)[0]
        fill_s = asyncio.run(fill(broker.port, args.count, args.size, args.in_flight))
        time.sleep(2.0)
        full = rss_kib(broker.pid)[0]
        result.update(
            fill_s=round(fill_s, 1),
            confirmed_per_s=round(args.count / fill_s),
            rss_base_mib=round(base / 1024, 1),
            rss_full_mib=round(full / 1024, 1),
            bytes_per_message=round((full - base) * 1024 / args.count, 1),
        )
        broker, wall, logged = restart(broker, workdir, args.pythonpath)
        time.sleep(1.0)
        recovered_rss = rss_kib(broker.pid)[0]
        result.update(
            recovery_s=logged,
            restart_wall_s=round(wall, 2),
            rss_recovered_mib=round(recovered_rss / 1024, 1),
            recovered_bytes_per_message=round((recovered_rss - base) * 1024 / args.count, 1),
        )
        if not args.skip_drain:
            drain_s = asyncio.run(drain(broker.port, args.count))
            result.update(drain_s=round(drain_s, 1), drained_per_s=round(args.count / drain_s))
    finally:
        broker.stop()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
