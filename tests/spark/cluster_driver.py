"""The Spark tests as a ``spark-submit`` job: ``tests/spark/test_cluster.py`` submits this file
to the standalone cluster, and pytest runs here, in the driver, with the submitted session
(``conftest.spark_session`` takes it). Arguments are pytest's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent.parent))
    # The brokers the tests start run from the installed package, not from the job's zipped
    # wheel that spark-submit put on PYTHONPATH (this process keeps it on sys.path).
    os.environ.pop("PYTHONPATH", None)
    sys.exit(
        pytest.main([str(HERE), "-p", "no:cacheprovider", "-m", "not spark_cluster", *sys.argv[1:]])
    )
