"""``python -m bench.amqp10_load``: scenarios a and c of ``bench.run`` over AMQP 1.0, for
Leveret's 1.0 front end and RabbitMQ's 1.0 plugin alike (``bench.run`` runs it as
scenarios j and k).

One publisher connection (this process) and one consumer connection (a child process, so
the tool's own CPU is two processes as ``bench.loadgen``'s is), each an asyncio protocol
over the project's own 1.0 client machine (``leveret.protocol.amqp10``, client role).
Scenario ``a``: 16 B bodies, both links pre-settled (at-most-once). Scenario ``c``: 1 KiB
durable bodies to a durable queue, the publisher keeps ``--confirm`` unsettled transfers
in flight (settled by the broker's ``accepted``), the consumer accepts each delivery
(one disposition per message, as a 0-9-1 consumer acks each). The queue is declared with
pika (0-9-1) beforehand, so the same run works on both brokers: addresses are
``--prefix`` + queue (``/queues/`` for RabbitMQ 4 and Leveret, ``/amq/queue/`` for
RabbitMQ 3.10's plugin).

Prints one JSON line shaped as ``bench.loadgen``'s (``rates``, ``window_s``, ``cpu`` with
the broker's CPU seconds when ``--broker-pid`` is given, ``ok``), so ``bench.run``
tabulates both tools alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import time
import uuid
from typing import TYPE_CHECKING, Any

import pika

from bench.loadgen import proc_cpu_s
from bench.peer import MachinePeer, open_peer
from leveret.protocol.amqp10 import (
    Accepted,
    Connection,
    ConnectionConfig,
    ConnectionOpened,
    CreditGranted,
    Data,
    DispositionReceived,
    Header,
    LinkAttached,
    LinkDetached,
    MessageReceived,
    Role,
    SenderSettleMode,
    SessionBegun,
    Side,
    Source,
    Target,
)
from leveret.protocol.amqp10.message import encode_message

if TYPE_CHECKING:
    from multiprocessing.connection import Connection as Pipe

__all__ = ["main", "run"]


class _Peer(MachinePeer[Connection]):
    def __init__(self, vhost: str) -> None:
        super().__init__()
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
        self.channel = -1
        self.handle = -1
        self.attached = asyncio.Event()
        self.closed = asyncio.Event()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()

    def flush(self) -> None:
        out = self.machine.pieces_to_send(time.monotonic())
        if out and self.transport is not None:
            self.transport.writelines(out)

    def event(self, event: object) -> None:
        if isinstance(event, ConnectionOpened):
            self.machine.begin()
        elif isinstance(event, SessionBegun):
            self.channel = event.channel
            self.ready.set()
        elif isinstance(event, LinkAttached):
            self.attached.set()


class Publisher(_Peer):
    def __init__(self, vhost: str, payload: bytes, settled: bool, window: int) -> None:
        super().__init__(vhost)
        self.payload = payload
        self.settled = settled
        self.window = window
        self.in_flight = 0
        self.sent = 0
        self.confirmed = 0
        self.refused = 0
        self.running = True

    def event(self, event: object) -> None:
        super().event(event)
        if isinstance(event, CreditGranted):
            self.pump()
        elif isinstance(event, DispositionReceived):
            n = event.last - event.first + 1
            self.in_flight -= n
            self.confirmed += n
            if not isinstance(event.state, Accepted):
                self.refused += n
            self.pump()

    def pump(self) -> None:
        machine = self.machine
        if self.handle < 0:
            return
        credit = machine.credit(self.channel, self.handle)
        while self.running and credit > 0 and (self.settled or self.in_flight < self.window):
            machine.send_transfer(self.channel, self.handle, self.payload, settled=self.settled)
            credit -= 1
            self.sent += 1
            if not self.settled:
                self.in_flight += 1
        self.flush()


class Consumer(_Peer):
    def __init__(self, vhost: str, settled: bool, credit: int) -> None:
        super().__init__(vhost)
        self.settled = settled
        self.credit = credit
        self.received = 0
        self.detached: str | None = None

    def event(self, event: object) -> None:
        super().event(event)
        if isinstance(event, MessageReceived):
            self.received += 1
            if not self.settled:
                self.machine.settle(event.channel, event.delivery_id, role=Role.RECEIVER)
            if self.detached is None and (
                self.machine.credit(self.channel, self.handle) < self.credit // 2
            ):
                self.machine.grant_credit(self.channel, self.handle, self.credit)
        elif isinstance(event, LinkDetached) and event.handle == self.handle:
            self.detached = str(event.error) if event.error is not None else "detached"


async def _attach(peer: _Peer, name: str, role: bool, address: str, settled: bool) -> None:
    mode = SenderSettleMode.SETTLED if settled else SenderSettleMode.UNSETTLED
    if role == Role.RECEIVER:
        source, target = Source(address=address), Target()
    else:
        source, target = Source(), Target(address=address)
    peer.handle = peer.machine.attach(
        peer.channel, name, role, source=source, target=target, snd_settle_mode=mode
    )
    peer.flush()
    await asyncio.wait_for(peer.attached.wait(), 10)


async def _consume(args: argparse.Namespace, address: str, pipe: Pipe) -> None:
    settled = args.scenario == "a"
    consumer = Consumer("/", settled=settled, credit=args.credit)
    await open_peer(consumer, args.host, args.port)
    await _attach(consumer, "c", Role.RECEIVER, address, settled)
    consumer.machine.grant_credit(consumer.channel, consumer.handle, args.credit)
    consumer.flush()
    pipe.send("ready")
    start, end = pipe.recv()  # the measured window, in the shared monotonic clock
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    at_start = consumer.received
    await asyncio.sleep(max(0.0, end - time.monotonic()))
    pipe.send((consumer.received - at_start, consumer.detached))
    if consumer.transport is not None:
        consumer.transport.close()


def _consumer_main(args: argparse.Namespace, address: str, pipe: Pipe) -> None:
    asyncio.run(_consume(args, address, pipe))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    queue = f"bench10-{uuid.uuid4().hex[:8]}"
    params = pika.ConnectionParameters(host=args.host, port=args.port)
    durable = args.scenario == "c"
    with pika.BlockingConnection(params) as conn:
        conn.channel().queue_declare(queue, durable=durable)
    a = args.scenario == "a"
    size = 16 if a else 1024
    payload = encode_message(Data(b"x" * size), header=None if a else Header(durable=True))
    address = args.prefix + queue
    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("fork").Process(
        target=_consumer_main, args=(args, address, theirs), daemon=True
    )
    child.start()
    errors: list[str] = []
    try:
        if not ours.poll(30) or ours.recv() != "ready":
            raise RuntimeError("the consumer did not attach")
        publisher = Publisher("/", payload, settled=a, window=args.confirm)
        await open_peer(publisher, args.host, args.port)
        await _attach(publisher, "p", Role.SENDER, address, a)
        publisher.pump()
        start = time.monotonic() + args.warmup
        end = start + args.duration
        ours.send((start, end))
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        sent0, confirmed0 = publisher.sent, publisher.confirmed
        tool0 = proc_cpu_s(os.getpid()) or 0.0
        child0 = proc_cpu_s(child.pid or 0) or 0.0
        broker0 = proc_cpu_s(args.broker_pid) if args.broker_pid else None
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        sent, confirmed = publisher.sent - sent0, publisher.confirmed - confirmed0
        tool = (proc_cpu_s(os.getpid()) or 0.0) + (proc_cpu_s(child.pid or 0) or 0.0)
        tool -= tool0 + child0
        broker1 = proc_cpu_s(args.broker_pid) if args.broker_pid else None
        publisher.running = False
        consumed, detached = ours.recv() if ours.poll(30) else (0, "no answer")
        if detached is not None:
            errors.append(f"the consumer's link ended: {detached}")
        if publisher.refused:
            errors.append(f"{publisher.refused} transfers not accepted")
        if publisher.transport is not None:
            publisher.transport.close()
    except (OSError, RuntimeError, TimeoutError) as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
        sent = confirmed = consumed = 0
        tool, broker0, broker1 = 0.0, None, None
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
    with pika.BlockingConnection(params) as conn:
        conn.channel().queue_delete(queue)
    window = args.duration
    cpu: dict[str, Any] = {"loadgen_pct": round(100.0 * tool / window, 1)}
    if broker0 is not None and broker1 is not None:
        cpu["broker_cpu_s"] = round(broker1 - broker0, 3)
        cpu["broker_pct"] = round(100.0 * (broker1 - broker0) / window, 1)
    return {
        "label": args.label,
        "tool": "amqp10-load",
        "scenario": args.scenario,
        "ok": not errors and consumed > 0,
        "errors": errors,
        "broker": {"host": args.host, "port": args.port, "pids": args.broker_pid},
        "window_s": window,
        "rates": {
            "published": round(sent / window, 1),
            "confirmed": round(confirmed / window, 1) if not a else 0.0,
            "consumed": round(consumed / window, 1),
        },
        "cpu": cpu,
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5672)
    p.add_argument("--scenario", choices=("a", "c"), default="a")
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--confirm", type=int, default=1000)
    p.add_argument(
        "--credit",
        type=int,
        default=1000,
        help="the consumer's link credit, topped up at half (0-9-1's prefetch, roughly)",
    )
    p.add_argument("--prefix", default="/queues/", help="/amq/queue/ for RabbitMQ 3.10")
    p.add_argument("--broker-pid", type=int, default=0)
    p.add_argument("--label", default="")
    # bench.run passes its common flags; these have no meaning here.
    p.add_argument("--drain-max", type=float, default=0.0, help=argparse.SUPPRESS)
    return p


def main() -> None:
    result = asyncio.run(run(build_parser().parse_args()))
    print(json.dumps(result))
    raise SystemExit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
