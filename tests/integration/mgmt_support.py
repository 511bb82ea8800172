"""Helpers for the management API tests: a broker with its HTTP API on a free port, and
the side-by-side shape scenario (the same objects made on a broker, then every endpoint's
field names and JSON types taken).

``python -m tests.integration.mgmt_support`` records RabbitMQ's shapes (its management
plugin on 127.0.0.1:15672, AMQP on 5672) into ``tests/data/management/``.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pika
import requests

from tests.integration.conftest import Broker, start_broker

SHAPES_FILE = Path(__file__).parents[1] / "data" / "management" / "rabbitmq-3.10.8-shapes.json"
AUTH = ("guest", "guest")
_URL = re.compile(r"management API and web UI listening on (https?://\S+)")
_PROM = re.compile(r"Prometheus metrics listening on (http://\S+)")


@dataclass
class MgmtBroker:
    broker: Broker
    url: str
    prometheus: str

    def api(self, path: str) -> str:
        return f"{self.url}/api/{path}"


def _wait_for(broker: Broker, pattern: re.Pattern[str], timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in list(broker.log):
            match = pattern.search(line)
            if match:
                return match.group(1)
        time.sleep(0.05)
    raise RuntimeError("no management listener:\n" + broker.log_text())


def start_mgmt_broker(*args: str, interval_ms: int = 200) -> MgmtBroker:
    broker = start_broker(
        "--management-port",
        "0",
        "--prometheus-port",
        "0",
        *args,
        env={"LEVERET_COLLECT_STATISTICS_INTERVAL": str(interval_ms)},
    )
    try:
        return MgmtBroker(broker, _wait_for(broker, _URL), _wait_for(broker, _PROM))
    except Exception:
        broker.stop()
        raise


# Maps whose keys are data, not field names (arguments, client properties, node names).
FREE_FORM = frozenset(
    (
        "arguments",
        "client_properties",
        "cluster_state",
        "definition",
        "effective_policy_definition",
        "value",
        "limits",
        "properties",
    )
)


def _merge(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {
            k: _merge(a[k], b[k]) if k in a and k in b else a.get(k, b.get(k)) for k in {**a, **b}
        }
    return b if a == "null" else a


def shape(value: Any, key: str = "") -> Any:
    """Field names and JSON types of a value: lists by the union of their items' shapes,
    free-form maps as "map"."""
    if isinstance(value, dict):
        if key in FREE_FORM:
            return "map"
        return {k: shape(v, k) for k, v in sorted(value.items())}
    if isinstance(value, list):
        if key in FREE_FORM:
            return "map"
        merged: Any = None
        for item in value:
            item_shape = shape(item)
            merged = item_shape if merged is None else _merge(merged, item_shape)
        return [] if merged is None else [merged]
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if value is None:
        return "null"
    return "string"


PREFIX = "shape-"


def scenario(url: str, amqp_port: int) -> dict[str, Any]:
    """Make a queue with messages, a consumer, an exchange with a binding and a policy,
    then take the shape of each endpoint's answer (the first item of lists)."""
    params = pika.ConnectionParameters(
        "127.0.0.1", amqp_port, credentials=pika.PlainCredentials(*AUTH)
    )
    conn = pika.BlockingConnection(params)
    shapes: dict[str, Any] = {}
    try:
        ch = conn.channel()
        q, x = PREFIX + "q", PREFIX + "x"
        ch.queue_declare(q, arguments={"x-message-ttl": 60000})
        ch.exchange_declare(x, "topic")
        ch.queue_bind(q, x, "a.#")
        ch.confirm_delivery()
        for _ in range(5):
            ch.basic_publish(x, "a.b", b"hello")
        ch.basic_qos(prefetch_count=2)
        ch.basic_consume(q, lambda *_a: None)
        conn.process_data_events(0.5)
        requests.put(
            f"{url}/api/policies/%2F/{PREFIX}p",
            auth=AUTH,
            json={"pattern": "^shape-", "definition": {"max-length": 100}, "apply-to": "queues"},
            timeout=10,
        ).raise_for_status()
        time.sleep(6)  # two samples at RabbitMQ's default interval
        paths = {
            "overview": "overview",
            "nodes": "nodes",
            "connections": "connections",
            "channels": "channels",
            "consumers": "consumers",
            "exchanges": "exchanges",
            "exchange": f"exchanges/%2F/{x}",
            "queues": f"queues?name={PREFIX}",
            "queue": f"queues/%2F/{q}",
            "queue_rates": f"queues/%2F/{q}?msg_rates_age=60&msg_rates_incr=5",
            "queue_bindings": f"queues/%2F/{q}/bindings",
            "bindings": "bindings/%2F",
            "vhosts": "vhosts",
            "vhost": "vhosts/%2F",
            "users": "users",
            "user": "users/guest",
            "whoami": "whoami",
            "permissions": "permissions",
            "policies": "policies",
            "policy": f"policies/%2F/{PREFIX}p",
            "definitions": "definitions",
            "aliveness": "aliveness-test/%2F",
            "alarms": "health/checks/alarms",
            "paged": f"queues?page=1&page_size=1&name={PREFIX}",
        }
        for key, path in paths.items():
            r = requests.get(f"{url}/api/{path}", auth=AUTH, timeout=10)
            shapes[key] = {"status": r.status_code, "shape": shape(r.json())}
        got = requests.post(
            f"{url}/api/queues/%2F/{quote(q)}/get",
            auth=AUTH,
            json={"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
            timeout=10,
        )
        shapes["get"] = {"status": got.status_code, "shape": shape(got.json())}
        published = requests.post(
            f"{url}/api/exchanges/%2F/{x}/publish",
            auth=AUTH,
            json={
                "properties": {},
                "routing_key": "a.c",
                "payload": "x",
                "payload_encoding": "string",
            },
            timeout=10,
        )
        shapes["publish"] = {"status": published.status_code, "shape": shape(published.json())}
        for key, method, path, body, auth in (
            ("error_404", "GET", "queues/%2F/nothere", None, AUTH),
            ("error_400", "PUT", f"queues/%2F/{q}", {"durable": True}, AUTH),
            ("error_401", "GET", "queues", None, ("nobody", "x")),
        ):
            r = requests.request(method, f"{url}/api/{path}", auth=auth, json=body, timeout=10)
            shapes[key] = {"status": r.status_code, "shape": shape(r.json())}
    finally:
        conn.close()
        requests.delete(f"{url}/api/policies/%2F/{PREFIX}p", auth=AUTH, timeout=10)
        requests.delete(f"{url}/api/queues/%2F/{PREFIX}q", auth=AUTH, timeout=10)
        requests.delete(f"{url}/api/exchanges/%2F/{PREFIX}x", auth=AUTH, timeout=10)
    return shapes


def main() -> int:
    shapes = scenario("http://127.0.0.1:15672", 5672)
    SHAPES_FILE.parent.mkdir(parents=True, exist_ok=True)
    SHAPES_FILE.write_text(json.dumps(shapes, indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(shapes)} endpoints into {SHAPES_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
