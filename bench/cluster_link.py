"""``python -m bench.cluster_link``: what a message costs when it crosses the inter-node link,
against the same message on one node.

Starts its own etcd and two ``leveret serve`` nodes (``a``, ``b``) on loopback, declares a
durable queue led by ``b``, and runs each scenario ``--rounds`` times, interleaved:

- ``local``: the publisher and the consumer connected to ``b`` (the queue's node);
- ``forwarded``: both connected to ``a``: every message crosses the link to ``b`` and its
  delivery crosses back.

A pika publisher (``--count`` messages of ``--size`` bytes, transient, no confirms unless
``--confirms``) and a pika consumer (prefetch ``--prefetch``, manual acks, multiple ack
every 50) run at once in two threads. Prints per run: consumed msg/s (first delivery to
the last) and the brokers' CPU per message (user + system time of both node processes,
from ``/proc``, summed), then medians. The clients are pika, in this process: on a busy or
small machine they are part of the limit; the CPU per message is the brokers' alone.
Quote figures with the machine's load (``os.getloadavg`` is printed). ``--tls``: the link
between the nodes runs over mutual TLS (``cluster_tls_*``, certificates made by trustme).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import pika

from leveret.testing.etcd import EtcdServer

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def tls_env() -> dict[str, str]:
    """The cluster TLS settings of a node whose certificate a fresh CA signed (one for
    both nodes: names are not checked on the link)."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", common_name="bench")
    directory = Path(tempfile.mkdtemp(prefix="leveret-bench-tls-"))
    files = {name: directory / name for name in ("node.crt", "node.key", "ca.pem")}
    cert.cert_chain_pems[0].write_to_path(str(files["node.crt"]))
    cert.private_key_pem.write_to_path(str(files["node.key"]))
    ca.cert_pem.write_to_path(str(files["ca.pem"]))
    return {
        "LEVERET_CLUSTER_TLS_CERTFILE": str(files["node.crt"]),
        "LEVERET_CLUSTER_TLS_KEYFILE": str(files["node.key"]),
        "LEVERET_CLUSTER_TLS_CACERTFILE": str(files["ca.pem"]),
    }


def start_node(
    etcd: EtcdServer, name: str, prefix: str, env: dict[str, str] | None = None
) -> tuple[int, object]:
    from tests.integration.conftest import start_broker

    data = tempfile.mkdtemp(prefix=f"leveret-bench-{name}-")
    broker = start_broker(
        "--data-dir",
        data,
        "--etcd",
        etcd.url,
        "--node-name",
        name,
        "--cluster-port",
        "0",
        env={"LEVERET_ETCD_PREFIX": prefix, "LEVERET_CLUSTER_LEASE_TTL": "5", **(env or {})},
    )
    deadline = time.monotonic() + 30
    while "registered as cluster node" not in broker.log_text():
        if time.monotonic() > deadline:
            raise RuntimeError(broker.log_text())
        time.sleep(0.1)
    return broker.port, broker


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=0))


def run(
    pub_port: int, sub_port: int, queue: str, args: argparse.Namespace, pids: list[int]
) -> tuple[float, float]:
    body = b"x" * args.size
    received = 0
    first = last = 0.0
    ready = threading.Event()

    def consumer() -> None:
        nonlocal received, first, last
        conn = connect(sub_port)
        ch = conn.channel()
        ch.basic_qos(prefetch_count=args.prefetch)
        ready.set()
        for method, _props, _body in ch.consume(queue, inactivity_timeout=10):
            if method is None:
                break
            received += 1
            if received == 1:
                first = time.monotonic()
            if received % 50 == 0 or received == args.count:
                ch.basic_ack(method.delivery_tag, multiple=True)
            if received == args.count:
                last = time.monotonic()
                break
        ch.cancel()
        conn.close()

    thread = threading.Thread(target=consumer)
    thread.start()
    ready.wait(10)
    cpu0 = sum(cpu_seconds(p) for p in pids)
    conn = connect(pub_port)
    ch = conn.channel()
    if args.confirms:
        ch.confirm_delivery()
    for _ in range(args.count):
        ch.basic_publish("", queue, body)
    conn.close()
    thread.join(120)
    cpu = sum(cpu_seconds(p) for p in pids) - cpu0
    if received < args.count:
        raise RuntimeError(f"consumed {received} of {args.count}")
    rate = (args.count - 1) / (last - first) if last > first else float("nan")
    return rate, cpu / args.count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--prefetch", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--confirms", action="store_true")
    parser.add_argument("--tls", action="store_true", help="the link over mutual TLS")
    args = parser.parse_args()
    env = tls_env() if args.tls else None
    etcd = EtcdServer().start()
    brokers = []
    try:
        a_port, a = start_node(etcd, "a@bench", "/bench-link/", env)
        brokers.append(a)
        b_port, b = start_node(etcd, "b@bench", "/bench-link/", env)
        brokers.append(b)
        pids = [x.process.pid for x in brokers]  # type: ignore[attr-defined]
        conn = connect(b_port)
        conn.channel().queue_declare("bench.link", durable=True)
        conn.close()
        deadline = time.monotonic() + 10
        while True:  # a's proxy of the queue led by b
            probe = connect(a_port)
            try:
                probe.channel().queue_declare("bench.link", passive=True)
                break
            except pika.exceptions.ChannelClosedByBroker:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
            finally:
                if probe.is_open:
                    probe.close()
        results: dict[str, list[tuple[float, float]]] = {"local": [], "forwarded": []}
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        for round_ in range(args.rounds):
            for scenario, port in (("local", b_port), ("forwarded", a_port)):
                rate, cpu = run(port, port, "bench.link", args, pids)
                results[scenario].append((rate, cpu))
                print(
                    f"round {round_ + 1} {scenario:9} {rate:9.0f} msg/s  "
                    f"{cpu:7.1f} µs broker CPU/msg  (load {os.getloadavg()[0]:.2f})"
                )
        for scenario, runs in results.items():
            print(
                f"median {scenario:9} {statistics.median(r for r, _ in runs):9.0f} msg/s  "
                f"{statistics.median(c for _, c in runs):7.1f} µs broker CPU/msg"
            )
        local = statistics.median(c for _, c in results["local"])
        forwarded = statistics.median(c for _, c in results["forwarded"])
        print(f"forwarded / local CPU per message: {forwarded / local:.2f}")
    finally:
        for broker in brokers:
            broker.stop()  # type: ignore[attr-defined]
        etcd.stop()


if __name__ == "__main__":
    main()
