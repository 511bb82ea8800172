"""Dynamic shovels inside Leveret, through real clients (pika) and the HTTP API: RabbitMQ's
parameter, ack modes, delete-after, forward headers, 1.0 ends, restarts of either side and
of the broker running the shovel, ``leveret ctl`` and the status endpoints. RabbitMQ itself
at either end: ``test_links_rabbitmq.py``."""

from __future__ import annotations

import json
import signal
from typing import TYPE_CHECKING, Any

import pytest
import requests
import trustme

from tests.integration.ctl_support import ctl, new_data_dir, ok
from tests.integration.links_support import (
    connect,
    count,
    drain,
    get,
    publish,
    q,
    set_shovel,
    shovel_row,
    wait_for,
    wait_running,
)
from tests.integration.mgmt_support import AUTH, start_mgmt_broker
from tests.integration.test_tls import MUTUAL, _start_tls

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.integration.mgmt_support import MgmtBroker

# Left out of the compiled pass (scripts/test): leveret.links is not compiled.
pytestmark = [pytest.mark.leveret_only, pytest.mark.pure_only]


DATA = new_data_dir()  # the module broker's (for leveret ctl)


@pytest.fixture(scope="module")
def mgmt() -> Iterator[MgmtBroker]:
    m = start_mgmt_broker("--data-dir", str(DATA))
    try:
        yield m
    finally:
        m.broker.stop()


