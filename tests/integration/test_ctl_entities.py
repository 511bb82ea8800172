"""``leveret ctl``'s verbs about what is in the vhosts (rabbitmqctl's list_queues,
list_exchanges, list_bindings, list_connections, list_channels, list_consumers,
purge_queue, delete_queue, close_connection, set_policy/clear_policy and operator
policies), table and JSON output, the whole definitions document through export and
import, and ``load_definitions`` at boot."""

from __future__ import annotations

import json
import subprocess
import sys

import pika
import pika.exceptions
import pytest

from tests.integration.ctl_support import ctl, new_data_dir, ok, start

# Left out of the compiled pass (scripts/test): leveret ctl, not the broker's compiled core.
pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.pure_only]


def test_listing_and_operation_verbs() -> None:
    data = new_data_dir()
    broker = start(data)
    conn = pika.BlockingConnection(
        pika.ConnectionParameters(
            broker.host, broker.port, client_properties={"connection_name": "ctl-conn"}
        )
    )
    try:
        ch = conn.channel()
        ch.exchange_declare("ctl-x", "topic", durable=True)
        ch.queue_declare("ctl-q", durable=True)
        ch.queue_bind("ctl-q", "ctl-x", "a.#")
        for _ in range(4):
            ch.basic_publish("ctl-x", "a.b", b"m")
        ch.basic_qos(prefetch_count=3)
        ch.queue_declare("ctl-consumed")
        ch.basic_consume("ctl-consumed", lambda *_a: None, consumer_tag="ctl-tag")
        conn.process_data_events(0.2)
        lines = ok(data, "list_queues", "-q", "name", "messages", "consumers").splitlines()
        assert lines[0] == "name\tmessages\tconsumers"
        assert sorted(lines[1:]) == ["ctl-consumed\t0\t1", "ctl-q\t4\t0"]
        assert "Listing queues for vhost / ..." in ok(data, "list_queues")
        rows = json.loads(ok(data, "list_queues", "--formatter", "json"))
        assert {r["name"]: r["messages"] for r in rows} == {"ctl-consumed": 0, "ctl-q": 4}
        exchanges = ok(data, "list_exchanges", "-q").splitlines()
        assert "ctl-x\ttopic" in exchanges
        assert "amq.direct\tdirect" in exchanges
        bindings = ok(data, "list_bindings", "-q").splitlines()
        assert "ctl-x\texchange\tctl-q\tqueue\ta.#\t{}" in bindings
        connections = json.loads(ok(data, "list_connections", "--formatter", "json"))
        assert [(c["user"], c["vhost"], c["channels"]) for c in connections] == [("guest", "/", 1)]
        channels = ok(data, "list_channels", "-q", "user", "consumer_count").splitlines()
        assert channels == ["user\tconsumer_count", "guest\t1"]
        consumers = json.loads(ok(data, "list_consumers", "--formatter", "json"))
        assert [(c["queue_name"], c["consumer_tag"]) for c in consumers] == [
            ("ctl-consumed", "ctl-tag")
        ]
        # Policies, live: the queue keeps 2 of its 4 messages.
        ok(data, "set_policy", "--apply-to", "queues", "cap", "^ctl-q$", '{"max-length": 2}')
        assert "ctl-q\t2" in ok(data, "list_queues", "-q").splitlines()
        policies = json.loads(ok(data, "list_policies", "--formatter", "json"))
        assert policies == [
            {
                "vhost": "/",
                "name": "cap",
                "pattern": "^ctl-q$",
                "apply-to": "queues",
                "definition": {"max-length": 2},
                "priority": 0,
            }
        ]
        ok(data, "set_operator_policy", "tight", "^ctl-", '{"max-length": 1}')
        assert "ctl-q\t1" in ok(data, "list_queues", "-q").splitlines()
        refused = ctl(data, "set_operator_policy", "bad", ".*", '{"dead-letter-exchange": "x"}')
        assert refused.returncode == 65
        assert "not an operator policy key" in refused.stderr
        ok(data, "clear_operator_policy", "tight")
        ok(data, "clear_policy", "cap")
        assert json.loads(ok(data, "list_policies", "--formatter", "json")) == []
        assert ctl(data, "clear_policy", "cap").returncode == 69
        # Purge, delete, close.
        assert ok(data, "purge_queue", "ctl-q").strip().endswith("1")
        assert "ctl-q\t0" in ok(data, "list_queues", "-q").splitlines()
        refused = ctl(data, "delete_queue", "ctl-consumed", "--if-unused")
        assert refused.returncode != 0
        assert "in use" in refused.stderr
        ok(data, "delete_queue", "ctl-q")
        assert "ctl-q" not in ok(data, "list_queues", "-q")
        ok(data, "close_connection", connections[0]["name"], "go away")
        with pytest.raises(pika.exceptions.ConnectionClosed) as closed:
            conn.process_data_events(5)
        assert closed.value.reply_code == 320
        assert "go away" in closed.value.reply_text
    finally:
        if conn.is_open:
            conn.close()
        broker.stop()


def test_definitions_export_import_and_load_at_boot() -> None:
    data = new_data_dir()
    broker = start(data)
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port))
        ch = conn.channel()
        ch.exchange_declare("def-x", "direct", durable=True)
        ch.exchange_declare("def-ae", "fanout", durable=True)
        ch.queue_declare("def-q", durable=True, arguments={"x-max-priority": 4})
        ch.queue_declare("def-transient")  # not durable: not exported
        ch.queue_bind("def-q", "def-x", "k", arguments={"x-match": "all"})
        ch.exchange_bind("def-ae", "def-x", "k2")
        conn.close()
        ok(data, "set_policy", "ae", "^def-x$", '{"alternate-exchange": "def-ae"}')
        doc = json.loads(ok(data, "export_definitions", "-q", "-"))
    finally:
        broker.stop()
    assert [q["name"] for q in doc["queues"]] == ["def-q"]
    assert doc["queues"][0]["arguments"] == {"x-max-priority": 4}
    assert {e["name"] for e in doc["exchanges"]} == {"def-x", "def-ae"}
    assert {(b["source"], b["destination"], b["destination_type"]) for b in doc["bindings"]} == {
        ("def-x", "def-q", "queue"),
        ("def-x", "def-ae", "exchange"),
    }
    assert [p["name"] for p in doc["policies"]] == ["ae"]
    # A new broker loads the file at boot; another imports it with ctl.
    path = new_data_dir() / "defs.json"
    path.write_text(json.dumps(doc))
    fresh = start(new_data_dir(), "--load-definitions", str(path))
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters(fresh.host, fresh.port))
        ch = conn.channel()
        assert ch.queue_declare("def-q", passive=True).method.message_count == 0
        ch.exchange_declare("def-ae", passive=True)
        conn.close()
        assert "loaded definitions from" in fresh.log_text()
    finally:
        fresh.stop()
    other_dir = new_data_dir()
    other = start(other_dir)
    try:
        ok(other_dir, "import_definitions", str(path))
        exported = json.loads(ok(other_dir, "export_definitions", "-q", "-"))
        for key in ("queues", "exchanges", "bindings", "policies"):
            assert exported[key] == doc[key], key
    finally:
        other.stop()
    bad = new_data_dir() / "bad.json"
    bad.write_text("{not json")
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "leveret",
            "serve",
            "--port",
            "0",
            "--data-dir",
            str(new_data_dir()),
            "--load-definitions",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1
    assert "cannot load definitions from" in refused.stderr
    assert "Traceback" not in refused.stderr
