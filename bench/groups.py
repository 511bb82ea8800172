"""``python -m bench.groups``: ordered work per key with many consumers, three ways.

- ``grouped``: Leveret, one queue grouped by a header (``qpid.group_header_key``), 1,000
  groups, 10 consumers on it;
- ``plain``: Leveret, the same queue and messages without groups (the upper bound);
- ``hashed``: the RabbitMQ way: an ``x-consistent-hash`` exchange hashing on the same
  header, 10 queues with a single active consumer each, one consumer per queue; run on
  RabbitMQ 3.10.8 (its plugin) and on Leveret.

One publisher sends ``--count`` transient messages (a 16-byte stamp and padding to
``--size``; the group header ``g<seq % groups>``) as fast as the broker confirms them
(``--confirm`` in flight, so the queues stay shallow in every scenario); the
consumers (``--prefetch``, one ack per message) count them and check that each group's
messages arrive in publish order. A run's rate is messages over the time from the first to
the last delivery; the broker's CPU seconds per message come from ``/proc`` (its process
only, so the machine's other load matters less). Rounds interleave the brokers and
scenarios (Leveret, RabbitMQ, Leveret, ...); the table gives medians, the best, the CPU per
message and the load average when each ran. Brokers are started for the run on their own
ports (``bench.run``), RabbitMQ with rabbitmq_consistent_hash_exchange enabled.

    python -m bench.groups [--rounds 3] [--count 100000] [--compiled build/builds/compiled]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from bench.amqp import CHANNEL, Connection, PublishTemplate, connect
from bench.stats import STAMP
from leveret.protocol.amqp091._generated import methods as m

if TYPE_CHECKING:
    from multiprocessing.connection import Connection as Pipe

    from bench.run import Broker
    from leveret.protocol.amqp091.fieldtable import FieldValue

__all__ = ["SCENARIOS", "Result", "Target", "build_parser", "main", "run_once", "table"]

HEADER = "JMSXGroupID"
SCENARIOS = ("grouped", "plain", "hashed")
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Target(Protocol):
    """A broker to run against: its name, AMQP port and the process doing the work."""

    @property
    def name(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def pid(self) -> int: ...


@dataclass
class Result:
    broker: str
    scenario: str
    rate: float  # messages consumed per second
    cpu_us: float  # broker CPU per message
    load: float  # 1-minute load average when the run started
    out_of_order: int
    consumed: int
    notes: list[str] = field(default_factory=list)


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _children_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and every process below it (RabbitMQ's script runs beam)."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            total += _cpu(p)
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        todo.extend(int(c) for c in children)
    return total


# -- topology ------------------------------------------------------------------------------


async def declare(port: int, scenario: str, prefix: str, consumers: int) -> tuple[str, list[str]]:
    """Make the scenario's exchange and queues; (exchange to publish to, queue per consumer)."""
    ctl = await connect("127.0.0.1", port, "guest", "guest", "/")
    try:
        if scenario == "hashed":
            exchange = f"{prefix}-x"
            await ctl.call(
                1,
                m.ExchangeDeclare(
                    exchange=exchange,
                    type="x-consistent-hash",
                    arguments={"hash-header": HEADER},
                ),
                m.ExchangeDeclareOk,
            )
            queues = []
            for i in range(consumers):
                name = f"{prefix}-{i}"
                sac: dict[str, FieldValue] = {"x-single-active-consumer": True}
                await ctl.call(1, m.QueueDeclare(queue=name, arguments=sac), m.QueueDeclareOk)
                await ctl.call(
                    1, m.QueueBind(queue=name, exchange=exchange, routing_key="1"), m.QueueBindOk
                )
                queues.append(name)
            return exchange, queues
        name = f"{prefix}-q"
        args: dict[str, FieldValue] = {"qpid.group_header_key": HEADER}
        if scenario != "grouped":
            args = {}
        await ctl.call(1, m.QueueDeclare(queue=name, arguments=args), m.QueueDeclareOk)
        return "", [name] * consumers
    finally:
        await ctl.close()


async def cleanup(port: int, exchange: str, queues: list[str]) -> None:
    ctl = await connect("127.0.0.1", port, "guest", "guest", "/")
    try:
        for name in sorted(set(queues)):
            await ctl.call(1, m.QueueDelete(queue=name), m.QueueDeleteOk)
        if exchange:
            await ctl.call(1, m.ExchangeDelete(exchange=exchange), m.ExchangeDeleteOk)
    finally:
        await ctl.close()


