"""``python -m bench.lone_read``: the broker's CPU for one read of a socket carrying one small
publish, through the real adapter (``server/connection.py``), shell and 0-9-1 front end on
in-memory transports (issue 26, scenario h: a thousand publishers, one message each).

``--connections`` publishers are opened (one channel each, heartbeats of 10 s as the Go
tool's client asks) on one broker; then, ``--repeats`` times, a 16-byte publish is handed to
every one of them in turn (``data_received``, as uvloop does once per readable socket) and
the thread's CPU time is divided by the reads. The queue is purged between repeats. Prints
the minimum and median µs per read (the minimum is the figure a shared machine moves least)
as one JSON line. Not the kernel's side of the read, nor uvloop's: only what Leveret adds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

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

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5672), "sockname": ("127.0.0.1", 5672)}.get(name, default)

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def writelines(self, data: list[bytes]) -> None:
        self.written += len(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None: ...


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
    for _ in range(args.repeats):
        t0 = time.thread_time_ns()
        for protocol in protocols:
            protocol.data_received(publish)
        per_read.append((time.thread_time_ns() - t0) / 1000 / len(protocols))
        assert queue.message_count == len(protocols), "a publish was not enqueued"
        queue.purge()
        await asyncio.sleep(0)  # the loop's callbacks, as between two bursts
    for protocol in protocols:
        protocol.connection_lost(None)
    return {
        "connections": args.connections,
        "repeats": args.repeats,
        "us_per_read_min": round(min(per_read), 3),
        "us_per_read_median": round(statistics.median(per_read), 3),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.lone_read", description=__doc__)
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--size", type=int, default=16)
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
