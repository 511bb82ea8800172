"""Comparing one suite's outcomes on RabbitMQ and on Leveret, the baseline, and the gate.

Owned by the conformance harness. Every test gets one verdict:

- ``both`` — passes on both brokers;
- ``leveret-only-fail`` — passes on RabbitMQ, fails on Leveret (a difference);
- ``both-fail`` — fails on both (the environment: TLS, Docker, Redis, a clock...);
- ``rabbitmq-only-fail`` — passes only on Leveret;
- ``skipped`` — skipped on either broker (not counted as a pass anywhere).

The gate: every ``leveret-only-fail`` must match a row of the table under
``DELIBERATE_HEADING`` in ``docs/compatibility.md`` (suite, node id with ``*`` wildcards,
class, reason); any other one makes ``python -m conformance run`` exit 1.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

DELIBERATE_HEADING = "### Client-suite tests that fail on Leveret on purpose"
PASS = frozenset({"passed", "xfailed"})
FAIL = frozenset({"failed", "error", "xpassed", "missing"})


@dataclass(frozen=True)
class Deliberate:
    """One row of the documented list: a pattern of node ids and why they may fail."""

    suite: str
    pattern: str
    category: str
    reason: str

    def matches(self, suite: str, nodeid: str) -> bool:
        # Only ``*`` is special: node ids are full of brackets, which fnmatch would read.
        regex = ".*".join(re.escape(part) for part in self.pattern.split("*"))
        return suite == self.suite and re.fullmatch(regex, nodeid) is not None


def read_deliberate(doc: Path) -> list[Deliberate]:
    """The rows of the table that follows ``DELIBERATE_HEADING`` in ``doc``."""
    rows: list[Deliberate] = []
    inside = False
    for line in doc.read_text().splitlines():
        if line.startswith("#"):
            inside = line.strip() == DELIBERATE_HEADING
            continue
        if not inside or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or cells[0] in {"suite", ""} or set(cells[0]) <= {"-", ":"}:
            continue
        rows.append(Deliberate(cells[0], cells[1].strip("`"), cells[2], " | ".join(cells[3:])))
    return rows


def verdict(rabbit: str, leveret: str) -> str:
    if rabbit == "skipped" or leveret == "skipped":
        return "skipped"
    rp, lp = rabbit in PASS, leveret in PASS
    if rp and lp:
        return "both"
    if rp:
        return "leveret-only-fail"
    if lp:
        return "rabbitmq-only-fail"
    return "both-fail"


@dataclass
class SuiteComparison:
    """One suite on both brokers."""

    suite: str
    rabbitmq: dict[str, dict[str, Any]]
    leveret: dict[str, dict[str, Any]]
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def nodeids(self) -> list[str]:
        return sorted(set(self.rabbitmq) | set(self.leveret))

    def outcome(self, broker: str, nodeid: str) -> str:
        results = self.rabbitmq if broker == "rabbitmq" else self.leveret
        entry = results.get(nodeid)
        return str(entry["outcome"]) if entry else "missing"

    def verdicts(self) -> dict[str, str]:
        return {
            n: verdict(self.outcome("rabbitmq", n), self.outcome("leveret", n))
            for n in self.nodeids
        }

    def passed(self, broker: str) -> int:
        return sum(self.outcome(broker, n) in PASS for n in self.nodeids)

    def differences(self) -> list[str]:
        return [n for n, v in self.verdicts().items() if v == "leveret-only-fail"]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in self.verdicts().values():
            out[v] = out.get(v, 0) + 1
        return out


def undocumented(comparisons: list[SuiteComparison], rows: list[Deliberate]) -> list[str]:
    """``suite::nodeid`` of every leveret-only failure that no documented row covers."""
    return [
        f"{c.suite}::{n}"
        for c in comparisons
        for n in c.differences()
        if not any(r.matches(c.suite, n) for r in rows)
    ]


def baseline(comparisons: list[SuiteComparison]) -> dict[str, Any]:
    """The baseline file's content: counts and every test's pair of outcomes, per suite."""
    out: dict[str, Any] = {}
    for c in comparisons:
        out[c.suite] = {
            "tests": len(c.nodeids),
            "pass_rabbitmq": c.passed("rabbitmq"),
            "pass_leveret": c.passed("leveret"),
            "verdicts": c.counts(),
            "seconds": {k: round(v, 1) for k, v in sorted(c.seconds.items())},
            "tests_by_id": {
                n: {
                    "rabbitmq": c.outcome("rabbitmq", n),
                    "leveret": c.outcome("leveret", n),
                    **(
                        {"leveret_message": c.leveret[n].get("message", "")}
                        if c.outcome("rabbitmq", n) in PASS and c.outcome("leveret", n) in FAIL
                        else {}
                    ),
                }
                for n in c.nodeids
            },
        }
    return out


def write_baseline(path: Path, comparisons: list[SuiteComparison]) -> None:
    """Merge these suites into the baseline file (other suites' entries are kept)."""
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    data.update(baseline(comparisons))
    path.write_text(json.dumps(dict(sorted(data.items())), indent=1, sort_keys=False) + "\n")


def table(comparisons: list[SuiteComparison]) -> str:
    """The Markdown summary table."""
    lines = [
        "| suite | tests | pass on RabbitMQ | pass on Leveret | fail only on Leveret "
        "| fail on both | pass only on Leveret | skipped | minutes (RabbitMQ / Leveret) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in comparisons:
        k = c.counts()
        minutes = " / ".join(f"{c.seconds.get(b, 0.0) / 60:.1f}" for b in ("rabbitmq", "leveret"))
        lines.append(
            f"| {c.suite} | {len(c.nodeids)} | {c.passed('rabbitmq')} | {c.passed('leveret')} "
            f"| {k.get('leveret-only-fail', 0)} | {k.get('both-fail', 0)} "
            f"| {k.get('rabbitmq-only-fail', 0)} | {k.get('skipped', 0)} | {minutes} |"
        )
    return "\n".join(lines)
