"""Real ``leveret serve`` nodes on one etcd: definitions made through the management API
or ``leveret ctl`` on one node reach the others; concurrent declarations agree; a node
killed with ``kill -9`` and restarted converges; etcd restarted under load converges."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
import pytest
import requests

from leveret.cluster.apply import QueueRecord
from leveret.cluster.etcd import EtcdClient
from leveret.cluster.keys import Layout
from leveret.cluster.metadata import queue_value
from tests.cluster.nodes import AUTH, Node, eventually, queue_names, start_node
from tests.integration.ctl_support import ctl, ok

if TYPE_CHECKING:
    from leveret.testing.etcd import EtcdServer

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]

RABBIT_NODES = Path(__file__).parents[1] / "data/management/rabbitmq-3.10.8-cluster-nodes.json"


def test_definitions_made_on_one_node_appear_on_the_others(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    assert a.put("vhosts/v1", {}).status_code == 201
    assert a.put("users/alice", {"password": "pw", "tags": "management"}).status_code == 201
    assert a.put("permissions/v1/alice", {"configure": ".*", "write": ".*", "read": ""}).ok
    policy = {"pattern": "^ttl", "definition": {"message-ttl": 5000}, "apply-to": "queues"}
    assert a.put("policies/v1/ttl", policy).status_code == 201
    assert a.put("exchanges/v1/x", {"type": "topic"}).status_code == 201
    assert a.put("queues/v1/ttl-q", {"durable": True}).status_code == 201
    binding = requests.post(
        a.api("bindings/v1/e/x/q/ttl-q"), json={"routing_key": "k.#"}, auth=AUTH, timeout=10
    )
    assert binding.status_code == 201
    ok(b.data_dir, "add_user", "bob", "secret")
    ok(b.data_dir, "set_permissions", "-p", "v1", "bob", ".*", ".*", ".*")

    def seen_on(node: Node) -> bool:
        users = {u["name"] for u in node.get("users")}
        perms = {(p["user"], p["vhost"]) for p in node.get("permissions")}
        return {"alice", "bob"} <= users and {("alice", "v1"), ("bob", "v1")} <= perms

    for node in (a, b):
        eventually(lambda node=node: seen_on(node))  # type: ignore[misc]
        assert [p["name"] for p in node.get("policies/v1")] == ["ttl"]
        assert "x" in {e["name"] for e in node.get("exchanges/v1")}
        eventually(lambda node=node: "ttl-q" in queue_names(node, "v1"))  # type: ignore[misc]
    # The queue is led by the node whose API declared it (client-local), and every node
    # says so; the binding is on the leader's model and in every node's listing of it.
    rows = {q["name"]: q for q in b.get("queues/v1")}
    assert rows["ttl-q"]["node"] == "a@test"
    leader_row = {q["name"]: q for q in a.get("queues/v1")}["ttl-q"]
    assert leader_row["policy"] == "ttl"
    assert leader_row["node"] == "a@test"
    listed = ok(b.data_dir, "list_queues", "-p", "v1", "name", "node")
    assert "ttl-q\ta@test" in listed
    # Alice logs in on the node that did not create her, in the vhost made on the other.
    conn = pika.BlockingConnection(
        pika.ConnectionParameters(
            b.broker.host, b.broker.port, "v1", pika.PlainCredentials("alice", "pw")
        )
    )
    conn.close()
    # Nodes and cluster status, from either node.
    nodes = {n["name"]: n for n in b.get("nodes")}
    assert set(nodes) == {"a@test", "b@test"}
    assert all(n["running"] for n in nodes.values())
    assert {"mem_used", "uptime", "os_pid"} <= set(nodes["a@test"])  # a's own answer
    status = ok(a.data_dir, "--formatter", "json", "cluster_status")
    assert '"a@test"' in status
    assert '"b@test"' in status
    overview = a.get("overview")
    assert {listener["node"] for listener in overview["listeners"]} == {"a@test", "b@test"}
    protocols = {listener["protocol"] for listener in overview["listeners"]}
    assert {"amqp", "clustering"} <= protocols
    # A definitions import on one node; queues placed by the balanced locator spread.
    doc: dict[str, Any] = {
        "exchanges": [{"name": "imported-x", "vhost": "v1", "type": "fanout", "durable": True}],
        "queues": [
            {
                "name": f"bal-{i}",
                "vhost": "v1",
                "durable": True,
                "arguments": {"x-queue-leader-locator": "balanced"},
            }
            for i in range(4)
        ],
    }
    posted = requests.post(a.api("definitions"), json=doc, auth=AUTH, timeout=10)
    assert posted.status_code == 204, posted.text
    eventually(lambda: "imported-x" in {e["name"] for e in b.get("exchanges/v1")})
    balanced = eventually(
        lambda: (
            [q["node"] for q in b.get("queues/v1") if q["name"].startswith("bal-")]
            if len([q for q in b.get("queues/v1") if q["name"].startswith("bal-")]) == 4
            else None
        )
    )
    # a led one queue (ttl-q), b none: b, then a (a tie goes to the declaring node), b, a.
    assert sorted(balanced) == ["a@test", "a@test", "b@test", "b@test"]
    # A vhost deleted on one node goes on every node.
    assert requests.delete(b.api("vhosts/v1"), auth=AUTH, timeout=10).status_code == 204
    eventually(lambda: "v1" not in {v["name"] for v in a.get("vhosts")})


def test_concurrent_declares_from_two_nodes_agree(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes

    def race(name: str, bodies: tuple[dict[str, Any], dict[str, Any]]) -> list[int]:
        results: list[int] = [0, 0]
        barrier = threading.Barrier(2)

        def declare(i: int, node: Node) -> None:
            barrier.wait(5)
            results[i] = node.put(f"queues/%2F/{name}", bodies[i]).status_code

        threads = [threading.Thread(target=declare, args=(i, n)) for i, n in enumerate((a, b))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(15)
        return sorted(results)

    for round_ in range(5):
        same = {"durable": True, "arguments": {"x-max-length": 10}}
        assert race(f"same-{round_}", (same, same)) == [201, 204]
        one = {"durable": True, "arguments": {"x-max-length": 1}}
        other = {"durable": True, "arguments": {"x-max-length": 2}}
        assert race(f"differ-{round_}", (one, other)) == [201, 400]
    # Every node holds the same set, and each queue is on exactly one leader.
    expected = {f"{kind}-{i}" for kind in ("same", "differ") for i in range(5)}
    for node in (a, b):
        eventually(lambda node=node: expected <= queue_names(node))  # type: ignore[misc]
    leaders = {q["name"]: q["node"] for q in a.get("queues/%2F") if q["name"] in expected}
    assert leaders == {q["name"]: q["node"] for q in b.get("queues/%2F") if q["name"] in expected}


def test_a_node_killed_and_restarted_converges(
    etcd_server: EtcdServer, two_nodes: tuple[Node, Node], etcd_prefix: str
) -> None:
    a, b = two_nodes
    assert b.put("queues/%2F/kept", {"durable": True}).status_code == 201  # led by b
    assert b.put("queues/%2F/doomed", {"durable": True}).status_code == 201
    assert b.put("queues/%2F/reborn", {"durable": True}).status_code == 201
    conn = pika.BlockingConnection(pika.ConnectionParameters(b.broker.host, b.broker.port))
    channel = conn.channel()
    channel.confirm_delivery()
    for i in range(3):
        for queue in ("kept", "reborn"):
            channel.basic_publish(
                "", queue, b"m%d" % i, pika.BasicProperties(delivery_mode=2), mandatory=True
            )
    # Declared by a client on b (written to etcd behind the model until the shell's
    # deferral): in the cluster's definitions, and kept by b's restart.
    channel.queue_declare("amqp-made", durable=True)
    channel.basic_publish("", "amqp-made", b"x", pika.BasicProperties(delivery_mode=2))
    conn.close()
    eventually(lambda: {"kept", "doomed", "amqp-made"} <= queue_names(a))
    b.broker.stop(signal.SIGKILL)
    # a sees b down once its lease expires, and changes the definitions meanwhile.
    eventually(lambda: not {n["name"]: n for n in a.get("nodes")}["b@test"]["running"], 15)
    # As RabbitMQ 3.10.8 shows a stopped node (recorded from a two-node cluster).
    recorded = json.loads(RABBIT_NODES.read_text())["down_node"]
    shown = {n["name"]: n for n in a.get("nodes")}["b@test"]
    assert shown == {**recorded, "name": "b@test"}
    assert [q["state"] for q in a.get("queues/%2F") if q["name"] == "kept"] == ["down"]
    assert requests.delete(a.api("queues/%2F/doomed"), auth=AUTH, timeout=10).status_code == 204
    # Deleted and declared again meanwhile, b leading the new one (as a placement that
    # picked b while its lease had not yet expired would make it): b's stored messages
    # are the old queue's and must not come back in the new one.
    assert requests.delete(a.api("queues/%2F/reborn"), auth=AUTH, timeout=10).status_code == 204
    asyncio.run(
        _put_record(
            etcd_server, etcd_prefix, QueueRecord("/", "reborn", True, False, False, {}, "b@test")
        )
    )
    assert a.put("exchanges/%2F/made-meanwhile", {"type": "fanout"}).status_code == 201
    restarted = start_node(etcd_server, etcd_prefix, "b@test", b.data_dir)
    try:
        names = queue_names(restarted)
        assert "kept" in names
        assert "doomed" not in names
        assert "made-meanwhile" in {e["name"] for e in restarted.get("exchanges/%2F")}
        conn = pika.BlockingConnection(
            pika.ConnectionParameters(restarted.broker.host, restarted.broker.port)
        )
        declared = conn.channel().queue_declare("kept", passive=True)
        assert declared.method.message_count == 3  # confirmed, on b's disk
        declared = conn.channel().queue_declare("amqp-made", passive=True)
        assert declared.method.message_count == 1
        declared = conn.channel().queue_declare("reborn", passive=True)
        assert declared.method.message_count == 0
        conn.close()
        eventually(lambda: {n["name"]: n for n in a.get("nodes")}["b@test"]["running"])
    finally:
        restarted.broker.stop()
    # A running node cannot be forgotten; a stopped one can, with the queues it led.
    refused = ctl(a.data_dir, "forget_cluster_node", "a@test")
    assert refused.returncode != 0
    assert "running" in refused.stderr + refused.stdout
    eventually(lambda: not {n["name"]: n for n in a.get("nodes")}["b@test"]["running"], 15)
    ok(a.data_dir, "forget_cluster_node", "b@test")
    assert {n["name"] for n in a.get("nodes")} == {"a@test"}
    assert not {"kept", "amqp-made"} & queue_names(a)


async def _put_record(etcd: EtcdServer, prefix: str, record: QueueRecord) -> None:
    client = EtcdClient([etcd.url])
    try:
        await client.put(Layout(prefix).queue(record.vhost, record.name), queue_value(record))
    finally:
        await client.close()


def test_etcd_restarted_under_load_converges(
    etcd_server: EtcdServer, two_nodes: tuple[Node, Node]
) -> None:
    a, b = two_nodes
    made: list[str] = []
    failed: list[int] = []
    stop = threading.Event()

    def declare() -> None:
        for i in range(400):
            if stop.is_set():
                return
            try:
                status = a.put(f"queues/%2F/load-{i}", {"durable": True}).status_code
            except requests.RequestException:
                status = 0
            if status == 201:
                made.append(f"load-{i}")
            else:
                failed.append(status)
            time.sleep(0.01)

    thread = threading.Thread(target=declare)
    thread.start()
    try:
        eventually(lambda: len(made) >= 5)
        etcd_server.kill()  # kill -9: etcd's own log brings it back
        time.sleep(1.0)
        etcd_server.start()
        eventually(lambda: len(made) >= 5 + 20, 30)
    finally:
        stop.set()
        thread.join(30)
    # What a got an answer for is on both nodes; a declaration made while etcd was down
    # failed with 503, never a false success.
    for node in (a, b):
        eventually(lambda node=node: set(made) <= queue_names(node), 20)  # type: ignore[misc]
    assert set(failed) <= {503}  # "service_unavailable": the cluster's store did not answer


def test_a_killed_node_is_down_at_once_not_when_its_lease_expires(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    """kill -9 of a node closes its inter-node link and its port refuses the next dial:
    the other node revokes its lease (30 s here) instead of waiting it out, so the killed
    node is down for the cluster within a moment, and its restart registers at once (it
    does not wait for its old lease either)."""
    a = start_node(etcd_server, etcd_prefix, "a@test", lease_ttl=30)
    b = start_node(etcd_server, etcd_prefix, "b@test", lease_ttl=30)
    try:
        eventually(lambda: {n["name"]: n for n in a.get("nodes")}["b@test"]["running"])
        eventually(lambda: any("inter-node link to node 'b@test' is up" in x for x in a.broker.log))
        b.broker.stop(signal.SIGKILL)
        killed = time.monotonic()
        eventually(lambda: not {n["name"]: n for n in a.get("nodes")}["b@test"]["running"], 10)
        assert time.monotonic() - killed < 10  # its lease had 30 s to run
        assert any("its lease" in x and "revoked" in x for x in a.broker.log)
        started = time.monotonic()
        b = start_node(etcd_server, etcd_prefix, "b@test", b.data_dir, lease_ttl=30)
        assert time.monotonic() - started < 20
        eventually(lambda: {n["name"]: n for n in a.get("nodes")}["b@test"]["running"])
    finally:
        for node in (a, b):
            if node.broker.process is not None and node.broker.process.poll() is None:
                node.broker.stop()
