"""``python -m bench.shovel``: a shovel's throughput, Leveret's beside RabbitMQ's.

The same two brokers each round: a RabbitMQ 3.10.8 node (the source, holding ``--messages``
persistent messages of ``--size`` bytes in a durable queue) and a Leveret broker (the
destination, a durable queue). Then the same shovel definition (``on-confirm``, prefetch
``--prefetch``) moves them, run either

- ``leveret``: by Leveret's shovel, inside the destination broker, or
- ``rabbitmq``: by RabbitMQ's shovel plugin, inside the source node,

rounds interleaved (leveret, rabbitmq, leveret, ...). Measured from the shovel's creation to
the last message in the destination queue: the rate, and the CPU time of both brokers (the
node's Erlang VM and Leveret's process, from /proc) per message moved. Prints every round
and the medians; the machine's load average is printed too (the figures are noise on a
busy machine: docs/migration.md says how they were taken).

``--compiled DIR`` runs Leveret from a compiled build (``python -m tools.builds`` puts the
one ``pip install .`` makes in ``build/builds/compiled``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any

import pika
import requests
from tests.integration.conftest import start_broker
from tests.integration.mgmt_support import _URL, _wait_for
from tests.integration.migration_support import _prefill_queue
from tests.integration.rabbitmq_support import AUTH, remove, start_rabbitmq

if TYPE_CHECKING:
    from tests.integration.conftest import Broker
    from tests.integration.rabbitmq_support import RabbitMQ

QUEUE_SRC = "bench.shovel.src"
QUEUE_DST = "bench.shovel.dst"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def rabbit_pid(rabbit: RabbitMQ) -> int:
    return int((rabbit.workdir / "pid").read_text().strip())


def queue_length(url: str, queue: str) -> int:
    with pika.BlockingConnection(pika.URLParameters(url)) as conn:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)


def reset(url: str, queue: str) -> None:
    with pika.BlockingConnection(pika.URLParameters(url)) as conn:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        ch.queue_purge(queue)


def one_round(
    kind: str, rabbit: RabbitMQ, leveret: Broker, leveret_api: str, args: argparse.Namespace
) -> dict[str, Any]:
    reset(rabbit.url, QUEUE_SRC)
    reset(leveret.url, QUEUE_DST)
    asyncio.run(_prefill_queue(rabbit.url, QUEUE_SRC, args.messages, args.size))
    definition = {
        "src-uri": f"amqp://guest:guest@127.0.0.1:{rabbit.port}/%2F",
        "src-queue": QUEUE_SRC,
        "src-prefetch-count": args.prefetch,
        "dest-uri": f"amqp://guest:guest@127.0.0.1:{leveret.port}/%2F",
        "dest-queue": QUEUE_DST,
        "ack-mode": "on-confirm",
    }
    if kind == "leveret":
        definition["dest-uri"] = "amqp://"
        path = f"{leveret_api}/api/parameters/shovel/%2F/bench"
    else:
        definition["src-uri"] = "amqp://"
        path = rabbit.api("parameters/shovel/%2F/bench")
    assert leveret.process is not None
    pids = (rabbit_pid(rabbit), leveret.process.pid)
    before = [cpu_seconds(p) for p in pids]
    started = time.monotonic()
    r = requests.put(path, auth=AUTH, json={"value": definition}, timeout=30)
    assert r.status_code in (201, 204), r.text
    deadline = started + args.timeout
    while queue_length(leveret.url, QUEUE_DST) < args.messages:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{kind}: not all messages moved in {args.timeout} s")
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    after = [cpu_seconds(p) for p in pids]
    requests.delete(path, auth=AUTH, timeout=30)
    cpu = [a - b for a, b in zip(after, before, strict=True)]
    return {
        "shovel": kind,
        "msg_per_s": round(args.messages / elapsed),
        "rabbitmq_cpu_us_per_msg": round(cpu[0] / args.messages * 1e6, 1),
        "leveret_cpu_us_per_msg": round(cpu[1] / args.messages * 1e6, 1),
        "total_cpu_us_per_msg": round(sum(cpu) / args.messages * 1e6, 1),
        "load_average": round(os.getloadavg()[0], 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--compiled", help="a compiled build's directory for Leveret")
    args = parser.parse_args(argv)
    env = {"LEVERET_COLLECT_STATISTICS_INTERVAL": "5000"}
    if args.compiled:
        env["PYTHONPATH"] = args.compiled
    rabbit = start_rabbitmq(("rabbitmq_management", "rabbitmq_shovel"))
    leveret = start_broker("--management-port", "0", "--prometheus-port", "0", env=env)
    try:
        api = _wait_for(leveret, _URL)
        rows = []
        for _ in range(args.rounds):
            for kind in ("leveret", "rabbitmq"):
                row = one_round(kind, rabbit, leveret, api, args)
                print(json.dumps(row), flush=True)
                rows.append(row)
        for kind in ("leveret", "rabbitmq"):
            mine = [r for r in rows if r["shovel"] == kind]
            summary = {
                "shovel": kind,
                "median_msg_per_s": statistics.median(r["msg_per_s"] for r in mine),
                "median_total_cpu_us_per_msg": statistics.median(
                    r["total_cpu_us_per_msg"] for r in mine
                ),
                "median_leveret_cpu_us_per_msg": statistics.median(
                    r["leveret_cpu_us_per_msg"] for r in mine
                ),
                "median_rabbitmq_cpu_us_per_msg": statistics.median(
                    r["rabbitmq_cpu_us_per_msg"] for r in mine
                ),
            }
            print(json.dumps(summary), flush=True)
        build = (
            leveret.log_text().split("(", 1)[1].split(")", 1)[0]
            if "(" in leveret.log_text()
            else ""
        )
        print(json.dumps({"leveret_build": build, "messages": args.messages, "size": args.size}))
    finally:
        leveret.stop()
        remove(rabbit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
