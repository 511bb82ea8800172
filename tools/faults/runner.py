"""One fault run: start the target, declare the queues, run the workload, inject
``cycles`` faults (each held, healed, and followed by a wait for the cluster to be whole
again), stop the publishers, drain every queue, stop the consumers, read the queues'
depths, check the history, write the report. Everything it starts it stops, whatever
happens (an error, a timeout, Ctrl-C): :func:`run`'s ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.faults import slowdisk
from tools.faults.checker import Verdict, check
from tools.faults.history import Fault, History
from tools.faults.proxy import Mode
from tools.faults.report import write_report
from tools.faults.workload import (
    Clock,
    QueueSpec,
    Workload,
    WorkloadSettings,
    declare,
    depth,
)

if TYPE_CHECKING:
    from tools.faults.targets.base import Target

log = logging.getLogger("faults")

FAULTS = ("kill", "pause", "partition", "partition-etcd", "etcd", "slowdisk")
QUEUE_TYPES = ("quorum", "classic", "stream")
# Faults that hit one node (a queue's leader or another one); the others hit etcd.
NODE_FAULTS = frozenset({"kill", "pause", "partition", "partition-etcd", "slowdisk"})


@dataclass
class RunConfig:
    target: str = "leveret"
    nodes: int = 3
    cycles: int = 3
    faults: tuple[str, ...] = ("kill",)
    queue_type: str = "quorum"
    queues: int = 1
    # Queues (the last ones) whose publishers send transient messages: a classic queue's
    # transient messages die with its node, which the checker must report as lost.
    transient_queues: int = 0
    # Which nodes the clients use: "all" (each client its own first node, then the
    # others), "leader" (the queue's leader only), "auto" (the target's say).
    clients_on: str = "auto"
    # Which node a node fault hits: "leader" (of the cycle's queue), "follower" (another
    # node), or "alternate" (every queue's leader in turn, then other nodes, and again).
    victims: str = "alternate"
    fault_seconds: float = 8.0
    # A pause lasts this long; None: longer than a lease (1.5 x lease + 1 s) and than
    # fault_seconds.
    pause_seconds: float | None = None
    settle_seconds: float = 5.0
    warmup_seconds: float = 3.0
    recover_limit: float = 120.0
    drain_quiet: float = 3.0
    drain_limit: float = 90.0
    lease_ttl: int = 5  # Leveret's cluster_lease_ttl
    net_ticktime: int = 15  # RabbitMQ's
    # RabbitMQ's cluster_partition_handling. Its Jepsen suite keeps the default, ignore,
    # which leaves the nodes partitioned for good once a pause or a partition outlasted
    # net_ticktime, so no later cycle starts from a whole cluster: pause_minority here.
    partition_handling: str = "pause_minority"
    partition_mode: str = "blackhole"  # or "refuse": reset connections, refuse new ones
    slow_iops: int = 5  # a slow disk's writes a second
    seed: int | None = None
    time_limit: float = 3600.0
    out: Path | None = None
    keep: bool = False
    save_history: bool = False
    workload: WorkloadSettings = field(default_factory=WorkloadSettings)

    def pause_length(self) -> float:
        if self.pause_seconds is not None:
            return self.pause_seconds
        return max(self.fault_seconds, 1.5 * self.lease_ttl + 1.0)


def schedule(
    cycles: int, kinds: list[str], queues: int, victims: str, nodes: int
) -> list[tuple[str, int, bool]]:
    """Each cycle's fault kind, queue (its index) and whether it hits that queue's leader:
    the kinds in turn; each round of kinds on the next queue; with ``alternate`` victims,
    once every queue had its round on its leader, the same on another node, and again."""
    plan = []
    for i in range(cycles):
        round_ = i // len(kinds)
        if nodes == 1 or victims == "leader":
            on_leader = True
        elif victims == "follower":
            on_leader = False
        else:
            on_leader = (round_ // queues) % 2 == 0
        plan.append((kinds[i % len(kinds)], round_ % queues, on_leader))
    return plan


@dataclass
class RunResult:
    verdict: Verdict
    report: dict[str, Any]
    out: Path | None
    target: Target  # stopped: what it ran, for a test to look at


def make_target(config: RunConfig, workdir: Path, tag: str) -> Target:
    mode = Mode(config.partition_mode)
    if config.target == "leveret":
        from tools.faults.targets.leveret import LeveretTarget

        return LeveretTarget(
            workdir=workdir,
            size=config.nodes,
            lease_ttl=config.lease_ttl,
            tag=tag,
            partition_mode=mode,
        )
    if config.target == "rabbitmq":
        from tools.faults.targets.rabbitmq import RabbitMQTarget, available

        why = available()
        if why is not None:
            raise RuntimeError(why)
        return RabbitMQTarget(
            workdir=workdir,
            size=config.nodes,
            tag=tag,
            net_ticktime=config.net_ticktime,
            partition_handling=config.partition_handling,
            partition_mode=mode,
        )
    raise ValueError(f"unknown target {config.target!r}")


@dataclass
class Run:
    config: RunConfig
    target: Target
    tag: str
    history: History = field(default_factory=History)
    clock: Clock = field(default_factory=Clock)
    queues: list[QueueSpec] = field(default_factory=list)
    workload: Workload | None = None
    rng: random.Random = field(default_factory=random.Random)
    skipped: list[str] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.target.nodes]

    def any_node(self) -> bool:
        if self.config.clients_on == "auto":
            return self.target.any_node_serves
        return self.config.clients_on == "all"

    async def routes(self, queue: QueueSpec, k: int) -> list[str]:
        nodes = self.target.nodes
        if not self.any_node():
            leader = await self.target.leader(queue.name)
            return [self.target.node(leader).url if leader else nodes[0].url]
        start = (self.queues.index(queue) + k) % len(nodes)
        return [n.url for n in nodes[start:] + nodes[:start]]

    async def serving_urls(self, queue: str) -> list[str]:
        if self.any_node():
            return [n.url for n in self.target.nodes]
        leader = await self.target.leader(queue)
        return [self.target.node(leader).url] if leader else []

    # -- the run ----------------------------------------------------------------------------

    async def setup(self) -> None:
        c = self.config
        t0 = time.monotonic()
        await self.target.start()
        self.phases["start"] = time.monotonic() - t0
        arguments = self.target.queue_arguments(c.queue_type)
        for i in range(c.queues):
            spec = QueueSpec(
                f"faults.{self.tag}.q{i + 1}", persistent=i < c.queues - c.transient_queues
            )
            # Declared through node i: client-local placement spreads the leaders.
            node = self.target.nodes[i % len(self.target.nodes)]
            await declare(node.url, spec.name, arguments, durable=True)
            self.queues.append(spec)
        settings = c.workload
        settings.stream = c.queue_type == "stream"
        addresses = {n.url: n.stream_address for n in self.target.nodes}
        if settings.stream and settings.stream_readers is None:
            # Both kinds by default where the stream protocol is served: rstream's readers
            # cost about 15 % more CPU and 2 s more in a 45 s run (docs/faults.md).
            rstream = all(addresses.values())
            settings.stream_readers = ("amqp", "rstream") if rstream else ("amqp",)
        self.workload = Workload(
            self.history, self.clock, settings, self.routes, stream_address=addresses.get
        )
        await self.workload.start(self.queues)

    async def cycles(self) -> None:
        c = self.config
        kinds = [k for k in c.faults if k in self.target.faults]
        self.skipped = [k for k in c.faults if k not in self.target.faults]
        for kind in self.skipped:
            log.warning("%s cannot inject %s faults: left out", self.target.kind, kind)
        if not kinds:
            await asyncio.sleep(c.fault_seconds)
            return
        plan = schedule(c.cycles, kinds, len(self.queues), c.victims, len(self.target.nodes))
        for n, (kind, queue, on_leader) in enumerate(plan, 1):
            await self.cycle(n, kind, self.queues[queue], on_leader)

    async def cycle(self, n: int, kind: str, queue: QueueSpec, on_leader: bool) -> None:
        c, target = self.config, self.target
        leader = await target.leader(queue.name)
        victim: str | None = None
        role = "etcd"
        if kind in NODE_FAULTS:
            others = [name for name in self.names if name != leader]
            if on_leader and leader is not None:
                victim, role = leader, "leader"
            else:
                victim, role = self.rng.choice(others or self.names), "follower"
        led = [q.name for q in self.queues if victim and await target.leader(q.name) == victim]
        if role == "follower" and led:
            role = "leader"  # it leads another queue: its death is a leader's
        hold = c.pause_length() if kind == "pause" else c.fault_seconds
        log.info("cycle %d: %s on %s (%s) for %.1f s", n, kind, victim or "etcd", role, hold)
        fault = Fault(kind, victim, role, led, start=self.clock.now())
        self.history.faults.append(fault)
        fault.notes.append(f"leader of {queue.name} before: {leader}")
        disk = target.node(victim).disk if victim is not None and kind == "slowdisk" else None
        writes = disk.writes() if disk is not None else 0
        await self.inject(kind, victim)
        await asyncio.sleep(hold)
        fault.healed = self.clock.now()
        if disk is not None:
            fault.notes.append(f"{disk.writes() - writes} disk writes while slowed")
        await self.heal(kind, victim)
        if await self.wait_whole(c.recover_limit):
            fault.recovered = self.clock.now()
        else:
            fault.notes.append(f"not whole within {c.recover_limit:g} s of the heal")
        fault.notes.append(f"leader of {queue.name} after: {await target.leader(queue.name)}")
        if self.workload is not None and self.any_node():
            self.workload.go_home()  # the next fault finds the clients spread again
        await asyncio.sleep(c.settle_seconds)

    async def inject(self, kind: str, victim: str | None) -> None:
        target = self.target
        if kind == "kill":
            assert victim is not None
            await asyncio.to_thread(target.node(victim).kill)
        elif kind == "pause":
            assert victim is not None
            target.node(victim).pause()
        elif kind == "partition":
            assert victim is not None
            target.partition([[victim], [n for n in self.names if n != victim]])
        elif kind == "partition-etcd":
            assert victim is not None
            target.cut_etcd(victim)
        elif kind == "etcd":
            await target.etcd_down()
        elif kind == "slowdisk":
            assert victim is not None
            disk = target.node(victim).disk
            assert disk is not None
            disk.slow(self.config.slow_iops)

    async def heal(self, kind: str, victim: str | None) -> None:
        target = self.target
        if kind == "kill":
            assert victim is not None
            await target.start_node(target.node(victim), self.config.recover_limit)
        elif kind == "pause":
            assert victim is not None
            target.node(victim).resume()
        elif kind == "partition":
            target.heal_partition()
        elif kind == "partition-etcd":
            assert victim is not None
            target.heal_etcd(victim)
        elif kind == "etcd":
            await target.etcd_up()
        elif kind == "slowdisk":
            assert victim is not None
            disk = target.node(victim).disk
            assert disk is not None
            disk.heal()

    async def wait_whole(self, limit: float) -> bool:
        """Wait for every node to run and see the others, and every replicated queue to
        have all its members online again."""
        deadline = time.monotonic() + limit
        if not await self.target.wait_healthy(limit):
            return False
        while time.monotonic() < deadline:
            if all([await self.target.whole(q.name) for q in self.queues]):
                return True
            await asyncio.sleep(0.5)
        return False

    async def heal_everything(self) -> None:
        """After an error mid-cycle: whatever fault is on, off (so the drain can run)."""
        target = self.target
        for node in target.nodes:
            node.resume()
            if node.disk is not None:
                with contextlib.suppress(OSError):
                    node.disk.heal()
        target.heal_partition()
        for name in self.names:
            with contextlib.suppress(NotImplementedError, KeyError):
                target.heal_etcd(name)
        etcd = getattr(target, "etcd", None)
        if etcd is not None and not etcd.running():
            await target.etcd_up()
        for node in target.nodes:
            if not node.running():
                await target.start_node(node, self.config.recover_limit)

    async def drain(self) -> dict[str, int | None]:
        """Stop publishing, consume until every queue is empty and nothing came for
        ``drain_quiet`` seconds (at most ``drain_limit``), stop consuming; the queues'
        depths then (None for a queue no node answers for). A stream is drained once
        nothing came for ``drain_quiet`` seconds and every stream-protocol reader has every
        confirmed message (one may still be resuming on another node)."""
        c, workload = self.config, self.workload
        assert workload is not None
        await workload.stop_publishers()
        self.phases["publishing_stopped"] = self.clock.now()
        await self.wait_whole(c.recover_limit)
        workload.start_consumers()
        stream = c.queue_type == "stream"
        deadline = time.monotonic() + c.drain_limit
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            if self.clock.now() - workload.last_delivery() < c.drain_quiet:
                continue
            if stream:  # read whole: every stream-protocol reader has every confirm
                if workload.caught_up():
                    break
                continue
            depths = [await depth(await self.serving_urls(q.name), q.name) for q in self.queues]
            if all(d == 0 for d in depths):
                break
        await workload.stop_consumers()
        self.phases["drained"] = self.clock.now()
        if stream:  # a stream keeps its messages: "empty" does not apply
            return {}
        await asyncio.sleep(1.0)  # unacked messages of the closed consumers back to ready
        return {q.name: await depth(await self.serving_urls(q.name), q.name) for q in self.queues}


async def run(config: RunConfig) -> RunResult:
    """Run ``config``; the result has the verdict and the report written to ``config.out``."""
    for kind in config.faults:
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}: one of {', '.join(FAULTS)}")
    if config.queue_type not in QUEUE_TYPES:
        raise ValueError(f"unknown queue type {config.queue_type!r}")
    if "slowdisk" in config.faults and (why := slowdisk.available()) is not None:
        log.warning("slowdisk left out: %s", why)
    tag = uuid.uuid4().hex[:6]
    workdir = Path(tempfile.mkdtemp(prefix=f"leveret-faults-{tag}-"))
    try:
        return await _run(config, workdir, tag)
    finally:
        if not config.keep:
            await asyncio.to_thread(shutil.rmtree, workdir, True)


async def _run(config: RunConfig, workdir: Path, tag: str) -> RunResult:
    target = make_target(config, workdir, tag)
    current = Run(config, target, tag, rng=random.Random(config.seed))
    started = time.time()
    error: str | None = None
    depths: dict[str, int | None] = {}
    try:
        try:
            async with asyncio.timeout(config.time_limit):
                await current.setup()
                await asyncio.sleep(config.warmup_seconds)
                try:
                    await current.cycles()
                finally:
                    await current.heal_everything()
                depths = await current.drain()
        except TimeoutError:
            error = f"the run went past its time limit ({config.time_limit:g} s)"
        except Exception as exc:
            log.exception("the run failed")
            error = f"{type(exc).__name__}: {exc}"
        described = await asyncio.to_thread(target.describe) if target.nodes else {}
    finally:
        if current.workload is not None:
            await current.workload.stop_publishers()
            await current.workload.stop_consumers()
        await target.stop()
    current.history.close(current.clock.now())
    verdict = check(current.history, depths, every_consumer=config.queue_type == "stream")
    report = {
        "config": _config_json(config),
        "target": described,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "phases": current.phases,
        "skipped_faults": current.skipped,
        "error": error,
        "ok": verdict.ok and error is None,
        "verdict": verdict.to_json(),
        "faults": [asdict(f) for f in current.history.faults],
        # Connections each inter-node proxy carried: 0 everywhere means the nodes never
        # dialled each other through the harness, so a partition between them cut nothing.
        "paths": {f"{a}->{b}": proxy.accepted for (a, b), proxy in target.paths.items()},
        "clients": {
            "publishers": {p.name: p.connects for p in current.workload.publishers}
            if current.workload
            else {},
            "consumers": {c.name: c.connects for c in current.workload.consumers}
            if current.workload
            else {},
        },
        "stream_readers": _stream_readers(current.workload),
        "stream_publishers": _stream_publishers(current.workload),
    }
    await asyncio.to_thread(_save, config, report, current.history, workdir)
    return RunResult(verdict, report, config.out, target)


def _save(config: RunConfig, report: dict[str, Any], history: History, workdir: Path) -> None:
    """The report to ``config.out``, with the nodes' logs when the run failed."""
    if config.out is not None:
        write_report(config.out, report, history if config.save_history else None)
        if not report["ok"]:
            logs = config.out / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            for path in workdir.glob("*.log"):
                shutil.copy(path, logs / path.name)


