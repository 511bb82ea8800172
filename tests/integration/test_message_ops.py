"""Delayed messages listed, cancelled and rescheduled, and queues browsed, searched, moved,
copied and replayed, through the management API and ``leveret ctl`` of a real broker, with
pika as the client; and a move cut by ``kill -9``."""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pika
import pytest
import requests

from tests.integration.ctl_support import new_data_dir, ok
from tests.integration.mgmt_support import AUTH, MgmtBroker, start_mgmt_broker
from tests.integration.pika_support import Opened, connect, pump

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# Left out of the compiled pass (scripts/test): the management API's and ctl's tools.
pytestmark = [pytest.mark.leveret_only, pytest.mark.pure_only]

V = quote("/", safe="")
PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[MgmtBroker, Path]]:
    data = new_data_dir()
    b = start_mgmt_broker("--data-dir", str(data))
    try:
        yield b, data
    finally:
        b.broker.stop()


@pytest.fixture
def mgmt(node: tuple[MgmtBroker, Path]) -> MgmtBroker:
    return node[0]


def api(b: MgmtBroker, method: str, path: str, body: Any = None, **params: Any) -> Any:
    r = requests.request(method, b.api(path), auth=AUTH, json=body, params=params, timeout=30)
    if r.status_code >= 400:
        return r.status_code, r.json()
    return r.json() if r.content else r.status_code


def publish(b: MgmtBroker, exchange: str, key: str, body: bytes, **props: Any) -> None:
    with Opened(connect(b.broker)) as conn:
        conn.channel().basic_publish(exchange, key, body, pika.BasicProperties(**props))


def test_pending_messages_through_the_api(mgmt: MgmtBroker, name: str) -> None:
    with Opened(connect(mgmt.broker)) as conn:
        ch = conn.channel()
        ch.exchange_declare(name, "x-delayed-message", arguments={"x-delayed-type": "direct"})
        ch.queue_declare(name, auto_delete=True)
        ch.queue_bind(name, name, "k")
        for i, delay in enumerate((60_000, 30_000, 90_000)):
            props = pika.BasicProperties(
                headers={"x-delay": delay, "tenant": "acme"},
                message_id=f"m{i}",
                correlation_id="batch-1" if i < 2 else "batch-2",
            )
            ch.basic_publish(name, "k", b"payload %d " % i + b"x" * 300, props)
    exchange = api(mgmt, "GET", f"exchanges/{V}/{name}")
    assert exchange["messages_delayed"] == 3
    rows = api(mgmt, "GET", f"exchanges/{V}/{name}/delayed")
    assert [r["properties"]["message_id"] for r in rows] == ["m1", "m0", "m2"]
    first = rows[0]
    assert first["routing_key"] == "k"
    assert first["properties"]["headers"] == {"x-delay": 30_000, "tenant": "acme"}
    assert first["payload"].startswith("payload 1 ")
    assert len(first["payload"]) == 200  # a preview
    assert first["payload_bytes"] == 310
    assert 25_000 < first["due_in"] <= 30_000
    assert first["due"] == exchange["messages_delayed_next_due"]
    assert first["due_at"].endswith("Z")
    narrowed = api(mgmt, "GET", f"exchanges/{V}/{name}/delayed", correlation_id="batch-2")
    assert [r["properties"]["message_id"] for r in narrowed] == ["m2"]
    assert api(mgmt, "POST", f"exchanges/{V}/{name}/delayed/cancel", {"message_id": "m0"}) == {
        "cancelled": 1
    }
    moved = api(
        mgmt,
        "POST",
        f"exchanges/{V}/{name}/delayed/reschedule",
        {"correlation_id": "batch-1", "delay": 200},
    )
    assert moved["rescheduled"] == 1
    assert api(mgmt, "DELETE", f"exchanges/{V}/{name}/delayed/{rows[2]['id']}") == 204
    assert api(mgmt, "DELETE", f"exchanges/{V}/{name}/delayed/{rows[2]['id']}")[0] == 404
    status, error = api(mgmt, "POST", f"exchanges/{V}/{name}/delayed/cancel", {})
    assert status == 400
    assert "say which messages" in error["reason"]
    assert api(mgmt, "GET", f"exchanges/{V}/amq.direct/delayed")[0] == 400
    assert api(mgmt, "GET", f"exchanges/{V}/nope/delayed")[0] == 404
    with Opened(connect(mgmt.broker)) as conn:
        ch = conn.channel()
        got: list[Any] = []
        ch.basic_consume(name, lambda c, m, p, body: got.append(p), auto_ack=True)
        pump(conn, lambda: len(got) == 1, 5.0)
    assert got[0].message_id == "m1"
    assert got[0].headers["x-delay"] == -200
    assert api(mgmt, "GET", f"exchanges/{V}/{name}")["messages_delayed"] == 0


