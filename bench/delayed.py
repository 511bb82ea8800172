"""Delayed-message exchange figures: pending-message capacity and memory per scheduled
message, hold and release cost, recovery after kill -9, due-time accuracy.

``--part model`` (in-process, no sockets): N pending messages with deadlines spread over
hours held by one exchange's store; bytes per pending message (tracemalloc), the broker-wide
``Timers`` entries they cost, µs per hold and per release.

``--part broker``: a real broker on its own data directory (durable exchange, persistent
publishes through pika): its resident memory with N pending messages due hours later
(bytes per pending message beyond the empty broker), then ``kill -9``, a restart (recovery
time from the broker's log, RSS after), then M messages due a few seconds after the
restart, received by a consumer: how late each arrived (ms after its due time).

    python -m bench.delayed --part model --count 100000
    python -m bench.delayed --part broker --count 100000 --accuracy 10000

Figures are in docs/benchmarks.md ("The delayed-message exchange").
"""

from __future__ import annotations

import argparse
import gc
import re
import signal
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any


def _store(count: int, body: int) -> tuple[Any, Any, Any, list[bytes], bytes]:
    from leveret.model.timers import Timers
    from leveret.model.vhost import VirtualHost
    from leveret.protocol.amqp091._generated.properties import BasicProperties

    timers = Timers()
    vhost = VirtualHost("/", timers=timers)
    vhost.declare_exchange("d", "x-delayed-message", arguments={"x-delayed-type": "direct"})
    vhost.declare_queue("q", owner=None)
    vhost.bind_queue("q", "d", "k", {}, owner=None)
    # Published as a client would: each message's own properties (a message id, x-delay).
    raws = [
        BasicProperties(
            delivery_mode=2,
            message_id=f"order-{i}",
            headers={"x-delay": 60_000 + (i * 7919) % 7_200_000},
        ).encode()
        for i in range(count)
    ]
    return timers, vhost, vhost.exchanges["d"], raws, b"x" * body


def _hold_all(vhost: Any, exchange: Any, raws: list[bytes], payload: bytes) -> None:
    from leveret.server.amqp091.message import wire_message

    for raw in raws:
        message = wire_message("d", "k", raw, payload)
        queues, message = vhost.router.route_publish(exchange, "k", message)
        for queue in queues:
            queue.enqueue(message)


def model(count: int, body: int) -> None:
    timers, vhost, exchange, raws, payload = _store(count, body)
    started = time.perf_counter()
    _hold_all(vhost, exchange, raws, payload)
    hold = time.perf_counter() - started
    store = vhost.delay_store(exchange)
    print(f"{count} pending messages of {body} B, due over 2 h")
    print(f"  broker-wide timer entries: {len(timers)}")
    print(f"  hold: {hold / count * 1e6:.1f} µs per message")
    started = time.perf_counter()
    due = 0.0
    while store.pending:
        due += 60.0
        timers.expire(due)
    release = time.perf_counter() - started
    print(f"  release when due: {release / count * 1e6:.1f} µs per message")
    # Memory, in a second store (tracemalloc slows everything down).
    timers, vhost, exchange, raws, payload = _store(count, body)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    _hold_all(vhost, exchange, raws, payload)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    print(
        f"  memory: {held / count:.0f} B per pending message ({held / 2**20:.1f} MiB), "
        f"of which the body {body} B"
    )


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def broker(count: int, accuracy: int, body: int) -> None:
    import pika

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.integration.conftest import start_broker
    from tests.integration.pika_support import connect

    data = tempfile.mkdtemp(prefix="leveret-delayed-")
    node = start_broker("--data-dir", data)
    try:
        assert node.process is not None
        with connect(node) as conn:
            ch = conn.channel()
            ch.exchange_declare("d", "x-delayed-message", durable=True,
                                arguments={"x-delayed-type": "direct"})  # fmt: skip
            ch.queue_declare("q", durable=True)
            ch.queue_bind("q", "d", "k")
            time.sleep(1.0)
            empty = _rss(node.process.pid)
            payload = b"x" * body
            started = time.monotonic()
            for i in range(count):
                props = pika.BasicProperties(
                    delivery_mode=2,
                    message_id=f"order-{i}",
                    headers={"x-delay": 3_600_000 + (i * 7919) % 7_200_000},
                )
                ch.basic_publish("d", "k", payload, props)
            _sync(conn)
            published = time.monotonic() - started
            time.sleep(1.0)
            full = _rss(node.process.pid)
        print(
            f"{count} pending messages of {body} B, published in {published:.1f} s "
            f"({count / published:.0f}/s); broker RSS {empty / 2**20:.1f} -> "
            f"{full / 2**20:.1f} MiB: {(full - empty) / count:.0f} B per pending message"
        )
        node.stop(signal.SIGKILL)
        restarted = time.monotonic()
        node = start_broker("--data-dir", data)
        assert node.process is not None
        boot = time.monotonic() - restarted
        log = node.log_text()
        found = re.search(r"recovered .* in ([0-9.]+) s", log)
        recovery = found.group(1) if found else "?"
        print(
            f"kill -9, restart: listening after {boot:.2f} s (recovery {recovery} s); "
            f"RSS {_rss(node.process.pid) / 2**20:.1f} MiB"
        )
        lead = 4000
        with connect(node) as conn:
            ch = conn.channel()
            start = int(time.time() * 1000)
            for i in range(accuracy):
                due = start + lead + (i * 7919) % 5000
                props = pika.BasicProperties(headers={"x-delay": due - int(time.time() * 1000)})
                ch.basic_publish("d", "k", b"%d %d" % (i, due), props)
            got: list[tuple[float, bytes]] = []
            ch.basic_consume("q", lambda c, m, p, b: got.append((time.time(), b)), auto_ack=True)
            deadline = time.monotonic() + lead / 1000 + 30
            while len(got) < accuracy and time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.05)
        late = sorted(t * 1000 - int(b.split(b" ")[1]) for t, b in got)
        print(
            f"{len(got)} of {accuracy} due over 5 s: lateness ms min {late[0]:.1f} "
            f"p50 {late[len(late) // 2]:.1f} p99 {late[int(len(late) * 0.99)]:.1f} "
            f"max {late[-1]:.1f} mean {statistics.mean(late):.1f}"
        )
    finally:
        if node.process is not None and node.process.poll() is None:
            node.stop()


def _sync(conn: Any) -> None:
    import pika

    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("sync.marker", durable=True)
    ch.basic_publish("", "sync.marker", b"", pika.BasicProperties(delivery_mode=2))
    ch.queue_purge("sync.marker")
    ch.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("model", "broker"), default="model")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--accuracy", type=int, default=10_000)
    parser.add_argument("--body", type=int, default=100)
    args = parser.parse_args()
    if args.part == "model":
        model(args.count, args.body)
    else:
        broker(args.count, args.accuracy, args.body)


if __name__ == "__main__":
    main()
