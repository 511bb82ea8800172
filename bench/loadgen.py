"""``python -m bench.loadgen``: an AMQP 0-9-1 load generator modelled on RabbitMQ PerfTest.

Flags follow the reference Go tool (``../shared/bench``) and PerfTest: ``--producers`` (-x),
``--consumers`` (-y), ``--size`` (-s), ``--duration`` (-z), ``--confirm N`` (-c, max
unconfirmed per publisher), ``--persistent`` (-f persistent), ``--durable``, ``--prefetch`` (-q),
``--autoack`` (-a), ``--multi-ack N`` (-A), ``--rate`` (-r, per publisher), ``--queues``
(publisher i and consumer j use queue i%Q and j%Q; fanout: every queue), ``--exchange-type``.
Leveret's own additions: ``--deep N`` (scenario i: fill a queue with N messages while no
consumer runs, then drain it) and ``--pub-procs`` / ``--con-procs`` (worker processes).

Timeline: declare, start consumers, start publishers, warm-up, measured window, stop
publishers (they wait for outstanding confirms), drain, verify, delete.  Publishers and
consumers run in separate processes, each an asyncio loop (uvloop when installed) over many
connections.  One JSON line goes to stdout.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from bench.amqp import CHANNEL, Connection, PublishTemplate, StampConnection, connect
from bench.stats import (
    STAMP,
    ConfirmTracker,
    QueueVerdict,
    ReceiptLog,
    percentiles,
    verify_queue,
)
from leveret.protocol.amqp091._generated import methods as m

if TYPE_CHECKING:
    from collections.abc import Coroutine, Sequence
    from multiprocessing.connection import Connection as Pipe
    from multiprocessing.process import BaseProcess

    from leveret.protocol.amqp091.fieldtable import FieldValue

__all__ = ["Config", "build_parser", "main", "parse_args"]

FOREVER_NS = 1 << 62
# From this body size up, a consumer walks its reads in place and keeps only each body's
# stamp (bench.stamp_reader), and a publisher writes each message as pieces, the template's
# padding never copied (Connection.publish_parts); below it, a delivery's copies and a joined
# batch of publishes cost less than the pieces' per-message Python work.
LARGE_BODY = 4096


@dataclass
class Config:
    """Every knob of one run (also echoed in the JSON output)."""

    host: str = "127.0.0.1"
    port: int = 5672
    user: str = "guest"
    password: str = "guest"  # noqa: S105 - RabbitMQ's default user
    vhost: str = "/"
    producers: int = 1
    consumers: int = 1
    size: int = 16
    duration: float = 10.0
    warmup: float = 1.0
    confirm: int = 0
    persistent: bool = False
    durable: bool = False
    prefetch: int = 0
    autoack: bool = False
    multi_ack: int = 1
    rate: float = 0.0
    queues: int = 1
    exchange_type: str = "default"
    queue: str = ""
    queue_type: str = ""
    deep: int = 0
    drain_idle: float = 10.0
    drain_max: float = 60.0
    pub_procs: int = 1
    con_procs: int = 1
    broker_pid: list[int] = field(default_factory=list)
    label: str = ""
    uvloop: bool = True


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.loadgen",
        description="AMQP 0-9-1 load generator (PerfTest-like); prints one JSON line.",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5672)
    p.add_argument("--user", default="guest")
    p.add_argument("--pass", dest="password", default="guest")
    p.add_argument("--vhost", default="/")
    p.add_argument("--producers", type=int, default=1, help="publishers, one connection each")
    p.add_argument("--consumers", type=int, default=1, help="consumers, one connection each")
    p.add_argument("--size", type=int, default=16, help="body bytes (>= 16)")
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds before measuring")
    p.add_argument("--confirm", type=int, default=0, help="max unconfirmed per publisher")
    p.add_argument("--persistent", action="store_true", help="delivery-mode 2")
    p.add_argument("--durable", action="store_true", help="durable queues/exchange")
    p.add_argument("--prefetch", type=int, default=0, help="basic.qos prefetch (0 = none)")
    p.add_argument("--autoack", action="store_true", help="consume with no-ack")
    p.add_argument("--multi-ack", type=int, default=1, help="ack multiple every N (1 = each)")
    p.add_argument("--rate", type=float, default=0.0, help="msg/s per publisher (0 = max)")
    p.add_argument("--queues", type=int, default=1)
    p.add_argument("--exchange-type", choices=("default", "direct", "fanout"), default="default")
    p.add_argument("--queue", default="", help="queue name prefix (default: unique)")
    p.add_argument("--queue-type", default="", help="x-queue-type (quorum: RabbitMQ's)")
    p.add_argument("--deep", type=int, default=0, help="fill N messages, then drain")
    p.add_argument("--drain-idle", type=float, default=10.0, help="s without progress")
    p.add_argument("--drain-max", type=float, default=60.0)
    p.add_argument("--pub-procs", type=int, default=1, help="publisher worker processes")
    p.add_argument("--con-procs", type=int, default=1, help="consumer worker processes")
    p.add_argument("--broker-pid", default="", help="comma-separated pids for CPU figures")
    p.add_argument("--label", default="")
    p.add_argument("--no-uvloop", dest="uvloop", action="store_false")
    return p


def parse_args(argv: Sequence[str] | None = None) -> Config:
    """Parse and validate the command line (exits with status 2 on a bad combination)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    values = vars(ns)
    pids = values.pop("broker_pid")
    cfg = Config(**values, broker_pid=[int(x) for x in pids.split(",") if x.strip()])
    problems = []
    if cfg.size < STAMP.size:
        problems.append(f"--size must be at least {STAMP.size}")
    if cfg.producers < 1 or cfg.queues < 1 or cfg.consumers < 0:
        problems.append("--producers and --queues must be >= 1, --consumers >= 0")
    if cfg.deep and cfg.consumers < 1:
        problems.append("--deep needs at least one consumer to drain")
    if cfg.multi_ack < 1:
        problems.append("--multi-ack must be >= 1")
    if not cfg.autoack and cfg.prefetch and cfg.multi_ack > cfg.prefetch:
        problems.append("--multi-ack larger than --prefetch would stall the consumers")
    if cfg.pub_procs < 1 or cfg.con_procs < 1:
        problems.append("--pub-procs and --con-procs must be >= 1")
    if cfg.duration <= 0 and not cfg.deep:
        problems.append("--duration must be > 0")
    if problems:
        parser.error("; ".join(problems))
    cfg.pub_procs = min(cfg.pub_procs, cfg.producers)
    cfg.con_procs = max(1, min(cfg.con_procs, cfg.consumers))
    return cfg


