"""pytest plugin loaded into every client suite: one outcome per test, written as JSON.

Loaded by the harness (``-p conformance_report``) in the suites' own venv; it imports only
the standard library and pytest. ``CONFORMANCE_REPORT`` names the output file; each finished
test is also appended to ``CONFORMANCE_REPORT.partial`` as it ends.

A test's outcome folds its three phases: ``failed`` if any phase failed (a teardown error
after a passing call counts: the suite's author meant it to pass), ``skipped`` if setup or
the test's body skipped, ``xfailed``/``xpassed`` as pytest says, otherwise ``passed``. Of a
test that the suite's own flaky marks rerun, only the last attempt counts (``reruns`` says
how many ran).
A file that cannot be collected is one entry with outcome ``error``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest  # noqa: TC002 - the hooks' annotations are read by pluggy at run time

_RESULTS: dict[str, dict[str, Any]] = {}
_MESSAGE_LIMIT = 600


def _message(report: pytest.CollectReport | pytest.TestReport) -> str:
    text = report.longreprtext or ""
    lines = [line for line in text.splitlines() if line.strip()]
    # The "E   " lines say what went wrong; fall back to the last lines.
    errors = [line[4:].strip() for line in lines if line.startswith("E   ")]
    picked = errors[:3] if errors else lines[-2:]
    return " | ".join(picked)[:_MESSAGE_LIMIT]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _RESULTS.setdefault(report.nodeid, {"outcome": "passed", "duration": 0.0})
    entry["duration"] = round(entry["duration"] + report.duration, 3)
    outcome: str = report.outcome  # "rerun" too, from pytest-rerunfailures
    if outcome == "rerun":
        # pytest-rerunfailures (the suites' own flaky marks): only the last attempt counts.
        entry["reruns"] = entry.get("reruns", 0) + 1
        entry["outcome"] = "passed"
        entry.pop("phase", None)
        entry.pop("message", None)
        return
    if hasattr(report, "wasxfail"):
        entry["outcome"] = "xfailed" if report.skipped else "xpassed"
        return
    if report.failed:
        if entry["outcome"] != "failed":
            entry["outcome"] = "failed"
            entry["phase"] = report.when
            entry["message"] = _message(report)
    elif report.skipped and entry["outcome"] != "failed":
        # Skipped by a mark or fixture (setup) or by pytest.skip() in the test's body (call).
        entry["outcome"] = "skipped"
        entry["message"] = _message(report)[:200]


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    # One line per finished test, so a run stopped by the harness's time limit still says
    # what it got through (the whole file is written at the end of the session).
    target = os.environ.get("CONFORMANCE_REPORT")
    entry = _RESULTS.get(nodeid)
    if target and entry is not None:
        with Path(target + ".partial").open("a") as out:
            out.write(json.dumps({"nodeid": nodeid, **entry}) + "\n")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _RESULTS[report.nodeid or "<collection>"] = {
            "outcome": "error",
            "phase": "collect",
            "message": _message(report),
            "duration": 0.0,
        }


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get("CONFORMANCE_REPORT")
    if target:
        Path(target).write_text(json.dumps(_RESULTS, indent=1, sort_keys=True))
