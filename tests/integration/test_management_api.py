"""The management HTTP API of a real broker process, through HTTP (requests) and pika:
RabbitMQ's field names and types side by side (the shapes recorded from RabbitMQ 3.10.8 in
``tests/data/management/``), status codes and error bodies, the tag rules, queues,
exchanges, bindings, messages, connections, policies, definitions, rates."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pika
import pytest
import requests
import trustme

from tests.integration.ctl_support import new_data_dir
from tests.integration.mgmt_support import (
    AUTH,
    SHAPES_FILE,
    MgmtBroker,
    scenario,
    start_mgmt_broker,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# Left out of the compiled pass (scripts/test): the management API is not compiled.
pytestmark = [pytest.mark.leveret_only, pytest.mark.pure_only]

# RabbitMQ fields Leveret does not give, by endpoint (Erlang VM internals, clustering,
# per-message persistence/RAM counts of the classic queue's backing store, churn rates,
# TLS peer certificate details). Everything else RabbitMQ gives, Leveret gives, with the
# same JSON type.
_QUEUE_MISSING = {
    "backing_queue_status",
    "garbage_collection",
    "head_message_timestamp",
    "idle_since",
    "message_bytes",
    "message_bytes_paged_out",
    "message_bytes_persistent",
    "message_bytes_ram",
    "message_bytes_unacknowledged",
    "messages_persistent",
    "messages_ram",
    "messages_ready_ram",
    "messages_unacknowledged_ram",
    "recoverable_slaves",
    # How busy the consumers are: Leveret does not measure it (yet).
    "consumer_capacity",
    "consumer_utilisation",
    "memory",
    "reductions",
    "reductions_details",
    "members",
    "online",
    "readers",
}
_NODE_MISSING = {
    "channel_closed",
    "channel_created",
    "cluster_links",
    "connection_closed",
    "connection_created",
    "context_switches",
    "contexts[].cowboy_opts",
    "disk_free",
    "disk_free_limit",
    "fd_used",
    "gc_bytes_reclaimed",
    "gc_num",
    "io_read_avg_time",
    "io_read_bytes",
    "io_read_count",
    "io_reopen_count",
    "io_seek_avg_time",
    "io_seek_count",
    "io_sync_avg_time",
    "io_sync_count",
    "io_write_avg_time",
    "io_write_bytes",
    "io_write_count",
    "mem_calculation_strategy",
    "mem_used",
    "metrics_gc_queue_length",
    "mnesia_disk_tx_count",
    "mnesia_ram_tx_count",
    "msg_store_read_count",
    "msg_store_write_count",
    "net_ticktime",
    "proc_total",
    "proc_used",
    "queue_created",
    "queue_declared",
    "queue_deleted",
    "queue_index_read_count",
    "queue_index_write_count",
    "ra_open_file_metrics",
    "sockets_used",
}
KNOWN_MISSING: dict[str, set[str]] = {
    # The Erlang VM's and Mnesia's counters, churn and I/O statistics (with their _details).
    "nodes": _NODE_MISSING | {m + "_details" for m in _NODE_MISSING},
    "channels": {
        "garbage_collection",
        "idle_since",
        "messages_unconfirmed",
        "pending_raft_commands",
        "reductions",
        "reductions_details",
        "user_who_performed_action",
    },
    "connections": {
        "garbage_collection",
        "peer_cert_issuer",
        "peer_cert_subject",
        "peer_cert_validity",
        "reductions",
        "reductions_details",
        "ssl_cipher",
        "ssl_hash",
        "ssl_key_exchange",
        "ssl_protocol",
        "user_who_performed_action",
    },
    "overview": {
        "churn_rates",
        "contexts[].cowboy_opts",
        "contexts[].ssl_opts",
        "erlang_full_version",
        "erlang_version",
        "listeners[].socket_opts",
        "message_stats.disk_reads",
        "message_stats.disk_reads_details",
        "message_stats.disk_writes",
        "message_stats.disk_writes_details",
        "release_series_support_status",
    },
    "queue": _QUEUE_MISSING,
    "queue_rates": _QUEUE_MISSING,
    "queues": _QUEUE_MISSING,
    "paged": {"items[]." + k for k in _QUEUE_MISSING},
}
# Leveret's additions: an export that also carries operator policies and vhost limits
# and metadata (as rabbitmqctl export_definitions writes them; RabbitMQ imports both).
KNOWN_EXTRA = {
    "definitions": {"operator_policies", "vhosts[].limits", "vhosts[].metadata"},
    # The Prometheus plugin's context has a protocol (recorded without the plugin here;
    # with it in tests/data/management/rabbitmq-3.10.8-cluster-views.json).
    "overview": {"contexts[].protocol"},
}


def _compare(
    mine: Any, theirs: Any, path: str, missing: list[str], extra: list[str], wrong: list[str]
) -> None:
    if "map" in (mine, theirs):
        return
    if isinstance(mine, list) and isinstance(theirs, list):
        if mine and theirs:
            _compare(mine[0], theirs[0], path + "[]", missing, extra, wrong)
        return
    if isinstance(mine, dict) and isinstance(theirs, dict):
        for key in mine:
            sub = f"{path}.{key}" if path else key
            if key in theirs:
                _compare(mine[key], theirs[key], sub, missing, extra, wrong)
            else:
                extra.append(sub)
        missing += [f"{path}.{k}" if path else k for k in theirs if k not in mine]
        return
    if mine != theirs and "null" not in (mine, theirs):
        wrong.append(f"{path}: {mine} (RabbitMQ: {theirs})")


@pytest.fixture(scope="module")
def mgmt() -> Iterator[MgmtBroker]:
    m = start_mgmt_broker()
    try:
        yield m
    finally:
        m.broker.stop()


def _get(m: MgmtBroker, path: str, auth: tuple[str, str] = AUTH) -> requests.Response:
    return requests.get(m.api(path), auth=auth, timeout=10)


def _pika(m: MgmtBroker, user: str = "guest", password: str = "guest", name: str = "") -> Any:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1",
            m.broker.port,
            credentials=pika.PlainCredentials(user, password),
            client_properties={"connection_name": name} if name else None,
        )
    )


def test_shapes_match_rabbitmq(mgmt: MgmtBroker) -> None:
    reference = json.loads(SHAPES_FILE.read_text())
    mine = scenario(mgmt.url, mgmt.broker.port)
    problems = []
    for endpoint, theirs in sorted(reference.items()):
        ours = mine[endpoint]
        if ours["status"] != theirs["status"]:
            problems.append(f"{endpoint}: status {ours['status']} != {theirs['status']}")
        missing: list[str] = []
        extra: list[str] = []
        wrong: list[str] = []
        _compare(ours["shape"], theirs["shape"], "", missing, extra, wrong)
        strip = [m.removeprefix("[].") for m in missing]
        unexpected_missing = set(strip) - KNOWN_MISSING.get(endpoint, set())
        unexpected_extra = {e.removeprefix("[].") for e in extra} - KNOWN_EXTRA.get(endpoint, set())
        problems += [f"{endpoint}: type {w}" for w in wrong]
        problems += [f"{endpoint}: missing {k}" for k in sorted(unexpected_missing)]
        problems += [f"{endpoint}: extra {k}" for k in sorted(unexpected_extra)]
    assert not problems, "\n".join(problems)


def test_errors_and_authentication(mgmt: MgmtBroker) -> None:
    r = _get(mgmt, "queues", auth=("guest", "wrong"))
    assert r.status_code == 401
    assert r.json() == {"error": "not_authorized", "reason": "Login failed"}
    assert r.headers["WWW-Authenticate"].startswith("Basic")
    assert requests.get(mgmt.api("overview"), timeout=10).status_code == 401
    r = _get(mgmt, "queues/%2F/no-such-queue")
    assert (r.status_code, r.json()) == (404, {"error": "Object Not Found", "reason": "Not Found"})
    assert _get(mgmt, "vhosts/nowhere").status_code == 404
    r = requests.put(mgmt.api("queues/%2F/e1"), auth=AUTH, json={"durable": False}, timeout=10)
    assert r.status_code == 201
    r = requests.put(mgmt.api("queues/%2F/e1"), auth=AUTH, json={"durable": True}, timeout=10)
    assert r.status_code == 400
    assert r.json()["error"] == "bad_request"
    assert "inequivalent arg 'durable' for queue 'e1'" in r.json()["reason"]
    r = requests.put(
        mgmt.api("queues/%2F/e2"),
        auth=AUTH,
        json={"arguments": {"x-max-length": "many"}},
        timeout=10,
    )
    assert r.status_code == 400
    assert "x-max-length" in r.json()["reason"]
    r = requests.put(mgmt.api("queues/%2F/e3"), auth=AUTH, data=b"{not json", timeout=10)
    assert r.status_code == 400


def test_tag_rules(mgmt: MgmtBroker) -> None:
    def put(path: str, body: dict[str, Any]) -> int:
        return requests.put(mgmt.api(path), auth=AUTH, json=body, timeout=10).status_code

    assert put("vhosts/tags-v", {}) == 201
    assert put("users/tag-none", {"password": "p", "tags": ""}) == 201
    assert put("users/tag-mgmt", {"password": "p", "tags": "management"}) == 201
    assert put("users/tag-mon", {"password": "p", "tags": "monitoring"}) == 201
    assert (
        put("permissions/tags-v/tag-mgmt", {"configure": ".*", "write": ".*", "read": ".*"}) == 201
    )
    # No management tag: no API at all.
    r = _get(mgmt, "overview", auth=("tag-none", "p"))
    assert (r.status_code, r.json()["reason"]) == (401, "Not management user")
    # management: its own vhosts only, no users, no nodes.
    assert [v["name"] for v in _get(mgmt, "vhosts", ("tag-mgmt", "p")).json()] == ["tags-v"]
    assert _get(mgmt, "users", ("tag-mgmt", "p")).status_code == 401
    assert _get(mgmt, "nodes", ("tag-mgmt", "p")).status_code == 401
    assert _get(mgmt, "queues/%2F", ("tag-mgmt", "p")).status_code == 401
    r = requests.put(mgmt.api("queues/tags-v/mine"), auth=("tag-mgmt", "p"), json={}, timeout=10)
    assert r.status_code == 201
    # monitoring: sees every vhost and the node, changes nothing of the admin's.
    names = {v["name"] for v in _get(mgmt, "vhosts", ("tag-mon", "p")).json()}
    assert {"/", "tags-v"} <= names
    assert _get(mgmt, "nodes", ("tag-mon", "p")).status_code == 200
    r = requests.put(mgmt.api("vhosts/nope"), auth=("tag-mon", "p"), json={}, timeout=10)
    assert r.status_code == 401
    assert _get(mgmt, "whoami", ("tag-mon", "p")).json() == {
        "name": "tag-mon",
        "tags": ["monitoring"],
    }


def test_queue_lifecycle_messages_and_bindings(mgmt: MgmtBroker) -> None:
    api = mgmt.api
    assert (
        requests.put(
            api("exchanges/%2F/lx"), auth=AUTH, json={"type": "topic"}, timeout=10
        ).status_code
        == 201
    )
    assert (
        requests.put(
            api("queues/%2F/lq"), auth=AUTH, json={"durable": True}, timeout=10
        ).status_code
        == 201
    )
    r = requests.post(
        api("bindings/%2F/e/lx/q/lq"), auth=AUTH, json={"routing_key": "k.*"}, timeout=10
    )
    assert r.status_code == 201
    assert r.headers["Location"] == "lq/k.*"
    rows = _get(mgmt, "bindings/%2F/e/lx/q/lq").json()
    assert [(b["routing_key"], b["properties_key"]) for b in rows] == [("k.*", "k.*")]
    for i in range(3):
        r = requests.post(
            api("exchanges/%2F/lx/publish"),
            auth=AUTH,
            json={
                "routing_key": "k.a",
                "payload": f"body-{i}",
                "payload_encoding": "string",
                "properties": {
                    "content_type": "text/plain",
                    "headers": {"n": i},
                    "delivery_mode": 2,
                },
            },
            timeout=10,
        )
        assert r.json() == {"routed": True}
    r = requests.post(
        api("exchanges/%2F/lx/publish"),
        auth=AUTH,
        json={"routing_key": "none", "payload": "", "payload_encoding": "string", "properties": {}},
        timeout=10,
    )
    assert r.json() == {"routed": False}
    queue = _get(mgmt, "queues/%2F/lq").json()
    assert (queue["messages"], queue["messages_ready"], queue["durable"]) == (3, 3, True)
    got = requests.post(
        api("queues/%2F/lq/get"),
        auth=AUTH,
        json={"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 4},
        timeout=10,
    ).json()
    assert [m["payload"] for m in got] == ["body", "body"]
    assert got[0]["payload_bytes"] == 6
    assert got[0]["properties"]["headers"] == {"n": 0}
    assert got[0]["properties"]["content_type"] == "text/plain"
    assert [m["message_count"] for m in got] == [2, 1]
    assert _get(mgmt, "queues/%2F/lq").json()["messages"] == 3  # requeued
    got = requests.post(
        api("queues/%2F/lq/get"),
        auth=AUTH,
        json={"count": 1, "ackmode": "ack_requeue_false", "encoding": "base64"},
        timeout=10,
    ).json()
    assert got[0]["payload_encoding"] == "base64"
    assert got[0]["redelivered"] is True
    assert _get(mgmt, "queues/%2F/lq").json()["messages"] == 2
    assert requests.delete(api("queues/%2F/lq/contents"), auth=AUTH, timeout=10).status_code == 204
    assert _get(mgmt, "queues/%2F/lq").json()["messages"] == 0
    r = requests.delete(api("bindings/%2F/e/lx/q/lq/k.*"), auth=AUTH, timeout=10)
    assert r.status_code == 204
    assert _get(mgmt, "bindings/%2F/e/lx/q/lq").json() == []
    assert requests.delete(api("queues/%2F/lq"), auth=AUTH, timeout=10).status_code == 204
    assert requests.delete(api("exchanges/%2F/lx"), auth=AUTH, timeout=10).status_code == 204
    assert _get(mgmt, "queues/%2F/lq").status_code == 404


def test_paging_sorting_filtering_columns(mgmt: MgmtBroker) -> None:
    for name in ("pg-b", "pg-a", "pg-c"):
        requests.put(mgmt.api(f"queues/%2F/{name}"), auth=AUTH, json={}, timeout=10)
    page = _get(mgmt, "queues/%2F?page=1&page_size=2&name=pg-&sort=name&sort_reverse=true").json()
    assert [q["name"] for q in page["items"]] == ["pg-c", "pg-b"]
    assert (page["filtered_count"], page["page_count"], page["page"]) == (3, 2, 1)
    rows = _get(mgmt, "queues?name=^pg-[ab]$&use_regex=true&columns=name,vhost").json()
    assert sorted(rows, key=lambda r: r["name"]) == [
        {"name": "pg-a", "vhost": "/"},
        {"name": "pg-b", "vhost": "/"},
    ]
    assert _get(mgmt, "queues?page=0").status_code == 400


def test_connections_channels_consumers_and_close(mgmt: MgmtBroker) -> None:
    conn = _pika(mgmt, name="cc-conn")
    ch = conn.channel()
    ch.queue_declare("cc-q")
    ch.basic_qos(prefetch_count=7)
    ch.basic_consume("cc-q", lambda *_a: None, consumer_tag="cc-tag")
    conn.process_data_events(0.2)
    try:
        mine = [
            c["name"]
            for c in _get(mgmt, "connections").json()
            if c.get("user_provided_name") == "cc-conn"
        ]
        assert len(mine) == 1
        quoted = quote(mine[0], safe="")
        detail = _get(mgmt, f"connections/{quoted}").json()
        assert (detail["user"], detail["vhost"], detail["protocol"]) == ("guest", "/", "AMQP 0-9-1")
        assert detail["client_properties"]["product"] == "Pika Python Client Library"
        channels = _get(mgmt, f"connections/{quoted}/channels").json()
        assert [(c["number"], c["prefetch_count"], c["consumer_count"]) for c in channels] == [
            (1, 7, 1)
        ]
        consumers = [c for c in _get(mgmt, "consumers/%2F").json() if c["consumer_tag"] == "cc-tag"]
        assert consumers[0]["queue"] == {"name": "cc-q", "vhost": "/"}
        assert consumers[0]["channel_details"]["connection_name"] == mine[0]
        queue = _get(mgmt, "queues/%2F/cc-q").json()
        assert queue["consumer_details"][0]["channel_details"]["number"] == 1
        r = requests.delete(
            mgmt.api(f"connections/{quoted}"),
            auth=AUTH,
            headers={"X-Reason": "bye from the test"},
            timeout=10,
        )
        assert r.status_code == 204
        with pytest.raises(pika.exceptions.ConnectionClosed) as closed:
            conn.process_data_events(5)
        assert closed.value.reply_code == 320
        assert "bye from the test" in closed.value.reply_text
    finally:
        if conn.is_open:
            conn.close()


def test_a_1_0_copy_receivers_unsettled_copies_are_not_unacked(mgmt: MgmtBroker) -> None:
    """A 1.0 browser's (``distribution-mode: copy``) unsettled copies take nothing from the
    queue: its session's channel counts them as no unacknowledged message, while a
    consuming receiver's unsettled delivery counts (before, every copy counted)."""
    from proton.reactor import Copy
    from proton.utils import BlockingConnection

    ch = _pika(mgmt).channel()
    ch.queue_declare("copy-unacked")
    for body in (b"1", b"2", b"3"):
        ch.basic_publish("", "copy-unacked", body)
    url = f"amqp://guest:guest@127.0.0.1:{mgmt.broker.port}"
    c = BlockingConnection(url, timeout=10)
    try:
        browser = c.create_receiver(
            "/queues/copy-unacked", credit=10, options=Copy(), name="browser"
        )
        for _ in range(3):
            browser.receive(timeout=5)
        taker = c.create_receiver("/queues/copy-unacked", credit=1, name="taker")
        taker.receive(timeout=5)

        def unacked() -> list[int]:
            ours = [
                quote(conn["name"], safe="")
                for conn in _get(mgmt, "connections").json()
                if conn["protocol"] == "AMQP 1-0"
            ]
            return [
                channel["messages_unacknowledged"]
                for name in ours
                for channel in _get(mgmt, f"connections/{name}/channels").json()
            ]

        # Statistics are sampled: wait for the receivers' deliveries to be counted.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and unacked() != [1]:
            time.sleep(0.2)
        assert unacked() == [1]
    finally:
        c.close()
        ch.connection.close()