# -- the two client processes --------------------------------------------------------------


def _consume(
    port: int, queues: list[str], prefetch: int, groups: int, count: int, pipe: Pipe
) -> None:
    asyncio.run(_consumers(port, queues, prefetch, groups, count, pipe))


async def _consumers(
    port: int, queues: list[str], prefetch: int, groups: int, count: int, pipe: Pipe
) -> None:
    conns: list[Connection] = []
    state = {"n": 0, "first": 0, "last": 0, "disorder": 0}
    last_seq = [-1] * groups
    done = asyncio.get_running_loop().create_future()

    def consumer(conn: Connection) -> None:
        ack = conn.machine.ack

        def deliver(tag: int, redelivered: int, stamp: bytes) -> None:
            t = time.monotonic_ns()
            if not state["first"]:
                state["first"] = t
            state["last"] = t
            state["n"] += 1
            ack(CHANNEL, tag, False)
            _sent, seq, _pid = STAMP.unpack(stamp)
            group = seq % groups
            if seq < last_seq[group]:
                state["disorder"] += 1
            else:
                last_seq[group] = seq
            if state["n"] >= count and not done.done():
                done.set_result(None)

        conn.on_deliver = deliver

    for i, queue in enumerate(queues):
        conn = await connect("127.0.0.1", port, "guest", "guest", "/")
        consumer(conn)
        await conn.call(1, m.BasicQos(prefetch_count=prefetch), m.BasicQosOk)
        await conn.call(1, m.BasicConsume(queue=queue, consumer_tag=f"c{i}"), m.BasicConsumeOk)
        conns.append(conn)
    pipe.send("ready")
    try:
        await asyncio.wait_for(done, timeout=280)
    except TimeoutError:
        pass
    await asyncio.gather(*(c.close() for c in conns))
    pipe.send(state)


def _publish(
    port: int, exchange: str, groups: int, count: int, size: int, window: int, pipe: Pipe
) -> None:
    asyncio.run(_publisher(port, exchange, groups, count, size, window, pipe))


async def _publisher(
    port: int, exchange: str, groups: int, count: int, size: int, window: int, pipe: Pipe
) -> None:
    conn = await connect("127.0.0.1", port, "guest", "guest", "/")
    key = "" if exchange else pipe.recv()
    confirmed = 0
    wake = asyncio.Event()

    def on_confirm(tag: int, multiple: bool, ack: bool) -> None:
        nonlocal confirmed
        confirmed = max(confirmed, tag) if multiple else confirmed + 1
        wake.set()

    if window:
        conn.on_confirm = on_confirm
        await conn.call(1, m.ConfirmSelect(), m.ConfirmSelectOk)
    templates = [
        PublishTemplate(
            1,
            exchange,
            key,
            size,
            persistent=False,
            frame_max=conn.frame_max,
            headers={HEADER: f"g{g}"},
        )
        for g in range(groups)
    ]
    pack, now = STAMP.pack, time.monotonic_ns
    seq = 0
    batch = 200
    while seq < count and conn.error is None:
        if conn.blocked or not conn.writable.is_set():
            await asyncio.sleep(0.001)
            continue
        room = window - (seq - confirmed) if window else batch
        if room <= 0:
            wake.clear()
            await wake.wait()
            continue
        n = min(batch, count - seq, room)
        parts: list[bytes] = []
        for s in range(seq, seq + n):
            t = templates[s % groups]
            parts += (t.prefix, pack(now(), s, 0), t.suffix)
        conn.publish(b"".join(parts), n)
        conn.flush()
        seq += n
        await asyncio.sleep(0)
    pipe.recv()  # stay until the consumers are done (unread publishes would be dropped)
    await conn.close()


# -- one run --------------------------------------------------------------------------------