def test_pending_messages_through_ctl(node: tuple[MgmtBroker, Path], name: str) -> None:
    mgmt, data = node
    with Opened(connect(mgmt.broker)) as conn:
        ch = conn.channel()
        ch.exchange_declare(name, "x-delayed-message", arguments={"x-delayed-type": "topic"})
        for i in range(3):
            props = pika.BasicProperties(headers={"x-delay": 50_000 + i}, message_id=f"c{i}")
            ch.basic_publish(name, f"order.{i}", b"order %d" % i, props)
    table = ok(data, "list_delayed", name)
    assert table.splitlines()[1] == "id\tdue_at\tdue_in\trouting_key\tpayload"
    assert [line.split("\t")[3] for line in table.splitlines()[2:]] == [
        "order.0",
        "order.1",
        "order.2",
    ]
    rows = json.loads(ok(data, "list_delayed", name, "--formatter", "json"))
    assert [r["properties"]["message_id"] for r in rows] == ["c0", "c1", "c2"]
    assert "cancelled: 1" in ok(data, "cancel_delayed", name, "--routing-key", "order.1")
    out = ok(data, "reschedule_delayed", name, "--message-id", "c2", "--delay", "1000000")
    assert "rescheduled: 1" in out
    rows = json.loads(ok(data, "list_delayed", name, "--formatter", "json", "-q"))
    assert [r["properties"]["message_id"] for r in rows] == ["c0", "c2"]
    assert "cancelled: 2" in ok(data, "cancel_delayed", name, "--all")


def _queue_with(mgmt: MgmtBroker, name: str, count: int, durable: bool = False) -> None:
    with Opened(connect(mgmt.broker)) as conn:
        ch = conn.channel()
        ch.queue_declare(name, durable=durable)
        for i in range(count):
            props = pika.BasicProperties(
                delivery_mode=2,
                message_id=f"id-{i}",
                headers={"parity": "odd" if i % 2 else "even"},
            )
            ch.basic_publish("", name, b"message %d" % i, props)


def test_browse_changes_neither_order_nor_redelivered_flags(mgmt: MgmtBroker, name: str) -> None:
    _queue_with(mgmt, name, 5)
    with Opened(connect(mgmt.broker)) as conn:
        ch = conn.channel()
        method, _p, _b = ch.basic_get(name)
        ch.basic_nack(method.delivery_tag, requeue=True)  # message 0 is redelivered now
    before = api(mgmt, "POST", f"queues/{V}/{name}/browse", {"count": 10})
    again = api(mgmt, "POST", f"queues/{V}/{name}/browse", {"count": 10})
    assert before == again
    assert [r["payload"] for r in before] == [f"message {i}" for i in range(5)]
    assert [r["redelivered"] for r in before] == [True, False, False, False, False]
    assert [r["position"] for r in before] == [0, 1, 2, 3, 4]
    page = api(mgmt, "POST", f"queues/{V}/{name}/browse", {"offset": 3, "count": 1})
    assert [r["payload"] for r in page] == ["message 3"]
    queue = api(mgmt, "GET", f"queues/{V}/{name}")
    assert queue["messages_ready"] == 5
    with Opened(connect(mgmt.broker)) as conn:
        ch = conn.channel()
        got = []
        while True:
            method, _p, body = ch.basic_get(name, auto_ack=True)
            if method is None:
                break
            got.append((body, method.redelivered))
    assert got == [(b"message %d" % i, i == 0) for i in range(5)]