def test_counts_and_rates_follow_traffic(mgmt: MgmtBroker) -> None:
    conn = _pika(mgmt)
    try:
        ch = conn.channel()
        ch.queue_declare("rate-q")
        ch.confirm_delivery()
        for _ in range(50):
            ch.basic_publish("", "rate-q", b"x" * 10)
        time.sleep(0.5)  # two samples at 200 ms
        for _ in range(50):
            ch.basic_publish("", "rate-q", b"x" * 10)
        for _ in range(20):
            method, _props, _body = ch.basic_get("rate-q")
            assert method is not None
            ch.basic_ack(method.delivery_tag)
        ch.basic_get("rate-q", auto_ack=True)
        time.sleep(0.5)
        queue = _get(
            mgmt,
            "queues/%2F/rate-q?msg_rates_age=60&msg_rates_incr=1&lengths_age=60&lengths_incr=1",
        ).json()
        stats = queue["message_stats"]
        assert (stats["publish"], stats["get"], stats["ack"], stats["get_no_ack"]) == (
            100,
            20,
            20,
            1,
        )
        assert stats["deliver_get"] == 21
        assert queue["messages"] == 79
        assert stats["publish_details"]["samples"][0]["sample"] == 100
        assert queue["messages_details"]["samples"][0]["sample"] == 79
        overview = _get(mgmt, "overview").json()
        assert overview["message_stats"]["publish"] >= 100
        assert overview["message_stats"]["confirm"] >= 100
        assert overview["queue_totals"]["messages"] >= 79
        vhost = _get(mgmt, "vhosts/%2F").json()
        assert vhost["message_stats"]["ack"] >= 20
        assert vhost["recv_oct"] > 100 * 10
        exchange = _get(mgmt, "exchanges/%2F/amq.default").json()
        assert exchange["message_stats"]["publish_in"] >= 100
    finally:
        conn.close()


