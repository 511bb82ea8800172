"""The migration of ``docs/migration.md``, run end to end with faults: a RabbitMQ 3.10.8
with persistent messages in several queues and publishers still publishing moves to
Leveret through ``on-confirm`` shovels, with a ``kill -9`` of Leveret and a restart of
RabbitMQ in the middle; then every message is checked: once, in order per queue and
publisher.

The short run is ``tests/integration/test_migration.py``; the long one (100,000 messages)
``scripts/migration-soak`` (``python -m tests.integration.migration_support``), whose
figures are in ``docs/migration.md``.

Every message carries ``pub`` (its publisher: ``prefill`` or ``p<n>``), ``seq`` (its number
for that publisher) and ``attempt`` (0, or how many times its publisher sent it again after
a connection failed). So a message that arrives twice is told apart by cause: the same
attempt twice is a *shovel* duplicate (Leveret confirmed it but RabbitMQ's ack was lost with
a connection, so RabbitMQ delivered it again), different attempts a *publisher* duplicate
(the publisher could not know whether RabbitMQ had it and sent it again). Both are counted;
a message missing or out of order fails the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import requests

from leveret.cli.ctl import main as ctl_main
from leveret.links.amqp091 import open_connection
from leveret.links.uri import parse_amqp091
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from tests.integration.ctl_support import new_data_dir
from tests.integration.links_support import q
from tests.integration.mgmt_support import start_mgmt_broker
from tests.integration.rabbitmq_support import AUTH as RABBIT_AUTH
from tests.integration.rabbitmq_support import remove, start_rabbitmq

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.integration.mgmt_support import MgmtBroker
    from tests.integration.rabbitmq_support import RabbitMQ

VHOST = "shop"
USER, PASSWORD = "migrator", "migrator-secret"
EXCHANGE = "orders"


@dataclass
class Plan:
    queues: int = 3
    prefill: int = 1000  # messages per queue already in RabbitMQ
    publishers: int = 2  # still publishing to RabbitMQ meanwhile, round robin over queues
    publish_seconds: float = 6.0
    prefetch: int = 200
    kill_leveret_at: float = 2.0  # seconds after the shovels start
    restart_rabbitmq_at: float = 4.0
    timeout: float = 300.0


@dataclass
class Report:
    messages: int = 0  # distinct messages that had to arrive
    arrived: int = 0  # deliveries read from Leveret, duplicates included
    shovel_duplicates: int = 0
    publisher_duplicates: int = 0
    missing: int = 0
    out_of_order: int = 0
    prefill_seconds: float = 0.0
    migration_seconds: float = 0.0
    publisher_retries: int = 0
    faults: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.out_of_order == 0 and self.messages > 0


def headers_of(pub: str, seq: int, attempt: int) -> dict[str, Any]:
    return {"pub": pub, "seq": seq, "attempt": attempt}


# -- RabbitMQ before the move -------------------------------------------------------------------


def prepare_rabbitmq(rabbit: RabbitMQ, plan: Plan) -> list[str]:
    """The shop: a vhost, its user, a topic exchange and durable queues bound to it."""
    for path, body in (
        (f"vhosts/{VHOST}", {}),
        (f"users/{USER}", {"password": PASSWORD, "tags": "administrator"}),
        (f"permissions/{VHOST}/{USER}", {"configure": ".*", "write": ".*", "read": ".*"}),
        (f"permissions/{VHOST}/guest", {"configure": ".*", "write": ".*", "read": ".*"}),
        (f"exchanges/{VHOST}/{EXCHANGE}", {"type": "topic", "durable": True}),
    ):
        r = rabbit.put(path, body)
        assert r.status_code in (201, 204), (path, r.text)
    queues = [f"orders.{i}" for i in range(plan.queues)]
    for name in queues:
        args = {"x-max-priority": 5} if name.endswith(".0") else {}
        assert rabbit.put(f"queues/{VHOST}/{name}", {"durable": True, "arguments": args}).ok
        r = requests.post(
            rabbit.api(f"bindings/{VHOST}/e/{EXCHANGE}/q/{name}"),
            auth=RABBIT_AUTH,
            json={"routing_key": name},
            timeout=30,
        )
        assert r.status_code == 201, r.text
    return queues


async def _publish_all(
    uri: str, messages: Iterator[tuple[str, str, bytes, bytes]], window: int = 2000
) -> None:
    """Publish (exchange, routing key, properties, body) tuples with confirms, pipelined
    ``window`` deep, on the project's own 0-9-1 client."""
    conn = await open_connection(parse_amqp091(uri), "prefill")
    channel = await conn.open_channel()
    await conn.call(channel, m.ConfirmSelect(), m.ConfirmSelectOk)
    room = asyncio.Event()

    def confirmed(_channel: int, _tag: int, _multiple: bool, ack: bool) -> None:
        assert ack, "the broker refused a prefill message"
        if conn.machine.unconfirmed(channel) < window // 2:
            room.set()

    conn.on_confirm = confirmed
    for exchange, key, props, body in messages:
        conn.publish(channel, exchange, key, body, props)
        if conn.machine.unconfirmed(channel) >= window:
            conn.flush()
            room.clear()
            async with asyncio.timeout(300):
                await room.wait()
    conn.flush()
    async with asyncio.timeout(300):
        while conn.machine.unconfirmed(channel):
            room.clear()
            await room.wait()
    await conn.close()


