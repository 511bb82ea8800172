"""The connector on a Spark standalone cluster (a master and two workers started from the
PySpark distribution, ``examples/spark_cluster.py``), jobs submitted with ``spark-submit``
and the packed environment: the example pipeline (exactly once across a killed query) and
the Spark tests of the stream source and sink, on both protocols.

Marked ``spark_cluster``; the packed environment is kept in ``build/spark-env`` between runs
(the first run builds it: a few minutes). The default test run takes the bounded part (2 minutes
with a load of 5 on the 2-core machine): the cluster, and on it the stream-protocol batch read,
the kill-and-restart replay and the sink's de-duplication. ``LEVERET_SPARK_CLUSTER=full``
adds the example pipeline and the same tests over 0-9-1 (about 9 minutes)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from examples.spark_cluster import ROOT, StandaloneCluster, ready_cluster

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = [pytest.mark.spark, pytest.mark.spark_cluster]

FULL = os.environ.get("LEVERET_SPARK_CLUSTER") == "full"

# The Spark tests run on the cluster: batch reads, the kill-and-restart replay, the sink's
# de-duplication; on both protocols in the full run, on the stream protocol (the default
# path) otherwise.
SELECTION = (
    "split_by_min_partitions or failure_and_restart or replays or same_rows"
    if FULL
    else "(split_by_min_partitions or failure_and_restart) and not amqp or write_replays"
)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[StandaloneCluster, Path, Path]]:
    work = tmp_path_factory.mktemp("spark-cluster")
    with ready_cluster(work, ROOT / "build" / "spark-env") as ready:
        yield ready


def _tail(text: str) -> str:
    return text[-4000:]


@pytest.mark.skipif(not FULL, reason="LEVERET_SPARK_CLUSTER=full runs it (~5 minutes)")
@pytest.mark.timeout(900)
def test_the_pipeline_is_exactly_once_on_the_cluster(
    cluster: tuple[StandaloneCluster, Path, Path],
) -> None:
    spark, environment, wheel = cluster
    result = spark.submit(
        ROOT / "examples" / "spark_pipeline.py",
        "--events",
        "12000",
        "--rate",
        "4000",
        environment=environment,
        wheel=wheel,
        timeout=800,
    )
    assert result.returncode == 0, _tail(result.stdout + result.stderr)
    assert "query died as planned" in result.stdout
    assert "exactly once: OK" in result.stdout


@pytest.mark.timeout(1200 if FULL else 480)
def test_the_spark_tests_pass_on_the_cluster(
    cluster: tuple[StandaloneCluster, Path, Path],
) -> None:
    spark, environment, wheel = cluster
    result = spark.submit(
        ROOT / "tests" / "spark" / "cluster_driver.py",
        "-q",
        "-k",
        SELECTION,
        environment=environment,
        wheel=wheel,
        timeout=1100 if FULL else 420,
    )
    assert result.returncode == 0, _tail(result.stdout + result.stderr)
    assert " passed" in result.stdout
    assert " failed" not in result.stdout
