"""Definitions round-tripped through a live RabbitMQ 3.10.8: Leveret's export imports into
RabbitMQ, and RabbitMQ's export of the same objects imports back into a fresh Leveret with
nothing lost (users log in with their hashes, queues keep their arguments, bindings,
policies, parameters, limits). Skipped when no RabbitMQ management API is reachable at
``LEVERET_TEST_RABBITMQ_HTTP`` (default http://127.0.0.1:15672). Everything it makes on
RabbitMQ lives in a vhost and users of its own, removed at the end."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pika
import pytest
import requests

from tests.integration.mgmt_support import AUTH, MgmtBroker, start_mgmt_broker

if TYPE_CHECKING:
    from collections.abc import Iterator

# Left out of the compiled pass (scripts/test): definitions through the management API.
pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.pure_only]

RABBITMQ = os.environ.get("LEVERET_TEST_RABBITMQ_HTTP", "http://127.0.0.1:15672")
VHOST = "lv-mgmt-roundtrip"
USER = "lv-mgmt-roundtrip-user"


@pytest.fixture
def rabbitmq() -> Iterator[str]:
    try:
        r = requests.get(f"{RABBITMQ}/api/overview", auth=AUTH, timeout=5)
    except requests.RequestException:
        pytest.skip(f"no RabbitMQ management API at {RABBITMQ}")
    if r.status_code != 200 or r.json().get("product_name") != "RabbitMQ":
        pytest.skip(f"no RabbitMQ management API at {RABBITMQ}")
    try:
        yield RABBITMQ
    finally:
        requests.delete(f"{RABBITMQ}/api/vhosts/{VHOST}", auth=AUTH, timeout=30)
        requests.delete(f"{RABBITMQ}/api/users/{USER}", auth=AUTH, timeout=30)


@pytest.fixture
def leveret() -> Iterator[MgmtBroker]:
    m = start_mgmt_broker()
    try:
        yield m
    finally:
        m.broker.stop()


def _ours(doc: dict[str, Any]) -> dict[str, Any]:
    """The part of a definitions document about this test's vhost and user."""
    return {
        "users": sorted(
            ({k: u[k] for k in ("name", "password_hash", "hashing_algorithm", "tags")})
            for u in doc["users"]
            if u["name"] == USER
        ),
        "permissions": [p for p in doc["permissions"] if p["vhost"] == VHOST],
        "topic_permissions": [p for p in doc.get("topic_permissions", []) if p["vhost"] == VHOST],
        "queues": sorted(
            (q for q in doc["queues"] if q["vhost"] == VHOST), key=lambda q: q["name"]
        ),
        "exchanges": sorted(
            (x for x in doc["exchanges"] if x["vhost"] == VHOST), key=lambda x: x["name"]
        ),
        "bindings": sorted(
            (b for b in doc["bindings"] if b["vhost"] == VHOST),
            key=lambda b: (b["source"], b["destination"], b["routing_key"]),
        ),
        "policies": [p for p in doc["policies"] if p["vhost"] == VHOST],
        "limits": [
            p for p in doc["parameters"] if p["vhost"] == VHOST and p["component"] == "vhost-limits"
        ],
    }


