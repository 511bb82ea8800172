"""The harness's verdicts, documented-difference table and gate (conformance/compare.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from conformance import compare
from conformance.__main__ import COMPATIBILITY

if TYPE_CHECKING:
    from pathlib import Path

import pytest

# Left out of the compiled pass (scripts/test): the conformance harness's own code.
pytestmark = pytest.mark.pure_only


def _results(**outcomes: str) -> dict[str, dict[str, object]]:
    return {nodeid: {"outcome": outcome} for nodeid, outcome in outcomes.items()}


def test_verdicts() -> None:
    assert compare.verdict("passed", "passed") == "both"
    assert compare.verdict("passed", "failed") == "leveret-only-fail"
    assert compare.verdict("passed", "missing") == "leveret-only-fail"
    assert compare.verdict("failed", "error") == "both-fail"
    assert compare.verdict("error", "passed") == "rabbitmq-only-fail"
    assert compare.verdict("skipped", "failed") == "skipped"
    assert compare.verdict("xfailed", "passed") == "both"


def test_gate_lets_only_documented_failures_through(tmp_path: Path) -> None:
    doc = tmp_path / "compat.md"
    doc.write_text(
        "# Compat\n\n"
        f"{compare.DELIBERATE_HEADING}\n\n"
        "| suite | test | class | reason |\n"
        "|---|---|---|---|\n"
        "| s | `t.py::test_mgmt_*` | b | needs the management API |\n"
        "| s | `t.py::test_p[x-*-True]` | c | brackets are literal |\n"
        "\n## Next section\n\n"
        "| s | `t.py::test_other` | c | not in the table above |\n"
    )
    rows = compare.read_deliberate(doc)
    assert [(r.suite, r.pattern, r.category) for r in rows] == [
        ("s", "t.py::test_mgmt_*", "b"),
        ("s", "t.py::test_p[x-*-True]", "c"),
    ]
    assert rows[1].matches("s", "t.py::test_p[x-a-b-True]")
    assert not rows[1].matches("s", "t.py::test_px-a-True")
    assert not rows[1].matches("other", "t.py::test_p[x-a-True]")
    comparison = compare.SuiteComparison(
        "s",
        _results(a="passed", b="passed", c="passed", d="failed"),
        _results(a="passed", b="failed", c="error", d="failed"),
    )
    comparison.rabbitmq["t.py::test_mgmt_users"] = {"outcome": "passed"}
    comparison.leveret["t.py::test_mgmt_users"] = {"outcome": "failed"}
    assert compare.undocumented([comparison], rows) == ["s::b", "s::c"]
    assert comparison.counts() == {"both": 1, "leveret-only-fail": 3, "both-fail": 1}
    assert comparison.passed("rabbitmq") == 4
    assert comparison.passed("leveret") == 1


def test_project_table_parses() -> None:
    rows = compare.read_deliberate(COMPATIBILITY)
    assert rows, "docs/compatibility.md lists no deliberate client-suite differences"
    assert {r.category for r in rows} <= {"b", "c", "d"}
