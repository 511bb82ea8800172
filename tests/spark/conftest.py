"""Fixtures for the Spark tests: one local SparkSession per test session, and a broker.

The broker is Leveret started on port 0 (``tests/integration/conftest.py``), or the broker at
``LEVERET_SPARK_TEST_AMQP_URL`` / ``LEVERET_TEST_AMQP_URL`` (RabbitMQ 3.10+; its stream
protocol port from ``LEVERET_SPARK_TEST_STREAM_PORT``, else 5552 beside AMQP's 5672). Tests
over stream queues ask for ``stream_url``, which skips when the broker has no stream queues;
``read_options`` runs a test once per protocol the connector reads streams with (the stream
protocol and AMQP 0-9-1).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import time
import uuid
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest

from tests.integration.conftest import Broker, start_broker

# Without the spark extra (pip install -e '.[dev]' only) these tests are not collected.
HAVE_SPARK = all(importlib.util.find_spec(name) for name in ("pyspark", "pyarrow"))
if not HAVE_SPARK:
    collect_ignore_glob = ["test_*.py"]

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession

URL_ENVS = ("LEVERET_SPARK_TEST_AMQP_URL", "LEVERET_TEST_AMQP_URL")
STREAM_PORT_ENV = "LEVERET_SPARK_TEST_STREAM_PORT"
_STREAM_LISTENING = re.compile(r"listening on rabbitmq-stream://[^:]+:(\d+)")


def stream_port_of(broker: Broker, timeout: float = 20.0) -> int:
    """The stream-protocol port a broker we started logged."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in list(broker.log):
            match = _STREAM_LISTENING.search(line)
            if match:
                return int(match.group(1))
        time.sleep(0.05)
    raise AssertionError("no stream listener:\n" + broker.log_text())


@pytest.fixture(scope="session")
def spark_session() -> Iterator[SparkSession]:
    """local[2], UI off, 2 shuffle partitions; executors run this interpreter. Under
    ``spark-submit`` (``tests/spark/cluster_driver.py`` on the standalone cluster) the
    submitted master, environment and settings are used instead."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("leveret-spark-tests")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        builder = (
            builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "1g")
        )
    session = (
        builder.config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stopTimeout", "30000")
        # A Python worker that starts slowly on a busy machine is waited for, not failed.
        .config("spark.python.authenticate.socketTimeout", "60s")
        .getOrCreate()
    )
    from leveret.spark import AmqpDataSource

    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(AmqpDataSource)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_broker() -> Iterator[tuple[str, int]]:
    """(amqp URL, stream-protocol port) of the broker the Spark tests use."""
    for env in URL_ENVS:
        external = os.environ.get(env)
        if external:
            port = urlsplit(external).port or 5672
            yield external, int(os.environ.get(STREAM_PORT_ENV, "5552" if port == 5672 else "0"))
            return
    broker = start_broker()
    try:
        yield broker.url, stream_port_of(broker)
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def amqp_url(spark_broker: tuple[str, int]) -> str:
    return spark_broker[0]


@pytest.fixture(scope="session")
def stream_port(spark_broker: tuple[str, int]) -> int:
    """The broker's stream-protocol port (skips when it has none)."""
    if not spark_broker[1]:
        pytest.skip(f"no stream-protocol port known for the broker (set {STREAM_PORT_ENV})")
    return spark_broker[1]


@pytest.fixture(params=["stream", "amqp"])
def read_options(request: pytest.FixtureRequest, spark_broker: tuple[str, int]) -> dict[str, str]:
    """Source options that pin the protocol: once over the stream protocol, once over 0-9-1."""
    if request.param == "stream":
        if not spark_broker[1]:
            pytest.skip(f"no stream-protocol port known for the broker (set {STREAM_PORT_ENV})")
        return {"protocol": "stream", "streamPort": str(spark_broker[1])}
    return {"protocol": "amqp"}


@pytest.fixture(scope="session")
def broker_product(amqp_url: str) -> str:
    from tests.spark import support

    with support.client(amqp_url) as c:
        return c.product


@pytest.fixture(scope="session")
def stream_url(amqp_url: str) -> str:
    """The broker URL, when it has stream queues (declare one, check the offset header)."""
    from leveret.spark._client import AmqpClientError
    from tests.spark import support

    queue = f"spark.probe.{uuid.uuid4().hex[:8]}"
    try:
        support.declare_stream(amqp_url, queue)
    except AmqpClientError as exc:
        pytest.skip(f"the broker has no stream queues: {exc}")
    try:
        support.publish(amqp_url, queue, [b"probe"])
        rows = support.read_stream(amqp_url, queue, idle=0.5)
    finally:
        support.delete(amqp_url, queue)
    if not rows or rows[0][0] != 0:
        pytest.skip("the broker accepted x-queue-type=stream but delivers no x-stream-offset")
    return amqp_url


@pytest.fixture
def name() -> str:
    return f"spark.{uuid.uuid4().hex[:12]}"