def _make_objects(m: MgmtBroker) -> None:
    def put(path: str, body: dict[str, Any]) -> None:
        r = requests.put(m.api(path), auth=AUTH, json=body, timeout=10)
        assert r.status_code in (201, 204), (path, r.text)

    put(f"vhosts/{VHOST}", {"description": "round trip"})
    put(f"users/{USER}", {"password": "rt-secret", "tags": "management"})
    put(f"permissions/{VHOST}/{USER}", {"configure": "^rt-", "write": ".*", "read": ".*"})
    put(f"topic-permissions/{VHOST}/{USER}", {"exchange": "amq.topic", "write": "^a", "read": ".*"})
    put(f"exchanges/{VHOST}/rt-x", {"type": "topic", "durable": True})
    put(f"exchanges/{VHOST}/rt-ae", {"type": "fanout", "durable": True, "internal": True})
    put(
        f"queues/{VHOST}/rt-q",
        {"durable": True, "arguments": {"x-max-priority": 3, "x-message-ttl": 60000}},
    )
    put(f"queues/{VHOST}/rt-quorum", {"durable": True, "arguments": {"x-queue-type": "quorum"}})
    r = requests.post(
        m.api(f"bindings/{VHOST}/e/rt-x/q/rt-q"),
        auth=AUTH,
        json={"routing_key": "a.#", "arguments": {}},
        timeout=10,
    )
    assert r.status_code == 201
    r = requests.post(
        m.api(f"bindings/{VHOST}/e/rt-x/e/rt-ae"), auth=AUTH, json={"routing_key": "b"}, timeout=10
    )
    assert r.status_code == 201
    put(
        f"policies/{VHOST}/rt-policy",
        {
            "pattern": "^rt-q$",
            "definition": {"max-length": 10},
            "apply-to": "queues",
            "priority": 2,
        },
    )
    put(f"vhost-limits/{VHOST}/max-queues", {"value": 50})


def test_leveret_export_imports_into_rabbitmq_and_back(rabbitmq: str, leveret: MgmtBroker) -> None:
    _make_objects(leveret)
    exported = requests.get(leveret.api("definitions"), auth=AUTH, timeout=10).json()
    mine = _ours(exported)
    assert len(mine["queues"]) == 2
    assert len(mine["bindings"]) == 2
    # Into RabbitMQ: only our vhost's and user's entries (the rest of the machine's RabbitMQ
    # is not ours to touch).
    doc = {
        "rabbit_version": exported["rabbit_version"],
        "users": [u for u in exported["users"] if u["name"] == USER],
        "vhosts": [v for v in exported["vhosts"] if v["name"] == VHOST],
        "permissions": mine["permissions"],
        "topic_permissions": mine["topic_permissions"],
        "parameters": mine["limits"],
        "policies": mine["policies"],
        "queues": mine["queues"],
        "exchanges": mine["exchanges"],
        "bindings": mine["bindings"],
    }
    r = requests.post(f"{rabbitmq}/api/definitions", auth=AUTH, json=doc, timeout=60)
    assert r.status_code in (201, 204), r.text
    theirs = _ours(requests.get(f"{rabbitmq}/api/definitions", auth=AUTH, timeout=30).json())
    assert theirs == mine
    # The user logs in to RabbitMQ with the password hash Leveret made.
    r = requests.get(f"{rabbitmq}/api/whoami", auth=(USER, "rt-secret"), timeout=10)
    assert r.json()["name"] == USER
    # RabbitMQ's export back into a fresh Leveret.
    fresh = start_mgmt_broker()
    try:
        back = requests.get(f"{rabbitmq}/api/definitions", auth=AUTH, timeout=30).json()
        doc_back = {
            **{k: v for k, v in back.items() if not isinstance(v, list)},
            "users": [u for u in back["users"] if u["name"] == USER],
            "vhosts": [v for v in back["vhosts"] if v["name"] == VHOST],
            **{k: v for k, v in _ours(back).items() if k not in ("users", "limits")},
            "parameters": _ours(back)["limits"],
        }
        r = requests.post(fresh.api("definitions"), auth=AUTH, json=doc_back, timeout=30)
        assert r.status_code == 204, r.text
        again = _ours(requests.get(fresh.api("definitions"), auth=AUTH, timeout=10).json())
        assert again == mine
        queue = requests.get(fresh.api(f"queues/{VHOST}/rt-q"), auth=AUTH, timeout=10).json()
        assert queue["policy"] == "rt-policy"
        conn = pika.BlockingConnection(
            pika.ConnectionParameters(
                "127.0.0.1",
                fresh.broker.port,
                virtual_host=VHOST,
                credentials=pika.PlainCredentials(USER, "rt-secret"),
            )
        )
        conn.close()
    finally:
        fresh.broker.stop()
