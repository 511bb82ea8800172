"""The management API's cluster-wide views, asked of either of two real nodes, compared with
what RabbitMQ 3.10.8 answers in the same scenario (tests/data/management/
rabbitmq-3.10.8-cluster-views.json): connections, channels and consumers of every node
with their node, an overview that totals the cluster and lists every node's listeners and
contexts, objects of another node read and closed through this one, queues with their
leader's counters, Prometheus per node; and the web UI's overview shows the nodes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pika
import pytest
import requests

from tests.cluster.nodes import AUTH, eventually
from tests.integration.mgmt_support import _PROM, _wait_for
from tests.integration.test_management_ui import TIMEOUT_MS, _login, browser

if TYPE_CHECKING:
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]

RECORDED = json.loads(
    (Path(__file__).parents[1] / "data/management/rabbitmq-3.10.8-cluster-views.json").read_text()
)
MESSAGES = 3  # per queue, all delivered (prefetch 7) and unacknowledged
__all__ = ["browser"]  # the browser fixture, shared with the UI's single-node tests


def _identity(metrics: str) -> dict[str, str]:
    line = next(x for x in metrics.splitlines() if x.startswith("rabbitmq_identity_info{"))
    return dict(re.findall(r'(\w+)="([^"]*)"', line))


def _value(metrics: str, name: str) -> float:
    return float(next(x for x in metrics.splitlines() if x.startswith(name + " ")).split()[1])


def _queue(node: Node) -> str:
    # Characters a path has to keep encoded on its way to the node that has the queue.
    return f"views {node.name} ?#%/"


def _one_client_per_node(nodes: tuple[Node, Node]) -> list[pika.BlockingConnection]:
    """RabbitMQ's recorded scenario: on each node a connection, a channel with prefetch 7,
    a queue led by that node with 3 messages, and a consumer holding them unacked."""
    conns = []
    for node in nodes:
        conn = pika.BlockingConnection(
            pika.ConnectionParameters(node.broker.host, node.broker.port, heartbeat=0)
        )
        channel = conn.channel()
        channel.basic_qos(prefetch_count=7)
        queue = _queue(node)
        channel.queue_declare(queue, auto_delete=True)
        channel.confirm_delivery()
        for _ in range(MESSAGES):
            channel.basic_publish("", queue, b"x")
        channel.basic_consume(queue, lambda *_a: None)
        conn.process_data_events(0.2)
        conns.append(conn)
    return conns


def test_every_node_answers_for_the_whole_cluster(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    names = {a.name, b.name}
    conns = _one_client_per_node(two_nodes)
    try:
        for node in (a, b):
            connections = node.get("connections")
            # As RabbitMQ: every node's connections, each with its node.
            assert len(connections) == len(RECORDED["connections"])
            assert {c["node"] for c in connections} == names
            channels = node.get("channels")
            assert {c["node"] for c in channels} == names
            consumers = node.get("consumers")
            assert len(consumers) == len(RECORDED["consumers"])
            assert {c["channel_details"]["node"] for c in consumers} == names
            assert not any("node" in c for c in consumers)  # RabbitMQ has none at the top
            overview = node.get("overview")
            assert overview["node"] == node.name
            assert overview["object_totals"] | {"exchanges": 0} == RECORDED["overview"][
                "object_totals"
            ] | {"exchanges": 0}
            assert {
                k: overview["queue_totals"][k]
                for k in ("messages", "messages_ready", "messages_unacknowledged")
            } == RECORDED["overview"]["queue_totals"]
            protocols = {item["protocol"] for item in overview["listeners"]}
            assert protocols == set(RECORDED["overview"]["listener_protocols"])
            assert {(item["protocol"], item["node"]) for item in overview["listeners"]} == {
                (protocol, name) for protocol in protocols for name in names
            }
            assert sorted((c["description"], c["node"]) for c in overview["contexts"]) == sorted(
                (c["description"], name)
                for c in RECORDED["overview"]["contexts"][:: len(names)]
                for name in names
            )
            page = node.get("connections?page=1&page_size=1")
            assert (page["total_count"], page["item_count"]) == (2, 1)
            # Queues with their leader's counters, from either node.
            queues = {q["name"]: q for q in node.get("queues")}
            for other in (a, b):
                row = queues[_queue(other)]
                assert (row["node"], row["messages_unacknowledged"]) == (other.name, MESSAGES)

        # Another node's objects, read and closed through this one (RabbitMQ: 200, 204).
        theirs = next(c for c in a.get("connections") if c["node"] == b.name)
        path = f"connections/{quote(theirs['name'], safe='')}"
        got = requests.get(a.api(path), auth=AUTH, timeout=10)
        assert (got.status_code, got.json()["node"]) == (
            RECORDED["get_connection_on_other_node"]["status"],
            b.name,
        )
        listed = a.get(path + "/channels")
        assert [c["node"] for c in listed] == [b.name]
        channel = listed[0]["name"]
        detail = a.get(f"channels/{quote(channel, safe='')}")
        assert detail["node"] == b.name
        assert [c["channel_details"]["node"] for c in detail["consumer_details"]] == [b.name]
        queue = a.get(f"queues/%2F/{quote(_queue(b), safe='')}")
        assert (queue["node"], queue["messages"]) == (b.name, MESSAGES)

        # Prometheus: each node its own figures, one cluster id.
        metrics = {}
        for node in (a, b):
            prometheus = _wait_for(node.broker, _PROM)
            metrics[node.name] = requests.get(f"{prometheus}/metrics", timeout=10).text
        for node in (a, b):
            text = metrics[node.name]
            for name in ("rabbitmq_connections", "rabbitmq_channels", "rabbitmq_queues"):
                assert _value(text, name) == 1, name
            assert _value(text, "rabbitmq_queue_messages") == MESSAGES
            assert _identity(text)["rabbitmq_node"] == node.name
        ids = {_identity(text)["rabbitmq_cluster_permanent_id"] for text in metrics.values()}
        assert len(ids) == 1
        assert ids.pop().startswith("rabbitmq-cluster-id-")

        closed = requests.delete(a.api(path), auth=AUTH, timeout=10)
        assert closed.status_code == RECORDED["delete_connection_on_other_node"]["status"]

        def b_closed() -> bool:
            try:
                conns[1].process_data_events(0.1)
            except pika.exceptions.ConnectionClosedByBroker:
                return True
            return bool(conns[1].is_closed)

        eventually(b_closed)
        assert [c["node"] for c in a.get("connections")] == [a.name]
    finally:
        for conn in conns:
            if conn.is_open:
                conn.close()


def test_the_ui_overview_shows_the_nodes(browser: Any, two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    conns = _one_client_per_node(two_nodes)
    try:
        page.goto(a.url + "/")
        _login(page)
        page.wait_for_selector(f"#nodes-table td:text-is('{b.name}')")
        assert page.inner_text("#nodes-table").count("running") == 2
        assert f"{a.name} (this node)" in page.inner_text("#nodes-table")
        page.click("a[data-tab='connections']")
        page.wait_for_selector(f"#connections-table td:text-is('{b.name}')")
        page.wait_for_selector(f"#connections-table td:text-is('{a.name}')")
    finally:
        context.close()
        for conn in conns:
            conn.close()
    assert not errors, errors