def test_policies_apply_live_and_definitions_round_trip(mgmt: MgmtBroker) -> None:
    api = mgmt.api
    conn = _pika(mgmt)
    try:
        ch = conn.channel()
        ch.queue_declare("pol-q", durable=True)
        for i in range(6):
            ch.basic_publish("", "pol-q", b"%d" % i)
        r = requests.put(
            api("policies/%2F/pol-cap"),
            auth=AUTH,
            json={
                "pattern": "^pol-",
                "definition": {"max-length": 2},
                "apply-to": "queues",
                "priority": 1,
            },
            timeout=10,
        )
        assert r.status_code == 201
        queue = _get(mgmt, "queues/%2F/pol-q").json()
        assert (queue["messages"], queue["policy"]) == (2, "pol-cap")
        assert queue["effective_policy_definition"] == {"max-length": 2}
        r = requests.put(
            api("operator-policies/%2F/pol-op"),
            auth=AUTH,
            json={"pattern": "^pol-", "definition": {"max-length": 1}, "apply-to": "queues"},
            timeout=10,
        )
        assert r.status_code == 201
        queue = _get(mgmt, "queues/%2F/pol-q").json()
        assert (queue["messages"], queue["operator_policy"]) == (1, "pol-op")
        r = requests.put(
            api("policies/%2F/bad"),
            auth=AUTH,
            json={"pattern": "(", "definition": {"max-length": 2}},
            timeout=10,
        )
        assert r.status_code == 400
        doc = _get(mgmt, "definitions").json()
        assert {
            "name": "pol-q",
            "vhost": "/",
            "durable": True,
            "auto_delete": False,
            "arguments": {},
        } in doc["queues"]
        assert [p["name"] for p in doc["policies"] if p["vhost"] == "/"] == ["pol-cap"]
        assert [p["name"] for p in doc["operator_policies"]] == ["pol-op"]
        # Delete both and the queue, then import the export: they come back.
        requests.delete(api("operator-policies/%2F/pol-op"), auth=AUTH, timeout=10)
        requests.delete(api("policies/%2F/pol-cap"), auth=AUTH, timeout=10)
        requests.delete(api("queues/%2F/pol-q"), auth=AUTH, timeout=10)
        assert _get(mgmt, "policies/%2F/pol-cap").status_code == 404
        r = requests.post(api("definitions"), auth=AUTH, json=doc, timeout=10)
        assert r.status_code == 204
        queue = _get(mgmt, "queues/%2F/pol-q").json()
        assert (queue["policy"], queue["operator_policy"]) == ("pol-cap", "pol-op")
    finally:
        conn.close()
        requests.delete(api("operator-policies/%2F/pol-op"), auth=AUTH, timeout=10)
        requests.delete(api("policies/%2F/pol-cap"), auth=AUTH, timeout=10)