def test_search_by_header_property_and_body(mgmt: MgmtBroker, name: str) -> None:
    _queue_with(mgmt, name, 50)
    rows = api(
        mgmt,
        "POST",
        f"queues/{V}/{name}/browse",
        {"filter": {"headers": {"parity": "odd"}}, "count": 3},
    )
    assert [r["payload"] for r in rows] == ["message 1", "message 3", "message 5"]
    rows = api(
        mgmt,
        "POST",
        f"queues/{V}/{name}/browse",
        {"filter": {"properties": {"message_id": "id-42"}}},
    )
    assert [(r["position"], r["payload"]) for r in rows] == [(42, "message 42")]
    rows = api(mgmt, "POST", f"queues/{V}/{name}/browse", {"filter": {"body_contains": "age 4"}})
    assert [r["payload"] for r in rows] == ["message 4"] + [f"message {i}" for i in range(40, 50)]
    rows = api(
        mgmt,
        "POST",
        f"queues/{V}/{name}/browse",
        {"filter": {"body_contains": "message"}, "scan": 10, "count": 100},
    )
    assert len(rows) == 10
    status, error = api(mgmt, "POST", f"queues/{V}/{name}/browse", {"filter": {"nope": 1}})
    assert status == 400
    assert "unknown filter field" in error["reason"]


def test_move_copy_and_route_through_an_exchange(node: tuple[MgmtBroker, Path], name: str) -> None:
    mgmt, data = node
    _queue_with(mgmt, name, 10, durable=True)
    with Opened(connect(mgmt.broker)) as conn:
        ch = conn.channel()
        ch.queue_declare(name + ".odd", durable=True)
        ch.queue_declare(name + ".copy")
        ch.exchange_declare(name + ".x", "direct")
        ch.queue_declare(name + ".routed")
        ch.queue_bind(name + ".routed", name + ".x", "re")
    moved = api(
        mgmt,
        "POST",
        f"queues/{V}/{name}/move",
        {"to_queue": name + ".odd", "filter": {"headers": {"parity": "odd"}}},
    )
    assert moved == {"moved": 5, "unroutable": 0, "refused": 0}
    copied = api(
        mgmt, "POST", f"queues/{V}/{name}/move", {"to_queue": name + ".copy", "copy": True}
    )
    assert copied["moved"] == 5
    out = ok(
        data,
        "move_messages",
        name,
        "--to-exchange",
        name + ".x",
        "--routing-key",
        "re",
        "--limit",
        "2",
        "--formatter",
        "json",
    )
    assert json.loads(out)["moved"] == 2
    unroutable = api(
        mgmt, "POST", f"queues/{V}/{name}/move", {"to_exchange": name + ".x", "limit": 1}
    )
    assert unroutable == {"moved": 0, "unroutable": 3, "refused": 0}  # their own key: no route

    def payloads(queue: str) -> list[str]:
        return [r["payload"] for r in api(mgmt, "POST", f"queues/{V}/{queue}/browse")]

    assert payloads(name) == ["message 4", "message 6", "message 8"]
    assert payloads(name + ".odd") == [f"message {i}" for i in (1, 3, 5, 7, 9)]
    assert payloads(name + ".copy") == [f"message {i}" for i in (0, 2, 4, 6, 8)]
    assert payloads(name + ".routed") == ["message 0", "message 2"]
    assert api(mgmt, "POST", f"queues/{V}/{name}/move", {"to_queue": "nope"})[0] == 404
    assert api(mgmt, "POST", f"queues/{V}/{name}/move", {"to_queue": name})[0] == 400


def test_replay_a_dead_letter_queue_into_the_queues_it_came_from(
    node: tuple[MgmtBroker, Path], name: str
) -> None:
    mgmt, data = node
    dlq = name + ".dlq"
    with Opened(connect(mgmt.broker)) as conn:
        ch = conn.channel()
        ch.exchange_declare(name + ".dlx", "fanout")
        ch.queue_declare(dlq)
        ch.queue_bind(dlq, name + ".dlx")
        for source in ("a", "b"):
            ch.queue_declare(
                f"{name}.{source}", arguments={"x-dead-letter-exchange": name + ".dlx"}
            )
            for i in range(3):
                ch.basic_publish("", f"{name}.{source}", f"{source}{i}".encode(), PERSISTENT)
        for source in ("a", "b"):
            for _ in range(3):
                method, _p, _b = ch.basic_get(f"{name}.{source}")
                ch.basic_reject(method.delivery_tag, requeue=False)
        ch.basic_publish("", dlq, b"never died")  # no x-death: stays
    rows = api(mgmt, "POST", f"queues/{V}/{dlq}/browse")
    assert len(rows) == 7
    out = json.loads(ok(data, "replay_dead_letters", dlq, "--formatter", "json"))
    assert out["moved"] == 6
    assert out["skipped"] == 1
    assert out["queues"] == {f"{name}.a": 3, f"{name}.b": 3}
    for source in ("a", "b"):
        rows = api(mgmt, "POST", f"queues/{V}/{name}.{source}/browse")
        assert [r["payload"] for r in rows] == [f"{source}{i}" for i in range(3)]
        assert rows[0]["properties"]["headers"]["x-death"][0]["queue"] == f"{name}.{source}"
    assert [r["payload"] for r in api(mgmt, "POST", f"queues/{V}/{dlq}/browse")] == ["never died"]


