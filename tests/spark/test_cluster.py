"""The connector on a Spark standalone cluster (a master and two workers started from the
PySpark distribution, ``examples/spark_cluster.py``), jobs submitted with ``spark-submit``
and the packed environment: the example pipeline (exactly once across a killed query) and
the Spark tests of the stream source and sink, on both protocols.

Marked ``spark_cluster``; the packed environment is kept in ``build/spark-env`` between runs
(the first run builds it: a few minutes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from examples.spark_cluster import ROOT, StandaloneCluster, ready_cluster

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = [pytest.mark.spark, pytest.mark.spark_cluster]

# The Spark tests run on the cluster: batch reads, the kill-and-restart replay, the sink's
# de-duplication, on both protocols.
SELECTION = "split_by_min_partitions or failure_and_restart or replays or same_rows"


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[StandaloneCluster, Path, Path]]:
    work = tmp_path_factory.mktemp("spark-cluster")
    with ready_cluster(work, ROOT / "build" / "spark-env") as ready:
        yield ready


def _tail(text: str) -> str:
    return text[-4000:]


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


@pytest.mark.timeout(1200)
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
        timeout=1100,
    )
    assert result.returncode == 0, _tail(result.stdout + result.stderr)
    assert " passed" in result.stdout
    assert " failed" not in result.stdout