async def _prefill(uri: str, queues: list[str], per_queue: int) -> None:
    """Persistent messages, round robin over the queues through the exchange."""

    def messages() -> Iterator[tuple[str, str, bytes, bytes]]:
        for seq in range(per_queue):
            for name in queues:
                props = BasicProperties(delivery_mode=2, headers=headers_of("prefill", seq, 0))
                yield EXCHANGE, name, props.encode(), f"{name}/prefill/{seq}".encode()

    await _publish_all(uri, messages())


async def _prefill_queue(uri: str, queue: str, count: int, size: int) -> None:
    """``count`` persistent messages of ``size`` bytes into ``queue`` (bench/shovel.py)."""
    props = BasicProperties(delivery_mode=2).encode()
    body = bytes(size)
    await _publish_all(uri, (("", queue, props, body) for _ in range(count)))


class Publisher(threading.Thread):
    """An application still publishing to RabbitMQ: persistent, confirmed one by one; on
    a failure it reconnects and sends the unconfirmed message again (attempt + 1)."""

    def __init__(self, rabbit: RabbitMQ, index: int, queues: list[str], stop: threading.Event):
        super().__init__(daemon=True, name=f"publisher {index}")
        self.rabbit, self.pub, self.queues, self.stop_event = rabbit, f"p{index}", queues, stop
        self.sent: dict[str, list[int]] = defaultdict(list)  # queue -> seqs, in order
        self.retries = 0
        self.error: BaseException | None = None

    def _connect(self) -> Any:
        while not self.stop_event.is_set():
            try:
                conn = pika.BlockingConnection(
                    pika.URLParameters(
                        f"amqp://{USER}:{PASSWORD}@127.0.0.1:{self.rabbit.port}/{VHOST}"
                        "?heartbeat=0&connection_attempts=1"
                    )
                )
                ch = conn.channel()
                ch.confirm_delivery()
                return conn, ch
            except pika.exceptions.AMQPError:
                time.sleep(0.2)
        return None, None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the run, not lost in a thread
            self.error = exc

    def _run(self) -> None:
        conn, ch = self._connect()
        seq = 0
        while not self.stop_event.is_set():
            queue = self.queues[seq % len(self.queues)]
            attempt = 0
            while True:
                props = pika.BasicProperties(
                    delivery_mode=2, headers=headers_of(self.pub, seq, attempt)
                )
                try:
                    assert ch is not None
                    ch.basic_publish(EXCHANGE, queue, f"{queue}/{self.pub}/{seq}".encode(), props)
                    break
                except (pika.exceptions.AMQPError, AssertionError):
                    self.retries += 1
                    attempt += 1
                    if conn is not None:
                        try:
                            conn.close()
                        except pika.exceptions.AMQPError:
                            pass
                    conn, ch = self._connect()
                    if conn is None:
                        return  # stopped while RabbitMQ was down: seq was never confirmed
            self.sent[queue].append(seq)
            seq += 1
        if conn is not None:
            conn.close()


# -- the move ------------------------------------------------------------------------------------