def test_streams_by_offset_range(mgmt: MgmtBroker, name: str) -> None:
    with Opened(connect(mgmt.broker)) as conn:
        ch = conn.channel()
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        ch.queue_declare(name + ".out")
        ch.confirm_delivery()
        for i in range(20):
            ch.basic_publish("", name, b"s%d" % i, pika.BasicProperties(headers={"n": i}))
    rows = api(mgmt, "POST", f"queues/{V}/{name}/browse", {"offset": 5, "count": 3})
    assert [(r["offset"], r["payload"]) for r in rows] == [(5, "s5"), (6, "s6"), (7, "s7")]
    rows = api(mgmt, "POST", f"queues/{V}/{name}/browse", {"filter": {"headers": {"n": 12}}})
    assert [r["offset"] for r in rows] == [12]
    assert api(mgmt, "POST", f"queues/{V}/{name}/move", {"to_queue": name + ".out"})[0] == 400
    copied = api(
        mgmt,
        "POST",
        f"queues/{V}/{name}/move",
        {"to_queue": name + ".out", "copy": True, "offset": 10, "end_offset": 13},
    )
    assert copied["moved"] == 3
    rows = api(mgmt, "POST", f"queues/{V}/{name}.out/browse")
    assert [r["payload"] for r in rows] == ["s10", "s11", "s12"]


def fill(conn: Any, count: int) -> None:
    """``count`` persistent messages into the durable queue ``src``, on disk on return (a
    confirmed publish on another channel of the connection is written after them)."""
    ch = conn.channel()
    for i in range(count):
        ch.basic_publish("", "src", b"%d" % i, PERSISTENT)
    marker = conn.channel()
    marker.confirm_delivery()
    marker.queue_declare("marker", durable=True)
    marker.basic_publish("", "marker", b"", PERSISTENT)
    marker.queue_purge("marker")


def test_a_move_cut_by_kill_9_loses_and_doubles_nothing() -> None:
    """A move of 20,000 persistent messages between durable queues, killed while it runs:
    after the restart every message is in exactly one of the two queues."""
    count = 20_000
    data = new_data_dir()
    b = start_mgmt_broker("--data-dir", str(data))
    try:
        with Opened(connect(b.broker)) as conn:
            ch = conn.channel()
            ch.queue_declare("src", durable=True)
            ch.queue_declare("dst", durable=True)
            fill(conn, count)
        seen: dict[str, Any] = {}

        def run_move() -> None:
            try:
                started = time.monotonic()
                seen["result"] = api(b, "POST", f"queues/{V}/src/move", {"to_queue": "dst"})
                seen["seconds"] = time.monotonic() - started
            except requests.RequestException as exc:
                seen["error"] = exc

        mover = threading.Thread(target=run_move)
        mover.start()
        # Kill once part of it is moved (the API answers between the move's slices).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            dst = api(b, "GET", f"queues/{V}/dst")
            if isinstance(dst, dict) and dst.get("messages", 0) >= count // 5:
                break
        b.broker.stop(signal.SIGKILL)
        mover.join(30)
        b = start_mgmt_broker("--data-dir", str(data))
        sizes = {q: api(b, "GET", f"queues/{V}/{q}")["messages"] for q in ("src", "dst")}
        assert sizes["src"] + sizes["dst"] == count
        assert 0 < sizes["dst"] < count, sizes  # killed in the middle
        bodies = []
        with Opened(connect(b.broker)) as conn:
            ch = conn.channel()
            for queue in ("src", "dst"):
                while True:
                    method, _p, body = ch.basic_get(queue, auto_ack=True)
                    if method is None:
                        break
                    bodies.append(int(body))
        assert sorted(bodies) == list(range(count))
        # And a whole move, timed.
        with Opened(connect(b.broker)) as conn:
            fill(conn, count)
        started = time.monotonic()
        result = api(b, "POST", f"queues/{V}/src/move", {"to_queue": "dst"})
        seconds = time.monotonic() - started
        assert result["moved"] == count
        print(f"moved {count} persistent messages in {seconds:.2f} s: {count / seconds:.0f}/s")
    finally:
        b.broker.stop()
