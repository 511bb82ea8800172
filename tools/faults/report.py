"""A run's report: ``result.json`` (everything, for tools) and ``summary.md`` (for people),
and ``history.json`` (every publish and delivery) when asked for."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from tools.faults.history import History


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def summary(report: dict[str, Any]) -> str:
    """The markdown summary of a report."""
    config, verdict, target = report["config"], report["verdict"], report["target"]
    counts = verdict["counts"]
    lines = [
        f"# Fault run: {target.get('broker', config['target'])} {target.get('version', '')}",
        "",
        f"**{'PASS' if report['ok'] else 'FAIL'}**"
        + (f" (error: {report['error']})" if report["error"] else ""),
        "",
        f"- started {report['started']}, {report['seconds']} s; "
        f"{config['nodes']} nodes, {config['queues']} {config['queue_type']} queue(s), "
        f"{config['cycles']} cycles of {', '.join(config['faults'])}"
        + (
            f" (left out: {', '.join(report['skipped_faults'])})"
            if report["skipped_faults"]
            else ""
        ),
        f"- faults held {config['fault_seconds']} s (pauses {config['pause_seconds']} s), "
        f"settle {config['settle_seconds']} s, partitions: {config['partition_mode']}",
        f"- target: {json.dumps(target)}",
        "",
        "| check | value |",
        "|---|---|",
        f"| lost (confirmed, never delivered) | {counts['lost']} |",
        f"| unexpected (delivered, never published) | {counts['unexpected']} |",
        f"| order violations | {len(verdict['order_violations'])} |",
        f"| queues empty at the end | {verdict['empty']} {verdict['depths']} |",
        f"| duplicated (messages / extra deliveries) | {counts['duplicated']} / "
        f"{counts['duplicate_deliveries']} |",
        f"| attempted / confirmed | {counts['attempted']} / {counts['confirmed']} |",
        f"| nacked / returned / indeterminate | {counts['nacked']} / {counts['returned']} / "
        f"{counts['indeterminate']} |",
        f"| recovered (indeterminate, delivered) | {counts['recovered']} |",
        f"| unconfirmed but delivered (nacked, returned) | {counts['unconfirmed_delivered']} |",
        "",
    ]
    readers, tracking = verdict.get("per_reader") or {}, report.get("stream_readers") or {}
    if readers:
        lines += [
            "## The stream's readers (each reads it whole)",
            "",
            "| reader | deliveries | messages | duplicate deliveries | lost | connections "
            "| resumed from a stored offset | from the first | offset stores |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, row in readers.items():
            t = tracking.get(name)
            kind = "stream protocol" if t is not None else "0-9-1"
            more = (
                f"{t['connections']} | {t['resumed_from_stored']} | {t['started_from_first']} "
                f"| {t['stores']} |"
                if t is not None
                else "- | - | - | - |"
            )
            lines.append(
                f"| {name} ({kind}) | {row.get('deliveries', 0)} | {row.get('messages', 0)} | "
                f"{row.get('duplicate_deliveries', 0)} | {row.get('lost', 0)} | {more}"
            )
        odd = {n: t for n, t in tracking.items() if t["forgotten"] or t["went_back"]}
        for name, t in odd.items():
            lines.append(
                f"\n{name}: a stored offset forgotten {t['forgotten']} time(s), answered below "
                f"the last one stored {t['went_back']} time(s) (duplicates, not losses)."
            )
        lines.append("")
    kill = verdict["failover_after_leader_kill"]
    lines += [
        "## Failover (fault on a queue's leader -> first confirm of a message published after it)",
        "",
        "| fault | on leaders | measured | median | worst | never | every publisher: "
        "median | worst |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, row in verdict["failover_by_kind"].items():
        lines.append(
            f"| {kind} | {row['faults']} | {row['measured']} | {_seconds(row['median'])} | "
            f"{_seconds(row['worst'])} | {row['never']} | "
            f"{_seconds(row['every_publisher_median'])} | "
            f"{_seconds(row['every_publisher_worst'])} |"
        )
    if not verdict["failover_by_kind"]:
        lines.append("| (no fault hit a leader) | | | | | | | |")
    lines += [
        "",
        f"Leader killed (kill -9) -> first confirm: median {_seconds(kill['median'])}, "
        f"worst {_seconds(kill['worst'])} over {kill['measured']} of {kill['faults']}.",
        "",
        "## Faults",
        "",
        "| # | fault | node | role | queues it led | start | healed | healthy again | notes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, fault in enumerate(report["faults"], 1):
        lines.append(
            f"| {n} | {fault['kind']} | {fault['node'] or 'etcd'} | {fault['role']} | "
            f"{', '.join(fault['queues']) or '-'} | {fault['start']:.1f} | "
            f"{_seconds(fault['healed'])} | {_seconds(fault['recovered'])} | "
            f"{'; '.join(fault['notes'])} |"
        )
    lines += [
        "",
        "## While each fault lasted (messages to the queues it hit)",
        "",
        "| # | fault | sent | confirmed | nacked, returned | indeterminate | confirm median "
        "| worst |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, w in enumerate(verdict["windows"], 1):
        lines.append(
            f"| {n} | {w['kind']} on {w['node'] or 'etcd'} ({w['role']}) | {w['sent']} | "
            f"{w['confirmed']} | {w['nacked']} | {w['indeterminate']} | "
            f"{_seconds(w['latency_median'])} | {_seconds(w['latency_worst'])} |"
        )
    paths = report.get("paths") or {}
    if "partition" in config["faults"] and paths and not any(paths.values()):
        lines += [
            "",
            "Note: no connection ever crossed the proxies between nodes: the nodes do not "
            "talk to each other (yet), so the partitions between them cut nothing.",
        ]
    if verdict["lost"]:
        lines += ["", f"Lost (first 50): {', '.join(verdict['lost'][:50])}"]
    if verdict["unexpected"]:
        lines += ["", f"Unexpected (first 50): {', '.join(verdict['unexpected'][:50])}"]
    return "\n".join(lines) + "\n"


def write_report(out: Path, report: dict[str, Any], history: History | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "summary.md").write_text(summary(report))
    if history is not None:
        (out / "history.json").write_text(json.dumps(history.to_json()) + "\n")


__all__ = ["summary", "write_report"]