def test_health_checks_and_aliveness(mgmt: MgmtBroker) -> None:
    assert _get(mgmt, "aliveness-test/%2F").json() == {"status": "ok"}
    assert _get(mgmt, "health/checks/alarms").json() == {"status": "ok"}
    assert _get(mgmt, "health/checks/virtual-hosts").json() == {"status": "ok"}
    r = _get(mgmt, f"health/checks/port-listener/{mgmt.broker.port}")
    assert r.json() == {"status": "ok", "port": mgmt.broker.port}
    assert _get(mgmt, "health/checks/port-listener/1").status_code == 503
    assert _get(mgmt, "health/checks/protocol-listener/amqp").status_code == 200
    assert _get(mgmt, "extensions").json() == []


def test_policies_and_runtime_survive_a_restart() -> None:
    data_dir = new_data_dir()
    m = start_mgmt_broker("--data-dir", str(data_dir))
    try:
        r = requests.put(
            m.api("policies/%2F/keep"),
            auth=AUTH,
            json={"pattern": "^k", "definition": {"message-ttl": 5000}},
            timeout=10,
        )
        assert r.status_code == 201
        requests.put(
            m.api("global-parameters/cluster_name"), auth=AUTH, json={"value": "lev-1"}, timeout=10
        )
        requests.put(m.api("queues/%2F/kq"), auth=AUTH, json={"durable": True}, timeout=10)
    finally:
        m.broker.stop()
    m = start_mgmt_broker("--data-dir", str(data_dir))
    try:
        assert _get(m, "policies/%2F/keep").json()["definition"] == {"message-ttl": 5000}
        assert _get(m, "queues/%2F/kq").json()["policy"] == "keep"
        assert _get(m, "cluster-name").json() == {"name": "lev-1"}
    finally:
        m.broker.stop()


def test_https_with_the_management_tls_settings(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    certfile, keyfile, cafile = tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca.pem"
    cert.private_key_pem.write_to_path(str(keyfile))
    cert.cert_chain_pems[0].write_to_path(str(certfile))
    ca.cert_pem.write_to_path(str(cafile))
    m = start_mgmt_broker(
        "--config",
        str(_toml(tmp_path, certfile, keyfile)),
    )
    try:
        assert m.url.startswith("https://")
        r = requests.get(m.api("whoami"), auth=AUTH, verify=str(cafile), timeout=10)
        assert r.json()["name"] == "guest"
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(m.api("whoami"), auth=AUTH, timeout=10)  # not our CA
    finally:
        m.broker.stop()


def _toml(tmp_path: Path, certfile: Path, keyfile: Path) -> Path:
    path = tmp_path / "leveret.toml"
    path.write_text(
        f'[leveret]\nmanagement_tls_certfile = "{certfile}"\nmanagement_tls_keyfile = "{keyfile}"\n'
    )
    return path