def ctl(data: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    """A ``leveret ctl ...`` command as docs/migration.md prints it, against ``data``: run
    by ``leveret ctl``'s own ``main`` in this process (the same code as the command, without
    starting an interpreter per command)."""
    assert command[:2] == ["leveret", "ctl"]
    args = ["--data-dir", str(data), *command[2:]]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = ctl_main(args)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def shovel_commands(definitions: Path, rabbit: RabbitMQ, *extra: str) -> list[list[str]]:
    """``python -m leveret.links.migration`` (the doc's step 3), its output parsed."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "leveret.links.migration",
            str(definitions),
            f"amqp://{USER}:{PASSWORD}@127.0.0.1:{rabbit.port}",
            "--vhost",
            VHOST,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [shlex.split(line) for line in out.splitlines() if line.strip()]


def shovels_left(data: Path) -> list[dict[str, Any]]:
    result = ctl(data, ["leveret", "ctl", "shovel_status", "-q", "--formatter", "json"])
    if result.returncode != 0:
        return [{"unreachable": result.stderr}]
    rows = json.loads(result.stdout or "[]")
    return [r for r in rows if str(r.get("name", "")).startswith("migrate-")]


def read_queue(url: str, queue: str, expect: int, timeout: float) -> list[tuple[str, int, int]]:
    """Every message of a Leveret queue, in order, as (pub, seq, attempt)."""
    got: list[tuple[str, int, int]] = []
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=2000)
        deadline = time.monotonic() + timeout
        idle_since = time.monotonic()
        for method, props, _body in ch.consume(queue, auto_ack=False, inactivity_timeout=0.1):
            if method is None:
                if len(got) >= expect and time.monotonic() - idle_since > 0.3:
                    break
                if time.monotonic() > deadline:
                    break
                continue
            idle_since = time.monotonic()
            h = props.headers or {}
            got.append((str(h.get("pub")), int(h.get("seq", -1)), int(h.get("attempt", -1))))
            ch.basic_ack(method.delivery_tag)
        ch.cancel()
    finally:
        conn.close()
    return got


def check(
    queue: str, got: list[tuple[str, int, int]], expected: dict[str, list[int]], report: Report
) -> None:
    """Once and in order per publisher; duplicates counted by cause."""
    seen: dict[tuple[str, int], int] = {}
    last: dict[str, int] = {}
    for pub, seq, attempt in got:
        key = (pub, seq)
        if key in seen:
            if seen[key] == attempt:
                report.shovel_duplicates += 1
            else:
                report.publisher_duplicates += 1
            continue
        seen[key] = attempt
        if seq <= last.get(pub, -1):
            report.out_of_order += 1
        last[pub] = seq
    for pub, seqs in expected.items():
        missing = set(seqs) - {s for p, s in seen if p == pub}
        report.missing += len(missing)
    report.arrived += len(got)
    report.messages += sum(len(seqs) for seqs in expected.values())
    del queue


def run(plan: Plan, log: Any = print, rabbit: RabbitMQ | None = None) -> Report:
    """The whole move; ``rabbit``: a node to use (it is restarted; default: a new one)."""
    report = Report()
    own = rabbit is None
    if rabbit is None:
        rabbit = start_rabbitmq(("rabbitmq_management",))
    data = new_data_dir()
    leveret: MgmtBroker | None = start_mgmt_broker("--data-dir", str(data))
    publishers: list[Publisher] = []
    stop = threading.Event()
    try:
        queues = prepare_rabbitmq(rabbit, plan)
        started = time.monotonic()
        asyncio.run(
            _prefill(
                f"amqp://{USER}:{PASSWORD}@127.0.0.1:{rabbit.port}/{VHOST}", queues, plan.prefill
            )
        )
        report.prefill_seconds = time.monotonic() - started
        log(f"prefilled {plan.prefill * len(queues)} messages in {report.prefill_seconds:.1f} s")
        # Step 1-2 of docs/migration.md: RabbitMQ's definitions into Leveret.
        definitions = data.parent / f"{data.name}-rabbit-defs.json"
        definitions.write_text(
            json.dumps(requests.get(rabbit.api("definitions"), auth=RABBIT_AUTH, timeout=60).json())
        )
        result = ctl(data, ["leveret", "ctl", "import_definitions", str(definitions)])
        assert result.returncode == 0, result.stderr
        for index in range(plan.publishers):
            publisher = Publisher(rabbit, index, queues, stop)
            publishers.append(publisher)
            publisher.start()
        # Step 3: a shovel per queue.
        started = time.monotonic()
        for command in shovel_commands(definitions, rabbit, "--prefetch", str(plan.prefetch)):
            result = ctl(data, command)
            assert result.returncode == 0, (command, result.stderr)
        faults = sorted(
            [
                (plan.kill_leveret_at, "kill -9 Leveret"),
                (plan.restart_rabbitmq_at, "restart RabbitMQ"),
            ]
        )
        for at, fault in faults:
            time.sleep(max(0.0, started + at - time.monotonic()))
            log(f"{time.monotonic() - started:.1f} s: {fault}")
            report.faults.append(fault)
            if fault.startswith("kill"):
                assert leveret is not None
                leveret.broker.stop(signal.SIGKILL)
                leveret = None
                leveret = start_mgmt_broker("--data-dir", str(data))
            else:
                rabbit.stop()
                rabbit.start()
        time.sleep(max(0.0, started + plan.publish_seconds - time.monotonic()))
        stop.set()
        for publisher in publishers:
            publisher.join(60)
            if publisher.error is not None:
                raise publisher.error
            report.publisher_retries += publisher.retries
        log(f"publishers stopped after {time.monotonic() - started:.1f} s")
        # Step 5: once nothing publishes to RabbitMQ, the shovels move what is left and go.
        for command in shovel_commands(
            definitions, rabbit, "--prefetch", str(plan.prefetch), "--delete-after"
        ):
            result = ctl(data, command)
            assert result.returncode == 0, (command, result.stderr)
        deadline = time.monotonic() + plan.timeout
        while (left := shovels_left(data)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"shovels still there after {plan.timeout:.0f} s: {left}"
        report.migration_seconds = time.monotonic() - started
        log(f"shovels done after {report.migration_seconds:.1f} s")
        for name in queues:
            left = rabbit.get(f"queues/{VHOST}/{q(name)}").get("messages", 0)
            assert left == 0, f"{left} messages left in RabbitMQ's {name}"
        # Step 6: check what arrived.
        assert leveret is not None
        url = f"amqp://{USER}:{PASSWORD}@127.0.0.1:{leveret.broker.port}/{VHOST}"
        for name in queues:
            expected: dict[str, list[int]] = {"prefill": list(range(plan.prefill))}
            for publisher in publishers:
                expected[publisher.pub] = publisher.sent.get(name, [])
            total = sum(len(v) for v in expected.values())
            got = read_queue(url, name, total, plan.timeout)
            check(name, got, expected, report)
        return report
    except BaseException:
        # A failed move is read from both brokers' logs (a run under load once left the
        # shovels starting with RabbitMQ refusing connections after its restart, and
        # nothing to tell why): pytest shows what this prints beside the failure.
        print("RabbitMQ's log, last lines:\n" + rabbit.log_tail(80))
        if leveret is not None:
            print(
                "Leveret's log, last lines:\n"
                + "\n".join(leveret.broker.log_text().splitlines()[-80:])
            )
        raise
    finally:
        stop.set()
        if leveret is not None:
            leveret.broker.stop()
        if own:
            remove(rabbit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="prefilled, in total")
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--publishers", type=int, default=3)
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--publish-seconds", type=float, default=40.0)
    parser.add_argument("--kill-leveret-at", type=float, default=10.0)
    parser.add_argument("--restart-rabbitmq-at", type=float, default=20.0)
    args = parser.parse_args(argv)
    plan = Plan(
        queues=args.queues,
        prefill=args.messages // args.queues,
        publishers=args.publishers,
        publish_seconds=args.publish_seconds,
        prefetch=args.prefetch,
        kill_leveret_at=args.kill_leveret_at,
        restart_rabbitmq_at=args.restart_rabbitmq_at,
        timeout=1800,
    )
    load = os.getloadavg()
    report = run(plan)
    print(
        json.dumps(
            {
                "plan": plan.__dict__,
                "report": report.__dict__,
                "ok": report.ok,
                "load_average_at_start": load,
                "load_average_at_end": os.getloadavg(),
            },
            indent=1,
        )
    )
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
