"""Real ``leveret serve`` nodes on one etcd for the cluster tests: start one, talk to its
management API, wait for a condition (the fixture ``two_nodes`` is in ``conftest.py``)."""

from __future__ import annotations

import base64
import json
import re
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pika
import pika.exceptions
import requests

from tests.integration.conftest import _DATA_ROOT, Broker, start_broker
from tests.integration.mgmt_support import _URL, _wait_for

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from leveret.testing.etcd import EtcdServer

AUTH = ("guest", "guest")
LEASE_TTL = 2
_REGISTERED = re.compile(r"registered as cluster node '([^']+)'")


@dataclass
class Node:
    name: str
    data_dir: Path
    broker: Broker
    url: str
    prefix: str = ""

    def api(self, path: str) -> str:
        return f"{self.url}/api/{path}"

    def get(self, path: str) -> Any:
        response = requests.get(self.api(path), auth=AUTH, timeout=10)
        assert response.status_code == 200, (path, response.status_code, response.text)
        return response.json()

    def put(self, path: str, body: dict[str, Any]) -> requests.Response:
        return requests.put(self.api(path), json=body, auth=AUTH, timeout=10)


def start_node(
    etcd: EtcdServer,
    prefix: str,
    name: str,
    data_dir: Path | None = None,
    *,
    lease_ttl: int = LEASE_TTL,
    env: dict[str, str] | None = None,
    cluster_port: int = 0,
) -> Node:
    data_dir = data_dir or Path(tempfile.mkdtemp(dir=_DATA_ROOT))
    broker = start_broker(
        "--data-dir",
        str(data_dir),
        "--etcd",
        etcd.url,
        "--node-name",
        name,
        "--cluster-port",
        str(cluster_port),
        "--management-port",
        "0",
        "--prometheus-port",
        "0",
        env={
            "LEVERET_ETCD_PREFIX": prefix,
            "LEVERET_CLUSTER_LEASE_TTL": str(lease_ttl),
            "LEVERET_COLLECT_STATISTICS_INTERVAL": "200",
            **(env or {}),
        },
    )
    try:
        url = _wait_for(broker, _URL)
        _wait_for(broker, _REGISTERED, timeout=3 * lease_ttl + 10)
    except Exception:
        broker.stop()
        raise
    return Node(name, data_dir, broker, url, prefix)


def etcd_values(etcd: EtcdServer, key: str, *, prefix: bool = False) -> list[dict[str, Any]]:
    """The JSON values etcd holds at ``key`` (or under it, with ``prefix``), read through its
    JSON gateway: what a node wrote, which no node's API shows (its fencing, its order)."""
    start = key.encode()
    body = {"key": base64.b64encode(start).decode()}
    if prefix:
        body["range_end"] = base64.b64encode(start[:-1] + bytes([start[-1] + 1])).decode()
    answer = requests.post(f"{etcd.url}/v3/kv/range", json=body, timeout=5).json()
    return [dict(json.loads(base64.b64decode(kv["value"]))) for kv in answer.get("kvs", [])]


def eventually(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """``check()``'s first true result, polled for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {check}")
        time.sleep(0.05)


def three_nodes(etcd: EtcdServer, label: str) -> Iterator[list[Node]]:
    """Nodes ``a@test``, ``b@test`` and ``c@test`` on ``etcd`` under a fresh prefix named
    by ``label``, each kept as it starts (so stopped if a later one fails), stopped
    afterwards: a module's fixture yields from it."""
    prefix = f"/leveret-test/{label}-{uuid.uuid4().hex[:8]}/"
    started: list[Node] = []
    try:
        for name in ("a@test", "b@test", "c@test"):
            node = start_node(etcd, prefix, name)
            started.append(node)
        yield started
    finally:
        for node in started:
            if node.broker.process is not None and node.broker.process.poll() is None:
                node.broker.stop()


def two_nodes(etcd: EtcdServer, prefix: str) -> Iterator[tuple[Node, Node]]:
    """Nodes ``a@test`` and ``b@test`` on ``etcd``, stopped afterwards."""
    a = start_node(etcd, prefix, "a@test")
    try:
        b = start_node(etcd, prefix, "b@test")
    except Exception:
        a.broker.stop()
        raise
    try:
        yield a, b
    finally:
        for node in (a, b):
            if node.broker.process is not None and node.broker.process.poll() is None:
                node.broker.stop()


def connect(node: Node) -> pika.BlockingConnection:
    """A pika connection to ``node`` (no heartbeats: a test may stop the node)."""
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", node.broker.port, heartbeat=0)
    )


def visible(node: Node, queue: str) -> bool:
    """Whether ``node`` serves ``queue`` (a passive declare answers)."""
    conn = connect(node)
    try:
        conn.channel().queue_declare(queue, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker:
        return False
    finally:
        if conn.is_open:
            conn.close()


def queue_names(node: Node, vhost: str = "/") -> set[str]:
    return {q["name"] for q in node.get(f"queues/{quote(vhost, safe='')}")}
