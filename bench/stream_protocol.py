"""Stream-protocol figures: publish with confirms (a raw asyncio client on Leveret's own
client-role codec) and consume (rstream, and the raw client), with the broker's CPU time per
message when its pid is given.

    python -m bench.stream_protocol --port 5552 [--pid PID] [--duration 8] [--size 1024]
        [--batch 100] [--inflight 5000] [--count 200000]

``publish``: one publisher, ``size``-byte AMQP 1.0 messages, ``batch`` per publish frame, at
most ``inflight`` unconfirmed, for ``duration`` seconds: confirmed messages per second.
``consume``: one subscription from ``first`` of the stream just filled, credit 10 chunks,
one credit back per chunk: messages per second until ``count`` are read (or the stream's
end). ``--pid``: the broker's CPU (user + system, ``/proc/<pid>/stat``) per message.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid

from leveret.convert.amqp10_amqp091 import to_amqp10
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.rabbitstream import commands as c
from leveret.protocol.rabbitstream.chunk import parse_header
from leveret.protocol.rabbitstream.codec import Role, StreamCodec
from leveret.protocol.rabbitstream.constants import OffsetType


def cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RawClient(asyncio.Protocol):
    """A client-role stream connection: commands in, handlers out."""

    def __init__(self) -> None:
        self.codec = StreamCodec(Role.CLIENT)
        self.transport: asyncio.Transport | None = None
        self.waiting: dict[int, asyncio.Future[c.Command]] = {}
        self.on_command: list[c.Command] = []
        self.confirmed = 0
        self.confirm_event = asyncio.Event()
        self.records = 0
        self.chunks = 0
        self.deliver_event = asyncio.Event()
        self.cid = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        for command in self.codec.receive(data):
            if isinstance(command, c.PublishConfirm):
                self.confirmed += len(command.publishing_ids)
                self.confirm_event.set()
            elif isinstance(command, c.Deliver):
                self.records += parse_header(command.chunk).num_records
                self.chunks += 1
                assert self.transport is not None
                self.transport.write(c.Credit(command.subscription_id, 1).encode())
                self.deliver_event.set()
            elif isinstance(command, c.Tune):
                assert self.transport is not None
                self.transport.write(self.codec.send(c.Tune(command.frame_max, 0)))
                self.waiting.pop(-1).set_result(command)
            else:
                cid = getattr(command, "correlation_id", None)
                future = self.waiting.pop(cid, None) if cid is not None else None
                if future is not None:
                    future.set_result(command)

    async def call(self, make: type[c.Command], *args: object) -> c.Command:
        self.cid += 1
        future: asyncio.Future[c.Command] = asyncio.get_running_loop().create_future()
        self.waiting[self.cid] = future
        assert self.transport is not None
        self.transport.write(self.codec.send(make(self.cid, *args)))  # type: ignore[call-arg]
        return await future

    async def open(self) -> None:
        await self.call(c.PeerProperties, {})
        await self.call(c.SaslHandshake)
        tuned: asyncio.Future[c.Command] = asyncio.get_running_loop().create_future()
        self.waiting[-1] = tuned
        await self.call(c.SaslAuthenticate, "PLAIN", b"\x00guest\x00guest")
        await tuned
        await self.call(c.Open, "/")


async def connect(host: str, port: int) -> RawClient:
    loop = asyncio.get_running_loop()
    _transport, client = await loop.create_connection(RawClient, host, port)
    await client.open()
    return client


async def publish(args: argparse.Namespace, stream: str) -> tuple[int, float, float]:
    client = await connect(args.host, args.port)
    await client.call(c.Create, stream, {})
    await client.call(c.DeclarePublisher, 1, "", stream)  # RabbitMQ 3.10 ignores a null one
    record = to_amqp10(BasicProperties(delivery_mode=2), bytes(args.size))
    assert client.transport is not None
    sent = 0
    cpu0 = cpu_seconds(args.pid)
    start = time.monotonic()
    end = start + args.duration
    while time.monotonic() < end:
        while sent - client.confirmed >= args.inflight:
            client.confirm_event.clear()
            await client.confirm_event.wait()
        messages = [c.PublishedMessage(sent + i, record) for i in range(args.batch)]
        client.transport.write(c.Publish(1, messages).encode())
        sent += args.batch
        await asyncio.sleep(0)
    while client.confirmed < sent:
        client.confirm_event.clear()
        await client.confirm_event.wait()
    elapsed = time.monotonic() - start
    cpu = cpu_seconds(args.pid) - cpu0
    client.transport.close()
    return sent, elapsed, cpu


async def consume_raw(args: argparse.Namespace, stream: str, total: int) -> tuple[float, float]:
    client = await connect(args.host, args.port)
    cpu0 = cpu_seconds(args.pid)
    start = time.monotonic()
    await client.call(c.Subscribe, 1, stream, OffsetType.FIRST, 0, 10, {})
    while client.records < total:
        client.deliver_event.clear()
        await client.deliver_event.wait()
    elapsed = time.monotonic() - start
    cpu = cpu_seconds(args.pid) - cpu0
    assert client.transport is not None
    client.transport.close()
    return elapsed, cpu


async def consume_rstream(args: argparse.Namespace, stream: str, total: int) -> tuple[float, float]:
    from rstream import Consumer, ConsumerOffsetSpecification
    from rstream import OffsetType as ROffset

    got = 0
    done = asyncio.Event()
    consumer = Consumer(args.host, port=args.port, username="guest", password="guest")  # noqa: S106
    await consumer.start()

    async def on_message(_message: bytes, _context: object) -> None:
        nonlocal got
        got += 1
        if got >= total:
            done.set()

    cpu0 = cpu_seconds(args.pid)
    start = time.monotonic()
    await consumer.subscribe(
        stream, on_message, offset_specification=ConsumerOffsetSpecification(ROffset.FIRST)
    )
    await done.wait()
    elapsed = time.monotonic() - start
    cpu = cpu_seconds(args.pid) - cpu0
    await consumer.close()
    return elapsed, cpu


async def main(args: argparse.Namespace) -> None:
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    sent, elapsed, cpu = await publish(args, stream)
    print(
        f"publish with confirms: {sent / elapsed:,.0f} msg/s"
        + (f", broker CPU {cpu / sent * 1e6:.1f} us/msg" if args.pid else "")
    )
    total = min(sent, args.count)
    elapsed, cpu = await consume_raw(args, stream, total)
    print(
        f"consume (raw client): {total / elapsed:,.0f} msg/s"
        + (f", broker CPU {cpu / total * 1e6:.2f} us/msg" if args.pid else "")
    )
    elapsed, cpu = await consume_rstream(args, stream, total)
    print(
        f"consume (rstream): {total / elapsed:,.0f} msg/s"
        + (f", broker CPU {cpu / total * 1e6:.2f} us/msg" if args.pid else "")
    )
    client = await connect(args.host, args.port)
    await client.call(c.Delete, stream)
    assert client.transport is not None
    client.transport.close()


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5552)
    parser.add_argument("--pid", type=int, help="the broker's pid (CPU per message)")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--inflight", type=int, default=5000)
    parser.add_argument("--count", type=int, default=200_000)
    asyncio.run(main(parser.parse_args()))


if __name__ == "__main__":
    cli()
