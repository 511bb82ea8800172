"""The Prometheus endpoint of a broker process, parsed by prometheus_client's own parser:
RabbitMQ's metric names, types and labels, aggregated and per object, following traffic."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pika
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.mgmt_support import MgmtBroker, start_mgmt_broker

if TYPE_CHECKING:
    from collections.abc import Iterator

    from prometheus_client.metrics_core import Metric

# Left out of the compiled pass (scripts/test): the Prometheus endpoint is not compiled.
pytestmark = [pytest.mark.leveret_only, pytest.mark.pure_only]

# What RabbitMQ's Grafana dashboard "RabbitMQ-Overview" reads from /metrics.
DASHBOARD_METRICS = {
    "rabbitmq_identity_info": "gauge",
    "rabbitmq_build_info": "gauge",
    "rabbitmq_connections": "gauge",
    "rabbitmq_channels": "gauge",
    "rabbitmq_consumers": "gauge",
    "rabbitmq_queues": "gauge",
    "rabbitmq_queue_messages_ready": "gauge",
    "rabbitmq_queue_messages_unacked": "gauge",
    "rabbitmq_process_resident_memory_bytes": "gauge",
    "rabbitmq_resident_memory_limit_bytes": "gauge",
    "rabbitmq_channel_messages_published": "counter",
    "rabbitmq_channel_messages_confirmed": "counter",
    "rabbitmq_channel_messages_unroutable_returned": "counter",
    "rabbitmq_channel_messages_unroutable_dropped": "counter",
    "rabbitmq_channel_messages_delivered": "counter",
    "rabbitmq_channel_messages_delivered_ack": "counter",
    "rabbitmq_channel_messages_redelivered": "counter",
    "rabbitmq_channel_messages_acked": "counter",
    "rabbitmq_channel_get": "counter",
    "rabbitmq_channel_get_ack": "counter",
    "rabbitmq_queue_messages_published": "counter",
    "rabbitmq_connection_incoming_bytes": "counter",
    "rabbitmq_connection_outgoing_bytes": "counter",
}


@pytest.fixture(scope="module")
def mgmt() -> Iterator[MgmtBroker]:
    m = start_mgmt_broker()
    try:
        yield m
    finally:
        m.broker.stop()


def _families(m: MgmtBroker, path: str = "/metrics") -> dict[str, Metric]:
    r = requests.get(m.prometheus + path, timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def _value(family: Metric, suffix: str = "", **labels: str) -> float:
    for sample in family.samples:
        if sample.name == family.name + suffix and all(
            sample.labels.get(k) == v for k, v in labels.items()
        ):
            return float(sample.value)
    raise AssertionError(f"no sample {family.name}{suffix} {labels}")


def test_metric_names_types_and_identity(mgmt: MgmtBroker) -> None:
    families = _families(mgmt)
    for name, kind in DASHBOARD_METRICS.items():
        assert name in families, name
        assert families[name].type == kind, name
    identity = families["rabbitmq_identity_info"].samples[0].labels
    assert set(identity) >= {"rabbitmq_node", "rabbitmq_cluster"}


def test_metrics_follow_traffic(mgmt: MgmtBroker) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", mgmt.broker.port))
    try:
        ch = conn.channel()
        ch.queue_declare("prom-q")
        ch.confirm_delivery()
        for _ in range(12):
            ch.basic_publish("", "prom-q", b"m")
        method, _props, _body = ch.basic_get("prom-q")
        assert method is not None
        ch.basic_ack(method.delivery_tag)
        time.sleep(0.5)  # the counters are sampled every 200 ms here
        families = _families(mgmt)
        assert _value(families["rabbitmq_connections"]) >= 1
        assert _value(families["rabbitmq_channel_messages_published"], "_total") >= 12
        assert _value(families["rabbitmq_channel_messages_confirmed"], "_total") >= 12
        assert _value(families["rabbitmq_channel_get_ack"], "_total") >= 1
        assert _value(families["rabbitmq_channel_messages_acked"], "_total") >= 1
        assert _value(families["rabbitmq_queue_messages_ready"]) >= 11
        per_object = _families(mgmt, "/metrics/per-object")
        ready = per_object["rabbitmq_queue_messages_ready"]
        assert _value(ready, vhost="/", queue="prom-q") == 11
        published = per_object["rabbitmq_queue_messages_published"]
        assert _value(published, "_total", vhost="/", queue="prom-q") == 12
        channels = per_object["rabbitmq_channel_messages_published"]
        assert max(s.value for s in channels.samples if s.name.endswith("_total")) == 12
    finally:
        conn.close()
