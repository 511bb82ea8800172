"""Command line of the conformance harness.

``python -m conformance install``           the suites' venv and sources under ``.conformance/``
``python -m conformance run [SUITE ...]``   each suite on RabbitMQ and on Leveret, compared
``python -m conformance report [SUITE ...]`` the comparison again from the saved results
``python -m conformance record``            RabbitMQ's outcomes of the side-by-side scenarios

``run`` and ``report`` print the table, write ``conformance/baseline.json`` and exit 1 when a
test passes on RabbitMQ and fails on Leveret without a row in the deliberate-differences
table of ``docs/compatibility.md``. Run it with the project's interpreter
(``.venv/bin/python -m conformance ...``): Leveret is started from this checkout.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from conformance import brokers, compare, harness
from conformance.suites import PIKA_NOTE

if TYPE_CHECKING:
    from conformance.suites import Suite

BASELINE = harness.PACKAGE_DIR / "baseline.json"
COMPATIBILITY = harness.ROOT / "docs" / "compatibility.md"


def _meta_file(work: harness.Workdir, suite: str, target: str) -> Path:
    return work.results / f"{suite}.{target}.meta.json"


def _run_one(
    work: harness.Workdir, suite: Suite, name: str, rabbit: brokers.Target
) -> harness.RunResult | None:
    """One suite on one broker (Leveret started for it and stopped after); None when the
    suite cannot reach this broker."""
    log = None
    if name == "rabbitmq":
        if suite.localhost_5672 and rabbit.port != 5672:
            print(f"{suite.name}: not run on RabbitMQ: its tests reach localhost:5672 only")
            return None
        target = rabbit
    else:
        work.logs.mkdir(parents=True, exist_ok=True)
        log = (work.logs / f"{suite.name}.leveret-broker.log").open("w")
        target = brokers.start_leveret(
            log_file=log, netns=suite.localhost_5672, management=not suite.localhost_5672
        )
    print(f"{suite.name}: running on {name} ({target.host}:{target.port})", flush=True)
    try:
        result = harness.run_suite(work, suite, target)
    finally:
        target.stop()
        if log is not None:
            log.close()
    _meta_file(work, suite.name, name).write_text(
        json.dumps(
            {
                "seconds": result.seconds,
                "exit_code": result.exit_code,
                "timed_out": result.timed_out,
            }
        )
    )
    passed = sum(r["outcome"] == "passed" for r in result.results.values())
    print(
        f"{suite.name}: {name}: {len(result.results)} tests, {passed} passed, "
        f"{result.seconds:.0f} s{' (timed out)' if result.timed_out else ''}",
        flush=True,
    )
    return result


def _run(args: argparse.Namespace, work: harness.Workdir) -> list[compare.SuiteComparison]:
    suites = harness.suites_named(args.suites)
    rabbit = brokers.rabbitmq(args.rabbitmq_url, args.rabbitmq_http)
    runs = [
        (suite, name)
        for suite in suites
        for name in ("rabbitmq", "leveret")
        if not (
            name == "rabbitmq"
            and args.reuse_rabbitmq
            and work.result_file(suite, "rabbitmq").exists()
        )
    ]
    # Longest suites first, so that the short ones fill the gaps at the end.
    runs.sort(key=lambda run: -run[0].suite_timeout)
    if any(name == "rabbitmq" for _, name in runs) and not brokers.reachable(rabbit):
        raise SystemExit(f"RabbitMQ is not reachable at {rabbit.host}:{rabbit.port}")
    # Runs are independent (a Leveret each, unique names on RabbitMQ); the suites mostly wait
    # on the network, so a few at once shorten the wall time without starving the machine.
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for future in [pool.submit(_run_one, work, s, n, rabbit) for s, n in runs]:
            future.result()
    return _load(work, [s.name for s in suites])


def _load(work: harness.Workdir, names: list[str]) -> list[compare.SuiteComparison]:
    out: list[compare.SuiteComparison] = []
    for suite in harness.suites_named(names):
        per: dict[str, dict[str, dict[str, object]]] = {}
        seconds: dict[str, float] = {}
        for target in ("rabbitmq", "leveret"):
            path = work.result_file(suite, target)
            if not path.exists():
                break
            per[target] = json.loads(path.read_text())
            meta = _meta_file(work, suite.name, target)
            if meta.exists():
                seconds[target] = float(json.loads(meta.read_text())["seconds"])
        else:
            out.append(
                compare.SuiteComparison(suite.name, per["rabbitmq"], per["leveret"], seconds)
            )
    return out


def _report(comparisons: list[compare.SuiteComparison], write: bool, details: bool = False) -> int:
    if not comparisons:
        print("no results: run `python -m conformance run` first", file=sys.stderr)
        return 2
    print(compare.table(comparisons))
    if details:
        for c in comparisons:
            for nodeid in c.differences():
                entry = c.leveret.get(nodeid, {})
                phase, message = entry.get("phase", ""), entry.get("message", "")
                print(f"\n{c.suite}::{nodeid}\n    {phase}: {message}")
    print(f"\n{PIKA_NOTE}")
    if write:
        compare.write_baseline(BASELINE, comparisons)
        print(f"\nbaseline written to {BASELINE.relative_to(harness.ROOT)}")
    missing = compare.undocumented(comparisons, compare.read_deliberate(COMPATIBILITY))
    if missing:
        print(
            f"\n{len(missing)} test(s) pass on RabbitMQ and fail on Leveret without a "
            f"documented reason ({compare.DELIBERATE_HEADING!r} in docs/compatibility.md):"
        )
        for item in missing:
            print(f"  {item}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--workdir", type=Path, default=harness.DEFAULT_WORKDIR, help="default: .conformance/"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_install = sub.add_parser("install", help="create the venv and fetch the suites")
    p_install.add_argument("suites", nargs="*")
    p_run = sub.add_parser("run", help="run suites on both brokers and compare")
    p_run.add_argument("suites", nargs="*")
    p_run.add_argument("--rabbitmq-url", default=brokers.RABBITMQ_URL)
    p_run.add_argument("--rabbitmq-http", default=brokers.RABBITMQ_HTTP)
    p_run.add_argument(
        "--reuse-rabbitmq",
        action="store_true",
        help="compare with RabbitMQ's saved results where a suite has them (run it otherwise)",
    )
    p_run.add_argument("--no-baseline", action="store_true", help="do not write baseline.json")
    p_run.add_argument(
        "--jobs", type=int, default=1, help="suite runs at once (default 1; each is niced)"
    )
    p_report = sub.add_parser("report", help="compare the saved results again")
    p_report.add_argument("suites", nargs="*")
    p_report.add_argument("--no-baseline", action="store_true")
    for p in (p_run, p_report):
        p.add_argument(
            "--details", action="store_true", help="print Leveret's failure of every difference"
        )
    p_record = sub.add_parser("record", help="record RabbitMQ's outcome of every scenario")
    p_record.add_argument("--rabbitmq-url", default=brokers.RABBITMQ_URL)
    p_record.add_argument("names", nargs="*", help="only these scenarios")
    args = parser.parse_args(argv)
    work = harness.Workdir(args.workdir)

    if args.command == "install":
        harness.install(work, harness.suites_named(args.suites))
        return 0
    if args.command == "run":
        harness.install(work, harness.suites_named(args.suites))
        return _report(_run(args, work), not args.no_baseline, args.details)
    if args.command == "report":
        return _report(_load(work, args.suites), not args.no_baseline, args.details)
    from conformance import record

    return record.main(args.rabbitmq_url, args.names)


if __name__ == "__main__":
    sys.exit(main())
