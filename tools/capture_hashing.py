"""Record where RabbitMQ's hashing exchanges send messages (tests/data/hashing/).

``python -m tools.capture_hashing`` starts a RabbitMQ 3.10.8 of its own (Debian's
rabbitmq-server: its own node name, ports and directory; plugins
rabbitmq_consistent_hash_exchange and rabbitmq_sharding), runs every scenario of
:data:`SCENARIOS` through pika, and writes ``rabbitmq-3.10.8.json``: for each scenario its
bindings, its messages and the queue each message reached, plus the reply texts of the
refused declarations and bindings. ``--broker HOST:PORT`` runs them against a broker that is
already there instead (guest/guest), ``--out FILE`` writes elsewhere.

``tests/unit/model/test_exchange_hashing.py`` routes the same messages through Leveret's
exchange types and compares, message by message; ``tests/integration/test_routing_clients.py``
runs a few scenarios through pika against a Leveret broker with :func:`run_scenario`, the
code that recorded them. Not part of the test run.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "data" / "hashing" / "rabbitmq-3.10.8.json"
PLUGINS = ("rabbitmq_consistent_hash_exchange", "rabbitmq_sharding")

Scenario = dict[str, Any]


def _keys(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ["order", "user", "device", "eu", "us", "x", "", "é", "key"]
    keys = []
    for i in range(count):
        shape = i % 4
        if shape == 0:
            keys.append(f"key-{i}")
        elif shape == 1:
            keys.append(f"{rng.choice(words)}.{rng.randrange(10**6)}")
        elif shape == 2:
            keys.append(str(rng.randrange(10**9)))
        else:
            keys.append(
                "".join(rng.choice("abcdefghij0123456789.-_") for _ in range(rng.randrange(1, 40)))
            )
    return keys


def _header_values(count: int, seed: int) -> list[Any]:
    """Header values of every type pika sends (JSON-shaped: ``{"decimal": "1.5"}``,
    ``{"timestamp": 123}``, ``{"bytes": "hex"}``), and now and then no header at all."""
    rng = random.Random(seed)
    values: list[Any] = []
    for i in range(count):
        shape = i % 11
        if shape == 0:
            values.append(f"h-{i}")
        elif shape == 1:
            values.append(rng.randrange(-(2**31), 2**31))  # pika: signedint
        elif shape == 2:
            values.append(rng.randrange(2**31, 2**40))  # pika: long
        elif shape == 3:
            values.append(None)  # no header
        elif shape == 4:
            values.append({"decimal": f"{rng.randrange(-(10**6), 10**6)}.{rng.randrange(1, 99)}"})
        elif shape == 5:
            values.append(rng.choice([True, False]))
        elif shape == 6:
            values.append({"absent": True})  # the message has headers, not this one
        elif shape == 7:
            values.append({"timestamp": rng.randrange(0, 2**32)})
        elif shape == 8:
            values.append({"bytes": rng.randbytes(rng.randrange(0, 20)).hex()})
        elif shape == 9:
            values.append({"table": {"a": rng.randrange(100), "b": f"t{i}"}})
        else:
            values.append({"array": [rng.randrange(100), f"a{i}", True]})
    return values


def header_value(value: Any) -> tuple[bool, Any]:
    """(present, the Python value a client sends) of a recorded header value."""
    if not isinstance(value, dict):
        return value is not None, value
    if "absent" in value:
        return False, None
    if "decimal" in value:
        return True, decimal.Decimal(value["decimal"])
    if "timestamp" in value:
        return True, datetime.datetime.fromtimestamp(value["timestamp"], datetime.UTC)
    if "bytes" in value:
        return True, bytes.fromhex(value["bytes"])
    if "table" in value:
        return True, value["table"]
    return True, value["array"]


def _scenarios() -> list[Scenario]:
    keys = _keys(1000, 29)
    weights = [("q1", "1"), ("q2", "2"), ("q3", "3"), ("q4", "4")]
    chx = {"type": "x-consistent-hash", "arguments": {}}
    out: list[Scenario] = [
        {
            "name": "weights 1 2 3 4, routing keys",
            "exchange": chx,
            "bindings": weights,
            "messages": [{"key": k} for k in keys],
        },
        {
            "name": "weights 1 2 3 4, q2 unbound",
            "exchange": chx,
            "bindings": weights,
            "unbind": [("q2", "2")],
            "messages": [{"key": k} for k in keys],
        },
        {
            "name": "ten queues of weight 10, q3 bound again with 50 then that binding removed",
            "exchange": chx,
            "bindings": [*[(f"q{i}", "10") for i in range(10)], ("q3", "50")],
            "unbind": [("q3", "50")],
            "messages": [{"key": k} for k in keys],
        },
        {
            "name": "one queue bound twice keeps its first weight",
            "exchange": chx,
            "bindings": [("a", "1"), ("b", "1"), ("a", "20")],
            "messages": [{"key": k} for k in keys[:400]],
        },
        {
            "name": "weights 5 1 17, keys 2",
            "exchange": chx,
            "bindings": [("z", "5"), ("a", "1"), ("m", "17")],
            "messages": [{"key": k} for k in _keys(1000, 7)],
        },
        {
            "name": "hash-header",
            "exchange": {"type": "x-consistent-hash", "arguments": {"hash-header": "hk"}},
            "bindings": [("q1", "3"), ("q2", "3"), ("q3", "3"), ("q4", "3")],
            "messages": [{"key": "same", "header": v} for v in _header_values(800, 11)],
        },
    ]
    for prop in ("message_id", "correlation_id", "timestamp"):
        rng = random.Random(prop)
        messages: list[dict[str, Any]] = []
        for i in range(400):
            value: Any
            if prop == "timestamp":
                value = rng.randrange(0, 2**33) if i % 5 else None
            else:
                value = f"{prop}-{rng.randrange(10**9)}" if i % 5 else None
            messages.append({"key": "same", "properties": {prop: value}})
        out.append(
            {
                "name": f"hash-property {prop}",
                "exchange": {"type": "x-consistent-hash", "arguments": {"hash-property": prop}},
                "bindings": [("q1", "2"), ("q2", "5"), ("q3", "1")],
                "messages": messages,
            }
        )
    out.append(
        {
            "name": "modulus hash, bindings in route-table order",
            "exchange": {"type": "x-modulus-hash", "arguments": {}},
            "bindings": [("qc", "k"), ("qa", "k"), ("qb", "a"), ("qa", "z"), ("qd", "")],
            "messages": [{"key": k} for k in keys],
        }
    )
    out.append(
        {
            "name": "modulus hash, one binding removed",
            "exchange": {"type": "x-modulus-hash", "arguments": {}},
            "bindings": [("qc", "k"), ("qa", "k"), ("qb", "a"), ("qa", "z"), ("qd", "")],
            "unbind": [("qa", "k")],
            "messages": [{"key": k} for k in keys[:500]],
        }
    )
    return out


SCENARIOS = _scenarios()

# Declarations and bindings RabbitMQ refuses: (what, exchange arguments, binding key).
REFUSALS: list[tuple[str, dict[str, Any], str | None]] = [
    ("both arguments", {"hash-header": "a", "hash-property": "message_id"}, None),
    ("unknown property", {"hash-property": "app_id"}, None),
    ("key not an integer", {}, "abc"),
    ("empty key", {}, ""),
    ("key with spaces", {}, " 5"),
    ("key zero", {}, "0"),
    ("key negative", {}, "-3"),
    ("key with a quote", {}, 'a"b'),
]


def _publish_properties(pika: Any, message: dict[str, Any]) -> Any:
    headers: dict[str, Any] | None = None
    if "header" in message:
        present, value = header_value(message["header"])
        if present:
            headers = {"hk": value}
        elif message["header"] is not None:
            headers = {"other": 1}
    props = message.get("properties", {})
    return pika.BasicProperties(
        headers=headers,
        message_id=props.get("message_id"),
        correlation_id=props.get("correlation_id"),
        timestamp=props.get("timestamp"),
    )


def run_scenario(host: str, port: int, scenario: Scenario, prefix: str) -> list[str | None]:
    """Run ``scenario`` through pika on the broker at host:port; the queue (its name in
    the scenario) each message reached, or None."""
    import pika

    params = pika.ConnectionParameters(host=host, port=port, heartbeat=0)
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        exchange = f"{prefix}x"
        spec = scenario["exchange"]
        ch.exchange_declare(exchange, spec["type"], arguments=spec["arguments"] or None)
        names = sorted({q for q, _ in scenario["bindings"]})
        for name in names:
            ch.queue_declare(f"{prefix}{name}", exclusive=True)
        for name, key in scenario["bindings"]:
            ch.queue_bind(f"{prefix}{name}", exchange, key)
        for name, key in scenario.get("unbind", []):
            ch.queue_unbind(f"{prefix}{name}", exchange, key)
        for i, message in enumerate(scenario["messages"]):
            ch.basic_publish(
                exchange, message["key"], str(i).encode(), _publish_properties(pika, message)
            )
        routed: list[str | None] = [None] * len(scenario["messages"])
        for name in names:
            while True:
                _method, _props, body = ch.basic_get(f"{prefix}{name}", auto_ack=True)
                if body is None:
                    break
                routed[int(body)] = name
        ch.exchange_delete(exchange)
        return routed
    finally:
        conn.close()


def refusal_texts(host: str, port: int, prefix: str) -> dict[str, str]:
    """The reply text of each of :data:`REFUSALS`."""
    import pika

    params = pika.ConnectionParameters(host=host, port=port, heartbeat=0)
    texts: dict[str, str] = {}
    for what, arguments, key in REFUSALS:
        conn = pika.BlockingConnection(params)
        try:
            ch = conn.channel()
            exchange = f"{prefix}refused"
            try:
                ch.exchange_declare(exchange, "x-consistent-hash", arguments=arguments or None)
                queue = ch.queue_declare("", exclusive=True).method.queue
                assert key is not None
                ch.queue_bind(queue, exchange, key)
            except pika.exceptions.ChannelClosedByBroker as exc:
                texts[what] = f"{exc.reply_code} {exc.reply_text}"
            else:
                texts[what] = "accepted"
                ch.exchange_delete(exchange)
            if ch.is_open:
                ch.exchange_delete(exchange)
        finally:
            if conn.is_open:
                conn.close()
    return texts


def dump(data: dict[str, Any]) -> str:
    """The recording as JSON: compact, one scenario a line (diffs stay readable)."""
    scenarios = data["scenarios"]
    head = {k: v for k, v in data.items() if k != "scenarios"}
    lines = [json.dumps(s, ensure_ascii=False, separators=(",", ":")) for s in scenarios]
    body = json.dumps(head, ensure_ascii=False, indent=1)[:-2]
    return body + ',\n "scenarios": [\n' + ",\n".join(lines) + "\n ]\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", help="HOST:PORT of a running broker (default: start one)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    broker = None
    if args.broker:
        host, _, port_text = args.broker.rpartition(":")
        port = int(port_text)
        version = args.broker
    else:
        from bench.run import start_rabbitmq

        workdir = Path(tempfile.mkdtemp(prefix="leveret-hashing-"))
        broker = start_rabbitmq(workdir, plugins=PLUGINS)
        host, port = "127.0.0.1", broker.port
        version = broker.notes[0] if broker.notes else "rabbitmq"
    try:
        prefix = f"hashing-{int(time.time())}-"
        results = []
        for scenario in SCENARIOS:
            routed = run_scenario(host, port, scenario, prefix)
            results.append({**scenario, "routed": routed})
            print(f"{scenario['name']}: {len(routed)} messages", file=sys.stderr)
        data = {
            "broker": version,
            "plugins": list(PLUGINS),
            "scenarios": results,
            "refusals": refusal_texts(host, port, prefix),
        }
    finally:
        if broker is not None:
            broker.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dump(data))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
