"""``python -m bench.lone_read``: the broker's CPU for one read of a socket carrying one small
publish, through the real adapter (``server/connection.py``), shell and 0-9-1 front end on
in-memory transports (issue 26, scenario h: a thousand publishers, one message each).

``--connections`` publishers are opened (one channel each, heartbeats of 10 s as the Go
tool's client asks) on one broker; then, ``--repeats`` times, a 16-byte publish is handed to
every one of them in turn (``data_received``, as uvloop does once per readable socket) and
the thread's CPU time is divided by the reads (one untimed burst first). The queue is purged
between repeats. Prints the minimum and median µs per read (the minimum is the figure a
shared machine moves least) as one JSON line. Not the kernel's side of the read, nor
uvloop's: only what Leveret adds.

``--consume``: the queue has one consumer as the Go tool's (``--prefetch``, a manual ack of
each message) on a connection of its own, and each repeat runs until it has acked the whole
burst: the loop's callbacks flush its deliveries, and the acks of each write it was sent come
back as one read (``--ack-reads`` splits them into that many reads). The figure is then the
CPU per message of the publish, its delivery and its ack. With it the result also gives
``written_at_us``: for every message, the thread's CPU time from the start of its burst to
the write that carried its delivery to the consumer (percentiles over all the repeats'
messages; ``first_written_at_us``, the median burst's first such write): where in a
burst's work the consumer is sent what it waits for, the order of the loop's work, which a
busy machine does not blur (issue 26: the writes that wait for the iteration's end,
``server/waiting_writes.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any, cast

from bench.stats import percentiles
from leveret.auth.users import UserStore
from leveret.model.broker import Broker
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091.connection import Limits
from leveret.server.connection import ConnectionProtocol
from leveret.server.memory_alarm import MemoryAlarm

__all__ = ["main"]


class _Transport:
    """An in-memory transport: what the adapter asks of uvloop's, doing nothing."""

    def __init__(self) -> None:
        self.written = 0
        self.writes = 0
        self.data: list[bytes] = []
        self.keep = False
        # The thread's CPU time (ns) of each write kept, and its deliveries' count.
        self.stamps: list[tuple[int, int]] = []

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5672), "sockname": ("127.0.0.1", 5672)}.get(name, default)

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def writelines(self, data: list[bytes]) -> None:
        self.written += len(data)
        self.writes += 1
        if self.keep:
            self.stamps.append((time.thread_time_ns(), len(self.data)))
            self.data.append(b"".join(data))

    def delivery_tags(self, since_ns: int = 0, positions: list[int] | None = None) -> list[int]:
        """The basic.deliver frames written since the last call: their delivery tags; with
        ``positions``, each one's write time less ``since_ns`` (µs of the thread's CPU)."""
        if positions is not None:
            for stamp, index in self.stamps:
                count = len(_deliveries(self.data[index]))
                positions.extend([(stamp - since_ns) // 1000] * count)
        self.stamps.clear()
        data = b"".join(self.data)
        self.data.clear()
        return _deliveries(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None: ...


def _deliveries(data: bytes) -> list[int]:
    """The delivery tags of the basic.deliver frames in ``data``."""
    tags = []
    at = 0
    while at < len(data):
        kind, size = data[at], int.from_bytes(data[at + 3 : at + 7], "big")
        payload = data[at + 7 : at + 7 + size]
        if kind == 1 and payload[:4] == b"\x00\x3c\x00\x3c":  # basic.deliver
            tag_at = 5 + payload[4]  # after the consumer tag (a short string)
            tags.append(int.from_bytes(payload[tag_at : tag_at + 8], "big"))
        at += 8 + size
    return tags


def _method(channel: int, method: m.Method) -> bytes:
    return framing.encode_method_frame(channel, method.encode())


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    broker = Broker()
    users = UserStore.with_default_user()
    alarm = MemoryAlarm(broker.gauge, 1 << 40)
    registry: set[ConnectionProtocol] = set()
    opening = (
        _method(0, m.ConnectionStartOk(mechanism="PLAIN", response=b"\0guest\0guest")),
        _method(0, m.ConnectionTuneOk(channel_max=10, frame_max=131072, heartbeat=10))
        + _method(0, m.ConnectionOpen(virtual_host="/"))
        + _method(1, m.ChannelOpen())
        + _method(1, m.QueueDeclare(queue="lone")),
    )
    consumer: ConnectionProtocol | None = None
    if args.consume:
        consumer = ConnectionProtocol(broker, users, Limits(), registry, alarm)
        consumer.connection_made(_Transport())  # type: ignore[arg-type]
        consumer.data_received(framing.PROTOCOL_HEADER)
        for data in opening:
            consumer.data_received(data)
        consumer.data_received(
            _method(1, m.BasicQos(prefetch_count=args.prefetch))
            + _method(1, m.BasicConsume(queue="lone", consumer_tag="c"))
        )
        consumer.transport.keep = True  # type: ignore[union-attr]
        consumer.transport.delivery_tags()  # type: ignore[union-attr]
    protocols: list[ConnectionProtocol] = []
    for _ in range(args.connections):
        protocol = ConnectionProtocol(broker, users, Limits(), registry, alarm)
        protocol.connection_made(_Transport())  # type: ignore[arg-type]
        protocol.data_received(framing.PROTOCOL_HEADER)
        for data in opening:
            protocol.data_received(data)
        protocols.append(protocol)
    publish = framing.encode_message_frames(
        1, m.BasicPublish(routing_key="lone").encode(), 60, b"x" * args.size, b"\x00\x00", 131072
    )
    queue = broker.vhosts["/"].queues["lone"]
    per_read: list[float] = []
    positions: list[int] = []
    firsts: list[int] = []  # each burst's first delivery written, µs of CPU into the burst
    writes = 0
    # One burst before the timed ones: the first burst of a fresh process runs every path for
    # the first time (the specialising interpreter's warm-up, cold caches), and its first
    # delivery would land later in its CPU than in any burst after it.
    for burst in range(args.repeats + 1):
        timed = burst > 0
        t0 = time.thread_time_ns()
        for protocol in protocols:
            protocol.data_received(publish)
        if consumer is not None:
            before = len(positions)
            burst_writes = await _consume(consumer, len(protocols), args.ack_reads, t0, positions)
            if timed:
                writes += burst_writes
                firsts.append(min(positions[before:]))
            else:
                del positions[before:]
        if timed:
            per_read.append((time.thread_time_ns() - t0) / 1000 / len(protocols))
        if consumer is None:
            assert queue.message_count == len(protocols), "a publish was not enqueued"
            queue.purge()
        else:
            assert queue.message_count == 0, "a publish was not delivered"
        await asyncio.sleep(0)  # the loop's callbacks, as between two bursts
    for protocol in protocols:
        protocol.connection_lost(None)
    result: dict[str, Any] = {
        "connections": args.connections,
        "repeats": args.repeats,
        "us_per_read_min": round(min(per_read), 3),
        "us_per_read_median": round(statistics.median(per_read), 3),
    }
    if consumer is not None:
        result["consumer_writes_per_burst"] = writes / args.repeats
        result["written_at_us"] = percentiles(positions)
        result["first_written_at_us"] = statistics.median(firsts)
        consumer.connection_lost(None)
    return result


async def _consume(
    consumer: ConnectionProtocol, count: int, ack_reads: int, t0: int, positions: list[int]
) -> int:
    """Ack what the consumer is sent until it has ``count`` messages; its writes."""
    transport = cast("_Transport", consumer.transport)
    writes0 = transport.writes
    acked = 0
    while acked < count:
        await asyncio.sleep(0)  # the loop's callbacks: the deliveries' flush
        tags = transport.delivery_tags(t0, positions)
        assert tags, "the consumer was sent nothing"
        acks = [_method(1, m.BasicAck(delivery_tag=tag)) for tag in tags]
        step = -(-len(acks) // ack_reads)
        for at in range(0, len(acks), step):
            consumer.data_received(b"".join(acks[at : at + step]))
        acked += len(tags)
    return transport.writes - writes0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.lone_read", description=__doc__)
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--size", type=int, default=16)
    p.add_argument("--consume", action="store_true", help="one consumer acks every message")
    p.add_argument("--prefetch", type=int, default=100)
    p.add_argument("--ack-reads", type=int, default=1, help="reads the acks of a write take")
    p.add_argument("--label", default="")
    args = p.parse_args(argv)
    # The server's loop (``assembly.py``): its clock and call_soon are uvloop's.
    import uvloop

    result = uvloop.run(_run(args))
    if args.label:
        result["label"] = args.label
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
