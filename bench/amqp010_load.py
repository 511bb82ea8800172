"""``python -m bench.amqp010_load``: scenarios a and c of ``bench.run`` over AMQP 0-10, and
(``--compare``) the same scenarios over 0-9-1 with ``bench.loadgen``, in interleaved rounds
against the same broker.

One publisher connection and one consumer connection, each an asyncio protocol over the
project's own 0-10 machine (``leveret.protocol.amqp010``, client role). Scenario ``a``:
16 B transient bodies, the subscription's accept-mode none; the publisher keeps at most
``--window`` transfers not yet completed (every 256th asks for completion). Scenario ``c``:
1 KiB persistent bodies to a durable queue, at most ``--window`` (1000) transfers not yet
completed (a transfer completes once stored: 0-10's publisher confirm), the consumer
accepts every 100 transfers. The consumer's message credit is topped up by 1000 when it
falls under 500 (as ``bench.amqp10_load``). With ``--broker-pid`` the broker's CPU time per
consumed message is reported too. Prints one JSON line per round and protocol.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import uuid
from typing import Any

from bench.loadgen import proc_cpu_s
from bench.peer import MachinePeer, open_peer
from leveret.protocol.amqp010._generated.commands import (
    MessageAccept,
    MessageFlow,
    MessageSetFlowMode,
    MessageSubscribe,
    MessageTransfer,
    QueueDeclare,
    QueueDelete,
)
from leveret.protocol.amqp010._generated.structs import DeliveryProperties
from leveret.protocol.amqp010.connection import Connection, ConnectionConfig, Role
from leveret.protocol.amqp010.events import (
    CommandReceived,
    CommandsCompleted,
    ConnectionOpened,
    SessionAttached,
    StartReceived,
)
from leveret.protocol.amqp010.ops import encode_header
from leveret.protocol.amqp010.sequence import SequenceSet

CHANNEL = 1
SYNC_EVERY = 256
ACCEPT_EVERY = 100
LOADGEN = {
    "a": ("--size", "16", "--autoack"),
    "c": ("--size", "1024", "--confirm", "1000", "--persistent", "--durable", "--prefetch", "100"),
}


class _Peer(MachinePeer[Connection]):
    def __init__(self) -> None:
        super().__init__()
        self.machine = Connection(Role.CLIENT, ConnectionConfig(virtual_host="/"))

    def flush(self) -> None:
        out = self.machine.data_to_send()
        if out and self.transport is not None:
            self.transport.write(out)

    def event(self, event: object) -> None:
        if isinstance(event, StartReceived):
            self.machine.start_ok("PLAIN", b"\0guest\0guest")
        elif isinstance(event, ConnectionOpened):
            self.machine.attach(CHANNEL, uuid.uuid4().hex.encode())
        elif isinstance(event, SessionAttached):
            self.ready.set()


class Publisher(_Peer):
    def __init__(self, queue: str, body: bytes, *, persistent: bool, window: int) -> None:
        super().__init__()
        props = DeliveryProperties(routing_key=queue, delivery_mode=2 if persistent else 1)
        self.header = encode_header([props])
        self.body = body
        self.window = window
        self.sent = 0  # ids are 0, 1, 2, ... on a new session
        self.completed = 0  # every id below this one is complete
        self.running = True
        self.command = MessageTransfer(destination="", accept_mode=1, acquire_mode=0)

    def event(self, event: object) -> None:
        super().event(event)
        if isinstance(event, CommandsCompleted):
            for _lower, upper in event.commands:
                self.completed = max(self.completed, upper + 1)
            self.pump()
        elif isinstance(event, SessionAttached):
            self.pump()

    def pump(self) -> None:
        machine, command, header, body = self.machine, self.command, self.header, self.body
        while self.running and self.sent - self.completed < self.window:
            sync = (self.sent + 1) % SYNC_EVERY == 0
            machine.send_command(CHANNEL, command, sync=sync, header=header, body=body)
            self.sent += 1
        self.flush()


class Consumer(_Peer):
    def __init__(self, queue: str, *, explicit: bool) -> None:
        super().__init__()
        self.queue = queue
        self.explicit = explicit
        self.received = 0
        self.credit = 0
        self.to_accept = SequenceSet()
        self.pending = 0

    def subscribe(self) -> None:
        m = self.machine
        m.send_command(
            CHANNEL,
            MessageSubscribe(
                queue=self.queue,
                destination="c",
                accept_mode=0 if self.explicit else 1,
                acquire_mode=0,
            ),
        )
        m.send_command(CHANNEL, MessageSetFlowMode(destination="c", flow_mode=0))
        m.send_command(CHANNEL, MessageFlow(destination="c", unit=1, value=0xFFFFFFFF))
        self.grant(1000)

    def grant(self, n: int) -> None:
        self.machine.send_command(CHANNEL, MessageFlow(destination="c", unit=0, value=n))
        self.credit += n
        self.flush()

    def event(self, event: object) -> None:
        super().event(event)
        if isinstance(event, CommandReceived) and isinstance(event.command, MessageTransfer):
            self.received += 1
            self.credit -= 1
            machine = self.machine
            machine.complete(CHANNEL, event.command_id)
            self.pending += 1
            if self.explicit:
                self.to_accept.add(event.command_id)
            if self.pending >= ACCEPT_EVERY:
                if self.explicit:
                    machine.send_command(CHANNEL, MessageAccept(transfers=self.to_accept))
                    self.to_accept = SequenceSet()
                machine.send_completed(CHANNEL)  # lets the broker forget what it sent
                self.pending = 0
            if self.credit < 500:
                self.grant(1000)


async def run_010(args: argparse.Namespace) -> dict[str, Any]:
    queue = f"bench010-{uuid.uuid4().hex[:8]}"
    c = args.scenario == "c"
    consumer = Consumer(queue, explicit=c)
    await open_peer(consumer, args.host, args.port)
    consumer.machine.send_command(CHANNEL, QueueDeclare(queue=queue, durable=c))
    consumer.subscribe()
    publisher = Publisher(queue, b"x" * (1024 if c else 16), persistent=c, window=args.window)
    await open_peer(publisher, args.host, args.port)
    await asyncio.sleep(args.warmup)
    count0, cpu0, t0 = consumer.received, _cpu(args), time.monotonic()
    await asyncio.sleep(args.duration)
    count1, cpu1, t1 = consumer.received, _cpu(args), time.monotonic()
    publisher.running = False
    consumer.machine.send_command(CHANNEL, QueueDelete(queue=queue))
    consumer.flush()
    await asyncio.sleep(0.2)
    for peer in (publisher, consumer):
        if peer.transport is not None:
            peer.transport.close()
    consumed = count1 - count0
    return _result("0-10", args, consumed, t1 - t0, cpu0, cpu1)


def run_091(args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "bench.loadgen", "--host", args.host, "--port", str(args.port),
        "--producers", "1", "--consumers", "1", "--duration", str(args.duration),
        "--warmup", str(args.warmup), *LOADGEN[args.scenario],
    ]  # fmt: skip
    if args.broker_pid:
        cmd += ["--broker-pid", str(args.broker_pid)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)  # noqa: S603 - our own tool
    report = json.loads(done.stdout.strip().splitlines()[-1])
    rate = float(report["rates"]["consumed"])
    out: dict[str, Any] = {
        "protocol": "0-9-1",
        "scenario": args.scenario,
        "consumed_per_s": round(rate),
    }
    broker_s = (report.get("cpu") or {}).get("broker_cpu_s")
    if broker_s is not None and rate:
        out["broker_cpu_us_per_msg"] = round(broker_s / (rate * args.duration) * 1e6, 1)
    return out


def _cpu(args: argparse.Namespace) -> float | None:
    return proc_cpu_s(args.broker_pid) if args.broker_pid else None


def _result(
    protocol: str,
    args: argparse.Namespace,
    consumed: int,
    elapsed: float,
    cpu0: float | None,
    cpu1: float | None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "protocol": protocol,
        "scenario": args.scenario,
        "consumed_per_s": round(consumed / elapsed),
    }
    if cpu0 is not None and cpu1 is not None and consumed:
        out["broker_cpu_us_per_msg"] = round((cpu1 - cpu0) / consumed * 1e6, 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5672)
    p.add_argument("--scenario", choices=("a", "c"), default="a")
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--window", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--compare", action="store_true", help="also 0-9-1 (bench.loadgen)")
    p.add_argument("--broker-pid", type=int, default=0)
    args = p.parse_args()
    for _ in range(args.rounds):
        print(json.dumps(asyncio.run(run_010(args))), flush=True)
        if args.compare:
            print(json.dumps(run_091(args)), flush=True)


if __name__ == "__main__":
    main()
