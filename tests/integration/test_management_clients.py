"""Real clients of the management API against a Leveret broker: amqpstorm's management
client, pyrabbit2 (what kombu's amq_manager and Celery Flower use) and RabbitMQ's own
``rabbitmqadmin`` (Debian's rabbitmq-server package), each doing what its users do."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest
from amqpstorm.connection import Connection
from amqpstorm.management.api import ManagementApi
from amqpstorm.management.exception import ApiError
from amqpstorm.message import Message
from pyrabbit2.api import Client

from tests.integration.mgmt_support import MgmtBroker, start_mgmt_broker

if TYPE_CHECKING:
    from collections.abc import Iterator

# Left out of the compiled pass (scripts/test): the management API is not compiled.
pytestmark = [pytest.mark.leveret_only, pytest.mark.interop, pytest.mark.pure_only]


@pytest.fixture(scope="module")
def mgmt() -> Iterator[MgmtBroker]:
    m = start_mgmt_broker()
    try:
        yield m
    finally:
        m.broker.stop()


def test_amqpstorm_management_client(mgmt: MgmtBroker) -> None:
    api = ManagementApi(mgmt.url, "guest", "guest", timeout=10)
    assert api.aliveness_test("/")["status"] == "ok"
    assert api.whoami()["name"] == "guest"
    assert api.overview()["product_name"] == "Leveret"
    assert api.healthchecks.get()["status"] == "ok"
    assert api.nodes()[0]["running"] is True
    api.virtual_host.create("storm-vh")
    assert "storm-vh" in [v["name"] for v in api.virtual_host.list()]
    api.user.create("storm-user", "pw", tags="monitoring")
    api.user.set_permission("storm-user", "storm-vh")
    assert api.user.get_permission("storm-user", "storm-vh")["configure"] == ".*"
    api.queue.declare("storm-q", durable=True, arguments={"x-max-priority": 5})
    api.exchange.declare("storm-x", "fanout")
    api.queue.bind("storm-q", "storm-x", routing_key="k")
    assert api.queue.get("storm-q")["arguments"] == {"x-max-priority": 5}
    assert [b["source"] for b in api.queue.bindings("storm-q")] == ["", "storm-x"]
    assert api.exchange.bindings("storm-x")[0]["destination"] == "storm-q"
    api.basic.publish("hello storm", "", exchange="storm-x", properties={"priority": 3})
    messages = api.basic.get("storm-q", requeue=False)
    assert isinstance(messages[0], Message)
    assert messages[0].body == "hello storm"
    assert messages[0].properties["priority"] == 3
    # A client connection seen, then closed through the API.
    connection = Connection("127.0.0.1", "guest", "guest", port=mgmt.broker.port, timeout=5)
    try:
        channel = connection.channel()
        channel.queue.declare("storm-conn-q")
        names = [c["name"] for c in api.connection.list() if c["user"] == "guest"]
        assert names
        assert api.channel.list()
        for name in names:
            api.connection.close(name, reason="storm says bye")
        deadline = time.monotonic() + 5
        while connection.is_open and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not connection.is_open
    finally:
        connection.close()
    api.queue.unbind("storm-q", "storm-x", routing_key="k")
    api.queue.purge("storm-q")
    api.queue.delete("storm-q")
    api.exchange.delete("storm-x")
    with pytest.raises(ApiError) as missing:
        api.queue.get("storm-q")
    assert missing.value.error_code == 404
    api.user.delete("storm-user")
    api.virtual_host.delete("storm-vh")


def test_pyrabbit2_as_kombu_and_flower_use_it(mgmt: MgmtBroker) -> None:
    parts = urlsplit(mgmt.url)
    client = Client(f"{parts.hostname}:{parts.port}", "guest", "guest", timeout=10)
    assert client.is_alive()
    assert client.get_whoami()["name"] == "guest"
    client.create_vhost("rabbit2-vh")
    assert "rabbit2-vh" in client.get_vhost_names()
    client.set_vhost_permissions("rabbit2-vh", "guest", ".*", ".*", ".*")
    client.create_exchange("rabbit2-vh", "r2x", "direct")
    client.create_queue("rabbit2-vh", "r2q", durable=False)
    client.create_binding("rabbit2-vh", "r2x", "r2q", "key")
    assert client.publish("rabbit2-vh", "r2x", "key", "payload")
    assert client.get_queue_depth("rabbit2-vh", "r2q") == 1
    # Flower's broker tab: every queue of the vhost with its counts.
    queues = client.get_queues("rabbit2-vh")
    assert [(q["name"], q["messages"]) for q in queues] == [("r2q", 1)]
    messages = client.get_messages("rabbit2-vh", "r2q", count=1, requeue=False)
    assert messages[0]["payload"] == "payload"
    assert client.get_queue_depth("rabbit2-vh", "r2q") == 0
    bindings = client.get_queue_bindings("rabbit2-vh", "r2q")
    assert [(b["source"], b["routing_key"]) for b in bindings] == [("", "r2q"), ("r2x", "key")]
    client.delete_binding("rabbit2-vh", "r2x", "r2q", "key")
    client.create_policy(
        "rabbit2-vh", "r2p", pattern="^r2", definition={"max-length": 5}, priority=0
    )
    assert client.get_policy("rabbit2-vh", "r2p")["definition"] == {"max-length": 5}
    client.delete_policy("rabbit2-vh", "r2p")
    client.delete_queue("rabbit2-vh", "r2q")
    client.delete_exchange("rabbit2-vh", "r2x")
    client.delete_vhost("rabbit2-vh")
    assert "rabbit2-vh" not in client.get_vhost_names()


def _rabbitmqadmin(mgmt: MgmtBroker, *args: str) -> subprocess.CompletedProcess[str]:
    parts = urlsplit(mgmt.url)
    tool = shutil.which("rabbitmqadmin")
    assert tool is not None
    return subprocess.run(
        [
            tool,
            "-H",
            str(parts.hostname),
            "-P",
            str(parts.port),
            "-u",
            "guest",
            "-p",
            "guest",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.skipif(shutil.which("rabbitmqadmin") is None, reason="rabbitmqadmin not installed")
def test_rabbitmqadmin(mgmt: MgmtBroker) -> None:
    declares: tuple[tuple[str, ...], ...] = (
        ("declare", "queue", "name=admin-q", "durable=false"),
        ("declare", "exchange", "name=admin-x", "type=topic"),
        ("declare", "binding", "source=admin-x", "destination=admin-q", "routing_key=a.*"),
        ("publish", "exchange=admin-x", "routing_key=a.b", "payload=from rabbitmqadmin"),
        ("declare", "policy", "name=admin-p", "pattern=^admin-", 'definition={"max-length":9}'),
    )
    for args in declares:
        result = _rabbitmqadmin(mgmt, *args)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
    listed = _rabbitmqadmin(mgmt, "-f", "raw_json", "list", "queues", "name", "messages", "policy")
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["admin-q"]["messages"] == 1
    assert rows["admin-q"]["policy"] == "admin-p"
    table = _rabbitmqadmin(mgmt, "list", "queues")
    assert "admin-q" in table.stdout
    got = _rabbitmqadmin(mgmt, "get", "queue=admin-q", "ackmode=ack_requeue_false")
    assert "from rabbitmqadmin" in got.stdout
    for kind in ("exchanges", "bindings", "connections", "channels", "vhosts", "users", "nodes"):
        result = _rabbitmqadmin(mgmt, "list", kind)
        assert result.returncode == 0, (kind, result.stderr)
    exported = _rabbitmqadmin(mgmt, "export", "/dev/stdout")
    assert exported.returncode == 0, exported.stderr
    assert "admin-q" not in exported.stdout  # not durable: not exported, as RabbitMQ
    deletes: tuple[tuple[str, ...], ...] = (
        ("delete", "policy", "name=admin-p"),
        ("delete", "queue", "name=admin-q"),
        ("delete", "exchange", "name=admin-x"),
    )
    for args in deletes:
        result = _rabbitmqadmin(mgmt, *args)
        assert result.returncode == 0, (args, result.stderr)
    assert "admin-q" not in _rabbitmqadmin(mgmt, "list", "queues").stdout
