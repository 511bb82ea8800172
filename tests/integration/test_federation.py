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
    from pathlib import Path

    from tests.integration.mgmt_support import MgmtBroker

# Left out of the compiled pass (scripts/test): leveret.links is not compiled.
pytestmark = [pytest.mark.leveret_only, pytest.mark.pure_only]


def uri(m: MgmtBroker) -> str:
    return f"amqp://guest:guest@127.0.0.1:{m.broker.port}"


def upstream(m: MgmtBroker, name: str, to: MgmtBroker, **keys: Any) -> None:
    put(m.api, f"parameters/federation-upstream/%2F/{q(name)}", {"value": {"uri": uri(to), **keys}})


def policy(m: MgmtBroker, name: str, pattern: str, upstream: str) -> None:
    body = {"pattern": pattern, "definition": {"federation-upstream": upstream}}
    put(m.api, f"policies/%2F/{q(name)}", body)


def links(m: MgmtBroker, upstream: str) -> list[dict[str, Any]]:
    return [r for r in get(m, "federation-links") if r["upstream"] == upstream]


def wait_links(m: MgmtBroker, upstream: str, n: int = 1) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = wait_for(
        f"{n} running links to {upstream}",
        lambda: (
            len(r := links(m, upstream)) == n and all(x["status"] == "running" for x in r) and r
        ),
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


# The data directory of each broker of ``three`` (for leveret ctl).
DATA: dict[str, Path] = {}


@pytest.fixture(scope="module")
def three() -> Iterator[list[MgmtBroker]]:
    """Brokers a, b and c for the whole module: each test federates names of its own
    (exchanges, queues, upstreams and policies), so they do not meet."""
    brokers: list[MgmtBroker] = []
    try:
        for name in ("a", "b", "c"):
            DATA[name] = new_data_dir()
            m = start_mgmt_broker("--data-dir", str(DATA[name]))
            brokers.append(m)
            put(m.api, "cluster-name", {"name": name})
        yield brokers
    finally:
        for m in brokers:
            m.broker.stop()


def test_bindings_and_messages_travel_as_far_as_max_hops(three: list[MgmtBroker]) -> None:
    """A <- B <- C: B federates A's exchange, C federates B's. A binding made on C reaches A
    only if max-hops lets a message come that far, and so does a message published on A."""
    a, b, c = three
    for down, up in ((b, a), (c, b)):
        upstream(down, "chain-up", up, **{"max-hops": 1})
        policy(down, "chain", "^chain$", "chain-up")
    declare(a, "chain")
    declare(b, "chain", "at-b", key="kb")
    declare(c, "chain", "at-c", key="kc")
    wait_links(b, "chain-up")
    wait_links(c, "chain-up")
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
        upstream(down, "chain-up", up, **{"max-hops": 2})  # the links restart with it
    wait_for(
        "kc bound on A",
        lambda: any(x["routing_key"] == "kc" for x in upstream_bindings(a, "chain")),
    )
    publish(a, "chain", "kc", 3, "two-hops")
    got = drain(c.broker.url, "at-c", 3)
    assert [body for body, _ in got] == [b"two-hops0", b"two-hops1", b"two-hops2"]
    hops = got[0][1].headers["x-received-from"]
    assert [h["cluster-name"] for h in hops] == ["b", "a"]  # the newest hop first


def test_a_ring_does_not_loop(three: list[MgmtBroker]) -> None:
    """A and B federate each other's exchange, with hops to spare: every message reaches
    each broker once, and loops are cut by x-received-from."""
    a, b, _c = three
    upstream(a, "ring-other", b, **{"max-hops": 5})
    upstream(b, "ring-other", a, **{"max-hops": 5})
    for m in (a, b):
        policy(m, "ring", "^ring$", "ring-other")
        declare(m, "ring", "ring-q")
    wait_links(a, "ring-other")
    wait_links(b, "ring-other")
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


def test_a_federated_queue_pulls_only_for_consumers_with_room(three: list[MgmtBroker]) -> None:
    up, _b, down = three  # a upstream of c
    upstream(down, "fq-up", up, **{"prefetch-count": 10})
    policy(down, "fq", "^fq$", "fq-up")
    with connect(up.broker.url) as conn:
        ch = conn.channel()
        ch.queue_declare("fq", durable=True)
        for i in range(50):
            ch.basic_publish("", "fq", f"q{i}".encode())
    with connect(down.broker.url) as conn:
        conn.channel().queue_declare("fq", durable=True)
    [row] = wait_links(down, "fq-up")
    assert (row["type"], row["queue"], row["upstream_queue"]) == ("queue", "fq", "fq")
    assert row["consumer_tag"] == "federation-link-fq-up"
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
    metrics = requests.get(f"{down.prometheus}/metrics", timeout=10).text
    assert (
        'leveret_federation_messages_forwarded_total{name="fq",type="queue",'
        'upstream="fq-up",vhost="/"} 50.0'
    ) in metrics

    data = DATA["c"]
    assert '"status": "running"' in ok(data, "federation_status", "-q", "--formatter", "json")
    ok(data, "restart_federation_link", row["id"])
    wait_links(down, "fq-up")
    assert "running" not in ok(data, "federation_status", "-q", "--only-down")


def test_a_link_cleans_up_when_its_policy_goes(three: list[MgmtBroker]) -> None:
    _a, up, down = three  # b upstream of c
    upstream(down, "gone-up", up)
    policy(down, "gone", "^gone$", "gone-up")
    declare(down, "gone", "gone-q")
    wait_links(down, "gone-up")
    queue = "federation: gone -> c"
    wait_for("the upstream queue", lambda: queue in {x["name"] for x in get(up, "queues/%2F")})
    r = requests.delete(down.api("policies/%2F/gone"), auth=AUTH, timeout=10)
    assert r.status_code == 204
    wait_for("no link", lambda: links(down, "gone-up") == [])
    wait_for(
        "nothing left upstream",
        lambda: (
            not any(x["name"].startswith("federation: gone") for x in get(up, "queues/%2F"))
            and not any(x["name"].startswith("federation: gone") for x in get(up, "exchanges/%2F"))
        ),
    )
