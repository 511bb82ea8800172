"""Run the Qpid project's AMQP 0-8 and 0-9 conformance tests against a broker.

The tests are ``qpid_tests.broker_0_8`` and ``qpid_tests.broker_0_9`` from qpid-python's
source distribution; they run under Python 2.7 with Qpid's own client, which sends the
``AMQP 1 1 0 9`` header and speaks Qpid's 0-9 XML (both suites use it).

    python -m tools.qpid_conformance                      # a Leveret of this tree, then report
    python -m tools.qpid_conformance --broker 127.0.0.1:5672  # any broker (RabbitMQ)
    python -m tools.qpid_conformance --compare            # both, and the baseline check
    python -m tools.qpid_conformance --record             # rewrite the baseline file

What it needs: a Python 2.7 (``--python2``, else ``$QPID_PYTHON2``, else pyenv's 2.7, else
``python2.7`` on the path) with pip, which downloads the pinned source distributions
(:data:`PACKAGES`) once into ``build/qpid/`` (``pip download --no-binary :all:``) — qpid-qmf
and qpid-tools only because ``qpid_tests/__init__.py`` imports every suite.

The baseline, ``tests/data/qpid-conformance/baseline.json``, records the outcome of every test
on RabbitMQ 3.10.8 and on Leveret; ``--compare`` exits 1 if a test that passes on RabbitMQ
fails on Leveret, or if a test that passed on Leveret in the baseline fails now.
``tests/integration/test_qpid_conformance.py`` runs a bounded subset with the same code.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "build" / "qpid"
BASELINE = ROOT / "tests" / "data" / "qpid-conformance" / "baseline.json"
PACKAGES = ("qpid-python==1.36.0-1", "qpid-qmf==0.28", "qpid-tools==1.36.0-1")
SUITES = ("qpid_tests.broker_0_8.*", "qpid_tests.broker_0_9.*")
RABBITMQ = "127.0.0.1:5672"

_RESULT = re.compile(r"^(\S.*?|\s+\S+?)\s\.+\s(pass|fail|skip)\s*$")


def find_python2(explicit: str | None = None) -> str | None:
    """A Python 2.7 interpreter, or None."""
    candidates = [explicit, os.environ.get("QPID_PYTHON2")]
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted(str(p) for p in pyenv_root.glob("versions/2.7*/bin/python"))
    candidates.append(shutil.which("python2.7"))
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    return None


def prepare(python2: str, cache: Path = CACHE) -> dict[str, Path]:
    """Download and unpack the pinned source distributions; their directories by name."""
    cache.mkdir(parents=True, exist_ok=True)
    dirs: dict[str, Path] = {}
    for spec in PACKAGES:
        name, version = spec.split("==")
        target = cache / f"{name}-{version}"
        if not target.is_dir():
            archive = cache / f"{name}-{version}.tar.gz"
            if not archive.exists():
                subprocess.run(
                    [python2, "-m", "pip", "download", "-q", "--no-deps", "--no-binary",
                     ":all:", "-d", str(cache), spec],
                    check=True,
                )  # fmt: skip
            with tarfile.open(archive) as tar:
                tar.extractall(cache, filter="data")
        dirs[name] = target
    return dirs


def run(
    python2: str,
    broker: str,
    patterns: tuple[str, ...] = SUITES,
    *,
    cache: Path = CACHE,
    timeout: float = 900.0,
    defines: tuple[str, ...] = (),
) -> dict[str, str]:
    """Run the Qpid tests matching ``patterns`` against ``broker`` (host:port, guest/guest);
    the outcome of each test by its full name (pass, fail, skip)."""
    dirs = prepare(python2, cache)
    qpid = dirs["qpid-python"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        (str(dirs["qpid-qmf"] / "src" / "py"), str(dirs["qpid-tools"] / "lib"))
    )
    cmd = [python2, "qpid-python-test", "-m", "qpid_tests", "-b", f"guest/guest@{broker}"]
    for define in defines:
        cmd += ["-D", define]
    out = subprocess.run(
        [*cmd, *patterns],
        cwd=qpid,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    ).stdout
    return parse(out)


def parse(output: str) -> dict[str, str]:
    """Per-test outcomes from qpid-python-test's output (long names wrap with `` \\``)."""
    results: dict[str, str] = {}
    pending = ""
    for line in output.splitlines():
        if line.endswith(" \\"):
            pending = line[:-2].strip()
            continue
        match = _RESULT.match(line)
        if match is None:
            pending = ""
            continue
        name = (pending + " " + match.group(1).strip()).strip() if pending else match.group(1)
        results[name.replace(". ", ".")] = match.group(2)
        pending = ""
    return results


