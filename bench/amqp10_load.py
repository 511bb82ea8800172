"""``python -m bench.amqp10_load``: scenarios a and c of ``bench.run`` over AMQP 1.0, for
Leveret's 1.0 front end and RabbitMQ's 1.0 plugin alike.

One publisher connection and one consumer connection, each an asyncio protocol over the
project's own 1.0 client machine (``leveret.protocol.amqp10``, client role). Scenario ``a``:
16 B bodies, both links pre-settled (at-most-once). Scenario ``c``: 1 KiB durable bodies
to a durable queue, the publisher keeps ``--confirm`` unsettled transfers in flight (settled
by the broker's ``accepted``), the consumer accepts each delivery. The queue is declared
with pika (0-9-1) beforehand. Prints one JSON line: consumed msg/s over the window.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

import pika

from leveret.protocol.amqp10 import (
    Connection,
    ConnectionConfig,
    ConnectionOpened,
    CreditGranted,
    Data,
    DispositionReceived,
    Header,
    LinkAttached,
    MessageReceived,
    Role,
    SenderSettleMode,
    SessionBegun,
    Side,
    Source,
    Target,
)
from leveret.protocol.amqp10.message import encode_message


class _Peer(asyncio.Protocol):
    def __init__(self, host: str, vhost: str) -> None:
        self.machine = Connection(
            ConnectionConfig(
                side=Side.CLIENT,
                container_id=f"bench-{uuid.uuid4().hex[:8]}",
                hostname=f"vhost:{vhost}",
                sasl_mechanism="PLAIN",
                sasl_username="guest",
                sasl_password="guest",  # noqa: S106 - the broker's default user
            )
        )
        self.transport: asyncio.Transport | None = None
        self.channel = -1
        self.handle = -1
        self.ready = asyncio.Event()
        self.attached = asyncio.Event()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.machine.initiate()
        self.flush()

    def flush(self) -> None:
        out = self.machine.pieces_to_send(time.monotonic())
        if out and self.transport is not None:
            self.transport.writelines(out)

    def data_received(self, data: bytes) -> None:
        for event in self.machine.receive_data(data, time.monotonic()):
            self.event(event)
        self.flush()

    def event(self, event: object) -> None:
        if isinstance(event, ConnectionOpened):
            self.machine.begin()
        elif isinstance(event, SessionBegun):
            self.channel = event.channel
            self.ready.set()
        elif isinstance(event, LinkAttached):
            self.attached.set()


class Publisher(_Peer):
    def __init__(self, host: str, vhost: str, payload: bytes, settled: bool, window: int) -> None:
        super().__init__(host, vhost)
        self.payload = payload
        self.settled = settled
        self.window = window
        self.in_flight = 0
        self.sent = 0
        self.running = True

    def event(self, event: object) -> None:
        super().event(event)
        if isinstance(event, CreditGranted):
            self.pump()
        elif isinstance(event, DispositionReceived):
            self.in_flight -= event.last - event.first + 1
            self.pump()

    def pump(self) -> None:
        machine = self.machine
        credit = machine.credit(self.channel, self.handle)
        while self.running and credit > 0 and (self.settled or self.in_flight < self.window):
            machine.send_transfer(self.channel, self.handle, self.payload, settled=self.settled)
            credit -= 1
            self.sent += 1
            if not self.settled:
                self.in_flight += 1
        self.flush()


class Consumer(_Peer):
    def __init__(self, host: str, vhost: str, settled: bool) -> None:
        super().__init__(host, vhost)
        self.settled = settled
        self.received = 0
        self._unacked = -1

    def event(self, event: object) -> None:
        super().event(event)
        if isinstance(event, MessageReceived):
            self.received += 1
            if not self.settled:
                self.machine.settle(event.channel, event.delivery_id, role=Role.RECEIVER)
            if self.machine.credit(self.channel, self.handle) < 500:
                self.machine.grant_credit(self.channel, self.handle, 1000)


async def _open(peer: _Peer, host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_connection(lambda: peer, host, port)
    await asyncio.wait_for(peer.ready.wait(), 10)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    queue = f"bench10-{uuid.uuid4().hex[:8]}"
    params = pika.ConnectionParameters(host=args.host, port=args.port)
    with pika.BlockingConnection(params) as conn:
        conn.channel().queue_declare(queue, durable=args.scenario == "c")
    a = args.scenario == "a"
    size = 16 if a else 1024
    payload = encode_message(Data(b"x" * size), header=None if a else Header(durable=True))
    consumer = Consumer(args.host, "/", settled=a)
    await _open(consumer, args.host, args.port)
    mode = SenderSettleMode.SETTLED if a else SenderSettleMode.UNSETTLED
    consumer.handle = consumer.machine.attach(
        consumer.channel,
        "c",
        Role.RECEIVER,
        source=Source(address=args.prefix + queue),
        target=Target(),
        snd_settle_mode=mode,
    )
    consumer.flush()
    await asyncio.wait_for(consumer.attached.wait(), 10)
    consumer.machine.grant_credit(consumer.channel, consumer.handle, 1000)
    consumer.flush()
    publisher = Publisher(args.host, "/", payload, settled=a, window=args.confirm)
    await _open(publisher, args.host, args.port)
    publisher.handle = publisher.machine.attach(
        publisher.channel,
        "p",
        Role.SENDER,
        source=Source(),
        target=Target(address=args.prefix + queue),
        snd_settle_mode=mode,
    )
    publisher.flush()
    await asyncio.sleep(args.warmup)
    start_count = consumer.received
    start = time.monotonic()
    await asyncio.sleep(args.duration)
    consumed = consumer.received - start_count
    elapsed = time.monotonic() - start
    publisher.running = False
    for peer in (publisher, consumer):
        if peer.transport is not None:
            peer.transport.close()
    with pika.BlockingConnection(params) as conn:
        conn.channel().queue_delete(queue)
    return {
        "scenario": args.scenario,
        "port": args.port,
        "published": publisher.sent,
        "consumed_per_s": round(consumed / elapsed),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5672)
    p.add_argument("--scenario", choices=("a", "c"), default="a")
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--confirm", type=int, default=1000)
    p.add_argument("--prefix", default="/queues/", help="/queue/ for RabbitMQ 3.10")
    print(json.dumps(asyncio.run(run(p.parse_args()))))


if __name__ == "__main__":
    main()