def run_once(broker: Target, scenario: str, args: argparse.Namespace) -> Result:
    """One run of ``scenario`` against ``broker``."""
    prefix = f"groups-{os.getpid()}-{time.monotonic_ns()}"
    exchange, queues = asyncio.run(declare(broker.port, scenario, prefix, args.consumers))
    ctx = mp.get_context("spawn")
    con_parent, con_child = ctx.Pipe()
    pub_parent, pub_child = ctx.Pipe()
    cons = ctx.Process(
        target=_consume,
        args=(broker.port, queues, args.prefetch, args.groups, args.count, con_child),
    )
    pub = ctx.Process(
        target=_publish,
        args=(broker.port, exchange, args.groups, args.count, args.size, args.confirm, pub_child),
    )
    cons.start()
    if not con_parent.poll(120):
        raise RuntimeError("consumers did not start")
    con_parent.recv()
    load = os.getloadavg()[0]
    cpu0 = _children_cpu(broker.pid)
    pub.start()
    if not exchange:
        pub_parent.send(queues[0])
    state = con_parent.recv() if con_parent.poll(300) else {"n": 0, "first": 0, "last": 0}
    cpu1 = _children_cpu(broker.pid)
    pub_parent.send("stop")
    pub.join(60)
    cons.join(60)
    asyncio.run(cleanup(broker.port, exchange, queues))
    span = (state["last"] - state["first"]) / 1e9
    consumed = int(state["n"])
    return Result(
        broker.name,
        scenario,
        rate=consumed / span if span > 0 else 0.0,
        cpu_us=(cpu1 - cpu0) / consumed * 1e6 if consumed else 0.0,
        load=load,
        out_of_order=int(state.get("disorder", 0)),
        consumed=consumed,
    )


def table(results: list[Result], count: int) -> str:
    lines = [
        "| broker | scenario | runs | median msg/s | best msg/s | broker CPU µs/msg (median) "
        "| load avg at start | group order violations |",
        "|---|---|---|---|---|---|---|---|",
    ]
    keys: list[tuple[str, str]] = []
    for r in results:
        if (r.broker, r.scenario) not in keys:
            keys.append((r.broker, r.scenario))
    for broker, scenario in keys:
        rs = [r for r in results if (r.broker, r.scenario) == (broker, scenario)]
        complete = [r for r in rs if r.consumed >= count]
        rates = [r.rate for r in complete] or [0.0]
        lines.append(
            f"| {broker} | {scenario} | {len(complete)}/{len(rs)} "
            f"| {statistics.median(rates):,.0f} | {max(rates):,.0f} "
            f"| {statistics.median(r.cpu_us for r in rs):.1f} "
            f"| {', '.join(f'{r.load:.1f}' for r in rs)} "
            f"| {sum(r.out_of_order for r in rs)} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--count", type=int, default=100_000)
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--consumers", type=int, default=10)
    p.add_argument("--prefetch", type=int, default=50)
    p.add_argument("--size", type=int, default=64)
    p.add_argument(
        "--confirm",
        type=int,
        default=1000,
        help="publishes in flight before the publisher waits for confirms (0: no confirms)",
    )
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--brokers", default="leveret,rabbitmq")
    p.add_argument("--compiled", default="", help="PYTHONPATH of a compiled build for Leveret")
    return p


def main(argv: list[str] | None = None) -> int:
    from bench.run import start_leveret, start_rabbitmq

    args = build_parser().parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    brokers: list[Broker] = []
    work = Path(tempfile.mkdtemp(prefix="leveret-bench-groups-"))
    try:
        for name in args.brokers.split(","):
            where = work / name
            where.mkdir()
            if name == "leveret":
                brokers.append(start_leveret(args.compiled or None, where))
            else:
                brokers.append(
                    start_rabbitmq(where, plugins=("rabbitmq_consistent_hash_exchange",))
                )
        results: list[Result] = []
        for round_no in range(args.rounds):
            for scenario in scenarios:
                for broker in brokers:
                    if broker.name == "rabbitmq" and scenario != "hashed":
                        continue  # RabbitMQ 3.10 has no message groups
                    result = run_once(broker, scenario, args)
                    results.append(result)
                    print(
                        f"round {round_no + 1}: {broker.name} {scenario}: "
                        f"{result.rate:,.0f} msg/s, {result.cpu_us:.1f} µs/msg, "
                        f"load {result.load:.1f}, {result.out_of_order} out of order",
                        file=sys.stderr,
                        flush=True,
                    )
        print(table(results, args.count))
        print()
        for broker in brokers:
            print(f"{broker.name}: {', '.join(broker.notes)}")
        print(f"machine: {os.cpu_count()} cores")
    finally:
        for broker in brokers:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