def _stream_readers(workload: Workload | None) -> dict[str, dict[str, Any]]:
    """What each stream-protocol reader's server-side offset tracking did."""
    from tools.faults.rstream_clients import StreamReader

    readers = [c for c in workload.consumers if isinstance(c, StreamReader)] if workload else []
    return {
        r.name: {
            "connections": r.connects,
            "deliveries": r.delivered,
            "stores": r.stores,
            "resumed_from_stored": r.from_stored,
            "started_from_first": r.from_first,
            "forgotten": r.forgotten,
            "went_back": r.went_back,
            "endings": r.endings,
            "late_deliveries": r.late,
        }
        for r in readers
    }


def _stream_publishers(workload: Workload | None) -> dict[str, dict[str, Any]]:
    """Each stream-protocol publisher's connections, publish_error codes (code -> count;
    -1: rstream's own, for a lost connection) and metadata updates heard."""
    from tools.faults.rstream_clients import StreamPublisher

    writers = [c for c in workload.publishers if isinstance(c, StreamPublisher)] if workload else []
    return {
        w.name: {
            "connections": w.connects,
            "errors": {str(code): n for code, n in sorted(w.errors.items())},
            "metadata_updates": w.metadata_updates,
        }
        for w in writers
    }


def _config_json(config: RunConfig) -> dict[str, Any]:
    doc = asdict(config)
    doc["out"] = str(config.out) if config.out else None
    doc["pause_seconds"] = config.pause_length()
    return doc


__all__ = ["FAULTS", "QUEUE_TYPES", "RunConfig", "RunResult", "make_target", "run", "schedule"]
