"""Fixtures for the Spark tests: one local SparkSession per test session, and a broker.

The broker is Leveret started on port 0 (``tests/integration/conftest.py``), or the broker at
``LEVERET_SPARK_TEST_AMQP_URL`` / ``LEVERET_TEST_AMQP_URL`` (RabbitMQ 3.10+). Tests over stream
queues ask for ``stream_url``, which skips when the broker has no stream queues.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from typing import TYPE_CHECKING

import pytest

from tests.integration.conftest import start_broker

# Without the spark extra (pip install -e '.[dev]' only) these tests are not collected.
HAVE_SPARK = all(importlib.util.find_spec(name) for name in ("pyspark", "pyarrow"))
if not HAVE_SPARK:
    collect_ignore_glob = ["test_*.py"]

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession

URL_ENVS = ("LEVERET_SPARK_TEST_AMQP_URL", "LEVERET_TEST_AMQP_URL")


@pytest.fixture(scope="session")
def spark_session() -> Iterator[SparkSession]:
    """local[2], UI off, 2 shuffle partitions; executors run this interpreter."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("leveret-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "30000")
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
def amqp_url() -> Iterator[str]:
    for env in URL_ENVS:
        external = os.environ.get(env)
        if external:
            yield external
            return
    broker = start_broker()
    try:
        yield broker.url
    finally:
        broker.stop()


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
