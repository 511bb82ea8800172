"""The per-test outcomes the harness reads from a suite run (plugins/conformance_report.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

from conformance.harness import PLUGINS

if TYPE_CHECKING:
    from pathlib import Path

import pytest

# Left out of the compiled pass (scripts/test): the conformance harness's own code.
pytestmark = pytest.mark.pure_only

SUITE = """
import pytest

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown went wrong")

def test_pass():
    pass

def test_fail():
    assert 1 == 2, "one is not two"

def test_teardown_error(broken_teardown):
    pass

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass

def test_skips_itself():
    pytest.skip("needs Redis")

@pytest.mark.xfail(reason="known")
def test_xfail():
    raise ValueError
"""


def test_outcomes_per_test(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "broken_test.py").write_text("import no_such_module_here\n")
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(PLUGINS), "CONFORMANCE_REPORT": str(report)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "conformance_report",
            "-p",
            "no:cacheprovider",
            "--continue-on-collection-errors",
            "test_suite.py",
            "broken_test.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        check=False,
        timeout=60,
    )
    results = json.loads(report.read_text())
    outcomes = {nodeid: entry["outcome"] for nodeid, entry in results.items()}
    assert outcomes == {
        "broken_test.py": "error",
        "test_suite.py::test_pass": "passed",
        "test_suite.py::test_fail": "failed",
        "test_suite.py::test_teardown_error": "failed",
        "test_suite.py::test_skipped": "skipped",
        "test_suite.py::test_skips_itself": "skipped",
        "test_suite.py::test_xfail": "xfailed",
    }
    assert results["test_suite.py::test_teardown_error"]["phase"] == "teardown"
    assert "one is not two" in results["test_suite.py::test_fail"]["message"]
    partial = [
        json.loads(line) for line in (tmp_path / "report.json.partial").read_text().splitlines()
    ]
    assert sorted(e["nodeid"] for e in partial) == sorted(
        n for n in outcomes if n.startswith("test_suite")
    )