# -- topology --------------------------------------------------------------------------------


def queue_names(cfg: Config) -> list[str]:
    prefix = cfg.queue or f"bench-{os.getpid()}-{random.randrange(1 << 30):x}"
    return [f"{prefix}-{i}" for i in range(cfg.queues)]


def exchange_name(cfg: Config, queues: list[str]) -> str:
    return "" if cfg.exchange_type == "default" else queues[0].rsplit("-", 1)[0] + "-x"


def routes(cfg: Config, publisher: int) -> list[int]:
    """Indexes of the queues a publisher's messages reach."""
    if cfg.exchange_type == "fanout":
        return list(range(cfg.queues))
    return [publisher % cfg.queues]


def split(items: int, procs: int) -> list[list[int]]:
    """Round-robin ``range(items)`` over ``procs`` workers (empty workers dropped)."""
    return [x for x in ([i for i in range(items) if i % procs == w] for w in range(procs)) if x]


# -- /proc -----------------------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float | None:
    """utime + stime of a process (all its threads), in seconds; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_cpu() -> tuple[float, float]:
    """(busy, total) seconds of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    total = sum(values[:8])
    idle = values[3] + values[4]
    return (total - idle) / CLK_TCK, total / CLK_TCK


def _sum_cpu(pids: Sequence[int]) -> float:
    return sum(x for x in (proc_cpu_s(p) for p in pids) if x is not None)


# -- workers ---------------------------------------------------------------------------------


def _install_loop(use_uvloop: bool) -> None:
    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            return
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def _recv(pipe: Pipe, within: float | None = None) -> Any:
    loop = asyncio.get_running_loop()
    ready = await loop.run_in_executor(None, pipe.poll, within)
    if not ready:
        raise TimeoutError("no word from the coordinator")
    return pipe.recv()


async def _sleep_until(t_ns: int) -> None:
    delay = (t_ns - time.monotonic_ns()) / 1e9
    if delay > 0:
        await asyncio.sleep(delay)


