"""The client suites against a cluster node: ``python -m tests.cluster.conformance [FILES]``.

Starts an etcd and three ``leveret serve`` nodes (``a@test``, ``b@test``, ``c@test``; the
issue's three-node cluster; ``--nodes N`` for another count), sets a policy
``queue-leader-locator: balanced`` on every queue of ``/`` (so the suites' named queues are
spread over the nodes and about two thirds of what they do crosses the inter-node link), and
runs the given test files (by default ``SUITES``) with ``LEVERET_TEST_AMQP_URL`` pointing
at node ``a``: the way they run against RabbitMQ. Tests marked ``leveret_only`` skip, as
they do against any external broker. Exits with pytest's code; every process it started
is stopped. ``tests/cluster/test_conformance_on_cluster.py`` runs a short part of it in
the suite; docs/cluster.md has the whole run's figures. ``--ballast N`` (first): N queues
led by ``a`` declared first, so that the suites' queues land on the other nodes and every
operation on them crosses the link.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pika

from leveret.testing.etcd import EtcdServer
from tests.cluster import nodes

ROOT = Path(__file__).resolve().parents[2]
SUITES = [
    f"tests/integration/{name}.py"
    for name in (
        "test_aio_pika",
        "test_amqp010",
        "test_amqp10_clients",
        "test_amqp10_outcomes",
        "test_amqp10_rhea",
        "test_amqp10_transactions",
        "test_celery",
        "test_celery_features",
        "test_delayed_exchange",
        "test_fidelity",
        "test_foreign_client",
        "test_groups_clients",
        "test_kombu",
        "test_legacy_interop",
        "test_legacy_protocols",
        "test_message_ops",
        "test_pika_async",
        "test_pika_basic",
        "test_pika_confirms_tx",
        "test_pika_connection",
        "test_pika_exchanges",
        "test_pika_queues",
        "test_qpid_conformance",
        "test_queue_features_clients",
        "test_queue_features_pika",
        "test_raw_frames",
        "test_routing_clients",
        "test_streams",
    )
]


NAMES = ("a@test", "b@test", "c@test", "d@test", "e@test")


def run(pytest_args: list[str], *, ballast: int = 0, nodes_count: int = 3) -> int:
    """``ballast``: durable queues declared through node a first, so that the balanced
    locator puts the suites' next ``ballast`` queues on b and every operation on them
    crosses the link."""
    etcd = EtcdServer().start()
    started: list[nodes.Node] = []
    try:
        prefix = f"/leveret-conformance/{uuid.uuid4().hex[:8]}/"
        if not 2 <= nodes_count <= len(NAMES):
            raise ValueError(f"--nodes: 2 to {len(NAMES)}")
        for name in NAMES[:nodes_count]:
            started.append(nodes.start_node(etcd, prefix, name))  # noqa: PERF401 - one by one: a failed start stops those before it
        a, b = started[0], started[1]
        if ballast:
            with pika.BlockingConnection(
                pika.ConnectionParameters("127.0.0.1", a.broker.port)
            ) as conn:
                channel = conn.channel()
                for index in range(ballast):
                    channel.queue_declare(f"ballast-{index}", durable=True)
        policy = {
            "pattern": "^(?!ballast-)",
            "apply-to": "queues",
            "definition": {"queue-leader-locator": "balanced"},
        }
        response = b.put("policies/%2F/spread-leaders", policy)
        if response.status_code not in (201, 204):
            raise RuntimeError(f"policy refused: {response.status_code} {response.text}")
        nodes.eventually(lambda: any(p["name"] == "spread-leaders" for p in a.get("policies/%2F")))
        env = {
            **os.environ,
            "LEVERET_TEST_AMQP_URL": f"amqp://guest:guest@127.0.0.1:{a.broker.port}/%2F",
        }
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *pytest_args]
        return subprocess.run(command, env=env, cwd=ROOT, check=False, timeout=3600).returncode
    finally:
        for node in started:
            if node.broker.process is not None and node.broker.process.poll() is None:
                node.broker.stop()
            warnings = [
                line for line in node.broker.log if " WARNING " in line or " ERROR " in line
            ]
            if warnings:
                print(f"--- {node.name}: {len(warnings)} warnings and errors, the last ones:")
                print("\n".join(warnings[-30:]))
        etcd.stop()


def main() -> int:
    args = sys.argv[1:]
    ballast, count = 0, 3
    while args[:1] in (["--ballast"], ["--nodes"]):
        if args[0] == "--ballast":
            ballast = int(args[1])
        else:
            count = int(args[1])
        args = args[2:]
    if not any(not a.startswith("-") for a in args):
        args = [*args, *SUITES]
    return run(args, ballast=ballast, nodes_count=count)


if __name__ == "__main__":
    sys.exit(main())
