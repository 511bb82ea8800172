"""Federation between Leveret brokers (RabbitMQ on either side: ``test_links_rabbitmq.py``):
bindings carried upstream and how far (``max-hops``, ``x-bound-from``), loops cut by
``x-received-from``, a federated queue pulling only for consumers with room, what a link
leaves upstream when its policy goes, and ``leveret ctl federation_status`` /
``restart_federation_link``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest
import requests

from tests.integration.ctl_support import new_data_dir, ok
from tests.integration.links_support import connect, drain, get, put, q, wait_for
from tests.integration.mgmt_support import AUTH, start_mgmt_broker

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.integration.mgmt_support import MgmtBroker

# Left out of the compiled pass (scripts/test): leveret.links is not compiled.
pytestmark = [pytest.mark.leveret_only, pytest.mark.pure_only]


def uri(m: MgmtBroker) -> str:
    return f"amqp://guest:guest@127.0.0.1:{m.broker.port}"


def upstream(m: MgmtBroker, name: str, to: MgmtBroker, **keys: Any) -> None:
    put(m.api, f"parameters/federation-upstream/%2F/{q(name)}", {"value": {"uri": uri(to), **keys}})


def policy(m: MgmtBroker, pattern: str, **definition: Any) -> None:
    body = {"pattern": pattern, "definition": definition or {"federation-upstream-set": "all"}}
    put(m.api, "policies/%2F/federate", body)


def links(m: MgmtBroker) -> list[dict[str, Any]]:
    return list(get(m, "federation-links"))


def wait_links(m: MgmtBroker, n: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = wait_for(
        f"{n} running links",
        lambda: len(r := links(m)) == n and all(x["status"] == "running" for x in r) and r,
    )
    return rows


def declare(m: MgmtBroker, exchange: str, queue: str | None = None, key: str = "k") -> None:
    with connect(m.broker.url) as conn:
        ch = conn.channel()
        ch.exchange_declare(exchange, "direct", durable=True)
        if queue is not None:
            ch.queue_declare(queue, durable=True)
            ch.queue_bind(queue, exchange, key)


def publish(m: MgmtBroker, exchange: str, key: str, n: int, prefix: str) -> None:
    with connect(m.broker.url) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish(exchange, key, f"{prefix}{i}".encode())


def upstream_bindings(m: MgmtBroker, exchange: str) -> list[dict[str, Any]]:
    return [b for b in get(m, "bindings/%2F") if b["source"] == exchange]


def named(*names: str) -> Iterator[list[MgmtBroker]]:
    brokers: list[MgmtBroker] = []
    try:
        for name in names:
            m = start_mgmt_broker()
            brokers.append(m)
            put(m.api, "cluster-name", {"name": name})
        yield brokers
    finally:
        for m in brokers:
            m.broker.stop()


@pytest.fixture
def three() -> Iterator[list[MgmtBroker]]:
    yield from named("a", "b", "c")


@pytest.fixture
def two() -> Iterator[list[MgmtBroker]]:
    yield from named("a", "b")


def test_bindings_and_messages_travel_as_far_as_max_hops(three: list[MgmtBroker]) -> None:
    """A <- B <- C: B federates A's exchange, C federates B's. A binding made on C reaches A
    only if max-hops lets a message come that far, and so does a message published on A."""
    a, b, c = three
    for down, up in ((b, a), (c, b)):
        upstream(down, "up", up, **{"max-hops": 1})
        policy(down, "^chain$")
    declare(a, "chain")
    declare(b, "chain", "at-b", key="kb")
    declare(c, "chain", "at-c", key="kc")
    wait_links(b, 1)
    wait_links(c, 1)
    # C's binding reached B with one hop left and stopped there; B's own reached A.
    wait_for(
        "kc bound on B",
        lambda: any(x["routing_key"] == "kc" for x in upstream_bindings(b, "chain")),
    )
    wait_for(
        "kb bound on A",
        lambda: any(x["routing_key"] == "kb" for x in upstream_bindings(a, "chain")),
    )
    [bound] = [x for x in upstream_bindings(b, "chain") if x["routing_key"] == "kc"]
    [hop] = bound["arguments"]["x-bound-from"]
    assert (hop["cluster-name"], hop["vhost"], hop["hops"]) == ("c", "/", 1)
    time.sleep(1.5)  # a reconciliation or more: still not on A
    assert not any(x["routing_key"] == "kc" for x in upstream_bindings(a, "chain"))
    publish(a, "chain", "kb", 3, "one-hop")
    assert [body for body, _ in drain(b.broker.url, "at-b", 3)] == [
        b"one-hop0",
        b"one-hop1",
        b"one-hop2",
    ]

    for down, up in ((b, a), (c, b)):
        upstream(down, "up", up, **{"max-hops": 2})  # the links restart with it
    wait_for(
        "kc bound on A",
        lambda: any(x["routing_key"] == "kc" for x in upstream_bindings(a, "chain")),
    )
    publish(a, "chain", "kc", 3, "two-hops")
    got = drain(c.broker.url, "at-c", 3)
    assert [body for body, _ in got] == [b"two-hops0", b"two-hops1", b"two-hops2"]
    hops = got[0][1].headers["x-received-from"]
    assert [h["cluster-name"] for h in hops] == ["b", "a"]  # the newest hop first


def test_a_ring_does_not_loop(two: list[MgmtBroker]) -> None:
    """A and B federate each other's exchange, with hops to spare: every message reaches
    each broker once, and loops are cut by x-received-from."""
    a, b = two
    upstream(a, "other", b, **{"max-hops": 5})
    upstream(b, "other", a, **{"max-hops": 5})
    for m in (a, b):
        policy(m, "^ring$")
        declare(m, "ring", "ring-q")
    wait_links(a, 1)
    wait_links(b, 1)
    wait_for(
        "bindings both ways", lambda: upstream_bindings(a, "ring") and upstream_bindings(b, "ring")
    )
    time.sleep(1.5)
    publish(a, "ring", "k", 5, "from-a")
    publish(b, "ring", "k", 5, "from-b")
    expected = sorted(
        [f"from-a{i}".encode() for i in range(5)] + [f"from-b{i}".encode() for i in range(5)]
    )
    for m in (a, b):
        got = drain(m.broker.url, "ring-q", 10, timeout=30)
        assert sorted(body for body, _ in got) == expected, m.url


def test_a_federated_queue_pulls_only_for_consumers_with_room() -> None:
    up, down = start_mgmt_broker(), start_mgmt_broker("--data-dir", str(data := new_data_dir()))
    try:
        upstream(down, "up", up, **{"prefetch-count": 10})
        policy(down, "^fq$")
        with connect(up.broker.url) as conn:
            ch = conn.channel()
            ch.queue_declare("fq", durable=True)
            for i in range(50):
                ch.basic_publish("", "fq", f"q{i}".encode())
        with connect(down.broker.url) as conn:
            conn.channel().queue_declare("fq", durable=True)
        [row] = wait_links(down, 1)
        assert (row["type"], row["queue"], row["upstream_queue"]) == ("queue", "fq", "fq")
        assert row["consumer_tag"] == "federation-link-up"
        time.sleep(1)
        with connect(up.broker.url) as conn:  # nobody consumes downstream: nothing moved
            assert conn.channel().queue_declare("fq", passive=True).method.message_count == 50
        seen: list[bytes] = []
        with connect(down.broker.url) as conn:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=3)

            def on(c: Any, m: Any, _p: Any, body: bytes) -> None:
                seen.append(body)
                c.basic_ack(m.delivery_tag)

            ch.basic_consume("fq", on)
            deadline = time.monotonic() + 30
            while len(seen) < 50 and time.monotonic() < deadline:
                conn.process_data_events(0.1)
        assert seen == [f"q{i}".encode() for i in range(50)]

        status = ok(data, "federation_status", "-q", "--formatter", "json")
        assert '"status": "running"' in status
        link_id = row["id"]
        ok(data, "restart_federation_link", link_id)
        wait_links(down, 1)
        assert "running" not in ok(data, "federation_status", "-q", "--only-down")
    finally:
        up.broker.stop()
        down.broker.stop()


def test_a_link_cleans_up_when_its_policy_goes() -> None:
    up, down = start_mgmt_broker(), start_mgmt_broker()
    try:
        put(down.api, "cluster-name", {"name": "down"})
        upstream(down, "up", up)
        policy(down, "^gone$")
        declare(down, "gone", "gone-q")
        wait_links(down, 1)
        queue = "federation: gone -> down"
        wait_for("the upstream queue", lambda: queue in {x["name"] for x in get(up, "queues/%2F")})
        r = requests.delete(down.api("policies/%2F/federate"), auth=AUTH, timeout=10)
        assert r.status_code == 204
        wait_for("no link", lambda: links(down) == [])
        wait_for(
            "nothing left upstream",
            lambda: (
                not any(x["name"].startswith("federation: gone") for x in get(up, "queues/%2F"))
                and not any(
                    x["name"].startswith("federation: gone") for x in get(up, "exchanges/%2F")
                )
            ),
        )
    finally:
        up.broker.stop()
        down.broker.stop()