class Publisher:
    """One publishing connection (channel 1)."""

    def __init__(self, cfg: Config, conn: Connection, pid: int, template: PublishTemplate):
        self.cfg = cfg
        self.conn = conn
        self.pid = pid
        self.template = template
        self.seq = 0
        self.tracker = ConfirmTracker() if cfg.confirm else None
        self.wake = asyncio.Event()
        per_msg = len(template.prefix) + len(template.suffix) + STAMP.size
        # Up to 64 KiB of joined publishes a turn; written as pieces (a large body), up to
        # 256 KiB: nothing is joined, and a turn's writev and loop pass serve four 64 KiB
        # bodies instead of one.
        turn = 1 << 18 if len(template.suffix) >= LARGE_BODY else 1 << 16
        self.batch = max(1, min(256, turn // per_msg))
        if cfg.confirm:
            self.batch = min(self.batch, max(1, cfg.confirm // 4))
        conn.on_confirm = self._confirm
        conn.flow_changed = self.wake.set

    def _confirm(self, tag: int, multiple: bool, ack: bool) -> None:
        assert self.tracker is not None
        self.tracker.confirm(tag, multiple=multiple, ack=ack)
        self.wake.set()

    async def _wait(self) -> None:
        self.wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.05):
                await self.wake.wait()

    def _room(self) -> int:
        if self.tracker is None:
            return self.batch
        return min(self.batch, self.cfg.confirm - (self.seq - self.tracker.resolved))

    def _send(self, n: int) -> None:
        """Publish the next ``n`` messages, each stamped as it is made: a large body as
        pieces (its padding shared, never joined), small ones joined into one write."""
        conn, pid, seq = self.conn, self.pid, self.seq
        prefix, suffix = self.template.prefix, self.template.suffix
        pack, now = STAMP.pack, time.monotonic_ns
        self.seq = seq + n
        if len(suffix) >= LARGE_BODY:
            parts = [x for s in range(seq, seq + n) for x in (prefix + pack(now(), s, pid), suffix)]
            conn.publish_parts(parts, n)
        else:
            parts = []
            for s in range(seq, seq + n):
                parts += (prefix, pack(now(), s, pid), suffix)
            conn.publish(b"".join(parts), n)
            conn.flush()

    async def run(self, stop_ns: int, limit: int) -> None:
        """Publish as fast as allowed until ``stop_ns`` or ``limit`` messages."""
        conn, now = self.conn, time.monotonic_ns
        while self.seq < limit and conn.error is None:
            if now() >= stop_ns:
                break
            if conn.blocked or not conn.writable.is_set():
                await self._wait()
                continue
            n = min(self._room(), limit - self.seq)
            if n <= 0:
                await self._wait()
                continue
            self._send(n)
            await asyncio.sleep(0)

    async def run_rate(self, start_ns: int, stop_ns: int, rate: float, phase: float) -> None:
        """Publish ``rate`` messages/s (at most 100 at once to catch up) until ``stop_ns``."""
        conn, now = self.conn, time.monotonic_ns
        period = 1e9 / rate
        next_ns = start_ns + int(phase * period)
        while conn.error is None:
            t = now()
            if t >= stop_ns:
                break
            if t < next_ns:
                await asyncio.sleep((next_ns - t) / 1e9)
                continue
            if conn.blocked or self._room() <= 0:
                await self._wait()
                continue
            due = min(100, int((t - next_ns) / period) + 1, self._room())
            next_ns += int(due * period)
            self._send(due)

    async def settle(self, deadline_ns: int) -> None:
        """Wait until every publish is confirmed (or the deadline passes)."""
        while (
            self.tracker is not None
            and self.tracker.resolved < self.seq
            and self.conn.error is None
            and time.monotonic_ns() < deadline_ns
        ):
            await self._wait()


async def _publisher_worker(cfg: Config, ids: list[int], queues: list[str], pipe: Pipe) -> None:
    exchange = exchange_name(cfg, queues)
    errors: list[str] = []
    conns = await asyncio.gather(
        *(connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost) for _ in ids)
    )
    pubs: list[Publisher] = []
    for pid, conn in zip(ids, conns, strict=True):
        key = "" if cfg.exchange_type == "fanout" else queues[pid % cfg.queues]
        tpl = PublishTemplate(
            1, exchange, key, cfg.size, persistent=cfg.persistent, frame_max=conn.frame_max
        )
        if cfg.confirm:
            await conn.call(1, m.ConfirmSelect(), m.ConfirmSelectOk)
        pubs.append(Publisher(cfg, conn, pid, tpl))
    pipe.send(("ready", os.getpid()))
    start_ns, w0, w1, limit = await _recv(pipe, 600)
    marks: dict[str, list[tuple[int, int]]] = {}

    def mark(name: str) -> None:
        marks[name] = [(p.seq, p.tracker.n_acked if p.tracker is not None else p.seq) for p in pubs]

    loop = asyncio.get_running_loop()
    for name, t in (("w0", w0), ("w1", w1)):
        if t < FOREVER_NS:
            loop.call_later(max(0.0, (t - time.monotonic_ns()) / 1e9), mark, name)
    await _sleep_until(start_ns)
    stop_ns = w1 if limit == 0 else FOREVER_NS
    per_pub_limit = limit or (1 << 62)
    runs: list[Coroutine[Any, Any, None]]
    if cfg.rate > 0:
        spread = len(pubs) > 1
        runs = [
            p.run_rate(start_ns, stop_ns, cfg.rate, random.random() if spread else 0.0)
            for p in pubs
        ]
    else:
        runs = [p.run(stop_ns, per_pub_limit) for p in pubs]
    await asyncio.gather(*runs)
    done_ns = time.monotonic_ns()
    deadline = done_ns + int(cfg.drain_max * 1e9)
    await asyncio.gather(*(p.settle(deadline) for p in pubs))
    await asyncio.sleep(0)
    mark("end")
    errors.extend(f"publisher {p.pid}: {p.conn.error}" for p in pubs if p.conn.error is not None)
    pipe.send(
        (
            "done",
            {
                "published": {p.pid: p.seq for p in pubs},
                "acked": {
                    p.pid: bytes(p.tracker.acked[: p.seq]) for p in pubs if p.tracker is not None
                },
                "nacked": {p.pid: p.tracker.n_nacked for p in pubs if p.tracker is not None},
                "marks": marks,
                "done_ns": done_ns,
                "errors": errors,
            },
        )
    )
    # Stay connected until the consumers have drained: a broker that blocked this connection
    # (memory alarm) still has published bytes unread in the socket, and closing now would
    # drop them.
    with contextlib.suppress(TimeoutError):
        await _recv(pipe, cfg.drain_max + 120)
    await asyncio.gather(*(p.conn.close() for p in pubs))
    pipe.send(("closed", None))


class Consumer:
    """One consuming connection (channel 1) on one queue."""

    def __init__(
        self,
        cfg: Config,
        conn: Connection,
        logs: dict[int, ReceiptLog],
        counters: Any,
        slot: int,
    ) -> None:
        self.conn = conn
        self.logs = logs
        self.counters = counters
        self.slot = slot
        self.autoack = cfg.autoack
        self.multi = cfg.multi_ack
        self.unacked = 0
        self.last_tag = 0
        self.count = 0
        self.in_window = 0
        self.out_of_order = 0
        self.redelivered = 0
        self.unexpected = 0
        self.last: dict[int, int] = {}
        self.lat = array.array("q")
        self.w0 = FOREVER_NS
        self.w1 = FOREVER_NS
        self.t_first = 0
        self.t_last = 0
        # The machine's own ack: one struct call per message, no wrapper in between.
        self.ack = conn.machine.ack
        conn.on_deliver = self.deliver
        conn.after_data = self.after_data

    def deliver(self, tag: int, redelivered: int, stamp: bytes) -> None:
        t = time.monotonic_ns()
        self.count += 1
        self.t_last = t
        if not self.t_first:
            self.t_first = t
        if redelivered:
            self.redelivered += 1
        if not self.autoack:
            if self.multi == 1:
                self.ack(CHANNEL, tag, False)
            else:
                self.unacked += 1
                self.last_tag = tag
                if self.unacked >= self.multi:
                    self.ack(CHANNEL, tag, True)
                    self.unacked = 0
        if len(stamp) < STAMP.size:
            self.unexpected += 1
            return
        sent, seq, pid = STAMP.unpack(stamp)
        if self.w0 <= t < self.w1:
            self.in_window += 1
            self.lat.append((t - sent) // 1000)
        log = self.logs.get(pid)
        if log is None:
            log = self.logs[pid] = ReceiptLog()
        log.add(seq)
        last = self.last.get(pid, -1)
        if seq < last:
            self.out_of_order += 1
        else:
            self.last[pid] = seq

    def after_data(self) -> None:
        self.counters[self.slot] = self.count

    def final_ack(self) -> None:
        if self.unacked and self.conn.error is None:
            self.conn.ack(self.last_tag, multiple=True)
            self.conn.flush()
            self.unacked = 0


async def _consumer_worker(
    cfg: Config, ids: list[int], queues: list[str], pipe: Pipe, counters: Any
) -> None:
    # One ReceiptLog per (queue, publisher), shared by this process's consumers of the queue.
    logs: dict[int, dict[int, ReceiptLog]] = {}
    large = cfg.size >= LARGE_BODY
    conns = await asyncio.gather(
        *(connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost, stamps=large) for _ in ids)
    )
    cons: list[Consumer] = []
    for cid, conn in zip(ids, conns, strict=True):
        q = cid % cfg.queues
        c = Consumer(cfg, conn, logs.setdefault(q, {}), counters, cid)
        cons.append(c)
        if cfg.prefetch:
            await conn.call(1, m.BasicQos(prefetch_count=cfg.prefetch), m.BasicQosOk)
        if isinstance(conn, StampConnection):
            conn.read_stamps()  # no delivery can come before the consume below
        await conn.call(
            1,
            m.BasicConsume(queue=queues[q], consumer_tag=f"c{cid}", no_ack=cfg.autoack),
            m.BasicConsumeOk,
        )
    pipe.send(("ready", os.getpid()))
    w0, w1 = await _recv(pipe, 600)
    for c in cons:
        c.w0, c.w1 = w0, w1
    msg = await _recv(pipe, None)
    assert msg == "stop"
    for c in cons:
        c.final_ack()
    await asyncio.sleep(0.05)
    errors = [f"consumer {cid}: {c.conn.error}" for cid, c in zip(ids, cons, strict=True)]
    errors = [e for e, c in zip(errors, cons, strict=True) if c.conn.error is not None]
    await asyncio.gather(*(c.conn.close() for c in cons))
    lat = array.array("q")
    for c in cons:
        lat.extend(c.lat)
    pipe.send(
        (
            "done",
            {
                "consumed": sum(c.count for c in cons),
                "in_window": sum(c.in_window for c in cons),
                "out_of_order": sum(c.out_of_order for c in cons),
                "redelivered": sum(c.redelivered for c in cons),
                "unexpected": sum(c.unexpected for c in cons),
                "t_first": min((c.t_first for c in cons if c.t_first), default=0),
                "t_last": max((c.t_last for c in cons), default=0),
                "lat": lat.tobytes(),
                "logs": {
                    q: {pid: (bytes(log.counts), log.total) for pid, log in per.items()}
                    for q, per in logs.items()
                },
                "errors": errors,
            },
        )
    )


def worker_entry(
    role: str, cfg: Config, ids: list[int], queues: list[str], pipe: Pipe, counters: Any
) -> None:
    """Body of a worker process (spawned): run the role's loop, report errors on the pipe."""
    _install_loop(cfg.uvloop)
    try:
        if role == "pub":
            asyncio.run(_publisher_worker(cfg, ids, queues, pipe))
        else:
            asyncio.run(_consumer_worker(cfg, ids, queues, pipe, counters))
    except BaseException as exc:  # report anything: the coordinator decides
        with contextlib.suppress(OSError):
            pipe.send(("error", f"{role} worker: {type(exc).__name__}: {exc}"))
        raise SystemExit(1) from exc


# -- the coordinator -------------------------------------------------------------------------


@dataclass
class _Worker:
    role: str
    ids: list[int]
    proc: BaseProcess
    pipe: Pipe
    os_pid: int = 0
    result: dict[str, Any] = field(default_factory=dict)


class RunError(Exception):
    pass


class _CpuSample(NamedTuple):
    tool: float
    broker: float
    machine: tuple[float, float]
    roles: dict[str, float]


async def _expect_msg(w: _Worker, kind: str, within: float) -> Any:
    try:
        msg = await _recv(w.pipe, within)
    except (TimeoutError, EOFError) as exc:
        raise RunError(f"{w.role} worker {w.ids[:3]}: no {kind!r} ({exc!r})") from exc
    if msg[0] == "error":
        raise RunError(msg[1])
    if msg[0] != kind:
        raise RunError(f"{w.role} worker: expected {kind!r}, got {msg[0]!r}")
    return msg[1]


class Coordinator:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.queues = queue_names(cfg)
        self.exchange = exchange_name(cfg, self.queues)
        self.ctx = mp.get_context("spawn")
        self.counters = self.ctx.RawArray("q", max(1, cfg.consumers))
        self.workers: list[_Worker] = []
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.ctl: Connection | None = None

    def _spawn(self, role: str, ids: list[int]) -> _Worker:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(
            target=worker_entry,
            args=(role, self.cfg, ids, self.queues, child, self.counters),
            daemon=True,
        )
        proc.start()
        w = _Worker(role, ids, proc, parent)
        self.workers.append(w)
        return w

    async def _start(self, role: str, count: int, procs: int) -> list[_Worker]:
        ws = [self._spawn(role, ids) for ids in split(count, procs)]
        for w in ws:
            w.os_pid = await _expect_msg(w, "ready", 120)
        return ws

    async def declare(self) -> None:
        cfg = self.cfg
        self.ctl = ctl = await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost)
        if self.exchange:
            await ctl.call(
                1,
                m.ExchangeDeclare(
                    exchange=self.exchange, type=cfg.exchange_type, durable=cfg.durable
                ),
                m.ExchangeDeclareOk,
            )
        for q in self.queues:
            arguments: dict[str, FieldValue] = (
                {"x-queue-type": cfg.queue_type} if cfg.queue_type else {}
            )
            await ctl.call(
                1,
                m.QueueDeclare(queue=q, durable=cfg.durable, arguments=arguments),
                m.QueueDeclareOk,
            )
            if self.exchange:
                key = "" if cfg.exchange_type == "fanout" else q
                await ctl.call(
                    1,
                    m.QueueBind(queue=q, exchange=self.exchange, routing_key=key),
                    m.QueueBindOk,
                )

    async def depth(self) -> int:
        assert self.ctl is not None
        total = 0
        for q in self.queues:
            ok = await self.ctl.call(1, m.QueueDeclare(queue=q, passive=True), m.QueueDeclareOk)
            total += ok.message_count
        return total

    async def cleanup(self) -> int:
        """Delete the queues and exchange; return the messages still queued (undrained)."""
        if self.ctl is None or self.ctl.error is not None:
            return 0
        ctl = self.ctl
        undrained = 0
        for q in self.queues:
            ok = await ctl.call(1, m.QueueDelete(queue=q), m.QueueDeleteOk)
            undrained += ok.message_count
        if self.exchange:
            await ctl.call(1, m.ExchangeDelete(exchange=self.exchange), m.ExchangeDeleteOk)
        await ctl.close()
        return undrained

    def tool_pids(self) -> list[int]:
        return [os.getpid()] + [w.os_pid for w in self.workers if w.os_pid]

    def _sample(self) -> _CpuSample:
        """CPU seconds so far of the tool (each of its processes: this one and every worker),
        the broker and the machine."""
        roles = {"coordinator": proc_cpu_s(os.getpid()) or 0.0, "pub": 0.0, "con": 0.0}
        for w in self.workers:
            if w.os_pid:
                roles[w.role] += proc_cpu_s(w.os_pid) or 0.0
        return _CpuSample(sum(roles.values()), _sum_cpu(self.cfg.broker_pid), machine_cpu(), roles)

    def kill_workers(self) -> None:
        for w in self.workers:
            if w.proc.is_alive():
                w.proc.terminate()
        for w in self.workers:
            w.proc.join(3)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(3)

    async def run(self) -> dict[str, Any]:
        cfg = self.cfg
        await self.declare()
        deep = cfg.deep > 0
        cons = [] if deep else await self._start("con", cfg.consumers, cfg.con_procs)
        pubs = await self._start("pub", cfg.producers, cfg.pub_procs)
        now = time.monotonic_ns()
        start_ns = now + 50_000_000
        if deep:
            w0, w1 = start_ns, FOREVER_NS
            limit = -(-cfg.deep // cfg.producers)
        else:
            w0 = start_ns + int(cfg.warmup * 1e9)
            w1 = w0 + int(cfg.duration * 1e9)
            limit = 0
        for w in pubs:
            w.pipe.send((start_ns, w0, w1, limit))
        for w in cons:
            w.pipe.send((w0, w1))
        cpu: dict[str, Any] = {}
        deep_info: dict[str, Any] = {}
        if not deep:
            await _sleep_until(w0)
            before = self._sample()
            await _sleep_until(w1)
            after = self._sample()
            cpu = self._cpu(before, after, cfg.duration)
        for w in pubs:
            w.result = await _expect_msg(w, "done", cfg.drain_max + 120)
        published = {k: v for w in pubs for k, v in w.result["published"].items()}
        if deep:
            deep_info = await self._fill(published, start_ns)
            cons = await self._start("con", cfg.consumers, cfg.con_procs)
            go = time.monotonic_ns()
            before = self._sample()
            for w in cons:
                w.pipe.send((go, FOREVER_NS))
        expected_q = [0] * cfg.queues
        for pid, n in published.items():
            for q in routes(cfg, pid):
                expected_q[q] += n
        drain_start = time.monotonic_ns()
        await self._drain(expected_q)
        drain_s = (time.monotonic_ns() - drain_start) / 1e9
        if deep:
            after = self._sample()
            cpu = self._cpu(before, after, (time.monotonic_ns() - go) / 1e9)
        for w in pubs:
            w.pipe.send("close")
        for w in pubs:
            await _expect_msg(w, "closed", 60)
        for w in cons:
            w.pipe.send("stop")
        for w in cons:
            w.result = await _expect_msg(w, "done", 60)
        await asyncio.sleep(0.5)  # let the broker requeue what closed consumers left unacked
        undrained = await self.cleanup()
        result = self._report(pubs, cons, published, undrained, cpu, drain_s)
        if deep:
            c_first = (
                min(w.result["t_first"] for w in cons if w.result["t_first"])
                if any(w.result["t_first"] for w in cons)
                else 0
            )
            c_last = max(w.result["t_last"] for w in cons)
            consumed = sum(w.result["consumed"] for w in cons)
            span = (c_last - c_first) / 1e9 if c_last > c_first else 0.0
            deep_info["drain_s"] = round(span, 3)
            deep_info["drain_rate"] = round(consumed / span, 1) if span else 0.0
            result["deep"] = deep_info
            result["rates"]["consumed"] = deep_info["drain_rate"]
            result["rates"]["published"] = deep_info["fill_rate"]
            result["window_s"] = deep_info["drain_s"]
        return result

    async def _fill(self, published: dict[int, int], start_ns: int) -> dict[str, Any]:
        cfg = self.cfg
        target = sum(n * len(routes(cfg, pid)) for pid, n in published.items())
        last, last_change = -1, time.monotonic()
        depth = 0
        while True:
            depth = await self.depth()
            if depth >= target:
                break
            if depth != last:
                last, last_change = depth, time.monotonic()
            elif time.monotonic() - last_change > cfg.drain_idle:
                self.warnings.append(f"queue depth stuck at {depth} of {target}")
                break
            await asyncio.sleep(0.1)
        fill_s = (time.monotonic_ns() - start_ns) / 1e9
        return {
            "count": target,
            "depth_reached": depth,
            "fill_s": round(fill_s, 3),
            "fill_rate": round(depth / fill_s, 1) if fill_s else 0.0,
        }

    async def _drain(self, expected_q: list[int]) -> None:
        cfg = self.cfg
        consumers_of = [
            [c for c in range(cfg.consumers) if c % cfg.queues == q] for q in range(cfg.queues)
        ]
        deadline = time.monotonic() + cfg.drain_max
        last, last_change = -1, time.monotonic()
        while time.monotonic() < deadline:
            counts = list(self.counters)
            if all(
                sum(counts[c] for c in cs) >= expected_q[q]
                for q, cs in enumerate(consumers_of)
                if cs
            ):
                return
            total = sum(counts)
            if total != last:
                last, last_change = total, time.monotonic()
            elif time.monotonic() - last_change > cfg.drain_idle:
                self.warnings.append("drain stopped: no progress")
                return
            await asyncio.sleep(0.02)
        self.warnings.append("drain stopped: --drain-max reached")

    def _cpu(self, before: _CpuSample, after: _CpuSample, window: float) -> dict[str, Any]:
        ncpu = os.cpu_count() or 1
        tool = after.tool - before.tool
        broker = after.broker - before.broker
        busy = after.machine[0] - before.machine[0]
        total = after.machine[1] - before.machine[1]
        pct = 100.0 / window if window > 0 else 0.0
        out: dict[str, Any] = {
            "ncpu": ncpu,
            "loadgen_pct": round(tool * pct, 1),
            "loadgen_cpu_s": round(tool, 3),
            # the sum above, per process role (publisher workers, consumer workers, this one)
            "loadgen_roles_cpu_s": {
                role: round(after.roles[role] - before.roles[role], 3) for role in after.roles
            },
            "machine_busy_pct": round(100.0 * ncpu * busy / total, 1) if total else 0.0,
        }
        if self.cfg.broker_pid:
            out["broker_pct"] = round(broker * pct, 1)
            out["broker_cpu_s"] = round(broker, 3)
            out["other_pct"] = round(max(0.0, busy - tool - broker) * pct, 1)
        return out

    def _report(
        self,
        pubs: list[_Worker],
        cons: list[_Worker],
        published: dict[int, int],
        undrained: int,
        cpu: dict[str, Any],
        drain_s: float,
    ) -> dict[str, Any]:
        cfg = self.cfg
        errors = list(self.errors)
        for w in [*pubs, *cons]:
            errors.extend(w.result.get("errors", []))
        acked: dict[int, bytes] = {k: v for w in pubs for k, v in w.result["acked"].items()}
        nacked = sum(n for w in pubs for n in w.result["nacked"].values())
        # merge receipts per queue and publisher
        merged: dict[int, dict[int, ReceiptLog]] = {}
        for w in cons:
            for q, per in w.result["logs"].items():
                for pid, (counts, total) in per.items():
                    log = ReceiptLog(bytearray(counts), total)
                    have = merged.setdefault(q, {}).get(pid)
                    if have is None:
                        merged[q][pid] = log
                    else:
                        have.merge(log)
        consumed_qs = {c % cfg.queues for c in range(cfg.consumers)}
        verdict = QueueVerdict()
        for q in sorted(consumed_qs):
            per = merged.get(q, {})
            routed = {pid for pid in published if q in routes(cfg, pid)}
            for pid in routed:
                verdict.add(
                    verify_queue(published[pid], per.get(pid, ReceiptLog()), acked.get(pid))
                )
            for pid, log in per.items():
                if pid not in routed:
                    verdict.unexpected += log.total
        lost = max(0, verdict.missing - undrained)
        out_of_order = sum(w.result["out_of_order"] for w in cons)
        unexpected = verdict.unexpected + sum(w.result["unexpected"] for w in cons)
        total_pub = sum(published.values())
        n_acked = sum(a.count(1) for a in acked.values())
        unconfirmed = total_pub - n_acked - nacked if cfg.confirm else 0
        lat: array.array[int] = array.array("q")
        for w in cons:
            lat.frombytes(w.result["lat"])
        marks = {}
        for name in ("w0", "w1", "end"):
            seq = acks = 0
            for w in pubs:
                for s, a in w.result["marks"].get(name, []):
                    seq += s
                    acks += a
            marks[name] = (seq, acks)
        window = cfg.duration
        rates = {
            "published": round((marks["w1"][0] - marks["w0"][0]) / window, 1),
            "confirmed": round((marks["w1"][1] - marks["w0"][1]) / window, 1)
            if cfg.confirm
            else 0.0,
            "consumed": round(sum(w.result["in_window"] for w in cons) / window, 1),
        }
        ok = (
            not errors
            and lost == 0
            and verdict.duplicates == 0
            and out_of_order == 0
            and unexpected == 0
            and nacked == 0
            and unconfirmed == 0
        )
        return {
            "label": cfg.label,
            "tool": "leveret-bench",
            "ok": ok,
            "broker": {"host": cfg.host, "port": cfg.port, "pids": cfg.broker_pid},
            "window_s": window,
            "rates": rates,
            "latency_us": percentiles(lat.tolist()),
            "drain_s": round(drain_s, 3),
            "totals": {
                "published": total_pub,
                "confirmed": n_acked,
                "nacked": nacked,
                "unconfirmed": unconfirmed,
                "consumed": sum(w.result["consumed"] for w in cons),
            },
            "verify": {
                "checked": bool(consumed_qs),
                "expected": verdict.expected,
                "lost": lost,
                "undrained": undrained,
                "duplicates": verdict.duplicates,
                "out_of_order": out_of_order,
                "unexpected": unexpected,
                "redelivered": sum(w.result["redelivered"] for w in cons),
                "unconfirmed_but_delivered": verdict.unconfirmed_but_delivered,
            },
            "cpu": cpu,
            "config": {k: v for k, v in asdict(cfg).items() if k != "password"},
            "errors": errors,
            "warnings": self.warnings,
        }


async def _run(cfg: Config) -> dict[str, Any]:
    coord = Coordinator(cfg)
    budget = cfg.warmup + cfg.duration + 2 * cfg.drain_max + 300
    try:
        async with asyncio.timeout(budget):
            return await coord.run()
    except (RunError, OSError, TimeoutError, EOFError) as exc:
        return {
            "label": cfg.label,
            "tool": "leveret-bench",
            "ok": False,
            "errors": [f"{type(exc).__name__}: {exc}"],
            "config": {k: v for k, v in asdict(cfg).items() if k != "password"},
        }
    finally:
        coord.kill_workers()
        if coord.ctl is not None and coord.ctl.transport is not None:
            coord.ctl.transport.close()


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    result = asyncio.run(_run(cfg))
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    raise SystemExit(main())
