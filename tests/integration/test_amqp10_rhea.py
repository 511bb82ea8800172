"""An AMQP 1.0 client that is not Python: rhea (Node.js, from npm) against Leveret's 1.0
front end (``js/amqp10_rhea.js``): it receives what pika published (properties and
headers compared), sends messages pika consumes, and runs a request/reply through a
dynamic reply queue. Skipped when node or npm is missing or npm cannot install rhea.
Leveret only (v2 addresses)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
import pytest

if TYPE_CHECKING:
    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.timeout(120)]

RHEA = "rhea@3.0.5"


@pytest.fixture(scope="module")
def node_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rhea, installed with npm into a temporary directory."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    prefix = tmp_path_factory.mktemp("rhea")
    result = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix), RHEA],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"npm could not install {RHEA}: {result.stderr[-300:]}")
    return prefix / "node_modules"


def test_rhea_client(broker: Broker, name: str, node_modules: Path) -> None:
    params = pika.ConnectionParameters(host=broker.host, port=broker.port)
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        for suffix in ("in", "out", "rpc"):
            ch.queue_declare(f"{name}.{suffix}")
        for i in range(2):
            ch.basic_publish(
                "",
                f"{name}.in",
                f"pika {i}".encode(),
                pika.BasicProperties(
                    message_id=f"p{i}", headers={"i": i, "s": "x"}, delivery_mode=2
                ),
            )
    script = Path(__file__).parent / "js" / "amqp10_rhea.js"
    proc = subprocess.run(
        ["node", str(script), str(broker.port), name, "2"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NODE_PATH": str(node_modules)},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outcome: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["received"] == [
        {"body": f"pika {i}", "app": {"i": i, "s": "x"}, "message_id": f"p{i}", "durable": True}
        for i in range(2)
    ]
    assert (outcome["sent"], outcome["accepted"]) == (3, 3)
    assert outcome["replies"] == ["ONE", "TWO"]
    assert outcome["reply_to"].startswith("/queues/amq.gen-")
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        got = [ch.basic_get(f"{name}.out", auto_ack=True) for _ in range(3)]
    assert [body for _m, _p, body in got] == [b"rhea 1", b"rhea 2", b"rhea 3"]
    for n, (_m, props, _body) in enumerate(got, 1):
        assert props.message_id == f"rhea-{n}"
        assert props.content_type == "text/plain"
        assert props.headers == {"n": n, "kind": "js"}
        assert props.delivery_mode == 2
