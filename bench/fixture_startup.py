"""What the pytest plugin's broker costs a test suite (issue 18, part 2).

Measures, on this machine:

- the broker's imports, paid once per test session (a fresh interpreter importing
  ``leveret.server.server``);
- an :class:`~leveret.testing.embedded.EmbeddedBroker` start and stop (``leveret_broker``:
  once per test module), and a fresh vhost made and deleted (``leveret_vhost``: per test);
- for comparison, a broker subprocess (``python -m leveret serve --port 0``) until it logs
  its listener;
- ``advance``: an idle broker with N open connections moved 30 minutes (connections without
  heartbeats have no deadline, so this costs a few loop steps; when each connection ticked
  every second it was N x 1800), and a message taking 30 hops through TTL queues (60 s
  each) within one advance.

    python -m bench.fixture_startup
    python -m bench.fixture_startup --rounds 50 --connections 4

Figures are in docs/testing.md ("Figures").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import pika

from leveret.testing.embedded import EmbeddedBroker

HOPS = 30


def _summary(label: str, seconds: list[float]) -> None:
    ms = sorted(s * 1000 for s in seconds)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    print(
        f"{label:<52} median {statistics.median(ms):8.1f} ms   p90 {p90:8.1f} ms   ({len(ms)} runs)"
    )


def imports(rounds: int) -> None:
    walls, cpus = [], []
    for _ in range(rounds):
        began = time.perf_counter()
        before = os.times()
        subprocess.run([sys.executable, "-c", "import leveret.server.server"], check=True)
        after = os.times()
        walls.append(time.perf_counter() - began)
        cpus.append(
            (after.children_user - before.children_user)
            + (after.children_system - before.children_system)
        )
    _summary("broker imports, fresh interpreter (wall)", walls)
    _summary("broker imports, fresh interpreter (CPU)", cpus)


def embedded(rounds: int) -> None:
    starts, stops, vhosts = [], [], []
    for _ in range(rounds):
        broker = EmbeddedBroker()
        broker.start()
        starts.append(broker.start_seconds)
        began = time.perf_counter()
        name = broker.new_vhost("bench")
        broker.delete_vhost(name)
        vhosts.append(time.perf_counter() - began)
        began = time.perf_counter()
        broker.stop()
        stops.append(time.perf_counter() - began)
    _summary("leveret_broker: EmbeddedBroker start (per module)", starts)
    _summary("leveret_broker: EmbeddedBroker stop (per module)", stops)
    _summary("leveret_vhost: new vhost + delete (per test)", vhosts)
    with tempfile.TemporaryDirectory() as disk:
        starts = []
        for i in range(max(3, rounds // 5)):
            broker = EmbeddedBroker(data_dir=os.path.join(disk, str(i)))
            broker.start()
            starts.append(broker.start_seconds)
            broker.stop()
        _summary("EmbeddedBroker start, data_dir on disk", starts)


def subprocess_broker(rounds: int) -> None:
    starts = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as data:
            began = time.perf_counter()
            proc = subprocess.Popen(  # noqa: S603 - our own command line
                [
                    sys.executable,
                    "-m",
                    "leveret",
                    "serve",
                    "--port",
                    "0",
                    "--stream-port",
                    "0",
                    "--no-management",
                    "--data-dir",
                    data,
                ],
                stderr=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                text=True,
            )
            assert proc.stderr is not None
            for line in proc.stderr:
                if "listening on amqp://" in line:
                    break
            starts.append(time.perf_counter() - began)
            proc.terminate()
            proc.wait(15)
            proc.stderr.close()
    _summary("broker subprocess until listening (for comparison)", starts)


def advances(rounds: int, connections: int) -> None:
    with EmbeddedBroker() as broker:
        idle = []
        clients = [
            pika.BlockingConnection(pika.URLParameters(broker.url())) for _ in range(connections)
        ]
        try:
            for _ in range(rounds):
                began = time.perf_counter()
                broker.advance(30 * 60)
                idle.append(time.perf_counter() - began)
            channel = clients[0].channel()
            # A message through 30 queues with a 60 s TTL each (a TTL cycle back into a
            # queue it left would be dropped, as RabbitMQ does): 30 hops in 30 minutes.
            for hop in range(HOPS):
                channel.queue_declare(
                    f"hop.{hop}",
                    arguments={
                        "x-message-ttl": 60_000,
                        "x-dead-letter-exchange": "",
                        "x-dead-letter-routing-key": f"hop.{hop + 1}",
                    },
                )
            channel.queue_declare(f"hop.{HOPS}")
            channel.confirm_delivery()
            channel.basic_publish("", "hop.0", b"x")
            began = time.perf_counter()
            broker.advance(HOPS * 60 + 1)
            hops = time.perf_counter() - began
            method, properties, _ = channel.basic_get(f"hop.{HOPS}", auto_ack=True)
            assert method is not None
            assert len(properties.headers["x-death"]) == HOPS
        finally:
            for client in clients:
                client.close()
    _summary(f"advance(30 min), idle, {connections} connections", idle)
    _summary("advance(30 min): one message, 30 TTL hops", [hops])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--connections", type=int, default=3)
    args = parser.parse_args(argv)
    imports(max(3, args.rounds // 5))
    embedded(args.rounds)
    subprocess_broker(max(3, args.rounds // 5))
    advances(max(3, args.rounds // 5), args.connections)


if __name__ == "__main__":
    main()