def group_of(test: str) -> str:
    """``qpid_tests.broker_0_8.basic.BasicTests.test_ack`` -> ``broker_0_8.basic``."""
    parts = test.split(".")
    return ".".join(parts[1:3])


def table(results: dict[str, dict[str, str]]) -> str:
    """A Markdown table per group: tests, passed on each broker, and the differences."""
    brokers = list(results)
    groups: dict[str, list[str]] = {}
    for name in sorted({t for r in results.values() for t in r}):
        groups.setdefault(group_of(name), []).append(name)
    lines = [
        "| group | tests | " + " | ".join(f"pass on {b}" for b in brokers) + " |",
        "|---|---|" + "---|" * len(brokers),
    ]
    for group, names in groups.items():
        counts = [sum(results[b].get(n) == "pass" for n in names) for b in brokers]
        lines.append(f"| {group} | {len(names)} | " + " | ".join(map(str, counts)) + " |")
    totals = [sum(v == "pass" for v in results[b].values()) for b in brokers]
    count = len({t for r in results.values() for t in r})
    lines.append(f"| **all** | {count} | " + " | ".join(map(str, totals)) + " |")
    return "\n".join(lines)


def regressions(baseline: dict[str, dict[str, str]], leveret: dict[str, str]) -> list[str]:
    """Tests that pass on RabbitMQ (or passed on Leveret in the baseline) and fail now."""
    out = []
    for name, outcome in sorted(leveret.items()):
        if outcome == "pass":
            continue
        if baseline.get("rabbitmq", {}).get(name) == "pass":
            out.append(f"{name}: passes on RabbitMQ, {outcome} on Leveret")
        elif baseline.get("leveret", {}).get(name) == "pass":
            out.append(f"{name}: passed on Leveret in the baseline, {outcome} now")
    return out


def start_leveret(data_dir: str) -> tuple[subprocess.Popen[str], str]:
    """``python -m leveret serve`` on a free port of 127.0.0.1; the process and host:port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0",
         "--data-dir", data_dir],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    for line in proc.stdout:
        match = re.search(r"listening on amqp://([\d.]+):(\d+)", line)
        if match:
            return proc, f"{match.group(1)}:{match.group(2)}"
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("the broker did not start")


def _run_leveret(python2: str, patterns: tuple[str, ...]) -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="leveret-qpid-") as data_dir:
        proc, address = start_leveret(data_dir)
        try:
            return run(python2, address, patterns)
        finally:
            proc.terminate()
            proc.wait(timeout=15)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python2", help="a Python 2.7 interpreter")
    parser.add_argument("--broker", help="host:port of a running broker (default: start one)")
    parser.add_argument("--compare", action="store_true", help="also RabbitMQ; check baseline")
    parser.add_argument("--record", action="store_true", help="rewrite the baseline file")
    parser.add_argument("patterns", nargs="*", default=list(SUITES))
    args = parser.parse_args(argv)
    python2 = find_python2(args.python2)
    if python2 is None:
        print("no Python 2.7 found (--python2, $QPID_PYTHON2, pyenv)", file=sys.stderr)
        return 2
    patterns = tuple(args.patterns)
    results: dict[str, dict[str, str]] = {}
    if args.broker:
        results[args.broker] = run(python2, args.broker, patterns)
    else:
        results["leveret"] = _run_leveret(python2, patterns)
    if args.compare or args.record:
        results["rabbitmq"] = run(python2, RABBITMQ, patterns)
    print(table(results))
    if args.record:
        BASELINE.parent.mkdir(parents=True, exist_ok=True)
        BASELINE.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        print(f"wrote {BASELINE.relative_to(ROOT)}")
    if args.compare and "leveret" in results:
        baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
        baseline["rabbitmq"] = results["rabbitmq"]
        problems = regressions(baseline, results["leveret"])
        for problem in problems:
            print(problem)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
