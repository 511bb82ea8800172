"""``leveret serve --workers N``: one command runs N nodes sharing the ports, with an etcd of
its own; connections spread over the workers; a crashed worker is restarted with its
queues; a clean stop leaves no process; a restart brings back every node's queues; a
supervisor killed with ``kill -9`` takes its workers and etcd with it; no etcd binary is a
clear error."""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest
import requests
import trustme
from rstream import Producer

from leveret.cli.supervisor import node_names
from tests.cluster.test_replicated_streams import publish_confirmed, read_stream
from tests.integration.conftest import Broker, start_broker
from tests.integration.ctl_support import new_data_dir, ok
from tests.integration.mgmt_support import _wait_for

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]

WORKERS = 2
QUEUES = 16  # connections, each declaring its own queue on the worker it reached
MESSAGES = 5
_READY = re.compile(rf"({WORKERS}) workers ready")


def start_workers(data_dir: Path, env: dict[str, str] | None = None) -> Broker:
    broker = start_broker(
        "--workers",
        str(WORKERS),
        "--data-dir",
        str(data_dir),
        "--cluster-port",
        "0",
        "--management-port",
        "0",
        "--prometheus-port",
        "0",
        env={"LEVERET_CLUSTER_LEASE_TTL": "2", **(env or {})},
    )
    try:
        _wait_for(broker, _READY, timeout=90)
    except Exception:
        broker.stop()
        raise
    return broker