def bodies(n: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{i:05d}".encode() for i in range(n)]


def test_a_local_shovel_moves_messages_in_order_with_headers(mgmt: MgmtBroker, name: str) -> None:
    src, dest = f"{name}.src", f"{name}.dest"
    set_shovel(
        mgmt,
        name,
        {
            "src-uri": "amqp://",
            "src-queue": src,
            "dest-uri": "amqp://",
            "dest-queue": dest,
            "dest-add-forward-headers": True,
            "dest-add-timestamp-header": True,
            "dest-publish-properties": {"app_id": "shovelled", "priority": 3},
        },
    )
    row = wait_running(mgmt, name)
    assert {k: v for k, v in row.items() if k not in ("timestamp", "node")} == {
        "name": name,
        "vhost": "/",
        "type": "dynamic",
        "state": "running",
        "src_uri": "amqp://",
        "src_protocol": "amqp091",
        "dest_protocol": "amqp091",
        "dest_uri": "amqp://",
        "src_queue": src,
        "dest_queue": dest,
    }
    publish(mgmt.broker.url, src, bodies(200), headers={"h": "kept"})
    got = drain(mgmt.broker.url, dest, 200)
    assert [b for b, _ in got] == bodies(200)
    props = got[0][1]
    assert props.app_id == "shovelled"
    assert props.priority == 3
    assert props.headers["h"] == "kept"
    assert isinstance(props.headers["x-shovelled-timestamp"], int)
    [table] = props.headers["x-shovelled"]
    assert table["shovel-name"] == name
    assert table["shovel-type"] == "dynamic"
    assert table["shovel-vhost"] == "/"
    assert (table["src-queue"], table["dest-queue"]) == (src, dest)
    assert (table["src-uri"], table["dest-uri"]) == ("amqp://", "amqp://")
    metrics = requests.get(f"{mgmt.prometheus}/metrics", timeout=10).text
    assert f'leveret_shovel_messages_forwarded_total{{shovel="{name}",vhost="/"}} 200.0' in metrics
    assert 'leveret_shovels{state="running"}' in metrics


@pytest.mark.parametrize("ack_mode", ["on-confirm", "on-publish", "no-ack"])
def test_every_ack_mode_moves_everything(mgmt: MgmtBroker, name: str, ack_mode: str) -> None:
    src, dest = f"{name}.src", f"{name}.dest"
    publish(mgmt.broker.url, src, bodies(300))
    set_shovel(
        mgmt,
        name,
        {
            "src-uri": "amqp://",
            "src-queue": src,
            "src-prefetch-count": 50,
            "dest-uri": "amqp://",
            "dest-queue": dest,
            "ack-mode": ack_mode,
        },
    )
    assert [b for b, _ in drain(mgmt.broker.url, dest, 300)] == bodies(300)
    wait_for("the source to be empty", lambda: count(mgmt.broker.url, src) == 0)


def test_an_exchange_source_and_an_exchange_destination(mgmt: MgmtBroker, name: str) -> None:
    dest = f"{name}.dest"
    with connect(mgmt.broker.url) as conn:
        ch = conn.channel()
        ch.exchange_declare(f"{name}.in", "topic")
        ch.exchange_declare(f"{name}.out", "direct")
        ch.queue_declare(dest, durable=True)
        ch.queue_bind(dest, f"{name}.out", "fixed")
        set_shovel(
            mgmt,
            name,
            {
                "src-uri": "amqp://",
                "src-exchange": f"{name}.in",
                "src-exchange-key": "a.#",
                "dest-uri": "amqp://",
                "dest-exchange": f"{name}.out",
                "dest-exchange-key": "fixed",
            },
        )
        row = wait_running(mgmt, name)
        assert row["src_exchange"] == f"{name}.in"
        assert row["src_exchange_key"] == "a.#"
        assert (row["dest_exchange"], row["dest_exchange_key"]) == (f"{name}.out", "fixed")
        for key in ("a.1", "b.1", "a.2"):
            ch.basic_publish(f"{name}.in", key, key.encode())
    assert [b for b, _ in drain(mgmt.broker.url, dest, 2)] == [b"a.1", b"a.2"]


def test_delete_after_queue_length_moves_what_was_there_and_deletes_itself(
    mgmt: MgmtBroker, name: str
) -> None:
    src, dest = f"{name}.src", f"{name}.dest"
    publish(mgmt.broker.url, src, bodies(120))
    set_shovel(
        mgmt,
        name,
        {
            "src-uri": "amqp://",
            "src-queue": src,
            "src-prefetch-count": 10,
            "src-delete-after": "queue-length",
            "dest-uri": "amqp://",
            "dest-queue": dest,
        },
    )
    wait_for(
        "the shovel to delete itself",
        lambda: (
            requests.get(
                mgmt.api(f"parameters/shovel/%2F/{q(name)}"), auth=AUTH, timeout=10
            ).status_code
            == 404
        ),
    )
    assert shovel_row(mgmt, name) is None
    publish(mgmt.broker.url, src, bodies(5, "late"))
    assert [b for b, _ in drain(mgmt.broker.url, dest, 120)] == bodies(120)
    assert count(mgmt.broker.url, src) == 5  # published later: not moved


def test_delete_after_a_count(mgmt: MgmtBroker, name: str) -> None:
    src, dest = f"{name}.src", f"{name}.dest"
    publish(mgmt.broker.url, src, bodies(40))
    set_shovel(
        mgmt,
        name,
        {
            "src-uri": "amqp://",
            "src-queue": src,
            "src-prefetch-count": 7,
            "src-delete-after": 25,
            "ack-mode": "on-publish",
            "dest-uri": "amqp://",
            "dest-queue": dest,
        },
    )
    wait_for("the shovel to delete itself", lambda: shovel_row(mgmt, name) is None)
    assert [b for b, _ in drain(mgmt.broker.url, dest, 25)] == bodies(25)
    # What was delivered past the count went back: nothing lost.
    assert wait_for("the rest back in the source", lambda: count(mgmt.broker.url, src) == 15)


def test_amqp10_ends_and_conversions(mgmt: MgmtBroker, name: str) -> None:
    a, b, c = f"{name}.a", f"{name}.b", f"{name}.c"
    publish(mgmt.broker.url, a, bodies(50), content_type="text/plain", headers={"k": "v"})
    publish(mgmt.broker.url, b, [])
    set_shovel(  # 0-9-1 -> 1.0
        mgmt,
        f"{name}-1",
        {
            "src-uri": "amqp://",
            "src-queue": a,
            "dest-protocol": "amqp10",
            "dest-uri": "amqp://",
            "dest-address": f"/queue/{b}",
            "dest-application-properties": {"added": "yes"},
        },
    )
    set_shovel(  # 1.0 -> 0-9-1
        mgmt,
        f"{name}-2",
        {
            "src-protocol": "amqp10",
            "src-uri": "amqp://",
            "src-address": f"/queue/{b}",
            "src-prefetch-count": 20,
            "dest-uri": "amqp://",
            "dest-queue": c,
        },
    )
    row = wait_running(mgmt, f"{name}-2")
    assert (row["src_protocol"], row["src_address"]) == ("amqp10", f"/queue/{b}")
    got = drain(mgmt.broker.url, c, 50)
    assert [body for body, _ in got] == bodies(50)
    props = got[0][1]
    assert props.content_type == "text/plain"
    assert props.headers["k"] == "v"
    assert props.headers["added"] == "yes"
    assert props.headers["src-queue"] == a  # RabbitMQ 3.10 adds the 0-9-1 source's queue


def test_validation_errors_are_rabbitmqs(mgmt: MgmtBroker, name: str) -> None:
    r = requests.put(
        mgmt.api(f"parameters/shovel/%2F/{q(name)}"),
        auth=AUTH,
        json={"value": {"src-uri": "amqp://", "dest-uri": "amqp://", "ack-mode": "never"}},
        timeout=10,
    )
    assert r.status_code == 400
    assert r.json()["reason"] == (
        # RabbitMQ escapes the text as HTML on this endpoint (rabbit_mgmt_wm_parameter).
        "Validation failed\n\n"
        "Must specify 'src-exchange' or 'src-queue'\n"
        'ack-mode should be one of [&lt;&lt;"no-ack"&gt;&gt;,&lt;&lt;"on-publish"&gt;&gt;,'
        '&lt;&lt;"on-confirm"&gt;&gt;], actually was &lt;&lt;"never"&gt;&gt;\n'
    )
    assert shovel_row(mgmt, name) is None


def test_restart_and_delete_through_the_api(mgmt: MgmtBroker, name: str) -> None:
    set_shovel(
        mgmt,
        name,
        {"src-uri": "amqp://", "src-queue": f"{name}.a", "dest-uri": "amqp://"},
    )
    before = wait_running(mgmt, name)
    for path in (f"shovels/vhost/%2F/{q(name)}/restart", f"shovels/%2F/{q(name)}/restart"):
        r = requests.delete(mgmt.api(path), auth=AUTH, timeout=30)
        assert r.status_code == 204, r.text
        wait_running(mgmt, name)
    r = requests.delete(mgmt.api("shovels/vhost/%2F/nope/restart"), auth=AUTH, timeout=10)
    assert r.status_code == 404
    assert [r["name"] for r in get(mgmt, "shovels/%2F") if r["name"] == name] == [name]
    r = requests.delete(mgmt.api(f"shovels/vhost/%2F/{q(name)}"), auth=AUTH, timeout=30)
    assert r.status_code == 204
    assert shovel_row(mgmt, name) is None
    r = requests.get(mgmt.api(f"parameters/shovel/%2F/{q(name)}"), auth=AUTH, timeout=10)
    assert r.status_code == 404
    assert before["state"] == "running"


def test_an_end_that_cannot_be_reached_is_retried(mgmt: MgmtBroker, name: str) -> None:
    set_shovel(
        mgmt,
        name,
        {
            "src-uri": "amqp://guest:guest@127.0.0.1:1",  # nothing listens on port 1
            "src-queue": "a",
            "dest-uri": "amqp://",
            "reconnect-delay": 0.5,
        },
    )
    # RabbitMQ 3.10 leaves a shovel that never connected "starting"; the log says why.
    first = wait_for("a row", lambda: shovel_row(mgmt, name))
    assert first["state"] == "starting"
    wait_for(
        "the reason in the log",
        lambda: any(name in line and "ECONNREFUSED" in line for line in mgmt.broker.log),
    )
    wait_for(
        "another attempt",
        lambda: (r := shovel_row(mgmt, name)) is not None and r["timestamp"] != first["timestamp"],
        10,
    )
    assert shovel_row(mgmt, name)["state"] == "starting"  # type: ignore[index]
    requests.delete(mgmt.api(f"parameters/shovel/%2F/{q(name)}"), auth=AUTH, timeout=10)


def test_ctl_verbs(mgmt: MgmtBroker, name: str) -> None:
    value = {"src-uri": "amqp://", "src-queue": f"{name}.a", "dest-uri": "amqp://"}
    out = ok(DATA, "set_parameter", "shovel", name, json.dumps(value))
    assert f'Setting runtime parameter "{name}" for component "shovel"' in out
    wait_running(mgmt, name)
    lines = ok(DATA, "shovel_status", "-q").splitlines()
    assert lines[0].split("\t") == [
        "name",
        "vhost",
        "type",
        "state",
        "source",
        "destination",
        "termination_reason",
        "last_changed",
    ]
    [mine] = [line.split("\t") for line in lines[1:] if line.startswith(name + "\t")]
    assert mine[:6] == [name, "/", "dynamic", "running", "amqp://", "amqp://"]
    assert name in ok(DATA, "list_parameters", "-q")
    ok(DATA, "restart_shovel", name)
    wait_running(mgmt, name)
    refused = ctl(DATA, "set_parameter", "shovel", f"{name}-bad", '{"src-uri": "amqp://"}')
    assert refused.returncode == 65
    assert "Validation failed" in refused.stderr
    assert ctl(DATA, "delete_shovel", f"{name}-nope").returncode == 69
    ok(DATA, "delete_shovel", name)
    assert shovel_row(mgmt, name) is None
    assert name not in ok(DATA, "list_parameters", "-q")


def test_shovels_survive_kill_9_and_an_end_that_restarts(name: str) -> None:
    """A shovel between two brokers keeps going through a SIGKILL of the broker that runs
    it and a restart of its destination: every message once, in order (on-confirm)."""
    data_a, data_b = new_data_dir(), new_data_dir()
    b = start_mgmt_broker("--data-dir", str(data_b))
    port_b = b.broker.port
    a = start_mgmt_broker("--data-dir", str(data_a))
    try:
        set_shovel(
            a,
            name,
            {
                "src-uri": "amqp://",
                "src-queue": "move",
                "dest-uri": f"amqp://guest:guest@127.0.0.1:{port_b}",
                "dest-queue": "moved",
                "reconnect-delay": 0.5,
                "src-prefetch-count": 100,
            },
        )
        wait_running(a, name)
        publish(a.broker.url, "move", bodies(300))
        a.broker.stop(signal.SIGKILL)
        publish(b.broker.url, "moved", [])  # b is up meanwhile
        a = start_mgmt_broker("--data-dir", str(data_a))
        publish(a.broker.url, "move", bodies(300, "n"))
        wait_running(a, name)
        b.broker.stop()
        b = start_mgmt_broker("--data-dir", str(data_b), "--port", str(port_b))
        publish(a.broker.url, "move", bodies(300, "o"))
        got = [body for body, _ in drain(b.broker.url, "moved", 900, timeout=60)]
        expected = bodies(300) + bodies(300, "n") + bodies(300, "o")
        # A message confirmed by b whose ack a had not written when it was killed comes
        # again: the only duplicates on-confirm allows. Nothing is lost or reordered.
        first_seen = list(dict.fromkeys(got))
        assert first_seen == expected
        assert len(got) - len(expected) <= 100  # at most one prefetch window again
        assert count(a.broker.url, "move") == 0
    finally:
        a.broker.stop()
        b.broker.stop()


def test_an_amqps_destination_with_rabbitmqs_tls_keys_and_external(
    mgmt: MgmtBroker, name: str, tmp_path: Path
) -> None:
    """``amqps://`` with RabbitMQ's query keys: the CA and client certificate files,
    verify_peer, the server name, and SASL EXTERNAL with the certificate's user."""
    ca = trustme.CA()
    env = {**MUTUAL, "LEVERET_SSL_CERT_LOGIN_FROM": "common_name"}
    tls, port, data = _start_tls(tmp_path, ca, env)
    try:
        ok(data, "add_user", "shovel-cert")  # no password: certificate login only
        ok(data, "set_permissions", "shovel-cert", ".*", ".*", ".*")
        client = ca.issue_cert("client", common_name="shovel-cert")
        cert, key, cafile = tmp_path / "c.pem", tmp_path / "c.key", tmp_path / "ca.pem"
        client.cert_chain_pems[0].write_to_path(str(cert))
        client.private_key_pem.write_to_path(str(key))
        src, dest = f"{name}.src", f"{name}.tls"
        publish(mgmt.broker.url, src, bodies(20))
        uri = (
            f"amqps://127.0.0.1:{port}/%2F?cacertfile={cafile}&certfile={cert}&keyfile={key}"
            "&verify=verify_peer&server_name_indication=127.0.0.1&auth_mechanism=external"
            "&heartbeat=5"
        )
        set_shovel(
            mgmt,
            name,
            {"src-uri": "amqp://", "src-queue": src, "dest-uri": uri, "dest-queue": dest},
        )
        row = wait_running(mgmt, name)
        assert row["dest_uri"] == f"amqps://127.0.0.1:{port}/%2F"  # no query, as RabbitMQ
        tls_url = f"amqp://guest:guest@{tls.host}:{tls.port}/%2F"
        assert [body for body, _ in drain(tls_url, dest, 20)] == bodies(20)
        assert "opened: user 'shovel-cert'" in tls.log_text()
    finally:
        requests.delete(mgmt.api(f"parameters/shovel/%2F/{q(name)}"), auth=AUTH, timeout=10)
        tls.stop()


def test_definitions_carry_shovels(mgmt: MgmtBroker, name: str) -> None:
    value: dict[str, Any] = {
        "src-uri": "amqp://",
        "src-queue": f"{name}.a",
        "dest-uri": "amqp://",
        "dest-queue": f"{name}.b",
    }
    doc: dict[str, Any] = {
        "parameters": [{"vhost": "/", "component": "shovel", "name": name, "value": value}]
    }
    r = requests.post(mgmt.api("definitions"), auth=AUTH, json=doc, timeout=30)
    assert r.status_code in (200, 204), r.text
    wait_running(mgmt, name)
    exported = get(mgmt, "definitions")
    assert {"vhost": "/", "component": "shovel", "name": name, "value": value} in exported[
        "parameters"
    ]
    requests.delete(mgmt.api(f"parameters/shovel/%2F/{q(name)}"), auth=AUTH, timeout=10)