def state(data_dir: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((data_dir / "workers.json").read_text())
    return doc


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


def eventually(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true after {timeout} s")
        time.sleep(0.1)


def pids(data_dir: Path) -> list[int]:
    doc = state(data_dir)
    return [int(n["pid"]) for n in doc["nodes"]] + [int(doc["etcd"]["pid"])]


def local_queues(data_dir: Path) -> dict[str, tuple[str, int]]:
    """Each queue with its leader and message count, asked of the leader itself (``ctl``
    counts only the messages of the queues its node leads)."""
    found: dict[str, tuple[str, int]] = {}
    for node in state(data_dir)["nodes"]:
        out = ok(data_dir / node["dir"], "list_queues", "-q", "--formatter", "json")
        for row in json.loads(out):
            if row["node"] == node["name"]:
                found[row["name"]] = (row["node"], row["messages"])
    return found


def serves_every_queue(conn: pika.BlockingConnection) -> bool:
    for i in range(QUEUES):
        channel = conn.channel()
        try:
            declared = channel.queue_declare(f"q{i}", passive=True).method
        except pika.exceptions.ChannelClosedByBroker:
            return False  # its record has not reached this worker yet
        channel.close()
        if declared.message_count != MESSAGES:
            return False
    return True


async def _stream_round_trip(port: int, stream: str, count: int) -> list[tuple[int, bytes]]:
    """``count`` confirmed stream-protocol publishes, each on a new connection to the
    shared port (rstream asks ``metadata`` and connects where the stream's leader is),
    then everything read back by rstream's consumer (it subscribes on a replica)."""
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as p:
        await p.create_stream(stream, exists_ok=True)
    for i in range(count):
        await publish_confirmed(port, stream, b"m%d" % i)
    return await read_stream(port, stream, b"m%d" % (count - 1))


def _link_tls(tmp_path: Path) -> dict[str, str]:
    """The cluster TLS settings: one certificate for the machine's nodes, and its CA."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", common_name="this-machine")
    certfile, keyfile, cafile = (tmp_path / name for name in ("node.crt", "node.key", "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(certfile))
    cert.private_key_pem.write_to_path(str(keyfile))
    ca.cert_pem.write_to_path(str(cafile))
    return {
        "LEVERET_CLUSTER_TLS_CERTFILE": str(certfile),
        "LEVERET_CLUSTER_TLS_KEYFILE": str(keyfile),
        "LEVERET_CLUSTER_TLS_CACERTFILE": str(cafile),
    }


def test_workers_share_the_ports_restart_a_crashed_one_and_recover_every_node(
    tmp_path: Path,
) -> None:
    """With the cluster TLS settings, which reach every worker: each listens with TLS on
    its own cluster port and dials the others with TLS. Each worker also listens for the
    stream protocol on a port of its own, which ``metadata`` names: a stream client that
    reached any worker is sent to the one leading (or holding a replica of) its stream."""
    data_dir = new_data_dir()
    tls = _link_tls(tmp_path)
    broker = start_workers(data_dir, tls)
    try:
        first = state(data_dir)
        names = [n["name"] for n in first["nodes"]]
        assert names == node_names(f"leveret@{socket.gethostname()}", WORKERS, [])

        def linked() -> bool:
            text = broker.log_text()
            return text.count("(TLS)") >= WORKERS and all(
                f"inter-node link to node '{name}' is up" in text for name in names
            )

        eventually(linked, 30, "every worker linked over TLS")
        listening = re.findall(r"inter-node link listening on \S+ \(TLS\)", broker.log_text())
        assert len(listening) == WORKERS
        port = first["ports"]["port"]
        # ctl at the top data directory reaches a worker, which sees the whole cluster.
        status = json.loads(ok(data_dir, "cluster_status", "-q", "--formatter", "json"))
        assert sorted(status["running"]) == sorted(names)

        # Connections spread over the workers (SO_REUSEPORT): each worker has some, and
        # leads the queues its clients declared (client-local placement).
        params = pika.ConnectionParameters("127.0.0.1", port, heartbeat=0)
        connections = [pika.BlockingConnection(params) for _ in range(QUEUES)]
        try:
            for i, conn in enumerate(connections):
                channel = conn.channel()
                channel.confirm_delivery()
                channel.queue_declare(f"q{i}", durable=True)
                for n in range(MESSAGES):
                    channel.basic_publish(
                        "", f"q{i}", b"m%d" % n, pika.BasicProperties(delivery_mode=2)
                    )
            # Any worker serves any queue (the inter-node link): through every connection,
            # whichever worker it reached, every queue answers with its leader's count.
            for conn in connections:
                eventually(
                    functools.partial(serves_every_queue, conn),
                    20,
                    "every queue served through every worker",
                )
            per_node = {
                node["name"]: len(
                    json.loads(
                        ok(data_dir / node["dir"], "list_connections", "-q", "--formatter", "json")
                    )
                )
                for node in first["nodes"]
            }
            # The shared management port reaches any worker, which lists every worker's.
            api = f"http://127.0.0.1:{first['ports']['management_port']}/api/connections"
            listed = requests.get(api, auth=("guest", "guest"), timeout=10).json()
        finally:
            for conn in connections:
                conn.close()
        assert sum(per_node.values()) == QUEUES
        assert all(per_node.values()), per_node
        assert collections.Counter(c["node"] for c in listed) == per_node
        before = local_queues(data_dir)
        assert sorted(before) == sorted(f"q{i}" for i in range(QUEUES))
        assert {leader for leader, _ in before.values()} == set(names)
        assert all(count == MESSAGES for _, count in before.values())

        # A worker killed with kill -9 is started again, with its queues and messages.
        crashed = first["nodes"][1]
        os.kill(crashed["pid"], signal.SIGKILL)
        eventually(
            lambda: (
                state(data_dir)["nodes"][1]["pid"] != crashed["pid"]
                and state(data_dir)["nodes"][1]["ready"]
            ),
            60,
            "the crashed worker restarted",
        )
        assert local_queues(data_dir) == before

        # A clean stop stops every worker, then etcd: no process is left.
        running = pids(data_dir)
        assert broker.stop(timeout=60) == 0
        assert not [pid for pid in running if alive(pid)]
    finally:
        if broker.process is not None and broker.process.poll() is None:
            broker.stop(signal.SIGKILL)

    # Started again on the same directory: the same nodes, every queue with its messages.
    broker = start_workers(data_dir, tls)
    try:
        assert [n["name"] for n in state(data_dir)["nodes"]] == names
        assert local_queues(data_dir) == before
        stream_port = int(state(data_dir)["ports"]["stream_port"])
        got = asyncio.run(_stream_round_trip(stream_port, "events", 8))
        assert got == [(i, b"m%d" % i) for i in range(8)]
        # A supervisor killed with kill -9 takes its workers and its etcd with it.
        running = pids(data_dir)
        broker.stop(signal.SIGKILL)
        eventually(lambda: not [pid for pid in running if alive(pid)], 30, "no process left")
    finally:
        if broker.process is not None and broker.process.poll() is None:
            broker.stop(signal.SIGKILL)


def test_without_etcd_the_error_names_debians_package(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "leveret", "serve", "--workers", "2", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": str(tmp_path), "LEVERET_DATA_DIR": str(tmp_path / "d")},
        check=False,
    )
    assert result.returncode == 1
    assert "etcd-server" in result.stderr
    assert "--etcd" in result.stderr


def test_a_port_another_program_listens_on_is_refused_not_shared(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "leveret", "serve", "--workers", "2", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "LEVERET_DATA_DIR": str(tmp_path / "d")},
            check=False,
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
